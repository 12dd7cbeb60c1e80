#include "env/lcore.h"

#include "env/compiler.h"
#include "env/env.h"
#include "env/errors.h"
#include "env/log.h"
#include "env/stats.h"
#include "env/topology.h"
#include "env/tunable.h"

#include <rte_errno.h>
#include <rte_lcore.h>

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

namespace shunt::env {

SHUNT_LOG_COMPONENT(lcore_log, "env");

namespace {

SHUNT_TUNABLE(progress_cpu_tunable, "SHUNT_PROGRESS_CPU", integer, "-1",
              "CPU of the progress service thread (-1: the last CPU chosen by pick_cores)", "env");
SHUNT_TUNABLE(progress_yield_tunable, "SHUNT_PROGRESS_YIELD", boolean, "1",
              "Progress service calls sched_yield when idle for ~1000 passes (0: spin, no system calls)",
              "env");

using thread_fn = std::function<void(const std::atomic<bool> &)>;

/** CPUs a thread may be pinned to, read before any lcore lock is taken:
 *  env::fini() holds the env lock while it stops the progress service. */
struct usable_cpus {
    bool eal = false;           ///< register threads with the EAL
    std::vector<unsigned> cpus; ///< ascending
};

usable_cpus snapshot_usable()
{
    usable_cpus u;
    if (initialized()) {
        u.eal = true;
        u.cpus = current().cpus;
        return u;
    }
    u.cpus = affinity_cpus();
    return u;
}

bool cpu_usable(const usable_cpus &u, unsigned cpu)
{
    return cpu < CPU_SETSIZE && std::binary_search(u.cpus.begin(), u.cpus.end(), cpu);
}

/** One pinned OS thread; reused by pinned_thread and the progress service. */
struct thread_core {
    pthread_t tid{};
    std::atomic<bool> started{false}; ///< created and not yet joined
    std::atomic<bool> stop{false};
    std::atomic<bool> done{false};    ///< fn returned
    thread_fn fn;
    bool eal = false;
    unsigned cpu = 0;
    const char *name = "shunt-lc"; ///< thread name prefix; the CPU number is appended
};

void *thread_main(void *p)
{
    auto *t = static_cast<thread_core *>(p);
    char name[16];
    std::snprintf(name, sizeof name, "%.10s%u", t->name, t->cpu);
    pthread_setname_np(pthread_self(), name);
    bool registered = false;
    if (t->eal) {
        // Gives this thread an lcore id: rte_mempool per-lcore caches work.
        registered = rte_thread_register() == 0;
        if (!registered)
            SHUNT_LOG(lcore_log, warning, "thread on CPU %u: rte_thread_register failed (%s); "
                                          "pools will not use per-lcore caches from it",
                      t->cpu, rte_strerror(rte_errno));
    }
    t->fn(t->stop);
    if (registered)
        rte_thread_unregister();
    t->done.store(true, std::memory_order_release);
    return nullptr;
}

SHUNT_COLD int spawn(thread_core &t, unsigned cpu, bool eal, thread_fn fn)
{
    t.fn = std::move(fn);
    t.eal = eal;
    t.cpu = cpu;
    t.stop.store(false);
    t.done.store(false);
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0)
        return -rc;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    rc = pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    if (rc == 0)
        rc = pthread_create(&t.tid, &attr, thread_main, &t);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        SHUNT_LOG(lcore_log, error, "cannot start a thread on CPU %u: %s", cpu, std::strerror(rc));
        t.fn = nullptr;
        return -rc;
    }
    t.started.store(true);
    return 0;
}

void reap(thread_core &t) noexcept
{
    pthread_join(t.tid, nullptr);
    t.started.store(false);
    t.fn = nullptr;
}

bool on_thread(const thread_core &t) noexcept
{
    return t.started.load() && pthread_equal(t.tid, pthread_self());
}

} // namespace

// ---------------------------------------------------------------------------
// pinned_thread

struct pinned_thread::impl : thread_core {};

pinned_thread::~pinned_thread()
{
    if (!impl_)
        return;
    if (on_thread(*impl_)) {
        // Destroyed by its own function: it cannot join itself. Leak the
        // state the thread still uses and let it finish detached.
        impl_->stop.store(true);
        pthread_detach(impl_->tid);
        return;
    }
    stop();
    (void)join();
    delete impl_;
}

int pinned_thread::launch(unsigned cpu, std::function<void(const std::atomic<bool> &stop)> fn)
{
    if (!fn)
        return -FI_EINVAL;
    if (impl_ && impl_->started.load()) {
        if (!impl_->done.load(std::memory_order_acquire))
            return -FI_EBUSY;
        reap(*impl_);
        cpu_ = -1;
    }
    usable_cpus u = snapshot_usable();
    if (!cpu_usable(u, cpu))
        return -FI_ENODEV;
    if (!impl_) {
        impl_ = new (std::nothrow) impl;
        if (!impl_)
            return -FI_ENOMEM;
    }
    int rc = spawn(*impl_, cpu, u.eal, std::move(fn));
    if (rc != 0)
        return rc;
    cpu_ = static_cast<int>(cpu);
    return 0;
}

void pinned_thread::stop() noexcept
{
    if (impl_)
        impl_->stop.store(true, std::memory_order_release);
}

int pinned_thread::join() noexcept
{
    if (!impl_ || !impl_->started.load())
        return -FI_EINVAL;
    if (on_thread(*impl_))
        return -FI_EBUSY;
    reap(*impl_);
    cpu_ = -1;
    return 0;
}

bool pinned_thread::running() const noexcept
{
    return impl_ && impl_->started.load() && !impl_->done.load(std::memory_order_acquire);
}

// ---------------------------------------------------------------------------
// progress service

namespace progress {
namespace {

constexpr unsigned max_pollers = 256;
// Handles are gen * max_pollers + slot + 1: positive, and a stale handle of a
// reused slot does not match until the generation wraps.
constexpr unsigned max_gen = (INT_MAX - max_pollers) / max_pollers;
// Consecutive idle passes before the loop starts yielding the CPU.
constexpr unsigned idle_passes_before_yield = 1024;

/** What the loop reads per poller: 16 bytes, four per cache line. */
struct hot_slot {
    std::atomic<poller_fn> fn{nullptr};
    std::atomic<void *> arg{nullptr};
};

/** What the loop counts (written by the loop only, after passes that did
 *  work; idle passes write nothing but pass_count). */
struct loop_stats {
    stats::gauge passes;       ///< copy of pass_count, taken by refresh
    stats::gauge pollers;      ///< registered, taken by refresh
    stats::counter busy_passes;///< passes in which some poller did work
    stats::counter work;       ///< sum of the pollers' positive returns
    stats::counter yields;     ///< sched_yield() calls while idle
    stats::histogram work_per_pass; ///< work done by each busy pass
};

struct service {
    // Read by the loop on every pass; written only by add/remove.
    alignas(SHUNT_CACHE_LINE) hot_slot slots[max_pollers];
    std::atomic<unsigned> high{0}; ///< slots at or above are empty

    // Written by the loop once per pass; read by remove() and passes().
    alignas(SHUNT_CACHE_LINE) std::atomic<unsigned long long> pass_count{0};
    /** True from start() until the loop has exited: a remove() waiting for
     *  a pass stops waiting when the loop is gone. */
    std::atomic<bool> looping{false};

    // Written by the loop after busy passes; read by telemetry.
    alignas(SHUNT_CACHE_LINE) loop_stats st;
    stats::registration st_reg;

    // Control: never touched by the loop.
    alignas(SHUNT_CACHE_LINE) std::mutex registry; ///< handles, high, next_gen
    int handles[max_pollers] = {};                 ///< 0: free slot
    unsigned next_gen = 1;
    /** Serialises start and stop; held while joining, so never taken by a
     *  poller (calls from the service thread take the lock-free paths). */
    std::mutex lifecycle;
    thread_core thread;
    std::atomic<int> cpu{-1};
};

service &svc()
{
    static service s;
    return s;
}

thread_local bool in_service = false;

void run_loop(const std::atomic<bool> &stop, bool yield)
{
    service &s = svc();
    in_service = true;
    unsigned idle = 0;
    while (!stop.load(std::memory_order_relaxed)) {
        std::uint64_t work = 0;
        const unsigned high = s.high.load(std::memory_order_acquire);
        for (unsigned i = 0; i < high; i++) {
            // Observe a registration: seq_cst so that a pass starting after
            // remove() read pass_count sees the slot cleared (see remove()).
            poller_fn f = s.slots[i].fn.load(std::memory_order_seq_cst);
            if (f) {
                const int done = f(s.slots[i].arg.load(std::memory_order_relaxed));
                if (done > 0)
                    work += static_cast<unsigned>(done);
            }
        }
        // Publish the end of a pass: every poller call of it has returned.
        s.pass_count.fetch_add(1, std::memory_order_seq_cst);
        if (work) {
            idle = 0;
            s.st.busy_passes.add();
            s.st.work.add(work);
            s.st.work_per_pass.record(work);
        } else if (yield && idle >= idle_passes_before_yield) {
            s.st.yields.add();
            sched_yield();
        } else {
            idle++;
            _mm_pause();
        }
    }
    s.looping.store(false, std::memory_order_seq_cst);
    in_service = false;
}

#define LOOP_FIELD(n, k, help) SHUNT_STATS_FIELD(loop_stats, n, k, none, help)
const stats::field loop_fields[] = {
    LOOP_FIELD(passes, gauge, "passes over the pollers since the process started"),
    LOOP_FIELD(pollers, gauge, "pollers registered"),
    LOOP_FIELD(busy_passes, counter, "passes in which a poller did work"),
    LOOP_FIELD(work, counter, "work done: the sum of the pollers' positive returns"),
    LOOP_FIELD(yields, counter, "sched_yield() calls while idle"),
    LOOP_FIELD(work_per_pass, histogram, "work done by each busy pass"),
};
#undef LOOP_FIELD
const stats::schema loop_schema{"env.progress", loop_fields, sizeof loop_fields / sizeof loop_fields[0]};

/** Telemetry refresh (registry lock held, reader's thread). */
void refresh_loop_stats(void *) noexcept
{
    service &s = svc();
    s.st.passes.set(s.pass_count.load(std::memory_order_relaxed));
    unsigned n = 0;
    const unsigned high = s.high.load(std::memory_order_acquire);
    for (unsigned i = 0; i < high; i++)
        n += s.slots[i].fn.load(std::memory_order_relaxed) != nullptr;
    s.st.pollers.set(n);
}

SHUNT_COLD int default_cpu(int &out)
{
    if (progress_cpu_tunable.is_set()) {
        std::int64_t v;
        if (progress_cpu_tunable.as_int(v) != 0 || v < -1 || v > INT_MAX) {
            SHUNT_LOG(lcore_log, error, "SHUNT_PROGRESS_CPU='%s' is not a CPU number or -1",
                      progress_cpu_tunable.value().c_str());
            return -FI_EINVAL;
        }
        if (v >= 0) {
            out = static_cast<int>(v);
            return 0;
        }
    }
    std::vector<unsigned> cpus;
    int rc = pick_cores(1, cpus);
    if (rc != 0) {
        SHUNT_LOG(lcore_log, error, "progress: no core to run on (%s)", shunt::strerror(rc));
        return rc;
    }
    out = static_cast<int>(cpus.back());
    return 0;
}

bool yield_when_idle()
{
    bool y = true;
    if (progress_yield_tunable.as_bool(y) != 0) {
        SHUNT_LOG(lcore_log, warning, "SHUNT_PROGRESS_YIELD='%s' is not a boolean; yielding",
                  progress_yield_tunable.value().c_str());
        y = true;
    }
    return y;
}

} // namespace

bool running() noexcept
{
    service &s = svc();
    return s.looping.load() && !s.thread.stop.load();
}

int cpu() noexcept
{
    return running() ? svc().cpu.load() : -1;
}

int start(int cpu)
{
    service &s = svc();
    if (cpu < -1)
        return -FI_EINVAL;
    if (in_service)
        return cpu < 0 || cpu == s.cpu.load() ? 0 : -FI_EBUSY;
    if (cpu < 0 && running())
        return 0;
    // Everything that reads env state comes before the lifecycle lock (lock
    // order: env, then lifecycle, as in env::fini()).
    int want = cpu;
    if (want < 0) {
        int rc = default_cpu(want);
        if (rc != 0)
            return rc;
    }
    usable_cpus u = snapshot_usable();
    bool yield = yield_when_idle();

    std::lock_guard g(s.lifecycle);
    if (s.thread.started.load()) {
        if (!s.thread.stop.load())
            return cpu < 0 || cpu == s.cpu.load() ? 0 : -FI_EBUSY;
        reap(s.thread); // asked to stop by a poller: finish that first
        s.cpu.store(-1);
    }
    if (!cpu_usable(u, static_cast<unsigned>(want))) {
        SHUNT_LOG(lcore_log, error, "progress: CPU %d is not usable (not in the lcore list or "
                                    "the affinity mask)", want);
        return -FI_ENODEV;
    }
    s.cpu.store(want);
    s.looping.store(true);
    s.thread.name = "shunt-prog";
    int rc = spawn(s.thread, static_cast<unsigned>(want), u.eal,
                   [yield](const std::atomic<bool> &stop) { run_loop(stop, yield); });
    if (rc != 0) {
        s.looping.store(false);
        s.cpu.store(-1);
        return rc;
    }
    if (!s.st_reg.is_open())
        (void)s.st_reg.open("env.progress", loop_schema, &s.st, refresh_loop_stats);
    SHUNT_LOG(lcore_log, info, "progress service on CPU %d", want);
    return 0;
}

void stop() noexcept
{
    service &s = svc();
    if (in_service) {
        s.thread.stop.store(true);
        return;
    }
    std::lock_guard g(s.lifecycle);
    if (!s.thread.started.load())
        return;
    s.thread.stop.store(true);
    reap(s.thread);
    s.cpu.store(-1);
}

int add(poller_fn fn, void *arg)
{
    if (!fn)
        return -FI_EINVAL;
    service &s = svc();
    int handle;
    {
        std::lock_guard g(s.registry);
        unsigned i = 0;
        while (i < max_pollers && s.handles[i] != 0)
            i++;
        if (i == max_pollers)
            return -FI_ENOSPC;
        unsigned gen = s.next_gen;
        s.next_gen = gen == max_gen ? 1 : gen + 1;
        handle = static_cast<int>(gen * max_pollers + i + 1);
        s.handles[i] = handle;
        s.slots[i].arg.store(arg, std::memory_order_relaxed);
        // Publish a registration: the loop's load of fn orders its arg load.
        s.slots[i].fn.store(fn, std::memory_order_seq_cst);
        if (i + 1 > s.high.load(std::memory_order_relaxed))
            s.high.store(i + 1, std::memory_order_release);
    }
    if (!in_service && !running()) {
        int rc = start(-1);
        if (rc != 0) {
            (void)remove(handle);
            return rc;
        }
    }
    return handle;
}

int remove(int handle) noexcept
{
    if (handle <= 0)
        return -FI_ENOENT;
    service &s = svc();
    const unsigned i = static_cast<unsigned>(handle - 1) % max_pollers;
    unsigned long long seen;
    {
        std::lock_guard g(s.registry);
        if (s.handles[i] != handle)
            return -FI_ENOENT;
        s.handles[i] = 0;
        // Retire the slot, then read the pass count. Both are seq_cst, as
        // are the loop's fn loads and pass increments: a pass that ends after
        // this read (count > seen) ran its calls before its increment, and
        // any later pass loads fn after that increment, so it sees nullptr.
        s.slots[i].fn.store(nullptr, std::memory_order_seq_cst);
        seen = s.pass_count.load(std::memory_order_seq_cst);
        unsigned high = s.high.load(std::memory_order_relaxed);
        while (high > 0 && s.handles[high - 1] == 0)
            high--;
        s.high.store(high, std::memory_order_release);
    }
    if (in_service)
        return 0; // the loop is us: it is between calls or in this poller
    unsigned spins = 0;
    while (s.pass_count.load(std::memory_order_seq_cst) == seen && s.looping.load(std::memory_order_seq_cst)) {
        if (++spins < 256)
            _mm_pause();
        else
            sched_yield();
    }
    return 0;
}

unsigned long long passes() noexcept
{
    return svc().pass_count.load(std::memory_order_relaxed);
}

} // namespace progress
} // namespace shunt::env
