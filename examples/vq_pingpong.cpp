// A ping-pong over Shunt's verbs queues (lib/vq) between two processes: two
// RC queue pairs on the shm driver's device, connected through addresses
// exchanged over a socketpair.
//
//   vq-pingpong [ROUNDS] [SIZE]      (default 1000 rounds of 256 bytes)
//
// The parent sends SIZE bytes, the forked child checks them and sends them
// back with every byte incremented, the parent checks the reply; ROUNDS
// times. Exit 0 when every round trip came back intact.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <env/errors.h>
#include <vq/vq.h>

using namespace shunt;

namespace {

[[noreturn]] void die(const char *what, int rc)
{
    std::fprintf(stderr, "vq-pingpong: %s: %s\n", what, shunt::strerror(rc));
    std::exit(1);
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

struct side {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::qp *qp = nullptr;
    vq::mr *mr = nullptr;
    std::vector<std::uint8_t> tx, rx;

    explicit side(std::size_t size) : tx(size), rx(size) {}

    void open()
    {
        vq::device *dev = vq::find_device("shm0");
        if (!dev)
            die("no shm0 device (is the shm driver installed? shunt-info -D)", -FI_ENODEV);
        int rc;
        if ((rc = vq::open_device(dev, &ctx)) || (rc = vq::alloc_pd(ctx, &pd)))
            die("open_device/alloc_pd", rc);
        vq::cq_init_attr ca;
        ca.cqe = 64;
        if ((rc = vq::create_cq(ctx, &ca, &cq)))
            die("create_cq", rc);
        vq::qp_init_attr ia;
        ia.type = vq::qp_type::rc;
        ia.send_cq = cq;
        ia.recv_cq = cq;
        ia.send_ops_flags = vq::OPS_SEND;
        ia.cap.max_send_wr = 16;
        ia.cap.max_recv_wr = 16;
        ia.cap.max_inline_data = 256;
        if ((rc = vq::create_qp(pd, &ia, &qp)))
            die("create_qp", rc);
        // One region over both buffers would do; two keep the example plain.
        if ((rc = vq::reg_mr(pd, rx.data(), rx.size(), vq::ACCESS_LOCAL_WRITE, &mr)))
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
            die("modify_qp", rc);
        post_recv();
    }
    void post_recv()
    {
        int rc = vq::post_recv(qp, 1, reinterpret_cast<std::uint64_t>(rx.data()),
                               static_cast<std::uint32_t>(rx.size()), mr->lkey);
        if (rc)
            die("post_recv", rc);
    }
    void send()
    {
        // Inline: the data is copied at post time, so tx needs no registration.
        int rc = vq::post_send(qp, 2, tx.data(), static_cast<std::uint32_t>(tx.size()), 0,
                               vq::WR_INLINE | vq::WR_SIGNALED);
        if (rc)
            die("post_send", rc);
    }
    void close()
    {
        // In reverse order of creation; each call fails only on misuse.
        if (vq::destroy_qp(qp) || vq::dereg_mr(mr) || vq::destroy_cq(cq) || vq::dealloc_pd(pd) ||
            vq::close_device(ctx))
            die("teardown", -FI_EBUSY);
    }
    /** Wait (10 s at most) for the receive and the send completion. */
    void wait_round()
    {
        bool got_recv = false, got_send = false;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!got_recv || !got_send) {
            vq::wc w;
            if (vq::poll_cq(cq, 1, &w) == 1) {
                if (w.status != vq::wc_status::success) {
                    std::fprintf(stderr, "vq-pingpong: completion failed: %s\n", vq::wc_status_str(w.status));
                    std::exit(1);
                }
                (w.wr_id == 1 ? got_recv : got_send) = true;
            } else if (std::chrono::steady_clock::now() > deadline) {
                die("no completion within 10 s", -FI_ETIMEDOUT);
            }
        }
        post_recv();
    }
};

int run(bool parent, int fd, long rounds, std::size_t size)
{
    side s(size);
    s.open();
    vq::qp_addr mine = vq::get_qp_addr(s.qp), theirs;
    if (!xfer(fd, &mine, sizeof mine, true) || !xfer(fd, &theirs, sizeof theirs, false))
        die("address exchange", -FI_EIO);
    s.connect(theirs);
    char go = 1;
    if (!xfer(fd, &go, 1, true) || !xfer(fd, &go, 1, false)) // both have a receive posted
        die("sync", -FI_EIO);
    for (long r = 0; r < rounds; r++) {
        if (parent) {
            for (std::size_t i = 0; i < size; i++)
                s.tx[i] = static_cast<std::uint8_t>(r + i);
            s.send();
            s.wait_round();
            for (std::size_t i = 0; i < size; i++)
                if (s.rx[i] != static_cast<std::uint8_t>(r + i + 1)) {
                    std::fprintf(stderr, "vq-pingpong: round %ld byte %zu is wrong\n", r, i);
                    return 1;
                }
        } else {
            // Wait for the ping only, then answer it.
            bool got = false;
            auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (!got) {
                vq::wc w;
                if (vq::poll_cq(s.cq, 1, &w) == 1) {
                    if (w.status != vq::wc_status::success)
                        die("receive", -FI_EIO);
                    got = w.wr_id == 1;
                } else if (std::chrono::steady_clock::now() > deadline) {
                    die("no ping within 10 s", -FI_ETIMEDOUT);
                }
            }
            for (std::size_t i = 0; i < size; i++)
                s.tx[i] = static_cast<std::uint8_t>(s.rx[i] + 1);
            s.post_recv();
            s.send();
        }
    }
    if (!xfer(fd, &go, 1, true) || !xfer(fd, &go, 1, false)) // both done before closing
        die("sync", -FI_EIO);
    s.close();
    if (parent)
        std::printf("vq-pingpong: %ld round trips of %zu bytes, every byte checked\n", rounds, size);
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? std::atol(argv[1]) : 1000;
    long size = argc > 2 ? std::atol(argv[2]) : 256;
    if (rounds < 1 || size < 1 || size > 256) {
        std::fprintf(stderr, "usage: vq-pingpong [ROUNDS] [SIZE 1..256]\n");
        return 2;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        die("socketpair", -errno);
    pid_t kid = fork();
    if (kid < 0)
        die("fork", -errno);
    if (kid == 0) {
        ::close(sv[0]);
        std::exit(run(false, sv[1], rounds, static_cast<std::size_t>(size)));
    }
    ::close(sv[1]);
    int rc = run(true, sv[0], rounds, static_cast<std::size_t>(size));
    int st = 0;
    if (waitpid(kid, &st, 0) != kid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        std::fprintf(stderr, "vq-pingpong: the peer process failed\n");
        return 1;
    }
    return rc;
}
