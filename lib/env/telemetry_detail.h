/* Internals shared by env.cpp, stats.cpp and telemetry.cpp; not installed. */
#pragma once

#include <string>

namespace shunt::env::detail {

/** env::init(), before rte_eal_init: registers Shunt's telemetry commands
 *  (once), so that they exist before the socket does and the telemetry
 *  threads rte_eal_init starts see them. */
void telemetry_commands();
/** env::init() succeeded: with @p socket (SHUNT_TELEMETRY on, --telemetry
 *  given) keeps @p runtime_dir until fini() or exit; without, removes the
 *  directory now. */
void telemetry_started(const std::string &runtime_dir, bool socket);
/** env::fini(): removes the runtime directory (socket included). */
void telemetry_stopped() noexcept;
/** Remove the runtime directories of this user's Shunt processes that died
 *  without cleaning up. @return how many. */
int cleanup_stale_runtime_dirs() noexcept;
/** env::fini(): refresh callbacks that need the EAL are not called again. */
void stats_eal_down() noexcept;

} // namespace shunt::env::detail
