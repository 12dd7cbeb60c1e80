// Raw two-process RC send/receive ping-pong over a vq device (shm0 unless
// SHUNT_PINGPONG_DEVICE names another).
//
//   vq-pingpong [SIZE] [ITERATIONS] [CORE_A] [CORE_B]
//
// Over a device whose two ends need different EAL arguments (net_memif:
// server and client), give the child's in SHUNT_PINGPONG_CHILD_EAL_ARGS:
// the parent then opens its device (SHUNT_EAL_ARGS, the server) before it
// starts the child. For example:
//
//   export SHUNT_PINGPONG_DEVICE=net_memif0
//   export SHUNT_EAL_ARGS=--vdev=net_memif0,role=server,id=0,socket=/run/pp.sock
//   export SHUNT_PINGPONG_CHILD_EAL_ARGS=--vdev=net_memif0,role=client,id=0,socket=/run/pp.sock
//   vq-pingpong 8 200000 0 1
//
// The parent pins itself to CORE_A (default 0), spawns itself pinned to
// CORE_B (default 1), exchanges QP addresses over a socketpair, then times
// ITERATIONS round trips of SIZE-byte inline sends (default 8 bytes) with the
// TSC and prints one-way latency (half the round trip) percentiles in ns.
// QPs use a thread domain and single-threaded CQs (no locks), sends are
// unsignaled; each side re-posts the consumed receive after replying (as a
// latency-minded application would), so the timed path is poll + send.
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "env/errors.h"
#include "env/tsc.h"
#include "vq/vq.h"

extern char **environ;

using namespace shunt;

namespace {

bool pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s) == 0;
}

bool xfer(int fd, void *p, std::size_t n, bool wr)
{
    auto *c = static_cast<char *>(p);
    while (n) {
        ssize_t k = wr ? ::write(fd, c, n) : ::read(fd, c, n);
        if (k <= 0)
            return false;
        c += k;
        n -= static_cast<std::size_t>(k);
    }
    return true;
}

[[noreturn]] void die(const char *what, int rc)
{
    std::fprintf(stderr, "vq-pingpong: %s: %s\n", what, shunt::strerror(rc));
    std::exit(1);
}

struct endpoint {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::td *td = nullptr;
    vq::cq *scq = nullptr, *rcq = nullptr;
    vq::qp *qp = nullptr;
    std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(1 << 16);
    vq::mr *mr = nullptr;

    void open()
    {
        int rc;
        const char *name = std::getenv("SHUNT_PINGPONG_DEVICE");
        vq::device *d = vq::find_device(name && *name ? name : "shm0");
        if (!d)
            die(name && *name ? name : "shm0", -FI_ENODEV);
        if ((rc = vq::open_device(d, &ctx)) || (rc = vq::alloc_pd(ctx, &pd)) || (rc = vq::alloc_td(ctx, &td)))
            die("open", rc);
        vq::cq_init_attr ca;
        ca.cqe = 1024;
        ca.single_threaded = true;
        if ((rc = vq::create_cq(ctx, &ca, &scq)) || (rc = vq::create_cq(ctx, &ca, &rcq)))
            die("create_cq", rc);
        vq::qp_init_attr ia;
        ia.type = vq::qp_type::rc;
        ia.send_cq = scq;
        ia.recv_cq = rcq;
        ia.send_ops_flags = vq::OPS_SEND;
        ia.td = td;
        ia.cap.max_send_wr = 1024;
        ia.cap.max_recv_wr = 1024;
        ia.cap.max_inline_data = 256;
        if ((rc = vq::create_qp(pd, &ia, &qp)))
            die("create_qp", rc);
        if ((rc = vq::reg_mr(pd, buf.data(), buf.size(), vq::ACCESS_LOCAL_WRITE, &mr)))
            die("reg_mr", rc);
    }
    void connect(const vq::qp_addr &peer)
    {
        vq::qp_attr a;
        a.state = vq::qp_state::init;
        int rc = vq::modify_qp(qp, &a, vq::QP_ATTR_STATE);
        a.state = vq::qp_state::rtr;
        a.dest = peer.dev;
        a.dest_qp_num = peer.qpn;
        if (!rc)
            rc = vq::modify_qp(qp, &a, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN);
        a.state = vq::qp_state::rts;
        if (!rc)
            rc = vq::modify_qp(qp, &a, vq::QP_ATTR_STATE);
        if (rc)
            die("connect", rc);
        for (int i = 0; i < 512; i++)
            if ((rc = vq::post_recv(qp, 0, reinterpret_cast<std::uint64_t>(buf.data() + 4096), 4096, mr->lkey)))
                die("post_recv", rc);
    }
    /** Wait for one receive. */
    inline void recv_one()
    {
        vq::wc w;
        while (vq::poll_cq(rcq, 1, &w) == 0) {
        }
        if (w.status != vq::wc_status::success) [[unlikely]] {
            std::fprintf(stderr, "vq-pingpong: receive failed: %s\n", vq::wc_status_str(w.status));
            std::exit(1);
        }
    }
    /** Replace the consumed receive (off the critical path: after replying). */
    inline void repost()
    {
        int rc = vq::post_recv(qp, 0, reinterpret_cast<std::uint64_t>(buf.data() + 4096), 4096, mr->lkey);
        if (rc) [[unlikely]]
            die("post_recv", rc);
    }
    inline void send(std::uint32_t size)
    {
        int rc = vq::post_send(qp, 0, buf.data(), size, mr->lkey, size <= 256 ? vq::WR_INLINE : 0);
        if (rc) [[unlikely]]
            die("post_send", rc);
    }
};

} // namespace

int main(int argc, char **argv)
{
    bool child = argc > 1 && std::strcmp(argv[1], "--child") == 0;
    int base = child ? 2 : 1;
    std::uint32_t size = argc > base ? static_cast<std::uint32_t>(std::atoi(argv[base])) : 8;
    long iters = argc > base + 1 ? std::atol(argv[base + 1]) : 1000000;
    int core_a = argc > base + 2 ? std::atoi(argv[base + 2]) : 0;
    int core_b = argc > base + 3 ? std::atoi(argv[base + 3]) : 1;
    if (size > 4096 || iters <= 0) {
        std::fprintf(stderr, "usage: vq-pingpong [SIZE<=4096] [ITERATIONS] [CORE_A] [CORE_B]\n");
        return 2;
    }
    const long warmup = iters / 10 + 1000;
    endpoint ep;
    int fd;
    pid_t kid = 0;
    const char *child_eal = std::getenv("SHUNT_PINGPONG_CHILD_EAL_ARGS");
    const bool own_eal = child_eal && *child_eal;
    if (!child && own_eal) {
        // The server end first: the child's port connects to it.
        if (!pin(core_a))
            die("pin", -FI_EINVAL);
        ep.open();
        if (setenv("SHUNT_EAL_ARGS", child_eal, 1))
            die("setenv", -errno);
    }
    if (child) {
        fd = 3;
        if (!pin(core_b))
            die("pin", -FI_EINVAL);
    } else {
        if (!pin(core_a))
            die("pin", -FI_EINVAL);
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
            die("socketpair", -errno);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
        std::string s = std::to_string(size), n = std::to_string(iters), a = std::to_string(core_a),
                    b = std::to_string(core_b);
        char *args[] = {argv[0], const_cast<char *>("--child"), s.data(), n.data(), a.data(), b.data(), nullptr};
        if (posix_spawn(&kid, "/proc/self/exe", &fa, nullptr, args, environ))
            die("spawn", -errno);
        ::close(sv[1]);
        fd = sv[0];
    }
    if (child || !own_eal)
        ep.open();
    vq::qp_addr mine = vq::get_qp_addr(ep.qp), theirs;
    if (!xfer(fd, &mine, sizeof mine, true) || !xfer(fd, &theirs, sizeof theirs, false))
        die("exchange", -FI_EIO);
    ep.connect(theirs);
    char go = 1;
    if (!xfer(fd, &go, 1, true) || !xfer(fd, &go, 1, false)) // both ready
        die("sync", -FI_EIO);

    if (child) {
        for (long i = 0; i < warmup + iters; i++) {
            ep.recv_one();
            ep.send(size);
            ep.repost();
        }
    } else {
        std::vector<std::uint64_t> cyc(static_cast<std::size_t>(iters));
        for (long i = 0; i < warmup + iters; i++) {
            std::uint64_t t0 = env::tsc::now();
            ep.send(size);
            ep.recv_one();
            std::uint64_t t1 = env::tsc::now();
            ep.repost();
            if (i >= warmup)
                cyc[static_cast<std::size_t>(i - warmup)] = t1 - t0;
        }
        std::sort(cyc.begin(), cyc.end());
        auto pct = [&](double p) {
            std::size_t k = static_cast<std::size_t>(p / 100.0 * static_cast<double>(cyc.size() - 1));
            return env::tsc::to_ns(cyc[k]) / 2.0;
        };
        std::printf("vq_pingpong size_bytes %u iterations %ld cores %d,%d\n", size, iters, core_a, core_b);
        std::printf("one_way_ns p50 %.0f p90 %.0f p99 %.0f p99.9 %.0f max %.0f\n", pct(50), pct(90), pct(99),
                    pct(99.9), env::tsc::to_ns(cyc.back()) / 2.0);
    }
    xfer(fd, &go, 1, true);
    xfer(fd, &go, 1, false);
    if (kid) {
        int st = 0;
        waitpid(kid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
    }
    return 0;
}
