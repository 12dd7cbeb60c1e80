// env topology: hwloc discovery checked against the OS, and pick_cores().
#include "env/env.h"
#include "env/errors.h"
#include "env/topology.h"
#include "env/topology_detail.h"

#include <gtest/gtest.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace shunt;
using namespace shunt::env;

namespace {

const topology &topo()
{
    const topology *t = nullptr;
    EXPECT_EQ(get_topology(t), 0);
    if (!t)
        std::abort();
    return *t;
}

std::vector<unsigned> affinity() { return shunt::env::affinity_cpus(); }

int core_of(const topology &t, unsigned cpu)
{
    for (const core_info &c : t.cores)
        if (std::find(c.cpus.begin(), c.cpus.end(), cpu) != c.cpus.end())
            return static_cast<int>(c.id);
    return -1;
}

/** Restores the process affinity mask on scope exit. */
struct affinity_guard {
    cpu_set_t saved;
    affinity_guard() { sched_getaffinity(0, sizeof saved, &saved); }
    ~affinity_guard() { sched_setaffinity(0, sizeof saved, &saved); }
};

} // namespace

TEST(Topology, CpuCountMatchesOnlineCpus)
{
    const topology &t = topo();
    EXPECT_EQ(t.cpu_count, static_cast<unsigned>(sysconf(_SC_NPROCESSORS_ONLN)));
    EXPECT_FALSE(t.cores.empty());
}

TEST(Topology, EveryCpuInExactlyOneCore)
{
    const topology &t = topo();
    std::map<unsigned, int> seen;
    unsigned total = 0;
    for (std::size_t i = 0; i < t.cores.size(); i++) {
        const core_info &c = t.cores[i];
        EXPECT_EQ(c.id, i);
        EXPECT_FALSE(c.cpus.empty()) << "core " << i;
        EXPECT_TRUE(std::is_sorted(c.cpus.begin(), c.cpus.end()));
        for (unsigned cpu : c.cpus) {
            EXPECT_EQ(seen.count(cpu), 0u) << "CPU " << cpu << " in two cores";
            seen[cpu] = static_cast<int>(i);
            total++;
        }
    }
    EXPECT_EQ(total, t.cpu_count);
    // Every online CPU the OS reports is somewhere.
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (unsigned cpu : affinity())
        EXPECT_EQ(seen.count(cpu), 1u) << "CPU " << cpu << " of the affinity mask is in no core";
    EXPECT_EQ(static_cast<long>(seen.size()), n);
}

TEST(Topology, L3GroupsCoverCpus)
{
    const topology &t = topo();
    if (t.l3_groups.empty())
        GTEST_SKIP() << "hwloc reports no L3 cache on this machine";
    std::set<unsigned> covered;
    for (const l3_group &g : t.l3_groups) {
        EXPECT_GT(g.size, 0u);
        EXPECT_FALSE(g.cpus.empty());
        for (unsigned cpu : g.cpus)
            EXPECT_TRUE(covered.insert(cpu).second) << "CPU " << cpu << " in two L3 groups";
    }
    for (const core_info &c : t.cores) {
        ASSERT_GE(c.l3_group, 0) << "core " << c.id << " has no L3 group";
        ASSERT_LT(static_cast<std::size_t>(c.l3_group), t.l3_groups.size());
        const l3_group &g = t.l3_groups[static_cast<std::size_t>(c.l3_group)];
        for (unsigned cpu : c.cpus) {
            EXPECT_TRUE(std::binary_search(g.cpus.begin(), g.cpus.end(), cpu));
            EXPECT_EQ(l3_group_of(cpu), c.l3_group);
        }
    }
    EXPECT_EQ(covered.size(), t.cpu_count);
    EXPECT_EQ(l3_group_of(1u << 20), -1);
}

TEST(Topology, NumaNodes)
{
    const topology &t = topo();
    ASSERT_GE(t.numa_nodes.size(), 1u);
    unsigned long long mem = 0;
    std::set<unsigned> cpus;
    for (const numa_node &n : t.numa_nodes) {
        EXPECT_GE(n.os_index, 0);
        mem += n.memory;
        cpus.insert(n.cpus.begin(), n.cpus.end());
    }
    EXPECT_GT(mem, 0u);
    EXPECT_EQ(cpus.size(), t.cpu_count);
    for (const core_info &c : t.cores) {
        bool found = false;
        for (const numa_node &n : t.numa_nodes)
            found = found || n.os_index == c.numa_node;
        EXPECT_TRUE(found) << "core " << c.id << " numa node " << c.numa_node;
    }
}

TEST(Topology, PciDevicesAreWellFormed)
{
    const topology &t = topo();
    if (t.pci_devices.empty())
        GTEST_SKIP() << "hwloc sees no PCI device (container without sysfs PCI?)";
    for (const pci_device &d : t.pci_devices) {
        // Cross-check with sysfs: the address exists and the ids match.
        std::string base = "/sys/bus/pci/devices/" + d.address;
        EXPECT_EQ(access(base.c_str(), F_OK), 0) << d.address;
        FILE *f = std::fopen((base + "/vendor").c_str(), "r");
        if (f) {
            unsigned v = 0;
            EXPECT_EQ(std::fscanf(f, "%x", &v), 1);
            std::fclose(f);
            EXPECT_EQ(v, d.vendor) << d.address;
        }
        EXPECT_FALSE(d.local_cpus.empty()) << d.address;
        if (t.numa_nodes.size() == 1) {
            EXPECT_EQ(d.numa_node, t.numa_nodes[0].os_index) << d.address;
        }
    }
}

TEST(Topology, CachedAndThreadSafe)
{
    const topology *a = nullptr;
    const topology *seen[4] = {};
    std::vector<std::thread> ts;
    for (auto &s : seen)
        ts.emplace_back([&s] { (void)get_topology(s); });
    for (auto &th : ts)
        th.join();
    ASSERT_EQ(get_topology(a), 0);
    for (auto *s : seen)
        EXPECT_EQ(s, a);
}

TEST(PickCores, OneCore)
{
    const topology &t = topo();
    std::vector<unsigned> out;
    ASSERT_EQ(pick_cores(1, out), 0);
    ASSERT_EQ(out.size(), 1u);
    auto aff = affinity();
    EXPECT_TRUE(std::binary_search(aff.begin(), aff.end(), out[0]));
    // The highest-numbered usable core wins (single L3 or not, a lone CPU
    // always fits in one group, and groups are ordered by their top core).
    int best = -1;
    for (const core_info &c : t.cores)
        for (unsigned cpu : c.cpus)
            if (std::binary_search(aff.begin(), aff.end(), cpu))
                best = std::max(best, static_cast<int>(c.id));
    if (t.l3_groups.size() <= 1) {
        EXPECT_EQ(core_of(t, out[0]), best);
    }
}

TEST(PickCores, TwoDistinctCores)
{
    const topology &t = topo();
    auto aff = affinity();
    std::set<int> cores;
    for (unsigned c : aff)
        cores.insert(core_of(t, c));
    if (cores.size() < 2)
        GTEST_SKIP() << "fewer than two cores usable";
    std::vector<unsigned> out;
    ASSERT_EQ(pick_cores(2, out), 0);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_LT(out[0], out[1]) << "ascending and distinct";
    EXPECT_NE(core_of(t, out[0]), core_of(t, out[1])) << "one hardware thread per core";
    // Prefer a shared L3 when one group can hold both.
    std::map<int, std::set<int>> per_group;
    for (unsigned c : aff)
        per_group[l3_group_of(c)].insert(core_of(t, c));
    bool one_group_fits = false;
    for (auto &g : per_group)
        one_group_fits = one_group_fits || g.second.size() >= 2;
    if (one_group_fits) {
        EXPECT_EQ(l3_group_of(out[0]), l3_group_of(out[1]));
    }
}

TEST(PickCores, AllCoresThenTooMany)
{
    const topology &t = topo();
    auto aff = affinity();
    std::set<int> cores;
    for (unsigned c : aff)
        cores.insert(core_of(t, c));
    const unsigned n = static_cast<unsigned>(cores.size());
    std::vector<unsigned> out;
    ASSERT_EQ(pick_cores(n, out), 0);
    EXPECT_EQ(out.size(), n);
    std::vector<unsigned> keep{42};
    EXPECT_EQ(pick_cores(n + 1, keep), -FI_ENOSPC);
    EXPECT_EQ(pick_cores(static_cast<unsigned>(t.cores.size()) + 1, keep), -FI_ENOSPC);
    EXPECT_EQ(keep, std::vector<unsigned>{42}) << "output written only on success";
}

TEST(PickCores, ZeroIsEinval)
{
    std::vector<unsigned> keep{42};
    EXPECT_EQ(pick_cores(0, keep), -FI_EINVAL);
    EXPECT_EQ(keep, std::vector<unsigned>{42});
}

TEST(PickCores, AllowedSetRestricts)
{
    auto aff = affinity();
    for (unsigned cpu : aff) {
        std::vector<unsigned> out;
        ASSERT_EQ(pick_cores(1, out, {cpu}), 0) << cpu;
        EXPECT_EQ(out, std::vector<unsigned>{cpu});
        EXPECT_EQ(pick_cores(2, out, {cpu, cpu}), -FI_ENOSPC) << "duplicates count once";
    }
    std::vector<unsigned> out;
    EXPECT_EQ(pick_cores(1, out, {1u << 20}), -FI_ENOSPC) << "a CPU that does not exist";
}

TEST(PickCores, RestrictedToAffinityMask)
{
    auto aff = affinity();
    if (aff.size() < 2)
        GTEST_SKIP() << "needs two CPUs";
    affinity_guard restore;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(aff.front(), &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    std::vector<unsigned> out;
    ASSERT_EQ(pick_cores(1, out), 0);
    EXPECT_EQ(out, std::vector<unsigned>{aff.front()});
    EXPECT_EQ(pick_cores(2, out), -FI_ENOSPC);
    // An allowed list cannot widen the mask.
    EXPECT_EQ(pick_cores(1, out, {aff.back()}), -FI_ENOSPC);
}

TEST(PickCores, RestrictedToEnvLcores)
{
    auto aff = affinity();
    if (aff.size() < 2)
        GTEST_SKIP() << "needs two CPUs";
    EXPECT_EXIT(
        {
            options o;
            o.hugepages = hugepage_policy::off;
            o.hugepages_set = true;
            o.memory_mb = 64;
            o.lcores = std::to_string(aff.front());
            if (init(o) != 0)
                std::exit(2);
            std::vector<unsigned> out;
            if (pick_cores(1, out) != 0 || out != std::vector<unsigned>{aff.front()})
                std::exit(3);
            if (pick_cores(2, out) != -FI_ENOSPC)
                std::exit(4);
            if (pick_cores(1, out, {aff.back()}) != -FI_ENOSPC)
                std::exit(5);
            std::exit(0);
        },
        testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// The selection policy on hand-built topologies (this machine has one L3).

namespace {

/** @p groups L3 groups of @p per_group cores with 2 hardware threads each,
 *  numbered as Linux does on x86: core k has CPUs k and k + cores. */
topology synthetic(unsigned groups, unsigned per_group)
{
    topology t;
    const unsigned cores = groups * per_group;
    t.l3_groups.resize(groups);
    for (unsigned k = 0; k < cores; k++) {
        core_info c;
        c.id = k;
        c.cpus = {k, k + cores};
        c.l3_group = static_cast<int>(k / per_group);
        c.numa_node = 0;
        t.cores.push_back(c);
        t.l3_groups[k / per_group].cpus.push_back(k);
        t.l3_groups[k / per_group].cpus.push_back(k + cores);
        t.cpu_count += 2;
    }
    for (auto &g : t.l3_groups) {
        std::sort(g.cpus.begin(), g.cpus.end());
        g.size = 32u << 20;
    }
    return t;
}

std::vector<unsigned> range(unsigned a, unsigned b)
{
    std::vector<unsigned> v;
    for (unsigned i = a; i < b; i++)
        v.push_back(i);
    return v;
}

std::vector<unsigned> pick(const topology &t, const std::vector<unsigned> &usable, unsigned n, int expect_rc = 0)
{
    std::vector<unsigned> out{999};
    EXPECT_EQ(detail::pick_cores_from(t, usable, n, out), expect_rc) << "n=" << n;
    return out;
}

} // namespace

TEST(PickCoresPolicy, HighestCoresOfOneL3Group)
{
    topology t = synthetic(2, 4); // cores 0-3 in L3 0, cores 4-7 in L3 1; CPUs 0-15
    auto all = range(0, 16);
    EXPECT_EQ(pick(t, all, 1), (std::vector<unsigned>{7}));
    EXPECT_EQ(pick(t, all, 2), (std::vector<unsigned>{6, 7}));
    EXPECT_EQ(pick(t, all, 4), (std::vector<unsigned>{4, 5, 6, 7})) << "one L3 group, one thread per core";
}

TEST(PickCoresPolicy, SpillsIntoAsFewGroupsAsPossible)
{
    topology t = synthetic(2, 4);
    auto all = range(0, 16);
    EXPECT_EQ(pick(t, all, 5), (std::vector<unsigned>{3, 4, 5, 6, 7}));
    EXPECT_EQ(pick(t, all, 8), range(0, 8));
    pick(t, all, 9, -FI_ENOSPC);
    // Three groups of two: four cores must come from two groups, not three.
    topology t3 = synthetic(3, 2); // L3 0: cores 0,1; L3 1: 2,3; L3 2: 4,5
    std::vector<unsigned> u = {0, 1, 2, 4, 5}; // core 3 unusable
    EXPECT_EQ(pick(t3, u, 4), (std::vector<unsigned>{0, 1, 4, 5})) << "the two full groups";
}

TEST(PickCoresPolicy, PrefersAGroupThatHoldsAll)
{
    topology t = synthetic(2, 4);
    // Only core 4 usable in group 1: a pair fits only in group 0.
    std::vector<unsigned> u = {0, 1, 2, 3, 4};
    EXPECT_EQ(pick(t, u, 2), (std::vector<unsigned>{2, 3}));
    EXPECT_EQ(pick(t, u, 1), (std::vector<unsigned>{4}));
}

TEST(PickCoresPolicy, SiblingThreadsAndOneThreadPerCore)
{
    topology t = synthetic(2, 4);
    // Only the second hardware thread of cores 6 and 7, and both of core 5.
    std::vector<unsigned> u = {5, 13, 14, 15};
    EXPECT_EQ(pick(t, u, 3), (std::vector<unsigned>{5, 14, 15}));
    pick(t, u, 4, -FI_ENOSPC);
    std::vector<unsigned> keep{999};
    EXPECT_EQ(detail::pick_cores_from(t, u, 4, keep), -FI_ENOSPC);
    EXPECT_EQ(keep, std::vector<unsigned>{999}) << "output written only on success";
    EXPECT_EQ(detail::pick_cores_from(t, u, 0, keep), -FI_EINVAL);
}

TEST(PickCoresPolicy, CoresWithoutL3)
{
    topology t = synthetic(1, 4);
    for (auto &c : t.cores)
        c.l3_group = -1;
    t.l3_groups.clear();
    EXPECT_EQ(pick(t, range(0, 8), 2), (std::vector<unsigned>{2, 3}));
}
