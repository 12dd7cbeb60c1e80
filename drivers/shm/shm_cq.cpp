/* drivers/shm: completion queues (polling drives progress), SRQs, and the
 * periodic dead-peer check. */
#include <signal.h>

#include <cerrno>
#include <new>

#include "env/tsc.h"
#include "shm.h"

namespace shunt::drv::shm {

namespace {

std::uint32_t pow2_at_least(std::uint32_t v)
{
    std::uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

/** Make progress on the QPs of @p c until about @p want completions are ready. */
void progress(shm_cq *c, unsigned want) noexcept
{
    for (std::uint32_t i = 0; i < c->ntx; i++) {
        shm_qp *q = c->tx[i];
        if (!q->sq_busy.load(std::memory_order_relaxed))
            continue;
        if (q->has_td) {
            sq_progress(q, true);
        } else if (q->lock.try_lock()) {
            sq_progress(q, true);
            q->lock.unlock();
        }
    }
    for (std::uint32_t i = 0; i < c->nrx; i++) {
        std::uint32_t sp = c->space();
        if (!sp)
            break;
        rx_progress(c->rx[i], want < sp ? want : sp);
    }
}

/** Every poll, empty or not (a QP kept busy against a dead peer's segment
 *  memory sees nothing but successes): every 64th looks at the TSC, and once
 *  the deadline has passed the peers are checked. */
inline void peer_check_tick(shm_cq *c) noexcept
{
    if (++c->idle < 64) [[likely]]
        return;
    c->idle = 0;
    std::uint64_t now = env::tsc::now();
    if (now < c->next_check)
        return;
    c->next_check = now + peer_check_cycles();
    cq_check_peers(c);
}

template <bool Locked>
int poll(vq::cq *vc, int n, vq::wc *out) noexcept
{
    shm_cq *c = to_cq(vc);
    if (n <= 0 || !out) [[unlikely]]
        return n < 0 || (n > 0 && !out) ? -FI_EINVAL : 0;
    if constexpr (Locked)
        c->lock.lock();
    if (c->tail == c->head) {
        // Nothing queued: progress with the caller's array as the output.
        c->direct = out;
        c->direct_cap = static_cast<std::uint32_t>(n);
        c->direct_n = 0;
        progress(c, static_cast<unsigned>(n));
        std::uint32_t got = c->direct_n;
        c->direct_cap = c->direct_n = 0;
        c->direct = nullptr;
        if (got) {
            peer_check_tick(c);
            if constexpr (Locked)
                c->lock.unlock();
            return static_cast<int>(got);
        }
    }
    std::uint32_t avail = c->tail - c->head;
    std::uint32_t k = avail < static_cast<std::uint32_t>(n) ? avail : static_cast<std::uint32_t>(n);
    for (std::uint32_t i = 0; i < k; i++)
        out[i] = c->ring[(c->head + i) & c->mask];
    c->head += k;
    peer_check_tick(c);
    if constexpr (Locked)
        c->lock.unlock();
    return static_cast<int>(k);
}

inline void set_current(shm_cq *c) noexcept
{
    const vq::wc &w = c->ring[c->head & c->mask];
    c->wr_id = w.wr_id;
    c->status = w.status;
}

template <bool Locked>
int start_poll(vq::cq *vc) noexcept
{
    shm_cq *c = to_cq(vc);
    if constexpr (Locked)
        c->lock.lock();
    if (c->tail == c->head)
        progress(c, 64);
    peer_check_tick(c);
    if (c->tail == c->head) {
        if constexpr (Locked)
            c->lock.unlock();
        return -FI_EAGAIN;
    }
    c->cur = 1;
    set_current(c);
    return 0;
}

int next_poll(vq::cq *vc) noexcept
{
    shm_cq *c = to_cq(vc);
    if (c->cur) {
        c->head++;
        c->cur = 0;
    }
    if (c->tail == c->head)
        progress(c, 64);
    if (c->tail == c->head)
        return -FI_EAGAIN;
    c->cur = 1;
    set_current(c);
    return 0;
}

template <bool Locked>
void end_poll(vq::cq *vc) noexcept
{
    shm_cq *c = to_cq(vc);
    if (c->cur) {
        c->head++;
        c->cur = 0;
    }
    if constexpr (Locked)
        c->lock.unlock();
}

inline const vq::wc &current(vq::cq *vc) noexcept
{
    shm_cq *c = to_cq(vc);
    return c->ring[c->head & c->mask];
}

int srq_post(vq::srq *vs, std::uint64_t wr_id, const vq::sge *sg, std::uint32_t n) noexcept
{
    auto *s = static_cast<shm_srq *>(vs);
    if (n > s->max_sge) [[unlikely]]
        return -FI_E2BIG;
    return rq_post(&s->rq, true, wr_id, sg, n);
}

} // namespace

std::uint64_t peer_check_cycles() noexcept
{
    static const std::uint64_t c = env::tsc::from_ns(std::uint64_t{lim().peer_check_ms} * 1000000);
    return c;
}

void cq_check_peers(shm_cq *c) noexcept
{
    auto check = [](shm_qp *q) {
        std::uint32_t st = q->state.load(std::memory_order_relaxed);
        if (q->type == vq::qp_type::ud && q->desc) {
            // Senders that died without saying so: mark their rings gone;
            // the receive scan frees them once drained.
            // Our own geometry (private); senders set the active bits.
            std::uint64_t act = q->desc->ud_active.load(std::memory_order_acquire);
            const std::size_t stride = ring_bytes(q->ud_ring_slots);
            char *base = q->sctx->self.base + q->ring_mem;
            for (std::uint32_t i = 0; act && i < q->ud_nrings; i++, act >>= 1) {
                if (!(act & 1))
                    continue;
                auto *ctrl = reinterpret_cast<ring_ctrl *>(base + i * stride);
                auto pid = static_cast<pid_t>(ctrl->owner.load(std::memory_order_relaxed) >> 32);
                if (pid > 0 && ::kill(pid, 0) < 0 && errno == ESRCH)
                    ctrl->sender_gone.store(q->ring_epoch, std::memory_order_release);
            }
            return;
        }
        if (!q->rpeer ||
            (st != static_cast<std::uint32_t>(vq::qp_state::rtr) &&
             st != static_cast<std::uint32_t>(vq::qp_state::rts)))
            return;
        if (peer_dead(q->rpeer)) {
            q->peer_died.store(true, std::memory_order_relaxed);
            drain_before_flush(q);
            qp_to_err(q);
        }
    };
    for (std::uint32_t i = 0; i < c->nrx; i++)
        check(c->rx[i]);
    for (std::uint32_t i = 0; i < c->ntx; i++)
        check(c->tx[i]);
}

int rq_init(recvq *rq, std::uint32_t wr, std::uint32_t sge) noexcept
{
    wr = pow2_at_least(wr);
    rq->wqe = new (std::nothrow) rwqe[wr];
    rq->sges = new (std::nothrow) vq::sge[static_cast<std::size_t>(wr) * (sge ? sge : 1)];
    if (!rq->wqe || !rq->sges) {
        rq_free(rq);
        return -FI_ENOMEM;
    }
    rq->mask = wr - 1;
    rq->max_sge = sge ? sge : 1;
    rq->head.store(0);
    rq->tail.store(0);
    return 0;
}

void rq_free(recvq *rq) noexcept
{
    delete[] rq->wqe;
    delete[] rq->sges;
    rq->wqe = nullptr;
    rq->sges = nullptr;
}

int create_cq(vq::context *vc, const vq::cq_init_attr *a, vq::cq **out)
{
    if (static_cast<std::uint32_t>(a->cqe) > max_cqe)
        return -FI_EMSGSIZE;
    shm_ctx *sc = to_ctx(vc);
    {
        // device_attr::max_cq is a limit, not a hint (checked again below,
        // under the lock, when the CQ is counted).
        std::lock_guard<std::mutex> g(sc->lock);
        if (static_cast<std::uint32_t>(sc->ncq) >= max_cq)
            return -FI_ENOSPC;
    }
    auto *c = new (std::nothrow) shm_cq;
    if (!c)
        return -FI_ENOMEM;
    std::uint32_t n = pow2_at_least(static_cast<std::uint32_t>(a->cqe));
    // Value-initialised: every page of the ring is touched now, so that
    // writing a completion never takes a page fault (a ring above malloc's
    // mmap threshold is fresh zero pages, each faulted in on its first use
    // otherwise).
    c->ring = new (std::nothrow) vq::wc[n]();
    if (!c->ring) {
        delete c;
        return -FI_ENOMEM;
    }
    c->mask = n - 1;
    c->ctx = vc;
    c->sctx = to_ctx(vc);
    c->cqe = static_cast<int>(n);
    c->single_threaded = a->single_threaded;
    if (a->single_threaded) {
        c->poll_fn = poll<false>;
        c->start_poll_fn = start_poll<false>;
        c->end_poll_fn = end_poll<false>;
    } else {
        c->poll_fn = poll<true>;
        c->start_poll_fn = start_poll<true>;
        c->end_poll_fn = end_poll<true>;
    }
    c->next_poll_fn = next_poll;
    c->read_opcode_fn = [](vq::cq *x) { return current(x).opcode; };
    c->read_byte_len_fn = [](vq::cq *x) { return current(x).byte_len; };
    c->read_imm_data_fn = [](vq::cq *x) { return current(x).imm_data; };
    c->read_invalidated_rkey_fn = [](vq::cq *x) { return current(x).invalidated_rkey; };
    c->read_qp_num_fn = [](vq::cq *x) { return current(x).qp_num; };
    c->read_src_qp_fn = [](vq::cq *x) { return current(x).src_qp; };
    c->read_wc_flags_fn = [](vq::cq *x) { return current(x).wc_flags; };
    c->read_vendor_err_fn = [](vq::cq *x) { return current(x).vendor_err; };
    c->read_data_fn = [](vq::cq *x) { return current(x).data; };
    vq::cq_fill_stubs(c);
    c->next_check = env::tsc::now() + peer_check_cycles();
    std::lock_guard<std::mutex> g(sc->lock);
    if (static_cast<std::uint32_t>(sc->ncq) >= max_cq) { // another thread took the last one meanwhile
        delete[] c->ring;
        delete c;
        return -FI_ENOSPC;
    }
    sc->ncq++;
    *out = c;
    return 0;
}

int destroy_cq(vq::cq *vc)
{
    shm_cq *c = to_cq(vc);
    shm_ctx *sc = c->sctx;
    std::lock_guard<std::mutex> g(sc->lock);
    if (c->nrx || c->ntx)
        return -FI_EBUSY;
    sc->ncq--;
    delete[] c->ring;
    delete c;
    return 0;
}

int create_srq(vq::pd *p, const vq::srq_init_attr *a, vq::srq **out)
{
    if (a->max_wr > max_wr || a->max_sge > max_sge_rx)
        return -FI_EMSGSIZE;
    auto *s = new (std::nothrow) shm_srq;
    if (!s)
        return -FI_ENOMEM;
    if (rq_init(&s->rq, a->max_wr, a->max_sge) < 0) {
        delete s;
        return -FI_ENOMEM;
    }
    s->ctx = p->ctx;
    s->pd = p;
    s->max_wr = s->rq.mask + 1;
    s->max_sge = s->rq.max_sge;
    s->post_recv_fn = srq_post;
    s->sctx = to_ctx(p->ctx);
    std::lock_guard<std::mutex> g(s->sctx->lock);
    if (static_cast<std::uint32_t>(s->sctx->nsrq) >= max_srq) { // device_attr::max_srq
        rq_free(&s->rq);
        delete s;
        return -FI_ENOSPC;
    }
    s->sctx->nsrq++;
    static_cast<shm_pd *>(p)->refs++;
    *out = s;
    return 0;
}

int destroy_srq(vq::srq *vs)
{
    auto *s = static_cast<shm_srq *>(vs);
    std::lock_guard<std::mutex> g(s->sctx->lock);
    if (s->refs)
        return -FI_EBUSY;
    s->sctx->nsrq--;
    static_cast<shm_pd *>(s->pd)->refs--;
    rq_free(&s->rq);
    delete s;
    return 0;
}

} // namespace shunt::drv::shm
