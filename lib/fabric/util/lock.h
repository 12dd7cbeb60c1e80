/* For provider writers: the lock a threading level needs, chosen at setup.
 * A `maybe_lock` with locking off costs one predictable branch; code that
 * needs zero cost chooses a function-pointer variant instead. */
#pragma once

#include <atomic>

namespace shunt::fabric::util {

/** Test-and-test-and-set spinlock (short critical sections only). */
class spinlock {
public:
    void lock() noexcept
    {
        while (flag_.exchange(true, std::memory_order_acquire))
            while (flag_.load(std::memory_order_relaxed))
                __builtin_ia32_pause();
    }
    bool try_lock() noexcept { return !flag_.exchange(true, std::memory_order_acquire); }
    void unlock() noexcept { flag_.store(false, std::memory_order_release); }

private:
    std::atomic<bool> flag_{false};
};

/** A spinlock that is only taken when enabled at setup. */
class maybe_lock {
public:
    void enable(bool on) noexcept { on_ = on; }
    bool enabled() const noexcept { return on_; }
    void lock() noexcept
    {
        if (on_)
            l_.lock();
    }
    void unlock() noexcept
    {
        if (on_)
            l_.unlock();
    }

private:
    spinlock l_;
    bool on_ = false;
};

/** RAII guard for maybe_lock / spinlock. */
template <class L>
class guard {
public:
    explicit guard(L &l) noexcept : l_(l) { l_.lock(); }
    ~guard() { l_.unlock(); }
    guard(const guard &) = delete;
    guard &operator=(const guard &) = delete;

private:
    L &l_;
};

} // namespace shunt::fabric::util
