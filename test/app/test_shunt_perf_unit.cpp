// shunt-perf internals: exact percentiles, the summary arithmetic, the
// configuration's wire form, and size / core parsing.
#include "env/tsc.h"
#include "loops.h"
#include "options.h"
#include "stats.h"

#include <getopt.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

using namespace shunt::perf;

namespace {

std::vector<std::uint64_t> one_to(std::uint64_t n)
{
    std::vector<std::uint64_t> v(n);
    std::iota(v.begin(), v.end(), 1);
    return v;
}

int parse(std::vector<std::string> args, options &o)
{
    std::vector<char *> argv;
    args.insert(args.begin(), "shunt-perf");
    for (auto &a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    optind = 0; // full re-initialisation of getopt between parses
    return parse_command_line(static_cast<int>(args.size()), argv.data(), o);
}

} // namespace

TEST(Percentile, NearestRankOverOneToHundred)
{
    auto v = one_to(100);
    EXPECT_EQ(percentile(v, 50), 50u);
    EXPECT_EQ(percentile(v, 90), 90u);
    EXPECT_EQ(percentile(v, 99), 99u);
    EXPECT_EQ(percentile(v, 99.9), 100u);
    EXPECT_EQ(percentile(v, 100), 100u);
    EXPECT_EQ(percentile(v, 0), 1u);
}

TEST(Percentile, ExactProductsDoNotRoundUp)
{
    auto v = one_to(1000);
    EXPECT_EQ(percentile(v, 99.9), 999u);
    EXPECT_EQ(percentile(v, 99.99), 1000u);
    auto w = one_to(10000);
    EXPECT_EQ(percentile(w, 99.99), 9999u);
    EXPECT_EQ(percentile(w, 50), 5000u);
}

TEST(Percentile, SingleAndEmpty)
{
    EXPECT_EQ(percentile({7}, 50), 7u);
    EXPECT_EQ(percentile({7}, 99.99), 7u);
    EXPECT_EQ(percentile({}, 50), 0u);
}

TEST(Summary, PingpongIsHalfTheRoundTripAndSortsSamples)
{
    const std::uint64_t hz = shunt::env::tsc::hz();
    // Round trips of 1..1000 us, shuffled: one-way p50 is 250 us.
    std::vector<std::uint64_t> rt;
    std::uint64_t total = 0;
    for (std::uint64_t i = 1000; i >= 1; i--) {
        rt.push_back(i * hz / 1000000);
        total += rt.back();
    }
    size_result r;
    r.size = 64;
    r.iterations = rt.size();
    summarize_pingpong(rt, total, r);
    ASSERT_TRUE(r.has_latency);
    EXPECT_TRUE(std::is_sorted(rt.begin(), rt.end()));
    EXPECT_NEAR(r.one_way.min, 500.0, 1.0);
    EXPECT_NEAR(r.one_way.p50, 250000.0, 10.0);
    EXPECT_NEAR(r.one_way.p90, 450000.0, 10.0);
    EXPECT_NEAR(r.one_way.p99, 495000.0, 10.0);
    EXPECT_NEAR(r.one_way.p999, 499500.0, 10.0);
    EXPECT_NEAR(r.one_way.max, 500000.0, 10.0);
    EXPECT_NEAR(r.one_way.mean, 250250.0, 10.0);
    // 2000 messages of 64 B in the elapsed time.
    EXPECT_NEAR(r.msg_rate_mmps, 2000.0 / r.elapsed_ns * 1e3, 1e-9);
    EXPECT_NEAR(r.bandwidth_mbps, r.msg_rate_mmps * 64, 1e-6);
}

TEST(Summary, StreamHasNoLatency)
{
    size_result r;
    r.size = 1000;
    r.iterations = 1000000;
    summarize_stream(shunt::env::tsc::hz(), r); // one second
    EXPECT_FALSE(r.has_latency);
    EXPECT_NEAR(r.elapsed_ns, 1e9, 1e3);
    EXPECT_NEAR(r.msg_rate_mmps, 1.0, 1e-6);
    EXPECT_NEAR(r.bandwidth_mbps, 1000.0, 1e-3);
}

TEST(Wire, RoundTrip)
{
    test_config c;
    c.test = test_kind::rate;
    c.provider = "raw-line";
    c.vq = true;
    c.ep_type = "msg";
    c.qp_type = "uc";
    c.op = "tagged";
    c.window = 17;
    c.verify = true;
    c.shared_buffers = true;
    c.threading = "safe";
    c.domain = "net_af_packet0";
    test_config d;
    ASSERT_EQ(from_wire(to_wire(c), d), 0);
    EXPECT_EQ(d.test, c.test);
    EXPECT_EQ(d.provider, c.provider);
    EXPECT_EQ(d.vq, c.vq);
    EXPECT_EQ(d.ep_type, c.ep_type);
    EXPECT_EQ(d.qp_type, c.qp_type);
    EXPECT_EQ(d.op, c.op);
    EXPECT_EQ(d.window, c.window);
    EXPECT_EQ(d.verify, c.verify);
    EXPECT_EQ(d.shared_buffers, c.shared_buffers);
    EXPECT_EQ(d.threading, c.threading);
    EXPECT_EQ(d.domain, c.domain);
}

TEST(Wire, MalformedIsRejectedAndLeavesTheOutputAlone)
{
    test_config d;
    d.provider = "untouched";
    const std::string good = to_wire(test_config{});
    EXPECT_LT(from_wire("", d), 0);
    EXPECT_LT(from_wire("test=pingpong", d), 0);                        // keys missing
    EXPECT_LT(from_wire(good + " extra=1", d), 0);                      // unknown key
    EXPECT_LT(from_wire(good + " junk", d), 0);                         // no '='
    std::string w0 = good;
    w0.replace(w0.find("window=64"), 9, "window=0");
    EXPECT_LT(from_wire(w0, d), 0);
    std::string t = good;
    t.replace(t.find("test=pingpong"), 13, "test=nope");
    EXPECT_LT(from_wire(t, d), 0);
    std::string sb = good;
    sb.replace(sb.find("shared=0"), 8, "shared=2");
    EXPECT_LT(from_wire(sb, d), 0);
    std::string th = good;
    th.replace(th.find("threading=domain"), 16, "threading=none");
    EXPECT_LT(from_wire(th, d), 0);
    EXPECT_EQ(d.provider, "untouched");
}

TEST(CommandLine, SizesAllListAndSuffixes)
{
    options o;
    ASSERT_EQ(parse({"pingpong", "-S", "all", "--cores", "0,1"}, o), -1);
    ASSERT_EQ(o.sizes.size(), 23u);
    EXPECT_EQ(o.sizes.front(), 1u);
    EXPECT_EQ(o.sizes.back(), 4u << 20);
    EXPECT_TRUE(o.sweep);
    options p;
    ASSERT_EQ(parse({"bw", "-S", "8,4K,1M,4M", "-W", "16", "--cores", "0,1"}, p), -1);
    EXPECT_EQ(p.sizes, (std::vector<std::size_t>{8, 4096, 1u << 20, 4u << 20}));
    EXPECT_EQ(p.cfg.test, test_kind::bw);
    EXPECT_EQ(p.cfg.window, 16u);
    // No -p: the first endpoint-level transport of this build (shm when
    // lib/fabric is built, else the floor).
    const transport_ops *first = nullptr;
    for (const transport_ops *t : transports())
        if (!t->vq && !first)
            first = t;
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(p.cfg.provider, first->name);
    EXPECT_EQ(p.who, role::launcher);
}

TEST(CommandLine, SweepIsCutToWhatTheTransportCarries)
{
    const test_config ud{test_kind::pingpong, "shm", true, "rdm", "ud", "msg"};
    const transport_ops *t = find_transport(ud);
    if (!t || !t->max_msg)
        GTEST_SKIP() << "vq shm driver not in this build";
    const std::size_t mtu = t->max_msg(ud);
    ASSERT_GT(mtu, 0u);
    options o;
    ASSERT_EQ(parse({"pingpong", "--vq", "--driver", "shm", "--qp-type", "ud", "-S", "all", "--cores", "0,1"}, o), -1);
    ASSERT_FALSE(o.sizes.empty());
    EXPECT_EQ(o.sizes.front(), 1u);
    EXPECT_LE(o.sizes.back(), mtu);
    EXPECT_GT(o.sizes.back() * 2, mtu); // every power of two up to the MTU, no further
    options a;
    testing::internal::CaptureStderr();
    int rc = parse({"pingpong", "-p", "shm", "--op", "atomic", "-S", "all", "--cores", "0,1"}, a);
    std::string err = testing::internal::GetCapturedStderr();
    if (rc == 2 && err.find("offers no") != std::string::npos)
        GTEST_SKIP() << "shm provider not in this build";
    ASSERT_EQ(rc, -1) << err;
    EXPECT_EQ(a.sizes, std::vector<std::size_t>{8}); // one FI_UINT64 element
    options b;
    testing::internal::CaptureStderr();
    EXPECT_EQ(parse({"pingpong", "--vq", "--driver", "shm", "--qp-type", "ud", "-S", std::to_string(mtu + 1),
                     "--cores", "0,1"}, b), 2);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("over the largest message"), std::string::npos);
}

TEST(CommandLine, RolesFromServerFlagAndAddress)
{
    options c;
    ASSERT_EQ(parse({"rate", "127.0.0.1", "-P", "1234", "--cores", "0"}, c), -1);
    EXPECT_EQ(c.who, role::client);
    EXPECT_EQ(c.address, "127.0.0.1");
    EXPECT_EQ(c.port, 1234);
    options s;
    ASSERT_EQ(parse({"pingpong", "-s"}, s), -1);
    EXPECT_EQ(s.who, role::server);
}

TEST(CommandLine, BadInputIsExitCodeTwo)
{
    for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
             {"pingpong", "-S", "0"}, {"pingpong", "-S", "4194305"}, {"pingpong", "-p", "nosuch"},
             {"pingpong", "--cores", "0,1023"}, {"pingpong", "-I", "1e3"}, {"pingpong", "-S", "16E"}}) {
        options o;
        testing::internal::CaptureStderr();
        EXPECT_EQ(parse(args, o), 2) << args[1] << ' ' << args[2];
        EXPECT_NE(testing::internal::GetCapturedStderr(), "");
    }
}

TEST(Verify, PatternDetectsAnyWrongByteOrLength)
{
    std::vector<std::byte> buf(4096);
    fill_pattern(buf.data(), buf.size(), 42);
    EXPECT_EQ(check_pattern(buf.data(), 4096, 4096, 42), 0);
    EXPECT_EQ(check_pattern(buf.data(), 4096, 4096, 43), -shunt::FI_EIO);  // another message's pattern
    EXPECT_EQ(check_pattern(buf.data(), 4095, 4096, 42), -shunt::FI_EIO);  // short
    EXPECT_EQ(check_pattern(buf.data(), -shunt::FI_ETIMEDOUT, 4096, 42), -shunt::FI_ETIMEDOUT);
    for (std::size_t at : {std::size_t{0}, std::size_t{47}, std::size_t{48}, std::size_t{4095}}) {
        auto bad = buf;
        bad[at] ^= std::byte{1};
        EXPECT_EQ(check_pattern(bad.data(), 4096, 4096, 42), -shunt::FI_EIO) << at;
    }
    // Consecutive messages differ in every byte position.
    for (std::size_t j = 0; j < 256; j++)
        EXPECT_NE(pattern_byte(1, j), pattern_byte(2, j));
}

TEST(DefaultIterations, FewerForLargeSizesButAtLeastAHundred)
{
    EXPECT_EQ(default_iterations(test_kind::pingpong, 8), 100000u);
    EXPECT_EQ(default_iterations(test_kind::pingpong, 8192), 100000u);
    EXPECT_EQ(default_iterations(test_kind::pingpong, 16384), 50000u);
    EXPECT_EQ(default_iterations(test_kind::bw, 4u << 20), 195u);
    EXPECT_GE(default_iterations(test_kind::bw, 1u << 30), 100u);
}
