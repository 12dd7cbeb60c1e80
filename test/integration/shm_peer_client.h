// Test side of the shm peer protocol: spawn a real peer process and drive it.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <grp.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>
#include <vector>

#include "shm_peer_proto.h"
#include "env/errors.h"
#include "env/stats.h"
#include "vq/vq.h"

extern char **environ;

namespace shunt::test {

namespace vq = shunt::vq;
namespace pp = peer_proto;

/** A peer process (test/integration/shm_peer) with one QP of a given type. */
class shm_peer {
public:
    /** Spawn a peer with a QP of @p type; with @p uid != 0 the peer runs as that user. */
    explicit shm_peer(const char *type = "rc", uid_t uid = 0)
    {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            ADD_FAILURE() << "socketpair";
            return;
        }
        char *args[] = {const_cast<char *>(SHM_PEER_PATH), const_cast<char *>(type), nullptr};
        int rc = 0;
        if (uid == 0) {
            posix_spawn_file_actions_t fa;
            posix_spawn_file_actions_init(&fa);
            posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
            rc = posix_spawn(&pid_, SHM_PEER_PATH, &fa, nullptr, args, environ);
            posix_spawn_file_actions_destroy(&fa);
        } else {
            pid_ = fork();
            if (pid_ == 0) { // only async-signal-safe calls until exec
                if (setgroups(0, nullptr) || setgid(uid) || setuid(uid) || dup2(sv[1], 3) < 0)
                    _exit(120);
                execve(SHM_PEER_PATH, args, environ);
                _exit(121);
            }
            rc = pid_ < 0 ? -1 : 0;
        }
        ::close(sv[1]);
        fd_ = sv[0];
        if (rc != 0) {
            ADD_FAILURE() << "cannot spawn " << SHM_PEER_PATH;
            pid_ = 0;
            return;
        }
        pp::request r{};
        r.op = pp::hello;
        pp::response s = call(r);
        addr = s.addr;
        priv_addr = s.a;
        priv_rkey = static_cast<std::uint32_t>(s.b);
        seg_addr = s.c;
        seg_rkey = static_cast<std::uint32_t>(s.d);
    }
    ~shm_peer()
    {
        if (pid_ > 0 && alive_) {
            pp::request r{};
            r.op = pp::quit;
            call(r);
            int st = 0;
            waitpid(pid_, &st, 0);
            EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "peer exit status " << st;
        }
        if (fd_ >= 0)
            ::close(fd_);
    }

    /** One request/response; @p extra_out receives trailing bytes. */
    pp::response call(const pp::request &r, std::vector<std::uint8_t> *extra_out = nullptr,
                      const void *payload = nullptr, std::size_t payload_len = 0)
    {
        pp::response s{};
        s.rc = -FI_EIO;
        if (!pp::write_all(fd_, &r, sizeof r) || (payload_len && !pp::write_all(fd_, payload, payload_len)) ||
            !pp::read_all(fd_, &s, sizeof s)) {
            ADD_FAILURE() << "peer did not answer request " << r.op;
            s.rc = -FI_EIO;
            return s;
        }
        std::size_t extra = r.op == pp::poll ? s.n * sizeof(vq::wc) : r.op == pp::read_mem ? s.n : 0;
        std::vector<std::uint8_t> tmp(extra);
        if (extra && !pp::read_all(fd_, tmp.data(), extra))
            ADD_FAILURE() << "short peer reply";
        if (extra_out)
            *extra_out = std::move(tmp);
        return s;
    }

    int connect(const vq::qp_addr &a)
    {
        pp::request r{};
        r.op = pp::connect;
        r.addr = a;
        return call(r).rc;
    }
    int post_recv(std::uint32_t n, std::uint64_t size, std::uint64_t off = 0, std::uint32_t pieces = 1)
    {
        pp::request r{};
        r.op = pp::post_recv;
        r.n = n;
        r.a = size;
        r.b = off;
        r.c = pieces;
        return call(r).rc;
    }
    std::vector<vq::wc> poll(std::uint32_t n, int ms = 5000)
    {
        pp::request r{};
        r.op = pp::poll;
        r.n = n;
        r.a = static_cast<std::uint64_t>(ms);
        std::vector<std::uint8_t> b;
        pp::response s = call(r, &b);
        std::vector<vq::wc> w(s.n);
        std::memcpy(w.data(), b.data(), b.size());
        return w;
    }
    std::vector<std::uint8_t> read(std::uint64_t off, std::uint64_t len, bool seg = false)
    {
        pp::request r{};
        r.op = pp::read_mem;
        r.a = off;
        r.b = len;
        r.c = seg;
        std::vector<std::uint8_t> b;
        call(r, &b);
        return b;
    }
    void write(std::uint64_t off, const std::vector<std::uint8_t> &bytes, bool seg = false)
    {
        pp::request r{};
        r.op = pp::write_mem;
        r.a = off;
        r.b = bytes.size();
        r.c = seg;
        EXPECT_EQ(call(r, nullptr, bytes.data(), bytes.size()).rc, 0);
    }
    int send(std::uint64_t off, std::uint64_t len, bool inl, unsigned flags = 0)
    {
        pp::request r{};
        r.op = pp::send;
        r.a = off;
        r.b = len;
        r.n = inl;
        r.d = flags;
        return call(r).rc;
    }
    vq::qp_state state()
    {
        pp::request r{};
        r.op = pp::state;
        return static_cast<vq::qp_state>(call(r).a);
    }
    /** Send a request without waiting for the answer (the peer works meanwhile). */
    void start(const pp::request &r) { EXPECT_TRUE(pp::write_all(fd_, &r, sizeof r)); }
    pp::response finish()
    {
        pp::response s{};
        s.rc = -FI_EIO;
        EXPECT_TRUE(pp::read_all(fd_, &s, sizeof s));
        return s;
    }
    void kill()
    {
        ::kill(pid_, SIGKILL);
        int st;
        waitpid(pid_, &st, 0);
        alive_ = false;
    }
    pid_t pid() const { return pid_; }
    int fd() const { return fd_; }

    vq::qp_addr addr{};
    std::uint64_t priv_addr = 0, seg_addr = 0;
    std::uint32_t priv_rkey = 0, seg_rkey = 0;

private:
    pid_t pid_ = 0;
    int fd_ = -1;
    bool alive_ = true;
};

/** The test's own side: context, PD, CQ, one QP, a registered buffer. */
struct local_end {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::qp *qp = nullptr;
    std::vector<std::uint8_t> buf;
    vq::mr *mr = nullptr;

    explicit local_end(vq::qp_type t = vq::qp_type::rc, std::size_t bytes = 4 << 20)
        : buf(bytes)
    {
        EXPECT_EQ(vq::open_device(vq::find_device("shm0"), &ctx), 0);
        EXPECT_EQ(vq::alloc_pd(ctx, &pd), 0);
        vq::cq_init_attr ca;
        ca.cqe = 4096;
        EXPECT_EQ(vq::create_cq(ctx, &ca, &cq), 0);
        vq::qp_init_attr ia;
        ia.type = t;
        ia.send_cq = ia.recv_cq = cq;
        ia.send_ops_flags = vq::ops_allowed(t);
        ia.cap.max_send_wr = 1024;
        ia.cap.max_recv_wr = 1024;
        ia.cap.max_send_sge = 8;
        ia.cap.max_recv_sge = 8;
        ia.cap.max_inline_data = 256;
        EXPECT_EQ(vq::create_qp(pd, &ia, &qp), 0);
        EXPECT_EQ(vq::reg_mr(pd, buf.data(), bytes,
                             vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ |
                                 vq::ACCESS_REMOTE_ATOMIC,
                             &mr),
                  0);
    }
    ~local_end()
    {
        EXPECT_EQ(vq::dereg_mr(mr), 0);
        EXPECT_EQ(vq::destroy_qp(qp), 0);
        EXPECT_EQ(vq::destroy_cq(cq), 0);
        EXPECT_EQ(vq::dealloc_pd(pd), 0);
        EXPECT_EQ(vq::close_device(ctx), 0);
    }
    int connect(const vq::qp_addr &peer)
    {
        vq::qp_attr a;
        a.state = vq::qp_state::init;
        a.qkey = 0x1234;
        a.qp_access_flags = vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC;
        int rc = vq::modify_qp(qp, &a, vq::QP_ATTR_STATE | vq::QP_ATTR_QKEY | vq::QP_ATTR_ACCESS_FLAGS);
        a.state = vq::qp_state::rtr;
        a.dest = peer.dev;
        a.dest_qp_num = peer.qpn;
        unsigned m = vq::QP_ATTR_STATE;
        if (qp->type != vq::qp_type::ud)
            m |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
        if (!rc)
            rc = vq::modify_qp(qp, &a, m);
        a.state = vq::qp_state::rts;
        if (!rc)
            rc = vq::modify_qp(qp, &a, vq::QP_ATTR_STATE);
        return rc;
    }
    std::uint64_t addr(std::size_t off = 0) { return reinterpret_cast<std::uint64_t>(buf.data() + off); }
    /** Poll n completions with a bounded, yielding wait. */
    std::vector<vq::wc> poll(std::size_t n, int ms = 5000)
    {
        std::vector<vq::wc> got;
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        vq::wc w[16];
        while (got.size() < n) {
            int k = vq::poll_cq(cq, 16, w);
            if (k < 0) {
                ADD_FAILURE() << "poll_cq " << k;
                break;
            }
            for (int i = 0; i < k; i++)
                got.push_back(w[i]);
            if (k == 0) {
                if (std::chrono::steady_clock::now() > end)
                    break;
                std::this_thread::yield();
            }
        }
        return got;
    }
};

/** Field @p f of the statistics block shm.qp.<QP number of @p q>@p suffix
 *  (~0 when it cannot be read). */
inline std::uint64_t qp_stat(const vq::qp *q, const char *suffix, const char *f)
{
    env::stats::block_snapshot b;
    if (env::stats::read("shm.qp." + std::to_string(q->qp_num) + suffix, b) != 0)
        return ~0ull;
    const env::stats::field_value *v = b.find(f);
    return v ? v->value : ~0ull;
}

/** Poll @p cq a few rounds; return what arrived. */
inline std::vector<vq::wc> drain(vq::cq *cq, int rounds = 200)
{
    std::vector<vq::wc> got;
    vq::wc w[16];
    for (int r = 0; r < rounds; r++) {
        int k = vq::poll_cq(cq, 16, w);
        for (int i = 0; i < k; i++)
            got.push_back(w[i]);
        std::this_thread::yield();
    }
    return got;
}

/** Poll the QP's CQs (progress) until it reaches @p st; bounded (10 s). */
inline bool wait_until_state(vq::qp *q, vq::qp_state st, std::vector<vq::wc> *seen = nullptr)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    vq::wc w[16];
    while (vq::get_qp_state(q) != st) {
        int k = vq::poll_cq(q->recv_cq, 16, w);
        for (int i = 0; seen && i < k; i++)
            seen->push_back(w[i]);
        if (std::chrono::steady_clock::now() > end)
            return false;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return true;
}

} // namespace shunt::test
