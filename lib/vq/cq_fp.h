/* Fast-path completion API: the completion queue as the driver hands it out,
 * with the batch poll and the start/next/end poll form (ibv_cq_ex).
 *
 * Batch form:
 *     vq::wc wcs[16];
 *     int n = vq::poll_cq(cq, 16, wcs);      // 0..16, or a negative error
 *
 * Iterator form (fields read lazily, only those needed):
 *     if (vq::start_poll(cq) == 0) {
 *         do { use(cq->wr_id, cq->status, vq::read_byte_len(cq)); }
 *         while (vq::next_poll(cq) == 0);
 *         vq::end_poll(cq);
 *     }
 *
 * Polling is also what makes a software driver progress: shm consumes the
 * messages that arrived for the QPs whose receive CQ this is, retries sends
 * waiting for ring space for QPs whose send CQ this is, and notices dead peers.
 * Unless the CQ was created single-threaded, polls take a per-CQ lock. */
#pragma once

#include <cstdint>

#include "vq/types.h"

namespace shunt::vq {

/** A completion queue, as ibv_cq_ex: the public block every driver fills. */
struct alignas(64) cq {
    /* Cache line 0: poll, and the fields of the current completion. */
    std::uint64_t wr_id = 0;               ///< current completion (start/next_poll form)
    wc_status status = wc_status::success; ///< current completion
    std::uint32_t reserved0 = 0;
    int (*poll_fn)(cq *, int num_entries, wc *out) = nullptr;
    int (*start_poll_fn)(cq *) = nullptr;
    int (*next_poll_fn)(cq *) = nullptr;
    void (*end_poll_fn)(cq *) = nullptr;
    wc_opcode (*read_opcode_fn)(cq *) = nullptr;
    std::uint32_t (*read_byte_len_fn)(cq *) = nullptr;

    /* Cache line 1: the other field readers. */
    std::uint32_t (*read_imm_data_fn)(cq *) = nullptr;
    std::uint32_t (*read_invalidated_rkey_fn)(cq *) = nullptr;
    std::uint32_t (*read_qp_num_fn)(cq *) = nullptr;
    std::uint32_t (*read_src_qp_fn)(cq *) = nullptr;
    unsigned (*read_wc_flags_fn)(cq *) = nullptr;
    std::uint32_t (*read_vendor_err_fn)(cq *) = nullptr;
    const std::uint8_t *(*read_data_fn)(cq *) = nullptr;

    /* Cold. */
    context *ctx = nullptr;
    int cqe = 0;                 ///< capacity
    bool single_threaded = false;
};

/** Poll up to @p num_entries completions into @p out (oldest first).
 *  @return the number written (0: none ready); -FI_EINVAL num_entries < 0 or
 *  out null with num_entries > 0. */
[[nodiscard]] inline int poll_cq(cq *c, int num_entries, wc *out) noexcept
{
    return c->poll_fn(c, num_entries, out);
}
/** Begin an iteration: make the oldest completion current (cq->wr_id,
 *  cq->status, read_*()). @return 0; -FI_EAGAIN none ready (then do NOT call
 *  end_poll). While an iteration is open the CQ lock is held. */
[[nodiscard]] inline int start_poll(cq *c) noexcept { return c->start_poll_fn(c); }
/** Consume the current completion and make the next one current.
 *  @return 0; -FI_EAGAIN none left (call end_poll). */
[[nodiscard]] inline int next_poll(cq *c) noexcept { return c->next_poll_fn(c); }
/** Consume the current completion and close the iteration. */
inline void end_poll(cq *c) noexcept { c->end_poll_fn(c); }

inline wc_opcode read_opcode(cq *c) noexcept { return c->read_opcode_fn(c); }
inline std::uint32_t read_byte_len(cq *c) noexcept { return c->read_byte_len_fn(c); }
inline std::uint32_t read_imm_data(cq *c) noexcept { return c->read_imm_data_fn(c); }
inline std::uint32_t read_invalidated_rkey(cq *c) noexcept { return c->read_invalidated_rkey_fn(c); }
inline std::uint32_t read_qp_num(cq *c) noexcept { return c->read_qp_num_fn(c); }
inline std::uint32_t read_src_qp(cq *c) noexcept { return c->read_src_qp_fn(c); }
inline unsigned read_wc_flags(cq *c) noexcept { return c->read_wc_flags_fn(c); }
inline std::uint32_t read_vendor_err(cq *c) noexcept { return c->read_vendor_err_fn(c); }
/** Lent receives: the current completion's bytes (wc::data), valid until
 *  next_poll / end_poll; null otherwise. */
inline const std::uint8_t *read_data(cq *c) noexcept { return c->read_data_fn(c); }

} // namespace shunt::vq
