// shunt-info --doctor: a preflight check of this machine for low-latency
// polling. Each finding says what was seen and how to fix it.
#include "doctor.h"
#include "json.h"

#include "env/env.h"
#include "env/segment.h"
#include "env/tunable.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace shunt::info {
namespace {

enum class verdict { ok, warn, fail, note };
const char *verdict_name(verdict v)
{
    switch (v) {
    case verdict::ok: return "ok";
    case verdict::warn: return "warn";
    case verdict::fail: return "fail";
    case verdict::note: return "note";
    }
    return "?";
}

struct finding {
    std::string check;
    verdict v;
    std::string detail;
    std::string fix;
};

std::string read_line(const std::string &path)
{
    std::ifstream f(path);
    std::string s;
    std::getline(f, s);
    return s;
}

std::vector<unsigned> cpu_list_of(const std::string &text)
{
    // Kernel lists ("0-3,6") of CPUs that may be outside our affinity.
    std::vector<unsigned> out;
    std::stringstream ss(text);
    std::string part;
    while (std::getline(ss, part, ',')) {
        unsigned a = 0, b = 0;
        if (std::sscanf(part.c_str(), "%u-%u", &a, &b) == 2)
            for (unsigned c = a; c <= b && c < 65536; c++)
                out.push_back(c);
        else if (std::sscanf(part.c_str(), "%u", &a) == 1)
            out.push_back(a);
    }
    return out;
}

std::string json_str(const std::string &s) { return json::quote(s); }

void check_hugepages(std::vector<finding> &out)
{
    env::hugepage_info h = env::probe_hugepages();
    if (h.total == 0) {
        out.push_back({"hugepages reserved", verdict::warn, "no hugepages are reserved (ordinary pages: more TLB misses)",
                       "sysctl vm.nr_hugepages=512 (as root; add to /etc/sysctl.conf to keep it)"});
    } else {
        out.push_back({"hugepages reserved", h.free ? verdict::ok : verdict::warn,
                       std::to_string(h.total) + " reserved, " + std::to_string(h.free) + " free of " +
                           std::to_string(h.page_size >> 10) + " KiB",
                       h.free ? "" : "reserve more: sysctl vm.nr_hugepages=" + std::to_string(h.total + 256)});
    }
    if (h.mount.empty()) {
        bool mounted = false;
        std::ifstream m("/proc/mounts");
        std::string dev, dir, type, rest;
        while (m >> dev >> dir >> type && std::getline(m, rest))
            mounted |= type == "hugetlbfs";
        out.push_back({"hugetlbfs mounted and writable", verdict::warn,
                       mounted ? "a hugetlbfs is mounted but not writable for this user (shared segments use /dev/shm)"
                               : "no hugetlbfs mount (shared segments use /dev/shm)",
                       mounted ? "mount it with uid=/gid= of this user, or run as its owner"
                               : "mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages (as root)"});
        return;
    }
    std::string probe = h.mount + "/.shunt-doctor-" + std::to_string(getpid());
    FILE *f = std::fopen(probe.c_str(), "w");
    if (f) {
        std::fclose(f);
        ::unlink(probe.c_str());
    }
    out.push_back({"hugetlbfs mounted and writable", f ? verdict::ok : verdict::warn,
                   h.mount + (f ? " is writable" : " is not writable for this user"),
                   f ? "" : "chown or remount " + h.mount + " for this user"});
}

void check_cores(const std::vector<unsigned> &cpus, std::vector<finding> &out)
{
    const std::string list = env::format_cpu_list(cpus);
    std::vector<unsigned> iso = cpu_list_of(read_line("/sys/devices/system/cpu/isolated"));
    std::vector<unsigned> nohz = cpu_list_of(read_line("/sys/devices/system/cpu/nohz_full"));
    std::vector<unsigned> not_iso, not_nohz;
    for (unsigned c : cpus) {
        if (std::find(iso.begin(), iso.end(), c) == iso.end())
            not_iso.push_back(c);
        if (std::find(nohz.begin(), nohz.end(), c) == nohz.end())
            not_nohz.push_back(c);
    }
    out.push_back({"polling cores isolated (isolcpus)", not_iso.empty() ? verdict::ok : verdict::warn,
                   not_iso.empty() ? "CPUs " + list + " are isolated"
                                   : "CPUs " + env::format_cpu_list(not_iso) + " are not isolated: the scheduler puts other tasks there",
                   not_iso.empty() ? "" : "boot with isolcpus=" + env::format_cpu_list(not_iso) + " (kernel command line)"});
    out.push_back({"polling cores tickless (nohz_full)", not_nohz.empty() ? verdict::ok : verdict::warn,
                   not_nohz.empty() ? "CPUs " + list + " are nohz_full"
                                    : "CPUs " + env::format_cpu_list(not_nohz) + " take the scheduler tick",
                   not_nohz.empty() ? "" : "boot with nohz_full=" + env::format_cpu_list(not_nohz) + " rcu_nocbs=" +
                                               env::format_cpu_list(not_nohz)});
    for (unsigned c : cpus) {
        std::vector<unsigned> sib = cpu_list_of(
            read_line("/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/thread_siblings_list"));
        sib.erase(std::remove(sib.begin(), sib.end(), c), sib.end());
        if (!sib.empty())
            out.push_back({"SMT siblings of polling cores", verdict::warn,
                           "CPU " + std::to_string(c) + " shares its core with CPU " + env::format_cpu_list(sib),
                           "keep CPU " + env::format_cpu_list(sib) + " idle (isolcpus) or disable SMT: echo off > /sys/devices/system/cpu/smt/control"});
    }
    if (std::none_of(out.begin(), out.end(), [](const finding &f) { return f.check == "SMT siblings of polling cores"; }))
        out.push_back({"SMT siblings of polling cores", verdict::ok, "no polling CPU shares its core", ""});
    std::vector<unsigned> slow;
    bool any_freq = false;
    for (unsigned c : cpus) {
        std::string g = read_line("/sys/devices/system/cpu/cpu" + std::to_string(c) + "/cpufreq/scaling_governor");
        if (g.empty())
            continue;
        any_freq = true;
        if (g != "performance")
            slow.push_back(c);
    }
    if (!any_freq)
        out.push_back({"cpufreq governor", verdict::note, "no cpufreq on these CPUs (a virtual machine, or fixed frequency)", ""});
    else
        out.push_back({"cpufreq governor", slow.empty() ? verdict::ok : verdict::warn,
                       slow.empty() ? "performance on CPUs " + list
                                    : "CPUs " + env::format_cpu_list(slow) + " do not use the performance governor",
                       slow.empty() ? "" : "cpupower frequency-set -g performance (as root)"});
    std::string no_turbo = read_line("/sys/devices/system/cpu/intel_pstate/no_turbo");
    std::string boost = read_line("/sys/devices/system/cpu/cpufreq/boost");
    if (no_turbo.empty() && boost.empty())
        out.push_back({"turbo", verdict::note, "no turbo control exposed", ""});
    else {
        bool on = no_turbo.empty() ? boost == "1" : no_turbo == "0";
        out.push_back({"turbo", on ? verdict::note : verdict::ok,
                       on ? "turbo is on: frequency (and latency) varies with load and temperature" : "turbo is off",
                       on ? "for steady figures: echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo" : ""});
    }
}

void check_irqs(const std::vector<unsigned> &cpus, std::vector<finding> &out)
{
    std::vector<std::string> hit;
    if (DIR *d = ::opendir("/proc/irq")) {
        while (dirent *e = ::readdir(d)) {
            std::string n = e->d_name;
            if (n.empty() || !std::isdigit(static_cast<unsigned char>(n[0])))
                continue;
            std::vector<unsigned> aff = cpu_list_of(read_line("/proc/irq/" + n + "/effective_affinity_list"));
            if (aff.empty())
                aff = cpu_list_of(read_line("/proc/irq/" + n + "/smp_affinity_list"));
            for (unsigned c : cpus)
                if (std::find(aff.begin(), aff.end(), c) != aff.end()) {
                    hit.push_back(n);
                    break;
                }
        }
        ::closedir(d);
    }
    std::sort(hit.begin(), hit.end(), [](const std::string &a, const std::string &b) { return std::stoi(a) < std::stoi(b); });
    std::string ids;
    for (std::size_t i = 0; i < hit.size() && i < 12; i++)
        ids += (i ? "," : "") + hit[i];
    if (hit.size() > 12)
        ids += ",...";
    out.push_back({"IRQ affinity on polling cores", hit.empty() ? verdict::ok : verdict::warn,
                   hit.empty() ? "no interrupt is delivered to the polling CPUs"
                               : std::to_string(hit.size()) + " interrupt(s) may be delivered to the polling CPUs (IRQ " + ids + ")",
                   hit.empty() ? "" : "move them: echo <other CPUs> > /proc/irq/N/smp_affinity_list (as root), and stop irqbalance or give it IRQBALANCE_BANNED_CPULIST"});
}

void check_memlock(std::vector<finding> &out)
{
    rlimit r{};
    getrlimit(RLIMIT_MEMLOCK, &r);
    const rlim_t want = 256ull << 20;
    bool ok = r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= want;
    out.push_back({"memlock limit", ok ? verdict::ok : verdict::warn,
                   r.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(r.rlim_cur >> 10) + " KiB may be locked",
                   ok ? "" : "ulimit -l unlimited (or memlock in /etc/security/limits.conf): registered memory and the ConnectX driver lock pages"});
}

void check_xdp(std::vector<finding> &out)
{
    // AF_XDP is 44; the ethdev driver's af_xdp path needs it.
    int fd = ::socket(44, SOCK_RAW | SOCK_CLOEXEC, 0);
    int err = errno;
    if (fd >= 0)
        ::close(fd);
    bool ok = fd >= 0;
    out.push_back({"XDP sockets (ethdev driver)", ok ? verdict::ok : verdict::note,
                   ok ? std::string("AF_XDP sockets can be created")
                      : std::string("AF_XDP socket refused: ") + std::strerror(err) +
                            (err == EPERM ? " (needs CAP_NET_RAW/CAP_BPF)" : " (kernel without CONFIG_XDP_SOCKETS)"),
                   ok ? "" : err == EPERM ? "run as root or grant CAP_NET_RAW,CAP_BPF" : "use a kernel built with CONFIG_XDP_SOCKETS=y"});
}

void check_segments(bool clean, std::vector<finding> &out)
{
    std::vector<std::string> dirs{"/dev/shm"};
    env::hugepage_info h = env::probe_hugepages();
    if (!h.mount.empty())
        dirs.push_back(h.mount);
    int stale = 0;
    const std::time_t now = std::time(nullptr);
    for (const std::string &dir : dirs) {
        DIR *d = ::opendir(dir.c_str());
        if (!d)
            continue;
        while (dirent *e = ::readdir(d)) {
            std::string n = e->d_name;
            if (n.rfind("shunt.", 0) != 0)
                continue;
            std::string p = dir + "/" + n;
            struct stat st {};
            if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || now - st.st_ctime < 2)
                continue;
            int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
            if (fd < 0)
                continue;
            if (::flock(fd, LOCK_EX | LOCK_NB) == 0) // nobody holds it
                stale++;
            ::close(fd);
        }
        ::closedir(d);
    }
    if (clean && stale > 0) {
        int removed = env::cleanup_stale_segments();
        out.push_back({"stale shared segments", verdict::ok,
                       "removed " + std::to_string(removed) + " segment(s) left by dead processes", ""});
        return;
    }
    out.push_back({"stale shared segments", stale ? verdict::warn : verdict::ok,
                   stale ? std::to_string(stale) + " segment(s) in /dev/shm or hugetlbfs held by no process"
                         : "none",
                   stale ? "shunt-info --doctor --clean (removes this user's segments no process holds)" : ""});
}

void check_tunables(std::vector<finding> &out)
{
    int bad = 0;
    for (const env::tunable *t : env::tunables()) {
        if (!t->is_set())
            continue;
        std::string accepted;
        if (t->check(accepted) != 0) {
            bad++;
            out.push_back({"environment " + std::string(t->name), verdict::fail,
                           std::string(t->name) + "='" + t->value() + "' is not valid",
                           "set it to " + accepted + ", or unset it"});
        }
    }
    if (!bad)
        out.push_back({"environment SHUNT_*", verdict::ok, "every SHUNT_* variable set is valid", ""});
}

} // namespace

int run_doctor(bool json, bool clean)
{
    std::vector<finding> f;
    // The CPUs polling lcores would use: SHUNT_LCORES, else the affinity mask.
    std::vector<unsigned> cpus;
    const env::tunable *lc = env::find_tunable("SHUNT_LCORES");
    if (!lc || !lc->is_set() || env::parse_cpu_list(lc->value(), cpus) != 0)
        cpus = env::affinity_cpus();
    check_tunables(f);
    check_hugepages(f);
    check_cores(cpus, f);
    check_irqs(cpus, f);
    check_memlock(f);
    check_xdp(f);
    check_segments(clean, f);
    int problems = 0;
    for (const finding &x : f)
        problems += x.v == verdict::warn || x.v == verdict::fail;
    if (json) {
        std::printf("{\"polling_cpus\":%s,\"problems\":%d,\"checks\":[", json_str(env::format_cpu_list(cpus)).c_str(),
                    problems);
        for (std::size_t i = 0; i < f.size(); i++)
            std::printf("%s{\"check\":%s,\"status\":\"%s\",\"detail\":%s,\"fix\":%s}", i ? "," : "",
                        json_str(f[i].check).c_str(), verdict_name(f[i].v), json_str(f[i].detail).c_str(),
                        json_str(f[i].fix).c_str());
        std::printf("]}\n");
    } else {
        std::printf("preflight for polling CPUs %s (SHUNT_LCORES or the affinity mask):\n",
                    env::format_cpu_list(cpus).c_str());
        for (const finding &x : f) {
            std::printf("  [%-4s] %-36s %s\n", verdict_name(x.v), x.check.c_str(), x.detail.c_str());
            if (!x.fix.empty())
                std::printf("         %-36s fix: %s\n", "", x.fix.c_str());
        }
        std::printf("%d problem(s)\n", problems);
    }
    return problems ? 1 : 0;
}

} // namespace shunt::info
