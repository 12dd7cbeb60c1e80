/* Internal: the explicit list of built-in providers (kept by static links). */
#pragma once

#include <vector>

#include "fabric/provider.h"

namespace shunt::fabric::detail {

std::vector<const provider *> builtin_providers();

} // namespace shunt::fabric::detail
