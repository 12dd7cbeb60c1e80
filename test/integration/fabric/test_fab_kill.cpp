// vq provider over shm, endpoint level (FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM): the peer process is
// SIGKILLed at random points of a checked stream, many times over, and this
// process survives each: every outstanding send and RMA write to the dead
// peer completes (with an error or, if it got there first, success) within a
// bounded time, no completion is lost, doubled or foreign, no delivered
// message has a wrong byte, and a fresh peer process works at once.
// DGRAM may lose datagrams (fi_endpoint(3)): there every send still completes
// once within the bound, every datagram delivered is one that was sent, whole
// and exact (a late one of a killed peer included), and a fresh peer works.
//
// Each round: a fresh peer (it echoes what it receives), one echo to show it
// works, then a burst of messages of every size class (inject, eager,
// fragments, rendezvous) and RMA writes into its memory, with the kill after
// a random number of posts and completions. Rounds repeat for about 20 s per
// endpoint type (SHUNT_TEST_KILL_SECONDS) with a random seed that a failure prints
// (SHUNT_TEST_KILL_SEED repeats it).
//
// Besides the rounds: more peers than an RDM endpoint has RC QPs connect, echo
// and are killed one after another, and each new one must still connect.
//
// A peer killed while it copies from this process's memory (an RDMA read, a
// rendezvous pull) stays counted in the region entry: deregistering it then
// logs "region entry N still in use by a peer after invalidation" after its
// bound and retires the entry (doc/guides/drivers/shm.md, region table).
#include <algorithm>
#include <deque>
#include <future>
#include <memory>
#include <random>

#include "fab_client.h"

using namespace shunt;
using namespace shunt::fabric;
using namespace shunt::test::fab;

namespace {

constexpr std::size_t sizes[] = {8, 1000, 20000, 150000}; // inject, eager, fragments, rendezvous
// Private memory by rendezvous from 64 KiB (not the default 8 KiB), in this
// process and the peers it spawns, so that 20000 bytes still go in fragments.
[[maybe_unused]] const bool rndv_from_64k = ::setenv("SHUNT_VQ_RNDV_BYTES", "65536", 1) == 0;
constexpr std::size_t dgram_sizes[] = {8, 900, 0}; // inject, from the user's buffer, 0: max_msg_size
constexpr std::size_t max_len = 150000;
constexpr int burst = 12;        ///< messages per round
constexpr int writes = 2;        ///< RMA writes per round
constexpr int drain_ms = 10000;  ///< bound on the last completion after the kill

std::uint64_t env_or(const char *name, std::uint64_t dflt)
{
    const char *v = std::getenv(name);
    return v && *v ? std::strtoull(v, nullptr, 0) : dflt;
}

/** Message @p idx of @p len bytes: the pattern of seed idx, its first 8 bytes
 *  the index itself, so an echo says which message it is. */
void make_message(std::uint8_t *b, std::size_t len, std::uint64_t idx)
{
    fill_pattern(b, len, idx);
    std::memcpy(b, &idx, std::min<std::size_t>(len, 8));
}

struct op {
    context ctx{};
    enum kind_t { rx, tx, wr } kind = rx;
    std::size_t len = 0;
    std::vector<std::uint8_t> buf;
    int completions = 0;
    bool ok = false;
};

struct totals {
    int rounds = 0, delivered = 0, sent_ok = 0, failed = 0, writes_ok = 0;
    int stale = 0; ///< RDM, DGRAM: messages of a killed peer taken in a later round
};

/** Message indices of round @p r start here: a late datagram says its round. */
constexpr std::uint64_t round_base(int r) { return std::uint64_t(r + 1) << 20; }

class kill_round {
public:
    /** @p type FI_EP_MSG: an endpoint per round, connected to the peer's
     *  passive endpoint; FI_EP_RDM, FI_EP_DGRAM: one endpoint, a new AV entry
     *  per round. */
    kill_round(node &n, ep_type type, std::mt19937_64 &rng, totals &t)
        : n_(n), msg_(type == FI_EP_MSG), dgram_(type == FI_EP_DGRAM), rng_(rng), t_(t),
          next_idx_(round_base(t.rounds))
    {
    }
    ~kill_round()
    {
        if (msg_ && ep_) {
            EXPECT_EQ(fabric::close(&ep_->fid), 0);
        }
    }

    void run()
    {
        peer_proc p{msg_ ? "msg" : dgram_ ? "dgram" : "rdm"};
        fi_addr_t to = 0; // MSG: ignored
        if (msg_) {
            ASSERT_NO_FATAL_FAILURE(connect_msg(p));
        } else {
            ep_ = n_.ep;
            ASSERT_EQ(av_insert(n_.av, p.addr, 1, &to, 0, nullptr), 1);
            ASSERT_EQ(p.set_peer(n_.addr), 0);
        }
        ASSERT_NO_FATAL_FAILURE(first_echo(to)) << "a fresh peer must work at once";
        // Posts of sends and writes and their completions (echoes included)
        // are counted together; the kill comes at a random count.
        const int nwrites = dgram_ ? 0 : writes; // DGRAM has no RMA
        // A round has 3 * burst + 2 * nwrites events (posts, send and write
        // completions, echoes) and step() kills once the count passes
        // kill_at_, so kill_at_ < that total: the last draw kills after the
        // last echo. (One more value never killed, and the round then waited
        // out drain_ms.)
        kill_at_ = int(rng_() % std::uint64_t(3 * burst + 2 * nwrites));
        for (int i = 0; i < burst; i++)
            ASSERT_NO_FATAL_FAILURE(post_recv());
        for (int i = 0; i < burst; i++) {
            ASSERT_NO_FATAL_FAILURE(step(p));
            std::size_t len = dgram_ ? dgram_sizes[rng_() % std::size(dgram_sizes)] : sizes[rng_() % std::size(sizes)];
            ASSERT_NO_FATAL_FAILURE(post(to, op::tx, len ? len : n_.fi->ep_attr->max_msg_size));
        }
        for (int i = 0; i < nwrites; i++) {
            ASSERT_NO_FATAL_FAILURE(step(p));
            ASSERT_NO_FATAL_FAILURE(post(to, op::wr, 4096, p.mem + std::uint64_t(i) * 4096, p.key));
        }
        // Stream until the kill point (bounded: a peer that stops answering
        // is killed after drain_ms anyway).
        // DGRAM: an echo may be lost, so 300 ms without a completion end
        // the wait too.
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(drain_ms);
        auto idle_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        while (!killed_ && std::chrono::steady_clock::now() < until &&
               !(dgram_ && std::chrono::steady_clock::now() > idle_end)) {
            if (reap() > 0) {
                step(p);
                idle_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
            } else {
                sched_yield();
            }
        }
        if (!killed_)
            p.kill();
        killed_ = true;
        // Every send and write completes within the bound.
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(drain_ms);
        while (outstanding(false) && std::chrono::steady_clock::now() < end)
            if (reap() == 0)
                sched_yield();
        ASSERT_FALSE(outstanding(false)) << outstanding(false) << " sends/writes to the killed peer did not complete within "
                                         << drain_ms << " ms";
        // Receives are not tied to a peer: what was not delivered is cancelled.
        for (auto &o : ops_) {
            if (o->kind == op::rx && o->completions == 0) {
                ASSERT_EQ(cancel(ep_, &o->ctx), 0);
            }
        }
        end = std::chrono::steady_clock::now() + std::chrono::milliseconds(drain_ms);
        while (outstanding(true) && std::chrono::steady_clock::now() < end)
            if (reap() == 0)
                sched_yield();
        ASSERT_FALSE(outstanding(true)) << "cancelled receives did not complete";
        for (auto &o : ops_) {
            EXPECT_EQ(o->completions, 1) << "every operation completes exactly once";
            if (o->kind == op::tx)
                o->ok ? t_.sent_ok++ : t_.failed++;
            else if (o->kind == op::wr)
                o->ok ? t_.writes_ok++ : t_.failed++;
        }
        if (msg_) {
            drain_eq();
        } else {
            EXPECT_EQ(av_remove(n_.av, &to, 1, 0), 0);
        }
        t_.rounds++;
    }

private:
    void connect_msg(peer_proc &p)
    {
        ASSERT_EQ(endpoint(n_.domain, n_.fi, &ep_, nullptr), 0);
        ASSERT_EQ(ep_bind(ep_, &n_.cq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(ep_bind(ep_, &n_.eq->fid, 0), 0);
        ASSERT_EQ(connect(ep_, p.addr, nullptr, 0), 0);
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(drain_ms);
        for (;;) {
            std::uint32_t ev = 0;
            alignas(eq_cm_entry) std::uint8_t buf[256];
            ssize_t rc = eq_sread(n_.eq, &ev, buf, sizeof buf, 100, 0);
            if (rc == -FI_EAVAIL) {
                eq_err_entry err{};
                ASSERT_GT(eq_readerr(n_.eq, &err, 0), 0);
                FAIL() << "connecting to a fresh peer failed: " << err.err;
            }
            if (rc > 0 && ev == FI_CONNECTED && reinterpret_cast<eq_cm_entry *>(buf)->fid == &ep_->fid)
                return;
            ASSERT_LT(std::chrono::steady_clock::now(), end) << "no FI_CONNECTED within " << drain_ms << " ms";
        }
    }

    /** Read what the EQ holds about this round's endpoint (shutdown, errors)
     *  before it is closed. */
    void drain_eq()
    {
        for (;;) {
            std::uint32_t ev = 0;
            alignas(eq_cm_entry) std::uint8_t buf[256];
            ssize_t rc = eq_read(n_.eq, &ev, buf, sizeof buf, 0);
            if (rc == -FI_EAVAIL) {
                eq_err_entry err{};
                EXPECT_GT(eq_readerr(n_.eq, &err, 0), 0);
                continue;
            }
            if (rc <= 0)
                return;
        }
    }

    /** One echo of 8 bytes, before any kill. On RDM the receive takes a
     *  message from any source, so a message of the peer killed in the round
     *  before may still match it: one that arrived in full before the kill
     *  (delivered, but not our echo: longer than it, or other bytes), or one
     *  whose rest never came (failed with -FI_ECONNRESET, or truncated), or a
     *  rendezvous whose pull failed because its sender is gone
     *  (-FI_EHOSTUNREACH when the connection was seen to be gone, -FI_EACCES
     *  when the kernel refused the read of a dead process's memory). Those
     *  are the old peer's, counted and skipped; the echo must still come. */
    void first_echo(fi_addr_t to)
    {
        std::uint8_t out[8], in[16] = {};
        make_message(out, sizeof out, next_idx_ - 1); // below this round's messages, above the last round's
        context rc, sc;
        ASSERT_EQ(recv(ep_, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rc), 0);
        ASSERT_EQ(retry(n_.cq, [&] { return send(ep_, out, sizeof out, nullptr, to, &sc); }), 0);
        bool got_echo = false, sent = false;
        for (int stale = 0; !(got_echo && sent);) {
            cq_tagged_entry e{};
            ssize_t k = wait_cq(n_.cq, e);
            bool old_peer = false;
            if (k == -FI_EAVAIL) {
                cq_err_entry err{};
                ASSERT_EQ(cq_readerr(n_.cq, &err, 0), 1);
                old_peer = !msg_ && err.op_context == &rc &&
                           (err.err == FI_ECONNRESET || err.err == FI_ETRUNC || err.err == FI_EHOSTUNREACH ||
                            err.err == FI_EACCES);
                if (old_peer && dgram_) // a datagram is whole or not there: only truncation by our 16 bytes
                    old_peer = err.err == FI_ETRUNC;
                ASSERT_TRUE(old_peer) << "the echo of a fresh peer: error completion " << shunt::strerror(err.err)
                                      << (err.op_context == &rc ? " (receive)" : " (send)");
            } else {
                ASSERT_EQ(k, 1) << "the echo of a fresh peer";
                ASSERT_TRUE(e.op_context == &rc || e.op_context == &sc);
                if (e.op_context == &sc) {
                    sent = true;
                    continue;
                }
                old_peer = !msg_ && (e.len != sizeof out || std::memcmp(in, out, sizeof out) != 0);
                if (old_peer && dgram_ && e.len <= sizeof in) { // a late datagram of a killed peer: whole and exact
                    ASSERT_NO_FATAL_FAILURE(check_late(in, e.len));
                }
                if (!old_peer) {
                    ASSERT_EQ(e.len, sizeof out);
                    ASSERT_EQ(std::memcmp(in, out, sizeof out), 0);
                    got_echo = true;
                    continue;
                }
            }
            ASSERT_LT(++stale, 64) << "the receive keeps matching messages that are not the fresh peer's echo";
            t_.stale++;
            std::memset(in, 0, sizeof in);
            ASSERT_EQ(recv(ep_, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rc), 0);
        }
    }

    /** Count one event; kill the peer when the count reaches kill_at_. */
    void step(peer_proc &p)
    {
        events_ += 1 + reaped_;
        reaped_ = 0;
        if (!killed_ && events_ > kill_at_) {
            p.kill();
            killed_ = true;
        }
    }

    void post_recv()
    {
        auto o = std::make_unique<op>();
        o->kind = op::rx;
        o->buf.assign(max_len + 64, 0xee);
        ASSERT_EQ(recv(ep_, o->buf.data(), o->buf.size(), nullptr, FI_ADDR_UNSPEC, &o->ctx), 0);
        ops_.push_back(std::move(o));
    }

    void post(fi_addr_t to, op::kind_t k, std::size_t len, std::uint64_t raddr = 0, std::uint64_t key = 0)
    {
        auto o = std::make_unique<op>();
        o->kind = k;
        o->len = len;
        o->buf.resize(len);
        make_message(o->buf.data(), len, next_idx_++);
        op *x = o.get();
        ops_.push_back(std::move(o));
        // A send to a dead peer may also fail as a call; -FI_EAGAIN drives progress.
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(drain_ms);
        for (;;) {
            ssize_t rc = k == op::tx ? send(ep_, x->buf.data(), len, nullptr, to, &x->ctx)
                                     : write(ep_, x->buf.data(), len, nullptr, to, raddr, key, &x->ctx);
            if (rc == 0)
                return;
            if (rc != -FI_EAGAIN) {
                ASSERT_TRUE(killed_) << "a post to a live peer failed: " << rc;
                x->completions = 1; // failed as a call: no completion follows
                return;
            }
            reaped_ += reap();
            ASSERT_LT(std::chrono::steady_clock::now(), end) << "a post said -FI_EAGAIN for " << drain_ms << " ms";
        }
    }

    /** Read the CQ once. @return entries handled. */
    int reap()
    {
        cq_tagged_entry e{};
        ssize_t k = cq_read(n_.cq, &e, 1);
        if (k == 1) {
            complete(static_cast<context *>(e.op_context), true, e.len);
            return 1;
        }
        if (k == -FI_EAVAIL) {
            cq_err_entry err{};
            EXPECT_EQ(cq_readerr(n_.cq, &err, 0), 1);
            EXPECT_NE(err.err, 0);
            EXPECT_TRUE(killed_ || err.err == FI_ECANCELED) << "an error before the kill: " << err.err;
            complete(static_cast<context *>(err.op_context), false, 0);
            return 1;
        }
        EXPECT_EQ(k, -FI_EAGAIN) << "cq_read";
        return 0;
    }

    void complete(context *c, bool ok, std::size_t len)
    {
        for (auto &o : ops_) {
            if (&o->ctx != c)
                continue;
            o->completions++;
            o->ok = ok;
            if (o->kind == op::rx && ok)
                check_delivery(*o, len);
            return;
        }
        ADD_FAILURE() << "a completion for no operation of this round";
    }

    /** A datagram of an earlier round (its peer was killed): it is what
     *  that round sent, whole and exact. */
    void check_late(const std::uint8_t *b, std::size_t len)
    {
        ASSERT_GE(len, 8u);
        std::uint64_t idx;
        std::memcpy(&idx, b, 8);
        ASSERT_LT(idx, round_base(t_.rounds)) << "a datagram of length " << len << " index " << idx
                                              << " that no earlier round sent";
        std::vector<std::uint8_t> want(len);
        make_message(want.data(), len, idx);
        ASSERT_EQ(std::memcmp(b, want.data(), len), 0) << "corrupted late datagram of length " << len;
    }

    /** A delivered echo is one of ours, whole and exact. */
    void check_delivery(const op &o, std::size_t len)
    {
        ASSERT_GE(len, 8u);
        std::uint64_t idx;
        std::memcpy(&idx, o.buf.data(), 8);
        if (dgram_ && idx < round_base(t_.rounds)) { // DGRAM: a killed peer's echo, late
            ASSERT_NO_FATAL_FAILURE(check_late(o.buf.data(), len));
            ASSERT_EQ(o.buf[len], 0xee) << "written past the message";
            t_.stale++;
            return;
        }
        const op *sent = nullptr;
        for (auto &s : ops_)
            if (s->kind == op::tx && s->len == len && std::memcmp(s->buf.data(), &idx, 8) == 0)
                sent = s.get();
        ASSERT_NE(sent, nullptr) << "an echo of length " << len << " index " << idx << " that was never sent";
        ASSERT_EQ(std::memcmp(o.buf.data(), sent->buf.data(), len), 0) << "corrupted echo of length " << len;
        ASSERT_EQ(o.buf[len], 0xee) << "written past the message";
        t_.delivered++;
    }

    std::size_t outstanding(bool receives) const
    {
        std::size_t k = 0;
        for (auto &o : ops_)
            k += o->completions == 0 && (o->kind == op::rx) == receives;
        return k;
    }

    node &n_;
    bool msg_, dgram_;
    fid_ep *ep_ = nullptr;
    std::mt19937_64 &rng_;
    totals &t_;
    std::vector<std::unique_ptr<op>> ops_;
    std::uint64_t next_idx_;
    int kill_at_ = 0, events_ = 0, reaped_ = 0;
    bool killed_ = false;
};

/** Rounds for @p secs (or SHUNT_TEST_KILL_SECONDS), divided by @p divisor, on one node. */
void kill_loop(ep_type type, std::uint64_t secs_default, std::uint64_t divisor = 1)
{
    const std::uint64_t seed = env_or("SHUNT_TEST_KILL_SEED", std::random_device{}());
    const auto secs = std::chrono::seconds(std::max<std::uint64_t>(1, env_or("SHUNT_TEST_KILL_SECONDS", secs_default) / divisor));
    SCOPED_TRACE("SHUNT_TEST_KILL_SEED=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    node n;
    ASSERT_EQ(n.open(type, false), 0);
    totals t;
    auto end = std::chrono::steady_clock::now() + secs;
    while (std::chrono::steady_clock::now() < end && !::testing::Test::HasFailure()) {
        kill_round r(n, type, rng, t);
        r.run();
    }
    std::printf("%d rounds: %d echoes delivered and checked, %d sends and %d writes succeeded, %d failed, "
                "%d messages of killed peers skipped\n",
                t.rounds, t.delivered, t.sent_ok, t.writes_ok, t.failed, t.stale);
    EXPECT_GE(t.rounds, 2) << "too few rounds to mean anything";
    n.close();
}

TEST(KillLoop, RdmPeerSigkilledAtRandomPointsManyTimes)
{
    kill_loop(FI_EP_RDM, 20);
}

TEST(KillLoop, MsgPeerSigkilledAtRandomPointsManyTimes)
{
    kill_loop(FI_EP_MSG, 20);
}

// Half the time of the others (no RMA, no rendezvous, three sizes).
TEST(KillLoop, DgramPeerSigkilledAtRandomPointsManyTimes)
{
    kill_loop(FI_EP_DGRAM, 20, 2);
}

} // namespace

// An RDM endpoint has at most 63 RC QPs. More peers than that, one after
// another, each connects, echoes a checked message and is killed: the QP of
// each dead peer's connection is freed once what it held has come back, so
// every new peer connects and echoes, and once the deaths are seen the
// endpoint holds no QP of a dead peer.
TEST(KillLoop, RdmEndpointOutlivesMoreDeadPeersThanItHasQps)
{
    constexpr int peers = 70;
    const std::vector<std::string> before = shunt::env::stats::list();
    node n;
    ASSERT_EQ(n.open(FI_EP_RDM, false), 0);
    const std::string cmb = cm_block(before);
    ASSERT_NE(cmb, "") << "no vq.ep.<n>.cm block for the endpoint";
    // A peer's start (a process and its environment) takes longer than its
    // echo: the next few start while earlier ones are used. Each only waits
    // to be told this endpoint's address, so none connects before its turn.
    constexpr int ahead = 4;
    auto start = [] { return std::async(std::launch::async, [] { return std::make_unique<peer_proc>("rdm"); }); };
    std::deque<std::future<std::unique_ptr<peer_proc>>> next;
    for (int i = 0; i < std::min(ahead, peers); i++)
        next.push_back(start());
    for (int i = 0; i < peers; i++) {
        SCOPED_TRACE("peer " + std::to_string(i));
        std::unique_ptr<peer_proc> pp = next.front().get();
        next.pop_front();
        if (i + ahead < peers)
            next.push_back(start());
        peer_proc &p = *pp;
        fi_addr_t to = FI_ADDR_UNSPEC;
        ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
        ASSERT_EQ(p.set_peer(n.addr), 0);
        std::uint8_t out[64], in[64] = {};
        fill_pattern(out, sizeof out, std::uint64_t(i));
        context rc, sc;
        ASSERT_EQ(recv(n.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rc), 0);
        ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, out, sizeof out, nullptr, to, &sc); }), 0);
        for (int k = 0; k < 2; k++) {
            cq_tagged_entry e{};
            ASSERT_EQ(wait_cq(n.cq, e), 1) << "the echo of a new peer after " << i << " dead ones ("
                                          << stat(cmb, "qps") << " RC QPs held, " << stat(cmb, "refused")
                                          << " connection requests refused)";
            ASSERT_TRUE(e.op_context == &rc || e.op_context == &sc);
        }
        ASSERT_EQ(std::memcmp(in, out, sizeof out), 0) << "echoed bytes differ";
        p.kill();
        ASSERT_EQ(av_remove(n.av, &to, 1, 0), 0);
    }
    // The last deaths are seen by progress (the driver looks at its peers
    // now and then); nothing is left of them after that.
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (stat(cmb, "qps") > 0 && std::chrono::steady_clock::now() < end) {
        cq_tagged_entry e{};
        EXPECT_EQ(cq_read(n.cq, &e, 1), -FI_EAGAIN) << "a completion nothing asked for";
        sched_yield();
    }
    EXPECT_EQ(stat(cmb, "qps"), 0u) << "RC QPs of dead peers still held after 10 s";
    n.close();
}
