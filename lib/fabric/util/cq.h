/* For provider writers: the generic completion queue.
 *
 * Successful completions go into a ring written by the provider's
 * progress (cq_write, inline, no allocation, no system call) and read by
 * cq_read in the CQ's format — or, when cq_read itself drives the progress
 * that produces them (manual progress, one thread), straight into the
 * reader's array (direct output); errors go to a separate queue (cq_write_err,
 * slow path), each marked with the number of successful completions written
 * before it, so that a read returns those first and -FI_EAVAIL only when the
 * error is next: completions are read in the order they were written. The
 * ring is single-producer/single-consumer without locks;
 * when the domain is multi-threaded (FI_THREAD_SAFE or auto progress) the
 * producer and consumer sides each take a spinlock, chosen at open. If the
 * ring is full, entries spill into an overflow list (allocates; ordering is
 * kept) rather than being lost. */
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "fabric/api.h"
#include "fabric/util/domain.h"
#include "fabric/util/lock.h"
#include "fabric/util/wait.h"

namespace shunt::fabric::util {

/** One completion as stored (the union of every format, plus source). */
struct cq_slot {
    void *op_context;
    std::uint64_t flags;
    std::size_t len;
    void *buf;
    std::uint64_t data;
    std::uint64_t tag;
    fi_addr_t src;
};

/** Manual progress hook: called by cq_read/sread/cntr_read of the objects
 *  an endpoint is bound to. */
struct progress_hook {
    void (*fn)(void *arg) = nullptr;
    void *arg = nullptr;
};

/** Writes one completion in a CQ format into element @p i of @p buf. */
using cq_put_fn = void (*)(void *buf, std::size_t i, const cq_slot &s) noexcept;

struct cq_obj {
    fid_cq cq;                          ///< first: the public object
    domain_obj *domain = nullptr;
    cq_format format = FI_CQ_FORMAT_CONTEXT;
    cq_wait_cond wait_cond = FI_CQ_COND_NONE;
    cq_put_fn put = nullptr;            ///< the format's writer (chosen at open)
    /* Direct output: while cq_read drives manual progress on an empty ring
     * (one thread at a time: FI_THREAD_DOMAIN / FI_THREAD_COMPLETION), new
     * completions are written straight into the reader's array, in the CQ's
     * format, and never stored in the ring (the shm driver's poll_cq does
     * the same with its callers' arrays). */
    void *direct = nullptr;
    fi_addr_t *direct_src = nullptr;
    std::size_t direct_cap = 0, direct_n = 0;
    bool direct_ok = false;             ///< set at open from threading and progress
    // ---- ring: producer line, consumer line ----
    cq_slot *ring = nullptr;
    std::size_t mask = 0;
    alignas(64) std::atomic<std::size_t> head{0}; ///< next slot to write (producer)
    std::size_t cached_tail = 0;                  ///< producer's copy of tail
    bool wait_bound = false;                      ///< has a wait object: writes signal it (set at open)
    maybe_lock wlock;
    alignas(64) std::atomic<std::size_t> tail{0}; ///< next slot to read (consumer)
    maybe_lock rlock;
    // ---- cold ----
    alignas(64) std::atomic<bool> spilled{false};
    std::mutex cold_mu;
    std::deque<cq_slot> overflow;
    std::size_t spill_in = 0, spill_out = 0;      ///< entries ever put into / taken from overflow
    struct err {
        cq_err_entry e;
        std::vector<std::uint8_t> data;
        std::size_t at = 0; ///< successful completions written before it (head + spill_in then)
    };
    std::deque<err> errs;
    std::vector<std::uint8_t> err_data_keep;      ///< data of the last readerr
    std::atomic<std::size_t> nerr{0};
    std::atomic<bool> signalled{false};
    waiter wait;
    std::vector<progress_hook> progress;          ///< bound endpoints (manual progress)
    std::mutex progress_mu;
    std::atomic<int> refs{0};                     ///< endpoints and poll sets bound
    fid_wait *wait_set = nullptr;                 ///< the wait set it was opened on (util/poll.h)
};

inline cq_obj *to_cq(fid_cq *c) { return reinterpret_cast<cq_obj *>(c); }

/** Generic cq_open for ops_domain::cq_open. */
int cq_open(fid_domain *domain, cq_attr *attr, fid_cq **cq, void *context);

[[gnu::cold]] void cq_spill(cq_obj *cq, const cq_slot &s);

/** Write a successful completion. Fast path. */
inline void cq_write(cq_obj *cq, void *ctx, std::uint64_t flags, std::size_t len, void *buf, std::uint64_t data,
                     std::uint64_t tag, fi_addr_t src) noexcept
{
    if (cq->direct_n < cq->direct_cap) [[likely]] {
        // Inside this CQ's own cq_read (same thread): the reader returns it,
        // written here in the CQ's format (what cq->put does for the ring).
        const std::size_t i = cq->direct_n++;
        switch (cq->format) {
        case FI_CQ_FORMAT_MSG: static_cast<cq_msg_entry *>(cq->direct)[i] = cq_msg_entry{ctx, flags, len}; break;
        case FI_CQ_FORMAT_DATA:
            static_cast<cq_data_entry *>(cq->direct)[i] = cq_data_entry{ctx, flags, len, buf, data};
            break;
        case FI_CQ_FORMAT_TAGGED:
            static_cast<cq_tagged_entry *>(cq->direct)[i] = cq_tagged_entry{ctx, flags, len, buf, data, tag};
            break;
        default: static_cast<cq_entry *>(cq->direct)[i] = cq_entry{ctx}; break;
        }
        if (cq->direct_src)
            cq->direct_src[i] = src;
        return;
    }
    cq->wlock.lock();
    std::size_t h = cq->head.load(std::memory_order_relaxed);
    if (cq->spilled.load(std::memory_order_relaxed) || h - cq->cached_tail > cq->mask) [[unlikely]] {
        cq->cached_tail = cq->tail.load(std::memory_order_acquire);
        if (cq->spilled.load(std::memory_order_relaxed) || h - cq->cached_tail > cq->mask) {
            cq_spill(cq, cq_slot{ctx, flags, len, buf, data, tag, src});
            cq->wlock.unlock();
            if (cq->wait_bound)
                cq->wait.signal();
            return;
        }
    }
    cq->ring[h & cq->mask] = cq_slot{ctx, flags, len, buf, data, tag, src};
    // Publish the slot: the consumer's acquire load of head sees its contents.
    cq->head.store(h + 1, std::memory_order_release);
    cq->wlock.unlock();
    if (cq->wait_bound) [[unlikely]]
        cq->wait.signal(); // the ordering argument is at waiter::signal()
}

/** Write an error completion (slow path; never lost).
 *  @param err positive error code; @param err_data copied. */
void cq_write_err(cq_obj *cq, const cq_err_entry &e, const void *err_data = nullptr, std::size_t err_data_size = 0);

/** Register / remove a progress hook (setup). */
void cq_add_progress(cq_obj *cq, progress_hook h);
void cq_remove_progress(cq_obj *cq, void *arg);
/** Run the progress hooks (what reading does under manual progress). */
void cq_progress(cq_obj *cq);
/** Entries waiting (successful + errors), for trywait. */
std::size_t cq_pending(cq_obj *cq);

} // namespace shunt::fabric::util
