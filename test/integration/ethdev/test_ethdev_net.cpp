// drivers/ethdev through real kernels: processes (eth_node, shunt-fwd) in
// network namespaces this test makes and removes, joined by veth pairs, on
// net_af_packet and net_af_xdp ports; net_memif between processes; net_tap
// for the offload path. RC delivers every message exactly once and in order
// through random drop, duplication, reordering and corruption (shunt-fwd as a
// netem box between two veth pairs) and through real burst loss (a tbf rate
// limit on the sender's link); a cut link ends in retry_exc_err within the
// configured time; TSO and checksums are checked on the wire by this file's
// decoder (test/common/frame_check.h) in hardware (net_tap) and software
// (net_af_packet) modes; malformed frames from the wire are dropped and
// counted; ARP answers a kernel and resolves one.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "frame_check.h"
#include "net_common.h"
#include "netns.h"

namespace shunt::test::net {
namespace {

using clk = std::chrono::steady_clock;

const char *node_path() { return ETH_NODE_PATH; }
const char *fwd_path() { return SHUNT_FWD_PATH; }

#define NET_REQUIRE()                                                                              \
    do {                                                                                           \
        std::string why_ = unavailable();                                                          \
        if (!why_.empty())                                                                         \
            GTEST_SKIP() << why_;                                                                  \
    } while (0)

/** The EAL argument that makes port @p n of a process on @p iface. */
std::string vdev(const std::string &pmd, const std::string &iface, bool bypass_qdisc = true, int n = 0,
                 int qpairs = 1)
{
    const std::string i = std::to_string(n);
    if (pmd == "af_xdp")
        return "--vdev=net_af_xdp" + i + ",iface=" + iface + ",start_queue=0,queue_count=1,force_copy=1";
    return "--vdev=net_af_packet" + i + ",iface=" + iface + ",qpairs=" + std::to_string(qpairs) +
           ",qdisc_bypass=" + (bypass_qdisc ? "1" : "0");
}
std::string devname(const std::string &pmd) { return pmd == "af_xdp" ? "net_af_xdp0" : "net_af_packet0"; }

std::map<std::string, std::string> node_env(const std::string &eal)
{
    return {{"SHUNT_EAL_ARGS", eal}, {"SHUNT_LOG_LEVEL", "warning"}};
}

/** The value of counter @p name in a COUNTERS line (0 when absent). */
std::uint64_t counter(const std::string &line, const char *name)
{
    auto f = fields(line);
    return f.count(name) ? std::stoull(f[name]) : 0;
}
/** The last line of @p p that starts with @p prefix. */
std::string last(const proc &p, const std::string &prefix)
{
    for (auto it = p.lines_seen().rbegin(); it != p.lines_seen().rend(); ++it)
        if (it->rfind(prefix, 0) == 0)
            return *it;
    return "";
}

/** Tell each node of a pair the other's address (@p xa: A's ADDR line when
 *  it was read already). */
bool exchange(proc &a, proc &b, std::string *la = nullptr, std::string *lb = nullptr, const std::string &xa = "")
{
    std::string x = xa.empty() ? a.expect("ADDR", 30000) : xa, y = b.expect("ADDR", 30000);
    EXPECT_FALSE(x.empty()) << "node A did not start";
    EXPECT_FALSE(y.empty()) << "node B did not start";
    if (x.empty() || y.empty())
        return false;
    if (la)
        *la = x;
    if (lb)
        *lb = y;
    return a.say("PEER " + y.substr(5)) && b.say("PEER " + x.substr(5));
}

struct rc_run {
    std::uint64_t count = 300;
    std::uint32_t max = 16384;
    std::uint64_t seed = 1;
    std::vector<std::string> sender_extra, receiver_extra;
    int timeout_ms = 120000;
    bool a_first = false; ///< B starts once A's port is up (a net_memif client needs the server's socket)
    std::map<std::string, std::string> env; ///< more environment for both nodes
};

/** RC sender in @p ns_a on @p eal_a, receiver in @p ns_b on @p eal_b: every
 *  message arrives exactly once, in order, bytes checked (by the receiver).
 *  @return the two COUNTERS lines (sender, receiver). */
std::pair<std::string, std::string> rc_exactly_once(const netns *ns_a, const std::string &dev_a,
                                                    const std::string &eal_a, const netns *ns_b,
                                                    const std::string &dev_b, const std::string &eal_b,
                                                    const rc_run &r)
{
    std::vector<std::string> common{"--mode=rc", "--count=" + std::to_string(r.count),
                                    "--max=" + std::to_string(r.max), "--seed=" + std::to_string(r.seed)};
    std::vector<std::string> sa{node_path(), "--dev=" + dev_a, "--role=send"};
    std::vector<std::string> sb{node_path(), "--dev=" + dev_b, "--role=recv"};
    sa.insert(sa.end(), common.begin(), common.end());
    sb.insert(sb.end(), common.begin(), common.end());
    sa.insert(sa.end(), r.sender_extra.begin(), r.sender_extra.end());
    sb.insert(sb.end(), r.receiver_extra.begin(), r.receiver_extra.end());
    auto env_a = node_env(eal_a), env_b = node_env(eal_b);
    env_a.insert(r.env.begin(), r.env.end());
    env_b.insert(r.env.begin(), r.env.end());
    proc a(ns_a, sa, env_a);
    std::string xa;
    if (r.a_first) {
        xa = a.expect("ADDR", 30000);
        EXPECT_FALSE(xa.empty()) << "node A did not start";
    }
    proc b(ns_b, sb, env_b);
    EXPECT_TRUE(a.ok() && b.ok());
    if (!exchange(a, b, nullptr, nullptr, xa))
        return {};
    EXPECT_FALSE(a.expect("READY", 30000).empty());
    EXPECT_FALSE(b.expect("READY", 30000).empty());
    a.say("GO");
    std::string ra = a.expect("RESULT", r.timeout_ms);
    std::string rb = b.expect("RESULT", 10000);
    if (rb.empty()) {
        b.say("COUNTERS");
        rb = "(none; " + b.expect("COUNTERS", 5000) + ")";
    }
    EXPECT_EQ(ra.rfind("RESULT ok", 0), 0u) << "sender: " << ra << "\n  " << last(a, "COUNTERS");
    EXPECT_EQ(rb.rfind("RESULT ok", 0), 0u) << "receiver: " << rb << "\n  " << last(b, "COUNTERS");
    EXPECT_EQ(fields(ra)["msgs"], std::to_string(r.count));
    EXPECT_EQ(fields(rb)["msgs"], std::to_string(r.count)) << "every message once (the receiver checks order and bytes)";
    EXPECT_EQ(fields(ra)["bytes"], fields(rb)["bytes"]);
    EXPECT_EQ(a.finish(10000), 0);
    EXPECT_EQ(b.finish(10000), 0);
    return {last(a, "COUNTERS"), last(b, "COUNTERS")};
}

/* ---------------- RC over a veth pair ---------------- */

class Veth : public ::testing::TestWithParam<const char *> {};

TEST_P(Veth, RcDeliversEveryMessageOnceInOrderBetweenTwoNamespaces)
{
    NET_REQUIRE();
    const std::string pmd = GetParam();
    netns na("a"), nb("b");
    ASSERT_TRUE(na.ok() && nb.ok());
    veth v(na, nb, "v");
    ASSERT_TRUE(v.ok);
    if (pmd == "af_xdp") {
        // Visibly skipped where the kernel refuses AF_XDP on a veth.
        proc probe(&na, {node_path(), "--mode=ud-sink", "--dev=net_af_xdp0"}, node_env(vdev(pmd, v.a)));
        if (probe.expect("ADDR", 30000).empty())
            GTEST_SKIP() << "the kernel refused an AF_XDP socket on a veth (net_af_xdp port did not start): "
                         << last(probe, "RESULT");
    }
    rc_run r;
    r.count = 400;
    r.max = 65536;
    auto [ca, cb] = rc_exactly_once(&na, devname(pmd), vdev(pmd, v.a), &nb, devname(pmd), vdev(pmd, v.b), r);
    EXPECT_EQ(counter(cb, "rx_bad_icrc"), 0u);
}

TEST(Veth, RcDeliversEveryMessageWhenThePortSpreadsFramesOverTwoQueues)
{
    // net_af_packet with two queue pairs: its sockets join a fanout group,
    // so the kernel spreads received frames over both queues by a hash of
    // their addresses and ports (the RC flow's UDP source port comes from
    // its QP number, random per process). The driver must receive RoCE
    // frames from whichever queue they land on. Several rounds: each has
    // new QP numbers, so the flows land on either queue.
    NET_REQUIRE();
    netns na("a"), nb("b");
    ASSERT_TRUE(na.ok() && nb.ok());
    veth v(na, nb, "v");
    ASSERT_TRUE(v.ok);
    for (int round = 0; round < 4 && !HasFailure(); round++) {
        SCOPED_TRACE("round " + std::to_string(round));
        rc_run r;
        r.count = 100;
        r.max = 8192;
        r.seed = static_cast<std::uint64_t>(round) + 7;
        r.timeout_ms = 30000;
        r.env = {{"SHUNT_ETHDEV_QUEUES", "2"}};
        rc_exactly_once(&na, "net_af_packet0", vdev("af_packet", v.a, true, 0, 2), &nb, "net_af_packet0",
                        vdev("af_packet", v.b, true, 0, 2), r);
    }
}

INSTANTIATE_TEST_SUITE_P(Pmd, Veth, ::testing::Values("af_packet", "af_xdp"),
                         [](const ::testing::TestParamInfo<const char *> &i) { return std::string(i.param); });

/* ---------------- The interface's MTU ---------------- */

TEST(Veth, PortsTakeTheKernelInterfacesMtuWhereThePmdAcceptsIt)
{
    // A veth of MTU 3000: net_af_xdp takes it (2048-byte RoCE packets);
    // net_af_packet with its default 2048-byte frames refuses it and keeps
    // 1500 (1024-byte packets); with 4096-byte frames it takes it, once the
    // port's packet buffers are as large as its frames. Either way 64 KiB
    // messages go through.
    NET_REQUIRE();
    netns na("a"), nb("b");
    ASSERT_TRUE(na.ok() && nb.ok());
    veth v(na, nb, "m", "", "", 3000);
    ASSERT_TRUE(v.ok);
    for (const std::string var : {"af_xdp", "af_packet", "af_packet,framesz=4096"}) {
        SCOPED_TRACE(var);
        const std::string pmd = var.substr(0, var.find(','));
        const std::string extra = var.find(',') == std::string::npos ? "" : var.substr(var.find(','));
        const bool jumbo = var != "af_packet";
        proc probe(&na, {node_path(), "--mode=ud-sink", "--dev=" + devname(pmd)}, node_env(vdev(pmd, v.a) + extra));
        std::string addr = probe.expect("ADDR", 30000);
        if (addr.empty() && pmd == "af_xdp") {
            std::printf("[ SKIPPED  ] net_af_xdp: the kernel refused an AF_XDP socket on a veth\n");
            continue;
        }
        ASSERT_FALSE(addr.empty()) << "the port did not start: " << last(probe, "RESULT");
        probe.say("QUIT");
        EXPECT_EQ(probe.finish(10000), 0);
        auto f = fields(addr);
        EXPECT_EQ(f["mtu"], jumbo ? "3000" : "1500") << addr;
        EXPECT_EQ(f["path_mtu"], jumbo ? "2048" : "1024") << addr;
        rc_run r;
        r.count = 100;
        r.max = 65536;
        auto [ca, cb] = rc_exactly_once(&na, devname(pmd), vdev(pmd, v.a) + extra, &nb, devname(pmd),
                                        vdev(pmd, v.b) + extra, r);
        EXPECT_EQ(counter(cb, "rx_bad_icrc"), 0u);
    }
}

/* ---------------- RC over net_memif between two processes ---------------- */

TEST(Memif, RcDeliversEveryMessageOnceInOrderBetweenTwoProcesses)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root (the memif socket directory)";
    const std::string sock = "/run/shunt-net-memif-" + std::to_string(getpid()) + ".sock";
    rc_run r;
    r.count = 400;
    r.max = 65536;
    r.a_first = true; // the server's socket exists before the client connects
    rc_exactly_once(nullptr, "net_memif0", "--vdev=net_memif0,role=server,id=0,socket=" + sock, nullptr,
                    "net_memif0", "--vdev=net_memif0,role=client,id=0,socket=" + sock, r);
    ::unlink(sock.c_str());
}

/* ---------------- Impairments through shunt-fwd ---------------- */

struct impair {
    const char *name;
    std::vector<std::string> args;
    bool lend = false; ///< the receiver lends its receives (and the sender only sends)
};

class Impaired : public ::testing::TestWithParam<impair> {};

TEST_P(Impaired, RcDeliversEveryMessageOnceInOrderThroughShuntFwd)
{
    NET_REQUIRE();
    // A (node) --veth-- F (shunt-fwd: a netem box) --veth-- B (node)
    netns na("a"), nf("f"), nb("b");
    ASSERT_TRUE(na.ok() && nf.ok() && nb.ok());
    veth l1(na, nf, "l"), l2(nf, nb, "r");
    ASSERT_TRUE(l1.ok && l2.ok);
    std::vector<std::string> fa{fwd_path(), "-p", "net_af_packet0,net_af_packet1", "-s", "0", "-j",
                                "--eal=" + vdev("af_packet", l1.b) + " " + vdev("af_packet", l2.a, true, 1)};
    fa.insert(fa.end(), GetParam().args.begin(), GetParam().args.end());
    proc fwd(&nf, fa, {{"SHUNT_LOG_LEVEL", "warning"}}, true);
    ASSERT_TRUE(fwd.ok());
    ASSERT_FALSE(fwd.expect("shunt-fwd: forwarding", 30000).empty()) << "shunt-fwd did not start";
    rc_run r;
    r.count = 300;
    r.max = 16384;
    r.seed = 7;
    // The driver's default retransmit timer, 268 ms (timeout 16), 7
    // retries: three polling processes share this machine's cores, and one
    // descheduled for a few time slices must not look like a dead link
    // (with 67 ms, corrupted runs on a loaded host ran out of retries).
    r.sender_extra = {"--timeout=16", "--retry=7"};
    if (GetParam().lend) {
        r.receiver_extra = {"--lend=1"};
        r.sender_extra.push_back("--sends=1");
    }
    auto [ca, cb] = rc_exactly_once(&na, "net_af_packet0", vdev("af_packet", l1.a), &nb, "net_af_packet0",
                                    vdev("af_packet", l2.b), r);
    ::kill(fwd.pid(), SIGINT);
    std::string js;
    for (;;) {
        bool to = false;
        std::string l = fwd.line(10000, &to);
        if (to)
            break;
        js += l;
    }
    EXPECT_EQ(fwd.finish(10000), 0);
    ASSERT_NE(js.find("\"directions\""), std::string::npos) << "no JSON summary from shunt-fwd";
    auto total = [&](const char *key) { // the sum over both directions of "key": N
        std::uint64_t s = 0;
        for (std::size_t at = js.find(key); at != std::string::npos; at = js.find(key, at + 1))
            s += std::strtoull(js.c_str() + at + std::strlen(key) + 1, nullptr, 10);
        return s;
    };
    const std::string n = GetParam().lend ? "all" : GetParam().name;
    if (n == "drop" || n == "all") {
        EXPECT_GT(total("\"dropped\""), 0u) << js;
    }
    if (n == "dup" || n == "all") {
        EXPECT_GT(total("\"duplicated\""), 0u) << js;
    }
    if (n == "reorder" || n == "all") {
        EXPECT_GT(total("\"reordered\""), 0u) << js;
    }
    if (n == "corrupt" || n == "all") {
        EXPECT_GT(total("\"corrupted\""), 0u) << js;
        EXPECT_GT(counter(ca, "rx_bad_icrc") + counter(cb, "rx_bad_icrc") + counter(ca, "rx_bad_ip") +
                      counter(cb, "rx_bad_ip") + counter(ca, "rx_bad_len") + counter(cb, "rx_bad_len") +
                      counter(ca, "rx_no_qp") + counter(cb, "rx_no_qp") + counter(ca, "rx_bad_opcode") +
                      counter(cb, "rx_bad_opcode") + counter(ca, "rx_bad_bth") + counter(cb, "rx_bad_bth"),
                  0u)
            << "corrupted frames were neither caught nor counted\n" << ca << "\n" << cb;
    }
    if (n != "none") {
        EXPECT_GT(counter(ca, "tx_retransmit") + counter(ca, "rx_seq") + counter(cb, "rx_seq"), 0u)
            << "the impairment never reached the transport\n" << ca << "\n" << cb;
    }
}

void PrintTo(const impair &i, std::ostream *os) { *os << i.name; }

INSTANTIATE_TEST_SUITE_P(Netem, Impaired,
                         ::testing::Values(impair{"none", {}}, impair{"drop", {"--drop=0.03", "--seed=11"}},
                                           impair{"dup", {"--dup=0.05", "--seed=12"}},
                                           impair{"reorder", {"--reorder=0.05", "--seed=13"}},
                                           impair{"corrupt", {"--corrupt=0.03", "--seed=14"}},
                                           impair{"all", {"--drop=0.02", "--dup=0.02", "--reorder=0.02",
                                                          "--corrupt=0.02", "--seed=15"}},
                                           impair{"all_lent", {"--drop=0.02", "--dup=0.02", "--reorder=0.02",
                                                               "--corrupt=0.02", "--seed=16"}, true}),
                         [](const ::testing::TestParamInfo<impair> &i) { return std::string(i.param.name); });

/* ---------------- Real burst loss: a tbf rate limit ---------------- */

TEST(BurstLoss, RcRepairsWhatATbfRateLimitOnABridgeDrops)
{
    NET_REQUIRE();
    // A --veth-- F (a kernel bridge; its port towards B is rate limited by a
    // tbf with a small queue) --veth-- B: bursts beyond the queue are lost
    // in the bridge, as at a congested switch port. (A tbf on the sender's
    // own veth would not lose anything: net_af_packet without qdisc bypass
    // retries what the qdisc refuses.)
    netns na("a"), nf("f"), nb("b");
    ASSERT_TRUE(na.ok() && nf.ok() && nb.ok());
    veth l1(na, nf, "l"), l2(nf, nb, "r");
    ASSERT_TRUE(l1.ok && l2.ok);
    std::string out;
    ASSERT_EQ(nf.ip({"link", "add", "br0", "type", "bridge"}, &out), 0) << out;
    ASSERT_EQ(nf.ip({"link", "set", l1.b, "master", "br0"}), 0);
    ASSERT_EQ(nf.ip({"link", "set", l2.a, "master", "br0"}), 0);
    ASSERT_EQ(nf.ip({"link", "set", "br0", "up"}), 0);
    ASSERT_EQ(nf.tc({"qdisc", "add", "dev", l2.a, "root", "tbf", "rate", "50mbit", "burst", "16kb", "limit", "24kb"},
                    &out),
              0)
        << out;
    rc_run r;
    r.count = 200;
    r.max = 65536;
    r.seed = 21;
    r.sender_extra = {"--timeout=12", "--retry=7", "--window=8"};
    auto [ca, cb] = rc_exactly_once(&na, "net_af_packet0", vdev("af_packet", l1.a), &nb, "net_af_packet0",
                                    vdev("af_packet", l2.b), r);
    ASSERT_EQ(nf.tc({"-s", "qdisc", "show", "dev", l2.a}, &out), 0);
    auto at = out.find("dropped ");
    ASSERT_NE(at, std::string::npos) << out;
    std::uint64_t dropped = std::stoull(out.substr(at + 8));
    EXPECT_GT(dropped, 0u) << "the tbf dropped nothing: the test proved nothing\n" << out;
    EXPECT_GT(counter(ca, "tx_retransmit"), 0u) << ca;
}

/* ---------------- A cut link ---------------- */

TEST(LinkCut, RcRetriesRunOutIntoRetryExcErrWithinTheConfiguredTimeAndTheRestIsFlushed)
{
    NET_REQUIRE();
    netns na("a"), nb("b");
    ASSERT_TRUE(na.ok() && nb.ok());
    veth v(na, nb, "c");
    ASSERT_TRUE(v.ok);
    // timeout 13: 4.096 us << 13 = 33.6 ms; retry_cnt 3: four transmissions.
    constexpr double per_try_ms = 4.096e-3 * 8192;
    proc a(&na, {node_path(), "--mode=rc", "--role=send", "--dev=net_af_packet0", "--stream=1", "--max=4096",
                 "--timeout=13", "--retry=3", "--window=16"},
           node_env(vdev("af_packet", v.a)));
    proc b(&nb, {node_path(), "--mode=rc", "--role=recv", "--dev=net_af_packet0", "--stream=1", "--max=4096"},
           node_env(vdev("af_packet", v.b)));
    ASSERT_TRUE(exchange(a, b));
    ASSERT_FALSE(a.expect("READY", 30000).empty());
    ASSERT_FALSE(b.expect("READY", 30000).empty());
    a.say("GO");
    ASSERT_FALSE(a.expect("RUNNING", 30000).empty()) << "no traffic before the cut";
    auto cut = clk::now();
    ASSERT_EQ(nb.ip({"link", "set", v.b, "down"}), 0);
    std::string res = a.expect("RESULT", 20000);
    const double waited = std::chrono::duration<double, std::milli>(clk::now() - cut).count();
    ASSERT_FALSE(res.empty()) << "no error completion " << waited << " ms after the cut";
    auto f = fields(res);
    EXPECT_EQ(f["status"], "retry_exc_err") << res;
    // Four transmissions of the oldest packet, a timeout each; generous
    // slack for a loaded machine (the bound is the configured behaviour,
    // not a performance figure).
    const double since_ok = std::stod(f["ms_since_last_ok"]);
    EXPECT_GE(since_ok, 3 * per_try_ms) << res;
    EXPECT_LE(since_ok, 4 * per_try_ms + 2000) << res;
    EXPECT_EQ(f["flushed"], f["outstanding"]) << "every later request is flushed: " << res;
    EXPECT_EQ(f["other"], "0") << res;
    EXPECT_EQ(f["qp_state"], std::to_string(static_cast<int>(6))) << "the QP is in ERR";
}

/* ---------------- TSO and checksums on the wire ---------------- */

/** Check the TCP segments of @p frames: @p count TSO sends of @p len bytes
 *  at @p mss, seeded as eth_node's raw-send makes them. */
void check_tso_segments(const std::vector<std::vector<std::uint8_t>> &frames, std::uint32_t count, std::uint32_t len,
                        std::uint32_t mss, std::uint64_t seed, const std::uint8_t *dst_mac)
{
    const std::uint32_t per = (len + mss - 1) / mss;
    std::vector<const std::vector<std::uint8_t> *> segs;
    for (const auto &f : frames)
        if (f.size() >= 54 && std::memcmp(f.data(), dst_mac, 6) == 0 && be16(f.data() + 12) == 0x0800 &&
            f[14 + 9] == 6)
            segs.push_back(&f);
    ASSERT_EQ(segs.size(), std::size_t{count} * per) << "segments on the wire";
    for (std::uint32_t s = 0; s < count; s++)
        for (std::uint32_t i = 0; i < per; i++) {
            const auto &f = *segs[s * per + i];
            tcp_frame t = decode(f.data(), f.size());
            SCOPED_TRACE("send " + std::to_string(s) + " segment " + std::to_string(i));
            ASSERT_TRUE(t.ok);
            const std::uint32_t part = std::min(mss, len - i * mss);
            EXPECT_EQ(t.payload_len, part) << "segment size";
            EXPECT_EQ(t.ip_len, 40 + part);
            EXPECT_EQ(t.seq, 1000 + s * 1000000u + i * mss) << "sequence number";
            EXPECT_TRUE(t.ip_csum_ok) << "IPv4 checksum";
            EXPECT_TRUE(t.l4_csum_ok) << "TCP checksum";
            const bool lastseg = i + 1 == per;
            EXPECT_EQ(t.flags & 0x09, lastseg ? 0x08 : 0x00) << "PSH (and FIN) only on the last segment";
            bool bytes_ok = true;
            for (std::uint32_t k = 0; k < part && bytes_ok; k++)
                bytes_ok = t.payload[k] == pattern(seed, s, i * mss + k);
            EXPECT_TRUE(bytes_ok) << "payload";
        }
}

/** Frames from @p fd until @p want TCP frames to @p mac arrived or @p ms. */
std::vector<std::vector<std::uint8_t>> capture(int fd, std::size_t want, const std::uint8_t *mac, int ms)
{
    std::vector<std::vector<std::uint8_t>> v;
    std::size_t tcp = 0;
    auto end = clk::now() + std::chrono::milliseconds(ms);
    while (tcp < want && clk::now() < end) {
        auto f = recv_frame(fd, 200);
        if (f.empty())
            continue;
        if (f.size() >= 54 && std::memcmp(f.data(), mac, 6) == 0 && be16(f.data() + 12) == 0x0800 && f[23] == 6)
            tcp++;
        v.push_back(std::move(f));
    }
    // A little more: nothing beyond the expected segments may follow.
    for (auto f = recv_frame(fd, 200); !f.empty(); f = recv_frame(fd, 100))
        v.push_back(std::move(f));
    return v;
}

const std::uint8_t tso_mac[6] = {0x02, 0x00, 0x5e, 0x10, 0x20, 0x30};

TEST(Tso, SoftwareSegmentationOnAfPacketPutsRightSegmentsOnTheWire)
{
    NET_REQUIRE();
    netns na("a"), nb("b");
    ASSERT_TRUE(na.ok() && nb.ok());
    veth v(na, nb, "s");
    ASSERT_TRUE(v.ok);
    int cap = packet_socket(nb, v.b);
    ASSERT_GE(cap, 0);
    constexpr std::uint32_t count = 3, len = 20000, mss = 1400;
    proc a(&na, {node_path(), "--mode=raw-send", "--dev=net_af_packet0", "--count=" + std::to_string(count),
                 "--len=" + std::to_string(len), "--mss=" + std::to_string(mss), "--seed=5",
                 "--dst-mac=02:00:5e:10:20:30"},
           node_env(vdev("af_packet", v.a)));
    ASSERT_FALSE(a.expect("READY", 30000).empty());
    a.say("GO");
    std::string res = a.expect("RESULT", 30000);
    ASSERT_EQ(res.rfind("RESULT ok", 0), 0u) << res;
    EXPECT_EQ(fields(res)["hw_tso"], "0") << "net_af_packet has no TSO: the software path";
    auto frames = capture(cap, count * ((len + mss - 1) / mss), tso_mac, 10000);
    ::close(cap);
    check_tso_segments(frames, count, len, mss, 5, tso_mac);
}

TEST(Tso, PortOffloadOnNetTapPutsRightSegmentsOnTheWire)
{
    NET_REQUIRE();
    netns nt("t");
    ASSERT_TRUE(nt.ok());
    const std::string tap = "s" + std::to_string(getpid() % 100000) + "tap";
    constexpr std::uint32_t count = 3, len = 20000, mss = 1400;
    proc a(&nt, {node_path(), "--mode=raw-send", "--dev=net_tap0", "--count=" + std::to_string(count),
                 "--len=" + std::to_string(len), "--mss=" + std::to_string(mss), "--seed=6",
                 "--dst-mac=02:00:5e:10:20:30"},
           node_env("--vdev=net_tap0,iface=" + tap));
    ASSERT_FALSE(a.expect("READY", 30000).empty());
    // The tap interface exists now (the PMD made it at probe): what the port
    // sends, the kernel receives on it. The node sends after GO.
    int cap = packet_socket(nt, tap);
    ASSERT_GE(cap, 0);
    a.say("GO");
    std::string res = a.expect("RESULT", 30000);
    ASSERT_EQ(res.rfind("RESULT ok", 0), 0u) << res;
    EXPECT_EQ(fields(res)["hw_tso"], "1") << "net_tap advertises TCP_TSO: the port's offload path";
    auto frames = capture(cap, count * ((len + mss - 1) / mss), tso_mac, 10000);
    ::close(cap);
    check_tso_segments(frames, count, len, mss, 6, tso_mac);
}

TEST(Csum, IpCsumFillsBothChecksumsInSoftwareAndOnTheTapOffload)
{
    NET_REQUIRE();
    for (const char *mode : {"af_packet", "tap"}) {
        SCOPED_TRACE(mode);
        netns na("a"), nb("b");
        ASSERT_TRUE(na.ok() && nb.ok());
        const bool tap = std::strcmp(mode, "tap") == 0;
        veth v(na, nb, "k");
        ASSERT_TRUE(v.ok);
        const std::string tapname = "s" + std::to_string(getpid() % 100000) + "tc";
        proc a(&na, {node_path(), "--mode=raw-send", tap ? "--dev=net_tap0" : "--dev=net_af_packet0", "--count=4",
                     "--len=1000", "--csum=1", "--seed=9", "--dst-mac=02:00:5e:10:20:30"},
               node_env(tap ? "--vdev=net_tap0,iface=" + tapname : vdev("af_packet", v.a)));
        ASSERT_FALSE(a.expect("READY", 30000).empty());
        int cap = tap ? packet_socket(na, tapname) : packet_socket(nb, v.b);
        ASSERT_GE(cap, 0);
        a.say("GO");
        std::string res = a.expect("RESULT", 30000);
        ASSERT_EQ(res.rfind("RESULT ok", 0), 0u) << res;
        EXPECT_EQ(fields(res)["hw_csum"], tap ? "1" : "0");
        auto frames = capture(cap, 4, tso_mac, 10000);
        ::close(cap);
        unsigned n = 0;
        for (const auto &f : frames) {
            if (f.size() < 54 || std::memcmp(f.data(), tso_mac, 6) != 0 || f[23] != 6)
                continue;
            tcp_frame t = decode(f.data(), f.size());
            ASSERT_TRUE(t.ok);
            EXPECT_TRUE(t.ip_csum_ok && t.l4_csum_ok) << "frame " << n;
            EXPECT_EQ(t.payload_len, 1000u);
            n++;
        }
        EXPECT_EQ(n, 4u);
    }
}

TEST(Tso, UdTsoSegmentsAreValidRoceDatagramsEachCarryingAFixedUpTcpSegment)
{
    NET_REQUIRE();
    netns na("a"), nb("b");
    ASSERT_TRUE(na.ok() && nb.ok());
    veth v(na, nb, "u");
    ASSERT_TRUE(v.ok);
    int cap = packet_socket(nb, v.b);
    ASSERT_GE(cap, 0);
    auto mac_b = mac_of(nb, v.b);
    ASSERT_EQ(mac_b.size(), 6u);
    constexpr std::uint32_t len = 9000, mss = 900;
    proc a(&na, {node_path(), "--mode=ud-send", "--dev=net_af_packet0", "--count=1", "--len=9000", "--mss=900",
                 "--seed=3", "--qkey=0x1234"},
           node_env(vdev("af_packet", v.a)));
    ASSERT_FALSE(a.expect("ADDR", 30000).empty());
    // The destination: the veth's MAC, an address the kernel does not have.
    char dev[32];
    std::snprintf(dev, sizeof dev, "%02x%02x%02x%02x%02x%02x0a4d0002", mac_b[0], mac_b[1], mac_b[2], mac_b[3],
                  mac_b[4], mac_b[5]);
    ASSERT_TRUE(a.say(std::string("PEER dev=") + dev + " qpn=77"));
    ASSERT_FALSE(a.expect("READY", 30000).empty());
    a.say("GO");
    std::string res = a.expect("RESULT", 30000);
    ASSERT_EQ(res.rfind("RESULT ok", 0), 0u) << res;
    std::vector<roce_frame> segs;
    std::vector<std::vector<std::uint8_t>> keep;
    auto end = clk::now() + std::chrono::seconds(10);
    while (segs.size() < len / mss && clk::now() < end) {
        auto f = recv_frame(cap, 200);
        if (f.empty() || be16(f.data() + 12) != 0x0800)
            continue;
        keep.push_back(std::move(f));
        roce_frame r = decode_roce(keep.back().data(), keep.back().size());
        if (r.ok)
            segs.push_back(r);
    }
    ::close(cap);
    ASSERT_EQ(segs.size(), len / mss);
    for (std::uint32_t i = 0; i < segs.size(); i++) {
        SCOPED_TRACE("segment " + std::to_string(i));
        const roce_frame &r = segs[i];
        EXPECT_TRUE(r.ip_csum_ok);
        EXPECT_TRUE(r.icrc_ok) << "ICRC";
        EXPECT_EQ(r.opcode, 0x64) << "UD SEND only";
        EXPECT_EQ(r.dqpn, 77u);
        EXPECT_EQ(r.pkey, 0xffff);
        EXPECT_EQ(r.dst_ip, 0x0a4d0002u);
        ASSERT_EQ(r.hdrs_len, 8u + 54 + mss) << "DETH + TCP/IPv4 header + one mss";
        EXPECT_EQ(be32(r.hdrs), 0x1234u) << "Q_Key";
        // The datagram's payload: the caller's header fixed up for the segment.
        tcp_frame t = decode(r.hdrs + 8, 54 + mss);
        ASSERT_TRUE(t.ok);
        EXPECT_EQ(t.seq, 1000 + i * mss);
        EXPECT_EQ(t.ip_len, 40 + mss);
        EXPECT_TRUE(t.ip_csum_ok && t.l4_csum_ok);
        bool bytes_ok = true;
        for (std::uint32_t k = 0; k < mss && bytes_ok; k++)
            bytes_ok = t.payload[k] == pattern(3, 0, i * mss + k);
        EXPECT_TRUE(bytes_ok);
    }
}

/* ---------------- Malformed frames from the wire ---------------- */

TEST(Malformed, FramesFromTheWireAreDroppedAndCountedAndTheQpKeepsWorking)
{
    NET_REQUIRE();
    netns na("a"), nb("b");
    ASSERT_TRUE(na.ok() && nb.ok());
    veth v(na, nb, "m");
    ASSERT_TRUE(v.ok);
    proc a(&na, {node_path(), "--mode=ud-sink", "--dev=net_af_packet0", "--qkey=0x4242"},
           node_env(vdev("af_packet", v.a)));
    auto addr = fields(a.expect("ADDR", 30000));
    ASSERT_FALSE(addr.empty());
    ASSERT_FALSE(a.expect("READY", 30000).empty());
    const std::uint32_t qpn = static_cast<std::uint32_t>(std::stoul(addr["qpn"]));
    std::uint8_t mac[6];
    std::sscanf(addr["mac"].c_str(), "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4],
                &mac[5]);
    in_addr ip{};
    ASSERT_EQ(inet_pton(AF_INET, addr["ip"].c_str(), &ip), 1);
    auto src_mac = mac_of(nb, v.b);
    int inj = packet_socket(nb, v.b);
    ASSERT_GE(inj, 0);
    const std::uint32_t src_ip = htonl(0x0a4d0063);
    auto good = [&](std::uint32_t dqpn, std::size_t payload) {
        std::vector<std::uint8_t> p(payload);
        for (std::size_t i = 0; i < payload; i++)
            p[i] = static_cast<std::uint8_t>(i);
        return roce_ud_frame(mac, src_mac.data(), src_ip, ip.s_addr, dqpn, 0x4242, 99, p);
    };
    auto refix = [](std::vector<std::uint8_t> &f) { put_icrc(f.data(), f.size()); };
    auto ip_csum = [](std::vector<std::uint8_t> &f) {
        f[24] = f[25] = 0;
        std::uint16_t c = static_cast<std::uint16_t>(~ones_sum(f.data() + 14, 20));
        f[24] = static_cast<std::uint8_t>(c >> 8);
        f[25] = static_cast<std::uint8_t>(c);
    };
    std::vector<std::pair<const char *, std::vector<std::uint8_t>>> bad;
    {
        auto f = good(qpn, 64);
        f.resize(14 + 20 + 8 + 6); // cut inside the BTH
        bad.push_back({"rx_short", f});
    }
    {
        auto f = good(qpn, 64);
        f[16] = 0x0f; // IPv4 total length beyond the frame
        f[17] = 0xa0;
        ip_csum(f);
        bad.push_back({"rx_short", f});
    }
    {
        auto f = good(qpn, 64);
        f[14 + 20 + 4] = 0; // UDP length disagrees with IPv4's
        f[14 + 20 + 5] = 30;
        refix(f);
        bad.push_back({"rx_bad_len", f});
    }
    {
        auto f = good(qpn, 64);
        f[24] ^= 0x55; // IPv4 header checksum
        bad.push_back({"rx_bad_ip", f});
    }
    // (No IPv4 fragment here: net_af_packet's socket fanout reassembles
    // fragments in the kernel and holds a lone one. unit-ethdev sends them.)
    {
        auto f = good(qpn, 64);
        f[f.size() - 1] ^= 1; // ICRC
        bad.push_back({"rx_bad_icrc", f});
    }
    {
        auto f = good(qpn, 64);
        f[70] ^= 0x10; // a payload byte: the ICRC no longer matches
        bad.push_back({"rx_bad_icrc", f});
    }
    {
        auto f = good(qpn ^ 0x5a5a, 64); // no such QP
        bad.push_back({"rx_no_qp", f});
    }
    {
        auto f = good(qpn, 64);
        f[14 + 20 + 8] = 0x1f; // an opcode nobody defines
        refix(f);
        bad.push_back({"rx_bad_opcode", f});
    }
    {
        auto f = good(qpn, 64);
        f[14 + 20 + 8] = 0x04; // an RC SEND ONLY to a UD QP
        refix(f);
        bad.push_back({"rx_bad_opcode", f});
    }
    {
        auto f = good(qpn, 64);
        f[14 + 20 + 8 + 1] |= 0x01; // BTH transport version 1
        refix(f);
        bad.push_back({"rx_bad_bth", f});
    }
    {
        auto f = good(qpn, 64);
        f[14 + 20 + 8 + 2] = 0x12; // a P_Key not the default
        refix(f);
        bad.push_back({"rx_bad_bth", f});
    }
    {
        auto f = good(qpn, 64);
        f[14 + 20 + 8 + 12 + 3] ^= 1; // Q_Key
        refix(f);
        bad.push_back({"rx_qkey", f});
    }
    {
        auto f = good(qpn, 0);
        f[14 + 20 + 8 + 1] = 0x30; // pad 3 of a payload of 0: the headers overrun
        refix(f);
        bad.push_back({"rx_bad_len", f});
    }
    // Each frame alone: exactly its counter moves, and nothing is delivered.
    auto counters_now = [&] {
        a.say("COUNTERS");
        return fields(a.expect("COUNTERS", 10000));
    };
    auto before = counters_now();
    for (auto &[c, f] : bad) {
        SCOPED_TRACE(c);
        ASSERT_EQ(::send(inj, f.data(), f.size(), 0), static_cast<ssize_t>(f.size()));
        std::map<std::string, std::string> now;
        auto end = clk::now() + std::chrono::seconds(5);
        do {
            now = counters_now();
        } while (std::stoull(now[c]) == std::stoull(before[c]) && clk::now() < end);
        for (const auto &[k, val] : now) {
            if (k == "rx_frames" || k == "ipackets")
                continue;
            const std::uint64_t d = std::stoull(val) - std::stoull(before[k]);
            EXPECT_EQ(d, k == c ? 1u : 0u) << "counter " << k;
        }
        before = now;
    }
    for (const auto &l : a.lines_seen()) {
        EXPECT_NE(l.rfind("GOT", 0), 0u) << "a malformed frame was delivered: " << l;
    }
    // Random garbage after a valid RoCE prefix, and short random frames.
    std::mt19937 rng(5);
    for (int i = 0; i < 200; i++) {
        auto f = good(qpn, 64 + rng() % 200);
        for (int k = 0; k < 4; k++)
            f[34 + rng() % (f.size() - 34)] = static_cast<std::uint8_t>(rng());
        ASSERT_EQ(::send(inj, f.data(), f.size(), 0), static_cast<ssize_t>(f.size()));
    }
    // Then one valid datagram: it arrives.
    auto ok = good(qpn, 100);
    ASSERT_EQ(::send(inj, ok.data(), ok.size(), 0), static_cast<ssize_t>(ok.size()));
    std::string got;
    for (std::string l = a.expect("GOT", 10000); !l.empty(); l = a.expect("GOT", 2000)) {
        auto f = fields(l);
        if (f["len"] == "140" && f["data"].rfind("00010203", 0) == 0)
            got = l;
    }
    EXPECT_FALSE(got.empty()) << "the valid datagram after the malformed ones was not delivered";
    ::close(inj);
    EXPECT_EQ(a.finish(10000), 0) << "the node survived";
}

/* ---------------- ARP with kernel peers ---------------- */

TEST(Arp, AKernelPeerResolvesThePortAndTheDriverResolvesTheKernel)
{
    NET_REQUIRE();
    netns na("a"), nb("b");
    ASSERT_TRUE(na.ok() && nb.ok());
    // The port takes its interface's address (10.77.0.1); the kernel side has 10.77.0.2.
    veth v(na, nb, "p", "10.77.0.1", "10.77.0.2");
    ASSERT_TRUE(v.ok);
    // The kernel in B receives RoCE datagrams on UDP 4791 (a plain socket).
    int us = udp_socket(nb, 4791);
    ASSERT_GE(us, 0);
    int cap = packet_socket(nb, v.b);
    ASSERT_GE(cap, 0);
    proc a(&na, {node_path(), "--mode=ud-send", "--dev=net_af_packet0", "--count=1", "--len=64", "--qkey=0x1234"},
           node_env(vdev("af_packet", v.a)));
    auto addr = fields(a.expect("ADDR", 30000));
    ASSERT_EQ(addr["ip"], "10.77.0.1") << "the port's GID 0 is its interface's address";
    // Only the IPv4 address: the driver has to ask with ARP.
    ASSERT_TRUE(a.say("PEER dev=0a4d0002 qpn=5"));
    ASSERT_FALSE(a.expect("READY", 30000).empty()) << "no ARP answer from the kernel?";
    a.say("GO");
    std::string res = a.expect("RESULT", 30000);
    ASSERT_EQ(res.rfind("RESULT ok", 0), 0u) << res;
    std::uint8_t d[2048];
    pollfd pf{us, POLLIN, 0};
    ASSERT_EQ(::poll(&pf, 1, 5000), 1) << "the kernel received no datagram";
    ssize_t k = ::recv(us, d, sizeof d, 0);
    ASSERT_EQ(k, 12 + 8 + 64 + 4) << "BTH, DETH, payload, ICRC";
    EXPECT_EQ(d[0], 0x64);
    // The same datagram on the wire: a valid RoCEv2 frame.
    bool seen = false;
    for (auto f = recv_frame(cap, 1000); !f.empty() && !seen; f = recv_frame(cap, 500)) {
        roce_frame r = decode_roce(f.data(), f.size());
        if (r.ok) {
            EXPECT_TRUE(r.icrc_ok);
            EXPECT_TRUE(r.ip_csum_ok);
            seen = true;
        }
    }
    EXPECT_TRUE(seen);
    // The responder: the kernel forgets what it learnt from the driver's
    // request and asks; the neighbour entry then holds the port's MAC.
    std::string out;
    ASSERT_EQ(nb.ip({"neigh", "flush", "dev", v.b}), 0);
    bool found = false;
    auto end = clk::now() + std::chrono::seconds(5);
    while (!found && clk::now() < end) {
        // A datagram from the kernel makes it resolve 10.77.0.1 if it has not yet.
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_port = htons(9);
        inet_pton(AF_INET, "10.77.0.1", &to.sin_addr);
        (void)::sendto(us, "x", 1, 0, reinterpret_cast<sockaddr *>(&to), sizeof to);
        nb.ip({"neigh", "show", "10.77.0.1"}, &out);
        found = out.find(addr["mac"]) != std::string::npos &&
                (out.find("REACHABLE") != std::string::npos || out.find("STALE") != std::string::npos ||
                 out.find("DELAY") != std::string::npos);
        if (!found)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(found) << out;
    ASSERT_TRUE(a.say("COUNTERS"));
    EXPECT_GE(counter(a.expect("COUNTERS", 10000), "arp_replies"), 1u);
    ::close(us);
    ::close(cap);
}

} // namespace
} // namespace shunt::test::net
