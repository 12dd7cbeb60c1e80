// Data-transfer ops of endpoints: msg, tagged, RMA and atomics. Each slot
// is one load of the Shunt endpoint and a tail call into its ops table with
// the same arguments; message structs and iovecs are passed by pointer (their
// layouts are proven equal in abi.cpp). Nothing is copied or allocated.
#include "ofi/shim.h"

namespace shunt::ofi {

namespace {

inline sf::fid_ep *sh(::fid_ep *ep) { return reinterpret_cast<ep_w *>(ep)->sh; }
inline sf::datatype dt_of(::fi_datatype dt) { return static_cast<sf::datatype>(dt); }
inline sf::op op_of(::fi_op op) { return static_cast<sf::op>(op); }
inline const sf::msg *msg_of(const ::fi_msg *m) { return reinterpret_cast<const sf::msg *>(m); }
inline const sf::msg_tagged *tmsg_of(const ::fi_msg_tagged *m)
{
    return reinterpret_cast<const sf::msg_tagged *>(m);
}
inline const sf::msg_rma *rmsg_of(const ::fi_msg_rma *m) { return reinterpret_cast<const sf::msg_rma *>(m); }
inline const sf::msg_atomic *amsg_of(const ::fi_msg_atomic *m)
{
    return reinterpret_cast<const sf::msg_atomic *>(m);
}
inline const sf::ioc *ioc_of(const ::fi_ioc *i) { return reinterpret_cast<const sf::ioc *>(i); }
inline sf::ioc *ioc_of(::fi_ioc *i) { return reinterpret_cast<sf::ioc *>(i); }

// ---- msg ----

ssize_t m_recv(::fid_ep *ep, void *buf, std::size_t len, void *desc, ::fi_addr_t src, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->msg->recv(s, buf, len, desc, src, ctx);
}
ssize_t m_recvv(::fid_ep *ep, const ::iovec *iov, void **desc, std::size_t count, ::fi_addr_t src, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->msg->recvv(s, iov, desc, count, src, ctx);
}
ssize_t m_recvmsg(::fid_ep *ep, const ::fi_msg *m, std::uint64_t flags)
{
    sf::fid_ep *s = sh(ep);
    return s->msg->recvmsg(s, msg_of(m), flags);
}
ssize_t m_send(::fid_ep *ep, const void *buf, std::size_t len, void *desc, ::fi_addr_t dest, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->msg->send(s, buf, len, desc, dest, ctx);
}
ssize_t m_sendv(::fid_ep *ep, const ::iovec *iov, void **desc, std::size_t count, ::fi_addr_t dest, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->msg->sendv(s, iov, desc, count, dest, ctx);
}
ssize_t m_sendmsg(::fid_ep *ep, const ::fi_msg *m, std::uint64_t flags)
{
    sf::fid_ep *s = sh(ep);
    return s->msg->sendmsg(s, msg_of(m), flags);
}
ssize_t m_inject(::fid_ep *ep, const void *buf, std::size_t len, ::fi_addr_t dest)
{
    sf::fid_ep *s = sh(ep);
    return s->msg->inject(s, buf, len, dest);
}
ssize_t m_senddata(::fid_ep *ep, const void *buf, std::size_t len, void *desc, std::uint64_t data, ::fi_addr_t dest,
                   void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->msg->senddata(s, buf, len, desc, data, dest, ctx);
}
ssize_t m_injectdata(::fid_ep *ep, const void *buf, std::size_t len, std::uint64_t data, ::fi_addr_t dest)
{
    sf::fid_ep *s = sh(ep);
    return s->msg->injectdata(s, buf, len, data, dest);
}

// ---- tagged ----

ssize_t t_recv(::fid_ep *ep, void *buf, std::size_t len, void *desc, ::fi_addr_t src, std::uint64_t tag,
               std::uint64_t ignore, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->tagged->recv(s, buf, len, desc, src, tag, ignore, ctx);
}
ssize_t t_recvv(::fid_ep *ep, const ::iovec *iov, void **desc, std::size_t count, ::fi_addr_t src, std::uint64_t tag,
                std::uint64_t ignore, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->tagged->recvv(s, iov, desc, count, src, tag, ignore, ctx);
}
ssize_t t_recvmsg(::fid_ep *ep, const ::fi_msg_tagged *m, std::uint64_t flags)
{
    sf::fid_ep *s = sh(ep);
    return s->tagged->recvmsg(s, tmsg_of(m), flags);
}
ssize_t t_send(::fid_ep *ep, const void *buf, std::size_t len, void *desc, ::fi_addr_t dest, std::uint64_t tag,
               void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->tagged->send(s, buf, len, desc, dest, tag, ctx);
}
ssize_t t_sendv(::fid_ep *ep, const ::iovec *iov, void **desc, std::size_t count, ::fi_addr_t dest,
                std::uint64_t tag, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->tagged->sendv(s, iov, desc, count, dest, tag, ctx);
}
ssize_t t_sendmsg(::fid_ep *ep, const ::fi_msg_tagged *m, std::uint64_t flags)
{
    sf::fid_ep *s = sh(ep);
    return s->tagged->sendmsg(s, tmsg_of(m), flags);
}
ssize_t t_inject(::fid_ep *ep, const void *buf, std::size_t len, ::fi_addr_t dest, std::uint64_t tag)
{
    sf::fid_ep *s = sh(ep);
    return s->tagged->inject(s, buf, len, dest, tag);
}
ssize_t t_senddata(::fid_ep *ep, const void *buf, std::size_t len, void *desc, std::uint64_t data, ::fi_addr_t dest,
                   std::uint64_t tag, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->tagged->senddata(s, buf, len, desc, data, dest, tag, ctx);
}
ssize_t t_injectdata(::fid_ep *ep, const void *buf, std::size_t len, std::uint64_t data, ::fi_addr_t dest,
                     std::uint64_t tag)
{
    sf::fid_ep *s = sh(ep);
    return s->tagged->injectdata(s, buf, len, data, dest, tag);
}

// ---- RMA ----

ssize_t r_read(::fid_ep *ep, void *buf, std::size_t len, void *desc, ::fi_addr_t src, std::uint64_t addr,
               std::uint64_t key, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->rma->read(s, buf, len, desc, src, addr, key, ctx);
}
ssize_t r_readv(::fid_ep *ep, const ::iovec *iov, void **desc, std::size_t count, ::fi_addr_t src,
                std::uint64_t addr, std::uint64_t key, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->rma->readv(s, iov, desc, count, src, addr, key, ctx);
}
ssize_t r_readmsg(::fid_ep *ep, const ::fi_msg_rma *m, std::uint64_t flags)
{
    sf::fid_ep *s = sh(ep);
    return s->rma->readmsg(s, rmsg_of(m), flags);
}
ssize_t r_write(::fid_ep *ep, const void *buf, std::size_t len, void *desc, ::fi_addr_t dest, std::uint64_t addr,
                std::uint64_t key, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->rma->write(s, buf, len, desc, dest, addr, key, ctx);
}
ssize_t r_writev(::fid_ep *ep, const ::iovec *iov, void **desc, std::size_t count, ::fi_addr_t dest,
                 std::uint64_t addr, std::uint64_t key, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->rma->writev(s, iov, desc, count, dest, addr, key, ctx);
}
ssize_t r_writemsg(::fid_ep *ep, const ::fi_msg_rma *m, std::uint64_t flags)
{
    sf::fid_ep *s = sh(ep);
    return s->rma->writemsg(s, rmsg_of(m), flags);
}
ssize_t r_inject(::fid_ep *ep, const void *buf, std::size_t len, ::fi_addr_t dest, std::uint64_t addr,
                 std::uint64_t key)
{
    sf::fid_ep *s = sh(ep);
    return s->rma->inject(s, buf, len, dest, addr, key);
}
ssize_t r_writedata(::fid_ep *ep, const void *buf, std::size_t len, void *desc, std::uint64_t data,
                    ::fi_addr_t dest, std::uint64_t addr, std::uint64_t key, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->rma->writedata(s, buf, len, desc, data, dest, addr, key, ctx);
}
ssize_t r_injectdata(::fid_ep *ep, const void *buf, std::size_t len, std::uint64_t data, ::fi_addr_t dest,
                     std::uint64_t addr, std::uint64_t key)
{
    sf::fid_ep *s = sh(ep);
    return s->rma->injectdata(s, buf, len, data, dest, addr, key);
}

// ---- atomics ----

ssize_t a_write(::fid_ep *ep, const void *buf, std::size_t count, void *desc, ::fi_addr_t dest, std::uint64_t addr,
                std::uint64_t key, ::fi_datatype dt, ::fi_op op, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->write(s, buf, count, desc, dest, addr, key, dt_of(dt), op_of(op), ctx);
}
ssize_t a_writev(::fid_ep *ep, const ::fi_ioc *iov, void **desc, std::size_t count, ::fi_addr_t dest,
                 std::uint64_t addr, std::uint64_t key, ::fi_datatype dt, ::fi_op op, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->writev(s, ioc_of(iov), desc, count, dest, addr, key, dt_of(dt), op_of(op), ctx);
}
ssize_t a_writemsg(::fid_ep *ep, const ::fi_msg_atomic *m, std::uint64_t flags)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->writemsg(s, amsg_of(m), flags);
}
ssize_t a_inject(::fid_ep *ep, const void *buf, std::size_t count, ::fi_addr_t dest, std::uint64_t addr,
                 std::uint64_t key, ::fi_datatype dt, ::fi_op op)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->inject(s, buf, count, dest, addr, key, dt_of(dt), op_of(op));
}
ssize_t a_readwrite(::fid_ep *ep, const void *buf, std::size_t count, void *desc, void *result, void *result_desc,
                    ::fi_addr_t dest, std::uint64_t addr, std::uint64_t key, ::fi_datatype dt, ::fi_op op,
                    void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->readwrite(s, buf, count, desc, result, result_desc, dest, addr, key, dt_of(dt), op_of(op),
                                ctx);
}
ssize_t a_readwritev(::fid_ep *ep, const ::fi_ioc *iov, void **desc, std::size_t count, ::fi_ioc *resultv,
                     void **result_desc, std::size_t result_count, ::fi_addr_t dest, std::uint64_t addr,
                     std::uint64_t key, ::fi_datatype dt, ::fi_op op, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->readwritev(s, ioc_of(iov), desc, count, ioc_of(resultv), result_desc, result_count, dest,
                                 addr, key, dt_of(dt), op_of(op), ctx);
}
ssize_t a_readwritemsg(::fid_ep *ep, const ::fi_msg_atomic *m, ::fi_ioc *resultv, void **result_desc,
                       std::size_t result_count, std::uint64_t flags)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->readwritemsg(s, amsg_of(m), ioc_of(resultv), result_desc, result_count, flags);
}
ssize_t a_compwrite(::fid_ep *ep, const void *buf, std::size_t count, void *desc, const void *compare,
                    void *compare_desc, void *result, void *result_desc, ::fi_addr_t dest, std::uint64_t addr,
                    std::uint64_t key, ::fi_datatype dt, ::fi_op op, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->compwrite(s, buf, count, desc, compare, compare_desc, result, result_desc, dest, addr, key,
                                dt_of(dt), op_of(op), ctx);
}
ssize_t a_compwritev(::fid_ep *ep, const ::fi_ioc *iov, void **desc, std::size_t count, const ::fi_ioc *comparev,
                     void **compare_desc, std::size_t compare_count, ::fi_ioc *resultv, void **result_desc,
                     std::size_t result_count, ::fi_addr_t dest, std::uint64_t addr, std::uint64_t key,
                     ::fi_datatype dt, ::fi_op op, void *ctx)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->compwritev(s, ioc_of(iov), desc, count, ioc_of(comparev), compare_desc, compare_count,
                                 ioc_of(resultv), result_desc, result_count, dest, addr, key, dt_of(dt), op_of(op),
                                 ctx);
}
ssize_t a_compwritemsg(::fid_ep *ep, const ::fi_msg_atomic *m, const ::fi_ioc *comparev, void **compare_desc,
                       std::size_t compare_count, ::fi_ioc *resultv, void **result_desc, std::size_t result_count,
                       std::uint64_t flags)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->compwritemsg(s, amsg_of(m), ioc_of(comparev), compare_desc, compare_count, ioc_of(resultv),
                                   result_desc, result_count, flags);
}
int a_writevalid(::fid_ep *ep, ::fi_datatype dt, ::fi_op op, std::size_t *count)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->writevalid(s, dt_of(dt), op_of(op), count);
}
int a_readwritevalid(::fid_ep *ep, ::fi_datatype dt, ::fi_op op, std::size_t *count)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->readwritevalid(s, dt_of(dt), op_of(op), count);
}
int a_compwritevalid(::fid_ep *ep, ::fi_datatype dt, ::fi_op op, std::size_t *count)
{
    sf::fid_ep *s = sh(ep);
    return s->atomic->compwritevalid(s, dt_of(dt), op_of(op), count);
}

// ---- collectives: not part of Shunt; every slot answers -FI_ENOSYS ----

template <class F>
struct nosys;
template <class R, class... A>
struct nosys<R (*)(A...)> {
    static R fn(A...) { return -FI_ENOSYS; }
};
#define NOSYS(member) nosys<decltype(::fi_ops_collective::member)>::fn

} // namespace

::fi_ops_msg g_msg_ops = {
    sizeof(::fi_ops_msg), m_recv, m_recvv, m_recvmsg, m_send, m_sendv, m_sendmsg, m_inject, m_senddata,
    m_injectdata,
};

::fi_ops_tagged g_tagged_ops = {
    sizeof(::fi_ops_tagged), t_recv, t_recvv, t_recvmsg, t_send, t_sendv, t_sendmsg, t_inject, t_senddata,
    t_injectdata,
};

::fi_ops_rma g_rma_ops = {
    sizeof(::fi_ops_rma), r_read, r_readv, r_readmsg, r_write, r_writev, r_writemsg, r_inject, r_writedata,
    r_injectdata,
};

::fi_ops_atomic g_atomic_ops = {
    sizeof(::fi_ops_atomic), a_write,      a_writev,       a_writemsg,   a_inject,
    a_readwrite,             a_readwritev, a_readwritemsg, a_compwrite,  a_compwritev,
    a_compwritemsg,          a_writevalid, a_readwritevalid, a_compwritevalid,
};

::fi_ops_collective g_collective_ops = {
    sizeof(::fi_ops_collective), NOSYS(barrier), NOSYS(broadcast), NOSYS(alltoall), NOSYS(allreduce),
    NOSYS(allgather), NOSYS(reduce_scatter), NOSYS(reduce), NOSYS(scatter), NOSYS(gather), NOSYS(msg),
    NOSYS(barrier2),
};
#undef NOSYS

} // namespace shunt::ofi
