/* Internals of topology.cpp exposed for unit tests; not installed. */
#pragma once

#include "env/topology.h"

#include <vector>

namespace shunt::env::detail {

/** pick_cores()'s choice on topology @p t among the CPUs in @p usable
 *  (ascending, unique). @return as pick_cores() (never -FI_EIO). */
[[nodiscard]] int pick_cores_from(const topology &t, const std::vector<unsigned> &usable, unsigned n,
                                  std::vector<unsigned> &out);

} // namespace shunt::env::detail
