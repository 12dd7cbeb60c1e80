// Strictness: a WQE the builders wrote, corrupted before the device reads it,
// completes with the error CQE a ConnectX writes (syndrome -> wc_status, and
// the model's vendor syndrome naming the check); driver misbehaviour a device
// would not report (a forgotten doorbell, a doorbell before its record, a
// BlueFlame copy that is not the WQE, a WQE changed before its completion,
// a CQ overrun) hangs or is counted as a violation.
#include "mlx5_fixture.h"

namespace shunt::test {
namespace {

using vq::wc_status;

class Strict : public Mlx5Model {
protected:
    vq::qp *q = nullptr, *peer = nullptr;
    vq::mr *m = nullptr, *pm = nullptr;

    void open(vq::qp_type t = vq::qp_type::rc, std::uint64_t ops = vq::OPS_SEND | vq::OPS_RDMA_WRITE |
                                                                     vq::OPS_RDMA_READ | vq::OPS_ATOMIC_FETCH_AND_ADD,
              vq::qp_cap cap = {})
    {
        q = A.qp(t, ops, cap);
        peer = B.qp(t, vq::OPS_SEND);
        bool conn = t == vq::qp_type::rc || t == vq::qp_type::uc;
        connect(q, conn ? peer : nullptr);
        connect(peer, conn ? q : nullptr);
        m = A.reg(1 << 16);
        pm = B.reg(1 << 16);
    }
    std::uint64_t a(std::size_t off) const { return reinterpret_cast<std::uint64_t>(m->addr) + off; }
    std::uint8_t *wqe(std::uint32_t bb) { return mq(q)->sqv.buf + (bb & (mq(q)->sqv.wqe_cnt - 1)) * 64; }
    std::uint32_t cur() const { return mq(q)->sq.cur_post; }
    /** Post one signaled send of @p len bytes from the region (8-byte doorbell, no BlueFlame). */
    std::uint32_t post_send(std::uint32_t len = 64)
    {
        std::uint32_t pi = cur();
        vq::wr_start(q);
        q->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(q);
        vq::wr_set_sge(q, m->lkey, a(0), len);
        EXPECT_EQ(vq::wr_complete(q), 0);
        return pi;
    }
    /** Change ds of the WQE at @p bb in memory, in the doorbell the driver just rang,
     *  and in the doorbell record: as a driver writing that WQE would. */
    void set_ds(std::uint32_t bb, std::uint8_t ds)
    {
        std::uint8_t *w = wqe(bb);
        w[7] = ds;
        send_state_doorbell(w);
        mq(q)->sqv.dbrec[MLX5_SND_DBR] = htobe32((bb + (ds + 3) / 4) & 0xffff);
    }
    void send_state_doorbell(const std::uint8_t *w)
    {
        std::memcpy(last_bf_half(q), w, 8); // the half the last doorbell went to
    }
    /** Run and expect one error completion with @p st and vendor syndrome @p vs. */
    void expect_error(wc_status st, std::uint8_t vs)
    {
        vq::wc w = one(q->send_cq);
        EXPECT_EQ(w.status, st) << "got " << vq::wc_status_str(w.status);
        EXPECT_EQ(w.vendor_err, vs);
        EXPECT_EQ(vq::get_qp_state(q), vq::qp_state::err) << "an error CQE moves the QP to ERR";
        // The next request is flushed, and the receive side saw nothing.
        post_send(8);
        vq::wc f = one(q->send_cq);
        EXPECT_EQ(f.status, wc_status::wr_flush_err);
        vq::wc r;
        EXPECT_EQ(vq::poll_cq(peer->recv_cq, 1, &r), 0);
    }
    void recv_at_peer(std::uint32_t len = 4096)
    {
        ASSERT_EQ(vq::post_recv(peer, 1, reinterpret_cast<std::uint64_t>(pm->addr), len, pm->lkey), 0);
    }
};

TEST_F(Strict, ValidWqeCompletesAndCountsNoViolation)
{
    open();
    recv_at_peer();
    post_send();
    vq::wc w = one(q->send_cq);
    EXPECT_EQ(w.status, wc_status::success);
    EXPECT_EQ(stats(A).violations, 0u) << model::last_violation(A.ctx);
}

TEST_F(Strict, UnknownOpcodeIsLocalQpOperationError)
{
    open();
    std::uint32_t pi = post_send();
    wqe(pi)[3] = 0x07; // opmod_idx_opcode's opcode byte: no such opcode
    send_state_doorbell(wqe(pi));
    expect_error(wc_status::loc_qp_op_err, model::vs_bad_opcode);
}

TEST_F(Strict, OpcodeNotValidOnTheQpTypeIsLocalQpOperationError)
{
    open(vq::qp_type::uc, vq::OPS_RDMA_WRITE | vq::OPS_SEND);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_write(q, pm->rkey, reinterpret_cast<std::uint64_t>(pm->addr));
    vq::wr_set_sge(q, m->lkey, a(0), 64);
    ASSERT_EQ(vq::wr_complete(q), 0);
    wqe(pi)[3] = MLX5_OPCODE_RDMA_READ; // UC has no reads
    send_state_doorbell(wqe(pi));
    expect_error(wc_status::loc_qp_op_err, model::vs_bad_opcode);
}

TEST_F(Strict, WqeIndexMismatchIsLocalQpOperationError)
{
    open();
    std::uint32_t pi = post_send();
    wqe(pi)[2] ^= 0x01; // the WQE index bits (opmod_idx_opcode[23:8]); the doorbell stays right
    expect_error(wc_status::loc_qp_op_err, model::vs_bad_index);
    EXPECT_GE(stats(A).violations, 1u) << "the doorbell no longer matches the WQE";
}

TEST_F(Strict, QpnOfAnotherQpIsLocalQpOperationError)
{
    open();
    std::uint32_t pi = post_send();
    wqe(pi)[6] ^= 0x01; // qpn_ds's QP number
    send_state_doorbell(wqe(pi));
    expect_error(wc_status::loc_qp_op_err, model::vs_bad_qpn);
}

TEST_F(Strict, ZeroDsIsLocalQpOperationError)
{
    open();
    std::uint32_t pi = post_send();
    set_ds(pi, 0);
    mq(q)->sqv.dbrec[MLX5_SND_DBR] = htobe32((pi + 1) & 0xffff);
    expect_error(wc_status::loc_qp_op_err, model::vs_bad_ds);
}

TEST_F(Strict, DsPastWhatTheDoorbellCoversIsLocalQpOperationError)
{
    open();
    std::uint32_t pi = post_send();
    wqe(pi)[7] = 9; // 3 basic blocks, the doorbell said 1
    expect_error(wc_status::loc_qp_op_err, model::vs_bad_ds);
}

TEST_F(Strict, InlineDataOverTheQpLimitIsLocalLengthError)
{
    open(vq::qp_type::rc, vq::OPS_SEND, {0, 0, 1, 1, 0});
    std::uint32_t limit = q->cap.max_inline_data;
    std::uint32_t pi = cur();
    ASSERT_EQ(vq::post_send(q, 1, m->addr, limit, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
    // Grow the inline segment past the limit, with ds, doorbell and record to match.
    std::uint32_t len = limit + 16;
    std::uint8_t *w = wqe(pi);
    std::uint32_t bc = htobe32(len | MLX5_INLINE_SEG);
    std::memcpy(w + 16, &bc, 4);
    set_ds(pi, static_cast<std::uint8_t>(1 + (4 + len + 15) / 16));
    expect_error(wc_status::loc_len_err, model::vs_inline_too_long);
}

TEST_F(Strict, BadLkeyIsLocalProtectionError)
{
    open();
    std::uint32_t pi = post_send();
    wqe(pi)[16 + 7] ^= 0x40; // data segment lkey
    expect_error(wc_status::loc_prot_err, model::vs_bad_lkey);
}

TEST_F(Strict, SgeOutsideItsRegionIsLocalProtectionError)
{
    open();
    std::uint32_t pi = post_send();
    auto *d = reinterpret_cast<mlx5_wqe_data_seg *>(wqe(pi) + 16);
    d->addr = htobe64(a((1 << 16) - 32)); // 64 bytes from 32 before the end
    expect_error(wc_status::loc_prot_err, model::vs_bad_lkey);
}

TEST_F(Strict, ZeroByteCountIsLocalLengthError)
{
    open();
    std::uint32_t pi = post_send();
    reinterpret_cast<mlx5_wqe_data_seg *>(wqe(pi) + 16)->byte_count = 0; // the PRM's 2 GiB
    expect_error(wc_status::loc_len_err, model::vs_msg_too_long);
}

TEST_F(Strict, AtomicResultThatIsNotEightBytesIsLocalQpOperationError)
{
    open();
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_atomic_fetch_add(q, pm->rkey, reinterpret_cast<std::uint64_t>(pm->addr), 1);
    vq::wr_set_sge(q, m->lkey, a(0), 8);
    ASSERT_EQ(vq::wr_complete(q), 0);
    reinterpret_cast<mlx5_wqe_data_seg *>(wqe(pi) + 48)->byte_count = htobe32(16);
    expect_error(wc_status::loc_qp_op_err, model::vs_bad_atomic);
}

TEST_F(Strict, ReadIntoARegionWithoutLocalWriteIsLocalProtectionError)
{
    open();
    vq::mr *ro = A.reg(4096, vq::ACCESS_REMOTE_READ);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_read(q, pm->rkey, reinterpret_cast<std::uint64_t>(pm->addr));
    vq::wr_set_sge(q, m->lkey, a(0), 64);
    ASSERT_EQ(vq::wr_complete(q), 0);
    auto *d = reinterpret_cast<mlx5_wqe_data_seg *>(wqe(pi) + 32);
    d->lkey = htobe32(ro->lkey);
    d->addr = htobe64(reinterpret_cast<std::uint64_t>(ro->addr));
    expect_error(wc_status::loc_prot_err, model::vs_no_local_write);
}

TEST_F(Strict, ABindNamingARegionWithoutMwBindIsMwBindError)
{
    open(vq::qp_type::rc, vq::OPS_BIND_MW | vq::OPS_SEND);
    vq::mr *nb = A.reg(4096, vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_READ);
    vq::mw *w = nullptr;
    ASSERT_EQ(vq::alloc_mw(A.pd, vq::mw_type::type2, &w), 0);
    A.mws.push_back(w);
    std::uint32_t before = w->rkey;
    std::uint32_t pi = cur();
    vq::mw_bind_info bi{m, a(0), 256, vq::ACCESS_REMOTE_READ};
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_bind_mw(q, w, vq::inc_rkey(w->rkey), &bi);
    ASSERT_EQ(vq::wr_complete(q), 0);
    auto *k = reinterpret_cast<mlx5_wqe_umr_klm_seg *>(wqe(pi) + 128);
    k->mkey = htobe32(nb->lkey); // a region that does not allow windows
    vq::wc c = one(q->send_cq);
    EXPECT_EQ(c.status, wc_status::mw_bind_err);
    EXPECT_EQ(c.vendor_err, model::vs_bad_umr);
    EXPECT_EQ(c.opcode, vq::wc_opcode::bind_mw);
    EXPECT_EQ(w->rkey, before) << "the failed bind gave the window its old key back";
}

class StrictRaw : public Strict {
protected:
    void configure(model::options &o) override { o.eth_min_inline = 18; }
};

TEST_F(StrictRaw, RawWqeWithoutTheRequiredInlineHeaderIsRejected)
{
    open(vq::qp_type::raw_packet, vq::OPS_SEND);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    vq::wr_set_sge(q, m->lkey, a(0), 60);
    ASSERT_EQ(vq::wr_complete(q), 0);
    auto *e = reinterpret_cast<mlx5_wqe_eth_seg *>(wqe(pi) + 16);
    e->inline_hdr_sz = 0; // the device needs 18 bytes of L2 header inline
    vq::wc c = one(q->send_cq);
    EXPECT_EQ(c.status, wc_status::loc_qp_op_err);
    EXPECT_EQ(c.vendor_err, model::vs_bad_eth);
}

/* ---- Driver bugs a device does not report ---- */

TEST_F(Strict, AForgottenDoorbellHangsUntilTheDoorbellIsRung)
{
    open();
    recv_at_peer();
    std::uint32_t pi = post_send();
    // Undo the doorbell: the WQE and the doorbell record are there, the register never written.
    std::uint8_t *half = last_bf_half(q);
    std::uint8_t saved[8];
    std::memcpy(saved, half, 8);
    std::memset(half, 0, 8);
    run();
    vq::wc w;
    EXPECT_EQ(vq::poll_cq(q->send_cq, 1, &w), 0) << "the device ran without a doorbell";
    EXPECT_EQ(stats(A).wqes, 0u);
    std::memcpy(half, saved, 8); // ring it
    w = one(q->send_cq);
    EXPECT_EQ(w.status, wc_status::success);
    EXPECT_EQ(be16toh(static_cast<std::uint16_t>(pi)), be16toh(static_cast<std::uint16_t>(pi)));
}

TEST_F(Strict, ADoorbellBeforeItsRecordIsAViolation)
{
    open();
    recv_at_peer();
    std::uint32_t pi = post_send();
    mq(q)->sqv.dbrec[MLX5_SND_DBR] = htobe32(pi & 0xffff); // the record never advanced
    vq::wc w = one(q->send_cq);
    EXPECT_EQ(w.status, wc_status::success) << "the device fetches on the doorbell";
    EXPECT_EQ(stats(A).violations, 1u);
    EXPECT_NE(model::last_violation(A.ctx).find("doorbell record"), std::string::npos)
        << model::last_violation(A.ctx);
}

TEST_F(Strict, ABlueFlameCopyThatIsNotTheWqeIsAViolation)
{
    open();
    recv_at_peer();
    ASSERT_EQ(vq::post_send(q, 1, m->addr, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
    std::uint8_t *half = last_bf_half(q);
    half[20] ^= 0xff; // the copy's inline data differs from the WQE's
    (void)one(q->send_cq);
    EXPECT_GE(stats(A).violations, 1u);
    EXPECT_NE(model::last_violation(A.ctx).find("BlueFlame"), std::string::npos) << model::last_violation(A.ctx);
    EXPECT_EQ(stats(A).bf_copies, 1u);
}

TEST_F(Strict, AWqeChangedBeforeItsCompletionIsAViolation)
{
    open();
    std::uint32_t pi = post_send(); // no receive at the peer: RNR, the WQE stays outstanding
    run();
    EXPECT_EQ(stats(A).wqes, 1u);
    wqe(pi)[40] ^= 1; // rewritten while the device still owns it
    recv_at_peer();
    vq::wc w = one(q->send_cq);
    EXPECT_EQ(w.status, wc_status::success);
    EXPECT_EQ(stats(A).violations, 1u);
    EXPECT_NE(model::last_violation(A.ctx).find("modified"), std::string::npos) << model::last_violation(A.ctx);
}

TEST_F(Strict, ACqThatOverrunsStopsAndIsAViolation)
{
    vq::cq *small = A.cq(1); // two entries
    q = A.qp(vq::qp_type::rc, vq::OPS_SEND, {}, small);
    peer = B.qp(vq::qp_type::rc, vq::OPS_SEND);
    connect(q, peer);
    connect(peer, q);
    m = A.reg(4096);
    pm = B.reg(4096);
    for (int i = 0; i < 4; i++) {
        recv_at_peer(64);
        post_send(8);
        run();
    }
    EXPECT_EQ(stats(A).violations, 1u);
    EXPECT_NE(model::last_violation(A.ctx).find("overrun"), std::string::npos) << model::last_violation(A.ctx);
}

/* ---- An independent client: the PRM sequence written by hand (pyverbs style) ---- */

TEST_F(Strict, AHandWrittenWqeAndDoorbellRunAndTheCqeParsesByHand)
{
    open();
    recv_at_peer();
    mlx5::sq_view v = mq(q)->sqv;
    mlx5::cq_view cv = mc(q->send_cq)->view;
    // rdma-core tests/mlx5_base.py post_send: ctrl + data segment, barrier,
    // doorbell record, barrier, 8-byte doorbell.
    std::uint32_t pi = cur();
    auto *c = reinterpret_cast<mlx5_wqe_ctrl_seg *>(v.buf + (pi & (v.wqe_cnt - 1)) * 64);
    mlx5dv_set_ctrl_seg(c, static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, q->qp_num, MLX5_WQE_CTRL_CQ_UPDATE,
                        2, 0, 0);
    mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg *>(c + 1), 32, m->lkey, a(0));
    std::atomic_thread_fence(std::memory_order_release);
    v.dbrec[MLX5_SND_DBR] = htobe32((pi + 1) & 0xffff);
    std::atomic_thread_fence(std::memory_order_release);
    std::memcpy(v.bf_reg, c, 8);
    // poll_cq: owner bit of index 0 is 0, opcode REQ, the WQE counter.
    auto *cqe = reinterpret_cast<mlx5_cqe64 *>(cv.buf + (mc(q->send_cq)->ci & (cv.cqe_cnt - 1)) * cv.cqe_size);
    EXPECT_TRUE(run_until([&] { return (cqe->op_own >> 4) != MLX5_CQE_INVALID; }));
    EXPECT_EQ(cqe->op_own >> 4, MLX5_CQE_REQ);
    EXPECT_EQ(cqe->op_own & 1, 0);
    EXPECT_EQ(be16toh(cqe->wqe_counter), static_cast<std::uint16_t>(pi));
    EXPECT_EQ(be32toh(cqe->sop_drop_qpn) & 0xffffff, q->qp_num);
    EXPECT_EQ(be32toh(cqe->sop_drop_qpn) >> 24, MLX5_OPCODE_SEND);
    vq::wc r = one(peer->recv_cq);
    EXPECT_EQ(r.status, wc_status::success);
    EXPECT_EQ(r.byte_len, 32u);
    EXPECT_EQ(stats(A).violations, 0u) << model::last_violation(A.ctx);
}

} // namespace
} // namespace shunt::test
