#include "env/env.h"

#include "env/compiler.h"
#include "env/errors.h"
#include "env/lcore.h"
#include "env/log.h"
#include "env/segment.h"
#include "env/stats.h"
#include "env/tunable.h"
#include "shunt_config.h"
#include "env/telemetry_detail.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_log.h>

#include <sched.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

namespace shunt::env {

SHUNT_LOG_COMPONENT(env_log, "env");

namespace {

SHUNT_TUNABLE(lcores_tunable, "SHUNT_LCORES", list, "",
              "CPUs that Shunt's polling lcores may use, e.g. 0-3,6 (default: the process's affinity mask)",
              "env");
SHUNT_TUNABLE_CHOICES(huge_tunable, "SHUNT_HUGEPAGES", "auto|required|off|require|on|no|none", "auto",
              "Hugepage policy: auto (use when reserved), required (fail without), off", "env");
int check_memory_mb(const std::string &v, std::string &accepted)
{
    accepted = "0, or 16 and above";
    long long mb = std::strtoll(v.c_str(), nullptr, 0);
    return mb == 0 || mb >= 16 ? 0 : -FI_EINVAL;
}
SHUNT_TUNABLE_CHECKED(memory_tunable, "SHUNT_MEMORY_MB", integer, "0",
                      "EAL heap size in MiB (0: on demand with hugepages, 256 without)", "env", check_memory_mb);
SHUNT_TUNABLE(eal_args_tunable, "SHUNT_EAL_ARGS", string, "",
              "Extra DPDK EAL arguments, space separated, appended after Shunt's own", "env");

enum class phase { fresh, up, down };

struct env_state {
    std::mutex lock;
    phase ph = phase::fresh;
    state st;
};

env_state &es()
{
    static env_state s;
    return s;
}

const state empty_state{};

int parse_policy(const std::string &v, hugepage_policy &out)
{
    if (v == "auto" || v.empty())
        out = hugepage_policy::automatic;
    else if (v == "required" || v == "require" || v == "on")
        out = hugepage_policy::required;
    else if (v == "off" || v == "no" || v == "none")
        out = hugepage_policy::off;
    else
        return -FI_EINVAL;
    return 0;
}

std::vector<std::string> split_ws(const std::string &s)
{
    std::vector<std::string> out;
    std::istringstream in(s);
    std::string w;
    while (in >> w)
        out.push_back(w);
    return out;
}

// Map Shunt's env log level onto the EAL's (RTE_LOG_ERR..RTE_LOG_DEBUG).
int eal_log_level(log::level l)
{
    switch (l) {
    case log::level::none: return RTE_LOG_EMERG;
    case log::level::error: return RTE_LOG_ERR;
    case log::level::warning: return RTE_LOG_ERR; // the EAL's warnings are noise for users
    case log::level::notice: return RTE_LOG_WARNING;
    case log::level::info: return RTE_LOG_INFO;
    case log::level::debug: return RTE_LOG_DEBUG;
    }
    return RTE_LOG_ERR;
}

SHUNT_COLD int fail(int code, const char *what)
{
    SHUNT_LOG(env_log, error, "init: %s", what);
    return code;
}

} // namespace

std::vector<unsigned> affinity_cpus()
{
    std::vector<unsigned> out;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return out;
    for (unsigned c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            out.push_back(c);
    return out;
}

std::string format_cpu_list(const std::vector<unsigned> &cpus)
{
    std::string s;
    for (std::size_t i = 0; i < cpus.size();) {
        std::size_t j = i;
        while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1)
            j++;
        if (!s.empty())
            s += ',';
        s += std::to_string(cpus[i]);
        if (j > i)
            s += '-' + std::to_string(cpus[j]);
        i = j + 1;
    }
    return s;
}

hugepage_info probe_hugepages() noexcept
{
    hugepage_info h;
    std::ifstream mi("/proc/meminfo");
    std::string key;
    unsigned long val;
    std::string line;
    while (std::getline(mi, line)) {
        std::istringstream ls(line);
        ls >> key >> val;
        if (key == "HugePages_Total:")
            h.total = val;
        else if (key == "HugePages_Free:")
            h.free = val;
        else if (key == "Hugepagesize:")
            h.page_size = static_cast<std::size_t>(val) * 1024;
    }
    std::ifstream mounts("/proc/mounts");
    while (std::getline(mounts, line)) {
        std::istringstream ls(line);
        std::string dev, dir, type;
        ls >> dev >> dir >> type;
        if (type == "hugetlbfs" && access(dir.c_str(), W_OK) == 0) {
            h.mount = dir;
            break;
        }
    }
    return h;
}

int parse_cpu_list(const std::string &text, std::vector<unsigned> &out)
{
    std::vector<unsigned> cpus;
    std::size_t i = 0;
    auto number = [&](unsigned &v) {
        if (i >= text.size() || !std::isdigit(static_cast<unsigned char>(text[i])))
            return false;
        unsigned long x = 0;
        while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
            x = x * 10 + static_cast<unsigned>(text[i] - '0');
            if (x > 1u << 20)
                return false;
            i++;
        }
        v = static_cast<unsigned>(x);
        return true;
    };
    if (text.empty())
        return -FI_EINVAL;
    while (i < text.size()) {
        unsigned a, b;
        if (!number(a))
            return -FI_EINVAL;
        b = a;
        if (i < text.size() && text[i] == '-') {
            i++;
            if (!number(b) || b < a)
                return -FI_EINVAL;
        }
        for (unsigned c = a; c <= b; c++)
            cpus.push_back(c);
        if (i < text.size()) {
            if (text[i] != ',' || i + 1 == text.size())
                return -FI_EINVAL;
            i++;
        }
    }
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    std::vector<unsigned> allowed = affinity_cpus();
    for (unsigned c : cpus) {
        if (c >= SHUNT_MAX_LCORES || !std::binary_search(allowed.begin(), allowed.end(), c))
            return -FI_ENODEV;
    }
    out = std::move(cpus);
    return 0;
}

int init(const options &given)
{
    env_state &s = es();
    std::lock_guard g(s.lock);
    if (s.ph == phase::up)
        return 0;
    if (s.ph == phase::down)
        return fail(-FI_EOPBADSTATE, "the EAL cannot be initialised again after fini() in one process");

    // 1. Resolve every option (caller first, then environment) and validate it
    //    before the EAL sees anything: its failures are not all recoverable.
    options o = given;
    if (o.log_level.empty() && std::getenv("SHUNT_LOG_LEVEL"))
        o.log_level = std::getenv("SHUNT_LOG_LEVEL");
    if (!o.log_level.empty() && log::set_levels(o.log_level) != 0) {
        char m[256];
        std::snprintf(m, sizeof m, "bad log level%s '%s' (accepted: error|warning|notice|info|debug|none, "
                                   "or component:level pairs)", given.log_level.empty() ? " SHUNT_LOG_LEVEL" : "",
                      o.log_level.c_str());
        return fail(-FI_EINVAL, m);
    }
    // Every SHUNT_* the environment sets, of every layer loaded, is checked
    // here: init() is the first use of any layer (ensure_init()).
    {
        std::string why;
        if (int rc = check_tunables(why))
            return fail(rc, why.c_str());
    }
    if (!o.hugepages_set && parse_policy(huge_tunable.value(), o.hugepages) != 0) {
        char m[256];
        std::snprintf(m, sizeof m, "bad SHUNT_HUGEPAGES='%s' (use auto, required or off)",
                      huge_tunable.value().c_str());
        return fail(-FI_EINVAL, m);
    }
    if (o.lcores.empty())
        o.lcores = lcores_tunable.value();
    std::vector<unsigned> cpus;
    if (o.lcores.empty()) {
        cpus = affinity_cpus();
        if (cpus.empty())
            return fail(-FI_EIO, "cannot read the process's CPU affinity");
    } else {
        int rc = parse_cpu_list(o.lcores, cpus);
        if (rc != 0) {
            char m[256];
            std::snprintf(m, sizeof m, rc == -FI_ENODEV
                                           ? "lcore list '%s' names a CPU that does not exist or is "
                                             "outside this process's affinity"
                                           : "malformed lcore list '%s' (expected e.g. 0-3,6)",
                          o.lcores.c_str());
            return fail(rc, m);
        }
    }
    if (o.memory_mb == 0 && memory_tunable.is_set()) {
        std::int64_t mb;
        if (memory_tunable.as_int(mb) != 0 || mb < 0)
            return fail(-FI_EINVAL, "SHUNT_MEMORY_MB is not a non-negative integer (accepted: 0, or 16 and above)");
        if (mb != 0 && mb < 16)
            return fail(-FI_EINVAL, "SHUNT_MEMORY_MB below the 16 MiB minimum (accepted: 0, or 16 and above)");
        o.memory_mb = static_cast<std::size_t>(mb);
    }
    struct sysinfo si;
    sysinfo(&si);
    const std::size_t ram_mb = static_cast<std::size_t>(si.totalram) * si.mem_unit >> 20;
    if (o.memory_mb != 0 && o.memory_mb < 16)
        return fail(-FI_EINVAL, "memory amount below the 16 MiB minimum");
    if (o.memory_mb > ram_mb) {
        char m[160];
        std::snprintf(m, sizeof m, "memory amount %zu MiB exceeds this machine's %zu MiB", o.memory_mb, ram_mb);
        return fail(-FI_ENOMEM, m);
    }
    if (o.eal_args.empty())
        o.eal_args = split_ws(eal_args_tunable.value());

    hugepage_info h = probe_hugepages();
    bool use_huge = false;
    if (o.hugepages != hugepage_policy::off && h.free > 0) {
        std::size_t free_mb = h.free * (h.page_size >> 20);
        if (o.memory_mb > free_mb) {
            if (o.hugepages == hugepage_policy::required) {
                char m[256];
                std::snprintf(m, sizeof m, "%zu MiB asked but only %zu MiB of hugepages are free; "
                                           "reserve more with 'sysctl vm.nr_hugepages=%zu' (as root)",
                              o.memory_mb, free_mb, (o.memory_mb << 20) / h.page_size + h.total - h.free);
                return fail(-FI_ENOMEM, m);
            }
        } else {
            use_huge = true;
        }
    }
    if (!use_huge && o.hugepages == hugepage_policy::required)
        return fail(-FI_ENOMEM, "hugepages required (SHUNT_HUGEPAGES=required) but none are free; "
                                "reserve them with 'sysctl vm.nr_hugepages=512' (as root), or set "
                                "SHUNT_HUGEPAGES=auto to fall back to ordinary pages");
    if (!use_huge && o.hugepages == hugepage_policy::automatic)
        SHUNT_LOG(env_log, warning, "no free hugepages: using ordinary pages (slower TLB behaviour). "
                                    "Reserve some with 'sysctl vm.nr_hugepages=512' (as root)");

    // 2. Build the EAL command line. lcore 0 is the calling thread and floats
    //    over every allowed CPU (the application's thread is not pinned behind
    //    its back); lcore i+1 is pinned to cpus[i] for polling threads.
    std::vector<std::string> a{"shunt"};
    std::string map = "0@(" + format_cpu_list(cpus) + ")";
    for (std::size_t i = 0; i < cpus.size(); i++)
        map += "," + std::to_string(i + 1) + "@" + std::to_string(cpus[i]);
    a.push_back("--lcores=" + map);
    a.push_back("--main-lcore=0");
    // One private runtime per process: no shared config, so any number of
    // independent processes can run at once. Its directory holds only the
    // telemetry socket (SHUNT_TELEMETRY), named by the prefix.
    a.push_back("--file-prefix=shunt-" + std::to_string(getpid()));
    const bool telemetry = stats::enabled();
    a.push_back(telemetry ? "--telemetry" : "--no-telemetry");
    bool wants_pci = false;
    for (const std::string &x : o.eal_args)
        if (x == "-a" || x.rfind("--allow", 0) == 0 || x == "-b" || x.rfind("--block", 0) == 0)
            wants_pci = true;
    if (!wants_pci)
        a.push_back("--no-pci");
    if (use_huge) {
        a.push_back("--in-memory");
        if (o.memory_mb)
            a.push_back("-m" + std::to_string(o.memory_mb));
    } else {
        a.push_back("--no-huge");
        a.push_back("--no-shconf");
        a.push_back("-m" + std::to_string(o.memory_mb ? o.memory_mb : SHUNT_DEFAULT_MEMORY_MB));
    }
    a.push_back("--log-level=" + std::to_string(eal_log_level(env_log.current)));
    for (const std::string &x : o.eal_args)
        a.push_back(x);

    std::vector<char *> argv;
    for (std::string &x : a)
        argv.push_back(x.data());
    argv.push_back(nullptr);
    // rte_eal_init may permute argv; give it copies.
    std::vector<std::string> copy = a;
    detail::telemetry_commands();
    int rc = rte_eal_init(static_cast<int>(a.size()), argv.data());
    if (rc < 0) {
        char m[512];
        std::snprintf(m, sizeof m, "rte_eal_init failed: %s", rte_strerror(rte_errno));
        if (!o.eal_args.empty() && rte_errno != EALREADY)
            std::snprintf(m + std::strlen(m), sizeof m - std::strlen(m),
                          " (check the extra arguments of SHUNT_EAL_ARGS / options::eal_args: accepted are "
                          "DPDK EAL options, see dpdk-testpmd --help)");
        return fail(rte_errno == EALREADY ? -FI_EOPBADSTATE : -FI_EIO, m);
    }
    // The runtime directory: kept (for the socket) until fini() or exit with
    // telemetry, else removed now; those of dead processes go as well.
    bool socket = telemetry;
    for (const std::string &x : o.eal_args)
        if (x == "--no-telemetry")
            socket = false;
    detail::telemetry_started(rte_eal_get_runtime_dir(), socket);
    detail::cleanup_stale_runtime_dirs();

    s.st.hugepages = use_huge;
    s.st.hugepage_size = use_huge ? h.page_size : 0;
    s.st.memory_mb = o.memory_mb ? o.memory_mb : (use_huge ? 0 : SHUNT_DEFAULT_MEMORY_MB);
    s.st.cpus = cpus;
    s.st.eal_argv = copy;
    s.st.telemetry = socket;
    s.st.runtime_dir = socket ? rte_eal_get_runtime_dir() : "";
    s.ph = phase::up;
    int removed = cleanup_stale_segments();
    if (removed > 0)
        SHUNT_LOG(env_log, notice, "removed %d shared segment(s) left by dead processes", removed);
    SHUNT_LOG(env_log, info, "initialised: %s, lcores %s", use_huge ? "hugepages" : "ordinary pages",
              format_cpu_list(cpus).c_str());
    return 0;
}

int ensure_init()
{
    if (initialized())
        return 0;
    return init(options{});
}

bool initialized() noexcept
{
    env_state &s = es();
    std::lock_guard g(s.lock);
    return s.ph == phase::up;
}

void fini() noexcept
{
    env_state &s = es();
    std::lock_guard g(s.lock);
    if (s.ph != phase::up)
        return;
    progress::stop();
    detail::stats_eal_down();
    detail::telemetry_stopped();
    rte_eal_cleanup();
    s.st = state{};
    s.ph = phase::down;
}

const state &current() noexcept
{
    env_state &s = es();
    std::lock_guard g(s.lock);
    return s.ph == phase::up ? s.st : empty_state;
}

} // namespace shunt::env
