// shunt-info: what this Shunt build and this machine offer.
#include "doctor.h"
#include "json.h"
#include "live.h"
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
#include <cstdlib>
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
    "      --live=PID        the statistics of running Shunt process PID (its\n"
    "                        counters with their rates, gauges, histograms over\n"
    "                        the last interval and in total), read through its\n"
    "                        DPDK telemetry socket and refreshed until it exits\n"
    "                        or Ctrl-C (SHUNT_TELEMETRY must not be 0 there)\n"
    "      --interval=SEC    with --live: seconds between refreshes (default 1)\n"
    "      --count=N         with --live: stop after N refreshes\n"
    "      --json            everything above as JSON: one object on one line\n"
    "                        with a key per section asked for (\"build\",\n"
    "                        \"providers\", \"offers\", \"devices\", \"topology\",\n"
    "                        \"hugepages\", \"env\"); --doctor and --live print\n"
    "                        their own objects (--live: one per refresh)\n"
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

std::vector<std::string> words(const char *s)
{
    std::vector<std::string> v;
    std::string cur;
    for (const char *p = s;; p++) {
        if (*p == ' ' || *p == '\0') {
            if (!cur.empty())
                v.push_back(cur);
            cur.clear();
            if (!*p)
                break;
        } else {
            cur += *p;
        }
    }
    return v;
}

void print_build(info::json *j)
{
    if (j) {
        j->key("build").begin_object().key("version").str(SHUNT_VERSION).key("build_type").str(SHUNT_BUILD_TYPE);
        j->key("drivers").strings(words(SHUNT_DRIVERS)).key("providers").strings(words(SHUNT_PROVIDERS));
        j->end_object();
        return;
    }
    std::printf("shunt %s (%s build)\n", SHUNT_VERSION, SHUNT_BUILD_TYPE);
    std::printf("drivers:   %s\n", SHUNT_DRIVERS[0] ? SHUNT_DRIVERS : "(none)");
    std::printf("providers: %s\n", SHUNT_PROVIDERS[0] ? SHUNT_PROVIDERS : "(none)");
}

void topology_json(info::json &j, const env::topology &t)
{
    j.key("topology").begin_object().key("hardware_threads").num(t.cpu_count);
    j.key("cores").begin_array();
    for (const auto &c : t.cores)
        j.begin_object().key("id").num(c.id).key("cpus").numbers(c.cpus).key("l3_group").num(c.l3_group)
            .key("numa_node").num(c.numa_node).end_object();
    j.end_array().key("l3_groups").begin_array();
    for (const auto &g : t.l3_groups)
        j.begin_object().key("cpus").numbers(g.cpus).key("size").num(static_cast<std::uint64_t>(g.size)).end_object();
    j.end_array().key("numa_nodes").begin_array();
    for (const auto &n : t.numa_nodes)
        j.begin_object().key("os_index").num(n.os_index).key("cpus").numbers(n.cpus)
            .key("memory").num(static_cast<std::uint64_t>(n.memory)).end_object();
    j.end_array().key("pci_devices").begin_array();
    for (const auto &p : t.pci_devices)
        j.begin_object().key("address").str(p.address).key("vendor").num(p.vendor).key("device").num(p.device)
            .key("class").num(p.class_id).key("numa_node").num(p.numa_node).key("local_cpus").numbers(p.local_cpus)
            .end_object();
    j.end_array();
    std::vector<unsigned> pick;
    j.key("default_polling_cores");
    if (env::pick_cores(2, pick) == 0)
        j.numbers(pick);
    else
        j.null();
    j.end_object();
}

int print_topology(info::json *j)
{
    const env::topology *t = nullptr;
    int rc = env::get_topology(t);
    if (rc != 0) {
        std::fprintf(stderr, "shunt-info: cannot read topology: %s\n", shunt::strerror(rc));
        return 1;
    }
    if (j) {
        topology_json(*j, *t);
        return 0;
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

void print_hugepages(info::json *j)
{
    env::hugepage_info h = env::probe_hugepages();
    if (j) {
        j->key("hugepages").begin_object().key("reserved").num(static_cast<std::uint64_t>(h.total))
            .key("free").num(static_cast<std::uint64_t>(h.free)).key("page_size").num(static_cast<std::uint64_t>(h.page_size))
            .key("hugetlbfs");
        if (h.mount.empty())
            j->null();
        else
            j->str(h.mount);
        j->end_object();
        return;
    }
    std::printf("hugepages: %lu reserved, %lu free, page size %zu KiB, hugetlbfs %s\n", h.total, h.free,
                h.page_size >> 10, h.mount.empty() ? "(not mounted)" : h.mount.c_str());
    if (h.free == 0)
        std::printf("  none free: Shunt falls back to ordinary pages; reserve with "
                    "'sysctl vm.nr_hugepages=512' (as root)\n");
}

const char *type_name(env::tunable_type t)
{
    switch (t) {
    case env::tunable_type::string: return "string";
    case env::tunable_type::integer: return "integer";
    case env::tunable_type::boolean: return "boolean";
    case env::tunable_type::list: return "list";
    }
    return "?";
}

void print_env(const std::string &filter, info::json *j)
{
    if (j) {
        j->key("env").begin_array();
        for (const env::tunable *t : env::tunables()) {
            if (!filter.empty() && std::string(t->name).find(filter) == std::string::npos)
                continue;
            j->begin_object().key("name").str(t->name).key("layer").str(t->layer).key("type").str(type_name(t->type));
            j->key("default").str(t->defval).key("help").str(t->help);
            if (t->choices)
                j->key("choices").str(t->choices);
            j->key("set").boolean(t->is_set());
            if (t->is_set()) {
                std::string accepted;
                const bool ok = t->check(accepted) == 0;
                j->key("value").str(t->value()).key("valid").boolean(ok);
                if (!ok)
                    j->key("accepted").str(accepted);
            }
            j->end_object();
        }
        j->end_array();
        return;
    }
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

void print_provider_list(info::json *j)
{
    if (j) {
        j->key("providers").begin_array();
        for (const auto &p : fabric::providers()) {
            j->begin_object().key("name").str(p.name).key("version");
            j->str(std::to_string(fabric::FI_MAJOR(p.version)) + "." + std::to_string(fabric::FI_MINOR(p.version)));
            j->key("origin").str(p.origin).key("usable").boolean(p.usable).key("note").str(p.note)
                .key("aliases").strings(words(p.aliases.c_str())).end_object();
        }
        j->end_array();
        return;
    }
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
std::vector<std::string> cap_list(std::uint64_t caps)
{
    std::vector<std::string> v;
    for (const cap_name &c : cap_names)
        if ((caps & c.bit) && std::strcmp(c.name, "ATOMICS") != 0)
            v.push_back(std::string("FI_") + c.name);
    return v;
}

void offer_json(info::json &j, const fabric::info *i, bool verbose)
{
    const auto u = [](std::size_t v) { return static_cast<std::uint64_t>(v); };
    j.begin_object().key("provider").str(i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "");
    j.key("fabric").str(i->fabric_attr->name ? i->fabric_attr->name : "");
    j.key("domain").str(i->domain_attr->name ? i->domain_attr->name : "");
    j.key("version").str(std::to_string(fabric::FI_MAJOR(i->fabric_attr->prov_version)) + "." +
                         std::to_string(fabric::FI_MINOR(i->fabric_attr->prov_version)));
    j.key("type").str(ep_type_name(i->ep_attr->type)).key("protocol").str(protocol_name(i->ep_attr->protocol));
    j.key("caps").strings(cap_list(i->caps)).key("mode").num(i->mode);
    j.key("max_msg_size").num(u(i->ep_attr->max_msg_size)).key("mem_tag_format").num(i->ep_attr->mem_tag_format);
    j.key("inject_size").num(u(i->tx_attr->inject_size)).key("tx_size").num(u(i->tx_attr->size));
    j.key("rx_size").num(u(i->rx_attr->size)).key("iov_limit").num(u(i->tx_attr->iov_limit));
    j.key("mr_mode").num(i->domain_attr->mr_mode).key("cq_data_size").num(u(i->domain_attr->cq_data_size));
    if (verbose) {
        std::vector<char> buf(16384);
        fabric::info_tostr(i, buf.data(), buf.size());
        j.key("fi_tostr").str(buf.data());
    }
    j.end_object();
}

int print_offers(const std::string &prov, fabric::ep_type type, std::uint64_t caps, bool verbose, info::json *j)
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
    if (j) {
        j->key("offers").begin_array();
        for (fabric::info *i = rc == 0 ? all : nullptr; i; i = i->next)
            offer_json(*j, i, verbose);
        j->end_array();
    }
    if (rc != 0 || !all) {
        // fi_info prints "fi_getinfo: -61" and exits with 61.
        std::fprintf(stderr, "shunt-info: getinfo: %d (%s)\n", rc ? rc : -FI_ENODATA,
                     shunt::strerror(rc ? rc : -FI_ENODATA));
        return rc == -FI_ENODATA || rc == 0 ? FI_ENODATA : (rc < 0 ? -rc : 1);
    }
    for (fabric::info *i = j ? nullptr : all; i; i = i->next) {
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

std::vector<std::string> ops_list(std::uint64_t ops)
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
    std::vector<std::string> v;
    for (const auto &n : names)
        if (ops & n.bit)
            v.push_back(n.name);
    return v;
}

std::string ops_names(std::uint64_t ops)
{
    std::string s;
    for (const std::string &n : ops_list(ops))
        s += (s.empty() ? "" : " ") + n;
    return s;
}

void device_json(info::json &j, const vq::device_attr &a)
{
    j.key("max_qp").num(a.max_qp).key("max_qp_wr").num(a.max_qp_wr).key("max_sge").num(a.max_sge);
    j.key("max_inline_data").num(a.max_inline_data).key("max_cq").num(a.max_cq).key("max_cqe").num(a.max_cqe);
    j.key("max_mr").num(a.max_mr).key("max_mr_size").num(static_cast<std::uint64_t>(a.max_mr_size));
    j.key("max_mw").num(a.max_mw).key("max_srq").num(a.max_srq).key("max_srq_wr").num(a.max_srq_wr);
    j.key("max_msg_sz").num(a.max_msg_sz).key("ud_mtu").num(a.ud_mtu).key("max_tso_hdr").num(a.max_tso_hdr);
    j.key("atomics_global").boolean(a.atomics_global).key("host_local").boolean(a.host_local);
    j.key("ops").begin_object();
    for (unsigned t = 0; t < vq::num_qp_types; t++)
        if (a.ops[t] && qp_type_name(t))
            j.key(qp_type_name(t)).strings(ops_list(a.ops[t]));
    j.end_object();
}

/** The vq devices and their limits. @return 0, or 1 if one cannot be opened. */
int print_devices(info::json *j)
{
    std::vector<vq::device *> devs;
    vq::get_device_list(devs);
    if (j) {
        j->key("devices").begin_array();
    } else {
        std::printf("vq devices: %zu\n", devs.size());
        for (const vq::driver *d : vq::registered_drivers())
            if (d->status)
                if (const char *st = d->status())
                    std::printf("  driver %s: %s\n", d->name, st);
    }
    int rc = 0;
    for (vq::device *d : devs) {
        if (j) {
            j->begin_object().key("name").str(d->name).key("description").str(d->description ? d->description : "");
            if (d->drv) {
                j->key("driver").str(d->drv->name);
                if (d->drv->status)
                    if (const char *st = d->drv->status())
                        j->key("driver_status").str(st);
            }
        } else {
            std::printf("  %s: %s\n", d->name, d->description ? d->description : "");
        }
        vq::context *ctx = nullptr;
        vq::device_attr a;
        int e = vq::open_device(d, &ctx);
        if (e == 0)
            e = vq::query_device(ctx, &a);
        if (ctx)
            (void)vq::close_device(ctx);
        if (e != 0) {
            if (j)
                j->key("error").str(shunt::strerror(e)).end_object();
            else
                std::printf("    cannot open: %s\n", shunt::strerror(e));
            rc = 1;
            continue;
        }
        if (j) {
            device_json(*j, a);
            j->end_object();
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
    if (j)
        j->end_array();
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
        {"json", no_argument, nullptr, 'j'},      {"live", required_argument, nullptr, 'L'},
        {"interval", required_argument, nullptr, 'I'}, {"count", required_argument, nullptr, 'N'},
        {nullptr, 0, nullptr, 0},
    };
    bool topo = false, huge = false, envs = false, list_provs = false, verbose = false, devices = false;
    bool offers = false, doctor = false, clean = false, json = false, live_opts = false, version = false;
    long live_pid = 0, count = 0;
    double interval = 1.0;
    char *end = nullptr;
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
        case 'L':
            live_pid = std::strtol(optarg, &end, 10);
            if (*end || live_pid <= 0 || live_pid > (1L << 30)) {
                std::fprintf(stderr, "shunt-info: bad process id '%s'\n", optarg);
                return 2;
            }
            break;
        case 'I':
            interval = std::strtod(optarg, &end);
            live_opts = true;
            if (*end || !(interval >= 0.05 && interval <= 3600)) {
                std::fprintf(stderr, "shunt-info: bad interval '%s' (seconds, 0.05 to 3600)\n", optarg);
                return 2;
            }
            break;
        case 'N':
            count = std::strtol(optarg, &end, 10);
            live_opts = true;
            if (*end || count <= 0) {
                std::fprintf(stderr, "shunt-info: bad count '%s' (a positive number)\n", optarg);
                return 2;
            }
            break;
        case 'V': version = true; break;
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
    if (version) {
        if (json)
            std::printf("%s\n", info::json().begin_object().key("version").str(SHUNT_VERSION).end_object().text().c_str());
        else
            std::printf("shunt-info %s\n", SHUNT_VERSION);
        return 0;
    }
    if (clean && !doctor) {
        std::fprintf(stderr, "shunt-info: --clean goes with --doctor\nTry 'shunt-info --help'.\n");
        return 2;
    }
    if (live_opts && !live_pid) {
        std::fprintf(stderr, "shunt-info: --interval and --count go with --live\nTry 'shunt-info --help'.\n");
        return 2;
    }
    if (live_pid && (doctor || topo || huge || envs || list_provs || offers || devices)) {
        std::fprintf(stderr, "shunt-info: --live goes alone (with --interval, --count, --json)\n");
        return 2;
    }
    if (live_pid)
        return info::run_live(static_cast<pid_t>(live_pid), interval, count, json);
    if (doctor)
        return info::run_doctor(json, clean);
    // Every section prints text, or adds its key to one JSON object.
    info::json doc;
    info::json *j = json ? &doc : nullptr;
    if (j)
        doc.begin_object();
    int rc = 0;
    if (!topo && !huge && !envs && !list_provs && !offers && !devices) {
        print_build(j);
        rc = print_devices(j);
        int t = print_topology(j);
        print_hugepages(j);
        rc = rc ? rc : t;
    } else {
        if (list_provs)
            print_provider_list(j);
        if (offers) {
            int o = print_offers(prov, type, caps, verbose, j);
            if (o && !j)
                return o;
            rc = o;
        }
        if (devices) {
            int d = print_devices(j);
            rc = rc ? rc : d;
        }
        if (topo && print_topology(j) != 0)
            rc = rc ? rc : 1;
        if (huge)
            print_hugepages(j);
        if (envs)
            print_env(env_filter, j);
    }
    if (j)
        std::printf("%s\n", doc.end_object().text().c_str());
    return rc;
}
