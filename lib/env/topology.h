/* Machine topology through hwloc: cores, hardware threads, L3 groups, NUMA
 * nodes, PCI device locality, and the default choice of polling cores. */
#pragma once

#include <string>
#include <vector>

namespace shunt::env {

struct core_info {
    unsigned id;                  ///< core index (logical, hwloc order)
    std::vector<unsigned> cpus;   ///< OS CPU numbers of its hardware threads
    int l3_group;                 ///< index into topology::l3_groups, -1 if none
    int numa_node;                ///< OS NUMA node number, -1 if unknown
};

struct l3_group {
    std::vector<unsigned> cpus;   ///< OS CPU numbers sharing this L3
    unsigned long long size;      ///< bytes
};

struct numa_node {
    int os_index;
    std::vector<unsigned> cpus;
    unsigned long long memory;    ///< local memory in bytes
};

struct pci_device {
    std::string address;          ///< "0000:3b:00.0"
    unsigned vendor, device, class_id;
    int numa_node;                ///< -1 if unknown
    std::vector<unsigned> local_cpus;
};

struct topology {
    std::vector<core_info> cores;
    std::vector<l3_group> l3_groups;
    std::vector<numa_node> numa_nodes;
    std::vector<pci_device> pci_devices;
    unsigned cpu_count = 0;       ///< hardware threads
};

/** Discover the topology (cached after the first call; thread safe).
 *  @return 0 and sets @p out, or -FI_EIO if hwloc fails. */
[[nodiscard]] int get_topology(const topology *&out);

/** Choose @p n CPUs for polling threads: one hardware thread per core, from
 *  @p allowed (empty: the process's affinity mask), preferring cores that
 *  share an L3 group, and within that the highest-numbered cores (CPU 0 often
 *  takes interrupts). @return 0 and fills @p out in ascending order;
 *  -FI_EINVAL n == 0; -FI_ENOSPC fewer than n cores available. */
[[nodiscard]] int pick_cores(unsigned n, std::vector<unsigned> &out,
                             const std::vector<unsigned> &allowed = {});

/** The L3 group of a CPU, or -1. */
int l3_group_of(unsigned cpu);

} // namespace shunt::env
