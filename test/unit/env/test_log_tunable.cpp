// Logging levels and the tunables table.
#include "env/errors.h"
#include "env/log.h"
#include "env/tsc.h"
#include "env/tunable.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <unistd.h>

using namespace shunt;
using namespace shunt::env;

SHUNT_LOG_COMPONENT(test_log, "testcomp");
SHUNT_TUNABLE(test_int_tunable, "SHUNT_TEST_INT", integer, "42", "a test tunable", "test");

TEST(Log, PerComponentLevels)
{
    ASSERT_EQ(log::set_levels("warning,testcomp:debug"), 0);
    EXPECT_EQ(test_log.current, log::level::debug);
    ASSERT_EQ(log::set_levels("testcomp:error"), 0);
    EXPECT_EQ(test_log.current, log::level::error);
    ASSERT_EQ(log::set_levels("info"), 0);
    EXPECT_EQ(test_log.current, log::level::error) << "a component override outlives a global level";
}

TEST(Log, BadSpecChangesNothing)
{
    ASSERT_EQ(log::set_levels("testcomp:notice"), 0);
    EXPECT_EQ(log::set_levels("testcomp:shout"), -FI_EINVAL);
    EXPECT_EQ(log::set_levels(":info"), -FI_EINVAL);
    EXPECT_EQ(test_log.current, log::level::notice);
}

TEST(Log, EmitsWithPrefix)
{
    ASSERT_EQ(log::set_levels("testcomp:info"), 0);
    testing::internal::CaptureStderr();
    SHUNT_LOG(test_log, info, "hello %d", 7);
    SHUNT_LOG(test_log, debug, "hidden");
    std::string out = testing::internal::GetCapturedStderr();
    EXPECT_EQ(out, "shunt testcomp info: hello 7\n");
}

TEST(Tunable, DeclaredOnceAndReadable)
{
    const tunable *t = find_tunable("SHUNT_TEST_INT");
    ASSERT_NE(t, nullptr);
    std::int64_t v = 0;
    unsetenv("SHUNT_TEST_INT");
    ASSERT_EQ(t->as_int(v), 0);
    EXPECT_EQ(v, 42);
    setenv("SHUNT_TEST_INT", "0x10", 1);
    ASSERT_EQ(t->as_int(v), 0);
    EXPECT_EQ(v, 16);
    setenv("SHUNT_TEST_INT", "12abc", 1);
    EXPECT_EQ(t->as_int(v), -FI_EINVAL);
    unsetenv("SHUNT_TEST_INT");
    bool b;
    EXPECT_EQ(t->as_bool(b), -FI_EINVAL);
}

TEST(Tunable, EnvLayerTunablesAreListed)
{
    for (const char *name : {"SHUNT_LCORES", "SHUNT_HUGEPAGES", "SHUNT_LOG_LEVEL", "SHUNT_MEMORY_MB",
                             "SHUNT_EAL_ARGS"}) {
        const tunable *t = find_tunable(name);
        ASSERT_NE(t, nullptr) << name;
        EXPECT_GT(std::string(t->help).size(), 10u) << name;
    }
    auto all = tunables();
    for (std::size_t i = 1; i < all.size(); i++)
        EXPECT_LT(std::string(all[i - 1]->name), std::string(all[i]->name));
}

TEST(Tsc, CalibratedAndMonotonic)
{
    std::uint64_t f = tsc::hz();
    EXPECT_GT(f, 100000000ull);   // > 100 MHz
    EXPECT_LT(f, 10000000000ull); // < 10 GHz
    std::uint64_t a = tsc::now_ordered();
    usleep(2000);
    std::uint64_t b = tsc::now_ordered();
    EXPECT_GT(b, a);
    EXPECT_GE(tsc::to_ns(b - a), 1900.0 * 1000) << "2 ms sleep measured shorter than 1.9 ms";
    EXPECT_EQ(tsc::from_ns(1000000000ull) / 1000, f / 1000);
}

TEST(Errno, StrerrorCoversFabricCodes)
{
    EXPECT_STREQ(shunt::strerror(-FI_ENOCQ), "Missing or unavailable completion queue");
    EXPECT_STREQ(shunt::strerror(FI_EOPBADSTATE), "Operation not permitted in current state");
    EXPECT_STRNE(shunt::strerror(-FI_EAGAIN), "Unknown error");
    EXPECT_STREQ(shunt::strerror(-100000), "Unknown error");
}
