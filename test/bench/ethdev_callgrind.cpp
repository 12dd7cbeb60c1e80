// ethdev-callgrind: N round trips of an 8-byte inline RC send each way
// between two QPs on the cross-wired net_ring pair net_ring_pair0a <->
// net_ring_pair0b, in one process (SHUNT_ETHDEV_RING_PAIRS=1), each round
// trip in one function so that callgrind counts exactly the driver's work
// for two messages: posting, framing (headers, ICRC), the PMD's rings,
// receiving (validation, demultiplexing, placement, completion) and the
// acknowledgements:
//
//   valgrind --tool=callgrind --collect-atstart=no
//     --toggle-collect='*ethdev_measure_*' build-cg/test/bench/ethdev-callgrind 10000
//
// (callgrind_annotate --inclusive=yes: ethdev_measure_round_trip's
// instructions / N, and the functions under it). Outside valgrind it runs
// as fast as it can and checks that every message arrived.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "env/errors.h"
#include "vq/vq.h"

namespace vq = shunt::vq;

namespace {

[[noreturn]] void die(const char *what, int rc)
{
    std::fprintf(stderr, "ethdev-callgrind: %s: %s\n", what, shunt::strerror(rc));
    std::exit(1);
}

struct side {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::td *td = nullptr;
    vq::cq *cq = nullptr;
    vq::mr *mr = nullptr;
    vq::qp *qp = nullptr;
    std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(1 << 16);
    std::uint64_t posted = 0;

    explicit side(const char *dev)
    {
        vq::device *d = vq::find_device(dev);
        if (!d)
            die(dev, -shunt::FI_ENODEV);
        vq::cq_init_attr ca;
        ca.cqe = 4096;
        ca.single_threaded = true;
        int rc;
        if ((rc = vq::open_device(d, &ctx)) || (rc = vq::alloc_pd(ctx, &pd)) || (rc = vq::alloc_td(ctx, &td)) ||
            (rc = vq::create_cq(ctx, &ca, &cq)) ||
            (rc = vq::reg_mr(pd, buf.data(), buf.size(), vq::ACCESS_LOCAL_WRITE, &mr)))
            die("set-up", rc);
        vq::qp_init_attr ia;
        ia.type = vq::qp_type::rc;
        ia.send_cq = ia.recv_cq = cq;
        ia.td = td;
        ia.cap.max_send_wr = 256;
        ia.cap.max_recv_wr = 256;
        ia.cap.max_inline_data = 64;
        if ((rc = vq::create_qp(pd, &ia, &qp)))
            die("create_qp", rc);
    }
    void connect(const vq::qp *peer)
    {
        vq::qp_attr a;
        a.state = vq::qp_state::init;
        int rc = vq::modify_qp(qp, &a, vq::QP_ATTR_STATE);
        a.state = vq::qp_state::rtr;
        a.dest = peer->ctx->addr;
        a.dest_qp_num = peer->qp_num;
        if (!rc)
            rc = vq::modify_qp(qp, &a, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN);
        a.state = vq::qp_state::rts;
        if (!rc)
            rc = vq::modify_qp(qp, &a, vq::QP_ATTR_STATE);
        if (rc)
            die("connect", rc);
        for (int i = 0; i < 128; i++)
            repost();
    }
    void repost()
    {
        int rc = vq::post_recv(qp, posted++, reinterpret_cast<std::uint64_t>(buf.data() + 4096), 4096, mr->lkey);
        if (rc)
            die("post_recv", rc);
    }
    /** Poll until a receive completes (the sender's own CQ is polled too:
     *  progress of both ends, as two processes would make it). */
    void receive(side &other)
    {
        vq::wc w[4];
        for (long spin = 0; spin < 100000000; spin++) {
            (void)vq::poll_cq(other.cq, 4, w); // the peer's acknowledgements, send completions
            int n = vq::poll_cq(cq, 4, w);
            for (int k = 0; k < n; k++) {
                if (w[k].status != vq::wc_status::success)
                    die("completion", -shunt::FI_EIO);
                if (w[k].opcode == vq::wc_opcode::recv) {
                    repost();
                    return;
                }
            }
        }
        die("receive", -shunt::FI_ETIMEDOUT);
    }
};

inline void round_trip(side &a, side &b)
{
    int rc;
    if ((rc = vq::post_send(a.qp, 1, a.buf.data(), 8, 0, vq::WR_INLINE)))
        die("post_send", rc);
    b.receive(a);
    if ((rc = vq::post_send(b.qp, 2, b.buf.data(), 8, 0, vq::WR_INLINE)))
        die("post_send", rc);
    a.receive(b);
}

[[gnu::noipa]] void warm_up(side &a, side &b) { round_trip(a, b); }

} // namespace

// Outside the anonymous namespace, as callgrind's --toggle-collect names it;
// noipa: not folded with warm_up, whose code is the same.
[[gnu::noipa]] void ethdev_measure_round_trip(side &a, side &b) { round_trip(a, b); }

int main(int argc, char **argv)
{
    long n = argc > 1 ? std::atol(argv[1]) : 10000;
    // Under valgrind DPDK's EAL cannot reserve its hugepage address space.
    setenv("SHUNT_HUGEPAGES", "off", 0);
    setenv("SHUNT_ETHDEV_RING_PAIRS", "1", 0);
    side a("net_ring_pair0a"), b("net_ring_pair0b");
    a.connect(b.qp);
    b.connect(a.qp);
    for (int i = 0; i < 1000; i++)
        warm_up(a, b);
    for (long i = 0; i < n; i++)
        ethdev_measure_round_trip(a, b);
    std::printf("%ld round trips of 8 bytes each way\n", n);
    return 0;
}
