// vq provider: progress — receive completions (messages matched and copied
// once from the lent ring, rendezvous fetches, fins, RMA requests, CM
// datagrams), send completions while some are outstanding, and the
// connections on the pending list.
#include <pthread.h>

#include <algorithm>
#include <cstring>

#include "env/errors.h"
#include "prov.h"
#include "rx_fp.h"

namespace shunt::prov::vqprov {

void dgram_rx(prov_ep *e, const std::uint8_t *buf, std::size_t len); // dgram.cpp
void msg_event(prov_ep *e, std::uint32_t event);                      // cm.cpp
void pep_cm(prov_ep *e, const cm_msg &m);                             // cm.cpp
void rma_op_done(prov_ep *e, rx_op *o, int err);                       // rma.cpp

namespace {

/** Does this thread hold @p e (a single-threaded domain, or inside the
 *  endpoint's progress, whose lock it holds)? */
inline bool holds(prov_ep *e)
{
    return !e->lock.enabled() ||
           e->progress_owner.load(std::memory_order_relaxed) == std::uintptr_t(::pthread_self());
}

void repost_ud(prov_ep *e, std::uint64_t i)
{
    std::size_t sz = e->dgram ? e->dom->lim.dgram_buf : e->dom->lim.ud_buf;
    if (int rc = vq::post_recv(e->ud, i, reinterpret_cast<std::uint64_t>(e->ud_bufs) + i * sz, std::uint32_t(sz),
                               e->ud_mr->lkey))
        SHUNT_LOG(prov_log, warning, "vq: reposting a UD receive failed: %s", shunt::strerror(rc));
}

/** Without lent receives: give receive buffer @p i of slot @p s back. */
void repost(prov_ep *e, int s, std::uint32_t i)
{
    rc_slot &sl = e->slots[s];
    const std::uint32_t sz = e->dom->lim.bounce;
    if (int rc = vq::post_recv(sl.qp, (std::uint64_t(s) << 32) | i,
                               reinterpret_cast<std::uint64_t>(sl.bounce) + std::uint64_t(i) * sz, sz,
                               sl.bounce_mr->lkey))
        SHUNT_LOG(prov_log, warning, "vq: reposting a receive buffer failed: %s", shunt::strerror(rc));
}

/** The slot a receive completion belongs to: by its wr_id without lent
 *  receives, else by QP number (the last one that delivered first). */
inline int slot_of(prov_ep *e, const vq::wc &w, int &last)
{
    if (!e->dom->lim.lend) {
        int s = int(w.wr_id >> 32);
        return s >= 0 && s < int(e->slots.size()) && e->slots[s].qp && e->slots[s].qp->qp_num == w.qp_num ? s : -1;
    }
    if (last >= 0 && e->slots[last].qp && e->slots[last].qp->qp_num == w.qp_num) [[likely]]
        return last;
    for (int s = 0; s < int(e->slots.size()); s++)
        if (e->slots[s].qp && e->slots[s].qp->qp_num == w.qp_num)
            return last = s;
    return -1;
}

/** Everything but an eager message: rendezvous, fins, RMA requests, shutdown. */
[[gnu::cold]] void rx_other(prov_ep *e, rc_slot &sl, hdr_word h, const std::uint8_t *p, std::size_t len)
{
    // The requester's QP is connected to this accepted one: its w_hello,
    // or anything else it could only send over a finished connection (an
    // eager message proves the same, but costs no state to lose, so the
    // fast path does not look).
    if (sl.half_since) [[unlikely]]
        half_done(e, sl);
    switch (h.op) {
    case w_hello:
        return;
    case w_rts:
        rx_rts(e, sl, h, p, len);
        return;
    case w_fin: {
        fin_body fb;
        if (len >= sizeof fb) {
            std::memcpy(&fb, p, sizeof fb);
            if (is_late_id(fb.id)) {
                // An RMA write completed when posted (inject) failed at the target.
                if (fb.err)
                    util::tx_fail_after_done(origin_core(e, fb.id & 0xff), FI_RMA | FI_WRITE,
                                             fb.err < 0 ? FI_EIO : fb.err);
            } else {
                tx_fin(e, fb.id, fb.err < 0 ? FI_EIO : fb.err);
            }
        }
        return;
    }
    case w_frag_first:
    case w_frag:
        frag_rx(e, int(&sl - e->slots.data()), h, p, len);
        return;
    case w_shutdown:
        if (e->msg_type && sl.c && !sl.c->shut) {
            sl.c->shut = true;
            sl.c->state = conn::failed;
            msg_event(e, FI_SHUTDOWN);
        }
        return;
    case w_write:
    case w_write_rts:
    case w_read_req:
    case w_read_resp:
    case w_atomic_req:
    case w_atomic_resp:
    case w_rma_note:
        rma_request(e, sl.c, h, p, len);
        return;
    default:
        rx_stamped(e, sl, h, p, len); // stamp.cpp: the stamped ops, and nothing for the rest
        return;
    }
}

/** A receive completion of an RC QP failed: the QP is in error (peer gone,
 *  or being destroyed). */
[[gnu::cold]] void rc_rx_error(prov_ep *e, int s)
{
    rc_slot &sl = e->slots[s];
    frag_fail(e, s, FI_ECONNRESET); // a fragmented message on it never completes
    if (sl.c && sl.c->slot == s) {
        conn_broken(e, sl.c);
    } else if (!e->msg_type && sl.c && sl.c->dead_slot < 0) {
        sl.c->dead_slot = s; // an accepted, receive-only QP
        conn_pend(e, sl.c);
    } else if (!e->msg_type && sl.c && sl.c->dead_slot != s) {
        // Another QP of the peer's waits for progress already (both sides
        // connected at once: two QPs): this one is done, its receives
        // flushed, and goes now.
        slot_retire(e, s);
    }
    if (!e->msg_type && !sl.c && sl.qp && !sl.retired)
        slot_retire(e, s);
    if (e->msg_type && sl.c && !sl.c->shut) {
        sl.c->shut = true;
        msg_event(e, FI_SHUTDOWN);
    }
}

/** rx_other of the header word @p imm as it came (wire order): the fast
 *  path does not unpack it for the call. */
[[gnu::cold]] [[gnu::noinline]] void rx_other_wire(prov_ep *e, rc_slot &sl, std::uint32_t imm, const std::uint8_t *p,
                                                   std::size_t len)
{
    rx_other(e, sl, hdr_of(imm), p, len);
}

/** A message of slot @p sl: its header word @p imm (wire order) and bytes. */
inline void rc_msg(prov_ep *e, rc_slot &sl, std::uint32_t imm, const std::uint8_t *p, std::size_t len)
{
    if (hdr_of(imm).op == w_eager) [[likely]]
        rx_eager(e, sl, hdr_of(imm), p, len);
    else
        rx_other_wire(e, sl, imm, p, len);
}

inline void rc_rx(prov_ep *e, const vq::wc &w, int &last)
{
    int s = slot_of(e, w, last);
    if (s < 0) [[unlikely]]
        return;
    rc_slot &sl = e->slots[s];
    if (sl.retired) [[unlikely]]
        return;
    if (w.status != vq::wc_status::success) [[unlikely]] {
        rc_rx_error(e, s);
        return;
    }
    const std::uint8_t *p =
        w.data || !sl.bounce ? w.data : sl.bounce + std::size_t(std::uint32_t(w.wr_id)) * e->dom->lim.bounce;
    if (w.opcode == vq::wc_opcode::recv_rdma_with_imm) [[unlikely]] {
        // vq RDMA write with immediate: remote CQ data of a direct RMA write.
        util::ep_core *c = e->scalable ? rx_target(e, 0) : e->core;
        if (c)
            util::rx_remote_data(c, ntohl(w.imm_data), FI_RMA | FI_REMOTE_WRITE, w.byte_len);
    } else if (w.wc_flags & vq::WC_WITH_IMM) [[likely]] {
        rc_msg(e, sl, w.imm_data, p, w.byte_len);
    }
    // Posted receives (a device without lent receives): give the buffer
    // back. Not by w.data: a lent RDMA write with immediate has none either.
    if (!e->dom->lim.lend)
        repost(e, s, std::uint32_t(w.wr_id));
}

[[gnu::cold]] void ud_rx(prov_ep *e, const vq::wc &w)
{
    std::size_t sz = e->dgram ? e->dom->lim.dgram_buf : e->dom->lim.ud_buf;
    if (w.status != vq::wc_status::success) {
        // A receive that failed (a datagram longer than the buffer: anyone
        // can send one) gives its buffer back, or a few dozen such datagrams
        // would leave the endpoint deaf to connection requests and replies.
        // Flushed receives belong to a QP being torn down; failed sends
        // (wr_id ~0) have no buffer.
        if (w.status != vq::wc_status::wr_flush_err && w.wr_id < e->dom->lim.ud_depth)
            repost_ud(e, w.wr_id);
        return;
    }
    const std::uint8_t *b = e->ud_bufs + w.wr_id * sz;
    std::uint32_t len = 0;
    if (!ud_message(w, e->dom->lim.grh, b, len))
        ; // shorter than its GRH area: nothing to deliver
    else if (e->dgram)
        dgram_rx(e, b, len);
    else if (cm_msg m; cm_parse(b, len, m)) {
        if (e->msg_type)
            pep_cm(e, m);
        else
            cm_handle(e, m);
    }
    repost_ud(e, w.wr_id);
}

/** Progress reads the hot slot's messages in place (hot_rx) and polls the
 *  receive CQ (cq_rx) on every cq_every-th call, and on every call the hot
 *  slot gives nothing. */
constexpr std::uint32_t cq_every = 16;
static_assert((cq_every & (cq_every - 1)) == 0, "due on low bits of prov_ep::tick");

/** The receive CQ: every QP's messages and completions. */
void cq_rx(prov_ep *e)
{
    vq::wc w[16];
    int n = vq::poll_cq(e->rcq, 16, w);
    int last = e->rx_last;
    for (int k = 0; k < n; k++) {
        if (e->ud && w[k].qp_num == e->ud->qp_num) [[unlikely]]
            ud_rx(e, w[k]);
        else
            rc_rx(e, w[k], last);
    }
    e->rx_last = last;
}

/** The messages of the slot that delivered last, read in place from its
 *  QP (vq::poll_lent: whole messages only, everything else is left to the
 *  CQ, in order). @return how many; 0 (or a negative code): poll the CQ. */
inline int hot_rx(prov_ep *e)
{
    const int s = e->rx_last;
    if (s < 0)
        return 0;
    rc_slot &sl = e->slots[s];
    if (!sl.lent_poll || sl.retired) [[unlikely]]
        return 0;
    vq::lent_msg m[16];
    const int n = vq::poll_lent(sl.qp, 16, m);
    for (int k = 0; k < n; k++)
        if (m[k].wc_flags & vq::WC_WITH_IMM) [[likely]]
            rc_msg(e, sl, m[k].imm_data, m[k].data, m[k].byte_len);
    return n;
}

/** RDM: poll the UD QP's own CQ (prov_ep::ucq) every ud_every-th progress
 *  call, and on every call while a connection needs progress (a request
 *  being repeated, control messages waiting): a connection request from a
 *  new peer waits at most ud_every progress calls, well inside the
 *  requester's repeat interval. */
constexpr std::uint32_t ud_every = 16;
/** Every sweep_every-th progress call polls the send CQ even with nothing
 *  signaled outstanding: errors of unsignaled requests, requests the driver
 *  still holds for lack of ring space. */
constexpr std::uint32_t sweep_every = 64;
static_assert((ud_every & (ud_every - 1)) == 0 && (sweep_every & (sweep_every - 1)) == 0 &&
                  sweep_every % ud_every == 0,
              "periodic work is due on low bits of prov_ep::tick: a sweep call is also a UD poll call");

void ud_poll(prov_ep *e)
{
    vq::wc w[16];
    int n;
    do {
        n = vq::poll_cq(e->ucq, 16, w);
        for (int k = 0; k < n; k++)
            ud_rx(e, w[k]);
    } while (n == 16);
}

/** Start fetching a rendezvous message into receive @p en (lock held). On
 *  failure the sender is told (its send fails) and the error returned for
 *  the kit to complete the receive with. */
int fetch_start(prov_ep *e, util::rx_entry *en, const util::rx_fetch_req &r, const void *desc, std::size_t dlen)
{
    fetch_blob b;
    if (dlen < offsetof(fetch_blob, d) || dlen > sizeof b)
        return -FI_EINVAL;
    std::memcpy(&b, desc, dlen);
    if (b.fm)
        return frag_match(e, en, r, b.fm);
    if (dlen < offsetof(fetch_blob, d) + 16)
        return -FI_EINVAL;
    int rc = -FI_EHOSTUNREACH; // the sender's connection is gone
    if (b.c && ctl_slot(e, b.c) >= 0) {
        rx_op *o = rx_op_get(e);
        rc = -FI_ENOMEM;
        if (o) {
            o->kind = rx_op::fetch_recv;
            o->e = en;
            o->r = r;
            o->r.desc = nullptr;
            o->c = b.c;
            o->peer_id = b.peer_id;
            o->d = b.d;
            rc = move_start(e, o);
            if (rc == 0)
                return 0;
            rx_op_put(e, o);
        }
    }
    fin_body fb{b.peer_id, -rc, 0};
    ctl_send(e, b.c, imm_wire(w_fin, 0, 0), &fb, sizeof fb);
    return rc;
}

/** Queue work for the endpoint's next progress (this thread does not hold it). */
int queue_fetch(prov_ep *e, util::rx_entry *en, const util::rx_fetch_req &r, const void *desc, std::size_t dlen)
{
    if (dlen > sizeof(queued_fetch::desc))
        return -FI_EINVAL;
    queued_fetch q{en, r, {}};
    std::memcpy(q.desc, desc, dlen);
    q.r.desc = nullptr;
    q.r.desc_len = dlen;
    util::guard g(e->fetch_lock);
    try {
        e->fetch_q.push_back(q);
    } catch (...) {
        return -FI_ENOMEM;
    }
    e->fetch_waiting.store(true, std::memory_order_release);
    return 0;
}

[[gnu::cold]] void run_queued_fetches(prov_ep *e)
{
    std::vector<queued_fetch> q;
    {
        util::guard g(e->fetch_lock);
        q.swap(e->fetch_q);
        e->fetch_waiting.store(false, std::memory_order_relaxed);
    }
    for (queued_fetch &f : q) {
        if (!f.e) { // a discarded message: its sender is done
            fetch_blob b;
            std::memcpy(&b, f.desc, std::min(sizeof b, sizeof f.desc));
            if (b.fm) {
                frag_discard(e, b.fm);
                continue;
            }
            fin_body fb{b.peer_id, 0, 0};
            ctl_send(e, b.c, imm_wire(w_fin, 0, 0), &fb, sizeof fb);
            continue;
        }
        if (int rc = fetch_start(e, f.e, f.r, f.desc, f.r.desc_len))
            util::rx_fetch_done(f.e, f.r, rc > 0 ? 0 : -rc);
    }
}

/** Connections on the pending list: dead QPs closed, connection requests
 *  repeated, queued control messages sent. Those that need nothing more
 *  leave the list. */
[[gnu::cold]] void pending_progress(prov_ep *e)
{
    for (std::size_t i = 0; i < e->pending.size();) {
        conn *cn = e->pending[i];
        if (cn->dead_slot >= 0) {
            slot_retire(e, cn->dead_slot);
            cn->dead_slot = -1;
        }
        if (cn->state == conn::connecting && !e->msg_type)
            (void)conn_start(e, cn); // resend a lost REQ after a while; give up after the timeout
        if (cn->state == conn::draining)
            conn_drain(e, cn); // operations queued while it was set up, where the send queue was full
        bool idle = ctl_flush(e, cn) && moves_flush(e, cn) && cn->dead_slot < 0 &&
                    !(cn->state == conn::connecting && !e->msg_type && !cn->eager_quiet) &&
                    cn->state != conn::draining;
        if (idle) {
            cn->pending = false;
            e->pending[i] = e->pending.back();
            e->pending.pop_back();
        } else {
            i++;
        }
    }
}

/** The part of progress that is not the receive CQ: the UD QP's CQ,
 *  fetches queued by other threads, the send CQ (while signaled requests
 *  are outstanding, after a post found the send queue full, while control
 *  messages wait, and on a sweep), the pending connections. @p t: this
 *  call's tick. Lock held. */
[[gnu::cold]] void rare_progress(prov_ep *e, std::uint32_t t)
{
    if (e->ucq && ((t & (ud_every - 1)) == 0 || !e->pending.empty()))
        ud_poll(e);
    if (e->fetch_waiting.load(std::memory_order_acquire))
        run_queued_fetches(e);
    if (e->scq_pending || e->tx_unpolled || !e->pending.empty() || (t & (sweep_every - 1)) == 0) {
        e->tx_unpolled = false;
        vq::wc w[16];
        int k;
        do {
            k = vq::poll_cq(e->scq, 16, w);
            for (int i = 0; i < k; i++)
                tx_complete(e, w[i]);
        } while (k == 16);
    }
    if (!e->pending.empty())
        pending_progress(e);
    if ((t & (sweep_every - 1)) == 0 && e->undrained)
        slots_drain_retry(e);
    if ((t & (ud_every - 1)) == 0 && e->cm.half_open.get())
        half_open_expire(e);
}

} // namespace

/* ---- kit hooks ---- */

int fetch_hook(util::ep_core *c, util::rx_entry *en, const util::rx_fetch_req &r)
{
    // Started at once when this thread holds the endpoint (its progress, or
    // a single-threaded domain); else (a receive posted by another thread,
    // which holds the receive lock) queued for the endpoint's next progress:
    // taking the endpoint's lock here would invert the lock order.
    prov_ep *e = ep_of(c);
    if (!e)
        return -FI_ECANCELED;
    if (holds(e))
        return fetch_start(e, en, r, r.desc, r.desc_len);
    return queue_fetch(e, en, r, r.desc, r.desc_len);
}

void discard_hook(util::ep_core *c, const void *desc, std::size_t dlen)
{
    // An unexpected rendezvous message was discarded (FI_DISCARD): its
    // sender's send is complete (delivered, dropped by the receiver).
    prov_ep *e = ep_of(c);
    fetch_blob b;
    if (!e || dlen < offsetof(fetch_blob, d) || dlen > sizeof b)
        return;
    if (holds(e)) {
        std::memcpy(&b, desc, dlen);
        if (b.fm) {
            frag_discard(e, b.fm);
            return;
        }
        fin_body fb{b.peer_id, 0, 0};
        ctl_send(e, b.c, imm_wire(w_fin, 0, 0), &fb, sizeof fb);
        return;
    }
    util::rx_fetch_req none;
    (void)queue_fetch(e, nullptr, none, desc, dlen);
}

/* ---- receive-side operations ---- */


bool rx_op_grow(prov_ep *e)
{
    constexpr std::size_t chunk = 64;
    std::unique_ptr<rx_op[]> v(new (std::nothrow) rx_op[chunk]);
    if (!v)
        return false;
    try {
        e->rx_by_index.reserve(e->rx_by_index.size() + chunk);
        e->rx_chunks.push_back(std::move(v));
    } catch (...) {
        return false;
    }
    rx_op *base = e->rx_chunks.back().get();
    for (std::size_t i = 0; i < chunk; i++) {
        base[i].index = std::uint32_t(e->rx_by_index.size());
        e->rx_by_index.push_back(&base[i]);
        base[i].next = e->rx_free;
        e->rx_free = &base[i];
    }
    return true;
}

rx_op *rx_op_get(prov_ep *e)
{
    if (!e->rx_free && !rx_op_grow(e)) [[unlikely]]
        return nullptr; // more in flight than ever before, and no memory for them
    rx_op *o = e->rx_free;
    e->rx_free = o->next;
    std::uint32_t gen = o->gen + 1, index = o->index;
    *o = rx_op{};
    o->gen = gen;
    o->index = index;
    return o;
}

namespace {

/** Release the registrations @p o holds. */
void rx_op_unref(prov_ep *e, rx_op *o)
{
    for (std::uint32_t i = 0; i < o->nmrs; i++)
        mr_put(e->dom, o->mrs[i]);
    o->nmrs = 0;
}

} // namespace

void rx_op_put(prov_ep *e, rx_op *o)
{
    rx_op_unref(e, o);
    o->gen++;
    o->next = e->rx_free;
    e->rx_free = o;
}

std::uint64_t rx_op_id(const rx_op *o)
{
    // rx_by_index holds every op, so its position is its index.
    return (std::uint64_t(1) << 63) | (std::uint64_t(o->gen & 0x3fffffffu) << 32) | o->index;
}

rx_op *rx_op_from_id(prov_ep *e, std::uint64_t id)
{
    std::uint64_t idx = id & 0xffffffffu;
    if (!(id >> 63) || idx >= e->rx_by_index.size())
        return nullptr;
    rx_op *o = e->rx_by_index[idx];
    return (o->gen & 0x3fffffffu) == ((id >> 32) & 0x3fffffffu) ? o : nullptr;
}

void rx_op_done(prov_ep *e, rx_op *o, vq::wc_status st)
{
    rx_op_end(e, o, st == vq::wc_status::success ? 0 : wc_to_err(st));
}

void rx_op_end(prov_ep *e, rx_op *o, int err)
{
    if (o->kind != rx_op::fetch_recv) {
        rma_op_done(e, o, err);
        return;
    }
    if (err)
        env::stats::on_error(e->io);
    util::rx_fetch_done(o->e, o->r, err);
    fin_body fb{o->peer_id, err, 0};
    ctl_send(e, o->c, imm_wire(w_fin, 0, 0), &fb, sizeof fb);
    rx_op_put(e, o);
}

namespace {

/** rdma_move of @p o as its kind says; on failure nothing is posted and
 *  the registrations it took are released. */
int move_post(prov_ep *e, rx_op *o)
{
    int rc;
    if (o->kind == rx_op::fetch_recv) {
        rc = rdma_move(e, o->c, true, o->d, o->e->iov, o->e->iov_count, o->r.offset, o->r.n, o->e->desc, o->mrs,
                       &o->nmrs, rx_op_id(o));
    } else {
        void *desc[1] = {o->vdesc};
        rc = rdma_move(e, o->c, o->kind == rx_op::rma_write, o->d, &o->v, 1, 0, o->len, desc, o->mrs, &o->nmrs,
                       rx_op_id(o));
    }
    if (rc)
        rx_op_unref(e, o);
    return rc;
}

} // namespace

int move_start(prov_ep *e, rx_op *o)
{
    conn *c = o->c;
    if (!c->moves) [[likely]] {
        int rc = move_post(e, o);
        if (rc != -FI_EAGAIN)
            return rc;
    }
    // The send queue is full (or others wait already): progress posts it
    // once completions make room.
    if (c->nmoves >= max_ctx * e->dom->lim.sq_depth) [[unlikely]] {
        e->cm.moves_refused.add();
        if (c->moves_refused++ == 0)
            SHUNT_LOG(prov_log, error, "vq: %s takes none of what it is sent; refusing its further transfers",
                      addr_key(c->peer).c_str());
        return -FI_EAGAIN;
    }
    c->nmoves++;
    e->cm.moves_waiting.set(e->cm.moves_waiting.get() + 1);
    o->next = nullptr;
    if (c->moves_tail)
        c->moves_tail->next = o;
    else
        c->moves = o;
    c->moves_tail = o;
    conn_pend(e, c);
    return 0;
}

bool moves_flush(prov_ep *e, conn *c)
{
    while (rx_op *o = c->moves) {
        int rc = move_post(e, o);
        if (rc == -FI_EAGAIN)
            return false;
        c->moves = o->next;
        if (!c->moves)
            c->moves_tail = nullptr;
        c->nmoves--;
        e->cm.moves_waiting.set(e->cm.moves_waiting.get() - 1);
        o->next = nullptr;
        if (rc)
            rx_op_end(e, o, -rc);
    }
    return true;
}

int rdma_move(prov_ep *e, conn *c, bool read, const rndv_desc &remote, const iovec *iov, std::size_t count,
              std::size_t offset, std::size_t n, void **desc, mr_ref *mrs, std::uint32_t *nmrs, std::uint64_t wr_id)
{
    // Our QP to the peer; while it is being set up, the one accepted from it.
    int s = ctl_slot(e, c);
    if (s < 0)
        s = c->slot;
    if (s < 0)
        return -FI_EHOSTUNREACH;
    // Local pieces of [offset, offset + n), with their keys.
    vq::sge loc[iov_max];
    std::size_t nl = 0;
    for (std::size_t i = 0, skip = offset, left = n; i < count && left; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        std::size_t take = std::min(left, iov[i].iov_len - skip);
        auto *base = static_cast<std::uint8_t *>(iov[i].iov_base) + skip;
        vq::mr *m = nullptr;
        if (desc && desc[i] && static_cast<util::mr_obj *>(desc[i])->prov)
            m = static_cast<vq::mr *>(static_cast<util::mr_obj *>(desc[i])->prov);
        else {
            if (int rc = mr_get(e->dom, base, take, mrs[*nmrs]))
                return rc;
            m = mrs[(*nmrs)++].mr;
        }
        loc[nl++] = {reinterpret_cast<std::uint64_t>(base), std::uint32_t(take), m->lkey};
        left -= take;
        skip = 0;
    }
    // One request per remote piece (split at the device's message size and
    // at the send SGE limit), the last one signaled.
    vq::qp *q = e->slots[std::size_t(s)].qp;
    const std::uint64_t max_req = e->dom->dattr.max_msg_sz ? e->dom->dattr.max_msg_sz : (1u << 30);
    const std::size_t max_sge = e->dom->lim.send_sge ? e->dom->lim.send_sge : 1;
    vq::wr_start(q);
    std::size_t li = 0, loff = 0, done = 0;
    bool any = false;
    for (std::uint32_t k = 0; k < remote.niov && done < n; k++) {
        std::uint64_t roff = 0;
        while (roff < remote.iov[k].len && done < n) {
            vq::sge sg[iov_max];
            std::size_t ns = 0;
            std::uint64_t req = 0;
            std::uint64_t cap = std::min<std::uint64_t>({remote.iov[k].len - roff, n - done, max_req});
            while (req < cap && li < nl && ns < max_sge) {
                std::uint64_t take = std::min<std::uint64_t>(cap - req, loc[li].length - loff);
                sg[ns++] = {loc[li].addr + loff, std::uint32_t(take), loc[li].lkey};
                req += take;
                loff += take;
                if (loff == loc[li].length) {
                    li++;
                    loff = 0;
                }
            }
            if (req == 0)
                break;
            bool last = done + req == n;
            q->wr_id = last ? wr_id : ~0ULL;
            q->wr_flags = last ? vq::WR_SIGNALED : 0;
            if (read)
                vq::wr_rdma_read(q, remote.iov[k].rkey, remote.iov[k].addr + roff);
            else
                vq::wr_rdma_write(q, remote.iov[k].rkey, remote.iov[k].addr + roff);
            vq::wr_set_sge_list(q, ns, sg);
            any = true;
            roff += req;
            done += req;
        }
    }
    if (!any) {
        // Nothing to move (a zero-length fetch): one empty request completes it.
        q->wr_id = wr_id;
        q->wr_flags = vq::WR_SIGNALED;
        if (read)
            vq::wr_rdma_read(q, remote.niov ? remote.iov[0].rkey : 0, remote.niov ? remote.iov[0].addr : 0);
        else
            vq::wr_rdma_write(q, remote.niov ? remote.iov[0].rkey : 0, remote.niov ? remote.iov[0].addr : 0);
    }
    int rc = wr_finish(e, q);
    if (rc == 0)
        e->scq_pending++;
    return rc;
}

namespace {

/** One progress call of @p e, its lock (if any) held. */
inline void progress_locked(prov_ep *e)
{
    if (e->pep_ud) [[unlikely]]
        adopted_progress(e);
    const std::uint32_t t = ++e->tick;
    // The slot that delivered last, read in place (one peer's messages come
    // in runs); the receive CQ when that has nothing for us, and on every
    // cq_every-th call whatever it had, so that the other QPs' messages
    // and the hot QP's other completions wait at most that many calls.
    if (hot_rx(e) <= 0 || (t & (cq_every - 1)) == 0)
        cq_rx(e);
    // Everything but the receive CQ, in one test on the common path: the
    // periodic work comes due on the tick; the rest is state that progress
    // must act on while it lasts (pending_progress and the send-CQ poll
    // clear what they finish).
    if (((t & (ud_every - 1)) == 0) | (e->scq_pending != 0) | e->tx_unpolled | !e->pending.empty() |
        e->fetch_waiting.load(std::memory_order_acquire)) [[unlikely]]
        rare_progress(e, t);
}

} // namespace

void cm_poll(prov_ep *e)
{
    if (e->ucq)
        ud_poll(e);
}

template <bool Locked>
void progress_as(util::ep_core *c)
{
    prov_ep *e = ep_of(c);
    if constexpr (Locked) {
        util::guard g(e->lock);
        // Who is progressing (fetch_hook starts a fetch at once only from
        // inside its own thread's progress).
        progress_scope p(e);
        progress_locked(e);
    } else {
        progress_locked(e);
    }
}
template void progress_as<false>(util::ep_core *c);
template void progress_as<true>(util::ep_core *c);

void progress(util::ep_core *c)
{
    if (ep_of(c)->lock.enabled())
        progress_as<true>(c);
    else
        progress_as<false>(c);
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
