/* Internal: registration of the built-in providers, called by the list that
 * providers/meson.build generates (lib/fabric/builtin_providers.cpp.in). */
#pragma once

#include "fabric/provider.h"

namespace shunt::fabric::detail {

/** Register @p prov as built in (origin "builtin"); a record already
 *  registered by its own registrar is not registered twice. */
void register_builtin_provider(const provider *prov) noexcept;

} // namespace shunt::fabric::detail
