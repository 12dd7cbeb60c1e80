// DPDK's telemetry socket: Shunt's commands on it, the runtime directory's
// lifetime, and a client of the socket's protocol.
#include "env/telemetry.h"

#include "env/errors.h"
#include "env/log.h"
#include "env/stats.h"
#include "env/tsc.h"
#include "shunt_config.h"
#include "env/telemetry_detail.h"

#include <rte_telemetry.h>

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace shunt::env {

SHUNT_LOG_COMPONENT(telemetry_log, "env");

namespace {

constexpr char socket_name[] = "dpdk_telemetry.v2";

// ---- Shunt's commands (run on DPDK's telemetry thread) ----

int cmd_info(const char *, const char *, rte_tel_data *d)
{
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_int(d, "pid", static_cast<int>(getpid()));
    rte_tel_data_add_dict_string(d, "version", SHUNT_VERSION);
    rte_tel_data_add_dict_u64(d, "tsc_hz", tsc::hz());
    rte_tel_data_add_dict_int(d, "blocks", static_cast<int>(stats::list().size()));
    return 0;
}

int cmd_list(const char *, const char *, rte_tel_data *d)
{
    rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
    std::vector<std::string> names = stats::list();
    for (std::size_t i = 0; i < names.size() && i < RTE_TEL_MAX_ARRAY_ENTRIES; i++)
        rte_tel_data_add_array_string(d, names[i].c_str());
    return 0;
}

/** NAME_count, _mean, percentiles, _max and the non-empty buckets of one
 *  histogram; cycle histograms in ns. */
void add_histogram(rte_tel_data *d, const stats::field_value &f)
{
    const stats::histogram_snapshot &h = f.hist;
    const bool time = f.u == stats::unit::cycles || f.u == stats::unit::ns;
    const double k = f.u == stats::unit::cycles ? 1e9 / static_cast<double>(tsc::hz()) : 1.0;
    const std::string sfx = time ? "_ns" : "";
    auto conv = [&](double v) { return static_cast<std::uint64_t>(std::llround(v * k)); };
    auto key = [&](const char *what) { return f.name + "_" + what + sfx; };
    rte_tel_data_add_dict_u64(d, (f.name + "_count").c_str(), h.total);
    rte_tel_data_add_dict_u64(d, key("mean").c_str(), conv(h.mean()));
    static const struct {
        const char *name;
        double pct;
    } pcts[] = {{"p50", 50}, {"p90", 90}, {"p99", 99}, {"p999", 99.9}, {"p9999", 99.99}};
    for (const auto &p : pcts)
        rte_tel_data_add_dict_u64(d, key(p.name).c_str(), conv(static_cast<double>(h.percentile(p.pct))));
    rte_tel_data_add_dict_u64(d, key("max").c_str(), conv(static_cast<double>(h.max)));
    rte_tel_data_add_dict_u64(d, key("sum").c_str(), conv(static_cast<double>(h.sum)));
    rte_tel_data *le = rte_tel_data_alloc();
    rte_tel_data *n = rte_tel_data_alloc();
    if (!le || !n) {
        rte_tel_data_free(le);
        rte_tel_data_free(n);
        return;
    }
    rte_tel_data_start_array(le, RTE_TEL_U64_VAL);
    rte_tel_data_start_array(n, RTE_TEL_U64_VAL);
    for (unsigned b = 0; b < h.counts.size(); b++) {
        if (!h.counts[b])
            continue;
        const std::uint64_t hi = std::min(stats::histogram::bucket_high(b), h.max);
        rte_tel_data_add_array_u64(le, conv(static_cast<double>(hi)));
        rte_tel_data_add_array_u64(n, h.counts[b]);
    }
    rte_tel_data_add_dict_container(d, key("le").c_str(), le, 0);
    rte_tel_data_add_dict_container(d, (f.name + "_n").c_str(), n, 0);
}

int cmd_stats(const char *cmd, const char *params, rte_tel_data *d)
{
    if (!params || !*params)
        return cmd_list(cmd, params, d);
    stats::block_snapshot b;
    if (stats::read(params, b) != 0)
        return -EINVAL; // the reply is {"/shunt/stats": null}
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_string(d, "name", b.name.c_str());
    rte_tel_data_add_dict_string(d, "type", b.type.c_str());
    rte_tel_data *gauges = rte_tel_data_alloc(), *bytes = rte_tel_data_alloc();
    if (gauges)
        rte_tel_data_start_array(gauges, RTE_TEL_STRING_VAL);
    if (bytes)
        rte_tel_data_start_array(bytes, RTE_TEL_STRING_VAL);
    for (const stats::field_value &f : b.fields) {
        if (f.k == stats::kind::histogram) {
            add_histogram(d, f);
            continue;
        }
        rte_tel_data_add_dict_u64(d, f.name.c_str(), f.value);
        if (f.k == stats::kind::gauge && gauges)
            rte_tel_data_add_array_string(gauges, f.name.c_str());
        if (f.u == stats::unit::bytes && bytes)
            rte_tel_data_add_array_string(bytes, f.name.c_str());
    }
    // Which scalars are gauges (no rate) and byte counts, for viewers.
    if (gauges)
        rte_tel_data_add_dict_container(d, "gauges", gauges, 0);
    if (bytes)
        rte_tel_data_add_dict_container(d, "bytes", bytes, 0);
    return 0;
}

// ---- the runtime directory ----

struct dir_state {
    std::mutex mu;
    char path[4096] = {}; // a char array: read by the atexit handler after static destructors may have run
    pid_t owner = 0;      // the process that initialised: a forked child exiting must not remove it
    bool registered = false;
};

dir_state &ds()
{
    static dir_state *s = new dir_state;
    return *s;
}

/** Unlink every non-directory entry of @p dir (our own runtime directory:
 *  the socket), then the directory. @return true if it is gone. */
bool remove_dir(const char *dir) noexcept
{
    if (DIR *d = opendir(dir)) {
        while (dirent *e = readdir(d)) {
            if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0)
                continue;
            char p[4352];
            std::snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && !S_ISDIR(st.st_mode))
                unlink(p);
        }
        closedir(d);
    }
    return rmdir(dir) == 0 || errno == ENOENT;
}

void remove_at_exit() noexcept
{
    dir_state &s = ds();
    if (s.path[0] && s.owner == getpid())
        remove_dir(s.path);
    s.path[0] = 0;
}

bool pid_alive(pid_t pid)
{
    return kill(pid, 0) == 0 || errno == EPERM;
}

/** Someone accepts on the socket at @p path. */
bool socket_live(const std::string &path)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    bool live = ::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
    ::close(fd);
    return live;
}

/** "shunt-<pid>" -> pid, else 0. */
pid_t prefix_pid(const char *name)
{
    if (std::strncmp(name, "shunt-", 6) != 0 || !name[6])
        return 0;
    char *end = nullptr;
    long v = std::strtol(name + 6, &end, 10);
    return *end == '\0' && v > 0 && v < (1L << 30) ? static_cast<pid_t>(v) : 0;
}

} // namespace

namespace telemetry {

std::string runtime_base()
{
    // As DPDK's eal_create_runtime_dir(): by the real user id.
    if (getuid() == 0)
        return "/var/run";
    const char *x = std::getenv("XDG_RUNTIME_DIR");
    return x && *x ? x : "/tmp";
}

std::string file_prefix(pid_t pid) { return "shunt-" + std::to_string(pid); }

std::string socket_path(pid_t pid)
{
    return runtime_base() + "/dpdk/" + file_prefix(pid) + "/" + socket_name;
}

std::vector<pid_t> processes()
{
    std::vector<pid_t> out;
    const std::string base = runtime_base() + "/dpdk";
    DIR *d = opendir(base.c_str());
    if (!d)
        return out;
    while (dirent *e = readdir(d)) {
        pid_t pid = prefix_pid(e->d_name);
        struct stat st;
        if (pid && pid_alive(pid) && stat(socket_path(pid).c_str(), &st) == 0 && S_ISSOCK(st.st_mode))
            out.push_back(pid);
    }
    closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

int client::connect(const std::string &path)
{
    close();
    sockaddr_un a{};
    if (path.size() >= sizeof a.sun_path)
        return -FI_EINVAL;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
        int e = errno;
        ::close(fd);
        return e == ENOENT ? -FI_ENOENT : e == ECONNREFUSED ? -FI_ECONNREFUSED : -e;
    }
    fd_ = fd;
    std::string g;
    int rc = query("", g, 2000); // the greeting comes unasked
    if (rc != 0 || g.find("\"max_output_len\"") == std::string::npos) {
        close();
        return rc ? rc : -FI_EIO;
    }
    greeting_ = g;
    const char *m = std::strstr(g.c_str(), "\"max_output_len\":");
    unsigned long len = m ? std::strtoul(m + 17, nullptr, 10) : 0;
    max_len_ = len >= 1024 && len <= (1u << 24) ? len : 16384;
    return 0;
}

int client::query(const std::string &command, std::string &reply, int timeout_ms)
{
    if (fd_ < 0)
        return -FI_ENOTCONN;
    if (!command.empty()) {
        if (command[0] != '/' || command.size() > 1024)
            return -FI_EINVAL;
        if (::send(fd_, command.data(), command.size(), MSG_NOSIGNAL) < 0)
            return errno == EPIPE || errno == ECONNRESET ? -FI_ECONNRESET : -errno;
    }
    pollfd p{fd_, POLLIN, 0};
    int r;
    do {
        r = poll(&p, 1, timeout_ms);
    } while (r < 0 && errno == EINTR);
    if (r == 0)
        return -FI_ETIMEDOUT;
    if (r < 0)
        return -errno;
    std::string buf(max_len_ + 1, '\0');
    ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n <= 0)
        return -FI_ECONNRESET;
    buf.resize(static_cast<std::size_t>(n));
    reply = std::move(buf);
    return 0;
}

void client::close() noexcept
{
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = -1;
    greeting_.clear();
}

} // namespace telemetry

namespace detail {

void telemetry_commands()
{
    // DPDK's command table is guarded by a spinlock inside librte_telemetry,
    // which is not instrumented: registered after rte_eal_init, the entries
    // would reach the threads serving the socket by an order
    // ThreadSanitizer cannot see (and a client connecting as soon as the
    // socket appears could find no Shunt command). Before it, the thread
    // creation orders them.
    static std::once_flag commands;
    std::call_once(commands, [] {
        rte_telemetry_register_cmd("/shunt/info", cmd_info, "Shunt: pid, version, TSC Hz, number of statistics blocks");
        rte_telemetry_register_cmd("/shunt/list", cmd_list, "Shunt: names of the statistics blocks");
        rte_telemetry_register_cmd("/shunt/stats", cmd_stats,
                                   "Shunt: one statistics block. Parameters: the block's name (see /shunt/list)");
    });
}

void telemetry_started(const std::string &runtime_dir, bool socket)
{
    if (runtime_dir.empty())
        return;
    if (!socket) {
        // Nothing lives in it without the socket (--in-memory / --no-shconf).
        rmdir(runtime_dir.c_str());
        return;
    }
    dir_state &s = ds();
    std::lock_guard g(s.mu);
    std::snprintf(s.path, sizeof s.path, "%s", runtime_dir.c_str());
    s.owner = getpid();
    if (!s.registered) {
        s.registered = true;
        std::atexit(remove_at_exit);
    }
    SHUNT_LOG(telemetry_log, info, "telemetry socket %s/%s (dpdk-telemetry.py -f shunt-%d)", runtime_dir.c_str(),
              socket_name, static_cast<int>(getpid()));
}

void telemetry_stopped() noexcept
{
    dir_state &s = ds();
    std::lock_guard g(s.mu);
    if (s.path[0] && s.owner == getpid())
        remove_dir(s.path);
    s.path[0] = 0;
}

int cleanup_stale_runtime_dirs() noexcept
{
    const std::string base = telemetry::runtime_base() + "/dpdk";
    DIR *d = opendir(base.c_str());
    if (!d)
        return 0;
    int removed = 0;
    while (dirent *e = readdir(d)) {
        const pid_t pid = prefix_pid(e->d_name);
        if (!pid || pid == getpid() || pid_alive(pid))
            continue;
        const std::string dir = base + "/" + e->d_name;
        struct stat st;
        if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
            continue;
        // A process of that number in another PID namespace may still serve it.
        if (socket_live(dir + "/" + socket_name))
            continue;
        if (remove_dir(dir.c_str()))
            removed++;
    }
    closedir(d);
    return removed;
}

} // namespace detail
} // namespace shunt::env
