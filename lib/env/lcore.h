/* Pinned polling threads and the progress service.
 *
 * A pinned_thread runs one function on one CPU. When the environment is
 * initialised (env::init) the thread is registered with the EAL for its
 * lifetime (rte_thread_register), so it has its own lcore id and the
 * per-lcore caches of rte_mempool pools work from it.
 *
 * The progress service is one pinned thread that calls every registered
 * poller in turn, forever (auto progress). Registration and removal are safe
 * from any thread while it runs; the loop itself takes no lock. */
#pragma once

#include <atomic>
#include <functional>

namespace shunt::env {

/** A thread pinned to one CPU. It runs fn(stop) where stop turns true when
 *  stop() is called; fn should poll and return when it sees it.
 *
 *  launch(), join() and the destructor are for the owning thread; stop(),
 *  running() and cpu() may be called from any thread. Stop and join every
 *  pinned_thread before env::fini(): it unregisters from the EAL on exit. */
class pinned_thread {
public:
    pinned_thread() noexcept = default;
    /** Stops and joins. Must not run on the thread itself. */
    ~pinned_thread();
    pinned_thread(const pinned_thread &) = delete;
    pinned_thread &operator=(const pinned_thread &) = delete;

    /** Start fn on @p cpu. The thread runs on that CPU from its first
     *  instruction (affinity is set at creation). A thread whose function
     *  has returned but which was not joined is joined first.
     *  @param cpu OS CPU number: must be in env::current().cpus when the
     *         environment is initialised, else in the process's affinity mask.
     *  @param fn function to run; must not be empty.
     *  @return 0; -FI_EBUSY already running; -FI_ENODEV CPU not usable;
     *          -FI_EINVAL empty fn; -FI_ENOMEM; -errno if the thread could
     *          not be created. */
    [[nodiscard]] int launch(unsigned cpu, std::function<void(const std::atomic<bool> &stop)> fn);
    /** Ask the function to return (sets its stop flag). No effect if not launched. */
    void stop() noexcept;
    /** Wait for the function to return (does not stop it: call stop() first).
     *  @return 0; -FI_EINVAL if not launched since the last join;
     *          -FI_EBUSY if called from the thread itself. */
    int join() noexcept;
    /** True from launch() until the function returns. */
    bool running() const noexcept;
    /** CPU given to the last launch(), -1 before it and after join(). */
    int cpu() const noexcept { return cpu_; }

private:
    struct impl;
    impl *impl_ = nullptr;
    int cpu_ = -1;
};

/** A poller: called repeatedly by the progress service; returns the amount of
 *  work done (0 or negative when idle). It runs on the service thread and
 *  must not block, call progress::stop()/start() expecting a join, or call
 *  env::init()/fini()/initialized()/current() (fini() holds the env lock
 *  while it stops the service). It may call add() and remove(). */
using poller_fn = int (*)(void *arg) noexcept;

/** Progress service: one pinned thread calling every registered poller in
 *  turn until it is removed (auto progress). When a whole pass finds no work
 *  for a while, the thread calls sched_yield() between passes unless
 *  SHUNT_PROGRESS_YIELD=0, so it shares its CPU instead of starving it. */
namespace progress {

/** Start the service.
 *  @param cpu OS CPU to pin it to; -1 for SHUNT_PROGRESS_CPU when set to a
 *         CPU >= 0, else the last CPU of pick_cores(1).
 *  @return 0, also when already running on that CPU (or cpu == -1);
 *          -FI_EBUSY running on another CPU (stop() first);
 *          -FI_EINVAL cpu < -1 or SHUNT_PROGRESS_CPU is not an integer;
 *          else as pick_cores() and pinned_thread::launch. */
[[nodiscard]] int start(int cpu = -1);
/** Stop and join the service thread. Pollers stay registered and run again
 *  after start(). Safe when the service never started, and twice. From a
 *  poller it only asks the thread to stop (it cannot join itself). */
void stop() noexcept;
/** True while the service thread runs and has not been asked to stop. */
bool running() noexcept;
/** CPU the service runs on, or -1. */
int cpu() noexcept;

/** Register a poller; the service calls fn(arg) on every pass until
 *  remove(). Starts the service (start(-1)) if it is not running, except
 *  when called from a poller.
 *  @return a positive handle (not reused for ~8 million registrations);
 *          -FI_EINVAL null fn; -FI_ENOSPC too many pollers (limit 256);
 *          or start()'s error, in which case nothing stays registered. */
[[nodiscard]] int add(poller_fn fn, void *arg);
/** Unregister. On return the poller is not running and will not run again
 *  (waits for the service to finish its current pass; a poller removing
 *  itself returns at once and is not called again after it returns).
 *  @return 0; -FI_ENOENT unknown or already removed handle. */
int remove(int handle) noexcept;
/** Number of completed passes over the pollers since the process started,
 *  across restarts (for tests and diagnostics). */
unsigned long long passes() noexcept;

} // namespace progress
} // namespace shunt::env
