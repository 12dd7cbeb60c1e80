/* For provider writers: the wait object behind CQs, counters and EQs
 * (FI_WAIT_UNSPEC and FI_WAIT_FD: an eventfd).
 *
 * The polling path never makes a system call: a writer calls signal() after
 * publishing, which writes the eventfd only when a waiter has armed it. A
 * waiter arms, re-checks its condition, then waits. */
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
     *  the set's wait object, which stays the set's (not closed here).
     *  Setup only, before the object is used. */
    void attach(const waiter &set) noexcept
    {
        fd_ = set.fd_;
        owns_fd_ = false;
        kind_ = FI_WAIT_SET;
    }
    /** Has a wait object (not FI_WAIT_NONE / FI_WAIT_YIELD). */
    bool enabled() const noexcept { return fd_ >= 0; }
    wait_obj kind() const noexcept { return kind_; }
    /** The eventfd (FI_GETWAIT), -1 if none. */
    int fd() const noexcept { return fd_; }
    /** Wake waiters if any are armed (publishing side; cheap when none). */
    void signal() noexcept
    {
        // Orders the caller's publish before reading armed_: pairs with the
        // fence in arm(), so either the waiter sees the entry or we see it armed.
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (armed_.load(std::memory_order_relaxed)) [[unlikely]]
            kick();
    }
    /** Unconditional wake-up (fi_cq_signal). */
    void kick() noexcept;
    /** Announce a wait; re-check the condition after this. */
    void arm() noexcept
    {
        armed_.fetch_add(1, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    void disarm() noexcept { armed_.fetch_sub(1, std::memory_order_relaxed); }
    /** Block until kicked or @p timeout_ms pass (-1: no limit); consumes the
     *  wake-up. @return 0 woken; -FI_ETIMEDOUT. */
    int wait(int timeout_ms) noexcept;
    /** Consume pending wake-ups without blocking. */
    void drain() noexcept;

private:
    int fd_ = -1;
    wait_obj kind_ = FI_WAIT_NONE;
    std::atomic<int> armed_{0};
    bool owns_fd_ = true; ///< false: a wait set's (attach())
};

/** Milliseconds left until @p deadline_ns (monotonic), -1 for none, 0 when past. */
int ms_left(long long deadline_ns) noexcept;
/** Monotonic deadline @p timeout_ms from now; -1 (no limit) for negative timeouts. */
long long deadline_after(int timeout_ms) noexcept;

} // namespace shunt::fabric::util
