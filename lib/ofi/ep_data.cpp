// Data-transfer ops of endpoints: msg, tagged, RMA and atomics. Each slot
// is fwd<Shunt ops table, its slot> (fwd.h): one load of the Shunt endpoint
// and a tail call into its ops table with the same arguments; message
// structs and iovecs are passed by pointer (their layouts are proven equal in
// abi.cpp). Nothing is copied or allocated.
#include "ofi/fwd.h"

namespace shunt::ofi {

namespace {

// ---- collectives: not part of Shunt; every slot answers -FI_ENOSYS ----

template <class F>
struct nosys;
template <class R, class... A>
struct nosys<R (*)(A...)> {
    static R fn(A...) { return -FI_ENOSYS; }
};
#define NOSYS(member) nosys<decltype(::fi_ops_collective::member)>::fn

} // namespace

constinit ::fi_ops_msg g_msg_ops = {
    .size = sizeof(::fi_ops_msg),
    .recv = fwd<&sf::fid_ep::msg, &sf::ops_msg::recv>,
    .recvv = fwd<&sf::fid_ep::msg, &sf::ops_msg::recvv>,
    .recvmsg = fwd<&sf::fid_ep::msg, &sf::ops_msg::recvmsg>,
    .send = fwd<&sf::fid_ep::msg, &sf::ops_msg::send>,
    .sendv = fwd<&sf::fid_ep::msg, &sf::ops_msg::sendv>,
    .sendmsg = fwd<&sf::fid_ep::msg, &sf::ops_msg::sendmsg>,
    .inject = fwd<&sf::fid_ep::msg, &sf::ops_msg::inject>,
    .senddata = fwd<&sf::fid_ep::msg, &sf::ops_msg::senddata>,
    .injectdata = fwd<&sf::fid_ep::msg, &sf::ops_msg::injectdata>,
};

constinit ::fi_ops_tagged g_tagged_ops = {
    .size = sizeof(::fi_ops_tagged),
    .recv = fwd<&sf::fid_ep::tagged, &sf::ops_tagged::recv>,
    .recvv = fwd<&sf::fid_ep::tagged, &sf::ops_tagged::recvv>,
    .recvmsg = fwd<&sf::fid_ep::tagged, &sf::ops_tagged::recvmsg>,
    .send = fwd<&sf::fid_ep::tagged, &sf::ops_tagged::send>,
    .sendv = fwd<&sf::fid_ep::tagged, &sf::ops_tagged::sendv>,
    .sendmsg = fwd<&sf::fid_ep::tagged, &sf::ops_tagged::sendmsg>,
    .inject = fwd<&sf::fid_ep::tagged, &sf::ops_tagged::inject>,
    .senddata = fwd<&sf::fid_ep::tagged, &sf::ops_tagged::senddata>,
    .injectdata = fwd<&sf::fid_ep::tagged, &sf::ops_tagged::injectdata>,
};

constinit ::fi_ops_rma g_rma_ops = {
    .size = sizeof(::fi_ops_rma),
    .read = fwd<&sf::fid_ep::rma, &sf::ops_rma::read>,
    .readv = fwd<&sf::fid_ep::rma, &sf::ops_rma::readv>,
    .readmsg = fwd<&sf::fid_ep::rma, &sf::ops_rma::readmsg>,
    .write = fwd<&sf::fid_ep::rma, &sf::ops_rma::write>,
    .writev = fwd<&sf::fid_ep::rma, &sf::ops_rma::writev>,
    .writemsg = fwd<&sf::fid_ep::rma, &sf::ops_rma::writemsg>,
    .inject = fwd<&sf::fid_ep::rma, &sf::ops_rma::inject>,
    .writedata = fwd<&sf::fid_ep::rma, &sf::ops_rma::writedata>,
    .injectdata = fwd<&sf::fid_ep::rma, &sf::ops_rma::injectdata>,
};

constinit ::fi_ops_atomic g_atomic_ops = {
    .size = sizeof(::fi_ops_atomic),
    .write = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::write>,
    .writev = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::writev>,
    .writemsg = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::writemsg>,
    .inject = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::inject>,
    .readwrite = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::readwrite>,
    .readwritev = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::readwritev>,
    .readwritemsg = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::readwritemsg>,
    .compwrite = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::compwrite>,
    .compwritev = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::compwritev>,
    .compwritemsg = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::compwritemsg>,
    .writevalid = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::writevalid>,
    .readwritevalid = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::readwritevalid>,
    .compwritevalid = fwd<&sf::fid_ep::atomic, &sf::ops_atomic::compwritevalid>,
};

::fi_ops_collective g_collective_ops = {
    sizeof(::fi_ops_collective), NOSYS(barrier), NOSYS(broadcast), NOSYS(alltoall), NOSYS(allreduce),
    NOSYS(allgather), NOSYS(reduce_scatter), NOSYS(reduce), NOSYS(scatter), NOSYS(gather), NOSYS(msg),
    NOSYS(barrier2),
};
#undef NOSYS

} // namespace shunt::ofi
