/* Constants of the endpoint API: capabilities, mode bits, operation flags,
 * ordering bits, MR modes and the enumerations of fi_getinfo(3),
 * fi_endpoint(3), fi_domain(3), fi_cq(3), fi_eq(3), fi_av(3), fi_mr(3) and
 * fi_atomic(3).
 *
 * Names and values are libfabric's (v2.5) so that the libfabric manual pages
 * read as Shunt's documentation: FI_MSG here is FI_MSG there. Bits that
 * libfabric 2.x added and whose values Shunt could not take from a released
 * header are marked "Shunt value". */
#pragma once

#include <cstddef>
#include <cstdint>

namespace shunt::fabric {

/** Address of a peer in an address vector (fi_addr_t). */
using fi_addr_t = std::uint64_t;

/** Version word: major in the upper 16 bits, minor in the lower. */
constexpr std::uint32_t FI_VERSION(std::uint32_t major, std::uint32_t minor) { return (major << 16) | minor; }
constexpr std::uint32_t FI_MAJOR(std::uint32_t v) { return v >> 16; }
constexpr std::uint32_t FI_MINOR(std::uint32_t v) { return v & 0xffff; }
/** The API version this header describes (libfabric 2.5 semantics). */
inline constexpr std::uint32_t FI_API_VERSION = FI_VERSION(2, 5);

inline constexpr std::size_t FI_NAME_MAX = 64;

// ---- Capabilities (fi_info::caps, tx/rx attr caps), fi_getinfo(3) ----
inline constexpr std::uint64_t FI_MSG = 1ULL << 1;
inline constexpr std::uint64_t FI_RMA = 1ULL << 2;
inline constexpr std::uint64_t FI_TAGGED = 1ULL << 3;
inline constexpr std::uint64_t FI_ATOMIC = 1ULL << 4;
inline constexpr std::uint64_t FI_ATOMICS = FI_ATOMIC;
inline constexpr std::uint64_t FI_MULTICAST = 1ULL << 5;
inline constexpr std::uint64_t FI_COLLECTIVE = 1ULL << 6;
inline constexpr std::uint64_t FI_TAGGED_DIRECTED_RECV = 1ULL << 14; ///< Shunt value
inline constexpr std::uint64_t FI_TAGGED_MULTI_RECV = 1ULL << 15;    ///< Shunt value
inline constexpr std::uint64_t FI_READ = 1ULL << 8;
inline constexpr std::uint64_t FI_WRITE = 1ULL << 9;
inline constexpr std::uint64_t FI_RECV = 1ULL << 10;
inline constexpr std::uint64_t FI_SEND = 1ULL << 11;
inline constexpr std::uint64_t FI_TRANSMIT = FI_SEND;
inline constexpr std::uint64_t FI_REMOTE_READ = 1ULL << 12;
inline constexpr std::uint64_t FI_REMOTE_WRITE = 1ULL << 13;
inline constexpr std::uint64_t FI_MULTI_RECV = 1ULL << 16;
inline constexpr std::uint64_t FI_REMOTE_CQ_DATA = 1ULL << 17;
inline constexpr std::uint64_t FI_MORE = 1ULL << 18;
inline constexpr std::uint64_t FI_PEEK = 1ULL << 19;
inline constexpr std::uint64_t FI_TRIGGER = 1ULL << 20;
inline constexpr std::uint64_t FI_FENCE = 1ULL << 21;
inline constexpr std::uint64_t FI_PRIORITY = 1ULL << 22;
inline constexpr std::uint64_t FI_COMPLETION = 1ULL << 24;
inline constexpr std::uint64_t FI_EVENT = FI_COMPLETION;
inline constexpr std::uint64_t FI_INJECT = 1ULL << 25;
inline constexpr std::uint64_t FI_INJECT_COMPLETE = 1ULL << 26;
inline constexpr std::uint64_t FI_TRANSMIT_COMPLETE = 1ULL << 27;
inline constexpr std::uint64_t FI_DELIVERY_COMPLETE = 1ULL << 28;
inline constexpr std::uint64_t FI_AFFINITY = 1ULL << 29;
inline constexpr std::uint64_t FI_COMMIT_COMPLETE = 1ULL << 30;
inline constexpr std::uint64_t FI_MATCH_COMPLETE = 1ULL << 31;
inline constexpr std::uint64_t FI_PEER_TRANSFER = 1ULL << 36;
inline constexpr std::uint64_t FI_AV_USER_ID = 1ULL << 41;
inline constexpr std::uint64_t FI_PEER = 1ULL << 43;
inline constexpr std::uint64_t FI_HMEM = 1ULL << 47;
inline constexpr std::uint64_t FI_VARIABLE_MSG = 1ULL << 48;
inline constexpr std::uint64_t FI_RMA_PMEM = 1ULL << 49;
inline constexpr std::uint64_t FI_SOURCE_ERR = 1ULL << 50;
inline constexpr std::uint64_t FI_LOCAL_COMM = 1ULL << 51;
inline constexpr std::uint64_t FI_REMOTE_COMM = 1ULL << 52;
inline constexpr std::uint64_t FI_SHARED_AV = 1ULL << 53;
inline constexpr std::uint64_t FI_PROV_ATTR_ONLY = 1ULL << 54;
inline constexpr std::uint64_t FI_NUMERICHOST = 1ULL << 55;
inline constexpr std::uint64_t FI_RMA_EVENT = 1ULL << 56;
inline constexpr std::uint64_t FI_SOURCE = 1ULL << 57;
inline constexpr std::uint64_t FI_NAMED_RX_CTX = 1ULL << 58;
inline constexpr std::uint64_t FI_DIRECTED_RECV = 1ULL << 59;
inline constexpr std::uint64_t FI_XPU = 1ULL << 61;  ///< Shunt value
/** Tagged receive flags (fi_tagged(3)). */
inline constexpr std::uint64_t FI_CLAIM = 1ULL << 59;
inline constexpr std::uint64_t FI_DISCARD = 1ULL << 58;
/** Bind flag: suppress successful completions unless FI_COMPLETION (fi_endpoint(3)). */
inline constexpr std::uint64_t FI_SELECTIVE_COMPLETION = 1ULL << 59;

/** Primary capabilities and their modifiers (fi_getinfo(3) "CAPABILITIES"):
 *  a provider enables only the primary capabilities an application asks for,
 *  and a capability asked for without any of its modifiers gets all of them
 *  (FI_SEND / FI_RECV for FI_MSG and FI_TAGGED; FI_READ, FI_WRITE,
 *  FI_REMOTE_READ, FI_REMOTE_WRITE for FI_RMA and FI_ATOMIC). */
inline constexpr std::uint64_t FI_PRIMARY_CAPS = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_MULTICAST |
    FI_COLLECTIVE | FI_NAMED_RX_CTX | FI_DIRECTED_RECV | FI_TAGGED_DIRECTED_RECV | FI_VARIABLE_MSG | FI_HMEM |
    FI_XPU | FI_AV_USER_ID | FI_PEER | FI_READ | FI_WRITE | FI_RECV | FI_SEND | FI_REMOTE_READ | FI_REMOTE_WRITE;
/** The modifiers of the message capabilities (FI_MSG, FI_TAGGED). */
inline constexpr std::uint64_t FI_MSG_DIRECTION_CAPS = FI_SEND | FI_RECV;
/** The modifiers of the memory capabilities (FI_RMA, FI_ATOMIC). */
inline constexpr std::uint64_t FI_RMA_DIRECTION_CAPS = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
/** Secondary capabilities: a provider may report them without being asked
 *  (and must refuse hints asking for one it lacks). */
inline constexpr std::uint64_t FI_SECONDARY_CAPS = FI_MULTI_RECV | FI_TAGGED_MULTI_RECV | FI_SOURCE |
    FI_RMA_EVENT | FI_SHARED_AV | FI_TRIGGER | FI_FENCE | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SOURCE_ERR |
    FI_RMA_PMEM;
/** Capabilities of a domain (domain_attr::caps, fi_domain(3)). */
inline constexpr std::uint64_t FI_DOMAIN_CAPS = FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SHARED_AV | FI_AV_USER_ID |
    FI_PEER;

// ---- Mode bits (fi_info::mode) ----
inline constexpr std::uint64_t FI_CONTEXT = 1ULL << 59;
inline constexpr std::uint64_t FI_MSG_PREFIX = 1ULL << 58;
inline constexpr std::uint64_t FI_ASYNC_IOV = 1ULL << 57;
inline constexpr std::uint64_t FI_RX_CQ_DATA = 1ULL << 56;
inline constexpr std::uint64_t FI_LOCAL_MR = 1ULL << 55;
inline constexpr std::uint64_t FI_NOTIFY_FLAGS_ONLY = 1ULL << 54;
inline constexpr std::uint64_t FI_RESTRICTED_COMP = 1ULL << 53;
inline constexpr std::uint64_t FI_CONTEXT2 = 1ULL << 52;
inline constexpr std::uint64_t FI_BUFFERED_RECV = 1ULL << 51;

// ---- Special addresses and sizes ----
inline constexpr fi_addr_t FI_ADDR_UNSPEC = ~0ULL;
inline constexpr fi_addr_t FI_ADDR_NOTAVAIL = ~0ULL;
inline constexpr std::uint64_t FI_KEY_NOTAVAIL = ~0ULL;
inline constexpr std::size_t FI_SHARED_CONTEXT = SIZE_MAX;

// ---- Memory registration modes (domain_attr::mr_mode), fi_mr(3) ----
inline constexpr int FI_MR_UNSPEC = 0;
inline constexpr int FI_MR_BASIC = 1;
inline constexpr int FI_MR_SCALABLE = 2;
inline constexpr int FI_MR_LOCAL = 1 << 2;
inline constexpr int FI_MR_RAW = 1 << 3;
inline constexpr int FI_MR_VIRT_ADDR = 1 << 4;
inline constexpr int FI_MR_ALLOCATED = 1 << 5;
inline constexpr int FI_MR_PROV_KEY = 1 << 6;
inline constexpr int FI_MR_MMU_NOTIFY = 1 << 7;
inline constexpr int FI_MR_RMA_EVENT = 1 << 8;
inline constexpr int FI_MR_ENDPOINT = 1 << 9;
inline constexpr int FI_MR_HMEM = 1 << 10;
inline constexpr int FI_MR_COLLECTIVE = 1 << 11;

// ---- Message ordering (tx/rx attr msg_order), fi_endpoint(3) ----
inline constexpr std::uint64_t FI_ORDER_NONE = 0;
inline constexpr std::uint64_t FI_ORDER_RAR = 1ULL << 0;
inline constexpr std::uint64_t FI_ORDER_RAW = 1ULL << 1;
inline constexpr std::uint64_t FI_ORDER_RAS = 1ULL << 2;
inline constexpr std::uint64_t FI_ORDER_WAR = 1ULL << 3;
inline constexpr std::uint64_t FI_ORDER_WAW = 1ULL << 4;
inline constexpr std::uint64_t FI_ORDER_WAS = 1ULL << 5;
inline constexpr std::uint64_t FI_ORDER_SAR = 1ULL << 6;
inline constexpr std::uint64_t FI_ORDER_SAW = 1ULL << 7;
inline constexpr std::uint64_t FI_ORDER_SAS = 1ULL << 8;
inline constexpr std::uint64_t FI_ORDER_STRICT = 0x1FF;
inline constexpr std::uint64_t FI_ORDER_DATA = 1ULL << 16;
inline constexpr std::uint64_t FI_ORDER_RMA_RAR = 1ULL << 32;
inline constexpr std::uint64_t FI_ORDER_RMA_RAW = 1ULL << 33;
inline constexpr std::uint64_t FI_ORDER_RMA_WAR = 1ULL << 34;
inline constexpr std::uint64_t FI_ORDER_RMA_WAW = 1ULL << 35;
inline constexpr std::uint64_t FI_ORDER_ATOMIC_RAR = 1ULL << 36;
inline constexpr std::uint64_t FI_ORDER_ATOMIC_RAW = 1ULL << 37;
inline constexpr std::uint64_t FI_ORDER_ATOMIC_WAR = 1ULL << 38;
inline constexpr std::uint64_t FI_ORDER_ATOMIC_WAW = 1ULL << 39;

// ---- Tag formats (ep_attr::mem_tag_format), fi_endpoint(3) ----
inline constexpr std::uint64_t FI_TAG_BITS = 0;
inline constexpr std::uint64_t FI_TAG_MPI = 1;
inline constexpr std::uint64_t FI_TAG_CCL = 2;
inline constexpr std::uint64_t FI_TAG_MAX_FORMAT = 1ULL << 16; ///< Shunt value
/** Ignore masks for FI_TAG_MPI tags. */
inline constexpr std::uint64_t FI_MPI_IGNORE_TAG = 0xffffffffULL;
inline constexpr std::uint64_t FI_MPI_IGNORE_PAYLOAD = 0xffULL << 32;
/** Build an FI_TAG_MPI tag: 32-bit message tag, 8-bit payload identifier. */
constexpr std::uint64_t tag_mpi(int tag, std::uint8_t payload_id)
{
    return (std::uint64_t(payload_id) << 32) | std::uint64_t(std::uint32_t(tag));
}

// ---- Enumerations ----
enum ep_type : int { FI_EP_UNSPEC, FI_EP_MSG, FI_EP_DGRAM, FI_EP_RDM, FI_EP_SOCK_STREAM, FI_EP_SOCK_DGRAM };

enum threading : int {
    FI_THREAD_UNSPEC, FI_THREAD_SAFE, FI_THREAD_FID, FI_THREAD_DOMAIN, FI_THREAD_COMPLETION, FI_THREAD_ENDPOINT,
};

enum progress : int { FI_PROGRESS_UNSPEC, FI_PROGRESS_AUTO, FI_PROGRESS_MANUAL, FI_PROGRESS_CONTROL_UNIFIED };

enum resource_mgmt : int { FI_RM_UNSPEC, FI_RM_DISABLED, FI_RM_ENABLED };

enum av_type : int { FI_AV_UNSPEC, FI_AV_MAP, FI_AV_TABLE };

/** Address formats (fi_info::addr_format). */
enum addr_format : std::uint32_t {
    FI_FORMAT_UNSPEC, FI_SOCKADDR, FI_SOCKADDR_IN, FI_SOCKADDR_IN6, FI_SOCKADDR_IB, FI_ADDR_PSMX,
    FI_ADDR_GNI, FI_ADDR_BGQ, FI_ADDR_MLX, FI_ADDR_STR, FI_ADDR_PSMX2, FI_ADDR_IB_UD, FI_ADDR_EFA,
    FI_ADDR_PSMX3, FI_ADDR_OPX, FI_ADDR_CXI, FI_ADDR_UCX,
};

/** Protocols (ep_attr::protocol), with libfabric's values: libfabric keeps them
 *  stable, so names it no longer documents (FI_PROTO_PSMX2, FI_PROTO_MRAIL)
 *  keep their slots. Provider-specific ones have the top bit set. */
enum protocol : std::uint32_t {
    FI_PROTO_UNSPEC, FI_PROTO_RDMA_CM_IB_RC, FI_PROTO_IWARP, FI_PROTO_IB_UD, FI_PROTO_PSMX,
    FI_PROTO_UDP, FI_PROTO_SOCK_TCP, FI_PROTO_MXM, FI_PROTO_IWARP_RDM, FI_PROTO_IB_RDM, FI_PROTO_GNI,
    FI_PROTO_RXM, FI_PROTO_RXD, FI_PROTO_MLX, FI_PROTO_NETWORKDIRECT, FI_PROTO_PSMX2, FI_PROTO_SHM,
    FI_PROTO_MRAIL, FI_PROTO_RSTREAM, FI_PROTO_RDMA_CM_IB_XRC, FI_PROTO_EFA, FI_PROTO_PSMX3, FI_PROTO_RXM_TCP,
    FI_PROTO_OPX, FI_PROTO_CXI, FI_PROTO_XNET, FI_PROTO_COLL, FI_PROTO_UCX, FI_PROTO_SM2, FI_PROTO_CXI_RNR,
};
inline constexpr std::uint32_t FI_PROV_SPECIFIC = 1U << 31;

/** Traffic classes (tx_attr::tclass, domain_attr::tclass). */
enum tclass : std::uint32_t {
    FI_TC_UNSPEC = 0,
    FI_TC_DSCP = 0x100,
    FI_TC_LABEL = 0x200,
    FI_TC_BEST_EFFORT = FI_TC_LABEL,
    FI_TC_LOW_LATENCY,
    FI_TC_DEDICATED_ACCESS,
    FI_TC_BULK_DATA,
    FI_TC_SCAVENGER,
    FI_TC_NETWORK_CTRL,
};

/** Wait objects (cq_attr, cntr_attr, eq_attr). */
enum wait_obj : int { FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_SET, FI_WAIT_FD, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD, FI_WAIT_POLLFD };

/** CQ entry formats (fi_cq(3)). */
enum cq_format : int { FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED };

/** CQ wait conditions. */
enum cq_wait_cond : int { FI_CQ_COND_NONE, FI_CQ_COND_THRESHOLD };

/** Counter events. */
enum cntr_events : int { FI_CNTR_EVENTS_COMP, FI_CNTR_EVENTS_BYTES };

/** EQ event types (fi_eq(3)). */
inline constexpr std::uint32_t FI_NOTIFY = 0;
inline constexpr std::uint32_t FI_CONNREQ = 1;
inline constexpr std::uint32_t FI_CONNECTED = 2;
inline constexpr std::uint32_t FI_SHUTDOWN = 3;
inline constexpr std::uint32_t FI_MR_COMPLETE = 4;
inline constexpr std::uint32_t FI_AV_COMPLETE = 5;
inline constexpr std::uint32_t FI_JOIN_COMPLETE = 6;

/** Atomic datatypes (fi_atomic(3)). */
enum datatype : int {
    FI_INT8, FI_UINT8, FI_INT16, FI_UINT16, FI_INT32, FI_UINT32, FI_INT64, FI_UINT64,
    FI_FLOAT, FI_DOUBLE, FI_FLOAT_COMPLEX, FI_DOUBLE_COMPLEX, FI_LONG_DOUBLE, FI_LONG_DOUBLE_COMPLEX,
    FI_INT128, FI_UINT128, FI_DATATYPE_LAST,
};

/** Atomic operations (fi_atomic(3)). */
enum op : int {
    FI_MIN, FI_MAX, FI_SUM, FI_PROD, FI_LOR, FI_LAND, FI_BOR, FI_BAND, FI_LXOR, FI_BXOR,
    FI_ATOMIC_READ, FI_ATOMIC_WRITE, FI_CSWAP, FI_CSWAP_NE, FI_CSWAP_LE, FI_CSWAP_LT, FI_CSWAP_GE,
    FI_CSWAP_GT, FI_MSWAP, FI_ATOMIC_OP_LAST,
};

/** Object classes (fid::fclass). */
enum fid_class : std::size_t {
    FI_CLASS_UNSPEC, FI_CLASS_FABRIC, FI_CLASS_DOMAIN, FI_CLASS_EP, FI_CLASS_SEP, FI_CLASS_RX_CTX,
    FI_CLASS_SRX_CTX, FI_CLASS_TX_CTX, FI_CLASS_STX_CTX, FI_CLASS_PEP, FI_CLASS_INTERFACE, FI_CLASS_AV,
    FI_CLASS_MR, FI_CLASS_EQ, FI_CLASS_CQ, FI_CLASS_CNTR, FI_CLASS_WAIT, FI_CLASS_POLL, FI_CLASS_CONNREQ,
    FI_CLASS_MC, FI_CLASS_NIC, FI_CLASS_AV_SET,
};

/** fi_control commands. */
enum control_cmd : int {
    FI_GETFIDFLAG, FI_SETFIDFLAG, FI_GETOPSFLAG, FI_SETOPSFLAG, FI_ALIAS, FI_GETWAIT, FI_ENABLE,
    FI_BACKLOG, FI_GET_RAW_MR, FI_MAP_RAW_MR, FI_UNMAP_KEY, FI_QUEUE_WORK, FI_CANCEL_WORK,
    FI_FLUSH_WORK, FI_REFRESH, FI_DUP, FI_GETWAITOBJ, FI_GET_VAL, FI_SET_VAL, FI_EXPORT_FID,
};

// ---- Endpoint options (fi_getopt / fi_setopt) ----
inline constexpr int FI_OPT_ENDPOINT = 0; ///< the only option level
enum ep_option : int {
    FI_OPT_MIN_MULTI_RECV,        ///< size_t; min free space before a multi-recv buffer is released
    FI_OPT_CM_DATA_SIZE,          ///< size_t; read only
    FI_OPT_BUFFERED_MIN,          ///< size_t
    FI_OPT_BUFFERED_LIMIT,        ///< size_t
    FI_OPT_SEND_BUF_SIZE,         ///< size_t
    FI_OPT_RECV_BUF_SIZE,         ///< size_t
    FI_OPT_TX_SIZE,               ///< size_t
    FI_OPT_RX_SIZE,               ///< size_t
    FI_OPT_FI_HMEM_P2P,           ///< int, one of hmem_p2p
    FI_OPT_XPU_TRIGGER,           ///< struct
    FI_OPT_CUDA_API_PERMITTED,    ///< bool; set only
    FI_OPT_SHARED_MEMORY_PERMITTED, ///< bool; set only
    FI_OPT_MAX_MSG_SIZE,          ///< size_t, <= ep_attr::max_msg_size
    FI_OPT_MAX_TAGGED_SIZE,       ///< size_t, <= ep_attr::max_msg_size
    FI_OPT_MAX_RMA_SIZE,          ///< size_t, <= ep_attr::max_msg_size
    FI_OPT_MAX_ATOMIC_SIZE,       ///< size_t, <= ep_attr::max_msg_size
    FI_OPT_INJECT_MSG_SIZE,       ///< size_t, <= tx_attr::inject_size
    FI_OPT_INJECT_TAGGED_SIZE,    ///< size_t, <= tx_attr::inject_size
    FI_OPT_INJECT_RMA_SIZE,       ///< size_t, <= tx_attr::inject_size
    FI_OPT_INJECT_ATOMIC_SIZE,    ///< size_t, <= tx_attr::inject_size
};

/** Values of FI_OPT_FI_HMEM_P2P. */
enum hmem_p2p : int { FI_HMEM_P2P_ENABLED, FI_HMEM_P2P_REQUIRED, FI_HMEM_P2P_PREFERRED, FI_HMEM_P2P_DISABLED };

/** Heterogeneous memory interfaces (mr_attr::iface). */
enum hmem_iface : int { FI_HMEM_SYSTEM, FI_HMEM_CUDA, FI_HMEM_ROCR, FI_HMEM_ZE, FI_HMEM_NEURON, FI_HMEM_SYNAPSEAI };

/** fi_getinfo flags beyond the capability bits. */
inline constexpr std::uint64_t FI_RESCAN = 1ULL << 60; ///< Shunt value

/** FI_TC_DSCP encoding: the traffic class for a DSCP value (fi_tc_dscp_set). */
constexpr std::uint32_t tc_dscp_set(std::uint8_t dscp) { return std::uint32_t(dscp) | FI_TC_DSCP; }
/** The DSCP value of a traffic class, 0 if it is not a DSCP class (fi_tc_dscp_get). */
constexpr std::uint8_t tc_dscp_get(std::uint32_t tclass)
{
    return (tclass & FI_TC_DSCP) ? std::uint8_t(tclass & 0xff) : 0;
}

} // namespace shunt::fabric
