/* drivers/ethdev: the IBTA RC and UC transports in software, over RoCEv2.
 *
 * Requester. Work requests get PSNs when first transmitted (a read takes as
 * many as its responses; local operations none). A cursor (tx_wqe, tx_psn)
 * walks the started requests; go-back-N moves it back to the oldest PSN the
 * responder is missing, and transmission continues from there. RC requests
 * complete when acknowledged (an ACK for PSN p acknowledges everything up to
 * p; a read by its last response, an atomic by its acknowledgement); UC ones
 * when their packets are handed to the PMD. The retransmit timer (qp_attr
 * timeout) and the counters retry_cnt and rnr_retry bound the retries; when
 * one runs out the request completes with retry_exc_err / rnr_retry_exc_err
 * and the QP goes to ERR.
 *
 * Responder. Packets are taken in PSN order: a gap gets one NAK (sequence
 * error) and everything after it is dropped until the missing PSN arrives; a
 * duplicate is acknowledged again (reads are executed again, atomics answered
 * from the saved result, so each executes once). A send with no receive
 * posted gets an RNR NAK. Reads, atomic results and acknowledgements leave
 * through one in-order queue.
 *
 * Acknowledgements are coalesced (an ACK acknowledges every PSN up to its
 * own). The requester sets AckReq on the last packet of a
 * signaled send or write (its completion waits for the ACK), on reads,
 * atomics and flushes, on every 16th packet, and on any last packet while
 * the send queue or the PSN window is half full. The responder answers
 * AckReq at the end of the received batch; other packets it acknowledges
 * every 16, or when the oldest of them has waited ack_delay (an eighth of
 * the retransmit timeout, at most 1 ms). So an 8-byte ping-pong of
 * unsignaled sends costs one frame per message instead of two.
 *
 * Timers. With a send unacknowledged or an ACK deferred, every progress
 * call of the QP runs the timers, most of them empty polls; the TSC is read
 * on every timer_stride-th call only (rc_timing), which delays a timer of a
 * spinning poller by at most a sixty-fourth of the shortest one. */
#include <algorithm>

#include "env/tsc.h"
#include "eth.h"

namespace shunt::drv::ethdev {

namespace {

using wire::psn_add;
using wire::psn_diff;
using vq::wc_status;

constexpr std::uint32_t ack_every = 16;

inline std::uint32_t npkts_of(std::uint32_t len, std::uint32_t pmtu) noexcept
{
    return len == 0 ? 1 : (len + pmtu - 1) / pmtu;
}
inline bool is_rc(const eth_qp *q) noexcept { return q->type == vq::qp_type::rc; }
inline std::uint8_t family(const eth_qp *q) noexcept { return is_rc(q) ? wire::op_rc : wire::op_uc; }
inline bool is_local(std::uint8_t op) noexcept { return op == op_bind || op == op_local_inv; }
inline bool is_rd_atomic(std::uint8_t op) noexcept { return op == op_read || op == op_cas || op == op_faa; }
inline wqe *at(eth_qp *q, std::uint32_t pos) noexcept { return &q->sq[pos & q->sq_mask]; }

inline void done(wqe *w, wc_status s) noexcept
{
    w->state = ws_done;
    w->status = static_cast<std::uint8_t>(s);
}

/** Does the last packet of send or write @p w ask for an acknowledgement?
 *  A signaled request's completion waits for it; unsignaled ones free their
 *  send-queue slots only when acknowledged, so they ask once the queue or
 *  the window is half full. Otherwise the responder's coalescing answers. */
inline bool ack_wanted(const eth_qp *q, const wqe *w) noexcept
{
    return (w->flags & vq::WR_SIGNALED) || q->sq_tail - q->sq_head > q->sq_mask / 2 ||
           psn_diff(q->psn, q->una) >= static_cast<std::int32_t>(rc_window / 2);
}

inline void arm(eth_qp *q) noexcept
{
    if (q->timeout_cycles && !q->deadline)
        q->deadline = env::tsc::now() + q->timeout_cycles;
}

/* ---------------- Requester: transmission ---------------- */

/** Emit packet @p i of request @p w (PSN w->psn + i). @return false: no buffer. */
bool emit(eth_qp *q, wqe *w, std::uint32_t i) noexcept
{
    const std::uint32_t pm = q->pmtu;
    const std::uint32_t psn = psn_add(w->psn, i);
    const bool first = i == 0, last = i + 1 == w->npkts;
    std::uint8_t op;
    std::uint32_t ext = 0, off = 0, n = 0;
    bool ackreq = false;
    switch (w->op) {
    case op_send:
    case op_send_imm:
    case op_send_inv:
    case op_write:
    case op_write_imm: {
        const bool write = w->op == op_write || w->op == op_write_imm;
        off = i * pm;
        n = w->len - off < pm ? w->len - off : pm;
        const bool imm = w->op == op_send_imm || w->op == op_write_imm, inv = w->op == op_send_inv;
        std::uint8_t base = write ? wire::op_write_first : wire::op_send_first;
        if (first && last)
            op = static_cast<std::uint8_t>(base + 4 + (imm ? 1 : 0));
        else if (first)
            op = base;
        else if (last)
            op = static_cast<std::uint8_t>(base + 2 + (imm ? 1 : 0));
        else
            op = static_cast<std::uint8_t>(base + 1);
        if (inv && last)
            op = first ? wire::op_send_only_inv : wire::op_send_last_inv;
        if (write && first)
            ext += wire::reth_len;
        if (imm && last)
            ext += wire::imm_len;
        if (inv && last)
            ext += wire::ieth_len;
        ackreq = last && ack_wanted(q, w);
        break;
    }
    case op_read:
        op = wire::op_read_req;
        ext = wire::reth_len;
        ackreq = true;
        break;
    case op_cas:
    case op_faa:
        op = w->op == op_cas ? wire::op_cmp_swap : wire::op_fetch_add;
        ext = wire::atomic_eth_len;
        ackreq = true;
        break;
    default: // op_flush
        op = wire::op_flush;
        ext = wire::feth_len + wire::reth_len;
        ackreq = true;
        break;
    }
    if (++q->since_ackreq >= ack_every)
        ackreq = true;
    if (ackreq)
        q->since_ackreq = 0;
    roce_frame f;
    if (!roce_alloc(q, q->dest, ext, n, &f))
        return false;
    op = static_cast<std::uint8_t>(op | family(q));
    wire::put_bth(f.bth, op, last && (w->flags & vq::WR_SOLICITED), 0, q->dest_qpn, ackreq && is_rc(q), psn);
    std::uint8_t *e = f.ext;
    switch (w->op) {
    case op_read: {
        // A retried read asks only for what is still missing; a long one
        // asks read_chunk packets' worth at a time.
        std::uint64_t skip = static_cast<std::uint64_t>(i) * pm;
        std::uint64_t rest = w->len - (skip < w->len ? skip : w->len);
        std::uint64_t part = std::uint64_t{read_chunk} * pm;
        wire::st64(e, w->raddr + skip);
        wire::st32(e + 8, w->rkey);
        wire::st32(e + 12, static_cast<std::uint32_t>(rest < part ? rest : part));
        break;
    }
    case op_cas:
    case op_faa:
        // AtomicETH: VA, R_Key, swap (CmpSwap) or add (FetchAdd), compare.
        wire::st64(e, w->raddr);
        wire::st32(e + 8, w->rkey);
        wire::st64(e + 12, w->op == op_cas ? w->a1 : w->a0);
        wire::st64(e + 20, w->op == op_cas ? w->a0 : 0);
        break;
    case op_flush:
        e[0] = 0;
        e[1] = 0;
        e[2] = 0;
        // FETH: placement type (bits 3..0 of byte 3: 1 global, 2 persistent), selectivity level bits 5..4
        e[3] = static_cast<std::uint8_t>((w->a1 & 0xff) | (((w->a1 >> 8) & 3) << 4));
        wire::st64(e + 4, w->raddr);
        wire::st32(e + 12, w->rkey);
        wire::st32(e + 16, static_cast<std::uint32_t>(w->a0));
        break;
    default:
        if ((w->op == op_write || w->op == op_write_imm) && first) {
            wire::st64(e, w->raddr);
            wire::st32(e + 8, w->rkey);
            wire::st32(e + 12, w->len);
            e += wire::reth_len;
        }
        if (last && (w->op == op_send_imm || w->op == op_write_imm)) {
            std::memcpy(e, &w->imm, 4); // network order already
            e += wire::imm_len;
        }
        if (last && w->op == op_send_inv)
            wire::st32(e, w->imm);
        if (n) {
            src_cursor src(q, w);
            src.seek(off);
            src.copy(f.payload, n);
        }
        break;
    }
    roce_finish(q, f, ext, n);
    q->stage[q->nstage++] = f.m;
    return true;
}

/** Local checks of a request when it starts. */
bool local_ok(eth_qp *q, const wqe *w) noexcept
{
    if (w->is_inline)
        return true;
    unsigned need = is_rd_atomic(w->op) ? vq::ACCESS_LOCAL_WRITE : 0;
    const vq::sge *s = wqe_sges(q, w);
    for (std::uint32_t i = 0; i < w->num_sge; i++)
        if (s[i].length && !key_check(q->c, s[i].lkey, s[i].addr, s[i].length, need))
            return false;
    return true;
}

/** Reads and atomics started and not yet completed to the application.
 *  Done ones count too: go-back-N may send any request after the oldest
 *  unacknowledged one again, and the responder keeps the results of only
 *  max_rd_atomic atomics for such replays. */
std::uint32_t rd_atomic_out(eth_qp *q) noexcept
{
    std::uint32_t n = 0;
    for (std::uint32_t k = q->sq_head; k != q->sq_next; k++)
        n += is_rd_atomic(at(q, k)->op);
    return n;
}

/** @p w failed before any packet of it was sent: done with @p s, and no
 *  later request starts (the QP goes to ERR when @p w completes). */
SHUNT_COLD void fail_here(eth_qp *q, wqe *w, wc_status s) noexcept
{
    done(w, s);
    q->sq_halted = true;
}

/** Execute a bind or local invalidation (in order, no packet). */
void exec_local(eth_qp *q, wqe *w) noexcept
{
    wc_status s;
    if (w->op == op_bind)
        s = key_bind(q->c, static_cast<eth_mw *>(static_cast<vq::mw *>(w->p0)),
                     static_cast<eth_mr *>(static_cast<vq::mr *>(w->p1)), w->rkey, w->a0, w->a1, w->imm);
    else
        s = key_invalidate(q->c, w->imm) ? wc_status::success : wc_status::loc_prot_err;
    if (s == wc_status::success)
        done(w, s);
    else
        fail_here(q, w, s);
}

/** Start request @p w: PSNs, local checks. @return false: it cannot start yet. */
bool start(eth_qp *q, wqe *w) noexcept
{
    if ((w->flags & vq::WR_FENCE) && rd_atomic_out(q))
        return false;
    if (is_local(w->op)) {
        if (rd_atomic_out(q) && (w->flags & vq::WR_FENCE))
            return false;
        exec_local(q, w);
        w->psn = q->psn;
        w->npkts = 0;
        return true;
    }
    if (is_rd_atomic(w->op) && rd_atomic_out(q) >= max_rd_atomic)
        return false;
    std::uint32_t n = w->op == op_read ? npkts_of(w->len, q->pmtu)
                      : (w->op == op_cas || w->op == op_faa || w->op == op_flush) ? 1
                                                                                  : npkts_of(w->len, q->pmtu);
    if (is_rc(q) && psn_diff(psn_add(q->psn, n), q->una) > static_cast<std::int32_t>(rc_window) &&
        q->una != q->psn)
        return false; // window full (a request larger than the window goes alone)
    w->psn = q->psn;
    w->npkts = n;
    w->got = 0;
    q->psn = psn_add(q->psn, n);
    if (!local_ok(q, w)) {
        fail_here(q, w, wc_status::loc_prot_err);
        return true;
    }
    w->state = ws_active;
    return true;
}

/** Send the responder's queued responses (reads, atomics, acks), in order. */
void send_resps(eth_qp *q) noexcept;

} // namespace

void rc_tx(eth_qp *q, const eth_cq *) noexcept
{
    if (q->nstage)
        stage_flush(q);
    send_resps(q);
    if (q->rnr_until) {
        if (env::tsc::now() < q->rnr_until)
            return;
        q->rnr_until = 0;
    }
    for (;;) {
        if (q->tx_wqe == q->sq_next) {
            // The cursor reached unstarted requests: start the next one,
            // unless the one before it failed here (a local check, a bind, an
            // invalidation): the QP goes to ERR when that completes, and
            // nothing after it may run, only be flushed.
            if (q->sq_next == q->sq_tail)
                break;
            if (q->sq_halted) [[unlikely]]
                break;
            wqe *w = at(q, q->sq_next);
            if (!start(q, w))
                break;
            q->sq_next++;
            if (w->state == ws_done) {
                q->tx_wqe = q->sq_next; // local operation or failed check: nothing to send
                continue;
            }
            q->tx_psn = w->psn;
        }
        wqe *w = at(q, q->tx_wqe);
        if (w->state == ws_done || w->npkts == 0) {
            q->tx_wqe++;
            if (q->tx_wqe != q->sq_next)
                q->tx_psn = at(q, q->tx_wqe)->psn;
            continue;
        }
        std::uint32_t i = static_cast<std::uint32_t>(psn_diff(q->tx_psn, w->psn));
        if (is_rc(q) && psn_diff(q->tx_psn, q->una) >= static_cast<std::int32_t>(rc_window))
            break;
        if (!stage_room(q, 1) || !emit(q, w, i))
            break;
        if (is_rc(q))
            arm(q);
        // A read request asks for up to read_chunk responses at once.
        std::uint32_t step = w->op == op_read ? std::min(w->npkts - i, read_chunk) : 1;
        q->tx_psn = psn_add(q->tx_psn, step);
        if (i + step >= w->npkts) {
            if (!is_rc(q)) {
                // UC: done when the PMD takes the request's last packet.
                w->status = static_cast<std::uint8_t>(wc_status::success);
                stage_end(q, w);
            }
            q->tx_wqe++;
            if (q->tx_wqe != q->sq_next)
                q->tx_psn = at(q, q->tx_wqe)->psn;
        }
    }
    if (!is_rc(q)) {
        // UC: requests that never need a packet sequence (local ones) are done;
        // the unacknowledged PSN follows the sent one.
        q->una = q->tx_psn;
    }
}

namespace {

/** Move the transmit cursor back to @p psn (go-back-N). */
void go_back(eth_qp *q, std::uint32_t psn) noexcept
{
    const std::uint32_t sent = q->tx_psn; // packets before it went out once: those after psn go again
    for (std::uint32_t k = q->sq_head; k != q->sq_next; k++) {
        wqe *w = at(q, k);
        if (w->state != ws_active || w->npkts == 0)
            continue;
        std::int32_t d = psn_diff(psn, w->psn);
        if (d < 0) {
            psn = w->psn;
            d = 0;
        }
        if (d < static_cast<std::int32_t>(w->npkts)) {
            if (psn_diff(q->tx_psn, psn) > 0 || q->tx_wqe != k)
                q->tx_wqe = k;
            q->tx_psn = psn;
            // A read restarts at its first missing response.
            if (w->op == op_read) {
                std::uint32_t have = w->got / q->pmtu;
                if (static_cast<std::uint32_t>(d) < have)
                    q->tx_psn = psn_add(w->psn, have);
            }
            q->p->count(c_tx_retransmit);
            env::stats::on_retransmit(q->io, psn_diff(sent, q->tx_psn) > 0 ? psn_diff(sent, q->tx_psn) : 0);
            return;
        }
    }
}

/** Everything before @p psn is acknowledged. */
void acked_before(eth_qp *q, std::uint32_t psn) noexcept
{
    for (std::uint32_t k = q->sq_head; k != q->sq_next; k++) {
        wqe *w = at(q, k);
        if (w->state != ws_active)
            continue;
        if (w->npkts == 0)
            continue;
        std::uint32_t last = psn_add(w->psn, w->npkts - 1);
        if (psn_diff(psn, last) <= 0)
            break; // not (entirely) acknowledged
        if (is_rd_atomic(w->op)) {
            // Acknowledged beyond a read or atomic whose response never
            // arrived: it was lost; ask again (once per request).
            if (!w->resp_seen) {
                w->resp_seen = 1;
                go_back(q, psn_add(w->psn, w->op == op_read ? w->got / q->pmtu : 0));
            }
            return;
        }
        done(w, wc_status::success);
    }
    if (psn_diff(psn, q->una) > 0) {
        q->una = psn;
        q->retries = q->attr.retry_cnt & 7; // progress: the retry budget starts again
        q->deadline = 0;
        if (q->nak_retry && psn_diff(q->una, q->nak_psn) > 0)
            q->nak_retry = false; // past the gap the last NAK named
    }
    if (q->una != q->psn)
        arm(q);
    else
        q->deadline = 0;
}

/** The started request holding @p psn, or null. */
wqe *find(eth_qp *q, std::uint32_t psn) noexcept
{
    for (std::uint32_t k = q->sq_head; k != q->sq_next; k++) {
        wqe *w = at(q, k);
        if (w->npkts && psn_diff(psn, w->psn) >= 0 && psn_diff(psn, w->psn) < static_cast<std::int32_t>(w->npkts))
            return w;
    }
    return nullptr;
}

/** Fail the request at @p psn (and the QP). */
void fail_at(eth_qp *q, std::uint32_t psn, wc_status s) noexcept
{
    acked_before(q, psn);
    wqe *w = find(q, psn);
    if (!w) {
        // Nothing outstanding there: the oldest started request reports it.
        for (std::uint32_t k = q->sq_head; k != q->sq_next && !w; k++)
            if (at(q, k)->state == ws_active)
                w = at(q, k);
    }
    if (w)
        done(w, s);
    else
        q->flush_status = s;
    q->deadline = 0;
    qp_to_err(q);
}

/** An ACK, NAK, read response or atomic acknowledgement arrived. */
void requester_input(eth_qp *q, const rxpkt &k) noexcept
{
    if (!is_rc(q))
        return;
    const std::uint8_t *b = rte_pktmbuf_mtod(k.m, const std::uint8_t *) + k.bth;
    const std::uint8_t op = wire::bth_opcode(b) & 0x1f;
    const std::uint32_t psn = wire::bth_psn(b);
    const wire::op_desc &d = wire::ops.d[wire::bth_opcode(b)];
    // Responses for PSNs we never sent are bogus.
    if (psn_diff(psn, q->psn) >= 0) {
        q->p->count(c_rx_seq);
        return;
    }
    const std::uint8_t *aeth = (d.hdrs & wire::h_aeth) ? b + wire::bth_len : nullptr;
    std::uint8_t syn = aeth ? wire::aeth_syndrome(aeth) : static_cast<std::uint8_t>(wire::aeth_ack);
    if ((syn & 0x60) != 0 && psn_diff(psn, q->una) < 0) {
        q->p->count(c_rx_seq); // a NAK for what is acknowledged already (reordered, duplicated)
        return;
    }
    if ((syn & 0x60) == wire::aeth_rnr) {
        count_nak(q->st, &qp_stats::rnr_naks_received);
        acked_before(q, psn);
        if (q->rnr_retries == 0) {
            fail_at(q, psn, wc_status::rnr_retry_exc_err);
            return;
        }
        if (q->rnr_retries != 7)
            q->rnr_retries--;
        q->rnr_until = env::tsc::now() + env::tsc::from_ns(std::uint64_t{wire::rnr_timer_us(syn & 31)} * 1000);
        // The responder is alive: the retransmit timer starts again with
        // the retransmission after the RNR wait.
        q->deadline = 0;
        go_back(q, psn);
        return;
    }
    if ((syn & 0x60) == wire::aeth_nak) {
        switch (syn & 31) {
        case wire::nak_psn_seq:
            count_nak(q->st, &qp_stats::naks_received);
            acked_before(q, psn);
            if (q->nak_retry && q->nak_psn == psn)
                return; // this gap is being resent already (until a timeout or progress past it)
            if (q->retries == 0) {
                fail_at(q, psn, wc_status::retry_exc_err);
                return;
            }
            q->retries--;
            q->nak_retry = true;
            q->nak_psn = psn;
            go_back(q, psn);
            return;
        case wire::nak_rem_access:
            fail_at(q, psn, wc_status::rem_access_err);
            return;
        case wire::nak_inv_req:
            fail_at(q, psn, wc_status::rem_inv_req_err);
            return;
        default:
            fail_at(q, psn, wc_status::rem_op_err);
            return;
        }
    }
    if (op == wire::op_ack) {
        acked_before(q, psn_add(psn, 1));
        return;
    }
    wqe *w = find(q, psn);
    if (!w || w->state != ws_active) {
        q->p->count(c_rx_seq); // a duplicate response
        return;
    }
    if (op == wire::op_atomic_ack) {
        if (w->op != op_cas && w->op != op_faa) {
            fail_at(q, psn, wc_status::bad_resp_err);
            return;
        }
        acked_before(q, w->psn);
        std::uint64_t orig = wire::ld64(b + wire::bth_len + wire::aeth_len);
        if (w->num_sge)
            std::memcpy(reinterpret_cast<void *>(wqe_sges(q, w)[0].addr), &orig, 8);
        done(w, wc_status::success);
        acked_before(q, psn_add(psn, 1));
        return;
    }
    // Read response: must be the next one of this read.
    if (w->op != op_read) {
        fail_at(q, psn, wc_status::bad_resp_err);
        return;
    }
    std::uint32_t want = psn_add(w->psn, w->got / q->pmtu);
    if (psn != want) {
        q->p->count(c_rx_seq);
        if (!w->resp_seen) {
            w->resp_seen = 1;
            go_back(q, want);
        }
        return;
    }
    const bool last = psn_diff(psn, w->psn) + 1 == static_cast<std::int32_t>(w->npkts);
    std::uint32_t expect = last ? w->len - w->got : q->pmtu;
    // A part of a long read (read_chunk) ends in a last response too.
    if (k.plen != expect || (last && !(d.pos & wire::p_last))) {
        fail_at(q, psn, wc_status::bad_resp_err);
        return;
    }
    acked_before(q, w->psn);
    // Scatter into the read's SGEs (checked for local write when it started).
    const vq::sge *s = wqe_sges(q, w);
    std::uint32_t off = w->got, n = k.plen, from = static_cast<std::uint32_t>(k.bth) + k.hlen;
    for (std::uint32_t i = 0; i < w->num_sge && n; i++) {
        if (off >= s[i].length) {
            off -= s[i].length;
            continue;
        }
        std::uint32_t c = s[i].length - off < n ? s[i].length - off : n;
        mbuf_read(k.m, from, c, reinterpret_cast<std::uint8_t *>(s[i].addr) + off);
        from += c;
        n -= c;
        off = 0;
    }
    w->got += k.plen;
    w->resp_seen = 0;
    q->una = psn_add(psn, 1);
    q->retries = q->attr.retry_cnt & 7;
    q->deadline = 0;
    if (last) {
        done(w, wc_status::success);
        acked_before(q, psn_add(psn, 1));
    } else {
        arm(q);
    }
}

/* ---------------- Responder ---------------- */

inline bool resp_full(const eth_qp *q) noexcept { return q->resp_tail - q->resp_head >= max_resps; }

/** Queue an acknowledgement (or NAK) for @p psn; consecutive ACKs merge. */
void queue_ack(eth_qp *q, std::uint8_t syndrome, std::uint32_t psn) noexcept
{
    if (q->resp_tail != q->resp_head) {
        resp &t = q->resps[(q->resp_tail - 1) % max_resps];
        if (t.kind == r_ack && t.syndrome == wire::aeth_no_credits && syndrome == wire::aeth_no_credits) {
            t.psn = psn; // coalesced
            return;
        }
    }
    if (resp_full(q))
        return; // the requester times out and asks again
    resp &r = q->resps[q->resp_tail++ % max_resps];
    r = resp{};
    r.kind = r_ack;
    r.syndrome = syndrome;
    r.psn = psn;
    if (syndrome != wire::aeth_no_credits) {
        q->p->count(c_tx_nak);
        count_nak(q->st, (syndrome & 0x60) == wire::aeth_rnr ? &qp_stats::rnr_naks_sent : &qp_stats::naks_sent);
    }
}

/** A Class C error at the responder (IBTA 9.9.3): NAK, then ERR. */
void responder_error(eth_qp *q, std::uint32_t psn, std::uint8_t nak) noexcept
{
    queue_ack(q, static_cast<std::uint8_t>(wire::aeth_nak | nak), psn);
    send_resps(q);
    stage_flush(q);
    qp_to_err(q);
}

/** Complete the receive being filled; a lent one (@p tag not 0) lends
 *  what rx_wc.data points at until the consumer's next poll. */
void recv_done(eth_qp *q, eth_cq *c, std::uintptr_t tag = 0) noexcept
{
    q->rx_wc.byte_len = q->rx_off;
    q->rx_wc.qp_num = q->qp_num;
    q->rx_wc.src_qp = q->dest_qpn;
    if (tag) {
        cq_push_lent(c, q->rx_wc, tag);
        q->rx_wc.data = nullptr;
    } else {
        cq_push(c, q->rx_wc);
    }
    count_recv(q, q->rx_wc, q->rx_wc.byte_len);
    q->rx_has_wqe = false;
    q->rx_busy = false;
    if (q->rx_wc.status != wc_status::success)
        qp_to_err(q);
}

void fresh_wc(eth_qp *q, bool solicited) noexcept
{
    vq::wc &w = q->rx_wc;
    w.status = wc_status::success;
    w.opcode = vq::wc_opcode::recv;
    w.vendor_err = 0;
    w.imm_data = 0;
    w.invalidated_rkey = 0;
    w.wc_flags = solicited ? vq::WC_SOLICITED : 0;
    w.reserved = 0;
}

enum rx_rc { rx_ok, rx_wait, rx_drop, rx_rnr };

/** Does a packet of @p kind (a first one or not) fail to continue the
 *  message in progress (a first packet inside one, a later packet outside
 *  one, or of another kind)? RC answers with an invalid-request NAK; UC
 *  drops the partial message, and the packet too unless it starts a new one.
 *  @return true: drop the packet. */
bool breaks_message(eth_qp *q, bool first, std::uint8_t kind, bool rc, std::uint32_t psn) noexcept
{
    if (first != q->rx_busy && !(q->rx_busy && q->rx_kind != kind))
        return false;
    if (rc) {
        responder_error(q, psn, wire::nak_inv_req);
        return true;
    }
    q->rx_busy = false;
    return !first;
}

/** Execute one in-sequence request packet. */
rx_rc respond(eth_qp *q, const rxpkt &k, eth_cq *c) noexcept
{
    const std::uint8_t *b = rte_pktmbuf_mtod(k.m, const std::uint8_t *) + k.bth;
    const std::uint8_t *e = b + wire::bth_len;
    const wire::op_desc &d = wire::ops.d[wire::bth_opcode(b)];
    const std::uint32_t psn = wire::bth_psn(b);
    const std::uint32_t from = static_cast<std::uint32_t>(k.bth) + k.hlen;
    const bool rc = is_rc(q);
    const bool first = d.pos & wire::p_first, last = d.pos & wire::p_last;
    // Packet sizes: every packet but a message's last carries exactly pmtu bytes.
    if ((!last && k.plen != q->pmtu) || k.plen > q->pmtu) {
        if (rc)
            responder_error(q, psn, wire::nak_inv_req);
        return rx_drop;
    }
    switch (d.kind) {
    case wire::k_send: {
        if (last && (q->lend ? !lend_room(c) : c->space() == 0))
            return rx_wait; // before anything of the packet is used
        if (breaks_message(q, first, wire::k_send, rc, psn))
            return rx_drop;
        if (first) {
            if (q->lend) {
                // Lent: a message of one packet in one segment from its
                // mbuf; anything else is gathered in lend_buf, which the
                // consumer must have given back.
                q->lend_in_buf = !(last && k.m->data_len >= from + k.plen);
                if (q->lend_in_buf && q->lend_held)
                    return rx_wait;
                q->rx_drop = false;
                fresh_wc(q, false);
                q->rx_off = 0;
            } else if (!q->rx_has_wqe && !take_recv(q)) {
                if (rc) {
                    queue_ack(q, static_cast<std::uint8_t>(wire::aeth_rnr | q->rnr_code), psn);
                    q->nak_sent = true; // later packets wait for this one silently
                    return rx_rnr;      // not accepted: the requester sends it again
                }
                q->rx_drop = true; // UC: no receive, the message is lost
            } else {
                q->rx_drop = false;
                fresh_wc(q, false);
                q->rx_off = 0;
            }
            q->rx_busy = true;
            q->rx_kind = wire::k_send;
        }
        if (q->rx_drop) {
            if (last)
                q->rx_busy = false;
            return rx_ok;
        }
        if (q->lend) {
            if (k.plen > q->max_lend - q->rx_off) {
                // Larger than a lent receive takes (device_attr::max_lend_msg).
                responder_error(q, psn, wire::nak_inv_req);
                return rx_drop;
            }
            if (q->lend_in_buf)
                mbuf_read(k.m, from, k.plen, q->lend_buf + q->rx_off);
            q->rx_off += k.plen;
        } else if (q->rx_wc.status == wc_status::success) {
            wc_status s = rx_room(q, k.plen);
            if (s == wc_status::success)
                rx_put_mbuf(q, k.m, from, k.plen);
            else
                q->rx_wc.status = s;
        }
        if (!last)
            return rx_ok;
        if (d.hdrs & wire::h_imm) {
            std::memcpy(&q->rx_wc.imm_data, e, 4);
            q->rx_wc.wc_flags |= vq::WC_WITH_IMM;
        }
        if (d.hdrs & wire::h_ieth) {
            std::uint32_t key = wire::ld32(e);
            if (q->rx_wc.status == wc_status::success) {
                if (key_invalidate(q->c, key)) {
                    q->rx_wc.invalidated_rkey = key;
                    q->rx_wc.wc_flags |= vq::WC_WITH_INV;
                } else {
                    q->rx_wc.status = wc_status::rem_inv_req_err;
                }
            }
        }
        if (wire::bth_solicited(b))
            q->rx_wc.wc_flags |= vq::WC_SOLICITED;
        q->msn = psn_add(q->msn, 1);
        wc_status st = q->rx_wc.status;
        std::uintptr_t tag = 0;
        if (q->lend && st == wc_status::success) {
            if (q->lend_in_buf) {
                q->rx_wc.data = q->lend_buf;
                tag = reinterpret_cast<std::uintptr_t>(q) + 1;
                q->lend_held = true;
            } else {
                q->rx_wc.data = rte_pktmbuf_mtod(k.m, const std::uint8_t *) + from;
                tag = reinterpret_cast<std::uintptr_t>(k.m);
                q->lend_m = k.m; // rc_rx leaves it to the CQ's loan
            }
        }
        recv_done(q, c, tag);
        if (st != wc_status::success && rc)
            responder_error(q, psn, wire::nak_inv_req);
        return rx_ok;
    }
    case wire::k_write: {
        const bool imm = d.hdrs & wire::h_imm;
        if (last && imm && c->space() == 0)
            return rx_wait;
        if (breaks_message(q, first, wire::k_write, rc, psn))
            return rx_drop;
        if (last && imm && !q->rx_has_wqe && !q->lend) {
            // The immediate consumes a receive: there must be one before any
            // of this packet is placed.
            if (!take_recv(q)) {
                if (rc) {
                    queue_ack(q, static_cast<std::uint8_t>(wire::aeth_rnr | q->rnr_code), psn);
                    q->nak_sent = true;
                    return rx_rnr;
                }
                q->rx_busy = false;
                return rx_drop; // UC: the message is lost
            }
        }
        if (first) {
            q->rx_va = wire::ld64(e);
            q->rx_rkey = wire::ld32(e + 8);
            q->rx_total = q->rx_left = wire::ld32(e + 12);
            q->rx_drop = false;
            key_ref r;
            bool ok = (q->attr.qp_access_flags & vq::ACCESS_REMOTE_WRITE) &&
                      (q->rx_total == 0 ||
                       key_pin(q->c, q->rx_rkey, q->rx_va, q->rx_total, vq::ACCESS_REMOTE_WRITE, false, &r));
            key_unpin(r);
            if (!ok) {
                if (rc) {
                    responder_error(q, psn, wire::nak_rem_access);
                    return rx_drop;
                }
                q->rx_drop = true; // UC: dropped silently
            }
            q->rx_busy = true;
            q->rx_kind = wire::k_write;
        }
        if (!q->rx_drop && k.plen) {
            key_ref r;
            if (k.plen > q->rx_left) {
                if (rc) {
                    responder_error(q, psn, wire::nak_inv_req); // more than its RETH said
                    return rx_drop;
                }
                q->rx_drop = true;
            } else if (!key_pin(q->c, q->rx_rkey, q->rx_va, k.plen, vq::ACCESS_REMOTE_WRITE, false, &r)) {
                if (rc) {
                    responder_error(q, psn, wire::nak_rem_access); // invalidated meanwhile
                    return rx_drop;
                }
                q->rx_drop = true;
            } else {
                mbuf_read(k.m, from, k.plen, r.at);
                key_unpin(r);
                q->rx_va += k.plen;
                q->rx_left -= k.plen;
            }
        }
        if (!last)
            return rx_ok;
        q->rx_busy = false;
        if (!q->rx_drop && q->rx_left != 0) {
            if (rc) {
                responder_error(q, psn, wire::nak_inv_req); // shorter than its RETH said
                return rx_drop;
            }
            q->rx_drop = true;
        }
        q->msn = psn_add(q->msn, 1);
        if (imm) {
            if (q->rx_drop)
                return rx_ok; // UC: the receive stays for the next message
            fresh_wc(q, wire::bth_solicited(b));
            q->rx_wc.opcode = vq::wc_opcode::recv_rdma_with_imm;
            std::memcpy(&q->rx_wc.imm_data, e + ((d.hdrs & wire::h_reth) ? wire::reth_len : 0), 4);
            q->rx_wc.wc_flags |= vq::WC_WITH_IMM;
            q->rx_off = q->rx_total; // byte_len: the write's length
            recv_done(q, c);
        }
        return rx_ok;
    }
    case wire::k_read_req: {
        if (!rc || q->rx_busy) {
            if (rc)
                responder_error(q, psn, wire::nak_inv_req);
            return rx_drop;
        }
        std::uint64_t va = wire::ld64(e);
        std::uint32_t rkey = wire::ld32(e + 8), len = wire::ld32(e + 12);
        key_ref r;
        bool ok = (q->attr.qp_access_flags & vq::ACCESS_REMOTE_READ) &&
                  (len == 0 || key_pin(q->c, rkey, va, len, vq::ACCESS_REMOTE_READ, false, &r));
        key_unpin(r);
        if (!ok) {
            responder_error(q, psn, wire::nak_rem_access);
            return rx_drop;
        }
        if (resp_full(q))
            return rx_wait;
        resp &x = q->resps[q->resp_tail++ % max_resps];
        x = resp{};
        x.kind = r_read;
        x.psn = psn;
        x.va = va;
        x.rkey = rkey;
        x.left = x.total = len;
        q->msn = psn_add(q->msn, 1);
        q->epsn = psn_add(q->epsn, npkts_of(len, q->pmtu) - 1); // the caller adds one
        return rx_ok;
    }
    case wire::k_atomic: {
        if (!rc || q->rx_busy) {
            if (rc)
                responder_error(q, psn, wire::nak_inv_req);
            return rx_drop;
        }
        if (resp_full(q))
            return rx_wait;
        std::uint64_t va = wire::ld64(e);
        std::uint32_t rkey = wire::ld32(e + 8);
        std::uint64_t swap_add = wire::ld64(e + 12), cmp = wire::ld64(e + 20);
        if (va & 7) {
            responder_error(q, psn, wire::nak_inv_req);
            return rx_drop;
        }
        key_ref r;
        if (!(q->attr.qp_access_flags & vq::ACCESS_REMOTE_ATOMIC) ||
            !key_pin(q->c, rkey, va, 8, vq::ACCESS_REMOTE_ATOMIC, false, &r)) {
            responder_error(q, psn, wire::nak_rem_access);
            return rx_drop;
        }
        auto *word = reinterpret_cast<std::uint64_t *>(r.at);
        std::uint64_t old;
        if ((wire::bth_opcode(b) & 0x1f) == wire::op_cmp_swap) {
            old = cmp;
            __atomic_compare_exchange_n(word, &old, swap_add, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        } else {
            old = __atomic_fetch_add(word, swap_add, __ATOMIC_SEQ_CST);
        }
        key_unpin(r);
        // Saved for replays: a retransmitted atomic gets this, not a second execution.
        atomic_saved &s = q->atomics[q->atomic_next++ % max_rd_atomic];
        s = {psn, true, old};
        resp &x = q->resps[q->resp_tail++ % max_resps];
        x = resp{};
        x.kind = r_atomic;
        x.psn = psn;
        x.value = old;
        q->msn = psn_add(q->msn, 1);
        return rx_ok;
    }
    case wire::k_flush: {
        if (!rc || q->rx_busy) {
            if (rc)
                responder_error(q, psn, wire::nak_inv_req);
            return rx_drop;
        }
        unsigned type = e[3] & 0xf, level = (e[3] >> 4) & 3;
        std::uint64_t va = wire::ld64(e + 4);
        std::uint32_t rkey = wire::ld32(e + 12), len = wire::ld32(e + 16);
        unsigned need = type == vq::FLUSH_GLOBAL ? vq::ACCESS_FLUSH_GLOBAL : vq::ACCESS_FLUSH_PERSISTENT;
        key_ref r;
        bool ok;
        if (level == vq::FLUSH_MR) {
            key_entry &ke = q->c->keys[key_index(rkey)];
            ok = ke.key.load(std::memory_order_acquire) == rkey &&
                 key_pin(q->c, rkey, ke.addr, 0, need, false, &r);
        } else {
            ok = key_pin(q->c, rkey, va, len, need, false, &r);
        }
        key_unpin(r);
        if (!ok) {
            responder_error(q, psn, wire::nak_rem_access);
            return rx_drop;
        }
        // Every earlier write was placed by this thread before this point;
        // the fence makes them visible before the acknowledgement is sent.
        std::atomic_thread_fence(std::memory_order_seq_cst);
        q->msn = psn_add(q->msn, 1);
        q->ack_due = true;
        q->ack_psn = psn;
        return rx_ok;
    }
    default:
        return rx_drop;
    }
}

/** Is a read's response still (partly) to be sent? */
bool read_pending(const eth_qp *q) noexcept
{
    for (std::uint32_t i = q->resp_head; i != q->resp_tail; i++)
        if (q->resps[i % max_resps].kind == r_read)
            return true;
    return false;
}

/** A request packet (from the requester's side of the peer). */
rx_rc responder_input(eth_qp *q, const rxpkt &k, eth_cq *c) noexcept
{
    const std::uint8_t *b = rte_pktmbuf_mtod(k.m, const std::uint8_t *) + k.bth;
    const std::uint32_t psn = wire::bth_psn(b);
    const wire::op_desc &d = wire::ops.d[wire::bth_opcode(b)];
    std::int32_t dist = psn_diff(psn, q->epsn);
    if (!is_rc(q)) {
        // UC: no acknowledgements; a gap loses the partial message.
        if (dist != 0) {
            q->p->count(c_rx_seq);
            if (q->rx_busy) {
                q->rx_busy = false;
                q->rx_drop = false;
            }
            if (!(d.pos & wire::p_first))
                return rx_drop;
            q->epsn = psn; // resynchronise on a message's first packet
        }
        rx_rc r = respond(q, k, c);
        if (r != rx_wait)
            q->epsn = psn_add(q->epsn, 1);
        return r == rx_rnr ? rx_drop : r;
    }
    if (dist > 0) {
        q->p->count(c_rx_seq);
        if (!q->nak_sent) {
            q->nak_sent = true;
            queue_ack(q, static_cast<std::uint8_t>(wire::aeth_nak | wire::nak_psn_seq), q->epsn);
        }
        return rx_drop;
    }
    if (dist < 0) {
        // A duplicate: answer it again, execute nothing twice.
        q->p->count(c_rx_seq);
        if (d.kind == wire::k_read_req) {
            if (resp_full(q))
                return rx_drop;
            const std::uint8_t *e = b + wire::bth_len;
            resp &x = q->resps[q->resp_tail++ % max_resps];
            x = resp{};
            x.kind = r_read;
            x.psn = psn;
            x.va = wire::ld64(e);
            x.rkey = wire::ld32(e + 8);
            x.left = x.total = wire::ld32(e + 12);
            return rx_drop;
        }
        if (d.kind == wire::k_atomic) {
            for (const atomic_saved &s : q->atomics)
                if (s.valid && s.psn == psn) {
                    if (resp_full(q))
                        return rx_drop;
                    resp &x = q->resps[q->resp_tail++ % max_resps];
                    x = resp{};
                    x.kind = r_atomic;
                    x.psn = psn;
                    x.value = s.value;
                    return rx_drop;
                }
            return rx_drop; // older than what is kept: the requester has its answer
        }
        q->ack_due = true;
        q->ack_psn = psn_add(q->epsn, wire::psn_mask); // epsn - 1
        return rx_drop;
    }
    if (d.kind == wire::k_send || d.kind == wire::k_write || d.kind == wire::k_atomic) {
        // A read returns memory as it was at its turn: nothing after it
        // changes memory until its responses are out.
        if (read_pending(q))
            send_resps(q);
        if (read_pending(q))
            return rx_wait;
    }
    rx_rc r = respond(q, k, c);
    if (r == rx_wait)
        return r;
    if (r == rx_rnr || qp_st(q) == vq::qp_state::err)
        return rx_drop; // not accepted (RNR), or the QP failed
    q->nak_sent = false;
    q->epsn = psn_add(q->epsn, 1);
    if (d.kind == wire::k_send || d.kind == wire::k_write) {
        q->ack_psn = psn;
        // Timers run in RTS only: a responder in RTR acknowledges at once.
        if (wire::bth_ackreq(b) || ++q->unacked >= ack_every || qp_st(q) != vq::qp_state::rts)
            q->ack_due = true;
        else if (!q->ack_deadline)
            q->ack_deadline = env::tsc::now() + q->ack_delay;
    }
    return r;
}

void send_resps(eth_qp *q) noexcept
{
    while (q->resp_head != q->resp_tail) {
        resp &r = q->resps[q->resp_head % max_resps];
        if (!stage_room(q, 1))
            return;
        roce_frame f;
        if (r.kind == r_ack) {
            if (!roce_alloc(q, q->dest, wire::aeth_len, 0, &f))
                return;
            wire::put_bth(f.bth, wire::op_rc | wire::op_ack, false, 0, q->dest_qpn, false, r.psn);
            wire::put_aeth(f.ext, r.syndrome, q->msn);
            roce_finish(q, f, wire::aeth_len, 0);
            q->stage[q->nstage++] = f.m;
            q->resp_head++;
            continue;
        }
        if (r.kind == r_atomic) {
            constexpr std::uint32_t ext = wire::aeth_len + wire::atomic_ack_len;
            if (!roce_alloc(q, q->dest, ext, 0, &f))
                return;
            wire::put_bth(f.bth, wire::op_rc | wire::op_atomic_ack, false, 0, q->dest_qpn, false, r.psn);
            wire::put_aeth(f.ext, wire::aeth_no_credits, q->msn);
            wire::st64(f.ext + wire::aeth_len, r.value);
            roce_finish(q, f, ext, 0);
            q->stage[q->nstage++] = f.m;
            q->resp_head++;
            continue;
        }
        // Read response: the next packet.
        const bool first = r.left == r.total;
        std::uint32_t n = r.left < q->pmtu ? r.left : q->pmtu;
        const bool last = r.left - n == 0;
        std::uint8_t op = first && last ? wire::op_read_resp_only
                          : first       ? wire::op_read_resp_first
                          : last        ? wire::op_read_resp_last
                                        : wire::op_read_resp_middle;
        std::uint32_t ext = (first || last) ? wire::aeth_len : 0;
        key_ref kr;
        if (n && !key_pin(q->c, r.rkey, r.va, n, vq::ACCESS_REMOTE_READ, false, &kr)) {
            // Invalidated since the request was accepted.
            q->resp_head++;
            queue_ack(q, static_cast<std::uint8_t>(wire::aeth_nak | wire::nak_rem_access), r.psn);
            qp_to_err(q);
            continue;
        }
        if (!roce_alloc(q, q->dest, ext, n, &f)) {
            key_unpin(kr);
            return;
        }
        wire::put_bth(f.bth, static_cast<std::uint8_t>(wire::op_rc | op), false, 0, q->dest_qpn, false, r.psn);
        if (ext)
            wire::put_aeth(f.ext, wire::aeth_no_credits, q->msn);
        if (n)
            std::memcpy(f.payload, kr.at, n);
        key_unpin(kr);
        roce_finish(q, f, ext, n);
        q->stage[q->nstage++] = f.m;
        r.psn = psn_add(r.psn, 1);
        r.va += n;
        r.left -= n;
        if (last)
            q->resp_head++;
    }
}

} // namespace

unsigned rc_rx(eth_qp *q, const eth_cq *held) noexcept
{
    cq_guard g(q->rcq, held);
    eth_cq *c = q->rcq;
    unsigned n = 0;
    while (rxpkt *k = rx_peek(q)) {
        const std::uint8_t *b = rte_pktmbuf_mtod(k->m, const std::uint8_t *) + k->bth;
        const wire::op_desc &d = wire::ops.d[wire::bth_opcode(b)];
        if (d.kind == wire::k_ack || d.kind == wire::k_atomic_ack || d.kind == wire::k_read_resp) {
            requester_input(q, *k);
        } else {
            const rx_rc r = responder_input(q, *k, c);
            if (q->lend_m) {
                k->m = nullptr; // on loan: the CQ frees it (lent_release)
                q->lend_m = nullptr;
            }
            if (r == rx_wait)
                break;
            if (r == rx_drop)
                env::stats::on_drop(q->io); // not accepted: out of sequence, a duplicate, no receive
        }
        rx_pop(q);
        n++;
        if (qp_st(q) == vq::qp_state::err)
            return n;
    }
    if (q->ack_due && is_rc(q)) {
        queue_ack(q, wire::aeth_no_credits, q->ack_psn);
        q->ack_due = false;
        q->unacked = 0;
        q->ack_deadline = 0;
    }
    if (q->resp_head != q->resp_tail)
        send_resps(q);
    return n;
}

void rc_timers(eth_qp *q, const eth_cq *) noexcept
{
    if (!is_rc(q))
        return;
    if (q->deadline && q->una == q->psn)
        q->deadline = 0;
    if (!q->deadline && !q->ack_deadline)
        return;
    if (++q->timer_polls < q->timer_stride)
        return;
    q->timer_polls = 0;
    const std::uint64_t now = env::tsc::now();
    if (q->ack_deadline && now >= q->ack_deadline) {
        // The oldest packet nobody asked an ACK for has waited ack_delay.
        q->ack_deadline = 0;
        q->unacked = 0;
        queue_ack(q, wire::aeth_no_credits, q->ack_psn);
        send_resps(q);
    }
    if (!q->deadline || now < q->deadline)
        return;
    // Timeout: resend from the oldest unacknowledged packet, or give up.
    q->deadline = 0;
    if (q->retries == 0) {
        fail_at(q, q->una, wc_status::retry_exc_err);
        return;
    }
    q->retries--;
    for (std::uint32_t k = q->sq_head; k != q->sq_next; k++)
        at(q, k)->resp_seen = 0;
    q->nak_retry = false;
    go_back(q, q->una);
    arm(q);
}

void rc_timing(eth_qp *q) noexcept
{
    // A deferred ACK goes out long before the requester's timer expires
    // when both ends use the same timeout (waiting for ever: 1 ms).
    const std::uint64_t cap = env::tsc::from_ns(1000000);
    q->ack_delay = q->timeout_cycles && q->timeout_cycles / 8 < cap ? q->timeout_cycles / 8 : cap;
    // Reading the TSC every ack_delay / 16 us calls (at most 64), a poller
    // whose empty polls come less than 250 ns apart sees a timer expire
    // within a sixty-fourth of ack_delay, the shortest timer.
    const std::uint64_t per = std::max<std::uint64_t>(1, env::tsc::from_ns(16000));
    q->timer_stride = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(q->ack_delay / per, 1, 64));
}

void rc_reset(eth_qp *q) noexcept
{
    q->una = q->psn = q->tx_psn = 0;
    q->tx_wqe = q->sq_next;
    q->retries = q->rnr_retries = 0;
    q->deadline = q->rnr_until = 0;
    q->since_ackreq = 0;
    q->nak_retry = false;
    q->epsn = q->msn = 0;
    q->nak_sent = false;
    q->rx_busy = false;
    q->rx_drop = false;
    q->rx_has_wqe = false;
    q->ack_due = false;
    q->unacked = 0;
    q->ack_deadline = 0;
    q->timer_polls = 0;
    q->resp_head = q->resp_tail = 0;
    for (auto &a : q->atomics)
        a.valid = false;
    q->atomic_next = 0;
    std::uint32_t pm = q->p->path_mtu;
    if ((q->attr_set & vq::QP_ATTR_PATH_MTU) && wire::mtu_bytes(q->attr.path_mtu) &&
        wire::mtu_bytes(q->attr.path_mtu) < pm)
        pm = wire::mtu_bytes(q->attr.path_mtu);
    q->pmtu = pm;
}

} // namespace shunt::drv::ethdev
