// vq provider: endpoint creation, enable (auto progress), close.
#include <algorithm>
#include <cstring>
#include <new>

#include "env/errors.h"
#include "env/lcore.h"
#include "env/log.h"
#include "addr.h"
#include "prov.h"

namespace shunt::prov::vqprov {

ssize_t dgram_transmit(util::ep_core *c, const util::tx_req &r); // dgram.cpp
int dgram_ops_open(util::ep_core *c, const char *name, void **ops);

namespace {

const env::stats::field one_way_fields[] = {
    SHUNT_STATS_FIELD(one_way_stats, one_way, histogram, cycles,
                      "messages received on stamped connections: arrival less the sender's TSC stamp"),
    SHUNT_STATS_FIELD(one_way_stats, connections, counter, none, "connections set up stamped (both ends, one clock)"),
};
const env::stats::schema one_way_schema{"vq.one_way", one_way_fields, 2};

const env::stats::field cm_fields[] = {
    SHUNT_STATS_FIELD(cm_stats, peers, gauge, none, "connection records: peers the endpoint knows"),
    SHUNT_STATS_FIELD(cm_stats, refused, counter, none, "connection requests it could not accept"),
    SHUNT_STATS_FIELD(cm_stats, qps, gauge, none, "RC QPs it holds: connected, being connected, or failed and draining"),
    SHUNT_STATS_FIELD(cm_stats, qps_created, counter, none, "RC QPs it created"),
    SHUNT_STATS_FIELD(cm_stats, half_open, gauge, none,
                      "connections it accepted that the requester has not finished (its first message)"),
    SHUNT_STATS_FIELD(cm_stats, expired, counter, none,
                      "accepted connections given up unfinished after SHUNT_VQ_CONNECT_TIMEOUT_MS, their QPs freed"),
    SHUNT_STATS_FIELD(cm_stats, ctl_waiting, gauge, none,
                      "control messages (answers, fins) waiting for send-queue room, all peers"),
    SHUNT_STATS_FIELD(cm_stats, ctl_dropped, counter, none,
                      "control messages dropped because one peer's queue of them was at its bound"),
    SHUNT_STATS_FIELD(cm_stats, moves_waiting, gauge, none,
                      "pulls and pushes of data (rendezvous, RMA to private memory) waiting for send-queue room, "
                      "all peers"),
    SHUNT_STATS_FIELD(cm_stats, moves_refused, counter, none,
                      "pulls and pushes refused because one peer's queue of them was at its bound"),
};
const env::stats::schema cm_schema{"vq.cm", cm_fields, 10};

int poller(void *arg) noexcept
{
    progress(static_cast<util::ep_core *>(arg));
    return 0;
}

bool is_ctx(const util::ep_core *c) { return c->fclass == FI_CLASS_TX_CTX || c->fclass == FI_CLASS_RX_CTX; }

int enable_hook(util::ep_core *c)
{
    if (is_ctx(c))
        return 0; // a context of a scalable endpoint: the endpoint's transport (and poller) serve it
    prov_ep *e = ep_of(c);
    // Before the poller: no lock is needed yet. The first chunk of receive-side
    // operations, so that the first rendezvous or RMA neither allocates nor
    // faults its pages in; without memory now they are made when needed.
    if (!e->dgram && e->rx_chunks.empty())
        (void)rx_op_grow(e);
    if (!e->msg_type && !e->dgram) {
        slot_prepare(e);
        if (c->fclass == FI_CLASS_EP)
            eager_join(e); // before the poller: fi_av_insert takes the lock from here on
    }
    if (e->dom->data_progress == FI_PROGRESS_AUTO && !e->progress_handle) {
        int h = env::progress::add(poller, c);
        if (h < 0)
            return h;
        e->progress_handle = h;
    }
    return 0;
}

void destroy(prov_ep *e)
{
    eager_leave(e); // before anything it reaches goes
    if (e->progress_handle) {
        env::progress::remove(e->progress_handle);
        e->progress_handle = 0;
    }
    for (int s = 0; s < int(e->slots.size()); s++)
        if (e->slots[s].qp)
            slot_close(e, s);
    for (conn *c : e->all) {
        if (c->ah)
            (void)vq::destroy_ah(c->ah);
        delete c;
    }
    e->all.clear();
    frag_destroy(e);
    e->by_addr.clear();
    e->cm.peers.set(0);
    e->by_index.clear();
    adopted_destroy(e->pep_ud);
    e->pep_ud = nullptr;
    resolver_for(e->dom->lim.host_local).unbind(e->svc);
    e->svc = nullptr;
    if (e->ud)
        (void)vq::destroy_qp(e->ud);
    if (e->ud_mr)
        (void)vq::dereg_mr(e->ud_mr);
    if (e->scratch_mr)
        (void)vq::dereg_mr(e->scratch_mr);
    if (e->dgram_hdrs_mr)
        (void)vq::dereg_mr(e->dgram_hdrs_mr);
    delete[] e->scratch;
    if (e->scq)
        (void)vq::destroy_cq(e->scq);
    if (e->rcq)
        (void)vq::destroy_cq(e->rcq);
    if (e->ucq)
        (void)vq::destroy_cq(e->ucq);
    delete e;
}

// A context of a scalable endpoint closes: its outstanding transmits
// complete silently (close discards them) and progress stops reaching it
// (progress reads the context lists under the lock).
void ctx_close(util::ep_core *c)
{
    prov_ep *e = ep_of(c);
    c->prov = nullptr;
    if (!e)
        return;
    util::guard g(e->lock);
    for (tx_entry &t : e->tx)
        if (t.owner == c)
            t.owner = nullptr;
    txq_forget(e, c);
    for (auto *v : {&e->core->tx_ctx, &e->core->rx_ctx})
        for (util::ep_handle *&h : *v)
            if (h && h->core == c)
                h = nullptr;
}

void close_hook(util::ep_core *c)
{
    if (is_ctx(c)) {
        ctx_close(c);
        return;
    }
    prov_ep *e = ep_of(c);
    if (!e)
        return;
    if (e->msg_type && e->msg_conn && is_connected(e->msg_conn) && !e->msg_conn->shut) {
        // Tell the peer: it sees FI_SHUTDOWN.
        if (int rc = vq::post_send_imm_inline(e->slots[e->msg_conn->slot].qp, ~0ULL, imm_wire(w_shutdown, 0, 0),
                                              nullptr, 0, 0))
            SHUNT_LOG(prov_log, info, "vq: the shutdown notice was not sent (%s): the peer sees the QP go away",
                      shunt::strerror(rc));
    }
    destroy(e);
    c->prov = nullptr;
}

ssize_t tx_left(util::ep_core *c)
{
    prov_ep *e = ep_of(c);
    util::guard g(e->lock);
    ssize_t n = 0;
    for (tx_entry *t = e->tx_free; t; t = t->next)
        n++;
    return n;
}

int shm_permitted(util::ep_core *c, bool permitted)
{
    // On a host-local device shared memory is the only way to communicate;
    // other devices never use it.
    return permitted || !ep_of(c)->dom->lim.host_local ? 0 : -FI_EOPNOTSUPP;
}

ssize_t transmit_any(util::ep_core *c, const util::tx_req &r)
{
    return ep_of(c)->dgram ? dgram_transmit(c, r) : transmit(c, r);
}

/** The hooks of endpoints without a lock ([0]) and with one ([1]: a
 *  multi-threaded domain), which differ in progress only. */
template <bool Locked>
util::ep_hooks hooks_for()
{
    util::ep_hooks h;
    h.enable = enable_hook;
    h.close = close_hook;
    h.progress = progress_as<Locked>;
    h.transmit = transmit_any;
    h.tx_size_left = tx_left;
    h.ops_open = dgram_ops_open;
    h.shm_permitted = shm_permitted;
    h.rx_fetch = fetch_hook;
    h.rx_discard = discard_hook;
    return h;
}
const util::ep_hooks hooks[2] = {hooks_for<false>(), hooks_for<true>()};

const ops_cm rdm_cm_ops{.getname = ep_getname};

// Contexts of a scalable endpoint share its transport (prov_ep): the base
// creates them, the provider points them at it.
int sep_tx_ctx(fid_ep *sep, int index, tx_attr *attr, fid_ep **out, void *context)
{
    int rc = util::ep_ops.tx_ctx(sep, index, attr, out, context);
    if (rc == 0) {
        util::core_of(*out)->prov = util::core_of(sep)->prov;
        // Its injects name it in their wr_id (origin_of).
        const int mt = ep_of(util::core_of(sep))->dom->mt;
        util::to_handle(*out)->ep.msg = &ctx_msg_ops[mt];
        util::to_handle(*out)->ep.tagged = &ctx_tagged_ops[mt];
    }
    return rc;
}

int sep_rx_ctx(fid_ep *sep, int index, rx_attr *attr, fid_ep **out, void *context)
{
    int rc = util::ep_ops.rx_ctx(sep, index, attr, out, context);
    if (rc == 0)
        util::core_of(*out)->prov = util::core_of(sep)->prov;
    return rc;
}

const ops_ep sep_ops = [] {
    ops_ep o = util::ep_ops;
    o.tx_ctx = sep_tx_ctx;
    o.rx_ctx = sep_rx_ctx;
    return o;
}();

int setup(prov_ep *e, ep_type type)
{
    prov_domain *d = e->dom;
    const dev_limits &l = d->lim;
    e->slots.assign(l.max_conns, rc_slot{});
    vq::cq_init_attr ca;
    ca.cqe = int(l.scq_depth);
    ca.single_threaded = !d->mt;
    int rc = vq::create_cq(d->ctx, &ca, &e->scq);
    if (rc)
        return rc;
    ca.cqe = int(l.rcq_depth);
    if ((rc = vq::create_cq(d->ctx, &ca, &e->rcq)))
        return rc;
    e->dgram = type == FI_EP_DGRAM;
    if (type == FI_EP_RDM) {
        // Connection management apart from the messages (prov_ep::ucq).
        ca.cqe = int(l.ud_depth);
        if ((rc = vq::create_cq(d->ctx, &ca, &e->ucq)))
            return rc;
    }
    std::size_t usz = e->dgram ? l.dgram_buf : l.ud_buf;
    vq::qp_init_attr ia;
    ia.type = vq::qp_type::ud;
    ia.send_cq = e->scq;
    ia.recv_cq = e->ucq ? e->ucq : e->rcq;
    ia.send_ops_flags = vq::OPS_SEND | (e->dgram && l.tso_hdr_max ? vq::OPS_TSO : 0); // TSO where the device has it
    ia.cap.max_send_wr = l.sq_depth;
    ia.cap.max_recv_wr = l.ud_depth;
    ia.cap.max_send_sge = l.send_sge;
    ia.cap.max_inline_data = l.inline_max;
    ia.td = d->td;
    if ((rc = vq::create_qp(d->pd, &ia, &e->ud)))
        return rc;
    vq::qp_attr a;
    a.state = vq::qp_state::init;
    a.qkey = qkey;
    if ((rc = vq::modify_qp(e->ud, &a, vq::QP_ATTR_STATE | vq::QP_ATTR_QKEY)))
        return rc;
    a.state = vq::qp_state::rtr;
    if ((rc = vq::modify_qp(e->ud, &a, vq::QP_ATTR_STATE)))
        return rc;
    a.state = vq::qp_state::rts;
    if ((rc = vq::modify_qp(e->ud, &a, vq::QP_ATTR_STATE)))
        return rc;
    e->ud_mem.assign(usz * l.ud_depth, 0);
    e->ud_bufs = e->ud_mem.data();
    if ((rc = vq::reg_mr(d->pd, e->ud_bufs, e->ud_mem.size(), vq::ACCESS_LOCAL_WRITE, &e->ud_mr)))
        return rc;
    for (std::uint64_t i = 0; i < l.ud_depth; i++)
        if ((rc = vq::post_recv(e->ud, i, reinterpret_cast<std::uint64_t>(e->ud_bufs) + i * usz,
                                std::uint32_t(usz), e->ud_mr->lkey)))
            return rc;
    vq::qp_addr qa = vq::get_qp_addr(e->ud);
    if (qa.dev.len > sizeof e->addr.name)
        return -FI_EINVAL;
    e->addr.qpn = qa.qpn;
    e->addr.len = qa.dev.len;
    std::memcpy(e->addr.name, qa.dev.raw, qa.dev.len);
    std::size_t ntx = e->core->info->tx_attr && e->core->info->tx_attr->size ? e->core->info->tx_attr->size : l.sq_depth;
    // Each RC QP's send queue holds tx_attr.size requests (the device's
    // depth at most); a quarter of them may go unsignaled in a row.
    e->sq_depth = std::uint32_t(std::clamp<std::size_t>(ntx, 8, l.sq_depth));
    e->signal_every = std::max<std::uint32_t>(1, e->sq_depth / 4);
    if (e->dgram && l.tso_hdr_max)
        e->tso_hdr.assign(dgram_hdr_size + l.tso_hdr_max, 0);
    e->tx.assign(ntx, tx_entry{});
    // 32 registered bytes per transmit entry: an atomic's result, or the
    // header fields of a send gathered from the user's buffers.
    e->scratch = new (std::nothrow) std::uint64_t[scratch_words * ntx];
    if (!e->scratch)
        return -FI_ENOMEM;
    if ((rc = vq::reg_mr(d->pd, e->scratch, ntx * scratch_words * 8, vq::ACCESS_LOCAL_WRITE, &e->scratch_mr)))
        return rc;
    for (std::size_t i = ntx; i-- > 0;) {
        e->tx[i].next = e->tx_free;
        e->tx_free = &e->tx[i];
    }
    if (e->dgram && l.dgram_max > l.dgram_inject) {
        e->dgram_hdrs.reset(new (std::nothrow) std::uint8_t[ntx * dgram_hdr_max]);
        if (!e->dgram_hdrs)
            return -FI_ENOMEM;
        if ((rc = vq::reg_mr(d->pd, e->dgram_hdrs.get(), ntx * dgram_hdr_max, 0, &e->dgram_hdrs_mr)))
            return rc;
    }
    // RDM: operations to peers being connected wait in a bounded queue.
    if (type == FI_EP_RDM && (rc = txq_setup(e, std::min<std::size_t>(ntx, txq_max), l.inject_max)))
        return rc;
    // Statistics are not worth failing an endpoint for: without a block
    // (telemetry off, or the registry refused) the hooks do nothing.
    static std::atomic<std::uint32_t> ep_serial{0};
    const std::string name = "vq.ep." + std::to_string(ep_serial.fetch_add(1, std::memory_order_relaxed));
    if ((rc = e->io_blk.open(name)))
        SHUNT_LOG(prov_log, warning, "vq: endpoint without statistics: %s", shunt::strerror(rc));
    e->io = e->io_blk.get();
    if (type == FI_EP_RDM && (rc = e->cm_reg.open(name + ".cm", cm_schema, &e->cm)))
        SHUNT_LOG(prov_log, warning, "vq: endpoint without connection statistics: %s", shunt::strerror(rc));
    // One-way stamps (SHUNT_TELEMETRY_ONE_WAY): offered to peers only by an
    // endpoint that has the block to record them in.
    if (e->io && type != FI_EP_DGRAM && !env::stats::one_way_clock().empty()) {
        e->ow_mem.reset(new (std::nothrow) one_way_stats{});
        rc = e->ow_mem ? e->ow_reg.open(name + ".one_way", one_way_schema, e->ow_mem.get()) : -FI_ENOMEM;
        if (rc == 0)
            e->ow = e->ow_mem.get();
        else
            SHUNT_LOG(prov_log, warning, "vq: endpoint without one-way stamps: %s", shunt::strerror(rc));
    }
    return 0;
}

} // namespace

namespace {

int open_ep(fid_domain *domain, info *in, std::size_t fclass, fid_ep **out, void *context)
{
    prov_domain *d = dom_of(util::to_domain(domain));
    ep_type type = in->ep_attr && in->ep_attr->type != FI_EP_UNSPEC ? in->ep_attr->type : FI_EP_RDM;
    util::ep_tables t;
    // As the endpoint's lock (below): the inject that takes it when the
    // domain is multi-threaded.
    t.msg = &msg_ops[d->mt];
    t.tagged = &tagged_ops[d->mt];
    t.cm = type == FI_EP_MSG ? &msg_cm_ops : &rdm_cm_ops;
    if (fclass == FI_CLASS_SEP)
        t.ep = &sep_ops;
    util::ep_handle *h = nullptr;
    int rc = util::ep_create(d, in, fclass, &hooks[d->mt], t, context, &h);
    if (rc)
        return rc;
    util::ep_core *c = h->core;
    c->supported_op_flags = FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
    c->cm_data_size = type == FI_EP_MSG ? cm_data_max : 0;
    auto *e = new (std::nothrow) prov_ep;
    if (!e) {
        (void)util::ep_close_generic(&h->ep.fid);
        return -FI_ENOMEM;
    }
    e->core = c;
    e->dom = d;
    e->lock.enable(d->mt);
    e->msg_type = type == FI_EP_MSG;
    e->scalable = fclass == FI_CLASS_SEP;
    c->prov = e;
    if ((rc = setup(e, type))) {
        SHUNT_LOG(prov_log, warning, "vq: endpoint set-up failed: %s", shunt::strerror(rc));
        (void)util::ep_close_generic(&h->ep.fid);
        return rc;
    }
    // A source address naming a service: this endpoint is where it leads.
    if ((rc = bind_source(resolver_for(d->lim.host_local), in, e->addr, &e->svc))) {
        SHUNT_LOG(prov_log, info, "vq: endpoint source address: %s", shunt::strerror(rc));
        (void)util::ep_close_generic(&h->ep.fid);
        return rc;
    }
    if (in->handle && fid_live(in->handle) && in->handle->fclass == FI_CLASS_PEP) {
        // fi_endpoint(3): the active endpoint acquires the passive endpoint's
        // address (MSG only; the passive endpoint must no longer be used).
        rc = type == FI_EP_MSG && fclass == FI_CLASS_EP ? pep_adopt(in->handle, e) : -FI_EINVAL;
        if (rc) {
            (void)util::ep_close_generic(&h->ep.fid);
            return rc;
        }
    }
    *out = &h->ep;
    return 0;
}

} // namespace

int ep_open(fid_domain *domain, info *in, fid_ep **out, void *context)
{
    if (!in || !out)
        return -FI_EINVAL;
    return open_ep(domain, in, FI_CLASS_EP, out, context);
}

int sep_open(fid_domain *domain, info *in, fid_ep **out, void *context)
{
    if (!in || !out)
        return -FI_EINVAL;
    ep_type type = in->ep_attr && in->ep_attr->type != FI_EP_UNSPEC ? in->ep_attr->type : FI_EP_RDM;
    if (type != FI_EP_RDM)
        return -FI_EOPNOTSUPP; // scalable endpoints: RDM only
    if (in->ep_attr && ((in->ep_attr->tx_ctx_cnt != FI_SHARED_CONTEXT && in->ep_attr->tx_ctx_cnt > max_ctx) ||
                        (in->ep_attr->rx_ctx_cnt != FI_SHARED_CONTEXT && in->ep_attr->rx_ctx_cnt > max_ctx) ||
                        in->ep_attr->tx_ctx_cnt == FI_SHARED_CONTEXT || in->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT))
        return -FI_EINVAL;
    return open_ep(domain, in, FI_CLASS_SEP, out, context);
}

} // namespace shunt::prov::vqprov
