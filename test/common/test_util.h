// Helpers shared by Shunt's tests.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>

namespace shunt::test {

/** Poll pred() until it is true or @p timeout passes. @return pred()'s last value. */
template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10))
{
    auto end = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > end)
            return pred();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
}

/** A name unique to this process and call, for segments and pools. */
inline std::string unique_name(const char *prefix)
{
    static int n = 0;
    return std::string(prefix) + "_" + std::to_string(getpid()) + "_" + std::to_string(n++);
}

} // namespace shunt::test
