/* drivers/ethdev: completion queues (polling drives the ports and the QPs),
 * receive queues and SRQs. */
#include <new>

#include "eth.h"

namespace shunt::drv::ethdev {

namespace {

/** Poll the ports of @p c, then progress its QPs that have work. */
void progress(eth_cq *c) noexcept
{
    for (std::uint32_t i = 0; i < c->nports; i++)
        port_poll(c->ports[i]);
    for (std::uint32_t i = 0; i < c->nqps; i++) {
        eth_qp *q = c->qps[i];
        if (!q->busy.load(std::memory_order_relaxed) && !q->exclusive)
            continue;
        if (q->has_td) {
            qp_progress(q, c);
        } else if (q->lock.try_lock()) {
            qp_progress(q, c);
            q->lock.unlock();
        }
    }
}

template <bool Locked>
int poll(vq::cq *vc, int n, vq::wc *out) noexcept
{
    eth_cq *c = to_cq(vc);
    if (n <= 0 || !out) [[unlikely]]
        return n < 0 || (n > 0 && !out) ? -FI_EINVAL : 0;
    if constexpr (Locked)
        c->lock.lock();
    if (c->lent) [[unlikely]]
        lent_release(c);
    if (c->tail == c->head)
        progress(c);
    std::uint32_t avail = c->tail - c->head;
    std::uint32_t k = avail < static_cast<std::uint32_t>(n) ? avail : static_cast<std::uint32_t>(n);
    for (std::uint32_t i = 0; i < k; i++)
        out[i] = c->ring[(c->head + i) & c->mask];
    c->head += k;
    if constexpr (Locked)
        c->lock.unlock();
    return static_cast<int>(k);
}

inline void set_current(eth_cq *c) noexcept
{
    const vq::wc &w = c->ring[c->head & c->mask];
    c->wr_id = w.wr_id;
    c->status = w.status;
}

template <bool Locked>
int start_poll(vq::cq *vc) noexcept
{
    eth_cq *c = to_cq(vc);
    if constexpr (Locked)
        c->lock.lock();
    if (c->lent) [[unlikely]]
        lent_release(c);
    if (c->tail == c->head)
        progress(c);
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
    eth_cq *c = to_cq(vc);
    if (c->cur) {
        c->head++;
        c->cur = 0;
    }
    if (c->lent) [[unlikely]]
        lent_release(c);
    if (c->tail == c->head)
        progress(c);
    if (c->tail == c->head)
        return -FI_EAGAIN;
    c->cur = 1;
    set_current(c);
    return 0;
}

template <bool Locked>
void end_poll(vq::cq *vc) noexcept
{
    eth_cq *c = to_cq(vc);
    if (c->cur) {
        c->head++;
        c->cur = 0;
    }
    if (c->lent) [[unlikely]]
        lent_release(c);
    if constexpr (Locked)
        c->lock.unlock();
}

inline const vq::wc &current(vq::cq *vc) noexcept
{
    eth_cq *c = to_cq(vc);
    return c->ring[c->head & c->mask];
}

int srq_post(vq::srq *vs, std::uint64_t wr_id, const vq::sge *sg, std::uint32_t n) noexcept
{
    auto *s = static_cast<eth_srq *>(vs);
    if (n > s->max_sge) [[unlikely]]
        return -FI_E2BIG;
    return rq_post(&s->rq, true, wr_id, sg, n);
}

} // namespace

int rq_init(recvq *rq, std::uint32_t wr, std::uint32_t sge) noexcept
{
    wr = pow2_at_least(wr);
    sge = sge ? sge : 1;
    rq->wqe = new (std::nothrow) rwqe[wr];
    rq->sges = new (std::nothrow) vq::sge[static_cast<std::size_t>(wr) * sge];
    if (!rq->wqe || !rq->sges) {
        rq_free(rq);
        return -FI_ENOMEM;
    }
    rq->mask = wr - 1;
    rq->max_sge = sge;
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

int rq_post(recvq *rq, bool locked, std::uint64_t wr_id, const vq::sge *sg, std::uint32_t n) noexcept
{
    if (n > 0 && !sg) [[unlikely]]
        return -FI_EINVAL;
    if (locked)
        rq->plock.lock();
    std::uint32_t t = rq->tail.load(std::memory_order_relaxed);
    if (t - rq->head.load(std::memory_order_acquire) > rq->mask) [[unlikely]] {
        if (locked)
            rq->plock.unlock();
        return -FI_EAGAIN;
    }
    rwqe &r = rq->wqe[t & rq->mask];
    r.wr_id = wr_id;
    r.num_sge = n;
    vq::sge *d = &rq->sges[static_cast<std::size_t>(t & rq->mask) * rq->max_sge];
    for (std::uint32_t k = 0; k < n; k++)
        d[k] = sg[k];
    // Publish the receive to the consumer: the entry before tail.
    rq->tail.store(t + 1, std::memory_order_release);
    if (locked)
        rq->plock.unlock();
    return 0;
}

bool take_recv(eth_qp *q) noexcept
{
    recvq *rq = q->rq;
    const bool shared = q->ssrq != nullptr;
    if (shared)
        rq->clock.lock();
    std::uint32_t h = rq->head.load(std::memory_order_relaxed);
    // Observe a posted receive: its entry was written before tail.
    if (h == rq->tail.load(std::memory_order_acquire)) {
        if (shared)
            rq->clock.unlock();
        return false;
    }
    const rwqe &r = rq->wqe[h & rq->mask];
    const vq::sge *sg = &rq->sges[static_cast<std::size_t>(h & rq->mask) * rq->max_sge];
    q->rx_wc.wr_id = r.wr_id;
    q->rx_nsge = r.num_sge;
    for (std::uint32_t i = 0; i < r.num_sge; i++)
        q->rx_sges[i] = sg[i];
    // Free the entry for the producer (our reads of it come first).
    rq->head.store(h + 1, std::memory_order_release);
    if (shared)
        rq->clock.unlock();
    q->rx_has_wqe = true;
    q->rx_off = 0;
    return true;
}

namespace {

/** key_check of receive buffer piece @p s for local write, through the QP's
 *  one-entry cache (eth_qp::rx_kc_key): the same answer without pinning the
 *  key entry when the piece lies in the region its key was last seen valid
 *  for and no key of the context was killed since. */
bool recv_key_ok(eth_qp *q, const vq::sge &s) noexcept
{
    const std::uint64_t epoch = q->c->key_epoch.load(std::memory_order_acquire);
    if (s.lkey == q->rx_kc_key && epoch == q->rx_kc_epoch && s.addr >= q->rx_kc_base &&
        s.addr - q->rx_kc_base <= q->rx_kc_len && s.length <= q->rx_kc_len - (s.addr - q->rx_kc_base))
        return true;
    key_ref r;
    if (!key_pin(q->c, s.lkey, s.addr, s.length, vq::ACCESS_LOCAL_WRITE, true, &r))
        return false;
    // Read under the pin: the entry's region for this key, valid from the
    // epoch read before the pin (a kill after that read moves it on).
    q->rx_kc_key = s.lkey;
    q->rx_kc_base = r.e->addr;
    q->rx_kc_len = r.e->length;
    q->rx_kc_epoch = epoch;
    key_unpin(r);
    return true;
}

} // namespace

vq::wc_status rx_room(eth_qp *q, std::uint64_t n) noexcept
{
    std::uint64_t cap = 0;
    for (std::uint32_t i = 0; i < q->rx_nsge; i++)
        cap += q->rx_sges[i].length;
    if (q->rx_off + n > cap)
        return vq::wc_status::loc_len_err;
    if (q->rx_off == 0)
        for (std::uint32_t i = 0; i < q->rx_nsge; i++) {
            const vq::sge &s = q->rx_sges[i];
            if (s.length && !recv_key_ok(q, s))
                return vq::wc_status::loc_prot_err;
        }
    return vq::wc_status::success;
}

void rx_put(eth_qp *q, const std::uint8_t *src, std::uint32_t n) noexcept
{
    if (q->rx_off == 0)
        q->rx_sgi = q->rx_sgoff = 0;
    while (n) {
        const vq::sge &s = q->rx_sges[q->rx_sgi];
        std::uint32_t k = s.length - q->rx_sgoff < n ? s.length - q->rx_sgoff : n;
        std::memcpy(reinterpret_cast<std::uint8_t *>(s.addr) + q->rx_sgoff, src, k);
        src += k;
        n -= k;
        q->rx_off += k;
        q->rx_sgoff += k;
        if (q->rx_sgoff == s.length) {
            q->rx_sgi++;
            q->rx_sgoff = 0;
        }
    }
}

void rx_put_mbuf(eth_qp *q, const rte_mbuf *m, std::uint32_t from, std::uint32_t n) noexcept
{
    std::uint32_t base = 0;
    for (const rte_mbuf *s = m; s && n; s = s->next) {
        if (from < base + s->data_len) {
            std::uint32_t o = from - base, k = s->data_len - o < n ? s->data_len - o : n;
            rx_put(q, rte_pktmbuf_mtod_offset(s, const std::uint8_t *, o), k);
            from += k;
            n -= k;
        }
        base += s->data_len;
    }
}

void lent_release(eth_cq *c) noexcept
{
    // Every tag lies in [lent_from, tail) and a lent push needs its slot's
    // earlier tag taken back (lend_room): walking at most one ring of slots
    // up to head takes back exactly the loans of consumed entries.
    std::uint32_t n = c->head - c->lent_from;
    if (n > c->mask + 1)
        n = c->mask + 1;
    for (std::uint32_t i = c->head - n; i != c->head; i++) {
        std::uintptr_t &t = c->lent[i & c->mask];
        if (t & 1)
            reinterpret_cast<eth_qp *>(t - 1)->lend_held = false;
        else if (t)
            rte_pktmbuf_free(reinterpret_cast<rte_mbuf *>(t));
        t = 0;
    }
    c->lent_from = c->head;
}

int cq_enable_lend(eth_cq *c) noexcept
{
    if (!c->single_threaded)
        c->lock.lock();
    if (!c->lent) {
        c->lent = new (std::nothrow) std::uintptr_t[c->mask + 1]();
        c->lent_from = c->head;
    }
    bool ok = c->lent != nullptr;
    if (!c->single_threaded)
        c->lock.unlock();
    return ok ? 0 : -FI_ENOMEM;
}

void cq_attach(eth_cq *c, eth_qp *q)
{
    if (!c->single_threaded)
        c->lock.lock();
    bool have = false;
    for (std::uint32_t i = 0; i < c->nqps; i++)
        have |= c->qps[i] == q;
    if (!have)
        c->qps[c->nqps++] = q;
    std::uint32_t k = 0;
    while (k < c->nports && c->ports[k] != q->p)
        k++;
    if (k == c->nports && k < 8) {
        c->ports[k] = q->p;
        c->port_refs[k] = 0;
        c->nports++;
    }
    if (k < 8)
        c->port_refs[k]++;
    if (!c->single_threaded)
        c->lock.unlock();
}

void cq_detach(eth_cq *c, eth_qp *q)
{
    if (!c->single_threaded)
        c->lock.lock();
    for (std::uint32_t i = 0; i < c->nqps; i++)
        if (c->qps[i] == q) {
            c->qps[i] = c->qps[--c->nqps];
            break;
        }
    for (std::uint32_t k = 0; k < c->nports; k++)
        if (c->ports[k] == q->p && --c->port_refs[k] == 0) {
            c->nports--;
            c->ports[k] = c->ports[c->nports];
            c->port_refs[k] = c->port_refs[c->nports];
            break;
        }
    // Loans of the QP's lend_buf end with the QP (its bytes go with it).
    if (c->lent && q->lend)
        for (std::uint32_t i = 0; i <= c->mask; i++)
            if (c->lent[i] == reinterpret_cast<std::uintptr_t>(q) + 1)
                c->lent[i] = 0;
    if (!c->single_threaded)
        c->lock.unlock();
}

int create_cq(vq::context *vc, const vq::cq_init_attr *a, vq::cq **out)
{
    if (static_cast<std::uint32_t>(a->cqe) > max_cqe)
        return -FI_EMSGSIZE;
    auto *c = new (std::nothrow) eth_cq;
    if (!c)
        return -FI_ENOMEM;
    std::uint32_t n = pow2_at_least(static_cast<std::uint32_t>(a->cqe));
    // Value-initialised: every page touched now, none faulted in by a
    // completion later (as the shm driver's CQs).
    c->ring = new (std::nothrow) vq::wc[n]();
    if (!c->ring) {
        delete c;
        return -FI_ENOMEM;
    }
    c->mask = n - 1;
    c->ctx = vc;
    c->c = to_ctx(vc);
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
    eth_ctx *ec = to_ctx(vc);
    std::lock_guard<std::mutex> g(ec->lock);
    ec->ncq++;
    *out = c;
    return 0;
}

int destroy_cq(vq::cq *vc)
{
    eth_cq *c = to_cq(vc);
    eth_ctx *ec = c->c;
    std::lock_guard<std::mutex> g(ec->lock);
    if (c->nqps)
        return -FI_EBUSY;
    ec->ncq--;
    if (c->lent) {
        for (std::uint32_t i = 0; i <= c->mask; i++)
            if (c->lent[i] && !(c->lent[i] & 1))
                rte_pktmbuf_free(reinterpret_cast<rte_mbuf *>(c->lent[i]));
        delete[] c->lent;
    }
    delete[] c->ring;
    delete c;
    return 0;
}

int create_srq(vq::pd *p, const vq::srq_init_attr *a, vq::srq **out)
{
    if (a->max_wr > max_wr || a->max_sge > max_sge)
        return -FI_EMSGSIZE;
    auto *s = new (std::nothrow) eth_srq;
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
    s->c = to_ctx(p->ctx);
    std::lock_guard<std::mutex> g(s->c->lock);
    s->c->nsrq++;
    static_cast<eth_pd *>(p)->refs++;
    *out = s;
    return 0;
}

int destroy_srq(vq::srq *vs)
{
    auto *s = static_cast<eth_srq *>(vs);
    std::lock_guard<std::mutex> g(s->c->lock);
    if (s->refs)
        return -FI_EBUSY;
    s->c->nsrq--;
    static_cast<eth_pd *>(s->pd)->refs--;
    rq_free(&s->rq);
    delete s;
    return 0;
}

} // namespace shunt::drv::ethdev
