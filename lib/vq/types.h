/* Verbs-queue layer: the plain data types shared by every vq header.
 *
 * Names and numeric values follow rdma-core's <infiniband/verbs.h> wherever
 * verbs has the concept (ibv_send_flags, ibv_access_flags, ibv_wc_status,
 * ibv_wc_opcode, IBV_QP_EX_WITH_*), so code and documentation written for
 * verbs read the same here. Values that verbs does not have are marked. */
#pragma once

#include <cstddef>
#include <cstdint>

namespace shunt::vq {

struct device;
struct context;
struct pd;
struct mr;
struct mw;
struct cq;
struct qp;
struct srq;
struct ah;
struct td;
struct driver;

/** Queue-pair transport types (ibv_qp_type). */
enum class qp_type : std::uint8_t {
    rc = 2,          ///< reliable connected
    uc = 3,          ///< unreliable connected
    ud = 4,          ///< unreliable datagram
    raw_packet = 8,  ///< Ethernet frames (ethdev driver only)
    xrc_send = 9,    ///< XRC initiator (no driver supports XRC yet: creation fails)
    xrc_recv = 10,   ///< XRC target (likewise)
};
inline constexpr unsigned num_qp_types = 11; ///< bound for arrays indexed by qp_type

/** Queue-pair states (ibv_qp_state; SQD/SQE are not supported). */
enum class qp_state : std::uint8_t { reset = 0, init = 1, rtr = 2, rts = 3, err = 6 };

/** Work-request flags, set in qp::wr_flags before a builder (ibv_send_flags). */
inline constexpr unsigned WR_FENCE = 1u << 0;     ///< start only after all prior WRs completed
inline constexpr unsigned WR_SIGNALED = 1u << 1;  ///< generate a completion on success
inline constexpr unsigned WR_SOLICITED = 1u << 2; ///< receiver's completion carries WC_SOLICITED
inline constexpr unsigned WR_INLINE = 1u << 3;    ///< single-call posts: copy the data at the call
inline constexpr unsigned WR_IP_CSUM = 1u << 4;   ///< compute IPv4 and TCP/UDP checksums of the header

/** Memory-region / window access flags (ibv_access_flags). Local read is always allowed. */
inline constexpr unsigned ACCESS_LOCAL_WRITE = 1u << 0;
inline constexpr unsigned ACCESS_REMOTE_WRITE = 1u << 1;  ///< needs ACCESS_LOCAL_WRITE
inline constexpr unsigned ACCESS_REMOTE_READ = 1u << 2;
inline constexpr unsigned ACCESS_REMOTE_ATOMIC = 1u << 3; ///< needs ACCESS_LOCAL_WRITE
inline constexpr unsigned ACCESS_MW_BIND = 1u << 4;       ///< windows may be bound to this MR
inline constexpr unsigned ACCESS_FLUSH_GLOBAL = 1u << 8;  ///< target of flush(FLUSH_GLOBAL)
inline constexpr unsigned ACCESS_FLUSH_PERSISTENT = 1u << 9; ///< target of flush(FLUSH_PERSISTENT)
/** Every access flag this layer knows; others make reg_mr fail with -FI_EINVAL. */
inline constexpr unsigned ACCESS_ALL = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE |
    ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC | ACCESS_MW_BIND | ACCESS_FLUSH_GLOBAL |
    ACCESS_FLUSH_PERSISTENT;
/** The access flags a window may be bound with (mw_bind_info::mw_access_flags);
 *  others make the bind's batch fail with -FI_EINVAL. */
inline constexpr unsigned ACCESS_MW_ALL = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ |
    ACCESS_REMOTE_ATOMIC;

/** Operations a QP will post: qp_init_attr::send_ops_flags (IBV_QP_EX_WITH_*). */
inline constexpr std::uint64_t OPS_RDMA_WRITE = 1u << 0;
inline constexpr std::uint64_t OPS_RDMA_WRITE_WITH_IMM = 1u << 1;
inline constexpr std::uint64_t OPS_SEND = 1u << 2;
inline constexpr std::uint64_t OPS_SEND_WITH_IMM = 1u << 3;
inline constexpr std::uint64_t OPS_RDMA_READ = 1u << 4;
inline constexpr std::uint64_t OPS_ATOMIC_CMP_AND_SWP = 1u << 5;
inline constexpr std::uint64_t OPS_ATOMIC_FETCH_AND_ADD = 1u << 6;
inline constexpr std::uint64_t OPS_LOCAL_INV = 1u << 7;
inline constexpr std::uint64_t OPS_BIND_MW = 1u << 8;
inline constexpr std::uint64_t OPS_SEND_WITH_INV = 1u << 9;
inline constexpr std::uint64_t OPS_TSO = 1u << 10;
inline constexpr std::uint64_t OPS_FLUSH = 1u << 11;
inline constexpr std::uint64_t OPS_ALL = (1u << 12) - 1;

/** The spec's operation table: operations each QP type allows (IBV_WR API(3),
 *  "WORK REQUESTS"). A driver may support fewer (device_attr::ops). */
constexpr std::uint64_t ops_allowed(qp_type t) noexcept
{
    switch (t) {
    case qp_type::rc:
    case qp_type::xrc_send:
        return OPS_ALL & ~OPS_TSO;
    case qp_type::uc:
        return OPS_RDMA_WRITE | OPS_RDMA_WRITE_WITH_IMM | OPS_SEND | OPS_SEND_WITH_IMM |
               OPS_LOCAL_INV | OPS_BIND_MW | OPS_SEND_WITH_INV;
    case qp_type::ud:
        return OPS_SEND | OPS_SEND_WITH_IMM | OPS_TSO;
    case qp_type::raw_packet:
        return OPS_SEND | OPS_TSO;
    default:
        return 0;
    }
}

/** flush() type and level (IBV_FLUSH_*). */
inline constexpr std::uint8_t FLUSH_GLOBAL = 1;     ///< visible to every observer
inline constexpr std::uint8_t FLUSH_PERSISTENT = 2; ///< and persistent
inline constexpr std::uint8_t FLUSH_RANGE = 0;      ///< level: the given range
inline constexpr std::uint8_t FLUSH_MR = 1;         ///< level: the whole region named by rkey

/** Memory-window types (ibv_mw_type). Only type 2 is supported. */
enum class mw_type : std::uint8_t { type1 = 1, type2 = 2 };

/** A scatter/gather element (ibv_sge). */
struct sge {
    std::uint64_t addr;   ///< local virtual address
    std::uint32_t length; ///< bytes
    std::uint32_t lkey;   ///< local key of the MR containing [addr, addr+length)
};

/** One buffer of an inline-data list (ibv_data_buf). */
struct data_buf {
    const void *addr;
    std::size_t length;
};

/** Where bind_mw places a window (ibv_mw_bind_info). */
struct mw_bind_info {
    struct mr *mr;               ///< region the window lies in (needs ACCESS_MW_BIND)
    std::uint64_t addr;          ///< start, inside mr
    std::uint64_t length;        ///< bytes; 0 unbinds
    unsigned mw_access_flags;    ///< ACCESS_REMOTE_* (remote write/atomic need the MR's local write)
};

/** Completion status (ibv_wc_status, same values). */
enum class wc_status : std::uint32_t {
    success = 0,
    loc_len_err = 1,       ///< receive buffer too small / local length
    loc_qp_op_err = 2,
    loc_eec_op_err = 3,
    loc_prot_err = 4,      ///< bad lkey or SGE outside its MR
    wr_flush_err = 5,      ///< QP in ERR: work request flushed, not executed
    mw_bind_err = 6,
    bad_resp_err = 7,      ///< bad response: the peer broke the protocol (shm: a bad header in a ring)
    loc_access_err = 8,
    rem_inv_req_err = 9,   ///< remote invalid request (e.g. message longer than the receive)
    rem_access_err = 10,   ///< bad rkey, bounds or access flags at the target
    rem_op_err = 11,
    retry_exc_err = 12,    ///< retry exceeded: the peer is gone
    rnr_retry_exc_err = 13,
    loc_rdd_viol_err = 14,
    rem_inv_rd_req_err = 15,
    rem_abort_err = 16,
    inv_eecn_err = 17,
    inv_eec_state_err = 18,
    fatal_err = 19,
    resp_timeout_err = 20,
    general_err = 21,
};
/** Name of a status ("success", "wr_flush_err", ...); never null. */
const char *wc_status_str(wc_status s) noexcept;

/** Completion opcode (ibv_wc_opcode, same values). */
enum class wc_opcode : std::uint32_t {
    send = 0,             ///< send, send_imm and send_inv
    rdma_write = 1,       ///< rdma_write and rdma_write_imm
    rdma_read = 2,
    comp_swap = 3,
    fetch_add = 4,
    bind_mw = 5,
    local_inv = 6,
    tso = 7,
    flush = 8,
    recv = 128,           ///< a receive consumed by a send
    recv_rdma_with_imm = 129, ///< a receive consumed by rdma_write_imm
};

/** wc::wc_flags bits (ibv_wc_flags; WC_SOLICITED is a Shunt addition). */
inline constexpr unsigned WC_GRH = 1u << 0;
inline constexpr unsigned WC_WITH_IMM = 1u << 1;    ///< imm_data is valid
inline constexpr unsigned WC_IP_CSUM_OK = 1u << 2;
inline constexpr unsigned WC_WITH_INV = 1u << 3;    ///< invalidated_rkey is valid
inline constexpr unsigned WC_SOLICITED = 1u << 4;   ///< sender set WR_SOLICITED

/** A work completion (ibv_wc). For an error completion only wr_id, status,
 *  qp_num and vendor_err are defined (as in verbs). */
struct wc {
    std::uint64_t wr_id;
    wc_status status;
    wc_opcode opcode;
    std::uint32_t vendor_err;       ///< driver-specific detail of an error, else 0
    std::uint32_t byte_len;         ///< bytes received (receives), read (rdma_read), 8 (atomics)
    std::uint32_t imm_data;         ///< network byte order, when WC_WITH_IMM
    std::uint32_t invalidated_rkey; ///< when WC_WITH_INV
    std::uint32_t qp_num;           ///< local QP the completion belongs to
    std::uint32_t src_qp;           ///< sender's QP number (receives)
    unsigned wc_flags;              ///< WC_* bits
    std::uint32_t reserved;
    /** Receives on a QP with lent receives (qp_init_attr::lend_recv): the
     *  byte_len received bytes, in the driver's own buffer, valid until the
     *  next poll_cq / start_poll of this CQ (iterator form: until next_poll
     *  or end_poll); null for every other completion. A Shunt addition
     *  (see doc/guides/vq.md, "Lent receives"). */
    const std::uint8_t *data;
};

/** A message of a lent-receive QP read in place by poll_lent (qp_fp.h):
 *  what the receive completion poll_cq would give for it carries, less
 *  what poll_lent's contract fixes (status success, opcode recv, wr_id 0,
 *  the polled QP's qp_num and, RC/UC, its peer's src_qp). A Shunt addition
 *  (see doc/guides/vq.md, "Lent receives"). */
struct lent_msg {
    const std::uint8_t *data;       ///< the byte_len bytes, in the driver's buffer (lent as wc::data)
    std::uint32_t byte_len;
    std::uint32_t imm_data;         ///< network byte order, when WC_WITH_IMM
    unsigned wc_flags;              ///< WC_WITH_IMM, WC_SOLICITED
    std::uint32_t reserved;
};

/** Address of a device endpoint (a context), as a peer needs it to reach the
 *  context's QPs together with a QP number. Opaque bytes defined by the driver
 *  (shm: the name of the context's shared segment); copy it out of band. */
struct dev_addr {
    std::uint8_t len;       ///< bytes used in raw
    std::uint8_t raw[63];
};
/** Full address of a QP: context address plus QP number. */
struct qp_addr {
    dev_addr dev;
    std::uint32_t qpn;
};

} // namespace shunt::vq
