// GoogleTest main shared by every suite. Death tests re-execute the binary
// (threadsafe style) so that a test needing a fresh process, such as one that
// initialises the EAL with particular options, really gets one.
#include <gtest/gtest.h>

int main(int argc, char **argv)
{
    testing::InitGoogleTest(&argc, argv);
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    return RUN_ALL_TESTS();
}
