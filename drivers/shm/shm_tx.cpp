/* drivers/shm: executing send-queue entries (the "hardware" of this driver).
 *
 * Sends become messages in the receiver's ring (ring_put); RDMA and atomics
 * are performed by the initiator on the target's memory after checking the
 * target's region table (check_key), so the target's CPU is not involved.
 * Windows and invalidation are local table updates. */
#include <signal.h>

#include <atomic>
#include <cerrno>

#include "env/log.h"
#include "env/tsc.h"
#include "ring.h"
#include "shm.h"

namespace shunt::drv::shm {

SHUNT_LOG_COMPONENT(shm_tx_log, "shm");

namespace {

/** What executing a request did: finished (status set), could not start or
 *  continue for lack of ring space, or handed off (a rendezvous send waits
 *  for the receiver's copy; later requests may execute meanwhile). */
enum exec_rc { ex_done, ex_blocked, ex_pending };

inline const vq::sge *wqe_sges(shm_qp *q, const wqe *w) noexcept
{
    return &q->sq_sge[static_cast<std::size_t>(w - q->sq) * q->max_sge_cap];
}
inline std::uint8_t *wqe_inl(shm_qp *q, const wqe *w) noexcept
{
    return q->sq_inl + static_cast<std::size_t>(w - q->sq) * q->inl_stride;
}

inline src_cursor cursor_of(shm_qp *q, const wqe *w) noexcept
{
    src_cursor c;
    if (w->is_inline)
        c.flat = wqe_inl(q, w) + (w->op == op_tso ? max_tso_hdr : 0);
    else
        c.sg = wqe_sges(q, w);
    return c;
}

/** Local SGEs valid for @p need (0: read)? */
bool local_sges_ok(shm_qp *q, const wqe *w, unsigned need) noexcept
{
    if (w->is_inline)
        return true;
    const vq::sge *s = wqe_sges(q, w);
    region_ref r;
    for (std::uint32_t i = 0; i < w->num_sge; i++)
        if (s[i].length && !check_key(&q->sctx->self, s[i].lkey, s[i].addr, s[i].length, need, &r, true))
            return false;
    return true;
}

/** Peer gone (process dead, context closed, QP destroyed or in ERR)? Slow path. */
SHUNT_COLD bool rc_peer_gone(shm_qp *q) noexcept
{
    if (!q->rpeer || peer_dead(q->rpeer))
        return true;
    std::uint32_t st = q->rdesc->state.load(std::memory_order_acquire);
    return st == desc_free || q->rdesc->qpn != q->dest_qpn ||
           st == static_cast<std::uint32_t>(vq::qp_state::err) ||
           st == static_cast<std::uint32_t>(vq::qp_state::reset);
}

/** Called when the ring has no room: arms the dead-peer check on the first
 *  call, and @return true (re-arming) once every peer-check interval. */
SHUNT_COLD bool check_due(shm_qp *q) noexcept
{
    std::uint64_t now = env::tsc::now();
    if (q->blocked_since == 0) {
        q->blocked_since = now;
        return false;
    }
    if (now - q->blocked_since < peer_check_cycles())
        return false;
    q->blocked_since = now;
    return true;
}

/** Push a send-side completion. */
inline bool push_wc(shm_qp *q, const wqe *w, vq::wc_status st, bool cq_locked) noexcept
{
    shm_cq *c = q->scq;
    bool lk = !cq_locked && !c->single_threaded;
    if (lk)
        c->lock.lock();
    bool ok = c->space() > 0;
    if (ok) {
        static constexpr vq::wc_opcode opc[] = {
            vq::wc_opcode::send, vq::wc_opcode::send, vq::wc_opcode::send, vq::wc_opcode::send,
            vq::wc_opcode::tso, vq::wc_opcode::rdma_write, vq::wc_opcode::rdma_write,
            vq::wc_opcode::rdma_read, vq::wc_opcode::comp_swap, vq::wc_opcode::fetch_add,
            vq::wc_opcode::bind_mw, vq::wc_opcode::local_inv, vq::wc_opcode::flush,
        };
        std::uint32_t byte_len = (w->op == op_read) ? w->len : (w->op == op_cas || w->op == op_faa) ? 8 : 0;
        fill_wc(*c->next_entry(), w->wr_id, st, opc[w->op], byte_len, q->qp_num);
        c->commit();
    }
    if (lk)
        c->lock.unlock();
    return ok;
}

/* ---- sends ---- */

/** Wait for the receiver to copy a rendezvous send (w->rndv_ticket). */
exec_rc rndv_wait(shm_qp *q, wqe *w, vq::wc_status *st) noexcept
{
    // Observe the receiver's ack (acquire): it copied our buffer before it.
    std::uint32_t acked = q->desc->rndv_acked.load(std::memory_order_acquire);
    if (static_cast<std::int32_t>(acked - w->rndv_ticket) >= 0) {
        q->blocked_since = 0;
        *st = vq::wc_status::success;
        return ex_done;
    }
    if (q->desc->rndv_nak.load(std::memory_order_acquire)) {
        *st = vq::wc_status::rem_inv_req_err;
        return ex_done;
    }
    if (check_due(q) && rc_peer_gone(q)) {
        *st = vq::wc_status::retry_exc_err;
        return ex_done;
    }
    return ex_blocked;
}

/** Publish a rendezvous message: the receiver copies the data itself,
 *  straight from our registered memory (memcpy from our segment, or
 *  process_vm_readv), and acknowledges. */
/** Does every SGE of @p w lie in our segment (so that the receiver reaches
 *  it without cross-memory attach)? A bad key answers false: the chunked
 *  send reports it. */
bool in_segment(shm_qp *q, wqe *w) noexcept
{
    const vq::sge *sg = wqe_sges(q, w);
    for (std::uint32_t i = 0; i < w->num_sge; i++) {
        region_ref ref;
        if (sg[i].length && (!check_key(&q->sctx->self, sg[i].lkey, sg[i].addr, sg[i].length, 0, &ref, true) ||
                             ref.seg_off == no_seg_off))
            return false;
    }
    return true;
}

exec_rc rndv_send(shm_qp *q, wqe *w, std::uint8_t mop, vq::wc_status *st) noexcept
{
    txring r{q->tx_slots, q->tx_ctrl, q->tx_mask, &q->tx_tail, &q->tx_credit_head};
    alignas(16) std::uint8_t buf[sizeof(rndv_hdr) + max_sge * sizeof(rndv_piece)];
    auto *h = reinterpret_cast<rndv_hdr *>(buf);
    auto *pc = reinterpret_cast<rndv_piece *>(buf + sizeof(rndv_hdr));
    const vq::sge *sg = wqe_sges(q, w);
    std::uint32_t n = 0;
    for (std::uint32_t i = 0; i < w->num_sge; i++) {
        if (!sg[i].length)
            continue;
        region_ref ref;
        if (!check_key(&q->sctx->self, sg[i].lkey, sg[i].addr, sg[i].length, 0, &ref, true)) {
            *st = vq::wc_status::loc_prot_err;
            return ex_done;
        }
        pc[n].in_seg = ref.seg_off != no_seg_off;
        pc[n].where = pc[n].in_seg ? ref.seg_off : sg[i].addr;
        pc[n].len = sg[i].length;
        n++;
    }
    *h = rndv_hdr{mop, {}, w->len, n, 0};
    std::uint32_t bytes = static_cast<std::uint32_t>(sizeof(rndv_hdr) + n * sizeof(rndv_piece));
    if (!ring_reserve(r, slots_for(bytes))) {
        if (check_due(q) && rc_peer_gone(q)) {
            *st = vq::wc_status::retry_exc_err;
            return ex_done;
        }
        return ex_blocked;
    }
    src_cursor c;
    c.flat = buf;
    std::uint8_t fl = sf_first | sf_last | ((w->flags & vq::WR_SOLICITED) ? sf_solicited : 0);
    ring_put(r, msg_rndv, fl, w->imm, c, bytes, bytes);
    w->rndv_ticket = ++q->rndv_posted;
    w->stage = wqe_stage::rndv_pending;
    q->blocked_since = 0;
    return ex_pending;
}

/** Send @p len bytes from @p src as one message (chunked) on RC/UC. */
exec_rc rc_send(shm_qp *q, wqe *w, std::uint8_t mop, vq::wc_status *st) noexcept
{
    txring r{q->tx_slots, q->tx_ctrl, q->tx_mask, &q->tx_tail, &q->tx_credit_head};
    const std::uint32_t max_chunk = max_chunk_bytes(q->tx_mask + 1);
    std::uint8_t sol = (w->flags & vq::WR_SOLICITED) ? sf_solicited : 0;
    if (mop == msg_write_imm) {
        // Data already written; one header-only message carries imm and the length.
        if (!ring_reserve(r, 1)) [[unlikely]] {
            if (check_due(q) && rc_peer_gone(q)) {
                *st = vq::wc_status::retry_exc_err;
                return ex_done;
            }
            return ex_blocked;
        }
        src_cursor none;
        none.flat = nullptr;
        ring_put(r, mop, sf_first | sf_last | sol, w->imm, none, 0, w->len);
        q->blocked_since = 0;
        *st = vq::wc_status::success;
        return ex_done;
    }
    if (q->peer_lends) [[unlikely]] {
        // The receiver lends its ring: every message is one chunk of it.
        if (w->len > max_chunk) {
            *st = vq::wc_status::rem_inv_req_err;
            return ex_done;
        }
    } else if (!w->is_inline && lim().rndv_bytes && w->len >= lim().rndv_bytes && (lim().cma || in_segment(q, w))) {
        return rndv_send(q, w, mop, st);
    }
    std::uint32_t len = w->len;
    std::uint32_t imm = w->imm;
    src_cursor src = cursor_of(q, w);
    if (w->done)
        src.skip(w->done);
    do {
        std::uint32_t chunk = len - w->done < max_chunk ? len - w->done : max_chunk;
        if (!ring_reserve(r, slots_for(chunk))) [[unlikely]] {
            if (check_due(q) && rc_peer_gone(q)) {
                *st = vq::wc_status::retry_exc_err;
                return ex_done;
            }
            return ex_blocked;
        }
        std::uint8_t fl = sol;
        if (w->done == 0)
            fl |= sf_first;
        if (w->done + chunk == len)
            fl |= sf_last;
        ring_put(r, mop, fl, imm, src, chunk, chunk);
        w->done += chunk;
    } while (w->done < len);
    q->blocked_since = 0;
    *st = vq::wc_status::success;
    return ex_done;
}

/* ---- UD ---- */

SHUNT_COLD bool ud_claim(shm_qp *q, ud_dest *d) noexcept
{
    peer *p = d->p;
    std::uint32_t idx = qpn_index(d->qpn);
    if (idx >= p->max_qp)
        return false;
    qp_desc *rd = &p->qps()[idx];
    // As the RC claim in modify_qp: counted in entering from before the
    // descriptor is read until the owner CAS is re-checked.
    rd->entering.fetch_add(1, std::memory_order_seq_cst);
    struct leave {
        qp_desc *rd;
        ~leave() { rd->entering.fetch_sub(1, std::memory_order_release); }
    } guard{rd};
    if (rd->state.load(std::memory_order_seq_cst) == desc_free || rd->qpn != d->qpn ||
        rd->type != static_cast<std::uint32_t>(vq::qp_type::ud))
        return false;
    std::uint64_t roff = std::atomic_ref<std::uint64_t>(rd->ud_rings_off).load(std::memory_order_seq_cst);
    // The receiver's descriptor is peer-written: its pool must be one this
    // driver could have made, inside its heap, before we write a byte of it.
    const std::uint32_t nrings = rd->ud_nrings, rslots = rd->ud_ring_slots;
    if (nrings == 0 || nrings > 64 || rslots < 128 || rslots > 65536 || (rslots & (rslots - 1)) != 0 ||
        (roff & 63) != 0 || !p->in_heap(roff, ring_bytes(rslots) * nrings)) [[unlikely]] {
        SHUNT_LOG(shm_tx_log, warning, "UD destination %#x describes rings outside its segment: dropped", d->qpn);
        return false;
    }
    const std::size_t stride = ring_bytes(rslots);
    for (std::uint32_t i = 0; i < nrings; i++) {
        char *base = p->base + roff + i * stride;
        auto *ctrl = reinterpret_cast<ring_ctrl *>(base);
        std::uint64_t expect = 0;
        if (!ctrl->owner.compare_exchange_strong(expect, q->ud_id, std::memory_order_seq_cst))
            continue;
        if (rd->state.load(std::memory_order_seq_cst) == desc_free || rd->qpn != d->qpn ||
            std::atomic_ref<std::uint64_t>(rd->ud_rings_off).load(std::memory_order_seq_cst) != roff) {
            ctrl->owner.store(0, std::memory_order_seq_cst); // the QP went away meanwhile
            return false;
        }
        ctrl->src_qpn = q->qp_num;
        ctrl->sender_gone.store(0, std::memory_order_relaxed);
        d->epoch = ctrl->epoch.load(std::memory_order_acquire);
        // A reclaimed ring continues where its receiver stands: it published
        // its exact position in consumed before freeing the ring.
        std::uint32_t start = ctrl->consumed.load(std::memory_order_acquire);
        // Make the ring visible to the receiver's scan (after src_qpn).
        rd->ud_active.fetch_or(1ull << i, std::memory_order_release);
        d->ctrl = ctrl;
        d->pool_off = roff;
        d->slots = reinterpret_cast<slot *>(base + sizeof(ring_ctrl));
        d->mask = rslots - 1;
        d->tail = start;
        d->credit_head = start;
        return true;
    }
    return false;
}

exec_rc ud_send(shm_qp *q, wqe *w, std::uint8_t mop, vq::wc_status *st) noexcept
{
    *st = vq::wc_status::success;
    auto *d = static_cast<ud_dest *>(w->p0);
    if (d->failed) [[unlikely]] {
        env::stats::on_drop(q->io);
        return ex_done; // unreliable: dropped
    }
    if (!d->ctrl && !ud_claim(q, d)) [[unlikely]] {
        d->failed = true;
        env::stats::on_drop(q->io);
        return ex_done;
    }
    qp_desc *rd = &d->p->qps()[qpn_index(d->qpn)];
    if (rd->qpn != d->qpn || rd->state.load(std::memory_order_acquire) == desc_free) [[unlikely]] {
        // The receiver is gone: release our ring (its memory is held until
        // we do) and drop this and every later datagram to it.
        say_gone(d->ctrl, d->epoch);
        d->failed = true;
        env::stats::on_drop(q->io);
        return ex_done;
    }
    if (std::atomic_ref<std::uint64_t>(rd->ud_rings_off).load(std::memory_order_relaxed) != d->pool_off)
        [[unlikely]] {
        // The receiver was reset and receives in new rings: release the old
        // one and claim anew.
        say_gone(d->ctrl, d->epoch);
        d->ctrl = nullptr;
        if (!ud_claim(q, d)) {
            d->failed = true;
            env::stats::on_drop(q->io);
            return ex_done;
        }
    }
    if (rd->qkey != w->qkey) [[unlikely]] {
        env::stats::on_drop(q->io);
        return ex_done; // wrong Q_Key: dropped, as on a wire
    }
    txring r{d->slots, d->ctrl, d->mask, &d->tail, &d->credit_head};
    std::uint8_t sol = (w->flags & vq::WR_SOLICITED) ? sf_solicited : 0;
    if (w->op == op_tso || (w->flags & vq::WR_IP_CSUM)) {
        // Build each message in the staging buffer: header + segment, fixed up.
        std::uint32_t hdr = w->op == op_tso ? w->hdr_sz : 0;
        std::uint32_t mss = w->op == op_tso ? w->mss : (w->len ? w->len : 1);
        src_cursor src = cursor_of(q, w);
        if (w->done)
            src.skip(w->done);
        std::uint32_t seg = mss ? w->done / mss : 0;
        do {
            std::uint32_t part = w->len - w->done < mss ? w->len - w->done : mss;
            if (!ring_reserve(r, slots_for(hdr + part))) {
                if (check_due(q) && peer_dead(d->p)) {
                    d->failed = true; // dead receiver: this and every later datagram dropped
                    env::stats::on_drop(q->io);
                    return ex_done;
                }
                return ex_blocked;
            }
            if (hdr)
                std::memcpy(q->stage, wqe_inl(q, w), hdr);
            src.copy(q->stage + hdr, part);
            bool last = w->done + part >= w->len;
            if (w->op == op_tso)
                tso_fixup(q->stage, hdr, part, seg, w->done, last);
            ip_checksums(q->stage, hdr + part);
            src_cursor staged;
            staged.flat = q->stage;
            ring_put(r, mop, sf_first | sf_last | sol, w->imm, staged, hdr + part, hdr + part);
            w->done += part;
            seg++;
        } while (w->done < w->len);
        q->blocked_since = 0;
        return ex_done;
    }
    if (!ring_reserve(r, slots_for(w->len))) [[unlikely]] {
        if (check_due(q) && peer_dead(d->p)) {
            d->failed = true;
            return ex_done;
        }
        return ex_blocked;
    }
    src_cursor src = cursor_of(q, w);
    ring_put(r, mop, sf_first | sf_last | sol, w->imm, src, w->len, w->len);
    q->blocked_since = 0;
    return ex_done;
}

/* ---- RDMA and atomics ---- */

/** Remote check for RC/UC one-sided operations. */
struct pinned {
    mr_entry *e = nullptr;
    ~pinned()
    {
        if (e)
            unpin(e);
    }
};
inline bool remote_ok(shm_qp *q, std::uint32_t rkey, std::uint64_t raddr, std::uint64_t len,
                      unsigned need, region_ref *ref, pinned &pin) noexcept
{
    if ((q->rdesc->access & need) != need)
        return false;
    if (len == 0) [[unlikely]] { // nothing to reach: no R_Key or address to check (IBTA C9-88)
        *ref = region_ref{raddr, no_seg_off};
        return true;
    }
    return pin_key(q->rpeer, rkey, raddr, len, need, ref, &pin.e);
}

/** The status of a copy to or from the peer that failed. Call right after
 *  it: ESRCH from process_vm_readv/writev is a process that is exiting
 *  (its memory already gone) before its death is visible to peer_dead. */
inline vq::wc_status remote_failure(shm_qp *q) noexcept
{
    if (errno == ESRCH || peer_dead(q->rpeer))
        return vq::wc_status::retry_exc_err; // this WR reports it; the rest flush
    return vq::wc_status::rem_access_err;
}

vq::wc_status do_write(shm_qp *q, wqe *w) noexcept
{
    region_ref ref;
    pinned pin;
    if (!remote_ok(q, w->rkey, w->raddr, w->len, vq::ACCESS_REMOTE_WRITE, &ref, pin))
        return vq::wc_status::rem_access_err;
    if (w->is_inline) {
        if (!peer_write(q->rpeer, ref, wqe_inl(q, w), w->len))
            return remote_failure(q);
        return vq::wc_status::success;
    }
    const vq::sge *s = wqe_sges(q, w);
    for (std::uint32_t i = 0; i < w->num_sge; i++) {
        if (!peer_write(q->rpeer, ref, reinterpret_cast<const void *>(s[i].addr), s[i].length))
            return remote_failure(q);
        ref.addr += s[i].length;
        if (ref.seg_off != no_seg_off)
            ref.seg_off += s[i].length;
    }
    return vq::wc_status::success;
}

/* ---- Split reads ----
 * One copy of a large region (process_vm_readv, or memcpy from the
 * target's segment) runs at one core's speed. A read of at least
 * SHUNT_SHM_SPLIT_BYTES into one SGE is split: the initiator offers the
 * second part to the target (a msg_split message in its ring, the offer in
 * our descriptor's split_claim), copies the first part, and then either
 * takes the second part back (nobody claimed it: it copies that too) or
 * waits for the target, which claimed it from its receive progress and
 * copies it (memcpy into our segment, process_vm_writev elsewhere). Each
 * byte is copied once, by one of the two; the target's part is help it
 * gives while it polls anyway, never something the read waits for unless
 * the target already started it. */

/** Where the initiator's part of a split read of @p len bytes into @p dst
 *  ends: half way, moved up to a page boundary of the destination so that
 *  the two copies pin no page in common. */
inline std::uint32_t split_point(std::uint64_t dst, std::uint32_t len) noexcept
{
    constexpr std::uint64_t page = 4096;
    const std::uint64_t half = dst + len / 2;
    const std::uint64_t up = (half + page - 1) & ~(page - 1);
    return up - dst < len ? static_cast<std::uint32_t>(up - dst) : len / 2;
}

/** Offer the part of @p w after @p mine bytes to the target, to be copied
 *  to @p dst (+ mine): our address, or with split_dst_seg in @p flags an
 *  offset in our segment. @return false (nothing offered) when the ring has
 *  no slot for the message. */
bool split_offer(shm_qp *q, wqe *w, std::uint64_t dst, std::uint32_t flags, std::uint32_t mine) noexcept
{
    txring r{q->tx_slots, q->tx_ctrl, q->tx_mask, &q->tx_tail, &q->tx_credit_head};
    if (!ring_reserve(r, 1))
        return false;
    std::uint32_t t = ++q->split_tickets;
    if (t == 0) // ticket 0 is the descriptor's initial word: never offered
        t = ++q->split_tickets;
    // Published by the message's sequence word (release) below: the target
    // claims only after reading the message.
    q->desc->split_claim.store(split_word(t, split_offered), std::memory_order_relaxed);
    split_req m{t, w->rkey, w->raddr + mine, dst + mine, w->len - mine, flags};
    src_cursor c;
    c.flat = reinterpret_cast<const std::uint8_t *>(&m);
    ring_put(r, msg_split, sf_first | sf_last, 0, c, sizeof m, sizeof m);
    w->split_ticket = t;
    q->split_st.offered.add();
    return true;
}

/** The offered part of @p w copied by the initiator (the target left it, or
 *  gave it back). */
vq::wc_status split_copy_rest(shm_qp *q, const wqe *w) noexcept
{
    const std::uint64_t dst = wqe_sges(q, w)[0].addr;
    const std::uint32_t mine = split_point(dst, w->len);
    region_ref ref;
    pinned pin;
    if (!remote_ok(q, w->rkey, w->raddr + mine, w->len - mine, vq::ACCESS_REMOTE_READ, &ref, pin))
        return vq::wc_status::rem_access_err; // invalidated since the first part
    if (!peer_read(q->rpeer, ref, reinterpret_cast<void *>(dst + mine), w->len - mine))
        return remote_failure(q);
    return vq::wc_status::success;
}

/** Is the target of a split read gone, so that it will never finish the
 *  part it claimed? Only its death or its QP's end count: a target in ERR
 *  still finishes a copy it started. */
SHUNT_COLD bool split_peer_gone(shm_qp *q) noexcept
{
    if (!q->rpeer || peer_dead(q->rpeer))
        return true;
    return q->rdesc->state.load(std::memory_order_acquire) == desc_free || q->rdesc->qpn != q->dest_qpn;
}

/** A split read whose part the target claimed: done once the target says
 *  so (its copy failed: we copy the part). */
exec_rc split_wait(shm_qp *q, wqe *w, vq::wc_status *st) noexcept
{
    const std::uint32_t t = w->split_ticket;
    // Observe the target's verdict (acquire): its writes into our buffer
    // returned before it stored split_done.
    const std::uint64_t v = q->desc->split_claim.load(std::memory_order_acquire);
    if (v == split_word(t, split_claimed)) {
        if (!(check_due(q) && split_peer_gone(q)))
            return ex_blocked;
        *st = vq::wc_status::retry_exc_err; // died inside its copy: the part is not whole
    } else {
        *st = w->status; // our part's outcome
        // Anything but done (failed, or a word the target should not have
        // written): the part is ours to copy.
        if (v == split_word(t, split_done))
            q->split_st.peer_copied.add();
        else if (*st == vq::wc_status::success)
            *st = split_copy_rest(q, w);
    }
    q->split_busy = false;
    q->blocked_since = 0;
    return ex_done;
}

/** Does read @p w write any of our bytes that the target's part of the
 *  pending split read writes? */
bool lands_in_split(shm_qp *q, const wqe *w) noexcept
{
    const vq::sge *s = wqe_sges(q, w);
    for (std::uint32_t i = 0; i < w->num_sge; i++)
        if (s[i].length && s[i].addr < q->split_hi && q->split_lo < s[i].addr + s[i].length)
            return true;
    return false;
}

/** RDMA read. A large one from private memory is split with the target
 *  (above): ex_pending while the target copies its part. */
exec_rc do_read(shm_qp *q, wqe *w, vq::wc_status *st) noexcept
{
    region_ref ref;
    pinned pin;
    if (!remote_ok(q, w->rkey, w->raddr, w->len, vq::ACCESS_REMOTE_READ, &ref, pin)) {
        *st = vq::wc_status::rem_access_err;
        return ex_done;
    }
    const vq::sge *s = wqe_sges(q, w);
    const limits &l = lim();
    region_ref dref; // our destination: in our segment the target copies its part with memcpy
    if (l.split_bytes && w->len >= l.split_bytes && w->num_sge == 1 && q->type == vq::qp_type::rc &&
        !q->rpeer->self && !q->split_busy && (ref.seg_off != no_seg_off || l.cma) &&
        check_key(&q->sctx->self, s[0].lkey, s[0].addr, s[0].length, vq::ACCESS_LOCAL_WRITE, &dref, true) &&
        (dref.seg_off != no_seg_off || l.cma)) {
        const std::uint32_t mine = split_point(s[0].addr, w->len);
        const bool dst_seg = dref.seg_off != no_seg_off;
        if (split_offer(q, w, dst_seg ? dref.seg_off : s[0].addr, dst_seg ? split_dst_seg : 0, mine)) {
            *st = peer_read(q->rpeer, ref, reinterpret_cast<void *>(s[0].addr), mine) ? vq::wc_status::success
                                                                                     : remote_failure(q);
            std::uint64_t offered = split_word(w->split_ticket, split_offered);
            // Take the part back unless the target claimed it (acquire: a
            // verdict it already stored covers its copy).
            if (q->desc->split_claim.compare_exchange_strong(offered, split_word(w->split_ticket, split_taken_back),
                                                             std::memory_order_acq_rel)) {
                if (*st == vq::wc_status::success)
                    *st = split_copy_rest(q, w);
                return ex_done;
            }
            w->status = *st;
            q->split_busy = true;
            q->split_lo = s[0].addr + mine;
            q->split_hi = s[0].addr + w->len;
            w->stage = wqe_stage::split_pending;
            return split_wait(q, w, st) == ex_done ? ex_done : ex_pending;
        }
    }
    for (std::uint32_t i = 0; i < w->num_sge; i++) {
        if (!peer_read(q->rpeer, ref, reinterpret_cast<void *>(s[i].addr), s[i].length)) {
            *st = remote_failure(q);
            return ex_done;
        }
        ref.addr += s[i].length;
        if (ref.seg_off != no_seg_off)
            ref.seg_off += s[i].length;
    }
    *st = vq::wc_status::success;
    return ex_done;
}

/** Take the peer's stripe lock for @p addr (atomics on memory outside segments). */
void stripe_lock(peer *p, std::uint64_t addr, std::int32_t me) noexcept
{
    lock_line &l = p->locks()[(addr >> 3) % num_lock_stripes];
    std::uint32_t spins = 0;
    for (;;) {
        std::int32_t h = 0;
        if (l.holder.compare_exchange_weak(h, me, std::memory_order_acquire))
            return;
        _mm_pause();
        if (++spins % (1u << 16) == 0 && h != 0 && ::kill(h, 0) < 0 && errno == ESRCH)
            l.holder.compare_exchange_strong(h, 0, std::memory_order_relaxed); // holder died
    }
}
void stripe_unlock(peer *p, std::uint64_t addr) noexcept
{
    p->locks()[(addr >> 3) % num_lock_stripes].holder.store(0, std::memory_order_release);
}

vq::wc_status do_atomic(shm_qp *q, wqe *w) noexcept
{
    region_ref ref;
    pinned pin;
    if (!remote_ok(q, w->rkey, w->raddr, 8, vq::ACCESS_REMOTE_ATOMIC, &ref, pin))
        return vq::wc_status::rem_access_err;
    std::uint64_t old;
    peer *p = q->rpeer;
    if (ref.seg_off != no_seg_off) {
        if (ref.seg_off & 7) [[unlikely]]
            return vq::wc_status::rem_access_err; // the target's entry says so: no atomic can be done there
        std::atomic_ref<std::uint64_t> a(*reinterpret_cast<std::uint64_t *>(p->base + ref.seg_off));
        if (w->op == op_cas) {
            old = w->a0;
            a.compare_exchange_strong(old, w->a1, std::memory_order_seq_cst);
        } else {
            old = a.fetch_add(w->a0, std::memory_order_seq_cst);
        }
    } else {
        static const std::int32_t me = static_cast<std::int32_t>(getpid());
        stripe_lock(p, w->raddr, me);
        bool ok = peer_read(p, ref, &old, 8);
        if (ok) {
            std::uint64_t nv = w->op == op_cas ? (old == w->a0 ? w->a1 : old) : old + w->a0;
            if (nv != old)
                ok = peer_write(p, ref, &nv, 8);
        }
        stripe_unlock(p, w->raddr);
        if (!ok)
            return remote_failure(q);
    }
    if (w->num_sge)
        std::memcpy(reinterpret_cast<void *>(wqe_sges(q, w)[0].addr), &old, 8);
    return vq::wc_status::success;
}

vq::wc_status do_flush(shm_qp *q, wqe *w) noexcept
{
    unsigned need = (w->a1 & 0xff) == vq::FLUSH_GLOBAL ? vq::ACCESS_FLUSH_GLOBAL : vq::ACCESS_FLUSH_PERSISTENT;
    std::uint8_t level = static_cast<std::uint8_t>(w->a1 >> 8);
    peer *p = q->rpeer;
    region_ref ref;
    if (level == vq::FLUSH_MR) {
        std::uint32_t idx = key_index(w->rkey);
        if (idx >= p->max_mr)
            return vq::wc_status::rem_access_err;
        mr_entry &e = p->mrs()[idx];
        if (!check_key(p, w->rkey, e.addr, 0, need, &ref))
            return vq::wc_status::rem_access_err;
    } else if (!check_key(p, w->rkey, w->raddr, w->a0, need, &ref)) {
        return vq::wc_status::rem_access_err;
    }
    // Every earlier write of this QP was completed by this thread before
    // this point (writes execute in order, synchronously); the fence makes
    // them globally visible before the completion is.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return vq::wc_status::success;
}

vq::wc_status do_bind(shm_qp *q, wqe *w) noexcept
{
    shm_ctx *c = q->sctx;
    auto *mw = static_cast<shm_mw *>(static_cast<vq::mw *>(w->p0));
    auto *mr = static_cast<shm_mr *>(static_cast<vq::mr *>(w->p1));
    std::lock_guard<std::mutex> g(c->lock);
    // Any key byte, 0 included (inc_rkey wraps to it). The index bits are
    // the window's (b_bind checked them), never 0 (table_alloc skips index
    // 0), so the key is not 0.
    if (c->mw_obj[mw->index] != mw)
        return vq::wc_status::mw_bind_err;
    mr_entry &e = c->self.mrs()[mw->index];
    if (w->a1 == 0) { // unbind
        entry_invalidate(c, mw->index);
        if (mw->bound)
            mw->bound->windows--;
        mw->bound = nullptr;
        mw->rkey = w->rkey;
        return vq::wc_status::success;
    }
    auto base = reinterpret_cast<std::uint64_t>(mr->addr);
    if (c->mr_obj[mr->index] != mr || !(mr->access & vq::ACCESS_MW_BIND) || mr->pd != mw->pd ||
        w->a0 < base || w->a0 - base > mr->length || w->a1 > mr->length - (w->a0 - base) ||
        ((w->imm & (vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_ATOMIC)) &&
         !(mr->access & vq::ACCESS_LOCAL_WRITE)))
        return vq::wc_status::mw_bind_err;
    std::uint64_t moff = c->self.mrs()[mr->index].seg_off;
    entry_invalidate(c, mw->index); // accesses through the old binding are over (or retired)
    std::atomic_thread_fence(std::memory_order_release);
    e.access = (w->imm & ~vq::ACCESS_LOCAL_WRITE) | entry_mw;
    e.addr = w->a0;
    e.length = w->a1;
    e.seg_off = moff == no_seg_off ? no_seg_off : moff + (w->a0 - base);
    e.key.store(w->rkey, std::memory_order_release); // publish the window
    if (mw->bound != mr) {
        if (mw->bound)
            mw->bound->windows--;
        mr->windows++;
        mw->bound = mr;
    }
    mw->rkey = w->rkey;
    return vq::wc_status::success;
}

} // namespace

/** Invalidate key @p k of our context (local_inv, send_inv). @return success. */
bool invalidate_key(shm_ctx *c, std::uint32_t k) noexcept
{
    std::uint32_t idx = key_index(k);
    std::lock_guard<std::mutex> g(c->lock);
    if (k == 0 || idx >= c->mr_obj.size() || (!c->mr_obj[idx] && !c->mw_obj[idx]))
        return false;
    if (const shm_mw *w = c->mw_obj[idx]; w && !w->bound && w->rkey == k)
        return true; // a free window named by its key: nothing to take away (as rxe and the device do)
    mr_entry &e = c->self.mrs()[idx];
    if (e.key.load(std::memory_order_relaxed) != k)
        return false;
    entry_invalidate(c, idx);
    if (shm_mw *w = c->mw_obj[idx]) {
        if (w->bound)
            w->bound->windows--;
        w->bound = nullptr;
    }
    return true;
}

namespace {

exec_rc exec(shm_qp *q, wqe *w, vq::wc_status *st) noexcept
{
    bool rc_like = q->type != vq::qp_type::ud;
    if (w->stage == wqe_stage::fresh) {
        // First attempt: check local keys (send data is read, read/atomic results written).
        unsigned need = (w->op == op_read || w->op == op_cas || w->op == op_faa) ? vq::ACCESS_LOCAL_WRITE : 0;
        if (w->op != op_bind && w->op != op_local_inv && w->op != op_flush && !local_sges_ok(q, w, need)) {
            *st = vq::wc_status::loc_prot_err;
            return ex_done;
        }
        w->stage = wqe_stage::keys_checked;
    }
    switch (w->op) {
    case op_send:
        return rc_like ? rc_send(q, w, msg_send, st) : ud_send(q, w, msg_send, st);
    case op_send_imm:
        return rc_like ? rc_send(q, w, msg_send_imm, st) : ud_send(q, w, msg_send_imm, st);
    case op_send_inv:
        return rc_send(q, w, msg_send_inv, st);
    case op_tso:
        return ud_send(q, w, msg_send, st);
    case op_write:
        *st = do_write(q, w);
        break;
    case op_write_imm:
        if (w->stage == wqe_stage::keys_checked) {
            *st = do_write(q, w);
            if (*st != vq::wc_status::success)
                break;
            w->stage = wqe_stage::data_written; // the notification may wait for ring space
        }
        return rc_send(q, w, msg_write_imm, st);
    case op_read:
        return do_read(q, w, st);
    case op_cas:
    case op_faa:
        *st = do_atomic(q, w);
        break;
    case op_bind:
        *st = do_bind(q, w);
        break;
    case op_local_inv:
        *st = invalidate_key(q->sctx, w->imm) ? vq::wc_status::success : vq::wc_status::loc_prot_err;
        break;
    case op_flush:
        *st = do_flush(q, w);
        break;
    default:
        *st = vq::wc_status::loc_qp_op_err;
        break;
    }
    if (q->type == vq::qp_type::uc && *st == vq::wc_status::rem_access_err)
        *st = vq::wc_status::success; // UC: the responder drops bad requests silently
    return ex_done;
}

/** Statistics of a send-queue entry leaving the queue with @p st: a
 *  message sent (and its latency when signalled), an error, or nothing for
 *  a flushed entry that never ran. */
inline void count_completion(shm_qp *q, const wqe *w, vq::wc_status st) noexcept
{
    if (!q->io)
        return;
    if (st == vq::wc_status::success) {
        env::stats::on_tx(q->io, w->len);
        if (w->flags & vq::WR_SIGNALED)
            env::stats::on_complete(q->io, w->posted);
    } else if (st != vq::wc_status::wr_flush_err) {
        env::stats::on_error(q->io);
    }
}
} // namespace

void sq_progress(shm_qp *q, bool cq_locked) noexcept
{
    sq_run(q, cq_locked);
    q->sq_busy.store(q->sq_head != q->sq_tail, std::memory_order_relaxed);
}

void sq_run(shm_qp *q, bool cq_locked) noexcept
{
    auto in_err = [q] {
        return q->state.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(vq::qp_state::err);
    };
    // Execute in order from sq_exec while the rings have room. A request
    // that fails stops execution: the QP goes to ERR and the rest flush.
    while (q->sq_exec != q->sq_tail && !in_err()) {
        wqe *w = &q->sq[q->sq_exec & q->sq_mask];
        // While the target may still be copying its part of a split read,
        // only further reads start (unfenced): anything else could change
        // the memory it copies from (a write, an atomic, a send into a
        // receive there) or rely on the read's data, and on an RC wire the
        // responder executes a read before the requests after it. Nor a
        // read into bytes the target's part writes: the later read's data
        // must be what stays there, as read responses land in order.
        if (q->split_busy && (w->op != op_read || (w->flags & vq::WR_FENCE) || lands_in_split(q, w))) [[unlikely]]
            break;
        vq::wc_status st = vq::wc_status::success;
        exec_rc r = exec(q, w, &st);
        if (r == ex_blocked)
            break;
        q->sq_exec++;
        if (r == ex_done) {
            w->stage = wqe_stage::finished;
            w->status = st;
            if (st == vq::wc_status::retry_exc_err) // the peer is gone
                drain_before_flush(q);
            if (st != vq::wc_status::success)
                qp_to_err(q);
        }
    }
    // Complete in order from sq_head.
    while (q->sq_head != q->sq_tail) {
        wqe *w = &q->sq[q->sq_head & q->sq_mask];
        vq::wc_status st;
        if (w->stage == wqe_stage::finished) {
            st = w->status;
        } else if (w->stage == wqe_stage::rndv_pending && rndv_wait(q, w, &st) == ex_done) {
            // the receiver copied it (or the peer is gone: retry_exc_err)
        } else if (w->stage == wqe_stage::split_pending && split_wait(q, w, &st) == ex_done) {
            // the target copied its part (or died: retry_exc_err)
        } else if (in_err()) {
            // Only the first outstanding request reports the dead peer.
            st = q->peer_died.exchange(false, std::memory_order_relaxed) ? vq::wc_status::retry_exc_err
                                                                        : vq::wc_status::wr_flush_err;
        } else {
            break; // not executed yet, or a rendezvous still being copied
        }
        if (((w->flags & vq::WR_SIGNALED) || st != vq::wc_status::success) &&
            !push_wc(q, w, st, cq_locked)) [[unlikely]] {
            w->stage = wqe_stage::finished; // completion owed: retried on the next progress
            w->status = st;
            break;
        }
        count_completion(q, w, st);
        q->sq_head++;
        if (q->sq_exec - q->sq_head > q->sq_tail - q->sq_head)
            q->sq_exec = q->sq_head; // flushed requests were never executed
        if (st == vq::wc_status::retry_exc_err)
            drain_before_flush(q);
        if (st != vq::wc_status::success && st != vq::wc_status::wr_flush_err)
            qp_to_err(q);
    }
    env::stats::on_depth(q->io, q->sq_tail - q->sq_head);
}

void split_settle(shm_qp *q) noexcept
{
    if (!q->split_busy || !q->desc)
        return;
    const std::uint32_t t = q->split_tickets; // one at a time: the last one offered
    const std::uint64_t give_up = env::tsc::now() + 20 * peer_check_cycles();
    while (q->desc->split_claim.load(std::memory_order_acquire) == split_word(t, split_claimed) &&
           !split_peer_gone(q)) {
        if (env::tsc::now() > give_up) {
            SHUNT_LOG(shm_tx_log, error,
                      "QP %#x: the peer has copied its part of a read for %u ms and is still at it: letting go of "
                      "the read's buffer regardless",
                      q->qp_num, 20 * lim().peer_check_ms);
            break;
        }
        _mm_pause();
    }
    q->split_busy = false;
}

void qp_to_err(shm_qp *q) noexcept
{
    std::uint32_t prev = q->state.exchange(static_cast<std::uint32_t>(vq::qp_state::err));
    if (prev == static_cast<std::uint32_t>(vq::qp_state::err))
        return;
    if (q->desc)
        q->desc->state.store(static_cast<std::uint32_t>(vq::qp_state::err), std::memory_order_release);
    // Tell the peer: it polls this flag when its ring from us runs empty.
    if (q->tx_ctrl)
        say_gone(q->tx_ctrl, q->tx_epoch);
}

} // namespace shunt::drv::shm
