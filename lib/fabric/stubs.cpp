// Stubs for every ops-table slot a provider leaves unfilled: each returns
// -FI_ENOSYS (libfabric's fi_no_* functions), so callers never test slots.
#include "fabric/api.h"
#include "fabric/ext_tso.h"

namespace shunt::fabric::stub {

namespace {
constexpr int nosys = -FI_ENOSYS;
}

int close(fid *) { return nosys; }
int bind(fid *, fid *, std::uint64_t) { return nosys; }
int control(fid *, int, void *) { return nosys; }
int ops_open(fid *, const char *, std::uint64_t, void **, void *) { return nosys; }

int domain(fid_fabric *, info *, fid_domain **, void *) { return nosys; }
int passive_ep(fid_fabric *, info *, fid_pep **, void *) { return nosys; }
int eq_open(fid_fabric *, eq_attr *, fid_eq **, void *) { return nosys; }
int trywait(fid_fabric *, fid **, int) { return nosys; }
int domain2(fid_fabric *, info *, fid_domain **, std::uint64_t, void *) { return nosys; }

int av_open(fid_domain *, av_attr *, fid_av **, void *) { return nosys; }
int cq_open(fid_domain *, cq_attr *, fid_cq **, void *) { return nosys; }
int endpoint(fid_domain *, info *, fid_ep **, void *) { return nosys; }
int scalable_ep(fid_domain *, info *, fid_ep **, void *) { return nosys; }
int cntr_open(fid_domain *, cntr_attr *, fid_cntr **, void *) { return nosys; }
int poll_open(fid_domain *, poll_attr *, fid_poll **) { return nosys; }
int stx_ctx(fid_domain *, tx_attr *, fid_stx **, void *) { return nosys; }
int srx_ctx(fid_domain *, rx_attr *, fid_ep **, void *) { return nosys; }
int query_atomic(fid_domain *, datatype, op, atomic_attr *, std::uint64_t) { return nosys; }
int endpoint2(fid_domain *, info *, fid_ep **, std::uint64_t, void *) { return nosys; }
int mr_reg(fid *, const void *, std::size_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, fid_mr **,
           void *)
{
    return nosys;
}
int mr_regv(fid *, const iovec *, std::size_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t,
            fid_mr **, void *)
{
    return nosys;
}
int mr_regattr(fid *, const mr_attr *, std::uint64_t, fid_mr **) { return nosys; }

ssize_t cancel(fid *, void *) { return nosys; }
int getopt(fid *, int, int, void *, std::size_t *) { return nosys; }
int setopt(fid *, int, int, const void *, std::size_t) { return nosys; }
int tx_ctx(fid_ep *, int, tx_attr *, fid_ep **, void *) { return nosys; }
int rx_ctx(fid_ep *, int, rx_attr *, fid_ep **, void *) { return nosys; }
ssize_t rx_size_left(fid_ep *) { return nosys; }
ssize_t tx_size_left(fid_ep *) { return nosys; }

ssize_t recv(fid_ep *, void *, std::size_t, void *, fi_addr_t, void *) { return nosys; }
ssize_t recvv(fid_ep *, const iovec *, void **, std::size_t, fi_addr_t, void *) { return nosys; }
ssize_t recvmsg(fid_ep *, const msg *, std::uint64_t) { return nosys; }
ssize_t send(fid_ep *, const void *, std::size_t, void *, fi_addr_t, void *) { return nosys; }
ssize_t sendv(fid_ep *, const iovec *, void **, std::size_t, fi_addr_t, void *) { return nosys; }
ssize_t sendmsg(fid_ep *, const msg *, std::uint64_t) { return nosys; }
ssize_t inject(fid_ep *, const void *, std::size_t, fi_addr_t) { return nosys; }
ssize_t senddata(fid_ep *, const void *, std::size_t, void *, std::uint64_t, fi_addr_t, void *) { return nosys; }
ssize_t injectdata(fid_ep *, const void *, std::size_t, std::uint64_t, fi_addr_t) { return nosys; }

ssize_t trecv(fid_ep *, void *, std::size_t, void *, fi_addr_t, std::uint64_t, std::uint64_t, void *)
{
    return nosys;
}
ssize_t trecvv(fid_ep *, const iovec *, void **, std::size_t, fi_addr_t, std::uint64_t, std::uint64_t, void *)
{
    return nosys;
}
ssize_t trecvmsg(fid_ep *, const msg_tagged *, std::uint64_t) { return nosys; }
ssize_t tsend(fid_ep *, const void *, std::size_t, void *, fi_addr_t, std::uint64_t, void *) { return nosys; }
ssize_t tsendv(fid_ep *, const iovec *, void **, std::size_t, fi_addr_t, std::uint64_t, void *) { return nosys; }
ssize_t tsendmsg(fid_ep *, const msg_tagged *, std::uint64_t) { return nosys; }
ssize_t tinject(fid_ep *, const void *, std::size_t, fi_addr_t, std::uint64_t) { return nosys; }
ssize_t tsenddata(fid_ep *, const void *, std::size_t, void *, std::uint64_t, fi_addr_t, std::uint64_t, void *)
{
    return nosys;
}
ssize_t tinjectdata(fid_ep *, const void *, std::size_t, std::uint64_t, fi_addr_t, std::uint64_t) { return nosys; }

ssize_t rma_read(fid_ep *, void *, std::size_t, void *, fi_addr_t, std::uint64_t, std::uint64_t, void *)
{
    return nosys;
}
ssize_t rma_readv(fid_ep *, const iovec *, void **, std::size_t, fi_addr_t, std::uint64_t, std::uint64_t, void *)
{
    return nosys;
}
ssize_t rma_readmsg(fid_ep *, const msg_rma *, std::uint64_t) { return nosys; }
ssize_t rma_write(fid_ep *, const void *, std::size_t, void *, fi_addr_t, std::uint64_t, std::uint64_t, void *)
{
    return nosys;
}
ssize_t rma_writev(fid_ep *, const iovec *, void **, std::size_t, fi_addr_t, std::uint64_t, std::uint64_t, void *)
{
    return nosys;
}
ssize_t rma_writemsg(fid_ep *, const msg_rma *, std::uint64_t) { return nosys; }
ssize_t rma_inject(fid_ep *, const void *, std::size_t, fi_addr_t, std::uint64_t, std::uint64_t) { return nosys; }
ssize_t rma_writedata(fid_ep *, const void *, std::size_t, void *, std::uint64_t, fi_addr_t, std::uint64_t,
                      std::uint64_t, void *)
{
    return nosys;
}
ssize_t rma_injectdata(fid_ep *, const void *, std::size_t, std::uint64_t, fi_addr_t, std::uint64_t, std::uint64_t)
{
    return nosys;
}

ssize_t atomic_write(fid_ep *, const void *, std::size_t, void *, fi_addr_t, std::uint64_t, std::uint64_t,
                     datatype, op, void *)
{
    return nosys;
}
ssize_t atomic_writev(fid_ep *, const ioc *, void **, std::size_t, fi_addr_t, std::uint64_t, std::uint64_t,
                      datatype, op, void *)
{
    return nosys;
}
ssize_t atomic_writemsg(fid_ep *, const msg_atomic *, std::uint64_t) { return nosys; }
ssize_t atomic_inject(fid_ep *, const void *, std::size_t, fi_addr_t, std::uint64_t, std::uint64_t, datatype, op)
{
    return nosys;
}
ssize_t atomic_readwrite(fid_ep *, const void *, std::size_t, void *, void *, void *, fi_addr_t, std::uint64_t,
                         std::uint64_t, datatype, op, void *)
{
    return nosys;
}
ssize_t atomic_readwritev(fid_ep *, const ioc *, void **, std::size_t, ioc *, void **, std::size_t, fi_addr_t,
                          std::uint64_t, std::uint64_t, datatype, op, void *)
{
    return nosys;
}
ssize_t atomic_readwritemsg(fid_ep *, const msg_atomic *, ioc *, void **, std::size_t, std::uint64_t)
{
    return nosys;
}
ssize_t atomic_compwrite(fid_ep *, const void *, std::size_t, void *, const void *, void *, void *, void *,
                         fi_addr_t, std::uint64_t, std::uint64_t, datatype, op, void *)
{
    return nosys;
}
ssize_t atomic_compwritev(fid_ep *, const ioc *, void **, std::size_t, const ioc *, void **, std::size_t, ioc *,
                          void **, std::size_t, fi_addr_t, std::uint64_t, std::uint64_t, datatype, op, void *)
{
    return nosys;
}
ssize_t atomic_compwritemsg(fid_ep *, const msg_atomic *, const ioc *, void **, std::size_t, ioc *, void **,
                            std::size_t, std::uint64_t)
{
    return nosys;
}
int atomic_valid(fid_ep *, datatype, op, std::size_t *) { return -FI_EOPNOTSUPP; }

int setname(fid *, void *, std::size_t) { return nosys; }
int getname(fid *, void *, std::size_t *) { return nosys; }
int getpeer(fid_ep *, void *, std::size_t *) { return nosys; }
int connect(fid_ep *, const void *, const void *, std::size_t) { return nosys; }
int listen(fid_pep *) { return nosys; }
int accept(fid_ep *, const void *, std::size_t) { return nosys; }
int reject(fid_pep *, fid_t, const void *, std::size_t) { return nosys; }
int shutdown(fid_ep *, std::uint64_t) { return nosys; }

ssize_t cq_read(fid_cq *, void *, std::size_t) { return nosys; }
ssize_t cq_readfrom(fid_cq *, void *, std::size_t, fi_addr_t *) { return nosys; }
ssize_t cq_readerr(fid_cq *, cq_err_entry *, std::uint64_t) { return nosys; }
ssize_t cq_sread(fid_cq *, void *, std::size_t, const void *, int) { return nosys; }
ssize_t cq_sreadfrom(fid_cq *, void *, std::size_t, fi_addr_t *, const void *, int) { return nosys; }
int cq_signal(fid_cq *) { return nosys; }
const char *cq_strerror(fid_cq *, int, const void *, char *, std::size_t) { return "unknown error"; }

std::uint64_t cntr_read(fid_cntr *) { return 0; }
std::uint64_t cntr_readerr(fid_cntr *) { return 0; }
int cntr_add(fid_cntr *, std::uint64_t) { return nosys; }
int cntr_set(fid_cntr *, std::uint64_t) { return nosys; }
int cntr_wait(fid_cntr *, std::uint64_t, int) { return nosys; }
int cntr_adderr(fid_cntr *, std::uint64_t) { return nosys; }
int cntr_seterr(fid_cntr *, std::uint64_t) { return nosys; }

int av_insert(fid_av *, const void *, std::size_t, fi_addr_t *, std::uint64_t, void *) { return nosys; }
int av_insertsvc(fid_av *, const char *, const char *, fi_addr_t *, std::uint64_t, void *) { return nosys; }
int av_insertsym(fid_av *, const char *, std::size_t, const char *, std::size_t, fi_addr_t *, std::uint64_t, void *)
{
    return nosys;
}
int av_remove(fid_av *, fi_addr_t *, std::size_t, std::uint64_t) { return nosys; }
int av_lookup(fid_av *, fi_addr_t, void *, std::size_t *) { return nosys; }
const char *av_straddr(fid_av *, const void *, char *, std::size_t *) { return nullptr; }

ssize_t eq_read(fid_eq *, std::uint32_t *, void *, std::size_t, std::uint64_t) { return nosys; }
ssize_t eq_readerr(fid_eq *, eq_err_entry *, std::uint64_t) { return nosys; }
ssize_t eq_write(fid_eq *, std::uint32_t, const void *, std::size_t, std::uint64_t) { return nosys; }
ssize_t eq_sread(fid_eq *, std::uint32_t *, void *, std::size_t, int, std::uint64_t) { return nosys; }
const char *eq_strerror(fid_eq *, int, const void *, char *, std::size_t) { return "unknown error"; }

int tso_query(fid_ep *, tso_attr *) { return nosys; }
ssize_t tso_send(fid_ep *, const void *, std::size_t, const iovec *, void **, std::size_t, std::size_t, fi_addr_t,
                 std::uint64_t, void *)
{
    return nosys;
}

} // namespace shunt::fabric::stub
