/* drivers/shm: the posting session (builders, setters, wr_start/complete/abort),
 * single-call posts and post_recv. Builders fill a local send-queue entry;
 * wr_complete hands the batch to sq_progress (shm_tx.cpp), which executes it.
 * The function pointers are chosen in shm_qp.cpp (install_fast_path). */
#include <cassert>

#include "env/log.h"
#include "env/tsc.h"
#include "ring.h"
#include "shm_post.h"

namespace shunt::drv::shm {

SHUNT_LOG_COMPONENT(shm_post_log, "shm");

namespace {

constexpr unsigned need_ud = 1;

SHUNT_COLD void latch(shm_qp *q, int err) noexcept
{
    if (q->err == 0)
        q->err = err;
}

constexpr unsigned wr_flags_ok = vq::WR_FENCE | vq::WR_SIGNALED | vq::WR_SOLICITED | vq::WR_INLINE |
                                 vq::WR_IP_CSUM;

/** Start a work request: the shared part of every builder. @p Ud: the
 *  builder was installed on a UD QP (chosen at creation, never tested per
 *  call). */
template <bool Ud>
inline wqe *begin(shm_qp *q, std::uint8_t op) noexcept
{
    if (q->err) [[unlikely]]
        return nullptr;
    if (q->cur && q->cur->need) [[unlikely]] {
        latch(q, -FI_EINVAL); // previous WR lacks its mandatory setter
        return nullptr;
    }
    if (q->sq_tail - q->sq_head > q->sq_mask) [[unlikely]] {
        latch(q, -FI_EAGAIN);
        return nullptr;
    }
    unsigned f = q->wr_flags;
    if (f & ~wr_flags_ok) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return nullptr;
    }
    if (!Ud && (f & vq::WR_IP_CSUM)) [[unlikely]] {
        latch(q, -FI_EOPNOTSUPP);
        return nullptr;
    }
    wqe *w = &q->sq[q->sq_tail & q->sq_mask];
    q->sq_tail++;
    q->cur = w;
    w->wr_id = q->wr_id;
    w->op = op;
    w->flags = static_cast<std::uint8_t>(f | (q->sq_sig_all ? vq::WR_SIGNALED : 0));
    w->num_sge = 0;
    w->len = 0;
    w->done = 0;
    w->has_data = 0;
    w->is_inline = 0;
    w->stage = wqe_stage::fresh;
    w->need = Ud ? need_ud : 0;
    // Only signalled requests report a latency: the others read no clock.
    w->posted = q->io && (w->flags & vq::WR_SIGNALED) ? env::tsc::now() : 0;
    return w;
}

inline std::uint32_t wqe_index(const shm_qp *q, const wqe *w) noexcept
{
    return static_cast<std::uint32_t>(w - q->sq);
}

// Builders of operations that UD allows come in both forms; the others
// exist only on RC/UC QPs (begin<false>) and TSO only on UD (begin<true>).
template <bool Ud>
void b_send(vq::qp *vq_) noexcept
{
    begin<Ud>(to_qp(vq_), op_send);
}
template <bool Ud>
void b_send_imm(vq::qp *vq_, std::uint32_t imm) noexcept
{
    if (wqe *w = begin<Ud>(to_qp(vq_), op_send_imm))
        w->imm = imm;
}
void b_send_inv(vq::qp *vq_, std::uint32_t rkey) noexcept
{
    if (wqe *w = begin<false>(to_qp(vq_), op_send_inv))
        w->imm = rkey;
}
void b_send_tso(vq::qp *vq_, const void *hdr, std::uint16_t hdr_sz, std::uint16_t mss) noexcept
{
    shm_qp *q = to_qp(vq_);
    wqe *w = begin<true>(q, op_tso);
    if (!w)
        return;
    if (!hdr || hdr_sz == 0 || mss == 0 || hdr_sz > max_tso_hdr) {
        latch(q, -FI_EINVAL);
        return;
    }
    if (static_cast<std::uint32_t>(hdr_sz) + mss > ud_mtu) {
        latch(q, -FI_EMSGSIZE);
        return;
    }
    w->hdr_sz = hdr_sz;
    w->mss = mss;
    // The header lives at the start of the entry's inline area; inline data follows it.
    std::memcpy(q->sq_inl + static_cast<std::size_t>(wqe_index(q, w)) * q->inl_stride, hdr, hdr_sz);
}
void b_write(vq::qp *vq_, std::uint32_t rkey, std::uint64_t raddr) noexcept
{
    if (wqe *w = begin<false>(to_qp(vq_), op_write)) {
        w->rkey = rkey;
        w->raddr = raddr;
    }
}
void b_write_imm(vq::qp *vq_, std::uint32_t rkey, std::uint64_t raddr, std::uint32_t imm) noexcept
{
    if (wqe *w = begin<false>(to_qp(vq_), op_write_imm)) {
        w->rkey = rkey;
        w->raddr = raddr;
        w->imm = imm;
    }
}
void b_read(vq::qp *vq_, std::uint32_t rkey, std::uint64_t raddr) noexcept
{
    if (wqe *w = begin<false>(to_qp(vq_), op_read)) {
        w->rkey = rkey;
        w->raddr = raddr;
    }
}
inline void atomic_common(shm_qp *q, std::uint8_t op, std::uint32_t rkey, std::uint64_t raddr,
                          std::uint64_t a0, std::uint64_t a1) noexcept
{
    wqe *w = begin<false>(q, op);
    if (!w)
        return;
    if (raddr & 7) {
        latch(q, -FI_EINVAL);
        return;
    }
    w->rkey = rkey;
    w->raddr = raddr;
    w->a0 = a0;
    w->a1 = a1;
}
void b_cas(vq::qp *vq_, std::uint32_t rkey, std::uint64_t raddr, std::uint64_t cmp, std::uint64_t swp) noexcept
{
    atomic_common(to_qp(vq_), op_cas, rkey, raddr, cmp, swp);
}
void b_faa(vq::qp *vq_, std::uint32_t rkey, std::uint64_t raddr, std::uint64_t add) noexcept
{
    atomic_common(to_qp(vq_), op_faa, rkey, raddr, add, 0);
}
void b_bind(vq::qp *vq_, vq::mw *mw, std::uint32_t rkey, const vq::mw_bind_info *info) noexcept
{
    shm_qp *q = to_qp(vq_);
    wqe *w = begin<false>(q, op_bind);
    if (!w)
        return;
    if (!mw || !info || mw->ctx != q->ctx || (info->mr && info->mr->ctx != q->ctx) ||
        (info->length && !info->mr) || (rkey & ~0xffu) != (mw->rkey & ~0xffu) ||
        (info->mw_access_flags & ~vq::ACCESS_MW_ALL)) {
        latch(q, -FI_EINVAL);
        return;
    }
    w->p0 = mw;
    w->p1 = info->mr;
    w->rkey = rkey;
    w->a0 = info->addr;
    w->a1 = info->length;
    w->imm = info->mw_access_flags;
    w->need = 0; // no setters
}
void b_local_inv(vq::qp *vq_, std::uint32_t rkey) noexcept
{
    shm_qp *q = to_qp(vq_);
    if (wqe *w = begin<false>(q, op_local_inv)) {
        w->imm = rkey;
        w->need = 0;
    }
}
void b_flush(vq::qp *vq_, std::uint32_t rkey, std::uint64_t raddr, std::size_t len, std::uint8_t type,
             std::uint8_t level) noexcept
{
    shm_qp *q = to_qp(vq_);
    wqe *w = begin<false>(q, op_flush);
    if (!w)
        return;
    if ((type != vq::FLUSH_GLOBAL && type != vq::FLUSH_PERSISTENT) ||
        (level != vq::FLUSH_RANGE && level != vq::FLUSH_MR)) {
        latch(q, -FI_EINVAL);
        return;
    }
    w->rkey = rkey;
    w->raddr = raddr;
    w->a0 = len;
    w->a1 = static_cast<std::uint64_t>(type) | (static_cast<std::uint64_t>(level) << 8);
}

/* ---- setters ---- */

/** The WR a data setter applies to, or null (latched). */
inline wqe *data_target(shm_qp *q, bool inl) noexcept
{
    if (q->err) [[unlikely]]
        return nullptr;
    wqe *w = q->cur;
    if (!w || w->has_data) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return nullptr;
    }
    switch (w->op) {
    case op_bind:
    case op_local_inv:
        latch(q, -FI_EOPNOTSUPP);
        return nullptr;
    case op_read:
    case op_cas:
    case op_faa:
    case op_flush:
        if (inl) {
            latch(q, -FI_EOPNOTSUPP);
            return nullptr;
        }
        break;
    default:
        break;
    }
    w->has_data = 1;
    return w;
}

/** Length rules of the data setters; UD messages (not TSO sends) are
 *  bounded by the UD MTU, everything else by the message size. */
template <bool Ud>
inline bool check_len(shm_qp *q, wqe *w, std::uint64_t len) noexcept
{
    if (!Ud && (w->op == op_cas || w->op == op_faa) && len != 8) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return false;
    }
    std::uint64_t lim = max_msg;
    if (Ud && w->op != op_tso)
        lim = ud_mtu;
    if (len > lim) [[unlikely]] {
        latch(q, -FI_EMSGSIZE);
        return false;
    }
    return true;
}

template <bool Ud>
void s_sge(vq::qp *vq_, std::uint32_t lkey, std::uint64_t addr, std::uint32_t len) noexcept
{
    shm_qp *q = to_qp(vq_);
    wqe *w = data_target(q, false);
    if (!w || !check_len<Ud>(q, w, len))
        return;
    vq::sge &s = q->sq_sge[static_cast<std::size_t>(wqe_index(q, w)) * q->max_sge_cap];
    s.addr = addr;
    s.length = len;
    s.lkey = lkey;
    w->num_sge = 1;
    w->len = len;
}

template <bool Ud>
void s_sge_list(vq::qp *vq_, std::size_t n, const vq::sge *list) noexcept
{
    shm_qp *q = to_qp(vq_);
    wqe *w = data_target(q, false);
    if (!w)
        return;
    if (n > 0 && !list) {
        latch(q, -FI_EINVAL);
        return;
    }
    if (n > q->cap.max_send_sge) {
        latch(q, -FI_E2BIG);
        return;
    }
    std::uint64_t total = 0;
    vq::sge *dst = &q->sq_sge[static_cast<std::size_t>(wqe_index(q, w)) * q->max_sge_cap];
    for (std::size_t i = 0; i < n; i++) {
        dst[i] = list[i];
        total += list[i].length;
    }
    if (!check_len<Ud>(q, w, total))
        return;
    w->num_sge = static_cast<std::uint16_t>(n);
    w->len = static_cast<std::uint32_t>(total);
}

inline std::uint8_t *inline_area(shm_qp *q, wqe *w) noexcept
{
    std::uint8_t *p = q->sq_inl + static_cast<std::size_t>(wqe_index(q, w)) * q->inl_stride;
    return w->op == op_tso ? p + max_tso_hdr : p;
}

template <bool Ud>
void s_inline(vq::qp *vq_, const void *addr, std::size_t len) noexcept
{
    shm_qp *q = to_qp(vq_);
    wqe *w = data_target(q, true);
    if (!w)
        return;
    if (len > q->cap.max_inline_data) [[unlikely]] {
        latch(q, -FI_EMSGSIZE);
        return;
    }
    if (len && !addr) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return;
    }
    if (!check_len<Ud>(q, w, len))
        return;
    if (len <= 64)
        small_copy(inline_area(q, w), addr, static_cast<std::uint32_t>(len));
    else
        std::memcpy(inline_area(q, w), addr, len);
    w->is_inline = 1;
    w->len = static_cast<std::uint32_t>(len);
}

template <bool Ud>
void s_inline_list(vq::qp *vq_, std::size_t n, const vq::data_buf *list) noexcept
{
    shm_qp *q = to_qp(vq_);
    wqe *w = data_target(q, true);
    if (!w)
        return;
    if (n > 0 && !list) {
        latch(q, -FI_EINVAL);
        return;
    }
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; i++) {
        if (list[i].length && !list[i].addr) {
            latch(q, -FI_EINVAL);
            return;
        }
        total += list[i].length;
        if (total > q->cap.max_inline_data) {
            latch(q, -FI_EMSGSIZE);
            return;
        }
    }
    if (!check_len<Ud>(q, w, total))
        return;
    std::uint8_t *dst = inline_area(q, w);
    for (std::size_t i = 0; i < n; i++) {
        if (!list[i].length)
            continue; // an empty piece may have no address: memcpy must not see it
        std::memcpy(dst, list[i].addr, list[i].length);
        dst += list[i].length;
    }
    w->is_inline = 1;
    w->len = static_cast<std::uint32_t>(total);
}

void s_ud_addr(vq::qp *vq_, vq::ah *ah, std::uint32_t qpn, std::uint32_t qkey) noexcept
{
    shm_qp *q = to_qp(vq_);
    if (q->err)
        return;
    wqe *w = q->cur;
    if (!w || !ah || ah->ctx != q->ctx) {
        latch(q, -FI_EINVAL);
        return;
    }
    peer *p = static_cast<shm_ah *>(ah)->p;
    ud_dest *d = &q->dests[q->last_dest];
    if (!q->ndests || d->p != p || d->qpn != qpn) [[unlikely]] {
        // Hash lookup of (peer, QP number); new destinations are added.
        std::uint32_t h = static_cast<std::uint32_t>((reinterpret_cast<std::uintptr_t>(p) >> 6) * 0x9e3779b1u ^ qpn);
        d = nullptr;
        for (std::uint32_t k = 0; k < ud_dest_hash; k++) {
            std::uint16_t &slot = q->dest_hash[(h + k) & (ud_dest_hash - 1)];
            if (slot == 0) {
                if (q->ndests == max_ud_dests) {
                    latch(q, -FI_ENOSPC);
                    return;
                }
                d = &q->dests[q->ndests];
                *d = ud_dest{};
                d->p = p;
                d->qpn = qpn;
                {
                    // First use of this destination (slow path): keep its
                    // context attached as long as the entry exists.
                    std::lock_guard<std::mutex> g(q->sctx->lock);
                    p->refs++;
                }
                slot = static_cast<std::uint16_t>(++q->ndests);
                break;
            }
            ud_dest &e = q->dests[slot - 1];
            if (e.p == p && e.qpn == qpn) {
                d = &e;
                break;
            }
        }
        q->last_dest = static_cast<std::uint32_t>(d - q->dests);
    }
    w->p0 = d;
    w->qkey = qkey;
    w->need &= ~need_ud;
}

/** A batch of one small unsignaled inline send on an idle RC/UC queue:
 *  write it into the ring now, as sq_progress would, and retire it.
 *  @return false to take the general path. */
inline bool single_slot_send(shm_qp *q) noexcept
{
    wqe *w = &q->sq[q->sq_start & q->sq_mask];
    if ((w->op != op_send && w->op != op_send_imm) || !w->is_inline || w->len > slot_payload ||
        (w->flags & vq::WR_SIGNALED) || q->state.load(std::memory_order_relaxed) != static_cast<std::uint32_t>(vq::qp_state::rts))
        return false;
    txring r{q->tx_slots, q->tx_ctrl, q->tx_mask, &q->tx_tail, &q->tx_credit_head};
    if (!ring_reserve(r, 1))
        return false;
    src_cursor c;
    c.flat = q->sq_inl + static_cast<std::size_t>(w - q->sq) * q->inl_stride;
    std::uint8_t fl = sf_first | sf_last | ((w->flags & vq::WR_SOLICITED) ? sf_solicited : 0);
    ring_put(r, w->op == op_send ? msg_send : msg_send_imm, fl, w->imm, c, w->len, w->len);
    env::stats::on_tx(q->io, w->len);
    q->sq_head = q->sq_exec = q->sq_tail;
    return true;
}

/* ---- session ---- */

/** This thread's identity for session checks: the thread pointer (one
 *  register read, no TLS lookup). */
inline std::uintptr_t this_thread() noexcept { return reinterpret_cast<std::uintptr_t>(__builtin_thread_pointer()); }

/** The session API was misused (@p what): report it — an assertion in a
 *  debug build, a log line — and leave the QP as a correct caller needs it:
 *  nothing is locked or unlocked here, no batch of another caller changes. */
SHUNT_COLD void session_misuse(shm_qp *q, const char *what) noexcept
{
    SHUNT_LOG(shm_post_log, error, "QP %#x: %s (the session API needs wr_start, builders, then one "
              "wr_complete or wr_abort)", q->qp_num, what);
    assert(!"session API misuse: see the log line above");
}

/** Has this thread a session open on @p q? Only this thread stores its own
 *  identity there, so the relaxed load never sees it stale. */
inline bool own_session(const shm_qp *q) noexcept
{
    return q->session.load(std::memory_order_relaxed) == this_thread();
}

/** A single-call post inside this thread's own open session would wait for
 *  the QP lock this thread holds (or, with a thread domain, rewrite the open
 *  batch): the call fails, and the open batch fails at its wr_complete. */
SHUNT_COLD int post_in_session(shm_qp *q) noexcept
{
    session_misuse(q, "single-call post while this thread's session is open");
    latch(q, -FI_EOPBADSTATE);
    return -FI_EOPBADSTATE;
}

template <bool Locked>
void wr_start(vq::qp *vq_) noexcept
{
    shm_qp *q = to_qp(vq_);
    const std::uintptr_t me = this_thread();
    if (own_session(q)) [[unlikely]] {
        // A second wr_start of this thread: taking the lock again would
        // never return. The open batch fails at its wr_complete instead.
        session_misuse(q, "wr_start while this thread's session is open");
        latch(q, -FI_EOPBADSTATE);
        return;
    }
    if constexpr (Locked)
        q->lock.lock();
    q->session.store(me, std::memory_order_relaxed);
    std::uint32_t st = q->state.load(std::memory_order_relaxed);
    q->err = (st == static_cast<std::uint32_t>(vq::qp_state::rts) ||
              st == static_cast<std::uint32_t>(vq::qp_state::err))
                 ? 0
                 : -FI_EOPBADSTATE;
    q->sq_start = q->sq_tail;
    q->cur = nullptr;
}

template <bool Locked, bool Ud>
int wr_complete(vq::qp *vq_) noexcept
{
    shm_qp *q = to_qp(vq_);
    if (q->session.load(std::memory_order_relaxed) != this_thread()) [[unlikely]] {
        session_misuse(q, "wr_complete without wr_start");
        return -FI_EOPBADSTATE; // no batch of ours: nothing to commit, no lock to release
    }
    int rc = q->err;
    if (rc == 0 && q->cur && q->cur->need) [[unlikely]]
        rc = -FI_EINVAL;
    q->cur = nullptr;
    if (rc) [[unlikely]] {
        q->sq_tail = q->sq_start; // discard the whole batch
        q->err = 0;
        if (rc != -FI_EAGAIN)
            env::stats::on_error(q->io);
    } else if (!Ud && q->sq_tail == q->sq_start + 1 && q->sq_head == q->sq_start && single_slot_send(q)) {
        // done: the one small unsignaled send went straight into the ring
    } else if (q->sq_head != q->sq_tail) {
        env::stats::on_depth(q->io, q->sq_tail - q->sq_head); // with the batch: sq_progress gives the rest
        sq_progress(q, false);
    }
    q->session.store(0, std::memory_order_relaxed);
    if constexpr (Locked)
        q->lock.unlock();
    return rc;
}

template <bool Locked>
void wr_abort(vq::qp *vq_) noexcept
{
    shm_qp *q = to_qp(vq_);
    if (q->session.load(std::memory_order_relaxed) != this_thread()) [[unlikely]] {
        session_misuse(q, "wr_abort without wr_start");
        return;
    }
    q->session.store(0, std::memory_order_relaxed);
    q->sq_tail = q->sq_start;
    q->err = 0;
    q->cur = nullptr;
    if constexpr (Locked)
        q->lock.unlock();
}

/** A signaled single-call send (or any on a QP with sq_sig_all) on an idle
 *  queue: straight into the ring as an unsignaled one goes, its completion
 *  written at once into the send CQ, in order (the queue is idle), without
 *  a send-queue entry. Room for the completion is taken first, under the
 *  CQ's lock (QP lock, then CQ lock, as sq_run takes them); then @p put(slot
 *  flags) writes and publishes the message and says whether the ring had
 *  room; its @p len bytes are counted. @return whether it was sent (else:
 *  the session, which owes the completion when the CQ is full). */
template <bool Locked, class Put>
[[gnu::always_inline]] inline bool send_signaled_direct(shm_qp *q, std::uint64_t wr_id, unsigned flags,
                                                        std::uint32_t len, Put &&put) noexcept
{
    const std::uint64_t posted = env::stats::stamp(q->io);
    shm_cq *c = q->scq;
    bool done = false;
    if constexpr (Locked)
        q->lock.lock();
    if (q->sq_head == q->sq_tail &&
        q->state.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(vq::qp_state::rts)) {
        if (!c->single_threaded)
            c->lock.lock();
        if (c->space() > 0 && put(std::uint8_t(sf_first | sf_last | ((flags & vq::WR_SOLICITED) ? sf_solicited : 0)))) {
            fill_wc(*c->next_entry(), wr_id, vq::wc_status::success, vq::wc_opcode::send, 0, q->qp_num);
            c->commit();
            done = true;
        }
        if (!c->single_threaded)
            c->lock.unlock();
    }
    if constexpr (Locked)
        q->lock.unlock();
    if (done) {
        env::stats::on_tx(q->io, len);
        env::stats::on_complete(q->io, posted);
    }
    return done;
}

/** A signaled small inline post_send on an idle queue (send_signaled_direct):
 *  one slot, as the unsignaled fast path writes it. Out of line: that path
 *  keeps its registers. */
template <bool Locked>
[[gnu::noinline]] bool send_signaled_inline(shm_qp *q, std::uint64_t wr_id, const void *buf, std::uint32_t len,
                                            unsigned flags) noexcept
{
    if ((flags & ~(vq::WR_SOLICITED | vq::WR_FENCE | vq::WR_SIGNALED)) != vq::WR_INLINE || len > slot_payload ||
        len > q->cap.max_inline_data || (!buf && len != 0))
        return false;
    return send_signaled_direct<Locked>(q, wr_id, flags, len, [&](std::uint8_t fl) {
        txring r{q->tx_slots, q->tx_ctrl, q->tx_mask, &q->tx_tail, &q->tx_credit_head};
        if (!ring_reserve(r, 1))
            return false;
        src_cursor c;
        c.flat = static_cast<const std::uint8_t *>(buf);
        ring_put(r, msg_send, fl, 0, c, len, len);
        return true;
    });
}

/** post_send beyond its unsignaled ring-direct path: a signaled small
 *  inline one on an idle queue by send_signaled_inline, else as a session
 *  of one request. Out of line: the fast path keeps a small frame. */
template <bool Locked>
[[gnu::noinline]] int send_session(shm_qp *q, std::uint64_t wr_id, const void *buf, std::uint32_t len,
                                   std::uint32_t lkey, unsigned flags) noexcept
{
    if (((flags & vq::WR_SIGNALED) || q->sq_sig_all) && send_signaled_inline<Locked>(q, wr_id, buf, len, flags))
        return 0;
    wr_start<Locked>(q);
    q->wr_id = wr_id;
    q->wr_flags = flags & ~vq::WR_INLINE;
    b_send<false>(q);
    if (flags & vq::WR_INLINE)
        s_inline<false>(q, buf, len);
    else
        s_sge<false>(q, lkey, reinterpret_cast<std::uintptr_t>(buf), len);
    return wr_complete<Locked, false>(q);
}

/* Single-call posts (RC/UC): the session, inlined. */
template <bool Locked>
int post_send(vq::qp *vq_, std::uint64_t wr_id, const void *buf, std::uint32_t len, std::uint32_t lkey,
              unsigned flags) noexcept
{
    shm_qp *q = to_qp(vq_);
    if (own_session(q)) [[unlikely]]
        return post_in_session(q);
    // Fast path: a small unsignaled inline send on an idle send queue goes
    // straight into the ring (what the session would do, minus the queue).
    if ((flags & ~(vq::WR_SOLICITED | vq::WR_FENCE)) == vq::WR_INLINE && !q->sq_sig_all &&
        len <= slot_payload && len <= q->cap.max_inline_data && (buf || len == 0)) [[likely]] {
        if constexpr (Locked)
            q->lock.lock();
        if (q->sq_head == q->sq_tail &&
            q->state.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(vq::qp_state::rts)) [[likely]] {
            txring r{q->tx_slots, q->tx_ctrl, q->tx_mask, &q->tx_tail, &q->tx_credit_head};
            if (ring_reserve(r, 1)) [[likely]] {
                src_cursor c;
                c.flat = static_cast<const std::uint8_t *>(buf);
                std::uint8_t fl = sf_first | sf_last | ((flags & vq::WR_SOLICITED) ? sf_solicited : 0);
                ring_put(r, msg_send, fl, 0, c, len, len);
                env::stats::on_tx(q->io, len);
                if constexpr (Locked)
                    q->lock.unlock();
                return 0;
            }
        }
        if constexpr (Locked)
            q->lock.unlock();
    }
    return send_session<Locked>(q, wr_id, buf, len, lkey, flags);
}

/** The ring-direct part of the single-call send_imms: under the QP's lock
 *  (@p Locked), on an idle send queue in RTS, @p put(slot flags) writes and
 *  publishes the message and says whether the ring had room; its @p len
 *  bytes are counted. @return whether it was sent (else: the session). */
template <bool Locked, class Put>
[[gnu::always_inline]] inline bool send_direct(shm_qp *q, unsigned flags, std::uint32_t len, Put &&put) noexcept
{
    if constexpr (Locked)
        q->lock.lock();
    bool done = false;
    if (q->sq_head == q->sq_tail &&
        q->state.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(vq::qp_state::rts)) [[likely]] {
        done = put(std::uint8_t(sf_first | sf_last | ((flags & vq::WR_SOLICITED) ? sf_solicited : 0)));
        if (done)
            env::stats::on_tx(q->io, len);
    }
    if constexpr (Locked)
        q->lock.unlock();
    return done;
}

/** post_send_imm_inline beyond one slot: consecutive slots through the
 *  cursor. @return whether the ring had room. */
[[gnu::noinline]] bool put_gathered(shm_qp *q, std::uint8_t fl, std::uint32_t imm, const vq::data_buf *list,
                                    std::uint32_t len) noexcept
{
    txring r{q->tx_slots, q->tx_ctrl, q->tx_mask, &q->tx_tail, &q->tx_credit_head};
    if (!ring_reserve(r, slots_for(len)))
        return false;
    src_cursor c;
    c.bufs = list;
    ring_put(r, msg_send_imm, fl, imm, c, len, len);
    return true;
}

/** The bytes of the @p n pieces of @p list, when a send_imm of them goes
 *  straight into the ring: every piece with an address (or empty), within
 *  the QP's inline limit and one chunk. @return whether it may. */
inline bool imm_direct_len(const shm_qp *q, const vq::data_buf *list, std::size_t n, std::uint32_t *len) noexcept
{
    std::size_t total = 0;
    bool ok = true;
    for (std::size_t i = 0; i < n; i++) {
        total += list[i].length;
        ok &= list[i].addr != nullptr || list[i].length == 0;
    }
    *len = static_cast<std::uint32_t>(total);
    // One slot's payload is always within a chunk (ring_slots_ok: 64 slots at least).
    return ok && total <= q->cap.max_inline_data && (total <= slot_payload || total <= max_chunk_bytes(q->tx_mask + 1));
}

/** Write a send_imm of the pieces of @p list (@p len bytes, imm_direct_len)
 *  into the peer's ring with slot flags @p fl. @return whether it had room. */
inline bool put_imm(shm_qp *q, std::uint8_t fl, std::uint32_t imm, const vq::data_buf *list, std::size_t n,
                    std::uint32_t len) noexcept
{
    if (len > slot_payload) [[unlikely]]
        return put_gathered(q, fl, imm, list, len);
    // One line: the pieces straight into the slot, no cursor (and no ring
    // descriptor in memory: the fields stay in registers).
    const txring r{q->tx_slots, q->tx_ctrl, q->tx_mask, &q->tx_tail, &q->tx_credit_head};
    if (!ring_reserve(r, 1)) [[unlikely]]
        return false;
    ring_put_one(r, msg_send_imm, fl, imm, list, n, len);
    return true;
}

/** A signaled send_imm on an idle queue (send_signaled_direct). Out of
 *  line: the unsignaled path keeps its registers. */
template <bool Locked>
[[gnu::noinline]] bool send_imm_signaled(shm_qp *q, std::uint64_t wr_id, std::uint32_t imm, const vq::data_buf *list,
                                         std::size_t n, unsigned flags) noexcept
{
    std::uint32_t len;
    if ((flags & ~(vq::WR_SOLICITED | vq::WR_FENCE | vq::WR_INLINE | vq::WR_SIGNALED)) != 0 || !list ||
        !imm_direct_len(q, list, n, &len))
        return false;
    return send_signaled_direct<Locked>(q, wr_id, flags, len,
                                        [&](std::uint8_t fl) { return put_imm(q, fl, imm, list, n, len); });
}

/** post_send_imm_inline beyond its unsignaled ring-direct path: a signaled
 *  one on an idle queue by send_imm_signaled, else (busy queue, beyond a
 *  chunk, bad input, a full send CQ) as a session of one request. Out of
 *  line: the one-slot path below keeps a small frame. */
template <bool Locked>
[[gnu::noinline]] int send_imm_session(shm_qp *q, std::uint64_t wr_id, std::uint32_t imm, const vq::data_buf *list,
                                       std::size_t n, unsigned flags) noexcept
{
    if (((flags & vq::WR_SIGNALED) || q->sq_sig_all) && send_imm_signaled<Locked>(q, wr_id, imm, list, n, flags))
        return 0;
    wr_start<Locked>(q);
    q->wr_id = wr_id;
    q->wr_flags = flags & ~vq::WR_INLINE;
    b_send_imm<false>(q, imm);
    s_inline_list<false>(q, n, list);
    return wr_complete<Locked, false>(q);
}

/** post_send_imm_inline (RC/UC): an unsignaled one on an idle queue is
 *  gathered straight into the peer's ring, header and payload in one copy
 *  (one slot up to slot_payload bytes, consecutive slots beyond, up to the
 *  QP's inline limit and one chunk); anything else is the session
 *  (send_imm_session, which sends a signaled one on an idle queue the same
 *  way, send_imm_signaled). */
template <bool Locked>
int post_send_imm_inline(vq::qp *vq_, std::uint64_t wr_id, std::uint32_t imm, const vq::data_buf *list,
                         std::size_t n, unsigned flags) noexcept
{
    shm_qp *q = to_qp(vq_);
    if (own_session(q)) [[unlikely]]
        return post_in_session(q);
    if ((flags & ~(vq::WR_SOLICITED | vq::WR_FENCE | vq::WR_INLINE)) == 0 && !q->sq_sig_all && list) [[likely]] {
        std::uint32_t len;
        if (imm_direct_len(q, list, n, &len) &&
            send_direct<Locked>(q, flags, len, [&](std::uint8_t fl) { return put_imm(q, fl, imm, list, n, len); }))
            return 0;
    }
    return send_imm_session<Locked>(q, wr_id, imm, list, n, flags);
}

/** post_send_imm_hdr_inline (RC/UC): an unsignaled one on an idle queue
 *  whose word and payload fit one slot goes straight into the peer's ring
 *  (the word as one store, no list walked); anything else is
 *  post_send_imm_inline of the two. */
template <bool Locked>
int post_send_imm_hdr_inline(vq::qp *vq_, std::uint64_t wr_id, std::uint32_t imm, std::uint64_t hdr,
                             const void *buf, std::uint32_t len, unsigned flags) noexcept
{
    shm_qp *q = to_qp(vq_);
    constexpr std::uint32_t word = sizeof hdr;
    if ((flags & ~(vq::WR_SOLICITED | vq::WR_FENCE | vq::WR_INLINE)) == 0 && !q->sq_sig_all &&
        len <= slot_payload - word && len + word <= q->cap.max_inline_data && (buf || len == 0) &&
        !own_session(q)) [[likely]] {
        if (send_direct<Locked>(q, flags, len + word, [&](std::uint8_t fl) {
                const txring r{q->tx_slots, q->tx_ctrl, q->tx_mask, &q->tx_tail, &q->tx_credit_head};
                if (!ring_reserve(r, 1)) [[unlikely]]
                    return false;
                ring_put_word(r, msg_send_imm, fl, imm, hdr, buf, len);
                return true;
            }))
            return 0;
    }
    const vq::data_buf list[2] = {{&hdr, word}, {buf, len}};
    return post_send_imm_inline<Locked>(vq_, wr_id, imm, list, 2, flags);
}

template <bool Locked>
int post_write(vq::qp *vq_, std::uint64_t wr_id, const void *buf, std::uint32_t len, std::uint32_t lkey,
               std::uint32_t rkey, std::uint64_t raddr, unsigned flags) noexcept
{
    shm_qp *q = to_qp(vq_);
    if (own_session(q)) [[unlikely]]
        return post_in_session(q);
    wr_start<Locked>(q);
    q->wr_id = wr_id;
    q->wr_flags = flags & ~vq::WR_INLINE;
    b_write(q, rkey, raddr);
    if (flags & vq::WR_INLINE)
        s_inline<false>(q, buf, len);
    else
        s_sge<false>(q, lkey, reinterpret_cast<std::uintptr_t>(buf), len);
    return wr_complete<Locked, false>(q);
}

/** Lent receives post nothing (qp_init_attr::lend_recv). */
int post_recv_lend(vq::qp *, std::uint64_t, const vq::sge *, std::uint32_t) noexcept
{
    return -FI_EINVAL;
}

template <bool Locked>
int post_recv(vq::qp *vq_, std::uint64_t wr_id, const vq::sge *sg, std::uint32_t n) noexcept
{
    shm_qp *q = to_qp(vq_);
    if (q->ssrq) [[unlikely]]
        return -FI_EINVAL;
    std::uint32_t st = q->state.load(std::memory_order_relaxed);
    if (st == static_cast<std::uint32_t>(vq::qp_state::reset)) [[unlikely]]
        return -FI_EOPBADSTATE;
    if (n > q->cap.max_recv_sge) [[unlikely]]
        return -FI_E2BIG;
    return rq_post(q->rq, Locked, wr_id, sg, n);
}

/** UD has no address in a single-call post: use the session (qp_fp.h). */
int post_send_ud(vq::qp *, std::uint64_t, const void *, std::uint32_t, std::uint32_t, unsigned) noexcept
{
    return -FI_EINVAL;
}
int post_send_imm_inline_ud(vq::qp *, std::uint64_t, std::uint32_t, const vq::data_buf *, std::size_t,
                            unsigned) noexcept
{
    return -FI_EINVAL;
}

template <bool Locked, bool Ud>
void install_session(shm_qp *q) noexcept
{
    q->wr_start_fn = wr_start<Locked>;
    q->wr_complete_fn = wr_complete<Locked, Ud>;
    q->wr_abort_fn = wr_abort<Locked>;
    q->post_recv_fn = q->lend ? post_recv_lend : post_recv<Locked>;
    std::uint64_t ops = q->send_ops_flags;
    if (ops & vq::OPS_SEND)
        q->post_send_fn = Ud ? post_send_ud : post_send<Locked>;
    if (ops & vq::OPS_SEND_WITH_IMM) {
        q->post_send_imm_inline_fn = Ud ? post_send_imm_inline_ud : post_send_imm_inline<Locked>;
        if constexpr (!Ud)
            q->post_send_imm_hdr_inline_fn = post_send_imm_hdr_inline<Locked>; // UD: lib/vq's, which fails
    }
    if (ops & vq::OPS_RDMA_WRITE)
        q->post_write_fn = post_write<Locked>;
}

/** Builders and setters of a QP type (rdma-core's fill_wr_setters_*): the
 *  type is decided here, once, and never tested by the calls. */
template <bool Ud>
void install_builders(shm_qp *q) noexcept
{
    std::uint64_t ops = q->send_ops_flags;
    if (ops & vq::OPS_SEND) q->send_fn = b_send<Ud>;
    if (ops & vq::OPS_SEND_WITH_IMM) q->send_imm_fn = b_send_imm<Ud>;
    if constexpr (Ud) {
        if (ops & vq::OPS_TSO) q->send_tso_fn = b_send_tso;
        q->set_ud_addr_fn = s_ud_addr;
    } else {
        if (ops & vq::OPS_SEND_WITH_INV) q->send_inv_fn = b_send_inv;
        if (ops & vq::OPS_RDMA_WRITE) q->rdma_write_fn = b_write;
        if (ops & vq::OPS_RDMA_WRITE_WITH_IMM) q->rdma_write_imm_fn = b_write_imm;
        if (ops & vq::OPS_RDMA_READ) q->rdma_read_fn = b_read;
        if (ops & vq::OPS_ATOMIC_CMP_AND_SWP) q->atomic_cmp_swp_fn = b_cas;
        if (ops & vq::OPS_ATOMIC_FETCH_AND_ADD) q->atomic_fetch_add_fn = b_faa;
        if (ops & vq::OPS_BIND_MW) q->bind_mw_fn = b_bind;
        if (ops & vq::OPS_LOCAL_INV) q->local_inv_fn = b_local_inv;
        if (ops & vq::OPS_FLUSH) q->flush_fn = b_flush;
    }
    q->set_sge_fn = s_sge<Ud>;
    q->set_sge_list_fn = s_sge_list<Ud>;
    q->set_inline_data_fn = s_inline<Ud>;
    q->set_inline_data_list_fn = s_inline_list<Ud>;
}

} // namespace

void install_fast_path(shm_qp *q) noexcept
{
    // The spec's table (ops_allowed, checked by the front end) keeps the
    // RC/UC-only operations out of a UD QP's send_ops_flags and TSO out of RC/UC.
    bool ud = q->type == vq::qp_type::ud;
    if (q->has_td)
        ud ? install_session<false, true>(q) : install_session<false, false>(q);
    else
        ud ? install_session<true, true>(q) : install_session<true, false>(q);
    ud ? install_builders<true>(q) : install_builders<false>(q);
    vq::qp_stubs<latch_stub>::fill(q);
}

void latch_stub(vq::qp *q, int err) noexcept
{
    latch(to_qp(q), err);
}

} // namespace shunt::drv::shm
