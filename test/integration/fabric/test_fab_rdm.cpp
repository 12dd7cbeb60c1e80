// shm provider, FI_EP_RDM, two real processes: messages, tagged matching
// (unexpected, wildcards), inject, selective completion with counters, RMA
// and atomics, all data checked byte for byte.
#include "fab_client.h"
#include "fabric/util/rxq.h"

using namespace shunt;
using namespace shunt::fabric;
using namespace shunt::test::fab;

namespace {

struct rdm : ::testing::Test {
    peer_proc p{"rdm"};
    node n;
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    void SetUp() override { connect_peer(n, p, FI_EP_RDM, to); }
    void TearDown() override { n.close(); }

    // Send @p len bytes (pattern @p seed) and check the echo byte for byte.
    void echo(std::size_t len, std::uint64_t seed, bool tagged = false, std::uint64_t tag = 0)
    {
        std::vector<std::uint8_t> out(len), in(len + 16, 0xee);
        fill_pattern(out.data(), len, seed);
        context rctx, sctx;
        if (tagged)
            ASSERT_EQ(trecv(n.ep, in.data(), in.size(), nullptr, to, tag + 1, 0, &rctx), 0);
        else
            ASSERT_EQ(recv(n.ep, in.data(), in.size(), nullptr, to, &rctx), 0);
        ssize_t rc = retry(n.cq, [&] {
            return tagged ? tsend(n.ep, out.data(), len, nullptr, to, tag, &sctx)
                          : send(n.ep, out.data(), len, nullptr, to, &sctx);
        });
        ASSERT_EQ(rc, 0) << len;
        bool sent = false, got = false;
        for (int i = 0; i < 2 && !(sent && got); i++) {
            cq_tagged_entry e{};
            fi_addr_t src = 0;
            ASSERT_EQ(wait_cq(n.cq, e, &src), 1) << "length " << len;
            if (e.op_context == &sctx) {
                EXPECT_EQ(e.flags, FI_SEND | (tagged ? FI_TAGGED : FI_MSG));
                sent = true;
            } else {
                ASSERT_EQ(e.op_context, &rctx);
                EXPECT_EQ(e.len, len);
                EXPECT_EQ(src, to) << "FI_SOURCE";
                if (tagged) {
                    EXPECT_EQ(e.tag, tag + 1);
                }
                got = true;
            }
        }
        ASSERT_TRUE(sent && got);
        for (std::size_t i = 0; i < len; i++)
            ASSERT_EQ(in[i], out[i]) << "byte " << i << " of " << len;
        EXPECT_EQ(in[len], 0xee) << "nothing written past the message";
    }
};

} // namespace

TEST_F(rdm, MsgEchoEverySizeByteForByte)
{
    std::uint64_t seed = 1;
    // The tail reuses the receiver's kept staging buffer for smaller
    // fragmented messages, then grows past what it keeps.
    for (std::size_t len : {0, 1, 47, 48, 63, 64, 65, 991, 992, 993, 4096, 65536, 200000, 2000, 1500, 70000, 5000})
        echo(len, seed++);
}

TEST_F(rdm, TaggedEchoAndSenddataCarryTagAndData)
{
    echo(100, 7, true, 0x5150);
    std::uint8_t in[64] = {}, out[32];
    fill_pattern(out, sizeof out, 3);
    context rctx;
    ASSERT_EQ(recv(n.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(retry(n.cq, [&] { return senddata(n.ep, out, sizeof out, nullptr, 0x1234, to, nullptr); }), 0);
    for (int i = 0; i < 2; i++) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1);
        if (e.op_context == &rctx) {
            EXPECT_TRUE(e.flags & FI_REMOTE_CQ_DATA);
            EXPECT_EQ(e.data, 0x1235u) << "the peer echoes data + 1";
            EXPECT_EQ(std::memcmp(in, out, sizeof out), 0);
        }
    }
}

TEST_F(rdm, TaggedUnexpectedMessagesMatchLaterWithWildcards)
{
    request r;
    r.op = send_tagged;
    r.n = 4;
    r.a = 0x1000;
    r.b = 100;
    ASSERT_EQ(p.call(r).rc, 0);
    // Wait until all four sit in our unexpected queue: peek for the last one.
    context pctx;
    msg_tagged pk;
    pk.tag = 0x1003;
    pk.context = &pctx;
    pk.addr = FI_ADDR_UNSPEC;
    bool seen = false;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!seen && std::chrono::steady_clock::now() < end) {
        ASSERT_EQ(trecvmsg(n.ep, &pk, FI_PEEK), 0);
        cq_tagged_entry e{};
        ssize_t rc = wait_cq(n.cq, e);
        if (rc == 1) {
            seen = true;
            EXPECT_EQ(e.len, 100u);
            EXPECT_EQ(e.tag, 0x1003u);
        } else {
            ASSERT_EQ(rc, -FI_EAVAIL);
            cq_err_entry err{};
            ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
            ASSERT_EQ(err.err, FI_ENOMSG);
            sched_yield();
        }
    }
    ASSERT_TRUE(seen);
    auto take = [&](std::uint64_t tag, std::uint64_t ignore, fi_addr_t src, std::uint64_t want_tag) {
        std::uint8_t in[128] = {};
        context c;
        ASSERT_EQ(trecv(n.ep, in, sizeof in, nullptr, src, tag, ignore, &c), 0);
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1);
        ASSERT_EQ(e.op_context, &c);
        ASSERT_EQ(e.tag, want_tag);
        std::uint8_t want[100];
        fill_pattern(want, sizeof want, want_tag - 0x1000);
        EXPECT_EQ(std::memcmp(in, want, sizeof want), 0) << std::hex << want_tag;
    };
    take(0x1002, 0, FI_ADDR_UNSPEC, 0x1002);  // exact, out of arrival order
    take(0x1000, 0xff, FI_ADDR_UNSPEC, 0x1000); // wildcard: the oldest match
    take(0x1fff, 0xfff, to, 0x1001);           // directed to the peer, wildcard
    take(0, ~0ULL, FI_ADDR_UNSPEC, 0x1003);    // anything
}

TEST_F(rdm, InjectReturnsBufferAtOnceUpToInjectSize)
{
    for (std::size_t len : {1, 8, 33, 64}) {
        std::uint8_t in[128] = {}, out[64];
        fill_pattern(out, len, len);
        std::vector<std::uint8_t> keep(out, out + len);
        context rctx;
        ASSERT_EQ(recv(n.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
        ASSERT_EQ(retry(n.cq, [&] { return inject(n.ep, out, len, to); }), 0);
        std::memset(out, 0, sizeof out); // the buffer is ours again at once
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1) << len;
        EXPECT_EQ(e.op_context, &rctx) << "inject generates no completion of its own";
        EXPECT_EQ(std::memcmp(in, keep.data(), len), 0);
    }
    std::vector<std::uint8_t> big(n.fi->tx_attr->inject_size + 1);
    EXPECT_EQ(inject(n.ep, big.data(), big.size(), to), -FI_EMSGSIZE);
    std::vector<std::uint8_t> in(big.size());
    context rctx;
    ASSERT_EQ(recv(n.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    fill_pattern(big.data(), big.size() - 1, 9);
    ASSERT_EQ(retry(n.cq, [&] { return tinject(n.ep, big.data(), big.size() - 1, to, 77); }), 0);
    std::vector<std::uint8_t> tin(big.size());
    context tctx;
    ASSERT_EQ(trecv(n.ep, tin.data(), tin.size(), nullptr, FI_ADDR_UNSPEC, 78, 0, &tctx), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(n.cq, e), 1);
    EXPECT_EQ(e.op_context, &tctx);
    EXPECT_EQ(e.len, big.size() - 1);
    EXPECT_EQ(std::memcmp(tin.data(), big.data(), big.size() - 1), 0);
    EXPECT_EQ(cancel(n.ep, &rctx), 0);
}

TEST_F(rdm, MessagesArriveInOrder)
{
    constexpr int count = 300;
    std::vector<std::uint32_t> got;
    std::uint32_t in[8][4];
    context rc[8];
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(recv(n.ep, in[i], sizeof in[i], nullptr, FI_ADDR_UNSPEC, &rc[i]), 0);
    int sent = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (int(got.size()) < count && std::chrono::steady_clock::now() < end) {
        if (sent < count) {
            std::uint32_t v[4] = {std::uint32_t(sent), 1, 2, 3};
            ssize_t r = inject(n.ep, v, sizeof v, to);
            if (r == 0)
                sent++;
            else
                ASSERT_EQ(r, -FI_EAGAIN);
        }
        cq_tagged_entry e{};
        ssize_t k = cq_read(n.cq, &e, 1);
        if (k == 1) {
            int i = int(static_cast<context *>(e.op_context) - rc);
            ASSERT_TRUE(i >= 0 && i < 8);
            got.push_back(in[i][0]);
            ASSERT_EQ(recv(n.ep, in[i], sizeof in[i], nullptr, FI_ADDR_UNSPEC, &rc[i]), 0);
        } else {
            ASSERT_EQ(k, -FI_EAGAIN);
            sched_yield();
        }
    }
    ASSERT_EQ(int(got.size()), count);
    for (int i = 0; i < count; i++)
        ASSERT_EQ(got[std::size_t(i)], std::uint32_t(i)) << "FI_ORDER_SAS";
}

TEST_F(rdm, RmaWriteAndReadByteForByte)
{
    constexpr std::size_t off = 12345, len = 300000;
    std::vector<std::uint8_t> out(len), back(len);
    fill_pattern(out.data(), len, 42);
    context c;
    ASSERT_EQ(retry(n.cq, [&] { return write(n.ep, out.data(), len, nullptr, to, p.mem + off, p.key, &c); }), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(n.cq, e), 1);
    EXPECT_EQ(e.op_context, &c);
    EXPECT_EQ(e.flags, FI_RMA | FI_WRITE);
    EXPECT_EQ(p.checksum(off, len), fnv(out.data(), len)) << "the peer's memory holds exactly what was written";
    // read it back into a registered buffer (with its descriptor)
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(n.domain, back.data(), len, FI_READ, 0, 0, 0, &mr, nullptr), 0);
    void *desc = mr_desc(mr);
    ASSERT_EQ(retry(n.cq, [&] { return read(n.ep, back.data(), len, desc, to, p.mem + off, p.key, &c); }), 0);
    ASSERT_EQ(wait_cq(n.cq, e), 1);
    EXPECT_EQ(e.flags, FI_RMA | FI_READ);
    EXPECT_EQ(back, out);
    // a small inline write with remote CQ data
    std::uint64_t v = 0x0102030405060708ULL;
    ASSERT_EQ(retry(n.cq, [&] { return writedata(n.ep, &v, 8, nullptr, 0xabcd, to, p.mem, p.key, &c); }), 0);
    ASSERT_EQ(wait_cq(n.cq, e), 1);
    std::vector<std::uint8_t> vb(8);
    std::memcpy(vb.data(), &v, 8);
    EXPECT_EQ(p.checksum(0, 8), fnv(vb.data(), 8));
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    response s;
    do
        s = p.stats();
    while (s.b == 0 && std::chrono::steady_clock::now() < end);
    EXPECT_EQ(s.b, 1u) << "remote CQ data event at the target";
    EXPECT_EQ(s.n, 0xabcdu);
    EXPECT_EQ(close(&mr->fid), 0);
}

TEST_F(rdm, RmaBadKeyOrRangeIsAnErrorCompletionNotCorruption)
{
    p.fill(0, 4096, 5);
    std::uint64_t before = p.checksum(0, 4096);
    std::uint8_t buf[64] = {1, 2, 3};
    context c;
    ASSERT_EQ(retry(n.cq, [&] { return write(n.ep, buf, sizeof buf, nullptr, to, p.mem, p.key + 0x100, &c); }), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(n.cq, e), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, &c);
    EXPECT_EQ(err.err, FI_EACCES);
    ASSERT_EQ(retry(n.cq, [&] { return write(n.ep, buf, sizeof buf, nullptr, to, p.mem + (1 << 20) - 8, p.key, &c); }),
              0);
    ASSERT_EQ(wait_cq(n.cq, e), -FI_EAVAIL);
    ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_EACCES) << "past the end of the region";
    EXPECT_EQ(p.checksum(0, 4096), before);
    echo(10, 1); // the endpoint still works
}

TEST_F(rdm, AtomicsFetchAddCompareSwapAndRead)
{
    p.fill(0, 64, 0);
    std::uint64_t init[8];
    std::memset(init, 0, sizeof init);
    context c;
    cq_tagged_entry e{};
    // start from a known value with an RMA write
    ASSERT_EQ(retry(n.cq, [&] { return write(n.ep, init, sizeof init, nullptr, to, p.mem, p.key, &c); }), 0);
    ASSERT_EQ(wait_cq(n.cq, e), 1);
    for (std::uint64_t i = 0; i < 10; i++) {
        std::uint64_t add = 5, old = ~0ULL;
        ASSERT_EQ(retry(n.cq, [&] {
                      return fetch_atomic(n.ep, &add, 1, nullptr, &old, nullptr, to, p.mem + 8, p.key, FI_UINT64,
                                          FI_SUM, &c);
                  }),
                  0);
        ASSERT_EQ(wait_cq(n.cq, e), 1);
        EXPECT_EQ(e.flags, FI_ATOMIC | FI_READ);
        EXPECT_EQ(old, 5 * i);
    }
    std::uint64_t add = 100;
    ASSERT_EQ(retry(n.cq, [&] { return atomic(n.ep, &add, 1, nullptr, to, p.mem + 8, p.key, FI_INT64, FI_SUM, &c); }),
              0);
    ASSERT_EQ(wait_cq(n.cq, e), 1);
    EXPECT_EQ(e.flags, FI_ATOMIC | FI_WRITE);
    std::uint64_t cmp = 150, swp = 7, old = 0;
    ASSERT_EQ(retry(n.cq, [&] {
                  return compare_atomic(n.ep, &swp, 1, nullptr, &cmp, nullptr, &old, nullptr, to, p.mem + 8, p.key,
                                        FI_UINT64, FI_CSWAP, &c);
              }),
              0);
    ASSERT_EQ(wait_cq(n.cq, e), 1);
    EXPECT_EQ(old, 150u);
    std::uint64_t cur = 0, dummy = 0;
    ASSERT_EQ(retry(n.cq, [&] {
                  return fetch_atomic(n.ep, &dummy, 1, nullptr, &cur, nullptr, to, p.mem + 8, p.key, FI_UINT64,
                                      FI_ATOMIC_READ, &c);
              }),
              0);
    ASSERT_EQ(wait_cq(n.cq, e), 1);
    EXPECT_EQ(cur, 7u);
    std::uint8_t want[16] = {};
    std::memcpy(want + 8, &cur, 8);
    EXPECT_EQ(p.checksum(0, 16), fnv(want, 16)) << "the neighbouring word is untouched";
    std::size_t count = 0;
    EXPECT_EQ(atomicvalid(n.ep, FI_UINT64, FI_SUM, &count), 0);
    EXPECT_EQ(count, 1u);
    EXPECT_EQ(atomicvalid(n.ep, FI_DOUBLE, FI_SUM, &count), -FI_EOPNOTSUPP);
    EXPECT_EQ(compare_atomicvalid(n.ep, FI_UINT64, FI_CSWAP_GT, &count), -FI_EOPNOTSUPP);
    EXPECT_EQ(atomic(n.ep, &add, 1, nullptr, to, p.mem, p.key, FI_UINT32, FI_SUM, &c), -FI_EOPNOTSUPP);
}

TEST_F(rdm, DeliveryCompleteAndInjectCompleteLevels)
{
    std::uint8_t in[64], out[64];
    fill_pattern(out, sizeof out, 11);
    for (std::uint64_t level : {FI_INJECT_COMPLETE, FI_TRANSMIT_COMPLETE, FI_DELIVERY_COMPLETE}) {
        context rctx, sctx;
        ASSERT_EQ(recv(n.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
        iovec v{out, sizeof out};
        msg m;
        m.msg_iov = &v;
        m.iov_count = 1;
        m.addr = to;
        m.context = &sctx;
        ASSERT_EQ(retry(n.cq, [&] { return sendmsg(n.ep, &m, level | FI_COMPLETION); }), 0);
        bool s = false, r = false;
        for (int i = 0; i < 2; i++) {
            cq_tagged_entry e{};
            ASSERT_EQ(wait_cq(n.cq, e), 1) << level;
            s |= e.op_context == &sctx;
            r |= e.op_context == &rctx;
        }
        EXPECT_TRUE(s && r);
        EXPECT_EQ(std::memcmp(in, out, sizeof out), 0);
    }
    context big;
    std::vector<std::uint8_t> large(50000);
    fill_pattern(large.data(), large.size(), 3);
    std::vector<std::uint8_t> lin(50000);
    context lr;
    ASSERT_EQ(recv(n.ep, lin.data(), lin.size(), nullptr, FI_ADDR_UNSPEC, &lr), 0);
    iovec v{large.data(), large.size()};
    msg m;
    m.msg_iov = &v;
    m.iov_count = 1;
    m.addr = to;
    m.context = &big;
    ASSERT_EQ(retry(n.cq, [&] { return sendmsg(n.ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION); }), 0);
    for (int i = 0; i < 2; i++) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1);
    }
    EXPECT_EQ(lin, large);
}

TEST_F(rdm, CancelAndCloseWithOutstandingOperations)
{
    std::uint8_t in[64];
    context c;
    ASSERT_EQ(trecv(n.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, 0xdead, 0, &c), 0);
    ASSERT_EQ(cancel(n.ep, &c), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(n.cq, e), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
    EXPECT_EQ(err.err, FI_ECANCELED);
    EXPECT_EQ(err.op_context, &c);
    // post receives and close: no completion, no crash
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(recv(n.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
}

TEST(RdmSelective, SelectiveCompletionWithCountersAcrossProcesses)
{
    peer_proc p{"rdm"};
    node n;
    info *h = shm_hints(FI_EP_RDM, false);
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &n.fi), 0);
    freeinfo(h);
    ASSERT_EQ(fabric_open(n.fi->fabric_attr, &n.fabric, nullptr), 0);
    ASSERT_EQ(domain_open(n.fabric, n.fi, &n.domain, nullptr), 0);
    cq_attr ca;
    ca.format = FI_CQ_FORMAT_TAGGED;
    ASSERT_EQ(cq_open(n.domain, &ca, &n.cq, nullptr), 0);
    av_attr aa;
    ASSERT_EQ(av_open(n.domain, &aa, &n.av, nullptr), 0);
    fid_cntr *sent = nullptr, *recvd = nullptr;
    ASSERT_EQ(cntr_open(n.domain, nullptr, &sent, nullptr), 0);
    ASSERT_EQ(cntr_open(n.domain, nullptr, &recvd, nullptr), 0);
    ASSERT_EQ(endpoint(n.domain, n.fi, &n.ep, nullptr), 0);
    ASSERT_EQ(ep_bind(n.ep, &n.av->fid, 0), 0);
    ASSERT_EQ(ep_bind(n.ep, &n.cq->fid, FI_TRANSMIT | FI_SELECTIVE_COMPLETION), 0);
    ASSERT_EQ(ep_bind(n.ep, &sent->fid, FI_SEND), 0);
    ASSERT_EQ(ep_bind(n.ep, &recvd->fid, FI_RECV), 0);
    EXPECT_EQ(enable(n.ep), -FI_ENOCQ) << "the receive side still needs a CQ";
    ASSERT_EQ(ep_bind(n.ep, &n.cq->fid, FI_RECV | FI_SELECTIVE_COMPLETION), 0);
    ASSERT_EQ(enable(n.ep), 0);
    std::size_t len = sizeof n.addr;
    ASSERT_EQ(getname(&n.ep->fid, n.addr, &len), 0);
    fi_addr_t to;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    ASSERT_EQ(p.set_peer(n.addr), 0);
    constexpr int N = 20;
    std::vector<std::array<std::uint8_t, 32>> in(N);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(recv(n.ep, in[std::size_t(i)].data(), 32, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    for (int i = 0; i < N; i++) {
        std::uint8_t out[32];
        fill_pattern(out, sizeof out, std::uint64_t(i));
        ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, out, sizeof out, nullptr, to, nullptr); }), 0);
    }
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((cntr_read(sent) < N || cntr_read(recvd) < N) && std::chrono::steady_clock::now() < end)
        sched_yield();
    EXPECT_EQ(cntr_read(sent), std::uint64_t(N));
    EXPECT_EQ(cntr_read(recvd), std::uint64_t(N));
    EXPECT_EQ(cntr_readerr(sent), 0u);
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(n.cq, &e, 1), -FI_EAGAIN) << "no completion was asked for";
    for (int i = 0; i < N; i++) {
        std::uint8_t want[32];
        fill_pattern(want, sizeof want, std::uint64_t(i));
        EXPECT_EQ(std::memcmp(in[std::size_t(i)].data(), want, 32), 0) << i;
    }
    // a failing operation still reports: RMA with a bad key
    std::uint8_t b[8] = {};
    context c;
    ASSERT_EQ(retry(n.cq, [&] { return write(n.ep, b, 8, nullptr, to, p.mem, p.key ^ 0x55, &c); }), 0);
    ASSERT_EQ(wait_cq(n.cq, e), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, &c);
    (void)close(&n.ep->fid);
    n.ep = nullptr;
    EXPECT_EQ(close(&sent->fid), 0);
    EXPECT_EQ(close(&recvd->fid), 0);
    n.close();
}

// An inject_write or inject_atomic completes when it is posted, and its
// FI_WRITE counter counts it then. One that the target refuses later (a bad
// key) is reported as an error entry with the endpoint's context, and
// counted no second time: the counter counts each operation once,
// "completed successfully or in error" (fi_endpoint(3)). A write with a
// completion that fails is counted once, as an error.
TEST(RdmCounters, AnInjectRefusedByTheTargetIsCountedOnce)
{
    peer_proc p{"rdm"};
    node n;
    n.write_counter = true;
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    connect_peer(n, p, FI_EP_RDM, to);
    std::uint8_t b[8] = {1};
    ASSERT_EQ(retry(n.cq, [&] { return inject_write(n.ep, b, sizeof b, to, p.mem, p.key ^ 0x55); }), 0);
    std::uint64_t one = 1;
    ASSERT_EQ(retry(n.cq, [&] { return inject_atomic(n.ep, &one, 1, to, p.mem + 64, p.key ^ 0x55, FI_UINT64, FI_SUM); }),
              0);
    for (int i = 0; i < 2; i++) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), -FI_EAVAIL) << "the target's refusal, reported";
        cq_err_entry err{};
        ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
        EXPECT_EQ(err.err, FI_EACCES);
    }
    EXPECT_EQ(cntr_read(n.wcount), 2u) << "counted when posted";
    EXPECT_EQ(cntr_readerr(n.wcount), 0u) << "and not again";
    context c;
    ASSERT_EQ(retry(n.cq, [&] { return write(n.ep, b, sizeof b, nullptr, to, p.mem, p.key ^ 0x55, &c); }), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(n.cq, e), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, &c);
    EXPECT_EQ(cntr_read(n.wcount), 2u);
    EXPECT_EQ(cntr_readerr(n.wcount), 1u) << "a write with a completion: counted once, as an error";
    n.close();
}

TEST(RdmAuto, AutoProgressEchoWithBlockingReads)
{
    peer_proc p{"rdm", "auto"};
    node n;
    ASSERT_EQ(n.open(FI_EP_RDM, true), 0);
    ASSERT_EQ(n.fi->domain_attr->data_progress, FI_PROGRESS_AUTO);
    fi_addr_t to;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    ASSERT_EQ(p.set_peer(n.addr), 0);
    std::vector<std::uint8_t> out(5000), in(5000);
    fill_pattern(out.data(), out.size(), 77);
    context rctx, sctx;
    ASSERT_EQ(recv(n.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ssize_t rc;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((rc = send(n.ep, out.data(), out.size(), nullptr, to, &sctx)) == -FI_EAGAIN &&
           std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(1)); // no cq_read: the service connects
    ASSERT_EQ(rc, 0);
    for (int i = 0; i < 2; i++) {
        cq_tagged_entry e{};
        ASSERT_EQ(cq_sread(n.cq, &e, 1, nullptr, 10000), 1);
    }
    EXPECT_EQ(in, out);
    n.close();
}

// FI_THREAD_SAFE: two threads inject to one peer at once, messages and
// tagged messages in turn, while a third reads the CQ (the endpoint's
// progress); the peer echoes every message (a tagged one with its tag + 1).
// Once connected the injects take the fast path under the endpoint's lock,
// beside progress and each other: every message comes back exactly once, in
// each sender's order among the messages and among the tagged ones (the two
// are matched apart: one waiting unexpected for its receive completes after
// the other kind's later ones), its bytes and tag intact.
TEST(RdmThreadSafe, InjectAndSendAtThreadSafeFromTwoThreads)
{
    peer_proc p{"rdm"};
    node n;
    ASSERT_EQ(n.open(FI_EP_RDM, false, FI_TRANSMIT | FI_RECV, FI_THREAD_SAFE), 0);
    ASSERT_EQ(n.fi->domain_attr->threading, FI_THREAD_SAFE);
    fi_addr_t to;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    ASSERT_EQ(p.set_peer(n.addr), 0);
    constexpr int per_thread = 2000, posted = 256;
    constexpr std::size_t len = 16;
    std::vector<std::array<std::uint8_t, 64>> in(posted);
    std::vector<context> rc(in.size());
    // The first half of the buffers take messages, the second tagged ones.
    auto post = [&](std::size_t i) {
        return i < posted / 2 ? recv(n.ep, in[i].data(), 64, nullptr, FI_ADDR_UNSPEC, &rc[i])
                              : trecv(n.ep, in[i].data(), 64, nullptr, FI_ADDR_UNSPEC, 0, ~0ULL, &rc[i]);
    };
    for (std::size_t i = 0; i < in.size(); i++)
        ASSERT_EQ(post(i), 0);
    // Message k of sender id: id, k (2 bytes), then bytes of both; odd k
    // are tagged, with tag_of(id, k).
    auto byte_of = [](std::uint8_t id, int k, std::size_t i) { return std::uint8_t(id * 31 + k * 7 + i); };
    auto tag_of = [](std::uint8_t id, int k) { return std::uint64_t(id) << 32 | std::uint64_t(k) << 8 | 0x5a; };
    auto worker = [&](std::uint8_t id) {
        for (int k = 0; k < per_thread; k++) {
            std::uint8_t m[len];
            m[0] = id;
            m[1] = std::uint8_t(k);
            m[2] = std::uint8_t(k >> 8);
            for (std::size_t i = 3; i < len; i++)
                m[i] = byte_of(id, k, i);
            ssize_t r;
            auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            auto once = [&] {
                return k & 1 ? tinject(n.ep, m, sizeof m, to, tag_of(id, k)) : inject(n.ep, m, sizeof m, to);
            };
            while ((r = once()) == -FI_EAGAIN && std::chrono::steady_clock::now() < end) {
                cq_tagged_entry e;
                (void)cq_read(n.cq, &e, 0); // progress only
                sched_yield();
            }
            EXPECT_EQ(r, 0);
        }
    };
    std::thread t1(worker, 1), t2(worker, 2);
    int got[3] = {};
    int last[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}}; // [sender][tagged]
    int bad = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    int total = 0;
    while (total < 2 * per_thread && std::chrono::steady_clock::now() < end) {
        cq_tagged_entry e{};
        ssize_t k = cq_read(n.cq, &e, 1);
        if (k != 1) {
            sched_yield();
            continue;
        }
        auto *ctx = static_cast<context *>(e.op_context);
        const std::size_t slot = std::size_t(ctx - rc.data());
        if (slot >= rc.size())
            continue; // (a send's completion: injects have none)
        const std::uint8_t *b = in[slot].data();
        const std::uint8_t id = b[0];
        const int seq = b[1] | b[2] << 8;
        const bool tagged = (e.flags & FI_TAGGED) != 0;
        if (e.len != len || (id != 1 && id != 2) || tagged != (slot >= posted / 2) || tagged != ((seq & 1) != 0) ||
            (tagged && e.tag != tag_of(id, seq) + 1)) {
            bad++;
        } else {
            EXPECT_GT(seq, last[id][tagged]) << "per-sender order (" << (tagged ? "tagged" : "messages") << ")";
            last[id][tagged] = seq;
            for (std::size_t i = 3; i < len; i++)
                bad += b[i] != byte_of(id, seq, i);
            got[id]++;
        }
        total++;
        ASSERT_EQ(post(slot), 0);
    }
    t1.join();
    t2.join();
    EXPECT_EQ(bad, 0) << "messages, tags or bytes not as sent";
    EXPECT_EQ(got[1], per_thread);
    EXPECT_EQ(got[2], per_thread);
    for (int id : {1, 2}) {
        EXPECT_EQ(last[id][0], per_thread - 2) << "sender " << id << "'s last message";
        EXPECT_EQ(last[id][1], per_thread - 1) << "sender " << id << "'s last tagged message";
    }
    n.close();
}

TEST(RdmOptions, SharedMemoryCannotBeForbiddenForTheShmProvider)
{
    node n;
    info *h = shm_hints(FI_EP_RDM, false);
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &n.fi), 0);
    freeinfo(h);
    ASSERT_EQ(fabric_open(n.fi->fabric_attr, &n.fabric, nullptr), 0);
    ASSERT_EQ(domain_open(n.fabric, n.fi, &n.domain, nullptr), 0);
    ASSERT_EQ(endpoint(n.domain, n.fi, &n.ep, nullptr), 0);
    bool no = false, yes = true;
    EXPECT_EQ(setopt(&n.ep->fid, FI_OPT_ENDPOINT, FI_OPT_SHARED_MEMORY_PERMITTED, &no, sizeof no), -FI_EOPNOTSUPP);
    EXPECT_EQ(setopt(&n.ep->fid, FI_OPT_ENDPOINT, FI_OPT_SHARED_MEMORY_PERMITTED, &yes, sizeof yes), 0);
    n.close();
}

// fi_endpoint(3) shared contexts on shm: two RDM endpoints share one
// receive context (receives posted once, each message reported on the CQ of
// the endpoint it arrived on) and one transmit context; a real peer process
// sends to each endpoint; data checked byte for byte.
namespace {

/** getinfo with the hints @p h (freed), then the fabric and the domain of
 *  its answer. Call with ASSERT_NO_FATAL_FAILURE. */
void open_domain(info *h, const char *what, info *&fi, fid_fabric *&fab, fid_domain *&dom)
{
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &fi), 0) << what;
    freeinfo(h);
    ASSERT_EQ(fabric_open(fi->fabric_attr, &fab, nullptr), 0);
    ASSERT_EQ(domain_open(fab, fi, &dom, nullptr), 0);
}

} // namespace

TEST(RdmShared, SharedReceiveAndTransmitContextsAcrossProcesses)
{
    peer_proc p{"rdm"};
    info *h = shm_hints(FI_EP_RDM, false);
    h->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
    h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
    info *fi = nullptr;
    fid_fabric *fab = nullptr;
    fid_domain *dom = nullptr;
    ASSERT_NO_FATAL_FAILURE(open_domain(h, "shm offers shared contexts", fi, fab, dom));
    EXPECT_EQ(fi->ep_attr->tx_ctx_cnt, FI_SHARED_CONTEXT);
    EXPECT_EQ(fi->ep_attr->rx_ctx_cnt, FI_SHARED_CONTEXT);
    fid_stx *stx = nullptr;
    fid_ep *srx = nullptr;
    ASSERT_EQ(stx_context(dom, nullptr, &stx, nullptr), 0);
    ASSERT_EQ(srx_context(dom, nullptr, &srx, nullptr), 0);
    struct one {
        fid_ep *ep = nullptr;
        fid_cq *cq = nullptr;
        fid_av *av = nullptr;
        std::uint8_t addr[64] = {};
        fi_addr_t peer = FI_ADDR_NOTAVAIL;
    } e[2];
    for (one &x : e) {
        cq_attr ca;
        ca.format = FI_CQ_FORMAT_TAGGED;
        av_attr aa;
        ASSERT_EQ(cq_open(dom, &ca, &x.cq, nullptr), 0);
        ASSERT_EQ(av_open(dom, &aa, &x.av, nullptr), 0);
        ASSERT_EQ(endpoint(dom, fi, &x.ep, nullptr), 0);
        ASSERT_EQ(ep_bind(x.ep, &x.cq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(ep_bind(x.ep, &x.av->fid, 0), 0);
        EXPECT_EQ(enable(x.ep), -FI_EINVAL) << "configured for shared contexts: they must be bound";
        ASSERT_EQ(ep_bind(x.ep, &stx->fid, 0), 0);
        ASSERT_EQ(ep_bind(x.ep, &srx->fid, 0), 0);
        ASSERT_EQ(enable(x.ep), 0);
        std::size_t len = sizeof x.addr;
        ASSERT_EQ(getname(&x.ep->fid, x.addr, &len), 0);
        ASSERT_EQ(av_insert(x.av, p.addr, 1, &x.peer, 0, nullptr), 1);
    }
    EXPECT_EQ(close(&srx->fid), -FI_EBUSY) << "endpoints still use the shared receive context";
    EXPECT_EQ(close(&stx->fid), -FI_EBUSY);
    constexpr int nrecv = 5;
    constexpr std::size_t len = 700;
    std::vector<std::vector<std::uint8_t>> bufs(nrecv, std::vector<std::uint8_t>(len, 0xee));
    context rctx[nrecv];
    for (int i = 0; i < nrecv; i++)
        ASSERT_EQ(trecv(srx, bufs[i].data(), len, nullptr, FI_ADDR_UNSPEC, 0, ~0ULL, &rctx[i]), 0);
    // Wait for @p want receive completions on @p x (progress through its CQ).
    auto take = [&](one &x, int want, std::vector<cq_tagged_entry> &got) {
        for (int k = 0; k < want; k++) {
            cq_tagged_entry c{};
            ssize_t rc;
            for (;;) {
                rc = wait_cq(x.cq, c);
                if (rc != 1 || (c.flags & FI_RECV))
                    break;
            }
            ASSERT_EQ(rc, 1) << "receive " << k;
            got.push_back(c);
        }
    };
    // The peer sends two tagged messages to each endpoint in turn.
    for (int k = 0; k < 2; k++) {
        ASSERT_EQ(p.set_peer(e[k].addr), 0);
        request r;
        r.op = send_tagged;
        r.n = 2;
        r.a = 100 * (k + 1);
        r.b = len;
        ASSERT_EQ(p.call(r).rc, 0);
        std::vector<cq_tagged_entry> got;
        take(e[k], 2, got);
        ASSERT_EQ(got.size(), 2u);
        for (std::size_t j = 0; j < 2; j++) {
            EXPECT_EQ(got[j].tag, 100 * (k + 1) + j) << "endpoint " << k;
            EXPECT_EQ(got[j].len, len);
            int b = int(static_cast<context *>(got[j].op_context) - rctx);
            ASSERT_TRUE(b >= 0 && b < nrecv);
            std::vector<std::uint8_t> want(len);
            fill_pattern(want.data(), len, j);
            EXPECT_EQ(bufs[std::size_t(b)], want) << "endpoint " << k << " message " << j;
        }
        cq_tagged_entry none{};
        EXPECT_EQ(cq_read(e[1 - k].cq, &none, 1), -FI_EAGAIN) << "nothing reported on the other endpoint";
    }
    // Endpoint 0 sends through the shared transmit context; the peer echoes
    // to endpoint 1 (its current peer): the echo lands in the shared receive
    // context's last buffer and is reported on endpoint 1's CQ.
    std::vector<std::uint8_t> out(len);
    fill_pattern(out.data(), len, 42);
    context sctx;
    ASSERT_EQ(retry(e[0].cq, [&] { return tsend(e[0].ep, out.data(), len, nullptr, e[0].peer, 7, &sctx); }), 0);
    cq_tagged_entry sc{};
    ASSERT_EQ(wait_cq(e[0].cq, sc), 1);
    EXPECT_EQ(sc.op_context, &sctx);
    EXPECT_EQ(sc.flags, FI_SEND | FI_TAGGED);
    std::vector<cq_tagged_entry> got;
    take(e[1], 1, got);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].op_context, &rctx[nrecv - 1]);
    EXPECT_EQ(got[0].tag, 8u);
    EXPECT_EQ(bufs[nrecv - 1], out);
    for (one &x : e) {
        EXPECT_EQ(close(&x.ep->fid), 0);
        EXPECT_EQ(close(&x.av->fid), 0);
        EXPECT_EQ(close(&x.cq->fid), 0);
    }
    EXPECT_EQ(close(&srx->fid), 0);
    EXPECT_EQ(close(&stx->fid), 0);
    EXPECT_EQ(close(&dom->fid), 0);
    EXPECT_EQ(close(&fab->fid), 0);
    freeinfo(fi);
}

TEST_F(rdm, MultiRecvPacksMessagesFromAnotherProcess)
{
    std::size_t min = 1100;
    // MIN_MULTI_RECV may change after enable: it applies to later receives.
    ASSERT_EQ(setopt(&n.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min), 0);
    std::vector<std::uint8_t> pool(4096, 0);
    iovec v{pool.data(), pool.size()};
    context mctx;
    msg m;
    m.msg_iov = &v;
    m.iov_count = 1;
    m.addr = FI_ADDR_UNSPEC;
    m.context = &mctx;
    ASSERT_EQ(recvmsg(n.ep, &m, FI_MULTI_RECV), 0);
    std::vector<std::vector<std::uint8_t>> out(3, std::vector<std::uint8_t>(1000));
    for (int i = 0; i < 3; i++) {
        fill_pattern(out[std::size_t(i)].data(), 1000, std::uint64_t(100 + i));
        ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, out[std::size_t(i)].data(), 1000, nullptr, to, nullptr); }), 0);
    }
    int recvs = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (recvs < 3 && std::chrono::steady_clock::now() < end) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1);
        if (!(e.flags & FI_RECV))
            continue;
        EXPECT_EQ(e.op_context, &mctx);
        EXPECT_EQ(e.len, 1000u);
        EXPECT_EQ(e.buf, pool.data() + 1000 * recvs) << "packed in arrival order";
        EXPECT_EQ(std::memcmp(e.buf, out[std::size_t(recvs)].data(), 1000), 0);
        EXPECT_EQ(bool(e.flags & FI_MULTI_RECV), recvs == 2) << "released when less than 1100 bytes remain";
        recvs++;
    }
    EXPECT_EQ(recvs, 3);
}

namespace {

/** A peer, and this process's endpoint with its unexpected store bounded
 *  at 256 KiB (SHUNT_UNEXPECTED_BYTES, read when the endpoint is enabled).
 *  The peer sends without rendezvous: its messages above 16 KiB go through
 *  the ring in fragments. */
struct rdm_bounded : ::testing::Test {
    static constexpr std::size_t bound = 256 * 1024;
    peer_proc p{"rdm", "manual", "private", {"SHUNT_VQ_RNDV_BYTES=0"}};
    node n;
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    void TearDown() override { n.close(); }
    void SetUp() override
    {
        ::setenv("SHUNT_UNEXPECTED_BYTES", std::to_string(bound).c_str(), 1);
        connect_peer(n, p, FI_EP_RDM, to);
        ::unsetenv("SHUNT_UNEXPECTED_BYTES");
    }
    /** Read this endpoint's CQ until @p want error completions came (10 s
     *  at most): their entries. A successful completion fails the test. */
    std::vector<cq_err_entry> errors(std::size_t want)
    {
        std::vector<cq_err_entry> v;
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (v.size() < want && std::chrono::steady_clock::now() < end) {
            cq_tagged_entry e{};
            ssize_t rc = cq_read(n.cq, &e, 1);
            if (rc == -FI_EAVAIL) {
                cq_err_entry x{};
                if (cq_readerr(n.cq, &x, 0) == 1)
                    v.push_back(x);
            } else {
                EXPECT_EQ(rc, -FI_EAGAIN) << "no receive is posted: only errors may complete";
                sched_yield();
            }
        }
        return v;
    }
    /** The peer's count of failed operations once it reaches @p want (10 s
     *  at most), this endpoint progressing meanwhile (the last fragments
     *  and the acknowledgements). */
    std::uint64_t peer_errors(std::uint64_t want)
    {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        std::uint64_t got = 0;
        while ((got = p.stats().c) < want && std::chrono::steady_clock::now() < end) {
            for (int i = 0; i < 1000; i++) {
                cq_tagged_entry e{};
                EXPECT_EQ(cq_read(n.cq, &e, 1), -FI_EAGAIN) << "nothing more to complete here";
            }
        }
        return got;
    }
    /** The peer sends @p count tagged messages (tags @p base + i, @p len
     *  bytes of pattern i), FI_DELIVERY_COMPLETE. */
    void peer_sends(std::uint32_t count, std::uint64_t base, std::size_t len)
    {
        request r;
        r.op = send_tagged;
        r.n = count;
        r.a = base;
        r.b = len;
        r.c = 1;
        ASSERT_EQ(p.call(r).rc, 0);
    }
};

/** Every error is the refusal of one message, tags @p first, first + 1, ... */
void expect_refused(const std::vector<cq_err_entry> &v, std::uint64_t first, std::size_t len, void *ep_ctx)
{
    for (std::size_t i = 0; i < v.size(); i++) {
        SCOPED_TRACE(i);
        EXPECT_EQ(v[i].err, FI_ENOMEM);
        EXPECT_EQ(v[i].flags, FI_RECV | FI_TAGGED);
        EXPECT_EQ(v[i].tag, first + i) << "refused in arrival order";
        EXPECT_EQ(v[i].len, 0u) << "nothing of it was written";
        EXPECT_EQ(v[i].olen, len);
        EXPECT_EQ(v[i].op_context, ep_ctx) << "the endpoint's context: no operation was posted";
    }
}

} // namespace

// A peer sends fragmented messages (20000 bytes from private memory) that
// nobody receives: each kept one holds a 32 KiB staging buffer, so 7 fit a
// 256 KiB bound. The other 33 are refused, each reported here and to its
// delivery-complete sender; the 7 arrive intact when received, and their
// room is free again for the next 7.
TEST_F(rdm_bounded, FragmentedUnexpectedMessagesPastTheBoundAreRefusedAndReported)
{
    constexpr std::size_t len = 20000;
    peer_sends(40, 0x100, len);
    static_assert(bound / (sizeof(util::unexp_msg) + 32768) == 7);
    auto v = errors(33);
    ASSERT_EQ(v.size(), 33u) << "7 messages of 32 KiB of staging each fit 256 KiB, the 33 others do not";
    expect_refused(v, 0x100 + 7, len, n.ep->fid.context);
    EXPECT_EQ(peer_errors(33), 33u) << "each refused delivery-complete send fails at its sender";
    for (std::uint64_t i = 0; i < 7; i++)
        ASSERT_NO_FATAL_FAILURE(take_tagged(n, 0x100 + i, len, i));
    // Taken, they no longer count: 7 more are kept.
    peer_sends(7, 0x200, len);
    for (std::uint64_t i = 0; i < 7; i++)
        ASSERT_NO_FATAL_FAILURE(take_tagged(n, 0x200 + i, len, i));
    EXPECT_EQ(p.stats().c, 33u) << "no more failures at the sender";
}

// The same with eager messages (100 bytes, copied into the store's
// 512-byte buffers): the store keeps messages until the next would pass
// the bound, refuses every later one, and gives back what it held.
TEST_F(rdm_bounded, EagerUnexpectedMessagesPastTheBoundAreRefusedAndReported)
{
    constexpr std::size_t len = 100;
    constexpr std::uint32_t count = 700;
    peer_sends(count, 0x10000, len);
    // Each kept one holds its entry and a 512-byte buffer.
    constexpr std::size_t kept = bound / (sizeof(util::unexp_msg) + 512), refused = count - kept;
    static_assert(kept > 100 && kept < count);
    auto v = errors(refused);
    ASSERT_EQ(v.size(), refused);
    EXPECT_EQ(peer_errors(refused), refused);
    expect_refused(v, 0x10000 + kept, len, n.ep->fid.context);
    for (std::uint64_t i = 0; i < kept; i++)
        ASSERT_NO_FATAL_FAILURE(take_tagged(n, 0x10000 + i, len, i));
    peer_sends(std::uint32_t(kept), 0x20000, len);
    for (std::uint64_t i = 0; i < kept; i++)
        ASSERT_NO_FATAL_FAILURE(take_tagged(n, 0x20000 + i, len, i));
    EXPECT_EQ(p.stats().c, refused) << "no more failures at the sender";
}

TEST_F(rdm, DeliveryCompleteWaitsForTheTargetTransmitCompleteDoesNot)
{
    echo(8, 1); // connected
    std::uint8_t out[32];
    fill_pattern(out, sizeof out, 1);
    context dc, tc;
    request r;
    r.op = pause_peer;
    r.a = 3000; // the peer stops polling for 3 s
    auto paused_at = std::chrono::steady_clock::now();
    ASSERT_EQ(p.call(r).rc, 0);
    iovec v{out, sizeof out};
    msg m;
    m.msg_iov = &v;
    m.iov_count = 1;
    m.addr = to;
    m.context = &tc;
    ASSERT_EQ(sendmsg(n.ep, &m, FI_TRANSMIT_COMPLETE | FI_COMPLETION), 0);
    m.context = &dc;
    ASSERT_EQ(sendmsg(n.ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION), 0);
    // While the peer sleeps: the transmit-complete send completes (its data
    // is in the peer's ring), the delivery-complete one cannot.
    bool got_tc = false, got_dc = false;
    while (!got_tc && std::chrono::steady_clock::now() < paused_at + std::chrono::milliseconds(2000)) {
        cq_tagged_entry e{};
        if (cq_read(n.cq, &e, 1) == 1) {
            got_tc |= e.op_context == &tc;
            got_dc |= e.op_context == &dc;
        }
        sched_yield();
    }
    if (std::chrono::steady_clock::now() > paused_at + std::chrono::milliseconds(2500))
        GTEST_SKIP() << "descheduled for most of the peer's pause: the window to check closed";
    EXPECT_TRUE(got_tc) << "transmit complete does not need the target";
    EXPECT_FALSE(got_dc) << "delivery complete before the target processed the message";
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!got_dc && std::chrono::steady_clock::now() < end) {
        cq_tagged_entry e{};
        if (cq_read(n.cq, &e, 1) == 1)
            got_dc |= e.op_context == &dc;
        sched_yield();
    }
    EXPECT_TRUE(got_dc);
    // drain the two echoes
    std::uint8_t in[2][32];
    context rc[2];
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(recv(n.ep, in[i], 32, nullptr, FI_ADDR_UNSPEC, &rc[i]), 0);
    int echoes = 0;
    while (echoes < 2 && std::chrono::steady_clock::now() < end) {
        cq_tagged_entry e{};
        if (cq_read(n.cq, &e, 1) == 1 && (e.flags & FI_RECV)) {
            EXPECT_EQ(std::memcmp(e.buf, out, sizeof out), 0);
            echoes++;
        }
        sched_yield();
    }
    EXPECT_EQ(echoes, 2);
}

TEST(RdmDeadPeer, SendsToAPeerThatExitedFailCleanly)
{
    node n;
    ASSERT_EQ(n.open(FI_EP_RDM, false), 0);
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    {
        peer_proc p{"rdm"};
        ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
        ASSERT_EQ(p.set_peer(n.addr), 0);
        std::uint8_t in[16], out[16] = {1};
        context rc;
        ASSERT_EQ(recv(n.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rc), 0);
        ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, out, sizeof out, nullptr, to, nullptr); }), 0);
        for (int i = 0; i < 2; i++) {
            cq_tagged_entry e{};
            ASSERT_EQ(wait_cq(n.cq, e), 1);
        }
    } // the peer process exits here (and its endpoint and segment go away)
    // Keep sending: within a bounded time the failure must show, as an error
    // completion or an error code, and nothing may hang.
    ssize_t rc = 0;
    bool failed = sends_fail_soon(n, to, &rc);
    if (rc) {
        EXPECT_TRUE(rc == -FI_EHOSTUNREACH || rc == -FI_ENOENT || rc == -FI_ECONNREFUSED) << rc;
    }
    EXPECT_TRUE(failed) << "a dead peer must be noticed";
    n.close();
}

// fi_endpoint(3) scalable endpoints on shm RDM: transmit and receive
// contexts share the endpoint's address; each context reports on its own CQ;
// senders name a receive context with fi_rx_addr (FI_NAMED_RX_CTX, an AV with
// rx_ctx_bits); without a name a message goes to receive context 0. A real
// peer process echoes what a transmit context sends; data checked byte for
// byte. Closing the scalable endpoint with open contexts is -FI_EBUSY.
TEST(RdmScalable, ContextsTransmitAndReceiveWithNamedReceiveContexts)
{
    peer_proc p{"rdm"};
    info *h = shm_hints(FI_EP_RDM, false);
    h->caps |= FI_NAMED_RX_CTX;
    h->ep_attr->tx_ctx_cnt = 2;
    h->ep_attr->rx_ctx_cnt = 2;
    info *fi = nullptr;
    fid_fabric *fab = nullptr;
    fid_domain *dom = nullptr;
    ASSERT_NO_FATAL_FAILURE(open_domain(h, "shm offers scalable RDM endpoints", fi, fab, dom));
    EXPECT_GE(fi->domain_attr->max_ep_tx_ctx, 2u);
    EXPECT_EQ(fi->ep_attr->tx_ctx_cnt, 2u);
    EXPECT_EQ(fi->ep_attr->rx_ctx_cnt, 2u);
    EXPECT_TRUE(fi->caps & FI_NAMED_RX_CTX);
    av_attr aa;
    aa.rx_ctx_bits = 1;
    fid_av *av = nullptr;
    ASSERT_EQ(av_open(dom, &aa, &av, nullptr), 0);
    fid_ep *sep = nullptr;
    ASSERT_EQ(scalable_ep(dom, fi, &sep, nullptr), 0);
    ASSERT_EQ(scalable_ep_bind(sep, &av->fid, 0), 0);
    ASSERT_EQ(enable(sep), 0);
    std::uint8_t sep_addr[64];
    std::size_t alen = sizeof sep_addr;
    ASSERT_EQ(getname(&sep->fid, sep_addr, &alen), 0);
    fid_ep *tx[2] = {}, *rx[2] = {};
    fid_cq *txcq[2] = {}, *rxcq[2] = {};
    for (int i = 0; i < 2; i++) {
        cq_attr ca;
        ca.format = FI_CQ_FORMAT_TAGGED;
        ASSERT_EQ(cq_open(dom, &ca, &txcq[i], nullptr), 0);
        ASSERT_EQ(cq_open(dom, &ca, &rxcq[i], nullptr), 0);
        ASSERT_EQ(tx_context(sep, i, nullptr, &tx[i], nullptr), 0);
        ASSERT_EQ(rx_context(sep, i, nullptr, &rx[i], nullptr), 0);
        ASSERT_EQ(ep_bind(tx[i], &txcq[i]->fid, FI_TRANSMIT), 0);
        ASSERT_EQ(ep_bind(rx[i], &rxcq[i]->fid, FI_RECV), 0);
        ASSERT_EQ(enable(tx[i]), 0);
        ASSERT_EQ(enable(rx[i]), 0);
    }
    fid_ep *dup = nullptr;
    EXPECT_EQ(tx_context(sep, 2, nullptr, &dup, nullptr), -FI_EINVAL) << "only tx_ctx_cnt contexts";
    fi_addr_t peer = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(av, p.addr, 1, &peer, 0, nullptr), 1);
    ASSERT_EQ(p.set_peer(sep_addr), 0);

    constexpr std::size_t len = 300;
    std::vector<std::uint8_t> in0(len, 0xee), in1(len, 0xee), out(len);
    context r0, r1, s1;
    ASSERT_EQ(trecv(rx[0], in0.data(), len, nullptr, FI_ADDR_UNSPEC, 0, ~0ULL, &r0), 0);
    ASSERT_EQ(trecv(rx[1], in1.data(), len, nullptr, FI_ADDR_UNSPEC, 0, ~0ULL, &r1), 0);
    // Transmit context 1 sends; the peer echoes to the scalable endpoint's
    // address without a receive context name: receive context 0 gets it.
    fill_pattern(out.data(), len, 9);
    ASSERT_EQ(retry(txcq[1], [&] { return tsend(tx[1], out.data(), len, nullptr, peer, 40, &s1); }), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(txcq[1], e), 1);
    EXPECT_EQ(e.op_context, &s1) << "the send completes on its context's CQ";
    EXPECT_EQ(cq_read(txcq[0], &e, 1), -FI_EAGAIN);
    ASSERT_EQ(wait_cq(rxcq[0], e), 1);
    EXPECT_EQ(e.op_context, &r0);
    EXPECT_EQ(e.tag, 41u);
    EXPECT_EQ(in0, out);
    EXPECT_EQ(cq_read(rxcq[1], &e, 1), -FI_EAGAIN) << "receive context 1 was not named";

    // A local RDM endpoint names receive context 1 with fi_rx_addr.
    node x;
    ASSERT_EQ(x.open(FI_EP_RDM, false), 0);
    fid_av *xav = nullptr;
    av_attr xa;
    xa.rx_ctx_bits = 1;
    ASSERT_EQ(av_open(x.domain, &xa, &xav, nullptr), 0);
    // x's endpoint is already bound to its own AV: use a second endpoint.
    fid_ep *xe = nullptr;
    ASSERT_EQ(endpoint(x.domain, x.fi, &xe, nullptr), 0);
    ASSERT_EQ(ep_bind(xe, &x.cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(xe, &xav->fid, 0), 0);
    ASSERT_EQ(enable(xe), 0);
    fi_addr_t to_sep = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(xav, sep_addr, 1, &to_sep, 0, nullptr), 1);
    fill_pattern(out.data(), len, 11);
    // Both sides make progress while the connection is set up: the sender
    // through its CQ, the scalable endpoint through its contexts' CQs.
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    ssize_t sent = -FI_EAGAIN, got = -FI_EAGAIN;
    while ((sent == -FI_EAGAIN || got == -FI_EAGAIN) && std::chrono::steady_clock::now() < end) {
        if (sent == -FI_EAGAIN)
            sent = tsend(xe, out.data(), len, nullptr, rx_addr(to_sep, 1, 1), 77, nullptr);
        cq_tagged_entry xs;
        (void)cq_read(x.cq, &xs, 1);
        if (got == -FI_EAGAIN)
            got = cq_read(rxcq[1], &e, 1);
        sched_yield();
    }
    ASSERT_EQ(sent, 0);
    ASSERT_EQ(got, 1) << "receive context 1 named by fi_rx_addr";
    EXPECT_EQ(e.op_context, &r1);
    EXPECT_EQ(e.tag, 77u);
    EXPECT_EQ(in1, out);
    EXPECT_EQ(cq_read(rxcq[0], &e, 1), -FI_EAGAIN);
    EXPECT_EQ(close(&xe->fid), 0);
    EXPECT_EQ(close(&xav->fid), 0);
    x.close();

    EXPECT_EQ(close(&sep->fid), -FI_EBUSY) << "contexts are still open";
    for (int i = 0; i < 2; i++) {
        EXPECT_EQ(close(&tx[i]->fid), 0);
        EXPECT_EQ(close(&rx[i]->fid), 0);
    }
    EXPECT_EQ(close(&sep->fid), 0);
    for (int i = 0; i < 2; i++) {
        EXPECT_EQ(close(&txcq[i]->fid), 0);
        EXPECT_EQ(close(&rxcq[i]->fid), 0);
    }
    EXPECT_EQ(close(&av->fid), 0);
    EXPECT_EQ(close(&dom->fid), 0);
    EXPECT_EQ(close(&fab->fid), 0);
    freeinfo(fi);
}

// A scalable endpoint whose one receive context is opened but never
// enabled has nowhere to deliver: what arrives is dropped, and a sender
// that asked for FI_DELIVERY_COMPLETE learns it. Eager and fragmented
// messages (one peer, without rendezvous) and a rendezvous (another peer)
// each fail at their sender with FI_ENORX; the transmit context's CQ
// drives the scalable endpoint's progress meanwhile.
TEST(RdmScalable, DeliveryCompleteSendsToAScalableEndpointWithoutAnEnabledReceiveContextFail)
{
    peer_proc ring{"rdm", "manual", "private", {"SHUNT_VQ_RNDV_BYTES=0"}};
    peer_proc rndv{"rdm"};
    info *h = shm_hints(FI_EP_RDM, false);
    h->ep_attr->tx_ctx_cnt = 1;
    h->ep_attr->rx_ctx_cnt = 1;
    info *fi = nullptr;
    fid_fabric *fab = nullptr;
    fid_domain *dom = nullptr;
    ASSERT_NO_FATAL_FAILURE(open_domain(h, "shm RDM", fi, fab, dom));
    av_attr aa;
    fid_av *av = nullptr;
    ASSERT_EQ(av_open(dom, &aa, &av, nullptr), 0);
    fid_ep *sep = nullptr, *tx = nullptr, *rx = nullptr;
    ASSERT_EQ(scalable_ep(dom, fi, &sep, nullptr), 0);
    ASSERT_EQ(scalable_ep_bind(sep, &av->fid, 0), 0);
    ASSERT_EQ(enable(sep), 0);
    std::uint8_t sep_addr[64];
    std::size_t alen = sizeof sep_addr;
    ASSERT_EQ(getname(&sep->fid, sep_addr, &alen), 0);
    cq_attr ca;
    ca.format = FI_CQ_FORMAT_TAGGED;
    fid_cq *txcq = nullptr, *rxcq = nullptr;
    ASSERT_EQ(cq_open(dom, &ca, &txcq, nullptr), 0);
    ASSERT_EQ(cq_open(dom, &ca, &rxcq, nullptr), 0);
    ASSERT_EQ(tx_context(sep, 0, nullptr, &tx, nullptr), 0);
    ASSERT_EQ(ep_bind(tx, &txcq->fid, FI_TRANSMIT), 0);
    ASSERT_EQ(enable(tx), 0);
    ASSERT_EQ(rx_context(sep, 0, nullptr, &rx, nullptr), 0);
    ASSERT_EQ(ep_bind(rx, &rxcq->fid, FI_RECV), 0); // bound, never enabled
    ASSERT_EQ(ring.set_peer(sep_addr), 0);
    ASSERT_EQ(rndv.set_peer(sep_addr), 0);

    // The peer's failed sends once they reach @p want (10 s at most).
    auto failures = [&](peer_proc &p, std::uint64_t want) {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        response r = p.stats();
        while (r.c < want && std::chrono::steady_clock::now() < end) {
            for (int i = 0; i < 1000; i++) {
                cq_tagged_entry e{};
                EXPECT_EQ(cq_read(txcq, &e, 1), -FI_EAGAIN) << "nothing was sent from here";
            }
            r = p.stats();
        }
        return r;
    };
    auto send = [](peer_proc &p, std::uint64_t tag, std::size_t len) {
        request r;
        r.op = send_tagged;
        r.n = 1;
        r.a = tag;
        r.b = len;
        r.c = 1; // FI_DELIVERY_COMPLETE
        return p.call(r).rc;
    };
    struct {
        peer_proc *p;
        std::size_t len;
        std::uint64_t failed; // the peer's failures after this send
        const char *what;
    } cases[] = {{&ring, 100, 1, "eager"}, {&ring, 20000, 2, "fragmented"}, {&rndv, 100000, 1, "rendezvous"}};
    for (const auto &k : cases) {
        SCOPED_TRACE(k.what);
        ASSERT_EQ(send(*k.p, 0x50, k.len), 0);
        response r = failures(*k.p, k.failed);
        EXPECT_EQ(r.c, k.failed) << "the delivery-complete send fails at its sender";
        EXPECT_EQ(r.err, FI_ENORX);
    }
    cq_tagged_entry e{};
    EXPECT_EQ(cq_read(rxcq, &e, 1), -FI_EAGAIN) << "a receive context that is not enabled reports nothing";

    EXPECT_EQ(close(&tx->fid), 0);
    EXPECT_EQ(close(&rx->fid), 0);
    EXPECT_EQ(close(&sep->fid), 0);
    EXPECT_EQ(close(&txcq->fid), 0);
    EXPECT_EQ(close(&rxcq->fid), 0);
    EXPECT_EQ(close(&av->fid), 0);
    EXPECT_EQ(close(&dom->fid), 0);
    EXPECT_EQ(close(&fab->fid), 0);
    freeinfo(fi);
}

TEST(RdmScalable, ScalableEndpointsAreRdmOnly)
{
    for (ep_type t : {FI_EP_MSG, FI_EP_DGRAM}) {
        node n;
        info *h = shm_hints(t, false);
        ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &n.fi), 0);
        freeinfo(h);
        EXPECT_EQ(n.fi->domain_attr->max_ep_tx_ctx, 1u);
        ASSERT_EQ(fabric_open(n.fi->fabric_attr, &n.fabric, nullptr), 0);
        ASSERT_EQ(domain_open(n.fabric, n.fi, &n.domain, nullptr), 0);
        fid_ep *sep = nullptr;
        EXPECT_EQ(scalable_ep(n.domain, n.fi, &sep, nullptr), -FI_EOPNOTSUPP) << t;
        n.close();
    }
}

// More than 16 peers reach one RDM endpoint (the old limit of 16 UD rings):
// 20 endpoints of this process each connect to the peer process's endpoint
// and send it a distinct tagged message; the peer echoes all of them to
// endpoint 0. Every message comes back byte for byte.
TEST(RdmFanIn, TwentyPeersReachOneEndpoint)
{
    constexpr int npeers = 20;
    constexpr std::size_t len = 200;
    peer_proc p{"rdm"};
    info *h = shm_hints(FI_EP_RDM, false);
    info *fi = nullptr;
    fid_fabric *fab = nullptr;
    fid_domain *dom = nullptr;
    ASSERT_NO_FATAL_FAILURE(open_domain(h, "shm RDM", fi, fab, dom));
    struct one {
        fid_ep *ep = nullptr;
        fid_cq *cq = nullptr;
        fid_av *av = nullptr;
        fi_addr_t peer = FI_ADDR_NOTAVAIL;
        std::vector<std::uint8_t> out;
        bool sent = false, done = false;
    };
    std::vector<one> e(npeers);
    for (one &x : e) {
        cq_attr ca;
        ca.format = FI_CQ_FORMAT_TAGGED;
        av_attr aa;
        ASSERT_EQ(cq_open(dom, &ca, &x.cq, nullptr), 0);
        ASSERT_EQ(av_open(dom, &aa, &x.av, nullptr), 0);
        ASSERT_EQ(endpoint(dom, fi, &x.ep, nullptr), 0);
        ASSERT_EQ(ep_bind(x.ep, &x.cq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(ep_bind(x.ep, &x.av->fid, 0), 0);
        ASSERT_EQ(enable(x.ep), 0);
        ASSERT_EQ(av_insert(x.av, p.addr, 1, &x.peer, 0, nullptr), 1);
    }
    std::uint8_t a0[64];
    std::size_t alen = sizeof a0;
    ASSERT_EQ(getname(&e[0].ep->fid, a0, &alen), 0);
    ASSERT_EQ(p.set_peer(a0), 0);
    std::vector<std::vector<std::uint8_t>> in(npeers, std::vector<std::uint8_t>(len, 0xee));
    std::vector<context> rctx(npeers);
    for (int i = 0; i < npeers; i++) {
        e[std::size_t(i)].out.resize(len);
        fill_pattern(e[std::size_t(i)].out.data(), len, std::uint64_t(100 + i));
        // The echo of sender i carries tag 1000 + i + 1.
        ASSERT_EQ(trecv(e[0].ep, in[std::size_t(i)].data(), len, nullptr, FI_ADDR_UNSPEC, 1000 + i + 1, 0,
                        &rctx[std::size_t(i)]),
                  0);
    }
    int received = 0, sends_done = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((received < npeers || sends_done < npeers) && std::chrono::steady_clock::now() < end) {
        bool idle = true;
        for (int i = 0; i < npeers; i++) {
            one &x = e[std::size_t(i)];
            if (!x.sent) {
                ssize_t rc = tsend(x.ep, x.out.data(), len, nullptr, x.peer, std::uint64_t(1000 + i), &x);
                if (rc == 0)
                    x.sent = true;
                else
                    ASSERT_EQ(rc, -FI_EAGAIN) << "sender " << i;
            }
            cq_tagged_entry c{};
            ssize_t n = cq_read(x.cq, &c, 1);
            if (n == -FI_EAVAIL) {
                cq_err_entry err{};
                (void)cq_readerr(x.cq, &err, 0);
                FAIL() << "endpoint " << i << ": completion error " << err.err;
            }
            if (n != 1)
                continue;
            idle = false;
            if (c.flags & FI_SEND) {
                EXPECT_EQ(c.op_context, &x);
                sends_done++;
            } else {
                ASSERT_EQ(i, 0) << "only endpoint 0 receives";
                received++;
            }
        }
        if (idle)
            sched_yield();
    }
    EXPECT_EQ(sends_done, npeers) << "every sender's message left";
    ASSERT_EQ(received, npeers) << "every sender reached the peer and came back";
    for (int i = 0; i < npeers; i++)
        EXPECT_EQ(in[std::size_t(i)], e[std::size_t(i)].out) << "message of sender " << i;
    EXPECT_EQ(p.stats().c, 0u) << "the peer saw no errors";
    for (one &x : e) {
        EXPECT_EQ(close(&x.ep->fid), 0);
        EXPECT_EQ(close(&x.av->fid), 0);
        EXPECT_EQ(close(&x.cq->fid), 0);
    }
    EXPECT_EQ(close(&dom->fid), 0);
    EXPECT_EQ(close(&fab->fid), 0);
    freeinfo(fi);
}

// fi_inject with a null buffer and a length is -FI_EINVAL on the lock-free
// inject path of a connected peer too (through the op table, as the
// libfabric shim calls it), and nothing is sent.
TEST_F(rdm, InjectOfANullBufferIsRefusedOnTheFastPath)
{
    echo(8, 1); // connected: the next inject takes the fast path
    EXPECT_EQ(n.ep->msg->inject(n.ep, nullptr, 8, to), -FI_EINVAL);
    EXPECT_EQ(n.ep->tagged->inject(n.ep, nullptr, 8, to, 5), -FI_EINVAL);
    EXPECT_EQ(inject(n.ep, nullptr, 8, to), -FI_EINVAL);
    echo(16, 2); // and the next message is the next one to arrive
    EXPECT_EQ(p.stats().c, 0u);
}

// Delivery-complete sends while this side does not poll: the peer's
// acknowledgements (and its echoes) find this side's ring full and must
// wait in the peer's control queue, not be dropped; every send completes
// and every echo arrives once this side polls again.
TEST_F(rdm, DeliveryCompleteAcksWaitForRoomInsteadOfBeingDropped)
{
    constexpr int burst = 48;
    constexpr std::size_t len = 1500; // echoes of 48 of these overfill a 64 KiB ring
    std::vector<std::vector<std::uint8_t>> in(burst, std::vector<std::uint8_t>(len));
    std::vector<std::uint8_t> out(len);
    for (int round = 0; round < 3; round++) {
        context rctx[burst], sctx[burst];
        for (int i = 0; i < burst; i++)
            ASSERT_EQ(recv(n.ep, in[i].data(), len, nullptr, FI_ADDR_UNSPEC, &rctx[i]), 0);
        fill_pattern(out.data(), len, round);
        int posted = 0;
        std::vector<cq_tagged_entry> seen;
        for (; posted < burst; posted++) {
            iovec v{out.data(), len};
            msg m;
            m.msg_iov = &v;
            m.iov_count = 1;
            m.addr = to;
            m.context = &sctx[posted];
            ASSERT_EQ(retry(n.cq, [&] { return sendmsg(n.ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION); }, &seen), 0);
        }
        // Let the peer take them all, acknowledge and echo into our ring
        // while we do not poll.
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        int sends = 0, recvs = 0;
        auto count = [&](const cq_tagged_entry &e) {
            if (e.flags & FI_SEND)
                sends++;
            else if (e.flags & FI_RECV) {
                recvs++;
                EXPECT_EQ(e.len, len);
            }
        };
        for (auto &e : seen)
            count(e);
        while (sends < burst || recvs < burst) {
            cq_tagged_entry e{};
            ASSERT_EQ(wait_cq(n.cq, e), 1) << "round " << round << ": " << sends << " sends and " << recvs
                                           << " echoes of " << burst << " completed";
            count(e);
        }
        for (int i = 0; i < burst; i++)
            ASSERT_EQ(in[i], out) << "echo " << i << " of round " << round;
    }
    EXPECT_EQ(p.stats().c, 0u);
}

// The peer closes its endpoint but its process lives on: sends to it fail
// within a bounded time (an error completion, or an error code from the
// call), never -FI_EAGAIN forever.
TEST(RdmClosedPeer, SendsToAnEndpointClosedInALiveProcessFail)
{
    node n;
    ASSERT_EQ(n.open(FI_EP_RDM, false), 0);
    peer_proc p{"rdm"};
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    ASSERT_EQ(p.set_peer(n.addr), 0);
    std::uint8_t in[16], out[16] = {1};
    context rc;
    ASSERT_EQ(recv(n.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rc), 0);
    ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, out, sizeof out, nullptr, to, nullptr); }), 0);
    for (int i = 0; i < 2; i++) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1);
    }
    request r;
    r.op = close_ep;
    ASSERT_EQ(p.call(r).rc, 0);
    ssize_t how = 0;
    bool failed = sends_fail_soon(n, to, &how);
    EXPECT_TRUE(failed) << "sends to a closed endpoint must fail within 10 s";
    if (how) {
        EXPECT_TRUE(how == -FI_ECONNRESET || how == -FI_EHOSTUNREACH || how == -FI_ENOENT ||
                    how == -FI_ECONNREFUSED)
            << how;
    }
    n.close();
}
