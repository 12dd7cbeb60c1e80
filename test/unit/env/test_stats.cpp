// Statistics: bucket arithmetic, single-writer counters read racily, the
// registry, io_block and its hooks, SHUNT_TELEMETRY, and DPDK's telemetry
// socket (Shunt's commands, the runtime directory's lifetime). Tests that
// initialise the EAL run in a child process (death-test machinery).
#include "env/env.h"
#include "env/errors.h"
#include "env/lcore.h"
#include "env/mempool.h"
#include "env/stats.h"
#include "env/telemetry.h"

#include "no_huge.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>

using namespace shunt;
using namespace shunt::env;
using shunt::test::no_huge;
using stats::histogram;

namespace {

bool exists(const std::string &p)
{
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
}

/** A block of our own for the registry tests. */
struct my_block {
    stats::counter hits;
    stats::gauge level;
    stats::histogram lat;
};
const stats::field my_fields[] = {
    SHUNT_STATS_FIELD(my_block, hits, counter, none, "hits"),
    SHUNT_STATS_FIELD(my_block, level, gauge, bytes, "level"),
    SHUNT_STATS_FIELD(my_block, lat, histogram, ns, "latency"),
};
const stats::schema my_schema{"test.block", my_fields, 3};

} // namespace

TEST(StatsHistogram, BucketsCoverEveryValueOnceAndAreNarrow)
{
    // Every bucket's edges are contiguous and increasing.
    for (unsigned b = 0; b + 1 < histogram::buckets; b++) {
        ASSERT_EQ(histogram::bucket_high(b) + 1, histogram::bucket_low(b + 1)) << b;
        ASSERT_EQ(histogram::bucket_of(histogram::bucket_low(b)), b);
        ASSERT_EQ(histogram::bucket_of(histogram::bucket_high(b)), b);
    }
    std::mt19937_64 rng(7);
    for (int i = 0; i < 200000; i++) {
        const std::uint64_t v = rng() >> (rng() % 64);
        const unsigned b = histogram::bucket_of(v);
        ASSERT_LT(b, histogram::buckets);
        ASSERT_LE(histogram::bucket_low(b), v);
        ASSERT_GE(histogram::bucket_high(b), v);
        if (b + 1 < histogram::buckets && v >= 16) { // 8 buckets per power of two: at most 12.5 % wide
            ASSERT_LE(histogram::bucket_high(b) - histogram::bucket_low(b) + 1, histogram::bucket_low(b) / 8 + 1) << v;
        }
    }
    for (std::uint64_t v = 0; v < 16; v++)
        EXPECT_EQ(histogram::bucket_of(v), v) << "exact below 16";
    EXPECT_EQ(histogram::bucket_of(~0ull), histogram::buckets - 1);
    EXPECT_EQ(histogram::bucket_of(1ull << 41), histogram::buckets - 1);
    EXPECT_EQ(histogram::bucket_of((1ull << 41) - 1), histogram::buckets - 1);
    EXPECT_LT(histogram::bucket_of((1ull << 40) - 1), histogram::buckets - 8);
}

TEST(StatsCounter, AddsAnyAmountAndWrapsAsAnUnsignedInteger)
{
    // Amounts an instruction can carry as an immediate, ones it cannot, and
    // amounts only known at run time.
    stats::counter c;
    c.add();
    c.add(0);
    c.add(0x7fffffff);
    EXPECT_EQ(c.get(), 0x80000000u);
    c.add(1ull << 40);
    EXPECT_EQ(c.get(), (1ull << 40) + 0x80000000u);
    volatile std::uint64_t n = 0xfffffffffull;
    c.add(n);
    EXPECT_EQ(c.get(), (1ull << 40) + 0x80000000u + 0xfffffffffull);
    c.reset();
    c.add(~0ull);
    c.add(2);
    EXPECT_EQ(c.get(), 1u) << "wraps modulo 2^64";
    // A histogram's buckets and sum take the same adds.
    histogram h;
    h.record(~0ull);
    h.record(3);
    h.record(3);
    EXPECT_EQ(h.count(histogram::buckets - 1), 1u);
    EXPECT_EQ(h.count(3), 2u);
    EXPECT_EQ(h.sum(), 5u);
    EXPECT_EQ(h.max(), ~0ull);
}

TEST(StatsHistogram, PercentilesWithinOneBucketOfExact)
{
    stats::registration r;
    // Read out through a registered block.
    my_block blk;
    for (std::uint64_t v = 1; v <= 100000; v++)
        blk.lat.record(v);
    ASSERT_EQ(r.open("test.pct", my_schema, &blk), 0);
    stats::block_snapshot s;
    ASSERT_EQ(stats::read("test.pct", s), 0);
    const stats::field_value *lat = s.find("lat");
    ASSERT_NE(lat, nullptr);
    EXPECT_EQ(lat->k, stats::kind::histogram);
    EXPECT_EQ(lat->hist.total, 100000u);
    EXPECT_EQ(lat->hist.sum, 100000ull * 100001 / 2);
    EXPECT_EQ(lat->hist.max, 100000u);
    EXPECT_EQ(lat->hist.min(), 1u);
    EXPECT_DOUBLE_EQ(lat->hist.mean(), 50000.5);
    for (double p : {50.0, 90.0, 99.0, 99.9, 99.99}) {
        const double exact = p / 100 * 100000;
        const double got = static_cast<double>(lat->hist.percentile(p));
        EXPECT_GE(got, exact) << p;
        EXPECT_LE(got, exact * 1.125 + 1) << p;
    }
    EXPECT_EQ(lat->hist.percentile(100), 100000u);
    blk.lat.reset();
    ASSERT_EQ(stats::read("test.pct", s), 0);
    EXPECT_EQ(s.find("lat")->hist.total, 0u);
    EXPECT_EQ(s.find("lat")->hist.percentile(50), 0u);
}

TEST(StatsRegistry, OpenReadCloseAndBadInput)
{
    my_block b;
    stats::registration r, dup;
    EXPECT_EQ(r.open("", my_schema, &b), -FI_EINVAL);
    EXPECT_EQ(r.open("has space", my_schema, &b), -FI_EINVAL);
    EXPECT_EQ(r.open("a,b", my_schema, &b), -FI_EINVAL);
    EXPECT_EQ(r.open(std::string(64, 'x'), my_schema, &b), -FI_EINVAL);
    EXPECT_EQ(r.open("test.reg", my_schema, nullptr), -FI_EINVAL);
    const stats::field bad_fields[] = {SHUNT_STATS_FIELD(my_block, hits, counter, none, ""),
                                       SHUNT_STATS_FIELD(my_block, hits, counter, none, "")};
    EXPECT_EQ(r.open("test.reg", stats::schema{"x", bad_fields, 2}, &b), -FI_EINVAL) << "duplicate field";
    const stats::field upper[] = {{"Hits", stats::kind::counter, stats::unit::none, 0, ""}};
    EXPECT_EQ(r.open("test.reg", stats::schema{"x", upper, 1}, &b), -FI_EINVAL) << "field names are [a-z0-9_]";
    EXPECT_FALSE(r.is_open());

    ASSERT_EQ(r.open("test.reg", my_schema, &b), 0);
    EXPECT_EQ(r.open("test.reg2", my_schema, &b), -FI_EBUSY);
    EXPECT_EQ(dup.open("test.reg", my_schema, &b), -FI_EEXIST);
    b.hits.add(3);
    b.hits.add();
    b.level.set(77);
    b.level.raise(5);
    b.lat.record(1000);
    stats::block_snapshot s;
    ASSERT_EQ(stats::read("test.reg", s), 0);
    EXPECT_EQ(s.name, "test.reg");
    EXPECT_EQ(s.type, "test.block");
    ASSERT_EQ(s.fields.size(), 3u);
    EXPECT_EQ(s.find("hits")->value, 4u);
    EXPECT_EQ(s.find("level")->value, 77u);
    EXPECT_EQ(s.find("level")->u, stats::unit::bytes);
    EXPECT_EQ(s.find("lat")->hist.total, 1u);
    EXPECT_EQ(s.find("nosuch"), nullptr);
    auto names = stats::list();
    EXPECT_NE(std::find(names.begin(), names.end(), "test.reg"), names.end());
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    auto all = stats::read_all();
    EXPECT_EQ(all.size(), names.size());
    r.close();
    EXPECT_EQ(stats::read("test.reg", s), -FI_ENOENT);
    EXPECT_EQ(dup.open("test.reg", my_schema, &b), 0) << "the name is free again";
}

TEST(StatsRegistry, RacyReadsWhileOneThreadWrites)
{
    // One writer, plain relaxed stores; a reader on another thread never
    // sees a value go backwards, and sees the final one after join.
    my_block b;
    stats::registration r;
    ASSERT_EQ(r.open("test.race", my_schema, &b), 0);
    constexpr std::uint64_t n = 2000000;
    std::atomic<bool> done{false};
    std::atomic<std::uint64_t> reads{0};
    std::thread w([&] {
        for (std::uint64_t i = 0; i < n; i++) {
            b.hits.add();
            b.lat.record(i & 1023);
            // Halfway, let the reader in (a loaded machine may not have
            // scheduled it yet); bounded, so a reader that never runs
            // fails the reads check below instead of hanging.
            if (i == n / 2)
                for (int t = 0; t < 10000 && reads.load() < 2; t++)
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        done.store(true);
    });
    std::uint64_t last = 0;
    bool backwards = false;
    while (!done.load()) {
        stats::block_snapshot s;
        ASSERT_EQ(stats::read("test.race", s), 0);
        const std::uint64_t v = s.find("hits")->value;
        backwards |= v < last;
        last = v;
        reads.fetch_add(1);
    }
    w.join();
    EXPECT_FALSE(backwards);
    stats::block_snapshot s;
    ASSERT_EQ(stats::read("test.race", s), 0);
    EXPECT_EQ(s.find("hits")->value, n);
    EXPECT_EQ(s.find("lat")->hist.total, n);
    EXPECT_GE(reads.load(), 2u);
}

TEST(StatsIo, HooksCountAndNullIsANoOp)
{
    stats::on_tx(nullptr, 8);
    stats::on_rx(nullptr, 8);
    stats::on_error(nullptr);
    stats::on_drop(nullptr);
    stats::on_retransmit(nullptr);
    stats::on_depth(nullptr, 3);
    EXPECT_EQ(stats::stamp(nullptr), 0u);
    stats::on_complete(nullptr, 1);
    if (!stats::enabled())
        GTEST_SKIP() << "SHUNT_TELEMETRY=0 in this environment";
    stats::io_block io;
    ASSERT_EQ(io.open("test.io.0"), 0);
    stats::io_stats *s = io.get();
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s) % 64, 0u);
    for (int i = 0; i < 10; i++)
        stats::on_tx(s, 100);
    stats::on_rx(s, 7);
    stats::on_error(s);
    stats::on_drop(s, 2);
    stats::on_retransmit(s);
    stats::on_depth(s, 9);
    stats::on_depth(s, 4);
    std::uint64_t t = stats::stamp(s);
    EXPECT_NE(t, 0u);
    stats::on_complete(s, t);
    stats::on_complete(s, 0); // posted with telemetry off: ignored
    stats::block_snapshot b;
    ASSERT_EQ(stats::read("test.io.0", b), 0);
    EXPECT_EQ(b.type, "io");
    EXPECT_EQ(b.find("tx_msgs")->value, 10u);
    EXPECT_EQ(b.find("tx_bytes")->value, 1000u);
    EXPECT_EQ(b.find("rx_msgs")->value, 1u);
    EXPECT_EQ(b.find("rx_bytes")->value, 7u);
    EXPECT_EQ(b.find("errors")->value, 1u);
    EXPECT_EQ(b.find("drops")->value, 2u);
    EXPECT_EQ(b.find("retransmits")->value, 1u);
    EXPECT_EQ(b.find("depth")->value, 4u);
    EXPECT_EQ(b.find("depth_max")->value, 9u);
    EXPECT_EQ(b.find("completion")->hist.total, 1u);
    EXPECT_EQ(b.find("completion")->u, stats::unit::cycles);
    stats::io_block other;
    EXPECT_EQ(other.open("test.io.0"), -FI_EEXIST);
    EXPECT_EQ(other.get(), nullptr);
    io.close();
    EXPECT_EQ(io.get(), nullptr);
    EXPECT_EQ(stats::read("test.io.0", b), -FI_ENOENT);
}

TEST(StatsIo, TelemetryOffGivesNoBlockAndNoSocket)
{
    EXPECT_EXIT(
        {
            setenv("SHUNT_TELEMETRY", "0", 1);
            if (stats::enabled())
                std::exit(2);
            stats::io_block io;
            if (io.open("test.io.off") != 0 || io.get() != nullptr)
                std::exit(3);
            if (init(no_huge()) != 0)
                std::exit(4);
            const state &s = current();
            bool no_flag = std::find(s.eal_argv.begin(), s.eal_argv.end(), "--no-telemetry") != s.eal_argv.end();
            if (!no_flag || s.telemetry || !s.runtime_dir.empty())
                std::exit(5);
            if (exists(telemetry::socket_path(getpid())))
                std::exit(6);
            // The runtime directory is gone right after init.
            std::string dir = telemetry::runtime_base() + "/dpdk/" + telemetry::file_prefix(getpid());
            std::exit(exists(dir) ? 7 : 0);
        },
        testing::ExitedWithCode(0), "");
}

TEST(StatsIo, BadTelemetryValueFailsInit)
{
    EXPECT_EXIT(
        {
            setenv("SHUNT_TELEMETRY", "sometimes", 1);
            std::exit(init(no_huge()) == -FI_EINVAL ? 0 : 1);
        },
        testing::ExitedWithCode(0), "SHUNT_TELEMETRY");
}

TEST(Telemetry, SocketServesShuntCommandsAndGoesAwayAtFini)
{
    EXPECT_EXIT(
        {
            unsetenv("SHUNT_TELEMETRY");
            if (init(no_huge()) != 0)
                std::exit(2);
            const state &st = current();
            const std::string path = telemetry::socket_path(getpid());
            if (!st.telemetry || st.runtime_dir + "/dpdk_telemetry.v2" != path || !exists(path))
                std::exit(3);
            my_block b;
            b.hits.add(42);
            b.lat.record(5000);
            stats::registration r;
            if (r.open("test.sock", my_schema, &b) != 0)
                std::exit(4);
            pool p;
            if (p.create("telemetry_pool", 64, 32) != 0)
                std::exit(5);
            void *o;
            if (p.get(o) != 0)
                std::exit(6);
            telemetry::client c;
            if (c.connect(path) != 0 || c.greeting().find("max_output_len") == std::string::npos)
                std::exit(7);
            std::string reply;
            if (c.query("/shunt/list", reply) != 0 || reply.find("\"test.sock\"") == std::string::npos ||
                reply.find("\"env.pool.telemetry_pool\"") == std::string::npos)
                std::exit(8);
            if (c.query("/shunt/stats,test.sock", reply) != 0 || reply.find("\"hits\":42") == std::string::npos ||
                reply.find("\"lat_count\":1") == std::string::npos || reply.find("\"lat_max_ns\":5000") == std::string::npos ||
                reply.find("\"lat_le_ns\":[") == std::string::npos || reply.find("\"lat_n\":[1]") == std::string::npos)
                std::exit(9);
            if (c.query("/shunt/stats,env.pool.telemetry_pool", reply) != 0 ||
                reply.find("\"in_use\":1") == std::string::npos || reply.find("\"capacity\":64") == std::string::npos)
                std::exit(10);
            if (c.query("/shunt/stats,nosuch", reply) != 0 || reply.find("null") == std::string::npos)
                std::exit(11);
            if (c.query("/shunt/info", reply) != 0 || reply.find("\"pid\":" + std::to_string(getpid())) == std::string::npos)
                std::exit(12);
            std::vector<pid_t> procs = telemetry::processes();
            if (std::find(procs.begin(), procs.end(), getpid()) == procs.end())
                std::exit(13);
            p.put(o);
            p.destroy();
            c.close();
            r.close();
            fini();
            std::exit(exists(path) ? 14 : 0);
        },
        testing::ExitedWithCode(0), "");
}

TEST(Telemetry, RuntimeDirectoryRemovedAtExitAndStaleOnesByTheNextInit)
{
    // A child initialises and exits without fini(): its directory goes at exit.
    // One file per test process: the death test's child runs this body
    // again (gtest's threadsafe style), so the name travels in the environment.
    if (!getenv("SHUNT_TEST_CHILD_PIDFILE"))
        setenv("SHUNT_TEST_CHILD_PIDFILE",
               (testing::TempDir() + "telemetry-child-" + std::to_string(getpid()) + ".pid").c_str(), 1);
    const std::string pidfile = getenv("SHUNT_TEST_CHILD_PIDFILE");
    EXPECT_EXIT(
        {
            if (init(no_huge()) != 0 || !exists(telemetry::socket_path(getpid())))
                std::exit(1);
            std::ofstream(pidfile) << getpid();
            std::exit(0);
        },
        testing::ExitedWithCode(0), "");
    pid_t child = 0;
    std::ifstream(pidfile) >> child;
    ASSERT_GT(child, 0);
    const std::string dir = telemetry::runtime_base() + "/dpdk/" + telemetry::file_prefix(child);
    EXPECT_FALSE(exists(dir)) << "removed when the process exited";
    int status = 0;

    // A directory of a process killed before it could: removed by the next init.
    pid_t dead = fork();
    ASSERT_GE(dead, 0);
    if (dead == 0)
        _exit(0);
    ASSERT_EQ(waitpid(dead, &status, 0), dead);
    const std::string stale = telemetry::runtime_base() + "/dpdk/" + telemetry::file_prefix(dead);
    // Made under a name no init looks at, then renamed: another process's
    // init running meanwhile (CI runs tests in parallel) may remove the whole
    // directory, as ours would, but never sees it half made.
    const std::string making = telemetry::runtime_base() + "/dpdk/making-" + std::to_string(getpid());
    ASSERT_EQ(std::system(("mkdir -p '" + making + "' && touch '" + making + "/dpdk_telemetry.v2'").c_str()), 0);
    ASSERT_EQ(rename(making.c_str(), stale.c_str()), 0) << std::strerror(errno);
    EXPECT_EXIT({ std::exit(init(no_huge()) == 0 ? 0 : 1); }, testing::ExitedWithCode(0), "");
    EXPECT_FALSE(exists(stale)) << "a dead process's directory is cleaned up";
    std::remove(pidfile.c_str()); // not before: the death test's child reads it again
}

TEST(Telemetry, ProgressAndPoolsArePublished)
{
    EXPECT_EXIT(
        {
            if (init(no_huge()) != 0)
                std::exit(2);
            static std::atomic<int> calls{0};
            int h = progress::add([](void *) noexcept { return calls.fetch_add(1) % 2; }, nullptr);
            if (h <= 0)
                std::exit(3);
            while (calls.load() < 1000)
                std::this_thread::yield();
            stats::block_snapshot b;
            if (stats::read("env.progress", b) != 0)
                std::exit(4);
            if (b.find("pollers")->value != 1 || b.find("passes")->value == 0 || b.find("busy_passes")->value == 0 ||
                b.find("work")->value == 0 || b.find("work_per_pass")->hist.total == 0)
                std::exit(5);
            (void)progress::remove(h);
            pool p;
            if (p.create("stats_pool", 4, 16) != 0)
                std::exit(6);
            void *objs[4];
            if (p.get_bulk(objs, 4) != 0)
                std::exit(7);
            void *x;
            if (p.get(x) != -FI_EAGAIN || p.get_bulk(objs, 1) != -FI_EAGAIN)
                std::exit(8);
            if (stats::read("env.pool.stats_pool", b) != 0 || b.find("in_use")->value != 4 ||
                b.find("available")->value != 0 || b.find("empty")->value != 2 || b.find("capacity")->value != 4)
                std::exit(9);
            p.put_bulk(objs, 4);
            if (stats::read("env.pool.stats_pool", b) != 0 || b.find("in_use")->value != 0)
                std::exit(10);
            p.destroy();
            std::exit(stats::read("env.pool.stats_pool", b) == -FI_ENOENT ? 0 : 11);
        },
        testing::ExitedWithCode(0), "");
}
