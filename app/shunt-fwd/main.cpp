/* shunt-fwd: forward frames between two ethdev ports on RAW_PACKET QPs.
 *
 * Each forwarding lcore owns one queue pair of both ports (a RAW_PACKET QP
 * with a thread domain and a single-threaded CQ per port: no lock, no
 * hand-over). A received frame is sent from its receive buffer (each port's
 * buffers are registered with both ports, so the other port's QP may send
 * from them); the buffer goes back to the receive queue when the send that
 * used it completes (sends are signaled in groups: completions are in
 * order, so one signaled completion retires every send before it). A send
 * that fails stops the forwarder with the reason. */
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "env/env.h"
#include "env/errors.h"
#include "env/lcore.h"
#include "env/topology.h"
#include "env/tunable.h"
#include "ethdev/ethdev_ext.h"
#include "options.h"
#include "vq/vq.h"

namespace {

using namespace shunt;
namespace eth = shunt::drv::ethdev;
using fwd::options;

std::atomic<bool> stop_flag{false};
void on_signal(int) { stop_flag.store(true, std::memory_order_relaxed); }

constexpr std::uint32_t slot_bytes = 2048; ///< one receive buffer (frames up to the port MTU of 1500 + headers)
constexpr std::uint32_t signal_every = 16;

/** Per direction counters (the lcore writes, the main thread reads). */
struct dir_stats {
    std::atomic<std::uint64_t> rx{0}, tx{0}, dropped{0}, duplicated{0}, reordered{0}, corrupted{0}, full{0};
};

/** The first failed send (the forwarder stops): status, or 0. */
std::atomic<int> send_error{0};

/** xorshift64*: the impairments' generator (per lcore, from the seed). */
struct rng {
    std::uint64_t s;
    std::uint64_t next() noexcept
    {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545f4914f6cdd1dull;
    }
    double uniform() noexcept { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

/** One port's side of one lcore: its QP, CQ and receive buffers. */
struct side {
    vq::qp *qp = nullptr;
    vq::cq *cq = nullptr;
    std::uint8_t *buf = nullptr; ///< ring slots of slot_bytes
    std::uint32_t lkey = 0;      ///< of buf, for this side's receives
    std::uint32_t send_lkey = 0; ///< of buf in the other port's PD, for its sends of our frames
    std::uint32_t ring = 0;
    /* Sends on this QP (frames of the other side's slots), in order. */
    struct pending {
        std::uint32_t slot;
        bool last; ///< the last send of that slot: repost it after
    };
    std::vector<pending> fifo;
    std::uint64_t head = 0, tail = 0; ///< fifo positions (sends completed / posted)
    std::uint64_t next_id = 0;        ///< wr_id of the next send
};

struct lcore_ctx {
    side s[2];
    dir_stats st[2]; ///< st[d]: frames received on port d, sent on the other
    rng r{1};
    int held[2] = {-1, -1}; ///< reorder: slot of port d held back
    std::uint32_t held_len[2] = {0, 0};
};

struct port_ctx {
    vq::device *dev = nullptr;
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::mr *mr = nullptr;
    vq::mr *xmr = nullptr;       ///< mem registered with the other port (its sends read it)
    std::uint8_t *mem = nullptr;
    std::vector<vq::td *> tds;
};

int repost(side &s, std::uint32_t slot) noexcept
{
    return vq::post_recv(s.qp, slot, reinterpret_cast<std::uint64_t>(s.buf) + std::uint64_t{slot} * slot_bytes,
                         slot_bytes, s.lkey);
}

/** Send completions on @p out (sends of frames that came in on @p in). */
void retire(side &out, side &in, std::uint64_t upto) noexcept
{
    while (out.head <= upto && out.head < out.tail) {
        const side::pending &p = out.fifo[out.head % out.fifo.size()];
        if (p.last)
            (void)repost(in, p.slot);
        out.head++;
    }
}

/** Forward a burst from side @p d to the other side. */
void forward(lcore_ctx &L, int d, const vq::wc *w, int n, const options &o) noexcept
{
    side &in = L.s[d], &out = L.s[1 - d];
    dir_stats &st = L.st[d];
    struct item {
        std::uint32_t slot, len;
        bool last;
    } items[1100];
    std::uint32_t k = 0;
    auto add = [&](std::uint32_t slot, std::uint32_t len, bool last) {
        if (k < sizeof items / sizeof items[0])
            items[k++] = {slot, len, last};
    };
    for (int i = 0; i < n; i++) {
        const std::uint32_t slot = static_cast<std::uint32_t>(w[i].wr_id);
        const std::uint32_t len = w[i].byte_len;
        std::uint8_t *f = in.buf + std::uint64_t{slot} * slot_bytes;
        if (w[i].status != vq::wc_status::success || len < 14) {
            (void)repost(in, slot);
            continue;
        }
        st.rx.fetch_add(1, std::memory_order_relaxed);
        if (o.how == fwd::mode::macswap) {
            std::uint8_t t[6];
            std::memcpy(t, f, 6);
            std::memmove(f, f + 6, 6);
            std::memcpy(f + 6, t, 6);
        }
        if (o.imp.any()) {
            if (L.r.uniform() < o.imp.drop) {
                st.dropped.fetch_add(1, std::memory_order_relaxed);
                (void)repost(in, slot);
                continue;
            }
            if (len > 14 && L.r.uniform() < o.imp.corrupt) {
                f[14 + L.r.next() % (len - 14)] ^= static_cast<std::uint8_t>(1 + L.r.next() % 255);
                st.corrupted.fetch_add(1, std::memory_order_relaxed);
            }
            if (L.held[d] < 0 && L.r.uniform() < o.imp.reorder) {
                L.held[d] = static_cast<int>(slot); // goes out after the next frame
                L.held_len[d] = len;
                st.reordered.fetch_add(1, std::memory_order_relaxed);
                continue;
            }
            bool dup = L.r.uniform() < o.imp.dup;
            if (dup) {
                add(slot, len, false);
                st.duplicated.fetch_add(1, std::memory_order_relaxed);
            }
            add(slot, len, true);
            if (L.held[d] >= 0) {
                add(static_cast<std::uint32_t>(L.held[d]), L.held_len[d], true);
                L.held[d] = -1;
            }
            continue;
        }
        add(slot, len, true);
    }
    if (n == 0 && L.held[d] >= 0) { // the line is idle: the held frame goes now
        add(static_cast<std::uint32_t>(L.held[d]), L.held_len[d], true);
        L.held[d] = -1;
    }
    if (k == 0)
        return;
    // Room in the send-completion FIFO (= the send queue): else the frames are dropped.
    std::uint64_t room = out.fifo.size() - (out.tail - out.head);
    std::uint32_t send = k < room ? k : static_cast<std::uint32_t>(room);
    int rc = -FI_EAGAIN;
    if (send) {
        vq::wr_start(out.qp);
        for (std::uint32_t i = 0; i < send; i++) {
            out.qp->wr_id = out.next_id + i;
            bool sig = (out.next_id + i) % signal_every == signal_every - 1 || i + 1 == send;
            out.qp->wr_flags = sig ? vq::WR_SIGNALED : 0;
            vq::wr_send(out.qp);
            vq::wr_set_sge(out.qp, in.send_lkey,
                           reinterpret_cast<std::uint64_t>(in.buf) + std::uint64_t{items[i].slot} * slot_bytes,
                           items[i].len);
        }
        rc = vq::wr_complete(out.qp);
    }
    if (rc == 0) {
        for (std::uint32_t i = 0; i < send; i++)
            out.fifo[(out.tail + i) % out.fifo.size()] = {items[i].slot, items[i].last};
        out.tail += send;
        out.next_id += send;
        st.tx.fetch_add(send, std::memory_order_relaxed);
    } else {
        send = 0;
    }
    for (std::uint32_t i = send; i < k; i++) {
        st.full.fetch_add(1, std::memory_order_relaxed);
        if (items[i].last)
            (void)repost(in, items[i].slot);
    }
}

void run_lcore(lcore_ctx &L, const options &o, const std::atomic<bool> &stop) noexcept
{
    std::vector<vq::wc> w(o.burst);
    const int b = static_cast<int>(o.burst);
    while (!stop.load(std::memory_order_relaxed) && !stop_flag.load(std::memory_order_relaxed)) {
        for (int d = 0; d < 2; d++) {
            int n = vq::poll_cq(L.s[d].cq, b, w.data());
            if (n < 0)
                continue;
            // The CQ of side d carries its receives and the completions of
            // sends on it (frames of the other side).
            int nr = 0;
            for (int i = 0; i < n; i++) {
                if (w[i].opcode == vq::wc_opcode::recv) {
                    w[nr++] = w[i];
                } else if (w[i].status != vq::wc_status::success) {
                    int none = 0;
                    send_error.compare_exchange_strong(none, static_cast<int>(w[i].status) | (d << 16));
                    stop_flag.store(true, std::memory_order_relaxed);
                } else {
                    retire(L.s[d], L.s[1 - d], w[i].wr_id);
                }
            }
            forward(L, d, w.data(), nr, o);
        }
    }
}

std::string json_str(const std::string &s)
{
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\')
            o += '\\';
        o += c;
    }
    return o + "\"";
}

int setup_port(port_ctx &p, const std::string &name, unsigned lcores, std::size_t bytes)
{
    p.dev = vq::find_device(name.c_str());
    if (!p.dev || !eth::is_ethdev(p.dev)) {
        std::fprintf(stderr, "shunt-fwd: no ethdev device '%s' (see shunt-info -D; ports come from --eal / "
                             "SHUNT_EAL_ARGS)\n", name.c_str());
        return 1;
    }
    if (lcores > 1 && eth::set_port_queues(p.dev, lcores) != 0) {
        std::fprintf(stderr, "shunt-fwd: %s cannot have %u queue pairs (one per lcore)\n", name.c_str(), lcores);
        return 1;
    }
    int rc = vq::open_device(p.dev, &p.ctx);
    if (rc == 0)
        rc = vq::alloc_pd(p.ctx, &p.pd);
    if (rc == 0)
        rc = vq::alloc_buf(p.ctx, bytes, reinterpret_cast<void **>(&p.mem));
    if (rc == 0)
        rc = vq::reg_mr(p.pd, p.mem, bytes, vq::ACCESS_LOCAL_WRITE, &p.mr);
    if (rc) {
        std::fprintf(stderr, "shunt-fwd: %s: %s\n", name.c_str(), shunt::strerror(rc));
        return 1;
    }
    return 0;
}

int setup_side(side &s, port_ctx &p, vq::td *td, std::uint8_t *mem, unsigned ring, const std::string &name)
{
    vq::cq_init_attr ca;
    ca.cqe = static_cast<int>(ring * 2);
    ca.single_threaded = true;
    int rc = vq::create_cq(p.ctx, &ca, &s.cq);
    if (rc) {
        std::fprintf(stderr, "shunt-fwd: %s: create_cq: %s\n", name.c_str(), shunt::strerror(rc));
        return 1;
    }
    vq::qp_init_attr ia;
    ia.type = vq::qp_type::raw_packet;
    ia.send_cq = ia.recv_cq = s.cq;
    ia.send_ops_flags = vq::OPS_SEND;
    ia.cap = {ring, ring, 1, 1, 0};
    ia.td = td;
    rc = vq::create_qp(p.pd, &ia, &s.qp);
    if (rc) {
        std::fprintf(stderr, "shunt-fwd: %s: create_qp: %s%s\n", name.c_str(), shunt::strerror(rc),
                     rc == -FI_EBUSY ? " (another user of the port holds its queue)" : "");
        return 1;
    }
    vq::qp_attr a;
    for (vq::qp_state st : {vq::qp_state::init, vq::qp_state::rtr, vq::qp_state::rts}) {
        a.state = st;
        if ((rc = vq::modify_qp(s.qp, &a, vq::QP_ATTR_STATE)) != 0) {
            std::fprintf(stderr, "shunt-fwd: %s: modify_qp: %s\n", name.c_str(), shunt::strerror(rc));
            return 1;
        }
    }
    s.buf = mem;
    s.lkey = p.mr->lkey;
    s.send_lkey = p.xmr->lkey;
    s.ring = s.qp->cap.max_recv_wr < ring ? s.qp->cap.max_recv_wr : ring;
    s.fifo.resize(s.qp->cap.max_send_wr);
    for (std::uint32_t i = 0; i < s.ring; i++)
        if ((rc = repost(s, i)) != 0) {
            std::fprintf(stderr, "shunt-fwd: %s: post_recv: %s\n", name.c_str(), shunt::strerror(rc));
            return 1;
        }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    options o;
    int prc = fwd::parse_command_line(argc, argv, o);
    if (prc >= 0)
        return prc;
    // A forwarder does not look at checksums: no software check per frame.
    setenv("SHUNT_ETHDEV_RX_CSUM", "0", 0);
    env::options eo;
    if (const env::tunable *t = env::find_tunable("SHUNT_EAL_ARGS")) {
        std::istringstream in(t->value());
        std::string w;
        while (in >> w)
            eo.eal_args.push_back(w);
    }
    eo.eal_args.insert(eo.eal_args.end(), o.eal.begin(), o.eal.end());
    if (int rc = env::init(eo); rc != 0) {
        std::fprintf(stderr, "shunt-fwd: cannot start the environment: %s\n", shunt::strerror(rc));
        return 1;
    }
    if (o.cores.empty() && env::pick_cores(1, o.cores) != 0) {
        std::fprintf(stderr, "shunt-fwd: no core to run on\n");
        return 1;
    }
    const unsigned nl = static_cast<unsigned>(o.cores.size());
    const std::size_t per_side = std::size_t{o.ring} * slot_bytes;
    port_ctx ports[2];
    for (int d = 0; d < 2; d++)
        if (setup_port(ports[d], o.port[d], nl, per_side * nl) != 0)
            return 1;
    for (int d = 0; d < 2; d++)
        if (int rc = vq::reg_mr(ports[1 - d].pd, ports[d].mem, per_side * nl, vq::ACCESS_LOCAL_WRITE, &ports[d].xmr);
            rc) {
            std::fprintf(stderr, "shunt-fwd: %s: registering %s's buffers: %s\n", o.port[1 - d].c_str(),
                         o.port[d].c_str(), shunt::strerror(rc));
            return 1;
        }
    std::vector<std::unique_ptr<lcore_ctx>> lc;
    for (unsigned k = 0; k < nl; k++) {
        auto L = std::make_unique<lcore_ctx>();
        L->r.s = o.imp.seed * 0x9e3779b97f4a7c15ull + k + 1;
        for (int d = 0; d < 2; d++) {
            vq::td *td = nullptr;
            if (vq::alloc_td(ports[d].ctx, &td) != 0) {
                std::fprintf(stderr, "shunt-fwd: alloc_td failed\n");
                return 1;
            }
            ports[d].tds.push_back(td);
            if (setup_side(L->s[d], ports[d], td, ports[d].mem + per_side * k, o.ring, o.port[d]) != 0)
                return 1;
        }
        lc.push_back(std::move(L));
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    std::vector<std::unique_ptr<env::pinned_thread>> th;
    for (unsigned k = 0; k < nl; k++) {
        th.push_back(std::make_unique<env::pinned_thread>());
        lcore_ctx *L = lc[k].get();
        int rc = th.back()->launch(o.cores[k], [L, &o](const std::atomic<bool> &stop) { run_lcore(*L, o, stop); });
        if (rc != 0) {
            std::fprintf(stderr, "shunt-fwd: cannot start an lcore on CPU %u: %s\n", o.cores[k], shunt::strerror(rc));
            stop_flag = true;
            return 1;
        }
    }
    {
        std::string cpus;
        for (unsigned k = 0; k < nl; k++) {
            if (k)
                cpus += ',';
            cpus += std::to_string(o.cores[k]);
        }
        std::fprintf(stderr, "shunt-fwd: forwarding %s <-> %s (%s, burst %u) on CPU %s\n", o.port[0].c_str(),
                     o.port[1].c_str(), o.how == fwd::mode::io ? "io" : "macswap", o.burst, cpus.c_str());
    }
    auto sum = [&](int d, std::atomic<std::uint64_t> dir_stats::*f) {
        std::uint64_t s = 0;
        for (auto &L : lc)
            s += (L->st[d].*f).load(std::memory_order_relaxed);
        return s;
    };
    auto t0 = std::chrono::steady_clock::now(), last = t0;
    std::uint64_t last_tx[2] = {0, 0};
    while (!stop_flag.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(o.stats_ms ? std::min(o.stats_ms, 100u) : 100u));
        auto now = std::chrono::steady_clock::now();
        double el = std::chrono::duration<double>(now - t0).count();
        if (o.seconds > 0 && el >= o.seconds)
            stop_flag = true;
        if (o.stats_ms && std::chrono::duration<double, std::milli>(now - last).count() >= o.stats_ms) {
            double dt = std::chrono::duration<double>(now - last).count();
            std::uint64_t tx[2] = {sum(0, &dir_stats::tx), sum(1, &dir_stats::tx)};
            eth::port_counters pc[2]{};
            for (int d = 0; d < 2; d++)
                (void)eth::query_counters(ports[d].dev, &pc[d]);
            std::fprintf(stderr,
                         "%.1fs  %s->%s %.0f pps  %s->%s %.0f pps  drops: impair %" PRIu64 " sq-full %" PRIu64
                         " imissed %" PRIu64 "/%" PRIu64 " nombuf %" PRIu64 "/%" PRIu64 "\n",
                         el, o.port[0].c_str(), o.port[1].c_str(), static_cast<double>(tx[0] - last_tx[0]) / dt,
                         o.port[1].c_str(), o.port[0].c_str(), static_cast<double>(tx[1] - last_tx[1]) / dt,
                         sum(0, &dir_stats::dropped) + sum(1, &dir_stats::dropped),
                         sum(0, &dir_stats::full) + sum(1, &dir_stats::full), pc[0].imissed, pc[1].imissed,
                         pc[0].rx_nombuf, pc[1].rx_nombuf);
            last_tx[0] = tx[0];
            last_tx[1] = tx[1];
            last = now;
        }
    }
    for (auto &t : th) {
        t->stop();
        (void)t->join();
    }
    const int err = send_error.load();
    if (err)
        std::fprintf(stderr, "shunt-fwd: a send on %s failed (%s): stopped\n", o.port[err >> 16].c_str(),
                     vq::wc_status_str(static_cast<vq::wc_status>(err & 0xffff)));
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.json) {
        eth::port_counters pc[2]{};
        for (int d = 0; d < 2; d++)
            (void)eth::query_counters(ports[d].dev, &pc[d]);
        std::printf("{\"ports\": [%s, %s], \"mode\": \"%s\", \"burst\": %u, \"lcores\": [", json_str(o.port[0]).c_str(),
                    json_str(o.port[1]).c_str(), o.how == fwd::mode::io ? "io" : "macswap", o.burst);
        for (unsigned k = 0; k < nl; k++)
            std::printf("%s%u", k ? ", " : "", o.cores[k]);
        std::printf("], \"seconds\": %.3f,\n \"impairments\": {\"drop\": %g, \"dup\": %g, \"reorder\": %g, "
                    "\"corrupt\": %g, \"seed\": %" PRIu64 "},\n \"directions\": [",
                    el, o.imp.drop, o.imp.dup, o.imp.reorder, o.imp.corrupt, o.imp.seed);
        for (int d = 0; d < 2; d++)
            std::printf("%s\n  {\"from\": %s, \"to\": %s, \"received\": %" PRIu64 ", \"sent\": %" PRIu64
                        ", \"pps\": %.1f, \"dropped\": %" PRIu64 ", \"duplicated\": %" PRIu64 ", \"reordered\": %" PRIu64
                        ", \"corrupted\": %" PRIu64 ", \"sq_full\": %" PRIu64 "}",
                        d ? "," : "", json_str(o.port[d]).c_str(), json_str(o.port[1 - d]).c_str(),
                        sum(d, &dir_stats::rx), sum(d, &dir_stats::tx),
                        el > 0 ? static_cast<double>(sum(d, &dir_stats::tx)) / el : 0.0, sum(d, &dir_stats::dropped),
                        sum(d, &dir_stats::duplicated), sum(d, &dir_stats::reordered), sum(d, &dir_stats::corrupted),
                        sum(d, &dir_stats::full));
        std::printf("],\n \"port_counters\": [");
        for (int d = 0; d < 2; d++)
            std::printf("%s{\"ipackets\": %" PRIu64 ", \"opackets\": %" PRIu64 ", \"imissed\": %" PRIu64
                        ", \"ierrors\": %" PRIu64 ", \"oerrors\": %" PRIu64 ", \"rx_nombuf\": %" PRIu64 "}",
                        d ? ", " : "", pc[d].ipackets, pc[d].opackets, pc[d].imissed, pc[d].ierrors, pc[d].oerrors,
                        pc[d].rx_nombuf);
        std::printf("],\n \"send_error\": %s}\n",
                    err ? json_str(vq::wc_status_str(static_cast<vq::wc_status>(err & 0xffff))).c_str() : "null");
        std::fflush(stdout);
    }
    // Teardown: QPs, CQs, thread domains, memory, contexts.
    for (auto &L : lc)
        for (auto &s : L->s) {
            (void)vq::destroy_qp(s.qp);
            (void)vq::destroy_cq(s.cq);
        }
    for (auto &p : ports) {
        (void)vq::dereg_mr(p.xmr);
        (void)vq::dereg_mr(p.mr);
    }
    for (auto &p : ports) {
        for (auto *t : p.tds)
            (void)vq::dealloc_td(t);
        (void)vq::free_buf(p.ctx, p.mem);
        (void)vq::dealloc_pd(p.pd);
        (void)vq::close_device(p.ctx);
    }
    return err ? 1 : 0;
}
