// shunt-info --doctor: the preflight check of this machine.
#pragma once

namespace shunt::info {

/** Print every check (text, or one JSON object with --json); --clean removes
 *  stale segments. @return 0 when nothing needs fixing, 1 otherwise. */
int run_doctor(bool json, bool clean);

} // namespace shunt::info
