/* Machine topology through hwloc: cores, hardware threads, L3 groups, NUMA
 * nodes, PCI device locality, and the default choice of polling cores.
 *
 * The topology is discovered once per process (hwloc, about a millisecond)
 * and cached; it does not need env::init(). It covers every online CPU of
 * the machine, also those a cpuset cgroup or the affinity mask keeps this
 * process from using: the affinity mask and the env lcore list only restrict
 * what pick_cores() returns. */
#pragma once

#include <string>
#include <vector>

namespace shunt::env {

/** One physical core. */
struct core_info {
    unsigned id;                  ///< core index (logical, hwloc order) == its index in topology::cores
    std::vector<unsigned> cpus;   ///< OS CPU numbers of its hardware threads, ascending, never empty
    int l3_group;                 ///< index into topology::l3_groups, -1 if none
    int numa_node;                ///< OS NUMA node number, -1 if unknown
};

/** CPUs sharing one L3 cache. Cores in different groups are several times
 *  further apart (cache-line transfer latency) than cores in one group. */
struct l3_group {
    std::vector<unsigned> cpus;   ///< OS CPU numbers sharing this L3, ascending
    unsigned long long size;      ///< bytes
};

/** One NUMA node. */
struct numa_node {
    int os_index;                 ///< OS node number (as in /sys/devices/system/node/nodeN)
    std::vector<unsigned> cpus;   ///< OS CPU numbers local to it, ascending (may be empty)
    unsigned long long memory;    ///< local memory in bytes
};

/** A PCI device hwloc deems important (network, storage, GPU, accelerator;
 *  bridges are left out). */
struct pci_device {
    std::string address;          ///< "0000:3b:00.0" (domain:bus:device.function, hex)
    unsigned vendor;              ///< PCI vendor id, e.g. 0x15b3 for Mellanox/NVIDIA
    unsigned device;              ///< PCI device id
    unsigned class_id;            ///< PCI class and subclass, e.g. 0x0200 Ethernet
    int numa_node;                ///< OS NUMA node it is attached to; -1 if unknown or several
    std::vector<unsigned> local_cpus; ///< OS CPU numbers closest to it, ascending
};

/** The whole machine as seen by this process. */
struct topology {
    std::vector<core_info> cores;        ///< in hwloc logical order
    std::vector<l3_group> l3_groups;     ///< in hwloc logical order; empty if no L3 is reported
    std::vector<numa_node> numa_nodes;   ///< at least one on Linux
    std::vector<pci_device> pci_devices; ///< empty when hwloc cannot read PCI (containers)
    unsigned cpu_count = 0;              ///< hardware threads (sum of every core's cpus)
};

/** Discover the topology, PCI devices included (cached after the first call;
 *  thread safe). pick_cores() and l3_group_of() do not scan PCI.
 *  @param out set to the process-wide topology, valid until exit; unchanged on error.
 *  @return 0; -FI_EIO if hwloc fails (logged once; every later call returns
 *          the same error). */
[[nodiscard]] int get_topology(const topology *&out);

/** Choose @p n CPUs for polling threads: one hardware thread per core (its
 *  lowest-numbered usable one), preferring cores that share an L3 group (a
 *  group that can hold all n; else as few groups as possible, largest
 *  first), and within that the highest-numbered cores (CPU 0 often takes
 *  interrupts).
 *  Usable CPUs are the process's affinity mask, narrowed to
 *  env::current().cpus when the environment is initialised, and narrowed to
 *  @p allowed when it is not empty (CPUs outside the mask are ignored).
 *  @param n number of CPUs wanted, >= 1.
 *  @param out on success, the n CPUs in ascending order; unchanged on error.
 *  @param allowed optional restriction (any order, duplicates fine).
 *  @return 0; -FI_EINVAL n == 0; -FI_ENOSPC fewer than n usable cores;
 *          -FI_EIO topology unavailable. */
[[nodiscard]] int pick_cores(unsigned n, std::vector<unsigned> &out,
                             const std::vector<unsigned> &allowed = {});

/** The L3 group (index into topology::l3_groups) of OS CPU @p cpu, or -1 if
 *  the CPU is unknown, has no L3, or the topology is unavailable. */
int l3_group_of(unsigned cpu);

} // namespace shunt::env
