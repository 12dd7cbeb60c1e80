// Golden encodings: for each builder and setter, the bytes the driver leaves
// in the send queue (and the doorbell record and register) equal what
// rdma-core's own mlx5dv.h helpers (mlx5dv_set_ctrl_seg, _data_seg,
// _dgram_seg, _eth_seg) and structure definitions produce for the same
// request. The devices are stepped by hand and not run, so the queue holds
// exactly what the driver wrote.
#include <arpa/inet.h>
#include <cpuid.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mlx5_fixture.h"

namespace shunt::test {
namespace {

class Encoding : public Mlx5Model {
protected:
    vq::qp *q = nullptr, *peer = nullptr;
    vq::mr *m = nullptr;
    std::uint8_t *buf = nullptr;

    void open(vq::qp_type t, std::uint64_t ops, vq::qp_cap cap = {}, bool sig_all = false)
    {
        q = A.qp(t, ops, cap, nullptr, sig_all);
        peer = B.qp(t, vq::OPS_SEND);
        ASSERT_TRUE(q && peer);
        bool conn = t == vq::qp_type::rc || t == vq::qp_type::uc;
        connect(q, conn ? peer : nullptr);
        connect(peer, conn ? q : nullptr);
        m = A.reg(1 << 16);
        buf = static_cast<std::uint8_t *>(m->addr);
        for (int i = 0; i < 4096; i++)
            buf[i] = static_cast<std::uint8_t>(i * 7 + 1);
    }
    std::uint32_t qpn() const { return q->qp_num; }
    std::uint64_t a(std::size_t off) const { return reinterpret_cast<std::uint64_t>(buf + off); }
    std::uint32_t cur() const { return mq(q)->sq.cur_post; }
    /** The WQE at @p bb must equal @p want (ds * 16 bytes). */
    void expect_wqe(std::uint32_t bb, const std::uint8_t *want, unsigned ds)
    {
        auto got = sq_bytes(q, bb, ds * 16u);
        EXPECT_BYTES_EQ(got.data(), want, ds * 16u);
    }
    std::uint32_t dbrec() const { return be32toh(mq(q)->sqv.dbrec[MLX5_SND_DBR]); }
    /** First 8 bytes of BlueFlame half @p h. */
    std::uint64_t bf8(unsigned h) const
    {
        std::uint64_t v;
        std::memcpy(&v, mq(q)->sqv.bf_reg + h * mq(q)->sqv.bf_size, 8);
        return v;
    }
};

using ctrl = mlx5_wqe_ctrl_seg;
using dseg = mlx5_wqe_data_seg;

TEST_F(Encoding, SendWithOneSgeIsCtrlPlusDataSegmentAndOneDoorbell)
{
    open(vq::qp_type::rc, vq::OPS_SEND);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_id = 7;
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    vq::wr_set_sge(q, m->lkey, a(100), 300);
    ASSERT_EQ(vq::wr_complete(q), 0);
    alignas(64) std::uint8_t w[64] = {};
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, qpn(),
                        MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, 0);
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 16), 300, m->lkey, a(100));
    expect_wqe(pi, w, 2);
    EXPECT_EQ(dbrec(), (pi + 1) & 0xffff) << "doorbell record: the next WQE's basic block";
    std::uint64_t first;
    std::memcpy(&first, w, 8);
    EXPECT_EQ(bf8(0), first) << "the 8-byte doorbell carries the WQE's first 8 bytes";
    EXPECT_EQ(mq(q)->sq.meta[pi & mq(q)->sq.mask].wr_id, 7u);
}

TEST_F(Encoding, SendImmAndSolicitedAndFenceSetTheirBits)
{
    open(vq::qp_type::rc, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SOLICITED | vq::WR_FENCE;
    vq::wr_send_imm(q, htonl(0xdeadbeef));
    vq::wr_set_sge(q, m->lkey, a(0), 16);
    ASSERT_EQ(vq::wr_complete(q), 0);
    alignas(64) std::uint8_t w[64] = {};
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND_IMM, 0,
                        qpn(), MLX5_WQE_CTRL_SOLICITED | MLX5_WQE_CTRL_FENCE, 2, 0, htonl(0xdeadbeef));
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 16), 16, m->lkey, a(0));
    expect_wqe(pi, w, 2);
}

TEST_F(Encoding, SendInvCarriesTheKeyInBigEndian)
{
    open(vq::qp_type::rc, vq::OPS_SEND_WITH_INV);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_inv(q, 0x12345678);
    vq::wr_set_sge(q, m->lkey, a(0), 8);
    ASSERT_EQ(vq::wr_complete(q), 0);
    alignas(64) std::uint8_t w[64] = {};
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND_INVAL, 0,
                        qpn(), MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, htobe32(0x12345678));
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 16), 8, m->lkey, a(0));
    expect_wqe(pi, w, 2);
}

/** rdma-core's inline segment: byte_count = len | MLX5_INLINE_SEG, data, padded to 16. */
unsigned put_inline(std::uint8_t *p, const std::uint8_t *data, std::size_t len)
{
    std::uint32_t bc = htobe32(static_cast<std::uint32_t>(len) | MLX5_INLINE_SEG);
    std::memcpy(p, &bc, 4);
    std::memcpy(p + 4, data, len);
    return static_cast<unsigned>((len + 4 + 15) / 16);
}

TEST_F(Encoding, InlineSendIsOneInlineSegmentAndABlueFlameCopy)
{
    open(vq::qp_type::rc, vq::OPS_SEND, {0, 0, 1, 1, 64});
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    vq::wr_set_inline_data(q, buf, 8);
    ASSERT_EQ(vq::wr_complete(q), 0);
    alignas(64) std::uint8_t w[64] = {};
    unsigned octs = put_inline(w + 16, buf, 8);
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, qpn(),
                        MLX5_WQE_CTRL_CQ_UPDATE, static_cast<std::uint8_t>(1 + octs), 0, 0);
    expect_wqe(pi, w, 1 + octs);
    // One small inline WQE: copied whole to the BlueFlame register (64 bytes).
    EXPECT_BYTES_EQ(mq(q)->sqv.bf_reg, sq_bytes(q, pi, 64).data(), 64);
}

TEST_F(Encoding, SingleCallInlinePostOnAThreadDomainQpIsTheSameWqe)
{
    open(vq::qp_type::rc, vq::OPS_SEND, {0, 0, 1, 1, 64});
    std::uint32_t pi = cur();
    ASSERT_EQ(vq::post_send(q, 9, buf + 5, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
    alignas(64) std::uint8_t w[64] = {};
    put_inline(w + 16, buf + 5, 8);
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, qpn(),
                        MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, 0);
    expect_wqe(pi, w, 2);
    EXPECT_BYTES_EQ(mq(q)->sqv.bf_reg, w, 64);
    EXPECT_EQ(dbrec(), (pi + 1) & 0xffff);
    // The next post goes to the other BlueFlame half.
    ASSERT_EQ(vq::post_send(q, 10, buf, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
    EXPECT_BYTES_EQ(mq(q)->sqv.bf_reg + mq(q)->sqv.bf_size, sq_bytes(q, pi + 1, 64).data(), 64);
}

/** Whether the upper halves of the AVX registers are in use (XINUSE bit 2),
 *  or -1 when the CPU cannot tell (XGETBV with ECX=1). */
[[maybe_unused]] int avx_upper_in_use()
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(0xd, 1, &a, &b, &c, &d) || !(a & (1u << 2)))
        return -1;
    std::uint32_t lo, hi;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    return (lo >> 2) & 1;
}

// The BlueFlame copy uses 32-byte AVX stores where the build has AVX; the
// driver must leave the upper halves clean (vzeroupper), or the SSE code of
// DPDK or libc after it pays a transition or a false dependency. GCC issues
// the vzeroupper, and only when it optimizes (as it does for all AVX code).
TEST_F(Encoding, TheBlueFlameCopyLeavesNoDirtyUpperHalves)
{
#if !defined(__AVX__)
    GTEST_SKIP() << "built without AVX: the copy uses SSE stores only";
#elif !defined(__OPTIMIZE__)
    GTEST_SKIP() << "an unoptimized build: GCC issues no vzeroupper at all";
#else
    if (avx_upper_in_use() < 0)
        GTEST_SKIP() << "this CPU does not report XINUSE";
    open(vq::qp_type::rc, vq::OPS_SEND, {0, 0, 4, 1, 64});
    ASSERT_EQ(vq::post_send(q, 1, buf, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
    EXPECT_EQ(avx_upper_in_use(), 0) << "after the single-call send";
    vq::wr_start(q);
    q->wr_id = 2;
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    vq::wr_set_inline_data(q, buf, 60); // 16 + 4 + 60 bytes: two BBs, the copy's loop
    ASSERT_EQ(vq::wr_complete(q), 0);
    EXPECT_EQ(avx_upper_in_use(), 0) << "after wr_complete's copy";
    EXPECT_BYTES_EQ(last_bf_half(q), sq_bytes(q, 1, 128).data(), 128);
#endif
}

TEST_F(Encoding, SingleCallInlineSendsOfEveryLengthAndFlagWriteTheWqeTheHelpersBuild)
{
    // 1..44 bytes fit the single-call path's one basic block, 45..64 take the session.
    open(vq::qp_type::rc, vq::OPS_SEND, {0, 0, 1, 1, 64});
    const unsigned flag_sets[] = {vq::WR_SIGNALED, 0, vq::WR_SOLICITED | vq::WR_SIGNALED, vq::WR_FENCE};
    for (std::uint32_t len = 1; len <= 64; len++) {
        unsigned f = flag_sets[len % 4];
        std::uint32_t pi = cur();
        ASSERT_EQ(vq::post_send(q, 100 + len, buf + len, len, 0, vq::WR_INLINE | f), 0) << len;
        alignas(64) std::uint8_t w[128] = {};
        unsigned octs = put_inline(w + 16, buf + len, len);
        std::uint8_t fm = ((f & vq::WR_SIGNALED) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                          ((f & vq::WR_SOLICITED) ? MLX5_WQE_CTRL_SOLICITED : 0) |
                          ((f & vq::WR_FENCE) ? MLX5_WQE_CTRL_FENCE : 0);
        mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, qpn(),
                            fm, static_cast<std::uint8_t>(1 + octs), 0, 0);
        expect_wqe(pi, w, 1 + octs);
        EXPECT_EQ(dbrec(), (pi + (1 + octs + 3) / 4) & 0xffff) << len;
        EXPECT_EQ(mq(q)->sq.meta[pi & mq(q)->sq.mask].wr_id, 100 + len);
        unsigned bbs = (1 + octs + 3) / 4;
        EXPECT_BYTES_EQ(last_bf_half(q), sq_bytes(q, pi, bbs * 64u).data(), bbs * 64u);
        if (len % 16 == 0) { // keep the queue from filling: run the device, take the completions
            run();
            drain(q->send_cq);
            drain(peer->recv_cq);
        }
    }
}

TEST_F(Encoding, InlineDataEndingAtAGuardPageIsReadNoFurther)
{
    // The inline copies use overlapping 4-, 8- and 16-byte loads: every one
    // must stay inside the caller's bytes. Messages end where an inaccessible
    // page begins, by the single call and by the session.
    open(vq::qp_type::rc, vq::OPS_SEND, {0, 0, 1, 1, 64});
    const std::size_t pg = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void *map = mmap(nullptr, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(map, MAP_FAILED);
    auto *page = static_cast<std::uint8_t *>(map);
    for (std::size_t i = 0; i < pg; i++)
        page[i] = static_cast<std::uint8_t>(i * 13 + 5);
    ASSERT_EQ(mprotect(page + pg, pg, PROT_NONE), 0);
    for (std::uint32_t len = 1; len <= 44; len++) {
        const std::uint8_t *src = page + pg - len;
        for (int session = 0; session < 2; session++) {
            std::uint32_t pi = cur();
            if (session) {
                vq::wr_start(q);
                q->wr_id = len;
                q->wr_flags = vq::WR_SIGNALED;
                vq::wr_send(q);
                vq::wr_set_inline_data(q, src, len);
                ASSERT_EQ(vq::wr_complete(q), 0) << len;
            } else {
                ASSERT_EQ(vq::post_send(q, len, src, len, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0) << len;
            }
            alignas(64) std::uint8_t w[64] = {};
            unsigned octs = put_inline(w + 16, src, len);
            mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0,
                                qpn(), MLX5_WQE_CTRL_CQ_UPDATE, static_cast<std::uint8_t>(1 + octs), 0, 0);
            expect_wqe(pi, w, 1 + octs);
        }
        if (len % 8 == 0) { // keep the queue from filling
            run();
            drain(q->send_cq);
            drain(peer->recv_cq);
        }
    }
    munmap(map, 2 * pg);
}

TEST_F(Encoding, SingleCallSendsAndBatchesShareTheQueueLimitExactly)
{
    open(vq::qp_type::rc, vq::OPS_SEND, {8, 0, 1, 1, 16});
    ASSERT_EQ(q->cap.max_send_wr, 8u);
    vq::mr *pm = B.reg(4096);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 8; i++)
            ASSERT_EQ(vq::post_recv(peer, static_cast<std::uint64_t>(i), reinterpret_cast<std::uint64_t>(pm->addr),
                                    256, pm->lkey),
                      0);
        int ok = 0;
        for (int i = 0; i < 3; i++)
            ok += vq::post_send(q, static_cast<std::uint64_t>(i), buf, 8, 0, vq::WR_INLINE) == 0;
        vq::wr_start(q); // a batch of two between single-call sends
        vq::wr_send(q);
        vq::wr_set_inline_data(q, buf, 8);
        vq::wr_send(q);
        vq::wr_set_sge(q, m->lkey, a(0), 100);
        ASSERT_EQ(vq::wr_complete(q), 0);
        ok += 2;
        for (int i = 0; i < 3; i++) // the last one signaled: its CQE completes all eight
            ok += vq::post_send(q, static_cast<std::uint64_t>(10 + i), buf, 8, 0,
                                vq::WR_INLINE | (i == 2 ? vq::WR_SIGNALED : 0)) == 0;
        EXPECT_EQ(ok, 8) << "round " << round;
        EXPECT_EQ(vq::post_send(q, 99, buf, 8, 0, vq::WR_INLINE), -FI_EAGAIN) << "a ninth send on a queue of eight";
        vq::wr_start(q);
        vq::wr_send(q);
        vq::wr_set_inline_data(q, buf, 8);
        EXPECT_EQ(vq::wr_complete(q), -FI_EAGAIN) << "and a ninth in a batch";
        vq::wc c = one(q->send_cq);
        EXPECT_EQ(c.status, vq::wc_status::success);
        EXPECT_EQ(c.wr_id, 12u);
        EXPECT_EQ(drain(peer->recv_cq).size(), 8u);
    }
}

TEST_F(Encoding, SingleCallSendsAfterAUmrCarryItsFenceAndAreRefusedWhenNotReady)
{
    open(vq::qp_type::rc, vq::OPS_SEND | vq::OPS_LOCAL_INV, {0, 0, 1, 1, 16});
    ASSERT_EQ(vq::post_send(q, 1, buf, 8, 0, vq::WR_INLINE), 0); // the fast path has credits now
    vq::wr_start(q);
    vq::wr_local_inv(q, 0x1234);
    ASSERT_EQ(vq::wr_complete(q), 0);
    std::uint32_t pi = cur();
    ASSERT_EQ(vq::post_send(q, 2, buf, 8, 0, vq::WR_INLINE), 0);
    EXPECT_EQ(sq_bytes(q, pi, 16)[11], MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE) << "the WQE after a UMR waits for it";
    pi = cur();
    ASSERT_EQ(vq::post_send(q, 3, buf, 8, 0, vq::WR_INLINE), 0);
    EXPECT_EQ(sq_bytes(q, pi, 16)[11], 0) << "only the next one";
    vq::qp_attr at;
    at.state = vq::qp_state::reset;
    ASSERT_EQ(vq::modify_qp(q, &at, vq::QP_ATTR_STATE), 0);
    EXPECT_EQ(vq::post_send(q, 4, buf, 8, 0, vq::WR_INLINE), -FI_EOPBADSTATE);
    at.state = vq::qp_state::init;
    ASSERT_EQ(vq::modify_qp(q, &at, vq::QP_ATTR_STATE), 0);
    EXPECT_EQ(vq::post_send(q, 5, buf, 8, 0, vq::WR_INLINE), -FI_EOPBADSTATE);
}

TEST_F(Encoding, InlineListIsConcatenatedIntoOneSegment)
{
    open(vq::qp_type::rc, vq::OPS_SEND, {0, 0, 1, 1, 128});
    std::uint32_t pi = cur();
    vq::data_buf b[3] = {{buf, 5}, {buf + 100, 0}, {buf + 200, 40}};
    vq::wr_start(q);
    vq::wr_send(q);
    vq::wr_set_inline_data_list(q, 3, b);
    ASSERT_EQ(vq::wr_complete(q), 0);
    std::uint8_t cat[45];
    std::memcpy(cat, buf, 5);
    std::memcpy(cat + 5, buf + 200, 40);
    alignas(64) std::uint8_t w[128] = {};
    unsigned octs = put_inline(w + 16, cat, 45);
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, qpn(), 0,
                        static_cast<std::uint8_t>(1 + octs), 0, 0);
    expect_wqe(pi, w, 1 + octs);
}

TEST_F(Encoding, SgeListSkipsZeroLengthEntries)
{
    open(vq::qp_type::rc, vq::OPS_SEND, {0, 0, 4, 1, 0});
    std::uint32_t pi = cur();
    vq::sge s[3] = {{a(0), 10, m->lkey}, {a(64), 0, m->lkey}, {a(128), 20, m->lkey}};
    vq::wr_start(q);
    vq::wr_send(q);
    vq::wr_set_sge_list(q, 3, s);
    ASSERT_EQ(vq::wr_complete(q), 0);
    alignas(64) std::uint8_t w[64] = {};
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, qpn(), 0,
                        3, 0, 0);
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 16), 10, m->lkey, a(0));
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 32), 20, m->lkey, a(128));
    expect_wqe(pi, w, 3);
}

void set_raddr(std::uint8_t *p, std::uint64_t raddr, std::uint32_t rkey)
{
    auto *r = reinterpret_cast<mlx5_wqe_raddr_seg *>(p);
    r->raddr = htobe64(raddr);
    r->rkey = htobe32(rkey);
    r->reserved = 0;
}

TEST_F(Encoding, RdmaWriteWriteImmAndReadHaveARemoteAddressSegment)
{
    open(vq::qp_type::rc, vq::OPS_RDMA_WRITE | vq::OPS_RDMA_WRITE_WITH_IMM | vq::OPS_RDMA_READ,
         {0, 0, 2, 1, 64});
    std::uint32_t pi = cur();
    vq::sge s[2] = {{a(0), 100, m->lkey}, {a(500), 28, m->lkey}};
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_write(q, 0xabc, 0x1122334455667788ull);
    vq::wr_set_sge(q, m->lkey, a(0), 4096);
    q->wr_flags = 0;
    vq::wr_rdma_write_imm(q, 0xdef, 0x1000, htonl(5));
    vq::wr_set_inline_data(q, buf, 20);
    vq::wr_rdma_read(q, 0x77, 0x2000);
    vq::wr_set_sge_list(q, 2, s);
    ASSERT_EQ(vq::wr_complete(q), 0);
    alignas(64) std::uint8_t w1[64] = {}, w2[64] = {}, w3[64] = {};
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w1), static_cast<std::uint16_t>(pi), MLX5_OPCODE_RDMA_WRITE, 0,
                        qpn(), MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
    set_raddr(w1 + 16, 0x1122334455667788ull, 0xabc);
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w1 + 32), 4096, m->lkey, a(0));
    expect_wqe(pi, w1, 3);
    unsigned octs = put_inline(w2 + 32, buf, 20);
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w2), static_cast<std::uint16_t>(pi + 1), MLX5_OPCODE_RDMA_WRITE_IMM,
                        0, qpn(), 0, static_cast<std::uint8_t>(2 + octs), 0, htonl(5));
    set_raddr(w2 + 16, 0x1000, 0xdef);
    expect_wqe(pi + 1, w2, 2 + octs);
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w3), static_cast<std::uint16_t>(pi + 2), MLX5_OPCODE_RDMA_READ, 0,
                        qpn(), 0, 4, 0, 0);
    set_raddr(w3 + 16, 0x2000, 0x77);
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w3 + 32), 100, m->lkey, a(0));
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w3 + 48), 28, m->lkey, a(500));
    expect_wqe(pi + 2, w3, 4);
    // A batch of three: one doorbell, for the last WQE, and no BlueFlame copy.
    EXPECT_EQ(dbrec(), (pi + 3) & 0xffff);
    std::uint64_t first;
    std::memcpy(&first, w3, 8);
    EXPECT_EQ(bf8(0), first);
}

TEST_F(Encoding, AtomicsHaveRemoteAddressAtomicAndOneEightByteDataSegment)
{
    open(vq::qp_type::rc, vq::OPS_ATOMIC_CMP_AND_SWP | vq::OPS_ATOMIC_FETCH_AND_ADD);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_atomic_cmp_swp(q, 0x55, 0x8000, 111, 222);
    vq::wr_set_sge(q, m->lkey, a(8), 8);
    q->wr_flags = 0;
    vq::wr_atomic_fetch_add(q, 0x56, 0x9000, 333);
    vq::wr_set_sge(q, m->lkey, a(16), 8);
    ASSERT_EQ(vq::wr_complete(q), 0);
    for (int k = 0; k < 2; k++) {
        alignas(64) std::uint8_t w[64] = {};
        mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi + k),
                            k ? MLX5_OPCODE_ATOMIC_FA : MLX5_OPCODE_ATOMIC_CS, 0, qpn(),
                            k ? 0 : MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
        set_raddr(w + 16, k ? 0x9000 : 0x8000, k ? 0x56 : 0x55);
        auto *at = reinterpret_cast<mlx5_wqe_atomic_seg *>(w + 32);
        at->swap_add = htobe64(k ? 333 : 222); // rdma-core _set_atomic_seg
        at->compare = htobe64(k ? 0 : 111);
        mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 48), 8, m->lkey, a(k ? 16 : 8));
        expect_wqe(pi + k, w, 4);
    }
}

TEST_F(Encoding, ZeroLengthSendIsAControlSegmentAlone)
{
    open(vq::qp_type::rc, vq::OPS_SEND);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    ASSERT_EQ(vq::wr_complete(q), 0);
    alignas(64) std::uint8_t w[16] = {};
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, qpn(),
                        MLX5_WQE_CTRL_CQ_UPDATE, 1, 0, 0);
    expect_wqe(pi, w, 1);
}

TEST_F(Encoding, SqSigAllSignalsEveryWqe)
{
    open(vq::qp_type::rc, vq::OPS_SEND, {}, true);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = 0;
    vq::wr_send(q);
    ASSERT_EQ(vq::wr_complete(q), 0);
    EXPECT_EQ(sq_bytes(q, pi, 16)[11], MLX5_WQE_CTRL_CQ_UPDATE);
}

/** rdma-core set_umr_control_seg / set_umr_mkey_seg / set_umr_data_seg for a type-2 window. */
unsigned umr_expected(std::uint8_t *w, std::uint32_t pi, std::uint32_t qpn, std::uint32_t orig, std::uint32_t rkey,
                      std::uint64_t addr, std::uint64_t len, unsigned acc, std::uint32_t mr_lkey, std::uint8_t fm)
{
    unsigned size = 1 + 3 + 4 + (len ? 4 : 0);
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_UMR, 0, qpn, fm,
                        static_cast<std::uint8_t>(size), 0, htobe32(orig));
    auto *uc = reinterpret_cast<mlx5_wqe_umr_ctrl_seg *>(w + 16);
    uc->flags = MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET | MLX5_WQE_UMR_CTRL_FLAG_INLINE;
    std::uint64_t mask = MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
                         MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN;
    if (len) {
        uc->klm_octowords = htobe16(8 / 2); // get_klm_octo(1) = ALIGN(1, 3) / 2, ALIGN's second argument a log2
        uc->flags |= MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE;
        mask |= MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN | MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC;
    } else {
        uc->flags |= MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN;
    }
    uc->mkey_mask = htobe64(mask);
    auto *mk = reinterpret_cast<mlx5_wqe_mkey_context_seg *>(w + 64);
    mk->qpn_mkey = htobe32((rkey & 0xff) | (len ? qpn << 8 : 0xffffff00u));
    if (len) {
        if (acc & vq::ACCESS_REMOTE_WRITE)
            mk->access_flags |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;
        if (acc & vq::ACCESS_REMOTE_READ)
            mk->access_flags |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ;
        mk->start_addr = htobe64(addr);
        mk->len = htobe64(len);
        auto *k = reinterpret_cast<mlx5_wqe_umr_klm_seg *>(w + 128);
        k->byte_count = htobe32(static_cast<std::uint32_t>(len));
        k->mkey = htobe32(mr_lkey);
        k->address = htobe64(addr);
    } else {
        mk->free = MLX5_WQE_MKEY_CONTEXT_FREE;
    }
    return size;
}

TEST_F(Encoding, BindMwAndLocalInvAreUmrWqesAndTheNextWqeWaitsForThem)
{
    open(vq::qp_type::rc, vq::OPS_BIND_MW | vq::OPS_LOCAL_INV | vq::OPS_SEND);
    vq::mw *mw = nullptr;
    ASSERT_EQ(vq::alloc_mw(A.pd, vq::mw_type::type2, &mw), 0);
    A.mws.push_back(mw);
    std::uint32_t orig = mw->rkey, nk = vq::inc_rkey(orig);
    std::uint32_t pi = cur();
    vq::mw_bind_info bi{m, a(64), 1024, vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_WRITE};
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_bind_mw(q, mw, nk, &bi);
    q->wr_flags = 0;
    vq::wr_local_inv(q, nk);
    vq::wr_send(q);
    ASSERT_EQ(vq::wr_complete(q), 0);
    EXPECT_EQ(mw->rkey, nk) << "the window's key once the bind is posted (restored if it fails)";
    alignas(64) std::uint8_t w1[192] = {}, w2[128] = {};
    unsigned s1 = umr_expected(w1, pi, qpn(), orig, nk, a(64), 1024, bi.mw_access_flags, m->lkey,
                               MLX5_WQE_CTRL_CQ_UPDATE);
    expect_wqe(pi, w1, s1);
    std::uint32_t p2 = pi + (s1 + 3) / 4;
    // After a UMR the next WQE carries the small fence (rdma-core fm_cache).
    unsigned s2 = umr_expected(w2, p2, qpn(), nk, 0, 0, 0, 0, 0, MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE);
    expect_wqe(p2, w2, s2);
    std::uint32_t p3 = p2 + (s2 + 3) / 4;
    EXPECT_EQ(sq_bytes(q, p3, 16)[11], MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE);
}

TEST_F(Encoding, AQueueFullOfUmrWqesNeverOverwritesOneNotYetCompleted)
{
    // A 3-BB bind per slot: the SQ of a QP that binds holds max_send_wr of them.
    open(vq::qp_type::rc, vq::OPS_SEND | vq::OPS_BIND_MW | vq::OPS_LOCAL_INV, {4, 0, 1, 1, 0});
    const std::uint32_t n = q->cap.max_send_wr;
    std::vector<vq::mw *> w(n);
    for (auto &x : w) {
        ASSERT_EQ(vq::alloc_mw(A.pd, vq::mw_type::type2, &x), 0);
        A.mws.push_back(x);
    }
    std::uint32_t pi = cur();
    vq::wr_start(q);
    for (std::uint32_t i = 0; i < n; i++) {
        vq::mw_bind_info bi{m, a(64 * i), 64, vq::ACCESS_REMOTE_READ};
        q->wr_id = i;
        vq::wr_bind_mw(q, w[i], (w[i]->rkey & ~0xffu) | ((w[i]->rkey + 1) & 0xff), &bi);
    }
    ASSERT_EQ(vq::wr_complete(q), 0);
    const std::uint32_t used = cur() - pi;
    EXPECT_EQ(used, 3 * n) << "a bind is a 192-byte WQE";
    EXPECT_LE(used, mq(q)->sqv.wqe_cnt) << "the binds wrapped over each other";
    // The first bind is still whole: its control segment names it.
    auto first = sq_bytes(q, pi, 16);
    std::uint32_t w0;
    std::memcpy(&w0, first.data(), 4);
    EXPECT_EQ(be32toh(w0), ((pi & 0xffff) << 8) | MLX5_OPCODE_UMR);
    vq::wr_start(q);
    vq::wr_local_inv(q, w[0]->rkey);
    EXPECT_EQ(vq::wr_complete(q), -FI_EAGAIN) << "one more than max_send_wr";
}

TEST_F(Encoding, UdSendCopiesTheAddressVectorAndSetsQpnAndQkey)
{
    open(vq::qp_type::ud, vq::OPS_SEND);
    vq::ah *ah = A.ah_to(B.ctx);
    ASSERT_NE(ah, nullptr);
    const mlx5_wqe_av &av = static_cast<mlx5::mlx5_ah *>(ah)->av;
    std::uint32_t pi = cur();
    // The data setter and set_ud_addr in either order.
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    vq::wr_set_ud_addr(q, ah, 0x1234, 0xabcd);
    vq::wr_set_sge(q, m->lkey, a(0), 100);
    q->wr_flags = 0;
    vq::wr_send(q);
    vq::wr_set_sge(q, m->lkey, a(0), 100);
    vq::wr_set_ud_addr(q, ah, 0x1234, 0xabcd);
    ASSERT_EQ(vq::wr_complete(q), 0);
    for (int k = 0; k < 2; k++) {
        alignas(64) std::uint8_t w[128] = {};
        mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi + 2 * k), MLX5_OPCODE_SEND,
                            0, qpn(), k ? 0 : MLX5_WQE_CTRL_CQ_UPDATE, 5, 0, 0);
        mlx5_wqe_av avc = av;
        mlx5dv_set_dgram_seg(reinterpret_cast<mlx5_wqe_datagram_seg *>(w + 16), std::uint64_t{0xabcd} << 32,
                             0x1234, 1, avc.stat_rate_sl, avc.fl_mlid, be16toh(avc.rlid), avc.rmac, avc.tclass,
                             avc.hop_limit, be32toh(avc.grh_gid_fl), avc.rgid);
        mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 64), 100, m->lkey, a(0));
        expect_wqe(pi + 2 * k, w, 5);
    }
}

TEST_F(Encoding, SendsCrossingTheSqEndWrap)
{
    open(vq::qp_type::rc, vq::OPS_SEND, {4, 0, 1, 1, 100});
    const std::uint32_t cnt = mq(q)->sqv.wqe_cnt;
    // Walk the producer to the last basic block with zero-length sends
    // (completed by the device between batches).
    vq::mr *rm = B.reg(1 << 16);
    for (std::uint32_t i = 0; i < cnt - 1; i++) {
        ASSERT_EQ(vq::post_recv(peer, i, reinterpret_cast<std::uint64_t>(rm->addr), 64, rm->lkey), 0);
        vq::wr_start(q);
        q->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(q);
        ASSERT_EQ(vq::wr_complete(q), 0);
        vq::wc w = one(q->send_cq);
        ASSERT_EQ(w.status, vq::wc_status::success);
        ASSERT_EQ(one(peer->recv_cq).byte_len, 0u);
    }
    ASSERT_EQ(cur() & (cnt - 1), cnt - 1);
    ASSERT_EQ(vq::post_recv(peer, 99, reinterpret_cast<std::uint64_t>(rm->addr), 128, rm->lkey), 0);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    vq::wr_set_inline_data(q, buf, 100); // 1 + 7 octowords: 2 basic blocks, the second at the ring start
    ASSERT_EQ(vq::wr_complete(q), 0);
    alignas(64) std::uint8_t w[128] = {};
    unsigned octs = put_inline(w + 16, buf, 100);
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, qpn(),
                        MLX5_WQE_CTRL_CQ_UPDATE, static_cast<std::uint8_t>(1 + octs), 0, 0);
    expect_wqe(pi, w, 1 + octs);
    // BlueFlame copies the wrapped WQE in order.
    EXPECT_BYTES_EQ(last_bf_half(q), w, 128);
    vq::wc c = one(q->send_cq);
    EXPECT_EQ(c.status, vq::wc_status::success);
    vq::wc r = one(peer->recv_cq);
    ASSERT_EQ(r.status, vq::wc_status::success);
    EXPECT_EQ(r.byte_len, 100u);
    EXPECT_EQ(std::memcmp(rm->addr, buf, 100), 0) << "the wrapped inline data arrived intact";
    EXPECT_EQ(stats(A).violations, 0u) << model::last_violation(A.ctx);
}

TEST_F(Encoding, ReceiveWqesAreDataSegmentsEndedByTheInvalidKey)
{
    open(vq::qp_type::rc, vq::OPS_SEND, {0, 8, 1, 4, 0});
    vq::sge s[2] = {{a(0), 64, m->lkey}, {a(1000), 32, m->lkey}};
    ASSERT_EQ(vq::post_recv(q, 1, s, 2), 0);
    const mlx5::rq_view &rv = mq(q)->rqv;
    ASSERT_EQ(rv.stride, 64u);
    alignas(64) std::uint8_t w[64] = {};
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w), 64, m->lkey, a(0));
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 16), 32, m->lkey, a(1000));
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 32), 0, MLX5_INVALID_LKEY, 0); // rdma-core set_data_ptr_seg_end
    EXPECT_BYTES_EQ(rv.buf, w, 48);
    EXPECT_EQ(be32toh(rv.dbrec[MLX5_RCV_DBR]), 1u) << "receive doorbell record: WQEs posted";
}

TEST_F(Encoding, SrqWqesStartWithTheNextSegmentAndFollowTheFreeList)
{
    vq::srq_init_attr sa;
    sa.max_wr = 3;
    sa.max_sge = 2;
    vq::srq *s = nullptr;
    ASSERT_EQ(vq::create_srq(A.pd, &sa, &s), 0);
    A.srqs.push_back(s);
    m = A.reg(4096);
    auto *ms = static_cast<mlx5::mlx5_srq *>(s);
    vq::sge sg{reinterpret_cast<std::uint64_t>(m->addr), 100, m->lkey};
    ASSERT_EQ(vq::post_srq_recv(s, 5, &sg, 1), 0);
    ASSERT_EQ(vq::post_srq_recv(s, 6, &sg, 1), 0);
    std::uint8_t *w0 = ms->rq.wqe(0);
    auto *nx = reinterpret_cast<mlx5_wqe_srq_next_seg *>(w0);
    EXPECT_EQ(be16toh(nx->next_wqe_index), 1u);
    alignas(16) std::uint8_t want[32] = {};
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(want), 100, m->lkey, sg.addr);
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(want + 16), 0, MLX5_INVALID_LKEY, 0);
    EXPECT_BYTES_EQ(w0 + 16, want, 32);
    EXPECT_EQ(be32toh(ms->rq.dbrec[0]), 2u) << "SRQ doorbell record: the posting counter";
    EXPECT_EQ(ms->rq.wrid[1], 6u);
}

class RawEncoding : public Encoding {
protected:
    void configure(model::options &o) override { o.eth_min_inline = 18; }
};

TEST_F(Encoding, RawSendWithoutInlineHeadersHasA16ByteEthernetSegment)
{
    open(vq::qp_type::raw_packet, vq::OPS_SEND | vq::OPS_TSO);
    std::uint32_t pi = cur();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED | vq::WR_IP_CSUM;
    vq::wr_send(q);
    vq::wr_set_sge(q, m->lkey, a(0), 60);
    ASSERT_EQ(vq::wr_complete(q), 0);
    alignas(64) std::uint8_t w[64] = {};
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, qpn(),
                        MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
    std::uint8_t no_header[1] = {}; // the helper memcpy()s 0 bytes from it: not null
    mlx5dv_set_eth_seg(reinterpret_cast<mlx5_wqe_eth_seg *>(w + 16), MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM,
                       0, 0, no_header);
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 32), 60, m->lkey, a(0));
    expect_wqe(pi, w, 3);
}

TEST_F(RawEncoding, RawSendInlinesTheFirst18BytesWhenTheDeviceNeedsIt)
{
    open(vq::qp_type::raw_packet, vq::OPS_SEND | vq::OPS_TSO);
    ASSERT_EQ(mq(q)->sq.eth_min_inline, 18u);
    std::uint32_t pi = cur();
    vq::sge s[2] = {{a(0), 10, m->lkey}, {a(100), 50, m->lkey}}; // the header spans both
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    vq::wr_set_sge_list(q, 2, s);
    ASSERT_EQ(vq::wr_complete(q), 0);
    std::uint8_t hdr[18];
    std::memcpy(hdr, buf, 10);
    std::memcpy(hdr + 10, buf + 100, 8);
    alignas(64) std::uint8_t w[64] = {};
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_SEND, 0, qpn(),
                        MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
    mlx5dv_set_eth_seg(reinterpret_cast<mlx5_wqe_eth_seg *>(w + 16), 0, 0, 18, hdr);
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 48), 42, m->lkey, a(108));
    expect_wqe(pi, w, 4);
}

TEST_F(Encoding, RawTsoInlinesTheWholeHeaderWithMss)
{
    open(vq::qp_type::raw_packet, vq::OPS_SEND | vq::OPS_TSO);
    std::uint32_t pi = cur();
    std::uint8_t hdr[54];
    for (int i = 0; i < 54; i++)
        hdr[i] = static_cast<std::uint8_t>(0x40 + i);
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED | vq::WR_IP_CSUM;
    vq::wr_send_tso(q, hdr, 54, 1000);
    vq::wr_set_sge(q, m->lkey, a(0), 3000);
    ASSERT_EQ(vq::wr_complete(q), 0);
    alignas(64) std::uint8_t w[128] = {};
    unsigned eoct = (14 + 54 + 15) / 16; // rdma-core set_tso_eth_seg: align(14 + hdr_sz, 16)
    mlx5dv_set_ctrl_seg(reinterpret_cast<ctrl *>(w), static_cast<std::uint16_t>(pi), MLX5_OPCODE_TSO, 0, qpn(),
                        MLX5_WQE_CTRL_CQ_UPDATE, static_cast<std::uint8_t>(1 + eoct + 1), 0, 0);
    mlx5dv_set_eth_seg(reinterpret_cast<mlx5_wqe_eth_seg *>(w + 16), MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM,
                       1000, 54, hdr);
    mlx5dv_set_data_seg(reinterpret_cast<dseg *>(w + 16 + eoct * 16), 3000, m->lkey, a(0));
    expect_wqe(pi, w, 1 + eoct + 1);
}

TEST_F(Encoding, AbortAndLatchedErrorsLeaveTheProducerWhereItWas)
{
    open(vq::qp_type::rc, vq::OPS_SEND | vq::OPS_RDMA_WRITE, {0, 0, 1, 1, 16});
    std::uint32_t pi = cur(), rec = dbrec();
    vq::wr_start(q);
    vq::wr_send(q);
    vq::wr_set_sge(q, m->lkey, a(0), 8);
    vq::wr_abort(q);
    EXPECT_EQ(cur(), pi);
    vq::wr_start(q);
    vq::wr_send(q);
    vq::wr_set_sge(q, m->lkey, a(0), 8);
    vq::wr_rdma_write(q, 1, 0);
    vq::wr_set_inline_data(q, buf, mq(q)->sq.max_inline + 1); // over max_inline_data
    EXPECT_EQ(vq::wr_complete(q), -FI_EMSGSIZE);
    EXPECT_EQ(cur(), pi);
    EXPECT_EQ(dbrec(), rec) << "nothing reached the device";
    EXPECT_EQ(mq(q)->sqv.bf_reg[0] | mq(q)->sqv.bf_reg[1], 0) << "no doorbell";
}

} // namespace
} // namespace shunt::test
