/* Fast-path posting API: the queue pair as the driver hands it out, and the
 * ibv_wr_* calls as inline wrappers around its function pointers.
 *
 * Usage, exactly as IBV_WR API(3):
 *
 *     vq::wr_start(q);
 *     q->wr_id = 1;
 *     q->wr_flags = vq::WR_SIGNALED;
 *     vq::wr_send(q);
 *     vq::wr_set_sge(q, mr->lkey, addr, len);
 *     int rc = vq::wr_complete(q);   // 0, or the first error of the batch
 *
 * Rules (they hold for every driver):
 * - wr_id and wr_flags are read by the builder; set them before it.
 * - A builder starts a work request; then exactly one data setter (set_sge,
 *   set_sge_list, set_inline_data, set_inline_data_list) for operations that
 *   carry data, and the QP setter (set_ud_addr on UD, set_xrc_srqn on XRC).
 *   A builder for an operation whose length is 0 needs no data setter.
 * - Builders and setters return nothing. The first failure in the batch is
 *   latched; later calls are ignored until wr_complete returns that error and
 *   discards the whole batch: nothing of it is executed and no completion is
 *   generated. wr_abort discards the batch unconditionally.
 * - Errors latched (returned by wr_complete):
 *     -FI_EOPBADSTATE  QP not in RTS (RESET/INIT/RTR); in ERR the batch is
 *                      accepted and every request completes with wr_flush_err
 *     -FI_EOPNOTSUPP   operation not in the QP's send_ops_flags, or a setter
 *                      the operation does not take (e.g. set_ud_addr on RC,
 *                      inline data on rdma_read), WR_IP_CSUM on a QP that is
 *                      not UD (or RAW_PACKET)
 *     -FI_EINVAL       bad argument (null list with n > 0, unaligned atomic
 *                      address, atomic data that is not 8 bytes, mss 0, a
 *                      TSO header over 256 bytes or header + mss over the UD
 *                      MTU, flags outside WR_*, setter before any builder,
 *                      data setter called twice, missing mandatory setter
 *                      such as set_ud_addr on UD, unknown flush type)
 *     -FI_ENOSPC       set_ud_addr to a new destination when the QP already
 *                      has the driver's maximum (shm: 1024)
 *     -FI_E2BIG        more SGEs than cap.max_send_sge
 *     -FI_EMSGSIZE     inline data over cap.max_inline_data, or a message
 *                      over the device's max_msg_sz (UD: the path MTU)
 *     -FI_EAGAIN       the send queue is full (cap.max_send_wr outstanding):
 *                      poll the send CQ and post again; earlier batches are
 *                      unaffected and still complete
 * - Locking: unless the QP was created with a thread domain, wr_start takes
 *   a per-QP lock that wr_complete / wr_abort release, and the single-call
 *   posts take it too. With a thread domain no lock is taken: the caller
 *   guarantees one thread at a time in the critical region, and polls the
 *   QP's CQs from that same thread.
 * - Checks that need the target (rkey, bounds, access) or the peer (alive,
 *   receive buffer large enough) come back as error completions, which are
 *   generated even for unsignaled requests. */
#pragma once

#include <cstddef>
#include <cstdint>

#include "vq/types.h"

namespace shunt::vq {

/** QP capacities (ibv_qp_cap). Requested at creation; the QP holds the actual values. */
struct qp_cap {
    std::uint32_t max_send_wr = 0;     ///< outstanding send requests (0: driver default)
    std::uint32_t max_recv_wr = 0;     ///< outstanding receives (0: driver default; ignored with an SRQ)
    std::uint32_t max_send_sge = 0;    ///< SGEs per send request (0: 1)
    std::uint32_t max_recv_sge = 0;    ///< SGEs per receive (0: 1)
    std::uint32_t max_inline_data = 0; ///< bytes of inline data per request
};

/** A queue pair, as ibv_qp_ex: the public fast-path block every driver fills.
 *
 * The driver allocates a larger object whose first member this is, and sets
 * the function pointers at creation from the QP type, the send_ops_flags and
 * the threading mode (locking or not), so that no call branches on them.
 * Every pointer is non-null: a slot the QP does not support points at a stub
 * that latches -FI_EOPNOTSUPP (builders/setters) or returns it (posts). */
struct alignas(64) qp {
    /* Cache line 0: what every post touches. */
    std::uint64_t wr_id = 0;   ///< id reported by the completion of the next builder's WR
    unsigned wr_flags = 0;     ///< WR_* flags for the next builder
    std::uint32_t qp_num = 0;  ///< this QP's number (immutable)
    void (*wr_start_fn)(qp *) = nullptr;
    int (*wr_complete_fn)(qp *) = nullptr;
    void (*send_fn)(qp *) = nullptr;
    void (*rdma_write_fn)(qp *, std::uint32_t rkey, std::uint64_t remote_addr) = nullptr;
    void (*set_sge_fn)(qp *, std::uint32_t lkey, std::uint64_t addr, std::uint32_t length) = nullptr;
    void (*set_inline_data_fn)(qp *, const void *addr, std::size_t length) = nullptr;

    /* Cache line 1: the other builders. */
    void (*wr_abort_fn)(qp *) = nullptr;
    void (*send_imm_fn)(qp *, std::uint32_t imm_data) = nullptr;
    void (*send_inv_fn)(qp *, std::uint32_t invalidate_rkey) = nullptr;
    void (*send_tso_fn)(qp *, const void *hdr, std::uint16_t hdr_sz, std::uint16_t mss) = nullptr;
    void (*rdma_write_imm_fn)(qp *, std::uint32_t rkey, std::uint64_t remote_addr,
                              std::uint32_t imm_data) = nullptr;
    void (*rdma_read_fn)(qp *, std::uint32_t rkey, std::uint64_t remote_addr) = nullptr;
    void (*atomic_cmp_swp_fn)(qp *, std::uint32_t rkey, std::uint64_t remote_addr,
                              std::uint64_t compare, std::uint64_t swap) = nullptr;
    void (*atomic_fetch_add_fn)(qp *, std::uint32_t rkey, std::uint64_t remote_addr,
                                std::uint64_t add) = nullptr;

    /* Cache line 2: window/flush builders, the other setters, single-call posts. */
    void (*bind_mw_fn)(qp *, mw *window, std::uint32_t rkey, const mw_bind_info *info) = nullptr;
    void (*local_inv_fn)(qp *, std::uint32_t invalidate_rkey) = nullptr;
    void (*flush_fn)(qp *, std::uint32_t rkey, std::uint64_t remote_addr, std::size_t len,
                     std::uint8_t type, std::uint8_t level) = nullptr;
    void (*set_sge_list_fn)(qp *, std::size_t num_sge, const sge *sg_list) = nullptr;
    void (*set_inline_data_list_fn)(qp *, std::size_t num_buf, const data_buf *buf_list) = nullptr;
    void (*set_ud_addr_fn)(qp *, ah *address, std::uint32_t remote_qpn,
                           std::uint32_t remote_qkey) = nullptr;
    void (*set_xrc_srqn_fn)(qp *, std::uint32_t remote_srqn) = nullptr;
    int (*post_send_fn)(qp *, std::uint64_t wr_id, const void *buf, std::uint32_t length,
                        std::uint32_t lkey, unsigned flags) = nullptr;

    /* Cache line 3: the other single-call posts, receive and the lent-receive poll. */
    int (*post_write_fn)(qp *, std::uint64_t wr_id, const void *buf, std::uint32_t length,
                         std::uint32_t lkey, std::uint32_t rkey, std::uint64_t remote_addr,
                         unsigned flags) = nullptr;
    int (*post_recv_fn)(qp *, std::uint64_t wr_id, const sge *sg_list, std::uint32_t num_sge) = nullptr;
    int (*post_send_imm_inline_fn)(qp *, std::uint64_t wr_id, std::uint32_t imm_data, const data_buf *buf_list,
                                   std::size_t num_buf, unsigned flags) = nullptr;
    int (*poll_lent_fn)(qp *, int num_entries, lent_msg *out) = nullptr;
    int (*post_send_imm_hdr_inline_fn)(qp *, std::uint64_t wr_id, std::uint32_t imm_data, std::uint64_t hdr,
                                       const void *buf, std::uint32_t length, unsigned flags) = nullptr;

    /* Cold: read-only description, set at creation. */
    context *ctx = nullptr;
    struct pd *pd = nullptr;
    cq *send_cq = nullptr;
    cq *recv_cq = nullptr;
    struct srq *srq = nullptr;     ///< null when the QP has its own receive queue
    qp_type type = qp_type::rc;
    bool has_td = false;           ///< created with a thread domain: no locking
    bool sq_sig_all = false;       ///< every send request is signaled
    std::uint64_t send_ops_flags = 0;
    qp_cap cap;                    ///< actual capacities
};

/* ---- The session API (ibv_wr_*) ---- */

/** Open the critical region (takes the QP lock unless a thread domain). */
inline void wr_start(qp *q) noexcept { q->wr_start_fn(q); }
/** Execute every WR since wr_start, or none. Releases the lock.
 *  @return 0; or the first latched error (see the header comment), in which
 *  case nothing of the batch was executed. */
[[nodiscard]] inline int wr_complete(qp *q) noexcept { return q->wr_complete_fn(q); }
/** Discard every WR since wr_start; releases the lock. */
inline void wr_abort(qp *q) noexcept { q->wr_abort_fn(q); }

/** Send the data of the following data setter (opcode SEND at both ends). */
inline void wr_send(qp *q) noexcept { q->send_fn(q); }
/** Send with 32 bits of immediate data (network byte order), delivered in the
 *  receiver's wc::imm_data with WC_WITH_IMM. */
inline void wr_send_imm(qp *q, std::uint32_t imm_data) noexcept { q->send_imm_fn(q, imm_data); }
/** Send, and invalidate @p invalidate_rkey (a window or MR of the receiver)
 *  once the message is placed, before the receive completes (WC_WITH_INV,
 *  wc::invalidated_rkey): the message may land in the region it names. An
 *  rkey that names nothing the receiver can invalidate completes the receive
 *  with rem_inv_req_err and moves the receiving QP to ERR (which keys a
 *  driver can invalidate: doc/guides/vq.md, "Invalidation"). */
inline void wr_send_inv(qp *q, std::uint32_t invalidate_rkey) noexcept
{
    q->send_inv_fn(q, invalidate_rkey);
}
/** Segmentation offload (UD/RAW_PACKET): the data setter's bytes are cut into
 *  @p mss-byte segments, each sent as its own message prefixed with a copy of
 *  the @p hdr_sz-byte header at @p hdr (copied during the call; IPv4 length,
 *  id, TCP sequence and checksums are fixed up per segment). */
inline void wr_send_tso(qp *q, const void *hdr, std::uint16_t hdr_sz, std::uint16_t mss) noexcept
{
    q->send_tso_fn(q, hdr, hdr_sz, mss);
}
/** Write the data setter's bytes to @p remote_addr in the target region @p rkey. */
inline void wr_rdma_write(qp *q, std::uint32_t rkey, std::uint64_t remote_addr) noexcept
{
    q->rdma_write_fn(q, rkey, remote_addr);
}
/** RDMA write, then consume a receive at the target with opcode
 *  recv_rdma_with_imm carrying @p imm_data (network byte order). */
inline void wr_rdma_write_imm(qp *q, std::uint32_t rkey, std::uint64_t remote_addr,
                              std::uint32_t imm_data) noexcept
{
    q->rdma_write_imm_fn(q, rkey, remote_addr, imm_data);
}
/** Read from @p remote_addr into the data setter's SGEs (inline not allowed). */
inline void wr_rdma_read(qp *q, std::uint32_t rkey, std::uint64_t remote_addr) noexcept
{
    q->rdma_read_fn(q, rkey, remote_addr);
}
/** If the 8-byte aligned word at @p remote_addr equals @p compare, set it to
 *  @p swap. The original value is written to the data setter's 8-byte SGE. */
inline void wr_atomic_cmp_swp(qp *q, std::uint32_t rkey, std::uint64_t remote_addr,
                              std::uint64_t compare, std::uint64_t swap) noexcept
{
    q->atomic_cmp_swp_fn(q, rkey, remote_addr, compare, swap);
}
/** Add @p add to the 8-byte aligned word at @p remote_addr; the original value
 *  is written to the data setter's 8-byte SGE. */
inline void wr_atomic_fetch_add(qp *q, std::uint32_t rkey, std::uint64_t remote_addr,
                                std::uint64_t add) noexcept
{
    q->atomic_fetch_add_fn(q, rkey, remote_addr, add);
}
/** Bind type-2 window @p window with new key @p rkey as @p info says (no
 *  setters). On success window->rkey becomes @p rkey; @p rkey must keep the
 *  window's index bits (use inc_rkey(); other bits: -FI_EINVAL from
 *  wr_complete, as for the other argument errors doc/guides/vq.md lists);
 *  its key byte may be any value, 0 included (inc_rkey wraps to it). A bind
 *  the device refuses (range, the region's MW_BIND access, ...): mw_bind_err
 *  completion. */
inline void wr_bind_mw(qp *q, mw *window, std::uint32_t rkey, const mw_bind_info *info) noexcept
{
    q->bind_mw_fn(q, window, rkey, info);
}
/** Invalidate the local window (or MR) @p invalidate_rkey (no setters). A
 *  window that is free (never bound, or invalidated) named by its current
 *  key succeeds and stays free. A key the driver cannot invalidate fails
 *  the request and moves the QP to ERR (doc/guides/vq.md, "Invalidation"). */
inline void wr_local_inv(qp *q, std::uint32_t invalidate_rkey) noexcept
{
    q->local_inv_fn(q, invalidate_rkey);
}
/** Complete once every prior write to the region is visible (FLUSH_GLOBAL) or
 *  persistent (FLUSH_PERSISTENT); @p level FLUSH_RANGE checks
 *  [remote_addr, +len), FLUSH_MR the whole region. */
inline void wr_flush(qp *q, std::uint32_t rkey, std::uint64_t remote_addr, std::size_t len,
                     std::uint8_t type, std::uint8_t level) noexcept
{
    q->flush_fn(q, rkey, remote_addr, len, type, level);
}

/** Data of the last WR: one buffer in a registered region. */
inline void wr_set_sge(qp *q, std::uint32_t lkey, std::uint64_t addr, std::uint32_t length) noexcept
{
    q->set_sge_fn(q, lkey, addr, length);
}
/** Data of the last WR: @p num_sge buffers, logically concatenated (list is read during the call). */
inline void wr_set_sge_list(qp *q, std::size_t num_sge, const sge *sg_list) noexcept
{
    q->set_sge_list_fn(q, num_sge, sg_list);
}
/** Data of the last WR, copied now (send and rdma_write only); at most
 *  cap.max_inline_data bytes. No lkey needed; the buffer may be reused at once. */
inline void wr_set_inline_data(qp *q, const void *addr, std::size_t length) noexcept
{
    q->set_inline_data_fn(q, addr, length);
}
/** Inline data from @p num_buf buffers, logically concatenated. */
inline void wr_set_inline_data_list(qp *q, std::size_t num_buf, const data_buf *buf_list) noexcept
{
    q->set_inline_data_list_fn(q, num_buf, buf_list);
}
/** UD destination of the last WR (mandatory on UD). */
inline void wr_set_ud_addr(qp *q, ah *address, std::uint32_t remote_qpn,
                           std::uint32_t remote_qkey) noexcept
{
    q->set_ud_addr_fn(q, address, remote_qpn, remote_qkey);
}
/** XRC destination SRQ of the last WR (mandatory on XRC_SEND). */
inline void wr_set_xrc_srqn(qp *q, std::uint32_t remote_srqn) noexcept
{
    q->set_xrc_srqn_fn(q, remote_srqn);
}

/* ---- Single-call posts: one request, same implementation as the session ---- */

/** Post one send of @p length bytes at @p buf (RC/UC). Equivalent to
 *  wr_start; wr_id/wr_flags; wr_send; set_inline_data (flags has WR_INLINE,
 *  @p lkey ignored) or set_sge; wr_complete — including the lock.
 *  @p flags: WR_* flags. @return 0 or a wr_complete error; -FI_EINVAL on UD
 *  (no address: use the session API). */
[[nodiscard]] inline int post_send(qp *q, std::uint64_t wr_id, const void *buf,
                                   std::uint32_t length, std::uint32_t lkey, unsigned flags) noexcept
{
    return q->post_send_fn(q, wr_id, buf, length, lkey, flags);
}
/** Post one send_imm whose data is the concatenation of @p num_buf buffers,
 *  copied during the call (RC/UC): a header and a payload go to the peer in
 *  one call and one copy, without being gathered by the caller first.
 *  Equivalent to wr_start; wr_id/wr_flags; wr_send_imm(imm_data);
 *  wr_set_inline_data_list(num_buf, buf_list); wr_complete — including the
 *  lock and every error of those calls (-FI_EMSGSIZE over
 *  cap.max_inline_data, -FI_EAGAIN queue full, ...). @p flags: WR_SIGNALED,
 *  WR_SOLICITED, WR_FENCE (WR_INLINE is implied). -FI_EINVAL on UD.
 *  shm writes an unsignaled one straight into the peer's ring when the send
 *  queue is idle (up to max_inline_slot bytes in one line, larger ones in
 *  consecutive slots); a driver without its own form (mlx5 today) gets
 *  exactly that session sequence from lib/vq. */
[[nodiscard]] inline int post_send_imm_inline(qp *q, std::uint64_t wr_id, std::uint32_t imm_data,
                                              const data_buf *buf_list, std::size_t num_buf,
                                              unsigned flags) noexcept
{
    return q->post_send_imm_inline_fn(q, wr_id, imm_data, buf_list, num_buf, flags);
}
/** Post one send_imm whose data is the 8 bytes of @p hdr (as they lie in
 *  memory) followed by @p length bytes at @p buf, copied during the call
 *  (RC/UC): a one-word protocol header and a payload, as UCX's
 *  uct_ep_am_short takes them. Equivalent to post_send_imm_inline with the
 *  list {&hdr, 8}, {buf, length}, including every error (-FI_EMSGSIZE when
 *  8 + length exceeds cap.max_inline_data, -FI_EINVAL a null @p buf with
 *  length > 0 or a UD QP, ...). shm writes an unsignaled one on an idle
 *  queue straight into the peer's ring slot when it fits one
 *  (max_inline_slot), the word as one store; a driver without its own form
 *  gets post_send_imm_inline with that list from lib/vq. */
[[nodiscard]] inline int post_send_imm_hdr_inline(qp *q, std::uint64_t wr_id, std::uint32_t imm_data,
                                                  std::uint64_t hdr, const void *buf, std::uint32_t length,
                                                  unsigned flags) noexcept
{
    return q->post_send_imm_hdr_inline_fn(q, wr_id, imm_data, hdr, buf, length, flags);
}
/** Post one RDMA write (RC/UC); as post_send with rdma_write. */
[[nodiscard]] inline int post_write(qp *q, std::uint64_t wr_id, const void *buf,
                                    std::uint32_t length, std::uint32_t lkey, std::uint32_t rkey,
                                    std::uint64_t remote_addr, unsigned flags) noexcept
{
    return q->post_write_fn(q, wr_id, buf, length, lkey, rkey, remote_addr, flags);
}

/* ---- Receive ---- */

/** Post one receive of up to @p num_sge buffers (scattered in order) to the
 *  QP's receive queue. The list is read during the call. Allowed from INIT on;
 *  in ERR the receive completes at once with wr_flush_err.
 *  @return 0; -FI_EAGAIN queue full (cap.max_recv_wr); -FI_E2BIG more than
 *  cap.max_recv_sge; -FI_EINVAL null list with num_sge > 0, or the QP uses an
 *  SRQ or lent receives; -FI_EOPBADSTATE in RESET. lkeys are checked when a message lands: a
 *  bad one yields a loc_prot_err completion. */
[[nodiscard]] inline int post_recv(qp *q, std::uint64_t wr_id, const sge *sg_list,
                                   std::uint32_t num_sge) noexcept
{
    return q->post_recv_fn(q, wr_id, sg_list, num_sge);
}
/** One-buffer post_recv. */
[[nodiscard]] inline int post_recv(qp *q, std::uint64_t wr_id, std::uint64_t addr,
                                   std::uint32_t length, std::uint32_t lkey) noexcept
{
    const sge s{addr, length, lkey};
    return q->post_recv_fn(q, wr_id, &s, 1);
}

/** Read the messages ready on one lent-receive QP (qp_init_attr::lend_recv)
 *  in place, without its CQ: up to @p num_entries of them, oldest first,
 *  into @p out. Each is the successful receive completion poll_cq would
 *  give for it (opcode recv, wr_id 0, this QP's qp_num, the peer's src_qp),
 *  consumed here instead: poll_cq does not report it again. The call
 *  carries only whole sends and send_imms that lie in place in the
 *  driver's buffer; it stops before anything else — an error or a flush,
 *  a send_inv, an RDMA write with immediate, a message the driver would
 *  lend from a bounce copy, completions the receive CQ already holds — and
 *  leaves it, and what follows it, to poll_cq, which goes on from the same
 *  point in the same order. So 0 means "poll the CQ", not "nothing came".
 *  Loans: the bytes are lent at least until the next poll_lent of this QP
 *  or the next poll_cq / start_poll of its receive CQ; a poll_lent ends the
 *  loans of this QP's earlier messages, whichever call lent them. Takes the
 *  receive CQ's lock unless it is single-threaded (then call it from the
 *  thread that polls that CQ). The mlx5 counterpart is reading the next
 *  CQE of a CQ that serves one striding or scatter-to-CQE receive queue
 *  (doc/guides/vq.md, "Lent receives").
 *  @return the number written, 0..num_entries (num_entries 0: 0 where the
 *  QP offers the call, which makes it a probe at setup); -FI_EINVAL
 *  num_entries < 0, or out null with num_entries > 0; -FI_EOPNOTSUPP the
 *  QP has no lent receives, or its driver or type does not offer the call
 *  (shm offers it on RC and UC). */
[[nodiscard]] inline int poll_lent(qp *q, int num_entries, lent_msg *out) noexcept
{
    return q->poll_lent_fn(q, num_entries, out);
}

static_assert(offsetof(qp, wr_id) == 0);
static_assert(offsetof(qp, set_inline_data_fn) == 56, "hot posting pointers must fill line 0");
static_assert(offsetof(qp, wr_abort_fn) == 64);
static_assert(offsetof(qp, bind_mw_fn) == 128);
static_assert(offsetof(qp, post_write_fn) == 192);
static_assert(offsetof(qp, post_send_imm_inline_fn) == 208, "single-call posts share line 3");
static_assert(offsetof(qp, poll_lent_fn) == 216, "the lent-receive poll shares line 3");
static_assert(offsetof(qp, post_send_imm_hdr_inline_fn) == 224, "single-call posts share line 3");

} // namespace shunt::vq
