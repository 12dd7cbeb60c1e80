/* DPDK's telemetry socket: where a Shunt process serves its statistics, and
 * a small client of that socket's protocol (what dpdk-telemetry.py speaks).
 *
 * With SHUNT_TELEMETRY=1 (the default) env::init() starts the EAL with its
 * own runtime directory (`--file-prefix=shunt-<pid>`) and `--telemetry`, so
 * each process has a socket `<runtime base>/dpdk/shunt-<pid>/dpdk_telemetry.v2`
 * (runtime base: /var/run for root, else $XDG_RUNTIME_DIR or /tmp). It
 * answers DPDK's own commands (`/eal/params`, `/help` ...) and Shunt's:
 *   /shunt/info            pid, version, TSC Hz, number of blocks
 *   /shunt/list            names of the statistics blocks (stats.h)
 *   /shunt/stats,NAME      one block: counters and gauges, and per histogram
 *                          NAME_count, _mean, _p50 .. _p9999, _max (in ns
 *                          for cycle histograms, suffix _ns) and the
 *                          non-empty buckets as two arrays NAME_le / NAME_n
 * The directory is removed when the process calls env::fini() or exits;
 * directories of processes that died without either are removed by the next
 * env::init() of the same user. */
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace shunt::env::telemetry {

/** The runtime directory base DPDK uses for this user (no trailing slash). */
std::string runtime_base();
/** DPDK file prefix of process @p pid ("shunt-<pid>"). */
std::string file_prefix(pid_t pid);
/** The telemetry socket of Shunt process @p pid (it may not exist). */
std::string socket_path(pid_t pid);
/** PIDs of the live Shunt processes of this user that serve a telemetry
 *  socket, ascending. */
std::vector<pid_t> processes();

/** A connection to a telemetry socket (SOCK_SEQPACKET, one JSON reply per
 *  command). Not thread safe. */
class client {
public:
    client() noexcept = default;
    ~client() { close(); }
    client(const client &) = delete;
    client &operator=(const client &) = delete;

    /** Connect to @p path and read the greeting.
     *  @return 0; -FI_ENOENT no such socket; -FI_ECONNREFUSED nobody
     *  listens (a stale socket); -FI_EIO a malformed greeting; -errno. */
    [[nodiscard]] int connect(const std::string &path);
    /** Send @p command ("/shunt/list", "/shunt/stats,env.progress") and
     *  wait at most @p timeout_ms for the reply (a JSON object, returned
     *  as text in @p reply). @return 0; -FI_ENOTCONN; -FI_ETIMEDOUT;
     *  -FI_ECONNRESET the process went away; -FI_EINVAL bad command. */
    [[nodiscard]] int query(const std::string &command, std::string &reply, int timeout_ms = 2000);
    void close() noexcept;
    /** The greeting: {"version": ..., "pid": ..., "max_output_len": ...}. */
    const std::string &greeting() const noexcept { return greeting_; }

private:
    int fd_ = -1;
    std::size_t max_len_ = 16384;
    std::string greeting_;
};

} // namespace shunt::env::telemetry
