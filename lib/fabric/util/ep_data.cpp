// Endpoint base: the generic data-transfer calls. Every check that is cheap
// is made here (state, capability, sizes, flags, address); the provider's
// transmit hook moves the data; receives are matched in the rxq.
#include <cstdlib>
#include <cstring>
#include <new>

#include "env/errors.h"
#include "env/log.h"
#include "fabric/util/ep.h"

namespace shunt::fabric {
extern env::log::component fabric_log;
}

namespace shunt::fabric::util {

int ep_check_op_flags(const ep_core *c, bool tx, std::uint64_t f);

namespace {

enum kind_index { k_msg = 0, k_tagged = 1, k_rma = 2, k_atomic = 3 };

/** The bytes of @p iov; @p bad when an entry has a length and no base, or
 *  the sum does not fit in a size_t. */
std::size_t iov_len(const iovec *iov, std::size_t count, bool &bad)
{
    std::size_t n = 0;
    for (std::size_t i = 0; i < count; i++) {
        if (!iov[i].iov_base && iov[i].iov_len)
            bad = true;
        if (__builtin_add_overflow(n, iov[i].iov_len, &n)) [[unlikely]]
            bad = true;
    }
    return n;
}

[[gnu::cold]] ssize_t tx_flag_error(const ep_core *c, std::uint64_t flags)
{
    int rc = ep_check_op_flags(c, true, flags & ~(FI_TRANSMIT | FI_RECV | FI_MSG | FI_TAGGED));
    return rc ? rc : -FI_EBADFLAGS;
}

ssize_t post_send(fid_ep *e, tx_req::kind_t kind, const iovec *iov, void **desc, std::size_t count, fi_addr_t dest,
                  std::uint64_t tag, std::uint64_t data, std::uint64_t flags, void *context, bool inject)
{
    ep_handle *h = to_handle(e);
    ep_core *c = h->core;
    if (!ep_ready(c)) [[unlikely]]
        return -FI_EOPBADSTATE;
    bool tagged = kind == tx_req::tsend;
    if (!(c->caps & FI_SEND) || !(c->caps & (tagged ? FI_TAGGED : FI_MSG))) [[unlikely]]
        return -FI_EOPNOTSUPP;
    if (count > c->iov_limit || (!iov && count)) [[unlikely]]
        return -FI_EINVAL;
    bool bad = false;
    std::size_t len = iov_len(iov, count, bad);
    if (bad) [[unlikely]]
        return -FI_EINVAL;
    if (len > c->max_size[tagged ? k_tagged : k_msg]) [[unlikely]]
        return -FI_EMSGSIZE;
    if ((inject || (flags & FI_INJECT)) && len > c->inject_max[tagged ? k_tagged : k_msg]) [[unlikely]]
        return -FI_EMSGSIZE;
    if ((flags & FI_REMOTE_CQ_DATA) && !c->cq_data_size) [[unlikely]]
        return -FI_EINVAL;
    av_entry *peer = nullptr;
    if (c->av) {
        peer = av_get(c->av, dest);
        if (!peer) [[unlikely]]
            return -FI_EINVAL;
    }
    tx_req r{};
    r.kind = kind;
    r.iov = iov;
    r.desc = desc;
    r.count = count;
    r.len = len;
    r.dest = dest;
    r.peer = peer;
    r.tag = tag;
    r.data = data;
    r.flags = flags;
    r.context = context;
    return c->hooks->transmit(c, r);
}

constexpr std::uint64_t msg_tx_ok = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE |
                                    FI_DELIVERY_COMPLETE | FI_MORE | FI_FENCE | FI_REMOTE_CQ_DATA | FI_MULTICAST;

// ---- msg ----
ssize_t g_send(fid_ep *e, const void *buf, std::size_t len, void *desc, fi_addr_t dest, void *ctx)
{
    iovec v{const_cast<void *>(buf), len};
    return post_send(e, tx_req::send, &v, &desc, 1, dest, 0, 0, to_handle(e)->tx_default, ctx, false);
}
ssize_t g_sendv(fid_ep *e, const iovec *iov, void **desc, std::size_t count, fi_addr_t dest, void *ctx)
{
    return post_send(e, tx_req::send, iov, desc, count, dest, 0, 0, to_handle(e)->tx_default, ctx, false);
}
ssize_t g_sendmsg(fid_ep *e, const msg *m, std::uint64_t flags)
{
    if (!m) [[unlikely]] // the C++ wrappers check it; the libfabric shim calls this directly
        return -FI_EINVAL;
    if (flags & ~msg_tx_ok) [[unlikely]]
        return tx_flag_error(core_of(e), flags);
    if (flags & (FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE) & ~core_of(e)->supported_op_flags)
        [[unlikely]]
        return -FI_EOPNOTSUPP;
    return post_send(e, tx_req::send, m->msg_iov, m->desc, m->iov_count, m->addr, 0, m->data,
                     flags | to_handle(e)->tx_comp_force, m->context, false);
}
ssize_t g_inject(fid_ep *e, const void *buf, std::size_t len, fi_addr_t dest)
{
    iovec v{const_cast<void *>(buf), len};
    return post_send(e, tx_req::send, &v, nullptr, 1, dest, 0, 0,
                     (to_handle(e)->tx_op_flags | FI_INJECT) & ~FI_COMPLETION, nullptr, true);
}
ssize_t g_senddata(fid_ep *e, const void *buf, std::size_t len, void *desc, std::uint64_t data, fi_addr_t dest,
                   void *ctx)
{
    iovec v{const_cast<void *>(buf), len};
    return post_send(e, tx_req::send, &v, &desc, 1, dest, 0, data, to_handle(e)->tx_default | FI_REMOTE_CQ_DATA,
                     ctx, false);
}
ssize_t g_injectdata(fid_ep *e, const void *buf, std::size_t len, std::uint64_t data, fi_addr_t dest)
{
    iovec v{const_cast<void *>(buf), len};
    return post_send(e, tx_req::send, &v, nullptr, 1, dest, 0, data,
                     ((to_handle(e)->tx_op_flags | FI_INJECT) & ~FI_COMPLETION) | FI_REMOTE_CQ_DATA, nullptr, true);
}

// ---- tagged ----
ssize_t g_tsend(fid_ep *e, const void *buf, std::size_t len, void *desc, fi_addr_t dest, std::uint64_t tag, void *ctx)
{
    iovec v{const_cast<void *>(buf), len};
    return post_send(e, tx_req::tsend, &v, &desc, 1, dest, tag, 0, to_handle(e)->tx_default, ctx, false);
}
ssize_t g_tsendv(fid_ep *e, const iovec *iov, void **desc, std::size_t count, fi_addr_t dest, std::uint64_t tag,
                 void *ctx)
{
    return post_send(e, tx_req::tsend, iov, desc, count, dest, tag, 0, to_handle(e)->tx_default, ctx, false);
}
ssize_t g_tsendmsg(fid_ep *e, const msg_tagged *m, std::uint64_t flags)
{
    if (!m) [[unlikely]] // the C++ wrappers check it; the libfabric shim calls this directly
        return -FI_EINVAL;
    if (flags & ~msg_tx_ok) [[unlikely]]
        return tx_flag_error(core_of(e), flags);
    if (flags & (FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE) & ~core_of(e)->supported_op_flags)
        [[unlikely]]
        return -FI_EOPNOTSUPP;
    return post_send(e, tx_req::tsend, m->msg_iov, m->desc, m->iov_count, m->addr, m->tag, m->data,
                     flags | to_handle(e)->tx_comp_force, m->context, false);
}
ssize_t g_tinject(fid_ep *e, const void *buf, std::size_t len, fi_addr_t dest, std::uint64_t tag)
{
    iovec v{const_cast<void *>(buf), len};
    return post_send(e, tx_req::tsend, &v, nullptr, 1, dest, tag, 0,
                     (to_handle(e)->tx_op_flags | FI_INJECT) & ~FI_COMPLETION, nullptr, true);
}
ssize_t g_tsenddata(fid_ep *e, const void *buf, std::size_t len, void *desc, std::uint64_t data, fi_addr_t dest,
                    std::uint64_t tag, void *ctx)
{
    iovec v{const_cast<void *>(buf), len};
    return post_send(e, tx_req::tsend, &v, &desc, 1, dest, tag, data, to_handle(e)->tx_default | FI_REMOTE_CQ_DATA,
                     ctx, false);
}
ssize_t g_tinjectdata(fid_ep *e, const void *buf, std::size_t len, std::uint64_t data, fi_addr_t dest,
                      std::uint64_t tag)
{
    iovec v{const_cast<void *>(buf), len};
    return post_send(e, tx_req::tsend, &v, nullptr, 1, dest, tag, data,
                     ((to_handle(e)->tx_op_flags | FI_INJECT) & ~FI_COMPLETION) | FI_REMOTE_CQ_DATA, nullptr, true);
}

} // namespace

// ---- receive side ----

namespace {

/** The first and last sizeof(T) bytes of @p n (sizeof(T) <= n <= 2 sizeof(T)):
 *  two loads and two stores, overlapping in the middle. */
template <class T>
inline void copy_ends(unsigned char *d, const unsigned char *s, std::size_t n) noexcept
{
    T a, b;
    std::memcpy(&a, s, sizeof a);
    std::memcpy(&b, s + n - sizeof b, sizeof b);
    std::memcpy(d, &a, sizeof a);
    std::memcpy(d + n - sizeof b, &b, sizeof b);
}

/** The payload into the user's buffer: up to 16 bytes (small sends,
 *  injects) with two overlapping loads and stores instead of a call. */
inline void copy_payload(void *dst, const void *src, std::size_t n) noexcept
{
    auto *d = static_cast<unsigned char *>(dst);
    auto *s = static_cast<const unsigned char *>(src);
    if (n > 16) {
        std::memcpy(d, s, n);
    } else if (n >= 8) {
        copy_ends<std::uint64_t>(d, s, n);
    } else if (n >= 4) {
        copy_ends<std::uint32_t>(d, s, n);
    } else if (n) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
}

std::uint64_t kind_flag(bool tagged) { return tagged ? FI_TAGGED : FI_MSG; }

void copy_to(const rx_entry *e, std::size_t offset, const void *src, std::size_t len)
{
    const auto *p = static_cast<const std::uint8_t *>(src);
    for (std::size_t i = 0; i < e->iov_count && len; i++) {
        if (offset >= e->iov[i].iov_len) {
            offset -= e->iov[i].iov_len;
            continue;
        }
        std::size_t n = std::min(len, e->iov[i].iov_len - offset);
        std::memcpy(static_cast<std::uint8_t *>(e->iov[i].iov_base) + offset, p, n);
        p += n;
        len -= n;
        offset = 0;
    }
}

[[gnu::cold]] void rx_fail(ep_core *c, void *context, std::uint64_t cq_flags, int err, std::size_t len,
                           std::size_t olen, std::uint64_t data, std::uint64_t tag, fi_addr_t src, void *buf)
{
    cq_err_entry x{};
    x.op_context = context;
    x.flags = cq_flags;
    x.len = len;
    x.buf = buf;
    x.data = data;
    x.tag = tag;
    x.olen = olen;
    x.err = err;
    x.prov_errno = err;
    x.src_addr = src;
    if (c->rx_cq)
        cq_write_err(c->rx_cq, x);
    if (c->c_recv)
        cntr_inc_err(c->c_recv);
}

void unlink_entry(fifo<rx_entry> &l, rx_entry *e)
{
    rx_entry *prev = nullptr;
    for (rx_entry *x = l.head; x; prev = x, x = x->next)
        if (x == e) {
            l.unlink(prev, x);
            return;
        }
}

/** Where a message goes in a matched entry. */
struct placement {
    std::size_t offset; ///< in the entry's buffer (multi-recv: what earlier messages used)
    std::size_t n;      ///< bytes that fit (fewer than the message: truncated)
    void *buf;          ///< reported in the completion
};

/** Reserve room for @p len bytes in @p e. A multi-recv buffer that falls
 *  below the minimum leaves the posted list now (nothing more goes in) and is
 *  released by the last completion that writes into it. Rx lock held. */
placement reserve(rxq *q, rx_entry *e, bool tagged, std::size_t len)
{
    if (e->flags & FI_MULTI_RECV) {
        std::size_t room = e->total - e->used;
        placement p{e->used, std::min(len, room), static_cast<std::uint8_t *>(e->iov[0].iov_base) + e->used};
        e->used += p.n;
        if (e->total - e->used < q->min_multi_recv && !e->released) {
            unlink_entry(tagged ? q->tagged : q->msg, e);
            e->released = true;
        }
        return p;
    }
    return {0, std::min(len, e->total), e->iov_count ? e->iov[0].iov_base : nullptr};
}

/** Report a message placed into @p e (CQ entry if due, counter, or the
 *  error) on @p c's CQ; the entry goes back to @p q's pool unless it is a
 *  multi-recv buffer that stays posted (or waits for its fetches). Rx lock
 *  held. @return true if the entry went back to the pool. */
bool report(ep_core *c, rxq *q, rx_entry *e, const placement &p, bool tagged, fi_addr_t src, std::uint64_t tag,
            std::uint64_t data, std::uint64_t msg_flags, std::size_t len, int err)
{
    std::uint64_t cqf = FI_RECV | kind_flag(tagged) | (msg_flags & FI_REMOTE_CQ_DATA);
    const bool multi = e->flags & FI_MULTI_RECV;
    const bool last = !multi || (e->released && e->pending == 0);
    if (multi && last)
        cqf |= FI_MULTI_RECV;
    if (err) [[unlikely]]
        rx_fail(c, e->context, cqf, err, 0, len, data, tag, src, p.buf);
    else if (p.n < len) [[unlikely]]
        rx_fail(c, e->context, cqf, FI_ETRUNC, p.n, len - p.n, data, tag, src, p.buf);
    else {
        // A multi-recv release is always reported, even under selective
        // completion: it is how the application learns the buffer is its own again.
        if ((e->flags & FI_COMPLETION) || (multi && last))
            cq_write(c->rx_cq, e->context, cqf, p.n, p.buf, data, tag, src);
        c->inc_recv(c->c_recv);
    }
    if (last)
        q->put(e);
    return last;
}

/* Receive completions in matching order, per source.
 *
 * A rendezvous receive completes when its fetch is over, so without care a
 * smaller message the same peer sent after it would be reported first.
 * fi_endpoint(3) allows that (completion order is comp_order's, 0 here),
 * but applications that answer messages in the order they see them (an
 * echo, a request/response pair of different sizes) then read one message
 * into the buffer meant for the other. So while a fetch from a source is
 * running, the completions of messages from that source matched after it
 * are held (their bytes are in place already) and written, in order, when
 * it is over. Other sources are not held up; with no fetch running (the
 * common case, one test of rxq::nfetching) nothing is looked at. */

/** Is a fetch from @p src running? Rx lock held. */
bool fetch_running(const rxq *q, fi_addr_t src)
{
    for (const held_rx *h = q->fetching; h; h = h->fnext)
        if (h->src == src)
            return true;
    return false;
}

/** Keep a completion behind a running fetch. @return false when no record
 *  could be had (then it is reported now, out of order). Rx lock held. */
[[gnu::cold]] bool hold(ep_core *c, rxq *q, rx_entry *e, const placement &p, bool tagged, fi_addr_t src,
                        std::uint64_t tag, std::uint64_t data, std::uint64_t msg_flags, std::size_t len, int err)
{
    held_rx *h = q->held_get();
    if (!h)
        return false;
    *h = held_rx{nullptr, nullptr, c, e, src, false, tagged, err, p.offset, p.n, p.buf, tag, data, msg_flags, len};
    if (e->flags & FI_MULTI_RECV)
        e->pending++; // the buffer is not released before this is reported
    q->held.push(h);
    return true;
}

/** Report, in order, what no running fetch from the same source precedes
 *  any more. Rx lock held. */
[[gnu::cold]] void flush_held(rxq *q)
{
    held_rx *prev = nullptr;
    for (held_rx *h = q->held.head; h;) {
        held_rx *next = h->next;
        bool behind = h->fetching;
        for (const held_rx *x = q->held.head; !behind && x != h; x = x->next)
            behind = x->fetching && x->src == h->src;
        if (behind) {
            prev = h;
        } else {
            q->held.unlink(prev, h);
            if (h->e->flags & FI_MULTI_RECV)
                h->e->pending--;
            (void)report(static_cast<ep_core *>(h->reporter), q, h->e, placement{h->offset, h->n, h->buf}, h->tagged,
                         h->src, h->tag, h->data, h->msg_flags, h->len, h->err);
            q->held_put(h);
        }
        h = next;
    }
}

/** Complete a message placed into @p e: reported now, or held behind a
 *  running fetch from its source. Rx lock held. @return true if the entry
 *  went back to the pool. */
bool complete(ep_core *c, rxq *q, rx_entry *e, const placement &p, bool tagged, fi_addr_t src, std::uint64_t tag,
              std::uint64_t data, std::uint64_t msg_flags, std::size_t len, int err)
{
    if (q->nfetching && fetch_running(q, src)) [[unlikely]]
        if (hold(c, q, e, p, tagged, src, tag, data, msg_flags, len, err))
            return false;
    return report(c, q, e, p, tagged, src, tag, data, msg_flags, len, err);
}

// Place a message into a matched entry and complete it: one copy, from
// wherever the provider has it (a lent receive ring) into the user's buffer.
// Caller holds the rx lock. @return true if the entry went back to the pool
// (false: a multi-recv buffer that stays posted).
bool place(ep_core *c, rxq *q, rx_entry *e, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
           std::uint64_t msg_flags, const void *payload, std::size_t len)
{
    placement p = reserve(q, e, tagged, len);
    if (e->flags & FI_MULTI_RECV) {
        if (p.n)
            std::memcpy(p.buf, payload, p.n);
    } else {
        copy_to(e, 0, payload, p.n);
    }
    return complete(c, q, e, p, tagged, src, tag, data, msg_flags, len, 0);
}

/** Hand a matched rendezvous message to the provider's fetch. Rx lock held.
 *  @return true if the entry went back to the pool at once (the fetch could
 *  not start: completed with its error). */
bool fetch(ep_core *c, rxq *q, rx_entry *e, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
           std::uint64_t msg_flags, std::size_t len, const void *desc, std::size_t desc_len)
{
    placement p = reserve(q, e, tagged, len);
    if (e->flags & FI_MULTI_RECV)
        e->pending++;
    rx_fetch_req r;
    r.reporter = c;
    r.queue = q;
    r.tagged = tagged;
    r.src = src;
    r.tag = tag;
    r.data = data;
    r.msg_flags = msg_flags;
    r.len = len;
    r.offset = p.offset;
    r.n = p.n;
    r.desc = desc;
    r.desc_len = desc_len;
    // Its record, made before the fetch starts (the provider keeps r): later
    // completions from src wait behind it. Without one (no memory) they are
    // reported as they come.
    r.hold = q->held_get();
    int rc = c->hooks && c->hooks->rx_fetch ? c->hooks->rx_fetch(c, e, r) : -FI_ENOSYS;
    if (rc == 0) {
        if (held_rx *h = r.hold) {
            *h = held_rx{nullptr, q->fetching, c, e, src, true, tagged, 0, p.offset, p.n, p.buf, tag, data, msg_flags,
                         len};
            q->fetching = h;
            q->nfetching++;
            q->held.push(h);
        }
        return false;
    }
    if (r.hold)
        q->held_put(r.hold);
    if (e->flags & FI_MULTI_RECV)
        e->pending--;
    return complete(c, q, e, p, tagged, src, tag, data, msg_flags, len, rc > 0 ? 0 : -rc);
}

// The endpoint that reports a receive of an unexpected message: the one it
// arrived on (a receive posted to a shared receive context has no CQ of its
// own; fi_endpoint(3): completions go to the receiving endpoint's CQ).
ep_core *receiver(ep_core *posted_on, const unexp_msg *u)
{
    return u->owner ? static_cast<ep_core *>(u->owner) : posted_on;
}

/** Drop an unexpected message (FI_DISCARD); a rendezvous's sender is told. */
void discard_unexp(ep_core *r, rxq *q, unexp_msg *u)
{
    if (u->rndv && r->hooks && r->hooks->rx_discard)
        r->hooks->rx_discard(r, u->payload, u->plen);
    q->unexp_put(u);
}

/** A received unexpected message goes to entry @p e. Rx lock held. */
bool take_unexp(ep_core *posted_on, rx_entry *e, bool tagged, unexp_msg *u)
{
    rxq *q = posted_on->rx;
    ep_core *r = receiver(posted_on, u);
    bool released = u->rndv ? fetch(r, q, e, tagged, u->src, u->tag, u->data, u->flags, u->len, u->payload, u->plen)
                            : place(r, q, e, tagged, u->src, u->tag, u->data, u->flags, u->payload, u->len);
    q->unexp_put(u);
    return released;
}

/** A receive buffer's checks: at most the endpoint's iov_limit entries,
 *  none with a null base and a length. Sets @p total. */
int rx_iov_check(const ep_core *c, const iovec *iov, std::size_t count, std::size_t &total)
{
    if (count > rx_iov_max || (!iov && count)) [[unlikely]]
        return -FI_EINVAL;
    if (c->fclass != FI_CLASS_SRX_CTX && count > (c->info->rx_attr ? c->info->rx_attr->iov_limit : 1)) [[unlikely]]
        return -FI_EINVAL;
    bool bad = false;
    total = iov_len(iov, count, bad);
    return bad ? -FI_EINVAL : 0;
}

/** Entry @p e describes the (checked) buffer @p iov, nothing of it used. */
void rx_fill(rx_entry *e, void *context, std::uint64_t flags, const iovec *iov, void **desc, std::size_t count,
             std::size_t total)
{
    e->context = context;
    e->flags = flags;
    e->iov_count = count;
    for (std::size_t i = 0; i < count; i++) {
        e->iov[i] = iov[i];
        e->desc[i] = desc ? desc[i] : nullptr;
    }
    e->total = total;
    e->used = 0;
    e->pending = 0;
    e->released = false;
}

ssize_t post_recv(fid_ep *ep, const iovec *iov, void **desc, std::size_t count, fi_addr_t src, std::uint64_t tag,
                  std::uint64_t ignore, std::uint64_t flags, void *context, bool tagged)
{
    ep_handle *h = to_handle(ep);
    ep_core *c = h->core;
    if (!ep_ready(c)) [[unlikely]]
        return -FI_EOPBADSTATE;
    if (!(c->caps & FI_RECV) || !(c->caps & kind_flag(tagged))) [[unlikely]]
        return -FI_EOPNOTSUPP;
    if (ignore & c->tag_unignorable) [[unlikely]]
        return -FI_EINVAL;
    std::size_t total = 0;
    if (int rc = rx_iov_check(c, iov, count, total)) [[unlikely]]
        return rc;
    if (flags & FI_MULTI_RECV) {
        if (!(c->caps & (tagged ? FI_TAGGED_MULTI_RECV : FI_MULTI_RECV)))
            return -FI_EOPNOTSUPP;
        if (count != 1)
            return -FI_EINVAL;
    }
    guard g(c->rx->lock);
    rx_entry *e = c->rx->get();
    if (!e) [[unlikely]]
        return -FI_EAGAIN;
    rx_fill(e, context, (flags & (FI_MULTI_RECV | FI_COMPLETION)) | kind_flag(tagged), iov, desc, count, total);
    e->src = src;
    e->tag = tag;
    e->ignore = ignore;
    // Unexpected messages first: they arrived before this receive.
    fifo<unexp_msg> &ul = tagged ? c->rx->utagged : c->rx->umsg;
    if (!(flags & FI_MULTI_RECV)) {
        if (!ul.empty()) [[unlikely]]
            if (unexp_msg *u = c->rx->match_unexp(tagged, src, tag, ignore, false)) {
                take_unexp(c, e, tagged, u);
                return 0;
            }
        (tagged ? c->rx->tagged : c->rx->msg).push(e);
        return 0;
    }
    (tagged ? c->rx->tagged : c->rx->msg).push(e);
    while (!e->released)
        if (unexp_msg *u = c->rx->match_unexp(tagged, src, tag, ignore, false))
            take_unexp(c, e, tagged, u);
        else
            break;
    return 0;
}

ssize_t g_recv(fid_ep *e, void *buf, std::size_t len, void *desc, fi_addr_t src, void *ctx)
{
    iovec v{buf, len};
    return post_recv(e, &v, &desc, 1, src, 0, 0, to_handle(e)->rx_default, ctx, false);
}
ssize_t g_recvv(fid_ep *e, const iovec *iov, void **desc, std::size_t count, fi_addr_t src, void *ctx)
{
    return post_recv(e, iov, desc, count, src, 0, 0, to_handle(e)->rx_default, ctx, false);
}
ssize_t g_recvmsg(fid_ep *e, const msg *m, std::uint64_t flags)
{
    if (!m) [[unlikely]] // the C++ wrappers check it; the libfabric shim calls this directly
        return -FI_EINVAL;
    if (flags & ~(FI_COMPLETION | FI_MULTI_RECV | FI_MORE)) [[unlikely]]
        return -FI_EBADFLAGS;
    return post_recv(e, m->msg_iov, m->desc, m->iov_count, m->addr, 0, 0, flags | to_handle(e)->rx_comp_force,
                     m->context, false);
}
ssize_t g_trecv(fid_ep *e, void *buf, std::size_t len, void *desc, fi_addr_t src, std::uint64_t tag,
                std::uint64_t ignore, void *ctx)
{
    iovec v{buf, len};
    return post_recv(e, &v, &desc, 1, src, tag, ignore, to_handle(e)->rx_default, ctx, true);
}
ssize_t g_trecvv(fid_ep *e, const iovec *iov, void **desc, std::size_t count, fi_addr_t src, std::uint64_t tag,
                 std::uint64_t ignore, void *ctx)
{
    return post_recv(e, iov, desc, count, src, tag, ignore, to_handle(e)->rx_default, ctx, true);
}

// FI_PEEK / FI_CLAIM / FI_DISCARD (fi_tagged(3)).
ssize_t peek_claim(fid_ep *ep, const msg_tagged *m, std::uint64_t flags)
{
    ep_core *c = core_of(ep);
    if (!ep_ready(c))
        return -FI_EOPBADSTATE;
    if (!(c->caps & FI_RECV) || !(c->caps & FI_TAGGED))
        return -FI_EOPNOTSUPP;
    if ((flags & FI_PEEK) && (m->ignore & c->tag_unignorable))
        return -FI_EINVAL;
    auto *ctx = static_cast<context *>(m->context);
    if ((flags & FI_CLAIM) && !ctx)
        return -FI_EINVAL;
    guard g(c->rx->lock);
    unexp_msg *u = nullptr;
    if (flags & FI_PEEK) {
        u = c->rx->match_unexp(true, m->addr, m->tag, m->ignore, true);
        if (!u) {
            cq_err_entry x{};
            x.op_context = m->context;
            x.flags = FI_RECV | FI_TAGGED;
            x.tag = m->tag;
            x.err = FI_ENOMSG;
            x.src_addr = FI_ADDR_NOTAVAIL;
            if (c->rx_cq)
                cq_write_err(c->rx_cq, x);
            return 0;
        }
        if (flags & FI_CLAIM) {
            u->claim = ctx;
            ctx->internal[0] = u;
        }
        if (ep_core *r = receiver(c, u); r->rx_cq)
            cq_write(r->rx_cq, m->context, FI_RECV | FI_TAGGED | (u->flags & FI_REMOTE_CQ_DATA), u->len, nullptr,
                     u->data, u->tag, u->src);
        if ((flags & FI_DISCARD) && !(flags & FI_CLAIM)) {
            unexp_msg *prev = nullptr;
            for (unexp_msg *x = c->rx->utagged.head; x; prev = x, x = x->next)
                if (x == u) {
                    c->rx->utagged.unlink(prev, x);
                    break;
                }
            discard_unexp(receiver(c, u), c->rx, u);
        }
        return 0;
    }
    // FI_CLAIM without FI_PEEK: receive (or discard) the claimed message.
    u = static_cast<unexp_msg *>(ctx->internal[0]);
    unexp_msg *prev = nullptr;
    unexp_msg *x = c->rx->utagged.head;
    for (; x && x != u; prev = x, x = x->next) {
    }
    if (!x || x->claim != ctx)
        return -FI_EINVAL;
    if (flags & FI_DISCARD) { // the buffer is ignored (fi_tagged(3))
        c->rx->utagged.unlink(prev, x);
        if (ep_core *r = receiver(c, x); r->rx_cq)
            cq_write(r->rx_cq, m->context, FI_RECV | FI_TAGGED, 0, nullptr, 0, x->tag, x->src);
        discard_unexp(receiver(c, x), c->rx, x);
        return 0;
    }
    // Checked as any receive's; a refused call leaves the message claimed.
    std::size_t total = 0;
    if (int rc = rx_iov_check(c, m->msg_iov, m->iov_count, total))
        return rc;
    rx_entry *e = c->rx->get();
    if (!e)
        return -FI_EAGAIN;
    c->rx->utagged.unlink(prev, x);
    rx_fill(e, m->context, FI_TAGGED | ((flags | to_handle(ep)->rx_comp_force) & FI_COMPLETION), m->msg_iov, m->desc,
            m->iov_count, total);
    take_unexp(c, e, true, x);
    return 0;
}

ssize_t g_trecvmsg(fid_ep *e, const msg_tagged *m, std::uint64_t flags)
{
    if (!m) [[unlikely]] // the C++ wrappers check it; the libfabric shim calls this directly
        return -FI_EINVAL;
    if (flags & ~(FI_COMPLETION | FI_MULTI_RECV | FI_MORE | FI_PEEK | FI_CLAIM | FI_DISCARD)) [[unlikely]]
        return -FI_EBADFLAGS;
    if (flags & (FI_PEEK | FI_CLAIM)) [[unlikely]]
        return peek_claim(e, m, flags);
    if (flags & FI_DISCARD) [[unlikely]]
        return -FI_EINVAL;
    return post_recv(e, m->msg_iov, m->desc, m->iov_count, m->addr, m->tag, m->ignore,
                     flags | to_handle(e)->rx_comp_force, m->context, true);
}

} // namespace

namespace {

/** A message nothing matched and the unexpected store could not keep
 *  (past its bound, or memory exhausted): not delivered, and reported on
 *  the receiving endpoint as an error completion with the endpoint's
 *  context (nothing of it written: len 0, olen its length). */
[[gnu::cold]] void unexp_refused(ep_core *c, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
                                 std::uint64_t msg_flags, std::size_t len)
{
    if (!c->rx->unexp_warned) {
        c->rx->unexp_warned = true;
        SHUNT_LOG(fabric_log, warning,
                  "unexpected messages refused from now on while there is no room (%zu bytes held, bound %zu: "
                  "SHUNT_UNEXPECTED_BYTES; or no memory): each is reported by an FI_ENOMEM error completion",
                  c->rx->unexp_held, c->rx->unexp_limit);
    }
    rx_fail(c, c->main ? c->main->ep.fid.context : nullptr,
            FI_RECV | kind_flag(tagged) | (msg_flags & FI_REMOTE_CQ_DATA), FI_ENOMEM, 0, len, data, tag, src, nullptr);
}

/** Keep a message nothing matched: its bytes (or its description) copied
 *  once into the unexpected store. Rx lock held. */
int queue_unexp(ep_core *c, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
                std::uint64_t msg_flags, std::size_t len, const void *bytes, std::size_t n, bool rndv,
                std::size_t kept = 0)
{
    unexp_msg *u = c->rx->unexp_get(n, kept);
    if (!u) [[unlikely]] {
        unexp_refused(c, tagged, src, tag, data, msg_flags, len);
        return -FI_ENOMEM;
    }
    if (n)
        std::memcpy(u->payload, bytes, n);
    u->src = src;
    u->tag = tag;
    u->data = data;
    u->flags = msg_flags;
    u->len = len;
    u->rndv = rndv;
    u->owner = c;
    (tagged ? c->rx->utagged : c->rx->umsg).push(u);
    return 0;
}

/** The common receive: not a multi-recv, one buffer the whole message
 *  fits in, no fetch running (a completion after one waits behind it). */
inline bool simple_receive(const rxq *q, const rx_entry *e, std::size_t len)
{
    return !(e->flags & FI_MULTI_RECV) && e->iov_count == 1 && len <= e->iov[0].iov_len && !q->nfetching;
}

/** What place() does for a simple_receive, without the multi-recv,
 *  scatter, truncation and ordering cases. @p e unlinked; lock held. */
inline void deliver_simple(ep_core *c, rxq *q, rx_entry *e, bool tagged, fi_addr_t src, std::uint64_t tag,
                           std::uint64_t data, std::uint64_t msg_flags, const void *payload, std::size_t len)
{
    copy_payload(e->iov[0].iov_base, payload, len);
    if (e->flags & FI_COMPLETION)
        cq_write(c->rx_cq, e->context, FI_RECV | kind_flag(tagged) | (msg_flags & FI_REMOTE_CQ_DATA), len,
                 e->iov[0].iov_base, data, tag, src);
    if (c->c_recv)
        c->inc_recv(c->c_recv);
    q->put(e);
}

/** rx_deliver under the receive lock: every case (rx_deliver takes the
 *  common one of an endpoint without a lock itself). */
[[gnu::noinline]] int rx_deliver_any(ep_core *c, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
                                     std::uint64_t msg_flags, const void *payload, std::size_t len,
                                     bool queue_unexpected)
{
    rxq *q = c->rx;
    guard g(q->lock);
    rx_entry *e = q->match(tagged, src, tag);
    if (e) [[likely]] {
        if (simple_receive(q, e, len))
            deliver_simple(c, q, e, tagged, src, tag, data, msg_flags, payload, len);
        else
            place(c, q, e, tagged, src, tag, data, msg_flags, payload, len);
        return 0;
    }
    if (!queue_unexpected)
        return 1;
    return queue_unexp(c, tagged, src, tag, data, msg_flags, len, payload, len, false);
}

} // namespace

template <bool Tagged>
int rx_deliver_as(ep_core *c, fi_addr_t src, std::uint64_t tag, std::uint64_t data, std::uint64_t msg_flags,
                  const void *payload, std::size_t len, bool queue_unexpected)
{
    rxq *q = c->rx;
    // The common receive of an endpoint without a lock, without a call: the
    // first posted receive takes it, and it is a simple_receive. Every
    // other case, and every receive under a lock: rx_deliver_any.
    rx_entry *e = q->lock.enabled() ? nullptr : q->first_match(Tagged, src, tag);
    if (!e || !simple_receive(q, e, len)) [[unlikely]]
        return rx_deliver_any(c, Tagged, src, tag, data, msg_flags, payload, len, queue_unexpected);
    q->unlink_first(Tagged);
    deliver_simple(c, q, e, Tagged, src, tag, data, msg_flags, payload, len);
    return 0;
}

template int rx_deliver_as<false>(ep_core *, fi_addr_t, std::uint64_t, std::uint64_t, std::uint64_t, const void *,
                                  std::size_t, bool);
template int rx_deliver_as<true>(ep_core *, fi_addr_t, std::uint64_t, std::uint64_t, std::uint64_t, const void *,
                                 std::size_t, bool);

int rx_deliver(ep_core *c, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
               std::uint64_t msg_flags, const void *payload, std::size_t len, bool queue_unexpected)
{
    return tagged ? rx_deliver_as<true>(c, src, tag, data, msg_flags, payload, len, queue_unexpected)
                  : rx_deliver_as<false>(c, src, tag, data, msg_flags, payload, len, queue_unexpected);
}

int rx_deliver_fetch(ep_core *c, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
                     std::uint64_t msg_flags, std::size_t len, const void *desc, std::size_t desc_len,
                     std::size_t kept)
{
    guard g(c->rx->lock);
    if (rx_entry *e = c->rx->match(tagged, src, tag)) {
        fetch(c, c->rx, e, tagged, src, tag, data, msg_flags, len, desc, desc_len);
        return 0;
    }
    return queue_unexp(c, tagged, src, tag, data, msg_flags, len, desc, desc_len, true, kept);
}

void rx_fetch_done(rx_entry *e, const rx_fetch_req &r, int err)
{
    rxq *q = r.queue;
    guard g(q->lock);
    // Its record, if it is still running (none: no record could be had, or
    // it was dropped with an endpoint leaving a shared receive context):
    // reported in its turn.
    held_rx *h = q->fetching;
    while (h && h != r.hold)
        h = h->fnext;
    if (h) {
        q->fetch_over(h);
        h->err = err;
        flush_held(q);
        return;
    }
    if (e->flags & FI_MULTI_RECV)
        e->pending--;
    void *buf = e->iov_count ? static_cast<std::uint8_t *>(e->iov[0].iov_base) + r.offset : nullptr;
    complete(r.reporter, q, e, placement{r.offset, r.n, buf}, r.tagged, r.src, r.tag, r.data, r.msg_flags, r.len,
             err);
}

void rx_remote_data(ep_core *c, std::uint64_t data, std::uint64_t cq_flags, std::size_t len)
{
    if (c->rx_cq)
        cq_write(c->rx_cq, nullptr, cq_flags | FI_REMOTE_CQ_DATA, len, nullptr, data, 0, FI_ADDR_NOTAVAIL);
}

namespace {

void tx_err_entry(ep_core *c, void *ctx, std::uint64_t cq_flags, int err, std::size_t len)
{
    cq_err_entry x{};
    // Without an operation context the endpoint's context is reported.
    x.op_context = ctx ? ctx : c->main->ep.fid.context;
    x.flags = cq_flags;
    x.len = len;
    x.err = err;
    x.prov_errno = err;
    x.src_addr = FI_ADDR_NOTAVAIL;
    if (c->tx_cq)
        cq_write_err(c->tx_cq, x);
}

} // namespace

void tx_fail(ep_core *c, void *ctx, std::uint64_t cq_flags, int err, std::size_t len)
{
    tx_err_entry(c, ctx, cq_flags, err, len);
    cntr_obj *n = (cq_flags & FI_READ) ? c->c_read : (cq_flags & FI_WRITE) ? c->c_write : c->c_send;
    if (n)
        cntr_inc_err(n);
}

void tx_fail_after_done(ep_core *c, std::uint64_t cq_flags, int err) { tx_err_entry(c, nullptr, cq_flags, err, 0); }

const ops_msg ep_msg_ops{.recv = g_recv,
                         .recvv = g_recvv,
                         .recvmsg = g_recvmsg,
                         .send = g_send,
                         .sendv = g_sendv,
                         .sendmsg = g_sendmsg,
                         .inject = g_inject,
                         .senddata = g_senddata,
                         .injectdata = g_injectdata};
const ops_tagged ep_tagged_ops{.recv = g_trecv,
                               .recvv = g_trecvv,
                               .recvmsg = g_trecvmsg,
                               .send = g_tsend,
                               .sendv = g_tsendv,
                               .sendmsg = g_tsendmsg,
                               .inject = g_tinject,
                               .senddata = g_tsenddata,
                               .injectdata = g_tinjectdata};

} // namespace shunt::fabric::util
