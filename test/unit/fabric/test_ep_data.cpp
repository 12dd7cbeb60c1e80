// Data-transfer semantics of the shared endpoint base through the loop
// provider: selective completion, counters, inject, multi-recv, cancel,
// tagged matching, RMA and atomics, completion flags and errors.
#include "fixture.h"

using namespace shunt;
using namespace shunt::fabric;
using test::loop_ep;

namespace {
struct ep_data : ::testing::Test {
    test::loop_env env;
    loop_ep a, b;
    fi_addr_t to_b = 0, to_a = 0;
    void SetUp() override { ASSERT_EQ(env.open(), 0); }
    void pair(std::uint64_t a_flags = FI_TRANSMIT | FI_RECV, std::uint64_t b_flags = FI_TRANSMIT | FI_RECV)
    {
        ASSERT_EQ(test::open_ep(env, a, a_flags), 0);
        ASSERT_EQ(test::open_ep(env, b, b_flags), 0);
        to_b = test::add_peer(a, b);
        to_a = test::add_peer(b, a);
    }
    void TearDown() override
    {
        a.close_all();
        b.close_all();
    }
    /** a sends @p text (its terminating zero too) with @p tag, and b peeks
     *  for it with FI_CLAIM, the peek's completion read. @return the
     *  message naming @p ctx, for the FI_CLAIM call. */
    msg_tagged send_and_claim(const char *text, std::uint64_t tag, context &ctx)
    {
        EXPECT_EQ(tsend(a.ep, text, std::strlen(text) + 1, nullptr, to_b, tag, nullptr), 0);
        msg_tagged m;
        m.tag = tag;
        m.context = &ctx;
        m.addr = FI_ADDR_UNSPEC;
        EXPECT_EQ(trecvmsg(b.ep, &m, FI_PEEK | FI_CLAIM), 0);
        cq_tagged_entry e{};
        EXPECT_EQ(test::read_one(b.cq, e), 1);
        EXPECT_EQ(e.op_context, &ctx);
        return m;
    }
};
} // namespace

TEST_F(ep_data, SendRecvCompletesBothSidesWithFlagsAndData)
{
    pair();
    char rbuf[32] = {};
    int rctx, sctx;
    ASSERT_EQ(recv(b.ep, rbuf, sizeof rbuf, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(senddata(a.ep, "payload", 8, nullptr, 0xfeed, to_b, &sctx), 0);
    cq_tagged_entry e{};
    fi_addr_t src = 0;
    ASSERT_EQ(cq_readfrom(b.cq, &e, 1, &src), 1);
    EXPECT_EQ(e.op_context, &rctx);
    EXPECT_EQ(e.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
    EXPECT_EQ(e.len, 8u);
    EXPECT_EQ(e.data, 0xfeedu);
    EXPECT_EQ(e.buf, rbuf);
    EXPECT_EQ(src, to_a) << "FI_SOURCE: the sender's address in the receiver's AV";
    EXPECT_STREQ(rbuf, "payload");
    ASSERT_EQ(test::read_one(a.cq, e), 1);
    EXPECT_EQ(e.op_context, &sctx);
    EXPECT_EQ(e.flags, FI_SEND | FI_MSG);
}

// The receive copies small payloads without memcpy (two overlapping
// loads and stores up to 16 bytes): every length around those bounds
// arrives exactly, and nothing past it is written.
TEST_F(ep_data, EveryPayloadLengthUpToFortyArrivesExactly)
{
    pair();
    for (std::size_t n = 0; n <= 40; n++) {
        SCOPED_TRACE(n);
        unsigned char sbuf[48], rbuf[48];
        for (std::size_t i = 0; i < sizeof sbuf; i++)
            sbuf[i] = static_cast<unsigned char>(0x11 + 7 * i + n);
        std::memset(rbuf, 0xee, sizeof rbuf);
        int rctx;
        ASSERT_EQ(recv(b.ep, rbuf, 41, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
        ASSERT_EQ(send(a.ep, sbuf, n, nullptr, to_b, nullptr), 0);
        cq_tagged_entry e{};
        ASSERT_EQ(test::read_one(b.cq, e), 1);
        EXPECT_EQ(e.op_context, &rctx);
        EXPECT_EQ(e.len, n);
        EXPECT_EQ(std::memcmp(rbuf, sbuf, n), 0);
        for (std::size_t i = n; i < sizeof rbuf; i++)
            ASSERT_EQ(rbuf[i], 0xee) << "byte " << i << " written";
        ASSERT_EQ(test::read_one(a.cq, e), 1);
    }
}

TEST_F(ep_data, SelectiveCompletionWritesOnlyRequestedCompletionsButAlwaysErrors)
{
    pair(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION);
    char rbuf[16];
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(recv(b.ep, rbuf, sizeof rbuf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    int quiet, loud;
    ASSERT_EQ(send(a.ep, "x", 1, nullptr, to_b, &quiet), 0);
    cq_tagged_entry e{};
    EXPECT_EQ(cq_read(a.cq, &e, 1), -FI_EAGAIN) << "no FI_COMPLETION: no entry";
    iovec v{const_cast<char *>("y"), 1};
    msg m;
    m.msg_iov = &v;
    m.iov_count = 1;
    m.addr = to_b;
    m.context = &loud;
    ASSERT_EQ(sendmsg(a.ep, &m, FI_COMPLETION), 0);
    ASSERT_EQ(test::read_one(a.cq, e), 1);
    EXPECT_EQ(e.op_context, &loud);
    // the default flags can ask for completions too
    std::uint64_t f = FI_TRANSMIT | FI_COMPLETION;
    ASSERT_EQ(control(&a.ep->fid, FI_SETOPSFLAG, &f), 0);
    ASSERT_EQ(send(a.ep, "z", 1, nullptr, to_b, &quiet), 0);
    ASSERT_EQ(test::read_one(a.cq, e), 1);
    EXPECT_EQ(e.op_context, &quiet);
    // an error is reported although no completion was asked for
    f = FI_TRANSMIT;
    ASSERT_EQ(control(&a.ep->fid, FI_SETOPSFLAG, &f), 0);
    b.close_all(); // the peer is gone: the send fails asynchronously
    ASSERT_EQ(send(a.ep, "w", 1, nullptr, to_b, &quiet), 0);
    EXPECT_EQ(cq_read(a.cq, &e, 1), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(a.cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, &quiet);
    EXPECT_EQ(err.err, FI_EHOSTUNREACH);
}

TEST_F(ep_data, CountersAloneOrWithCqErrorsIncrementErrorCounterAndCq)
{
    ASSERT_EQ(test::open_ep(env, b), 0);
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &ep, nullptr), 0);
    cq_attr ca;
    ca.format = FI_CQ_FORMAT_MSG;
    fid_cq *cq = nullptr;
    ASSERT_EQ(cq_open(env.domain, &ca, &cq, nullptr), 0);
    fid_cntr *sent = nullptr;
    ASSERT_EQ(cntr_open(env.domain, nullptr, &sent, nullptr), 0);
    av_attr aa;
    fid_av *av = nullptr;
    ASSERT_EQ(av_open(env.domain, &aa, &av, nullptr), 0);
    ASSERT_EQ(ep_bind(ep, &av->fid, 0), 0);
    ASSERT_EQ(ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION), 0);
    ASSERT_EQ(ep_bind(ep, &sent->fid, FI_SEND), 0);
    ASSERT_EQ(enable(ep), 0);
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(av, &b.name, 1, &to, 0, nullptr), 1);
    char rbuf[8];
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(recv(b.ep, rbuf, sizeof rbuf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(send(ep, "abc", 3, nullptr, to, nullptr), 0);
    EXPECT_EQ(cntr_read(sent), 5u) << "the counter tracks successes";
    cq_msg_entry e;
    EXPECT_EQ(cq_read(cq, &e, 1), -FI_EAGAIN) << "the CQ only reports errors";
    b.close_all();
    ASSERT_EQ(send(ep, "abc", 3, nullptr, to, this), 0);
    EXPECT_EQ(cntr_read(sent), 5u);
    EXPECT_EQ(cntr_readerr(sent), 1u);
    EXPECT_EQ(cq_read(cq, &e, 1), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, this);
    EXPECT_EQ(close(&ep->fid), 0);
    EXPECT_EQ(close(&cq->fid), 0);
    EXPECT_EQ(close(&sent->fid), 0);
    EXPECT_EQ(close(&av->fid), 0);
}

TEST_F(ep_data, InjectReturnsTheBufferAtOnceWithoutCompletion)
{
    pair();
    char rbuf[64];
    ASSERT_EQ(recv(b.ep, rbuf, sizeof rbuf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    char sbuf[64];
    std::memset(sbuf, 'A', sizeof sbuf);
    ASSERT_EQ(inject(a.ep, sbuf, sizeof sbuf, to_b), 0);
    std::memset(sbuf, 'B', sizeof sbuf); // reuse at once
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(a.cq, &e, 1), -FI_EAGAIN) << "inject generates no completion";
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    for (char c : rbuf)
        ASSERT_EQ(c, 'A');
    EXPECT_EQ(inject(a.ep, sbuf, 65, to_b), -FI_EMSGSIZE);
    std::size_t lim = 8;
    loop_ep c;
    ASSERT_EQ(test::open_ep(env, c, FI_TRANSMIT | FI_RECV, false), 0);
    ASSERT_EQ(setopt(&c.ep->fid, FI_OPT_ENDPOINT, FI_OPT_INJECT_MSG_SIZE, &lim, sizeof lim), 0);
    ASSERT_EQ(enable(c.ep), 0);
    fi_addr_t cb = test::add_peer(c, b);
    EXPECT_EQ(inject(c.ep, sbuf, 9, cb), -FI_EMSGSIZE) << "FI_OPT_INJECT_MSG_SIZE";
    EXPECT_EQ(tinject(c.ep, sbuf, 9, cb, 1), 0) << "the tagged limit is separate";
    iovec v{sbuf, 9};
    msg m;
    m.msg_iov = &v;
    m.iov_count = 1;
    m.addr = cb;
    EXPECT_EQ(sendmsg(c.ep, &m, FI_INJECT), -FI_EMSGSIZE) << "FI_INJECT is limited too";
}

TEST_F(ep_data, TaggedMatchingWithIgnoreBitsWildcardSourceAndUnexpected)
{
    pair();
    // unexpected: sent before any receive is posted
    ASSERT_EQ(tsend(a.ep, "first", 6, nullptr, to_b, 0x1100, nullptr), 0);
    ASSERT_EQ(tsend(a.ep, "second", 7, nullptr, to_b, 0x2200, nullptr), 0);
    char r1[16] = {}, r2[16] = {};
    ASSERT_EQ(trecv(b.ep, r2, sizeof r2, nullptr, FI_ADDR_UNSPEC, 0x2200, 0, nullptr), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.tag, 0x2200u);
    EXPECT_STREQ(r2, "second");
    ASSERT_EQ(trecv(b.ep, r1, sizeof r1, nullptr, to_a, 0x1000, 0x0fff, nullptr), 0) << "ignore low bits";
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.tag, 0x1100u);
    EXPECT_EQ(e.flags, FI_RECV | FI_TAGGED);
    EXPECT_STREQ(r1, "first");
    // posted receives match in order; a non-matching tag waits
    char r3[16] = {}, r4[16] = {};
    int c3, c4;
    ASSERT_EQ(trecv(b.ep, r3, sizeof r3, nullptr, FI_ADDR_UNSPEC, 7, 0, &c3), 0);
    ASSERT_EQ(trecv(b.ep, r4, sizeof r4, nullptr, FI_ADDR_UNSPEC, 8, 0, &c4), 0);
    ASSERT_EQ(tsend(a.ep, "eight", 6, nullptr, to_b, 8, nullptr), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.op_context, &c4);
    EXPECT_STREQ(r4, "eight");
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN);
    // tagged and untagged never match each other
    ASSERT_EQ(send(a.ep, "untagged", 9, nullptr, to_b, nullptr), 0);
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN);
    ASSERT_EQ(tsend(a.ep, "seven", 6, nullptr, to_b, 7, nullptr), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.op_context, &c3);
}

TEST_F(ep_data, TaggedPeekClaimAndDiscard)
{
    pair();
    ASSERT_EQ(tsend(a.ep, "claimme", 8, nullptr, to_b, 42, nullptr), 0);
    ASSERT_EQ(tsend(a.ep, "dropme", 7, nullptr, to_b, 43, nullptr), 0);
    context ctx{};
    msg_tagged m;
    m.tag = 41;
    m.context = &ctx;
    m.addr = FI_ADDR_UNSPEC;
    ASSERT_EQ(trecvmsg(b.ep, &m, FI_PEEK), 0);
    cq_tagged_entry e{};
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(b.cq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_ENOMSG) << "peek without a match";
    m.tag = 42;
    ASSERT_EQ(trecvmsg(b.ep, &m, FI_PEEK | FI_CLAIM), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.len, 8u);
    EXPECT_EQ(e.tag, 42u);
    // a normal receive for 42 no longer sees the claimed message
    char other[16];
    ASSERT_EQ(trecv(b.ep, other, sizeof other, nullptr, FI_ADDR_UNSPEC, 42, 0, nullptr), 0);
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN);
    char buf[16] = {};
    iovec v{buf, sizeof buf};
    m.msg_iov = &v;
    m.iov_count = 1;
    ASSERT_EQ(trecvmsg(b.ep, &m, FI_CLAIM), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_STREQ(buf, "claimme");
    m.tag = 43;
    ASSERT_EQ(trecvmsg(b.ep, &m, FI_PEEK | FI_DISCARD), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.tag, 43u);
    ASSERT_EQ(trecvmsg(b.ep, &m, FI_PEEK), 0);
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAVAIL) << "discarded";
}

// The receive of a claimed message checks its buffer as any receive does;
// a refused one leaves the message claimed, to be received later.
TEST_F(ep_data, ClaimingReceiveChecksItsBuffer)
{
    pair();
    context ctx{};
    msg_tagged m = send_and_claim("claimme", 42, ctx);
    cq_tagged_entry e{};
    char buf[16] = {};
    iovec v[6];
    for (auto &x : v)
        x = {buf, 1};
    m.msg_iov = v;
    m.iov_count = 6;
    EXPECT_EQ(trecvmsg(b.ep, &m, FI_CLAIM), -FI_EINVAL) << "more entries than iov_limit";
    m.msg_iov = nullptr;
    m.iov_count = 1;
    EXPECT_EQ(trecvmsg(b.ep, &m, FI_CLAIM), -FI_EINVAL) << "no vector";
    iovec null_base{nullptr, 8};
    m.msg_iov = &null_base;
    EXPECT_EQ(trecvmsg(b.ep, &m, FI_CLAIM), -FI_EINVAL) << "a null buffer with a length";
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN) << "nothing received by a refused call";
    v[0] = {buf, sizeof buf};
    m.msg_iov = v;
    ASSERT_EQ(trecvmsg(b.ep, &m, FI_CLAIM), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.op_context, &ctx);
    EXPECT_EQ(e.len, 8u);
    EXPECT_STREQ(buf, "claimme");
}

// FI_DISCARD ignores the buffer: a claimed message is dropped whatever
// vector comes with it.
TEST_F(ep_data, DiscardingAClaimedMessageIgnoresTheBuffer)
{
    pair();
    context ctx{};
    msg_tagged m = send_and_claim("dropme", 43, ctx);
    cq_tagged_entry e{};
    m.msg_iov = nullptr;
    m.iov_count = 9;
    ASSERT_EQ(trecvmsg(b.ep, &m, FI_CLAIM | FI_DISCARD), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.op_context, &ctx);
    EXPECT_EQ(e.tag, 43u);
    EXPECT_EQ(trecvmsg(b.ep, &m, FI_CLAIM | FI_DISCARD), -FI_EINVAL) << "no longer claimed";
}

// Under selective completion the receive of a claimed message completes
// like any receive: with an entry only when FI_COMPLETION asks for it.
TEST_F(ep_data, ClaimingReceiveFollowsSelectiveCompletion)
{
    ASSERT_EQ(test::open_ep(env, a, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(test::open_ep(env, b, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION), 0);
    to_b = test::add_peer(a, b);
    to_a = test::add_peer(b, a);
    context c1{}, c2{};
    char b1[8] = {}, b2[8] = {};
    iovec v1{b1, sizeof b1}, v2{b2, sizeof b2};
    msg_tagged m = send_and_claim("one", 1, c1); // a peek always reports what it found
    (void)send_and_claim("two", 2, c2);
    cq_tagged_entry e{};
    m.msg_iov = &v1;
    m.iov_count = 1;
    ASSERT_EQ(trecvmsg(b.ep, &m, FI_CLAIM), 0);
    m.context = &c2;
    m.msg_iov = &v2;
    ASSERT_EQ(trecvmsg(b.ep, &m, FI_CLAIM | FI_COMPLETION), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.op_context, &c2) << "the receive without FI_COMPLETION has no entry";
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN);
    EXPECT_STREQ(b1, "one");
    EXPECT_STREQ(b2, "two");
}

// FI_TAG_CCL: the one tag field "may not be wild carded" (fi_endpoint(3)):
// a tagged receive or peek with ignore bits is refused; other formats
// take them.
TEST_F(ep_data, CclTagFormatRefusesIgnoreBits)
{
    info *ccl = dupinfo(env.info);
    ccl->ep_attr->mem_tag_format = FI_TAG_CCL;
    ASSERT_EQ(test::open_ep(env, a, FI_TRANSMIT | FI_RECV, true, ccl), 0);
    ASSERT_EQ(test::open_ep(env, b, FI_TRANSMIT | FI_RECV, true, ccl), 0);
    freeinfo(ccl);
    to_b = test::add_peer(a, b);
    to_a = test::add_peer(b, a);
    char buf[8] = {};
    EXPECT_EQ(trecv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, 5, 1, nullptr), -FI_EINVAL);
    iovec v{buf, sizeof buf};
    EXPECT_EQ(trecvv(b.ep, &v, nullptr, 1, FI_ADDR_UNSPEC, 5, ~0ULL, nullptr), -FI_EINVAL);
    context ctx{};
    msg_tagged m;
    m.msg_iov = &v;
    m.iov_count = 1;
    m.addr = FI_ADDR_UNSPEC;
    m.tag = 5;
    m.ignore = 0x100;
    m.context = &ctx;
    EXPECT_EQ(trecvmsg(b.ep, &m, 0), -FI_EINVAL);
    EXPECT_EQ(trecvmsg(b.ep, &m, FI_PEEK), -FI_EINVAL);
    cq_tagged_entry e{};
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN) << "nothing posted, nothing peeked";
    ASSERT_EQ(trecv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, 5, 0, &ctx), 0) << "an exact tag";
    ASSERT_EQ(tsend(a.ep, "ccl", 4, nullptr, to_b, 5, nullptr), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.tag, 5u);
    EXPECT_STREQ(buf, "ccl");
}

TEST_F(ep_data, OtherTagFormatsTakeIgnoreBits)
{
    pair();
    char buf[8] = {};
    int ctx;
    ASSERT_EQ(trecv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, 5, 0xff, &ctx), 0);
    ASSERT_EQ(tsend(a.ep, "any", 4, nullptr, to_b, 0x42, nullptr), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.tag, 0x42u);
}

TEST_F(ep_data, MultiRecvPacksMessagesAndReleasesBelowMinimum)
{
    pair();
    std::size_t min = 16;
    ASSERT_EQ(setopt(&b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min), 0);
    char pool[64] = {};
    iovec v{pool, sizeof pool};
    msg m;
    m.msg_iov = &v;
    m.iov_count = 1;
    m.addr = FI_ADDR_UNSPEC;
    m.context = pool;
    ASSERT_EQ(recvmsg(b.ep, &m, FI_MULTI_RECV), 0);
    for (int i = 0; i < 3; i++) {
        char s[16];
        std::memset(s, 'a' + i, sizeof s);
        ASSERT_EQ(send(a.ep, s, sizeof s, nullptr, to_b, nullptr), 0);
    }
    cq_tagged_entry e[3];
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(test::read_one(b.cq, e[i]), 1);
        EXPECT_EQ(e[i].op_context, pool);
        EXPECT_EQ(e[i].len, 16u);
        EXPECT_EQ(e[i].buf, pool + 16 * i) << "packed one after the other";
        EXPECT_EQ(static_cast<char *>(e[i].buf)[0], 'a' + i);
    }
    for (auto &x : e)
        EXPECT_FALSE(x.flags & FI_MULTI_RECV) << "16 bytes left is not below the minimum of 16";
    char s[16];
    std::memset(s, 'z', sizeof s);
    ASSERT_EQ(send(a.ep, s, sizeof s, nullptr, to_b, nullptr), 0);
    cq_tagged_entry last;
    ASSERT_EQ(test::read_one(b.cq, last), 1);
    EXPECT_EQ(last.buf, pool + 48);
    EXPECT_TRUE(last.flags & FI_MULTI_RECV) << "0 bytes left: released, flagged on the last completion";
}

TEST_F(ep_data, MultiRecvReleasedFlagOnLastCompletion)
{
    pair();
    std::size_t min = 20;
    ASSERT_EQ(setopt(&b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min), 0);
    char pool[50];
    iovec v{pool, sizeof pool};
    msg m;
    m.msg_iov = &v;
    m.iov_count = 1;
    m.addr = FI_ADDR_UNSPEC;
    ASSERT_EQ(recvmsg(b.ep, &m, FI_MULTI_RECV), 0);
    char s[10] = "123456789";
    cq_tagged_entry e;
    ASSERT_EQ(send(a.ep, s, 10, nullptr, to_b, nullptr), 0); // 40 left
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_FALSE(e.flags & FI_MULTI_RECV);
    ASSERT_EQ(send(a.ep, s, 10, nullptr, to_b, nullptr), 0); // 30 left
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_FALSE(e.flags & FI_MULTI_RECV);
    ASSERT_EQ(send(a.ep, s, 10, nullptr, to_b, nullptr), 0); // 20 left: still >= min
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_FALSE(e.flags & FI_MULTI_RECV);
    ASSERT_EQ(send(a.ep, s, 10, nullptr, to_b, nullptr), 0); // 10 left: released
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_TRUE(e.flags & FI_MULTI_RECV);
    EXPECT_EQ(e.buf, pool + 30);
    // nothing posted any more: the next message waits as unexpected
    ASSERT_EQ(send(a.ep, s, 10, nullptr, to_b, nullptr), 0);
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN);
}

TEST_F(ep_data, CancelGivesCanceledErrorOrNothingIfCompleted)
{
    pair();
    char buf[8];
    int ctx1, ctx2;
    ASSERT_EQ(recv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, &ctx1), 0);
    ASSERT_EQ(cancel(b.ep, &ctx1), 0);
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(b.cq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_ECANCELED);
    EXPECT_EQ(err.op_context, &ctx1);
    EXPECT_TRUE(err.flags & FI_RECV);
    // completed before cancel: only its completion, nothing for the cancel
    ASSERT_EQ(recv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, &ctx2), 0);
    ASSERT_EQ(send(a.ep, "x", 1, nullptr, to_b, nullptr), 0);
    ASSERT_EQ(cancel(b.ep, &ctx2), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_EQ(e.op_context, &ctx2);
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN);
    EXPECT_EQ(cq_readerr(b.cq, &err, 0), -FI_EAGAIN);
    EXPECT_EQ(cancel(b.ep, nullptr), 0) << "no context: nothing to cancel";
}

TEST_F(ep_data, TruncatedReceiveIsAnErrorWithOlen)
{
    pair();
    char small[4];
    ASSERT_EQ(recv(b.ep, small, sizeof small, nullptr, FI_ADDR_UNSPEC, this), 0);
    ASSERT_EQ(send(a.ep, "0123456789", 10, nullptr, to_b, nullptr), 0);
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(b.cq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_ETRUNC);
    EXPECT_EQ(err.len, 4u);
    EXPECT_EQ(err.olen, 6u);
    EXPECT_EQ(std::memcmp(small, "0123", 4), 0);
}

// A message into one buffer it fits in takes the receive's short branch
// (rx_deliver without place()); the same message scattered over two
// buffers, into one it overflows, or of zero bytes exercises the rest.
// Completions are the same whichever branch wrote them.
TEST_F(ep_data, OneBufferAndScatteredReceivesGiveTheSameCompletion)
{
    pair();
    char one[16] = {}, lo[5] = {}, hi[11] = {};
    int c1, c2;
    ASSERT_EQ(recv(b.ep, one, sizeof one, nullptr, FI_ADDR_UNSPEC, &c1), 0);
    iovec v[2] = {{lo, sizeof lo}, {hi, sizeof hi}};
    ASSERT_EQ(recvv(b.ep, v, nullptr, 2, FI_ADDR_UNSPEC, &c2), 0);
    ASSERT_EQ(senddata(a.ep, "0123456789abc", 13, nullptr, 0x77, to_b, nullptr), 0);
    ASSERT_EQ(senddata(a.ep, "0123456789abc", 13, nullptr, 0x77, to_b, nullptr), 0);
    cq_tagged_entry e1{}, e2{};
    fi_addr_t s1 = 0, s2 = 0;
    ASSERT_EQ(cq_readfrom(b.cq, &e1, 1, &s1), 1);
    ASSERT_EQ(cq_readfrom(b.cq, &e2, 1, &s2), 1);
    EXPECT_EQ(e1.op_context, &c1);
    EXPECT_EQ(e2.op_context, &c2);
    EXPECT_EQ(e1.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
    EXPECT_EQ(e2.flags, e1.flags);
    EXPECT_EQ(e1.len, 13u);
    EXPECT_EQ(e2.len, e1.len);
    EXPECT_EQ(e1.data, 0x77u);
    EXPECT_EQ(e2.data, e1.data);
    EXPECT_EQ(e1.buf, one);
    EXPECT_EQ(e2.buf, lo) << "a scattered receive reports its first buffer";
    EXPECT_EQ(s1, to_a);
    EXPECT_EQ(s2, s1);
    EXPECT_EQ(std::memcmp(one, "0123456789abc", 13), 0);
    EXPECT_EQ(std::memcmp(lo, "01234", 5), 0);
    EXPECT_EQ(std::memcmp(hi, "56789abc", 8), 0);
    EXPECT_EQ(one[13], 0) << "nothing written past the message";

    // Exactly full, then zero bytes, into one buffer.
    char exact[4] = {};
    ASSERT_EQ(recv(b.ep, exact, sizeof exact, nullptr, FI_ADDR_UNSPEC, &c1), 0);
    ASSERT_EQ(recv(b.ep, one, sizeof one, nullptr, FI_ADDR_UNSPEC, &c2), 0);
    ASSERT_EQ(send(a.ep, "wxyz", 4, nullptr, to_b, nullptr), 0);
    ASSERT_EQ(send(a.ep, nullptr, 0, nullptr, to_b, nullptr), 0);
    ASSERT_EQ(test::read_one(b.cq, e1), 1);
    EXPECT_EQ(e1.op_context, &c1);
    EXPECT_EQ(e1.len, 4u);
    EXPECT_EQ(std::memcmp(exact, "wxyz", 4), 0);
    ASSERT_EQ(test::read_one(b.cq, e2), 1);
    EXPECT_EQ(e2.op_context, &c2);
    EXPECT_EQ(e2.len, 0u);
    EXPECT_EQ(e2.flags, FI_RECV | FI_MSG);

    // One byte too many for one buffer: truncated, an error entry.
    ASSERT_EQ(recv(b.ep, exact, sizeof exact, nullptr, FI_ADDR_UNSPEC, &c1), 0);
    ASSERT_EQ(send(a.ep, "ABCDE", 5, nullptr, to_b, nullptr), 0);
    cq_tagged_entry e{};
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(b.cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, &c1);
    EXPECT_EQ(err.err, FI_ETRUNC);
    EXPECT_EQ(err.len, 4u);
    EXPECT_EQ(err.olen, 1u);
    EXPECT_EQ(std::memcmp(exact, "ABCD", 4), 0);
}

TEST_F(ep_data, AliasFlagsApplyToOperationsPostedThroughIt)
{
    pair(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION);
    fid_ep *loud = nullptr;
    ASSERT_EQ(ep_alias(a.ep, &loud, FI_TRANSMIT | FI_COMPLETION), 0);
    char rbuf[8];
    ASSERT_EQ(recv(b.ep, rbuf, sizeof rbuf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(recv(b.ep, rbuf, sizeof rbuf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    int c1, c2;
    ASSERT_EQ(send(a.ep, "q", 1, nullptr, to_b, &c1), 0);
    ASSERT_EQ(send(loud, "l", 1, nullptr, to_b, &c2), 0);
    cq_tagged_entry e;
    ASSERT_EQ(test::read_one(a.cq, e), 1);
    EXPECT_EQ(e.op_context, &c2) << "only the alias asks for completions";
    EXPECT_EQ(cq_read(a.cq, &e, 1), -FI_EAGAIN);
    EXPECT_EQ(close(&loud->fid), 0);
}

TEST_F(ep_data, RmaWriteReadAndRemoteCqData)
{
    pair();
    std::uint8_t target[256];
    for (int i = 0; i < 256; i++)
        target[i] = std::uint8_t(i);
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(env.domain, target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 77, 0, &mr, nullptr), 0);
    std::uint8_t got[64];
    int ctx;
    ASSERT_EQ(read(a.ep, got, sizeof got, nullptr, to_b, 100, 77, &ctx), 0);
    cq_tagged_entry e;
    ASSERT_EQ(test::read_one(a.cq, e), 1);
    EXPECT_EQ(e.flags, FI_RMA | FI_READ);
    for (int i = 0; i < 64; i++)
        ASSERT_EQ(got[i], std::uint8_t(100 + i));
    std::uint8_t src[32];
    std::memset(src, 0xee, sizeof src);
    ASSERT_EQ(writedata(a.ep, src, sizeof src, nullptr, 0x55, to_b, 10, 77, &ctx), 0);
    ASSERT_EQ(test::read_one(a.cq, e), 1);
    EXPECT_EQ(e.flags, FI_RMA | FI_WRITE);
    for (int i = 0; i < 256; i++)
        ASSERT_EQ(target[i], i >= 10 && i < 42 ? 0xee : std::uint8_t(i)) << i;
    ASSERT_EQ(test::read_one(b.cq, e), 1) << "remote CQ data at the target";
    EXPECT_EQ(e.data, 0x55u);
    EXPECT_TRUE(e.flags & FI_REMOTE_CQ_DATA);
    // bad key and out of range come back as error completions
    ASSERT_EQ(write(a.ep, src, sizeof src, nullptr, to_b, 0, 78, this), 0);
    EXPECT_EQ(cq_read(a.cq, &e, 1), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(a.cq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_EKEYREJECTED);
    ASSERT_EQ(write(a.ep, src, sizeof src, nullptr, to_b, 250, 77, this), 0);
    ASSERT_EQ(cq_readerr(a.cq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_EINVAL);
    EXPECT_EQ(target[250], 250) << "nothing written out of range";
    EXPECT_EQ(close(&mr->fid), 0);
}

TEST_F(ep_data, AtomicsFetchAndCompareWithDataCheckedAndValidQueries)
{
    pair();
    std::uint64_t target[4] = {10, 20, 30, 40};
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(env.domain, target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 5, 0, &mr, nullptr), 0);
    std::uint64_t add[2] = {1, 2};
    cq_tagged_entry e;
    ASSERT_EQ(atomic(a.ep, add, 2, nullptr, to_b, 8, 5, FI_UINT64, FI_SUM, nullptr), 0);
    ASSERT_EQ(test::read_one(a.cq, e), 1);
    EXPECT_EQ(e.flags, FI_ATOMIC | FI_WRITE);
    EXPECT_EQ(target[1], 21u);
    EXPECT_EQ(target[2], 32u);
    std::uint64_t old = 0, v = 5;
    ASSERT_EQ(fetch_atomic(a.ep, &v, 1, nullptr, &old, nullptr, to_b, 0, 5, FI_UINT64, FI_MAX, nullptr), 0);
    ASSERT_EQ(test::read_one(a.cq, e), 1);
    EXPECT_EQ(e.flags, FI_ATOMIC | FI_READ);
    EXPECT_EQ(old, 10u);
    EXPECT_EQ(target[0], 10u);
    std::uint64_t cmp = 40, swap = 99;
    ASSERT_EQ(compare_atomic(a.ep, &swap, 1, nullptr, &cmp, nullptr, &old, nullptr, to_b, 24, 5, FI_UINT64, FI_CSWAP,
                             nullptr),
              0);
    ASSERT_EQ(test::read_one(a.cq, e), 1);
    EXPECT_EQ(old, 40u);
    EXPECT_EQ(target[3], 99u);
    cmp = 1;
    ASSERT_EQ(compare_atomic(a.ep, &swap, 1, nullptr, &cmp, nullptr, &old, nullptr, to_b, 0, 5, FI_UINT64, FI_CSWAP,
                             nullptr),
              0);
    ASSERT_EQ(test::read_one(a.cq, e), 1);
    EXPECT_EQ(target[0], 10u) << "compare failed: unchanged";
    std::size_t count = 0;
    EXPECT_EQ(atomicvalid(a.ep, FI_UINT64, FI_SUM, &count), 0);
    EXPECT_EQ(count, 8u);
    EXPECT_EQ(atomicvalid(a.ep, FI_DOUBLE, FI_BOR, &count), -FI_EOPNOTSUPP);
    EXPECT_EQ(fetch_atomicvalid(a.ep, FI_INT32, FI_ATOMIC_READ, &count), 0);
    EXPECT_EQ(compare_atomicvalid(a.ep, FI_UINT32, FI_MSWAP, &count), 0);
    EXPECT_EQ(compare_atomicvalid(a.ep, FI_UINT32, FI_SUM, &count), -FI_EOPNOTSUPP);
    atomic_attr at{};
    EXPECT_EQ(query_atomic(env.domain, FI_DOUBLE, FI_SUM, &at, 0), 0);
    EXPECT_EQ(at.size, 8u);
    EXPECT_EQ(query_atomic(env.domain, FI_DOUBLE, FI_SUM, &at, FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC), -FI_EINVAL);
    EXPECT_EQ(close(&mr->fid), 0);
}

TEST_F(ep_data, RemoteWriteCounterRequiresRmaEventAndCounts)
{
    ASSERT_EQ(test::open_ep(env, a), 0);
    fid_ep *t = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &t, nullptr), 0);
    cq_attr ca;
    fid_cq *cq = nullptr;
    ASSERT_EQ(cq_open(env.domain, &ca, &cq, nullptr), 0);
    av_attr aa;
    fid_av *av = nullptr;
    ASSERT_EQ(av_open(env.domain, &aa, &av, nullptr), 0);
    fid_cntr *rw = nullptr;
    ASSERT_EQ(cntr_open(env.domain, nullptr, &rw, nullptr), 0);
    ASSERT_EQ(ep_bind(t, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(t, &av->fid, 0), 0);
    ASSERT_EQ(ep_bind(t, &rw->fid, FI_REMOTE_WRITE), 0);
    ASSERT_EQ(enable(t), 0);
    std::uint64_t name = 0;
    std::size_t len = 8;
    ASSERT_EQ(getname(&t->fid, &name, &len), 0);
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(a.av, &name, 1, &to, 0, nullptr), 1);
    char mem[16];
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(env.domain, mem, sizeof mem, FI_REMOTE_WRITE, 0, 9, 0, &mr, nullptr), 0);
    ASSERT_EQ(inject_write(a.ep, "abcd", 4, to, 0, 9), 0);
    ASSERT_EQ(inject_write(a.ep, "efgh", 4, to, 4, 9), 0);
    EXPECT_EQ(cntr_read(rw), 2u);
    EXPECT_EQ(std::memcmp(mem, "abcdefgh", 8), 0);
    EXPECT_EQ(close(&mr->fid), 0);
    EXPECT_EQ(close(&t->fid), 0);
    EXPECT_EQ(close(&cq->fid), 0);
    EXPECT_EQ(close(&av->fid), 0);
    EXPECT_EQ(close(&rw->fid), 0);
}

TEST_F(ep_data, CloseDiscardsOutstandingReceivesWithoutCompletions)
{
    pair();
    char buf[8];
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(recv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    fid_cq *keep = b.cq;
    b.cq = nullptr;
    ASSERT_EQ(close(&b.ep->fid), 0);
    b.ep = nullptr;
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(keep, &e, 1), -FI_EAGAIN);
    cq_err_entry err{};
    EXPECT_EQ(cq_readerr(keep, &err, 0), -FI_EAGAIN);
    EXPECT_EQ(close(&keep->fid), 0);
}

TEST_F(ep_data, SizeLeftQueriesAreDeprecatedButWork)
{
    pair();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    ssize_t before = rx_size_left(b.ep);
    char buf[8];
    ASSERT_EQ(recv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    EXPECT_EQ(rx_size_left(b.ep), before - 1);
    EXPECT_GT(tx_size_left(a.ep), 0);
    EXPECT_EQ(rx_size_left(nullptr), -FI_EINVAL);
#pragma GCC diagnostic pop
}

TEST_F(ep_data, ContextModeContextIgnoredWithoutCompletion)
{
    // FI_CONTEXT: with selective completion and no FI_COMPLETION the context
    // is not used, so an invalid (null) one is fine.
    pair(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION);
    EXPECT_TRUE(env.info->mode & FI_CONTEXT || true);
    char buf[8];
    ASSERT_EQ(recv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(send(a.ep, "k", 1, nullptr, to_b, nullptr), 0);
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(a.cq, &e, 1), -FI_EAGAIN);
}

TEST(FabricDgram, DatagramWithoutPostedReceiveIsDropped)
{
    test::loop_env env;
    ASSERT_EQ(env.open(FI_EP_DGRAM), 0);
    loop_ep a, b;
    ASSERT_EQ(test::open_ep(env, a), 0);
    ASSERT_EQ(test::open_ep(env, b), 0);
    fi_addr_t to = test::add_peer(a, b);
    ASSERT_EQ(send(a.ep, "lost", 5, nullptr, to, nullptr), 0);
    char buf[8] = {};
    ASSERT_EQ(recv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN) << "not kept as unexpected";
    ASSERT_EQ(send(a.ep, "kept", 5, nullptr, to, nullptr), 0);
    ASSERT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_STREQ(buf, "kept");
}

// Calls made straight through the endpoint's op tables (as the libfabric
// shim makes them, without the C++ wrappers' checks): a null message is
// -FI_EINVAL in every *msg call; zero atomic elements and a fetch without
// a result buffer are refused and change nothing at the target.
TEST_F(ep_data, NullMessagesAndEmptyOrResultlessAtomicsAreRefusedThroughTheOpTables)
{
    pair();
    EXPECT_EQ(a.ep->msg->sendmsg(a.ep, nullptr, 0), -FI_EINVAL);
    EXPECT_EQ(a.ep->msg->recvmsg(a.ep, nullptr, 0), -FI_EINVAL);
    EXPECT_EQ(a.ep->tagged->sendmsg(a.ep, nullptr, 0), -FI_EINVAL);
    EXPECT_EQ(a.ep->tagged->recvmsg(a.ep, nullptr, 0), -FI_EINVAL);
    EXPECT_EQ(a.ep->rma->writemsg(a.ep, nullptr, 0), -FI_EINVAL);
    EXPECT_EQ(a.ep->rma->readmsg(a.ep, nullptr, 0), -FI_EINVAL);
    EXPECT_EQ(a.ep->atomic->writemsg(a.ep, nullptr, 0), -FI_EINVAL);
    std::uint64_t r = 0;
    ioc rv{&r, 1};
    EXPECT_EQ(a.ep->atomic->readwritemsg(a.ep, nullptr, &rv, nullptr, 1, 0), -FI_EINVAL);
    EXPECT_EQ(a.ep->atomic->compwritemsg(a.ep, nullptr, &rv, nullptr, 1, &rv, nullptr, 1, 0), -FI_EINVAL);
    EXPECT_EQ(a.ep->msg->inject(a.ep, nullptr, 8, to_b), -FI_EINVAL);
    EXPECT_EQ(a.ep->tagged->inject(a.ep, nullptr, 8, to_b, 1), -FI_EINVAL);

    std::uint64_t target[2] = {10, 20};
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(env.domain, target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 5, 0, &mr, nullptr), 0);
    std::uint64_t add = 1;
    EXPECT_EQ(atomic(a.ep, &add, 0, nullptr, to_b, 0, 5, FI_UINT64, FI_SUM, nullptr), -FI_EINVAL);
    EXPECT_EQ(inject_atomic(a.ep, &add, 0, to_b, 0, 5, FI_UINT64, FI_SUM), -FI_EINVAL);
    EXPECT_EQ(fetch_atomic(a.ep, &add, 1, nullptr, nullptr, nullptr, to_b, 8, 5, FI_UINT64, FI_SUM, nullptr),
              -FI_EINVAL);
    std::uint64_t cmp = 20, swp = 7;
    EXPECT_EQ(compare_atomic(a.ep, &swp, 1, nullptr, &cmp, nullptr, nullptr, nullptr, to_b, 8, 5, FI_UINT64, FI_CSWAP,
                             nullptr),
              -FI_EINVAL);
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(a.cq, &e, 1), -FI_EAGAIN) << "nothing was posted";
    EXPECT_EQ(target[0], 10u);
    EXPECT_EQ(target[1], 20u);
    EXPECT_EQ(close(&mr->fid), 0);
}

// readmsg/writemsg name their target only by rma_iov: without one (a count
// of 0, even for no bytes) there is nothing to read or write, and the call
// is refused before anything is queued.
TEST_F(ep_data, RmaMessagesWithoutARemoteSegmentAreRefused)
{
    pair();
    std::uint64_t target = 10;
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(env.domain, &target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 5, 0, &mr, nullptr), 0);
    std::uint64_t local = 99;
    iovec v{&local, sizeof local};
    rma_iov ri{0, sizeof local, 5};
    for (std::size_t n : {std::size_t(0), sizeof local}) {
        v.iov_len = n;
        ri.len = n;
        msg_rma m;
        m.msg_iov = &v;
        m.iov_count = n ? 1 : 0;
        m.addr = to_b;
        m.rma_iov = &ri;
        m.rma_iov_count = 0;
        EXPECT_EQ(writemsg(a.ep, &m, 0), -FI_EINVAL) << n << " bytes";
        EXPECT_EQ(readmsg(a.ep, &m, 0), -FI_EINVAL) << n << " bytes";
        EXPECT_EQ(writemsg(a.ep, &m, FI_INJECT), -FI_EINVAL) << n << " bytes";
    }
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(a.cq, &e, 1), -FI_EAGAIN) << "nothing was posted";
    EXPECT_EQ(target, 10u);
    EXPECT_EQ(close(&mr->fid), 0);
}

// Vector lengths (or element counts) whose sum does not fit in a size_t
// are refused, not summed modulo 2^64 into a short operation.
TEST_F(ep_data, VectorsWhoseLengthsWrapAreRefused)
{
    pair();
    std::uint64_t target[2] = {10, 20};
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(env.domain, target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 5, 0, &mr, nullptr), 0);
    std::uint64_t local[2] = {1, 2};
    const std::size_t huge = SIZE_MAX;
    iovec v[2] = {{local, huge}, {local, 2}}; // 1 byte modulo 2^64
    EXPECT_EQ(sendv(a.ep, v, nullptr, 2, to_b, nullptr), -FI_EINVAL);
    EXPECT_EQ(tsendv(a.ep, v, nullptr, 2, to_b, 7, nullptr), -FI_EINVAL);
    EXPECT_EQ(recvv(b.ep, v, nullptr, 2, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
    EXPECT_EQ(trecvv(b.ep, v, nullptr, 2, FI_ADDR_UNSPEC, 7, 0, nullptr), -FI_EINVAL);
    EXPECT_EQ(writev(a.ep, v, nullptr, 2, to_b, 0, 5, nullptr), -FI_EINVAL);
    EXPECT_EQ(readv(a.ep, v, nullptr, 2, to_b, 0, 5, nullptr), -FI_EINVAL);
    ioc elems[2] = {{local, huge}, {local, 2}}; // 1 element modulo 2^64
    rma_ioc r{0, 1, 5};
    msg_atomic m;
    m.msg_iov = elems;
    m.iov_count = 2;
    m.addr = to_b;
    m.rma_iov = &r;
    m.rma_iov_count = 1;
    m.datatype = FI_UINT64;
    m.op = FI_SUM;
    EXPECT_EQ(atomicmsg(a.ep, &m, 0), -FI_EINVAL);
    std::uint64_t old[2] = {};
    ioc res[2] = {{old, huge}, {old, 2}};
    ioc one{local, 1};
    m.msg_iov = &one;
    m.iov_count = 1;
    EXPECT_EQ(fetch_atomicmsg(a.ep, &m, res, nullptr, 2, 0), -FI_EINVAL) << "result counts";
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(a.cq, &e, 1), -FI_EAGAIN) << "nothing was posted";
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN);
    EXPECT_EQ(target[0], 10u);
    EXPECT_EQ(target[1], 20u);
    EXPECT_EQ(close(&mr->fid), 0);
}

// The unexpected store's bound (SHUNT_UNEXPECTED_BYTES, read at enable): a
// message past it is not kept; the receiving endpoint reports it (FI_ENOMEM
// with the endpoint's context, nothing written, its tag and length) and its
// receive counter counts an error. Taking kept messages frees their room;
// 0 lifts the bound.
TEST_F(ep_data, UnexpectedStoreBoundRefusesAndReportsWhatItCannotKeep)
{
    // Room for two messages of 1000 bytes (an entry and a 4096-byte buffer each).
    const std::size_t one = sizeof(util::unexp_msg) + 4096;
    ASSERT_EQ(::setenv("SHUNT_UNEXPECTED_BYTES", std::to_string(2 * one + one / 2).c_str(), 1), 0);
    ASSERT_EQ(test::open_ep(env, a), 0);
    ASSERT_EQ(test::open_ep(env, b, FI_TRANSMIT | FI_RECV, false), 0);
    fid_cntr *got = nullptr;
    ASSERT_EQ(cntr_open(env.domain, nullptr, &got, nullptr), 0);
    ASSERT_EQ(ep_bind(b.ep, &got->fid, FI_RECV), 0);
    ASSERT_EQ(enable(b.ep), 0);
    ::unsetenv("SHUNT_UNEXPECTED_BYTES");
    to_b = test::add_peer(a, b);
    to_a = test::add_peer(b, a);
    std::vector<std::uint8_t> out(1000);
    auto send_tag = [&](std::uint64_t tag) {
        std::memset(out.data(), int(tag), out.size());
        return tsend(a.ep, out.data(), out.size(), nullptr, to_b, tag, nullptr);
    };
    auto take = [&](std::uint64_t tag) {
        std::vector<std::uint8_t> in(out.size());
        ASSERT_EQ(trecv(b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, tag, 0, nullptr), 0);
        cq_tagged_entry e{};
        ASSERT_EQ(test::read_one(b.cq, e), 1) << tag;
        EXPECT_EQ(e.tag, tag);
        EXPECT_EQ(e.len, out.size());
        EXPECT_EQ(in, std::vector<std::uint8_t>(out.size(), std::uint8_t(tag)));
    };
    ASSERT_EQ(send_tag(1), 0);
    ASSERT_EQ(send_tag(2), 0);
    ::testing::internal::CaptureStderr();
    (void)send_tag(3); // refused by the receiver (the loop provider's send says so too)
    (void)send_tag(5);
    const std::string log = ::testing::internal::GetCapturedStderr();
    const std::string line = "unexpected messages refused from now on";
    ASSERT_NE(log.find(line), std::string::npos) << log;
    EXPECT_EQ(log.find(line, log.find(line) + 1), std::string::npos) << "logged once per receive queue: " << log;
    cq_tagged_entry e{};
    for (std::uint64_t tag : {3, 5}) {
        ASSERT_EQ(cq_read(b.cq, &e, 1), -FI_EAVAIL);
        cq_err_entry err{};
        ASSERT_EQ(cq_readerr(b.cq, &err, 0), 1);
        EXPECT_EQ(err.err, FI_ENOMEM);
        EXPECT_EQ(err.op_context, &b) << "no operation: the endpoint's context";
        EXPECT_EQ(err.flags, FI_RECV | FI_TAGGED);
        EXPECT_EQ(err.tag, tag);
        EXPECT_EQ(err.len, 0u);
        EXPECT_EQ(err.olen, 1000u);
        EXPECT_EQ(err.src_addr, to_a);
    }
    EXPECT_EQ(cntr_readerr(got), 2u);
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN) << "one message, one report";
    take(1);
    ASSERT_EQ(send_tag(4), 0) << "taken, the first one's room is free again";
    take(2);
    take(4);
    EXPECT_EQ(cntr_read(got), 3u);
    EXPECT_EQ(cntr_readerr(got), 2u);
    a.close_all();
    b.close_all();
    EXPECT_EQ(close(&got->fid), 0);

    // 0: no bound.
    ASSERT_EQ(::setenv("SHUNT_UNEXPECTED_BYTES", "0", 1), 0);
    pair();
    ::unsetenv("SHUNT_UNEXPECTED_BYTES");
    for (std::uint64_t t = 1; t <= 64; t++)
        ASSERT_EQ(send_tag(t), 0) << t;
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN);
    for (std::uint64_t t = 1; t <= 64; t++)
        take(t);
}
