// shunt-info: what this Shunt build and this machine offer.
#include "env/env.h"
#include "env/errors.h"
#include "env/topology.h"
#include "env/tunable.h"
#include "fabric/api.h"
#include "fabric/provider.h"
#include "shunt_config.h"

#include <getopt.h>

#include <cstdio>
#include <cstring>
#include <string>

using namespace shunt;

namespace {

const char usage[] =
    "Usage: shunt-info [OPTION]...\n"
    "Show what this Shunt build and this machine offer. With no option, show\n"
    "the version, the built drivers and providers, the topology and the\n"
    "hugepage state.\n"
    "\n"
    "  -t, --topology    show the topology only (cores, L3 groups, NUMA nodes, PCI)\n"
    "  -H, --hugepages   show the hugepage state only\n"
    "  -E, --env         list every environment variable Shunt reads, with its\n"
    "                    default and help\n"
    "  -p, --providers   list the endpoint providers (built in, registered,\n"
    "                    plugins; rejected ones with the reason) and what each\n"
    "                    offers (getinfo without hints)\n"
    "  -V, --version     print the version and exit\n"
    "  -h, --help        print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 if the topology cannot be read, 2 on bad usage.\n";

std::string list(const std::vector<unsigned> &v)
{
    std::string s = env::format_cpu_list(v);
    return s.empty() ? "-" : s;
}

void print_build()
{
    std::printf("shunt %s (%s build)\n", SHUNT_VERSION, SHUNT_BUILD_TYPE);
    std::printf("drivers:   %s\n", SHUNT_DRIVERS[0] ? SHUNT_DRIVERS : "(none)");
    std::printf("providers: %s\n", SHUNT_PROVIDERS[0] ? SHUNT_PROVIDERS : "(none)");
}

int print_topology()
{
    const env::topology *t = nullptr;
    int rc = env::get_topology(t);
    if (rc != 0) {
        std::fprintf(stderr, "shunt-info: cannot read topology: %s\n", shunt::strerror(rc));
        return 1;
    }
    std::printf("topology: %u hardware threads, %zu cores, %zu L3 groups, %zu NUMA nodes\n", t->cpu_count,
                t->cores.size(), t->l3_groups.size(), t->numa_nodes.size());
    for (const auto &c : t->cores)
        std::printf("  core %-3u cpus %-8s L3 group %-3d NUMA %d\n", c.id, list(c.cpus).c_str(), c.l3_group,
                    c.numa_node);
    for (std::size_t i = 0; i < t->l3_groups.size(); i++)
        std::printf("  L3 group %zu: cpus %s, %llu KiB\n", i, list(t->l3_groups[i].cpus).c_str(),
                    t->l3_groups[i].size >> 10);
    for (const auto &n : t->numa_nodes)
        std::printf("  NUMA node %d: cpus %s, %llu MiB\n", n.os_index, list(n.cpus).c_str(), n.memory >> 20);
    for (const auto &p : t->pci_devices)
        std::printf("  PCI %s [%04x:%04x] class %06x NUMA %d cpus %s\n", p.address.c_str(), p.vendor, p.device,
                    p.class_id, p.numa_node, list(p.local_cpus).c_str());
    std::vector<unsigned> pick;
    if (env::pick_cores(2, pick) == 0)
        std::printf("  default polling cores: %s\n", list(pick).c_str());
    return 0;
}

void print_hugepages()
{
    env::hugepage_info h = env::probe_hugepages();
    std::printf("hugepages: %lu reserved, %lu free, page size %zu KiB, hugetlbfs %s\n", h.total, h.free,
                h.page_size >> 10, h.mount.empty() ? "(not mounted)" : h.mount.c_str());
    if (h.free == 0)
        std::printf("  none free: Shunt falls back to ordinary pages; reserve with "
                    "'sysctl vm.nr_hugepages=512' (as root)\n");
}

void print_env()
{
    std::printf("%-28s %-8s %-10s %s\n", "VARIABLE", "LAYER", "DEFAULT", "HELP");
    for (const env::tunable *t : env::tunables()) {
        std::printf("%-28s %-8s %-10s %s%s\n", t->name, t->layer, t->defval[0] ? t->defval : "-", t->help,
                    t->is_set() ? (" [set: " + t->value() + "]").c_str() : "");
    }
}

void print_providers()
{
    std::printf("providers:\n");
    for (const auto &p : fabric::providers())
        std::printf("  %-12s %u.%u  %-10s %s%s\n", p.name.c_str(), fabric::FI_MAJOR(p.version),
                    fabric::FI_MINOR(p.version), p.origin.c_str(), p.usable ? "usable" : "not usable: ",
                    p.note.c_str());
    fabric::info *all = nullptr;
    if (fabric::getinfo(fabric::FI_API_VERSION, nullptr, nullptr, 0, nullptr, &all) != 0) {
        std::printf("  (no endpoint type offered)\n");
        return;
    }
    for (fabric::info *i = all; i; i = i->next) {
        char buf[4096];
        fabric::info_tostr(i, buf, sizeof buf);
        std::printf("%s\n", buf);
    }
    fabric::freeinfo(all);
}

} // namespace

int main(int argc, char **argv)
{
    static const option longopts[] = {
        {"topology", no_argument, nullptr, 't'}, {"hugepages", no_argument, nullptr, 'H'},
        {"env", no_argument, nullptr, 'E'},      {"version", no_argument, nullptr, 'V'},
        {"providers", no_argument, nullptr, 'p'},
        {"help", no_argument, nullptr, 'h'},     {nullptr, 0, nullptr, 0},
    };
    bool topo = false, huge = false, envs = false, provs = false;
    int c;
    while ((c = getopt_long(argc, argv, "tHEpVh", longopts, nullptr)) != -1) {
        switch (c) {
        case 't': topo = true; break;
        case 'H': huge = true; break;
        case 'E': envs = true; break;
        case 'p': provs = true; break;
        case 'V': std::printf("shunt-info %s\n", SHUNT_VERSION); return 0;
        case 'h': std::fputs(usage, stdout); return 0;
        default: std::fputs(usage, stderr); return 2;
        }
    }
    if (optind < argc) {
        std::fprintf(stderr, "shunt-info: unexpected argument '%s'\n", argv[optind]);
        std::fputs(usage, stderr);
        return 2;
    }
    int rc = 0;
    if (!topo && !huge && !envs && !provs) {
        print_build();
        rc = print_topology();
        print_hugepages();
        return rc;
    }
    if (topo)
        rc = print_topology();
    if (huge)
        print_hugepages();
    if (envs)
        print_env();
    if (provs)
        print_providers();
    return rc;
}
