/* The vq provider's receive handlers of whole messages (private), shared
 * by rx.cpp (inlined into progress) and stamp.cpp (the stamped ops). */
#pragma once

#include "prov.h"

namespace shunt::prov::vqprov {
// Internal to each file that includes it: like a static function, each
// copy is inlined by its callers (rc_rx: its only caller in rx.cpp).
namespace {

/** An eager message that was not received (@p err: no receive context,
 *  or no room in the unexpected store): counted as a drop, and a sender
 *  that asked for FI_DELIVERY_COMPLETE (@p ack its id) fails with @p err. */
[[gnu::cold, gnu::noinline]] void rx_unreceived(prov_ep *e, rc_slot &sl, hdr_word h, std::uint64_t ack, int err)
{
    env::stats::on_drop(e->io);
    if (h.flags & wf_ack) {
        fin_body fb{ack, err, 0};
        ctl_send(e, sl.c, imm_wire(w_fin, 0, 0), &fb, sizeof fb);
    }
}

/** The fast receive: a whole message, matched and copied once from where
 *  the QP lends it into the user's buffer (or the unexpected store). */
inline void rx_eager(prov_ep *e, rc_slot &sl, hdr_word h, const std::uint8_t *p, std::size_t len)
{
    msg_fields f;
    std::size_t n = 0;
    const std::uint8_t fl = h.flags & (wf_tagged | wf_data | wf_ack);
    if (fl == wf_tagged) { // a tagged send: its tag alone, without the table
        if (len < 8) [[unlikely]]
            return; // shorter than its own fields: not ours
        std::memcpy(&f.tag, p, 8);
        n = 8;
    } else if (fl && (n = parse_fields(h.flags, p, len, f)) == 0) [[unlikely]] {
        return;
    }
    util::ep_core *c = e->core;
    if (e->scalable) [[unlikely]] {
        c = rx_target(e, h.rx);
        if (!c) { // no receive context enabled: dropped
            env::stats::on_rx(e->io, len - n);
            rx_unreceived(e, sl, h, f.ack, FI_ENORX);
            return;
        }
    }
    // The sender's AV address, once looked up, is the connection's (conn_src).
    fi_addr_t src = e->msg_type                             ? FI_ADDR_NOTAVAIL
                    : sl.c && sl.c->src != FI_ADDR_NOTAVAIL ? sl.c->src
                                                            : conn_src(e, sl.c);
    env::stats::on_rx(e->io, len - n);
    const std::uint64_t mf = (h.flags & wf_data) ? FI_REMOTE_CQ_DATA : 0;
    int rc;
    if (h.flags & wf_tagged)
        rc = util::rx_deliver_as<true>(c, src, f.tag, f.data, mf, p + n, len - n);
    else
        rc = util::rx_deliver_as<false>(c, src, f.tag, f.data, mf, p + n, len - n);
    if (rc < 0) [[unlikely]] { // unmatched, and the unexpected store could not keep it
        rx_unreceived(e, sl, h, f.ack, -rc);
        return;
    }
    if (h.flags & wf_ack) [[unlikely]] {
        // FI_DELIVERY_COMPLETE: delivered.
        fin_body fb{f.ack, 0, 0};
        ctl_send(e, sl.c, imm_wire(w_fin, 0, 0), &fb, sizeof fb);
    }
}

/** A rendezvous ready-to-send: the matching receive pulls the sender's
 *  buffers (fetch_hook), or the sender is told it was dropped. */
inline void rx_rts(prov_ep *e, rc_slot &sl, hdr_word h, const std::uint8_t *p, std::size_t len)
{
    msg_fields f;
    std::size_t n = parse_fields(h.flags, p, len, f);
    fetch_blob b{sl.c, f.ack, nullptr, {}};
    if (!(h.flags & wf_ack) || n == 0 || !parse_desc(p + n, len - n, b.d) || !sl.c)
        return; // malformed: the sender's send fails when its connection does
    util::ep_core *c = e->scalable ? rx_target(e, h.rx) : e->core;
    env::stats::on_rx(e->io, b.d.total);
    if (!c) {
        rx_unreceived(e, sl, h, f.ack, FI_ENORX); // dropped, as an eager message would be
        return;
    }
    fi_addr_t src = e->msg_type ? FI_ADDR_NOTAVAIL : conn_src(e, sl.c);
    if (int rc = util::rx_deliver_fetch(c, h.flags & wf_tagged, src, f.tag, f.data,
                                        (h.flags & wf_data) ? FI_REMOTE_CQ_DATA : 0, b.d.total, &b,
                                        offsetof(fetch_blob, d) + rndv_desc_len(b.d.niov)))
        rx_unreceived(e, sl, h, f.ack, -rc);
}

} // namespace
} // namespace shunt::prov::vqprov
