// eth_node: one end of the ethdev wire tests, a process with its own EAL
// (SHUNT_EAL_ARGS names its port) started by integration-ethdev-net inside
// a network namespace. It speaks lines on stdin/stdout:
//
//   node -> test  ADDR dev=<hex> qpn=N rkey=N addr=N mac=M ip=A mtu=N path_mtu=N   (after set-up)
//   test -> node  PEER dev=<hex> qpn=N rkey=N addr=N              (rc, ud-send)
//   node -> test  READY
//   test -> node  GO                                              (senders)
//   node -> test  RUNNING                                         (rc --stream, traffic flows)
//   node -> test  COUNTERS name=value ...   RESULT ok|fail|error key=value ...
//   test -> node  COUNTERS (print them) | QUIT (or EOF: exit)
//
// Modes (--mode=):
//   rc        --role=send|recv --type=rc|uc --count=N --max=BYTES --seed=S
//             [--timeout=T --retry=R --rnr-retry=R --stream=1 --window=W]
//             messages with a sequence number and pattern (net_common.h),
//             SEND and RDMA WRITE with immediate alternately; the receiver
//             checks each one, and the order. [--lend=1: the receiver's QP
//             lends its receives (qp_init_attr::lend_recv), each message
//             checked where wc::data points; --sends=1: the sender sends
//             only, no RDMA writes]
//   ud-sink   --qkey=K: a UD QP that reports every datagram (GOT ...).
//   ud-send   --count=N --len=L --qkey=K [--mss=M: TSO of a TCP/IPv4 header]
//             to the PEER's address (dev=<hex of IPv4 only>: resolved by ARP).
//   raw-send  --count=N --len=L --dst-mac=M [--mss=M] [--csum=1]: RAW_PACKET
//             TCP/IPv4 frames (TSO when --mss) from our MAC to dst-mac.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "env/errors.h"
#include "ethdev/ethdev_ext.h"
#include "frame_check.h"
#include "net_common.h"
#include "vq/vq.h"

namespace {

namespace vq = shunt::vq;
namespace eth = shunt::drv::ethdev;
namespace net = shunt::test::net;
using clk = std::chrono::steady_clock;

std::map<std::string, std::string> opt;

std::string arg(const char *k, const char *def = "")
{
    auto it = opt.find(k);
    return it == opt.end() ? def : it->second;
}
std::uint64_t num(const char *k, std::uint64_t def)
{
    auto it = opt.find(k);
    return it == opt.end() ? def : std::strtoull(it->second.c_str(), nullptr, 0);
}

void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::vprintf(fmt, ap);
    va_end(ap);
    std::fputc('\n', stdout);
    std::fflush(stdout);
}

[[noreturn]] void die(const char *what, int rc)
{
    say("RESULT fail what=%s rc=%d", what, rc);
    std::fprintf(stderr, "eth_node[%d]: %s: %s\n", static_cast<int>(getpid()), what, shunt::strerror(rc));
    std::_Exit(3);
}

/** A line from stdin within @p ms ("" when none; "QUIT" on EOF). */
std::string in_line(int ms)
{
    static std::string buf;
    auto nl = buf.find('\n');
    if (nl == std::string::npos) {
        pollfd pf{0, POLLIN, 0};
        if (::poll(&pf, 1, ms) <= 0)
            return "";
        char b[1024];
        ssize_t k = ::read(0, b, sizeof b);
        if (k <= 0)
            return "QUIT";
        buf.append(b, static_cast<std::size_t>(k));
        nl = buf.find('\n');
        if (nl == std::string::npos)
            return "";
    }
    std::string l = buf.substr(0, nl);
    buf.erase(0, nl + 1);
    return l;
}

/** The key=value words of a line. */
std::map<std::string, std::string> fields(const std::string &line)
{
    std::map<std::string, std::string> m;
    std::istringstream in(line);
    std::string w;
    while (in >> w)
        if (auto eq = w.find('='); eq != std::string::npos)
            m[w.substr(0, eq)] = w.substr(eq + 1);
    return m;
}

std::string hex(const std::uint8_t *p, std::size_t n)
{
    std::string s;
    char b[3];
    for (std::size_t i = 0; i < n; i++) {
        std::snprintf(b, sizeof b, "%02x", p[i]);
        s += b;
    }
    return s;
}
vq::dev_addr unhex(const std::string &s)
{
    vq::dev_addr a{};
    a.len = static_cast<std::uint8_t>(std::min<std::size_t>(s.size() / 2, sizeof a.raw));
    for (std::size_t i = 0; i < a.len; i++)
        a.raw[i] = static_cast<std::uint8_t>(std::strtoul(s.substr(2 * i, 2).c_str(), nullptr, 16));
    return a;
}

struct node {
    vq::device *dev = nullptr;
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::mr *mr = nullptr;
    std::uint8_t *buf = nullptr;
    std::size_t size = 0;
    vq::qp *qp = nullptr;
    std::deque<vq::wc> wcs;

    void open(std::size_t bytes)
    {
        const std::string d = arg("dev");
        dev = vq::find_device(d.c_str());
        if (!dev)
            die("find_device", -shunt::FI_ENODEV);
        int rc = vq::open_device(dev, &ctx);
        if (rc == 0)
            rc = vq::alloc_pd(ctx, &pd);
        vq::cq_init_attr ca;
        ca.cqe = 65536;
        ca.single_threaded = true;
        if (rc == 0)
            rc = vq::create_cq(ctx, &ca, &cq);
        size = bytes;
        // aligned_alloc wants a multiple of the alignment.
        buf = static_cast<std::uint8_t *>(std::aligned_alloc(4096, (bytes + 4095) & ~std::size_t{4095}));
        if (!buf)
            die("aligned_alloc", -shunt::FI_ENOMEM);
        std::memset(buf, 0, bytes);
        if (rc == 0)
            rc = vq::reg_mr(pd, buf, bytes,
                            vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ, &mr);
        if (rc)
            die("set-up", rc);
    }
    void make_qp(vq::qp_type t, std::uint64_t ops, std::uint32_t wr, std::uint32_t sge = 1, bool lend = false)
    {
        vq::qp_init_attr ia;
        ia.type = t;
        ia.lend_recv = lend;
        ia.send_cq = ia.recv_cq = cq;
        ia.send_ops_flags = ops;
        ia.cap = {wr, wr, sge, 1, 0};
        int rc = vq::create_qp(pd, &ia, &qp);
        if (rc)
            die("create_qp", rc);
    }
    void to(vq::qp_state s, vq::qp_attr a = {}, unsigned mask = 0)
    {
        a.state = s;
        int rc = vq::modify_qp(qp, &a, mask | vq::QP_ATTR_STATE);
        if (rc)
            die("modify_qp", rc);
    }
    int pump()
    {
        vq::wc w[64];
        int k = vq::poll_cq(cq, 64, w);
        for (int i = 0; i < k; i++)
            wcs.push_back(w[i]);
        return k > 0 ? k : 0;
    }
    std::uint64_t at(std::size_t off) const { return reinterpret_cast<std::uint64_t>(buf + off); }
    void addr_line()
    {
        const std::uint8_t *a = ctx->addr.raw;
        char ip[16] = "";
        if (ctx->addr.len >= 10)
            std::snprintf(ip, sizeof ip, "%u.%u.%u.%u", a[6], a[7], a[8], a[9]);
        eth::port_info pi;
        if (eth::query_port(dev, &pi) != 0)
            pi = {};
        say("ADDR dev=%s qpn=%u rkey=%u addr=%" PRIu64 " mac=%02x:%02x:%02x:%02x:%02x:%02x ip=%s mtu=%u path_mtu=%u",
            hex(a, ctx->addr.len).c_str(), qp->qp_num, mr->rkey, at(0), a[0], a[1], a[2], a[3], a[4], a[5], ip,
            static_cast<unsigned>(pi.mtu), static_cast<unsigned>(pi.path_mtu));
    }
    void counters_line()
    {
        eth::port_counters pc{};
        if (eth::query_counters(dev, &pc) != 0)
            return;
        std::string s = "COUNTERS";
        auto add = [&](const char *k, std::uint64_t v) {
            s += ' ';
            s += k;
            s += '=';
            s += std::to_string(v);
        };
        for (unsigned i = 0; i < eth::num_counters; i++)
            add(eth::counter_name(i), pc.drv[i]);
        add("ipackets", pc.ipackets);
        add("opackets", pc.opackets);
        add("imissed", pc.imissed);
        say("%s", s.c_str());
    }
    /** Serve stdin (COUNTERS, QUIT) and keep polling until QUIT. */
    void linger()
    {
        for (;;) {
            pump();
            wcs.clear();
            std::string l = in_line(0);
            if (l == "QUIT")
                return;
            if (l == "COUNTERS")
                counters_line();
            if (l.empty())
                usleep(50);
        }
    }
};

/** Wait for the test's GO (bounded); QUIT exits. */
void wait_go()
{
    auto end = clk::now() + std::chrono::seconds(30);
    while (clk::now() < end) {
        std::string l = in_line(100);
        if (l == "GO")
            return;
        if (l == "QUIT")
            std::_Exit(0);
    }
    die("no GO line", -shunt::FI_ETIMEDOUT);
}

std::map<std::string, std::string> wait_peer()
{
    auto end = clk::now() + std::chrono::seconds(30);
    while (clk::now() < end) {
        std::string l = in_line(100);
        if (l == "QUIT")
            std::_Exit(0);
        if (l.rfind("PEER", 0) == 0)
            return fields(l);
    }
    die("no PEER line", -shunt::FI_ETIMEDOUT);
}

/* ---------------- rc ---------------- */

int mode_rc()
{
    const bool sender = arg("role") == "send";
    const bool uc = arg("type", "rc") == "uc";
    const std::uint64_t count = num("count", 1000), seed = num("seed", 1);
    const std::uint32_t max = static_cast<std::uint32_t>(num("max", 16384));
    const bool stream = num("stream", 0) != 0;
    constexpr std::uint32_t slots = 64, posted = 32; // receives outstanding <= slots / 2 (see below)
    const std::uint32_t window = static_cast<std::uint32_t>(num("window", 16));
    // Lent receives: nothing is posted and nothing holds a sender back, so
    // its RDMA writes could overwrite a slot whose message is not checked
    // yet: with --lend the sender is run with --sends=1.
    const bool lend = !sender && num("lend", 0) != 0;
    const bool sends_only = num("sends", 0) != 0;
    node n;
    n.open(std::size_t{slots} * max);
    n.make_qp(uc ? vq::qp_type::uc : vq::qp_type::rc,
              vq::OPS_SEND | vq::OPS_SEND_WITH_IMM | vq::OPS_RDMA_WRITE_WITH_IMM, 256, 1, lend);
    vq::qp_attr a;
    a.qp_access_flags = vq::ACCESS_REMOTE_WRITE;
    n.to(vq::qp_state::init, a, vq::QP_ATTR_ACCESS_FLAGS);
    if (!sender && !lend) {
        // Message k lands in slot k % slots (a SEND in the receive posted for
        // it, a WRITE there directly). With at most slots / 2 receives
        // posted, a write for a message not yet received (RNR) still lands
        // in a slot whose message was checked.
        for (std::uint32_t k = 0; k < posted; k++)
            if (int rc = vq::post_recv(n.qp, k, n.at(std::size_t{k % slots} * max), max, n.mr->lkey); rc)
                die("post_recv", rc);
    }
    n.addr_line();
    auto peer = wait_peer();
    a.dest = unhex(peer["dev"]);
    a.dest_qp_num = static_cast<std::uint32_t>(std::stoul(peer["qpn"]));
    unsigned mask = vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
    if (opt.count("min-rnr")) {
        a.min_rnr_timer = static_cast<std::uint8_t>(num("min-rnr", 1));
        mask |= vq::QP_ATTR_MIN_RNR_TIMER;
    }
    n.to(vq::qp_state::rtr, a, mask);
    unsigned rts = 0;
    if (opt.count("timeout")) {
        a.timeout = static_cast<std::uint8_t>(num("timeout", 14));
        rts |= vq::QP_ATTR_TIMEOUT;
    }
    if (opt.count("retry")) {
        a.retry_cnt = static_cast<std::uint8_t>(num("retry", 7));
        rts |= vq::QP_ATTR_RETRY_CNT;
    }
    if (opt.count("rnr-retry")) {
        a.rnr_retry = static_cast<std::uint8_t>(num("rnr-retry", 7));
        rts |= vq::QP_ATTR_RNR_RETRY;
    }
    n.to(vq::qp_state::rts, a, rts);
    say("READY");

    if (!sender) {
        std::uint64_t next = 0, bytes = 0;
        bool done = false;
        for (;;) {
            n.pump();
            while (!n.wcs.empty()) {
                vq::wc w = n.wcs.front();
                n.wcs.pop_front();
                if (w.opcode != vq::wc_opcode::recv && w.opcode != vq::wc_opcode::recv_rdma_with_imm)
                    continue;
                if (w.status != vq::wc_status::success) {
                    n.counters_line();
                    say("RESULT fail why=recv_status status=%s at=%" PRIu64, vq::wc_status_str(w.status), next);
                    n.linger();
                    return 1;
                }
                if (w.wr_id != (lend ? 0 : next)) { // lent: the bytes say which message it is
                    say("RESULT fail why=order got=%" PRIu64 " want=%" PRIu64, w.wr_id, next);
                    n.linger();
                    return 1;
                }
                const std::uint32_t len = net::message_len(seed, next, max);
                const bool write = w.opcode == vq::wc_opcode::recv_rdma_with_imm;
                if (write && w.imm_data != static_cast<std::uint32_t>(next)) {
                    say("RESULT fail why=imm got=%u want=%" PRIu64, w.imm_data, next);
                    n.linger();
                    return 1;
                }
                if (w.byte_len != len) {
                    say("RESULT fail why=length seq=%" PRIu64 " got=%u want=%u", next, w.byte_len, len);
                    n.linger();
                    return 1;
                }
                const std::uint8_t *p = lend ? w.data : n.buf + std::size_t{next % slots} * max;
                if (lend && !w.data) {
                    say("RESULT fail why=no_data seq=%" PRIu64, next);
                    n.linger();
                    return 1;
                }
                if (long bad = net::check_message(p, seed, next, len); bad >= 0) {
                    say("RESULT fail why=bytes seq=%" PRIu64 " offset=%ld", next, bad);
                    n.linger();
                    return 1;
                }
                bytes += len;
                std::uint64_t k = next + posted;
                if (int rc = lend ? 0 : vq::post_recv(n.qp, k, n.at(std::size_t{k % slots} * max), max, n.mr->lkey);
                    rc)
                    die("post_recv", rc);
                next++;
                if (!stream && next == count && !done) {
                    done = true;
                    n.counters_line();
                    say("RESULT ok msgs=%" PRIu64 " bytes=%" PRIu64, next, bytes);
                }
            }
            std::string l = in_line(0);
            if (l == "QUIT")
                return 0;
            if (l == "COUNTERS")
                n.counters_line();
        }
    }

    // Sender.
    wait_go();
    const std::uint32_t rkey = static_cast<std::uint32_t>(std::stoul(peer["rkey"]));
    const std::uint64_t raddr = std::stoull(peer["addr"]);
    std::uint64_t posted_n = 0, completed = 0, bytes = 0;
    auto t0 = clk::now(), last_ok = t0;
    bool running = false;
    std::uint64_t stall_ms = num("stall-ms", 60000);
    for (;;) {
        while (posted_n - completed < window && (stream || posted_n < count)) {
            const std::uint64_t s = posted_n;
            const std::uint32_t len = net::message_len(seed, s, max);
            std::uint8_t *p = n.buf + std::size_t{s % slots} * max;
            net::make_message(p, seed, s, len);
            vq::wr_start(n.qp);
            n.qp->wr_id = s;
            n.qp->wr_flags = vq::WR_SIGNALED;
            if (s % 2 && !sends_only)
                vq::wr_rdma_write_imm(n.qp, rkey, raddr + std::uint64_t{s % slots} * max, static_cast<std::uint32_t>(s));
            else
                vq::wr_send(n.qp);
            vq::wr_set_sge(n.qp, n.mr->lkey, n.at(std::size_t{s % slots} * max), len);
            int rc = vq::wr_complete(n.qp);
            if (rc == -shunt::FI_EAGAIN)
                break;
            if (rc)
                die("wr_complete", rc);
            posted_n++;
        }
        n.pump();
        while (!n.wcs.empty()) {
            vq::wc w = n.wcs.front();
            n.wcs.pop_front();
            if (w.status != vq::wc_status::success) {
                // The first error: the rest of what is outstanding is flushed.
                const double ms = std::chrono::duration<double, std::milli>(clk::now() - last_ok).count();
                const vq::wc_status st = w.status;
                std::uint64_t flushed = 0, other = 0, outstanding = posted_n - completed - 1;
                auto end = clk::now() + std::chrono::seconds(5);
                while (flushed + other < outstanding && clk::now() < end) {
                    n.pump();
                    while (!n.wcs.empty()) {
                        (n.wcs.front().status == vq::wc_status::wr_flush_err ? flushed : other)++;
                        n.wcs.pop_front();
                    }
                }
                n.counters_line();
                say("RESULT error status=%s at=%" PRIu64 " ms_since_last_ok=%.1f flushed=%" PRIu64
                    " other=%" PRIu64 " outstanding=%" PRIu64 " qp_state=%d",
                    vq::wc_status_str(st), w.wr_id, ms, flushed, other, outstanding,
                    static_cast<int>(vq::get_qp_state(n.qp)));
                n.linger();
                return 0;
            }
            if (w.wr_id != completed) {
                say("RESULT fail why=completion_order got=%" PRIu64 " want=%" PRIu64, w.wr_id, completed);
                n.linger();
                return 1;
            }
            bytes += net::message_len(seed, completed, max);
            completed++;
            last_ok = clk::now();
        }
        if (stream && !running && completed >= 200) {
            running = true;
            say("RUNNING");
        }
        if (!stream && completed == count) {
            const double ms = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
            n.counters_line();
            say("RESULT ok msgs=%" PRIu64 " bytes=%" PRIu64 " ms=%.0f", completed, bytes, ms);
            n.linger();
            return 0;
        }
        if (std::chrono::duration<double, std::milli>(clk::now() - last_ok).count() > static_cast<double>(stall_ms)) {
            n.counters_line();
            say("RESULT fail why=stalled completed=%" PRIu64 " posted=%" PRIu64, completed, posted_n);
            n.linger();
            return 1;
        }
        std::string l = in_line(0);
        if (l == "QUIT")
            return 0;
        if (l == "COUNTERS")
            n.counters_line();
    }
}

/* ---------------- ud-sink ---------------- */

int mode_ud_sink()
{
    node n;
    constexpr std::uint32_t slot = 4096 + 64, nslots = 256;
    n.open(std::size_t{slot} * nslots);
    n.make_qp(vq::qp_type::ud, vq::OPS_SEND, nslots);
    vq::qp_attr a;
    a.qkey = static_cast<std::uint32_t>(num("qkey", 0x1234));
    n.to(vq::qp_state::init, a, vq::QP_ATTR_QKEY);
    n.to(vq::qp_state::rtr);
    n.to(vq::qp_state::rts);
    for (std::uint32_t i = 0; i < nslots; i++)
        if (int rc = vq::post_recv(n.qp, i, n.at(std::size_t{i} * slot), slot, n.mr->lkey); rc)
            die("post_recv", rc);
    n.addr_line();
    say("READY");
    for (;;) {
        n.pump();
        while (!n.wcs.empty()) {
            vq::wc w = n.wcs.front();
            n.wcs.pop_front();
            const std::uint8_t *p = n.buf + w.wr_id * slot + 40; // behind the GRH area
            say("GOT len=%u src_qp=%u status=%s data=%s", w.byte_len, w.src_qp, vq::wc_status_str(w.status),
                hex(p, w.byte_len > 40 ? std::min<std::uint32_t>(w.byte_len - 40, 16) : 0).c_str());
            (void)vq::post_recv(n.qp, w.wr_id, n.at(w.wr_id * slot), slot, n.mr->lkey);
        }
        std::string l = in_line(0);
        if (l == "QUIT")
            return 0;
        if (l == "COUNTERS")
            n.counters_line();
        if (l.empty())
            usleep(50);
    }
}

/* ---------------- ud-send ---------------- */

int mode_ud_send()
{
    node n;
    const std::uint32_t len = static_cast<std::uint32_t>(num("len", 256));
    const std::uint32_t mss = static_cast<std::uint32_t>(num("mss", 0));
    const std::uint64_t count = num("count", 1), seed = num("seed", 1);
    n.open(std::size_t{len} + 4096);
    n.make_qp(vq::qp_type::ud, vq::OPS_SEND | (mss ? vq::OPS_TSO : 0), 256);
    vq::qp_attr a;
    a.qkey = static_cast<std::uint32_t>(num("qkey", 0x1234));
    n.to(vq::qp_state::init, a, vq::QP_ATTR_QKEY);
    n.to(vq::qp_state::rtr);
    n.to(vq::qp_state::rts);
    n.addr_line();
    auto peer = wait_peer();
    vq::ah_attr aa;
    aa.dest = unhex(peer["dev"]);
    vq::ah *ah = nullptr;
    if (int rc = vq::create_ah(n.pd, &aa, &ah); rc)
        die("create_ah", rc);
    const std::uint32_t dqpn = static_cast<std::uint32_t>(std::stoul(peer["qpn"]));
    say("READY");
    wait_go();
    std::vector<std::uint8_t> hdr = shunt::test::tcp_header(1000, 7);
    for (std::uint64_t s = 0; s < count; s++) {
        for (std::uint32_t i = 0; i < len; i++)
            n.buf[i] = net::pattern(seed, s, i);
        vq::wr_start(n.qp);
        n.qp->wr_id = s;
        n.qp->wr_flags = vq::WR_SIGNALED;
        if (mss)
            vq::wr_send_tso(n.qp, hdr.data(), static_cast<std::uint16_t>(hdr.size()), static_cast<std::uint16_t>(mss));
        else
            vq::wr_send(n.qp);
        vq::wr_set_sge(n.qp, n.mr->lkey, n.at(0), len);
        vq::wr_set_ud_addr(n.qp, ah, dqpn, a.qkey);
        if (int rc = vq::wr_complete(n.qp); rc)
            die("wr_complete", rc);
        auto end = clk::now() + std::chrono::seconds(10);
        while (n.wcs.empty() && clk::now() < end)
            n.pump();
        if (n.wcs.empty() || n.wcs.front().status != vq::wc_status::success)
            die("send completion", n.wcs.empty() ? -shunt::FI_ETIMEDOUT : -shunt::FI_EIO);
        n.wcs.pop_front();
    }
    n.counters_line();
    say("RESULT ok msgs=%" PRIu64, count);
    n.linger();
    (void)vq::destroy_ah(ah);
    return 0;
}

/* ---------------- raw-send ---------------- */

int mode_raw_send()
{
    node n;
    const std::uint32_t len = static_cast<std::uint32_t>(num("len", 256));
    const std::uint32_t mss = static_cast<std::uint32_t>(num("mss", 0));
    const std::uint64_t count = num("count", 1), seed = num("seed", 1);
    const bool csum = num("csum", 0) != 0;
    n.open(std::size_t{len} + 4096);
    n.make_qp(vq::qp_type::raw_packet, vq::OPS_SEND | (mss ? vq::OPS_TSO : 0), 256);
    n.to(vq::qp_state::init);
    n.to(vq::qp_state::rtr);
    n.to(vq::qp_state::rts);
    n.addr_line();
    // The frames' Ethernet addresses: to --dst-mac, from our port.
    std::uint8_t dst[6] = {};
    std::sscanf(arg("dst-mac", "ff:ff:ff:ff:ff:ff").c_str(), "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &dst[0], &dst[1],
                &dst[2], &dst[3], &dst[4], &dst[5]);
    say("READY");
    wait_go();
    for (std::uint64_t s = 0; s < count; s++) {
        std::vector<std::uint8_t> hdr = shunt::test::tcp_header(static_cast<std::uint32_t>(1000 + s * 1000000),
                                                                static_cast<std::uint16_t>(100 + s));
        std::memcpy(hdr.data(), dst, 6);
        std::memcpy(hdr.data() + 6, n.ctx->addr.raw, 6);
        std::uint8_t *f = n.buf;
        std::uint32_t off = 0;
        if (!mss) {
            // The whole frame, header included, with correct lengths (the
            // checksums are the port's or the driver's to fill).
            hdr[14 + 2] = static_cast<std::uint8_t>((40 + len) >> 8);
            hdr[14 + 3] = static_cast<std::uint8_t>(40 + len);
            std::memcpy(f, hdr.data(), hdr.size());
            off = static_cast<std::uint32_t>(hdr.size());
        }
        for (std::uint32_t i = 0; i < len; i++)
            f[off + i] = net::pattern(seed, s, i);
        vq::wr_start(n.qp);
        n.qp->wr_id = s;
        n.qp->wr_flags = vq::WR_SIGNALED | (csum ? vq::WR_IP_CSUM : 0);
        if (mss)
            vq::wr_send_tso(n.qp, hdr.data(), static_cast<std::uint16_t>(hdr.size()), static_cast<std::uint16_t>(mss));
        else
            vq::wr_send(n.qp);
        vq::wr_set_sge(n.qp, n.mr->lkey, n.at(0), off + len);
        if (int rc = vq::wr_complete(n.qp); rc)
            die("wr_complete", rc);
        auto end = clk::now() + std::chrono::seconds(10);
        while (n.wcs.empty() && clk::now() < end)
            n.pump();
        if (n.wcs.empty() || n.wcs.front().status != vq::wc_status::success)
            die("send completion", n.wcs.empty() ? -shunt::FI_ETIMEDOUT : -shunt::FI_EIO);
        n.wcs.pop_front();
    }
    eth::port_info pi{};
    (void)eth::query_port(n.dev, &pi);
    n.counters_line();
    say("RESULT ok msgs=%" PRIu64 " hw_tso=%d hw_csum=%d", count, pi.hw_tso ? 1 : 0, pi.hw_csum ? 1 : 0);
    n.linger();
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a.rfind("--", 0) != 0)
            continue;
        auto eq = a.find('=');
        opt[a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
            eq == std::string::npos ? "1" : a.substr(eq + 1);
    }
    const std::string m = arg("mode");
    if (m == "rc")
        return mode_rc();
    if (m == "ud-sink")
        return mode_ud_sink();
    if (m == "ud-send")
        return mode_ud_send();
    if (m == "raw-send")
        return mode_raw_send();
    std::fprintf(stderr, "usage: eth_node --mode=rc|ud-sink|ud-send|raw-send --dev=DEVICE ... "
                         "(started by integration-ethdev-net)\n");
    return 2;
}
