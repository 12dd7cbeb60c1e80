/* For provider writers: the wait object behind CQs, counters and EQs
 * (FI_WAIT_UNSPEC and FI_WAIT_FD: an eventfd).
 *
 * The polling path never makes a system call and never fences: a writer
 * calls signal() after publishing, which writes the eventfd only when a
 * waiter has armed it (and objects without a wait object do not call it at
 * all: counters and CQs choose at open / bind). A waiter arms, re-checks its
 * condition, then waits. */
#pragma once

#include <atomic>

#include "fabric/flags.h"

namespace shunt::fabric::util {

class waiter {
public:
    waiter() = default;
    ~waiter();
    waiter(const waiter &) = delete;
    waiter &operator=(const waiter &) = delete;

    /** Set up for @p w. @return 0; -FI_ENOSYS FI_WAIT_SET (see attach()),
     *  FI_WAIT_MUTEX_COND, FI_WAIT_POLLFD; -FI_EINVAL unknown value; -errno
     *  eventfd failed. */
    [[nodiscard]] int open(wait_obj w);
    /** Set up as a member of wait set @p set (FI_WAIT_SET): signal() wakes
     *  the set's wait object, which stays the set's (not closed here). The
     *  member takes the set's ordering mode too (heavy(): membarrier in
     *  arm(), no fence in signal()), so a member's writers do not fence.
     *  Setup only, before the object is used. */
    void attach(const waiter &set) noexcept
    {
        fd_ = set.fd_;
        owns_fd_ = false;
        kind_ = FI_WAIT_SET;
        heavy_ = set.heavy_;
    }
    /** Has a wait object (not FI_WAIT_NONE / FI_WAIT_YIELD). */
    bool enabled() const noexcept { return fd_ >= 0; }
    wait_obj kind() const noexcept { return kind_; }
    /** The eventfd (FI_GETWAIT), -1 if none. */
    int fd() const noexcept { return fd_; }
    /** arm() runs membarrier and signal() needs no fence (see signal());
     *  false: both sides fence. */
    bool heavy() const noexcept { return heavy_; }
    /** Wake waiters if any are armed (publishing side). Free when no wait
     *  object is open; with one, a compiler barrier and one load.
     *
     *  Ordering (the producer's publish against the waiter's arm): the
     *  waiter does the heavy half of the pair. arm() stores armed_ and then
     *  runs membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes every
     *  running thread of the process execute a full barrier before it
     *  returns. For a producer that published (store) and then reads armed_
     *  here: if its read comes after that barrier it sees the arm and kicks;
     *  if before, its earlier publish was drained by that barrier, so the
     *  waiter's re-check after arm() sees the entry. Either way no wake-up
     *  is lost, and the producer never fences. Where membarrier is not
     *  available (old kernel, seccomp) both sides fence instead (heavy_ is
     *  false). Waiters are threads of this process: the wait objects are
     *  eventfds of this process, never shared. */
    void signal() noexcept
    {
        if (fd_ < 0)
            return; // no wait object: nobody can be waiting
        if (heavy_) [[likely]]
            std::atomic_signal_fence(std::memory_order_seq_cst); // order the publish before the load (compiler)
        else
            std::atomic_thread_fence(std::memory_order_seq_cst);
        if (armed_.load(std::memory_order_relaxed)) [[unlikely]]
            kick();
    }
    /** Unconditional wake-up (fi_cq_signal). */
    void kick() noexcept;
    /** Announce a wait; re-check the condition after this (the heavy half
     *  of the ordering pair described at signal()). */
    void arm() noexcept;
    void disarm() noexcept { armed_.fetch_sub(1, std::memory_order_relaxed); }
    /** Block until kicked or @p timeout_ms pass (-1: no limit); consumes the
     *  wake-up. @return 0 woken; -FI_ETIMEDOUT. */
    int wait(int timeout_ms) noexcept;
    /** Consume pending wake-ups without blocking (a system call only when
     *  a wake-up was sent since the last drain). */
    void drain() noexcept;

private:
    int fd_ = -1;
    wait_obj kind_ = FI_WAIT_NONE;
    bool heavy_ = false;          ///< arm() uses membarrier: signal() needs no fence
    std::atomic<int> armed_{0};
    bool owns_fd_ = true; ///< false: a wait set's (attach())
    std::atomic<bool> kicked_{false}; ///< the eventfd may hold a wake-up
};

/** Milliseconds left until @p deadline_ns (monotonic), -1 for none, 0 when past. */
int ms_left(long long deadline_ns) noexcept;
/** Monotonic deadline @p timeout_ms from now; -1 (no limit) for negative timeouts. */
long long deadline_after(int timeout_ms) noexcept;

} // namespace shunt::fabric::util
