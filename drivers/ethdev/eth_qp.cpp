/* drivers/ethdev: queue-pair creation, state machine, destruction; the
 * per-QP progress step, in-order completion, flushing; RoCE frame building. */
#include <chrono>
#include <new>
#include <thread>

#include "crc32.h"
#include "env/log.h"
#include "env/tsc.h"
#include "eth.h"

namespace shunt::drv::ethdev {

SHUNT_LOG_COMPONENT(qp_log, "ethdev");

namespace {

using vq::qp_state;
constexpr std::uint32_t st(qp_state s) { return static_cast<std::uint32_t>(s); }

void free_qp_memory(eth_qp *q)
{
    delete[] q->sq;
    delete[] q->sq_sge;
    delete[] q->sq_inl;
    delete[] q->rx;
    delete[] q->zc;
    delete[] q->lend_buf;
    rq_free(&q->own_rq);
}

/** Drop every frame parked for @p q (the port's producer is quiet or it
 *  only adds: we take what is there). */
void rx_drain(eth_qp *q) noexcept
{
    while (rx_peek(q))
        rx_pop(q);
}

void stage_drop(eth_qp *q) noexcept
{
    for (std::uint32_t i = 0; i < q->nstage; i++)
        rte_pktmbuf_free(q->stage[i]);
    q->nstage = 0;
    q->stage_ends = 0; // their requests were not sent: flushed
    q->stuck_since = 0;
}

/** Wait (bounded) until no mbuf of the PMD still points at a zero-copy
 *  send's buffer. @return true when none does. */
bool zc_quiesce(eth_qp *q)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (;;) {
        bool busy = false;
        for (std::uint32_t i = 0; i <= q->sq_mask; i++)
            busy |= q->sq[i].zc_refs.load(std::memory_order_acquire) != 0;
        if (!busy)
            return true;
        if (std::chrono::steady_clock::now() > end)
            return false;
        port_poll(q->p); // net_ring: the peer port frees what we sent
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

/** Claim the queue pair @p q will use (port setup_lock held). */
int claim_queue(eth_qp *q)
{
    port *p = q->p;
    if (q->type == vq::qp_type::raw_packet && q->has_td) {
        // An exclusive queue pair: the ones beyond the shared queue first,
        // queue 0 itself only when nobody else uses it.
        for (std::uint16_t i = 1; i < p->nq; i++)
            if (!p->queue_owned[i]) {
                p->queue_owned[i] = 1;
                port_unowned_queues(p); // the shared path stops polling it
                q->txq = q->rxq = i;
                q->exclusive = true;
                q->tx_locked = false;
                return 0;
            }
        if (p->shared_users == 0 && !p->queue_owned[0]) {
            p->queue_owned[0] = 1;
            p->q0_owned.store(true, std::memory_order_release);
            q->txq = q->rxq = 0;
            q->exclusive = true;
            q->tx_locked = false;
            return 0;
        }
    }
    if (p->queue_owned[0]) {
        SHUNT_LOG(qp_log, info, "%s: queue 0 is owned by a RAW_PACKET QP with a thread domain", p->name.c_str());
        return -FI_EBUSY;
    }
    if (q->type == vq::qp_type::raw_packet) {
        p->rx_lock.lock();
        bool room = p->nraw < max_raw_shared;
        if (room)
            p->raw[p->nraw++] = q;
        p->rx_lock.unlock();
        if (!room)
            return -FI_ENOSPC;
    }
    p->shared_users++;
    if (q->type != vq::qp_type::raw_packet)
        p->roce_qps.fetch_add(1, std::memory_order_relaxed);
    q->txq = q->rxq = 0;
    q->exclusive = false;
    q->tx_locked = true;
    return 0;
}

void release_queue(eth_qp *q)
{
    port *p = q->p;
    if (q->exclusive) {
        p->queue_owned[q->rxq] = 0;
        if (q->rxq == 0)
            p->q0_owned.store(false, std::memory_order_release);
        else
            port_unowned_queues(p);
        return;
    }
    if (q->type != vq::qp_type::raw_packet)
        p->roce_qps.fetch_sub(1, std::memory_order_relaxed);
    if (q->type == vq::qp_type::raw_packet) {
        p->rx_lock.lock();
        for (std::uint32_t i = 0; i < p->nraw; i++)
            if (p->raw[i] == q) {
                p->raw[i] = p->raw[--p->nraw];
                break;
            }
        p->rx_lock.unlock();
    }
    p->shared_users--;
}

/** Retransmit timeout: 4.096 us x 2^timeout (IBTA 9.7.6.1.3); 0: none. */
/** Register the QP's statistics block, ethdev.<port>.qp.<QP number>. Not
 *  worth failing a QP for: without a block (telemetry off, or the registry
 *  refused) the hooks do nothing. */
void open_stats(eth_qp *q)
{
    if (int rc = q->st_blk.open("ethdev." + q->p->name + ".qp." + std::to_string(q->qp_num)))
        SHUNT_LOG(qp_log, warning, "QP %#x: no statistics block (%s)", q->qp_num, shunt::strerror(rc));
    q->st = q->st_blk.get();
    q->io = q->st ? &q->st->io : nullptr;
}

std::uint64_t timeout_of(unsigned t)
{
    if (t == 0)
        return 0;
    return env::tsc::from_ns(4096ull << (t > 31 ? 31 : t));
}

/** Clear the send and receive state (RESET, QP lock held). */
void reset_state(eth_qp *q)
{
    stage_drop(q);
    rx_drain(q);
    for (std::uint32_t i = 0; i <= q->sq_mask; i++)
        q->sq[i].state = ws_queued;
    q->sq_head = q->sq_tail = q->sq_start = q->sq_next = 0;
    q->sq_halted = false;
    q->own_rq.head.store(0);
    q->own_rq.tail.store(0);
    q->rx_has_wqe = false;
    q->lend_flushed = false;
    q->lend_in_buf = false;
    q->flush_status = vq::wc_status::wr_flush_err;
    rc_reset(q);
}

} // namespace

int create_qp(vq::pd *vp, const vq::qp_init_attr *a, vq::qp **out)
{
    eth_ctx *c = to_ctx(vp->ctx);
    port *p = c->p;
    vq::qp_cap cap = a->cap;
    if (cap.max_send_wr == 0) cap.max_send_wr = default_wr;
    if (cap.max_recv_wr == 0) cap.max_recv_wr = default_wr;
    if (cap.max_send_sge == 0) cap.max_send_sge = 1;
    if (cap.max_recv_sge == 0) cap.max_recv_sge = 1;
    if (cap.max_send_wr > max_wr || cap.max_recv_wr > max_wr || cap.max_send_sge > max_sge ||
        cap.max_recv_sge > max_sge || cap.max_inline_data > max_inline)
        return -FI_EMSGSIZE;
    auto *sc = to_cq(a->send_cq), *rc = to_cq(a->recv_cq);
    auto *q = new (std::nothrow) eth_qp;
    if (!q)
        return -FI_ENOMEM;
    cap.max_send_wr = pow2_at_least(cap.max_send_wr);
    cap.max_recv_wr = pow2_at_least(cap.max_recv_wr);
    if (cap.max_inline_data == 0)
        cap.max_inline_data = default_inline;
    q->cap = cap;
    q->type = a->type;
    q->send_ops_flags = a->send_ops_flags;
    q->has_td = a->td != nullptr;
    q->tdom = a->td;
    q->sq_sig_all = a->sq_sig_all;
    q->ctx = c;
    q->pd = vp;
    q->send_cq = sc;
    q->recv_cq = rc;
    q->srq = a->srq;
    q->c = c;
    q->p = p;
    q->scq = sc;
    q->rcq = rc;
    q->ssrq = static_cast<eth_srq *>(a->srq);
    q->sq_mask = cap.max_send_wr - 1;
    q->max_sge_cap = cap.max_send_sge;
    q->inl_stride = (cap.max_inline_data + ((a->send_ops_flags & vq::OPS_TSO) ? max_tso_hdr : 0) + 63) & ~63u;
    q->sq = new (std::nothrow) wqe[cap.max_send_wr]();
    q->sq_sge = new (std::nothrow) vq::sge[static_cast<std::size_t>(cap.max_send_wr) * cap.max_send_sge];
    q->sq_inl = new (std::nothrow) std::uint8_t[static_cast<std::size_t>(cap.max_send_wr) * q->inl_stride];
    q->rx = new (std::nothrow) rxpkt[rx_ring];
    q->rx_mask = rx_ring - 1;
    if (a->type == vq::qp_type::raw_packet && lim().zcopy_bytes)
        q->zc = new (std::nothrow) rte_mbuf_ext_shared_info[cap.max_send_wr]();
    bool ok = q->sq && q->sq_sge && q->sq_inl && q->rx &&
              (q->zc || a->type != vq::qp_type::raw_packet || !lim().zcopy_bytes);
    if (ok && a->lend_recv) {
        // Nothing is posted: the receive queue stays empty (post_recv is -FI_EINVAL).
        q->lend = true;
        q->max_lend = a->type == vq::qp_type::ud ? p->path_mtu : max_lend_msg;
        q->lend_buf = new (std::nothrow) std::uint8_t[q->max_lend];
        ok = q->lend_buf && cq_enable_lend(rc) == 0;
        cap.max_recv_wr = 1;
    }
    if (ok && !a->srq)
        ok = rq_init(&q->own_rq, cap.max_recv_wr, cap.max_recv_sge) == 0;
    if (q->lend)
        q->cap.max_recv_wr = 0;
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
    q->raw_tso_sw = !p->hw_tso;
    q->raw_csum_sw = !p->hw_csum;
    {
        std::lock_guard<std::mutex> g(p->setup_lock);
        if (sc->nqps >= max_cq_qps || rc->nqps >= max_cq_qps) {
            free_qp_memory(q);
            delete q;
            return -FI_ENOSPC;
        }
        std::uint32_t idx = max_qp;
        for (std::uint32_t k = 0; k < max_qp; k++) {
            std::uint32_t i = (p->qp_next + k) % max_qp;
            if (!p->qps[i].load(std::memory_order_relaxed)) {
                idx = i;
                break;
            }
        }
        int crc = idx == max_qp ? -FI_ENOSPC : claim_queue(q);
        if (crc < 0) {
            free_qp_memory(q);
            delete q;
            return crc;
        }
        // Round robin with a 4-bit generation: a QP number comes back only
        // after 15 x 1024 creations; the salt tells this process's numbers
        // from an earlier one's.
        std::uint32_t gen = p->qpn_gen[idx] % 15 + 1;
        p->qpn_gen[idx] = gen;
        p->qp_next = (idx + 1) % max_qp;
        q->index = idx;
        q->qp_num = (p->salt << 14) | (gen << qpn_index_bits) | idx;
        q->udp_sport = static_cast<std::uint16_t>(0xc000 | ((q->qp_num ^ (q->qp_num >> 14)) & 0x3fff));
        q->attr.state = qp_state::reset;
        install_fast_path(q);
        // Publish the QP to the port's receive path: fields above first.
        p->qps[idx].store(q, std::memory_order_release);
    }
    open_stats(q);
    {
        std::lock_guard<std::mutex> g(c->lock);
        try {
            c->qps.push_back(q);
        } catch (...) {
        }
        c->nqp++;
        static_cast<eth_pd *>(vp)->refs++;
        if (q->ssrq)
            q->ssrq->refs++;
    }
    cq_attach(sc, q);
    if (rc != sc)
        cq_attach(rc, q);
    *out = q;
    return 0;
}

int destroy_qp(vq::qp *vq_)
{
    eth_qp *q = to_qp(vq_);
    eth_ctx *c = q->c;
    port *p = q->p;
    q->state.store(st(qp_state::err));
    {
        std::lock_guard<std::mutex> g(p->setup_lock);
        p->qps[q->index].store(nullptr, std::memory_order_release);
        release_queue(q);
    }
    // No producer is inside hand_over for us once the rx lock was free after
    // the table entry went away.
    p->rx_lock.lock();
    p->rx_lock.unlock();
    cq_detach(q->scq, q);
    if (q->rcq != q->scq)
        cq_detach(q->rcq, q);
    q->lock.lock();
    rx_drain(q);
    stage_drop(q);
    q->lock.unlock();
    q->io = nullptr;
    q->st = nullptr;
    q->st_blk.close();
    bool quiet = zc_quiesce(q);
    {
        std::lock_guard<std::mutex> g(c->lock);
        for (std::size_t i = 0; i < c->qps.size(); i++)
            if (c->qps[i] == q) {
                c->qps.erase(c->qps.begin() + static_cast<std::ptrdiff_t>(i));
                break;
            }
        c->nqp--;
        static_cast<eth_pd *>(q->pd)->refs--;
        if (q->ssrq)
            q->ssrq->refs--;
    }
    if (!quiet) {
        // A PMD still holds zero-copy mbufs whose release writes into the
        // send queue: leak it rather than let that write land in freed memory.
        SHUNT_LOG(qp_log, warning, "QP %u destroyed while the PMD still holds its zero-copy buffers", q->qp_num);
        return 0;
    }
    free_qp_memory(q);
    delete q;
    return 0;
}

int modify_qp(vq::qp *vq_, const vq::qp_attr *a, unsigned mask)
{
    eth_qp *q = to_qp(vq_);
    std::lock_guard<std::mutex> g(q->c->lock);
    qp_state cur = qp_st(q);
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
    if (!ok)
        return -FI_EINVAL;
    if ((mask & vq::QP_ATTR_ACCESS_FLAGS) &&
        (a->qp_access_flags & ~(vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC |
                                vq::ACCESS_LOCAL_WRITE)))
        return -FI_EINVAL;
    if ((mask & vq::QP_ATTR_PATH_MTU) && a->path_mtu != 0 && wire::mtu_bytes(a->path_mtu) == 0)
        return -FI_EINVAL;
    if (next == qp_state::err) {
        q->lock.lock();
        qp_to_err(q);
        q->lock.unlock();
        q->attr.state = qp_state::err;
        return 0;
    }
    if (next == qp_state::reset) {
        q->lock.lock();
        q->state.store(st(qp_state::reset));
        reset_state(q);
        q->lock.unlock();
        q->attr = vq::qp_attr{};
        q->attr_set = 0;
        return 0;
    }
    bool connect = next == qp_state::rtr && cur == qp_state::init && q->type != vq::qp_type::ud &&
                   q->type != vq::qp_type::raw_packet;
    dest_hdr d{};
    if (connect) {
        if (!(mask & vq::QP_ATTR_AV) || !(mask & vq::QP_ATTR_DEST_QPN))
            return -FI_EINVAL;
        if (a->dest_qp_num > wire::psn_mask)
            return -FI_EINVAL;
        if (int rc = make_dest(q->p, a->dest, &d); rc < 0)
            return rc;
    }
    if (next == qp_state::rtr && cur == qp_state::init)
        port_wait_link(q->p);
    q->lock.lock();
    if (connect) {
        q->dest = d;
        q->dest_qpn = a->dest_qp_num;
        q->attr.dest = a->dest;
        q->attr.dest_qp_num = a->dest_qp_num;
    }
    auto take = [&](unsigned bit, auto &field, const auto &v) {
        if (mask & bit) {
            field = v;
            q->attr_set |= bit;
        }
    };
    take(vq::QP_ATTR_ACCESS_FLAGS, q->attr.qp_access_flags, a->qp_access_flags);
    take(vq::QP_ATTR_QKEY, q->attr.qkey, a->qkey);
    take(vq::QP_ATTR_TIMEOUT, q->attr.timeout, a->timeout);
    take(vq::QP_ATTR_RETRY_CNT, q->attr.retry_cnt, a->retry_cnt);
    take(vq::QP_ATTR_RNR_RETRY, q->attr.rnr_retry, a->rnr_retry);
    take(vq::QP_ATTR_SQ_PSN, q->attr.sq_psn, a->sq_psn);
    take(vq::QP_ATTR_RQ_PSN, q->attr.rq_psn, a->rq_psn);
    take(vq::QP_ATTR_PATH_MTU, q->attr.path_mtu, a->path_mtu);
    take(vq::QP_ATTR_MIN_RNR_TIMER, q->attr.min_rnr_timer, a->min_rnr_timer);
    take(vq::QP_ATTR_MAX_QP_RD_ATOMIC, q->attr.max_rd_atomic, a->max_rd_atomic);
    take(vq::QP_ATTR_MAX_DEST_RD_ATOMIC, q->attr.max_dest_rd_atomic, a->max_dest_rd_atomic);
    take(vq::QP_ATTR_PKEY_INDEX, q->attr.pkey_index, a->pkey_index);
    take(vq::QP_ATTR_PORT, q->attr.port_num, a->port_num);
    if (next == qp_state::rtr && cur == qp_state::init) {
        rc_reset(q);
        q->epsn = q->attr.rq_psn & wire::psn_mask;
        // Our RNR NAKs ask for min_rnr_timer; unset, 0.12 ms (code 7).
        q->rnr_code = (q->attr_set & vq::QP_ATTR_MIN_RNR_TIMER) ? q->attr.min_rnr_timer & 31 : 7;
    }
    if (next == qp_state::rts && cur == qp_state::rtr) {
        q->psn = q->una = q->tx_psn = q->attr.sq_psn & wire::psn_mask;
        q->tx_wqe = q->sq_next;
        // Unset: timeout 16 (268 ms), 7 retries, RNR retried for ever; set
        // explicitly, verbs' meaning (timeout 0: wait for ever). A RoCE
        // NIC's usual 14 (67 ms, about 0.5 s without progress before
        // retry_exc_err) is too short for a transport that advances only
        // when its process is scheduled and polls: on a loaded host a
        // sender or receiver descheduled for a few time slices while a
        // 64 KiB message is in flight ran out of retries. 268 ms gives
        // about 2 s without progress; a lost last packet (no NAK to
        // repair it) costs one timeout.
        // What is unset takes its default here, in attr too: query_qp
        // reports what the QP uses.
        if (!(q->attr_set & vq::QP_ATTR_TIMEOUT))
            q->attr.timeout = 16;
        q->timeout_cycles = timeout_of(q->attr.timeout);
        if (!(q->attr_set & vq::QP_ATTR_RETRY_CNT))
            q->attr.retry_cnt = 7;
        if (!(q->attr_set & vq::QP_ATTR_RNR_RETRY))
            q->attr.rnr_retry = 7;
        q->retries = q->attr.retry_cnt & 7;
        q->rnr_retries = q->attr.rnr_retry & 7;
    }
    if (mask & vq::QP_ATTR_TIMEOUT)
        q->timeout_cycles = timeout_of(q->attr.timeout);
    rc_timing(q);
    q->attr.state = next;
    q->state.store(st(next), std::memory_order_release);
    q->busy.store(true, std::memory_order_relaxed);
    q->lock.unlock();
    return 0;
}

int query_qp(vq::qp *vq_, vq::qp_attr *out)
{
    eth_qp *q = to_qp(vq_);
    std::lock_guard<std::mutex> g(q->c->lock);
    *out = q->attr;
    out->state = qp_st(q);
    return 0;
}

vq::qp_state qp_state_of(const vq::qp *vq_)
{
    return qp_st(static_cast<const eth_qp *>(vq_));
}

void qp_to_err(eth_qp *q) noexcept
{
    q->state.store(st(qp_state::err), std::memory_order_release);
    q->busy.store(true, std::memory_order_relaxed);
}

/* ---------------- Progress and completions ---------------- */

namespace {

/** How long the PMD may refuse every frame before the driver asks whether
 *  the link is down (a full queue drains in microseconds). */
constexpr std::uint64_t stuck_ns = 1000000;

/** The PMD took nothing. Past stuck_ns with the link down, the wire loses
 *  the staged frames as a NIC's does: UC, UD and RAW_PACKET requests
 *  complete (sent), RC ones are retransmitted by their timer. Rate-limited:
 *  reading the link status may be a system call. @return frames dropped. */
SHUNT_COLD std::uint32_t stage_stuck(eth_qp *q) noexcept
{
    const std::uint64_t now = env::tsc::now();
    if (!q->stuck_since) {
        q->stuck_since = now;
        return 0;
    }
    if (now - q->stuck_since < env::tsc::from_ns(stuck_ns))
        return 0;
    q->stuck_since = now;
    if (port_link_up(q->p))
        return 0;
    const std::uint32_t n = q->nstage;
    for (std::uint64_t e = q->stage_ends; e; e &= e - 1)
        q->sq[q->stage_wqe[__builtin_ctzll(e)]].state = ws_done;
    for (std::uint32_t i = 0; i < n; i++)
        rte_pktmbuf_free(q->stage[i]);
    q->stage_ends = 0;
    q->nstage = 0;
    q->p->count(c_tx_link_down, n);
    return n;
}

} // namespace

bool stage_flush(eth_qp *q) noexcept
{
    if (q->nstage == 0)
        return true;
    std::uint16_t k = port_tx(q->p, q->txq, q->tx_locked, q->stage, static_cast<std::uint16_t>(q->nstage));
    if (k == 0) [[unlikely]]
        return stage_stuck(q) != 0;
    q->stuck_since = 0;
    // Requests whose last frame the PMD took are sent.
    const std::uint64_t taken = k >= stage_max ? ~0ull : (1ull << k) - 1;
    for (std::uint64_t e = q->stage_ends & taken; e; e &= e - 1)
        q->sq[q->stage_wqe[__builtin_ctzll(e)]].state = ws_done;
    q->stage_ends = k >= stage_max ? 0 : q->stage_ends >> k;
    if (k < q->nstage) {
        std::memmove(q->stage, q->stage + k, (q->nstage - k) * sizeof(rte_mbuf *));
        std::memmove(q->stage_wqe, q->stage_wqe + k, (q->nstage - k) * sizeof(std::uint16_t));
    }
    q->nstage -= k;
    return q->nstage == 0;
}

bool push_send_wc(eth_qp *q, const wqe *w, vq::wc_status st, const eth_cq *held) noexcept
{
    cq_guard g(q->scq, held);
    eth_cq *c = q->scq;
    if (c->space() == 0)
        return false;
    static constexpr vq::wc_opcode opc[] = {
        vq::wc_opcode::send, vq::wc_opcode::send, vq::wc_opcode::send, vq::wc_opcode::send,
        vq::wc_opcode::tso, vq::wc_opcode::rdma_write, vq::wc_opcode::rdma_write,
        vq::wc_opcode::rdma_read, vq::wc_opcode::comp_swap, vq::wc_opcode::fetch_add,
        vq::wc_opcode::bind_mw, vq::wc_opcode::local_inv, vq::wc_opcode::flush,
    };
    vq::wc e{};
    e.wr_id = w->wr_id;
    e.status = st;
    e.opcode = opc[w->op <= op_flush ? w->op : 0];
    e.byte_len = w->op == op_read ? w->len : (w->op == op_cas || w->op == op_faa) ? 8 : 0;
    e.qp_num = q->qp_num;
    cq_push(c, e);
    return true;
}

namespace {
/** Statistics of a send-side request leaving the queue: counted when it
 *  succeeded (with its post-to-completion time when signalled), an error
 *  when it failed other than by a flush. */
inline void count_send(eth_qp *q, const wqe *w, vq::wc_status st) noexcept
{
    if (!q->io)
        return;
    if (st == vq::wc_status::success) {
        env::stats::on_tx(q->io, w->len);
        env::stats::on_complete(q->io, w->posted);
    } else if (st != vq::wc_status::wr_flush_err) {
        env::stats::on_error(q->io);
    }
}
} // namespace

void sq_complete_started(eth_qp *q, const eth_cq *held) noexcept
{
    while (q->sq_head != q->sq_next) {
        wqe *w = &q->sq[q->sq_head & q->sq_mask];
        if (w->state != ws_done || w->zc_refs.load(std::memory_order_acquire) != 0)
            break;
        auto st = static_cast<vq::wc_status>(w->status);
        if (((w->flags & vq::WR_SIGNALED) || st != vq::wc_status::success) && !push_send_wc(q, w, st, held))
            break; // the CQ is full: owed, retried at the next progress
        count_send(q, w, st);
        w->state = ws_queued;
        q->sq_head++;
        if (st != vq::wc_status::success && st != vq::wc_status::wr_flush_err)
            qp_to_err(q);
    }
    env::stats::on_depth(q->io, q->sq_tail - q->sq_head);
}

void qp_flush(eth_qp *q, const eth_cq *held) noexcept
{
    stage_drop(q);
    rx_drain(q);
    // Send queue: everything not complete, in order; the first flushed
    // request reports why the QP failed when that was a lost peer.
    while (q->sq_head != q->sq_tail) {
        wqe *w = &q->sq[q->sq_head & q->sq_mask];
        if (w->zc_refs.load(std::memory_order_acquire) != 0)
            return; // the PMD still reads its buffer
        vq::wc_status st = w->state == ws_done ? static_cast<vq::wc_status>(w->status) : q->flush_status;
        bool signal = (w->flags & vq::WR_SIGNALED) || st != vq::wc_status::success;
        if (signal && !push_send_wc(q, w, st, held))
            return;
        count_send(q, w, st);
        if (w->state != ws_done)
            q->flush_status = vq::wc_status::wr_flush_err;
        w->state = ws_queued;
        q->sq_head++;
    }
    q->sq_next = q->sq_head;
    // Receives: the one in progress, then every posted one (not the SRQ's).
    cq_guard g(q->rcq, held);
    eth_cq *c = q->rcq;
    vq::wc e{};
    e.status = vq::wc_status::wr_flush_err;
    e.opcode = vq::wc_opcode::recv;
    e.qp_num = q->qp_num;
    if (q->rx_has_wqe) {
        if (c->space() == 0)
            return;
        e.wr_id = q->rx_wc.wr_id;
        cq_push(c, e);
        q->rx_has_wqe = false;
    }
    if (q->lend) {
        // One flush tells the consumer of lent receives that the QP is gone.
        if (!q->lend_flushed && c->space()) {
            cq_push(c, e);
            q->lend_flushed = true;
        }
        return;
    }
    if (q->ssrq)
        return;
    recvq *rq = q->rq;
    while (c->space()) {
        std::uint32_t h = rq->head.load(std::memory_order_relaxed);
        if (h == rq->tail.load(std::memory_order_acquire))
            break;
        e.wr_id = rq->wqe[h & rq->mask].wr_id;
        rq->head.store(h + 1, std::memory_order_release);
        cq_push(c, e);
    }
}

void qp_progress(eth_qp *q, const eth_cq *held) noexcept
{
    // seq_cst: a full barrier between clearing busy and looking at the work
    // (rx ring, queues), pairing with producers that publish work, then set busy.
    q->busy.exchange(false, std::memory_order_seq_cst);
    qp_state s = qp_st(q);
    if (s == qp_state::err) {
        qp_flush(q, held);
        bool left = q->sq_head != q->sq_tail || q->rx_has_wqe ||
                    (!q->ssrq && q->rq->head.load(std::memory_order_relaxed) !=
                                     q->rq->tail.load(std::memory_order_relaxed));
        if (left)
            q->busy.store(true, std::memory_order_relaxed);
        return;
    }
    if (s < qp_state::rtr) {
        rx_drain(q); // RESET/INIT: nothing is received
        return;
    }
    switch (q->type) {
    case vq::qp_type::raw_packet:
        raw_rx(q, held);
        if (s == qp_state::rts)
            raw_tx(q, held);
        break;
    case vq::qp_type::ud:
        ud_rx(q, held);
        if (s == qp_state::rts)
            ud_tx(q, held);
        break;
    default:
        rc_rx(q, held);
        if (s == qp_state::rts) {
            if (rc_tx_due(q))
                rc_tx(q, held);
            rc_timers(q, held);
        }
        break;
    }
    stage_flush(q);
    if (qp_st(q) == qp_state::err) {
        q->busy.store(true, std::memory_order_relaxed);
        return;
    }
    sq_complete(q, held);
    bool left = q->sq_head != q->sq_tail || q->nstage || rx_peek(q) || q->ack_due || q->ack_deadline ||
                q->resp_head != q->resp_tail;
    if (left)
        q->busy.store(true, std::memory_order_relaxed);
}

/* ---------------- RoCE frames ---------------- */

bool roce_alloc(eth_qp *q, const dest_hdr &d, std::uint32_t ext, std::uint32_t payload, roce_frame *f) noexcept
{
    rte_mbuf *m = mbuf_get(q->p);
    if (!m) [[unlikely]]
        return false;
    std::uint32_t pad = (4 - (payload & 3)) & 3;
    std::uint32_t total = static_cast<std::uint32_t>(wire::bth_off + wire::bth_len) + ext + payload + pad +
                          static_cast<std::uint32_t>(wire::icrc_len);
    auto *b = reinterpret_cast<std::uint8_t *>(rte_pktmbuf_append(m, static_cast<std::uint16_t>(total)));
    if (!b) [[unlikely]] {
        rte_pktmbuf_free(m);
        return false;
    }
    std::memcpy(b, d.b, wire::bth_off);
    f->m = m;
    f->ip_sum = d.ip_sum;
    f->bth = b + wire::bth_off;
    f->ext = f->bth + wire::bth_len;
    f->payload = f->ext + ext;
    return true;
}

void roce_finish(eth_qp *q, roce_frame &f, std::uint32_t ext, std::uint32_t payload) noexcept
{
    std::uint32_t pad = (4 - (payload & 3)) & 3;
    std::uint8_t *ip = f.bth - wire::udp_len - wire::ip_len;
    std::uint32_t tot = static_cast<std::uint32_t>(wire::ip_len + wire::udp_len + wire::bth_len) + ext + payload +
                        pad + static_cast<std::uint32_t>(wire::icrc_len);
    const std::uint16_t id = q->ip_id++;
    wire::st16(ip + 2, static_cast<std::uint16_t>(tot));
    wire::st16(ip + 4, id);
    // From the template's sum: a read of the header just stored here would
    // wait for those stores (no forwarding into a wider load).
    const std::uint16_t c = wire::ip_csum_of(f.ip_sum, static_cast<std::uint16_t>(tot), id);
    std::memcpy(ip + 10, &c, 2);
    std::uint8_t *udp = ip + wire::ip_len;
    wire::st16(udp, q->udp_sport);
    wire::st16(udp + 4, static_cast<std::uint16_t>(tot - wire::ip_len));
    f.bth[1] = static_cast<std::uint8_t>((f.bth[1] & ~0x30) | (pad << 4));
    std::uint8_t *end = f.payload + payload;
    for (std::uint32_t i = 0; i < pad; i++)
        end[i] = 0;
    // f.ext follows the 40 header bytes at ip in the same buffer.
    icrc_store(end + pad, icrc_packet(ip, ext + payload + pad));
}

} // namespace shunt::drv::ethdev
