/* drivers/shm: the receive side. Runs under the receive CQ's lock (or in its
 * single polling thread): consumes messages from the QP's ring(s), matches
 * each with a posted receive (the QP's or its SRQ's), scatters the payload
 * and produces the completion. */
#include <sys/uio.h>

#include "env/log.h"
#include "shm.h"

namespace shunt::drv::shm {

SHUNT_LOG_COMPONENT(shm_rx_log, "shm");

namespace {

using vq::wc_status;

/** Dequeue a receive into the QP's in-progress state. @return false if none posted. */
inline bool take_recv(shm_qp *q) noexcept
{
    recvq *rq = q->rq;
    bool shared = q->ssrq != nullptr;
    if (shared)
        rq->clock.lock();
    std::uint32_t h = rq->head.load(std::memory_order_relaxed);
    // Observe a posted receive: its entry was written before tail was released.
    if (h == rq->tail.load(std::memory_order_acquire)) {
        if (shared)
            rq->clock.unlock();
        return false;
    }
    const rwqe &r = rq->wqe[h & rq->mask];
    const vq::sge *sg = &rq->sges[static_cast<std::size_t>(h & rq->mask) * rq->max_sge];
    q->rx_wc.wr_id = r.wr_id;
    q->rx_nsge = r.num_sge;
    for (std::uint32_t i = 0; i < r.num_sge; i++)
        q->rx_sges[i] = sg[i];
    // Free the entry for producers (our reads of it come first).
    rq->head.store(h + 1, std::memory_order_release);
    if (shared)
        rq->clock.unlock();
    return true;
}

/** Scatter @p len bytes of a chunk (first slot data + continuation slots) at
 *  offset q->rx_off of the receive's SGEs. @return status. */
wc_status scatter(shm_qp *q, slot *slots, std::uint32_t mask, std::uint32_t pos, std::uint32_t len) noexcept
{
    // Capacity and key checks.
    std::uint64_t cap = 0;
    for (std::uint32_t i = 0; i < q->rx_nsge; i++)
        cap += q->rx_sges[i].length;
    if (q->rx_off + static_cast<std::uint64_t>(len) > cap)
        return wc_status::loc_len_err;
    if (q->rx_off == 0) {
        region_ref r;
        for (std::uint32_t i = 0; i < q->rx_nsge; i++) {
            const vq::sge &s = q->rx_sges[i];
            if (s.length && !check_key(&q->sctx->self, s.lkey, s.addr, s.length,
                                       vq::ACCESS_LOCAL_WRITE, &r, true))
                return wc_status::loc_prot_err;
        }
    }
    // Source pieces: the first slot's data, then slot runs up to the ring's end.
    std::uint32_t sgi = 0;
    std::uint64_t skip = q->rx_off;
    while (sgi < q->rx_nsge && skip >= q->rx_sges[sgi].length)
        skip -= q->rx_sges[sgi++].length;
    std::uint32_t sgoff = static_cast<std::uint32_t>(skip);
    auto put = [&](const std::uint8_t *src, std::uint32_t n) {
        while (n) {
            const vq::sge &s = q->rx_sges[sgi];
            std::uint32_t k = s.length - sgoff < n ? s.length - sgoff : n;
            std::memcpy(reinterpret_cast<std::uint8_t *>(s.addr) + sgoff, src, k);
            src += k;
            n -= k;
            sgoff += k;
            if (sgoff == s.length) {
                sgi++;
                sgoff = 0;
            }
        }
    };
    slot *s = &slots[pos & mask];
    std::uint32_t first = len < slot_payload ? len : slot_payload;
    put(s->data, first);
    std::uint32_t rest = len - first;
    std::uint32_t i = (pos + 1) & mask;
    while (rest) {
        std::uint32_t run_slots = mask + 1 - i;
        std::uint32_t run = run_slots * 64 < rest ? run_slots * 64 : rest;
        put(reinterpret_cast<const std::uint8_t *>(&slots[i]), run);
        rest -= run;
        i = (i + (run + 63) / 64) & mask;
    }
    return wc_status::success;
}

/** Rendezvous: copy a large send straight from the sender's registered
 *  memory into the receive's SGEs. */
wc_status rndv_copy(shm_qp *q, const rndv_hdr &h, const rndv_piece *pc) noexcept
{
    std::uint64_t cap = 0;
    for (std::uint32_t i = 0; i < q->rx_nsge; i++)
        cap += q->rx_sges[i].length;
    if (h.total > cap)
        return wc_status::loc_len_err;
    region_ref r;
    for (std::uint32_t i = 0; i < q->rx_nsge; i++) {
        const vq::sge &s = q->rx_sges[i];
        if (s.length && !check_key(&q->sctx->self, s.lkey, s.addr, s.length, vq::ACCESS_LOCAL_WRITE, &r, true))
            return wc_status::loc_prot_err;
    }
    peer *p = q->rpeer;
    std::uint32_t sgi = 0, sgoff = 0;
    std::uint64_t done = 0;
    for (std::uint32_t k = 0; k < h.nsge; k++) {
        std::uint32_t left = pc[k].len;
        std::uint64_t from = pc[k].where;
        if (done + left > h.total)
            return wc_status::rem_inv_req_err; // malformed descriptor
        // A piece in the sender's segment must lie inside it (overflow-safe:
        // the descriptor is peer-written).
        if (pc[k].in_seg && !range_ok(from, left, p->size))
            return wc_status::rem_access_err;
        while (left) {
            // Local destination pieces for this source range (at most the SGE count).
            iovec lio[max_sge_rx];
            std::uint32_t nl = 0, take = 0;
            std::uint32_t i = sgi, o = sgoff;
            while (take < left && i < q->rx_nsge && nl < max_sge_rx) {
                std::uint32_t room = q->rx_sges[i].length - o;
                std::uint32_t k2 = room < left - take ? room : left - take;
                if (k2) {
                    lio[nl].iov_base = reinterpret_cast<std::uint8_t *>(q->rx_sges[i].addr) + o;
                    lio[nl].iov_len = k2;
                    nl++;
                }
                take += k2;
                o += k2;
                if (o == q->rx_sges[i].length) {
                    i++;
                    o = 0;
                }
            }
            if (pc[k].in_seg) {
                const std::uint8_t *src = reinterpret_cast<const std::uint8_t *>(p->base + from);
                for (std::uint32_t j = 0; j < nl; j++) {
                    std::memcpy(lio[j].iov_base, src, lio[j].iov_len);
                    src += lio[j].iov_len;
                }
            } else {
                // Private memory of the sender, ourselves included: the
                // address came through shared memory, so it is read by the
                // kernel, which fails a bad one instead of faulting.
                if (!lim().cma)
                    return wc_status::rem_access_err;
                iovec rio{reinterpret_cast<void *>(from), take};
                ssize_t got = process_vm_readv(p->pid, lio, nl, &rio, 1, 0);
                if (got != static_cast<ssize_t>(take))
                    return wc_status::rem_access_err;
            }
            from += take;
            left -= take;
            done += take;
            sgi = i;
            sgoff = o;
        }
    }
    q->rx_off = static_cast<std::uint32_t>(done);
    return wc_status::success;
}

/** Return credits in batches of a quarter ring: the slots before @p head
 *  are read (published with release: our reads of them come first). */
inline void rx_credit(ring_ctrl *ctrl, std::uint32_t mask, std::uint32_t head, std::uint32_t &pub) noexcept
{
    if (head - pub >= (mask + 1) / 4) {
        ctrl->consumed.store(head, std::memory_order_release);
        pub = head;
    }
}

/** The receive of a send with invalidate (WC_WITH_INV set when it began),
 *  its data placed: invalidate the key now (the message may have landed in
 *  the region it names, as in Linux rxe, which invalidates at completion).
 *  A key it cannot invalidate fails the receive (rem_inv_req_err); a receive
 *  that failed already invalidates nothing. */
[[gnu::cold]] void invalidate_now(shm_qp *q) noexcept
{
    vq::wc &w = q->rx_wc;
    if (w.status == wc_status::success && invalidate_key(q->sctx, w.invalidated_rkey))
        return;
    if (w.status == wc_status::success)
        w.status = wc_status::rem_inv_req_err;
    w.wc_flags &= ~vq::WC_WITH_INV;
    w.invalidated_rkey = 0;
}
inline void invalidate_placed(shm_qp *q) noexcept
{
    if (q->rx_wc.wc_flags & vq::WC_WITH_INV) [[unlikely]]
        invalidate_now(q);
}

/** Is [addr, addr+len) of @p sg in a region of ours with local write? The
 *  last receive SGE validated is cached until a key of ours changes. */
inline bool rx_sge_ok(shm_qp *q, const vq::sge &sg) noexcept
{
    std::uint32_t gen = q->sctx->key_gen.load(std::memory_order_relaxed);
    if (sg.lkey == q->ck_lkey && gen == q->ck_gen && sg.addr >= q->ck_lo && sg.addr + sg.length <= q->ck_hi)
        [[likely]]
        return true;
    region_ref ref;
    if (!check_key(&q->sctx->self, sg.lkey, sg.addr, sg.length, vq::ACCESS_LOCAL_WRITE, &ref, true))
        return false;
    q->ck_lkey = sg.lkey;
    q->ck_gen = gen;
    q->ck_lo = sg.addr;
    q->ck_hi = sg.addr + sg.length;
    return true;
}

/** Statistics of a receive completion with @p st of @p len bytes. */
inline void count_rx(shm_qp *q, wc_status st, std::uint32_t len) noexcept
{
    if (st == wc_status::success)
        env::stats::on_rx(q->io, len);
    else
        env::stats::on_error(q->io);
}

/** What a receive step did. */
enum rx_step { rx_consumed, rx_general_path, rx_stop };

/** Fast path: a one-slot send (or send_imm) into a one-SGE receive of the
 *  QP's own queue. Produces its completion on success. */
inline rx_step rx_one_slot(shm_qp *q, const slot *s, std::uint8_t op, std::uint8_t flags,
                           std::uint32_t src_qp) noexcept
{
    recvq *rq = q->rq;
    std::uint32_t h = rq->head.load(std::memory_order_relaxed);
    // Observe a posted receive: its entry was written before tail was released.
    if (h == rq->tail.load(std::memory_order_acquire))
        return rx_stop; // no receive posted: the message waits
    const rwqe &r = rq->wqe[h & rq->mask];
    const vq::sge &sg = rq->sges[static_cast<std::size_t>(h & rq->mask) * rq->max_sge];
    const std::uint32_t len = s->len;
    // len is peer-written: beyond one slot's payload the header is bad (the
    // general path reports it), as is a receive too small.
    if (r.num_sge != 1 || len > slot_payload || len > sg.length || (len && !rx_sge_ok(q, sg))) [[unlikely]]
        return rx_general_path; // the general path reports the error
    small_copy(reinterpret_cast<void *>(sg.addr), s->data, len);
    shm_cq *c = q->rcq;
    fill_wc(*c->next_entry(), r.wr_id, wc_status::success, vq::wc_opcode::recv, len, q->qp_num, src_qp,
            op == msg_send_imm ? s->imm : 0,
            (op == msg_send_imm ? vq::WC_WITH_IMM : 0) | ((flags & sf_solicited) ? vq::WC_SOLICITED : 0));
    c->commit();
    env::stats::on_rx(q->io, len);
    rq->head.store(h + 1, std::memory_order_release); // entry read: free it
    return rx_consumed;
}

/** Check a chunk header a peer wrote, before anything uses it. @p busy: a
 *  message is in progress (the chunk must continue it). @return the name of
 *  the first field that breaks the protocol (its value in *value), or null. */
SHUNT_COLD const char *bad_header(const shm_qp *q, const slot *s, std::uint32_t mask, bool busy,
                                  std::uint64_t *value) noexcept
{
    const std::uint8_t op = s->op, flags = s->flags;
    const std::uint32_t nslots = s->nslots, len = s->len;
    const bool ud = q->type == vq::qp_type::ud;
    *value = op;
    if (op < msg_send || op > msg_split || (ud && op != msg_send && op != msg_send_imm))
        return "op";
    *value = flags;
    const bool whole = (flags & (sf_first | sf_last)) == (sf_first | sf_last);
    if ((flags & ~(sf_first | sf_last | sf_solicited)) || ((flags & sf_first) != 0) == busy ||
        ((op == msg_write_imm || op == msg_rndv || op == msg_split || ud) && !whole))
        return "flags";
    *value = nslots;
    if (nslots == 0 || nslots > (mask + 1) / 2)
        return "nslots";
    *value = len;
    if (op == msg_write_imm) // len is the write's length; the message is the header alone
        return nslots == 1 ? nullptr : "nslots";
    if (op == msg_split)
        return nslots == 1 && len == sizeof(split_req) ? nullptr : "len";
    if (len > max_chunk_bytes(mask + 1) || nslots != slots_for(len) || (op == msg_rndv && len < sizeof(rndv_hdr)))
        return "len";
    return nullptr;
}

/** A msg_split message (its header checked): the peer offers us the part
 *  of its RDMA read of our memory named in it. Copied when the offer still
 *  stands and our side of the read's checks passes (the responder access
 *  of our QP, the region or window and its range, held against
 *  invalidation meanwhile); otherwise left to the peer, which copies the
 *  part itself once nobody claimed it. No receive is consumed, no
 *  completion made. */
SHUNT_COLD void split_help(shm_qp *q, const slot *s) noexcept
{
    split_req m;
    std::memcpy(&m, s->data, sizeof m); // peer-written: checked below, never re-read
    const std::uint32_t st = q->state.load(std::memory_order_relaxed);
    const limits &l = lim();
    const bool dst_seg = m.flags & split_dst_seg;
    if (!q->rdesc || !q->rpeer || q->rpeer->self || !l.split_bytes || (!dst_seg && !l.cma) ||
        (st != static_cast<std::uint32_t>(vq::qp_state::rtr) && st != static_cast<std::uint32_t>(vq::qp_state::rts)) ||
        !(q->attr.qp_access_flags & vq::ACCESS_REMOTE_READ))
        return;
    region_ref ref;
    mr_entry *pin = nullptr;
    if (!pin_key(&q->sctx->self, m.rkey, m.raddr, m.len, vq::ACCESS_REMOTE_READ, &ref, &pin))
        return;
    std::uint64_t offered = split_word(m.ticket, split_offered);
    std::atomic<std::uint64_t> &claim = q->rdesc->split_claim;
    if (claim.compare_exchange_strong(offered, split_word(m.ticket, split_claimed), std::memory_order_acquire)) {
        // Into the initiator's segment at the offset it named, inside the
        // segment's geometry we keep (overflow-safe); or into its memory at
        // the address it named, which the kernel checks. A bad one fails
        // the copy, and the initiator copies the part itself.
        const void *src = reinterpret_cast<const void *>(ref.addr);
        bool ok = dst_seg ? range_ok(m.dst, m.len, q->rpeer->size) &&
                                peer_write(q->rpeer, region_ref{0, m.dst}, src, m.len)
                          : peer_write(q->rpeer, region_ref{m.dst, no_seg_off}, src, m.len);
        // Publish the part: our stores into the initiator's segment, or
        // process_vm_writev's copy into its pages, which returned before
        // this store; x86 keeps stores in order.
        claim.store(split_word(m.ticket, ok ? split_done : split_failed), std::memory_order_release);
        if (ok)
            q->split_st.copied.add();
    }
    unpin(pin);
}

/** The general path: any chunk of any message (multi-slot, multi-chunk,
 *  rendezvous, write_imm, send_inv, SGE lists, SRQ, errors). Advances @p head
 *  past the chunk. @return rx_consumed, or rx_stop when no receive is posted. */
SHUNT_COLD rx_step rx_general(shm_qp *q, slot *slots, std::uint32_t mask, std::uint32_t &head,
                              std::uint32_t src_qp, unsigned *completions) noexcept
{
    shm_cq *c = q->rcq;
    const bool ud = q->type == vq::qp_type::ud;
    slot *s = &slots[head & mask];
    std::uint64_t bad_value;
    if (const char *bad = bad_header(q, s, mask, q->rx_busy, &bad_value)) [[unlikely]] {
        rx_violation(q, bad, bad_value);
        return rx_stop;
    }
    if (s->op == msg_split) {
        split_help(q, s);
        head += 1;
        return rx_consumed;
    }
    const std::uint8_t op = s->op;
    const std::uint8_t flags = s->flags;
    // A rendezvous message carries the send's own opcode in its descriptor.
    alignas(16) std::uint8_t desc[sizeof(rndv_hdr) + max_sge * sizeof(rndv_piece)];
    std::uint8_t eop = op;
    if (op == msg_rndv) {
        std::uint32_t dl = s->len < sizeof desc ? s->len : static_cast<std::uint32_t>(sizeof desc);
        std::uint32_t first = dl < slot_payload ? dl : slot_payload;
        std::memcpy(desc, s->data, first);
        for (std::uint32_t at = first, i = (head + 1) & mask; at < dl; i = (i + 1) & mask) {
            std::uint32_t k = dl - at < 64 ? dl - at : 64;
            std::memcpy(desc + at, &slots[i], k);
            at += k;
        }
        eop = reinterpret_cast<const rndv_hdr *>(desc)->op;
    }
    if (!q->rx_busy) {
        if (!take_recv(q))
            return rx_stop; // no receive posted: the message waits (infinite RNR retry)
        vq::wc &w = q->rx_wc;
        fill_wc(w, w.wr_id, wc_status::success,
                eop == msg_write_imm ? vq::wc_opcode::recv_rdma_with_imm : vq::wc_opcode::recv, 0, q->qp_num,
                src_qp, 0, (flags & sf_solicited) ? vq::WC_SOLICITED : 0);
        if (eop == msg_send_imm || eop == msg_write_imm) {
            w.imm_data = s->imm;
            w.wc_flags |= vq::WC_WITH_IMM;
        } else if (eop == msg_send_inv) {
            // Invalidated once the message is placed (it may land in the
            // region it names), before its completion: at its last part.
            w.invalidated_rkey = s->imm;
            w.wc_flags |= vq::WC_WITH_INV;
        }
        q->rx_off = 0;
        q->rx_busy = true;
    }
    const std::uint32_t len = s->len;
    if (op == msg_rndv) {
        auto *h = reinterpret_cast<const rndv_hdr *>(desc);
        bool sane = h->nsge <= max_sge && sizeof(rndv_hdr) + h->nsge * sizeof(rndv_piece) <= len;
        if (q->rx_wc.status == wc_status::success)
            q->rx_wc.status = sane ? rndv_copy(q, *h, reinterpret_cast<const rndv_piece *>(desc + sizeof(rndv_hdr)))
                                   : wc_status::rem_inv_req_err;
        invalidate_placed(q); // before the sender learns the outcome
        // Tell the sender its buffer is free; on an error it learns from
        // our QP going to ERR instead (its request then does not succeed).
        if (q->rdesc) {
            if (q->rx_wc.status == wc_status::success)
                q->rdesc->rndv_acked.fetch_add(1, std::memory_order_release);
            else // the sender's request fails as a remote invalid request
                q->rdesc->rndv_nak.store(1, std::memory_order_release);
        }
    } else if (op == msg_write_imm) {
        q->rx_off = len;
    } else if (q->rx_wc.status == wc_status::success) {
        q->rx_wc.status = scatter(q, slots, mask, head, len);
        q->rx_off += len;
    }
    head += s->nslots;
    if (flags & sf_last) {
        q->rx_wc.byte_len = q->rx_off;
        if (op != msg_rndv)
            invalidate_placed(q);
        cq_push(c, q->rx_wc);
        count_rx(q, q->rx_wc.status, q->rx_off);
        ++*completions;
        q->rx_busy = false;
        if (q->rx_wc.status != wc_status::success && !ud)
            qp_to_err(q);
    }
    return rx_consumed;
}

/* ---- Lent receives (qp_init_attr::lend_recv) ----
 * A message is one chunk of the ring; its completion points at its bytes in
 * place (a chunk's bytes run on from its first slot's data into the next
 * slots), so nothing is copied. Credits for the slots are returned only at
 * the QP's next receive progress (lend_release), which runs inside the next
 * poll of the receive CQ that finds the CQ empty: by then the consumer has
 * been handed every completion that points into them. */

/** The bytes of a @p len-byte chunk whose first slot is at @p pos: in place,
 *  or, when they wrap around the ring's end, copied into the QP's bounce
 *  buffer. @return null when the bounce already holds a message lent in this
 *  poll (the message waits for the next one). */
inline const std::uint8_t *lend_bytes(shm_qp *q, slot *slots, std::uint32_t mask, std::uint32_t pos,
                                      std::uint32_t len) noexcept
{
    std::uint32_t i = pos & mask;
    const std::size_t room = static_cast<std::size_t>(mask + 1 - i) * sizeof(slot) - offsetof(slot, data);
    if (len <= room) [[likely]]
        return slots[i].data;
    if (q->lend_bounce_used)
        return nullptr;
    std::memcpy(q->lend_bounce, slots[i].data, room);
    std::memcpy(q->lend_bounce + room, &slots[0], len - room);
    q->lend_bounce_used = true;
    return q->lend_bounce;
}

/** Everything but a one-slot send: multi-slot sends, send_inv, write_imm,
 *  and what a lent receive cannot take (a rendezvous, a message cut into
 *  chunks, a malformed header: an error completion; RC/UC then go to ERR). */
SHUNT_COLD rx_step rx_lend_general(shm_qp *q, slot *slots, std::uint32_t mask, std::uint32_t &head,
                                   std::uint32_t src_qp, unsigned *completions) noexcept
{
    const slot *s = &slots[head & mask];
    std::uint64_t bad_value;
    if (const char *bad = bad_header(q, s, mask, false, &bad_value)) [[unlikely]] {
        rx_violation(q, bad, bad_value);
        return rx_stop;
    }
    if (s->op == msg_split) {
        split_help(q, s);
        head += 1;
        return rx_consumed;
    }
    const std::uint8_t op = s->op, flags = s->flags;
    const std::uint32_t len = s->len, nslots = s->nslots;
    wc_status st = wc_status::success;
    vq::wc_opcode opc = vq::wc_opcode::recv;
    unsigned wf = (flags & sf_solicited) ? vq::WC_SOLICITED : 0;
    std::uint32_t imm = 0, inv = 0, byte_len = len;
    const std::uint8_t *data = nullptr;
    bool whole = (flags & (sf_first | sf_last)) == (sf_first | sf_last);
    if (op == msg_rndv) {
        // The sender ignored our descriptor's desc_lend: refuse, so that its
        // request fails (rem_inv_req_err) instead of waiting for a copy.
        st = wc_status::loc_len_err;
        if (q->rdesc)
            q->rdesc->rndv_nak.store(1, std::memory_order_release);
    } else if (op == msg_write_imm) {
        opc = vq::wc_opcode::recv_rdma_with_imm;
        imm = s->imm;
        wf |= vq::WC_WITH_IMM;
        if (nslots != 1 || !whole)
            st = wc_status::loc_len_err;
    } else if (!whole || len > q->max_lend) {
        st = wc_status::loc_len_err; // cut into chunks: the sender ignored desc_lend
    } else {
        if (op == msg_send_imm) {
            imm = s->imm;
            wf |= vq::WC_WITH_IMM;
        } else if (op == msg_send_inv) {
            if (invalidate_key(q->sctx, s->imm)) {
                inv = s->imm;
                wf |= vq::WC_WITH_INV;
            } else {
                st = wc_status::rem_inv_req_err;
            }
        }
        if (st == wc_status::success && !(data = lend_bytes(q, slots, mask, head, len)))
            return rx_stop;
    }
    if (st != wc_status::success)
        byte_len = 0;
    fill_wc(*q->rcq->next_entry(), 0, st, opc, byte_len, q->qp_num, src_qp, imm, wf, inv, data);
    q->rcq->commit();
    count_rx(q, st, byte_len);
    ++*completions;
    head += nslots; // in range: bad_header checked it
    if (st != wc_status::success && q->type != vq::qp_type::ud)
        qp_to_err(q);
    return rx_consumed;
}

/** Lent receives: one whole message of one slot, as a completion pointing
 *  at its bytes. @return rx_consumed, or rx_general_path for any other
 *  message (rx_lend_general). */
inline rx_step rx_lend(shm_qp *q, slot *slots, std::uint32_t mask, std::uint32_t &head, std::uint32_t src_qp,
                       unsigned *completions) noexcept
{
    const slot *s = &slots[head & mask];
    const std::uint8_t op = s->op, flags = s->flags;
    const std::uint32_t len = s->len;
    if (s->nslots == 1 && (flags & ~sf_solicited) == (sf_first | sf_last) && len <= slot_payload &&
        (op == msg_send || op == msg_send_imm)) [[likely]] {
        fill_wc(*q->rcq->next_entry(), 0, wc_status::success, vq::wc_opcode::recv, len, q->qp_num, src_qp,
                op == msg_send_imm ? s->imm : 0,
                (op == msg_send_imm ? vq::WC_WITH_IMM : 0) | ((flags & sf_solicited) ? vq::WC_SOLICITED : 0), 0,
                s->data);
        q->rcq->commit();
        env::stats::on_rx(q->io, len);
        ++*completions;
        head++;
        return rx_consumed;
    }
    return rx_general_path;
}

/** The ud_active bits of rings a UD QP has. */
inline std::uint64_t ud_ring_bits(const shm_qp *q) noexcept
{
    return q->ud_nrings >= 64 ? ~0ull : (1ull << q->ud_nrings) - 1;
}

/** Lent receives: take back what the previous poll lent (return the credits
 *  of every slot consumed so far, in quarter-ring batches as always). */
inline void lend_release(shm_qp *q) noexcept
{
    q->lend_bounce_used = false;
    if (q->type != vq::qp_type::ud) {
        rx_credit(q->rx_ctrl, q->rx_mask, q->rx_head, q->rx_published);
        return;
    }
    // Senders set the active bits: only bits of rings we have count.
    std::uint64_t act = q->desc->ud_active.load(std::memory_order_acquire) & ud_ring_bits(q);
    const std::size_t stride = ring_bytes(q->ud_ring_slots);
    char *base = q->sctx->self.base + q->ring_mem;
    for (; act; act &= act - 1) {
        unsigned i = static_cast<unsigned>(__builtin_ctzll(act));
        rx_credit(reinterpret_cast<ring_ctrl *>(base + i * stride), q->ud_ring_slots - 1, q->ud_rx_head[i],
                  q->ud_rx_pub[i]);
    }
}

/** Consume messages of one ring. @return completions produced. Inlined into
 *  rx_progress, which every poll of a receive CQ calls once per QP. With
 *  @p Drain (the QP is in ERR because the peer died or closed): deliver what
 *  the peer had published, clear rx_drain once the ring shows nothing more,
 *  and stop at a rendezvous message (its data is in the dead peer's memory,
 *  and its sender never saw it complete). */
template <bool Drain = false>
[[gnu::always_inline]] inline unsigned rx_ring(shm_qp *q, slot *slots, ring_ctrl *ctrl, std::uint32_t mask,
                                              std::uint32_t &head, std::uint32_t &pub, std::uint32_t src_qp,
                                              unsigned budget) noexcept
{
    shm_cq *c = q->rcq;
    unsigned n = 0;
    while (n < budget) {
        slot *s = &slots[head & mask];
        // Observe a published chunk: the sequence word (acquire) orders the
        // reads of its header, payload and continuation slots after it.
        if (std::atomic_ref<std::uint32_t>(s->seq).load(std::memory_order_acquire) != head + 1) {
            if (Drain)
                q->rx_drain.store(false, std::memory_order_relaxed); // all it sent was delivered: flush the rest
            else if (q->type != vq::qp_type::ud && ctrl->sender_gone.load(std::memory_order_acquire) == q->ring_epoch &&
                std::atomic_ref<std::uint32_t>(s->seq).load(std::memory_order_acquire) != head + 1)
                qp_to_err(q); // the sender is gone and everything it sent was consumed
            break;
        }
        if (c->space() == 0)
            break;
        if (Drain && (s->op == msg_rndv || q->rx_violated)) {
            q->rx_drain.store(false, std::memory_order_relaxed);
            break;
        }
        if (q->lend) {
            // Credits wait for lend_release. A whole small message changes
            // nothing but the ring position; the general path may have put
            // the QP in ERR.
            if (rx_lend(q, slots, mask, head, src_qp, &n) == rx_consumed)
                continue;
            if (rx_lend_general(q, slots, mask, head, src_qp, &n) == rx_stop)
                break;
            if (q->state.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(vq::qp_state::err))
                break;
            continue;
        }
        const std::uint8_t op = s->op;
        const std::uint8_t flags = s->flags;
        rx_step r = rx_general_path;
        if (!q->rx_busy && s->nslots == 1 && (flags & ~sf_solicited) == (sf_first | sf_last) &&
            (op == msg_send || op == msg_send_imm) && !q->ssrq) [[likely]] {
            r = rx_one_slot(q, s, op, flags, src_qp);
            if (r == rx_consumed) {
                n++;
                head++;
                rx_credit(ctrl, mask, head, pub);
                continue;
            }
        }
        if (r == rx_stop || rx_general(q, slots, mask, head, src_qp, &n) == rx_stop)
            break;
        rx_credit(ctrl, mask, head, pub);
        if (!Drain && q->state.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(vq::qp_state::err))
            break;
    }
    return n;
}

/** QP in ERR: complete the receive in progress and every posted one with wr_flush_err. */
unsigned rx_flush(shm_qp *q, unsigned budget) noexcept
{
    shm_cq *c = q->rcq;
    unsigned n = 0;
    vq::wc w;
    fill_wc(w, 0, wc_status::wr_flush_err, vq::wc_opcode::recv, 0, q->qp_num);
    // A peer broke the protocol: the first receive completion says so.
    if (q->rx_violated) [[unlikely]]
        w.status = wc_status::bad_resp_err;
    auto reported = [&] {
        q->rx_violated = false;
        w.status = wc_status::wr_flush_err;
    };
    if (q->lend) {
        // Nothing was posted: one flush completion tells the consumer.
        if (!q->lend_flushed && budget && c->space()) {
            cq_push(c, w);
            reported();
            q->lend_flushed = true;
            n++;
        }
        return n;
    }
    if (q->rx_busy && n < budget && c->space()) {
        w.wr_id = q->rx_wc.wr_id;
        cq_push(c, w);
        reported();
        q->rx_busy = false;
        n++;
    }
    if (q->ssrq)
        return n; // SRQ receives belong to the SRQ, not to this QP
    recvq *rq = q->rq;
    while (n < budget && c->space()) {
        std::uint32_t h = rq->head.load(std::memory_order_relaxed);
        if (h == rq->tail.load(std::memory_order_acquire))
            break;
        w.wr_id = rq->wqe[h & rq->mask].wr_id;
        rq->head.store(h + 1, std::memory_order_release);
        cq_push(c, w);
        reported();
        n++;
    }
    return n;
}

/** Free ring @p i of a UD QP whose sender is gone, once it is drained, for
 *  another sender. The next claimer starts at our exact position. */
SHUNT_COLD void ud_reclaim(shm_qp *q, std::uint32_t i, ring_ctrl *ctrl, slot *slots) noexcept
{
    std::uint32_t head = q->ud_rx_head[i];
    std::uint32_t mask = q->ud_ring_slots - 1;
    if (std::atomic_ref<std::uint32_t>(slots[head & mask].seq).load(std::memory_order_acquire) == head + 1)
        return; // still holds a message (no receive posted yet)
    ctrl->consumed.store(head, std::memory_order_release);
    q->ud_rx_pub[i] = head;
    q->desc->ud_active.fetch_and(~(1ull << i), std::memory_order_acq_rel);
    ctrl->owner.store(0, std::memory_order_release); // claimable again
}

} // namespace

unsigned rx_progress(shm_qp *q, unsigned budget) noexcept
{
    std::uint32_t st = q->state.load(std::memory_order_relaxed);
    if (st == static_cast<std::uint32_t>(vq::qp_state::err)) {
        // The peer died or closed: what it had published first (rx_ring<true>
        // clears rx_drain when the ring shows nothing more).
        std::atomic_thread_fence(std::memory_order_acquire); // rx_drain is stored before the state
        if (q->rx_drain.load(std::memory_order_relaxed)) [[unlikely]] {
            unsigned n = rx_ring<true>(q, q->rx_slots, q->rx_ctrl, q->rx_mask, q->rx_head, q->rx_published,
                                       q->dest_qpn, budget);
            if (q->rx_drain.load(std::memory_order_relaxed) || n >= budget)
                return n;
            return n + rx_flush(q, budget - n);
        }
        return rx_flush(q, budget);
    }
    if (st < static_cast<std::uint32_t>(vq::qp_state::rtr))
        return 0; // RESET/INIT: messages wait in the ring
    if (q->lend)
        lend_release(q);
    if (q->type != vq::qp_type::ud)
        return rx_ring(q, q->rx_slots, q->rx_ctrl, q->rx_mask, q->rx_head, q->rx_published, q->dest_qpn,
                       budget);
    // UD: scan the rings senders have claimed, starting after the last one served.
    // Senders set the active bits; our own geometry (private) says which
    // rings exist and where they are.
    std::uint64_t act = q->desc->ud_active.load(std::memory_order_acquire) & ud_ring_bits(q);
    if (!act)
        return 0;
    const std::uint32_t nr = q->ud_nrings;
    const std::size_t stride = ring_bytes(q->ud_ring_slots);
    char *base = q->sctx->self.base + q->ring_mem;
    unsigned n = 0;
    // Visit only the claimed rings (set bits), starting after the last one
    // that delivered: rotate the bitmap so that ring rx_ud_next is bit 0.
    const unsigned first = static_cast<unsigned>(q->rx_ud_next) & 63;
    std::uint64_t rot = first ? (act >> first) | (act << (64 - first)) : act;
    for (; rot && n < budget; rot &= rot - 1) {
        std::uint32_t i = (static_cast<std::uint32_t>(__builtin_ctzll(rot)) + first) & 63;
        auto *ctrl = reinterpret_cast<ring_ctrl *>(base + i * stride);
        auto *slots = reinterpret_cast<slot *>(base + i * stride + sizeof(ring_ctrl));
        unsigned got = rx_ring(q, slots, ctrl, q->ud_ring_slots - 1, q->ud_rx_head[i], q->ud_rx_pub[i],
                               ctrl->src_qpn, budget - n);
        if (got)
            q->rx_ud_next = static_cast<int>((i + 1) % nr);
        else if (ctrl->sender_gone.load(std::memory_order_acquire) == q->ring_epoch)
            ud_reclaim(q, i, ctrl, slots);
        n += got;
    }
    return n;
}

void rx_violation(shm_qp *q, const char *what, std::uint64_t value) noexcept
{
    if (!q->violation_logged) {
        q->violation_logged = true;
        SHUNT_LOG(shm_rx_log, error,
                  "QP %#x: the peer broke the protocol in its ring (slot %s = %#llx): the QP goes to ERR",
                  q->qp_num, what, static_cast<unsigned long long>(value));
    }
    if (!q->rx_violated)
        env::stats::on_error(q->io);
    q->rx_violated = true;
    q->rx_drain.store(false, std::memory_order_relaxed); // nothing more is read from this ring
    qp_to_err(q);
}

} // namespace shunt::drv::shm
