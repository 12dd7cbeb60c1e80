// env lcores: pinned threads and the progress service.
// Tests that initialise the EAL run in a fresh process (EXPECT_EXIT re-execs
// the binary) because the EAL initialises once per process.
#include "env/env.h"
#include "env/errors.h"
#include "env/lcore.h"
#include "env/topology.h"

#include "test_util.h"

#include "no_huge.h"

#include <gtest/gtest.h>

#include <rte_lcore.h>
#include <rte_mempool.h>

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using namespace shunt;
using namespace shunt::env;
using shunt::test::no_huge;
using shunt::test::wait_until;
using namespace std::chrono_literals;

namespace {

std::vector<unsigned> affinity() { return shunt::env::affinity_cpus(); }

/** A polling body that yields, so tests never starve the other CPU users. */
void poll_until_stopped(const std::atomic<bool> &stop)
{
    while (!stop.load())
        sched_yield();
}

struct counter {
    std::atomic<unsigned long long> calls{0};
    std::atomic<int> inside{0};
    std::atomic<int> overlap{0};  ///< entered while already inside
    std::atomic<int> cpu{-1};
};

int count_poller(void *arg) noexcept
{
    auto *c = static_cast<counter *>(arg);
    if (c->inside.fetch_add(1) != 0)
        c->overlap.fetch_add(1);
    c->cpu.store(sched_getcpu());
    c->calls.fetch_add(1);
    c->inside.fetch_sub(1);
    return 0;
}

// Stays inside for a few microseconds so remove() often lands mid-call.
int slow_poller(void *arg) noexcept
{
    auto *c = static_cast<counter *>(arg);
    c->inside.store(1);
    auto end = std::chrono::steady_clock::now() + 5us;
    while (std::chrono::steady_clock::now() < end) {
    }
    c->calls.fetch_add(1);
    c->inside.store(0);
    return 0;
}

/** Wait until the service has completed @p n more passes. */
bool more_passes(unsigned long long n)
{
    unsigned long long p0 = progress::passes();
    return wait_until([&] { return progress::passes() >= p0 + n; });
}

class Progress : public testing::Test {
protected:
    void TearDown() override { progress::stop(); }
};

} // namespace

// ---------------------------------------------------------------------------
// pinned_thread

TEST(PinnedThread, RunsOnRequestedCpu)
{
    for (unsigned cpu : affinity()) {
        pinned_thread t;
        std::atomic<int> samples{0}, wrong{0}, last{-1};
        ASSERT_EQ(t.launch(cpu, [&](const std::atomic<bool> &stop) {
            while (!stop.load()) {
                int c = sched_getcpu();
                last.store(c);
                if (c != static_cast<int>(cpu))
                    wrong.fetch_add(1);
                samples.fetch_add(1);
                sched_yield();
            }
        }), 0) << cpu;
        EXPECT_EQ(t.cpu(), static_cast<int>(cpu));
        ASSERT_TRUE(wait_until([&] { return samples.load() >= 100; })) << "thread on CPU " << cpu << " never ran";
        EXPECT_TRUE(t.running());
        t.stop();
        EXPECT_EQ(t.join(), 0);
        EXPECT_FALSE(t.running());
        EXPECT_EQ(t.cpu(), -1);
        EXPECT_EQ(wrong.load(), 0) << "ran on CPU " << last.load() << " instead of " << cpu;
    }
}

TEST(PinnedThread, BadCpuIsEnodev)
{
    pinned_thread t;
    auto fn = [](const std::atomic<bool> &stop) { poll_until_stopped(stop); };
    EXPECT_EQ(t.launch(1u << 20, fn), -FI_ENODEV);
    EXPECT_EQ(t.launch(CPU_SETSIZE, fn), -FI_ENODEV);
    EXPECT_FALSE(t.running());
    EXPECT_EQ(t.cpu(), -1);
    EXPECT_EQ(t.join(), -FI_EINVAL);
}

TEST(PinnedThread, CpuOutsideAffinityIsEnodev)
{
    auto aff = affinity();
    if (aff.size() < 2)
        GTEST_SKIP() << "needs two CPUs";
    cpu_set_t saved, one;
    ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
    CPU_ZERO(&one);
    CPU_SET(aff.front(), &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    pinned_thread t;
    int rc = t.launch(aff.back(), [](const std::atomic<bool> &stop) { poll_until_stopped(stop); });
    ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
    EXPECT_EQ(rc, -FI_ENODEV);
    EXPECT_FALSE(t.running());
}

TEST(PinnedThread, EmptyFunctionIsEinval)
{
    pinned_thread t;
    EXPECT_EQ(t.launch(affinity().front(), nullptr), -FI_EINVAL);
    EXPECT_FALSE(t.running());
}

TEST(PinnedThread, DoubleLaunchIsEbusyThenRelaunch)
{
    unsigned cpu = affinity().back();
    pinned_thread t;
    std::atomic<int> runs{0};
    auto fn = [&](const std::atomic<bool> &stop) {
        runs.fetch_add(1);
        poll_until_stopped(stop);
    };
    ASSERT_EQ(t.launch(cpu, fn), 0);
    EXPECT_EQ(t.launch(cpu, fn), -FI_EBUSY);
    EXPECT_EQ(t.cpu(), static_cast<int>(cpu));
    t.stop();
    ASSERT_EQ(t.join(), 0);
    EXPECT_EQ(t.join(), -FI_EINVAL) << "nothing left to join";
    ASSERT_EQ(t.launch(cpu, fn), 0) << "relaunch after join";
    ASSERT_TRUE(wait_until([&] { return runs.load() == 2; }));
    t.stop();
    EXPECT_EQ(t.join(), 0);
    EXPECT_EQ(runs.load(), 2);
}

TEST(PinnedThread, RelaunchAfterFunctionReturnedWithoutJoin)
{
    unsigned cpu = affinity().front();
    pinned_thread t;
    std::atomic<int> runs{0};
    auto once = [&](const std::atomic<bool> &) { runs.fetch_add(1); };
    ASSERT_EQ(t.launch(cpu, once), 0);
    ASSERT_TRUE(wait_until([&] { return !t.running(); })) << "function returned but running() stays true";
    ASSERT_EQ(t.launch(cpu, once), 0) << "a finished, unjoined thread is reaped by launch";
    ASSERT_TRUE(wait_until([&] { return runs.load() == 2; }));
    EXPECT_EQ(t.join(), 0);
}

TEST(PinnedThread, DestructorStopsAndJoins)
{
    std::atomic<bool> returned{false};
    {
        pinned_thread t;
        ASSERT_EQ(t.launch(affinity().back(), [&](const std::atomic<bool> &stop) {
            poll_until_stopped(stop);
            returned.store(true);
        }), 0);
    }
    EXPECT_TRUE(returned.load()) << "destructor returned before the function did";
}

TEST(PinnedThread, RegisteredWithEalWhenInitialised)
{
    EXPECT_EXIT(
        {
            if (init(no_huge()) != 0)
                std::exit(2);
            unsigned cpu = current().cpus.back();
            rte_mempool *mp = rte_mempool_create("lcore_test", 1023, 64, 32, 0, nullptr, nullptr,
                                                 nullptr, nullptr, SOCKET_ID_ANY, 0);
            if (!mp)
                std::exit(3);
            std::atomic<unsigned> lcore{LCORE_ID_ANY};
            std::atomic<bool> has_cache{false};
            std::atomic<bool> ready{false};
            pinned_thread t;
            if (t.launch(cpu, [&](const std::atomic<bool> &stop) {
                    lcore.store(rte_lcore_id());
                    has_cache.store(rte_mempool_default_cache(mp, rte_lcore_id()) != nullptr);
                    ready.store(true);
                    poll_until_stopped(stop);
                }) != 0)
                std::exit(4);
            if (!wait_until([&] { return ready.load(); }))
                std::exit(5);
            unsigned id = lcore.load();
            if (id == LCORE_ID_ANY || !has_cache.load())
                std::exit(6);
            if (!rte_lcore_has_role(id, ROLE_NON_EAL))
                std::exit(7);
            t.stop();
            if (t.join() != 0)
                std::exit(8);
            if (rte_lcore_has_role(id, ROLE_NON_EAL))
                std::exit(9); // unregistered on exit
            rte_mempool_free(mp);
            std::exit(0);
        },
        testing::ExitedWithCode(0), "");
}

TEST(PinnedThread, RestrictedToEnvLcores)
{
    auto aff = affinity();
    if (aff.size() < 2)
        GTEST_SKIP() << "needs two CPUs";
    EXPECT_EXIT(
        {
            options o = no_huge();
            o.lcores = std::to_string(aff.front());
            if (init(o) != 0)
                std::exit(2);
            pinned_thread t;
            auto fn = [](const std::atomic<bool> &stop) { poll_until_stopped(stop); };
            if (t.launch(aff.back(), fn) != -FI_ENODEV)
                std::exit(3);
            if (t.launch(aff.front(), fn) != 0)
                std::exit(4);
            t.stop();
            std::exit(t.join() == 0 ? 0 : 5);
        },
        testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// progress service

TEST_F(Progress, StopWhenNotStartedIsSafe)
{
    progress::stop();
    progress::stop();
    EXPECT_FALSE(progress::running());
    EXPECT_EQ(progress::cpu(), -1);
}

TEST_F(Progress, StartStopOnDefaultCpu)
{
    std::vector<unsigned> pick;
    ASSERT_EQ(pick_cores(1, pick), 0);
    ASSERT_EQ(progress::start(), 0);
    EXPECT_TRUE(progress::running());
    EXPECT_EQ(progress::cpu(), static_cast<int>(pick.back()));
    EXPECT_EQ(progress::start(), 0) << "idempotent";
    EXPECT_EQ(progress::start(static_cast<int>(pick.back())), 0) << "same CPU is idempotent too";
    ASSERT_TRUE(more_passes(10)) << "the service makes no passes";
    progress::stop();
    EXPECT_FALSE(progress::running());
    EXPECT_EQ(progress::cpu(), -1);
    unsigned long long p = progress::passes();
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(progress::passes(), p) << "passes after stop() returned";
}

TEST_F(Progress, StartArguments)
{
    EXPECT_EQ(progress::start(-2), -FI_EINVAL);
    EXPECT_EQ(progress::start(1 << 20), -FI_ENODEV);
    EXPECT_FALSE(progress::running());
    auto aff = affinity();
    ASSERT_EQ(progress::start(static_cast<int>(aff.front())), 0);
    if (aff.size() >= 2) {
        EXPECT_EQ(progress::start(static_cast<int>(aff.back())), -FI_EBUSY);
    }
    EXPECT_EQ(progress::cpu(), static_cast<int>(aff.front()));
}

TEST_F(Progress, PollersRunOnTheServiceCpu)
{
    for (unsigned cpu : affinity()) {
        ASSERT_EQ(progress::start(static_cast<int>(cpu)), 0);
        counter c;
        int h = progress::add(count_poller, &c);
        ASSERT_GT(h, 0);
        ASSERT_TRUE(wait_until([&] { return c.calls.load() >= 100; }));
        EXPECT_EQ(progress::remove(h), 0);
        EXPECT_EQ(c.cpu.load(), static_cast<int>(cpu));
        EXPECT_EQ(c.overlap.load(), 0);
        progress::stop();
    }
}

TEST_F(Progress, AddStartsServiceAndRemoveStopsCalls)
{
    counter a, b;
    int ha = progress::add(count_poller, &a);
    ASSERT_GT(ha, 0);
    EXPECT_TRUE(progress::running()) << "add() starts the service";
    int hb = progress::add(count_poller, &b);
    ASSERT_GT(hb, 0);
    EXPECT_NE(ha, hb);
    ASSERT_TRUE(wait_until([&] { return a.calls.load() > 100 && b.calls.load() > 100; }));
    ASSERT_EQ(progress::remove(ha), 0);
    unsigned long long frozen = a.calls.load();
    EXPECT_EQ(a.inside.load(), 0) << "poller still running after remove() returned";
    unsigned long long b0 = b.calls.load();
    ASSERT_TRUE(more_passes(50));
    EXPECT_EQ(a.calls.load(), frozen) << "removed poller was called again";
    EXPECT_GT(b.calls.load(), b0) << "the other poller stopped advancing";
    EXPECT_EQ(progress::remove(ha), -FI_ENOENT) << "removed twice";
    EXPECT_EQ(progress::remove(hb), 0);
}

TEST_F(Progress, RemoveWaitsForARunningCall)
{
    for (int i = 0; i < 200; i++) {
        counter c;
        int h = progress::add(slow_poller, &c);
        ASSERT_GT(h, 0);
        ASSERT_TRUE(wait_until([&] { return c.calls.load() > 0; }));
        ASSERT_EQ(progress::remove(h), 0);
        ASSERT_EQ(c.inside.load(), 0) << "iteration " << i << ": remove() returned mid-call";
        unsigned long long frozen = c.calls.load();
        if (i % 50 == 0) {
            ASSERT_TRUE(more_passes(5));
            ASSERT_EQ(c.calls.load(), frozen);
        }
    }
}

TEST_F(Progress, BadArguments)
{
    EXPECT_EQ(progress::add(nullptr, nullptr), -FI_EINVAL);
    EXPECT_EQ(progress::remove(0), -FI_ENOENT);
    EXPECT_EQ(progress::remove(-1), -FI_ENOENT);
    EXPECT_EQ(progress::remove(12345), -FI_ENOENT);
    counter c;
    int h = progress::add(count_poller, &c);
    ASSERT_GT(h, 0);
    EXPECT_EQ(progress::remove(h + 256), -FI_ENOENT) << "same slot, other generation";
    EXPECT_EQ(progress::remove(h), 0);
    int h2 = progress::add(count_poller, &c);
    ASSERT_GT(h2, 0);
    EXPECT_NE(h2, h) << "handles are not reused at once";
    EXPECT_EQ(progress::remove(h), -FI_ENOENT) << "stale handle of a reused slot";
    EXPECT_EQ(progress::remove(h2), 0);
}

TEST_F(Progress, LimitIs256Pollers)
{
    counter c;
    std::vector<int> hs;
    for (int i = 0; i < 256; i++) {
        int h = progress::add(count_poller, &c);
        ASSERT_GT(h, 0) << i;
        hs.push_back(h);
    }
    EXPECT_EQ(progress::add(count_poller, &c), -FI_ENOSPC);
    EXPECT_EQ(progress::remove(hs[100]), 0);
    int h = progress::add(count_poller, &c);
    EXPECT_GT(h, 0) << "a freed slot is usable again";
    hs[100] = h;
    for (int x : hs)
        EXPECT_EQ(progress::remove(x), 0);
    EXPECT_EQ(c.overlap.load(), 0);
}

TEST_F(Progress, RestartAfterStopKeepsPollers)
{
    counter c;
    int h = progress::add(count_poller, &c);
    ASSERT_GT(h, 0);
    ASSERT_TRUE(wait_until([&] { return c.calls.load() > 10; }));
    progress::stop();
    unsigned long long frozen = c.calls.load();
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(c.calls.load(), frozen) << "called while stopped";
    ASSERT_EQ(progress::start(), 0);
    EXPECT_TRUE(wait_until([&] { return c.calls.load() > frozen + 10; })) << "not called after restart";
    EXPECT_EQ(progress::remove(h), 0);
}

TEST_F(Progress, RemoveWhileStopped)
{
    counter c;
    int h = progress::add(count_poller, &c);
    ASSERT_GT(h, 0);
    progress::stop();
    EXPECT_EQ(progress::remove(h), 0);
    unsigned long long frozen = c.calls.load();
    ASSERT_EQ(progress::start(), 0);
    ASSERT_TRUE(more_passes(20));
    EXPECT_EQ(c.calls.load(), frozen);
}

namespace {

struct self_remover {
    std::atomic<int> handle{0};
    std::atomic<int> rc{1};
    std::atomic<unsigned long long> calls{0}, calls_at_remove{0};
};

int self_remove_poller(void *arg) noexcept
{
    auto *s = static_cast<self_remover *>(arg);
    unsigned long long n = s->calls.fetch_add(1) + 1;
    int h = s->handle.load();
    if (h > 0 && s->rc.load() == 1) {
        s->calls_at_remove.store(n);
        s->rc.store(progress::remove(h));
    }
    return 0;
}

struct adder {
    counter child;
    std::atomic<int> child_handle{0};
};

int adding_poller(void *arg) noexcept
{
    auto *a = static_cast<adder *>(arg);
    if (a->child_handle.load() == 0)
        a->child_handle.store(progress::add(count_poller, &a->child));
    return 0;
}

} // namespace

TEST_F(Progress, PollerRemovesItself)
{
    self_remover s;
    int h = progress::add(self_remove_poller, &s);
    ASSERT_GT(h, 0);
    s.handle.store(h);
    ASSERT_TRUE(wait_until([&] { return s.rc.load() != 1; }));
    EXPECT_EQ(s.rc.load(), 0);
    ASSERT_TRUE(more_passes(20));
    EXPECT_EQ(s.calls.load(), s.calls_at_remove.load()) << "called again after removing itself";
    EXPECT_EQ(progress::remove(h), -FI_ENOENT);
}

TEST_F(Progress, PollerAddsAnother)
{
    adder a;
    int h = progress::add(adding_poller, &a);
    ASSERT_GT(h, 0);
    ASSERT_TRUE(wait_until([&] { return a.child_handle.load() != 0; }));
    int ch = a.child_handle.load();
    ASSERT_GT(ch, 0);
    EXPECT_TRUE(wait_until([&] { return a.child.calls.load() > 10; }));
    EXPECT_EQ(progress::remove(h), 0);
    EXPECT_EQ(progress::remove(ch), 0);
}

TEST_F(Progress, ConcurrentAddRemoveFromManyThreads)
{
    ASSERT_EQ(progress::start(), 0);
    std::atomic<int> failures{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++) {
        ts.emplace_back([&] {
            for (int i = 0; i < 100; i++) {
                counter c;
                int h = progress::add(i % 2 ? slow_poller : count_poller, &c);
                if (h <= 0) {
                    failures.fetch_add(1);
                    continue;
                }
                // Wait (bounded) for at least one call, then remove.
                wait_until([&] { return c.calls.load() > 0; }, 2s);
                if (progress::remove(h) != 0 || c.inside.load() != 0)
                    failures.fetch_add(1);
                // c goes out of scope here: a call after remove() would touch freed stack.
            }
        });
    }
    for (auto &th : ts)
        th.join();
    EXPECT_EQ(failures.load(), 0);
}

TEST(ProgressEnv, TunableSelectsCpu)
{
    auto aff = affinity();
    EXPECT_EXIT(
        {
            setenv("SHUNT_PROGRESS_CPU", std::to_string(aff.front()).c_str(), 1);
            if (progress::start() != 0 || progress::cpu() != static_cast<int>(aff.front()))
                std::exit(2);
            progress::stop();
            setenv("SHUNT_PROGRESS_CPU", "-1", 1);
            std::vector<unsigned> pick;
            if (pick_cores(1, pick) != 0)
                std::exit(3);
            if (progress::start(-1) != 0 || progress::cpu() != static_cast<int>(pick.back()))
                std::exit(4);
            progress::stop();
            setenv("SHUNT_PROGRESS_CPU", "two", 1);
            if (progress::start(-1) != -FI_EINVAL || progress::running())
                std::exit(5);
            setenv("SHUNT_PROGRESS_CPU", "100000", 1);
            if (progress::start(-1) != -FI_ENODEV)
                std::exit(6);
            // An explicit CPU wins over the tunable.
            if (progress::start(static_cast<int>(aff.back())) != 0 ||
                progress::cpu() != static_cast<int>(aff.back()))
                std::exit(7);
            progress::stop();
            std::exit(0);
        },
        testing::ExitedWithCode(0), "");
}

TEST(ProgressEnv, FiniWhenNeverStarted)
{
    EXPECT_EXIT(
        {
            if (init(no_huge()) != 0)
                std::exit(2);
            fini();
            std::exit(progress::running() ? 3 : 0);
        },
        testing::ExitedWithCode(0), "");
}

TEST(ProgressEnv, ServiceRegisteredWithEalAndStoppedByFini)
{
    auto aff = affinity();
    EXPECT_EXIT(
        {
            options o = no_huge();
            o.lcores = std::to_string(aff.front());
            if (init(o) != 0)
                std::exit(2);
            if (aff.size() >= 2 && progress::start(static_cast<int>(aff.back())) != -FI_ENODEV)
                std::exit(3); // outside the env's lcore list
            struct probe {
                std::atomic<unsigned> lcore{LCORE_ID_ANY};
                std::atomic<bool> seen{false};
            } p;
            int h = progress::add(
                [](void *arg) noexcept {
                    auto *q = static_cast<probe *>(arg);
                    q->lcore.store(rte_lcore_id());
                    q->seen.store(true);
                    return 0;
                },
                &p);
            if (h <= 0)
                std::exit(4);
            if (progress::cpu() != static_cast<int>(aff.front()))
                std::exit(5); // default CPU comes from the env's lcore list
            if (!wait_until([&] { return p.seen.load(); }))
                std::exit(6);
            if (p.lcore.load() == LCORE_ID_ANY)
                std::exit(7);
            fini();
            std::exit(progress::running() ? 8 : 0);
        },
        testing::ExitedWithCode(0), "");
}
