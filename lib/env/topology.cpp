#include "env/topology.h"
#include "env/topology_detail.h"

#include "env/compiler.h"
#include "env/env.h"
#include "env/errors.h"
#include "env/log.h"

#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>

namespace shunt::env {

SHUNT_LOG_COMPONENT(topo_log, "env");

namespace {

std::vector<unsigned> bitmap_cpus(hwloc_const_bitmap_t set)
{
    std::vector<unsigned> out;
    if (!set)
        return out;
    int i;
    hwloc_bitmap_foreach_begin(i, set)
        out.push_back(static_cast<unsigned>(i));
    hwloc_bitmap_foreach_end();
    return out;
}

struct cache {
    int rc = 0;
    topology topo;
    std::vector<int> cpu_l3;  ///< OS CPU number -> L3 group index, -1 if none
};

// The NUMA node whose cpuset contains all of @p set, or -1.
int numa_of(const std::vector<numa_node> &nodes, hwloc_topology_t t, hwloc_const_cpuset_t set)
{
    // hwloc 2 hangs NUMA nodes off the tree as memory children, so they are
    // not ancestors of a core: compare cpusets instead.
    for (const numa_node &n : nodes) {
        hwloc_obj_t o = hwloc_get_numanode_obj_by_os_index(t, static_cast<unsigned>(n.os_index));
        if (o && hwloc_bitmap_isincluded(set, o->cpuset))
            return n.os_index;
    }
    return -1;
}

// Discovers cores, caches and NUMA nodes, and with @p pci the PCI devices:
// reading those scans the bus and its name database, several times the rest,
// and choosing cores does not need them.
SHUNT_COLD int discover(cache &c, bool pci)
{
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) {
        SHUNT_LOG(topo_log, error, "topology: hwloc_topology_init failed");
        return -FI_EIO;
    }
    // PCI devices (NICs, storage, GPUs, accelerators) but not every bridge;
    // without them hwloc keeps no I/O object (its default).
    if (pci)
        hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    // Describe the machine, including CPUs a cpuset cgroup hides: what this
    // process may use is the affinity mask's business (pick_cores applies it).
    hwloc_topology_set_flags(t, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
    if (hwloc_topology_load(t) != 0) {
        SHUNT_LOG(topo_log, error, "topology: hwloc_topology_load failed");
        hwloc_topology_destroy(t);
        return -FI_EIO;
    }
    topology &tp = c.topo;

    const int nnodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < nnodes; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
        numa_node n;
        n.os_index = static_cast<int>(o->os_index);
        n.cpus = bitmap_cpus(o->cpuset);
        n.memory = o->attr ? o->attr->numanode.local_memory : 0;
        tp.numa_nodes.push_back(std::move(n));
    }

    const int nl3 = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_L3CACHE);
    for (int i = 0; i < nl3; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_L3CACHE, static_cast<unsigned>(i));
        l3_group g;
        g.cpus = bitmap_cpus(o->cpuset);
        g.size = o->attr ? o->attr->cache.size : 0;
        tp.l3_groups.push_back(std::move(g));
    }

    // Cores; some platforms expose no Core objects, then every PU is a core.
    hwloc_obj_type_t core_type = HWLOC_OBJ_CORE;
    if (hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE) <= 0)
        core_type = HWLOC_OBJ_PU;
    const int ncores = hwloc_get_nbobjs_by_type(t, core_type);
    for (int i = 0; i < ncores; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(t, core_type, static_cast<unsigned>(i));
        core_info ci;
        ci.id = static_cast<unsigned>(tp.cores.size());
        ci.cpus = bitmap_cpus(o->cpuset);
        if (ci.cpus.empty())
            continue;
        ci.l3_group = -1;
        hwloc_obj_t l3 = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_L3CACHE, o);
        if (l3)
            ci.l3_group = static_cast<int>(l3->logical_index);
        ci.numa_node = numa_of(tp.numa_nodes, t, o->cpuset);
        tp.cores.push_back(std::move(ci));
    }

    unsigned max_cpu = 0;
    for (const core_info &ci : tp.cores) {
        tp.cpu_count += static_cast<unsigned>(ci.cpus.size());
        max_cpu = std::max(max_cpu, ci.cpus.back());
    }
    c.cpu_l3.assign(max_cpu + 1, -1);
    for (const core_info &ci : tp.cores)
        for (unsigned cpu : ci.cpus)
            c.cpu_l3[cpu] = ci.l3_group;

    for (hwloc_obj_t o = hwloc_get_next_pcidev(t, nullptr); o; o = hwloc_get_next_pcidev(t, o)) {
        const auto &a = o->attr->pcidev;
        pci_device d;
        char addr[32];
        std::snprintf(addr, sizeof addr, "%04x:%02x:%02x.%x", a.domain, a.bus, a.dev, a.func);
        d.address = addr;
        d.vendor = a.vendor_id;
        d.device = a.device_id;
        d.class_id = a.class_id;
        d.numa_node = -1;
        hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, o);
        if (anc) {
            d.local_cpus = bitmap_cpus(anc->cpuset);
            // Local to one NUMA node only if its locality names exactly one.
            if (anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1)
                d.numa_node = hwloc_bitmap_first(anc->nodeset);
        }
        tp.pci_devices.push_back(std::move(d));
    }
    hwloc_topology_destroy(t);

    if (tp.cores.empty()) {
        SHUNT_LOG(topo_log, error, "topology: hwloc found no cores");
        return -FI_EIO;
    }
    return 0;
}

// A function-local static per kind: each discovered once, thread safe (C++11
// magic statics). The CPU part alone (@p Pci false) serves pick_cores() and
// l3_group_of().
template <bool Pci>
const cache &get_cache()
{
    static const cache c = [] {
        cache x;
        x.rc = discover(x, Pci);
        return x;
    }();
    return c;
}


} // namespace

int get_topology(const topology *&out)
{
    const cache &c = get_cache<true>();
    if (c.rc != 0)
        return c.rc;
    out = &c.topo;
    return 0;
}

int l3_group_of(unsigned cpu)
{
    const cache &c = get_cache<false>();
    if (c.rc != 0 || cpu >= c.cpu_l3.size())
        return -1;
    return c.cpu_l3[cpu];
}

int pick_cores(unsigned n, std::vector<unsigned> &out, const std::vector<unsigned> &allowed)
{
    if (n == 0)
        return -FI_EINVAL;
    const cache &c = get_cache<false>();
    if (c.rc != 0)
        return c.rc;

    // Usable CPUs: the process's affinity, narrowed to the env's lcore list
    // when initialised, narrowed to the caller's list when given.
    std::vector<unsigned> usable = affinity_cpus();
    if (initialized()) {
        std::vector<unsigned> env_cpus = current().cpus;
        std::vector<unsigned> x;
        std::set_intersection(usable.begin(), usable.end(), env_cpus.begin(), env_cpus.end(),
                              std::back_inserter(x));
        usable.swap(x);
    }
    if (!allowed.empty()) {
        std::vector<unsigned> a = allowed;
        std::sort(a.begin(), a.end());
        std::vector<unsigned> x;
        std::set_intersection(usable.begin(), usable.end(), a.begin(), a.end(), std::back_inserter(x));
        usable.swap(x);
    }

    return detail::pick_cores_from(c.topo, usable, n, out);
}

namespace detail {

int pick_cores_from(const topology &t, const std::vector<unsigned> &usable, unsigned n,
                    std::vector<unsigned> &out)
{
    if (n == 0)
        return -FI_EINVAL;
    // One CPU per core: the core's lowest usable hardware thread. Candidates
    // are bucketed by L3 group (-1 collects cores without one), each bucket
    // holding (core id, cpu) in descending core order.
    std::map<int, std::vector<std::pair<unsigned, unsigned>>> groups;
    for (auto it = t.cores.rbegin(); it != t.cores.rend(); ++it) {
        for (unsigned cpu : it->cpus) {
            if (std::binary_search(usable.begin(), usable.end(), cpu)) {
                groups[it->l3_group].emplace_back(it->id, cpu);
                break;
            }
        }
    }
    std::size_t total = 0;
    for (auto &g : groups)
        total += g.second.size();
    if (total < n)
        return -FI_ENOSPC;

    // Order groups: those that can hold all n first, then by size (fewest
    // groups spanned), then by their highest core (avoid the low cores that
    // usually take interrupts).
    std::vector<const std::vector<std::pair<unsigned, unsigned>> *> order;
    for (auto &g : groups)
        order.push_back(&g.second);
    std::sort(order.begin(), order.end(), [n](auto *a, auto *b) {
        bool fa = a->size() >= n, fb = b->size() >= n;
        if (fa != fb)
            return fa;
        if (!fa && a->size() != b->size())
            return a->size() > b->size();
        return a->front().first > b->front().first;
    });
    std::vector<unsigned> picked;
    for (auto *g : order) {
        for (const auto &core_cpu : *g) {
            if (picked.size() == n)
                break;
            picked.push_back(core_cpu.second);
        }
        if (picked.size() == n)
            break;
    }
    std::sort(picked.begin(), picked.end());
    out = std::move(picked);
    return 0;
}

} // namespace detail

} // namespace shunt::env
