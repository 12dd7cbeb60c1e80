// shm provider, FI_EP_MSG, two real processes: passive endpoint, connect /
// accept with CM data, reject with data, echo, shutdown.
#include "fab_client.h"

using namespace shunt;
using namespace shunt::fabric;
using namespace shunt::test::fab;

namespace {

ssize_t wait_eq(fid_eq *eq, std::uint32_t &ev, void *buf, std::size_t len, int ms = 10000)
{
    return eq_sread(eq, &ev, buf, len, ms, 0);
}

struct msg_ep : ::testing::Test {
    peer_proc p{"msg"};
    node n;
    void SetUp() override
    {
        ASSERT_EQ(n.open(FI_EP_MSG, false), 0);
        ASSERT_EQ(endpoint(n.domain, n.fi, &n.ep, nullptr), 0);
        ASSERT_EQ(ep_bind(n.ep, &n.cq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(ep_bind(n.ep, &n.eq->fid, 0), 0);
    }
    void TearDown() override { n.close(); }
};

} // namespace

TEST_F(msg_ep, ConnectAcceptWithCmDataEchoAndShutdown)
{
    std::size_t cm = 0, len = sizeof cm;
    ASSERT_EQ(getopt(&n.ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cm, &len), 0);
    EXPECT_GE(cm, 64u);
    std::vector<char> too_big(cm + 1, 'x');
    EXPECT_EQ(connect(n.ep, p.addr, too_big.data(), too_big.size()), -FI_EINVAL);
    ASSERT_EQ(connect(n.ep, p.addr, "hello", 6), 0);
    EXPECT_EQ(connect(n.ep, p.addr, "hello", 6), -FI_EISCONN);
    std::uint32_t ev = 0;
    std::uint8_t buf[256] = {};
    ssize_t rc = wait_eq(n.eq, ev, buf, sizeof buf);
    ASSERT_GT(rc, 0) << shunt::strerror(int(rc));
    ASSERT_EQ(ev, FI_CONNECTED);
    ASSERT_EQ(std::size_t(rc), sizeof(eq_cm_entry) + 8);
    EXPECT_STREQ(reinterpret_cast<char *>(eq_cm_data(reinterpret_cast<eq_cm_entry *>(buf))), "welcome");
    std::uint8_t peer_addr[64];
    len = sizeof peer_addr;
    EXPECT_EQ(getpeer(n.ep, peer_addr, &len), 0);
    // echo over the connection; dest_addr is ignored
    std::vector<std::uint8_t> out(3000), in(3000);
    fill_pattern(out.data(), out.size(), 5);
    context rctx, sctx;
    ASSERT_EQ(recv(n.ep, in.data(), in.size(), nullptr, 0, &rctx), 0);
    ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, out.data(), out.size(), nullptr, 0, &sctx); }), 0);
    for (int i = 0; i < 2; i++) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1);
    }
    EXPECT_EQ(in, out);
    ASSERT_EQ(shutdown(n.ep, 0), 0);
    EXPECT_EQ(shutdown(n.ep, 0), -FI_ENOTCONN);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    response s;
    do
        s = p.stats();
    while (s.d == 0 && std::chrono::steady_clock::now() < end);
    EXPECT_EQ(s.d, 1u) << "the peer saw FI_SHUTDOWN";
    EXPECT_EQ(send(n.ep, out.data(), 10, nullptr, 0, nullptr), -FI_ENOTCONN);
}

TEST_F(msg_ep, RejectGivesConnRefusedWithTheRejectData)
{
    request r;
    r.op = reject_next;
    ASSERT_EQ(p.call(r).rc, 0);
    ASSERT_EQ(connect(n.ep, p.addr, nullptr, 0), 0);
    std::uint32_t ev;
    std::uint8_t buf[256];
    ASSERT_EQ(wait_eq(n.eq, ev, buf, sizeof buf), -FI_EAVAIL);
    eq_err_entry err{};
    ASSERT_GT(eq_readerr(n.eq, &err, 0), 0);
    EXPECT_EQ(err.err, FI_ECONNREFUSED);
    ASSERT_EQ(err.err_data_size, 8u);
    EXPECT_STREQ(static_cast<char *>(err.err_data), "no-room");
}

// An MSG endpoint connecting to an RDM endpoint of another process (its
// address is no passive endpoint's) is refused as by a reject without data:
// FI_ECONNREFUSED on its EQ within the bounded wait, and it stays
// unconnected.
TEST(MsgConnect, ToAnRdmEndpointIsRefused)
{
    peer_proc p{"rdm"};
    node n;
    ASSERT_EQ(n.open(FI_EP_MSG, false), 0);
    ASSERT_EQ(endpoint(n.domain, n.fi, &n.ep, nullptr), 0);
    ASSERT_EQ(ep_bind(n.ep, &n.cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(n.ep, &n.eq->fid, 0), 0);
    ASSERT_EQ(connect(n.ep, p.addr, "hello", 6), 0);
    std::uint32_t ev = 0;
    std::uint8_t buf[256];
    ASSERT_EQ(wait_eq(n.eq, ev, buf, sizeof buf), -FI_EAVAIL) << "no refusal within 10 s";
    eq_err_entry err{};
    ASSERT_GT(eq_readerr(n.eq, &err, 0), 0);
    EXPECT_EQ(err.err, FI_ECONNREFUSED);
    EXPECT_EQ(err.fid, &n.ep->fid);
    EXPECT_EQ(err.err_data_size, 0u);
    std::uint8_t peer_addr[64];
    std::size_t len = sizeof peer_addr;
    EXPECT_EQ(getpeer(n.ep, peer_addr, &len), -FI_ENOTCONN);
    EXPECT_EQ(send(n.ep, buf, 8, nullptr, 0, nullptr), -FI_ENOTCONN);
    EXPECT_EQ(wait_eq(n.eq, ev, buf, sizeof buf, 50), -FI_EAGAIN) << "an event after the refusal";
    n.close();
}

TEST(MsgPassive, ListenNeedsAnEqAndCmDataSizeIsReadOnly)
{
    node n;
    ASSERT_EQ(n.open(FI_EP_MSG, false), 0);
    fid_pep *pep = nullptr;
    ASSERT_EQ(passive_ep(n.fabric, n.fi, &pep, nullptr), 0);
    EXPECT_EQ(listen(pep), -FI_ENOEQ);
    ASSERT_EQ(pep_bind(pep, &n.eq->fid, 0), 0);
    ASSERT_EQ(listen(pep), 0);
    EXPECT_EQ(listen(pep), -FI_EOPBADSTATE);
    std::size_t v = 0, len = sizeof v;
    ASSERT_EQ(getopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &v, &len), 0);
    EXPECT_GT(v, 0u);
    EXPECT_EQ(setopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &v, sizeof v), -FI_ENOPROTOOPT);
    int backlog = 4;
    EXPECT_EQ(control(&pep->fid, FI_BACKLOG, &backlog), 0);
    std::uint8_t a[64];
    len = sizeof a;
    EXPECT_EQ(getname(&pep->fid, a, &len), 0);
    EXPECT_EQ(close(&pep->fid), 0);
    n.close();
}

TEST_F(msg_ep, TaggedRmaAndAtomicsOverTheConnection)
{
    ASSERT_EQ(connect(n.ep, p.addr, nullptr, 0), 0);
    std::uint32_t ev = 0;
    std::uint8_t buf[256];
    ASSERT_GT(wait_eq(n.eq, ev, buf, sizeof buf), 0);
    ASSERT_EQ(ev, FI_CONNECTED);
    // tagged echo with ignore bits
    std::uint8_t out[200], in[200] = {};
    fill_pattern(out, sizeof out, 8);
    context rc;
    ASSERT_EQ(trecv(n.ep, in, sizeof in, nullptr, 0, 0x700, 0xff, &rc), 0);
    ASSERT_EQ(retry(n.cq, [&] { return tsend(n.ep, out, sizeof out, nullptr, 0, 0x710, nullptr); }), 0);
    cq_tagged_entry e{};
    do
        ASSERT_EQ(wait_cq(n.cq, e), 1);
    while (e.op_context != &rc);
    EXPECT_EQ(e.tag, 0x711u);
    EXPECT_EQ(std::memcmp(in, out, sizeof out), 0);
    // RMA write then read back
    std::vector<std::uint8_t> w(5000), r(5000);
    fill_pattern(w.data(), w.size(), 9);
    context c;
    ASSERT_EQ(retry(n.cq, [&] { return write(n.ep, w.data(), w.size(), nullptr, 0, p.mem + 64, p.key, &c); }), 0);
    do
        ASSERT_EQ(wait_cq(n.cq, e), 1);
    while (e.op_context != &c);
    ASSERT_EQ(retry(n.cq, [&] { return read(n.ep, r.data(), r.size(), nullptr, 0, p.mem + 64, p.key, &c); }), 0);
    do
        ASSERT_EQ(wait_cq(n.cq, e), 1);
    while (e.op_context != &c);
    EXPECT_EQ(r, w);
    EXPECT_EQ(p.checksum(64, 5000), fnv(w.data(), w.size()));
    // atomic fetch-add on the first word
    std::uint64_t zero = 0, add = 3, old = 1;
    ASSERT_EQ(retry(n.cq, [&] { return write(n.ep, &zero, 8, nullptr, 0, p.mem, p.key, &c); }), 0);
    do
        ASSERT_EQ(wait_cq(n.cq, e), 1);
    while (e.op_context != &c);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(retry(n.cq, [&] {
                      return fetch_atomic(n.ep, &add, 1, nullptr, &old, nullptr, 0, p.mem, p.key, FI_UINT64, FI_SUM,
                                          &c);
                  }),
                  0);
        do
            ASSERT_EQ(wait_cq(n.cq, e), 1);
        while (e.op_context != &c);
        EXPECT_EQ(old, std::uint64_t(3 * i));
    }
}

// fi_endpoint(3): an active endpoint created with info->handle set to a
// passive endpoint acquires its address; the passive endpoint can no longer
// be used and is closed afterwards. The connection to a real peer process
// works from that address (the peer's accept reply goes to it), and data
// flows byte for byte.
TEST(MsgHandle, ActiveEndpointTakesOverAPassiveEndpointsAddress)
{
    peer_proc p{"msg"};
    node n;
    ASSERT_EQ(n.open(FI_EP_MSG, false), 0);
    fid_pep *pep = nullptr;
    ASSERT_EQ(passive_ep(n.fabric, n.fi, &pep, nullptr), 0);
    std::uint8_t pep_addr[64], ep_addr[64];
    std::size_t len = sizeof pep_addr;
    ASSERT_EQ(getname(&pep->fid, pep_addr, &len), 0);
    info *i = dupinfo(n.fi);
    i->handle = &pep->fid;
    ASSERT_EQ(endpoint(n.domain, i, &n.ep, nullptr), 0);
    fid_ep *second = nullptr;
    EXPECT_EQ(endpoint(n.domain, i, &second, nullptr), -FI_EOPBADSTATE) << "the address was taken already";
    freeinfo(i);
    len = sizeof ep_addr;
    ASSERT_EQ(getname(&n.ep->fid, ep_addr, &len), 0);
    EXPECT_EQ(std::memcmp(ep_addr, pep_addr, sizeof ep_addr), 0) << "the active endpoint has the passive one's address";
    ASSERT_EQ(pep_bind(pep, &n.eq->fid, 0), 0);
    EXPECT_EQ(listen(pep), -FI_EOPBADSTATE) << "the passive endpoint must no longer be used";
    EXPECT_EQ(close(&pep->fid), 0);

    ASSERT_EQ(ep_bind(n.ep, &n.cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(n.ep, &n.eq->fid, 0), 0);
    ASSERT_EQ(connect(n.ep, p.addr, nullptr, 0), 0);
    std::uint32_t ev = 0;
    std::uint8_t buf[256] = {};
    ssize_t rc = wait_eq(n.eq, ev, buf, sizeof buf);
    ASSERT_GT(rc, 0) << shunt::strerror(int(rc));
    ASSERT_EQ(ev, FI_CONNECTED) << "the reply reached the adopted address";
    std::vector<std::uint8_t> out(2000), in(2000);
    fill_pattern(out.data(), out.size(), 8);
    context rctx, sctx;
    ASSERT_EQ(recv(n.ep, in.data(), in.size(), nullptr, 0, &rctx), 0);
    ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, out.data(), out.size(), nullptr, 0, &sctx); }), 0);
    for (int k = 0; k < 2; k++) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1);
    }
    EXPECT_EQ(in, out);
    n.close();
}

TEST(MsgHandle, OnlyMsgEndpointsTakeAPassiveEndpointsAddress)
{
    node m;
    ASSERT_EQ(m.open(FI_EP_MSG, false), 0);
    fid_pep *pep = nullptr;
    ASSERT_EQ(passive_ep(m.fabric, m.fi, &pep, nullptr), 0);
    node r;
    info *h = shm_hints(FI_EP_RDM, false);
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &r.fi), 0);
    freeinfo(h);
    ASSERT_EQ(fabric_open(r.fi->fabric_attr, &r.fabric, nullptr), 0);
    ASSERT_EQ(domain_open(r.fabric, r.fi, &r.domain, nullptr), 0);
    info *i = dupinfo(r.fi);
    i->handle = &pep->fid;
    fid_ep *ep = nullptr;
    EXPECT_EQ(endpoint(r.domain, i, &ep, nullptr), -FI_EINVAL) << "RDM endpoints have no passive side";
    freeinfo(i);
    // A listening passive endpoint keeps its address.
    ASSERT_EQ(pep_bind(pep, &m.eq->fid, 0), 0);
    ASSERT_EQ(listen(pep), 0);
    i = dupinfo(m.fi);
    i->handle = &pep->fid;
    EXPECT_EQ(endpoint(m.domain, i, &ep, nullptr), -FI_EOPBADSTATE);
    freeinfo(i);
    EXPECT_EQ(close(&pep->fid), 0);
    r.close();
    m.close();
}

namespace {

/** Two MSG endpoints in this process (manual progress: reading a side's
 *  CQ or EQ drives it), b's accepted from its passive endpoint. */
struct msg_pair : ::testing::Test {
    node a, b;
    fid_pep *pep = nullptr;
    struct seen {
        void *ctx;
        cq_tagged_entry e;
        int err;
    };
    std::vector<seen> got[2];

    void SetUp() override
    {
        ASSERT_EQ(a.open(FI_EP_MSG, false), 0);
        ASSERT_EQ(b.open(FI_EP_MSG, false), 0);
        ASSERT_EQ(passive_ep(b.fabric, b.fi, &pep, nullptr), 0);
        ASSERT_EQ(pep_bind(pep, &b.eq->fid, 0), 0);
        ASSERT_EQ(listen(pep), 0);
        std::uint8_t name[64];
        std::size_t len = sizeof name;
        ASSERT_EQ(getname(&pep->fid, name, &len), 0);
        ASSERT_EQ(endpoint(a.domain, a.fi, &a.ep, nullptr), 0);
        ASSERT_EQ(ep_bind(a.ep, &a.cq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(ep_bind(a.ep, &a.eq->fid, 0), 0);
        ASSERT_EQ(connect(a.ep, name, nullptr, 0), 0);
        std::uint32_t ev = 0;
        std::uint8_t buf[256];
        ASSERT_GT(wait_eq(b.eq, ev, buf, sizeof buf), 0);
        ASSERT_EQ(ev, FI_CONNREQ);
        info *req = reinterpret_cast<eq_cm_entry *>(buf)->info;
        ASSERT_EQ(endpoint(b.domain, req, &b.ep, nullptr), 0);
        freeinfo(req);
        ASSERT_EQ(ep_bind(b.ep, &b.cq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(ep_bind(b.ep, &b.eq->fid, 0), 0);
        ASSERT_EQ(accept(b.ep, nullptr, 0), 0);
        for (fid_eq *q : {b.eq, a.eq}) {
            ASSERT_GT(wait_eq(q, ev, buf, sizeof buf), 0);
            ASSERT_EQ(ev, FI_CONNECTED);
        }
    }
    void TearDown() override
    {
        a.close();
        if (pep)
            EXPECT_EQ(close(&pep->fid), 0);
        b.close();
    }
    /** Drive both sides until side @p s (0 a, 1 b) reported @p ctx (success
     *  or error); false after 10 s. */
    bool wait_for(int s, void *ctx)
    {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (;;) {
            for (seen &x : got[s])
                if (x.ctx == ctx)
                    return true;
            if (std::chrono::steady_clock::now() > end)
                return false;
            for (int i = 0; i < 2; i++) {
                fid_cq *cq = i ? b.cq : a.cq;
                cq_tagged_entry e{};
                ssize_t n = cq_read(cq, &e, 1);
                if (n == 1) {
                    got[i].push_back({e.op_context, e, 0});
                } else if (n == -FI_EAVAIL) {
                    cq_err_entry er{};
                    if (cq_readerr(cq, &er, 0) == 1)
                        got[i].push_back({er.op_context, e, er.err});
                }
            }
        }
    }
    int err_of(int s, void *ctx)
    {
        for (seen &x : got[s])
            if (x.ctx == ctx)
                return x.err;
        return -1;
    }
    /** Side @p n's next EQ event within 10 s, its CQ read meanwhile. */
    std::uint32_t next_event(node &n)
    {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::chrono::steady_clock::now() < end) {
            std::uint32_t ev = 0;
            std::uint8_t buf[256];
            if (eq_read(n.eq, &ev, buf, sizeof buf, 0) > 0)
                return ev;
            cq_tagged_entry e{};
            if (cq_read(n.cq, &e, 1) == 1)
                got[&n == &b].push_back({e.op_context, e, 0});
        }
        return 0;
    }
};

} // namespace

// fi_shutdown ends the connection for new operations; what was in flight
// when it was called (here rendezvous messages both ways, whose fins and
// reads travel after the shutdown notice's sender stopped taking new work)
// still completes, on both sides, bytes intact.
TEST_F(msg_pair, ShutdownLetsWhatWasInFlightComplete)
{
    const std::size_t len = 64 << 10; // a rendezvous from private memory
    std::vector<std::uint8_t> a_out(len), b_out(len), a_in(len), b_in(len);
    fill_pattern(a_out.data(), len, 21);
    fill_pattern(b_out.data(), len, 22);
    context ar, as, br, bs;
    ASSERT_EQ(recv(a.ep, a_in.data(), len, nullptr, 0, &ar), 0);
    ASSERT_EQ(recv(b.ep, b_in.data(), len, nullptr, 0, &br), 0);
    ASSERT_EQ(send(a.ep, a_out.data(), len, nullptr, 0, &as), 0);
    ASSERT_EQ(send(b.ep, b_out.data(), len, nullptr, 0, &bs), 0);
    ASSERT_EQ(shutdown(a.ep, 0), 0);
    EXPECT_EQ(send(a.ep, a_out.data(), 8, nullptr, 0, nullptr), -FI_ENOTCONN);
    for (auto [s, c] : {std::pair{0, &ar}, {0, &as}, {1, &br}, {1, &bs}}) {
        ASSERT_TRUE(wait_for(s, c)) << "side " << s << ": an operation in flight at the shutdown never completed";
        EXPECT_EQ(err_of(s, c), 0) << "side " << s;
    }
    EXPECT_EQ(a_in, b_out);
    EXPECT_EQ(b_in, a_out);
    EXPECT_EQ(next_event(b), std::uint32_t(FI_SHUTDOWN));
    EXPECT_EQ(send(b.ep, b_out.data(), 8, nullptr, 0, nullptr), -FI_ENOTCONN);
}

// A message that waits unexpected at the peer when the sender shuts down
// is still the peer's to receive, after its FI_SHUTDOWN; the sender's send
// completes then.
TEST_F(msg_pair, AMessageUnexpectedAtTheShutdownIsStillReceived)
{
    const std::size_t len = 64 << 10;
    std::vector<std::uint8_t> out(len), in(len);
    fill_pattern(out.data(), len, 23);
    context s, r;
    ASSERT_EQ(send(a.ep, out.data(), len, nullptr, 0, &s), 0);
    ASSERT_EQ(shutdown(a.ep, 0), 0);
    ASSERT_EQ(next_event(b), std::uint32_t(FI_SHUTDOWN));
    ASSERT_EQ(recv(b.ep, in.data(), len, nullptr, 0, &r), 0);
    ASSERT_TRUE(wait_for(1, &r));
    EXPECT_EQ(err_of(1, &r), 0);
    EXPECT_EQ(in, out);
    ASSERT_TRUE(wait_for(0, &s)) << "the send of a message received never completed";
    EXPECT_EQ(err_of(0, &s), 0);
}

// An RMA read of private memory is executed by the target's progress: a
// target that shut down still answers the requests that reached it.
TEST_F(msg_pair, ATargetThatShutDownStillAnswersTheReadsItWasSent)
{
    std::vector<std::uint8_t> mem(4096), got_back(4096);
    fill_pattern(mem.data(), mem.size(), 24);
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(b.domain, mem.data(), mem.size(), FI_REMOTE_READ, 0, 0, 0, &mr, nullptr), 0);
    context c;
    ASSERT_EQ(shutdown(b.ep, 0), 0);
    ASSERT_EQ(read(a.ep, got_back.data(), 64, nullptr, 0, reinterpret_cast<std::uint64_t>(mem.data()),
                   mr_key(mr), &c),
              0)
        << "a has not seen the shutdown yet";
    ASSERT_TRUE(wait_for(0, &c)) << "the read never completed";
    EXPECT_EQ(err_of(0, &c), 0);
    EXPECT_EQ(std::memcmp(got_back.data(), mem.data(), 64), 0);
    EXPECT_EQ(close(&mr->fid), 0);
}
