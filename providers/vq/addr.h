/* vq provider (private): endpoint addresses and the AV hooks on them. */
#pragma once

#include <cstddef>

#include "prov.h"

namespace shunt::prov::vqprov {

/** AV hook: 0 if @p a is a well-formed endpoint address, else -FI_EINVAL. */
int addr_check(const void *a);
/** AV hook: text form "fi_shm://<name>/<qpn>"; the length needed with NUL. */
std::size_t addr_to_str(const void *a, char *buf, std::size_t len);
/** AV hook (insertsvc): "name/qpn" or "fi_shm://name/qpn" as @p node, or
 *  node = name and service = QP number. 0 or -FI_EINVAL. */
int addr_from_svc(const char *node, const char *service, void *out);

} // namespace shunt::prov::vqprov
