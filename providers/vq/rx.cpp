// vq provider: progress — receive completions (messages, fragments, acks,
// remote CQ data, CM datagrams), send completions, resumed sends.
#include <cstring>

#include "env/errors.h"
#include "prov.h"

namespace shunt::prov::vqprov {

void dgram_rx(prov_ep *e, const std::uint8_t *buf, std::size_t len); // dgram.cpp
void msg_event(prov_ep *e, std::uint32_t event);                      // cm.cpp
void pep_cm(prov_ep *e, const cm_msg &m);                             // cm.cpp

namespace {

void repost_ud(prov_ep *e, std::uint64_t i)
{
    std::size_t sz = e->dgram ? e->dom->lim.dgram_buf : e->dom->lim.ud_buf;
    (void)vq::post_recv(e->ud, i, reinterpret_cast<std::uint64_t>(e->ud_bufs) + i * sz, std::uint32_t(sz),
                        e->ud_mr->lkey);
}

void repost(prov_ep *e, int s, std::uint32_t i)
{
    rc_slot &sl = e->slots[s];
    (void)vq::post_recv(sl.qp, (std::uint64_t(s) << 32) | i,
                        reinterpret_cast<std::uint64_t>(sl.bounce) + std::uint64_t(i) * e->dom->lim.inline_max,
                        e->dom->lim.inline_max,
                        sl.bounce_mr->lkey);
}

void send_ack(prov_ep *e, rc_slot &sl, std::uint64_t id)
{
    std::uint8_t m[16];
    wire_hdr w{w_ack, 0, 0, 0};
    std::memcpy(m, &w, 8);
    std::memcpy(m + 8, &id, 8);
    // The ack goes back on the QP the message came from; retry briefly if the
    // ring is full (the sender polls, so room appears).
    for (int i = 0; i < 1000; i++) {
        if (vq::post_send(sl.qp, ~0ULL, m, sizeof m, 0, vq::WR_INLINE) != -FI_EAGAIN)
            return;
        vq::wc w2[8];
        (void)vq::poll_cq(e->scq, 8, w2);
    }
}

/** Make sl.stage hold @p total bytes: the kept buffer when big enough, else
 *  a new one (first fragmented message on this QP, or a larger one).
 *  @return false if the allocation failed (the message is dropped). */
bool stage_reserve(rc_slot &sl, std::uint32_t total)
{
    std::uint32_t need = total ? total : 1;
    if (sl.stage && sl.stage_cap >= need) [[likely]]
        return true;
    delete[] sl.stage;
    sl.stage = new (std::nothrow) std::uint8_t[need];
    sl.stage_cap = sl.stage ? need : 0;
    return sl.stage != nullptr;
}

/** A fragmented message is done: keep its buffer for the next one unless it
 *  is larger than stage_keep. */
void stage_release(rc_slot &sl)
{
    if (sl.stage_cap > stage_keep) {
        delete[] sl.stage;
        sl.stage = nullptr;
        sl.stage_cap = 0;
    }
    sl.staging = sl.stage_ok = false;
    sl.stage_total = sl.stage_got = 0;
}

void rc_rx(prov_ep *e, const vq::wc &w)
{
    int s = int(w.wr_id >> 32);
    std::uint32_t i = std::uint32_t(w.wr_id);
    if (s < 0 || s >= int(e->slots.size()))
        return;
    rc_slot &sl = e->slots[s];
    if (!sl.qp || sl.qp->qp_num != w.qp_num || sl.retired)
        return;
    if (w.status != vq::wc_status::success) {
        // QP in error (peer gone, or being destroyed): its buffers come back flushed.
        if (sl.c && sl.c->slot == s)
            conn_broken(e, sl.c);
        else if (!e->msg_type && sl.c)
            sl.c->dead_slot = sl.c->dead_slot < 0 ? s : sl.c->dead_slot; // an accepted, receive-only QP
        if (!e->msg_type && !sl.c && sl.qp && !sl.retired)
            slot_retire(e, s);
        if (e->msg_type && sl.c && !sl.c->shut) {
            sl.c->shut = true;
            msg_event(e, FI_SHUTDOWN);
        }
        return;
    }
    util::ep_core *c = e->core;
    if (w.opcode == vq::wc_opcode::recv_rdma_with_imm) {
        if (e->scalable)
            c = rx_target(e, 0);
        if (c)
            util::rx_remote_data(c, w.imm_data, FI_RMA | FI_REMOTE_WRITE, w.byte_len);
        repost(e, s, i);
        return;
    }
    const std::uint8_t *b = sl.bounce + std::size_t(i) * e->dom->lim.inline_max;
    std::size_t len = w.byte_len;
    if (len < sizeof(wire_hdr)) {
        repost(e, s, i);
        return;
    }
    wire_hdr h;
    std::memcpy(&h, b, sizeof h);
    std::size_t off = sizeof h;
    fi_addr_t src = e->msg_type ? FI_ADDR_NOTAVAIL : conn_src(e, sl.c);
    switch (h.op) {
    case w_msg:
    case w_tagged: {
        std::uint64_t tag = 0, data = 0, ack = 0;
        if (h.op == w_tagged) {
            std::memcpy(&tag, b + off, 8);
            off += 8;
        }
        if (h.flags & wf_data) {
            std::memcpy(&data, b + off, 8);
            off += 8;
        }
        if (h.flags & wf_ack) {
            std::memcpy(&ack, b + off, 8);
            off += 8;
        }
        if (off > len)
            break;
        if (h.flags & wf_more) {
            sl.staging = true;
            sl.stage_ok = stage_reserve(sl, h.total);
            sl.stage_total = h.total;
            sl.stage_got = 0;
            sl.stage_op = h.op;
            sl.stage_flags = h.flags;
            sl.stage_tag = tag;
            sl.stage_data = data;
            sl.stage_ack = ack;
            sl.stage_rx = h.pad;
            std::size_t n = std::min<std::size_t>(len - off, h.total);
            if (sl.stage_ok && n)
                std::memcpy(sl.stage, b + off, n);
            sl.stage_got = std::uint32_t(n);
            break;
        }
        if (e->scalable)
            c = rx_target(e, h.pad);
        if (c) // a scalable endpoint without an enabled receive context drops it
            (void)util::rx_deliver(c, h.op == w_tagged, src, tag, data, (h.flags & wf_data) ? FI_REMOTE_CQ_DATA : 0,
                                   b + off, len - off, true);
        if (h.flags & wf_ack)
            send_ack(e, sl, ack);
        break;
    }
    case w_frag: {
        if (!sl.staging)
            break;
        std::size_t n = len - off;
        if (sl.stage_ok && h.total == sl.stage_got && sl.stage_got + n <= sl.stage_total) {
            std::memcpy(sl.stage + sl.stage_got, b + off, n);
            sl.stage_got += std::uint32_t(n);
        }
        if (!(h.flags & wf_more)) {
            if (e->scalable)
                c = rx_target(e, sl.stage_rx);
            if (c && sl.stage_ok && sl.stage_got == sl.stage_total)
                (void)util::rx_deliver(c, sl.stage_op == w_tagged, src, sl.stage_tag, sl.stage_data,
                                       (sl.stage_flags & wf_data) ? FI_REMOTE_CQ_DATA : 0, sl.stage, sl.stage_total,
                                       true);
            if (sl.stage_flags & wf_ack)
                send_ack(e, sl, sl.stage_ack);
            stage_release(sl);
        }
        break;
    }
    case w_ack: {
        std::uint64_t id;
        if (len >= 16) {
            std::memcpy(&id, b + 8, 8);
            tx_acked(e, id);
        }
        break;
    }
    case w_shutdown:
        if (e->msg_type && sl.c && !sl.c->shut) {
            sl.c->shut = true;
            sl.c->state = conn::failed;
            msg_event(e, FI_SHUTDOWN);
        }
        break;
    default:
        break;
    }
    repost(e, s, i);
}

} // namespace

void progress(util::ep_core *c)
{
    prov_ep *e = ep_of(c);
    util::guard g(e->lock);
    if (e->pep_ud) [[unlikely]]
        adopted_progress(e);
    vq::wc w[16];
    int n = vq::poll_cq(e->rcq, 16, w);
    for (int k = 0; k < n; k++) {
        if (e->ud && w[k].qp_num == e->ud->qp_num) {
            std::size_t sz = e->dgram ? e->dom->lim.dgram_buf : e->dom->lim.ud_buf;
            const std::uint8_t *b = e->ud_bufs + w[k].wr_id * sz;
            if (w[k].status == vq::wc_status::success) {
                if (e->dgram)
                    dgram_rx(e, b, w[k].byte_len);
                else if (w[k].byte_len >= offsetof(cm_msg, data)) {
                    cm_msg m{};
                    std::memcpy(&m, b, std::min<std::size_t>(w[k].byte_len, sizeof m));
                    if (e->msg_type)
                        pep_cm(e, m);
                    else
                        cm_handle(e, m);
                }
                repost_ud(e, w[k].wr_id);
            }
            continue;
        }
        rc_rx(e, w[k]);
    }
    n = vq::poll_cq(e->scq, 16, w);
    for (int k = 0; k < n; k++)
        tx_complete(e, w[k]);
    for (conn *cn : e->all) {
        if (cn->dead_slot >= 0) {
            slot_retire(e, cn->dead_slot);
            cn->dead_slot = -1;
        }
        if (cn->active)
            tx_resume(e, cn);
        else if (cn->state == conn::connecting && !e->msg_type)
            (void)conn_start(e, cn); // resend a lost REQ after a while
    }
}

util::ep_core *rx_target(prov_ep *e, std::uint16_t index)
{
    auto usable = [](util::ep_handle *h) {
        return h && h->core->state.load(std::memory_order_acquire) == util::ep_state::enabled;
    };
    const auto &v = e->core->rx_ctx;
    if (index < v.size() && usable(v[index]))
        return v[index]->core;
    for (util::ep_handle *h : v)
        if (usable(h))
            return h->core;
    return nullptr;
}

} // namespace shunt::prov::vqprov
