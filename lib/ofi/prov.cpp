// The provider record libfabric loads (fi_prov_ini), getinfo, and the
// handle translation shared by every object of the shim.
#include "ofi/shim.h"

#include "env/tunable.h"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

namespace shunt::ofi {

SHUNT_LOG_COMPONENT(ofi_log, "ofi");

SHUNT_TUNABLE(ofi_layering_tunable, "SHUNT_OFI_LAYERING", boolean, "0",
              "let libfabric's utility providers (ofi_rxm, ofi_rxd) stack on the shunt provider", "ofi");

namespace {

// libfabric's core sets this flag (its OFI_CORE_PROV_ONLY) when a utility
// provider (ofi_rxm, ofi_rxd) looks for a core provider to stack on.
constexpr std::uint64_t k_lf_core_prov_only = 1ULL << 59;
// The getinfo flags of the API; everything else is libfabric-internal.
constexpr std::uint64_t k_getinfo_flags = FI_SOURCE | FI_NUMERICHOST | FI_PROV_ATTR_ONLY;

bool layering_allowed()
{
    static const bool allowed = [] {
        bool b = false;
        if (ofi_layering_tunable.as_bool(b))
            SHUNT_LOG(ofi_log, warning, "SHUNT_OFI_LAYERING=%s is not a boolean; layering stays off",
                      ofi_layering_tunable.value().c_str());
        return b;
    }();
    return allowed;
}

} // namespace

// ---- handle translation ----

sf::fid *to_shunt(const ::fid *f) noexcept
{
    if (!f)
        return nullptr;
    const ::fi_ops *o = f->ops;
    if (o == &g_ep_fi_ops)
        return &reinterpret_cast<const ep_w *>(f)->sh->fid;
    if (o == &g_cq_fi_ops)
        return &reinterpret_cast<const cq_w *>(f)->sh->fid;
    if (o == &g_cntr_fi_ops)
        return &reinterpret_cast<const cntr_w *>(f)->sh->fid;
    if (o == &g_av_fi_ops)
        return &reinterpret_cast<const av_w *>(f)->sh->fid;
    if (o == &g_mr_fi_ops)
        return &reinterpret_cast<const mr_w *>(f)->sh->fid;
    if (o == &g_eq_fi_ops)
        return &reinterpret_cast<const eq_w *>(f)->sh->fid;
    if (o == &g_domain_fi_ops)
        return &reinterpret_cast<const domain_w *>(f)->sh->fid;
    if (o == &g_fabric_fi_ops)
        return &reinterpret_cast<const fabric_w *>(f)->sh->fid;
    if (o == &g_pep_fi_ops)
        return &reinterpret_cast<const pep_w *>(f)->sh->fid;
    if (o == &g_stx_fi_ops)
        return &reinterpret_cast<const stx_w *>(f)->sh->fid;
    if (o == &g_wait_fi_ops)
        return &reinterpret_cast<const wait_w *>(f)->sh->fid;
    if (o == &g_poll_fi_ops)
        return &reinterpret_cast<const poll_w *>(f)->sh->fid;
    return nullptr;
}

namespace {
std::mutex g_map_lock;
std::unordered_map<sf::fid *, ::fid *> *g_map; // freed by provider_cleanup (fi_fini)

void free_map()
{
    std::lock_guard<std::mutex> g(g_map_lock);
    delete g_map;
    g_map = nullptr;
}
} // namespace

int reg_wrapper(sf::fid *sh, ::fid *lf) noexcept
{
    std::lock_guard<std::mutex> g(g_map_lock);
    try {
        if (!g_map)
            g_map = new std::unordered_map<sf::fid *, ::fid *>();
        (*g_map)[sh] = lf;
    } catch (...) {
        return -FI_ENOMEM;
    }
    return 0;
}

void unreg_wrapper(sf::fid *sh) noexcept
{
    std::lock_guard<std::mutex> g(g_map_lock);
    if (g_map)
        g_map->erase(sh);
}

::fid *to_lf(sf::fid *f) noexcept
{
    if (!f)
        return nullptr;
    std::lock_guard<std::mutex> g(g_map_lock);
    if (g_map) {
        auto it = g_map->find(f);
        if (it != g_map->end())
            return it->second;
    }
    // Not opened through the shim: a connection request (same layout of fid).
    return reinterpret_cast<::fid *>(f);
}

// ---- generic fid ops ----

int fid_bind(::fid *f, ::fid *bfid, std::uint64_t flags)
{
    sf::fid *s = to_shunt(f);
    sf::fid *b = to_shunt(bfid);
    if (!s || !b)
        return -FI_EINVAL;
    return sf::bind(s, b, flags);
}

int fid_control(::fid *f, int command, void *arg)
{
    sf::fid *s = to_shunt(f);
    if (!s)
        return -FI_EINVAL;
    if (command == FI_ALIAS || command == FI_DUP || command == FI_EXPORT_FID)
        return -FI_ENOSYS; // would hand out Shunt objects without a wrapper
    return sf::control(s, command, arg);
}

int fid_tostr(const ::fid *f, char *buf, std::size_t len)
{
    if (!buf || len == 0)
        return -FI_EINVAL;
    return std::snprintf(buf, len, "shunt fid %p class %zu", static_cast<const void *>(f), f ? f->fclass : 0);
}

int fid_ops_set(::fid *, const char *, std::uint64_t, void *, void *) { return -FI_ENOSYS; }

int fid_ops_open(::fid *f, const char *name, std::uint64_t flags, void **ops, void *context)
{
    sf::fid *s = to_shunt(f);
    if (!s)
        return -FI_EINVAL;
    return sf::open_ops(s, name, flags, ops, context);
}

// ---- getinfo and fabric ----

int provider_getinfo(std::uint32_t version, const char *node, const char *service, std::uint64_t flags,
                     const ::fi_info *hints, ::fi_info **info)
{
    if (!info)
        return -FI_EINVAL;
    // Shunt's RDM and DGRAM endpoints are native: ofi_rxm over Shunt MSG or
    // ofi_rxd over Shunt DGRAM would only add a slower copy of them, and
    // would come first in fi_getinfo's answer ("shunt;ofi_rxm"). Refused
    // unless SHUNT_OFI_LAYERING asks for them.
    if ((flags & k_lf_core_prov_only) && !layering_allowed())
        return -FI_ENODATA;
    flags &= k_getinfo_flags;
    sf::info *sh_hints = nullptr;
    if (hints) {
        int rc = info_to_shunt(hints, version, true, &sh_hints);
        if (rc)
            return rc;
    }
    // The application's version: it decides how MR modes read (legacy
    // enumeration before 1.5) and which domain checks apply.
    sf::info *res = nullptr;
    int rc = sf::getinfo(version < k_shunt_api_version ? version : k_shunt_api_version, node, service, flags,
                         sh_hints, &res);
    sf::freeinfo(sh_hints);
    if (rc)
        return rc;
    ::fi_info *out = info_list_to_lf(res, version);
    sf::freeinfo(res);
    if (!out)
        return -FI_ENOMEM;
    *info = out;
    return 0;
}

namespace {

int fabric_close(::fid *f) { return close_wrapper<fabric_w>(f); }

int fabric_trywait(::fid_fabric *fabric, ::fid **fids, int count)
{
    auto *w = reinterpret_cast<fabric_w *>(fabric);
    if (!fids || count <= 0)
        return -FI_EINVAL;
    constexpr int chunk = 32;
    sf::fid *sh[chunk];
    for (int base = 0; base < count; base += chunk) {
        int n = count - base < chunk ? count - base : chunk;
        for (int i = 0; i < n; i++) {
            sh[i] = to_shunt(fids[base + i]);
            if (!sh[i])
                return -FI_EINVAL;
        }
        int rc = sf::trywait(w->sh, sh, n);
        if (rc)
            return rc;
    }
    return 0;
}

::fi_ops_fabric g_fabric_ops = {
    sizeof(::fi_ops_fabric), domain_open, passive_ep, eq_open, wait_open, fabric_trywait, domain_open2,
};

} // namespace

::fi_ops g_fabric_fi_ops = {
    sizeof(::fi_ops), fabric_close, fid_bind, fid_control, fid_ops_open, fid_tostr, fid_ops_set,
};

int fabric_open(::fi_fabric_attr *attr, ::fid_fabric **fabric, void *context)
{
    if (!attr || !fabric)
        return -FI_EINVAL;
    // Which Shunt provider owns the fabric of this name: ask Shunt.
    sf::info *hints = sf::allocinfo();
    if (!hints)
        return -FI_ENOMEM;
    // Accept every mode and MR mode: only the fabric name selects here (the
    // application's own requirements were applied by its fi_getinfo).
    hints->mode = ~0ULL;
    hints->domain_attr->mode = ~0ULL;
    hints->domain_attr->mr_mode = ~(FI_MR_BASIC | FI_MR_SCALABLE);
    if (attr->name && !(hints->fabric_attr->name = ::strdup(attr->name))) {
        sf::freeinfo(hints);
        return -FI_ENOMEM;
    }
    sf::info *res = nullptr;
    int rc = sf::getinfo(k_shunt_api_version, nullptr, nullptr, FI_PROV_ATTR_ONLY, hints, &res);
    sf::freeinfo(hints);
    if (rc) {
        SHUNT_LOG(ofi_log, info, "fi_fabric: no Shunt fabric named %s (%d)", attr->name ? attr->name : "(null)",
                  rc);
        return rc == -FI_ENOMEM ? rc : -FI_ENODATA;
    }
    rc = open_wrapped<fabric_w>(fabric, context, FI_CLASS_FABRIC, &g_fabric_fi_ops, &g_fabric_ops, [&](fabric_w *w) {
        const char *prov = res->fabric_attr->prov_name ? res->fabric_attr->prov_name : "";
        std::snprintf(w->shunt_prov, sizeof w->shunt_prov, "%s", prov);
        w->lf.api_version = attr->api_version; // libfabric's core sets it again after return
        return sf::fabric_open(res->fabric_attr, &w->sh, context);
    });
    sf::freeinfo(res);
    return rc;
}

namespace {

// libfabric's fi_fini, before it unloads the module: objects are gone by then.
void provider_cleanup() { free_map(); }

::fi_provider g_provider = {
    k_prov_version, k_fi_version, {}, "shunt", provider_getinfo, fabric_open, provider_cleanup,
};

} // namespace

} // namespace shunt::ofi

extern "C" FI_EXT_INI
{
    return &shunt::ofi::g_provider;
}
