/* Statistics on the fast path: counters, gauges and log-bucketed histograms
 * written by one thread with relaxed loads and stores, or on x86-64 one
 * unlocked add to memory (no lock, no fence, no atomic read-modify-write),
 * read racily by any other thread; and the one-line hooks queues and
 * endpoints call (io_stats, on_tx() ...).
 *
 * The single-writer rule: each counter, gauge and histogram has one writer
 * at a time -- the thread that owns the object it belongs to, or whoever
 * holds that object's lock. A reader on another thread sees every value at
 * most a few updates behind, never torn (each word is a std::atomic read
 * and written whole); a histogram read while it is written may be off by
 * the records in flight. shared_counter is the exception, for setup and
 * error paths written by several threads: one atomic add per update.
 *
 * The registry that names these blocks and lets readers enumerate them (in
 * this process, or through DPDK's telemetry socket from another one) is in
 * env/stats.h; doc/guides/telemetry.md describes both. */
#pragma once

#include "env/compiler.h"
#include "env/tsc.h"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace shunt::env::stats {

namespace detail {
/** @p v += @p n by its only writer. On x86-64 one `add` to memory without a
 *  lock prefix: its store is one aligned 8-byte write, so a racy reader sees
 *  the old or the new value, never a torn one, as after a relaxed load, add
 *  and store -- which compilers do not fuse into that one instruction.
 *  Elsewhere, and under ThreadSanitizer (which must see the accesses), the
 *  relaxed load, add and store. */
SHUNT_ALWAYS_INLINE void single_writer_add(std::atomic<std::uint64_t> &v, std::uint64_t n) noexcept
{
#if defined(__x86_64__) && !SHUNT_TSAN
    static_assert(sizeof v == 8 && alignof(std::atomic<std::uint64_t>) == 8);
    asm("addq %1, %0" : "+m"(v) : "er"(n));
#else
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
#endif
}
} // namespace detail

/** A count that only grows, with one writer. On x86-64 add() is one
 *  unlocked add to memory (detail::single_writer_add). */
class counter {
public:
    void add(std::uint64_t n = 1) noexcept { detail::single_writer_add(v_, n); }
    std::uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }
    /** Back to zero (by the writer). */
    void reset() noexcept { v_.store(0, std::memory_order_relaxed); }

private:
    std::atomic<std::uint64_t> v_{0};
};

/** A value that goes up and down (a queue depth), with one writer. */
class gauge {
public:
    void set(std::uint64_t v) noexcept { v_.store(v, std::memory_order_relaxed); }
    /** set(v) when v is above the current value (a high-water mark). */
    void raise(std::uint64_t v) noexcept
    {
        if (v > v_.load(std::memory_order_relaxed))
            v_.store(v, std::memory_order_relaxed);
    }
    std::uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }

private:
    std::atomic<std::uint64_t> v_{0};
};

/** A count written by several threads: one relaxed atomic add (a locked
 *  instruction) per update, so for setup and error paths only. sub() makes
 *  it a gauge of open objects. */
class shared_counter {
public:
    void add(std::uint64_t n = 1) noexcept { v_.fetch_add(n, std::memory_order_relaxed); }
    void sub(std::uint64_t n = 1) noexcept { v_.fetch_sub(n, std::memory_order_relaxed); }
    std::uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }

private:
    std::atomic<std::uint64_t> v_{0};
};

static_assert(sizeof(counter) == 8 && sizeof(gauge) == 8 && sizeof(shared_counter) == 8,
              "readers see every scalar as one 64-bit word (stats.h reads them by offset)");

/** A histogram of 64-bit values (TSC cycles, ns, bytes, counts) in
 *  logarithmic buckets: exact below 16, then 8 buckets per power of two
 *  (each at most 12.5 % wide), up to 2^41 (about 12 minutes of cycles at
 *  3 GHz); larger values go to the last bucket (max() stays exact). One
 *  writer; record() is about fifteen instructions on x86-64 (a bit scan,
 *  shifts, one cmov, two adds to memory, the maximum's load and compare), no
 *  branch but the maximum's. */
class histogram {
public:
    static constexpr unsigned sub_bits = 3;                 ///< 2^3 buckets per power of two
    static constexpr unsigned top_exponent = 40;           ///< last exact power of two: 2^40 .. 2^41-1
    static constexpr unsigned buckets = (top_exponent - sub_bits + 1) * (1u << sub_bits) + (1u << sub_bits);

    /** Bucket of @p v: v itself below 16, then (e - 3) * 8 + (v >> (e - 3))
     *  with e = floor(log2 v); clamped to the last bucket. */
    static unsigned bucket_of(std::uint64_t v) noexcept
    {
        // s = max(e, 3) - 3: the bit v | 8 always has makes floor(log2) at least 3.
        static_assert(sub_bits == 3);
        const unsigned s = 60u - static_cast<unsigned>(__builtin_clzll(v | 8));
        const std::uint64_t i = (static_cast<std::uint64_t>(s) << sub_bits) + (v >> s);
        return i < buckets ? static_cast<unsigned>(i) : buckets - 1;
    }
    /** Smallest value that falls in bucket @p i. */
    static constexpr std::uint64_t bucket_low(unsigned i) noexcept
    {
        if (i < (2u << sub_bits))
            return i;
        const unsigned s = (i >> sub_bits) - 1;
        return static_cast<std::uint64_t>((i & ((1u << sub_bits) - 1)) + (1u << sub_bits)) << s;
    }
    /** Largest value that falls in bucket @p i (the last one: UINT64_MAX). */
    static constexpr std::uint64_t bucket_high(unsigned i) noexcept
    {
        return i + 1 < buckets ? bucket_low(i + 1) - 1 : ~std::uint64_t{0};
    }

    /** Count one value. */
    void record(std::uint64_t v) noexcept
    {
        detail::single_writer_add(count_[bucket_of(v)], 1);
        detail::single_writer_add(sum_, v);
        if (v > max_.load(std::memory_order_relaxed)) [[unlikely]]
            max_.store(v, std::memory_order_relaxed);
    }
    /** Back to empty (by the writer). */
    void reset() noexcept
    {
        for (auto &c : count_)
            c.store(0, std::memory_order_relaxed);
        sum_.store(0, std::memory_order_relaxed);
        max_.store(0, std::memory_order_relaxed);
    }

    std::uint64_t sum() const noexcept { return sum_.load(std::memory_order_relaxed); }
    std::uint64_t max() const noexcept { return max_.load(std::memory_order_relaxed); }
    std::uint64_t count(unsigned bucket) const noexcept
    {
        return bucket < buckets ? count_[bucket].load(std::memory_order_relaxed) : 0;
    }

private:
    std::atomic<std::uint64_t> sum_{0};
    std::atomic<std::uint64_t> max_{0};
    std::atomic<std::uint64_t> count_[buckets] = {};
};

static_assert(histogram::buckets == 312);
static_assert(histogram::bucket_low(15) == 15 && histogram::bucket_low(16) == 16 && histogram::bucket_low(17) == 18);
static_assert(histogram::bucket_high(16) == 17 && histogram::bucket_low(24) == 32);

/** What every queue and endpoint counts, through the hooks below. Written
 *  by the queue's or endpoint's owner (single-writer rule); the first cache
 *  line holds what a message touches. Register one with io_block (stats.h),
 *  which gives nullptr when telemetry is off: every hook accepts nullptr
 *  and then does nothing (one predictable branch). */
struct alignas(SHUNT_CACHE_LINE) io_stats {
    counter tx_msgs;     ///< messages (or work requests) posted
    counter tx_bytes;    ///< their payload bytes
    counter rx_msgs;     ///< messages received (completions delivered to the user)
    counter rx_bytes;    ///< their payload bytes
    /** error completions and failed posts other than -FI_EAGAIN: a
     *  shared_counter (one atomic add, on error paths only) because a queue's
     *  send side and receive side may run on two threads and both count. */
    shared_counter errors;
    counter drops;       ///< messages lost or discarded (no receive posted, truncated away, bad frame)
    counter retransmits; ///< frames or messages sent again by a reliable transport
    gauge depth;         ///< operations outstanding at the last on_depth()
    gauge depth_max;     ///< the highest on_depth() seen
    histogram completion;///< send-to-completion latency, TSC cycles (on_complete)
};
static_assert(offsetof(io_stats, depth) < SHUNT_CACHE_LINE, "the per-message counters share one line");

/** @p bytes sent in one message (call once per posted send or write). */
SHUNT_ALWAYS_INLINE void on_tx(io_stats *s, std::size_t bytes) noexcept
{
    if (s) {
        s->tx_msgs.add();
        s->tx_bytes.add(bytes);
    }
}
/** @p msgs messages of @p bytes in all sent (a batch of work requests). */
SHUNT_ALWAYS_INLINE void on_tx(io_stats *s, std::uint64_t msgs, std::uint64_t bytes) noexcept
{
    if (s) {
        s->tx_msgs.add(msgs);
        s->tx_bytes.add(bytes);
    }
}
/** One message of @p bytes received. */
SHUNT_ALWAYS_INLINE void on_rx(io_stats *s, std::size_t bytes) noexcept
{
    if (s) {
        s->rx_msgs.add();
        s->rx_bytes.add(bytes);
    }
}
/** An error completion or a failed post (not -FI_EAGAIN). */
SHUNT_ALWAYS_INLINE void on_error(io_stats *s) noexcept
{
    if (s)
        s->errors.add();
}
/** A message dropped. */
SHUNT_ALWAYS_INLINE void on_drop(io_stats *s, std::uint64_t n = 1) noexcept
{
    if (s)
        s->drops.add(n);
}
/** A frame or message retransmitted. */
SHUNT_ALWAYS_INLINE void on_retransmit(io_stats *s, std::uint64_t n = 1) noexcept
{
    if (s)
        s->retransmits.add(n);
}
/** The queue now holds @p outstanding operations. */
SHUNT_ALWAYS_INLINE void on_depth(io_stats *s, std::uint64_t outstanding) noexcept
{
    if (s) {
        s->depth.set(outstanding);
        s->depth_max.raise(outstanding);
    }
}
/** Timestamp to keep with a posted operation for on_complete(): the TSC
 *  when telemetry is on, 0 (no TSC read) when it is off. */
SHUNT_ALWAYS_INLINE std::uint64_t stamp(const io_stats *s) noexcept
{
    return s ? tsc::now() : 0;
}
/** The operation posted at @p posted (from stamp()) completed now: records
 *  the send-to-completion latency. A zero stamp (telemetry was off when it
 *  was posted) is ignored. */
SHUNT_ALWAYS_INLINE void on_complete(io_stats *s, std::uint64_t posted) noexcept
{
    if (s && posted)
        s->completion.record(tsc::now() - posted);
}

} // namespace shunt::env::stats
