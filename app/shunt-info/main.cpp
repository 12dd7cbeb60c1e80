// shunt-info: what this Shunt build and this machine offer.
#include "doctor.h"
#include "env/env.h"
#include "env/errors.h"
#include "env/topology.h"
#include "env/tunable.h"
#include "fabric/api.h"
#include "fabric/provider.h"
#include "shunt_config.h"
#include "vq/driver.h"
#include "vq/vq.h"

#include <getopt.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace shunt;

namespace {

const char usage[] =
    "Usage: shunt-info [OPTION]...\n"
    "Show what this Shunt build and this machine offer: the counterpart of\n"
    "fi_info, plus the queue-level devices, the environment and the topology.\n"
    "With no option, show the version, the built drivers and providers, the\n"
    "vq devices, the topology and the hugepage state.\n"
    "\n"
    "Endpoint providers (as fi_info):\n"
    "  -l, --list            list the providers (built in, registered, plugins;\n"
    "                        rejected ones with the reason); also --providers\n"
    "  -p, --provider=PROV   show what provider PROV offers (getinfo with hints)\n"
    "  -e, --ep-type=TYPE    only endpoints of TYPE: rdm, msg, dgram (or\n"
    "                        FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM); also --ep_type\n"
    "  -c, --caps=CAPS       only endpoints with every capability of CAPS:\n"
    "                        FI_MSG|FI_RMA... ('|' or ',', FI_ prefix and case\n"
    "                        optional)\n"
    "  -v, --verbose         full attribute dump of each offer (fi_tostr)\n"
    "  With -p, -e or -c the offers matching them are printed; -l alone lists.\n"
    "\n"
    "Queue level and machine:\n"
    "  -D, --devices         vq devices (lib/vq drivers) and their limits\n"
    "  -t, --topology        cores, L3 groups, NUMA nodes, PCI devices\n"
    "  -H, --hugepages       the hugepage state\n"
    "  -E, --env             every environment variable Shunt reads (all\n"
    "                        layers), with its layer, default and help; set\n"
    "                        values are shown\n"
    "  -g, --getenv=SUBSTR   the same, only variables whose name contains\n"
    "                        SUBSTR (fi_info -g)\n"
    "\n"
    "      --doctor          preflight check of this machine for polling:\n"
    "                        hugepages, isolated/tickless cores, SMT siblings,\n"
    "                        cpufreq governor, turbo, IRQs on the polling\n"
    "                        cores, memlock, AF_XDP, stale segments, every\n"
    "                        SHUNT_* value; each problem with its fix; exit 1\n"
    "                        if any (polling cores: SHUNT_LCORES or affinity)\n"
    "      --clean           with --doctor: remove stale shared segments\n"
    "      --json            with --doctor: one JSON object\n"
    "  -V, --version         print the version and exit\n"
    "  -h, --help            print this help and exit\n"
    "\n"
    "fi_info's -e means --env; here -e is the endpoint type, as in shunt-perf:\n"
    "use -E or --env for the environment.\n"
    "\n"
    "Exit status: 0 success; 1 the topology or a device cannot be read;\n"
    "2 bad usage (unknown option, endpoint type or capability); 61 (FI_ENODATA,\n"
    "as fi_info) no provider offers what the filters ask for.\n";

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

void print_env(const std::string &filter)
{
    std::printf("%-28s %-8s %-10s %s\n", "VARIABLE", "LAYER", "DEFAULT", "HELP");
    for (const env::tunable *t : env::tunables()) {
        if (!filter.empty() && std::string(t->name).find(filter) == std::string::npos)
            continue;
        std::string mark;
        if (t->is_set()) {
            std::string accepted;
            mark = " [set: " + t->value() + "]";
            if (t->check(accepted) != 0)
                mark += " INVALID (accepted: " + accepted + ")";
        }
        std::printf("%-28s %-8s %-10s %s%s\n", t->name, t->layer, t->defval[0] ? t->defval : "-", t->help,
                    mark.c_str());
    }
}

void print_provider_list()
{
    std::printf("providers:\n");
    for (const auto &p : fabric::providers())
        std::printf("  %-12s %u.%u  %-10s %s%s%s%s\n", p.name.c_str(), fabric::FI_MAJOR(p.version),
                    fabric::FI_MINOR(p.version), p.origin.c_str(), p.usable ? "usable" : "not usable: ",
                    p.note.c_str(), p.aliases.empty() ? "" : "  (also answers to: ", p.aliases.empty() ? "" : (p.aliases + ")").c_str());
}

const char *ep_type_name(fabric::ep_type t)
{
    switch (t) {
    case fabric::FI_EP_MSG: return "FI_EP_MSG";
    case fabric::FI_EP_RDM: return "FI_EP_RDM";
    case fabric::FI_EP_DGRAM: return "FI_EP_DGRAM";
    default: return "FI_EP_UNSPEC";
    }
}

const char *protocol_name(std::uint32_t p)
{
    return p == fabric::FI_PROTO_SHM ? "FI_PROTO_SHM" : p == fabric::FI_PROTO_UNSPEC ? "FI_PROTO_UNSPEC" : "other";
}

struct cap_name {
    const char *name;
    std::uint64_t bit;
};
const cap_name cap_names[] = {
    {"MSG", fabric::FI_MSG}, {"RMA", fabric::FI_RMA}, {"TAGGED", fabric::FI_TAGGED},
    {"ATOMIC", fabric::FI_ATOMIC}, {"ATOMICS", fabric::FI_ATOMIC}, {"MULTICAST", fabric::FI_MULTICAST},
    {"COLLECTIVE", fabric::FI_COLLECTIVE}, {"READ", fabric::FI_READ}, {"WRITE", fabric::FI_WRITE},
    {"RECV", fabric::FI_RECV}, {"SEND", fabric::FI_SEND}, {"REMOTE_READ", fabric::FI_REMOTE_READ},
    {"REMOTE_WRITE", fabric::FI_REMOTE_WRITE}, {"MULTI_RECV", fabric::FI_MULTI_RECV},
    {"TRIGGER", fabric::FI_TRIGGER}, {"FENCE", fabric::FI_FENCE}, {"HMEM", fabric::FI_HMEM},
    {"VARIABLE_MSG", fabric::FI_VARIABLE_MSG}, {"RMA_PMEM", fabric::FI_RMA_PMEM},
    {"SOURCE_ERR", fabric::FI_SOURCE_ERR}, {"LOCAL_COMM", fabric::FI_LOCAL_COMM},
    {"REMOTE_COMM", fabric::FI_REMOTE_COMM}, {"SHARED_AV", fabric::FI_SHARED_AV},
    {"RMA_EVENT", fabric::FI_RMA_EVENT}, {"SOURCE", fabric::FI_SOURCE}, {"NAMED_RX_CTX", fabric::FI_NAMED_RX_CTX},
    {"DIRECTED_RECV", fabric::FI_DIRECTED_RECV}, {"AV_USER_ID", fabric::FI_AV_USER_ID},
};

/** "FI_MSG|rma,tagged" -> bits. @return false on an unknown name (in @p bad). */
bool parse_caps(const std::string &arg, std::uint64_t &caps, std::string &bad)
{
    caps = 0;
    std::string cur;
    auto take = [&]() {
        std::string n;
        for (char ch : cur)
            if (!std::isspace(static_cast<unsigned char>(ch)))
                n += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        cur.clear();
        if (n.rfind("FI_", 0) == 0)
            n.erase(0, 3);
        for (const cap_name &c : cap_names)
            if (n == c.name) {
                caps |= c.bit;
                return true;
            }
        bad = n.empty() ? "(empty)" : n;
        return false;
    };
    for (char ch : arg) {
        if (ch == '|' || ch == ',') {
            if (!take())
                return false;
        } else {
            cur += ch;
        }
    }
    return take();
}

bool parse_ep_type(const std::string &arg, fabric::ep_type &t)
{
    std::string n;
    for (char ch : arg)
        n += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (n.rfind("fi_ep_", 0) == 0)
        n.erase(0, 6);
    if (n == "rdm") t = fabric::FI_EP_RDM;
    else if (n == "msg") t = fabric::FI_EP_MSG;
    else if (n == "dgram") t = fabric::FI_EP_DGRAM;
    else return false;
    return true;
}

/** getinfo with the filters; print fi_info's short form or the full dump.
 *  @return 0, or 61 when nothing matches. */
int print_offers(const std::string &prov, fabric::ep_type type, std::uint64_t caps, bool verbose)
{
    fabric::info *hints = fabric::allocinfo();
    if (!hints) {
        std::fprintf(stderr, "shunt-info: out of memory\n");
        return 1;
    }
    // As fi_info: the application takes every mode and MR mode, so that only
    // the filters given narrow the answer.
    hints->caps = caps;
    hints->mode = ~0ULL;
    hints->domain_attr->mode = ~0ULL;
    hints->domain_attr->mr_mode = ~(fabric::FI_MR_BASIC | fabric::FI_MR_SCALABLE);
    hints->ep_attr->type = type;
    if (!prov.empty())
        hints->fabric_attr->prov_name = ::strdup(prov.c_str());
    fabric::info *all = nullptr;
    int rc = fabric::getinfo(fabric::FI_API_VERSION, nullptr, nullptr, 0, hints, &all);
    fabric::freeinfo(hints);
    if (rc != 0 || !all) {
        // fi_info prints "fi_getinfo: -61" and exits with 61.
        std::fprintf(stderr, "shunt-info: getinfo: %d (%s)\n", rc ? rc : -FI_ENODATA,
                     shunt::strerror(rc ? rc : -FI_ENODATA));
        return rc == -FI_ENODATA || rc == 0 ? FI_ENODATA : (rc < 0 ? -rc : 1);
    }
    for (fabric::info *i = all; i; i = i->next) {
        if (verbose) {
            std::vector<char> buf(16384);
            fabric::info_tostr(i, buf.data(), buf.size());
            std::printf("%s\n", buf.data());
            continue;
        }
        std::printf("provider: %s\n", i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "?");
        std::printf("    fabric: %s\n", i->fabric_attr->name ? i->fabric_attr->name : "?");
        std::printf("    domain: %s\n", i->domain_attr->name ? i->domain_attr->name : "?");
        std::printf("    version: %u.%u\n", fabric::FI_MAJOR(i->fabric_attr->prov_version),
                    fabric::FI_MINOR(i->fabric_attr->prov_version));
        std::printf("    type: %s\n", ep_type_name(i->ep_attr->type));
        std::printf("    protocol: %s\n", protocol_name(i->ep_attr->protocol));
    }
    fabric::freeinfo(all);
    return 0;
}

const char *qp_type_name(unsigned t)
{
    switch (t) {
    case 2: return "rc";
    case 3: return "uc";
    case 4: return "ud";
    case 8: return "raw_packet";
    case 9: return "xrc_send";
    case 10: return "xrc_recv";
    default: return nullptr;
    }
}

std::string ops_names(std::uint64_t ops)
{
    static const struct {
        std::uint64_t bit;
        const char *name;
    } names[] = {
        {vq::OPS_SEND, "send"}, {vq::OPS_SEND_WITH_IMM, "send_imm"}, {vq::OPS_SEND_WITH_INV, "send_inv"},
        {vq::OPS_RDMA_WRITE, "rdma_write"}, {vq::OPS_RDMA_WRITE_WITH_IMM, "rdma_write_imm"},
        {vq::OPS_RDMA_READ, "rdma_read"}, {vq::OPS_ATOMIC_CMP_AND_SWP, "cmp_swp"},
        {vq::OPS_ATOMIC_FETCH_AND_ADD, "fetch_add"}, {vq::OPS_LOCAL_INV, "local_inv"},
        {vq::OPS_BIND_MW, "bind_mw"}, {vq::OPS_TSO, "tso"}, {vq::OPS_FLUSH, "flush"},
    };
    std::string s;
    for (const auto &n : names)
        if (ops & n.bit)
            s += std::string(s.empty() ? "" : " ") + n.name;
    return s;
}

/** The vq devices and their limits. @return 0, or 1 if one cannot be opened. */
int print_devices()
{
    std::vector<vq::device *> devs;
    vq::get_device_list(devs);
    std::printf("vq devices: %zu\n", devs.size());
    for (const vq::driver *d : vq::registered_drivers())
        if (d->status)
            if (const char *st = d->status())
                std::printf("  driver %s: %s\n", d->name, st);
    int rc = 0;
    for (vq::device *d : devs) {
        std::printf("  %s: %s\n", d->name, d->description ? d->description : "");
        vq::context *ctx = nullptr;
        vq::device_attr a;
        int e = vq::open_device(d, &ctx);
        if (e == 0)
            e = vq::query_device(ctx, &a);
        if (ctx)
            (void)vq::close_device(ctx);
        if (e != 0) {
            std::printf("    cannot open: %s\n", shunt::strerror(e));
            rc = 1;
            continue;
        }
        std::printf("    max_qp %u, max_qp_wr %u, max_sge %u, max_inline_data %u\n", a.max_qp, a.max_qp_wr, a.max_sge,
                    a.max_inline_data);
        std::printf("    max_cq %u, max_cqe %u, max_mr %u, max_mr_size %llu, max_mw %u\n", a.max_cq, a.max_cqe, a.max_mr,
                    static_cast<unsigned long long>(a.max_mr_size), a.max_mw);
        std::printf("    max_srq %u, max_srq_wr %u, max_msg_sz %u, ud_mtu %u%s, max_tso_hdr %u\n", a.max_srq,
                    a.max_srq_wr, a.max_msg_sz, a.ud_mtu, a.ud_grh ? " (+40-byte GRH on receive)" : "", a.max_tso_hdr);
        std::printf("    atomics %s, peers %s\n", a.atomics_global ? "global (atomic against CPU atomics)" : "device only",
                    a.host_local ? "on this host only" : "on this or other hosts");
        for (unsigned t = 0; t < vq::num_qp_types; t++)
            if (a.ops[t] && qp_type_name(t))
                std::printf("    %-10s %s\n", qp_type_name(t), ops_names(a.ops[t]).c_str());
    }
    return rc;
}

} // namespace

int main(int argc, char **argv)
{
    static const option longopts[] = {
        {"topology", no_argument, nullptr, 't'},  {"hugepages", no_argument, nullptr, 'H'},
        {"env", no_argument, nullptr, 'E'},       {"getenv", required_argument, nullptr, 'g'},
        {"version", no_argument, nullptr, 'V'},   {"list", no_argument, nullptr, 'l'},
        {"providers", no_argument, nullptr, 'l'}, {"provider", required_argument, nullptr, 'p'},
        {"ep-type", required_argument, nullptr, 'e'}, {"ep_type", required_argument, nullptr, 'e'},
        {"caps", required_argument, nullptr, 'c'}, {"verbose", no_argument, nullptr, 'v'},
        {"devices", no_argument, nullptr, 'D'},   {"help", no_argument, nullptr, 'h'},
        {"doctor", no_argument, nullptr, 'X'},    {"clean", no_argument, nullptr, 'C'},
        {"json", no_argument, nullptr, 'j'},
        {nullptr, 0, nullptr, 0},
    };
    bool topo = false, huge = false, envs = false, list_provs = false, verbose = false, devices = false;
    bool offers = false, doctor = false, clean = false, json = false;
    std::string prov, env_filter, bad;
    fabric::ep_type type = fabric::FI_EP_UNSPEC;
    std::uint64_t caps = 0;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":tHEg:Vlp:e:c:vDh", longopts, nullptr)) != -1) {
        switch (c) {
        case 't': topo = true; break;
        case 'H': huge = true; break;
        case 'E': envs = true; break;
        case 'g': envs = true; env_filter = optarg; break;
        case 'l': list_provs = true; break;
        case 'p': prov = optarg; offers = true; break;
        case 'e':
            if (!parse_ep_type(optarg, type)) {
                std::fprintf(stderr, "shunt-info: unknown endpoint type '%s' (rdm, msg, dgram)\n", optarg);
                return 2;
            }
            offers = true;
            break;
        case 'c':
            if (!parse_caps(optarg, caps, bad)) {
                std::fprintf(stderr, "shunt-info: unknown capability '%s' in '%s'\n", bad.c_str(), optarg);
                return 2;
            }
            offers = true;
            break;
        case 'v': verbose = true; offers = true; break;
        case 'D': devices = true; break;
        case 'X': doctor = true; break;
        case 'C': clean = true; break;
        case 'j': json = true; break;
        case 'V': std::printf("shunt-info %s\n", SHUNT_VERSION); return 0;
        case 'h': std::fputs(usage, stdout); return 0;
        case ':':
            std::fprintf(stderr, "shunt-info: option '%s' needs an argument\nTry 'shunt-info --help'.\n",
                         argv[optind - 1]);
            return 2;
        default:
            std::fprintf(stderr, "shunt-info: unknown option '%s'\nTry 'shunt-info --help'.\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        std::fprintf(stderr, "shunt-info: unexpected argument '%s'\nTry 'shunt-info --help'.\n", argv[optind]);
        return 2;
    }
    if (clean && !doctor) {
        std::fprintf(stderr, "shunt-info: --clean goes with --doctor\nTry 'shunt-info --help'.\n");
        return 2;
    }
    if (doctor)
        return info::run_doctor(json, clean);
    if (json) {
        std::fprintf(stderr, "shunt-info: --json is implemented for --doctor only\n");
        return 2;
    }
    int rc = 0;
    if (!topo && !huge && !envs && !list_provs && !offers && !devices) {
        print_build();
        rc = print_devices();
        int t = print_topology();
        print_hugepages();
        return rc ? rc : t;
    }
    if (list_provs)
        print_provider_list();
    if (offers) {
        int o = print_offers(prov, type, caps, verbose);
        if (o)
            return o;
    }
    if (devices)
        rc = print_devices();
    if (topo && print_topology() != 0)
        rc = 1;
    if (huge)
        print_hugepages();
    if (envs)
        print_env(env_filter);
    return rc;
}
