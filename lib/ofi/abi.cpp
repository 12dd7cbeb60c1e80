// Proof that the shim may pass values and data-path structs between
// libfabric 1.17 and Shunt unchanged. Shunt's constants are captured under
// other names BEFORE <rdma/...> turns their spellings into macros, then
// compared with libfabric's. A failure here means a value must be
// translated instead of passed through.
#include "env/errors.h"
#include "fabric/api.h"

#include <cstddef>

namespace shunt_vals {
namespace sf = shunt::fabric;
// Capability, operation and completion flags (CQ entry flags, op flags).
constexpr std::uint64_t msg = sf::FI_MSG, rma = sf::FI_RMA, tagged = sf::FI_TAGGED, atomic = sf::FI_ATOMIC,
                        multicast = sf::FI_MULTICAST, collective = sf::FI_COLLECTIVE, read = sf::FI_READ,
                        write = sf::FI_WRITE, recv = sf::FI_RECV, send = sf::FI_SEND,
                        remote_read = sf::FI_REMOTE_READ, remote_write = sf::FI_REMOTE_WRITE,
                        multi_recv = sf::FI_MULTI_RECV, remote_cq_data = sf::FI_REMOTE_CQ_DATA, more = sf::FI_MORE,
                        peek = sf::FI_PEEK, trigger = sf::FI_TRIGGER, fence = sf::FI_FENCE,
                        priority = sf::FI_PRIORITY, completion = sf::FI_COMPLETION, inject = sf::FI_INJECT,
                        inject_complete = sf::FI_INJECT_COMPLETE, transmit_complete = sf::FI_TRANSMIT_COMPLETE,
                        delivery_complete = sf::FI_DELIVERY_COMPLETE, affinity = sf::FI_AFFINITY,
                        commit_complete = sf::FI_COMMIT_COMPLETE, match_complete = sf::FI_MATCH_COMPLETE,
                        peer_transfer = sf::FI_PEER_TRANSFER, av_user_id = sf::FI_AV_USER_ID, peer = sf::FI_PEER,
                        hmem = sf::FI_HMEM, variable_msg = sf::FI_VARIABLE_MSG, rma_pmem = sf::FI_RMA_PMEM,
                        source_err = sf::FI_SOURCE_ERR, local_comm = sf::FI_LOCAL_COMM,
                        remote_comm = sf::FI_REMOTE_COMM, shared_av = sf::FI_SHARED_AV,
                        prov_attr_only = sf::FI_PROV_ATTR_ONLY, numerichost = sf::FI_NUMERICHOST,
                        rma_event = sf::FI_RMA_EVENT, source = sf::FI_SOURCE, named_rx_ctx = sf::FI_NAMED_RX_CTX,
                        directed_recv = sf::FI_DIRECTED_RECV, claim = sf::FI_CLAIM, discard = sf::FI_DISCARD,
                        selective_completion = sf::FI_SELECTIVE_COMPLETION;
// Mode bits.
constexpr std::uint64_t context = sf::FI_CONTEXT, msg_prefix = sf::FI_MSG_PREFIX, async_iov = sf::FI_ASYNC_IOV,
                        rx_cq_data = sf::FI_RX_CQ_DATA, local_mr = sf::FI_LOCAL_MR,
                        notify_flags_only = sf::FI_NOTIFY_FLAGS_ONLY, restricted_comp = sf::FI_RESTRICTED_COMP,
                        context2 = sf::FI_CONTEXT2, buffered_recv = sf::FI_BUFFERED_RECV;
// MR modes.
constexpr int mr_basic = sf::FI_MR_BASIC, mr_scalable = sf::FI_MR_SCALABLE, mr_local = sf::FI_MR_LOCAL,
              mr_raw = sf::FI_MR_RAW, mr_virt_addr = sf::FI_MR_VIRT_ADDR, mr_allocated = sf::FI_MR_ALLOCATED,
              mr_prov_key = sf::FI_MR_PROV_KEY, mr_mmu_notify = sf::FI_MR_MMU_NOTIFY,
              mr_rma_event = sf::FI_MR_RMA_EVENT, mr_endpoint = sf::FI_MR_ENDPOINT, mr_hmem = sf::FI_MR_HMEM,
              mr_collective = sf::FI_MR_COLLECTIVE;
// Ordering.
constexpr std::uint64_t order_strict = sf::FI_ORDER_STRICT, order_data = sf::FI_ORDER_DATA,
                        order_rma_rar = sf::FI_ORDER_RMA_RAR, order_atomic_waw = sf::FI_ORDER_ATOMIC_WAW,
                        order_sas = sf::FI_ORDER_SAS;
// Special values.
constexpr std::uint64_t addr_unspec = sf::FI_ADDR_UNSPEC, addr_notavail = sf::FI_ADDR_NOTAVAIL,
                        key_notavail = sf::FI_KEY_NOTAVAIL;
constexpr std::size_t shared_context = sf::FI_SHARED_CONTEXT;
constexpr std::uint64_t fetch_atomic = sf::FI_FETCH_ATOMIC, compare_atomic = sf::FI_COMPARE_ATOMIC;
constexpr std::uint32_t api_version = sf::FI_API_VERSION;
constexpr std::uint64_t shunt_only_caps = sf::FI_TAGGED_DIRECTED_RECV | sf::FI_TAGGED_MULTI_RECV | sf::FI_XPU;
// Error codes (libfabric's are macros for the errno ones).
constexpr int eagain = shunt::FI_EAGAIN, einval = shunt::FI_EINVAL, enosys = shunt::FI_ENOSYS,
              enomem = shunt::FI_ENOMEM, enodata = shunt::FI_ENODATA, eopnotsupp = shunt::FI_EOPNOTSUPP,
              ecanceled = shunt::FI_ECANCELED, ebusy = shunt::FI_EBUSY, enoprotoopt = shunt::FI_ENOPROTOOPT,
              ebadflags = shunt::FI_EBADFLAGS, eavail = shunt::FI_EAVAIL, etrunc = shunt::FI_ETRUNC,
              enocq = shunt::FI_ENOCQ, enoav = shunt::FI_ENOAV, enoeq = shunt::FI_ENOEQ,
              eopbadstate = shunt::FI_EOPBADSTATE, etoosmall = shunt::FI_ETOOSMALL, eother = shunt::FI_EOTHER;
} // namespace shunt_vals

#include "ofi/shim.h"

namespace shunt::ofi {

const std::uint32_t k_shunt_api_version = shunt_vals::api_version;
const std::uint64_t k_shunt_only_caps = shunt_vals::shunt_only_caps;

namespace v = shunt_vals;

#define SHIM_SAME(shunt_name, lf_name) \
    static_assert(std::uint64_t(v::shunt_name) == std::uint64_t(lf_name), #lf_name " differs between Shunt and libfabric")

SHIM_SAME(msg, FI_MSG);
SHIM_SAME(rma, FI_RMA);
SHIM_SAME(tagged, FI_TAGGED);
SHIM_SAME(atomic, FI_ATOMIC);
SHIM_SAME(multicast, FI_MULTICAST);
SHIM_SAME(collective, FI_COLLECTIVE);
SHIM_SAME(read, FI_READ);
SHIM_SAME(write, FI_WRITE);
SHIM_SAME(recv, FI_RECV);
SHIM_SAME(send, FI_SEND);
SHIM_SAME(remote_read, FI_REMOTE_READ);
SHIM_SAME(remote_write, FI_REMOTE_WRITE);
SHIM_SAME(multi_recv, FI_MULTI_RECV);
SHIM_SAME(remote_cq_data, FI_REMOTE_CQ_DATA);
SHIM_SAME(more, FI_MORE);
SHIM_SAME(peek, FI_PEEK);
SHIM_SAME(trigger, FI_TRIGGER);
SHIM_SAME(fence, FI_FENCE);
SHIM_SAME(priority, FI_PRIORITY);
SHIM_SAME(completion, FI_COMPLETION);
SHIM_SAME(inject, FI_INJECT);
SHIM_SAME(inject_complete, FI_INJECT_COMPLETE);
SHIM_SAME(transmit_complete, FI_TRANSMIT_COMPLETE);
SHIM_SAME(delivery_complete, FI_DELIVERY_COMPLETE);
SHIM_SAME(affinity, FI_AFFINITY);
SHIM_SAME(commit_complete, FI_COMMIT_COMPLETE);
SHIM_SAME(match_complete, FI_MATCH_COMPLETE);
SHIM_SAME(peer_transfer, FI_PEER_TRANSFER);
SHIM_SAME(av_user_id, FI_AV_USER_ID);
SHIM_SAME(peer, FI_PEER);
SHIM_SAME(hmem, FI_HMEM);
SHIM_SAME(variable_msg, FI_VARIABLE_MSG);
SHIM_SAME(rma_pmem, FI_RMA_PMEM);
SHIM_SAME(source_err, FI_SOURCE_ERR);
SHIM_SAME(local_comm, FI_LOCAL_COMM);
SHIM_SAME(remote_comm, FI_REMOTE_COMM);
SHIM_SAME(shared_av, FI_SHARED_AV);
SHIM_SAME(prov_attr_only, FI_PROV_ATTR_ONLY);
SHIM_SAME(numerichost, FI_NUMERICHOST);
SHIM_SAME(rma_event, FI_RMA_EVENT);
SHIM_SAME(source, FI_SOURCE);
SHIM_SAME(named_rx_ctx, FI_NAMED_RX_CTX);
SHIM_SAME(directed_recv, FI_DIRECTED_RECV);
SHIM_SAME(claim, FI_CLAIM);
SHIM_SAME(discard, FI_DISCARD);
SHIM_SAME(selective_completion, FI_SELECTIVE_COMPLETION);
SHIM_SAME(context, FI_CONTEXT);
SHIM_SAME(msg_prefix, FI_MSG_PREFIX);
SHIM_SAME(async_iov, FI_ASYNC_IOV);
SHIM_SAME(rx_cq_data, FI_RX_CQ_DATA);
SHIM_SAME(local_mr, FI_LOCAL_MR);
SHIM_SAME(notify_flags_only, FI_NOTIFY_FLAGS_ONLY);
SHIM_SAME(restricted_comp, FI_RESTRICTED_COMP);
SHIM_SAME(context2, FI_CONTEXT2);
SHIM_SAME(buffered_recv, FI_BUFFERED_RECV);
SHIM_SAME(mr_basic, FI_MR_BASIC);
SHIM_SAME(mr_scalable, FI_MR_SCALABLE);
SHIM_SAME(mr_local, FI_MR_LOCAL);
SHIM_SAME(mr_raw, FI_MR_RAW);
SHIM_SAME(mr_virt_addr, FI_MR_VIRT_ADDR);
SHIM_SAME(mr_allocated, FI_MR_ALLOCATED);
SHIM_SAME(mr_prov_key, FI_MR_PROV_KEY);
SHIM_SAME(mr_mmu_notify, FI_MR_MMU_NOTIFY);
SHIM_SAME(mr_rma_event, FI_MR_RMA_EVENT);
SHIM_SAME(mr_endpoint, FI_MR_ENDPOINT);
SHIM_SAME(mr_hmem, FI_MR_HMEM);
SHIM_SAME(mr_collective, FI_MR_COLLECTIVE);
SHIM_SAME(order_strict, FI_ORDER_STRICT);
SHIM_SAME(order_data, FI_ORDER_DATA);
SHIM_SAME(order_rma_rar, FI_ORDER_RMA_RAR);
SHIM_SAME(order_atomic_waw, FI_ORDER_ATOMIC_WAW);
SHIM_SAME(order_sas, FI_ORDER_SAS);
SHIM_SAME(addr_unspec, FI_ADDR_UNSPEC);
SHIM_SAME(addr_notavail, FI_ADDR_NOTAVAIL);
SHIM_SAME(key_notavail, FI_KEY_NOTAVAIL);
SHIM_SAME(shared_context, FI_SHARED_CONTEXT);
SHIM_SAME(fetch_atomic, FI_FETCH_ATOMIC);
SHIM_SAME(compare_atomic, FI_COMPARE_ATOMIC);
SHIM_SAME(eagain, FI_EAGAIN);
SHIM_SAME(einval, FI_EINVAL);
SHIM_SAME(enosys, FI_ENOSYS);
SHIM_SAME(enomem, FI_ENOMEM);
SHIM_SAME(enodata, FI_ENODATA);
SHIM_SAME(eopnotsupp, FI_EOPNOTSUPP);
SHIM_SAME(ecanceled, FI_ECANCELED);
SHIM_SAME(ebusy, FI_EBUSY);
SHIM_SAME(enoprotoopt, FI_ENOPROTOOPT);
SHIM_SAME(ebadflags, FI_EBADFLAGS);
SHIM_SAME(eavail, FI_EAVAIL);
SHIM_SAME(etrunc, FI_ETRUNC);
SHIM_SAME(enocq, FI_ENOCQ);
SHIM_SAME(enoav, FI_ENOAV);
SHIM_SAME(enoeq, FI_ENOEQ);
SHIM_SAME(eopbadstate, FI_EOPBADSTATE);
SHIM_SAME(etoosmall, FI_ETOOSMALL);
SHIM_SAME(eother, FI_EOTHER);
#undef SHIM_SAME

// Enumerations passed through by value (Shunt's are scoped in sf::, libfabric's are not macros).
#define SHIM_SAME_ENUM(name) \
    static_assert(int(sf::name) == int(::name), #name " differs between Shunt and libfabric")
SHIM_SAME_ENUM(FI_EP_MSG);
SHIM_SAME_ENUM(FI_EP_DGRAM);
SHIM_SAME_ENUM(FI_EP_RDM);
SHIM_SAME_ENUM(FI_EP_SOCK_DGRAM);
SHIM_SAME_ENUM(FI_THREAD_SAFE);
SHIM_SAME_ENUM(FI_THREAD_FID);
SHIM_SAME_ENUM(FI_THREAD_DOMAIN);
SHIM_SAME_ENUM(FI_THREAD_COMPLETION);
SHIM_SAME_ENUM(FI_THREAD_ENDPOINT);
SHIM_SAME_ENUM(FI_PROGRESS_AUTO);
SHIM_SAME_ENUM(FI_PROGRESS_MANUAL);
SHIM_SAME_ENUM(FI_RM_ENABLED);
SHIM_SAME_ENUM(FI_AV_MAP);
SHIM_SAME_ENUM(FI_AV_TABLE);
// Protocols: every value libfabric 1.17 names (info.cpp passes them through).
SHIM_SAME_ENUM(FI_PROTO_UNSPEC);
SHIM_SAME_ENUM(FI_PROTO_RDMA_CM_IB_RC);
SHIM_SAME_ENUM(FI_PROTO_IWARP);
SHIM_SAME_ENUM(FI_PROTO_IB_UD);
SHIM_SAME_ENUM(FI_PROTO_PSMX);
SHIM_SAME_ENUM(FI_PROTO_UDP);
SHIM_SAME_ENUM(FI_PROTO_SOCK_TCP);
SHIM_SAME_ENUM(FI_PROTO_MXM);
SHIM_SAME_ENUM(FI_PROTO_IWARP_RDM);
SHIM_SAME_ENUM(FI_PROTO_IB_RDM);
SHIM_SAME_ENUM(FI_PROTO_GNI);
SHIM_SAME_ENUM(FI_PROTO_RXM);
SHIM_SAME_ENUM(FI_PROTO_RXD);
SHIM_SAME_ENUM(FI_PROTO_MLX);
SHIM_SAME_ENUM(FI_PROTO_NETWORKDIRECT);
SHIM_SAME_ENUM(FI_PROTO_PSMX2);
SHIM_SAME_ENUM(FI_PROTO_SHM);
SHIM_SAME_ENUM(FI_PROTO_MRAIL);
SHIM_SAME_ENUM(FI_PROTO_RSTREAM);
SHIM_SAME_ENUM(FI_PROTO_RDMA_CM_IB_XRC);
SHIM_SAME_ENUM(FI_PROTO_EFA);
SHIM_SAME_ENUM(FI_PROTO_PSMX3);
SHIM_SAME_ENUM(FI_PROTO_RXM_TCP);
SHIM_SAME_ENUM(FI_PROTO_OPX);
SHIM_SAME_ENUM(FI_PROTO_CXI);
SHIM_SAME_ENUM(FI_PROTO_XNET);
SHIM_SAME_ENUM(FI_ADDR_STR);
SHIM_SAME_ENUM(FI_ADDR_CXI);
SHIM_SAME_ENUM(FI_SOCKADDR_IN6);
SHIM_SAME_ENUM(FI_TC_NETWORK_CTRL);
SHIM_SAME_ENUM(FI_WAIT_POLLFD);
SHIM_SAME_ENUM(FI_WAIT_FD);
SHIM_SAME_ENUM(FI_WAIT_SET);
SHIM_SAME_ENUM(FI_WAIT_UNSPEC);
SHIM_SAME_ENUM(FI_WAIT_YIELD);
SHIM_SAME_ENUM(FI_WAIT_MUTEX_COND);
SHIM_SAME_ENUM(FI_CQ_FORMAT_TAGGED);
SHIM_SAME_ENUM(FI_CQ_COND_THRESHOLD);
SHIM_SAME_ENUM(FI_CNTR_EVENTS_COMP);
SHIM_SAME_ENUM(FI_NOTIFY);
SHIM_SAME_ENUM(FI_CONNREQ);
SHIM_SAME_ENUM(FI_CONNECTED);
SHIM_SAME_ENUM(FI_SHUTDOWN);
SHIM_SAME_ENUM(FI_MR_COMPLETE);
SHIM_SAME_ENUM(FI_AV_COMPLETE);
SHIM_SAME_ENUM(FI_JOIN_COMPLETE);
SHIM_SAME_ENUM(FI_INT8);
SHIM_SAME_ENUM(FI_LONG_DOUBLE_COMPLEX);
SHIM_SAME_ENUM(FI_INT128);
SHIM_SAME_ENUM(FI_UINT128);
SHIM_SAME_ENUM(FI_MIN);
SHIM_SAME_ENUM(FI_ATOMIC_READ);
SHIM_SAME_ENUM(FI_CSWAP);
SHIM_SAME_ENUM(FI_MSWAP);
SHIM_SAME_ENUM(FI_ATOMIC_OP_LAST);
SHIM_SAME_ENUM(FI_CLASS_FABRIC);
SHIM_SAME_ENUM(FI_CLASS_EP);
SHIM_SAME_ENUM(FI_CLASS_SEP);
SHIM_SAME_ENUM(FI_CLASS_RX_CTX);
SHIM_SAME_ENUM(FI_CLASS_SRX_CTX);
SHIM_SAME_ENUM(FI_CLASS_TX_CTX);
SHIM_SAME_ENUM(FI_CLASS_STX_CTX);
SHIM_SAME_ENUM(FI_CLASS_PEP);
SHIM_SAME_ENUM(FI_CLASS_AV);
SHIM_SAME_ENUM(FI_CLASS_MR);
SHIM_SAME_ENUM(FI_CLASS_EQ);
SHIM_SAME_ENUM(FI_CLASS_CQ);
SHIM_SAME_ENUM(FI_CLASS_CNTR);
SHIM_SAME_ENUM(FI_CLASS_CONNREQ);
SHIM_SAME_ENUM(FI_CLASS_WAIT);
SHIM_SAME_ENUM(FI_CLASS_POLL);
SHIM_SAME_ENUM(FI_GETOPSFLAG);
SHIM_SAME_ENUM(FI_SETOPSFLAG);
SHIM_SAME_ENUM(FI_ALIAS);
SHIM_SAME_ENUM(FI_GETWAIT);
SHIM_SAME_ENUM(FI_ENABLE);
SHIM_SAME_ENUM(FI_BACKLOG);
SHIM_SAME_ENUM(FI_GETWAITOBJ);
SHIM_SAME_ENUM(FI_OPT_ENDPOINT);
SHIM_SAME_ENUM(FI_OPT_MIN_MULTI_RECV);
SHIM_SAME_ENUM(FI_OPT_CM_DATA_SIZE);
SHIM_SAME_ENUM(FI_OPT_FI_HMEM_P2P);
SHIM_SAME_ENUM(FI_OPT_XPU_TRIGGER);
SHIM_SAME_ENUM(FI_HMEM_P2P_DISABLED);
SHIM_SAME_ENUM(FI_HMEM_SYSTEM);
SHIM_SAME_ENUM(FI_HMEM_SYNAPSEAI);
#undef SHIM_SAME_ENUM

// Data-path structs passed through by pointer: same size and field offsets.
#define SHIM_SAME_LAYOUT(S, L, field) \
    static_assert(offsetof(S, field) == offsetof(L, field), #L "::" #field " is not where Shunt has it")
#define SHIM_SAME_SIZE(S, L) static_assert(sizeof(S) == sizeof(L), #L " and " #S " differ in size")

SHIM_SAME_SIZE(sf::msg, ::fi_msg);
SHIM_SAME_LAYOUT(sf::msg, ::fi_msg, msg_iov);
SHIM_SAME_LAYOUT(sf::msg, ::fi_msg, desc);
SHIM_SAME_LAYOUT(sf::msg, ::fi_msg, iov_count);
SHIM_SAME_LAYOUT(sf::msg, ::fi_msg, addr);
SHIM_SAME_LAYOUT(sf::msg, ::fi_msg, context);
SHIM_SAME_LAYOUT(sf::msg, ::fi_msg, data);

SHIM_SAME_SIZE(sf::msg_tagged, ::fi_msg_tagged);
SHIM_SAME_LAYOUT(sf::msg_tagged, ::fi_msg_tagged, msg_iov);
SHIM_SAME_LAYOUT(sf::msg_tagged, ::fi_msg_tagged, desc);
SHIM_SAME_LAYOUT(sf::msg_tagged, ::fi_msg_tagged, iov_count);
SHIM_SAME_LAYOUT(sf::msg_tagged, ::fi_msg_tagged, addr);
SHIM_SAME_LAYOUT(sf::msg_tagged, ::fi_msg_tagged, tag);
SHIM_SAME_LAYOUT(sf::msg_tagged, ::fi_msg_tagged, ignore);
SHIM_SAME_LAYOUT(sf::msg_tagged, ::fi_msg_tagged, context);
SHIM_SAME_LAYOUT(sf::msg_tagged, ::fi_msg_tagged, data);

SHIM_SAME_SIZE(sf::rma_iov, ::fi_rma_iov);
SHIM_SAME_LAYOUT(sf::rma_iov, ::fi_rma_iov, addr);
SHIM_SAME_LAYOUT(sf::rma_iov, ::fi_rma_iov, len);
SHIM_SAME_LAYOUT(sf::rma_iov, ::fi_rma_iov, key);
SHIM_SAME_SIZE(sf::msg_rma, ::fi_msg_rma);
SHIM_SAME_LAYOUT(sf::msg_rma, ::fi_msg_rma, msg_iov);
SHIM_SAME_LAYOUT(sf::msg_rma, ::fi_msg_rma, desc);
SHIM_SAME_LAYOUT(sf::msg_rma, ::fi_msg_rma, iov_count);
SHIM_SAME_LAYOUT(sf::msg_rma, ::fi_msg_rma, addr);
SHIM_SAME_LAYOUT(sf::msg_rma, ::fi_msg_rma, rma_iov);
SHIM_SAME_LAYOUT(sf::msg_rma, ::fi_msg_rma, rma_iov_count);
SHIM_SAME_LAYOUT(sf::msg_rma, ::fi_msg_rma, context);
SHIM_SAME_LAYOUT(sf::msg_rma, ::fi_msg_rma, data);

SHIM_SAME_SIZE(sf::ioc, ::fi_ioc);
SHIM_SAME_LAYOUT(sf::ioc, ::fi_ioc, addr);
SHIM_SAME_LAYOUT(sf::ioc, ::fi_ioc, count);
SHIM_SAME_SIZE(sf::rma_ioc, ::fi_rma_ioc);
SHIM_SAME_LAYOUT(sf::rma_ioc, ::fi_rma_ioc, addr);
SHIM_SAME_LAYOUT(sf::rma_ioc, ::fi_rma_ioc, count);
SHIM_SAME_LAYOUT(sf::rma_ioc, ::fi_rma_ioc, key);
SHIM_SAME_SIZE(sf::msg_atomic, ::fi_msg_atomic);
SHIM_SAME_LAYOUT(sf::msg_atomic, ::fi_msg_atomic, msg_iov);
SHIM_SAME_LAYOUT(sf::msg_atomic, ::fi_msg_atomic, desc);
SHIM_SAME_LAYOUT(sf::msg_atomic, ::fi_msg_atomic, iov_count);
SHIM_SAME_LAYOUT(sf::msg_atomic, ::fi_msg_atomic, addr);
SHIM_SAME_LAYOUT(sf::msg_atomic, ::fi_msg_atomic, rma_iov);
SHIM_SAME_LAYOUT(sf::msg_atomic, ::fi_msg_atomic, rma_iov_count);
SHIM_SAME_LAYOUT(sf::msg_atomic, ::fi_msg_atomic, datatype);
SHIM_SAME_LAYOUT(sf::msg_atomic, ::fi_msg_atomic, op);
SHIM_SAME_LAYOUT(sf::msg_atomic, ::fi_msg_atomic, context);
SHIM_SAME_LAYOUT(sf::msg_atomic, ::fi_msg_atomic, data);
static_assert(sizeof(sf::datatype) == sizeof(::fi_datatype) && sizeof(sf::op) == sizeof(::fi_op));

// CQ entries are written by Shunt straight into the application's buffer.
SHIM_SAME_SIZE(sf::cq_entry, ::fi_cq_entry);
SHIM_SAME_SIZE(sf::cq_msg_entry, ::fi_cq_msg_entry);
SHIM_SAME_LAYOUT(sf::cq_msg_entry, ::fi_cq_msg_entry, flags);
SHIM_SAME_LAYOUT(sf::cq_msg_entry, ::fi_cq_msg_entry, len);
SHIM_SAME_SIZE(sf::cq_data_entry, ::fi_cq_data_entry);
SHIM_SAME_LAYOUT(sf::cq_data_entry, ::fi_cq_data_entry, buf);
SHIM_SAME_LAYOUT(sf::cq_data_entry, ::fi_cq_data_entry, data);
SHIM_SAME_SIZE(sf::cq_tagged_entry, ::fi_cq_tagged_entry);
SHIM_SAME_LAYOUT(sf::cq_tagged_entry, ::fi_cq_tagged_entry, tag);
// The error entry grew in 2.x (src_addr): readerr converts field by field,
// but the common prefix must agree.
SHIM_SAME_LAYOUT(sf::cq_err_entry, ::fi_cq_err_entry, olen);
SHIM_SAME_LAYOUT(sf::cq_err_entry, ::fi_cq_err_entry, err_data_size);
static_assert(sizeof(sf::cq_err_entry) >= sizeof(::fi_cq_err_entry));

// EQ entries: same shape (the fid and info inside are translated).
SHIM_SAME_SIZE(sf::eq_entry, ::fi_eq_entry);
SHIM_SAME_SIZE(sf::eq_cm_entry, ::fi_eq_cm_entry);
SHIM_SAME_SIZE(sf::eq_err_entry, ::fi_eq_err_entry);
SHIM_SAME_LAYOUT(sf::eq_err_entry, ::fi_eq_err_entry, err_data_size);

// Attribute structs the shim copies as a whole.
SHIM_SAME_SIZE(sf::tx_attr, ::fi_tx_attr);
SHIM_SAME_LAYOUT(sf::tx_attr, ::fi_tx_attr, inject_size);
SHIM_SAME_LAYOUT(sf::tx_attr, ::fi_tx_attr, tclass);
SHIM_SAME_SIZE(sf::atomic_attr, ::fi_atomic_attr);

// The Shunt context structs are where FI_CONTEXT / FI_CONTEXT2 memory goes.
SHIM_SAME_SIZE(sf::context, ::fi_context);
SHIM_SAME_SIZE(sf::context2, ::fi_context2);
#undef SHIM_SAME_LAYOUT
#undef SHIM_SAME_SIZE

} // namespace shunt::ofi
