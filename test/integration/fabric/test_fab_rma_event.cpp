// vq provider, two real processes: remote-access counters (FI_RMA_EVENT).
//
// The peer's endpoint is opened with FI_RMA_EVENT, with remote-write and
// remote-read counters bound (ep_bind FI_REMOTE_WRITE / FI_REMOTE_READ) and
// a counter bound to its region (mr_bind FI_REMOTE_WRITE). This process
// performs writes and reads of every size class (inline, one message, one
// RDMA request by the target; injected and with remote CQ data) and atomics
// of every kind on that region, checks the bytes, and then the peer's
// counters must read exactly what was done: remote writes and base atomics
// on the write counter, reads, fetching and compare atomics on the read
// counter, everything that writes on the region's counter. The peer's
// region is private memory (the target's progress executes each access) or
// shareable memory (direct accesses, each followed by a note). A peer whose
// endpoint was opened without FI_RMA_EVENT counts nothing on its region.
//
// The same body runs on the shm driver's device and on the mlx5 driver's
// model of a ConnectX port (mlx5_model0, offered when SHUNT_MLX5_MODEL=1,
// which the fabric-rma-event-mlx5-model test sets): every region there is
// direct (device RDMA and atomics, each followed by its note), and writes
// with remote CQ data are RDMA writes with immediate data. Without that
// device those cases are skipped, saying so.
#include <optional>

#include "fab_client.h"

using namespace shunt;
using namespace shunt::fabric;
using namespace shunt::test::fab;

namespace {

struct event_mode {
    const char *name;
    const char *type;   ///< "rdm" or "msg"
    const char *mem;    ///< the peer's memory: "private" or "shared"
    bool counted;       ///< the peer's endpoint has FI_RMA_EVENT
    const char *domain = ""; ///< the vq device of both sides; "": the shm driver's
};
void PrintTo(const event_mode &m, std::ostream *os) { *os << m.name; }
const event_mode event_modes[] = {
    {"RdmPrivate", "rdm", "private", true},       {"RdmShared", "rdm", "shared", true},
    {"MsgPrivate", "msg", "private", true},       {"MsgShared", "msg", "shared", true},
    {"RdmPrivateNoEvent", "rdm", "private", false}, {"RdmSharedNoEvent", "rdm", "shared", false},
    // The model's regions are all direct, private or not: one memory kind.
    {"Mlx5ModelRdm", "rdm", "private", true, "mlx5_model0"},
    {"Mlx5ModelMsg", "msg", "private", true, "mlx5_model0"},
    {"Mlx5ModelRdmNoEvent", "rdm", "private", false, "mlx5_model0"},
};

/** Does the vq provider offer device @p domain (empty: the default)? */
bool offered(const std::string &domain)
{
    if (domain.empty())
        return true;
    info *h = shm_hints(FI_EP_RDM, false, FI_THREAD_DOMAIN, domain);
    info *fi = nullptr;
    int rc = getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &fi);
    freeinfo(h);
    freeinfo(fi);
    return rc == 0;
}

struct rma_event : ::testing::TestWithParam<event_mode> {
    std::optional<peer_proc> peer;
    node n;
    fi_addr_t to = FI_ADDR_NOTAVAIL;

    void SetUp() override
    {
        const std::string dom = GetParam().domain;
        if (!offered(dom))
            GTEST_SKIP() << "no vq device " << dom << " (SHUNT_MLX5_MODEL=1 offers the model's)";
        std::vector<std::string> env{std::string("FAB_PEER_RMA_EVENT=") + (GetParam().counted ? "1" : "region")};
        if (!dom.empty())
            env.push_back("FAB_PEER_DOMAIN=" + dom);
        peer.emplace(GetParam().type, "manual", GetParam().mem, env);
        peer_proc &p = *peer;
        n.domain_name = dom;
        if (std::string(GetParam().type) == "rdm") {
            connect_peer(n, p, FI_EP_RDM, to);
            return;
        }
        ASSERT_EQ(n.open(FI_EP_MSG, false), 0);
        ASSERT_EQ(endpoint(n.domain, n.fi, &n.ep, nullptr), 0);
        ASSERT_EQ(ep_bind(n.ep, &n.cq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(ep_bind(n.ep, &n.eq->fid, 0), 0);
        ASSERT_EQ(connect(n.ep, p.addr, nullptr, 0), 0);
        std::uint32_t ev = 0;
        std::uint8_t buf[256];
        ASSERT_GT(eq_sread(n.eq, &ev, buf, sizeof buf, 10000, 0), 0);
        ASSERT_EQ(ev, FI_CONNECTED);
        to = 0;
    }
    void TearDown() override { n.close(); }

    response counters()
    {
        request r;
        r.op = shunt::test::fab::counters;
        return peer->call(r);
    }
    /** One operation posted by @p post, completed (bounded). */
    template <class F>
    void done(F &&post, const char *what)
    {
        ASSERT_EQ(retry(n.cq, post), 0) << what;
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1) << what;
    }
};

TEST_P(rma_event, CountersReadExactlyWhatWasDone)
{
    const bool counted = GetParam().counted;
    peer_proc &p = *peer;
    response s0 = counters();
    ASSERT_EQ(s0.rc, 0);
    ASSERT_EQ(s0.n, counted ? 1u : 0u);
    ASSERT_EQ(s0.a + s0.b + s0.c, 0u) << "nothing counted before the first access";
    std::uint64_t writes = 0, reads = 0, atomics = 0, fetches = 0;
    std::vector<std::uint8_t> b(300000), want(300000);
    std::uint64_t seed = 7;
    for (std::size_t len : {std::size_t(8), std::size_t(1000), std::size_t(4096), std::size_t(300000)}) {
        const std::size_t off = 256;
        context c;
        fill_pattern(b.data(), len, seed);
        done([&] { return write(n.ep, b.data(), len, nullptr, to, p.mem + off, p.key, &c); }, "write");
        writes++;
        ASSERT_EQ(p.checksum(off, len), fnv(b.data(), len)) << "write of " << len;
        p.fill(off, len, seed + 1);
        std::memset(b.data(), 0, len);
        done([&] { return read(n.ep, b.data(), len, nullptr, to, p.mem + off, p.key, &c); }, "read");
        reads++;
        fill_pattern(want.data(), len, seed + 1);
        ASSERT_EQ(std::memcmp(b.data(), want.data(), len), 0) << "read of " << len;
        seed += 2;
    }
    // An injected write (no completion: the completed write after it is
    // executed after it) and a write with remote CQ data.
    std::uint64_t v = 0x0102030405060708ULL, w = 0x1112131415161718ULL;
    ASSERT_EQ(retry(n.cq, [&] { return inject_write(n.ep, &v, 8, to, p.mem + 16, p.key); }), 0);
    writes++;
    context c;
    done([&] { return writedata(n.ep, &w, 8, nullptr, 0x77, to, p.mem + 24, p.key, &c); }, "writedata");
    writes++;
    EXPECT_EQ(p.checksum(16, 8), fnv(&v, 8));
    EXPECT_EQ(p.checksum(24, 8), fnv(&w, 8));
    // Atomics on a word set to 0: a base add, a fetching add, an atomic read
    // and a compare-and-swap, each value checked.
    p.fill(0, 64, 0);
    std::uint64_t zero = 0;
    done([&] { return write(n.ep, &zero, 8, nullptr, to, p.mem + 64, p.key, &c); }, "zero");
    writes++;
    std::uint64_t add = 5, res = ~0ULL, cmp = 0, swp = 0;
    done([&] { return atomic(n.ep, &add, 1, nullptr, to, p.mem + 64, p.key, FI_UINT64, FI_SUM, &c); }, "atomic");
    atomics++;
    done([&] {
        return fetch_atomic(n.ep, &add, 1, nullptr, &res, nullptr, to, p.mem + 64, p.key, FI_UINT64, FI_SUM, &c);
    }, "fetch_atomic");
    fetches++;
    EXPECT_EQ(res, 5u);
    done([&] {
        return fetch_atomic(n.ep, nullptr, 1, nullptr, &res, nullptr, to, p.mem + 64, p.key, FI_UINT64, FI_ATOMIC_READ,
                            &c);
    }, "atomic read");
    reads++; // counted as a read, not on the region
    EXPECT_EQ(res, 10u);
    cmp = 10;
    swp = 99;
    done([&] {
        return compare_atomic(n.ep, &swp, 1, nullptr, &cmp, nullptr, &res, nullptr, to, p.mem + 64, p.key, FI_UINT64,
                              FI_CSWAP, &c);
    }, "compare_atomic");
    fetches++;
    EXPECT_EQ(res, 10u);
    std::uint64_t final_word = 99;
    EXPECT_EQ(p.checksum(64, 8), fnv(&final_word, 8));

    // A message echoed by the peer: it went on the same QP after every
    // access and note, so once its echo is here the peer's progress has
    // counted all of them, and anything counted twice or for nothing shows.
    std::uint8_t ping[16] = {1, 2, 3}, pong[16] = {};
    context rc, sc;
    ASSERT_EQ(recv(n.ep, pong, sizeof pong, nullptr, FI_ADDR_UNSPEC, &rc), 0);
    ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, ping, sizeof ping, nullptr, to, &sc); }), 0);
    for (int i = 0; i < 2; i++) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1) << "echo";
    }
    ASSERT_EQ(std::memcmp(ping, pong, sizeof ping), 0);
    response s = counters();
    ASSERT_EQ(s.rc, 0);
    EXPECT_EQ(s.a, counted ? writes + atomics : 0) << "remote-write counter: RMA writes and base atomics";
    EXPECT_EQ(s.b, counted ? reads + fetches : 0) << "remote-read counter: reads, fetching and compare atomics";
    EXPECT_EQ(s.c, counted ? writes + atomics + fetches : 0) << "region counter: everything that writes the region";
    EXPECT_EQ(p.stats().c, 0u) << "no errors at the peer";
}

INSTANTIATE_TEST_SUITE_P(Modes, rma_event, ::testing::ValuesIn(event_modes),
                         [](const ::testing::TestParamInfo<event_mode> &i) { return std::string(i.param.name); });

} // namespace
