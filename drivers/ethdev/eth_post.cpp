/* drivers/ethdev: the posting session (builders, setters, wr_start /
 * wr_complete / wr_abort), single-call posts and post_recv.
 *
 * A builder claims the next send-queue entry and records the operation; the
 * setters attach data and the UD address; every check that needs nothing
 * but the arguments happens here and latches the first error. wr_complete
 * either discards the batch or transmits it at once (the per-type tx
 * function), so a send leaves in the posting call. */
#include "eth.h"

namespace shunt::drv::ethdev {

namespace {

constexpr unsigned flags_known = vq::WR_FENCE | vq::WR_SIGNALED | vq::WR_SOLICITED | vq::WR_INLINE | vq::WR_IP_CSUM;

SHUNT_COLD void latch(eth_qp *q, int err) noexcept
{
    if (q->err == 0)
        q->err = err;
}

SHUNT_LOG_COMPONENT(eth_post_log, "ethdev");

void session_misuse(eth_qp *q, const char *what) noexcept
{
    common::session_misuse(eth_post_log, q->qp_num, what);
}

/** A single-call post inside this thread's own open session would wait for
 *  the lock that session holds (locked QP) or rewrite the open batch (thread
 *  domain): the call and the open batch fail. */
template <bool Locked>
inline bool refuse_in_session(eth_qp *q) noexcept
{
    bool inside;
    if constexpr (Locked)
        inside = q->session.mine();
    else
        inside = q->session_open;
    if (inside) [[unlikely]] {
        session_misuse(q, "single-call post while this thread's session is open");
        latch(q, -FI_EOPBADSTATE);
        return true;
    }
    return false;
}

/** What an operation accepts as data. */
enum : std::uint8_t { d_none, d_any, d_sge_only };
inline std::uint8_t data_kind(std::uint8_t op) noexcept
{
    switch (op) {
    case op_bind:
    case op_local_inv:
        return d_none;
    case op_read:
    case op_cas:
    case op_faa:
    case op_flush:
        return d_sge_only;
    default:
        return d_any;
    }
}

inline wqe *begin(eth_qp *q, std::uint8_t op) noexcept
{
    if (q->err) [[unlikely]]
        return nullptr;
    if (q->cur && q->cur->need_ud) [[unlikely]] {
        latch(q, -FI_EINVAL); // the previous request lacks set_ud_addr
        return nullptr;
    }
    if (q->sq_tail - q->sq_head > q->sq_mask) [[unlikely]] {
        latch(q, -FI_EAGAIN);
        return nullptr;
    }
    const unsigned f = q->wr_flags;
    if (f & ~flags_known) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return nullptr;
    }
    if ((f & vq::WR_IP_CSUM) && q->type != vq::qp_type::ud && q->type != vq::qp_type::raw_packet) [[unlikely]] {
        latch(q, -FI_EOPNOTSUPP);
        return nullptr;
    }
    wqe *w = &q->sq[q->sq_tail & q->sq_mask];
    q->sq_tail++;
    q->cur = w;
    w->wr_id = q->wr_id;
    w->op = op;
    w->flags = static_cast<std::uint8_t>(f | (q->sq_sig_all ? vq::WR_SIGNALED : 0));
    w->has_data = 0;
    w->is_inline = 0;
    w->need_ud = q->type == vq::qp_type::ud && op != op_bind && op != op_local_inv;
    w->state = ws_queued;
    w->status = 0;
    w->resp_seen = 0;
    w->num_sge = 0;
    w->len = 0;
    w->got = 0;
    w->psn = 0;
    w->npkts = 0;
    w->posted = q->io && (w->flags & vq::WR_SIGNALED) ? env::tsc::now() : 0;
    return w;
}

void b_send(vq::qp *x) noexcept { begin(to_qp(x), op_send); }
void b_send_imm(vq::qp *x, std::uint32_t imm) noexcept
{
    if (wqe *w = begin(to_qp(x), op_send_imm))
        w->imm = imm;
}
void b_send_inv(vq::qp *x, std::uint32_t rkey) noexcept
{
    if (wqe *w = begin(to_qp(x), op_send_inv))
        w->imm = rkey;
}
void b_send_tso(vq::qp *x, const void *hdr, std::uint16_t hdr_sz, std::uint16_t mss) noexcept
{
    eth_qp *q = to_qp(x);
    wqe *w = begin(q, op_tso);
    if (!w)
        return;
    if (!hdr || hdr_sz == 0 || mss == 0 || hdr_sz > max_tso_hdr) {
        latch(q, -FI_EINVAL);
        return;
    }
    // UD: each segment is one datagram (header + mss <= ud_mtu); RAW: one
    // frame (header + mss within the port's MTU plus its Ethernet header).
    std::uint32_t lim = q->type == vq::qp_type::ud ? q->p->path_mtu : q->p->mtu + wire::eth_len;
    if (static_cast<std::uint32_t>(hdr_sz) + mss > lim) {
        latch(q, -FI_EMSGSIZE);
        return;
    }
    w->hdr_sz = hdr_sz;
    w->mss = mss;
    std::memcpy(wqe_tso_hdr(q, w), hdr, hdr_sz); // copied during the call, as the spec says
}
void b_write(vq::qp *x, std::uint32_t rkey, std::uint64_t raddr) noexcept
{
    if (wqe *w = begin(to_qp(x), op_write)) {
        w->rkey = rkey;
        w->raddr = raddr;
    }
}
void b_write_imm(vq::qp *x, std::uint32_t rkey, std::uint64_t raddr, std::uint32_t imm) noexcept
{
    if (wqe *w = begin(to_qp(x), op_write_imm)) {
        w->rkey = rkey;
        w->raddr = raddr;
        w->imm = imm;
    }
}
void b_read(vq::qp *x, std::uint32_t rkey, std::uint64_t raddr) noexcept
{
    if (wqe *w = begin(to_qp(x), op_read)) {
        w->rkey = rkey;
        w->raddr = raddr;
    }
}
inline void atomic(eth_qp *q, std::uint8_t op, std::uint32_t rkey, std::uint64_t raddr, std::uint64_t a0,
                   std::uint64_t a1) noexcept
{
    wqe *w = begin(q, op);
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
void b_cas(vq::qp *x, std::uint32_t rkey, std::uint64_t raddr, std::uint64_t cmp, std::uint64_t swp) noexcept
{
    atomic(to_qp(x), op_cas, rkey, raddr, cmp, swp);
}
void b_faa(vq::qp *x, std::uint32_t rkey, std::uint64_t raddr, std::uint64_t add) noexcept
{
    atomic(to_qp(x), op_faa, rkey, raddr, add, 0);
}
void b_bind(vq::qp *x, vq::mw *mw, std::uint32_t rkey, const vq::mw_bind_info *info) noexcept
{
    eth_qp *q = to_qp(x);
    wqe *w = begin(q, op_bind);
    if (!w)
        return;
    if (!mw || !info || mw->ctx != q->ctx || (info->mr && info->mr->ctx != q->ctx) || (info->length && !info->mr) ||
        (rkey & ~0xffu) != (mw->rkey & ~0xffu) || (info->mw_access_flags & ~vq::ACCESS_MW_ALL)) {
        latch(q, -FI_EINVAL);
        return;
    }
    w->p0 = mw;
    w->p1 = info->mr;
    w->rkey = rkey;
    w->a0 = info->addr;
    w->a1 = info->length;
    w->imm = info->mw_access_flags;
}
void b_local_inv(vq::qp *x, std::uint32_t rkey) noexcept
{
    if (wqe *w = begin(to_qp(x), op_local_inv))
        w->imm = rkey;
}
void b_flush(vq::qp *x, std::uint32_t rkey, std::uint64_t raddr, std::size_t len, std::uint8_t type,
             std::uint8_t level) noexcept
{
    eth_qp *q = to_qp(x);
    wqe *w = begin(q, op_flush);
    if (!w)
        return;
    if ((type != vq::FLUSH_GLOBAL && type != vq::FLUSH_PERSISTENT) ||
        (level != vq::FLUSH_RANGE && level != vq::FLUSH_MR) || len > 0xffffffffu) {
        latch(q, -FI_EINVAL);
        return;
    }
    w->rkey = rkey;
    w->raddr = raddr;
    w->a0 = len;
    w->a1 = static_cast<std::uint64_t>(type) | (static_cast<std::uint64_t>(level) << 8);
}

/* ---- setters ---- */

/** The request a data setter applies to, after the checks every data setter shares. */
inline wqe *data_target(eth_qp *q, bool inl) noexcept
{
    if (q->err) [[unlikely]]
        return nullptr;
    wqe *w = q->cur;
    if (!w || w->has_data) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return nullptr;
    }
    std::uint8_t k = data_kind(w->op);
    if (k == d_none || (inl && k == d_sge_only)) [[unlikely]] {
        latch(q, -FI_EOPNOTSUPP);
        return nullptr;
    }
    w->has_data = 1;
    return w;
}

/** Message-size rules of the operation and QP type. */
inline bool len_ok(eth_qp *q, const wqe *w, std::uint64_t len) noexcept
{
    if ((w->op == op_cas || w->op == op_faa) && len != 8) [[unlikely]] {
        latch(q, -FI_EINVAL);
        return false;
    }
    std::uint64_t lim = max_msg;
    if (w->op != op_tso) {
        if (q->type == vq::qp_type::ud)
            lim = q->p->path_mtu;
        else if (q->type == vq::qp_type::raw_packet)
            lim = q->p->max_frame;
    }
    if (len > lim) [[unlikely]] {
        latch(q, -FI_EMSGSIZE);
        return false;
    }
    return true;
}

void s_sge(vq::qp *x, std::uint32_t lkey, std::uint64_t addr, std::uint32_t len) noexcept
{
    eth_qp *q = to_qp(x);
    wqe *w = data_target(q, false);
    if (!w || !len_ok(q, w, len))
        return;
    vq::sge *s = wqe_sges(q, w);
    s->addr = addr;
    s->length = len;
    s->lkey = lkey;
    w->num_sge = 1;
    w->len = len;
}

void s_sge_list(vq::qp *x, std::size_t n, const vq::sge *list) noexcept
{
    eth_qp *q = to_qp(x);
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
    vq::sge *d = wqe_sges(q, w);
    for (std::size_t i = 0; i < n; i++) {
        d[i] = list[i];
        total += list[i].length;
    }
    if (!len_ok(q, w, total))
        return;
    w->num_sge = static_cast<std::uint16_t>(n);
    w->len = static_cast<std::uint32_t>(total);
}

void s_inline(vq::qp *x, const void *addr, std::size_t len) noexcept
{
    eth_qp *q = to_qp(x);
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
    if (!len_ok(q, w, len))
        return;
    if (len) // an empty one may have no address: memcpy takes none
        std::memcpy(wqe_inl(q, w), addr, len);
    w->is_inline = 1;
    w->len = static_cast<std::uint32_t>(len);
}

void s_inline_list(vq::qp *x, std::size_t n, const vq::data_buf *list) noexcept
{
    eth_qp *q = to_qp(x);
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
    if (!len_ok(q, w, total))
        return;
    std::uint8_t *d = wqe_inl(q, w);
    for (std::size_t i = 0; i < n; i++) {
        if (list[i].length) // an empty piece may have no address: memcpy takes none
            std::memcpy(d, list[i].addr, list[i].length);
        d += list[i].length;
    }
    w->is_inline = 1;
    w->len = static_cast<std::uint32_t>(total);
}

void s_ud_addr(vq::qp *x, vq::ah *ah, std::uint32_t qpn, std::uint32_t qkey) noexcept
{
    eth_qp *q = to_qp(x);
    if (q->err)
        return;
    wqe *w = q->cur;
    if (!w || !ah || ah->ctx != q->ctx || qpn > wire::psn_mask) {
        latch(q, -FI_EINVAL);
        return;
    }
    w->p0 = ah;
    w->rqpn = qpn;
    w->qkey = qkey;
    w->need_ud = 0;
}

/* ---- session ---- */

/** Execute what the batch added now: transmit, complete what is done. */
inline void kick(eth_qp *q) noexcept
{
    if (qp_st(q) == vq::qp_state::rts) [[likely]] {
        switch (q->type) {
        case vq::qp_type::raw_packet: raw_tx(q, nullptr); break;
        case vq::qp_type::ud: ud_tx(q, nullptr); break;
        default: rc_tx(q, nullptr); break;
        }
        stage_flush(q);
        sq_complete(q, nullptr);
    }
    if (q->sq_head != q->sq_tail || q->nstage || qp_st(q) == vq::qp_state::err)
        q->busy.store(true, std::memory_order_release); // the PMD has not taken everything yet
}

/** The batch's start: what wr_start does after the lock (the single-call
 *  posts of a thread-domain QP start here, without the session's flag). */
inline void begin_batch(eth_qp *q) noexcept
{
    vq::qp_state s = qp_st(q);
    q->err = (s == vq::qp_state::rts || s == vq::qp_state::err) ? 0 : -FI_EOPBADSTATE;
    q->sq_start = q->sq_tail;
    q->cur = nullptr;
}

/** Execute the batch, or discard it when it latched an error: what
 *  wr_complete does before the lock is released. */
inline int commit_batch(eth_qp *q) noexcept
{
    int rc = q->err;
    if (rc == 0 && q->cur && q->cur->need_ud) [[unlikely]]
        rc = -FI_EINVAL;
    q->cur = nullptr;
    if (rc) [[unlikely]] {
        if (rc != -FI_EAGAIN)
            env::stats::on_error(q->io);
        q->sq_tail = q->sq_start; // nothing of the batch executes
        q->err = 0;
    } else if (q->sq_tail != q->sq_start) {
        kick(q);
    }
    return rc;
}

template <bool Locked>
void wr_start(vq::qp *x) noexcept
{
    eth_qp *q = to_qp(x);
    if constexpr (Locked) {
        if (q->session.mine()) [[unlikely]] {
            // Taking the lock again would never return: the open batch fails instead.
            session_misuse(q, "wr_start while this thread's session is open");
            latch(q, -FI_EOPBADSTATE);
            return;
        }
        q->lock.lock();
        q->session.open();
    } else {
        if constexpr (common::check_unlocked_sessions)
            if (q->session_open) [[unlikely]]
                session_misuse(q, "wr_start while the session is open");
        q->session_open = true; // one thread posts (thread domain): a flag is enough
    }
    begin_batch(q);
}

template <bool Locked>
int wr_complete(vq::qp *x) noexcept
{
    eth_qp *q = to_qp(x);
    if constexpr (Locked) {
        if (!q->session.mine()) [[unlikely]] {
            session_misuse(q, "wr_complete without wr_start");
            return -FI_EOPBADSTATE; // no batch of ours: nothing to commit, no lock to release
        }
    } else if constexpr (common::check_unlocked_sessions) {
        if (!q->session_open) [[unlikely]]
            session_misuse(q, "wr_complete without wr_start");
    }
    int rc = commit_batch(q);
    if constexpr (Locked) {
        q->session.close();
        q->lock.unlock();
    } else {
        q->session_open = false;
    }
    return rc;
}

template <bool Locked>
void wr_abort(vq::qp *x) noexcept
{
    eth_qp *q = to_qp(x);
    if constexpr (Locked) {
        if (!q->session.mine()) [[unlikely]] {
            session_misuse(q, "wr_abort without wr_start");
            return;
        }
    } else if constexpr (common::check_unlocked_sessions) {
        if (!q->session_open) [[unlikely]]
            session_misuse(q, "wr_abort without wr_start");
    }
    q->sq_tail = q->sq_start;
    q->err = 0;
    q->cur = nullptr;
    if constexpr (Locked) {
        q->session.close();
        q->lock.unlock();
    } else {
        q->session_open = false;
    }
}

/** A single-call post: one request, built by @p fill (a builder and its
 *  setters), in the session wr_start and wr_complete would open around it
 *  (a thread-domain QP only starts and commits the batch). */
template <bool Locked, class Fill>
inline int post_one(eth_qp *q, std::uint64_t wr_id, unsigned wr_flags, Fill &&fill) noexcept
{
    if (refuse_in_session<Locked>(q)) [[unlikely]]
        return -FI_EOPBADSTATE;
    if constexpr (Locked)
        wr_start<true>(q);
    else
        begin_batch(q);
    q->wr_id = wr_id;
    q->wr_flags = wr_flags;
    fill();
    if constexpr (Locked)
        return wr_complete<true>(q);
    else
        return commit_batch(q);
}

/** The data of a single-call post: @p buf inline (WR_INLINE) or as an SGE. */
inline void set_data(eth_qp *q, unsigned flags, const void *buf, std::uint32_t len, std::uint32_t lkey) noexcept
{
    if (flags & vq::WR_INLINE)
        s_inline(q, buf, len);
    else
        s_sge(q, lkey, reinterpret_cast<std::uintptr_t>(buf), len);
}

template <bool Locked>
int post_send(vq::qp *x, std::uint64_t wr_id, const void *buf, std::uint32_t len, std::uint32_t lkey,
              unsigned flags) noexcept
{
    eth_qp *q = to_qp(x);
    if (q->type == vq::qp_type::ud) [[unlikely]]
        return -FI_EINVAL; // no address: use the session
    return post_one<Locked>(q, wr_id, flags & ~vq::WR_INLINE, [&] {
        b_send(q);
        set_data(q, flags, buf, len, lkey);
    });
}

/** post_send_imm_inline (qp_fp.h): the session sequence lib/vq would run
 *  through its indirect calls, made here with direct ones. */
template <bool Locked>
int post_send_imm_inline(vq::qp *x, std::uint64_t wr_id, std::uint32_t imm_data, const vq::data_buf *list,
                         std::size_t n, unsigned flags) noexcept
{
    eth_qp *q = to_qp(x);
    if (q->type == vq::qp_type::ud) [[unlikely]]
        return -FI_EINVAL; // no address: use the session
    return post_one<Locked>(q, wr_id, flags | vq::WR_INLINE, [&] {
        b_send_imm(q, imm_data);
        s_inline_list(q, n, list);
    });
}

template <bool Locked>
int post_write(vq::qp *x, std::uint64_t wr_id, const void *buf, std::uint32_t len, std::uint32_t lkey,
               std::uint32_t rkey, std::uint64_t raddr, unsigned flags) noexcept
{
    eth_qp *q = to_qp(x);
    return post_one<Locked>(q, wr_id, flags & ~vq::WR_INLINE, [&] {
        b_write(q, rkey, raddr);
        set_data(q, flags, buf, len, lkey);
    });
}

/** Lent receives post nothing (qp_init_attr::lend_recv). */
int post_recv_lend(vq::qp *, std::uint64_t, const vq::sge *, std::uint32_t) noexcept
{
    return -FI_EINVAL;
}

template <bool Locked>
int post_recv(vq::qp *x, std::uint64_t wr_id, const vq::sge *sg, std::uint32_t n) noexcept
{
    eth_qp *q = to_qp(x);
    if (q->ssrq) [[unlikely]]
        return -FI_EINVAL;
    vq::qp_state s = qp_st(q);
    if (s == vq::qp_state::reset) [[unlikely]]
        return -FI_EOPBADSTATE;
    if (n > q->cap.max_recv_sge) [[unlikely]]
        return -FI_E2BIG;
    int rc = rq_post(q->rq, Locked, wr_id, sg, n);
    if (rc == 0 && (s == vq::qp_state::err || rx_peek(q)))
        q->busy.store(true, std::memory_order_release); // flush it, or frames wait for it
    return rc;
}

template <bool Locked>
void install_session(eth_qp *q) noexcept
{
    q->wr_start_fn = wr_start<Locked>;
    q->wr_complete_fn = wr_complete<Locked>;
    q->wr_abort_fn = wr_abort<Locked>;
    q->post_recv_fn = q->lend ? post_recv_lend : post_recv<Locked>;
    if (q->send_ops_flags & vq::OPS_SEND)
        q->post_send_fn = post_send<Locked>;
    if (q->send_ops_flags & vq::OPS_RDMA_WRITE)
        q->post_write_fn = post_write<Locked>;
    if (q->send_ops_flags & vq::OPS_SEND_WITH_IMM)
        q->post_send_imm_inline_fn = post_send_imm_inline<Locked>;
}

} // namespace

void install_fast_path(eth_qp *q) noexcept
{
    if (q->has_td)
        install_session<false>(q);
    else
        install_session<true>(q);
    const std::uint64_t ops = q->send_ops_flags;
    if (ops & vq::OPS_SEND) q->send_fn = b_send;
    if (ops & vq::OPS_SEND_WITH_IMM) q->send_imm_fn = b_send_imm;
    if (ops & vq::OPS_SEND_WITH_INV) q->send_inv_fn = b_send_inv;
    if (ops & vq::OPS_TSO) q->send_tso_fn = b_send_tso;
    if (ops & vq::OPS_RDMA_WRITE) q->rdma_write_fn = b_write;
    if (ops & vq::OPS_RDMA_WRITE_WITH_IMM) q->rdma_write_imm_fn = b_write_imm;
    if (ops & vq::OPS_RDMA_READ) q->rdma_read_fn = b_read;
    if (ops & vq::OPS_ATOMIC_CMP_AND_SWP) q->atomic_cmp_swp_fn = b_cas;
    if (ops & vq::OPS_ATOMIC_FETCH_AND_ADD) q->atomic_fetch_add_fn = b_faa;
    if (ops & vq::OPS_BIND_MW) q->bind_mw_fn = b_bind;
    if (ops & vq::OPS_LOCAL_INV) q->local_inv_fn = b_local_inv;
    if (ops & vq::OPS_FLUSH) q->flush_fn = b_flush;
    q->set_sge_fn = s_sge;
    q->set_sge_list_fn = s_sge_list;
    q->set_inline_data_fn = s_inline;
    q->set_inline_data_list_fn = s_inline_list;
    if (q->type == vq::qp_type::ud)
        q->set_ud_addr_fn = s_ud_addr;
    vq::qp_stubs<latch_stub>::fill(q);
}

void latch_stub(vq::qp *q, int err) noexcept
{
    latch(to_qp(q), err);
}

} // namespace shunt::drv::ethdev
