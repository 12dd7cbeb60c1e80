// vq provider: the transmit side (messages, fragments, RMA, atomics) and
// the inject fast path.
#include <cstring>

#include "env/errors.h"
#include "prov.h"

namespace shunt::prov::vqprov {

namespace {

// Completions of an entry, reported on the endpoint or context that posted
// it; none once that context closed (close discards outstanding operations).
void tx_done_of(tx_entry *t, std::uint64_t flags, void *ctx, std::uint64_t cq_flags, std::size_t len)
{
    if (t->owner) [[likely]]
        util::tx_done(t->owner, flags, ctx, cq_flags, len);
}
void tx_fail_of(tx_entry *t, void *ctx, std::uint64_t cq_flags, int err, std::size_t len)
{
    if (t->owner) [[likely]]
        util::tx_fail(t->owner, ctx, cq_flags, err, len);
}

tx_entry *tx_get(prov_ep *e)
{
    tx_entry *t = e->tx_free;
    if (!t) [[unlikely]]
        return nullptr;
    e->tx_free = t->next;
    std::uint32_t gen = t->gen + 1;
    std::uint64_t so = t->scratch_off;
    *t = tx_entry{};
    t->gen = gen;
    t->scratch_off = so;
    return t;
}

void tx_put(prov_ep *e, tx_entry *t)
{
    if (t->tmp_mr)
        (void)vq::dereg_mr(t->tmp_mr);
    t->tmp_mr = nullptr;
    t->next = e->tx_free;
    e->tx_free = t;
}

std::uint64_t tx_id(prov_ep *e, tx_entry *t)
{
    return (std::uint64_t(t->gen) << 32) | std::uint64_t(t - e->tx.data());
}

tx_entry *tx_from_id(prov_ep *e, std::uint64_t id)
{
    std::uint64_t idx = id & 0xffffffffu;
    if (idx >= e->tx.size())
        return nullptr;
    tx_entry *t = &e->tx[idx];
    return t->gen == std::uint32_t(id >> 32) ? t : nullptr;
}

// Header of the first (or only) piece of a message. @return its size.
std::size_t build_hdr(std::uint8_t *h, bool tagged, std::uint8_t flags, std::uint32_t total, std::uint64_t tag,
                      std::uint64_t data, std::uint64_t ack, std::uint16_t rx_index)
{
    wire_hdr w{tagged ? w_tagged : w_msg, flags, rx_index, total};
    std::memcpy(h, &w, sizeof w);
    std::size_t n = sizeof w;
    if (tagged) {
        std::memcpy(h + n, &tag, 8);
        n += 8;
    }
    if (flags & wf_data) {
        std::memcpy(h + n, &data, 8);
        n += 8;
    }
    if (flags & wf_ack) {
        std::memcpy(h + n, &ack, 8);
        n += 8;
    }
    return n;
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

bool completes_at_post(std::uint64_t flags)
{
    // The data is copied into the peer's ring during the call: the buffer is
    // reusable at return, which is all FI_INJECT(_COMPLETE) asks.
    return (flags & (FI_INJECT | FI_INJECT_COMPLETE)) && !(flags & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE));
}

conn *conn_of(prov_ep *e, const util::tx_req &r)
{
    if (e->msg_type)
        return e->msg_conn;
    return conn_for(e, r.peer);
}

// A connection ready for a new operation, or the code to return.
int ready(prov_ep *e, conn *c)
{
    if (!c)
        return e->msg_type ? -FI_ENOTCONN : -FI_ENOMEM;
    if (c->state != conn::connected) [[unlikely]] {
        if (e->msg_type)
            return c->shut || c->state == conn::failed ? -FI_ENOTCONN : -FI_EAGAIN;
        return conn_start(e, c);
    }
    if (c->active) [[unlikely]] {
        tx_resume(e, c);
        if (c->active)
            return -FI_EAGAIN;
    }
    return 0;
}

ssize_t send_msg(prov_ep *e, util::ep_core *core, const util::tx_req &r)
{
    conn *c = conn_of(e, r);
    if (int rc = ready(e, c); rc)
        return rc;
    bool tagged = r.kind == util::tx_req::tsend;
    std::uint64_t cqf = FI_SEND | (tagged ? FI_TAGGED : FI_MSG);
    bool at_post = completes_at_post(r.flags);
    bool delivery = r.flags & FI_DELIVERY_COMPLETE;
    std::uint8_t fl = (r.flags & FI_REMOTE_CQ_DATA) ? wf_data : 0;
    std::uint64_t data = r.data & 0xffffffffu; // cq_data_size is 4
    if (r.len > e->dom->lim.frag_max) {
        tx_entry *t = tx_get(e);
        if (!t)
            return -FI_EAGAIN;
        t->context = r.context;
        t->owner = core;
        t->flags = r.flags;
        t->cq_flags = cqf;
        t->len = r.len;
        t->c = c;
        t->iov_count = r.count;
        for (std::size_t i = 0; i < r.count; i++)
            t->iov[i] = r.iov[i];
        t->hdr = wire_hdr{tagged ? w_tagged : w_msg, fl, rx_index_of(core, r.dest), std::uint32_t(r.len)};
        t->tag = r.tag;
        t->data = data;
        t->want_ack = delivery;
        c->active = t;
        tx_resume(e, c);
        return 0;
    }
    tx_entry *t = nullptr;
    if (!at_post) {
        t = tx_get(e);
        if (!t) [[unlikely]]
            return -FI_EAGAIN;
        t->context = r.context;
        t->owner = core;
        t->flags = r.flags;
        t->cq_flags = cqf;
        t->len = r.len;
        t->c = c;
        t->want_ack = delivery;
    }
    std::uint8_t h[hdr_max];
    std::size_t hl = build_hdr(h, tagged, std::uint8_t(fl | (delivery ? wf_ack : 0)), std::uint32_t(r.len), r.tag,
                               data, t ? tx_id(e, t) : 0, rx_index_of(core, r.dest));
    vq::data_buf bufs[1 + 4];
    bufs[0] = vq::data_buf{h, hl};
    std::size_t nb = 1 + gather(r.iov, r.count, 0, r.len, bufs + 1);
    vq::qp *q = e->slots[c->slot].qp;
    vq::wr_start(q);
    q->wr_id = t ? tx_id(e, t) : ~0ULL;
    // Delivery complete waits for the peer's ack; errors still come back.
    q->wr_flags = t && !delivery ? vq::WR_SIGNALED : 0;
    vq::wr_send(q);
    vq::wr_set_inline_data_list(q, nb, bufs);
    int rc = vq::wr_complete(q);
    if (rc) {
        if (t)
            tx_put(e, t);
        return rc;
    }
    if (at_post)
        util::tx_done(core, r.flags, r.context, cqf, r.len);
    return 0;
}

int lkey_of(void *desc, std::uint32_t &lkey)
{
    if (!desc)
        return -1;
    auto *m = static_cast<util::mr_obj *>(desc);
    if (!m->prov)
        return -1;
    lkey = static_cast<vq::mr *>(m->prov)->lkey;
    return 0;
}

ssize_t rma(prov_ep *e, util::ep_core *core, const util::tx_req &r)
{
    conn *c = conn_of(e, r);
    if (int rc = ready(e, c); rc)
        return rc;
    bool write = r.kind == util::tx_req::write;
    std::uint64_t cqf = FI_RMA | (write ? FI_WRITE : FI_READ);
    tx_entry *t = tx_get(e);
    if (!t)
        return -FI_EAGAIN;
    t->context = r.context;
    t->owner = core;
    t->flags = r.flags;
    t->cq_flags = cqf;
    t->len = r.len;
    t->c = c;
    if (r.rma[0].key >> 32) {
        // A local-only region's key: no peer can accept it.
        util::tx_fail(core, r.context, cqf, FI_EKEYREJECTED, r.len);
        tx_put(e, t);
        return 0;
    }
    bool inl = write && r.len <= e->dom->lim.inline_max;
    vq::sge sg[4];
    if (!inl) {
        for (std::size_t i = 0; i < r.count; i++) {
            std::uint32_t lk = 0;
            if (lkey_of(r.desc ? r.desc[i] : nullptr, lk) != 0) {
                if (r.count != 1) {
                    tx_put(e, t);
                    return -FI_EINVAL; // several buffers without descriptors
                }
                int rc = vq::reg_mr(e->dom->pd, r.iov[0].iov_base, r.iov[0].iov_len, vq::ACCESS_LOCAL_WRITE,
                                    &t->tmp_mr);
                if (rc) {
                    tx_put(e, t);
                    return rc;
                }
                lk = t->tmp_mr->lkey;
            }
            sg[i] = vq::sge{reinterpret_cast<std::uint64_t>(r.iov[i].iov_base), std::uint32_t(r.iov[i].iov_len), lk};
        }
    }
    bool at_post = inl && completes_at_post(r.flags);
    vq::qp *q = e->slots[c->slot].qp;
    vq::wr_start(q);
    q->wr_id = at_post ? ~0ULL : tx_id(e, t);
    q->wr_flags = at_post ? 0 : vq::WR_SIGNALED;
    std::uint32_t rkey = std::uint32_t(r.rma[0].key);
    if (!write)
        vq::wr_rdma_read(q, rkey, r.rma[0].addr);
    else if (r.flags & FI_REMOTE_CQ_DATA)
        vq::wr_rdma_write_imm(q, rkey, r.rma[0].addr, std::uint32_t(r.data));
    else
        vq::wr_rdma_write(q, rkey, r.rma[0].addr);
    if (inl) {
        vq::data_buf bufs[4];
        std::size_t nb = gather(r.iov, r.count, 0, r.len, bufs);
        vq::wr_set_inline_data_list(q, nb, bufs);
    } else if (r.len) {
        vq::wr_set_sge_list(q, r.count, sg);
    }
    int rc = vq::wr_complete(q);
    if (rc) {
        tx_put(e, t);
        return rc;
    }
    if (at_post) {
        util::tx_done(core, r.flags, r.context, cqf, r.len);
        tx_put(e, t);
    }
    return 0;
}

ssize_t atomic_op(prov_ep *e, util::ep_core *core, const util::tx_req &r)
{
    conn *c = conn_of(e, r);
    if (int rc = ready(e, c); rc)
        return rc;
    bool fetch = r.kind != util::tx_req::atomic;
    std::uint64_t cqf = FI_ATOMIC | (fetch ? FI_READ : FI_WRITE);
    tx_entry *t = tx_get(e);
    if (!t)
        return -FI_EAGAIN;
    t->context = r.context;
    t->owner = core;
    t->flags = r.flags;
    t->cq_flags = cqf;
    t->len = 8;
    t->c = c;
    t->result = fetch && r.result_count ? r.result[0].iov_base : nullptr;
    std::uint64_t operand = 0, compare = 0;
    if (r.aop != FI_ATOMIC_READ)
        std::memcpy(&operand, r.iov[0].iov_base, 8);
    if (r.kind == util::tx_req::compare_atomic)
        std::memcpy(&compare, r.compare[0].iov_base, 8);
    std::uint64_t *scratch = &e->scratch[t - e->tx.data()];
    vq::qp *q = e->slots[c->slot].qp;
    vq::wr_start(q);
    q->wr_id = tx_id(e, t);
    q->wr_flags = vq::WR_SIGNALED;
    std::uint32_t rkey = std::uint32_t(r.rma[0].key);
    if (r.aop == FI_CSWAP)
        vq::wr_atomic_cmp_swp(q, rkey, r.rma[0].addr, compare, operand);
    else
        vq::wr_atomic_fetch_add(q, rkey, r.rma[0].addr, r.aop == FI_ATOMIC_READ ? 0 : operand);
    vq::wr_set_sge(q, e->scratch_mr->lkey, reinterpret_cast<std::uint64_t>(scratch), 8);
    int rc = vq::wr_complete(q);
    if (rc) {
        tx_put(e, t);
        return rc;
    }
    return 0;
}

} // namespace

ssize_t transmit(util::ep_core *core, const util::tx_req &r)
{
    prov_ep *e = ep_of(core);
    util::guard g(e->lock);
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

void tx_resume(prov_ep *e, conn *c)
{
    tx_entry *t = c->active;
    if (!t)
        return;
    if (c->state == conn::failed) {
        tx_fail_of(t, t->context, t->cq_flags, FI_EHOSTUNREACH, t->len);
        c->active = nullptr;
        tx_put(e, t);
        return;
    }
    vq::qp *q = e->slots[c->slot].qp;
    bool at_post = completes_at_post(t->flags);
    while (t->off < t->len) {
        std::size_t chunk = std::min<std::size_t>(e->dom->lim.frag_max, t->len - t->off);
        bool last = t->off + chunk == t->len;
        std::uint8_t h[hdr_max];
        std::size_t hl;
        if (t->off == 0) {
            hl = build_hdr(h, t->hdr.op == w_tagged, std::uint8_t(t->hdr.flags | wf_more | (t->want_ack ? wf_ack : 0)),
                           t->hdr.total, t->tag, t->data, tx_id(e, t), t->hdr.pad);
        } else {
            wire_hdr w{w_frag, std::uint8_t(last ? 0 : wf_more), 0, std::uint32_t(t->off)};
            std::memcpy(h, &w, sizeof w);
            hl = sizeof w;
        }
        vq::data_buf bufs[1 + 4];
        bufs[0] = vq::data_buf{h, hl};
        std::size_t nb = 1 + gather(t->iov, t->iov_count, t->off, chunk, bufs + 1);
        vq::wr_start(q);
        bool signal = last && !at_post && !t->want_ack;
        q->wr_id = last && !at_post ? tx_id(e, t) : ~0ULL;
        q->wr_flags = signal ? vq::WR_SIGNALED : 0;
        vq::wr_send(q);
        vq::wr_set_inline_data_list(q, nb, bufs);
        int rc = vq::wr_complete(q);
        if (rc == -FI_EAGAIN)
            return; // resumed by progress
        if (rc) {
            tx_fail_of(t, t->context, t->cq_flags, -rc, t->len);
            c->active = nullptr;
            tx_put(e, t);
            return;
        }
        t->off += chunk;
    }
    c->active = nullptr;
    if (at_post) {
        tx_done_of(t, t->flags, t->context, t->cq_flags, t->len);
        tx_put(e, t);
    }
}

void tx_abort(prov_ep *e, tx_entry *t, int err)
{
    tx_fail_of(t, t->context, t->cq_flags, err, t->len);
    tx_put(e, t);
}

void tx_complete(prov_ep *e, const vq::wc &w)
{
    if (w.status != vq::wc_status::success) {
        // The QP is in error now (verbs semantics): drop it; RDM reconnects.
        for (conn *c : e->all)
            if (c->slot >= 0 && e->slots[c->slot].qp && e->slots[c->slot].qp->qp_num == w.qp_num)
                conn_broken(e, c);
    }
    if (w.wr_id == ~0ULL)
        return;
    tx_entry *t = tx_from_id(e, w.wr_id);
    if (!t)
        return;
    if (w.status != vq::wc_status::success) {
        tx_fail_of(t, t->context, t->cq_flags, wc_to_err(w.status), t->len);
        tx_put(e, t);
        return;
    }
    if (t->want_ack)
        return; // completes on the peer's ack
    if (t->result)
        std::memcpy(t->result, &e->scratch[t - e->tx.data()], 8);
    tx_done_of(t, t->flags, t->context, t->cq_flags, t->len);
    tx_put(e, t);
}

void tx_acked(prov_ep *e, std::uint64_t id)
{
    tx_entry *t = tx_from_id(e, id);
    if (!t || !t->want_ack)
        return;
    tx_done_of(t, t->flags, t->context, t->cq_flags, t->len);
    tx_put(e, t);
}

// ---- the inject fast path ----

namespace {

// An inject of up to 64 bytes to a connected peer at FI_THREAD_DOMAIN: no
// allocation, no lock, no system call; vq's single-call inline post writes
// header and payload straight into the peer's ring slot. Everything else
// takes the generic path.
template <bool Tagged>
[[gnu::always_inline]] inline ssize_t fast_inject(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest,
                                                  std::uint64_t tag)
{
    util::ep_handle *h = util::to_handle(ep);
    util::ep_core *c = h->core;
    prov_ep *e = ep_of(c);
    if (len <= 64 && util::ep_ready(c) && !e->lock.enabled() && c->av && len <= c->inject_max[Tagged ? 1 : 0] &&
        (c->caps & (FI_SEND | (Tagged ? FI_TAGGED : FI_MSG))) == (FI_SEND | (Tagged ? FI_TAGGED : FI_MSG)))
        [[likely]] {
        util::av_entry *pe = util::av_get(c->av, dest);
        if (pe && pe->index < e->by_index.size()) [[likely]] {
            conn *cn = e->by_index[pe->index];
            if (cn && cn->state == conn::connected && !cn->active) [[likely]] {
                alignas(8) std::uint8_t m[8 + 8 + 64];
                wire_hdr w{Tagged ? w_tagged : w_msg, 0, rx_index_of(c, dest), std::uint32_t(len)};
                std::memcpy(m, &w, 8);
                std::size_t hl = 8;
                if constexpr (Tagged) {
                    std::memcpy(m + 8, &tag, 8);
                    hl = 16;
                }
                if (len)
                    std::memcpy(m + hl, buf, len);
                int rc = vq::post_send(e->slots[cn->slot].qp, ~0ULL, m, std::uint32_t(hl + len), 0, vq::WR_INLINE);
                if (rc == 0) [[likely]]
                    c->inc_send(c->c_send);
                return rc;
            }
        }
    }
    if constexpr (Tagged)
        return util::ep_tagged_ops.inject(ep, buf, len, dest, tag);
    else
        return util::ep_msg_ops.inject(ep, buf, len, dest);
}

ssize_t fast_inject_msg(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest)
{
    return fast_inject<false>(ep, buf, len, dest, 0);
}

ssize_t fast_inject_tagged(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest, std::uint64_t tag)
{
    return fast_inject<true>(ep, buf, len, dest, tag);
}

} // namespace

const ops_msg msg_ops = [] {
    ops_msg o = util::ep_msg_ops;
    o.inject = fast_inject_msg;
    return o;
}();

const ops_tagged tagged_ops = [] {
    ops_tagged o = util::ep_tagged_ops;
    o.inject = fast_inject_tagged;
    return o;
}();

} // namespace shunt::prov::vqprov
