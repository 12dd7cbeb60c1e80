/* Environment layer: initialisation of DPDK's EAL for Shunt.
 *
 * init() is explicit and also automatic: every other layer calls
 * ensure_init() on first use, which initialises with options taken from the
 * environment variables (see tunable.h and doc/guides/env.md).
 *
 * Each process gets its own EAL runtime (in-memory with hugepages, private
 * heap without, file prefix shunt-<pid>), so any number of independent
 * processes can run at once; with SHUNT_TELEMETRY (default on) its runtime
 * directory holds DPDK's telemetry socket (env/telemetry.h). */
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace shunt::env {

/** Whether the EAL heap lives in hugepages. */
enum class hugepage_policy {
    automatic, ///< use hugepages when reserved, else ordinary pages (one warning)
    required,  ///< fail init() with -FI_ENOMEM and a message naming the fix
    off,       ///< never use hugepages
};

/** Initialisation options. Empty / zero fields mean "default or environment". */
struct options {
    /** CPUs that polling lcores may be pinned to, e.g. "0-3,6". Empty: every CPU
     *  in the process's affinity mask (SHUNT_LCORES). */
    std::string lcores;
    /** Hugepage policy (SHUNT_HUGEPAGES=auto|required|off). */
    hugepage_policy hugepages = hugepage_policy::automatic;
    /** True when `hugepages` was set by the caller; false lets SHUNT_HUGEPAGES decide. */
    bool hugepages_set = false;
    /** EAL heap size in MiB; 0 for the default (SHUNT_MEMORY_MB). */
    std::size_t memory_mb = 0;
    /** Log levels, e.g. "info" or "env:debug,vq:warning" (SHUNT_LOG_LEVEL). */
    std::string log_level;
    /** Extra EAL arguments appended verbatim (SHUNT_EAL_ARGS, space separated). */
    std::vector<std::string> eal_args;
};

/** Initialise the environment. Idempotent: a second call after success returns 0
 *  and changes nothing. Options are validated before the EAL is touched, so a
 *  rejected call leaves the process able to call init() again.
 *  @return 0; -FI_EINVAL for a malformed or unknown option (message logged);
 *          -FI_ENOMEM when hugepages are required but not reserved, or the
 *          memory amount is impossible; -FI_EOPBADSTATE after fini(), or
 *          when the EAL reports it was already initialised by someone else;
 *          -FI_EIO when the EAL itself failed. */
[[nodiscard]] int init(const options &opts);

/** init() with defaults and environment variables, unless already initialised.
 *  Called by every other layer on first use. @return as init(). */
[[nodiscard]] int ensure_init();

/** True once init() succeeded and before fini(). */
bool initialized() noexcept;

/** Tear down: stops the progress service and releases the EAL. The EAL cannot
 *  be initialised twice in one process, so init() after fini() fails with
 *  -FI_EOPBADSTATE. Safe to call when not initialised. */
void fini() noexcept;

/** What init() settled on. Valid while initialized(). */
struct state {
    bool hugepages = false;           ///< heap is in hugepages
    std::size_t hugepage_size = 0;    ///< bytes, 0 without hugepages
    std::size_t memory_mb = 0;        ///< heap size asked of the EAL (0: grows on demand)
    std::vector<unsigned> cpus;       ///< CPUs usable by lcores, ascending
    std::vector<std::string> eal_argv; ///< the arguments given to rte_eal_init
    bool telemetry = false;           ///< DPDK's telemetry socket serves this process (SHUNT_TELEMETRY)
    std::string runtime_dir;          ///< the socket's directory (empty without telemetry)
};
/** @return the current state; empty state when not initialised. */
const state &current() noexcept;

/** Hugepages reserved on this machine (read from /proc and sysfs, no EAL needed). */
struct hugepage_info {
    std::size_t page_size = 0; ///< default hugepage size in bytes
    unsigned long total = 0;   ///< pages reserved
    unsigned long free = 0;    ///< pages free
    std::string mount;         ///< a hugetlbfs mount point, empty if none
};
hugepage_info probe_hugepages() noexcept;

/** Parse an lcore/CPU list such as "0-3,6". @return 0 and fills @p out
 *  (ascending, unique); -FI_EINVAL if malformed; -FI_ENODEV if a CPU does not
 *  exist or is outside this process's affinity mask. */
[[nodiscard]] int parse_cpu_list(const std::string &text, std::vector<unsigned> &out);

/** CPUs in this process's affinity mask, ascending (empty if unreadable). */
std::vector<unsigned> affinity_cpus();

/** Format CPUs (ascending) as a list with ranges, e.g. "0-3,6"; "" if empty. */
std::string format_cpu_list(const std::vector<unsigned> &cpus);

} // namespace shunt::env
