/* drivers/ethdev: UD over RoCEv2 — one UD SEND packet per message:
 * Ethernet/IPv4/UDP from the address handle's header, BTH (0x64 / 0x65),
 * DETH (Q_Key, source QP) [, ImmDt], payload, pad, ICRC. TSO cuts the data
 * into mss pieces, each its own datagram behind a fixed-up copy of the
 * caller's header (the segmentation the shm driver offers, drivers/common). */
#include "common/csum.h"
#include "eth.h"

namespace shunt::drv::ethdev {

namespace {

/** Are the request's local SGEs valid for reading? */
bool sges_ok(eth_qp *q, const wqe *w) noexcept
{
    if (w->is_inline)
        return true;
    const vq::sge *s = wqe_sges(q, w);
    for (std::uint32_t i = 0; i < w->num_sge; i++)
        if (s[i].length && !key_check(q->c, s[i].lkey, s[i].addr, s[i].length, 0))
            return false;
    return true;
}

/** One datagram of @p n payload bytes: @p hdr bytes of TSO header (0: none)
 *  then @p n - hdr bytes from @p src. @return false: no buffer. */
bool ud_packet(eth_qp *q, wqe *w, src_cursor &src, std::uint32_t hdr, std::uint32_t n, std::uint32_t seg,
               std::uint32_t seq_off, bool last) noexcept
{
    const auto *ah = static_cast<const eth_ah *>(w->p0);
    const bool imm = w->op == op_send_imm;
    const std::uint32_t ext = static_cast<std::uint32_t>(wire::deth_len + (imm ? wire::imm_len : 0));
    roce_frame f;
    if (!roce_alloc(q, ah->hdr, ext, n, &f))
        return false;
    wire::put_bth(f.bth, imm ? wire::op_ud_send_only_imm : wire::op_ud_send_only, w->flags & vq::WR_SOLICITED, 0,
                  w->rqpn, false, q->psn);
    q->psn = wire::psn_add(q->psn, 1);
    // A Q_Key with the high bit set means "the QP's own" (IBTA 10.2.5).
    std::uint32_t qkey = (w->qkey & 0x80000000u) ? q->attr.qkey : w->qkey;
    wire::st32(f.ext, qkey);
    f.ext[4] = 0;
    wire::st24(f.ext + 5, q->qp_num);
    if (imm)
        std::memcpy(f.ext + wire::deth_len, &w->imm, 4); // already network order
    if (hdr)
        std::memcpy(f.payload, wqe_tso_hdr(q, w), hdr);
    src.copy(f.payload + hdr, n - hdr);
    if (w->op == op_tso)
        common::tso_fixup(f.payload, hdr, n - hdr, seg, seq_off, last);
    if (w->op == op_tso || (w->flags & vq::WR_IP_CSUM))
        common::ip_checksums(f.payload, n); // a TSO segment's checksums are fixed up too
    roce_finish(q, f, ext, n);
    q->stage[q->nstage++] = f.m;
    return true;
}

/** Deliver datagram @p k (its Q_Key checked) to lent-receive QP @p q: its
 *  payload lent from the mbuf (one segment) or from lend_buf; no GRH area
 *  (the bytes are the payload). @return false: wait (no loan to be had). */
bool ud_lend(eth_qp *q, eth_cq *c, rxpkt *k) noexcept
{
    const std::uint32_t from = static_cast<std::uint32_t>(k->bth) + k->hlen;
    const bool in_place = k->m->data_len >= from + k->plen;
    if (!lend_room(c) || (!in_place && q->lend_held))
        return false;
    const std::uint8_t *b = rte_pktmbuf_mtod(k->m, const std::uint8_t *) + k->bth;
    const std::uint8_t *deth = b + wire::bth_len;
    if (k->plen > q->max_lend) {
        env::stats::on_drop(q->io); // larger than a lent receive takes: dropped, as UD allows
        return true;
    }
    vq::wc w{};
    w.status = vq::wc_status::success;
    w.opcode = vq::wc_opcode::recv;
    w.qp_num = q->qp_num;
    w.src_qp = wire::ld24(deth + 5);
    w.wc_flags = wire::bth_solicited(b) ? vq::WC_SOLICITED : 0;
    if (wire::bth_opcode(b) == wire::op_ud_send_only_imm) {
        std::memcpy(&w.imm_data, deth + wire::deth_len, 4);
        w.wc_flags |= vq::WC_WITH_IMM;
    }
    w.byte_len = k->plen;
    std::uintptr_t tag;
    if (in_place) {
        w.data = rte_pktmbuf_mtod(k->m, const std::uint8_t *) + from;
        tag = reinterpret_cast<std::uintptr_t>(k->m);
        k->m = nullptr; // on loan: the CQ frees it (lent_release)
    } else {
        mbuf_read(k->m, from, k->plen, q->lend_buf);
        w.data = q->lend_buf;
        tag = reinterpret_cast<std::uintptr_t>(q) + 1;
        q->lend_held = true;
    }
    cq_push_lent(c, w, tag);
    count_recv(q, w, k->plen);
    return true;
}

} // namespace

void ud_tx(eth_qp *q, const eth_cq *) noexcept
{
    while (q->sq_next != q->sq_tail) {
        wqe *w = &q->sq[q->sq_next & q->sq_mask];
        if (w->state == ws_queued) {
            if (!sges_ok(q, w)) {
                w->state = ws_done;
                w->status = static_cast<std::uint8_t>(vq::wc_status::loc_prot_err);
                q->sq_next++;
                continue;
            }
            w->state = ws_active;
        }
        src_cursor src(q, w);
        if (w->op == op_tso) {
            // w->got: payload bytes already sent (the stage filled up midway).
            src.seek(w->got);
            std::uint32_t seg = w->got / w->mss;
            do {
                if (!stage_room(q, 1))
                    return;
                std::uint32_t part = w->len - w->got < w->mss ? w->len - w->got : w->mss;
                if (!ud_packet(q, w, src, w->hdr_sz, w->hdr_sz + part, seg, w->got, w->got + part >= w->len))
                    return; // no buffer: retried at the next progress
                w->got += part;
                seg++;
            } while (w->got < w->len);
        } else {
            if (!stage_room(q, 1) || !ud_packet(q, w, src, 0, w->len, 0, 0, true))
                return;
        }
        // Copied into frames: done when the PMD takes the last of them.
        w->status = static_cast<std::uint8_t>(vq::wc_status::success);
        stage_end(q, w);
        q->sq_next++;
    }
}

unsigned ud_rx(eth_qp *q, const eth_cq *held) noexcept
{
    unsigned n = 0;
    cq_guard g(q->rcq, held);
    eth_cq *c = q->rcq;
    while (rxpkt *k = rx_peek(q)) {
        const std::uint8_t *f = rte_pktmbuf_mtod(k->m, const std::uint8_t *);
        const std::uint8_t *b = f + k->bth;
        const std::uint8_t *deth = b + wire::bth_len;
        if (wire::ld32(deth) != q->attr.qkey) {
            q->p->count(c_rx_qkey); // dropped, as a NIC does
            env::stats::on_drop(q->io);
            rx_pop(q);
            continue;
        }
        if (c->space() == 0)
            break;
        if (q->lend) {
            if (!ud_lend(q, c, k))
                break;
            rx_pop(q);
            n++;
            continue;
        }
        // A datagram waits in the ring until a receive is posted (bounded by
        // the ring; beyond it the port drops, which UD allows).
        if (!take_recv(q))
            break;
        vq::wc &w = q->rx_wc;
        w.status = vq::wc_status::success;
        w.opcode = vq::wc_opcode::recv;
        w.vendor_err = 0;
        w.imm_data = 0;
        w.invalidated_rkey = 0;
        w.qp_num = q->qp_num;
        w.src_qp = wire::ld24(deth + 5);
        w.wc_flags = vq::WC_GRH | (wire::bth_solicited(b) ? vq::WC_SOLICITED : 0);
        w.reserved = 0;
        if (wire::bth_opcode(b) == wire::op_ud_send_only_imm) {
            std::memcpy(&w.imm_data, deth + wire::deth_len, 4);
            w.wc_flags |= vq::WC_WITH_IMM;
        }
        // The 40-byte GRH area verbs reserves: for RoCEv2 over IPv4 the IPv4
        // header sits in its last 20 bytes (as RoCE NICs write it).
        std::uint8_t grh[40] = {};
        std::memcpy(grh + 20, b - wire::udp_len - wire::ip_len, wire::ip_len);
        w.status = rx_room(q, 40ull + k->plen);
        if (w.status == vq::wc_status::success) {
            rx_put(q, grh, 40);
            rx_put_mbuf(q, k->m, static_cast<std::uint32_t>(k->bth) + k->hlen, k->plen);
        }
        w.byte_len = 40 + k->plen;
        q->rx_has_wqe = false;
        cq_push(c, w); // a UD receive error leaves the QP up
        count_recv(q, w, k->plen); // without the GRH area
        rx_pop(q);
        n++;
    }
    return n;
}

} // namespace shunt::drv::ethdev
