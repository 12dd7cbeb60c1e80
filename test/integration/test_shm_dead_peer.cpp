// A peer killed mid-stream: our QP goes to ERR, every outstanding request
// completes within bounded time (the first send with retry_exc_err, the rest
// flushed), nothing hangs, and no segment is left behind.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "env/segment.h"
#include "shm_peer_client.h"

namespace shunt::test {
namespace {

using vq::wc_status;

TEST(ShmDeadPeer, KilledMidStreamFlushesEverythingAndLeaksNothing)
{
    std::string peer_seg;
    std::string my_seg;
    {
        shm_peer peer("rc");
        local_end me(vq::qp_type::rc);
        peer_seg.assign(reinterpret_cast<const char *>(peer.addr.dev.raw), peer.addr.dev.len);
        my_seg.assign(reinterpret_cast<const char *>(me.ctx->addr.raw), me.ctx->addr.len);
        ASSERT_TRUE(env::segment_exists(peer_seg));
        ASSERT_EQ(me.connect(peer.addr), 0);
        ASSERT_EQ(peer.connect(vq::get_qp_addr(me.qp)), 0);
        const int recvs = 5;
        for (int i = 0; i < recvs; i++)
            ASSERT_EQ(vq::post_recv(me.qp, 100 + i, me.addr(i * 64), 64, me.mr->lkey), 0);
        // The peer does not consume: 2 KiB sends fill its 64 KiB ring after a few dozen.
        int posted = 0;
        for (; posted < 100; posted++)
            ASSERT_EQ(vq::post_send(me.qp, posted, me.buf.data(), 2048, me.mr->lkey, vq::WR_SIGNALED), 0);
        peer.kill();
        auto t0 = std::chrono::steady_clock::now();
        std::vector<vq::wc> w = me.poll(posted + recvs, 10000);
        auto took = std::chrono::steady_clock::now() - t0;
        ASSERT_EQ(w.size(), static_cast<std::size_t>(posted + recvs)) << "every request completes";
        EXPECT_LT(took, std::chrono::seconds(5));
        int ok = 0, retry = 0, flushed = 0, recv_flushed = 0;
        for (auto &x : w) {
            if (x.opcode == vq::wc_opcode::recv && x.status == wc_status::wr_flush_err)
                recv_flushed++;
            else if (x.status == wc_status::success)
                ok++;
            else if (x.status == wc_status::retry_exc_err)
                retry++;
            else if (x.status == wc_status::wr_flush_err)
                flushed++;
            else
                ADD_FAILURE() << "unexpected status " << vq::wc_status_str(x.status);
        }
        EXPECT_EQ(recv_flushed, recvs);
        EXPECT_GT(ok, 0);
        EXPECT_EQ(retry, 1) << "the oldest outstanding send reports the dead peer";
        EXPECT_EQ(ok + retry + flushed, posted);
        EXPECT_EQ(vq::get_qp_state(me.qp), vq::qp_state::err);
        // Posting now is accepted and flushed, never hangs.
        ASSERT_EQ(vq::post_send(me.qp, 999, me.buf.data(), 8, me.mr->lkey, 0), 0);
        auto f = me.poll(1);
        ASSERT_EQ(f.size(), 1u);
        EXPECT_EQ(f[0].status, wc_status::wr_flush_err);
    }
    EXPECT_FALSE(env::segment_exists(peer_seg)) << "dead peer's segment leaked";
    EXPECT_FALSE(env::segment_exists(my_seg)) << "our segment leaked";
}

TEST(ShmDeadPeer, IdleReceiverNoticesWithinBoundedTime)
{
    shm_peer peer("rc");
    local_end me(vq::qp_type::rc);
    ASSERT_EQ(me.connect(peer.addr), 0);
    ASSERT_EQ(peer.connect(vq::get_qp_addr(me.qp)), 0);
    ASSERT_EQ(vq::post_recv(me.qp, 1, me.addr(), 64, me.mr->lkey), 0);
    peer.kill();
    auto w = me.poll(1, 10000);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, wc_status::wr_flush_err);
    EXPECT_EQ(vq::get_qp_state(me.qp), vq::qp_state::err);
}

// Messages the peer had put in our ring, and saw complete, before it died:
// the receiver gets every one, in order and byte for byte, and only then
// are its other receives flushed (the dead peer's sends succeeded, so
// dropping them would lose data the sender counts as delivered).
TEST(ShmDeadPeer, WhatItSentBeforeDyingIsDeliveredBeforeTheFlush)
{
    shm_peer peer("rc");
    local_end me(vq::qp_type::rc);
    ASSERT_EQ(me.connect(peer.addr), 0);
    ASSERT_EQ(peer.connect(vq::get_qp_addr(me.qp)), 0);
    const int msgs = 5;
    for (int i = 0; i < msgs; i++) {
        // 40 bytes (one slot) and 200 bytes (several), alternately.
        std::vector<std::uint8_t> b(i % 2 ? 200 : 40, static_cast<std::uint8_t>(0xa0 + i));
        peer.write(i * 256, b);
        ASSERT_EQ(peer.send(i * 256, b.size(), false, vq::WR_SIGNALED), 0);
    }
    // Completed at the sender: the bytes are in our ring (no receive is
    // posted, so they wait there).
    auto sent = peer.poll(msgs);
    ASSERT_EQ(sent.size(), static_cast<std::size_t>(msgs));
    for (auto &x : sent)
        ASSERT_EQ(x.status, wc_status::success);
    peer.kill();
    ASSERT_TRUE(wait_until_state(me.qp, vq::qp_state::err)) << "the dead peer is not noticed";
    for (int i = 0; i < msgs + 1; i++)
        ASSERT_EQ(vq::post_recv(me.qp, 100 + i, me.addr(i * 256), 256, me.mr->lkey), 0);
    auto w = me.poll(msgs + 1);
    ASSERT_EQ(w.size(), static_cast<std::size_t>(msgs + 1));
    for (int i = 0; i < msgs; i++) {
        SCOPED_TRACE(i);
        EXPECT_EQ(w[i].status, wc_status::success) << vq::wc_status_str(w[i].status);
        EXPECT_EQ(w[i].wr_id, 100u + i);
        const std::uint32_t len = i % 2 ? 200 : 40;
        EXPECT_EQ(w[i].byte_len, len);
        EXPECT_EQ(std::count(me.buf.begin() + i * 256, me.buf.begin() + i * 256 + len, 0xa0 + i),
                  static_cast<std::ptrdiff_t>(len));
    }
    EXPECT_EQ(w[msgs].status, wc_status::wr_flush_err) << "then the rest is flushed";
    EXPECT_EQ(w[msgs].wr_id, 100u + msgs);
}

// The target of large reads killed while it may be copying its part of one
// (it polls, so it takes parts: SHUNT_SHM_SPLIT_BYTES): every read completes
// within bounded time, either whole and right or with an error, and the QP
// ends in ERR. The kill lands at a different moment in each round.
TEST(ShmDeadPeer, KilledWhileCopyingPartsOfOurReads)
{
    constexpr std::uint32_t len = 4 << 20;
    std::vector<std::uint8_t> theirs(len);
    for (std::uint32_t i = 0; i < len; i++)
        theirs[i] = static_cast<std::uint8_t>(i * 31 + 7);
    int failed_reads = 0;
    for (int round = 0; round < 5; round++) {
        SCOPED_TRACE("round " + std::to_string(round));
        shm_peer peer("rc");
        local_end me(vq::qp_type::rc, len);
        ASSERT_EQ(me.connect(peer.addr), 0);
        ASSERT_EQ(peer.connect(vq::get_qp_addr(me.qp)), 0);
        peer.write(0, theirs);
        pp::request pr{};
        pr.op = pp::poll;
        pr.n = 1;
        pr.a = 10000;
        peer.start(pr);
        const pid_t victim = peer.pid();
        std::atomic<bool> started{false};
        std::thread killer([&] {
            while (!started.load())
                std::this_thread::yield();
            std::this_thread::sleep_for(std::chrono::microseconds(200 + 350 * round));
            ::kill(victim, SIGKILL);
        });
        bool failed = false;
        for (int i = 0; i < 200 && !failed; i++) {
            std::memset(me.buf.data(), 0, len);
            vq::wr_start(me.qp);
            me.qp->wr_id = static_cast<std::uint64_t>(i);
            me.qp->wr_flags = vq::WR_SIGNALED;
            vq::wr_rdma_read(me.qp, peer.priv_rkey, peer.priv_addr);
            vq::wr_set_sge(me.qp, me.mr->lkey, me.addr(), len);
            started.store(true);
            ASSERT_EQ(vq::wr_complete(me.qp), 0);
            auto t0 = std::chrono::steady_clock::now();
            auto c = me.poll(1, 10000);
            ASSERT_EQ(c.size(), 1u) << "read " << i << " never completed";
            EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
            if (c[0].status == wc_status::success) {
                ASSERT_EQ(std::memcmp(me.buf.data(), theirs.data(), len), 0) << "read " << i << " is not whole";
            } else {
                EXPECT_TRUE(c[0].status == wc_status::retry_exc_err || c[0].status == wc_status::wr_flush_err)
                    << vq::wc_status_str(c[0].status);
                failed = true;
            }
        }
        killer.join();
        peer.kill();
        EXPECT_TRUE(failed) << "the reads never noticed the dead target";
        failed_reads += failed;
        EXPECT_TRUE(wait_until_state(me.qp, vq::qp_state::err));
    }
    EXPECT_EQ(failed_reads, 5);
}

TEST(ShmDeadPeer, OrderlyPeerDestroyIsSeenAsGone)
{
    local_end me(vq::qp_type::rc);
    {
        shm_peer peer("rc");
        ASSERT_EQ(me.connect(peer.addr), 0);
        ASSERT_EQ(peer.connect(vq::get_qp_addr(me.qp)), 0);
    } // the peer destroys its QP and exits
    ASSERT_EQ(vq::post_recv(me.qp, 1, me.addr(), 64, me.mr->lkey), 0);
    auto w = me.poll(1, 10000);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, wc_status::wr_flush_err);
}

} // namespace
} // namespace shunt::test
