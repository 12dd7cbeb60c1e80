// vq provider: the transmit side of messages (eager and rendezvous), the
// inject fast path, transmit entries and control messages.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "env/errors.h"
#include "env/tsc.h"
#include "prov.h"

namespace shunt::prov::vqprov {

namespace {

/** wr_id of a signaled send that only reclaims send-queue slots. */
constexpr std::uint64_t reclaim_id = std::uint64_t(1) << 62;

// Completions of an entry, reported on the endpoint or context that posted
// it; none once that context closed (close discards outstanding operations).
void tx_done_of(tx_entry *t)
{
    if (t->owner) [[likely]]
        util::tx_done(t->owner, t->flags, t->context, t->cq_flags, t->len);
}
void tx_fail_of(tx_entry *t, int err)
{
    if (t->owner) [[likely]]
        util::tx_fail(t->owner, t->context, t->cq_flags, err, t->len);
}

bool completes_at_post(std::uint64_t flags)
{
    // The data is copied during the call (into the peer's ring or the send
    // queue): the buffer is reusable at return, which is all
    // FI_INJECT(_COMPLETE) asks.
    return (flags & (FI_INJECT | FI_INJECT_COMPLETE)) && !(flags & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE));
}

// Gather [off, off+len) of an iov list into data_buf pieces. @return pieces.
std::size_t gather(const iovec *iov, std::size_t count, std::size_t off, std::size_t len, vq::data_buf *out)
{
    std::size_t n = 0;
    for (std::size_t i = 0; i < count && len; i++) {
        if (off >= iov[i].iov_len) {
            off -= iov[i].iov_len;
            continue;
        }
        std::size_t take = std::min(len, iov[i].iov_len - off);
        out[n++] = vq::data_buf{static_cast<const std::uint8_t *>(iov[i].iov_base) + off, take};
        len -= take;
        off = 0;
    }
    return n;
}

/** The fields the header's flags announce, written at @p f. @return bytes. */
std::size_t put_fields(std::uint8_t *f, std::uint8_t flags, std::uint64_t tag, std::uint64_t ack, std::uint32_t data)
{
    std::size_t n = 0;
    if (flags & wf_tagged) {
        std::memcpy(f, &tag, 8);
        n = 8;
    }
    if (flags & wf_ack) {
        std::memcpy(f + n, &ack, 8);
        n += 8;
    }
    if (flags & wf_data) {
        std::memcpy(f + n, &data, 4);
        n += 4;
    }
    return n;
}

/** A stamped op's header at @p f: this TSC, then the fields. @return bytes. */
std::size_t put_stamp_fields(std::uint8_t *f, std::uint8_t flags, std::uint64_t tag, std::uint64_t ack,
                             std::uint32_t data)
{
    const std::uint64_t now = env::tsc::now();
    std::memcpy(f, &now, stamp_len);
    return stamp_len + put_fields(f + stamp_len, flags, tag, ack, data);
}

/** The header of a message at @p f: its fields, behind a stamp when @p Stamp. */
template <bool Stamp>
std::size_t put_head(std::uint8_t *f, std::uint8_t flags, std::uint64_t tag, std::uint64_t ack, std::uint32_t data)
{
    if constexpr (Stamp)
        return put_stamp_fields(f, flags, tag, ack, data);
    else
        return put_fields(f, flags, tag, ack, data);
}
constexpr std::size_t head_max = stamp_len + fields_max;

/** A vq region for buffer @p i of a request: its descriptor's, when it has
 *  the access @p need, else one from the registration cache held by @p t. */
int region_of(prov_ep *e, tx_entry *t, void **desc, std::size_t i, const iovec &v, unsigned need, vq::mr **out)
{
    if (desc && desc[i]) {
        auto *m = static_cast<util::mr_obj *>(desc[i]);
        auto *vm = static_cast<vq::mr *>(m->prov);
        if (vm && (vm->access & need) == need) {
            *out = vm;
            return 0;
        }
    }
    mr_ref &ref = t->mrs[t->nmrs];
    if (int rc = mr_get(e->dom, v.iov_base, v.iov_len, ref))
        return rc;
    t->nmrs++;
    *out = ref.mr;
    return 0;
}

/** Rendezvous: describe the sender's buffers (registered for the peer's
 *  read) and let the receiver pull them; the send completes on its fin. */
template <bool Stamp>
ssize_t send_rndv(prov_ep *e, util::ep_core *core, const util::tx_req &r, conn *c, std::uint8_t fl, std::uint64_t cqf)
{
    tx_entry *t = new_tx(e, core, r, c, cqf);
    if (!t)
        return -FI_EAGAIN;
    t->waits = tx_entry::on_fin;
    rndv_desc d{};
    d.total = r.len;
    for (std::size_t i = 0; i < r.count; i++) {
        if (!r.iov[i].iov_len)
            continue;
        vq::mr *m = nullptr;
        if (int rc = region_of(e, t, r.desc, i, r.iov[i], vq::ACCESS_REMOTE_READ, &m)) {
            tx_put(e, t);
            return rc;
        }
        d.iov[d.niov++] = {reinterpret_cast<std::uint64_t>(r.iov[i].iov_base), r.iov[i].iov_len, m->rkey, 0};
    }
    fl |= wf_ack;
    std::uint8_t f[head_max];
    std::size_t fn = put_head<Stamp>(f, fl, r.tag, tx_id(e, t), std::uint32_t(r.data));
    vq::data_buf b[2] = {{f, fn}, {&d, rndv_desc_len(d.niov)}};
    int rc = post_imm(e, c, imm_wire(Stamp ? w_rts_ts : w_rts, fl, rx_index_of(core, r.dest)), b, 2, false, ~0ULL);
    if (rc) {
        tx_put(e, t);
        return rc;
    }
    return 0;
}

/** Do peers reach every buffer of @p r directly (shunt_mem memory, or a
 *  device with RDMA in hardware)? Then a rendezvous is one memcpy (or DMA). */
bool reachable(prov_ep *e, const util::tx_req &r)
{
    if (!e->dom->lim.host_local)
        return true;
    for (std::size_t i = 0; i < r.count; i++) {
        if (!r.iov[i].iov_len)
            continue;
        auto *m = r.desc ? static_cast<util::mr_obj *>(r.desc[i]) : nullptr;
        if (m && (m->key & key_direct))
            continue;
        if (!mem_is_shared(e->dom, r.iov[i].iov_base, r.iov[i].iov_len))
            return false;
    }
    return true;
}

/** A message larger than one lent receive, through the ring in fragments
 *  of frag_max bytes (the driver copies each from the user's buffers into
 *  the ring, the receiver copies it out into the matched receive: two
 *  copies, made by both cores at once). All fragments are one vq batch, so
 *  they are posted whole or not at all and nothing comes between them on
 *  the QP; the last one, signaled, completes the send. A stamp takes 8
 *  bytes of the first fragment's payload, so it fits what a receive takes. */
template <bool Stamp>
ssize_t send_frags(prov_ep *e, util::ep_core *core, const util::tx_req &r, conn *c, std::uint8_t fl,
                   std::uint64_t cqf)
{
    tx_entry *t = new_tx(e, core, r, c, cqf);
    if (!t) [[unlikely]]
        return -FI_EAGAIN;
    const bool delivery = r.flags & FI_DELIVERY_COMPLETE;
    if (delivery) {
        t->waits = tx_entry::on_fin; // acknowledged once the whole message was taken
        fl |= wf_ack;
    }
    // Local keys of the user's buffers, once for all fragments.
    std::uint32_t lkey[iov_max] = {};
    for (std::size_t i = 0; i < r.count; i++) {
        if (!r.iov[i].iov_len)
            continue;
        vq::mr *m = nullptr;
        if (int rc = region_of(e, t, r.desc, i, r.iov[i], 0, &m)) {
            tx_put(e, t);
            return rc;
        }
        lkey[i] = m->lkey;
    }
    // The first fragment's fields and the message's length, from the
    // entry's registered scratch line.
    auto *hdr = reinterpret_cast<std::uint8_t *>(scratch_of(e, t));
    std::size_t hn = put_head<Stamp>(hdr, fl, r.tag, tx_id(e, t), std::uint32_t(r.data));
    const std::uint64_t total = r.len;
    std::memcpy(hdr + hn, &total, 8);
    hn += 8;
    const std::uint16_t rx = rx_index_of(core, r.dest);
    const std::size_t fmax = e->dom->lim.frag_max;
    vq::qp *q = e->slots[c->slot].qp;
    vq::wr_start(q);
    for (std::size_t off = 0; off < r.len;) {
        const std::size_t n = std::min(Stamp && off == 0 ? fmax - stamp_len : fmax, r.len - off);
        const bool first = off == 0, last = off + n == r.len;
        vq::sge sg[1 + iov_max];
        std::size_t ns = 0;
        if (first)
            sg[ns++] = {reinterpret_cast<std::uint64_t>(hdr), std::uint32_t(hn), e->scratch_mr->lkey};
        // The user's bytes [off, off + n).
        for (std::size_t i = 0, skip = off, left = n; i < r.count && left; i++) {
            if (skip >= r.iov[i].iov_len) {
                skip -= r.iov[i].iov_len;
                continue;
            }
            std::size_t k = std::min(left, r.iov[i].iov_len - skip);
            sg[ns++] = {reinterpret_cast<std::uint64_t>(r.iov[i].iov_base) + skip, std::uint32_t(k), lkey[i]};
            left -= k;
            skip = 0;
        }
        // The last one is signaled: it completes the send (or, under
        // delivery complete, only reclaims send-queue entries).
        q->wr_id = last ? (delivery ? reclaim_id : tx_id(e, t)) : ~0ULL;
        q->wr_flags = last ? vq::WR_SIGNALED : 0;
        vq::wr_send_imm(q, first ? imm_wire(Stamp ? w_frag_first_ts : w_frag_first, fl, rx) : imm_wire(w_frag, 0, rx));
        vq::wr_set_sge_list(q, ns, sg);
        off += n;
    }
    if (int rc = wr_finish(e, q)) {
        tx_put(e, t);
        return rc;
    }
    e->scq_pending++;
    e->slots[c->slot].unsignaled = 0;
    return 0;
}

/** A message through the peer's ring: inline (copied at the call, one copy
 *  into the ring) up to inline_max, from the user's buffers (an SGE list
 *  behind a registered header) up to eager_max, in fragments above; or by
 *  rendezvous from the size where one copy by the receiver beats two
 *  (rndv_shared when the receiver reaches the buffers directly, rndv_private
 *  when it needs cross-memory attach). With @p Stamp (a stamped
 *  connection) each takes its stamped op, 8 bytes longer. */
template <bool Stamp>
ssize_t send_on(prov_ep *e, util::ep_core *core, const util::tx_req &r, conn *c)
{
    const dev_limits &l = e->dom->lim;
    const bool tagged = r.kind == util::tx_req::tsend;
    const std::uint64_t cqf = FI_SEND | (tagged ? FI_TAGGED : FI_MSG);
    std::uint8_t fl = std::uint8_t((tagged ? wf_tagged : 0) | ((r.flags & FI_REMOTE_CQ_DATA) ? wf_data : 0));
    // An inject is copied at the call whatever its size (inject_size
    // bounds it); other sends are copied at the call up to inline_max.
    const std::size_t inl_max = (r.flags & FI_INJECT) ? l.rc_inline : l.inline_max;
    if (r.len > inl_max) [[unlikely]] {
        if (r.len >= (reachable(e, r) ? l.rndv_shared : l.rndv_private))
            return send_rndv<Stamp>(e, core, r, c, fl, cqf);
        // Fragments of one message are one batch: at most half the send
        // queue (beyond, the rendezvous does it in one request).
        if (r.len + (Stamp ? stamp_len : 0) > l.eager_max) {
            if ((r.len + l.frag_max - 1) / l.frag_max > e->sq_depth / 2)
                return send_rndv<Stamp>(e, core, r, c, fl, cqf);
            return send_frags<Stamp>(e, core, r, c, fl, cqf);
        }
    }
    const bool delivery = r.flags & FI_DELIVERY_COMPLETE;
    const bool inl =
        (Stamp ? stamp_len : 0) + fields_len(std::uint8_t(fl | (delivery ? wf_ack : 0))) + r.len <= inl_max;
    const bool at_post = inl && completes_at_post(r.flags);
    tx_entry *t = nullptr;
    if (!at_post) {
        if (!(t = new_tx(e, core, r, c, cqf))) [[unlikely]]
            return -FI_EAGAIN;
        if (delivery) {
            t->waits = tx_entry::on_fin; // acknowledged by the target's provider
            fl |= wf_ack;
        }
    }
    const std::uint32_t imm = imm_wire(Stamp ? w_eager_ts : w_eager, fl, rx_index_of(core, r.dest));
    std::uint8_t f[head_max];
    std::size_t fn = put_head<Stamp>(f, fl, r.tag, t ? tx_id(e, t) : 0, std::uint32_t(r.data));
    const bool signaled = t && !delivery; // delivery complete waits for the ack; errors still come back
    int rc;
    if (inl) {
        vq::data_buf b[1 + iov_max];
        b[0] = {f, fn};
        std::size_t nb = 1 + gather(r.iov, r.count, 0, r.len, b + 1);
        rc = post_imm(e, c, imm, b, nb, signaled, t ? tx_id(e, t) : posted_id(posted_send, origin_of(core)));
    } else {
        // The fields go first from the entry's registered scratch line.
        auto *hdr = reinterpret_cast<std::uint8_t *>(scratch_of(e, t));
        std::memcpy(hdr, f, fn);
        vq::sge sg[1 + iov_max];
        sg[0] = {reinterpret_cast<std::uint64_t>(hdr), std::uint32_t(fn), e->scratch_mr->lkey};
        std::size_t ns = 1;
        for (std::size_t i = 0; i < r.count; i++) {
            if (!r.iov[i].iov_len)
                continue;
            vq::mr *m = nullptr;
            if ((rc = region_of(e, t, r.desc, i, r.iov[i], 0, &m))) {
                tx_put(e, t);
                return rc;
            }
            sg[ns++] = {reinterpret_cast<std::uint64_t>(r.iov[i].iov_base), std::uint32_t(r.iov[i].iov_len), m->lkey};
        }
        vq::qp *q = e->slots[c->slot].qp;
        vq::wr_start(q);
        q->wr_id = tx_id(e, t);
        q->wr_flags = signaled ? vq::WR_SIGNALED : 0;
        vq::wr_send_imm(q, imm);
        vq::wr_set_sge_list(q, ns, sg);
        rc = wr_finish(e, q);
        if (rc == 0 && signaled)
            e->scq_pending++;
    }
    if (rc) {
        if (t)
            tx_put(e, t);
        return rc;
    }
    if (at_post)
        util::tx_done(core, r.flags, r.context, cqf, r.len);
    return 0;
}

ssize_t send_msg(prov_ep *e, util::ep_core *core, const util::tx_req &r)
{
    conn *c = conn_of(e, r);
    if (int rc = conn_ready(e, c, core, r); rc)
        return rc > 0 ? 0 : rc; // queued until the connection is up, sent stamped, or the error
    return send_on<false>(e, core, r, c);
}

} // namespace

int send_stamped(prov_ep *e, util::ep_core *core, const util::tx_req &r, conn *c)
{
    ssize_t rc = send_on<true>(e, core, r, c);
    return rc == 0 ? 1 : int(rc);
}

/* ---- transmit entries ---- */

tx_entry *tx_get(prov_ep *e)
{
    tx_entry *t = e->tx_free;
    if (!t) [[unlikely]]
        return nullptr;
    e->tx_free = t->next;
    std::uint32_t gen = t->gen + 1;
    *t = tx_entry{};
    t->gen = gen;
    return t;
}

void tx_put(prov_ep *e, tx_entry *t)
{
    for (std::uint32_t i = 0; i < t->nmrs; i++)
        mr_put(e->dom, t->mrs[i]);
    t->nmrs = 0;
    t->c = nullptr;
    t->owner = nullptr;
    t->gen++; // a late fin or completion for it no longer matches
    t->next = e->tx_free;
    e->tx_free = t;
}

// Ids: generation (30 bits) << 32 | index; bits 62 and 63 mark the send
// queue's reclaim requests and receive-side operations.
std::uint64_t tx_id(prov_ep *e, tx_entry *t)
{
    return (std::uint64_t(t->gen & 0x3fffffffu) << 32) | std::uint64_t(t - e->tx.data());
}

tx_entry *tx_from_id(prov_ep *e, std::uint64_t id)
{
    std::uint64_t idx = id & 0xffffffffu;
    if ((id >> 62) || idx >= e->tx.size())
        return nullptr;
    tx_entry *t = &e->tx[idx];
    return t->c && (t->gen & 0x3fffffffu) == std::uint32_t(id >> 32) ? t : nullptr;
}

conn *conn_of(prov_ep *e, const util::tx_req &r)
{
    if (e->msg_type)
        return e->msg_conn;
    return conn_for(e, r.peer);
}

namespace {

/** A post on slot @p s's QP with the endpoint's signalling: @p post(qp,
 *  wr_id, flags) makes it. Now and then an unsignaled stream is signaled
 *  (a device reclaims send-queue entries when their completions are
 *  polled). Inlined into the inject fast path. */
template <class Post>
[[gnu::always_inline]] inline int post_on(prov_ep *e, int s, bool signaled, std::uint64_t wr_id, Post &&post)
{
    rc_slot &sl = e->slots[std::size_t(s)];
    unsigned fl = 0;
    if (signaled) {
        fl = vq::WR_SIGNALED;
    } else if (++sl.unsignaled >= e->signal_every) [[unlikely]] {
        fl = vq::WR_SIGNALED;
        wr_id = is_posted_id(wr_id) ? wr_id | posted_signaled : reclaim_id;
    }
    int rc = post(sl.qp, wr_id, fl);
    if (rc == 0) [[likely]] {
        if (fl) {
            e->scq_pending++;
            sl.unsignaled = 0;
        }
    } else if (rc == -FI_EAGAIN) {
        e->tx_unpolled = true;
    }
    return rc;
}

/** post_imm's body, inlined into the inject fast path. */
[[gnu::always_inline]] inline int post_imm_inl(prov_ep *e, int s, std::uint32_t imm, const vq::data_buf *bufs,
                                               std::size_t n, bool signaled, std::uint64_t wr_id)
{
    return post_on(e, s, signaled, wr_id, [&](vq::qp *q, std::uint64_t id, unsigned fl) {
        return vq::post_send_imm_inline(q, id, imm, bufs, n, fl);
    });
}

} // namespace

int post_imm(prov_ep *e, conn *c, std::uint32_t imm, const vq::data_buf *bufs, std::size_t n, bool signaled,
             std::uint64_t wr_id)
{
    return post_imm_inl(e, c->slot, imm, bufs, n, signaled, wr_id);
}

int post_imm_on(prov_ep *e, int s, std::uint32_t imm, const vq::data_buf *bufs, std::size_t n, bool signaled,
                std::uint64_t wr_id)
{
    return post_imm_inl(e, s, imm, bufs, n, signaled, wr_id);
}

/** Statistics of a transmit call that returned @p rc. */
inline ssize_t counted(prov_ep *e, const util::tx_req &r, ssize_t rc) noexcept
{
    if (rc == 0) [[likely]] {
        env::stats::on_tx(e->io, r.len);
        env::stats::on_depth(e->io, e->scq_pending);
    } else if (rc != -FI_EAGAIN)
        env::stats::on_error(e->io);
    return rc;
}

ssize_t tx_dispatch(prov_ep *e, util::ep_core *core, const util::tx_req &r)
{
    switch (r.kind) {
    case util::tx_req::send:
    case util::tx_req::tsend:
        return send_msg(e, core, r);
    case util::tx_req::read:
    case util::tx_req::write:
        return rma(e, core, r);
    default:
        return atomic_op(e, core, r);
    }
}

ssize_t transmit(util::ep_core *core, const util::tx_req &r)
{
    prov_ep *e = ep_of(core);
    util::guard g(e->lock);
    // Counted once, when the application's call is accepted (one queued for
    // a connection being set up is dispatched again later).
    return counted(e, r, tx_dispatch(e, core, r));
}

void tx_abort(prov_ep *e, tx_entry *t, int err)
{
    env::stats::on_error(e->io);
    tx_fail_of(t, err);
    tx_put(e, t);
}

util::ep_core *origin_core(prov_ep *e, std::uint64_t origin)
{
    const auto &v = e->core->tx_ctx;
    if (origin == 0 || origin > v.size() || !v[origin - 1])
        return e->core;
    return v[origin - 1]->core;
}

void tx_complete(prov_ep *e, const vq::wc &w)
{
    // Signaled requests only (an unsignaled one completes only in error).
    const bool posted = is_posted_id(w.wr_id);
    if (w.wr_id != ~0ULL && (!posted || (w.wr_id & posted_signaled)) && e->scq_pending)
        e->scq_pending--;
    env::stats::on_depth(e->io, e->scq_pending);
    if (w.status != vq::wc_status::success) [[unlikely]] {
        // The QP is in error now (verbs semantics): drop it; RDM reconnects.
        for (conn *c : e->all)
            if (c->slot >= 0 && e->slots[c->slot].qp && e->slots[c->slot].qp->qp_num == w.qp_num)
                conn_broken(e, c);
    }
    if (posted) {
        if (w.status != vq::wc_status::success) [[unlikely]] {
            // Reported complete when posted; the connection broke first.
            static constexpr std::uint64_t cqf[] = {FI_SEND | FI_MSG, FI_RMA | FI_WRITE, FI_ATOMIC | FI_WRITE};
            util::tx_fail_after_done(origin_core(e, posted_origin(w.wr_id)), cqf[(w.wr_id & 3) % 3],
                                     wc_to_err(w.status));
        }
        return;
    }
    if (w.wr_id == ~0ULL || w.wr_id == reclaim_id)
        return;
    if (is_drain_id(w.wr_id)) [[unlikely]] {
        slot_drained(e, w.wr_id, w.qp_num);
        return;
    }
    if (w.wr_id >> 63) {
        if (rx_op *o = rx_op_from_id(e, w.wr_id))
            rx_op_done(e, o, w.status);
        return;
    }
    tx_entry *t = tx_from_id(e, w.wr_id);
    if (!t)
        return;
    if (w.status != vq::wc_status::success) {
        tx_abort(e, t, wc_to_err(w.status));
        return;
    }
    if (t->waits != tx_entry::on_wc)
        return; // completes on the peer's fin or response
    if (t->result)
        std::memcpy(t->result, scratch_of(e, t), 8);
    env::stats::on_complete(e->io, t->posted);
    tx_done_of(t);
    tx_put(e, t);
}

void tx_fin(prov_ep *e, std::uint64_t id, int err)
{
    tx_entry *t = tx_from_id(e, id);
    if (!t || t->waits == tx_entry::on_wc)
        return;
    if (err) {
        env::stats::on_error(e->io);
        tx_fail_of(t, err);
    } else {
        env::stats::on_complete(e->io, t->posted);
        tx_done_of(t);
    }
    tx_put(e, t);
}

namespace {

void ctl_post(prov_ep *e, conn *c, bool answer, std::uint32_t imm, const void *bytes, std::size_t len)
{
    const int s = c ? (answer ? answer_slot(e, c) : ctl_slot(e, c)) : -1;
    if (s < 0)
        return; // the connection is gone: the peer learns it from its own QP
    if (c->ctl.empty()) [[likely]] {
        vq::data_buf b{bytes, len};
        int rc = post_imm_on(e, s, imm, &b, 1, false, ~0ULL);
        if (rc != -FI_EAGAIN)
            return; // posted, or the QP failed (reported by its completions)
    }
    ctl_msg m;
    if (len > sizeof m.bytes) [[unlikely]] {
        SHUNT_LOG(prov_log, error, "vq: a control message of %zu bytes does not fit the queue; not sent", len);
        return;
    }
    // One answer per operation a peer has outstanding (max_ctx contexts of at
    // most sq_depth each) and one fin per message it sent: more waiting means
    // a peer that asks without taking what it gets; its answers are dropped.
    if (c->ctl.size() >= 2 * max_ctx * e->dom->lim.sq_depth) [[unlikely]] {
        e->cm.ctl_dropped.add();
        if (c->ctl_dropped++ == 0)
            SHUNT_LOG(prov_log, error, "vq: %s takes none of its answers; dropping them",
                      addr_key(c->peer).c_str());
        return;
    }
    m.imm = imm;
    m.len = std::uint16_t(len);
    m.answer = answer;
    std::memcpy(m.bytes, bytes, len);
    try {
        c->ctl.push_back(m);
    } catch (...) {
        SHUNT_LOG(prov_log, error, "vq: out of memory queueing a control message; the peer's operation will fail");
        return;
    }
    e->cm.ctl_waiting.set(e->cm.ctl_waiting.get() + 1);
    conn_pend(e, c);
}

} // namespace

void ctl_send(prov_ep *e, conn *c, std::uint32_t imm, const void *bytes, std::size_t len)
{
    ctl_post(e, c, true, imm, bytes, len);
}

void ctl_send_own(prov_ep *e, conn *c, std::uint32_t imm, const void *bytes, std::size_t len)
{
    ctl_post(e, c, false, imm, bytes, len);
}

bool ctl_flush(prov_ep *e, conn *c)
{
    std::size_t i = 0;
    for (; i < c->ctl.size(); i++) {
        const int s = c->ctl[i].answer ? answer_slot(e, c) : ctl_slot(e, c);
        if (s < 0) {
            i = c->ctl.size(); // gone: nothing more can be said on it
            break;
        }
        vq::data_buf b{c->ctl[i].bytes, c->ctl[i].len};
        int rc = post_imm_on(e, s, c->ctl[i].imm, &b, 1, false, ~0ULL);
        if (rc == -FI_EAGAIN)
            break;
    }
    ctl_forget(e, c, i);
    return c->ctl.empty();
}

void ctl_forget(prov_ep *e, conn *c, std::size_t n)
{
    n = std::min(n, c->ctl.size());
    c->ctl.erase(c->ctl.begin(), c->ctl.begin() + long(n));
    e->cm.ctl_waiting.set(e->cm.ctl_waiting.get() - n);
}

void conn_pend(prov_ep *e, conn *c)
{
    if (c->pending)
        return;
    try {
        e->pending.push_back(c);
        c->pending = true;
    } catch (...) {
        SHUNT_LOG(prov_log, error, "vq: out of memory for the pending list");
    }
}

// ---- the inject fast path ----

namespace {

/** What a lock-free endpoint's fast_inject takes: nothing. */
struct no_guard {
    explicit no_guard(util::maybe_lock &) noexcept {}
};
/** The endpoint's lock around fast_inject's use of its state: taken when
 *  the domain is multi-threaded (@p Locked: FI_THREAD_SAFE or automatic
 *  progress, whose thread runs progress beside the caller's), nothing
 *  otherwise. */
template <bool Locked>
using inject_guard = std::conditional_t<Locked, util::guard<util::maybe_lock>, no_guard>;

// An inject to a connected peer: no allocation, fence or system call, and
// no lock unless the domain is multi-threaded (@p Locked; then the
// endpoint's, as the generic path takes it). The header word travels as
// the send's immediate; the payload (vq's post_send_imm_inline), or a tag
// and the payload (post_send_imm_hdr_inline, the tag as its word), go
// straight into the peer's ring slot — one line for a payload up to the
// device's max_inline_slot (minus the tag), consecutive slots beyond, up to
// inject_size. Everything else takes the generic path.
// The tables are chosen by the domain's threading when the endpoint is made
// (open_ep), as the endpoint's lock is enabled; a scalable endpoint's
// transmit contexts get the ones (@p Ctx) that name the context in the
// wr_id, for a late failure to be reported there (origin_of).
template <bool Tagged, bool Locked, bool Ctx = false>
[[gnu::always_inline]] inline ssize_t fast_inject(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest,
                                                  std::uint64_t tag)
{
    util::ep_handle *h = util::to_handle(ep);
    util::ep_core *c = h->core;
    prov_ep *e = ep_of(c);
    constexpr std::uint64_t caps = FI_SEND | (Tagged ? FI_TAGGED : FI_MSG);
    if (len <= c->inject_max[Tagged ? 1 : 0] && util::ep_ready(c) && c->av && (c->caps & caps) == caps &&
        (buf || !len)) [[likely]] {
        // The AV entry is read without it (av_get); the connections, their
        // QPs and the statistics under it.
        inject_guard<Locked> g(e->lock);
        util::av_entry *pe = util::av_get(c->av, dest);
        if (pe && pe->index < e->by_index.size()) [[likely]] {
            conn *cn = e->by_index[pe->index];
            if (cn && cn->state == conn::connected) [[likely]] {
                const std::uint32_t imm = imm_wire(w_eager, Tagged ? wf_tagged : 0, rx_index_of(c, dest));
                const std::uint64_t id = posted_id(posted_send, Ctx ? origin_of(c) : 0);
                int rc;
                if constexpr (Tagged) {
                    rc = post_on(e, cn->slot, false, id,
                                 [&](vq::qp *q, std::uint64_t id, unsigned fl) {
                        // len <= inject_size: it fits 32 bits
                        return vq::post_send_imm_hdr_inline(q, id, imm, tag, buf, std::uint32_t(len), fl);
                    });
                } else {
                    const vq::data_buf b{buf, len};
                    rc = post_imm_inl(e, cn->slot, imm, &b, 1, false, id);
                }
                if (rc == 0) [[likely]] {
                    c->inc_send(c->c_send);
                    env::stats::on_tx(e->io, len);
                }
                return rc;
            }
        }
    }
    if constexpr (Tagged)
        return util::ep_tagged_ops.inject(ep, buf, len, dest, tag);
    else
        return util::ep_msg_ops.inject(ep, buf, len, dest);
}

template <bool Locked, bool Ctx>
ssize_t fast_inject_msg(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest)
{
    return fast_inject<false, Locked, Ctx>(ep, buf, len, dest, 0);
}

template <bool Locked, bool Ctx>
ssize_t fast_inject_tagged(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest, std::uint64_t tag)
{
    return fast_inject<true, Locked, Ctx>(ep, buf, len, dest, tag);
}

template <bool Locked, bool Ctx = false>
ops_msg msg_table()
{
    ops_msg o = util::ep_msg_ops;
    o.inject = fast_inject_msg<Locked, Ctx>;
    return o;
}

template <bool Locked, bool Ctx = false>
ops_tagged tagged_table()
{
    ops_tagged o = util::ep_tagged_ops;
    o.inject = fast_inject_tagged<Locked, Ctx>;
    return o;
}

} // namespace

const ops_msg msg_ops[2] = {msg_table<false>(), msg_table<true>()};
const ops_tagged tagged_ops[2] = {tagged_table<false>(), tagged_table<true>()};
const ops_msg ctx_msg_ops[2] = {msg_table<false, true>(), msg_table<true, true>()};
const ops_tagged ctx_tagged_ops[2] = {tagged_table<false, true>(), tagged_table<true, true>()};

} // namespace shunt::prov::vqprov
