/* Verbs queues: the object model of rdma-core verbs, and its setup calls.
 *
 *   get_device_list / find_device → open_device (context)
 *     → alloc_pd → reg_mr, alloc_mw, create_ah, create_srq, create_qp
 *     → create_cq, alloc_td
 *   modify_qp walks a QP through RESET → INIT → RTR → RTS (and ERR / RESET).
 *
 * Posting is in vq/qp_fp.h, polling in vq/cq_fp.h (both included here).
 * Setup calls validate everything, never crash on bad input (null pointers
 * included), write outputs only on success and return 0 or a negative
 * libfabric code (env/errors.h). They are thread safe per context. Objects
 * must be destroyed before the objects they were created from:
 * destroy/dealloc/close return -FI_EBUSY while dependants exist. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vq/cq_fp.h"
#include "vq/qp_fp.h"
#include "vq/types.h"

namespace shunt::vq {

struct context_ops;

/** A device: one instance of a driver's queues (shm: "shm0"). Owned by the driver. */
struct device {
    const char *name = nullptr;       ///< unique among all devices, e.g. "shm0"
    const driver *drv = nullptr;      ///< the driver that probed it
    const char *description = nullptr; ///< one line for shunt-info
};

/** Limits and capabilities of a device (ibv_device_attr, trimmed). */
struct device_attr {
    std::uint32_t max_qp = 0;
    std::uint32_t max_qp_wr = 0;       ///< per send / receive queue
    std::uint32_t max_sge = 0;         ///< per work request
    std::uint32_t max_inline_data = 0; ///< per send request
    std::uint32_t max_cq = 0;
    std::uint32_t max_cqe = 0;
    std::uint32_t max_mr = 0;          ///< regions plus windows
    std::uint64_t max_mr_size = 0;
    std::uint32_t max_mw = 0;
    std::uint32_t max_srq = 0;
    std::uint32_t max_srq_wr = 0;
    std::uint32_t max_msg_sz = 0;      ///< RC/UC message and RDMA size
    std::uint32_t ud_mtu = 0;          ///< largest UD message (and TSO segment incl. header)
    std::uint32_t max_tso_hdr = 0;     ///< largest wr_send_tso header (0: no TSO on any QP type)
    bool atomics_global = false;       ///< atomics atomic against CPU atomics too
    /** UD receives start with verbs' 40-byte GRH area (WC_GRH set, byte_len
     *  includes it): a receive needs 40 bytes more than the message. */
    bool ud_grh = false;
    /** Contexts of this device reach only contexts on the same host (through
     *  shared memory); false: peers may be on other hosts. */
    bool host_local = false;
    /** Operations supported per QP type (OPS_* bits; 0: type not supported). */
    std::uint64_t ops[num_qp_types] = {};
    /** Inline bytes one send carries in a single unit of the transport: a
     *  slot of the receiver's ring (shm: one cache line), a WQE basic block
     *  (mlx5). Sends up to this size are the cheapest there are: one line
     *  written, one line read. 0: the device does not say. */
    std::uint32_t max_inline_slot = 0;
    /** QP types that offer lent receives (qp_init_attr::lend_recv), as bits
     *  1u << qp_type; 0: none. */
    std::uint32_t lend_qp_types = 0;
    /** Largest message a lent-receive RC/UC QP takes in one completion (a
     *  UD one: ud_mtu). A larger send to such a QP fails at the sender with
     *  rem_inv_req_err and nothing of it is delivered. */
    std::uint32_t max_lend_msg = 0;
    /** Peers' RDMA (and the device's rendezvous sends) reach registered
     *  memory anywhere in a process. false: only memory inside the device's
     *  shared segments (alloc_buf) — RDMA to other memory fails with a
     *  remote access error, sends from it are copied (shm without
     *  cross-memory attach). */
    bool rdma_private = true;
};

/** An open device: owns the device's resources for this process. */
struct context {
    device *dev = nullptr;
    const context_ops *ops = nullptr; ///< driver's table (see vq/driver.h)
    dev_addr addr{};                   ///< how peers reach this context
};

/** Protection domain. */
struct pd {
    context *ctx = nullptr;
};

/** Registered memory region. */
struct mr {
    context *ctx = nullptr;
    struct pd *pd = nullptr;
    void *addr = nullptr;
    std::size_t length = 0;
    std::uint32_t lkey = 0;  ///< for local SGEs
    std::uint32_t rkey = 0;  ///< for peers' RDMA and atomics (checked against the access flags)
    unsigned access = 0;     ///< ACCESS_* flags
};

/** Memory window (type 2): bound and invalidated by posted work requests. */
struct mw {
    context *ctx = nullptr;
    struct pd *pd = nullptr;
    std::uint32_t rkey = 0;  ///< current key; updated when a bind_mw completes successfully
    mw_type type = mw_type::type2;
};

/** Next key for a window or region: same index bits, key byte + 1 (ibv_inc_rkey). */
constexpr std::uint32_t inc_rkey(std::uint32_t rkey) noexcept
{
    return (rkey & 0xffffff00u) | ((rkey + 1) & 0xffu);
}

/** Thread domain: QPs created with one take no locks (see qp_fp.h). */
struct td {
    context *ctx = nullptr;
};

/** Address handle: where UD sends go (with a QP number and Q_Key). */
struct ah {
    context *ctx = nullptr;
    struct pd *pd = nullptr;
    dev_addr dest{};
};
struct ah_attr {
    dev_addr dest{}; ///< the destination context's address (context::addr)
};

/** Completion-queue creation attributes. */
struct cq_init_attr {
    int cqe = 0;                  ///< minimum capacity (> 0)
    /** No lock: one thread at a time polls it AND posts to the QPs whose send
     *  CQ it is (a software driver writes send completions while posting). */
    bool single_threaded = false;
};

/** Shared receive queue. */
struct srq {
    context *ctx = nullptr;
    struct pd *pd = nullptr;
    std::uint32_t max_wr = 0;
    std::uint32_t max_sge = 0;
    int (*post_recv_fn)(srq *, std::uint64_t wr_id, const sge *sg_list, std::uint32_t num_sge) = nullptr;
};
struct srq_init_attr {
    std::uint32_t max_wr = 0;  ///< receives outstanding (> 0)
    std::uint32_t max_sge = 0; ///< SGEs per receive (0: 1)
};
/** Post one receive to an SRQ; any QP attached to it may consume it.
 *  @return as post_recv() on a QP (-FI_EAGAIN full, -FI_E2BIG too many SGEs). */
[[nodiscard]] inline int post_srq_recv(srq *s, std::uint64_t wr_id, const sge *sg_list,
                                       std::uint32_t num_sge) noexcept
{
    return s->post_recv_fn(s, wr_id, sg_list, num_sge);
}

/** QP creation attributes (ibv_qp_init_attr_ex). */
struct qp_init_attr {
    qp_type type = qp_type::rc;
    cq *send_cq = nullptr;     ///< required
    cq *recv_cq = nullptr;     ///< required
    struct srq *srq = nullptr; ///< optional: receives come from it
    qp_cap cap;
    /** Operations that will be posted (OPS_*). Creation fails with -FI_EINVAL
     *  when one is not allowed for the QP type by the spec's table
     *  (ops_allowed()) or is unknown, and with -FI_EOPNOTSUPP when it is
     *  allowed but the driver does not implement it (device_attr::ops). */
    std::uint64_t send_ops_flags = OPS_SEND;
    struct td *td = nullptr;   ///< thread domain: lock-free posting
    bool sq_sig_all = false;   ///< every send request is signaled
    /** Lent receives: no receive is posted; each message arrives as a
     *  completion whose wc::data points at the bytes in the driver's buffer
     *  (the shm receive ring; mlx5: a stride of a striding RQ or the CQE
     *  itself), lent to the caller until its next poll of the receive CQ and
     *  then taken back, in order. post_recv on the QP is -FI_EINVAL.
     *  Creation: -FI_EINVAL together with an SRQ; -FI_EOPNOTSUPP when the
     *  QP type is not in device_attr::lend_qp_types. See doc/guides/vq.md. */
    bool lend_recv = false;
};

/** modify_qp attribute mask bits (ibv_qp_attr_mask values). */
inline constexpr unsigned QP_ATTR_STATE = 1u << 0;
inline constexpr unsigned QP_ATTR_ACCESS_FLAGS = 1u << 3;
inline constexpr unsigned QP_ATTR_PKEY_INDEX = 1u << 4;
inline constexpr unsigned QP_ATTR_PORT = 1u << 5;
inline constexpr unsigned QP_ATTR_QKEY = 1u << 6;
inline constexpr unsigned QP_ATTR_AV = 1u << 7;
inline constexpr unsigned QP_ATTR_PATH_MTU = 1u << 8;
inline constexpr unsigned QP_ATTR_TIMEOUT = 1u << 9;
inline constexpr unsigned QP_ATTR_RETRY_CNT = 1u << 10;
inline constexpr unsigned QP_ATTR_RNR_RETRY = 1u << 11;
inline constexpr unsigned QP_ATTR_RQ_PSN = 1u << 12;
inline constexpr unsigned QP_ATTR_MAX_QP_RD_ATOMIC = 1u << 13;
inline constexpr unsigned QP_ATTR_MIN_RNR_TIMER = 1u << 15;
inline constexpr unsigned QP_ATTR_SQ_PSN = 1u << 16;
inline constexpr unsigned QP_ATTR_MAX_DEST_RD_ATOMIC = 1u << 17;
inline constexpr unsigned QP_ATTR_DEST_QPN = 1u << 20;

/** QP attributes for modify_qp / query_qp (ibv_qp_attr, trimmed). Fields not
 *  named in the mask are ignored. */
struct qp_attr {
    qp_state state = qp_state::reset;
    /** Remote operations the responder allows (ACCESS_REMOTE_WRITE/READ/ATOMIC;
     *  ACCESS_LOCAL_WRITE is accepted and ignored). As in verbs: none until set
     *  with QP_ATTR_ACCESS_FLAGS (a QP never given them rejects every incoming
     *  RDMA/atomic with rem_access_err at the initiator); a region's or
     *  window's own access flags are checked in addition. */
    unsigned qp_access_flags = 0;
    std::uint32_t qkey = 0;        ///< UD: receives accept only sends with this Q_Key
    dev_addr dest{};               ///< RC/UC: the peer context's address
    std::uint32_t dest_qp_num = 0; ///< RC/UC: the peer QP number
    std::uint32_t sq_psn = 0, rq_psn = 0;
    std::uint16_t pkey_index = 0;
    std::uint8_t port_num = 1;
    std::uint8_t path_mtu = 0, timeout = 0, retry_cnt = 0, rnr_retry = 0, min_rnr_timer = 0;
    std::uint8_t max_rd_atomic = 0, max_dest_rd_atomic = 0;
};

/* ---- Devices ---- */

/** Every device of every registered driver (probing each driver once).
 *  @return the number of devices (out is replaced). */
int get_device_list(std::vector<device *> &out);
/** @return the device called @p name, or null. */
device *find_device(const char *name);
/** Name of the driver that probed @p dev ("shm"); "" for null. Devices of
 *  one driver reach each other (the fabric a provider offers them in). */
const char *device_driver_name(const device *dev);
/** Open a device. @return 0 and *out; -FI_EINVAL null argument; the driver's
 *  error otherwise (shm: -FI_ENOMEM no segment memory or no host-wide
 *  QP-number table; -FI_ENOSPC 1024 contexts of this user already open). */
[[nodiscard]] int open_device(device *dev, context **out);
/** Close a context. @return 0; -FI_EBUSY objects remain; -FI_EINVAL null. */
[[nodiscard]] int close_device(context *ctx);
/** @return 0 and *out; -FI_EINVAL null argument. */
[[nodiscard]] int query_device(context *ctx, device_attr *out);

/* ---- Protection domains, memory ---- */

/** @return 0 and *out; -FI_EINVAL null; -FI_ENOMEM. */
[[nodiscard]] int alloc_pd(context *ctx, pd **out);
/** @return 0; -FI_EBUSY objects created from it remain; -FI_EINVAL null. */
[[nodiscard]] int dealloc_pd(pd *p);
/** Register [addr, addr+length) for local SGEs and, by @p access, remote use.
 *  @return 0 and *out; -FI_EINVAL null pd/addr/out, length 0, unknown access
 *  bit, REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE; -FI_ENOSPC region
 *  table full (device_attr::max_mr); -FI_EMSGSIZE over max_mr_size. */
[[nodiscard]] int reg_mr(pd *p, void *addr, std::size_t length, unsigned access, mr **out);
/** Deregister. Peers' later accesses with its keys fail (rem_access_err).
 *  @return 0; -FI_EBUSY windows are bound to it; -FI_EINVAL null. */
[[nodiscard]] int dereg_mr(mr *m);
/** Allocate a memory window. @return 0 and *out; -FI_EOPNOTSUPP type1;
 *  -FI_EINVAL null; -FI_ENOSPC table full. */
[[nodiscard]] int alloc_mw(pd *p, mw_type type, mw **out);
/** @return 0; -FI_EINVAL null. A bound window is invalidated first. */
[[nodiscard]] int dealloc_mw(mw *w);
/** Memory that peers reach without an intermediate copy (shm: inside this
 *  context's shared segment), to be registered with reg_mr like any memory.
 *  @return 0 and *out (64-byte aligned); -FI_EOPNOTSUPP the driver has none;
 *  -FI_ENOMEM exhausted; -FI_EINVAL null or size 0. */
[[nodiscard]] int alloc_buf(context *ctx, std::size_t size, void **out);
/** Free alloc_buf memory. @return 0; -FI_EINVAL not from alloc_buf. */
[[nodiscard]] int free_buf(context *ctx, void *buf);

/* ---- Thread domains, address handles ---- */

/** @return 0 and *out; -FI_EINVAL null; -FI_ENOMEM. */
[[nodiscard]] int alloc_td(context *ctx, td **out);
/** @return 0; -FI_EBUSY QPs created with it still exist; -FI_EINVAL null. */
[[nodiscard]] int dealloc_td(td *t);
/** @return 0 and *out; -FI_EINVAL null or malformed address; the shm driver
 *  also resolves the peer here: -FI_ENOENT no such peer device, -FI_EACCES
 *  its segment belongs to another user, -FI_ENOMEM out of memory. */
[[nodiscard]] int create_ah(pd *p, const ah_attr *attr, ah **out);
[[nodiscard]] int destroy_ah(ah *a);

/* ---- Completion queues, receive queues, queue pairs ---- */

/** @return 0 and *out; -FI_EINVAL null or cqe <= 0; -FI_EMSGSIZE cqe over max_cqe. */
[[nodiscard]] int create_cq(context *ctx, const cq_init_attr *attr, cq **out);
/** @return 0; -FI_EBUSY QPs still use it; -FI_EINVAL null. */
[[nodiscard]] int destroy_cq(cq *c);
/** @return 0 and *out; -FI_EINVAL null, max_wr 0; -FI_EMSGSIZE over limits. */
[[nodiscard]] int create_srq(pd *p, const srq_init_attr *attr, srq **out);
/** @return 0; -FI_EBUSY QPs still use it; -FI_EINVAL null. */
[[nodiscard]] int destroy_srq(srq *s);

/** Create a QP in state RESET. Capacities of 0 take driver defaults; the
 *  actual values are in (*out)->cap.
 *  @return 0 and *out;
 *  -FI_EINVAL null pd/attr/out/CQ, CQ or SRQ or td of another context, an
 *  operation the spec does not allow for the type, an unknown OPS_ bit,
 *  the XRC receive type (xrc_recv);
 *  -FI_EOPNOTSUPP QP type (RAW_PACKET on shm, XRC everywhere today) or an
 *  operation the driver does not implement;
 *  -FI_EMSGSIZE a capacity over the device limits;
 *  -FI_ENOSPC too many QPs. */
[[nodiscard]] int create_qp(pd *p, const qp_init_attr *attr, qp **out);
/** @return 0; -FI_EINVAL null. Outstanding requests are discarded without
 *  completions; the peer of an RC/UC QP sees it as gone. */
[[nodiscard]] int destroy_qp(qp *q);
/** Change QP state/attributes as verbs does. Transitions allowed:
 *  RESET→INIT, INIT→INIT, INIT→RTR, RTR→RTS, RTS→RTS, any→ERR, any→RESET.
 *  RTR on RC/UC needs QP_ATTR_AV and QP_ATTR_DEST_QPN (the peer's qp_addr);
 *  UD takes QP_ATTR_QKEY at INIT. Going to ERR flushes every outstanding
 *  request (wr_flush_err completions); going to RESET discards them.
 *  @return 0; -FI_EINVAL null, bad transition, missing or malformed
 *  attribute; -FI_ENOENT (RTR) no such peer context or QP; -FI_EACCES
 *  (RTR) the peer's segment belongs to another user; -FI_EBUSY (RTR, shm)
 *  the peer RC/UC QP is already connected to another QP (reset it first);
 *  -FI_ENOMEM (RESET, shm) no segment memory for fresh rings while a peer
 *  may still write into the old ones. */
[[nodiscard]] int modify_qp(qp *q, const qp_attr *attr, unsigned attr_mask);
/** @return 0 and *out (state and the attributes set so far); -FI_EINVAL null. */
[[nodiscard]] int query_qp(qp *q, qp_attr *out);
/** Whether a new QP of @p type (RC or UC) on @p ctx could be connected to
 *  the peer QP @p dest now, asked before creating one: the checks modify_qp
 *  makes at RTR that need no QP of ours. Verbs has no counterpart (a
 *  network peer is only heard from once connected); it lets a caller that
 *  connects QPs on a peer's unauthenticated word refuse a peer that does
 *  not exist without creating and destroying a QP for it. A hint: the peer
 *  may change before RTR, which checks again.
 *  @return 0 it could; -FI_EOPNOTSUPP the driver cannot tell before
 *  connecting (connect and see); -FI_EINVAL null, a malformed address, a
 *  type that does not connect, or a peer QP of another type; -FI_ENOENT no
 *  such peer context or QP; -FI_EACCES the peer's segment belongs to
 *  another user; -FI_EBUSY (shm) another QP is connected to it. */
[[nodiscard]] int check_dest_qp(context *ctx, const qp_addr *dest, qp_type type);
/** Current state (cheap). */
qp_state get_qp_state(const qp *q) noexcept;

/** The full address of @p q (context address + qp_num) for the out-of-band exchange. */
qp_addr get_qp_addr(const qp *q) noexcept;

/** Printable form of a dev_addr (driver bytes as text where printable, else hex). */
std::string dev_addr_str(const dev_addr &a);

} // namespace shunt::vq
