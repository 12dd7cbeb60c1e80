#include "env/tsc.h"

#include <atomic>
#include <ctime>
#include <fstream>
#include <sstream>

namespace shunt::env::tsc {
namespace {

std::uint64_t mono_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t calibrate()
{
    // Two 10 ms windows, keep the one with the smaller gap between reading the
    // clock and the TSC; the constant_tsc/nonstop_tsc flags make the rate fixed.
    std::uint64_t best = 0;
    for (int round = 0; round < 2; round++) {
        std::uint64_t t0 = mono_ns(), c0 = now_ordered();
        std::uint64_t t1;
        do {
            t1 = mono_ns();
        } while (t1 - t0 < 10000000ull);
        std::uint64_t c1 = now_ordered();
        std::uint64_t f = (c1 - c0) * 1000000000ull / (t1 - t0);
        if (f > best)
            best = f;
    }
    return best ? best : 1;
}

} // namespace

std::uint64_t hz() noexcept
{
    static const std::uint64_t f = calibrate();
    return f;
}

std::string clock_id(std::string &why)
{
    std::ifstream ci("/proc/cpuinfo");
    std::string line;
    bool constant = false, nonstop = false;
    while (std::getline(ci, line))
        if (line.rfind("flags", 0) == 0) {
            std::istringstream fl(line.substr(line.find(':') + 1));
            for (std::string f; fl >> f;) {
                constant |= f == "constant_tsc";
                nonstop |= f == "nonstop_tsc";
            }
            break;
        }
    if (!constant || !nonstop) {
        why = std::string("the TSC of this host is not invariant (/proc/cpuinfo lacks ") +
              (!constant ? "constant_tsc" : "nonstop_tsc") + "): stamps of two cores are not one clock";
        return "";
    }
    std::ifstream b("/proc/sys/kernel/random/boot_id");
    std::string id;
    if (!std::getline(b, id) || id.empty() || id.find_first_of(" =") != std::string::npos) {
        why = "cannot read this host's boot id (/proc/sys/kernel/random/boot_id)";
        return "";
    }
    return id;
}

} // namespace shunt::env::tsc
