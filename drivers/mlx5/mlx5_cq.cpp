/* drivers/mlx5: completion-queue polling (rdma-core providers/mlx5/cq.c).
 * A CQE is software's when its opcode is not INVALID and its owner bit
 * equals the pass bit of the consumer index; one requester CQE completes
 * every WQE up to the one it names (unsignaled ones included). */
#include <cstring>

#include "mlx5.h"

namespace shunt::drv::mlx5 {

namespace {

using vq::wc_opcode;
using vq::wc_status;

inline mlx5_cq *to_cq(vq::cq *c) noexcept { return static_cast<mlx5_cq *>(c); }

/** Software's mark on a CQE it has consumed: the invalid opcode, as
 *  rdma-core's mlx5_alloc_cq_buf leaves every CQE of a new CQ. So a slot
 *  holds either a CQE of this pass or an invalid opcode, and poll_st knows
 *  a new requester CQE by its opcode alone, without the owner bit. Stored
 *  before the consumer index is published: the device writes the slot
 *  again only after it has read an index past it (x86 keeps the two stores
 *  in order). */
inline void retire_cqe(mlx5_cqe64 *cqe) noexcept { cqe->op_own = MLX5_CQE_INVALID << 4; }

/** The CQE at consumer index @p ci when software owns it, else null. */
inline mlx5_cqe64 *sw_cqe(const mlx5_cq *c, std::uint32_t ci) noexcept
{
    auto *cqe = reinterpret_cast<mlx5_cqe64 *>(c->buf + ((ci & c->mask) << c->cqe_shift));
    std::uint8_t op_own = cqe_op_own(cqe);
    if ((op_own >> 4) == MLX5_CQE_INVALID || ((op_own ^ (ci >> c->owner_shift)) & MLX5_CQE_OWNER_MASK))
        return nullptr;
    return cqe;
}

/** ibv_wc_status of an error CQE (rdma-core mlx5_handle_error_cqe). */
wc_status err_status(std::uint8_t syndrome) noexcept
{
    switch (syndrome) {
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR: return wc_status::loc_len_err;
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR: return wc_status::loc_qp_op_err;
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR: return wc_status::loc_prot_err;
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR: return wc_status::wr_flush_err;
    case MLX5_CQE_SYNDROME_MW_BIND_ERR: return wc_status::mw_bind_err;
    case MLX5_CQE_SYNDROME_BAD_RESP_ERR: return wc_status::bad_resp_err;
    case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR: return wc_status::loc_access_err;
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: return wc_status::rem_inv_req_err;
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: return wc_status::rem_access_err;
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR: return wc_status::rem_op_err;
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: return wc_status::retry_exc_err;
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: return wc_status::rnr_retry_exc_err;
    case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: return wc_status::rem_abort_err;
    default: return wc_status::general_err;
    }
}

inline mlx5_qp *qp_of(mlx5_cq *c, const mlx5_cqe64 *cqe) noexcept
{
    std::uint32_t qpn = be32toh(cqe->sop_drop_qpn) & 0xffffff;
    mlx5_qp *q = c->last_qp;
    if (q && q->qp_num == qpn) [[likely]]
        return q;
    q = c->mctx->qps.find(qpn);
    c->set_last(q);
    return q;
}

/** Statistics: WQE @p idx completed successfully; its post-to-completion
 *  latency when it was signalled with statistics on. */
inline void count_completion(mlx5_qp *q, std::uint32_t idx) noexcept
{
    env::stats::on_complete(q->rx_io, q->sq.meta[idx].stamp);
}

/** Requester side: the WQE the CQE names is done, and every one before it. */
inline std::uint32_t req_done(mlx5_qp *q, const mlx5_cqe64 *cqe) noexcept
{
    std::uint32_t idx = be16toh(cqe->wqe_counter) & q->sq.mask;
    // The slot's meta is read before the tail store (release) hands it back to the poster.
    q->sq.tail.store(q->sq.meta[idx].done, std::memory_order_release);
    return idx;
}

/** Copy a receive carried in the CQE into the receive WQE's buffers
 *  (rdma-core mlx5_copy_to_recv_wqe). @return 0 or loc_len_err. */
wc_status scatter_from_cqe(const std::uint8_t *wqe, std::uint32_t max_sge, const void *src, std::uint32_t len) noexcept
{
    const auto *d = reinterpret_cast<const mlx5_wqe_data_seg *>(wqe);
    const auto *p = static_cast<const std::uint8_t *>(src);
    for (std::uint32_t i = 0; i < max_sge && len; i++) {
        if (d[i].lkey == be32(MLX5_INVALID_LKEY))
            break;
        std::uint32_t n = be32toh(d[i].byte_count);
        n = n < len ? n : len;
        std::memcpy(reinterpret_cast<void *>(be64toh(d[i].addr)), p, n);
        p += n;
        len -= n;
    }
    return len ? wc_status::loc_len_err : wc_status::success;
}

/** Responder side: which receive the CQE consumed. @return its wr_id. */
inline std::uint64_t resp_wrid(mlx5_qp *q, const mlx5_cqe64 *cqe, const std::uint8_t **wqe, std::uint32_t *max_sge) noexcept
{
    if (mlx5_srq *s = q->msrq) {
        std::uint32_t idx = be16toh(cqe->wqe_counter) & s->rq.mask;
        std::uint64_t id = s->rq.wrid[idx];
        *wqe = s->rq.wqe(idx) + sizeof(mlx5_wqe_srq_next_seg);
        *max_sge = s->rq.max_sge;
        // Back on the free list (rdma-core mlx5_free_srq_wqe).
        s->rq.lock.lock();
        auto *tail = reinterpret_cast<mlx5_wqe_srq_next_seg *>(s->rq.wqe(s->free_tail));
        tail->next_wqe_index = be16(static_cast<std::uint16_t>(idx));
        s->free_tail = idx;
        s->rq.lock.unlock();
        return id;
    }
    recv_ring &r = q->rq;
    std::uint32_t t = r.tail.load(std::memory_order_relaxed);
    std::uint64_t id = r.wrid[t & r.mask];
    *wqe = r.wqe(t);
    *max_sge = r.max_sge;
    r.tail.store(t + 1, std::memory_order_release); // the slot is the poster's again
    return id;
}

/** Decode one CQE into @p w. */
void decode(mlx5_cq *c, mlx5_cqe64 *cqe, vq::wc *w) noexcept
{
    mlx5_qp *q = qp_of(c, cqe);
    std::uint8_t op = cqe->op_own >> 4;
    w->vendor_err = 0;
    w->imm_data = 0;
    w->invalidated_rkey = 0;
    w->src_qp = 0;
    w->wc_flags = 0;
    w->reserved = 0;
    w->data = nullptr; // no lent receives on mlx5 (yet)
    w->qp_num = be32toh(cqe->sop_drop_qpn) & 0xffffff;
    if (!q) [[unlikely]] { // the QP was destroyed with completions in flight
        w->wr_id = 0;
        w->status = wc_status::general_err;
        w->opcode = wc_opcode::send;
        w->byte_len = 0;
        return;
    }
    if (op == MLX5_CQE_REQ) [[likely]] {
        if (q->rx_io) // before req_done hands the slot back to the poster
            count_completion(q, be16toh(cqe->wqe_counter) & q->sq.mask);
        std::uint32_t idx = req_done(q, cqe);
        w->wr_id = q->sq.meta[idx].wr_id;
        w->status = wc_status::success;
        auto o = static_cast<wc_opcode>(q->sq.meta[idx].opcode);
        w->opcode = o;
        w->byte_len = o == wc_opcode::rdma_read ? be32toh(cqe->byte_cnt)
                      : (o == wc_opcode::comp_swap || o == wc_opcode::fetch_add) ? 8
                                                                                   : 0;
        return;
    }
    if (op == MLX5_CQE_REQ_ERR || op == MLX5_CQE_RESP_ERR) [[unlikely]] {
        auto *e = reinterpret_cast<mlx5_err_cqe *>(cqe);
        w->status = err_status(e->syndrome);
        // The device moved the QP to ERR with this CQE (a UD or RAW receive
        // error leaves it up); the state read back must say so.
        bool connected = q->type == vq::qp_type::rc || q->type == vq::qp_type::uc;
        if (e->syndrome != MLX5_CQE_SYNDROME_WR_FLUSH_ERR && (connected || op == MLX5_CQE_REQ_ERR))
            q->state.store(static_cast<std::uint8_t>(vq::qp_state::err), std::memory_order_release);
        w->vendor_err = e->vendor_err_synd;
        w->byte_len = 0;
        if (e->syndrome != MLX5_CQE_SYNDROME_WR_FLUSH_ERR)
            env::stats::on_error(q->rx_io);
        if (op == MLX5_CQE_REQ_ERR) {
            std::uint32_t idx = req_done(q, cqe);
            w->wr_id = q->sq.meta[idx].wr_id;
            w->opcode = static_cast<wc_opcode>(q->sq.meta[idx].opcode);
            if (w->opcode == wc_opcode::bind_mw) [[unlikely]] { // the bind did not happen
                // Its window gets its key before the bind back. A flushed
                // bind comes after the QP's first error: an earlier bind of
                // the window may have failed and restored an older key
                // already, which only a key this bind set may overwrite.
                send_state::undo &u = q->sq.bind_undo[idx];
                if (u.mw && (e->syndrome != MLX5_CQE_SYNDROME_WR_FLUSH_ERR || u.mw->rkey == u.new_rkey))
                    u.mw->rkey = u.old_rkey;
                u.mw = nullptr;
            }
        } else {
            const std::uint8_t *wqe;
            std::uint32_t ms;
            w->wr_id = resp_wrid(q, cqe, &wqe, &ms);
            w->opcode = wc_opcode::recv;
        }
        return;
    }
    // Responder.
    const std::uint8_t *wqe;
    std::uint32_t ms;
    w->wr_id = resp_wrid(q, cqe, &wqe, &ms);
    w->byte_len = be32toh(cqe->byte_cnt);
    w->status = wc_status::success;
    unsigned fl = 0;
    if (cqe->op_own & MLX5_INLINE_SCATTER_32) {
        // The data is the CQE's first 32 bytes (flags_rqpn and the checksum
        // bits among them): copy it out; those fields mean nothing here.
        w->status = scatter_from_cqe(wqe, ms, cqe, w->byte_len);
    } else {
        std::uint32_t fr = be32toh(cqe->flags_rqpn);
        w->src_qp = fr & 0xffffff;
        fl = ((fr >> 28) & 3) ? vq::WC_GRH : 0;
        if ((cqe->hds_ip_ext & (MLX5_CQE_L3_OK | MLX5_CQE_L4_OK)) == (MLX5_CQE_L3_OK | MLX5_CQE_L4_OK) &&
            ((cqe->l4_hdr_type_etc >> 2) & 3) == MLX5_CQE_L3_HDR_TYPE_IPV4)
            fl |= vq::WC_IP_CSUM_OK;
    }
    if (q->type == vq::qp_type::rc || q->type == vq::qp_type::uc)
        w->src_qp = q->attr.dest_qp_num; // a connected QP hears only its peer
    if (cqe->op_own & 2)
        fl |= vq::WC_SOLICITED;
    switch (op) {
    case MLX5_CQE_RESP_WR_IMM:
        w->opcode = wc_opcode::recv_rdma_with_imm;
        fl |= vq::WC_WITH_IMM;
        w->imm_data = cqe->imm_inval_pkey;
        break;
    case MLX5_CQE_RESP_SEND_IMM:
        w->opcode = wc_opcode::recv;
        fl |= vq::WC_WITH_IMM;
        w->imm_data = cqe->imm_inval_pkey;
        break;
    case MLX5_CQE_RESP_SEND_INV:
        w->opcode = wc_opcode::recv;
        fl |= vq::WC_WITH_INV;
        w->invalidated_rkey = be32toh(cqe->imm_inval_pkey);
        break;
    case MLX5_CQE_RESP_SEND:
        w->opcode = wc_opcode::recv;
        break;
    default:
        w->opcode = wc_opcode::recv;
        w->status = wc_status::general_err;
        break;
    }
    w->wc_flags = fl;
    if (w->status == wc_status::success) [[likely]]
        env::stats::on_rx(q->rx_io, w->byte_len);
    else
        env::stats::on_error(q->rx_io);
}

inline void publish_ci(mlx5_cq *c) noexcept
{
    // The CQE reads above are done before the device may reuse the slots
    // (x86 does not move loads after stores; the compiler must not either).
    udma_to_device_barrier();
    dbrec_store_be(&c->dbrec[cq_set_ci], c->ci & 0xffffff);
}

template <bool Locked>
int poll(vq::cq *vc, int n, vq::wc *out) noexcept
{
    mlx5_cq *c = to_cq(vc);
    if (n < 0 || (n > 0 && !out)) [[unlikely]]
        return -FI_EINVAL;
    if constexpr (Locked)
        c->lock.lock();
    int i = 0;
    for (; i < n; i++) {
        mlx5_cqe64 *cqe = sw_cqe(c, c->ci);
        if (!cqe)
            break;
        // The owner byte before the rest of the CQE.
        udma_from_device_barrier();
        c->ci++;
        decode(c, cqe, &out[i]);
        retire_cqe(cqe);
    }
    if (i)
        publish_ci(c);
    if constexpr (Locked)
        c->lock.unlock();
    return i;
}

[[gnu::noinline, gnu::cold]] int poll_st_slow(vq::cq *vc, int n, vq::wc *out) noexcept
{
    return poll<false>(vc, n, out);
}

/** poll_st's statistics: the completion's post-to-completion latency, from
 *  its WQE's @p stamp (read before the slot went back; not 0). Only a QP
 *  with statistics stamps its WQEs (the records start zeroed, and sq.io is
 *  fixed at creation), so rx_io is set: no test of either. @return 1. */
[[gnu::noinline]] int poll_st_latency(const mlx5_qp *q, std::uint64_t stamp) noexcept
{
    q->rx_io->completion.record(env::tsc::now() - stamp);
    return 1;
}

/** Single-threaded poll of one completion on a CQ of 64-byte CQEs: a send
 *  or write completion of the QP seen last is decoded here, with one test
 *  of the owner byte for "software's and a requester CQE" and one of the
 *  CQE's QPN and WQE opcode; anything else (nothing there, another QP, an
 *  error, another opcode, n != 1) goes to poll(), before anything was
 *  consumed. @p Stats: telemetry is on in this process, so QPs may stamp
 *  their WQEs (env::stats::enabled() never changes; when it is false no QP
 *  has a statistics block, and every stamp stays 0). */
template <bool Stats>
int poll_st(vq::cq *vc, int n, vq::wc *out) noexcept
{
    mlx5_cq *c = to_cq(vc);
    if (n != 1) [[unlikely]]
        return poll_st_slow(vc, n, out);
    if (!out) [[unlikely]]
        return poll_st_slow(vc, n, out);
    const std::uint32_t ci = c->ci;
    auto *cqe = reinterpret_cast<mlx5_cqe64 *>(c->buf + ((ci & c->mask) << 6));
    // op_own = opcode << 4 | ... | owner: REQ (0). Every consumer retires the
    // CQEs it takes (retire_cqe), so the owner bit need not be tested.
    if (cqe_op_own(cqe) > 0x0f)
        return poll_st_slow(vc, n, out);
    // The op_own byte before the rest of the CQE.
    udma_from_device_barrier();
    std::uint32_t key;
    std::memcpy(&key, &cqe->sop_drop_qpn, 4);
    // The QP seen last, and a WQE opcode among RDMA_WRITE(_IMM) and
    // SEND(_IMM) (0x08..0x0b: bits 0-1 masked), whose completions carry no
    // byte count: the record's opcode is send or rdma_write.
    if ((key & ~3u) != c->last_qpn_key) [[unlikely]]
        return poll_st_slow(vc, n, out);
    mlx5_qp *q = c->last_qp;
    // wqe_counter (big-endian, bytes 60-61) as the byte offset of its record:
    // the word at byte 60 byte-swapped holds it in its top 16 bits.
    std::uint32_t w60;
    std::memcpy(&w60, &cqe->wqe_counter, 4);
    static_assert(wqe_meta_shift <= 16);
    const std::uint32_t off = (be32toh(w60) >> (16 - wqe_meta_shift)) & q->sq.meta_off_mask;
    const auto *m = reinterpret_cast<const wqe_meta *>(reinterpret_cast<const std::uint8_t *>(q->sq.meta) + off);
    // wr_id, then status (success) and opcode: the record's 16 bytes with its
    // done word (at the status) overwritten; vendor_err, byte_len, imm and
    // invalidated rkey (0); qp_num and src_qp (0); wc_flags (0); data (null:
    // no lent receives).
    auto *o = reinterpret_cast<std::uint8_t *>(out);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(o), _mm_loadu_si128(reinterpret_cast<const __m128i *>(m)));
    const std::uint32_t status = 0;
    std::memcpy(o + 8, &status, 4);
    // Not 0: the QP has statistics and the WQE was signalled (wqe_meta::stamp).
    const std::uint64_t stamp = Stats ? m->stamp : 0;
    // The slot's record is read before the tail store (release) hands it back to the poster.
    q->sq.tail.store(m->done, std::memory_order_release);
    const std::uint64_t qpn = q->qp_num;
    const __m128i zero = _mm_setzero_si128();
    _mm_storeu_si128(reinterpret_cast<__m128i *>(o + 16), zero);
    std::memcpy(o + 32, &qpn, 8);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(o + 40), zero);
    retire_cqe(cqe);
    c->ci = ci + 1;
    // The CQE reads above are done before the device may reuse the slot.
    udma_to_device_barrier();
    dbrec_store_be(&c->dbrec[cq_set_ci], (ci + 1) & 0xffffff);
    if (Stats && stamp) // out of line: none of its registers are saved here
        return poll_st_latency(q, stamp);
    return 1;
}
static_assert(offsetof(vq::wc, status) == 8 && offsetof(vq::wc, opcode) == 12 && offsetof(vq::wc, vendor_err) == 16 &&
              offsetof(vq::wc, byte_len) == 20 && offsetof(vq::wc, imm_data) == 24 && offsetof(vq::wc, qp_num) == 32 &&
              offsetof(vq::wc, src_qp) == 36 && offsetof(vq::wc, wc_flags) == 40 && offsetof(vq::wc, data) == 48 && sizeof(vq::wc) == 56 &&
              static_cast<unsigned>(wc_status::success) == 0,
              "poll_st writes the wc in 8-byte words");
static_assert(static_cast<unsigned>(wc_opcode::send) == 0 && static_cast<unsigned>(wc_opcode::rdma_write) == 1);
static_assert(MLX5_OPCODE_RDMA_WRITE == 0x08 && MLX5_OPCODE_RDMA_WRITE_IMM == 0x09 && MLX5_OPCODE_SEND == 0x0a &&
                  MLX5_OPCODE_SEND_IMM == 0x0b,
              "poll_st's opcode class: 0x08..0x0b");
static_assert(offsetof(wqe_meta, wr_id) == 0 && offsetof(wqe_meta, done) == 8 && offsetof(wqe_meta, opcode) == 12,
              "poll_st copies a record's wr_id and opcode to the wc's wr_id and opcode");

/* ---- start/next/end_poll: the current CQE is decoded field by field ---- */

inline void make_current(mlx5_cq *c, mlx5_cqe64 *cqe) noexcept
{
    c->cur = cqe;
    vq::wc w;
    decode(c, cqe, &w); // consumes the WQE (tails, SRQ slot) exactly once
    c->wr_id = w.wr_id;
    c->status = w.status;
    c->cur_wc = w;
}

template <bool Locked>
int start_poll(vq::cq *vc) noexcept
{
    mlx5_cq *c = to_cq(vc);
    if constexpr (Locked)
        c->lock.lock();
    mlx5_cqe64 *cqe = sw_cqe(c, c->ci);
    if (!cqe) {
        if constexpr (Locked)
            c->lock.unlock();
        return -FI_EAGAIN;
    }
    // The owner byte before the rest of the CQE.
    udma_from_device_barrier();
    c->ci++;
    make_current(c, cqe); // (decodes the whole CQE into cur_wc)
    retire_cqe(cqe);
    return 0;
}

int next_poll(vq::cq *vc) noexcept
{
    mlx5_cq *c = to_cq(vc);
    mlx5_cqe64 *cqe = sw_cqe(c, c->ci);
    if (!cqe)
        return -FI_EAGAIN;
    // The owner byte before the rest of the CQE.
    udma_from_device_barrier();
    c->ci++;
    make_current(c, cqe); // (decodes the whole CQE into cur_wc)
    retire_cqe(cqe);
    return 0;
}

template <bool Locked>
void end_poll(vq::cq *vc) noexcept
{
    mlx5_cq *c = to_cq(vc);
    publish_ci(c);
    c->cur = nullptr;
    if constexpr (Locked)
        c->lock.unlock();
}

wc_opcode r_opcode(vq::cq *c) noexcept { return to_cq(c)->cur_wc.opcode; }
std::uint32_t r_byte_len(vq::cq *c) noexcept { return to_cq(c)->cur_wc.byte_len; }
std::uint32_t r_imm(vq::cq *c) noexcept { return to_cq(c)->cur_wc.imm_data; }
std::uint32_t r_inv(vq::cq *c) noexcept { return to_cq(c)->cur_wc.invalidated_rkey; }
std::uint32_t r_qpn(vq::cq *c) noexcept { return to_cq(c)->cur_wc.qp_num; }
std::uint32_t r_src(vq::cq *c) noexcept { return to_cq(c)->cur_wc.src_qp; }
unsigned r_flags(vq::cq *c) noexcept { return to_cq(c)->cur_wc.wc_flags; }
std::uint32_t r_vendor(vq::cq *c) noexcept { return to_cq(c)->cur_wc.vendor_err; }

} // namespace

void install_cq_ops(mlx5_cq *c)
{
    const bool lk = !c->single_threaded;
    c->poll_fn = lk                   ? poll<true>
                 : c->cqe_shift != 6  ? poll<false>
                 : env::stats::enabled() ? poll_st<true>
                                         : poll_st<false>;
    c->start_poll_fn = lk ? start_poll<true> : start_poll<false>;
    c->next_poll_fn = next_poll;
    c->end_poll_fn = lk ? end_poll<true> : end_poll<false>;
    c->read_opcode_fn = r_opcode;
    c->read_byte_len_fn = r_byte_len;
    c->read_imm_data_fn = r_imm;
    c->read_invalidated_rkey_fn = r_inv;
    c->read_qp_num_fn = r_qpn;
    c->read_src_qp_fn = r_src;
    c->read_wc_flags_fn = r_flags;
    c->read_vendor_err_fn = r_vendor;
    vq::cq_fill_stubs(c);
}

void cq_clean(mlx5_cq *c, std::uint32_t qpn, mlx5_srq *srq)
{
    // rdma-core __mlx5_cq_clean: find the producer end, then walk back,
    // dropping @p qpn's CQEs and moving the others over the gap (each slot
    // keeps its own owner bit).
    c->lock.lock();
    std::uint32_t prod = c->ci;
    while (prod != c->ci + c->mask + 1 && sw_cqe(c, prod))
        prod++;
    std::uint32_t freed = 0;
    while (prod-- != c->ci) {
        auto *cqe = reinterpret_cast<mlx5_cqe64 *>(c->buf + ((prod & c->mask) << c->cqe_shift));
        if ((be32toh(cqe->sop_drop_qpn) & 0xffffff) == qpn) {
            std::uint8_t op = cqe->op_own >> 4;
            if (srq && op != MLX5_CQE_REQ && op != MLX5_CQE_REQ_ERR) {
                std::uint32_t idx = be16toh(cqe->wqe_counter) & srq->rq.mask;
                auto *tail = reinterpret_cast<mlx5_wqe_srq_next_seg *>(srq->rq.wqe(srq->free_tail));
                tail->next_wqe_index = be16(static_cast<std::uint16_t>(idx));
                srq->free_tail = idx;
            }
            freed++;
        } else if (freed) {
            std::uint32_t d = prod + freed;
            std::uint8_t *dst = c->entries + ((d & c->mask) << c->cqe_shift);
            std::uint8_t *src = c->entries + ((prod & c->mask) << c->cqe_shift);
            auto *dcqe = reinterpret_cast<mlx5_cqe64 *>(dst + c->view.cqe_size - sizeof(mlx5_cqe64));
            std::uint8_t owner = dcqe->op_own & MLX5_CQE_OWNER_MASK;
            std::memcpy(dst, src, c->view.cqe_size);
            dcqe->op_own = static_cast<std::uint8_t>((dcqe->op_own & ~MLX5_CQE_OWNER_MASK) | owner);
        }
    }
    if (freed) {
        for (std::uint32_t i = 0; i < freed; i++) // the slots before the moved CQEs
            retire_cqe(reinterpret_cast<mlx5_cqe64 *>(c->buf + (((c->ci + i) & c->mask) << c->cqe_shift)));
        c->ci += freed;
        publish_ci(c);
    }
    if (c->last_qp && c->last_qp->qp_num == qpn)
        c->set_last(nullptr);
    c->lock.unlock();
}

void arm_cq(mlx5_cq *c, bool solicited) noexcept
{
    // rdma-core mlx5_arm_cq: the arm word (sequence, command, ci) into the
    // doorbell record, then the same with the CQ number to the CQ doorbell.
    std::uint32_t sn = c->arm_sn & 3;
    std::uint32_t ci = c->ci & 0xffffff;
    std::uint32_t cmd = solicited ? MLX5_CQ_DB_REQ_NOT_SOL : MLX5_CQ_DB_REQ_NOT;
    std::uint32_t word = sn << 28 | cmd | ci;
    dbrec_store(&c->dbrec[cq_arm_db], be32(word));
    // The arm record before the doorbell that makes the device read it.
    mmio_wc_start();
    std::uint64_t db = static_cast<std::uint64_t>(be32(word)) | static_cast<std::uint64_t>(be32(c->view.cqn)) << 32;
    mmio_write64(c->view.uar + MLX5_CQ_DOORBELL, db);
    mmio_flush_writes();
}

} // namespace shunt::drv::mlx5
