// Endpoint base: the generic data-transfer calls. Every check that is cheap
// is made here (state, capability, sizes, flags, address); the provider's
// transmit hook moves the data; receives are matched in the rxq.
#include <cstdlib>
#include <cstring>
#include <new>

#include "env/errors.h"
#include "fabric/util/ep.h"

namespace shunt::fabric::util {

int ep_check_op_flags(const ep_core *c, bool tx, std::uint64_t f);

namespace {

enum kind_index { k_msg = 0, k_tagged = 1, k_rma = 2, k_atomic = 3 };

std::size_t iov_len(const iovec *iov, std::size_t count, bool &bad)
{
    std::size_t n = 0;
    for (std::size_t i = 0; i < count; i++) {
        if (!iov[i].iov_base && iov[i].iov_len)
            bad = true;
        n += iov[i].iov_len;
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

[[gnu::cold]] void rx_fail(ep_core *c, const rx_entry *e, std::uint64_t cq_flags, int err, std::size_t len,
                           std::size_t olen, std::uint64_t data, std::uint64_t tag, fi_addr_t src, void *buf)
{
    cq_err_entry x{};
    x.op_context = e->context;
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

// Place a message into a matched entry and complete it. Caller holds rx lock.
// @return true if the entry went back to the pool (false: a multi-recv
// buffer that stays posted).
bool place(ep_core *c, rx_entry *e, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
           std::uint64_t msg_flags, const void *payload, std::size_t len)
{
    std::uint64_t cqf = FI_RECV | kind_flag(tagged) | (msg_flags & FI_REMOTE_CQ_DATA);
    if (e->flags & FI_MULTI_RECV) {
        std::size_t room = e->total - e->used;
        void *at = static_cast<std::uint8_t *>(e->iov[0].iov_base) + e->used;
        std::size_t n = std::min(len, room);
        if (n)
            std::memcpy(at, payload, n);
        e->used += n;
        bool release = e->total - e->used < c->rx->min_multi_recv;
        if (release) {
            unlink_entry(tagged ? c->rx->tagged : c->rx->msg, e);
            cqf |= FI_MULTI_RECV;
        }
        if (n < len)
            rx_fail(c, e, cqf, FI_ETRUNC, n, len - n, data, tag, src, at);
        else {
            // A release is always reported, even under selective completion:
            // it is how the application learns the buffer is its own again.
            if ((e->flags & FI_COMPLETION) || release)
                cq_write(c->rx_cq, e->context, cqf, n, at, data, tag, src);
            c->inc_recv(c->c_recv);
        }
        if (release)
            c->rx->put(e);
        return release;
    }
    std::size_t n = std::min(len, e->total);
    copy_to(e, 0, payload, n);
    void *buf = e->iov_count ? e->iov[0].iov_base : nullptr;
    if (n < len)
        rx_fail(c, e, cqf, FI_ETRUNC, n, len - n, data, tag, src, buf);
    else {
        if (e->flags & FI_COMPLETION)
            cq_write(c->rx_cq, e->context, cqf, n, buf, data, tag, src);
        c->inc_recv(c->c_recv);
    }
    c->rx->put(e);
    return true;
}

// The endpoint that reports a receive of an unexpected message: the one it
// arrived on (a receive posted to a shared receive context has no CQ of its
// own; fi_endpoint(3): completions go to the receiving endpoint's CQ).
ep_core *receiver(ep_core *posted_on, const unexp_msg *u)
{
    return u->owner ? static_cast<ep_core *>(u->owner) : posted_on;
}

void release_unexp(unexp_msg *u)
{
    std::free(u->payload);
    delete u;
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
    if (count > rx_iov_max || (!iov && count)) [[unlikely]]
        return -FI_EINVAL;
    if (c->fclass != FI_CLASS_SRX_CTX && count > (c->info->rx_attr ? c->info->rx_attr->iov_limit : 1)) [[unlikely]]
        return -FI_EINVAL;
    bool bad = false;
    std::size_t total = iov_len(iov, count, bad);
    if (bad) [[unlikely]]
        return -FI_EINVAL;
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
    e->context = context;
    e->flags = (flags & (FI_MULTI_RECV | FI_COMPLETION)) | kind_flag(tagged);
    e->src = src;
    e->tag = tag;
    e->ignore = ignore;
    e->iov_count = count;
    for (std::size_t i = 0; i < count; i++) {
        e->iov[i] = iov[i];
        e->desc[i] = desc ? desc[i] : nullptr;
    }
    e->total = total;
    e->used = 0;
    // Unexpected messages first: they arrived before this receive.
    if (!(flags & FI_MULTI_RECV)) {
        if (unexp_msg *u = c->rx->match_unexp(tagged, src, tag, ignore, false)) [[unlikely]] {
            place(receiver(c, u), e, tagged, u->src, u->tag, u->data, u->flags, u->payload, u->len);
            release_unexp(u);
            return 0;
        }
        (tagged ? c->rx->tagged : c->rx->msg).push(e);
        return 0;
    }
    (tagged ? c->rx->tagged : c->rx->msg).push(e);
    while (unexp_msg *u = c->rx->match_unexp(tagged, src, tag, ignore, false)) {
        bool released = place(receiver(c, u), e, tagged, u->src, u->tag, u->data, u->flags, u->payload, u->len);
        release_unexp(u);
        if (released)
            break;
    }
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
            release_unexp(u);
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
    c->rx->utagged.unlink(prev, x);
    if (flags & FI_DISCARD) {
        if (ep_core *r = receiver(c, x); r->rx_cq)
            cq_write(r->rx_cq, m->context, FI_RECV | FI_TAGGED, 0, nullptr, 0, x->tag, x->src);
        release_unexp(x);
        return 0;
    }
    rx_entry *e = c->rx->get();
    if (!e) {
        c->rx->utagged.push(x);
        return -FI_EAGAIN;
    }
    e->context = m->context;
    e->flags = FI_TAGGED | FI_COMPLETION;
    e->iov_count = m->iov_count;
    bool bad = false;
    for (std::size_t i = 0; i < m->iov_count && i < rx_iov_max; i++)
        e->iov[i] = m->msg_iov[i];
    e->total = iov_len(m->msg_iov, m->iov_count, bad);
    e->used = 0;
    place(receiver(c, x), e, true, x->src, x->tag, x->data, x->flags, x->payload, x->len);
    release_unexp(x);
    return 0;
}

ssize_t g_trecvmsg(fid_ep *e, const msg_tagged *m, std::uint64_t flags)
{
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

int rx_deliver(ep_core *c, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
               std::uint64_t msg_flags, const void *payload, std::size_t len, bool queue_unexpected)
{
    guard g(c->rx->lock);
    rx_entry *e = c->rx->match(tagged, src, tag);
    if (e) {
        place(c, e, tagged, src, tag, data, msg_flags, payload, len);
        return 0;
    }
    if (!queue_unexpected)
        return 1;
    auto *u = new (std::nothrow) unexp_msg;
    if (!u)
        return -FI_ENOMEM;
    u->payload = len ? static_cast<std::uint8_t *>(std::malloc(len)) : nullptr;
    if (len && !u->payload) {
        delete u;
        return -FI_ENOMEM;
    }
    if (len)
        std::memcpy(u->payload, payload, len);
    u->src = src;
    u->tag = tag;
    u->data = data;
    u->flags = msg_flags;
    u->len = len;
    u->owner = c;
    (tagged ? c->rx->utagged : c->rx->umsg).push(u);
    return 0;
}

void rx_remote_data(ep_core *c, std::uint64_t data, std::uint64_t cq_flags, std::size_t len)
{
    if (c->rx_cq)
        cq_write(c->rx_cq, nullptr, cq_flags | FI_REMOTE_CQ_DATA, len, nullptr, data, 0, FI_ADDR_NOTAVAIL);
}

void tx_fail(ep_core *c, void *ctx, std::uint64_t cq_flags, int err, std::size_t len)
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
    cntr_obj *n = (cq_flags & FI_READ) ? c->c_read : (cq_flags & FI_WRITE) ? c->c_write : c->c_send;
    if (n)
        cntr_inc_err(n);
}

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
