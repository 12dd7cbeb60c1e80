// vq conformance suite: the test process's side (see conf_harness.h).
#include "conf_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>

extern char **environ;

namespace shunt::conf {

/* ---------------- Seeds ---------------- */

std::uint64_t run_seed()
{
    static const std::uint64_t seed = [] {
        if (const char *s = std::getenv("SHUNT_TEST_SEED"); s && *s)
            return static_cast<std::uint64_t>(std::strtoull(s, nullptr, 0));
        std::random_device rd;
        return static_cast<std::uint64_t>((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
    }();
    return seed;
}

std::uint64_t test_seed()
{
    std::uint64_t h = run_seed();
    if (const auto *info = ::testing::UnitTest::GetInstance()->current_test_info()) {
        std::string name = std::string(info->test_suite_name()) + "." + info->name();
        for (char c : name)
            h = (h ^ static_cast<std::uint8_t>(c)) * 0x100000001b3ull;
    }
    return h;
}

void conf_test::TearDown()
{
    if (HasFailure())
        std::fprintf(stderr, "*** replay with SHUNT_TEST_SEED=%" PRIu64 " (test seed %" PRIu64 ")\n",
                     run_seed(), test_seed());
}

/* ---------------- Local side ---------------- */

namespace {
/** SHUNT_CONF_EAL_ARGS becomes this process's SHUNT_EAL_ARGS (before the EAL starts). */
void conf_env_setup()
{
    static const bool done = [] {
        if (const char *a = std::getenv("SHUNT_CONF_EAL_ARGS"); a && *a)
            setenv("SHUNT_EAL_ARGS", conf_expand(a, 'p', getpid()).c_str(), 1);
        return true;
    }();
    (void)done;
}
} // namespace

local_side::local_side()
{
    conf_env_setup();
    vq::device *d = vq::find_device(conf_device());
    if (!d) {
        ADD_FAILURE() << "no device " << conf_device() << " (SHUNT_CONF_DEVICE)";
        return;
    }
    int rc = vq::open_device(d, &ctx);
    if (rc) {
        ADD_FAILURE() << "open_device: " << rc;
        return;
    }
    rc = vq::alloc_pd(ctx, &pd);
    if (rc) {
        ADD_FAILURE() << "alloc_pd: " << rc;
        return;
    }
    rc = vq::query_device(ctx, &attr);
    if (rc) {
        ADD_FAILURE() << "query_device: " << rc;
        return;
    }
    // Region 0: scratch (results of atomics, small reads).
    if (reg(4096, vq::ACCESS_LOCAL_WRITE) != 0)
        return;
    ok = true;
}

local_side::~local_side() { close(); }

void local_side::close()
{
    for (auto &q : qps) {
        if (q.qp) {
            EXPECT_EQ(vq::destroy_qp(q.qp), 0);
            q.qp = nullptr;
        }
    }
    for (auto *s : srqs)
        EXPECT_EQ(vq::destroy_srq(s), 0);
    srqs.clear();
    for (auto &q : qps) {
        if (q.cq) {
            EXPECT_EQ(vq::destroy_cq(q.cq), 0);
            q.cq = nullptr;
        }
    }
    qps.clear();
    for (auto *a : o.ahs)
        EXPECT_EQ(vq::destroy_ah(a), 0);
    o.ahs.clear();
    for (auto *m : o.mws)
        EXPECT_EQ(vq::dealloc_mw(m), 0);
    o.mws.clear();
    for (auto &m : o.mrs) {
        if (m.mr) {
            EXPECT_EQ(vq::dereg_mr(m.mr), 0);
        }
        if (m.seg) {
            EXPECT_EQ(vq::free_buf(ctx, m.base), 0);
        } else {
            std::free(m.base);
        }
    }
    o.mrs.clear();
    if (td) {
        EXPECT_EQ(vq::dealloc_td(td), 0);
        td = nullptr;
    }
    if (pd) {
        EXPECT_EQ(vq::dealloc_pd(pd), 0);
    }
    pd = nullptr;
    if (ctx) {
        EXPECT_EQ(vq::close_device(ctx), 0);
    }
    ctx = nullptr;
}

int local_side::reg(std::size_t size, unsigned access, bool seg, std::uint64_t seed)
{
    void *mem = nullptr;
    if (seg) {
        int rc = vq::alloc_buf(ctx, size, &mem);
        if (rc == -FI_EOPNOTSUPP)
            return -2;
        if (rc) {
            ADD_FAILURE() << "alloc_buf(" << size << "): " << rc;
            return -1;
        }
    } else {
        mem = std::aligned_alloc(64, (size + 63) & ~std::size_t{63});
    }
    if (seed)
        fill_pattern(mem, size, seed);
    else
        std::memset(mem, 0, size);
    vq::mr *m = nullptr;
    int rc = vq::reg_mr(pd, mem, size, access, &m);
    if (rc) {
        ADD_FAILURE() << "reg_mr(" << size << ", 0x" << std::hex << access << "): " << std::dec << rc;
        if (seg)
            (void)vq::free_buf(ctx, mem);
        else
            std::free(mem);
        return -1;
    }
    o.mrs.push_back({m, static_cast<std::uint8_t *>(mem), size, seg});
    return static_cast<int>(o.mrs.size() - 1);
}

int local_side::create_qp(vq::qp_type t, std::uint64_t ops, vq::qp_cap cap, unsigned *idx, bool sig_all,
                          vq::srq *srq, bool lend)
{
    local_qp lq;
    vq::cq_init_attr ca;
    ca.cqe = 4096;
    int rc = vq::create_cq(ctx, &ca, &lq.cq);
    if (rc)
        return rc;
    vq::qp_init_attr ia;
    ia.type = t;
    ia.send_cq = ia.recv_cq = lq.cq;
    ia.send_ops_flags = ops;
    ia.cap = cap;
    ia.sq_sig_all = sig_all;
    ia.srq = srq;
    ia.lend_recv = lend;
    ia.td = td;
    lq.lent = lend;
    rc = vq::create_qp(pd, &ia, &lq.qp);
    if (rc) {
        EXPECT_EQ(vq::destroy_cq(lq.cq), 0);
        return rc;
    }
    qps.push_back(std::move(lq));
    *idx = static_cast<unsigned>(qps.size() - 1);
    return 0;
}

int local_side::connect(unsigned idx, const vq::qp_addr &remote, std::uint32_t qkey, unsigned access)
{
    vq::qp *q = qp(idx);
    vq::qp_attr a;
    a.state = vq::qp_state::init;
    unsigned mask = vq::QP_ATTR_STATE;
    if (q->type == vq::qp_type::ud) {
        a.qkey = qkey;
        mask |= vq::QP_ATTR_QKEY;
    } else {
        // ~0u: "the harness default", every remote access (verbs' own
        // default, which shm follows, is none).
        a.qp_access_flags = access == ~0u ? (vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ |
                                              vq::ACCESS_REMOTE_ATOMIC)
                                           : access;
        mask |= vq::QP_ATTR_ACCESS_FLAGS;
    }
    int rc = vq::modify_qp(q, &a, mask);
    if (rc)
        return rc;
    a.state = vq::qp_state::rtr;
    mask = vq::QP_ATTR_STATE;
    if (q->type != vq::qp_type::ud) {
        a.dest = remote.dev;
        a.dest_qp_num = remote.qpn;
        mask |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
    }
    rc = vq::modify_qp(q, &a, mask);
    if (rc)
        return rc;
    a.state = vq::qp_state::rts;
    mask = vq::QP_ATTR_STATE;
    if (rc_timeout && q->type == vq::qp_type::rc) {
        a.timeout = rc_timeout;
        mask |= vq::QP_ATTR_TIMEOUT;
    }
    return vq::modify_qp(q, &a, mask);
}

int local_side::pump()
{
    int got = 0;
    for (auto &q : qps) {
        if (!q.cq || q.lent || q.self_polled)
            continue;
        vq::wc w[16];
        int k = vq::poll_cq(q.cq, 16, w);
        EXPECT_GE(k, 0) << "poll_cq";
        for (int i = 0; i < k; i++)
            q.wcs.push_back(w[i]);
        if (k > 0)
            got += k;
    }
    return got;
}

std::vector<vq::wc> local_side::wait_wcs(unsigned idx, std::size_t n, int ms)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    auto &dq = qps[idx].wcs;
    while (dq.size() < n) {
        if (pump() == 0) {
            if (std::chrono::steady_clock::now() > end) {
                ADD_FAILURE() << "timed out after " << ms << " ms waiting for " << n
                              << " completions on local QP " << idx << ", got " << dq.size();
                break;
            }
            sched_yield();
        }
    }
    std::size_t k = std::min(n, dq.size());
    std::vector<vq::wc> out(dq.begin(), dq.begin() + static_cast<std::ptrdiff_t>(k));
    dq.erase(dq.begin(), dq.begin() + static_cast<std::ptrdiff_t>(k));
    return out;
}

std::vector<vq::wc> local_side::drain(unsigned idx, int ms)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end)
        if (pump() == 0)
            usleep(100);
    std::vector<vq::wc> out(qps[idx].wcs.begin(), qps[idx].wcs.end());
    qps[idx].wcs.clear();
    return out;
}

/* ---------------- Peer ---------------- */

namespace {
std::string peer_path()
{
    if (const char *p = std::getenv("SHUNT_CONF_PEER"); p && *p)
        return p;
#ifdef CONF_PEER_PATH
    return CONF_PEER_PATH;
#else
    return "conf_peer";
#endif
}

/** Peer processes whose test ended cleanly, reset (every object destroyed, the
 *  device reopened) and kept for the next peer_proc with the same key: a new
 *  process costs a DPDK EAL start-up per test. Owned by the process that
 *  spawned them (a forked child never takes its parent's). */
struct idle_peer {
    pid_t pid;
    int fd;
    std::string key;
};
struct idle_pool {
    pid_t owner = getpid();
    std::vector<idle_peer> peers;
    ~idle_pool() { quit_all(); }
    void quit_all()
    {
        if (owner != getpid())
            return;
        for (auto &p : peers) {
            (void)send_msg(p.fd, CMD_QUIT, nullptr, 0);
            ::shutdown(p.fd, SHUT_WR);
            auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            int st = 0;
            while (::waitpid(p.pid, &st, WNOHANG) == 0) {
                if (std::chrono::steady_clock::now() > end) {
                    ::kill(p.pid, SIGKILL);
                    ::waitpid(p.pid, &st, 0);
                    break;
                }
                usleep(1000);
            }
            ::close(p.fd);
        }
        peers.clear();
    }
};
idle_pool &pool()
{
    static idle_pool p;
    return p;
}
constexpr std::size_t max_idle_peers = 4;

/** The peers of this process on their own end of a link (memif, which takes
 *  one): a second peer contends for the link with the first, so none of the
 *  peers that shared it is kept for reuse. */
struct link_use {
    int peers = 0;
    bool shared = false; ///< more than one peer since the link was last free
};
link_use &link()
{
    static link_use l;
    return l;
}
} // namespace

void peer_proc::quit_idle() { pool().quit_all(); }

/** Take an idle peer spawned with key_ that still answers. */
bool peer_proc::adopt_idle()
{
    auto &pl = pool();
    if (pl.owner != getpid())
        return false;
    for (std::size_t i = 0; i < pl.peers.size(); i++) {
        if (pl.peers[i].key != key_)
            continue;
        idle_peer p = pl.peers[i];
        pl.peers.erase(pl.peers.begin() + static_cast<std::ptrdiff_t>(i));
        int st = 0;
        hello_rep h{};
        msg_hdr rh{};
        bool alive = ::waitpid(p.pid, &st, WNOHANG) == 0 && send_msg(p.fd, CMD_HELLO, nullptr, 0) &&
                     read_all(p.fd, &rh, sizeof rh, 5000) && rh.cmd_or_rc == 0 && rh.len == sizeof h &&
                     read_all(p.fd, &h, sizeof h, 5000);
        if (!alive) { // died with the thread that spawned it, or broken: a new one instead
            ::kill(p.pid, SIGKILL);
            ::waitpid(p.pid, &st, 0);
            ::close(p.fd);
            return false;
        }
        pid_ = p.pid;
        fd_ = p.fd;
        hello_ = h;
        ok_ = true;
        return true;
    }
    return false;
}

peer_proc::peer_proc(local_side *local, int uid) : local_(local)
{
    conf_env_setup();
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        ADD_FAILURE() << "socketpair: " << std::strerror(errno);
        return;
    }
    if (conf_peer_thread()) {
        // The peer serves from a thread of this process, on its own device.
        if (uid >= 0) {
            ::close(sv[0]);
            ::close(sv[1]);
            ADD_FAILURE() << "a peer thread cannot run as another user";
            return;
        }
        int peer_fd = sv[1];
        thread_ = std::thread([peer_fd] {
            int rc = conf_peer_serve(peer_fd, conf_peer_device());
            if (rc)
                std::fprintf(stderr, "conf_peer thread: set-up failed: %d\n", rc);
            ::close(peer_fd);
        });
        pid_ = getpid();
        fd_ = sv[0];
        std::vector<std::uint8_t> out;
        int rc = request(CMD_HELLO, nullptr, 0, &out);
        if (rc != 0 || out.size() != sizeof hello_) {
            ADD_FAILURE() << "peer thread hello failed: " << rc;
            return;
        }
        std::memcpy(&hello_, out.data(), sizeof hello_);
        ok_ = true;
        return;
    }
    // The peer's environment: ours, with its own device and EAL arguments
    // when the link has two ends.
    std::vector<std::string> envs;
    for (char **e = environ; *e; e++)
        envs.emplace_back(*e);
    auto set_env = [&](const char *name, const std::string &v) {
        std::string pre = std::string(name) + "=";
        for (auto &e : envs)
            if (e.rfind(pre, 0) == 0) {
                e = pre + v;
                return;
            }
        envs.push_back(pre + v);
    };
    // The peer has its own end of a link (memif) when it has its own EAL
    // arguments. A reset keeps its port started (closing a context does not
    // stop the port), so the link stays up while the peer is reused; a new
    // peer process makes a new link instead.
    const char *peer_eal = std::getenv("SHUNT_CONF_PEER_EAL_ARGS");
    const bool own_link_end = peer_eal && *peer_eal;
    if (own_link_end) {
        set_env("SHUNT_EAL_ARGS", conf_expand(peer_eal, 'P', getpid()));
        on_link_ = true;
        if (link().peers++ > 0)
            link().shared = true;
    }
    set_env("SHUNT_CONF_DEVICE", conf_peer_device());
    key_ = std::to_string(uid);
    for (auto &e : envs)
        key_ += '\n' + e;
    if (reuse_ && adopt_idle()) {
        ::close(sv[0]);
        ::close(sv[1]);
        return;
    }
    // The link takes the new peer only once an idle one (another user's, say)
    // has let its end go.
    if (own_link_end)
        quit_idle();
    std::vector<char *> envp;
    for (auto &e : envs)
        envp.push_back(e.data());
    envp.push_back(nullptr);
    constexpr int child_fd = 100;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], child_fd);
    std::string path = peer_path();
    std::string fdarg = "--fd=" + std::to_string(child_fd);
    std::string uidarg = "--uid=" + std::to_string(uid);
    char *argv[] = {const_cast<char *>(path.c_str()), const_cast<char *>(fdarg.c_str()),
                    uid >= 0 ? const_cast<char *>(uidarg.c_str()) : nullptr, nullptr};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    if (rc != 0) {
        ::close(sv[0]);
        ADD_FAILURE() << "posix_spawn(" << path << "): " << std::strerror(rc);
        return;
    }
    pid_ = pid;
    fd_ = sv[0];
    std::vector<std::uint8_t> out;
    rc = request(CMD_HELLO, nullptr, 0, &out);
    if (rc != 0 || out.size() != sizeof hello_) {
        ADD_FAILURE() << "peer hello failed: " << rc;
        return;
    }
    std::memcpy(&hello_, out.data(), sizeof hello_);
    ok_ = true;
}

void peer_proc::reap(int ms)
{
    if (pid_ <= 0 || reaped_)
        return;
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        int st = 0;
        pid_t r = ::waitpid(pid_, &st, WNOHANG);
        if (r == pid_ || (r < 0 && errno == ECHILD)) {
            reaped_ = true;
            return;
        }
        if (std::chrono::steady_clock::now() > end) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, &st, 0);
            reaped_ = true;
            ADD_FAILURE() << "peer " << pid_ << " did not exit within " << ms << " ms (killed)";
            return;
        }
        usleep(1000);
    }
}

peer_proc::~peer_proc()
{
    if (on_link_) {
        if (link().shared)
            reuse_ = false;
        if (--link().peers == 0)
            link().shared = false;
    }
    if (thread_.joinable()) {
        if (fd_ >= 0 && ok_)
            (void)request(CMD_QUIT, nullptr, 0, nullptr, 10000);
        if (fd_ >= 0)
            ::shutdown(fd_, SHUT_RDWR); // a peer that did not quit sees the socket close
        thread_.join();
        reaped_ = true; // nothing to reap
    }
    if (pid_ > 0 && !reaped_) {
        // A peer that ended its test cleanly is reset and kept for the next.
        int st = 0;
        auto &pl = pool();
        if (fd_ >= 0 && ok_ && reuse_ && pl.owner == getpid() && pl.peers.size() < max_idle_peers &&
            ::waitpid(pid_, &st, WNOHANG) == 0 && request(CMD_RESET, nullptr, 0, nullptr, 10000) == 0) {
            pl.peers.push_back({pid_, fd_, key_});
            return;
        }
        if (fd_ >= 0 && ok_)
            (void)request(CMD_QUIT, nullptr, 0, nullptr, 10000);
        reap(10000);
    }
    if (fd_ >= 0)
        ::close(fd_);
}

void peer_proc::kill_now()
{
    if (thread_.joinable()) {
        ADD_FAILURE() << "a peer thread cannot be killed (guard the test with CONF_REQUIRE_PEER_PROCESS)";
        return;
    }
    if (pid_ <= 0 || reaped_)
        return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    reaped_ = true;
    ok_ = false;
}

bool peer_proc::send_request(std::uint32_t cmd, const void *body, std::size_t n)
{
    if (fd_ < 0 || reaped_)
        return false;
    return send_msg(fd_, cmd, body, n);
}

int peer_proc::await_reply(std::vector<std::uint8_t> *out, int timeout_ms)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        pollfd pf{fd_, POLLIN, 0};
        int busy = local_ ? local_->pump() : 0;
        // A device on a wire answers the peer's reads and atomics only while
        // this side polls: keep polling (yielding) instead of sleeping.
        const bool responder = local_ && !local_->qps.empty() && !conf_device_is_shm();
        if (responder && !busy)
            sched_yield();
        int r = ::poll(&pf, 1, busy || responder ? 0 : 1);
        if (r > 0)
            break;
        if (std::chrono::steady_clock::now() > end) {
            ADD_FAILURE() << "peer " << pid_ << " did not reply within " << timeout_ms << " ms";
            return -FI_ETIMEDOUT;
        }
    }
    msg_hdr h;
    if (!read_all(fd_, &h, sizeof h, timeout_ms)) {
        ADD_FAILURE() << "peer " << pid_ << ": connection lost";
        return -FI_ECONNRESET;
    }
    std::vector<std::uint8_t> body(h.len);
    if (h.len && !read_all(fd_, body.data(), h.len, timeout_ms)) {
        ADD_FAILURE() << "peer " << pid_ << ": truncated reply";
        return -FI_ECONNRESET;
    }
    if (out)
        *out = std::move(body);
    return static_cast<std::int32_t>(h.cmd_or_rc);
}

int peer_proc::request(std::uint32_t cmd, const void *body, std::size_t n, std::vector<std::uint8_t> *out,
                       int timeout_ms)
{
    if (!send_request(cmd, body, n)) {
        ADD_FAILURE() << "peer " << pid_ << ": cannot send request " << cmd;
        return -FI_ECONNRESET;
    }
    return await_reply(out, timeout_ms);
}

template <class T>
static int reply_into(int rc, const std::vector<std::uint8_t> &b, T *out)
{
    if (rc == 0 && out) {
        if (b.size() != sizeof(T)) {
            ADD_FAILURE() << "malformed reply";
            return -FI_EOTHER;
        }
        std::memcpy(out, b.data(), sizeof(T));
    }
    return rc;
}

int peer_proc::reg(std::size_t size, unsigned access, bool seg, std::uint64_t seed, reg_rep *out)
{
    reg_req r{size, access, static_cast<std::uint8_t>(seg), {}, seed};
    std::vector<std::uint8_t> b;
    return reply_into(request(CMD_REG_MR, &r, sizeof r, &b), b, out);
}

int peer_proc::dereg(std::uint32_t idx) { return request(CMD_DEREG_MR, &idx, sizeof idx); }

std::vector<std::uint8_t> peer_proc::read_mem(std::uint32_t idx, std::uint64_t off, std::uint64_t len)
{
    mem_req r{idx, 0, off, len};
    std::vector<std::uint8_t> b;
    int rc = request(CMD_MEM_READ, &r, sizeof r, &b);
    EXPECT_EQ(rc, 0) << "peer read_mem";
    EXPECT_EQ(b.size(), len);
    return b;
}

int peer_proc::write_mem(std::uint32_t idx, std::uint64_t off, const void *p, std::uint64_t len)
{
    std::vector<std::uint8_t> b(sizeof(mem_req) + len);
    mem_req r{idx, 0, off, len};
    std::memcpy(b.data(), &r, sizeof r);
    std::memcpy(b.data() + sizeof r, p, len);
    return request(CMD_MEM_WRITE, b.data(), b.size());
}

int peer_proc::create_qp(vq::qp_type t, std::uint64_t ops, vq::qp_cap cap, qp_rep *out, int srq, bool sig_all)
{
    qp_req r{t, static_cast<std::uint8_t>(sig_all), {}, srq, ops, cap};
    std::vector<std::uint8_t> b;
    return reply_into(request(CMD_CREATE_QP, &r, sizeof r, &b), b, out);
}

int peer_proc::connect(std::uint32_t idx, const vq::qp_addr &remote, std::uint32_t qkey, unsigned access)
{
    connect_req r{idx, qkey, access, 0, remote};
    return request(CMD_CONNECT, &r, sizeof r);
}

int peer_proc::modify(std::uint32_t idx, vq::qp_state st)
{
    modify_req r{idx, st};
    return request(CMD_MODIFY, &r, sizeof r);
}

int peer_proc::post_recv(std::uint32_t idx, std::uint64_t wr_id, const std::vector<piece> &p, bool srq)
{
    recv_req r{idx, static_cast<std::uint8_t>(srq), {}, wr_id, static_cast<std::uint32_t>(p.size()), 0};
    std::vector<std::uint8_t> b(sizeof r + p.size() * sizeof(piece));
    std::memcpy(b.data(), &r, sizeof r);
    if (!p.empty())
        std::memcpy(b.data() + sizeof r, p.data(), p.size() * sizeof(piece));
    return request(CMD_POST_RECV, b.data(), b.size());
}

std::vector<vq::wc> peer_proc::wait_wcs(std::uint32_t idx, std::uint32_t n, std::uint32_t ms)
{
    wait_req r{idx, n, ms, 0};
    std::vector<std::uint8_t> b;
    int rc = request(CMD_WAIT_WCS, &r, sizeof r, &b, static_cast<int>(ms) + 10000);
    std::vector<vq::wc> out(b.size() / sizeof(vq::wc));
    if (rc == 0 && !out.empty())
        std::memcpy(out.data(), b.data(), out.size() * sizeof(vq::wc));
    if (n && out.size() < n)
        ADD_FAILURE() << "peer QP " << idx << ": timed out after " << ms << " ms waiting for " << n
                      << " completions, got " << out.size();
    return out;
}

int peer_proc::post(std::uint32_t idx, const std::vector<wr_desc> &d)
{
    post_req r{idx, static_cast<std::uint32_t>(d.size())};
    std::vector<std::uint8_t> b(sizeof r + d.size() * sizeof(wr_desc));
    std::memcpy(b.data(), &r, sizeof r);
    if (!d.empty())
        std::memcpy(b.data() + sizeof r, static_cast<const void *>(d.data()), d.size() * sizeof(wr_desc));
    return request(CMD_POST, b.data(), b.size());
}

int peer_proc::create_ah(const vq::dev_addr &dest, std::uint32_t *out)
{
    std::vector<std::uint8_t> b;
    return reply_into(request(CMD_CREATE_AH, &dest, sizeof dest, &b), b, out);
}

int peer_proc::alloc_mw(mw_rep *out)
{
    std::vector<std::uint8_t> b;
    return reply_into(request(CMD_ALLOC_MW, nullptr, 0, &b), b, out);
}

int peer_proc::query_mw(std::uint32_t idx, mw_rep *out)
{
    std::vector<std::uint8_t> b;
    return reply_into(request(CMD_QUERY_MW, &idx, sizeof idx, &b), b, out);
}

int peer_proc::create_srq(std::uint32_t max_wr, std::uint32_t max_sge, std::uint32_t *out)
{
    srq_req r{max_wr, max_sge};
    std::vector<std::uint8_t> b;
    return reply_into(request(CMD_CREATE_SRQ, &r, sizeof r, &b), b, out);
}

int peer_proc::destroy_qp(std::uint32_t idx) { return request(CMD_DESTROY_QP, &idx, sizeof idx); }

int peer_proc::send_stream(std::uint32_t qp, std::uint32_t mr, std::uint32_t len, std::uint32_t count)
{
    stream_req r{qp, mr, len, count};
    return request(CMD_SEND_STREAM, &r, sizeof r);
}

/* ---------------- A connected pair ---------------- */

int conn::setup(vq::qp_type t, std::uint64_t ops, vq::qp_cap cap, std::uint64_t peer_ops, vq::qp_cap peer_cap,
                int peer_srq, unsigned peer_access)
{
    type = t;
    if (!L.ok || !P.ok()) {
        ADD_FAILURE() << "local side or peer not ready";
        return -FI_EOTHER;
    }
    int rc = L.create_qp(t, ops, cap, &lq);
    if (rc)
        return rc;
    if (peer_ops == 0)
        peer_ops = vq::ops_allowed(t) & P.attr().ops[static_cast<unsigned>(t)];
    rc = P.create_qp(t, peer_ops, peer_cap, &pq, peer_srq);
    if (rc) {
        ADD_FAILURE() << "peer create_qp: " << rc;
        return -FI_EOTHER;
    }
    rc = L.connect(lq, peer_addr(), qkey);
    if (rc) {
        ADD_FAILURE() << "local connect: " << rc;
        return -FI_EOTHER;
    }
    rc = P.connect(pq.index, local_addr(), qkey, peer_access);
    if (rc) {
        ADD_FAILURE() << "peer connect: " << rc;
        return -FI_EOTHER;
    }
    if (t == vq::qp_type::ud) {
        vq::ah_attr a;
        a.dest = P.addr();
        vq::ah *h = nullptr;
        rc = vq::create_ah(L.pd, &a, &h);
        if (rc) {
            ADD_FAILURE() << "create_ah: " << rc;
            return -FI_EOTHER;
        }
        L.o.ahs.push_back(h);
        ah = static_cast<std::uint32_t>(L.o.ahs.size() - 1);
    }
    return 0;
}

/* ---------------- Helpers ---------------- */

std::vector<piece> random_pieces(std::mt19937_64 &rng, std::uint32_t mr, std::size_t region, std::uint64_t total,
                                 unsigned n, bool allow_gaps)
{
    if (n == 0)
        n = 1;
    if (total < n)
        n = total ? static_cast<unsigned>(total) : 1;
    // Cut points.
    // Distinct cut points (total >= n leaves enough): exactly n pieces.
    std::vector<std::uint64_t> cuts;
    while (cuts.size() + 1 < n) {
        std::uint64_t c = std::uniform_int_distribution<std::uint64_t>(1, total - 1)(rng);
        if (std::find(cuts.begin(), cuts.end(), c) == cuts.end())
            cuts.push_back(c);
    }
    std::sort(cuts.begin(), cuts.end());
    std::vector<std::uint64_t> lens;
    std::uint64_t prev = 0;
    for (auto c : cuts) {
        lens.push_back(c - prev);
        prev = c;
    }
    lens.push_back(total - prev);
    std::uint64_t slack = region > total ? region - total : 0;
    std::uint64_t per_gap = allow_gaps ? slack / (lens.size() + 1) : 0;
    std::vector<piece> out;
    std::uint64_t off = 0;
    for (auto l : lens) {
        off += per_gap ? std::uniform_int_distribution<std::uint64_t>(0, per_gap)(rng) : 0;
        out.push_back({mr, static_cast<std::uint32_t>(l), off});
        off += l;
    }
    return out;
}

std::vector<std::uint8_t> gather(const std::uint8_t *base, const std::vector<piece> &p)
{
    std::vector<std::uint8_t> out;
    for (auto &x : p)
        out.insert(out.end(), base + x.off, base + x.off + x.len);
    return out;
}

std::string wc_str(const vq::wc &w)
{
    std::ostringstream s;
    s << "{wr_id=" << w.wr_id << " status=" << vq::wc_status_str(w.status) << " opcode="
      << static_cast<unsigned>(w.opcode) << " byte_len=" << w.byte_len << " imm=0x" << std::hex << w.imm_data
      << " flags=0x" << w.wc_flags << std::dec << " qp=" << w.qp_num << " src_qp=" << w.src_qp
      << " vendor_err=" << w.vendor_err << "}";
    return s.str();
}

std::vector<std::string> segment_files(const std::string &needle)
{
    std::vector<std::string> dirs{"/dev/shm"};
    std::ifstream mounts("/proc/mounts");
    std::string dev, dir, type, rest;
    while (mounts >> dev >> dir >> type && std::getline(mounts, rest))
        if (type == "hugetlbfs")
            dirs.push_back(dir);
    std::vector<std::string> out;
    for (auto &d : dirs) {
        DIR *dp = ::opendir(d.c_str());
        if (!dp)
            continue;
        while (dirent *e = ::readdir(dp)) {
            std::string n = e->d_name;
            if (n.rfind("shunt.", 0) == 0 && n.find(needle) != std::string::npos)
                out.push_back(d + "/" + n);
        }
        ::closedir(dp);
    }
    return out;
}

} // namespace shunt::conf
