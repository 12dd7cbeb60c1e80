// A well-formed external provider for the registry tests.
#include <cstring>

#include "env/errors.h"
#include "fabric/provider.h"

using namespace shunt::fabric;

namespace {

int pg_getinfo(std::uint32_t, const char *, const char *, std::uint64_t, const info *hints, info **out)
{
    if (hints && hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_DGRAM)
        return -shunt::FI_ENODATA;
    info *i = allocinfo();
    if (!i)
        return -shunt::FI_ENOMEM;
    i->caps = FI_MSG | FI_SEND | FI_RECV;
    i->ep_attr->type = FI_EP_DGRAM;
    i->fabric_attr->name = ::strdup("plugin_good_fabric");
    *out = i;
    return 0;
}

int pg_fabric(fabric_attr *, fid_fabric **, void *) { return -shunt::FI_ENOSYS; }

const provider prov = [] {
    provider p;
    p.name = "plugin_good";
    p.version = FI_VERSION(3, 1);
    p.getinfo = pg_getinfo;
    p.fabric = pg_fabric;
    return p;
}();

} // namespace

extern "C" const provider *shunt_provider_ini() { return &prov; }
