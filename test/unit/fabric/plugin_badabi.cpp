// An external provider built for another ABI: must be refused, not loaded.
#include "fabric/provider.h"

using namespace shunt::fabric;

namespace {
int nope_getinfo(std::uint32_t, const char *, const char *, std::uint64_t, const info *, info **) { return -1; }
int nope_fabric(fabric_attr *, fid_fabric **, void *) { return -1; }
const provider prov = [] {
    provider p;
    p.abi_version = SHUNT_PROVIDER_ABI + 98;
    p.name = "plugin_badabi";
    p.getinfo = nope_getinfo;
    p.fabric = nope_fabric;
    return p;
}();
} // namespace

extern "C" const provider *shunt_provider_ini() { return &prov; }
