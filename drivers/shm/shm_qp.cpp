/* drivers/shm: queue-pair creation, state machine and destruction. */
#include <unistd.h>

#include <new>

#include "env/log.h"
#include "env/tsc.h"
#include "shm_post.h"

namespace shunt::drv::shm {

SHUNT_LOG_COMPONENT(shm_qp_log, "shm");

namespace {

using vq::qp_state;

constexpr std::uint32_t st(qp_state s) { return static_cast<std::uint32_t>(s); }

std::uint32_t pow2_at_least(std::uint32_t v)
{
    std::uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

void free_qp_memory(shm_qp *q)
{
    delete[] q->sq;
    delete[] q->sq_sge;
    delete[] q->sq_inl;
    delete[] q->stage;
    delete[] q->dests;
    delete[] q->dest_hash;
    delete[] q->ud_rx_head;
    delete[] q->ud_rx_pub;
    delete[] q->lend_bounce;
    rq_free(&q->own_rq);
}

/** Zero our ring(s) and the local positions (QP created or back to RESET). */
void reset_rings(shm_qp *q)
{
    std::memset(q->sctx->self.base + q->ring_mem, 0, q->ring_bytes);
    // Stamp every ring with a new epoch (goodbyes must name it): senders of
    // our last connection, and their late goodbyes, are strangers now.
    q->ring_epoch = ring_epoch_of(q->qp_num, q->ring_epoch);
    std::uint32_t nr = q->type == vq::qp_type::ud ? q->ud_nrings : 1;
    std::size_t stride = nr > 1 ? q->ring_bytes / nr : 0;
    for (std::uint32_t i = 0; i < nr; i++)
        reinterpret_cast<ring_ctrl *>(q->sctx->self.base + q->ring_mem + i * stride)
            ->epoch.store(q->ring_epoch, std::memory_order_release);
    q->rx_head = q->rx_published = 0;
    q->rx_busy = false;
    q->lend_flushed = false;
    q->lend_bounce_used = false;
    q->rx_violated = false;
    q->violation_logged = false;
    if (q->ud_rx_head) {
        std::memset(q->ud_rx_head, 0, 64 * sizeof(std::uint32_t));
        std::memset(q->ud_rx_pub, 0, 64 * sizeof(std::uint32_t));
    }
    q->desc->ud_active.store(0, std::memory_order_relaxed);
}

/** Cut the link to the peer (context lock held). */
void disconnect(shm_qp *q)
{
    // UD: give back the rings we claimed at our destinations, and our
    // references to their contexts (taken when each destination was added).
    for (std::uint32_t i = 0; i < q->ndests; i++) {
        if (q->dests[i].ctrl && !q->dests[i].failed)
            say_gone(q->dests[i].ctrl, q->dests[i].epoch);
        peer_put(q->sctx, q->dests[i].p);
    }
    q->ndests = 0;
    q->last_dest = 0;
    if (q->dest_hash)
        std::memset(q->dest_hash, 0, ud_dest_hash * sizeof(std::uint16_t));
    if (q->tx_ctrl)
        say_gone(q->tx_ctrl, q->tx_epoch);
    q->tx_ctrl = nullptr;
    q->tx_slots = nullptr;
    if (q->rpeer)
        peer_put(q->sctx, q->rpeer);
    q->rpeer = nullptr;
    q->rdesc = nullptr;
}

std::uint32_t rings_of(const shm_qp *q) { return q->type == vq::qp_type::ud ? q->ud_nrings : 1; }

/** Our ring memory is no longer ours to receive in (context lock held):
 *  free it when no sender can write into it any more, else park it. */
void retire_rings(shm_qp *q, bool hold_index)
{
    shm_ctx *c = q->sctx;
    shm_ctx::zombie z{q->ring_mem, q->ring_bytes, q->index, q->ring_epoch, rings_of(q), hold_index};
    bool entering = q->desc->entering.load(std::memory_order_seq_cst) != 0;
    if (!entering && rings_quiet(c, z.off, z.bytes, z.nrings, z.epoch)) {
        heap_free(c, z.off, z.bytes);
        return;
    }
    try {
        c->zombies.push_back(z);
    } catch (...) {
        return; // leaks the memory rather than risk reuse
    }
    if (hold_index)
        c->qp_held[q->index] = 1;
}

void cq_add(shm_cq *c, shm_qp **list, std::uint32_t *n, shm_qp *q)
{
    if (!c->single_threaded)
        c->lock.lock();
    list[(*n)++] = q;
    if (!c->single_threaded)
        c->lock.unlock();
}

void cq_remove(shm_cq *c, shm_qp **list, std::uint32_t *n, shm_qp *q)
{
    if (!c->single_threaded)
        c->lock.lock();
    for (std::uint32_t i = 0; i < *n; i++)
        if (list[i] == q) {
            list[i] = list[--*n];
            break;
        }
    if (!c->single_threaded)
        c->lock.unlock();
}

/** Register the QP's statistics block, shm.qp.<QP number>. Statistics are
 *  not worth failing a QP for: without a block (telemetry off, or the
 *  registry refused) the hooks do nothing. */
const env::stats::field split_fields[] = {
    SHUNT_STATS_FIELD(split_stats, offered, counter, none,
                      "RDMA reads of this QP split with the peer (SHUNT_SHM_SPLIT_BYTES)"),
    SHUNT_STATS_FIELD(split_stats, peer_copied, counter, none, "of those, second parts the peer copied"),
    SHUNT_STATS_FIELD(split_stats, copied, counter, none, "second parts of the peer's split reads this QP copied"),
};
const env::stats::schema split_schema{"shm.split", split_fields, 3};

void open_stats(shm_qp *q)
{
    const std::string name = "shm.qp." + std::to_string(q->qp_num);
    if (int rc = q->io_blk.open(name))
        SHUNT_LOG(shm_qp_log, warning, "QP %#x: no statistics block (%s)", q->qp_num, shunt::strerror(rc));
    q->io = q->io_blk.get();
    if (q->type != vq::qp_type::rc || !env::stats::enabled())
        return;
    if (int rc = q->split_reg.open(name + ".split", split_schema, &q->split_st))
        SHUNT_LOG(shm_qp_log, warning, "QP %#x: no split-read statistics (%s)", q->qp_num, shunt::strerror(rc));
}
} // namespace

int create_qp(vq::pd *vp, const vq::qp_init_attr *a, vq::qp **out)
{
    shm_ctx *c = to_ctx(vp->ctx);
    const limits &l = lim();
    vq::qp_cap cap = a->cap;
    if (cap.max_send_wr == 0) cap.max_send_wr = default_wr;
    if (cap.max_recv_wr == 0) cap.max_recv_wr = default_wr;
    if (cap.max_send_sge == 0) cap.max_send_sge = 1;
    if (cap.max_recv_sge == 0) cap.max_recv_sge = 1;
    if (cap.max_send_wr > max_wr || cap.max_recv_wr > max_wr || cap.max_send_sge > max_sge ||
        cap.max_recv_sge > max_sge_rx || cap.max_inline_data > max_inline)
        return -FI_EMSGSIZE;
    if (a->type != vq::qp_type::rc && a->type != vq::qp_type::uc && a->type != vq::qp_type::ud)
        return -FI_EOPNOTSUPP;
    auto *sc = to_cq(a->send_cq), *rc = to_cq(a->recv_cq);
    auto *q = new (std::nothrow) shm_qp;
    if (!q)
        return -FI_ENOMEM;
    cap.max_send_wr = pow2_at_least(cap.max_send_wr);
    cap.max_recv_wr = pow2_at_least(cap.max_recv_wr);
    if (cap.max_inline_data == 0 && !(a->send_ops_flags & vq::OPS_TSO))
        cap.max_inline_data = default_inline;
    q->cap = cap;
    q->type = a->type;
    q->send_ops_flags = a->send_ops_flags;
    q->has_td = a->td != nullptr;
    q->td = a->td;
    q->sq_sig_all = a->sq_sig_all;
    q->ctx = c;
    q->pd = vp;
    q->send_cq = sc;
    q->recv_cq = rc;
    q->srq = a->srq;
    q->sctx = c;
    q->scq = sc;
    q->rcq = rc;
    q->ssrq = static_cast<shm_srq *>(a->srq);
    q->sq_mask = cap.max_send_wr - 1;
    q->max_sge_cap = cap.max_send_sge;
    q->inl_stride = (cap.max_inline_data + ((a->send_ops_flags & vq::OPS_TSO) ? max_tso_hdr : 0) + 63) & ~63u;
    if (q->inl_stride == 0)
        q->inl_stride = 64;
    bool ud = a->type == vq::qp_type::ud;
    bool ok = true;
    q->sq = new (std::nothrow) wqe[cap.max_send_wr];
    q->sq_sge = new (std::nothrow) vq::sge[static_cast<std::size_t>(cap.max_send_wr) * cap.max_send_sge];
    q->sq_inl = new (std::nothrow) std::uint8_t[static_cast<std::size_t>(cap.max_send_wr) * q->inl_stride];
    ok = q->sq && q->sq_sge && q->sq_inl;
    if (ok && ud) {
        q->stage = new (std::nothrow) std::uint8_t[ud_mtu + max_tso_hdr];
        q->dests = new (std::nothrow) ud_dest[max_ud_dests];
        q->dest_hash = new (std::nothrow) std::uint16_t[ud_dest_hash]();
        q->ud_rx_head = new (std::nothrow) std::uint32_t[64]();
        q->ud_rx_pub = new (std::nothrow) std::uint32_t[64]();
        ok = q->stage && q->dests && q->dest_hash && q->ud_rx_head && q->ud_rx_pub;
    }
    if (ok && a->lend_recv) {
        // Lent receives: nothing is posted; a message that wraps around the
        // ring's end is lent from a bounce buffer of the largest message.
        q->lend = true;
        q->max_lend = ud ? ud_mtu : max_chunk_bytes(l.ring_slots);
        q->lend_bounce = new (std::nothrow) std::uint8_t[q->max_lend];
        ok = q->lend_bounce != nullptr;
        cap.max_recv_wr = 1; // a placeholder queue: post_recv is refused
        cap.max_recv_sge = 1;
    }
    if (ok && !a->srq)
        ok = rq_init(&q->own_rq, cap.max_recv_wr, cap.max_recv_sge) == 0;
    if (!ok) {
        free_qp_memory(q);
        delete q;
        return -FI_ENOMEM;
    }
    q->rq = a->srq ? &q->ssrq->rq : &q->own_rq;
    if (a->srq) {
        q->cap.max_recv_wr = 0;
        q->cap.max_recv_sge = q->ssrq->max_sge;
    }
    if (q->lend)
        q->cap.max_recv_wr = q->cap.max_recv_sge = 0;

    std::lock_guard<std::mutex> g(c->lock);
    if (sc->ntx >= max_cq_qps || rc->nrx >= max_cq_qps) {
        free_qp_memory(q);
        delete q;
        return -FI_ENOSPC;
    }
    reclaim_rings(c);
    // Round robin: a QP number (index + 4-bit generation) comes back only
    // after 15 x max_qp creations.
    auto nq = static_cast<std::uint32_t>(c->qp_obj.size());
    std::uint32_t idx = nq;
    for (std::uint32_t k = 0; k < nq; k++) {
        std::uint32_t i = (c->qp_next + k) % nq;
        if (!c->qp_obj[i] && !c->qp_held[i]) {
            idx = i;
            break;
        }
    }
    if (idx == nq) {
        free_qp_memory(q);
        delete q;
        return -FI_ENOSPC;
    }
    std::uint32_t slots = ud ? l.ud_ring_slots : l.ring_slots;
    std::uint64_t bytes = ud ? ring_bytes(slots) * l.ud_rings : ring_bytes(slots);
    std::uint64_t off = heap_alloc(c, bytes);
    if (off == no_seg_off) {
        free_qp_memory(q);
        delete q;
        return -FI_ENOMEM;
    }
    qp_desc *d = &c->self.qps()[idx];
    std::uint32_t gen = qpn_gen(d->qpn) % ((1u << qpn_gen_bits) - 1) + 1; // 1..15
    c->qp_next = (idx + 1) % nq;
    q->index = idx;
    q->qp_num = (c->ctx_id << (qpn_index_bits + qpn_gen_bits)) | (gen << qpn_index_bits) | idx;
    q->desc = d;
    q->ring_mem = off;
    q->ring_bytes = bytes;
    d->qpn = q->qp_num;
    d->type = static_cast<std::uint32_t>(a->type);
    d->qkey = 0;
    d->access = q->attr.qp_access_flags;
    d->flags = q->lend ? desc_lend : 0;
    if (ud) {
        d->ring_off = 0;
        d->ring_slots = 0;
        d->ud_rings_off = off;
        d->ud_nrings = l.ud_rings;
        d->ud_ring_slots = slots;
        q->ud_nrings = l.ud_rings;
        q->ud_ring_slots = slots;
    } else {
        d->ring_off = off;
        d->ring_slots = slots;
        d->ud_rings_off = 0;
        d->ud_nrings = 0;
        d->ud_ring_slots = 0;
        q->rx_ctrl = reinterpret_cast<ring_ctrl *>(c->self.base + off);
        q->rx_slots = reinterpret_cast<slot *>(c->self.base + off + sizeof(ring_ctrl));
        q->rx_mask = slots - 1;
    }
    static std::atomic<std::uint32_t> sender_counter{0};
    q->ud_id = (static_cast<std::uint64_t>(getpid()) << 32) | (sender_counter.fetch_add(1) + 1);
    reset_rings(q);
    d->rndv_acked.store(0, std::memory_order_relaxed);
    d->rndv_nak.store(0, std::memory_order_relaxed);
    d->split_claim.store(split_word(0, split_taken_back), std::memory_order_relaxed);
    // Publish the descriptor to peers: fields above first.
    d->state.store(st(qp_state::reset), std::memory_order_release);
    q->attr.state = qp_state::reset;
    install_fast_path(q);
    install_poll_lent(q);
    c->qp_obj[idx] = q;
    c->nqp++;
    static_cast<shm_pd *>(vp)->refs++;
    if (q->ssrq)
        q->ssrq->refs++;
    cq_add(sc, sc->tx, &sc->ntx, q);
    cq_add(rc, rc->rx, &rc->nrx, q);
    (void)env::tsc::hz(); // calibrate now, not on the first blocked send
    open_stats(q);
    *out = q;
    return 0;
}

int destroy_qp(vq::qp *vq_)
{
    shm_qp *q = to_qp(vq_);
    shm_ctx *c = q->sctx;
    qp_to_err(q);
    split_settle(q);
    cq_remove(q->scq, q->scq->tx, &q->scq->ntx, q);
    cq_remove(q->rcq, q->rcq->rx, &q->rcq->nrx, q);
    std::lock_guard<std::mutex> g(c->lock);
    disconnect(q);
    // seq_cst: a claimer re-checks the descriptor after its owner CAS.
    q->desc->state.store(desc_free, std::memory_order_seq_cst);
    // A peer that has not noticed yet may still write into our ring(s): the
    // memory and the descriptor index are held until every sender said
    // goodbye, released its claim or died (see the driver guide, "Reuse").
    retire_rings(q, true);
    c->qp_obj[q->index] = nullptr;
    c->nqp--;
    static_cast<shm_pd *>(q->pd)->refs--;
    if (q->ssrq)
        q->ssrq->refs--;
    free_qp_memory(q);
    delete q;
    return 0;
}

namespace {

/** The descriptor of peer QP @p qpn of type @p type at @p dest, and a
 *  reference to its peer (context lock held). @return 0 (peer_put @p p
 *  when done); -FI_ENOENT no such context or QP; -FI_EINVAL malformed, or
 *  a QP of another type; what peer_get returns. */
int dest_lookup(shm_ctx *c, const vq::dev_addr &dest, std::uint32_t qpn, vq::qp_type type, peer *&p, qp_desc *&rd)
{
    if (int rc = peer_get(c, dest, &p); rc < 0)
        return rc;
    std::uint32_t idx = qpn_index(qpn);
    rd = idx < p->max_qp ? &p->qps()[idx] : nullptr;
    if (!rd || rd->state.load(std::memory_order_acquire) == desc_free || rd->qpn != qpn) {
        peer_put(c, p);
        return -FI_ENOENT;
    }
    if (rd->type != static_cast<std::uint32_t>(type)) {
        peer_put(c, p);
        return -FI_EINVAL;
    }
    return 0;
}

} // namespace

int check_dest_qp(vq::context *vc, const vq::qp_addr *dest, vq::qp_type type)
{
    shm_ctx *c = to_ctx(vc);
    std::lock_guard<std::mutex> g(c->lock);
    peer *p = nullptr;
    qp_desc *rd = nullptr;
    if (int rc = dest_lookup(c, dest->dev, dest->qpn, type, p, rd); rc < 0)
        return rc;
    // Only a look at its ring's owner word, where RTR would claim it: the
    // ring must be one this driver could have made, inside the peer's heap,
    // before it is read. No claim, so no announcement (entering) either.
    const std::uint64_t roff = std::atomic_ref<std::uint64_t>(rd->ring_off).load(std::memory_order_acquire);
    const std::uint32_t rslots = rd->ring_slots;
    int rc = 0;
    if (!ring_slots_ok(rslots) || (roff & 63) != 0 || !p->in_heap(roff, ring_bytes(rslots)))
        rc = -FI_EINVAL;
    else if (reinterpret_cast<ring_ctrl *>(p->base + roff)->owner.load(std::memory_order_acquire) != 0)
        rc = -FI_EBUSY;
    peer_put(c, p);
    return rc;
}

int modify_qp(vq::qp *vq_, const vq::qp_attr *a, unsigned mask)
{
    shm_qp *q = to_qp(vq_);
    shm_ctx *c = q->sctx;
    std::lock_guard<std::mutex> g(c->lock);
    qp_state cur = static_cast<qp_state>(q->state.load());
    qp_state next = (mask & vq::QP_ATTR_STATE) ? a->state : cur;
    bool ok;
    switch (next) {
    case qp_state::reset:
    case qp_state::err:
        ok = true;
        break;
    case qp_state::init:
        ok = cur == qp_state::reset || cur == qp_state::init;
        break;
    case qp_state::rtr:
        ok = cur == qp_state::init || (cur == qp_state::rtr && !(mask & vq::QP_ATTR_STATE));
        break;
    case qp_state::rts:
        ok = cur == qp_state::rtr || cur == qp_state::rts;
        break;
    default:
        ok = false;
    }
    if (!ok) {
        SHUNT_LOG(shm_qp_log, info, "modify_qp: %u -> %u not allowed", static_cast<unsigned>(cur),
                  static_cast<unsigned>(next));
        return -FI_EINVAL;
    }
    if ((mask & vq::QP_ATTR_ACCESS_FLAGS) &&
        (a->qp_access_flags & ~(vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC |
                                vq::ACCESS_LOCAL_WRITE)))
        return -FI_EINVAL;
    if (next == qp_state::err) {
        qp_to_err(q);
        q->attr.state = qp_state::err;
        return 0;
    }
    if (next == qp_state::reset) {
        if (cur != qp_state::reset) {
            // A sender may still write into our ring(s): receive in fresh
            // memory and park the old (see retire_rings).
            std::uint64_t fresh = q->ring_mem;
            if (q->desc->entering.load(std::memory_order_seq_cst) != 0 ||
                !rings_quiet(c, q->ring_mem, q->ring_bytes, rings_of(q), q->ring_epoch)) {
                reclaim_rings(c);
                fresh = heap_alloc(c, q->ring_bytes);
                if (fresh == no_seg_off)
                    return -FI_ENOMEM;
            }
            qp_to_err(q);
            split_settle(q);
            disconnect(q);
            q->sq_head = q->sq_tail = q->sq_start = q->sq_exec = 0;
            q->own_rq.head.store(0);
            q->own_rq.tail.store(0);
            if (fresh != q->ring_mem) {
                retire_rings(q, false);
                q->ring_mem = fresh;
                if (q->type == vq::qp_type::ud) {
                    std::atomic_ref<std::uint64_t>(q->desc->ud_rings_off).store(fresh, std::memory_order_seq_cst);
                } else {
                    std::atomic_ref<std::uint64_t>(q->desc->ring_off).store(fresh, std::memory_order_seq_cst);
                    q->rx_ctrl = reinterpret_cast<ring_ctrl *>(c->self.base + fresh);
                    q->rx_slots = reinterpret_cast<slot *>(c->self.base + fresh + sizeof(ring_ctrl));
                }
            }
            reset_rings(q);
            q->desc->rndv_acked.store(0, std::memory_order_relaxed);
            q->desc->rndv_nak.store(0, std::memory_order_relaxed);
            q->desc->split_claim.store(split_word(0, split_taken_back), std::memory_order_relaxed);
            q->rndv_posted = 0;
            q->ndests = 0;
            if (q->dest_hash)
                std::memset(q->dest_hash, 0, ud_dest_hash * sizeof(std::uint16_t));
            q->peer_died.store(false, std::memory_order_relaxed);
            q->rx_drain.store(false, std::memory_order_relaxed);
            q->sq_busy.store(false, std::memory_order_relaxed);
            q->blocked_since = 0;
            q->desc->state.store(st(qp_state::reset), std::memory_order_release);
            q->state.store(st(qp_state::reset));
        }
        q->attr.state = qp_state::reset;
        return 0;
    }
    if (next == qp_state::rtr && cur == qp_state::init && q->type != vq::qp_type::ud) {
        if (!(mask & vq::QP_ATTR_AV) || !(mask & vq::QP_ATTR_DEST_QPN))
            return -FI_EINVAL;
        peer *p = nullptr;
        qp_desc *rd = nullptr;
        if (int rc = dest_lookup(c, a->dest, a->dest_qp_num, q->type, p, rd); rc < 0)
            return rc;
        // Claim the peer's ring: announce ourselves (entering), read where it
        // is, CAS its owner word, re-check the descriptor. The owner of the
        // ring does not reuse its memory while we are counted or our claim
        // stands (see the driver guide, "Reuse").
        rd->entering.fetch_add(1, std::memory_order_seq_cst);
        std::uint64_t roff = std::atomic_ref<std::uint64_t>(rd->ring_off).load(std::memory_order_seq_cst);
        // The peer wrote its descriptor: the ring must be one this driver
        // could have made, inside the peer's heap, before anything touches it.
        const std::uint32_t rslots = rd->ring_slots;
        if (!ring_slots_ok(rslots) || (roff & 63) != 0 || !p->in_heap(roff, ring_bytes(rslots))) [[unlikely]] {
            rd->entering.fetch_sub(1, std::memory_order_release);
            peer_put(c, p);
            SHUNT_LOG(shm_qp_log, warning,
                      "modify_qp: peer QP %#x describes a ring outside its segment (offset %#llx, %u slots): "
                      "refused",
                      a->dest_qp_num, static_cast<unsigned long long>(roff), rslots);
            return -FI_EINVAL;
        }
        auto *ctrl = reinterpret_cast<ring_ctrl *>(p->base + roff);
        std::uint64_t prev = 0;
        bool claimed = ctrl->owner.compare_exchange_strong(prev, q->ud_id, std::memory_order_seq_cst) ||
                       prev == q->ud_id; // our own earlier connection (reconnect without the peer's reset)
        bool same = rd->state.load(std::memory_order_seq_cst) != desc_free && rd->qpn == a->dest_qp_num &&
                    std::atomic_ref<std::uint64_t>(rd->ring_off).load(std::memory_order_seq_cst) == roff;
        if (claimed && !same)
            ctrl->owner.store(0, std::memory_order_seq_cst);
        rd->entering.fetch_sub(1, std::memory_order_release);
        if (!claimed || !same) {
            peer_put(c, p);
            return !claimed ? -FI_EBUSY : -FI_ENOENT;
        }
        q->rpeer = p;
        q->rdesc = rd;
        q->dest_qpn = a->dest_qp_num;
        q->tx_ctrl = ctrl;
        q->tx_epoch = ctrl->epoch.load(std::memory_order_acquire);
        q->tx_slots = reinterpret_cast<slot *>(p->base + roff + sizeof(ring_ctrl));
        q->tx_mask = rslots - 1;
        q->peer_lends = (rd->flags & desc_lend) != 0;
        q->tx_tail = 0;
        q->tx_credit_head = 0;
        q->attr.dest = a->dest;
        q->attr.dest_qp_num = a->dest_qp_num;
    }
    if (mask & vq::QP_ATTR_ACCESS_FLAGS) {
        q->attr.qp_access_flags = a->qp_access_flags;
        q->desc->access = a->qp_access_flags;
    }
    if (mask & vq::QP_ATTR_QKEY) {
        q->attr.qkey = a->qkey;
        q->desc->qkey = a->qkey;
    }
    if (mask & vq::QP_ATTR_TIMEOUT) q->attr.timeout = a->timeout;
    if (mask & vq::QP_ATTR_RETRY_CNT) q->attr.retry_cnt = a->retry_cnt;
    if (mask & vq::QP_ATTR_RNR_RETRY) q->attr.rnr_retry = a->rnr_retry;
    if (mask & vq::QP_ATTR_SQ_PSN) q->attr.sq_psn = a->sq_psn;
    if (mask & vq::QP_ATTR_RQ_PSN) q->attr.rq_psn = a->rq_psn;
    if (mask & vq::QP_ATTR_PATH_MTU) q->attr.path_mtu = a->path_mtu;
    if (mask & vq::QP_ATTR_MIN_RNR_TIMER) q->attr.min_rnr_timer = a->min_rnr_timer;
    if (mask & vq::QP_ATTR_MAX_QP_RD_ATOMIC) q->attr.max_rd_atomic = a->max_rd_atomic;
    if (mask & vq::QP_ATTR_MAX_DEST_RD_ATOMIC) q->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
    if (mask & vq::QP_ATTR_PKEY_INDEX) q->attr.pkey_index = a->pkey_index;
    if (mask & vq::QP_ATTR_PORT) q->attr.port_num = a->port_num;
    q->attr.state = next;
    q->desc->state.store(st(next), std::memory_order_release);
    q->state.store(st(next), std::memory_order_release);
    return 0;
}

int query_qp(vq::qp *vq_, vq::qp_attr *out)
{
    shm_qp *q = to_qp(vq_);
    std::lock_guard<std::mutex> g(q->sctx->lock);
    *out = q->attr;
    out->state = static_cast<qp_state>(q->state.load());
    return 0;
}

vq::qp_state qp_state_of(const vq::qp *vq_)
{
    return static_cast<qp_state>(static_cast<const shm_qp *>(vq_)->state.load(std::memory_order_relaxed));
}

} // namespace shunt::drv::shm
