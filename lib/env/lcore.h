/* Pinned polling threads and the progress service. */
#pragma once

#include <atomic>
#include <functional>

namespace shunt::env {

/** A thread pinned to one CPU. It runs fn(stop) where stop turns true when
 *  stop() is called; fn should poll and return when it sees it. */
class pinned_thread {
public:
    pinned_thread() noexcept = default;
    ~pinned_thread(); ///< stops and joins
    pinned_thread(const pinned_thread &) = delete;
    pinned_thread &operator=(const pinned_thread &) = delete;

    /** Start fn on @p cpu. @return 0; -FI_EBUSY already running; -FI_ENODEV
     *  CPU not usable (not in the lcore list); -errno if the thread failed. */
    [[nodiscard]] int launch(unsigned cpu, std::function<void(const std::atomic<bool> &stop)> fn);
    /** Ask the function to return. */
    void stop() noexcept;
    /** Wait for it to return. @return 0, or -FI_EINVAL if never launched. */
    int join() noexcept;
    bool running() const noexcept;
    int cpu() const noexcept { return cpu_; }

private:
    struct impl;
    impl *impl_ = nullptr;
    int cpu_ = -1;
};

/** A poller: called repeatedly by the progress service; returns the amount of
 *  work done (0 when idle). */
using poller_fn = int (*)(void *arg) noexcept;

/** Progress service: one pinned thread calling every registered poller in
 *  turn until it is removed (auto progress). */
namespace progress {

/** Start the service on @p cpu (-1: the last CPU from pick_cores). Idempotent.
 *  @return 0 or as pinned_thread::launch. */
[[nodiscard]] int start(int cpu = -1);
/** Stop and join the service thread. Pollers stay registered. */
void stop() noexcept;
bool running() noexcept;
/** CPU the service runs on, or -1. */
int cpu() noexcept;

/** Register a poller; the service calls it until remove(). Starts the service
 *  if it is not running. @return a positive handle; -FI_EINVAL null fn;
 *  -FI_ENOSPC too many pollers (limit 256). */
[[nodiscard]] int add(poller_fn fn, void *arg);
/** Unregister. On return the poller is not running and will not run again.
 *  @return 0; -FI_ENOENT unknown handle. */
int remove(int handle) noexcept;
/** Number of completed passes over the pollers (for tests and diagnostics). */
unsigned long long passes() noexcept;

} // namespace progress
} // namespace shunt::env
