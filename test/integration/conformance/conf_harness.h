// vq conformance suite: the test process's side (local context, peer control).
#pragma once

#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "conf_common.h"

namespace shunt::conf {

/* ---------------- Seeds ---------------- */

/** The run's seed: SHUNT_TEST_SEED when set, else random (printed on failure). */
std::uint64_t run_seed();
/** Seed of the current test: the run's seed mixed with the test's full name, so
 *  SHUNT_TEST_SEED replays any single test exactly. */
std::uint64_t test_seed();

/** Base fixture: an rng seeded per test; prints the replay command on failure. */
class conf_test : public ::testing::Test {
protected:
    std::mt19937_64 rng{test_seed()};
    void TearDown() override;
    std::uint64_t rnd(std::uint64_t lo, std::uint64_t hi) // inclusive
    {
        return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
    }
};

/* ---------------- Local side ---------------- */

struct local_qp {
    vq::qp *qp = nullptr;
    vq::cq *cq = nullptr;
    std::deque<vq::wc> wcs;
    /** Lent receives: the test polls its CQ itself (a completion's data is
     *  valid only until the next poll), so pump() leaves it alone. */
    bool lent = false;
    /** The test reads this CQ itself (start_poll/next_poll), so pump() leaves
     *  it alone: else the polling done while waiting for a peer's reply would
     *  move the completions the test is to read into wcs. */
    bool self_polled = false;
};

/** This process's shm context, PD, regions and QPs (one CQ per QP). */
struct local_side {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::device_attr attr{};
    objects o;
    std::vector<local_qp> qps;
    std::vector<vq::srq *> srqs;
    /** QPs created while set get this thread domain (lock-free posting); close() deallocates it. */
    vq::td *td = nullptr;
    /** When non-zero, connect() gives RC QPs this local ACK timeout (verbs' exponent:
     *  4.096 us << timeout) at RTS; 0 leaves the device's default. */
    std::uint8_t rc_timeout = 0;
    bool ok = false;

    local_side();
    ~local_side();
    /** Tear everything down now (checked: every destroy returns 0). */
    void close();

    /** Register @p size bytes (heap or alloc_buf memory), filled from @p seed (0: zeros).
     *  @return index, or -1 with a test failure; -2 when seg memory is unsupported. */
    int reg(std::size_t size, unsigned access, bool seg = false, std::uint64_t seed = 0);
    /** Create a QP with its own CQ. @return create_qp's result; *idx on success. */
    int create_qp(vq::qp_type t, std::uint64_t ops, vq::qp_cap cap, unsigned *idx, bool sig_all = false,
                  vq::srq *srq = nullptr, bool lend = false);
    /** INIT → RTR → RTS (RC/UC: to @p remote; UD: @p qkey). */
    int connect(unsigned idx, const vq::qp_addr &remote, std::uint32_t qkey = 0, unsigned access = ~0u);
    vq::qp *qp(unsigned idx) { return qps[idx].qp; }
    /** Poll every CQ once. @return completions gathered. */
    int pump();
    /** Wait until @p n completions of QP @p idx arrived or @p ms passed (fails then). */
    std::vector<vq::wc> wait_wcs(unsigned idx, std::size_t n, int ms = 10000);
    /** Poll for @p ms and return whatever arrived for QP @p idx. */
    std::vector<vq::wc> drain(unsigned idx, int ms = 100);
    std::uint64_t addr(int mr, std::size_t off = 0) const
    {
        return reinterpret_cast<std::uint64_t>(o.mrs[static_cast<std::size_t>(mr)].base + off);
    }
    std::uint8_t *mem(int mr) { return o.mrs[static_cast<std::size_t>(mr)].base; }
    const vq::mr *mr(int mr) const { return o.mrs[static_cast<std::size_t>(mr)].mr; }
    int post(unsigned idx, const std::vector<wr_desc> &d) { return conf_post_batch(qp(idx), d.data(), d.size(), o); }
};

/* ---------------- The peer process ---------------- */

/** A spawned conf_peer. Every request is bounded (fails the test on timeout)
 *  and keeps the local side progressing while it waits. */
class peer_proc {
public:
    /** @p uid >= 0: the peer switches to that user (and group) first (needs root). */
    explicit peer_proc(local_side *local = nullptr, int uid = -1);
    ~peer_proc(); ///< quit (bounded), else SIGKILL; always reaped
    bool ok() const { return ok_; }
    int pid() const { return pid_; }
    const vq::dev_addr &addr() const { return hello_.addr; }
    const vq::device_attr &attr() const { return hello_.attr; }

    /** Send a request and wait for its reply. @return the reply's result code;
     *  -FI_ETIMEDOUT (with a test failure) when no reply came. */
    int request(std::uint32_t cmd, const void *body, std::size_t n, std::vector<std::uint8_t> *out = nullptr,
                int timeout_ms = 20000);
    /** Split form, for overlapping requests to several peers. */
    bool send_request(std::uint32_t cmd, const void *body, std::size_t n);
    int await_reply(std::vector<std::uint8_t> *out, int timeout_ms = 20000);

    int reg(std::size_t size, unsigned access, bool seg, std::uint64_t seed, reg_rep *out);
    int dereg(std::uint32_t idx);
    std::vector<std::uint8_t> read_mem(std::uint32_t idx, std::uint64_t off, std::uint64_t len);
    int write_mem(std::uint32_t idx, std::uint64_t off, const void *p, std::uint64_t len);
    int create_qp(vq::qp_type t, std::uint64_t ops, vq::qp_cap cap, qp_rep *out, int srq = -1,
                  bool sig_all = false);
    int connect(std::uint32_t idx, const vq::qp_addr &remote, std::uint32_t qkey = 0, unsigned access = ~0u);
    int modify(std::uint32_t idx, vq::qp_state st);
    int post_recv(std::uint32_t idx, std::uint64_t wr_id, const std::vector<piece> &p, bool srq = false);
    /** Wait (in the peer) for @p n completions of its QP @p idx; n = 0: all within @p ms. */
    std::vector<vq::wc> wait_wcs(std::uint32_t idx, std::uint32_t n, std::uint32_t ms = 10000);
    int post(std::uint32_t idx, const std::vector<wr_desc> &d);
    int create_ah(const vq::dev_addr &dest, std::uint32_t *out);
    int alloc_mw(mw_rep *out);
    int query_mw(std::uint32_t idx, mw_rep *out);
    int create_srq(std::uint32_t max_wr, std::uint32_t max_sge, std::uint32_t *out);
    int destroy_qp(std::uint32_t idx);
    int send_stream(std::uint32_t qp, std::uint32_t mr, std::uint32_t len, std::uint32_t count);
    /** SIGKILL and reap (bounded). */
    void kill_now();
    /** Quit every idle peer process kept for reuse (see ~peer_proc): the next
     *  peer_proc is a new process. */
    static void quit_idle();
    /** This peer quits when its peer_proc goes (instead of being kept for reuse). */
    void quit_on_close() { reuse_ = false; }

private:
    local_side *local_;
    int fd_ = -1;
    int pid_ = -1;
    std::thread thread_; ///< SHUNT_CONF_PEER_THREAD: the peer
    bool ok_ = false;
    bool reaped_ = false;
    hello_rep hello_{};
    bool reuse_ = true;
    bool on_link_ = false; ///< on its own end of a link (SHUNT_CONF_PEER_EAL_ARGS)
    std::string key_; ///< uid and environment: a reused peer must have been spawned with the same
    void reap(int ms);
    bool adopt_idle();
};

/* ---------------- A connected pair ---------------- */

/** A local QP and a peer QP of the same type, connected (RC/UC) or with
 *  matching Q_Keys and a local address handle to the peer (UD). */
struct conn {
    local_side L;
    peer_proc P{&L};
    unsigned lq = 0;
    qp_rep pq{};
    std::uint32_t ah = ~0u;      ///< UD: index in L.o.ahs of the peer's address
    std::uint32_t qkey = 0x5eed; ///< UD Q_Key of both sides
    vq::qp_type type = vq::qp_type::rc;

    /** Create and connect. @p peer_ops 0: every op the device claims for the type.
     *  @return the local create_qp result (-FI_EOPNOTSUPP / -FI_EINVAL: not possible),
     *  or another negative code with a test failure. */
    int setup(vq::qp_type t, std::uint64_t ops, vq::qp_cap cap = {}, std::uint64_t peer_ops = 0,
              vq::qp_cap peer_cap = {}, int peer_srq = -1, unsigned peer_access = ~0u);
    vq::qp *qp() { return L.qp(lq); }
    vq::qp_addr peer_addr() const { return {P.addr(), pq.qpn}; }
    vq::qp_addr local_addr() { return vq::get_qp_addr(qp()); }
};

/* ---------------- Helpers ---------------- */

/** Bytes of GRH area in front of a UD message received by @p receiver's
 *  device (device_attr::ud_grh: 40, else 0). */
inline std::uint32_t ud_grh_bytes(const vq::device_attr &receiver) { return receiver.ud_grh ? 40 : 0; }

/** Split @p total bytes into @p n pieces (each >= 1 when total >= n) placed in
 *  region @p mr of size @p region at random, non-overlapping offsets in order. */
std::vector<piece> random_pieces(std::mt19937_64 &rng, std::uint32_t mr, std::size_t region, std::uint64_t total,
                                 unsigned n, bool allow_gaps = true);
/** Concatenate the bytes of @p p from @p base (one region). */
std::vector<std::uint8_t> gather(const std::uint8_t *base, const std::vector<piece> &p);
/** Bytes of GRH area in front of a UD receive (verbs devices put 40 there, shm none). */
inline std::uint32_t grh_of(const vq::wc &w) { return (w.wc_flags & vq::WC_GRH) ? 40 : 0; }
/** Name prefix of the shared segments a process @p pid of the device under test creates. */
inline std::string segment_needle(int pid)
{
    std::string d = conf_device();
    return (d.rfind("mlx5", 0) == 0 ? "shunt-mlx5m-" : "shunt-shm-") + std::to_string(pid) + "-";
}
/** Whether a QP that only receives notices that its peer process died (shm
 *  watches peer processes; an IB/RoCE transport, modelled or real, does not). */
inline bool receivers_learn_of_dead_peers() { return conf_device_is_shm(); }
/** Print a wc for failure messages. */
std::string wc_str(const vq::wc &w);
/** "shunt.*" files in /dev/shm and the hugetlbfs mounts whose name contains @p needle. */
std::vector<std::string> segment_files(const std::string &needle);

/** Skip (visibly) when the peers are threads of this process (SHUNT_CONF_PEER_THREAD). */
#define CONF_REQUIRE_PEER_PROCESS()                                                                \
    do {                                                                                           \
        if (conf_peer_thread())                                                                    \
            GTEST_SKIP() << "the peer is a thread of this process (SHUNT_CONF_PEER_THREAD): it "    \
                            "cannot be killed or run as another user";                             \
    } while (0)
/** Skip (visibly) unless @p n peers can be connected at once. */
#define CONF_REQUIRE_PEERS(n)                                                                      \
    do {                                                                                           \
        if (conf_max_peers() < (n))                                                                \
            GTEST_SKIP() << "needs " << (n) << " peers at once; the link under test takes "         \
                         << conf_max_peers() << " (SHUNT_CONF_MAX_PEERS)";                          \
    } while (0)
/** Skip (visibly) unless the device is shm (shared segments, host-local peers). */
#define CONF_REQUIRE_SHM(why)                                                                      \
    do {                                                                                           \
        if (!conf_device_is_shm())                                                                 \
            GTEST_SKIP() << (why) << " (device " << conf_device() << " is not shm)";                \
    } while (0)

/** Skip (visibly) unless the device claims every op of @p ops for @p type. */
#define CONF_REQUIRE_OPS(attr_, type_, ops_)                                                       \
    do {                                                                                           \
        std::uint64_t need_ = (ops_), have_ = (attr_).ops[static_cast<unsigned>(type_)];           \
        if ((have_ & need_) != need_)                                                              \
            GTEST_SKIP() << "device does not claim ops 0x" << std::hex << (need_ & ~have_)          \
                         << " on QP type " << std::dec << static_cast<unsigned>(type_)             \
                         << " (device_attr::ops = 0x" << std::hex << have_ << ")";                 \
    } while (0)

inline constexpr unsigned ACC_ALL_REMOTE = vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE |
                                           vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC;

} // namespace shunt::conf
