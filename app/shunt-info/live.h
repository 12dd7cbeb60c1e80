// shunt-info --live: the statistics of a running Shunt process.
#pragma once

#include <sys/types.h>

namespace shunt::info {

/** Show the statistics blocks of process @p pid every @p interval seconds,
 *  @p count times (0: until the process ends or Ctrl-C); text, or one JSON
 *  object per refresh. @return 0; 1 when the process serves no telemetry
 *  socket (the message lists those that do) or a reply is malformed. */
int run_live(pid_t pid, double interval, long count, bool json);

} // namespace shunt::info
