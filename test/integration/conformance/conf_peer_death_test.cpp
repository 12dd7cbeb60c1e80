// A peer killed mid-stream (SIGKILL): the QPs connected to it go to ERR,
// every outstanding work request completes with an error within a bounded
// time, nothing hangs, and none of the peer's segments is left behind.
#include <fstream>

#include "conf_harness.h"
#include "env/segment.h"
#include "test_util.h"

namespace shunt::conf {
namespace {

using vq::qp_type;
using vq::wc_status;

class PeerDeath : public conf_test {
protected:
    // Every peer of these tests is a new process: they watch processes start,
    // die and clean up after each other.
    void SetUp() override { peer_proc::quit_idle(); }
};

bool is_error_flush(wc_status s)
{
    return s == wc_status::wr_flush_err || s == wc_status::retry_exc_err;
}

std::string peer_needle(int pid) { return segment_needle(pid); }

/** ACK timeout of the RC QPs whose peer is killed: 14 (67 ms, a RoCE NIC's
 *  usual value) instead of the drivers' loaded-host default of 16 (268 ms).
 *  A wire transport (ethdev, the mlx5 model) notices a dead peer only when its
 *  retries run out, 7 timeouts later: about 0.5 s instead of 2 s per test.
 *  shm watches the peer process and ignores it. */
constexpr std::uint8_t dead_peer_timeout = 14;

/** Process state letter from /proc/<pid>/stat ('Z' zombie), or 0. */
char proc_state(int pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    std::getline(f, s);
    auto p = s.rfind(')');
    return p != std::string::npos && p + 2 < s.size() ? s[p + 2] : 0;
}

/** The common scenario: sends the peer never takes (no receive posted; far
 *  larger than its ring) are outstanding, plus local receives; then SIGKILL.
 *  @p reap_first: reap the peer at once (else leave it a zombie until the end). */
void outstanding_then_kill(bool reap_first)
{
    int peer_pid = -1;
    {
        conn c;
        c.L.rc_timeout = dead_peer_timeout;
        ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_SEND | vq::OPS_RDMA_WRITE, {16, 16, 1, 1, 0}), 0);
        peer_pid = c.P.pid();
        if (conf_device_is_shm()) {
            ASSERT_FALSE(segment_files(peer_needle(peer_pid)).empty())
                << "cannot see the peer's segment: the leak check below would prove nothing";
        }
        const std::uint32_t len = 1 << 20;
        int big = c.L.reg(len, vq::ACCESS_LOCAL_WRITE, false, 3);
        ASSERT_GE(big, 0);
        for (std::uint64_t i = 0; i < 4; i++)
            ASSERT_EQ(vq::post_recv(c.qp(), 100 + i, c.L.addr(big), 4096, c.L.mr(big)->lkey), 0);
        const std::uint32_t nsend = 6;
        for (std::uint32_t i = 0; i < nsend; i++) {
            vq::wr_start(c.qp());
            c.qp()->wr_id = i;
            c.qp()->wr_flags = i % 2 ? vq::WR_SIGNALED : 0; // unsignaled ones must complete too (errors)
            vq::wr_send(c.qp());
            vq::wr_set_sge(c.qp(), c.L.mr(big)->lkey, c.L.addr(big), len);
            ASSERT_EQ(vq::wr_complete(c.qp()), 0);
        }
        EXPECT_TRUE(c.L.drain(c.lq, 50).empty()) << "sends completed although the peer took nothing";

        auto t0 = std::chrono::steady_clock::now();
        ::kill(c.P.pid(), SIGKILL);
        if (reap_first) {
            c.P.kill_now();
        } else {
            ASSERT_TRUE(shunt::test::wait_until([&] { return proc_state(peer_pid) == 'Z'; }))
                << "peer did not become a zombie";
        }
        auto w = c.L.wait_wcs(c.lq, nsend + 4, 10000);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        ASSERT_EQ(w.size(), nsend + 4) << "outstanding requests did not complete within 10 s of the kill";
        std::printf("all %u outstanding requests completed %.1f ms after SIGKILL\n", nsend + 4, ms);
        std::vector<std::uint64_t> sends, recvs;
        for (auto &x : w) {
            EXPECT_TRUE(is_error_flush(x.status)) << wc_str(x);
            EXPECT_EQ(x.qp_num, c.qp()->qp_num);
            (x.wr_id >= 100 ? recvs : sends).push_back(x.wr_id);
        }
        EXPECT_EQ(sends, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5})) << "send completions out of order";
        EXPECT_EQ(recvs, (std::vector<std::uint64_t>{100, 101, 102, 103}));
        EXPECT_EQ(vq::get_qp_state(c.qp()), vq::qp_state::err);
        // Later requests flush at once.
        vq::wr_start(c.qp());
        c.qp()->wr_id = 50;
        c.qp()->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(c.qp());
        vq::wr_set_sge(c.qp(), c.L.mr(big)->lkey, c.L.addr(big), 16);
        EXPECT_EQ(vq::wr_complete(c.qp()), 0);
        auto f = c.L.wait_wcs(c.lq, 1, 10000);
        ASSERT_EQ(f.size(), 1u);
        EXPECT_EQ(f[0].status, wc_status::wr_flush_err) << wc_str(f[0]);
        if (!reap_first)
            c.P.kill_now(); // reap
        c.L.close();
    }
    if (!conf_device_is_shm())
        return; // segments are shm's
    auto left = segment_files(peer_needle(peer_pid));
    EXPECT_TRUE(left.empty()) << "segment of the killed peer left behind: " << left.front();
}

TEST_F(PeerDeath, PeerKilledWithOutstandingSendsAndReceivesFlushesThemAndLeaksNoSegment)
{
    CONF_REQUIRE_PEER_PROCESS();
    outstanding_then_kill(true);
}

TEST_F(PeerDeath, PeerKilledButNotYetReapedIsDetectedToo)
{
    CONF_REQUIRE_PEER_PROCESS();
    outstanding_then_kill(false);
}

TEST_F(PeerDeath, PeerKilledWhileStreamingSendsToUsFlushesOurReceives)
{
    CONF_REQUIRE_PEER_PROCESS();
    if (!receivers_learn_of_dead_peers())
        GTEST_SKIP() << conf_device() << ": an RC QP that only receives learns nothing of a dead sender "
                     << "(IB transport: no keepalive; its receives stay posted, as on a ConnectX)";
    int peer_pid = -1;
    {
        conn c;
        ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_SEND, {0, 256, 1, 1, 0}), 0);
        peer_pid = c.P.pid();
        // 200 receives: far more than the messages a ring can hold in flight.
        constexpr std::uint64_t nrecv = 200;
        int rx = c.L.reg(nrecv * 2048, vq::ACCESS_LOCAL_WRITE);
        reg_rep src{};
        ASSERT_EQ(c.P.reg(2048, vq::ACCESS_LOCAL_WRITE, false, 77, &src), 0);
        for (std::uint64_t i = 0; i < nrecv; i++)
            ASSERT_EQ(vq::post_recv(c.qp(), i, c.L.addr(rx, i * 2048), 2048, c.L.mr(rx)->lkey), 0);
        ASSERT_EQ(c.P.send_stream(c.pq.index, src.index, 1500, 0), 0);
        // Take ten messages, keep 190 receives outstanding, then kill.
        auto got = c.L.wait_wcs(c.lq, 10);
        ASSERT_EQ(got.size(), 10u);
        for (auto &x : got) {
            EXPECT_EQ(x.status, wc_status::success) << wc_str(x);
            EXPECT_EQ(x.byte_len, 1500u);
        }
        std::vector<std::uint8_t> want(1500);
        fill_pattern(want.data(), 1500, 77);
        EXPECT_EQ(std::memcmp(c.L.mem(rx), want.data(), 1500), 0);
        c.P.kill_now();
        // Whatever was already in flight may still arrive; then the rest flushes.
        std::size_t ok = 0, flushed = 0;
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (ok + flushed < nrecv - 10 && std::chrono::steady_clock::now() < end) {
            c.L.pump();
            for (auto &x : c.L.qps[c.lq].wcs) {
                if (x.status == wc_status::success) {
                    EXPECT_EQ(flushed, 0u) << "a success after a flush";
                    ok++;
                } else {
                    EXPECT_TRUE(is_error_flush(x.status)) << wc_str(x);
                    flushed++;
                }
            }
            c.L.qps[c.lq].wcs.clear();
            usleep(1000);
        }
        EXPECT_EQ(ok + flushed, nrecv - 10) << "receives still outstanding 10 s after the sender was killed";
        EXPECT_GE(flushed, 1u);
        EXPECT_EQ(vq::get_qp_state(c.qp()), vq::qp_state::err);
        c.L.close();
    }
    auto left = segment_files(peer_needle(peer_pid));
    EXPECT_TRUE(left.empty()) << "segment of the killed peer left behind: " << left.front();
}

/** RDMA after the kill: requests issued before the death is noticed may still
 *  succeed (the memory of a segment outlives its owner while mapped), but
 *  within a bounded time one fails, the QP goes to ERR, and nothing succeeds
 *  after that. @p seg: the target region is in the peer's shared segment. */
void rdma_to_killed_peer(bool seg)
{
    conn c;
    c.L.rc_timeout = dead_peer_timeout;
    ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ), 0);
    reg_rep t{};
    ASSERT_EQ(c.P.reg(4096, ACC_ALL_REMOTE, seg, 5, &t), 0);
    int loc = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE);
    c.P.kill_now();
    auto t0 = std::chrono::steady_clock::now();
    bool failed = false;
    std::uint64_t id = 0;
    while (!failed && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
        vq::wr_start(c.qp());
        c.qp()->wr_id = ++id;
        c.qp()->wr_flags = vq::WR_SIGNALED;
        if (id % 2)
            vq::wr_rdma_read(c.qp(), t.rkey, t.addr);
        else
            vq::wr_rdma_write(c.qp(), t.rkey, t.addr);
        vq::wr_set_sge(c.qp(), c.L.mr(loc)->lkey, c.L.addr(loc), 64);
        ASSERT_EQ(vq::wr_complete(c.qp()), 0);
        auto w = c.L.wait_wcs(c.lq, 1, 10000);
        ASSERT_EQ(w.size(), 1u);
        if (w[0].status != wc_status::success) {
            EXPECT_TRUE(is_error_flush(w[0].status) || w[0].status == wc_status::rem_access_err) << wc_str(w[0]);
            failed = true;
        } else {
            usleep(1000);
        }
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(failed) << "RDMA to a killed peer still succeeds " << ms << " ms after the kill";
    std::printf("RDMA to a killed peer: first failure after %.1f ms (%llu requests)\n", ms,
                static_cast<unsigned long long>(id));
    EXPECT_EQ(vq::get_qp_state(c.qp()), vq::qp_state::err);
    vq::wr_start(c.qp());
    c.qp()->wr_id = 999;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_read(c.qp(), t.rkey, t.addr);
    vq::wr_set_sge(c.qp(), c.L.mr(loc)->lkey, c.L.addr(loc), 64);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto w = c.L.wait_wcs(c.lq, 1, 10000);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, wc_status::wr_flush_err) << wc_str(w[0]);
}

TEST_F(PeerDeath, RdmaToAKilledPeersSegmentMemoryFailsWithinBoundedTime)
{
    CONF_REQUIRE_PEER_PROCESS();
    rdma_to_killed_peer(true);
}
TEST_F(PeerDeath, RdmaToAKilledPeersHeapMemoryFailsWithinBoundedTime)
{
    CONF_REQUIRE_PEER_PROCESS();
    rdma_to_killed_peer(false);
}

TEST_F(PeerDeath, UdSendsToAKilledPeerNeverHang)
{
    CONF_REQUIRE_PEER_PROCESS();
    conn c;
    ASSERT_EQ(c.setup(qp_type::ud, vq::OPS_SEND), 0);
    int loc = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE);
    c.P.kill_now();
    std::size_t accepted = 0, completed = 0;
    for (int i = 0; i < 50; i++) {
        vq::wr_start(c.qp());
        c.qp()->wr_id = static_cast<std::uint64_t>(i);
        c.qp()->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(c.qp());
        vq::wr_set_sge(c.qp(), c.L.mr(loc)->lkey, c.L.addr(loc), 1000);
        vq::wr_set_ud_addr(c.qp(), c.L.o.ahs[c.ah], c.pq.qpn, c.qkey);
        int rc = vq::wr_complete(c.qp());
        ASSERT_TRUE(rc == 0 || rc == -FI_EAGAIN) << rc;
        if (rc == 0)
            accepted++;
        else
            completed += c.L.wait_wcs(c.lq, 1, 10000).size();
    }
    // Every accepted send completes (UD is unreliable: success or error); none hangs.
    completed += c.L.wait_wcs(c.lq, accepted - completed, 10000).size();
    EXPECT_EQ(completed, accepted);
    EXPECT_EQ(vq::get_qp_state(c.qp()), vq::qp_state::rts) << "a UD QP does not fail because one destination died";
}

TEST_F(PeerDeath, OrderlyShutdownLeavesNoSegmentBehind)
{
    CONF_REQUIRE_SHM("segments are shm's");
    int peer_pid = -1;
    std::string own;
    {
        auto *c = new conn;
        ASSERT_EQ(c->setup(qp_type::rc, vq::OPS_SEND | vq::OPS_RDMA_WRITE), 0);
        peer_pid = c->P.pid();
        c->P.quit_on_close();
        reg_rep r{};
        ASSERT_EQ(c->P.reg(4096, ACC_ALL_REMOTE, true, 1, &r), 0);
        own = segment_needle(static_cast<int>(getpid()));
        EXPECT_FALSE(segment_files(own).empty()) << "own segment not found by name " << own;
        EXPECT_FALSE(segment_files(peer_needle(peer_pid)).empty());
        delete c; // the peer quits (destroying everything), then this side closes
    }
    auto left = segment_files(peer_needle(peer_pid));
    EXPECT_TRUE(left.empty()) << "peer segment left after an orderly shutdown: " << left.front();
    auto mine = segment_files(own);
    EXPECT_TRUE(mine.empty()) << "own segment left after close_device: " << mine.front();
}

TEST_F(PeerDeath, SegmentOfAProcessKilledAloneIsRemovedByTheNextProcessThatOpensTheDevice)
{
    CONF_REQUIRE_SHM("segments are shm's");
    int dead_pid = -1;
    {
        peer_proc lone; // nobody attaches to it: its own segments only
        ASSERT_TRUE(lone.ok());
        dead_pid = lone.pid();
        ASSERT_FALSE(segment_files(peer_needle(dead_pid)).empty());
        lone.kill_now();
    }
    ASSERT_FALSE(segment_files(peer_needle(dead_pid)).empty()) << "(removed already: nothing to test)";
    // Stale segments (owner dead, nobody holding them) may linger at most until
    // the next process of the same user opens the device.
    peer_proc next;
    ASSERT_TRUE(next.ok());
    bool gone = shunt::test::wait_until([&] { return segment_files(peer_needle(dead_pid)).empty(); },
                                        std::chrono::seconds(5));
    EXPECT_TRUE(gone) << "stale segment of killed pid " << dead_pid << " still present after a new process opened "
                      << conf_device();
    if (!gone) // do not leave hugepages behind for the next run
        (void)shunt::env::cleanup_stale_segments();
}

} // namespace
} // namespace shunt::conf
