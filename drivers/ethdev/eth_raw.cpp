/* drivers/ethdev: RAW_PACKET QPs — the work request is the whole frame.
 *
 * Sends are copied into an mbuf below SHUNT_ETHDEV_ZCOPY_BYTES and sent
 * zero-copy above it: each SGE is attached as external buffers (at most
 * 32 KiB per mbuf: buf_len is 16 bits), all sharing the request's
 * rte_mbuf_ext_shared_info, whose free callback runs when the PMD (or, on
 * net_ring, the receiving port) drops the last of them: only then is the
 * request done, and completions stay in order.
 *
 * WR_IP_CSUM and TSO use the port's offloads when it has them (chosen at
 * QP creation), else software: checksums over the copied frame, and
 * rte_gso_segment plus per-segment checksums (GSO leaves them stale). */
#include "common/csum.h"
#include "env/log.h"
#include "eth.h"
#include "eth_tsan.h"

namespace shunt::drv::ethdev {

namespace {

constexpr std::uint32_t ext_piece = 32768; ///< bytes per external-buffer mbuf
constexpr std::uint32_t gso_chunk_segs = 32; ///< TSO segments built per pass

/** The request's frame headers: Ethernet [VLAN] IPv4 then TCP or UDP. */
struct l234 {
    std::uint16_t l2, l3, l4; ///< lengths
    std::uint8_t proto;
};
bool parse_l234(const std::uint8_t *f, std::uint32_t n, l234 *out) noexcept
{
    if (n < wire::eth_len + 20)
        return false;
    std::uint16_t l2 = wire::eth_len;
    std::uint16_t et = wire::ld16(f + 12);
    if (et == wire::ethertype_vlan) {
        if (n < 18 + 20)
            return false;
        et = wire::ld16(f + 16);
        l2 = 18;
    }
    const std::uint8_t *ip = f + l2;
    if (et != wire::ethertype_ipv4 || (ip[0] >> 4) != 4 || (ip[0] & 0xf) < 5)
        return false;
    std::uint16_t l3 = static_cast<std::uint16_t>((ip[0] & 0xf) * 4);
    if (static_cast<std::uint32_t>(l2) + l3 + 8 > n)
        return false;
    out->proto = ip[9];
    out->l2 = l2;
    out->l3 = l3;
    if (ip[9] == 6) {
        if (static_cast<std::uint32_t>(l2) + l3 + 20 > n)
            return false;
        out->l4 = static_cast<std::uint16_t>((ip[l3 + 12] >> 4) * 4);
        return out->l4 >= 20 && static_cast<std::uint32_t>(l2) + l3 + out->l4 <= n;
    }
    if (ip[9] == 17) {
        out->l4 = 8;
        return true;
    }
    return false;
}

void zc_free(void *, void *opaque) noexcept
{
    // The PMD (or the port that received it) released the last mbuf on the
    // request's buffer: the request may complete; its data is no longer read.
    static_cast<wqe *>(opaque)->zc_refs.store(0, std::memory_order_release);
}

/** The request's shared info (one per send-queue entry, allocated with the
 *  QP when zero-copy is possible), set up for it. */
rte_mbuf_ext_shared_info *zc_info(eth_qp *q, const wqe *w) noexcept
{
    if (!q->zc) [[unlikely]]
        return nullptr;
    rte_mbuf_ext_shared_info *sh = &q->zc[w - q->sq];
    sh->free_cb = zc_free;
    sh->fcb_opaque = const_cast<wqe *>(w);
    return sh;
}

/** Every SGE in a region the port can read directly? */
bool zc_able(eth_qp *q, const wqe *w) noexcept
{
    if (w->is_inline || !q->zc || w->len < lim().zcopy_bytes || lim().zcopy_bytes == 0)
        return false;
    if (q->p->dma_virtual)
        return true;
    // A PMD that DMAs needs every SGE in a region mapped for its device.
    const vq::sge *s = wqe_sges(q, w);
    for (std::uint32_t i = 0; i < w->num_sge; i++) {
        key_ref r;
        if (!key_pin(q->c, s[i].lkey, s[i].addr, s[i].length, 0, true, &r))
            return false;
        bool mapped = r.e->mr && r.e->mr->dma;
        key_unpin(r);
        if (!mapped)
            return false;
    }
    return true;
}

/** Append @p n bytes of the request's data from @p src to chain @p head,
 *  as external buffers. @return false: out of mbufs (head is freed by the caller). */
bool attach_data(eth_qp *q, wqe *w, rte_mbuf *head, std::uint32_t from, std::uint32_t n,
                 rte_mbuf_ext_shared_info *sh, std::uint16_t *pieces) noexcept
{
    const vq::sge *sg = wqe_sges(q, w);
    std::uint32_t i = 0, off = from;
    while (i < w->num_sge && off >= sg[i].length)
        off -= sg[i++].length;
    while (n) {
        std::uint32_t k = sg[i].length - off;
        k = k < n ? k : n;
        k = k < ext_piece ? k : ext_piece;
        rte_mbuf *m = rte_pktmbuf_alloc(q->p->bare.raw());
        if (!m)
            return false;
        auto *addr = reinterpret_cast<std::uint8_t *>(sg[i].addr) + off;
        // IOVA = VA: a virtual device never reads it; a DMA port sends zero-copy
        // only from regions mapped with IOVA = VA (zc_able). No page-map lookup.
        rte_pktmbuf_attach_extbuf(m, addr, reinterpret_cast<std::uintptr_t>(addr), static_cast<std::uint16_t>(k), sh);
        m->data_len = static_cast<std::uint16_t>(k);
        m->pkt_len = k;
        rte_mbuf_ext_refcnt_update(sh, 1);
        (*pieces)++;
        if (rte_pktmbuf_chain(head, m) != 0) {
            rte_pktmbuf_free(m);
            return false;
        }
        n -= k;
        off += k;
        if (off == sg[i].length) {
            i++;
            off = 0;
        }
    }
    return true;
}

/** Append @p n bytes copied from @p src (mbufs of the data pool). */
bool copy_data(eth_qp *q, rte_mbuf *head, src_cursor &src, std::uint32_t n) noexcept
{
    rte_mbuf *last = rte_pktmbuf_lastseg(head);
    while (n) {
        std::uint16_t room = rte_pktmbuf_tailroom(last);
        if (room == 0) {
            rte_mbuf *m = mbuf_get(q->p);
            if (!m)
                return false;
            if (rte_pktmbuf_chain(head, m) != 0) {
                rte_pktmbuf_free(m);
                return false;
            }
            last = m;
            continue;
        }
        std::uint32_t k = n < room ? n : room;
        src.copy(rte_pktmbuf_mtod_offset(last, std::uint8_t *, last->data_len), k);
        last->data_len = static_cast<std::uint16_t>(last->data_len + k);
        head->pkt_len += k;
        n -= k;
    }
    return true;
}

/** Set the checksum offload fields of @p m from its headers. */
void csum_offload(rte_mbuf *m, const l234 &h) noexcept
{
    m->l2_len = h.l2;
    m->l3_len = h.l3;
    m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM |
                   (h.proto == 6 ? RTE_MBUF_F_TX_TCP_CKSUM : RTE_MBUF_F_TX_UDP_CKSUM);
}

/** Software IPv4 and TCP/UDP checksums of a segment chain (GSO output: the
 *  headers in the first segment, the payload after it). */
void csum_chain(rte_mbuf *m, const l234 &h) noexcept
{
    std::uint8_t *ip = rte_pktmbuf_mtod_offset(m, std::uint8_t *, h.l2);
    wire::st16(ip + 10, 0);
    wire::st16(ip + 10, wire::fold16(wire::sum16(ip, h.l3)));
    std::uint8_t *l4 = ip + h.l3;
    std::uint8_t *ck = l4 + (h.proto == 6 ? 16 : 6);
    ck[0] = ck[1] = 0;
    const std::uint32_t l4len = m->pkt_len - h.l2 - h.l3;
    std::uint32_t s = wire::sum16(ip + 12, 8) + h.proto + l4len;
    // Sum the L4 bytes over the segments; an odd-length piece shifts the
    // byte lanes of the next one.
    std::uint32_t from = static_cast<std::uint32_t>(h.l2) + h.l3, base = 0;
    bool odd = false;
    for (const rte_mbuf *g = m; g; g = g->next) {
        if (from < base + g->data_len) {
            const std::uint8_t *p = rte_pktmbuf_mtod_offset(g, const std::uint8_t *, from - base);
            std::uint32_t n = base + g->data_len - from;
            if (odd && n) {
                s += *p++;
                n--;
                odd = false;
            }
            s = wire::sum16(p, n & ~1u, s);
            if (n & 1) {
                s += static_cast<std::uint32_t>(p[n - 1]) << 8;
                odd = true;
            }
            from = base + g->data_len;
            s = (s & 0xffff) + (s >> 16);
        }
        base += g->data_len;
    }
    std::uint16_t c = wire::fold16(s);
    if (h.proto == 17 && c == 0)
        c = 0xffff;
    wire::st16(ck, c);
}

/** Prepare offloaded frames (pseudo-header checksums) for the PMD. */
inline bool prepare(eth_qp *q, rte_mbuf *m) noexcept
{
    if (!q->p->need_prepare || !(m->ol_flags & RTE_MBUF_F_TX_OFFLOAD_MASK))
        return true;
    return rte_eth_tx_prepare(q->p->id, q->txq, &m, 1) == 1;
}

enum step { st_done, st_more, st_again, st_fail };

/** One plain send: the frame, copied or zero-copy. */
step raw_send(eth_qp *q, wqe *w) noexcept
{
    if (!stage_room(q, 1))
        return st_again;
    rte_mbuf *m = mbuf_get(q->p);
    if (!m)
        return st_again;
    src_cursor src(q, w);
    const bool want_csum = w->flags & vq::WR_IP_CSUM;
    const bool zc = zc_able(q, w) && !(want_csum && q->raw_csum_sw);
    bool ok;
    if (zc) {
        rte_mbuf_ext_shared_info *sh = zc_info(q, w);
        if (!sh) {
            rte_pktmbuf_free(m);
            return st_again;
        }
        std::uint16_t pieces = 0;
        rte_mbuf_ext_refcnt_set(sh, 1); // ours while attaching
        w->zc_refs.store(1, std::memory_order_relaxed);
        ok = attach_data(q, w, m, 0, w->len, sh, &pieces);
        if (!ok) {
            rte_pktmbuf_free(m); // drops the pieces' references
            if (rte_mbuf_ext_refcnt_update(sh, -1) == 0)
                w->zc_refs.store(0, std::memory_order_relaxed);
            return st_again;
        }
        if (rte_mbuf_ext_refcnt_update(sh, -1) == 0)
            w->zc_refs.store(0, std::memory_order_relaxed);
    } else {
        ok = copy_data(q, m, src, w->len);
        if (!ok) {
            rte_pktmbuf_free(m);
            return st_again;
        }
    }
    if (want_csum) {
        l234 h;
        std::uint8_t hb[128];
        std::uint32_t hn = w->len < sizeof hb ? w->len : static_cast<std::uint32_t>(sizeof hb);
        mbuf_read(m, 0, hn, hb);
        if (parse_l234(hb, hn, &h)) {
            if (!q->raw_csum_sw) {
                csum_offload(m, h);
            } else if (m->nb_segs == 1) {
                common::ip_checksums(rte_pktmbuf_mtod(m, std::uint8_t *), m->data_len);
            } else {
                csum_chain(m, h);
            }
        }
        if (!prepare(q, m)) {
            rte_pktmbuf_free(m);
            return st_fail;
        }
    }
    q->stage[q->nstage++] = m;
    return st_done;
}

/** TSO: w->got bytes of payload are out; send the next chunk. */
step raw_tso(eth_qp *q, wqe *w) noexcept
{
    const std::uint8_t *hdr = wqe_tso_hdr(q, w);
    l234 h;
    if (!parse_l234(hdr, w->hdr_sz, &h) || h.proto != 6 || h.l2 + h.l3 + h.l4 != w->hdr_sz)
        return st_fail; // TSO is TCP over IPv4 with the header exactly Ethernet..TCP
    if (!stage_room(q, gso_chunk_segs))
        return st_again;
    const std::uint32_t seg0 = w->got / w->mss;
    std::uint32_t chunk = w->len - w->got;
    std::uint32_t cap = gso_chunk_segs * w->mss;
    if (cap > 60000)
        cap = 60000 / w->mss * w->mss;
    if (chunk > cap)
        chunk = cap;
    const bool last = w->got + chunk >= w->len;
    rte_mbuf *m = mbuf_get(q->p);
    if (!m)
        return st_again;
    auto *b = reinterpret_cast<std::uint8_t *>(rte_pktmbuf_append(m, w->hdr_sz));
    std::memcpy(b, hdr, w->hdr_sz);
    // The chunk's header: this chunk's sequence number and IPv4 id, its
    // length (one segment's for a chunk that needs no segmentation).
    common::tso_fixup(b, w->hdr_sz, chunk, seg0, w->got, last);
    bool ok;
    if (zc_able(q, w)) {
        rte_mbuf_ext_shared_info *sh = zc_info(q, w);
        if (!sh) {
            rte_pktmbuf_free(m);
            return st_again;
        }
        std::uint16_t pieces = 0;
        if (w->got == 0) {
            rte_mbuf_ext_refcnt_set(sh, 1); // the request's own reference until its last chunk
            w->zc_refs.store(1, std::memory_order_relaxed);
        }
        ok = attach_data(q, w, m, w->got, chunk, sh, &pieces);
    } else {
        src_cursor src(q, w);
        src.seek(w->got);
        ok = copy_data(q, m, src, chunk);
    }
    if (!ok) {
        rte_pktmbuf_free(m);
        return st_again;
    }
    m->l2_len = h.l2;
    m->l3_len = h.l3;
    m->l4_len = h.l4;
    if (!q->raw_tso_sw) {
        // The port segments: pseudo-header checksum by tx_prepare.
        m->ol_flags |= RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
        m->tso_segsz = w->mss;
        if (!prepare(q, m)) {
            rte_pktmbuf_free(m);
            return st_fail;
        }
        q->stage[q->nstage++] = m;
    } else {
        m->ol_flags |= RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4;
        rte_gso_ctx ctx = q->p->gso;
        ctx.gso_size = static_cast<std::uint16_t>(w->hdr_sz + w->mss);
        rte_mbuf *segs[gso_chunk_segs];
        int n = chunk > w->mss ? rte_gso_segment(m, &ctx, segs, gso_chunk_segs) : 0;
        if (n < 0) {
            rte_pktmbuf_free(m);
            return st_again; // pools dry: retried at the next progress
        }
        if (n == 0) {
            // One segment: the chunk itself, with software checksums.
            m->ol_flags &= ~(RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4);
            csum_chain(m, h);
            q->stage[q->nstage++] = m;
        } else {
            rte_pktmbuf_free(m); // the segments hold references to its data
            for (int i = 0; i < n; i++) {
                segs[i]->ol_flags &= ~RTE_MBUF_F_TX_OFFLOAD_MASK;
                csum_chain(segs[i], h);
                q->stage[q->nstage++] = segs[i];
            }
        }
    }
    w->got += chunk;
    if (last && zc_able(q, w)) {
        rte_mbuf_ext_shared_info *sh = zc_info(q, w);
        if (rte_mbuf_ext_refcnt_update(sh, -1) == 0)
            w->zc_refs.store(0, std::memory_order_relaxed);
    }
    return last ? st_done : st_more;
}

} // namespace

void raw_tx(eth_qp *q, const eth_cq *) noexcept
{
    while (q->sq_next != q->sq_tail) {
        wqe *w = &q->sq[q->sq_next & q->sq_mask];
        if (w->state == ws_queued) {
            bool ok = true;
            if (!w->is_inline) {
                const vq::sge *s = wqe_sges(q, w);
                for (std::uint32_t i = 0; i < w->num_sge && ok; i++)
                    ok = !s[i].length || key_check(q->c, s[i].lkey, s[i].addr, s[i].length, 0);
            }
            if (!ok) {
                w->state = ws_done;
                w->status = static_cast<std::uint8_t>(vq::wc_status::loc_prot_err);
                q->sq_next++;
                continue;
            }
            w->state = ws_active;
        }
        step s = w->op == op_tso ? raw_tso(q, w) : raw_send(q, w);
        if (s == st_more)
            continue; // a TSO chunk went out; the next one
        if (s == st_again)
            return;
        if (s == st_done) {
            w->status = static_cast<std::uint8_t>(vq::wc_status::success);
            stage_end(q, w); // done when the PMD takes its (last) frame
        } else {
            w->state = ws_done;
            w->status = static_cast<std::uint8_t>(vq::wc_status::loc_qp_op_err);
        }
        q->sq_next++;
    }
}

namespace {

/** Receive one frame into the next posted receive. @return false: none posted. */
bool raw_deliver(eth_qp *q, eth_cq *c, rte_mbuf *m) noexcept
{
    if (!take_recv(q))
        return false;
    vq::wc &w = q->rx_wc;
    w.status = vq::wc_status::success;
    w.opcode = vq::wc_opcode::recv;
    w.vendor_err = 0;
    w.byte_len = m->pkt_len;
    w.imm_data = 0;
    w.invalidated_rkey = 0;
    w.qp_num = q->qp_num;
    w.src_qp = 0;
    w.wc_flags = 0;
    w.reserved = 0;
    constexpr std::uint64_t good = RTE_MBUF_F_RX_IP_CKSUM_GOOD | RTE_MBUF_F_RX_L4_CKSUM_GOOD;
    if ((m->ol_flags & good) == good)
        w.wc_flags |= vq::WC_IP_CSUM_OK;
    else if (!q->p->hw_rx_csum && lim().rx_csum && m->nb_segs == 1 &&
             common::ip_checksums_valid(rte_pktmbuf_mtod(m, const std::uint8_t *), m->data_len))
        w.wc_flags |= vq::WC_IP_CSUM_OK;
    w.status = rx_room(q, m->pkt_len);
    if (w.status == vq::wc_status::success)
        rx_put_mbuf(q, m, 0, m->pkt_len);
    q->rx_has_wqe = false;
    cq_push(c, w);
    count_recv(q, w, w.byte_len);
    return true;
}

/** Receives posted and not taken (an SRQ's are shared: a snapshot). */
inline std::uint32_t posted(const eth_qp *q) noexcept
{
    return q->rq->tail.load(std::memory_order_acquire) - q->rq->head.load(std::memory_order_relaxed);
}

} // namespace

unsigned raw_rx(eth_qp *q, const eth_cq *held) noexcept
{
    cq_guard g(q->rcq, held);
    eth_cq *c = q->rcq;
    unsigned n = 0;
    if (q->exclusive) {
        // Our own queue: take no more frames than we can place now.
        std::uint32_t want = posted(q);
        if (want > c->space())
            want = c->space();
        if (want > burst)
            want = burst;
        if (want == 0)
            return 0;
        rte_mbuf *m[burst];
        std::uint16_t k = rte_eth_rx_burst(q->p->id, q->rxq, m, static_cast<std::uint16_t>(want));
        tsan_taken(m, k);
        if (k)
            q->p->count(c_rx_frames, k);
        // A port that spreads frames over its queues may put RoCE frames
        // for our other QPs here, and ARP.
        const bool divert = q->p->roce_qps.load(std::memory_order_relaxed) != 0;
        for (std::uint16_t i = 0; i < k; i++) {
            if (divert && port_divert(q->p, m[i])) [[unlikely]]
                continue; // the shared path took it
            if (!raw_deliver(q, c, m[i]))
                q->p->count(c_rx_no_raw); // an SRQ emptied by another QP meanwhile
            rte_pktmbuf_free(m[i]);
            n++;
        }
        return n;
    }
    while (rxpkt *k = rx_peek(q)) {
        if (c->space() == 0 || !raw_deliver(q, c, k->m))
            break;
        rx_pop(q);
        n++;
    }
    return n;
}

} // namespace shunt::drv::ethdev
