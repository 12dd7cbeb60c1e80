// shm provider, FI_EP_RDM, two real processes: the first operation of an
// endpoint to a peer it has no connection with yet is accepted by the call
// (fi_endpoint(3), fi_msg(3): -FI_EAGAIN only for a full queue) while the
// hidden connection is set up, and completes once it is up — every class
// (send, inject, tagged, with remote CQ data, RMA, atomics), data checked
// byte for byte; operations queued meanwhile keep their order
// (FI_ORDER_SAS); a full queue is -FI_EAGAIN; a peer that never answers
// fails them with error completions after SHUNT_VQ_CONNECT_TIMEOUT_MS, and
// nothing reaches it. fi_av_insert attaches a host-local peer, fi_av_remove
// lets it go.
#include <cstdlib>

#include "cm_wire.h"
#include "env/segment.h"
#include "fab_client.h"
#include "fabric/atomic.h"
#include "fabric/rma.h"

using namespace shunt;
using namespace shunt::fabric;
using namespace shunt::test::fab;

namespace {

struct first_op : ::testing::Test {
    peer_proc p{"rdm"};
    std::unique_ptr<node> n;
    fi_addr_t to = FI_ADDR_NOTAVAIL;

    void TearDown() override
    {
        if (n)
            n->close();
    }
    /** A new endpoint of ours (no connection to the peer), known to the peer
     *  (it echoes to it): the next operation is the first to a new peer. */
    void fresh()
    {
        if (n)
            n->close();
        n = std::make_unique<node>();
        ASSERT_EQ(n->open(FI_EP_RDM, false), 0);
        ASSERT_EQ(av_insert(n->av, p.addr, 1, &to, 0, nullptr), 1);
        ASSERT_EQ(p.set_peer(n->addr), 0);
    }
    /** Read completions until @p want contexts completed (recv and send),
     *  failing on an error completion; bounded. */
    void wait_for(std::vector<void *> want, std::vector<cq_tagged_entry> *got = nullptr)
    {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!want.empty()) {
            ASSERT_LT(std::chrono::steady_clock::now(), end) << want.size() << " completions missing";
            cq_tagged_entry e{};
            ssize_t k = cq_read(n->cq, &e, 1);
            if (k == -FI_EAGAIN) {
                sched_yield();
                continue;
            }
            if (k == -FI_EAVAIL) {
                cq_err_entry err{};
                ASSERT_EQ(cq_readerr(n->cq, &err, 0), 1);
                FAIL() << "error completion: " << shunt::strerror(err.err);
            }
            ASSERT_EQ(k, 1);
            auto it = std::find(want.begin(), want.end(), e.op_context);
            ASSERT_NE(it, want.end()) << "an unexpected completion";
            want.erase(it);
            if (got)
                got->push_back(e);
        }
    }
    /** Drive our progress until the peer's memory [off, off + len) holds
     *  @p want (an inject has no completion); bounded. */
    void wait_memory(std::uint64_t off, const std::vector<std::uint8_t> &want)
    {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (p.checksum(off, want.size()) != fnv(want.data(), want.size())) {
            ASSERT_LT(std::chrono::steady_clock::now(), end) << "the peer's memory never got the bytes";
            cq_tagged_entry e{};
            ASSERT_EQ(cq_read(n->cq, &e, 1), -FI_EAGAIN);
        }
    }
};

enum class msg_kind { send, inject, tsend, tinject, senddata, injectdata, tsenddata, tinjectdata };

} // namespace

TEST_F(first_op, EverySendClassIsAcceptedAndItsBytesArrive)
{
    struct one {
        msg_kind k;
        std::size_t len;
    };
    // Sizes of every send path: inline, from the user's buffer, fragments.
    const one cases[] = {{msg_kind::send, 100},       {msg_kind::send, 3000},       {msg_kind::send, 100000},
                         {msg_kind::inject, 100},     {msg_kind::tsend, 2000},      {msg_kind::tinject, 64},
                         {msg_kind::senddata, 500},   {msg_kind::injectdata, 200},  {msg_kind::tsenddata, 40000},
                         {msg_kind::tinjectdata, 16}, {msg_kind::inject, 0}};
    std::uint64_t seed = 1;
    for (const one &c : cases) {
        fresh();
        const bool tagged = c.k == msg_kind::tsend || c.k == msg_kind::tinject || c.k == msg_kind::tsenddata ||
                            c.k == msg_kind::tinjectdata;
        const bool data = c.k == msg_kind::senddata || c.k == msg_kind::injectdata || c.k == msg_kind::tsenddata ||
                          c.k == msg_kind::tinjectdata;
        const bool inj = c.k == msg_kind::inject || c.k == msg_kind::tinject || c.k == msg_kind::injectdata ||
                         c.k == msg_kind::tinjectdata;
        std::vector<std::uint8_t> out(c.len + 1), in(c.len + 16, 0xee), keep(c.len + 1);
        fill_pattern(out.data(), c.len, seed);
        keep = out;
        context rctx, sctx;
        if (tagged)
            ASSERT_EQ(trecv(n->ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, 0, ~0ULL, &rctx), 0);
        else
            ASSERT_EQ(recv(n->ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
        ssize_t rc = 0;
        switch (c.k) {
        case msg_kind::send:
            rc = send(n->ep, out.data(), c.len, nullptr, to, &sctx);
            break;
        case msg_kind::inject:
            rc = inject(n->ep, out.data(), c.len, to);
            break;
        case msg_kind::tsend:
            rc = tsend(n->ep, out.data(), c.len, nullptr, to, 10, &sctx);
            break;
        case msg_kind::tinject:
            rc = tinject(n->ep, out.data(), c.len, to, 10);
            break;
        case msg_kind::senddata:
            rc = senddata(n->ep, out.data(), c.len, nullptr, 0x77, to, &sctx);
            break;
        case msg_kind::injectdata:
            rc = injectdata(n->ep, out.data(), c.len, 0x77, to);
            break;
        case msg_kind::tsenddata:
            rc = tsenddata(n->ep, out.data(), c.len, nullptr, 0x77, to, 10, &sctx);
            break;
        case msg_kind::tinjectdata:
            rc = tinjectdata(n->ep, out.data(), c.len, 0x77, to, 10);
            break;
        }
        ASSERT_EQ(rc, 0) << "the first operation to a new peer is accepted (case " << int(c.k) << ", " << c.len
                         << " bytes)";
        if (inj)
            std::memset(out.data(), 0xaa, out.size()); // an inject's buffer is the caller's again at return
        std::vector<cq_tagged_entry> got;
        std::vector<void *> want{&rctx};
        if (!inj)
            want.push_back(&sctx);
        wait_for(want, &got);
        for (const cq_tagged_entry &e : got) {
            if (e.op_context != &rctx)
                continue;
            EXPECT_EQ(e.len, c.len);
            if (tagged) {
                EXPECT_EQ(e.tag, 11u) << "the echo's tag is ours + 1";
            }
            if (data) {
                EXPECT_TRUE(e.flags & FI_REMOTE_CQ_DATA);
                EXPECT_EQ(e.data, 0x78u);
            }
        }
        for (std::size_t i = 0; i < c.len; i++)
            ASSERT_EQ(in[i], keep[i]) << "byte " << i << " of " << c.len << ", case " << int(c.k);
        EXPECT_EQ(in[c.len], 0xee);
        cq_tagged_entry e{};
        EXPECT_EQ(cq_read(n->cq, &e, 1), -FI_EAGAIN) << "nothing more: no duplicate";
        seed++;
    }
    EXPECT_EQ(p.stats().c, 0u) << "the peer saw no error";
}

TEST_F(first_op, RmaAndAtomicsAreAcceptedAndReachTheTarget)
{
    context c;
    // fi_write
    fresh();
    std::vector<std::uint8_t> out(5000);
    fill_pattern(out.data(), out.size(), 3);
    ASSERT_EQ(write(n->ep, out.data(), out.size(), nullptr, to, p.mem + 1000, p.key, &c), 0) << "fi_write";
    wait_for({&c});
    EXPECT_EQ(p.checksum(1000, out.size()), fnv(out.data(), out.size()));
    // fi_inject_write: the buffer is reusable at return
    fresh();
    std::vector<std::uint8_t> small(200), want(200);
    fill_pattern(small.data(), small.size(), 4);
    want = small;
    ASSERT_EQ(inject_write(n->ep, small.data(), small.size(), to, p.mem + 9000, p.key), 0) << "fi_inject_write";
    std::memset(small.data(), 0, small.size());
    wait_memory(9000, want);
    // ... up to inject_size, on the connection now up (the largest injects
    // are the ones closest to not fitting one message); one more is refused
    const std::size_t most_len = n->fi->tx_attr->inject_size;
    for (std::size_t len : {most_len - 8, most_len - 1, most_len}) {
        std::vector<std::uint8_t> most(len), most_want;
        fill_pattern(most.data(), most.size(), 6 + len);
        most_want = most;
        ASSERT_EQ(inject_write(n->ep, most.data(), most.size(), to, p.mem + 30000, p.key), 0)
            << "fi_inject_write of " << len << " bytes";
        std::memset(most.data(), 0, most.size());
        wait_memory(30000, most_want);
    }
    std::vector<std::uint8_t> over(most_len + 1);
    EXPECT_EQ(inject_write(n->ep, over.data(), over.size(), to, p.mem + 30000, p.key), -FI_EMSGSIZE);
    // fi_writedata
    fresh();
    ASSERT_EQ(writedata(n->ep, want.data(), 64, nullptr, 0x5a, to, p.mem + 12000, p.key, &c), 0) << "fi_writedata";
    wait_for({&c});
    EXPECT_EQ(p.checksum(12000, 64), fnv(want.data(), 64));
    // fi_read
    fresh();
    p.fill(20000, 3000, 9);
    std::vector<std::uint8_t> back(3000), expect(3000);
    fill_pattern(expect.data(), expect.size(), 9);
    ASSERT_EQ(read(n->ep, back.data(), back.size(), nullptr, to, p.mem + 20000, p.key, &c), 0) << "fi_read";
    wait_for({&c});
    EXPECT_EQ(back, expect);
    // fi_fetch_atomic: the old value is what the peer's memory held
    fresh();
    p.fill(64, 8, 5);
    std::uint64_t before = 0, add = 5, old = 0;
    {
        std::uint8_t b[8];
        fill_pattern(b, 8, 5);
        std::memcpy(&before, b, 8);
    }
    ASSERT_EQ(fetch_atomic(n->ep, &add, 1, nullptr, &old, nullptr, to, p.mem + 64, p.key, FI_UINT64, FI_SUM, &c), 0)
        << "fi_fetch_atomic";
    wait_for({&c});
    EXPECT_EQ(old, before);
    // fi_inject_atomic
    fresh();
    add = 7;
    ASSERT_EQ(inject_atomic(n->ep, &add, 1, to, p.mem + 64, p.key, FI_UINT64, FI_SUM), 0) << "fi_inject_atomic";
    add = 1000; // the operand was taken at the call
    {
        std::vector<std::uint8_t> v(8);
        std::uint64_t now = before + 5 + 7;
        std::memcpy(v.data(), &now, 8);
        wait_memory(64, v);
    }
    // fi_compare_atomic
    fresh();
    std::uint64_t cmp = before + 12, swp = 42;
    old = 0;
    ASSERT_EQ(compare_atomic(n->ep, &swp, 1, nullptr, &cmp, nullptr, &old, nullptr, to, p.mem + 64, p.key, FI_UINT64,
                             FI_CSWAP, &c),
              0)
        << "fi_compare_atomic";
    wait_for({&c});
    EXPECT_EQ(old, before + 12);
    std::vector<std::uint8_t> v(8);
    std::memcpy(v.data(), &swp, 8);
    EXPECT_EQ(p.checksum(64, 8), fnv(v.data(), 8));
    // fi_atomic
    fresh();
    add = 8;
    ASSERT_EQ(atomic(n->ep, &add, 1, nullptr, to, p.mem + 64, p.key, FI_UINT64, FI_SUM, &c), 0) << "fi_atomic";
    wait_for({&c});
    std::uint64_t now = 50;
    std::memcpy(v.data(), &now, 8);
    EXPECT_EQ(p.checksum(64, 8), fnv(v.data(), 8));
}

// FI_INJECT and FI_REMOTE_CQ_DATA apply to writes (fi_rma(3)): a readmsg
// that carries them is a read all the same, into the caller's buffer, as
// the first operation (queued until the connection is up) and on the
// connection; the target sees no remote CQ data.
TEST_F(first_op, ReadmsgWithWriteOnlyFlagsReadsIntoTheCallersBuffer)
{
    context c;
    fresh();
    p.fill(20000, 3000, 9);
    std::vector<std::uint8_t> expect(3000);
    fill_pattern(expect.data(), expect.size(), 9);
    const std::uint64_t data_before = p.stats().b;
    for (int round = 0; round < 2; round++) {
        std::vector<std::uint8_t> back(3000, 0);
        iovec v{back.data(), back.size()};
        rma_iov ri{p.mem + 20000, back.size(), p.key};
        msg_rma m;
        m.msg_iov = &v;
        m.iov_count = 1;
        m.addr = to;
        m.rma_iov = &ri;
        m.rma_iov_count = 1;
        m.context = &c;
        m.data = 7;
        ASSERT_EQ(readmsg(n->ep, &m, FI_COMPLETION | FI_INJECT | FI_REMOTE_CQ_DATA), 0) << round;
        wait_for({&c});
        EXPECT_EQ(back, expect) << (round ? "on the connection" : "the first operation");
    }
    EXPECT_EQ(p.stats().b, data_before) << "remote CQ data at the target";
}

// Operations posted while the connection forms are queued (64 per endpoint)
// and go in order once it is up; the 65th is -FI_EAGAIN until then. Sizes
// mix every path, injects and sends with completions.
TEST_F(first_op, QueuedOperationsKeepTheirOrderAndTheQueueIsBounded)
{
    fresh();
    constexpr int count = 80;
    const std::size_t sizes[] = {8, 600, 3000, 20000};
    std::vector<std::vector<std::uint8_t>> out(count), in(count);
    std::vector<context> rctx(count), sctx(count);
    for (int i = 0; i < count; i++) {
        std::size_t len = sizes[i % 4];
        out[i].resize(len);
        fill_pattern(out[i].data(), len, std::uint64_t(i) + 100);
        in[i].assign(len, 0xee);
        ASSERT_EQ(trecv(n->ep, in[i].data(), len, nullptr, FI_ADDR_UNSPEC, 0, ~0ULL, &rctx[i]), 0);
    }
    std::vector<void *> want;
    auto post = [&](int i) {
        const bool inj = i % 4 == 0;
        return inj ? tinject(n->ep, out[i].data(), out[i].size(), to, 1000 + i)
                   : tsend(n->ep, out[i].data(), out[i].size(), nullptr, to, 1000 + i, &sctx[i]);
    };
    // No progress between the calls: the connection cannot come up, so what
    // is accepted waits in the queue.
    int accepted = 0;
    for (; accepted < count; accepted++) {
        ssize_t rc = post(accepted);
        if (rc == -FI_EAGAIN)
            break;
        ASSERT_EQ(rc, 0);
        if (accepted % 4)
            want.push_back(&sctx[accepted]);
    }
    EXPECT_EQ(accepted, 64) << "the queue holds 64 operations (fi_endpoint: -FI_EAGAIN only when it is full)";
    ASSERT_GT(accepted, 0);
    // The rest as the queue and then the send queue take them; completions
    // read meanwhile are kept.
    std::vector<cq_tagged_entry> got;
    for (int i = accepted; i < count; i++) {
        std::vector<cq_tagged_entry> seen;
        ASSERT_EQ(retry(n->cq, [&] { return post(i); }, &seen), 0);
        for (const cq_tagged_entry &e : seen) {
            auto it = std::find(want.begin(), want.end(), e.op_context);
            if (it != want.end())
                want.erase(it); // a send's completion (receives are matched below)
            got.push_back(e);
        }
        if (i % 4)
            want.push_back(&sctx[i]);
    }
    for (int i = 0; i < count; i++)
        if (std::none_of(got.begin(), got.end(), [&](const cq_tagged_entry &e) { return e.op_context == &rctx[i]; }))
            want.push_back(&rctx[i]);
    wait_for(want, &got);
    // Receives match in posting order: the i-th echo is the i-th message sent.
    int r = 0;
    for (const cq_tagged_entry &e : got) {
        if (!(e.flags & FI_RECV))
            continue;
        ASSERT_EQ(e.op_context, &rctx[r]);
        EXPECT_EQ(e.tag, std::uint64_t(1001 + r)) << "FI_ORDER_SAS: echo " << r;
        EXPECT_EQ(e.len, out[r].size());
        EXPECT_EQ(in[r], out[r]) << "message " << r;
        r++;
    }
    EXPECT_EQ(r, count);
    cq_tagged_entry e{};
    EXPECT_EQ(cq_read(n->cq, &e, 1), -FI_EAGAIN) << "nothing duplicated";
    EXPECT_EQ(p.stats().a, std::uint64_t(count)) << "the peer got each message once";
}

/** An RDM node with a 300 ms connect timeout and peer process p in its AV;
 *  the peer answers one control request, then polls nothing for a while. */
struct silent_peer {
    // Nor does the peer's insert of our address: it would ask us first.
    peer_proc p{"rdm", "manual", "private", {"SHUNT_VQ_AV_CONNECT=0"}};
    node n;
    fi_addr_t to = FI_ADDR_NOTAVAIL;

    /** Open, insert the peer (which learns our address when @p peer_knows_us)
     *  and pause it for @p pause_ms. Call with ASSERT_NO_FATAL_FAILURE. */
    void open(std::uint64_t pause_ms, bool peer_knows_us)
    {
        // Our insert must not connect (the peer would answer before its
        // pause): the first operation does, as these tests need.
        ::setenv("SHUNT_VQ_CONNECT_TIMEOUT_MS", "300", 1);
        ::setenv("SHUNT_VQ_AV_CONNECT", "0", 1);
        int orc = n.open(FI_EP_RDM, false);
        ::unsetenv("SHUNT_VQ_CONNECT_TIMEOUT_MS");
        ::unsetenv("SHUNT_VQ_AV_CONNECT");
        ASSERT_EQ(orc, 0);
        ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
        if (peer_knows_us) {
            ASSERT_EQ(p.set_peer(n.addr), 0);
        }
        request pr;
        pr.op = pause_peer;
        pr.a = pause_ms;
        (void)p.call(pr); // it answers, then polls nothing for pause_ms
    }

    /** The contexts of error completions (each FI_ETIMEDOUT) until @p want
     *  arrived or 10 s passed; a successful completion is a failure. */
    std::vector<void *> failures(std::size_t want)
    {
        std::vector<void *> failed;
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (failed.size() < want && std::chrono::steady_clock::now() < end) {
            cq_tagged_entry e{};
            ssize_t k = cq_read(n.cq, &e, 1);
            if (k == 1) {
                ADD_FAILURE() << "no operation to the silent peer completes successfully";
                break;
            }
            if (k == -FI_EAVAIL) {
                cq_err_entry err{};
                if (cq_readerr(n.cq, &err, 0) != 1) {
                    ADD_FAILURE() << "cq_readerr after -FI_EAVAIL";
                    break;
                }
                EXPECT_EQ(err.err, FI_ETIMEDOUT);
                failed.push_back(err.op_context);
            } else {
                sched_yield();
            }
        }
        return failed;
    }
};

// A peer that does not answer (its process stopped polling): the queued
// operations fail with error completions (FI_ETIMEDOUT) after the connect
// timeout, every one once; nothing reaches the peer; later sends fail at
// the call.
TEST(FirstOpNoAnswer, QueuedOperationsFailWithErrorCompletions)
{
    silent_peer sp;
    ASSERT_NO_FATAL_FAILURE(sp.open(2000, false));
    node &n = sp.n;
    const fi_addr_t to = sp.to;
    std::uint8_t out[64] = {1, 2, 3};
    context s1, s2;
    ASSERT_EQ(send(n.ep, out, sizeof out, nullptr, to, &s1), 0);
    ASSERT_EQ(tsend(n.ep, out, sizeof out, nullptr, to, 5, &s2), 0);
    ASSERT_EQ(inject(n.ep, out, 16, to), 0);
    std::vector<void *> failed = sp.failures(3);
    ASSERT_EQ(failed.size(), 3u) << "each queued operation fails once, within the bound";
    EXPECT_EQ(failed[0], &s1) << "in the order they were posted";
    EXPECT_EQ(failed[1], &s2);
    EXPECT_EQ(failed[2], nullptr) << "the inject";
    EXPECT_EQ(send(n.ep, out, sizeof out, nullptr, to, &s1), -FI_EHOSTUNREACH) << "the peer is unreachable now";
    cq_tagged_entry e{};
    EXPECT_EQ(cq_read(n.cq, &e, 1), -FI_EAGAIN) << "nothing more";
    EXPECT_EQ(sp.p.stats().a, 0u) << "nothing reached the peer"; // answered once its pause is over
    n.close();
}

// After the timeout the peer wakes up: fabric.md promises that operations
// to it fail at the call (-FI_EHOSTUNREACH) until it connects to this
// endpoint itself, and then work again. The peer sends to us once its pause
// is over (it answers the stale connection requests first): that message
// arrives, and our sends to it work again, echoed byte for byte.
TEST(FirstOpNoAnswer, PeerThatWakesUpAndConnectsIsReachableAgain)
{
    silent_peer sp;
    ASSERT_NO_FATAL_FAILURE(sp.open(1000, true));
    node &n = sp.n;
    peer_proc &p = sp.p;
    const fi_addr_t to = sp.to;
    std::uint8_t out[64] = {1, 2, 3};
    context s1;
    ASSERT_EQ(send(n.ep, out, sizeof out, nullptr, to, &s1), 0);
    std::vector<void *> failed = sp.failures(1);
    ASSERT_EQ(failed.size(), 1u) << "the queued send failed within the bound";
    EXPECT_EQ(failed[0], &s1);
    EXPECT_EQ(send(n.ep, out, sizeof out, nullptr, to, &s1), -FI_EHOSTUNREACH);
    // The peer is back (its control answer comes after the pause) and sends
    // one tagged message to us.
    std::vector<std::uint8_t> in(4096), want(100);
    fill_pattern(want.data(), want.size(), 0);
    context rctx;
    ASSERT_EQ(trecv(n.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, 0x500, 0, &rctx), 0);
    request st;
    st.op = send_tagged;
    st.n = 1;
    st.a = 0x500;
    st.b = want.size();
    ASSERT_EQ(p.call(st).rc, 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(n.cq, e), 1) << "the woken peer's message arrives";
    EXPECT_EQ(e.op_context, &rctx);
    ASSERT_EQ(e.len, want.size());
    EXPECT_EQ(std::memcmp(in.data(), want.data(), want.size()), 0);
    // Now that it connected to us, our sends reach it again (echoed).
    std::vector<std::uint8_t> msg(200), back(200);
    fill_pattern(msg.data(), msg.size(), 9);
    context rc2, sc2;
    ASSERT_EQ(recv(n.ep, back.data(), back.size(), nullptr, FI_ADDR_UNSPEC, &rc2), 0);
    ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, msg.data(), msg.size(), nullptr, to, &sc2); }), 0);
    for (int i = 0; i < 2; i++) {
        cq_tagged_entry x{};
        ASSERT_EQ(wait_cq(n.cq, x), 1) << "send and its echo";
    }
    EXPECT_EQ(back, msg);
    n.close();
}

// On a host-local device fi_av_insert attaches the peer's memory, so that the
// first operation does not wait for it (SHUNT_VQ_AV_ATTACH), and fi_av_remove
// lets it go: a peer that exits while its address is in our AV leaves its
// segment held by us until the address is removed, and not after. (Without
// the connection the insert also starts: a connection holds its peer until
// the endpoint closes, as after any operation.)
TEST(AvAttach, InsertHoldsThePeersSegmentUntilTheAddressIsRemoved)
{
    auto p = std::make_unique<peer_proc>("rdm");
    shunt::prov::vqprov::ep_addr a;
    std::memcpy(&a, p->addr, sizeof a);
    ASSERT_GT(a.len, 0u);
    ASSERT_LE(a.len, sizeof a.name);
    const std::string seg(a.name, a.len);
    ASSERT_TRUE(env::segment_exists(seg)) << seg;
    node n;
    ::setenv("SHUNT_VQ_AV_CONNECT", "0", 1);
    int orc = n.open(FI_EP_RDM, false);
    ::unsetenv("SHUNT_VQ_AV_CONNECT");
    ASSERT_EQ(orc, 0);
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(n.av, p->addr, 1, &to, 0, nullptr), 1);
    p.reset(); // the peer closes everything and exits
    EXPECT_TRUE(env::segment_exists(seg)) << "the insert did not attach the peer's segment";
    ASSERT_EQ(av_remove(n.av, &to, 1, 0), 0);
    EXPECT_FALSE(env::segment_exists(seg)) << "the removed address still holds the peer's segment";
    n.close();
}

namespace {

/** An RDM node opened with SHUNT_VQ_AV_CONNECT at @p av_connect (null:
 *  the default) at threading level @p thr; its vq.ep.<n>.cm block in
 *  @p cmb. */
void open_counted(node &n, const char *av_connect, std::string &cmb, threading thr = FI_THREAD_DOMAIN)
{
    const std::vector<std::string> before = env::stats::list();
    if (av_connect)
        ::setenv("SHUNT_VQ_AV_CONNECT", av_connect, 1);
    int orc = n.open(FI_EP_RDM, false, FI_TRANSMIT | FI_RECV, thr);
    ::unsetenv("SHUNT_VQ_AV_CONNECT");
    ASSERT_EQ(orc, 0);
    cmb = cm_block(before);
    ASSERT_NE(cmb, "") << "no vq.ep.<n>.cm block for the endpoint";
    ASSERT_EQ(stat(cmb, "peers"), 0u);
    ASSERT_EQ(stat(cmb, "qps_created"), 1u) << "the spare QP";
}

/** @p n sends @p len checked bytes to @p to, which echoes them (fab_peer
 *  with our address): both completions, bytes compared. */
void echo_once(node &n, fi_addr_t to, std::size_t len, std::uint64_t seed)
{
    std::vector<std::uint8_t> out(len), in(len + 16, 0xee);
    fill_pattern(out.data(), len, seed);
    context rctx, sctx;
    ASSERT_EQ(recv(n.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(send(n.ep, out.data(), len, nullptr, to, &sctx), 0);
    for (int i = 0; i < 2; i++) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1) << "the send and its echo";
        if (e.op_context == &rctx)
            ASSERT_EQ(e.len, len);
        else
            ASSERT_EQ(e.op_context, &sctx);
    }
    EXPECT_EQ(std::memcmp(in.data(), out.data(), len), 0) << "the echo's bytes";
}

} // namespace

// fi_av_insert of a live host-local peer starts the connection to it
// (SHUNT_VQ_AV_CONNECT): the connection record exists and the REQ is sent
// before any operation. The peer, inserting us afterwards, finds the REQ
// and accepts it instead of asking itself: one connection, on our spare QP
// (no QP of ours accepts a request of the peer). Messages then go both ways.
TEST(AvConnect, InsertStartsTheConnection)
{
    peer_proc p{"rdm"};
    node n;
    std::string cmb;
    ASSERT_NO_FATAL_FAILURE(open_counted(n, nullptr, cmb));
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    EXPECT_EQ(stat(cmb, "peers"), 1u) << "the insert made no connection";
    ASSERT_EQ(p.set_peer(n.addr), 0);
    ASSERT_NO_FATAL_FAILURE(echo_once(n, to, 100, 3));
    ASSERT_NO_FATAL_FAILURE(echo_once(n, to, 5000, 4));
    EXPECT_EQ(stat(cmb, "qps_created"), 1u) << "a second QP: the peer asked too, one connection each way";
    EXPECT_EQ(stat(cmb, "half_open"), 0u);
    n.close();
}

// The other order: the peer inserted us first, so its REQ waits in our UD
// queue. Our insert answers it: the peer's connection is accepted (on our
// spare), and our side sends over it at once, asking nothing itself.
TEST(AvConnect, InsertAnswersTheRequestOfAPeerThatInsertedUsFirst)
{
    peer_proc p{"rdm"};
    node n;
    std::string cmb;
    ASSERT_NO_FATAL_FAILURE(open_counted(n, nullptr, cmb));
    ASSERT_EQ(p.set_peer(n.addr), 0); // the peer's insert sends its REQ to us
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    EXPECT_EQ(stat(cmb, "peers"), 1u) << "the peer's request was not answered by the insert";
    EXPECT_EQ(stat(cmb, "half_open"), 1u) << "accepted: open until the peer's first message";
    ASSERT_NO_FATAL_FAILURE(echo_once(n, to, 100, 5));
    EXPECT_EQ(stat(cmb, "qps_created"), 1u) << "a second QP: we asked as well";
    EXPECT_EQ(stat(cmb, "half_open"), 0u) << "the peer finished its connection";
    n.close();
}

// SHUNT_VQ_AV_CONNECT=0: the insert connects nothing, the first operation
// does; and an insert's connection whose peer does not answer is not an
// error: the first operation after the connect timeout still reaches the
// peer once it answers.
TEST(AvConnect, ZeroLeavesItToTheFirstOperation)
{
    peer_proc p{"rdm"};
    node n;
    std::string cmb;
    ASSERT_NO_FATAL_FAILURE(open_counted(n, "0", cmb));
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    EXPECT_EQ(stat(cmb, "peers"), 0u) << "a connection record at the insert";
    ASSERT_EQ(p.set_peer(n.addr), 0);
    ASSERT_NO_FATAL_FAILURE(echo_once(n, to, 100, 6));
    EXPECT_EQ(stat(cmb, "peers"), 1u);
    n.close();
}

// The insert connects only where it may run the endpoint's connection
// management: under the endpoint's lock (FI_THREAD_SAFE) or at
// FI_THREAD_DOMAIN. At FI_THREAD_ENDPOINT the endpoint has no lock and an
// insert may come from another thread: nothing is connected by it.
TEST(AvConnect, OnlyWhereTheInsertMayTouchTheEndpoint)
{
    peer_proc p{"rdm"};
    for (threading thr : {FI_THREAD_SAFE, FI_THREAD_ENDPOINT}) {
        node n;
        std::string cmb;
        ASSERT_NO_FATAL_FAILURE(open_counted(n, nullptr, cmb, thr));
        fi_addr_t to = FI_ADDR_NOTAVAIL;
        ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
        EXPECT_EQ(stat(cmb, "peers"), thr == FI_THREAD_SAFE ? 1u : 0u) << "threading " << int(thr);
        ASSERT_EQ(p.set_peer(n.addr), 0);
        ASSERT_NO_FATAL_FAILURE(echo_once(n, to, 100, 12 + int(thr)));
        n.close();
    }
}

TEST(AvConnect, AnUnansweredInsertIsNotAnError)
{
    peer_proc p{"rdm"};
    node n;
    ::setenv("SHUNT_VQ_CONNECT_TIMEOUT_MS", "200", 1);
    std::string cmb;
    open_counted(n, nullptr, cmb);
    ::unsetenv("SHUNT_VQ_CONNECT_TIMEOUT_MS");
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    request pr;
    pr.op = pause_peer;
    pr.a = 1000;
    (void)p.call(pr); // it answers, then polls nothing for a second
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    EXPECT_EQ(stat(cmb, "peers"), 1u) << "the insert made no connection";
    // Progress for longer than the connect timeout while the peer is away:
    // nothing fails, there is no operation to fail.
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
    while (std::chrono::steady_clock::now() < until) {
        cq_tagged_entry e{};
        ASSERT_EQ(cq_read(n.cq, &e, 1), -FI_EAGAIN) << "a completion with no operation posted";
        sched_yield();
    }
    // The peer is back (after its pause it answers the REQ waiting, and
    // learns our address): the first operation connects and is echoed.
    ASSERT_EQ(p.set_peer(n.addr), 0);
    ASSERT_NO_FATAL_FAILURE(echo_once(n, to, 100, 7));
    n.close();
}

// The insert's request is accepted, but we do not progress for longer than
// the peer keeps a connection whose requester has not finished it: the
// peer frees its end. The reply we then read names a QP that is gone; the
// first operation's connection is asked for again rather than failed, and
// its message is echoed.
TEST(AvConnect, AReplyThePeerGaveUpOnStartsTheConnectionAgain)
{
    peer_proc p{"rdm", "manual", "private", {"SHUNT_VQ_CONNECT_TIMEOUT_MS=200"}};
    node n;
    std::string cmb;
    ASSERT_NO_FATAL_FAILURE(open_counted(n, nullptr, cmb));
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    ASSERT_EQ(p.set_peer(n.addr), 0); // it accepts our request, by now or in its next polls
    std::this_thread::sleep_for(std::chrono::milliseconds(700)); // it gives the connection up
    ASSERT_NO_FATAL_FAILURE(echo_once(n, to, 100, 8));
    EXPECT_EQ(stat(cmb, "qps_created"), 2u) << "the connection was not asked for again";
    ASSERT_NO_FATAL_FAILURE(echo_once(n, to, 3000, 9));
    n.close();
}
