/* drivers/mlx5: the posting fast path. Builders and setters write PRM
 * segments straight into the send queue; wr_complete rings one doorbell per
 * batch. The session follows rdma-core's mlx5 provider (providers/mlx5/qp.c:
 * mlx5_send_wr_*), with one difference: a WQE is finished where the next
 * builder or wr_complete begins, because vq needs no data setter for
 * zero-length operations. */
#include <algorithm>
#include <cstring>

#include "env/log.h"
#include "mlx5.h"

namespace shunt::drv::mlx5 {

namespace {

using vq::wc_opcode;

constexpr unsigned known_flags = vq::WR_FENCE | vq::WR_SIGNALED | vq::WR_SOLICITED | vq::WR_INLINE |
                                 vq::WR_IP_CSUM;

/** fm_ce_se bits of wr_flags & 7 (FENCE, SIGNALED, SOLICITED). */
constexpr std::uint8_t fm_ce_se_of[8] = {
    0,
    fence_bits,
    ce_always,
    fence_bits | ce_always,
    se_bit,
    fence_bits | se_bit,
    ce_always | se_bit,
    fence_bits | ce_always | se_bit,
};

inline mlx5_qp *to_qp(vq::qp *q) noexcept { return static_cast<mlx5_qp *>(q); }

[[gnu::cold]] void latch(mlx5_qp *q, int e) noexcept
{
    if (!q->sq.err)
        q->sq.err = e;
}
void latch_vq(vq::qp *q, int e) noexcept { latch(to_qp(q), e); }

SHUNT_LOG_COMPONENT(mlx5_post_log, "mlx5");

void session_misuse(mlx5_qp *q, const char *what) noexcept
{
    common::session_misuse(mlx5_post_log, q->qp_num, what);
}

/** The byte @p off past @p p inside the SQ ring (wrapping at its end). */
inline std::uint8_t *wq_at(const send_state &s, std::uint8_t *p, std::size_t off) noexcept
{
    std::size_t left = static_cast<std::size_t>(s.qend - p);
    return off < left ? p + off : s.buf + (off - left);
}

/** Copy @p n bytes to the WQE stream at @p dst with wrap; @return the position after. */
inline std::uint8_t *copy_to_wq(const send_state &s, std::uint8_t *dst, const void *src, std::size_t n) noexcept
{
    std::size_t left = static_cast<std::size_t>(s.qend - dst);
    if (n >= left) [[unlikely]] {
        std::memcpy(dst, src, left);
        src = static_cast<const std::uint8_t *>(src) + left;
        n -= left;
        dst = s.buf;
    }
    std::memcpy(dst, src, n);
    return dst + n;
}

/** Close the open WQE: its ds, and cur_post past its basic blocks. */
inline void finish(send_state &s) noexcept
{
    s.ctrl->qpn_ds = s.qpn_be | be32(s.size); // ds < 64: its own byte
    s.last_bbs = (s.size + 3) >> 2;
    s.cur_post += s.last_bbs;
}

/** Finish the open WQE if there is one, checking the setters it needed. */
inline void close_open(mlx5_qp *q) noexcept
{
    send_state &s = q->sq;
    if (!s.ctrl)
        return;
    if (s.need & (need_addr | need_data)) [[unlikely]] {
        latch(q, -FI_EINVAL); // set_ud_addr missing on UD, result SGE missing on an atomic
    }
    finish(s);
    s.last_ctrl_ = s.ctrl;
    s.ctrl = nullptr;
}

/** Start a WQE: overflow check, bookkeeping, control segment. @p fixed:
 *  bytes of fixed segments after the control segment the builder will write.
 *  @return the control segment, or null when the batch has failed. */
inline mlx5_wqe_ctrl_seg *begin(mlx5_qp *q, std::uint8_t opcode, wc_opcode wop, unsigned fixed) noexcept
{
    send_state &s = q->sq;
    close_open(q);
    if (s.err) [[unlikely]]
        return nullptr;
    unsigned f = q->wr_flags;
    if (f & ~s.allowed_flags) [[unlikely]] {
        // WR_IP_CSUM: only RAW_PACKET has an Ethernet segment for cs_flags
        // (UD checksum offload is for IPoIB underlay QPs, not these).
        latch(q, (f & ~known_flags) ? -FI_EINVAL : -FI_EOPNOTSUPP);
        return nullptr;
    }
    // Read once, before the tail: the acquire load keeps later loads after it.
    const std::uint32_t posted = s.head + s.nreq, pi = s.cur_post;
    if (posted - s.tail.load(std::memory_order_acquire) >= s.max_post) [[unlikely]] {
        latch(q, -FI_EAGAIN); // the poller's tail store (release) makes its slots free
        return nullptr;
    }
    const std::uint32_t idx = pi & s.mask;
    auto *w = s.buf + (idx << wqe_shift);
    auto *ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg *>(w);
    wqe_meta &m = s.meta[idx];
    m.wr_id = q->wr_id;
    const std::uint64_t done_op = (posted + 1) | static_cast<std::uint64_t>(wop) << 32;
    std::memcpy(&m.done, &done_op, sizeof done_op); // done and opcode in one store
    ctrl->opmod_idx_opcode = be32(((pi & 0xffff) << 8) | opcode);
    std::uint32_t fence = (f & vq::WR_FENCE) ? 0 : s.fm_cache;
    s.fm_cache = 0;
    // signature, dci_stream_channel_id and fm_ce_se share the third word; imm
    // (0 unless the builder sets it) the fourth: one store.
    const std::uint64_t w23 = s.ctrl_w2[f & 7] | fence << 24;
    if (s.io)
        stamp_wqe(m, w23);
    std::memcpy(w + 8, &w23, 8);
    s.ctrl = ctrl;
    // Segments ending inside the WQE's first BB cannot reach the SQ's end.
    s.data = octo + fixed < wqe_bb ? w + octo + fixed : wq_at(s, w, octo + fixed);
    s.size = (octo + fixed) / octo;
    s.need = 0;
    s.nreq++;
    return ctrl;
}

/* ---------------- Session ---------------- */

/** The batch's snapshot: what wr_start does after the lock. The single-call
 *  posts of a QP with a thread domain start their one-request batch here,
 *  without the session's flag. */
inline void begin_batch(mlx5_qp *q) noexcept
{
    send_state &s = q->sq;
    s.cur_post_rb = s.cur_post;
    s.fm_cache_rb = s.fm_cache;
    s.err = 0;
    s.nreq = 0;
    s.inl = 0;
    s.nbind = 0;
    s.ctrl = nullptr;
    s.batch_bytes = 0;
    if (s.not_ready) [[unlikely]]
        latch(q, -FI_EOPBADSTATE); // neither RTS nor ERR (in ERR the device flushes what is posted)
}

template <bool Locked>
void wr_start(vq::qp *vqp) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if constexpr (Locked) {
        if (q->session.mine()) [[unlikely]] {
            // Taking the lock again would never return: the open batch fails instead.
            session_misuse(q, "wr_start while this thread's session is open");
            latch(q, -FI_EOPBADSTATE);
            return;
        }
        q->lock.lock();
        q->session.open();
    } else {
        // One thread posts (thread domain): a flag is enough to turn its
        // single-call posts away until wr_complete or wr_abort. No credits:
        // the single-call inline send looks at the flag (post_send_refill).
        if constexpr (common::check_unlocked_sessions)
            if (q->sq.session_open) [[unlikely]]
                session_misuse(q, "wr_start while the session is open");
        q->sq.session_open = 1;
        q->sq.fast_credits = 0;
    }
    begin_batch(q);
}

/** The other BlueFlame half for the next doorbell (rdma-core bf->offset ^=
 *  buf_size): the pair starts on a multiple of twice the half's size. */
inline void toggle_bf(send_state &s) noexcept
{
    s.bf_cur = reinterpret_cast<std::uint8_t *>(reinterpret_cast<std::uintptr_t>(s.bf_cur) ^ s.bf_size);
}

/** Ring the doorbell for the batch (rdma-core post_send_db). */
inline void ring(send_state &s) noexcept
{
    s.head += s.nreq;
    s.fast_credits = 0; // the batch took slots: the next single-call send looks again
    // WQE stores before the doorbell record that tells the device they exist.
    udma_to_device_barrier();
    dbrec_store_counter(&s.dbrec[MLX5_SND_DBR], static_cast<std::uint16_t>(s.cur_post));
    // The doorbell record before the BlueFlame/doorbell store (write-combining).
    mmio_wc_start();
    auto *ctrl = reinterpret_cast<std::uint8_t *>(s.last_ctrl_);
    if (s.nreq == 1 && s.inl && s.last_bbs * wqe_bb <= s.bf_size) {
        if (s.last_bbs == 1) // one BB never wraps: one burst, no loop
            bf_copy_bb(s.bf_cur, ctrl);
        else
            bf_copy(s.bf_cur, ctrl, s.last_bbs * wqe_bb, s.buf, s.qend);
    } else {
        std::uint64_t first;
        std::memcpy(&first, ctrl, 8);
        mmio_write64(s.bf_cur, first);
    }
    // Out of the write-combining buffer now, before the next doorbell can pass it.
    mmio_flush_writes();
    toggle_bf(s);
}

[[gnu::cold]] int complete_error(mlx5_qp *q) noexcept
{
    send_state &s = q->sq;
    s.cur_post = s.cur_post_rb;
    s.fm_cache = s.fm_cache_rb;
    s.nreq = 0;
    return s.err;
}

/** Statistics of a batch about to be rung: its requests and bytes, and the
 *  queue's depth with them. */
inline void count_batch(send_state &s) noexcept
{
    env::stats::io_stats *io = s.io; // once: the counters' stores may alias s
    if (!io)
        return;
    const std::uint32_t nreq = s.nreq;
    env::stats::on_tx(io, nreq, s.batch_bytes);
    env::stats::on_depth(io, s.head + nreq - s.tail.load(std::memory_order_relaxed)); // ring() adds nreq to head
}

/** Ring the batch, or discard it when it latched an error: what
 *  wr_complete does before the lock is released. */
inline int commit_batch(mlx5_qp *q) noexcept
{
    send_state &s = q->sq;
    close_open(q);
    int rc = 0;
    if (s.err) [[unlikely]] {
        rc = complete_error(q);
        if (rc != -FI_EAGAIN)
            env::stats::on_error(s.io);
    } else if (s.nreq) {
        count_batch(s);
        ring(s);
        for (std::uint32_t i = 0; i < s.nbind; i++) // the window's key is the bound one from now on
            s.binds[i].mw->rkey = s.binds[i].rkey;
    }
    return rc;
}

template <bool Locked>
int wr_complete(vq::qp *vqp) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if constexpr (Locked) {
        if (!q->session.mine()) [[unlikely]] {
            session_misuse(q, "wr_complete without wr_start");
            return -FI_EOPBADSTATE; // no batch of ours: nothing to commit, no lock to release
        }
    } else if constexpr (common::check_unlocked_sessions) {
        if (!q->sq.session_open) [[unlikely]]
            session_misuse(q, "wr_complete without wr_start");
    }
    int rc = commit_batch(q);
    if constexpr (Locked) {
        q->session.close();
        q->lock.unlock();
    } else {
        q->sq.session_open = 0;
    }
    return rc;
}

template <bool Locked>
void wr_abort(vq::qp *vqp) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if constexpr (Locked) {
        if (!q->session.mine()) [[unlikely]] {
            session_misuse(q, "wr_abort without wr_start");
            return;
        }
    } else if constexpr (common::check_unlocked_sessions) {
        if (!q->sq.session_open) [[unlikely]]
            session_misuse(q, "wr_abort without wr_start");
    }
    send_state &s = q->sq;
    s.cur_post = s.cur_post_rb;
    s.fm_cache = s.fm_cache_rb;
    s.ctrl = nullptr;
    s.nreq = 0;
    s.nbind = 0;
    if constexpr (Locked) {
        q->session.close();
        q->lock.unlock();
    } else {
        s.session_open = 0;
    }
}

/* ---------------- Builders ---------------- */

/** Bytes of the transport segment after ctrl for sends on this QP type. */
inline unsigned send_fixed(const mlx5_qp *q) noexcept
{
    return q->type == vq::qp_type::ud ? sizeof(mlx5_wqe_datagram_seg) : 0;
}

inline void mark_send(mlx5_qp *q) noexcept
{
    if (q->type == vq::qp_type::ud)
        q->sq.need |= need_addr;
}

/** RC and UC: ctrl, then the data. */
void b_send(vq::qp *vqp) noexcept
{
    begin(to_qp(vqp), MLX5_OPCODE_SEND, wc_opcode::send, 0); // null: the error is latched
}

/** UD: ctrl, the datagram segment (wr_set_ud_addr), then the data. */
void b_send_ud(vq::qp *vqp) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if (begin(q, MLX5_OPCODE_SEND, wc_opcode::send, sizeof(mlx5_wqe_datagram_seg)))
        q->sq.need |= need_addr;
}

void b_send_imm(vq::qp *vqp, std::uint32_t imm) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if (auto *c = begin(q, MLX5_OPCODE_SEND_IMM, wc_opcode::send, send_fixed(q))) {
        c->imm = imm; // already network byte order
        mark_send(q);
    }
}

void b_send_inv(vq::qp *vqp, std::uint32_t rkey) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if (auto *c = begin(q, MLX5_OPCODE_SEND_INVAL, wc_opcode::send, 0))
        c->imm = be32(rkey);
}

/** The remote-address segment right after the control segment (never wrapped:
 *  a WQE starts on a BB and this is its second octoword). */
inline void set_raddr(mlx5_wqe_ctrl_seg *c, std::uint32_t rkey, std::uint64_t raddr) noexcept
{
    auto *r = reinterpret_cast<mlx5_wqe_raddr_seg *>(reinterpret_cast<std::uint8_t *>(c) + octo);
    r->raddr = be64(raddr);
    r->rkey = be32(rkey);
    r->reserved = 0;
}

void b_write(vq::qp *vqp, std::uint32_t rkey, std::uint64_t raddr) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if (auto *c = begin(q, MLX5_OPCODE_RDMA_WRITE, wc_opcode::rdma_write, sizeof(mlx5_wqe_raddr_seg)))
        set_raddr(c, rkey, raddr);
}

void b_write_imm(vq::qp *vqp, std::uint32_t rkey, std::uint64_t raddr, std::uint32_t imm) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if (auto *c = begin(q, MLX5_OPCODE_RDMA_WRITE_IMM, wc_opcode::rdma_write, sizeof(mlx5_wqe_raddr_seg))) {
        set_raddr(c, rkey, raddr);
        c->imm = imm;
    }
}

void b_read(vq::qp *vqp, std::uint32_t rkey, std::uint64_t raddr) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if (auto *c = begin(q, MLX5_OPCODE_RDMA_READ, wc_opcode::rdma_read, sizeof(mlx5_wqe_raddr_seg))) {
        set_raddr(c, rkey, raddr);
        q->sq.need |= need_no_inline;
    }
}

inline void atomic(mlx5_qp *q, std::uint8_t op, wc_opcode wop, std::uint32_t rkey, std::uint64_t raddr,
                   std::uint64_t swap_add, std::uint64_t compare) noexcept
{
    if (raddr & 7) [[unlikely]] {
        close_open(q);
        latch(q, -FI_EINVAL);
        return;
    }
    auto *c = begin(q, op, wop, sizeof(mlx5_wqe_raddr_seg) + sizeof(mlx5_wqe_atomic_seg));
    if (!c)
        return;
    set_raddr(c, rkey, raddr);
    auto *a = reinterpret_cast<mlx5_wqe_atomic_seg *>(reinterpret_cast<std::uint8_t *>(c) + 2 * octo);
    a->swap_add = be64(swap_add);
    a->compare = be64(compare);
    q->sq.need |= need_data | need_no_inline | need_atomic;
}

void b_cas(vq::qp *vqp, std::uint32_t rkey, std::uint64_t raddr, std::uint64_t compare, std::uint64_t swap) noexcept
{
    atomic(to_qp(vqp), MLX5_OPCODE_ATOMIC_CS, wc_opcode::comp_swap, rkey, raddr, swap, compare);
}

void b_faa(vq::qp *vqp, std::uint32_t rkey, std::uint64_t raddr, std::uint64_t add) noexcept
{
    atomic(to_qp(vqp), MLX5_OPCODE_ATOMIC_FA, wc_opcode::fetch_add, rkey, raddr, add, 0);
}

/** UMR WQE for bind_mw / local_inv (rdma-core set_umr_*_seg): the UMR control
 *  segment, the mkey context and, when binding, one KLM naming the region. */
void umr(mlx5_qp *q, std::uint32_t orig_key, std::uint32_t new_key, const vq::mw_bind_info *bi, wc_opcode wop) noexcept
{
    std::uint64_t len = bi ? bi->length : 0;
    if (len > (1ull << 31)) [[unlikely]] { // a KLM covers up to 2 GiB
        close_open(q);
        latch(q, -FI_EOPNOTSUPP);
        return;
    }
    auto *c = begin(q, MLX5_OPCODE_UMR, wop, 0);
    if (!c)
        return;
    send_state &s = q->sq;
    c->imm = be32(orig_key);
    std::uint8_t *p = s.data;
    auto *uc = reinterpret_cast<mlx5_wqe_umr_ctrl_seg *>(p);
    std::memset(uc, 0, sizeof *uc);
    uc->flags = MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET | MLX5_WQE_UMR_CTRL_FLAG_INLINE;
    std::uint64_t mask = MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
                         MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN;
    if (len) {
        uc->klm_octowords = be16(4); // one KLM padded to 8 entries' space: ALIGN(1, 3) / 2 (rdma-core get_klm_octo)
        uc->flags |= MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE;
        mask |= MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN | MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC;
    } else {
        uc->klm_octowords = 0;
        uc->flags |= MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN;
    }
    uc->mkey_mask = be64(mask);
    p = wq_at(s, p, sizeof *uc);
    auto *mk = reinterpret_cast<mlx5_wqe_mkey_context_seg *>(p);
    std::memset(mk, 0, sizeof *mk);
    mk->qpn_mkey = be32((new_key & 0xff) | (len ? q->qp_num << 8 : 0xffffff00u));
    if (len) {
        unsigned a = bi->mw_access_flags;
        mk->access_flags = static_cast<std::uint8_t>(
            ((a & vq::ACCESS_LOCAL_WRITE) ? MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE : 0) |
            ((a & vq::ACCESS_REMOTE_WRITE) ? MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE : 0) |
            ((a & vq::ACCESS_REMOTE_READ) ? MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ : 0) |
            ((a & vq::ACCESS_REMOTE_ATOMIC) ? MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC : 0));
        mk->start_addr = be64(bi->addr);
        mk->len = be64(len);
    } else {
        mk->free = MLX5_WQE_MKEY_CONTEXT_FREE;
    }
    p = wq_at(s, p, sizeof *mk);
    s.size += (sizeof *uc + sizeof *mk) / octo;
    if (len) {
        auto *k = reinterpret_cast<mlx5_wqe_umr_klm_seg *>(p);
        std::memset(p, 0, 64);
        k->byte_count = be32(static_cast<std::uint32_t>(len));
        k->mkey = be32(bi->mr->lkey);
        k->address = be64(bi->addr);
        s.size += 64 / octo;
    }
    s.fm_cache = small_fence_bits; // the next WQE waits for the UMR (rdma-core _build_umr_wqe)
    s.need |= need_no_data;
}

void b_bind_mw(vq::qp *vqp, vq::mw *w, std::uint32_t rkey, const vq::mw_bind_info *bi) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    send_state &s = q->sq;
    // The window's key when this bind runs: an earlier bind of it in this
    // batch has given it a new one already (w->rkey changes at wr_complete).
    std::uint32_t cur = w ? w->rkey : 0;
    for (std::uint32_t i = s.nbind; i-- > 0;)
        if (s.binds[i].mw == w) {
            cur = s.binds[i].rkey;
            break;
        }
    if (!w || !bi || w->ctx != vqp->ctx || (bi->mr && bi->mr->ctx != vqp->ctx) || (bi->length && !bi->mr) ||
        (rkey & 0xffffff00u) != (cur & 0xffffff00u) || (bi->mw_access_flags & ~vq::ACCESS_MW_ALL)) [[unlikely]] {
        close_open(q);
        latch(q, -FI_EINVAL);
        return;
    }
    umr(q, cur, rkey, bi, wc_opcode::bind_mw);
    if (s.err)
        return;
    if (s.nbind == s.max_bind) [[unlikely]] {
        latch(q, -FI_ENOSPC);
        return;
    }
    s.binds[s.nbind++] = {w, rkey};
    // An error completion of this WQE gives the window its key before it back.
    std::uint32_t idx = static_cast<std::uint32_t>(reinterpret_cast<std::uint8_t *>(s.ctrl) - s.buf) >> wqe_shift;
    s.bind_undo[idx] = {w, cur, rkey};
}

void b_local_inv(vq::qp *vqp, std::uint32_t rkey) noexcept
{
    umr(to_qp(vqp), rkey, 0, nullptr, wc_opcode::local_inv);
}

/** RAW_PACKET sends: the Ethernet segment (rdma-core mlx5_send_wr_send_eth). */
inline mlx5_wqe_eth_seg *eth_begin(mlx5_qp *q, std::uint8_t opcode, wc_opcode wop) noexcept
{
    auto *c = begin(q, opcode, wop, 0);
    if (!c)
        return nullptr;
    send_state &s = q->sq;
    auto *e = reinterpret_cast<mlx5_wqe_eth_seg *>(s.data);
    std::memset(e, 0, sizeof *e);
    if (q->wr_flags & vq::WR_IP_CSUM)
        e->cs_flags = MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM;
    return e;
}

void b_send_eth(vq::qp *vqp) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    send_state &s = q->sq;
    auto *e = eth_begin(q, MLX5_OPCODE_SEND, wc_opcode::send);
    if (!e)
        return;
    // With a minimum inline header, the first bytes of the data go into the
    // segment (inline_hdr_start .. inline_hdr, 18 bytes); the segment is then 32
    // bytes, else 16 (rdma-core: eseg_sz = (offsetof(inline_hdr) + min) & ~0xf).
    unsigned esz = (offsetof(mlx5_wqe_eth_seg, inline_hdr) + s.eth_min_inline) & ~0xfu;
    s.eth = s.eth_min_inline ? e : nullptr;
    s.data = wq_at(s, s.data, esz);
    s.size += esz / octo;
    if (s.eth_min_inline)
        s.need |= need_data;
}

void b_send_tso(vq::qp *vqp, const void *hdr, std::uint16_t hdr_sz, std::uint16_t mss) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    send_state &s = q->sq;
    if (!hdr || mss == 0 || hdr_sz < eth_l2_min_header || hdr_sz > s.max_tso_header) [[unlikely]] {
        close_open(q);
        latch(q, -FI_EINVAL);
        return;
    }
    auto *e = eth_begin(q, MLX5_OPCODE_TSO, wc_opcode::tso);
    if (!e)
        return;
    e->mss = be16(mss);
    e->inline_hdr_sz = be16(hdr_sz);
    // The whole header is inlined from inline_hdr_start on, wrapping at the SQ end
    // (rdma-core set_tso_eth_seg); the segment then spans align(14 + hdr_sz, 16).
    std::uint8_t *start = reinterpret_cast<std::uint8_t *>(e) + offsetof(mlx5_wqe_eth_seg, inline_hdr_start);
    copy_to_wq(s, start, hdr, hdr_sz);
    unsigned esz = (offsetof(mlx5_wqe_eth_seg, inline_hdr_start) + hdr_sz + 15u) & ~15u;
    s.data = wq_at(s, s.data, esz);
    s.size += esz / octo;
    s.eth = nullptr;
}

/* ---------------- Setters ---------------- */

/** Common checks of a data setter. @return false when the call is to be ignored. */
inline bool data_ok(mlx5_qp *q, bool is_inline) noexcept
{
    send_state &s = q->sq;
    if (s.err) [[unlikely]]
        return false;
    if (!s.ctrl || (s.need & has_data)) [[unlikely]] {
        latch(q, -FI_EINVAL); // no builder yet, or a second data setter
        return false;
    }
    if (s.need & (need_no_data | (is_inline ? need_no_inline : 0))) [[unlikely]] {
        latch(q, -FI_EOPNOTSUPP);
        return false;
    }
    s.need = static_cast<std::uint8_t>((s.need | has_data) & ~need_data);
    return true;
}

/** Message-size limit of the open WQE's operation. */
inline bool size_ok(mlx5_qp *q, std::uint64_t total) noexcept
{
    if (total > q->sq.max_msg) [[unlikely]] {
        latch(q, -FI_EMSGSIZE);
        return false;
    }
    return true;
}

inline void put_dseg(send_state &s, std::uint32_t lkey, std::uint64_t addr, std::uint32_t len) noexcept
{
    if (s.data == s.qend) [[unlikely]]
        s.data = s.buf;
    mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg *>(s.data), len, lkey, addr);
    s.data += octo;
    s.size++;
}

/** RAW_PACKET with a minimum inline header: copy the first eth_min_inline bytes
 *  of the gathered data into the Ethernet segment. @p get(i, &p, &n) yields piece i.
 *  @return bytes taken from the pieces, or -1 when the data is too short. */
template <class Get>
inline long eth_inline_headers(mlx5_qp *q, std::size_t n, Get get) noexcept
{
    send_state &s = q->sq;
    mlx5_wqe_eth_seg *e = s.eth;
    std::uint8_t *dst = e->inline_hdr_start;
    std::size_t want = s.eth_min_inline, got = 0;
    for (std::size_t i = 0; i < n && got < want; i++) {
        const std::uint8_t *p;
        std::size_t len;
        get(i, &p, &len);
        std::size_t k = len < want - got ? len : want - got;
        std::memcpy(dst + got, p, k);
        got += k;
    }
    if (got < want) [[unlikely]]
        return -1;
    e->inline_hdr_sz = be16(static_cast<std::uint16_t>(want));
    s.eth = nullptr;
    return static_cast<long>(want);
}

void s_sge(vq::qp *vqp, std::uint32_t lkey, std::uint64_t addr, std::uint32_t len) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    send_state &s = q->sq;
    if (!data_ok(q, false))
        return;
    if ((s.need & need_atomic) && len != 8) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return;
    }
    if (!size_ok(q, len))
        return;
    if (s.io)
        s.batch_bytes += len;
    if (s.eth) {
        long k = eth_inline_headers(q, 1, [&](std::size_t, const std::uint8_t **p, std::size_t *n) {
            *p = reinterpret_cast<const std::uint8_t *>(addr);
            *n = len;
        });
        if (k < 0) [[unlikely]] {
            latch(q, -FI_EINVAL);
            return;
        }
        addr += static_cast<std::uint64_t>(k);
        len -= static_cast<std::uint32_t>(k);
    }
    if (len) // a zero-length SGE is no segment (rdma-core _mlx5_send_wr_set_sge)
        put_dseg(s, lkey, addr, len);
}

void s_sge_list(vq::qp *vqp, std::size_t n, const vq::sge *sg) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    send_state &s = q->sq;
    if (!data_ok(q, false))
        return;
    if (n > s.max_sge) [[unlikely]] {
        latch(q, -FI_E2BIG);
        return;
    }
    if (!sg && n) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return;
    }
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < n; i++)
        total += sg[i].length;
    if ((s.need & need_atomic) && total != 8) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return;
    }
    if (!size_ok(q, total))
        return;
    if (s.io)
        s.batch_bytes += total;
    std::size_t first = 0;
    std::uint32_t skip = 0;
    if (s.eth) {
        long k = eth_inline_headers(q, n, [&](std::size_t i, const std::uint8_t **p, std::size_t *len) {
            *p = reinterpret_cast<const std::uint8_t *>(sg[i].addr);
            *len = sg[i].length;
        });
        if (k < 0) [[unlikely]] {
            latch(q, -FI_EINVAL);
            return;
        }
        std::uint64_t left = static_cast<std::uint64_t>(k);
        while (first < n && left >= sg[first].length)
            left -= sg[first++].length;
        skip = static_cast<std::uint32_t>(left);
    }
    for (std::size_t i = first; i < n; i++) {
        std::uint32_t len = sg[i].length - skip;
        if (len)
            put_dseg(s, sg[i].lkey, sg[i].addr + skip, len);
        skip = 0;
    }
}

/** Write an inline segment of the concatenated pieces (rdma-core _mlx5_send_wr_set_inline_data_list). */
template <class Get>
inline void put_inline(mlx5_qp *q, std::size_t n, std::size_t total, Get get) noexcept
{
    send_state &s = q->sq;
    s.inl = 1; // prefer BlueFlame
    if (s.io)
        s.batch_bytes += total;
    if (!total)
        return;
    if (s.data == s.qend) [[unlikely]]
        s.data = s.buf;
    std::uint8_t *hdr = s.data;
    std::uint8_t *dst = wq_at(s, hdr, 4);
    for (std::size_t i = 0; i < n; i++) {
        const std::uint8_t *p;
        std::size_t len;
        get(i, &p, &len);
        if (len)
            dst = copy_to_wq(s, dst, p, len);
    }
    std::uint32_t bc = be32(static_cast<std::uint32_t>(total) | MLX5_INLINE_SEG);
    std::memcpy(hdr, &bc, 4);
    std::uint32_t octs = static_cast<std::uint32_t>((total + 4 + octo - 1) / octo);
    s.data = wq_at(s, hdr, octs * octo);
    s.size += octs;
}

/** Longest copy_inline: what one BB holds after ctrl and the inline header. */
constexpr std::size_t copy_inline_max = wqe_bb - octo - 4;

/** Copy @p n (1..copy_inline_max) bytes to @p d with no call: overlapping
 *  loads and stores, none past either end. */
inline void copy_inline(std::uint8_t *d, const std::uint8_t *s, std::uint32_t n) noexcept
{
    if (n - 8 <= 8) [[likely]] { // 8..16
        std::uint64_t x, y;
        std::memcpy(&x, s, 8);
        std::memcpy(&y, s + n - 8, 8);
        std::memcpy(d, &x, 8);
        std::memcpy(d + n - 8, &y, 8);
    } else if (n < 8) {
        if (n >= 4) {
            std::uint32_t x, y;
            std::memcpy(&x, s, 4);
            std::memcpy(&y, s + n - 4, 4);
            std::memcpy(d, &x, 4);
            std::memcpy(d + n - 4, &y, 4);
        } else {
            d[0] = s[0];
            d[n - 1] = s[n - 1];
            d[n >> 1] = s[n >> 1];
        }
    } else { // 17..44
        __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s));
        __m128i z = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + n - 16));
        if (n > 32) { // bytes 16..31 are the source's only below 33
            __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 16));
            _mm_storeu_si128(reinterpret_cast<__m128i *>(d + 16), y);
        }
        _mm_storeu_si128(reinterpret_cast<__m128i *>(d), x);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(d + n - 16), z);
    }
}

/** s_inline's general case: RAW_PACKET's inline headers first, and data
 *  that wraps at the SQ's end or is longer than copy_inline takes. */
[[gnu::noinline]] void s_inline_general(mlx5_qp *q, const std::uint8_t *p, std::size_t len) noexcept
{
    send_state &s = q->sq;
    if (s.eth) {
        long k = eth_inline_headers(q, 1, [&](std::size_t, const std::uint8_t **x, std::size_t *n) {
            *x = p;
            *n = len;
        });
        if (k < 0) [[unlikely]] {
            latch(q, -FI_EINVAL);
            return;
        }
        p += k;
        len -= static_cast<std::size_t>(k);
    }
    if (len > s.max_inline) [[unlikely]] {
        latch(q, -FI_EMSGSIZE);
        return;
    }
    put_inline(q, 1, len, [&](std::size_t, const std::uint8_t **x, std::size_t *n) {
        *x = p;
        *n = len;
    });
}

void s_inline(vq::qp *vqp, const void *addr, std::size_t len) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    send_state &s = q->sq;
    if (!data_ok(q, true))
        return;
    if (!addr && len) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return;
    }
    const auto *p = static_cast<const std::uint8_t *>(addr);
    std::uint8_t *hdr = s.data;
    // 1..44 bytes with their 4-byte header before the SQ's end (where data
    // may also stand when the previous segment ended there), and no
    // Ethernet headers to take first: written here with no call.
    const std::size_t left = static_cast<std::size_t>(s.qend - hdr);
    if (len - 1 >= copy_inline_max || len + 4 > left || s.eth || len > s.max_inline) [[unlikely]]
        return s_inline_general(q, p, len);
    s.inl = 1; // prefer BlueFlame
    if (s.io)
        s.batch_bytes += len;
    copy_inline(hdr + 4, p, static_cast<std::uint32_t>(len));
    const std::uint32_t bc = be32(static_cast<std::uint32_t>(len) | MLX5_INLINE_SEG);
    std::memcpy(hdr, &bc, 4);
    const std::uint32_t octs = static_cast<std::uint32_t>((len + 4 + octo - 1) / octo);
    // left is a multiple of 16 and at least len + 4: the segment ends at or before the SQ's end.
    s.data = octs * octo < left ? hdr + octs * octo : s.buf;
    s.size += octs;
}

void s_inline_list(vq::qp *vqp, std::size_t n, const vq::data_buf *b) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    send_state &s = q->sq;
    if (!data_ok(q, true))
        return;
    if (!b && n) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return;
    }
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; i++) {
        if (!b[i].addr && b[i].length) [[unlikely]] {
            latch(q, -FI_EINVAL);
            return;
        }
        total += b[i].length;
    }
    std::size_t first = 0, skip = 0;
    if (s.eth) {
        long k = eth_inline_headers(q, n, [&](std::size_t i, const std::uint8_t **p, std::size_t *len) {
            *p = static_cast<const std::uint8_t *>(b[i].addr);
            *len = b[i].length;
        });
        if (k < 0) [[unlikely]] {
            latch(q, -FI_EINVAL);
            return;
        }
        std::size_t left = static_cast<std::size_t>(k);
        total -= left;
        while (first < n && left >= b[first].length)
            left -= b[first++].length;
        skip = left;
    }
    if (total > s.max_inline) [[unlikely]] {
        latch(q, -FI_EMSGSIZE);
        return;
    }
    put_inline(q, n - first, total, [&](std::size_t i, const std::uint8_t **p, std::size_t *len) {
        std::size_t off = i == 0 ? skip : 0;
        *p = static_cast<const std::uint8_t *>(b[first + i].addr) + off;
        *len = b[first + i].length - off;
    });
}

void s_ud_addr(vq::qp *vqp, vq::ah *vah, std::uint32_t qpn, std::uint32_t qkey) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    send_state &s = q->sq;
    if (s.err) [[unlikely]]
        return;
    if (!s.ctrl || !vah) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return;
    }
    auto *ah = static_cast<mlx5_ah *>(vah);
    auto *d = reinterpret_cast<mlx5_wqe_datagram_seg *>(reinterpret_cast<std::uint8_t *>(s.ctrl) + octo);
    std::memcpy(&d->av, &ah->av, sizeof d->av);
    d->av.dqp_dct = be32(qpn | MLX5_EXTENDED_UD_AV);
    d->av.key.qkey.qkey = be32(qkey);
    s.need &= static_cast<std::uint8_t>(~need_addr);
}

/* ---------------- Single-call posts ---------------- */

/** A single-call post inside this thread's own open session: the call and
 *  the open batch fail (-FI_EOPBADSTATE, latched), the batch is left as it
 *  was. */
[[gnu::cold, gnu::noinline]] int post_in_session(mlx5_qp *q) noexcept
{
    session_misuse(q, "single-call post while this thread's session is open");
    latch(q, -FI_EOPBADSTATE);
    return -FI_EOPBADSTATE;
}

/** One send or write of one buffer: the session's calls, inlined. The
 *  small-inline case on RC/UC builds ctrl + inline segment and BlueFlames it. */
template <bool Locked, bool Write>
int post_one(vq::qp *vqp, std::uint64_t wr_id, const void *buf, std::uint32_t len, std::uint32_t lkey,
             std::uint32_t rkey, std::uint64_t raddr, unsigned flags) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if (q->type == vq::qp_type::ud) [[unlikely]]
        return -FI_EINVAL; // no address: use the session
    // Inside this thread's open session the call would wait for the lock the
    // session holds (locked QP) or rewrite the open batch (thread domain).
    if constexpr (Locked) {
        if (q->session.mine()) [[unlikely]]
            return post_in_session(q);
        wr_start<true>(q);
    } else {
        if (q->sq.session_open) [[unlikely]]
            return post_in_session(q);
        begin_batch(q);
    }
    q->wr_id = wr_id;
    q->wr_flags = flags;
    if constexpr (Write)
        b_write(q, rkey, raddr);
    else
        q->send_fn(q);
    if (flags & vq::WR_INLINE)
        s_inline(q, buf, len);
    else
        s_sge(q, lkey, reinterpret_cast<std::uint64_t>(buf), len);
    if constexpr (Locked)
        return wr_complete<true>(q);
    else
        return commit_batch(q);
}

template <bool Locked>
int post_send(vq::qp *q, std::uint64_t wr_id, const void *buf, std::uint32_t len, std::uint32_t lkey,
              unsigned flags) noexcept
{
    return post_one<Locked, false>(q, wr_id, buf, len, lkey, 0, 0, flags);
}

template <bool Locked>
int post_write(vq::qp *q, std::uint64_t wr_id, const void *buf, std::uint32_t len, std::uint32_t lkey,
               std::uint32_t rkey, std::uint64_t raddr, unsigned flags) noexcept
{
    return post_one<Locked, true>(q, wr_id, buf, len, lkey, rkey, raddr, flags);
}

[[gnu::noinline, gnu::cold]] int post_send_slow(vq::qp *q, std::uint64_t wr_id, const void *buf, std::uint32_t len,
                                                std::uint32_t lkey, unsigned flags) noexcept
{
    return post_send<false>(q, wr_id, buf, len, lkey, flags);
}

template <bool Stats>
int post_send_inline_td(vq::qp *vqp, std::uint64_t wr_id, const void *buf, std::uint32_t len,
                        std::uint32_t lkey, unsigned flags) noexcept;

/** The single-call send found no credits: look at the queue (fence pending,
 *  state, free slots) and post by the fast path again, or by the session. */
template <bool Stats>
[[gnu::noinline, gnu::cold]] int post_send_refill(vq::qp *vqp, std::uint64_t wr_id, const void *buf,
                                                  std::uint32_t len, std::uint32_t lkey, unsigned flags) noexcept
{
    send_state &s = to_qp(vqp)->sq;
    std::uint32_t used = s.head - s.tail.load(std::memory_order_acquire);
    if (s.fm_cache || s.not_ready || s.session_open || used >= s.max_post)
        return post_send<false>(vqp, wr_id, buf, len, lkey, flags); // (it refuses a call inside the session)
    // The acquire load above orders the poller's reads of these slots before our writes.
    s.fast_credits = static_cast<std::int32_t>(s.max_post - used);
    return post_send_inline_td<Stats>(vqp, wr_id, buf, len, lkey, flags);
}

/** RC/UC send of 1..fast_inline bytes of inline data on a QP with a thread
 *  domain: ctrl and inline segment (one basic block) written in one pass
 *  with no session state, the doorbell record, and the BB BlueFlamed.
 *  Anything else (no WR_INLINE, other flags, a longer message, no credits:
 *  see fast_credits) goes to the session path, which writes the same bytes.
 *  @p Stats: the QP has a statistics block (chosen at creation; sq.io never
 *  changes afterwards). */
template <bool Stats>
int post_send_inline_td(vq::qp *vqp, std::uint64_t wr_id, const void *buf, std::uint32_t len,
                        std::uint32_t lkey, unsigned flags) noexcept
{
    send_state &s = to_qp(vqp)->sq;
    // flags is WR_INLINE plus any of the three bits below it (one unsigned
    // compare), and 1 <= len <= fast_inline.
    static_assert(vq::WR_INLINE == 8 && (vq::WR_SIGNALED | vq::WR_SOLICITED | vq::WR_FENCE) == 7);
    if (flags - vq::WR_INLINE > 7u || len - 1 >= s.fast_inline) [[unlikely]]
        return post_send_slow(vqp, wr_id, buf, len, lkey, flags);
    // Take one credit; below zero there was none (refill overwrites the count).
    if (--s.fast_credits < 0) [[unlikely]]
        return post_send_refill<Stats>(vqp, wr_id, buf, len, lkey, flags);
    const std::uint32_t pi = s.cur_post, idx = pi & s.mask;
    std::uint8_t *w = s.buf + (idx << wqe_shift);
    wqe_meta &m = s.meta[idx];
    m.wr_id = wr_id;
    const std::uint32_t done = s.head + 1;
    const std::uint64_t done_op = done | static_cast<std::uint64_t>(wc_opcode::send) << 32;
    std::memcpy(&m.done, &done_op, sizeof done_op); // done and opcode in one store
    s.head = done;
    // Control segment: opmod_idx_opcode and qpn_ds as one big-endian 64-bit
    // word (ds = ctrl + the inline octowords, 2..4); then signature, dci,
    // fm_ce_se and imm (0).
    const std::uint64_t c0 = be64(s.fast_ctrl0[len] | static_cast<std::uint64_t>(static_cast<std::uint16_t>(pi)) << 40);
    const std::uint64_t c1 = s.ctrl_w2[flags & 7];
    std::memcpy(w, &c0, 8);
    std::memcpy(w + 8, &c1, 8);
    // The inline segment's byte count, be32(len | MLX5_INLINE_SEG) with
    // len < 256: the bytes 0x80, 0, 0, len.
    static_assert(MLX5_INLINE_SEG == 0x80000000u && wqe_bb - octo - 4 < 256);
    const std::uint32_t inl_hi = 0x80;
    std::memcpy(w + octo, &inl_hi, 4);
    w[octo + 3] = static_cast<std::uint8_t>(len);
    copy_inline(w + octo + 4, static_cast<const std::uint8_t *>(buf), len);
    // Stamped once the WQE is written: fewer values are live across rdtsc,
    // which writes rdx (where buf arrives) and rax.
    if constexpr (Stats)
        stamp_wqe(m, c1);
    const std::uint32_t next = pi + 1;
    // WQE stores before the doorbell record that tells the device they exist.
    udma_to_device_barrier();
    dbrec_store_counter(&s.dbrec[MLX5_SND_DBR], static_cast<std::uint16_t>(next));
    s.cur_post = next;
    // The doorbell record before the BlueFlame stores.
    mmio_wc_start();
    bf_copy_bb(s.bf_cur, w); // the BB is whole in the SQ (a BB never wraps)
    // Out of the write-combining buffer before the next doorbell can pass it.
    mmio_flush_writes();
    toggle_bf(s);
    if constexpr (Stats) {
        env::stats::io_stats *io = s.io; // once: the counters' stores may alias s
        io->tx_msgs.add();
        io->tx_bytes.add(len);
    }
    return 0;
}

/* ---------------- Receive ---------------- */

inline void put_recv(recv_ring &r, std::uint8_t *wqe, const vq::sge *sg, std::uint32_t n) noexcept
{
    auto *d = reinterpret_cast<mlx5_wqe_data_seg *>(wqe);
    std::uint32_t j = 0;
    for (std::uint32_t i = 0; i < n; i++) {
        if (!sg[i].length) // zero-length pieces take no segment (rdma-core mlx5_post_recv)
            continue;
        mlx5dv_set_data_seg(&d[j], sg[i].length, sg[i].lkey, sg[i].addr);
        j++;
    }
    if (j < r.max_sge) // a shorter list ends with the invalid key
        mlx5dv_set_data_seg(&d[j], 0, MLX5_INVALID_LKEY, 0);
}

template <bool Locked>
int post_recv(vq::qp *vqp, std::uint64_t wr_id, const vq::sge *sg, std::uint32_t n) noexcept
{
    mlx5_qp *q = to_qp(vqp);
    if (q->msrq) [[unlikely]]
        return -FI_EINVAL;
    recv_ring &r = q->rq;
    if (n > r.limit_sge) [[unlikely]]
        return -FI_E2BIG;
    if (!sg && n) [[unlikely]]
        return -FI_EINVAL;
    auto st = static_cast<vq::qp_state>(q->state.load(std::memory_order_relaxed));
    if (st == vq::qp_state::reset) [[unlikely]]
        return -FI_EOPBADSTATE;
    if constexpr (Locked)
        r.lock.lock();
    int rc = 0;
    if (r.head - r.tail.load(std::memory_order_acquire) >= r.max_post) [[unlikely]] {
        rc = -FI_EAGAIN;
    } else {
        put_recv(r, r.wqe(r.head), sg, n);
        r.wrid[r.head & r.mask] = wr_id;
        r.head++;
        // RAW_PACKET: the record is written at RTR, not before (rdma-core mlx5_post_recv).
        if (q->type != vq::qp_type::raw_packet || st == vq::qp_state::rtr || st == vq::qp_state::rts ||
            st == vq::qp_state::err) {
            // The receive WQE before the doorbell record that hands it to the device.
            udma_to_device_barrier();
            dbrec_store_counter(&r.dbrec[0], static_cast<std::uint16_t>(r.head));
        }
    }
    if constexpr (Locked)
        r.lock.unlock();
    return rc;
}

int srq_post(vq::srq *vs, std::uint64_t wr_id, const vq::sge *sg, std::uint32_t n) noexcept
{
    auto *s = static_cast<mlx5_srq *>(vs);
    recv_ring &r = s->rq;
    if (n > r.limit_sge) [[unlikely]]
        return -FI_E2BIG;
    if (!sg && n) [[unlikely]]
        return -FI_EINVAL;
    r.lock.lock();
    int rc = 0;
    if (s->free_head == s->free_tail) [[unlikely]] { // one WQE always stays as the list's end
        rc = -FI_EAGAIN;
    } else {
        std::uint32_t idx = s->free_head;
        std::uint8_t *w = r.wqe(idx);
        auto *next = reinterpret_cast<mlx5_wqe_srq_next_seg *>(w);
        put_recv(r, w + sizeof *next, sg, n);
        r.wrid[idx] = wr_id;
        s->free_head = be16toh(next->next_wqe_index);
        s->counter++;
        // The receive WQE before the doorbell record that hands it to the device.
        udma_to_device_barrier();
        dbrec_store_counter(&r.dbrec[0], s->counter);
    }
    r.lock.unlock();
    return rc;
}

} // namespace

/* ---------------- Installation ---------------- */

void install_qp_ops(mlx5_qp *q)
{
    const std::uint64_t ops = q->send_ops_flags;
    const bool lk = !q->has_td;
    q->wr_start_fn = lk ? wr_start<true> : wr_start<false>;
    q->wr_complete_fn = lk ? wr_complete<true> : wr_complete<false>;
    q->wr_abort_fn = lk ? wr_abort<true> : wr_abort<false>;
    q->post_recv_fn = lk ? post_recv<true> : post_recv<false>;
    const bool raw = q->type == vq::qp_type::raw_packet;
    if (ops & vq::OPS_SEND)
        q->send_fn = raw ? b_send_eth : q->type == vq::qp_type::ud ? b_send_ud : b_send;
    if (ops & vq::OPS_SEND_WITH_IMM)
        q->send_imm_fn = b_send_imm;
    if (ops & vq::OPS_SEND_WITH_INV)
        q->send_inv_fn = b_send_inv;
    if (ops & vq::OPS_TSO)
        q->send_tso_fn = b_send_tso;
    if (ops & vq::OPS_RDMA_WRITE)
        q->rdma_write_fn = b_write;
    if (ops & vq::OPS_RDMA_WRITE_WITH_IMM)
        q->rdma_write_imm_fn = b_write_imm;
    if (ops & vq::OPS_RDMA_READ)
        q->rdma_read_fn = b_read;
    if (ops & vq::OPS_ATOMIC_CMP_AND_SWP)
        q->atomic_cmp_swp_fn = b_cas;
    if (ops & vq::OPS_ATOMIC_FETCH_AND_ADD)
        q->atomic_fetch_add_fn = b_faa;
    if (ops & vq::OPS_BIND_MW)
        q->bind_mw_fn = b_bind_mw;
    if (ops & vq::OPS_LOCAL_INV)
        q->local_inv_fn = b_local_inv;
    q->set_sge_fn = s_sge;
    q->set_sge_list_fn = s_sge_list;
    q->set_inline_data_fn = s_inline;
    q->set_inline_data_list_fn = s_inline_list;
    if (q->type == vq::qp_type::ud)
        q->set_ud_addr_fn = s_ud_addr;
    if (ops & vq::OPS_SEND) { // (UD: -FI_EINVAL, there is no address)
        bool fast = !lk && !raw && q->type != vq::qp_type::ud && q->sq.bf_size >= wqe_bb;
        q->post_send_fn = !fast ? (lk ? post_send<true> : post_send<false>)
                         : q->sq.io ? post_send_inline_td<true> : post_send_inline_td<false>;
    }
    if (ops & vq::OPS_RDMA_WRITE)
        q->post_write_fn = lk ? post_write<true> : post_write<false>;
    vq::qp_stubs<latch_vq>::fill(q);
    send_state &s = q->sq;
    for (unsigned f = 0; f < 8; f++)
        s.ctrl_w2[f] = static_cast<std::uint32_t>(fm_ce_se_of[f] | (q->sq_sig_all ? ce_always : 0)) << 24;
    // The single-call inline send writes ctrl + inline segment in one BB and BlueFlames it.
    static_assert(fast_inline_max == wqe_bb - octo - 4);
    s.fast_inline = s.bf_size >= wqe_bb ? std::min(s.max_inline, fast_inline_max) : 0;
    for (std::uint32_t len = 1; len <= s.fast_inline; len++) // ds: ctrl + the inline octowords (2..4)
        s.fast_ctrl0[len] = static_cast<std::uint64_t>(MLX5_OPCODE_SEND) << 32 | (q->qp_num << 8) |
                            (1 + (len + 4 + octo - 1) / octo);
}

void reset_qp_queues(mlx5_qp *q)
{
    send_state &s = q->sq;
    s.cur_post = s.head = s.cur_post_rb = 0;
    s.nreq = 0;
    s.err = 0;
    s.ctrl = nullptr;
    s.last_ctrl_ = nullptr;
    s.fm_cache = s.fm_cache_rb = 0;
    s.bf_cur = s.bf_reg;
    s.fast_credits = 0;
    s.tail.store(0, std::memory_order_relaxed);
    dbrec_store(&s.dbrec[MLX5_SND_DBR], 0);
    std::memset(s.buf, 0, static_cast<std::size_t>(s.qend - s.buf));
    if (!q->msrq) {
        q->rq.head = 0;
        q->rq.tail.store(0, std::memory_order_relaxed);
        dbrec_store(&q->rq.dbrec[0], 0);
    }
}

void init_srq(mlx5_srq *s)
{
    recv_ring &r = s->rq;
    std::uint32_t cnt = r.mask + 1;
    for (std::uint32_t i = 0; i < cnt; i++) {
        auto *next = reinterpret_cast<mlx5_wqe_srq_next_seg *>(r.wqe(i));
        next->next_wqe_index = be16(static_cast<std::uint16_t>((i + 1) & r.mask));
    }
    s->free_head = 0;
    s->free_tail = r.mask;
    s->counter = 0;
    s->post_recv_fn = srq_post;
}

} // namespace shunt::drv::mlx5
