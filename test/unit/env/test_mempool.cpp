// env::pool and the EAL heap.
// The EAL initialises once per process and this binary's other tests expect
// a process without it, so every test here runs its body in a fresh process
// (EXPECT_EXIT re-executes the binary: death_test_style=threadsafe). Inside,
// CHECK() reports the failed condition on stderr and exits non-zero, which
// EXPECT_EXIT shows.
#include "env/env.h"
#include "env/errors.h"
#include "env/mempool.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <new>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace shunt;
using namespace shunt::env;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            std::fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
            _exit(1);                                                                        \
        }                                                                                    \
    } while (0)
#define CHECK_EQ(a, b)                                                                       \
    do {                                                                                     \
        auto va_ = (a);                                                                      \
        auto vb_ = (b);                                                                      \
        if (!(va_ == vb_)) {                                                                 \
            std::fprintf(stderr, "CHECK failed at %s:%d: %s == %s (%lld vs %lld)\n", __FILE__, \
                         __LINE__, #a, #b, static_cast<long long>(va_), static_cast<long long>(vb_)); \
            _exit(1);                                                                        \
        }                                                                                    \
    } while (0)

namespace {

options no_huge()
{
    options o;
    o.hugepages = hugepage_policy::off;
    o.hugepages_set = true;
    o.memory_mb = 128;
    return o;
}

enum class start { no_huge, automatic, none };

template <class F>
[[noreturn]] void child(start how, F body)
{
    if (how == start::no_huge && init(no_huge()) != 0) {
        std::fprintf(stderr, "env::init failed\n");
        _exit(90);
    }
    if (how == start::automatic && init(options{}) != 0) {
        std::fprintf(stderr, "env::init failed\n");
        _exit(90);
    }
    body();
    _exit(0);
}

} // namespace

// A test whose body runs in a fresh process, the environment started as @p how.
#define FRESH_TEST(suite, name, how)                                                      \
    static void suite##_##name##_body();                                                  \
    TEST(suite, name)                                                                     \
    {                                                                                     \
        EXPECT_EXIT(child(how, suite##_##name##_body), testing::ExitedWithCode(0), "");   \
    }                                                                                     \
    static void suite##_##name##_body()

FRESH_TEST(Pool, CreateGetPut, start::no_huge)
{
    pool p;
    CHECK(!p.valid());
    CHECK_EQ(p.create("objs", 63, 100), 0);
    CHECK(p.valid());
    CHECK(p.raw() != nullptr);
    CHECK_EQ(p.capacity(), 63u);
    CHECK_EQ(p.element_size(), 104u); // rounded up to a multiple of 8
    CHECK_EQ(p.available(), 63u);
    std::set<void *> got;
    for (int i = 0; i < 63; i++) {
        void *o = nullptr;
        CHECK_EQ(p.get(o), 0);
        CHECK(o != nullptr);
        CHECK_EQ(reinterpret_cast<std::uintptr_t>(o) % 64, 0u);
        std::memset(o, i, 100); // the whole element is usable
        got.insert(o);
    }
    CHECK_EQ(got.size(), 63u);
    CHECK_EQ(p.available(), 0u);
    void *keep = reinterpret_cast<void *>(0x1);
    CHECK_EQ(p.get(keep), -FI_EAGAIN);
    CHECK(keep == reinterpret_cast<void *>(0x1)); // output written only on success
    void *first = *got.begin();
    p.put(first);
    CHECK_EQ(p.available(), 1u);
    void *again = nullptr;
    CHECK_EQ(p.get(again), 0);
    CHECK(again == first);
    for (void *o : got)
        p.put(o);
    CHECK_EQ(p.available(), 63u);
}

FRESH_TEST(Pool, ExhaustionWithCacheIsEagain, start::no_huge)
{
    pool p;
    CHECK_EQ(p.create("cached", 200, 64, 32), 0);
    std::vector<void *> objs;
    void *o;
    while (p.get(o) == 0) {
        objs.push_back(o);
        CHECK(objs.size() <= 200);
    }
    CHECK_EQ(objs.size(), 200u); // the cache never hides objects from their own lcore
    CHECK_EQ(p.available(), 0u);
    p.put_bulk(objs.data(), static_cast<unsigned>(objs.size()));
    CHECK_EQ(p.available(), 200u);
}

namespace {

void bulk_all_or_none(unsigned cache)
{
    pool p;
    CHECK_EQ(p.create("bulk", 100, 32, cache), 0);
    void *a[100], *b[100];
    CHECK_EQ(p.get_bulk(a, 60), 0);
    CHECK_EQ(p.available(), 40u);
    for (void *&x : b)
        x = reinterpret_cast<void *>(0x5);
    CHECK_EQ(p.get_bulk(b, 41), -FI_EAGAIN);
    CHECK_EQ(p.available(), 40u); // nothing taken
    for (void *x : b)
        CHECK(x == reinterpret_cast<void *>(0x5)); // nothing written
    CHECK_EQ(p.get_bulk(b, 0), 0);
    CHECK_EQ(p.get_bulk(b, 40), 0);
    CHECK_EQ(p.available(), 0u);
    std::set<void *> all(a, a + 60);
    all.insert(b, b + 40);
    CHECK_EQ(all.size(), 100u);
    CHECK_EQ(p.get_bulk(b, 1), -FI_EAGAIN);
    CHECK_EQ(p.get_bulk(b, 101), -FI_EAGAIN);
    p.put_bulk(a, 60);
    p.put_bulk(b, 40);
    CHECK_EQ(p.available(), 100u);
    CHECK_EQ(p.get_bulk(a, 100), 0);
    p.put_bulk(a, 100);
}

} // namespace

TEST(Pool, BulkIsAllOrNone)
{
    // With a cache, the failing request below first drains the lcore's cache
    // (16 objects) and then fails on the ring: objs must still be untouched.
    for (unsigned cache : {0u, 16u})
        EXPECT_EXIT(child(start::no_huge, [cache] { bulk_all_or_none(cache); }), testing::ExitedWithCode(0), "")
            << "cache " << cache;
}

FRESH_TEST(Pool, BadArgumentsAreEinvalAndDoNotStartTheEnvironment, start::none)
{
    setenv("SHUNT_HUGEPAGES", "off", 1);
    setenv("SHUNT_MEMORY_MB", "64", 1);
    pool p;
    CHECK_EQ(p.create("", 10, 8), -FI_EINVAL);
    CHECK_EQ(p.create(std::string(pool_name_max + 1, 'n'), 10, 8), -FI_EINVAL);
    CHECK_EQ(p.create("a b", 10, 8), -FI_EINVAL);
    CHECK_EQ(p.create("tab\t", 10, 8), -FI_EINVAL);
    CHECK_EQ(p.create("ok", 0, 8), -FI_EINVAL);
    CHECK_EQ(p.create("ok", 10, 0), -FI_EINVAL);
    CHECK_EQ(p.create("ok", std::size_t{UINT_MAX} + 1, 8), -FI_EINVAL);
    CHECK_EQ(p.create("ok", 10, std::size_t{UINT_MAX} + 1), -FI_EINVAL);
    CHECK_EQ(p.create("ok", 100000, 8, pool_cache_max + 1), -FI_EINVAL);
    CHECK_EQ(p.create("ok", 100, 8, 68), -FI_EINVAL); // 68 * 1.5 > 100
    CHECK(!p.valid());
    CHECK(!initialized()); // rejected before the EAL was touched
    // Calls on an object without a pool.
    void *o = reinterpret_cast<void *>(0x9);
    CHECK_EQ(p.get(o), -FI_EINVAL);
    CHECK(o == reinterpret_cast<void *>(0x9));
    CHECK_EQ(p.get_bulk(&o, 1), -FI_EINVAL);
    p.put(o); // no-op
    p.put_bulk(&o, 1);
    CHECK_EQ(p.available(), 0u);
    CHECK_EQ(p.capacity(), 0u);
    CHECK_EQ(p.element_size(), 0u);
    p.destroy();
    // The limits themselves are accepted.
    CHECK_EQ(p.create(std::string(pool_name_max, 'n'), 100, 8, 67), 0); // 67 * 1.5 rounds down to 100
    CHECK(initialized()); // create() started the environment
    CHECK_EQ(p.create("other", 10, 8), -FI_EBUSY);
    CHECK_EQ(p.capacity(), 100u);
    pool q;
    CHECK_EQ(q.create("bigcache", 1024, 8, pool_cache_max), 0);
}

FRESH_TEST(Pool, DuplicateNameIsEexist, start::no_huge)
{
    pool a, b;
    CHECK_EQ(a.create("dup", 10, 8), 0);
    CHECK_EQ(b.create("dup", 10, 8), -FI_EEXIST);
    CHECK(!b.valid());
    CHECK_EQ(a.available(), 10u);
    a.destroy();
    CHECK(!a.valid());
    a.destroy(); // idempotent
    CHECK_EQ(b.create("dup", 10, 8), 0); // the name is free again
}

FRESH_TEST(Pool, MoveTransfersThePool, start::no_huge)
{
    pool a;
    CHECK_EQ(a.create("mv1", 16, 8), 0);
    rte_mempool *raw = a.raw();
    pool b(std::move(a));
    CHECK(!a.valid());
    CHECK(b.raw() == raw);
    a.destroy(); // does not touch b's pool
    void *o;
    CHECK_EQ(b.get(o), 0);
    b.put(o);
    pool c;
    CHECK_EQ(c.create("mv2", 16, 8), 0);
    c = std::move(b); // c's own pool is destroyed first
    CHECK(c.raw() == raw);
    pool d;
    CHECK_EQ(d.create("mv2", 16, 8), 0); // so its name is free
    CHECK_EQ(c.capacity(), 16u);
}

FRESH_TEST(Pool, ConcurrentGetPutConservesObjects, start::no_huge)
{
    constexpr unsigned count = 2047, workers = 4, rounds = 20000;
    struct obj {
        std::atomic<unsigned> owner; // 0 free, else worker + 1
        char pad[60];
    };
    pool p;
    CHECK_EQ(p.create("conc", count, sizeof(obj), 64), 0);
    // Mark every object free (objects are uninitialised memory).
    std::vector<void *> all(count);
    CHECK_EQ(p.get_bulk(all.data(), count), 0);
    for (void *x : all)
        new (x) obj{};
    p.put_bulk(all.data(), count);

    std::atomic<unsigned> double_owned{0}, registered{0};
    std::vector<std::thread> ts;
    for (unsigned w = 0; w < workers; w++)
        ts.emplace_back([&, w] {
            // Workers 0..2 become lcores (per-lcore caches); worker 3
            // stays unregistered and uses the shared ring.
            bool lcore = w < 3 && rte_thread_register() == 0;
            registered += lcore;
            std::mt19937 rng(w);
            void *held[32];
            for (unsigned r = 0; r < rounds; r++) {
                unsigned n = 1 + rng() % 32;
                int rc;
                if (n == 1)
                    rc = p.get(held[0]);
                else
                    rc = p.get_bulk(held, n);
                if (rc != 0) {
                    sched_yield(); // another thread holds them: let it run
                    continue;
                }
                for (unsigned i = 0; i < n; i++) {
                    unsigned expect = 0;
                    if (!static_cast<obj *>(held[i])->owner.compare_exchange_strong(expect, w + 1))
                        double_owned++;
                }
                for (unsigned i = 0; i < n; i++)
                    static_cast<obj *>(held[i])->owner.store(0);
                if (n == 1)
                    p.put(held[0]);
                else
                    p.put_bulk(held, n);
            }
            if (lcore) {
                // Hand the cached objects back before giving up the lcore id.
                rte_mempool_cache_flush(rte_mempool_default_cache(p.raw(), rte_lcore_id()), p.raw());
                rte_thread_unregister();
            }
        });
    for (auto &t : ts)
        t.join();
    CHECK_EQ(registered.load(), 3u);
    CHECK_EQ(double_owned.load(), 0u);
    CHECK_EQ(p.available(), std::size_t{count});
    // Every object is back and distinct.
    CHECK_EQ(p.get_bulk(all.data(), count), 0);
    CHECK_EQ(std::set<void *>(all.begin(), all.end()).size(), std::size_t{count});
    for (void *x : all)
        CHECK_EQ(static_cast<obj *>(x)->owner.load(), 0u);
    p.put_bulk(all.data(), count);
}

FRESH_TEST(Pool, CreateStartsTheEnvironment, start::none)
{
    setenv("SHUNT_HUGEPAGES", "off", 1);
    setenv("SHUNT_MEMORY_MB", "64", 1);
    CHECK(!initialized());
    pool p;
    CHECK_EQ(p.create("auto", 10, 8), 0);
    CHECK(initialized());
    CHECK(!current().hugepages);
}

FRESH_TEST(Pool, PacketBufferPoolsHoldMbufsOfTheDataRoomAsked, start::no_huge)
{
    pool p;
    CHECK_EQ(p.create_mbufs("pkts", 255, 2048 + RTE_PKTMBUF_HEADROOM, 32), 0);
    CHECK_EQ(p.capacity(), 255u);
    rte_mbuf *m = rte_pktmbuf_alloc(p.raw());
    CHECK(m != nullptr);
    CHECK_EQ(rte_pktmbuf_data_room_size(p.raw()), 2048u + RTE_PKTMBUF_HEADROOM);
    CHECK_EQ(rte_pktmbuf_tailroom(m), 2048u);
    CHECK(rte_pktmbuf_append(m, 2048) != nullptr);
    CHECK(rte_pktmbuf_append(m, 1) == nullptr); // exactly the room asked for
    rte_pktmbuf_free(m);
    CHECK_EQ(p.available(), 255u);
    pool bare;
    CHECK_EQ(bare.create_mbufs("bare", 64, 0), 0); // mbufs for external buffers
    rte_mbuf *b = rte_pktmbuf_alloc(bare.raw());
    CHECK(b != nullptr);
    CHECK_EQ(rte_pktmbuf_tailroom(b), 0u);
    rte_pktmbuf_free(b);
    pool dup;
    CHECK_EQ(dup.create_mbufs("pkts", 8, 2048), -FI_EEXIST);
    CHECK_EQ(dup.create_mbufs("big", 8, 65536), -FI_EINVAL);
    CHECK_EQ(dup.create_mbufs("tiny", 8, 16), -FI_EINVAL); // less than the headroom
    CHECK_EQ(dup.create_mbufs("sock", 8, 2048, 0, -2), -FI_EINVAL);
    CHECK_EQ(dup.create_mbufs("cache", 8, 2048, 8), -FI_EINVAL);
    CHECK_EQ(p.create_mbufs("again", 8, 2048), -FI_EBUSY);
}

FRESH_TEST(Pool, DestroyAfterFiniIsSafe, start::no_huge)
{
    pool p;
    CHECK_EQ(p.create("late", 10, 8), 0);
    void *h = heap_alloc(128);
    CHECK(h != nullptr);
    fini();
    p.destroy();
    heap_free(h);
    CHECK(!p.valid());
}

FRESH_TEST(Heap, AllocFree, start::no_huge)
{
    auto *a = static_cast<unsigned char *>(heap_alloc(1000));
    CHECK(a != nullptr);
    CHECK_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(a[i], 0);
    std::memset(a, 0xab, 1000);
    void *b = heap_alloc(100, 4096);
    CHECK(b != nullptr);
    CHECK_EQ(reinterpret_cast<std::uintptr_t>(b) % 4096, 0u);
    CHECK(heap_alloc(0) == nullptr);
    CHECK(heap_alloc(64, 3) == nullptr);
    CHECK(heap_alloc(64, 48) == nullptr);
    CHECK(heap_alloc(std::size_t{1} << 50) == nullptr);
    heap_free(a);
    heap_free(b);
    heap_free(nullptr);
    // Freed memory is reused, zeroed again.
    auto *c = static_cast<unsigned char *>(heap_alloc(1000));
    CHECK(c != nullptr);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(c[i], 0);
    heap_free(c);
}

FRESH_TEST(Heap, AllocStartsTheEnvironment, start::none)
{
    setenv("SHUNT_HUGEPAGES", "off", 1);
    setenv("SHUNT_MEMORY_MB", "64", 1);
    void *p = heap_alloc(64);
    CHECK(p != nullptr);
    CHECK(initialized());
    heap_free(p);
}

namespace {

void in_hugepages()
{
    CHECK(current().hugepages);
    pool p;
    CHECK_EQ(p.create("huge", 1023, 256, 32), 0);
    void *objs[64];
    CHECK_EQ(p.get_bulk(objs, 64), 0);
    for (void *o : objs)
        std::memset(o, 1, 256);
    p.put_bulk(objs, 64);
    CHECK_EQ(p.available(), 1023u);
    void *m = heap_alloc(1 << 20);
    CHECK(m != nullptr);
    heap_free(m);
}

} // namespace

TEST(Pool, InHugepages)
{
    hugepage_info h = probe_hugepages();
    if (h.free * (h.page_size >> 20) < 64)
        GTEST_SKIP() << "fewer than 64 MiB of free hugepages (reserve with sysctl vm.nr_hugepages=N)";
    EXPECT_EXIT(child(start::automatic, in_hugepages), testing::ExitedWithCode(0), "");
}
