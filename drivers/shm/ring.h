/* drivers/shm: writing messages into a receive ring (shared by the session
 * path and the single-call fast path). */
#pragma once

#include <atomic>

#include "shm.h"

namespace shunt::drv::shm {

/** Reads a WR's data (inline bytes, SGEs, or a caller's buffer list)
 *  sequentially. */
struct src_cursor {
    const std::uint8_t *flat = nullptr; ///< inline / staged data, or null for SGEs
    const vq::sge *sg = nullptr;
    const vq::data_buf *bufs = nullptr; ///< a post_send_imm_inline list, read during the call
    std::uint32_t idx = 0, off = 0;

    void copy_bufs(std::uint8_t *d, std::uint32_t n) noexcept;
    void skip(std::uint32_t n) noexcept
    {
        if (flat) {
            flat += n;
            return;
        }
        while (n) {
            std::uint32_t left = sg[idx].length - off;
            std::uint32_t k = n < left ? n : left;
            off += k;
            n -= k;
            if (off == sg[idx].length) {
                idx++;
                off = 0;
            }
        }
    }
    void copy(void *dst, std::uint32_t n) noexcept
    {
        auto *d = static_cast<std::uint8_t *>(dst);
        if (flat) {
            if (n <= 64)
                small_copy(d, flat, n);
            else
                std::memcpy(d, flat, n);
            flat += n;
            return;
        }
        if (bufs) {
            copy_bufs(d, n);
            return;
        }
        while (n) {
            std::uint32_t left = sg[idx].length - off;
            std::uint32_t k = n < left ? n : left;
            std::memcpy(d, reinterpret_cast<const std::uint8_t *>(sg[idx].addr) + off, k);
            d += k;
            off += k;
            n -= k;
            if (off == sg[idx].length) {
                idx++;
                off = 0;
            }
        }
    }
};

inline void src_cursor::copy_bufs(std::uint8_t *d, std::uint32_t n) noexcept
{
    while (n) {
        std::size_t left = bufs[idx].length - off;
        std::uint32_t k = n < left ? n : static_cast<std::uint32_t>(left);
        const auto *from = static_cast<const std::uint8_t *>(bufs[idx].addr) + off;
        if (k <= 64)
            small_copy(d, from, k);
        else
            std::memcpy(d, from, k);
        d += k;
        off += k;
        n -= k;
        if (off == bufs[idx].length) {
            idx++;
            off = 0;
        }
    }
}

/** A transmit ring: the fields of shm_qp or ud_dest. */
struct txring {
    slot *slots;
    ring_ctrl *ctrl;
    std::uint32_t mask;
    std::uint32_t *tail;
    std::uint32_t *credit_head;
};

inline bool ring_reserve(const txring &r, std::uint32_t n) noexcept
{
    if (r.mask + 1 - (*r.tail - *r.credit_head) >= n)
        return true;
    // Observe the receiver's consumed index (its own line), only when out of credits.
    *r.credit_head = r.ctrl->consumed.load(std::memory_order_acquire);
    return r.mask + 1 - (*r.tail - *r.credit_head) >= n;
}

/** Write the header of the chunk at @p pos (first slot @p s, @p n slots) and
 *  publish it: every store before (header, payload, continuation slots) is
 *  ordered before the sequence word the receiver polls. */
inline void ring_publish(const txring &r, slot *s, std::uint32_t pos, std::uint32_t n, std::uint8_t op,
                         std::uint8_t flags, std::uint32_t imm, std::uint32_t hdr_len) noexcept
{
    s->op = op;
    s->flags = flags;
    s->nslots = static_cast<std::uint16_t>(n);
    s->len = hdr_len;
    s->imm = imm;
    std::atomic_ref<std::uint32_t>(s->seq).store(pos + 1, std::memory_order_release);
    *r.tail = pos + n;
}

/** One slot: the @p n pieces of @p list (@p len bytes in all, at most
 *  slot_payload) gathered straight into its payload, then published. */
inline void ring_put_one(const txring &r, std::uint8_t op, std::uint8_t flags, std::uint32_t imm,
                         const vq::data_buf *list, std::size_t n, std::uint32_t len) noexcept
{
    std::uint32_t pos = *r.tail;
    slot *s = &r.slots[pos & r.mask];
    std::uint8_t *d = s->data;
    for (std::size_t i = 0; i < n; i++) {
        auto k = static_cast<std::uint32_t>(list[i].length); // the pieces add up to len <= slot_payload
        small_copy(d, list[i].addr, k);
        d += k;
    }
    ring_publish(r, s, pos, 1, op, flags, imm, len);
}

/** ring_put_one of an 8-byte word and @p len bytes at @p buf (8 + len <=
 *  slot_payload): the word as one store, the payload after it. */
inline void ring_put_word(const txring &r, std::uint8_t op, std::uint8_t flags, std::uint32_t imm,
                          std::uint64_t word, const void *buf, std::uint32_t len) noexcept
{
    std::uint32_t pos = *r.tail;
    slot *s = &r.slots[pos & r.mask];
    std::memcpy(s->data, &word, sizeof word);
    small_copy(s->data + sizeof word, buf, len);
    ring_publish(r, s, pos, 1, op, flags, imm, len + std::uint32_t(sizeof word));
}

/** Write one chunk of @p len bytes from @p src as a message and publish it. */
inline void ring_put(const txring &r, std::uint8_t op, std::uint8_t flags, std::uint32_t imm,
                     src_cursor &src, std::uint32_t len, std::uint32_t hdr_len) noexcept
{
    std::uint32_t pos = *r.tail;
    std::uint32_t n = slots_for(len);
    slot *s = &r.slots[pos & r.mask];
    std::uint32_t first = len < slot_payload ? len : slot_payload;
    if (first)
        src.copy(s->data, first);
    std::uint32_t rest = len - first;
    std::uint32_t i = (pos + 1) & r.mask;
    while (rest) {
        // Contiguous run of continuation slots up to the end of the ring.
        std::uint32_t run_slots = r.mask + 1 - i;
        std::uint32_t run = run_slots * 64 < rest ? run_slots * 64 : rest;
        src.copy(&r.slots[i], run);
        rest -= run;
        i = (i + (run + 63) / 64) & r.mask;
    }
    ring_publish(r, s, pos, n, op, flags, imm, hdr_len);
}

} // namespace shunt::drv::shm
