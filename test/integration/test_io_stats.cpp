// Per-queue and per-endpoint statistics: an shm RC pair and a pair of vq
// provider endpoints send a known number of messages; their io blocks
// (shm.qp.<qpn>, vq.ep.<n>) count exactly that, read through the C++ stats
// API, through DPDK's telemetry socket by dpdk-telemetry.py (another
// process) and by `shunt-info --live PID --json` (another process).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "env/errors.h"
#include "env/stats.h"
#include "env/telemetry.h"
#include "telemetry_query.h"
#include "fabric/api.h"
#include "fabric/fab_common.h"
#include "vq/vq.h"

using namespace shunt;
namespace st = shunt::env::stats;
namespace fab = shunt::fabric;
namespace tf = shunt::test::fab; // the integration tests' helpers

namespace {

constexpr int msgs = 100;
constexpr std::uint32_t size = 40;

std::uint64_t field(const st::block_snapshot &b, const char *name)
{
    const st::field_value *f = b.find(name);
    EXPECT_NE(f, nullptr) << b.name << " has no " << name;
    return f ? f->value : ~0ull;
}

/** Field @p f of block @p name as another process reads it through this
 *  process's telemetry socket: dpdk-telemetry.py, or shunt-info --live. */
std::string remote_value(bool by_info, const std::string &name, const char *f)
{
    if (!by_info)
        return test::telemetry_field(name, f);
    const std::string cmd = std::string("timeout 20 '") + SHUNT_INFO_PATH + "' --live " + std::to_string(::getpid()) +
                            " --count 1 --json 2>&1 | " +
                            "timeout 20 python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())[\"blocks\"][sys.argv[1]][sys.argv[2]])' " +
                            name + " " + f;
    int status = 0;
    std::string out = test::run_cmd(cmd, &status);
    return test::cmd_result(out, status);
}

void expect_remote(const std::string &name, const char *f, std::uint64_t want)
{
    if (test::have_prog("dpdk-telemetry.py"))
        EXPECT_EQ(remote_value(false, name, f), std::to_string(want)) << "dpdk-telemetry.py, " << name << " " << f;
    else
        std::printf("skip dpdk-telemetry.py (Debian package dpdk-dev) is not installed\n");
    EXPECT_EQ(remote_value(true, name, f), std::to_string(want)) << "shunt-info --live, " << name << " " << f;
}

struct rc_pair {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cqa = nullptr, *cqb = nullptr;
    vq::qp *a = nullptr, *b = nullptr;
    vq::mr *mr = nullptr;
    std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(1 << 16);

    void open()
    {
        ASSERT_EQ(vq::open_device(vq::find_device("shm0"), &ctx), 0);
        ASSERT_EQ(vq::alloc_pd(ctx, &pd), 0);
        vq::cq_init_attr ca;
        ca.cqe = 1024;
        ASSERT_EQ(vq::create_cq(ctx, &ca, &cqa), 0);
        ASSERT_EQ(vq::create_cq(ctx, &ca, &cqb), 0);
        vq::qp_init_attr ia;
        ia.send_cq = ia.recv_cq = cqa;
        ia.cap.max_send_wr = 256;
        ia.cap.max_recv_wr = 256;
        ASSERT_EQ(vq::create_qp(pd, &ia, &a), 0);
        ia.send_cq = ia.recv_cq = cqb;
        ASSERT_EQ(vq::create_qp(pd, &ia, &b), 0);
        ASSERT_EQ(vq::reg_mr(pd, buf.data(), buf.size(), vq::ACCESS_LOCAL_WRITE, &mr), 0);
        for (auto [q, peer] : {std::pair{a, b}, std::pair{b, a}}) {
            vq::qp_attr at;
            vq::qp_addr pa = vq::get_qp_addr(peer);
            at.state = vq::qp_state::init;
            ASSERT_EQ(vq::modify_qp(q, &at, vq::QP_ATTR_STATE), 0);
            at.state = vq::qp_state::rtr;
            at.dest = pa.dev;
            at.dest_qp_num = pa.qpn;
            ASSERT_EQ(vq::modify_qp(q, &at, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN), 0);
            at.state = vq::qp_state::rts;
            ASSERT_EQ(vq::modify_qp(q, &at, vq::QP_ATTR_STATE), 0);
        }
    }
    ~rc_pair()
    {
        if (mr)
            (void)vq::dereg_mr(mr);
        for (vq::qp *q : {a, b})
            if (q)
                (void)vq::destroy_qp(q);
        for (vq::cq *c : {cqa, cqb})
            if (c)
                (void)vq::destroy_cq(c);
        if (pd)
            (void)vq::dealloc_pd(pd);
        if (ctx)
            (void)vq::close_device(ctx);
    }
};

/** Poll @p c until it gave @p n completions (bounded). */
int reap(vq::cq *c, int n, std::vector<vq::wc> &out)
{
    for (long spins = 0; int(out.size()) < n && spins < 100000000; spins++) {
        vq::wc w[16];
        int k = vq::poll_cq(c, 16, w);
        if (k < 0)
            return k;
        out.insert(out.end(), w, w + k);
    }
    return int(out.size());
}

} // namespace

TEST(IoStats, ShmQueuePairCountsWhatWasSent)
{
    if (!st::enabled())
        GTEST_SKIP() << "SHUNT_TELEMETRY=0";
    rc_pair p;
    ASSERT_NO_FATAL_FAILURE(p.open());
    const std::string na = "shm.qp." + std::to_string(p.a->qp_num), nb = "shm.qp." + std::to_string(p.b->qp_num);
    const auto base = reinterpret_cast<std::uint64_t>(p.buf.data());
    for (int i = 0; i < msgs; i++)
        ASSERT_EQ(vq::post_recv(p.b, std::uint64_t(i), base + 4096 + std::uint64_t(i) * 64, 64, p.mr->lkey), 0);
    // Half inline and unsignaled (the driver's single-call fast path), half
    // from registered memory and signalled (the send queue, with latency).
    for (int i = 0; i < msgs; i++) {
        std::vector<vq::wc> sc;
        if (i % 2) {
            ASSERT_EQ(vq::post_send(p.a, std::uint64_t(i), p.buf.data(), size, 0, vq::WR_INLINE), 0);
        } else {
            ASSERT_EQ(vq::post_send(p.a, std::uint64_t(i), p.buf.data(), size, p.mr->lkey, vq::WR_SIGNALED), 0);
            ASSERT_EQ(reap(p.cqa, 1, sc), 1);
            ASSERT_EQ(sc[0].status, vq::wc_status::success);
        }
    }
    std::vector<vq::wc> rw;
    ASSERT_EQ(reap(p.cqb, msgs, rw), msgs);
    for (const vq::wc &w : rw)
        ASSERT_TRUE(w.status == vq::wc_status::success && w.byte_len == size);

    st::block_snapshot sa, sb;
    ASSERT_EQ(st::read(na, sa), 0) << na;
    ASSERT_EQ(st::read(nb, sb), 0) << nb;
    EXPECT_EQ(sa.type, "io");
    EXPECT_EQ(field(sa, "tx_msgs"), std::uint64_t(msgs));
    EXPECT_EQ(field(sa, "tx_bytes"), std::uint64_t(msgs) * size);
    EXPECT_EQ(field(sa, "rx_msgs"), 0u);
    EXPECT_EQ(field(sa, "errors"), 0u);
    EXPECT_GE(field(sa, "depth_max"), 1u);
    EXPECT_EQ(sa.find("completion")->hist.total, std::uint64_t(msgs / 2)) << "one latency per signalled send";
    EXPECT_GT(sa.find("completion")->hist.max, 0u);
    EXPECT_EQ(field(sb, "rx_msgs"), std::uint64_t(msgs));
    EXPECT_EQ(field(sb, "rx_bytes"), std::uint64_t(msgs) * size);
    EXPECT_EQ(field(sb, "tx_msgs"), 0u);

    // Through the telemetry socket, from other processes.
    expect_remote(na, "tx_msgs", msgs);
    expect_remote(nb, "rx_bytes", std::uint64_t(msgs) * size);

    // An error completion: a send from memory no region covers.
    std::vector<vq::wc> sc;
    ASSERT_EQ(vq::post_send(p.a, 7, p.buf.data(), size, p.mr->lkey + 1000, vq::WR_SIGNALED), 0);
    ASSERT_EQ(reap(p.cqa, 1, sc), 1);
    EXPECT_NE(sc[0].status, vq::wc_status::success);
    ASSERT_EQ(st::read(na, sa), 0);
    EXPECT_EQ(field(sa, "errors"), 1u);
    EXPECT_EQ(field(sa, "tx_msgs"), std::uint64_t(msgs)) << "a failed send is no message";

    // Destroying the QP removes its block.
    ASSERT_EQ(vq::destroy_qp(p.a), 0);
    p.a = nullptr;
    EXPECT_EQ(st::read(na, sa), -FI_ENOENT);
}

TEST(IoStats, VqEndpointsCountWhatWasSent)
{
    using namespace shunt::fabric; // FI_* names
    if (!st::enabled())
        GTEST_SKIP() << "SHUNT_TELEMETRY=0";
    const std::vector<std::string> before = st::list();
    fab::info *h = tf::shm_hints(FI_EP_RDM, false);
    h->caps = FI_MSG;
    fab::info *fi = nullptr;
    ASSERT_EQ(fab::getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &fi), 0);
    fab::freeinfo(h);
    fab::fid_fabric *fabric = nullptr;
    fab::fid_domain *dom = nullptr;
    ASSERT_EQ(fab::fabric_open(fi->fabric_attr, &fabric, nullptr), 0);
    ASSERT_EQ(fab::domain_open(fabric, fi, &dom, nullptr), 0);
    struct side {
        fab::fid_ep *ep = nullptr;
        fab::fid_cq *cq = nullptr;
        fab::fid_av *av = nullptr;
        std::uint8_t addr[64] = {};
        fab::fi_addr_t peer = 0;
    } s[2];
    for (side &x : s) {
        fab::cq_attr ca;
        ca.format = FI_CQ_FORMAT_MSG;
        fab::av_attr aa;
        ASSERT_EQ(fab::cq_open(dom, &ca, &x.cq, nullptr), 0);
        ASSERT_EQ(fab::av_open(dom, &aa, &x.av, nullptr), 0);
        ASSERT_EQ(fab::endpoint(dom, fi, &x.ep, nullptr), 0);
        ASSERT_EQ(fab::ep_bind(x.ep, &x.cq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(fab::ep_bind(x.ep, &x.av->fid, 0), 0);
        ASSERT_EQ(fab::enable(x.ep), 0);
        std::size_t len = sizeof x.addr;
        ASSERT_EQ(fab::getname(&x.ep->fid, x.addr, &len), 0);
    }
    ASSERT_EQ(fab::av_insert(s[0].av, s[1].addr, 1, &s[0].peer, 0, nullptr), 1);
    ASSERT_EQ(fab::av_insert(s[1].av, s[0].addr, 1, &s[1].peer, 0, nullptr), 1);
    // The two new endpoint blocks (vq.ep.<n>, not the vq.ep.<n>.<part>
    // beside them): the sender's opened first.
    std::vector<std::string> eps;
    for (const std::string &n : st::list())
        if (n.rfind("vq.ep.", 0) == 0 && n.find('.', 6) == std::string::npos &&
            std::find(before.begin(), before.end(), n) == before.end())
            eps.push_back(n);
    ASSERT_EQ(eps.size(), 2u);
    std::sort(eps.begin(), eps.end(), [](const std::string &x, const std::string &y) {
        return std::stoul(x.substr(6)) < std::stoul(y.substr(6));
    });

    std::vector<std::uint8_t> rbuf(std::size_t(msgs) * size), sbuf(size, 0x5a);
    fab::context ctx[msgs];
    for (int i = 0; i < msgs; i++)
        ASSERT_EQ(fab::recv(s[1].ep, &rbuf[std::size_t(i) * size], size, nullptr, s[1].peer, &ctx[i]), 0);
    // Half by inject (no completion), half by send (a completion each).
    int sent = 0, got = 0, send_done = 0;
    const int want_sends = msgs / 2;
    for (long spins = 0; (sent < msgs || got < msgs || send_done < want_sends) && spins < 100000000; spins++) {
        if (sent < msgs) {
            ssize_t rc = sent % 2 ? fab::inject(s[0].ep, sbuf.data(), size, s[0].peer)
                                  : fab::send(s[0].ep, sbuf.data(), size, nullptr, s[0].peer, nullptr);
            if (rc == 0)
                sent++;
            else
                ASSERT_EQ(rc, -FI_EAGAIN);
        }
        fab::cq_msg_entry e[16];
        ssize_t n = fab::cq_read(s[0].cq, e, 16);
        if (n > 0)
            send_done += int(n);
        else
            ASSERT_EQ(n, -FI_EAGAIN);
        n = fab::cq_read(s[1].cq, e, 16);
        if (n > 0)
            got += int(n);
        else
            ASSERT_EQ(n, -FI_EAGAIN);
    }
    ASSERT_EQ(sent, msgs);
    ASSERT_EQ(got, msgs);
    ASSERT_EQ(send_done, want_sends);

    st::block_snapshot tx, rx;
    ASSERT_EQ(st::read(eps[0], tx), 0);
    ASSERT_EQ(st::read(eps[1], rx), 0);
    EXPECT_EQ(field(tx, "tx_msgs"), std::uint64_t(msgs));
    EXPECT_EQ(field(tx, "tx_bytes"), std::uint64_t(msgs) * size);
    EXPECT_EQ(field(tx, "errors"), 0u);
    EXPECT_EQ(field(tx, "rx_msgs"), 0u);
    EXPECT_EQ(tx.find("completion")->hist.total, std::uint64_t(want_sends)) << "one latency per completed send";
    EXPECT_EQ(field(rx, "rx_msgs"), std::uint64_t(msgs));
    EXPECT_EQ(field(rx, "rx_bytes"), std::uint64_t(msgs) * size);
    EXPECT_EQ(field(rx, "tx_msgs"), 0u);
    EXPECT_EQ(field(rx, "drops"), 0u);

    expect_remote(eps[0], "tx_msgs", msgs);
    expect_remote(eps[1], "rx_bytes", std::uint64_t(msgs) * size);

    for (side &x : s) {
        (void)fab::close(&x.ep->fid);
        (void)fab::close(&x.av->fid);
        (void)fab::close(&x.cq->fid);
    }
    EXPECT_EQ(st::read(eps[0], tx), -FI_ENOENT) << "closing the endpoint removes its block";
    (void)fab::close(&dom->fid);
    (void)fab::close(&fabric->fid);
    fab::freeinfo(fi);
}
