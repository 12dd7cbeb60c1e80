// vq provider: RC QP slots of an endpoint, and the hidden connection
// set-up of RDM endpoints (REQ / REP over the endpoint's UD QP).
#include <algorithm>
#include <cstring>
#include <utility>
#include <ctime>

#include "env/errors.h"
#include "env/log.h"
#include "env/tunable.h"
#include "prov.h"

namespace shunt::prov::vqprov {

SHUNT_TUNABLE(t_connect_ms, "SHUNT_VQ_CONNECT_TIMEOUT_MS", integer, "10000",
              "vq provider, RDM: a connection to a peer that does not answer within this many milliseconds "
              "fails, and so do the operations queued for it (error completions, FI_ETIMEDOUT; one "
              "fi_av_insert started counts from its first operation, and without one is not an error); a connection "
              "the endpoint accepted that its requester does not finish within as long is given up and its "
              "QP freed; 0: never",
              "vq");

SHUNT_TUNABLE(t_av_attach, "SHUNT_VQ_AV_ATTACH", integer, "256",
              "vq provider, host-local devices (shm): the first this many addresses inserted into a domain's AVs "
              "have their peer's memory attached by the insert, so that the first operation to the peer does "
              "not wait for it; the others, and peers not there yet, are attached by their first operation; "
              "0: always by the first operation",
              "vq");

SHUNT_TUNABLE(t_av_connect, "SHUNT_VQ_AV_CONNECT", integer, "4",
              "vq provider, RDM on host-local devices (shm): per endpoint, the first this many peers inserted "
              "into its AV while it is enabled, and attached by the insert (SHUNT_VQ_AV_ATTACH), are "
              "connected to from the insert: requests already waiting are answered and the endpoint's own "
              "is sent, so that the first message to or from the peer does not wait for the connection "
              "(domains at FI_THREAD_SAFE, with automatic progress, or at FI_THREAD_DOMAIN; a peer accepts "
              "such requests while half its endpoint's connections are free); "
              "0: connections start with the first operation",
              "vq");

SHUNT_TUNABLE(t_rc_timeout, "SHUNT_VQ_RC_TIMEOUT", integer, "-1",
              "vq provider, RDM and MSG: the RC QPs' retransmit timeout, verbs' qp_attr timeout "
              "(4.096 us x 2^T, 0..31; 0: wait for ever); -1: the driver's default (ethdev: 16, 268 ms)",
              "vq");
SHUNT_TUNABLE(t_rc_retry_cnt, "SHUNT_VQ_RC_RETRY_CNT", integer, "-1",
              "vq provider, RDM and MSG: the RC QPs' retry count (qp_attr retry_cnt, 0..7) before the "
              "connection fails; -1: the driver's default (7)",
              "vq");
SHUNT_TUNABLE(t_rc_rnr_retry, "SHUNT_VQ_RC_RNR_RETRY", integer, "-1",
              "vq provider, RDM and MSG: the RC QPs' RNR retry count (qp_attr rnr_retry, 0..7; 7: for ever); "
              "-1: the driver's default (7)",
              "vq");

namespace {

/** The RC transport settings the provider gives its QPs at RTS: each of
 *  SHUNT_VQ_RC_TIMEOUT, _RETRY_CNT and _RNR_RETRY that is set and in range,
 *  read once; the others stay the driver's. */
struct rc_settings {
    unsigned mask = 0;
    std::uint8_t timeout = 0, retry_cnt = 0, rnr_retry = 0;
};

const rc_settings &rc_transport()
{
    static const rc_settings s = [] {
        rc_settings r;
        auto one = [&](const env::tunable &t, std::int64_t max, unsigned bit, std::uint8_t &field) {
            std::int64_t v = -1;
            if (t.as_int(v) < 0 || v < -1 || v > max) {
                SHUNT_LOG(prov_log, warning, "%s=%s is not -1 or 0..%lld: the driver's default is used", t.name,
                          t.value().c_str(), static_cast<long long>(max));
                return;
            }
            if (v >= 0) {
                field = static_cast<std::uint8_t>(v);
                r.mask |= bit;
            }
        };
        one(t_rc_timeout, 31, vq::QP_ATTR_TIMEOUT, r.timeout);
        one(t_rc_retry_cnt, 7, vq::QP_ATTR_RETRY_CNT, r.retry_cnt);
        one(t_rc_rnr_retry, 7, vq::QP_ATTR_RNR_RETRY, r.rnr_retry);
        return r;
    }();
    return s;
}

long long now_ns()
{
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/** The cq_flags of a transmit of @p r (its completion, or its failure). */
std::uint64_t cq_flags_of(const util::tx_req &r)
{
    switch (r.kind) {
    case util::tx_req::send:
        return FI_SEND | FI_MSG;
    case util::tx_req::tsend:
        return FI_SEND | FI_TAGGED;
    case util::tx_req::read:
        return FI_RMA | FI_READ;
    case util::tx_req::write:
        return FI_RMA | FI_WRITE;
    case util::tx_req::atomic:
        return FI_ATOMIC | FI_WRITE;
    default:
        return FI_ATOMIC | FI_READ;
    }
}

void txq_put(prov_ep *e, queued_tx *q)
{
    q->owner = nullptr;
    q->next = e->txq_free;
    e->txq_free = q;
}

/** The connection attempt of @p c failed: what waits for it fails. With
 *  no answer (@p keep_qp) our QP of the attempt stays as it is, so a reply
 *  that comes late completes the connection (the peer may already send on
 *  its end: nothing it sends is lost); a QP that could not be connected
 *  is retired (slot_retire). */
void conn_give_up(prov_ep *e, conn *c, int err, bool keep_qp = false)
{
    if (c->slot >= 0 && !keep_qp) {
        vq::qp_attr a;
        a.state = vq::qp_state::err;
        (void)vq::modify_qp(e->slots[c->slot].qp, &a, vq::QP_ATTR_STATE);
        slot_retire(e, c->slot);
        c->slot = -1;
    }
    if (c->eager_origin && !keep_qp) {
        // Started by fi_av_insert and the reply came too late to use (the
        // peer gave its end up while we did not progress): ask again,
        // with what waits kept queued. Once: a second failure is one.
        const bool nobody_waits = c->eager;
        c->eager = c->eager_quiet = c->eager_origin = false;
        c->state = conn::idle;
        if (conn_start(e, c) == -FI_EAGAIN) {
            c->eager = nobody_waits;
            return;
        }
        if (c->slot >= 0) {
            slot_retire(e, c->slot);
            c->slot = -1;
        }
    }
    c->state = conn::failed;
    SHUNT_LOG(prov_log, info, "vq: no connection to %s: %s", addr_key(c->peer).c_str(), shunt::strerror(-err));
    conn_fail_queued(e, c, err);
}

/** Queue @p r (of @p core) behind what already waits on @p c. The arrays
 *  it points to are copied into the entry, and so are an inject's bytes.
 *  @return 1; -FI_EAGAIN no free entry. */
int txq_push(prov_ep *e, conn *c, util::ep_core *core, const util::tx_req &r)
{
    if (r.count > iov_max || r.rma_count > 1 || r.result_count > iov_max || r.compare_count > iov_max) [[unlikely]]
        return -FI_EINVAL;
    const bool inject = r.flags & FI_INJECT;
    const std::size_t cmp_len = r.compare_count && r.compare ? r.compare[0].iov_len : 0;
    if (inject && (r.len > e->txq_data_size || cmp_len > sizeof(queued_tx::cmp) || r.compare_count > 1)) [[unlikely]]
        return -FI_EMSGSIZE;
    // What a connected peer's operation copies during the call (an inline
    // send, a small write, an atomic's operands) is copied here too, so the
    // caller's buffer is as free at return as it would be then; an inject's
    // always. Larger ones are read from the caller's buffers when they go.
    const std::size_t copy_max = std::min<std::size_t>(e->txq_data_size, e->dom->lim.small_max);
    const bool copy = inject || (r.kind != util::tx_req::read && r.len <= copy_max);
    const bool copy_cmp = cmp_len && r.compare_count == 1 && cmp_len <= sizeof(queued_tx::cmp);
    queued_tx *q = e->txq_free;
    if (!q)
        return -FI_EAGAIN; // the bound of operations waiting for connections
    e->txq_free = q->next;
    q->next = nullptr;
    q->owner = core;
    q->r = r;
    for (std::size_t i = 0; i < r.count; i++) {
        q->iov[i] = r.iov[i];
        q->desc[i] = r.desc ? r.desc[i] : nullptr;
    }
    q->r.iov = q->iov;
    q->r.desc = r.desc ? q->desc : nullptr;
    if (copy) {
        std::size_t off = 0;
        for (std::size_t i = 0; i < r.count; i++) {
            if (r.iov[i].iov_len && r.iov[i].iov_base)
                std::memcpy(q->data + off, r.iov[i].iov_base, r.iov[i].iov_len);
            off += r.iov[i].iov_len;
        }
        q->iov[0] = iovec{q->data, r.len};
        q->r.count = r.count ? 1 : 0;
        q->r.desc = nullptr;
    }
    if (r.rma_count) {
        q->rma[0] = r.rma[0];
        q->r.rma = q->rma;
    }
    for (std::size_t i = 0; i < r.result_count; i++)
        q->result[i] = r.result[i];
    q->r.result = r.result_count ? q->result : nullptr;
    for (std::size_t i = 0; i < r.compare_count; i++)
        q->compare[i] = r.compare[i];
    q->r.compare = r.compare_count ? q->compare : nullptr;
    if (copy_cmp) {
        std::memcpy(q->cmp, r.compare[0].iov_base, cmp_len);
        q->compare[0] = iovec{q->cmp, cmp_len};
    }
    if (c->q_tail)
        c->q_tail->next = q;
    else
        c->q_head = q;
    c->q_tail = q;
    return 1;
}

} // namespace

int txq_setup(prov_ep *e, std::size_t entries, std::size_t data_size)
{
    std::int64_t ms = 10000;
    if (t_connect_ms.as_int(ms) < 0 || ms < 0) {
        SHUNT_LOG(prov_log, warning, "SHUNT_VQ_CONNECT_TIMEOUT_MS is not a count of milliseconds: using 10000");
        ms = 10000;
    }
    e->connect_timeout_ns = std::uint64_t(ms) * 1000000u;
    try {
        e->txq.assign(entries, queued_tx{});
    } catch (...) {
        return -FI_ENOMEM;
    }
    e->txq_data.reset(new (std::nothrow) std::uint8_t[entries * data_size + 1]);
    if (!e->txq_data)
        return -FI_ENOMEM;
    e->txq_data_size = data_size;
    for (std::size_t i = entries; i-- > 0;) {
        e->txq[i].data = e->txq_data.get() + i * data_size;
        e->txq[i].next = e->txq_free;
        e->txq_free = &e->txq[i];
    }
    return 0;
}

void txq_forget(prov_ep *e, util::ep_core *owner)
{
    for (queued_tx &q : e->txq)
        if (q.owner == owner)
            q.owner = nullptr; // dropped silently when its turn comes
}

int conn_not_ready(prov_ep *e, conn *c, util::ep_core *core, const util::tx_req &r)
{
    if (c && c->state == conn::stamped) [[likely]]
        return r.kind == util::tx_req::send || r.kind == util::tx_req::tsend ? send_stamped(e, core, r, c) : 0;
    if (!c)
        return e->msg_type ? -FI_ENOTCONN : -FI_ENOMEM;
    if (e->msg_type)
        return c->shut || c->state == conn::failed ? -FI_ENOTCONN : -FI_EAGAIN;
    return conn_wait(e, c, core, r); // RDM: accepted and queued while the connection forms
}

void cm_sign(const prov_ep *e, cm_msg &m)
{
    m.flags = (e->core->caps & FI_RMA_EVENT) ? cm_f_rma_event : 0;
    if (e->ow) {
        const std::string &id = env::stats::one_way_clock();
        m.flags |= cm_f_one_way;
        std::memset(m.clock, 0, sizeof m.clock);
        std::memcpy(m.clock, id.data(), std::min(id.size(), sizeof m.clock - 1));
    }
}

std::uint32_t cm_peer_flags(const cm_msg &m)
{
    // One clock: the same boot id of an invariant TSC (env::tsc::clock_id).
    const std::string &id = env::stats::one_way_clock();
    char mine[clock_id_max] = {};
    std::memcpy(mine, id.data(), std::min(id.size(), sizeof mine - 1));
    const bool same = !id.empty() && std::memcmp(mine, m.clock, sizeof mine) == 0;
    return same ? m.flags : m.flags & ~cm_f_one_way;
}

void conn_agree(prov_ep *e, conn *c, std::uint32_t flags)
{
    c->notify = flags & cm_f_rma_event;
    c->one_way = e->ow && (flags & cm_f_one_way);
    if (c->one_way)
        e->ow->connections.add();
}

int conn_wait(prov_ep *e, conn *c, util::ep_core *core, const util::tx_req &r)
{
    if (c->state == conn::idle || c->state == conn::failed) {
        int rc = conn_start(e, c);
        if (rc != -FI_EAGAIN)
            return rc; // cannot be started (the peer is gone, no QP left, ...)
    } else if (c->eager) [[unlikely]] {
        // The first operation on an attempt fi_av_insert started: the
        // connect timeout runs from now, and an attempt that had stopped
        // repeating its REQ repeats it (at once: it went long ago).
        c->eager = c->eager_quiet = false;
        c->connect_ns = std::uint64_t(now_ns());
        conn_pend(e, c);
        (void)conn_start(e, c);
    }
    // Connecting, or the QP is up and earlier operations still wait: behind them.
    return txq_push(e, c, core, r);
}

void conn_drain(prov_ep *e, conn *c)
{
    while (queued_tx *q = c->q_head) {
        if (q->owner) {
            c->state = up_state(c); // lets the operation through conn_ready
            ssize_t rc = tx_dispatch(e, q->owner, q->r);
            if (c->q_head != q)
                return; // the connection broke meanwhile: the queue was failed
            if (rc == -FI_EAGAIN) {
                // The send queue or the transmit entries are full: the next
                // progress goes on, and new operations stay behind these.
                c->state = conn::draining;
                conn_pend(e, c);
                return;
            }
            if (rc < 0)
                util::tx_fail(q->owner, q->r.context, cq_flags_of(q->r), int(-rc), q->r.len);
        }
        c->q_head = q->next;
        if (!c->q_head)
            c->q_tail = nullptr;
        txq_put(e, q);
    }
    if (c->state == conn::draining)
        c->state = up_state(c);
}

void conn_fail_queued(prov_ep *e, conn *c, int err)
{
    queued_tx *q = c->q_head;
    c->q_head = c->q_tail = nullptr;
    while (q) {
        queued_tx *next = q->next;
        if (q->owner)
            util::tx_fail(q->owner, q->r.context, cq_flags_of(q->r), err, q->r.len);
        txq_put(e, q);
        q = next;
    }
}

namespace {

int no_qp_slot(const prov_ep *e)
{
    for (int i = 0; i < int(e->slots.size()); i++)
        if (!e->slots[i].qp)
            return i;
    return -1;
}

} // namespace

bool slot_free(const prov_ep *e)
{
    return e->spare_slot >= 0 || no_qp_slot(e) >= 0;
}

bool dest_qp_ok(const prov_ep *e, const ep_addr &peer, std::uint32_t peer_qpn)
{
    vq::qp_addr d;
    d.dev = to_dev(peer);
    d.qpn = peer_qpn;
    int rc = vq::check_dest_qp(e->dom->ctx, &d, vq::qp_type::rc);
    return rc == 0 || rc == -FI_EOPNOTSUPP; // the driver cannot tell: connecting will
}

namespace {

/** Slot @p s gets an RC QP in INIT, its receives posted. */
int slot_make(prov_ep *e, int s)
{
    rc_slot &sl = e->slots[s];
    vq::qp_init_attr ia;
    ia.type = vq::qp_type::rc;
    ia.send_cq = e->scq;
    ia.recv_cq = e->rcq;
    const dev_limits &l = e->dom->lim;
    ia.send_ops_flags = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ;
    // Optional ones, as the device has them: RDMA write with immediate
    // (remote CQ data of direct writes) and atomics.
    ia.send_ops_flags |= e->dom->dattr.ops[static_cast<unsigned>(vq::qp_type::rc)] &
                         (vq::OPS_RDMA_WRITE_WITH_IMM | vq::OPS_ATOMIC_CMP_AND_SWP | vq::OPS_ATOMIC_FETCH_AND_ADD);
    ia.cap.max_send_wr = e->sq_depth;
    ia.cap.max_recv_wr = l.rq_depth;
    ia.cap.max_send_sge = l.send_sge;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = l.rc_inline; // injects up to inject_size are one inline send
    ia.td = e->dom->td;
    ia.lend_recv = l.lend; // messages are matched and copied once, from where the QP lends them
    int rc = vq::create_qp(e->dom->pd, &ia, &sl.qp);
    if (rc)
        return rc;
    sl.lent_poll = l.lend && vq::poll_lent(sl.qp, 0, nullptr) == 0; // a probe: 0 where the QP offers it
    e->cm.qps_created.add();
    e->cm.qps.set(e->cm.qps.get() + 1);
    vq::qp_attr a;
    a.state = vq::qp_state::init;
    // The peer's RMA and atomics land on this QP (regions still check their own flags).
    a.qp_access_flags = vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC;
    if ((rc = vq::modify_qp(sl.qp, &a, vq::QP_ATTR_STATE | vq::QP_ATTR_ACCESS_FLAGS))) {
        slot_close(e, s);
        return rc;
    }
    if (!l.lend) {
        // A device without lent receives: receive buffers of one eager message each.
        const std::size_t bounce = l.bounce;
        sl.bounce = new (std::nothrow) std::uint8_t[std::size_t(l.rq_depth) * bounce];
        vq::mr *m = nullptr;
        if (!sl.bounce ||
            (rc = vq::reg_mr(e->dom->pd, sl.bounce, std::size_t(l.rq_depth) * bounce, vq::ACCESS_LOCAL_WRITE, &m))) {
            slot_close(e, s);
            return rc ? rc : -FI_ENOMEM;
        }
        sl.bounce_mr = m;
        for (std::uint32_t i = 0; i < l.rq_depth; i++) {
            rc = vq::post_recv(sl.qp, (std::uint64_t(s) << 32) | i,
                               reinterpret_cast<std::uint64_t>(sl.bounce) + std::uint64_t(i) * bounce,
                               std::uint32_t(bounce), m->lkey);
            if (rc) {
                slot_close(e, s);
                return rc;
            }
        }
    }
    return 0;
}

} // namespace

void slot_prepare(prov_ep *e)
{
    if (e->spare_slot >= 0)
        return;
    const int s = no_qp_slot(e);
    if (s >= 0 && slot_make(e, s) == 0)
        e->spare_slot = s;
}

int slot_open(prov_ep *e, const ep_addr &peer, std::uint32_t peer_qpn, bool connect_now, int &slot_out)
{
    int s = std::exchange(e->spare_slot, -1);
    if (s < 0) {
        if ((s = no_qp_slot(e)) < 0)
            return -FI_ENOSPC;
        if (int rc = slot_make(e, s))
            return rc;
    }
    if (connect_now)
        if (int rc = slot_connect(e, s, peer, peer_qpn)) {
            slot_close(e, s);
            return rc;
        }
    slot_out = s;
    return 0;
}

int slot_connect(prov_ep *e, int s, const ep_addr &peer, std::uint32_t peer_qpn)
{
    rc_slot &sl = e->slots[s];
    vq::qp_attr a;
    a.state = vq::qp_state::rtr;
    a.dest = to_dev(peer);
    a.dest_qp_num = peer_qpn;
    int rc = vq::modify_qp(sl.qp, &a, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN);
    if (rc)
        return rc;
    a.state = vq::qp_state::rts;
    const rc_settings &t = rc_transport();
    a.timeout = t.timeout;
    a.retry_cnt = t.retry_cnt;
    a.rnr_retry = t.rnr_retry;
    return vq::modify_qp(sl.qp, &a, vq::QP_ATTR_STATE | t.mask);
}

void slot_close(prov_ep *e, int s)
{
    rc_slot &sl = e->slots[s];
    if (sl.half_since)
        half_done(e, sl);
    if (sl.qp) {
        (void)vq::destroy_qp(sl.qp);
        e->cm.qps.set(e->cm.qps.get() - 1);
    }
    if (sl.bounce_mr)
        (void)vq::dereg_mr(sl.bounce_mr);
    delete[] sl.bounce;
    if (sl.retired && !sl.drain_posted)
        e->undrained--;
    sl = rc_slot{};
}

namespace {

/** Post retired slot @p s's marker: a signaled send behind everything its
 *  QP holds. */
bool slot_drain_post(prov_ep *e, int s)
{
    rc_slot &sl = e->slots[s];
    if (vq::post_send_imm_inline(sl.qp, drain_id(s, sl.qp->qp_num), 0, nullptr, 0, vq::WR_SIGNALED) != 0)
        return false;
    sl.drain_posted = true;
    e->scq_pending++;
    return true;
}

} // namespace

void slot_retire(prov_ep *e, int s)
{
    frag_fail(e, s, FI_ECONNRESET); // a fragmented message on it never completes
    rc_slot &sl = e->slots[s];
    sl.c = nullptr;
    if (sl.retired || !sl.qp)
        return;
    sl.retired = true;
    // Not destroyed at once: requests the QP holds (a rendezvous pull, an
    // RMA the peer asked for, a send) complete only by coming back from it,
    // flushed, and destroying it would lose them. In ERR it flushes them
    // all and accepts a signaled marker after them; a send queue's
    // completions come in order, so when the marker is back nothing of the
    // QP's is left and slot_drained closes the slot for a new connection.
    // Receives it still delivers meanwhile are ignored (rc_rx).
    vq::qp_attr a;
    a.state = vq::qp_state::err;
    (void)vq::modify_qp(sl.qp, &a, vq::QP_ATTR_STATE);
    if (!slot_drain_post(e, s))
        e->undrained++; // the send queue is full: again on the sweep, after the send CQ was polled
}

void slot_drained(prov_ep *e, std::uint64_t id, std::uint32_t qpn)
{
    const std::uint64_t s = (id >> 32) & 0xffffu;
    if (s >= e->slots.size() || std::uint32_t(id) != qpn)
        return;
    rc_slot &sl = e->slots[s];
    if (sl.retired && sl.drain_posted && sl.qp && sl.qp->qp_num == qpn)
        slot_close(e, int(s));
}

void slots_drain_retry(prov_ep *e)
{
    for (int s = 0; e->undrained && s < int(e->slots.size()); s++) {
        rc_slot &sl = e->slots[s];
        if (sl.retired && !sl.drain_posted && sl.qp && slot_drain_post(e, s))
            e->undrained--;
    }
}

namespace {

vq::ah *ah_make(prov_domain *d, const ep_addr &a)
{
    vq::ah_attr at;
    at.dest = to_dev(a);
    vq::ah *ah = nullptr;
    return vq::create_ah(d->pd, &at, &ah) == 0 ? ah : nullptr;
}

} // namespace

vq::ah *ah_for(prov_ep *e, const ep_addr &a)
{
    return ah_make(e->dom, a);
}

int av_attach(util::domain_obj *d, util::av_entry *a)
{
    prov_domain *pd = dom_of(d);
    std::int64_t max = 0;
    if (!pd->lim.host_local || t_av_attach.as_int(max) < 0 || max <= 0)
        return 0;
    if (pd->av_attached.fetch_add(1, std::memory_order_relaxed) >= std::uint64_t(max)) {
        pd->av_attached.fetch_sub(1, std::memory_order_relaxed);
        return 0;
    }
    ep_addr x;
    std::memcpy(&x, a->addr, sizeof x);
    vq::ah *ah = ah_make(pd, x);
    if (!ah) {
        // A peer that is not there (yet): its first operation tries again
        // and reports what it finds then. The insert stands.
        pd->av_attached.fetch_sub(1, std::memory_order_relaxed);
        return 0;
    }
    a->prov = ah;
    return 0;
}

void av_detach(util::domain_obj *d, util::av_entry *a)
{
    if (!a->prov)
        return;
    (void)vq::destroy_ah(static_cast<vq::ah *>(a->prov));
    a->prov = nullptr;
    dom_of(d)->av_attached.fetch_sub(1, std::memory_order_relaxed);
}

void eager_join(prov_ep *e)
{
    std::int64_t n = 0;
    if (!e->dom->lim.host_local || t_av_connect.as_int(n) < 0 || n <= 0)
        return;
    // The insert runs the endpoint's connection management from the
    // inserting thread: under the endpoint's lock, or where the application
    // serializes every call of the domain (FI_THREAD_DOMAIN). At the levels
    // between (endpoint, completion, fid) an insert may run beside the
    // endpoint's own calls without either: no connecting from the insert.
    if (!e->lock.enabled() && e->dom->thread != FI_THREAD_DOMAIN)
        return;
    e->eager_left = std::uint32_t(std::min<std::int64_t>(n, e->slots.size()));
    std::lock_guard g(e->dom->eps_mu);
    e->dom->rdm_eps.push_back(e);
}

void eager_leave(prov_ep *e)
{
    std::lock_guard g(e->dom->eps_mu);
    std::vector<prov_ep *> &v = e->dom->rdm_eps;
    v.erase(std::remove(v.begin(), v.end(), e), v.end());
}

void av_inserted(util::domain_obj *d, util::av_obj *av, util::av_entry *a)
{
    if (!a->prov)
        return; // not attached: its process may not be there yet, the first operation connects
    prov_domain *pd = dom_of(d);
    ep_addr peer;
    std::memcpy(&peer, a->addr, sizeof peer);
    std::lock_guard g(pd->eps_mu);
    for (prov_ep *e : pd->rdm_eps) {
        if (e->core->av != av || !e->eager_left)
            continue;
        util::guard lk(e->lock);
        progress_scope p(e);
        // The peer may have asked first (it inserted us before): accepting
        // its request is the connection, both ways.
        cm_poll(e);
        if (addr_key(peer) == addr_key(e->addr))
            continue; // ourselves (FI_LOCAL_COMM inserts): connected when used
        conn *c = conn_for(e, a);
        if (!c || c->state != conn::idle)
            continue;
        e->eager_left--;
        c->eager = true; // its REQ says so (cm_f_eager)
        if (conn_start(e, c) == -FI_EAGAIN && c->state == conn::connecting)
            c->eager_origin = true;
        else
            c->eager = false;
    }
}

int ud_send(prov_ep *e, vq::ah *ah, std::uint32_t qpn, const void *buf, std::size_t len)
{
    vq::wr_start(e->ud);
    e->ud->wr_id = ~0ULL;
    e->ud->wr_flags = 0;
    vq::wr_send(e->ud);
    vq::wr_set_inline_data(e->ud, buf, len);
    vq::wr_set_ud_addr(e->ud, ah, qpn, qkey);
    return vq::wr_complete(e->ud);
}

conn *conn_for(prov_ep *e, util::av_entry *peer)
{
    std::size_t idx = peer->index;
    if (idx < e->by_index.size() && e->by_index[idx]) [[likely]]
        return e->by_index[idx];
    ep_addr a;
    std::memcpy(&a, peer->addr, sizeof a);
    std::string key = addr_key(a);
    conn *c = nullptr;
    auto it = e->by_addr.find(key);
    if (it != e->by_addr.end()) {
        c = it->second;
    } else {
        c = new (std::nothrow) conn;
        if (!c)
            return nullptr;
        c->peer = a;
        e->by_addr[key] = c;
        e->cm.peers.set(e->by_addr.size());
        e->all.push_back(c);
    }
    if (idx >= e->by_index.size())
        e->by_index.resize(idx + 1, nullptr);
    e->by_index[idx] = c;
    return c;
}

int conn_start(prov_ep *e, conn *c)
{
    if (is_connected(c))
        return 0;
    if (c->state == conn::failed)
        return -FI_EHOSTUNREACH;
    if (!c->ah && !(c->ah = ah_for(e, c->peer)))
        return -FI_EHOSTUNREACH;
    long long now = now_ns();
    if (c->state == conn::connecting) {
        if (e->connect_timeout_ns && std::uint64_t(now) - c->connect_ns >= e->connect_timeout_ns) {
            if (c->eager) {
                // Nobody waits on it: not an error. The REQ is not repeated
                // any more; a late reply still completes the connection,
                // and the first operation asks again (conn_wait).
                c->eager_quiet = true;
                return -FI_EAGAIN;
            }
            conn_give_up(e, c, FI_ETIMEDOUT, true);
            return -FI_ETIMEDOUT;
        }
        if (c->eager_quiet)
            return -FI_EAGAIN;
        // REQ lost (the peer's UD rings may be busy): resend now and then.
        if (now - c->req_sent_ns < 100'000'000)
            return -FI_EAGAIN;
    } else {
        if (c->dead_slot >= 0) {
            slot_retire(e, c->dead_slot);
            c->dead_slot = -1;
        }
        int s = -1;
        int rc = slot_open(e, c->peer, 0, false, s);
        if (rc)
            return rc;
        c->slot = s;
        e->slots[s].c = c;
        c->req_qpn = e->slots[s].qp->qp_num;
        c->state = conn::connecting;
        c->connect_ns = std::uint64_t(now);
        conn_pend(e, c); // progress repeats the request until the reply
    }
    cm_msg m{};
    m.op = cm_req;
    m.ep_type = FI_EP_RDM;
    m.req_qpn = c->req_qpn;
    cm_sign(e, m);
    if (c->eager)
        m.flags |= cm_f_eager;
    m.from = e->addr;
    (void)ud_send(e, c->ah, c->peer.qpn, &m, offsetof(cm_msg, data));
    c->req_sent_ns = now;
    return -FI_EAGAIN;
}

namespace {

/** A REQ from @p key that @p e could not accept: counted, and logged at the
 *  first, second, fourth ... refusal of the endpoint, so that a flood of
 *  requests (from as many addresses: anyone can send them) is not a flood of
 *  log lines. */
[[gnu::cold]] void cm_refused(prov_ep *e, const std::string &key)
{
    e->cm.refused.add();
    const std::uint64_t n = e->cm.refused.get();
    if ((n & (n - 1)) == 0)
        SHUNT_LOG(prov_log, warning, "vq: cannot accept a connection from %s (%llu refused so far; logged again at %llu)",
                  key.c_str(), static_cast<unsigned long long>(n), static_cast<unsigned long long>(2 * n));
}

/** Accepted connections of the requester process at @p from (its device
 *  address) that it has not finished. */
std::uint32_t half_open_of(const prov_ep *e, const ep_addr &from)
{
    std::uint32_t n = 0;
    for (const rc_slot &sl : e->slots)
        n += sl.half_since && sl.half_from.len == from.len && std::memcmp(sl.half_from.name, from.name, from.len) == 0;
    return n;
}

} // namespace

bool eager_room(const prov_ep *e)
{
    std::size_t used = 0;
    for (int i = 0; i < int(e->slots.size()); i++)
        used += e->slots[i].qp && i != e->spare_slot;
    return 2 * used < e->slots.size();
}

void half_done(prov_ep *e, rc_slot &sl)
{
    sl.half_since = 0;
    e->cm.half_open.set(e->cm.half_open.get() - 1);
}

void half_open_expire(prov_ep *e)
{
    if (!e->connect_timeout_ns)
        return; // SHUNT_VQ_CONNECT_TIMEOUT_MS=0: never given up
    const std::uint64_t now = std::uint64_t(now_ns());
    for (int s = 0; s < int(e->slots.size()); s++) {
        rc_slot &sl = e->slots[s];
        if (!sl.half_since || now - sl.half_since < e->connect_timeout_ns)
            continue;
        half_done(e, sl);
        e->cm.expired.add();
        conn *c = sl.c;
        bool sent = false; // requests of ours that wait for their completions on this peer's QPs
        for (const tx_entry &t : e->tx)
            sent |= c && t.c == c;
        SHUNT_LOG(prov_log, info, "vq: %s did not finish the connection it asked for: given up, its QP %s",
                  addr_key(sl.half_from).c_str(), sent ? "retired (requests on it come back first)" : "freed");
        if (sent) {
            // Destroying the QP would lose those completions: it fails as
            // a broken connection does (its QP retired, closed once they
            // are back).
            if (c->slot == s)
                conn_broken(e, c);
            continue;
        }
        if (c && c->slot == s) {
            // We sent nothing over it yet: the next send connects anew.
            ctl_forget(e, c, c->ctl.size());
            conn_fail_queued(e, c, FI_ETIMEDOUT);
            c->slot = -1;
            c->state = conn::idle;
        }
        if (c && c->dead_slot == s)
            c->dead_slot = -1;
        frag_fail(e, s, FI_ECONNRESET);
        slot_close(e, s);
    }
}

void cm_handle(prov_ep *e, const cm_msg &m)
{
    if (m.from.len == 0 || m.from.len > 59)
        return;
    std::string key = addr_key(m.from);
    auto it = e->by_addr.find(key);
    conn *c = it == e->by_addr.end() ? nullptr : it->second;
    if (m.op == cm_req && m.ep_type != FI_EP_RDM) {
        // An MSG endpoint connecting (or a type with no connections): it
        // gets a REJ, as from a passive endpoint that rejects, and nothing
        // is kept of it.
        cm_refused(e, key);
        vq::ah *ah = c && c->ah ? c->ah : ah_for(e, m.from);
        if (!ah)
            return;
        cm_msg r{};
        r.op = cm_rej;
        r.req_qpn = m.req_qpn;
        r.from = e->addr;
        (void)ud_send(e, ah, m.from.qpn, &r, offsetof(cm_msg, data));
        if (!c || ah != c->ah)
            (void)vq::destroy_ah(ah);
        return;
    }
    if (m.op == cm_req) {
        // A repeated REQ for a QP we already accepted: answer again.
        for (int i = 0; i < int(e->slots.size()); i++) {
            rc_slot &sl = e->slots[i];
            if (sl.qp && sl.c && sl.accepted_from == m.req_qpn && addr_key(sl.c->peer) == key) {
                cm_msg r{};
                r.op = cm_rep;
                r.req_qpn = m.req_qpn;
                r.rep_qpn = sl.qp->qp_num;
                cm_sign(e, r);
                r.from = e->addr;
                if (sl.c->ah)
                    (void)ud_send(e, sl.c->ah, m.from.qpn, &r, offsetof(cm_msg, data));
                return;
            }
        }
        if ((m.flags & cm_f_eager) && !eager_room(e)) {
            // Asked by the peer's fi_av_insert: not at the cost of the slots
            // our own traffic needs. Its first operation asks again.
            e->cm.refused.add();
            return;
        }
        // A peer we do not know gets a record only once its REQ is
        // accepted: records live until the endpoint closes, and anyone can
        // send well-formed REQs naming QPs or segments that do not exist.
        conn *fresh = nullptr;
        if (!c) {
            c = fresh = new (std::nothrow) conn;
            if (!c)
                return;
            c->peer = m.from;
        }
        // Every check that can refuse the REQ runs before a QP is created
        // for it: the requester's unfinished connections, a free slot, its
        // address, its QP.
        int s = -1;
        if (half_open_of(e, m.from) >= cm_half_open_max || !slot_free(e) ||
            (!c->ah && !(c->ah = ah_for(e, m.from))) || !dest_qp_ok(e, m.from, m.req_qpn) ||
            slot_open(e, m.from, m.req_qpn, true, s) != 0) {
            cm_refused(e, key);
            if (fresh) {
                if (fresh->ah)
                    (void)vq::destroy_ah(fresh->ah);
                delete fresh;
            }
            return;
        }
        if (fresh) {
            e->by_addr[key] = c;
            e->cm.peers.set(e->by_addr.size());
            e->all.push_back(c);
        }
        conn_agree(e, c, cm_peer_flags(m));
        e->slots[s].c = c;
        c->acc_slot = s;
        e->slots[s].accepted_from = m.req_qpn;
        e->slots[s].half_since = std::uint64_t(now_ns()); // until its w_hello (half_open_expire)
        e->slots[s].half_from = m.from;
        e->cm.half_open.set(e->cm.half_open.get() + 1);
        if (qp_up(c) && c->slot >= 0) {
            // A new REQ from a peer we are connected to: it lost its end of
            // that connection (its QP failed), so ours is dead too. Send over
            // the new one from now on.
            // Operations waiting for the peer over the old one never complete.
            for (tx_entry &t : e->tx)
                if (t.c == c && t.waits != tx_entry::on_wc)
                    tx_abort(e, &t, FI_ECONNRESET);
            if (c->dead_slot < 0)
                c->dead_slot = c->slot;
            else
                slot_retire(e, c->slot);
            conn_pend(e, c);
            c->slot = -1;
            c->state = conn::idle;
        }
        if (c->state == conn::failed && c->slot >= 0 && c->slot != s) {
            // The attempt that got no answer: the peer asks itself instead.
            vq::qp_attr a;
            a.state = vq::qp_state::err;
            (void)vq::modify_qp(e->slots[c->slot].qp, &a, vq::QP_ATTR_STATE);
            slot_retire(e, c->slot);
            c->slot = -1;
        }
        if (c->state == conn::idle || c->state == conn::failed) {
            // Nothing of ours: send over the accepted QP too.
            c->slot = s;
            c->state = up_state(c);
            if (c->q_head)
                conn_drain(e, c); // what waited for the old one goes on the new one
        }
        cm_msg r{};
        r.op = cm_rep;
        r.req_qpn = m.req_qpn;
        r.rep_qpn = e->slots[s].qp->qp_num;
        cm_sign(e, r);
        r.from = e->addr;
        (void)ud_send(e, c->ah, m.from.qpn, &r, offsetof(cm_msg, data));
        return;
    }
    // A reply to the current attempt, or to one that timed out (its QP kept):
    // the connection is up.
    if (m.op == cm_rep && c && c->req_qpn == m.req_qpn &&
        (c->state == conn::connecting || (c->state == conn::failed && c->slot >= 0))) {
        if (slot_connect(e, c->slot, m.from, m.rep_qpn) == 0) {
            c->eager = c->eager_quiet = c->eager_origin = false;
            conn_agree(e, c, cm_peer_flags(m));
            c->state = up_state(c);
            // The first message on the QP, before anything queued: the
            // peer's accepted QP is finished (it frees unfinished ones).
            static const std::uint8_t none = 0;
            ctl_send_own(e, c, imm_wire(w_hello, 0, 0), &none, 0);
            conn_drain(e, c); // what was accepted while it was set up, in order
        } else {
            conn_give_up(e, c, FI_ECONNREFUSED);
        }
    }
}

void conn_broken(prov_ep *e, conn *c)
{
    if (!c || c->slot < 0)
        return;
    // What waits for this peer's answer (rendezvous fin, delivery ack, an RMA
    // it executes) never gets one: fail it now. Requests with a completion of
    // their own come back flushed from the QP.
    for (tx_entry &t : e->tx)
        if (t.c == c && t.waits != tx_entry::on_wc)
            tx_abort(e, &t, FI_EHOSTUNREACH);
    ctl_forget(e, c, c->ctl.size());
    conn_fail_queued(e, c, FI_EHOSTUNREACH);
    if (e->msg_type) {
        c->state = conn::failed;
        return;
    }
    if (c->dead_slot < 0)
        c->dead_slot = c->slot;
    else
        slot_retire(e, c->slot); // one already waits for progress: this one goes now
    c->slot = -1;
    c->state = conn::idle;
    conn_pend(e, c);
}

fi_addr_t conn_src(prov_ep *e, conn *c)
{
    util::av_obj *av = e->core->av;
    if (!c || !av)
        return FI_ADDR_NOTAVAIL;
    std::size_t n = av->count.load(std::memory_order_acquire);
    if (c->src == FI_ADDR_NOTAVAIL && c->src_av_count != n) [[unlikely]] {
        c->src = util::av_reverse(av, &c->peer);
        c->src_av_count = n;
    }
    return c->src;
}

} // namespace shunt::prov::vqprov
