// The explicit list of built-in providers: referencing each provider's
// record here keeps it in static links (rdma-core's provider list habit).
#include "fabric/detail/builtin.h"
#include "shunt_config.h"

namespace shunt::fabric {
#ifdef SHUNT_PROVIDER_SHM
const provider *shm_provider();
#endif
} // namespace shunt::fabric

namespace shunt::fabric::detail {

std::vector<const provider *> builtin_providers()
{
    std::vector<const provider *> v;
#ifdef SHUNT_PROVIDER_SHM
    v.push_back(shm_provider());
#endif
    return v;
}

} // namespace shunt::fabric::detail
