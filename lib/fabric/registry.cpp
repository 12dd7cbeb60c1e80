// Provider registry: built-in list, static registrars, external plugins
// from SHUNT_PROVIDER_PATH, SHUNT_PROVIDER filtering; getinfo and
// fabric_open dispatch.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <mutex>
#include <string>
#include <strings.h>
#include <sys/stat.h>
#include <vector>

#include "env/env.h"
#include "env/errors.h"
#include "env/log.h"
#include "env/plugin.h"
#include "env/tunable.h"
#include "fabric/detail/builtin.h"
#include "fabric/detail/live.h"
#include "fabric/provider.h"
#include "fabric/util/info.h"
#include "fabric/util_provider.h"

namespace shunt::fabric {

SHUNT_LOG_COMPONENT(fabric_log, "fabric");

SHUNT_TUNABLE(provider_tunable, "SHUNT_PROVIDER", string, "",
              "Providers to use (\"shm,mlx5;rxm\") or to exclude (\"^shm\"), as libfabric's FI_PROVIDER",
              "fabric");
// Read by libshunt-fi.so (lib/ofi), declared here too so that every program
// linking the fabric layer lists and checks it (the table keeps one entry
// per name).
namespace {
SHUNT_TUNABLE(ofi_layering_listed, "SHUNT_OFI_LAYERING", boolean, "0",
              "let libfabric's utility providers (ofi_rxm, ofi_rxd) stack on the shunt provider", "ofi");
} // namespace
SHUNT_TUNABLE(provider_path_tunable, "SHUNT_PROVIDER_PATH", string, "",
              "Colon-separated directories (or .so files) to load external providers from", "fabric");

namespace {

struct entry {
    const provider *core = nullptr;
    const util_provider *util = nullptr;
    std::string name;
    std::vector<std::string> aliases; ///< core providers: other names (provider::aliases)
    std::uint32_t version = 0;
    std::string origin;
    bool rejected = false;
    std::string note;
    void *dl = nullptr;
};

struct registry {
    std::mutex mu;
    std::vector<entry> entries;
    bool loaded = false;
    std::string filter;
};

registry &reg()
{
    static registry *r = new registry; // never destroyed: plugins stay mapped
    return *r;
}

// Registrars and the built-in list run before main, possibly before reg()
// exists, or inside a dlopen() that the registry itself makes while holding
// its lock (a plugin library with registrars of its own): they only append
// to this list, under its own lock, and every registry call drains it.
struct pending_entry {
    const provider *first = nullptr;
    const util_provider *second = nullptr;
    bool builtin = false;
};
struct pending_list {
    std::mutex mu;
    std::vector<pending_entry> list;
};
pending_list &pending()
{
    static auto *p = new pending_list;
    return *p;
}
void add_pending(const pending_entry &pe) noexcept
{
    pending_list &pl = pending();
    std::lock_guard g(pl.mu);
    try {
        pl.list.push_back(pe);
    } catch (...) {
        // Out of memory at load time: the provider stays unregistered.
    }
}

bool is_entry(const registry &r, const provider *p)
{
    for (auto &e : r.entries)
        if (e.core == p)
            return true;
    return false;
}

// The aliases of a core provider record (the field is read only when the
// record's size covers it).
std::vector<std::string> aliases_of(const provider *p)
{
    std::vector<std::string> v;
    if (!p || p->size < offsetof(provider, aliases) + sizeof p->aliases || !p->aliases)
        return v;
    std::string s = p->aliases;
    std::size_t i = 0;
    while (i <= s.size()) {
        std::size_t j = s.find(',', i);
        if (j == std::string::npos)
            j = s.size();
        if (j > i)
            v.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return v;
}

// Does entry @p e answer to @p name (its name or one of its aliases)?
bool answers_to(const entry &e, const char *name)
{
    if (!name)
        return false;
    if (::strcasecmp(e.name.c_str(), name) == 0)
        return true;
    for (auto &a : e.aliases)
        if (::strcasecmp(a.c_str(), name) == 0)
            return true;
    return false;
}

bool has_name(const registry &r, const char *name)
{
    for (auto &e : r.entries)
        if (!e.rejected && answers_to(e, name))
            return true;
    return false;
}

// Does a core entry pass filter @p spec under its name or an alias? Every
// name is tried: an include list passes when one of them is listed, an
// exclusion ("^...") when none of them is. @p util, when given, makes the
// names "core;util".
bool filter_passes(const char *spec, const entry &e, const char *util = nullptr)
{
    auto full = [&](const std::string &n) { return util ? n + ";" + util : n; };
    bool exclude = spec && spec[0] == '^';
    if (exclude) {
        if (!provider_filter_match(spec, full(e.name).c_str()))
            return false;
        for (auto &a : e.aliases)
            if (!provider_filter_match(spec, full(a).c_str()))
                return false;
        return true;
    }
    if (provider_filter_match(spec, full(e.name).c_str()))
        return true;
    for (auto &a : e.aliases)
        if (provider_filter_match(spec, full(a).c_str()))
            return true;
    return false;
}

int check_core(const provider *p)
{
    // Every field before aliases is read; aliases only when size covers it.
    if (!p || p->size < offsetof(provider, aliases) || p->abi_version != SHUNT_PROVIDER_ABI || !p->name || !p->name[0] ||
        std::strchr(p->name, ';') || !p->getinfo || !p->fabric)
        return -FI_EINVAL;
    return 0;
}

int check_util(const util_provider *p)
{
    if (!p || p->size < sizeof(util_provider) || p->abi_version != SHUNT_PROVIDER_ABI || !p->name || !p->name[0] ||
        std::strchr(p->name, ';') || !p->info_to_core || !p->info_to_util || !p->fabric)
        return -FI_EINVAL;
    return 0;
}

// Caller holds r.mu.
int add_locked(registry &r, const provider *p, const util_provider *u, const char *origin)
{
    if (p ? check_core(p) : check_util(u))
        return -FI_EINVAL;
    const char *name = p ? p->name : u->name;
    if (has_name(r, name))
        return -FI_EALREADY;
    entry e;
    e.core = p;
    e.util = u;
    e.name = name;
    e.aliases = aliases_of(p);
    for (auto &a : e.aliases)
        if (has_name(r, a.c_str()))
            return -FI_EALREADY;
    e.version = p ? p->version : u->version;
    e.origin = origin;
    r.entries.push_back(std::move(e));
    return 0;
}

void reject(registry &r, const std::string &path, const std::string &why, void *dl)
{
    SHUNT_LOG(fabric_log, warning, "provider plugin %s skipped: %s", path.c_str(), why.c_str());
    if (dl)
        ::dlclose(dl);
    entry e;
    e.name = path.substr(path.rfind('/') + 1);
    e.origin = path;
    e.rejected = true;
    e.note = why;
    r.entries.push_back(std::move(e));
}

void load_plugin(registry &r, const std::string &path)
{
    void *dl = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *err = ::dlerror();
        reject(r, path, std::string("dlopen failed: ") + (err ? err : "?"), nullptr);
        return;
    }
    using ini_fn = const provider *(*)();
    auto ini = reinterpret_cast<ini_fn>(::dlsym(dl, SHUNT_PROVIDER_ENTRY));
    if (!ini) {
        reject(r, path, std::string("no ") + SHUNT_PROVIDER_ENTRY + " symbol", dl);
        return;
    }
    const provider *p = ini();
    if (!p) {
        reject(r, path, "entry point returned no provider", dl);
        return;
    }
    if (p->abi_version != SHUNT_PROVIDER_ABI) {
        char why[96];
        std::snprintf(why, sizeof why, "ABI %u, this library needs %u", p->abi_version, SHUNT_PROVIDER_ABI);
        reject(r, path, why, dl);
        return;
    }
    if (check_core(p)) {
        reject(r, path, "malformed provider record (size, name or entry points)", dl);
        return;
    }
    entry e;
    e.core = p;
    e.name = p->name;
    e.aliases = aliases_of(p);
    for (const std::string &n : [&] {
             auto v = e.aliases;
             v.insert(v.begin(), e.name);
             return v;
         }())
        if (has_name(r, n.c_str())) {
            reject(r, path, "a provider named " + n + " is already registered", dl);
            return;
        }
    e.version = p->version;
    e.origin = path;
    e.dl = dl;
    r.entries.push_back(std::move(e));
    SHUNT_LOG(fabric_log, info, "loaded provider %s from %s", p->name, path.c_str());
}

void load_path(registry &r, const std::string &spec)
{
    std::size_t i = 0;
    while (i <= spec.size()) {
        std::size_t j = spec.find(':', i);
        if (j == std::string::npos)
            j = spec.size();
        std::string dir = spec.substr(i, j - i);
        i = j + 1;
        if (dir.empty())
            continue;
        struct stat st {};
        if (::stat(dir.c_str(), &st) != 0) {
            SHUNT_LOG(fabric_log, warning, "SHUNT_PROVIDER_PATH: %s does not exist", dir.c_str());
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            load_plugin(r, dir);
            continue;
        }
        std::vector<std::string> files;
        if (DIR *d = ::opendir(dir.c_str())) {
            while (dirent *de = ::readdir(d)) {
                std::string n = de->d_name;
                if (n.size() > 3 && n.compare(n.size() - 3, 3, ".so") == 0)
                    files.push_back(dir + "/" + n);
            }
            ::closedir(d);
        }
        std::sort(files.begin(), files.end());
        for (auto &f : files)
            load_plugin(r, f);
    }
}

// Move what registrars and the built-in list registered into the registry.
// Caller holds r.mu.
void drain_pending(registry &r)
{
    std::vector<pending_entry> list;
    {
        pending_list &pl = pending();
        std::lock_guard g(pl.mu);
        list.swap(pl.list);
    }
    // The built-in list first, so a provider that is both listed and has
    // its own registrar is reported as built in.
    for (auto &pe : list)
        if (pe.builtin && !is_entry(r, pe.first) && add_locked(r, pe.first, nullptr, "builtin") == -FI_EINVAL)
            SHUNT_LOG(fabric_log, error, "built-in provider %s is malformed",
                      pe.first->name ? pe.first->name : "?");
    for (auto &pe : list) {
        if (pe.builtin || (pe.first && is_entry(r, pe.first)))
            continue;
        if (add_locked(r, pe.first, pe.second, "registrar") == -FI_EINVAL)
            SHUNT_LOG(fabric_log, error, "registered provider is malformed");
    }
}

// An installed Shunt keeps its providers in the plugin directory
// (env/plugin.h): each libshunt_prov_<name>.so defines
// shunt_fabric_provider_<name>, the record the built-in list names. A
// provider also linked into the program is the same record, kept once.
// Caller holds r.mu.
void load_installed(registry &r)
{
    for (const env::plugin &p : env::open_plugins("shunt_prov_")) {
        const std::string sym = "shunt_fabric_provider_" + p.name;
        auto *prov = static_cast<const provider *>(::dlsym(p.handle, sym.c_str()));
        if (!prov) {
            reject(r, p.path, "defines no " + sym, nullptr);
            continue;
        }
        if (is_entry(r, prov))
            continue;
        if (add_locked(r, prov, nullptr, "builtin") == -FI_EINVAL)
            reject(r, p.path, "malformed provider record (size, name or entry points)", nullptr);
    }
}

// Caller holds r.mu.
void ensure_loaded(registry &r)
{
    if (r.loaded) {
        drain_pending(r);
        return;
    }
    r.loaded = true;
    drain_pending(r);
    load_installed(r);
    load_path(r, provider_path_tunable.value());
    drain_pending(r);
    r.filter = provider_tunable.value();
}

bool usable(const registry &r, const entry &e)
{
    return !e.rejected && (e.util ? provider_filter_match(r.filter.c_str(), e.name.c_str())
                                  : filter_passes(r.filter.c_str(), e));
}

// Does a hints prov_name select the core provider @p core (alone)?
bool prov_name_selects_core(const char *want, const entry &core)
{
    return !want || !want[0] || answers_to(core, want);
}

bool prov_name_selects_stack(const char *want, const entry &core, const char *util)
{
    if (!want || !want[0])
        return true;
    char c[FI_NAME_MAX], u[FI_NAME_MAX];
    if (split_stacked_name(want, c, sizeof c, u, sizeof u))
        return answers_to(core, c) && ::strcasecmp(u, util) == 0;
    return ::strcasecmp(want, util) == 0;
}

int stamp(info *list, const char *name, std::uint32_t prov_version, std::uint32_t api_version)
{
    for (info *i = list; i; i = i->next) {
        if (!i->fabric_attr)
            return -FI_EINVAL;
        std::free(i->fabric_attr->prov_name);
        i->fabric_attr->prov_name = ::strdup(name);
        if (!i->fabric_attr->prov_name)
            return -FI_ENOMEM;
        i->fabric_attr->prov_version = prov_version;
        i->fabric_attr->api_version = api_version;
    }
    return 0;
}

void append(info **&tail, info *list)
{
    *tail = list;
    while (*tail)
        tail = &(*tail)->next;
}

} // namespace

bool provider_filter_match(const char *spec, const char *name)
{
    if (!spec || !spec[0])
        return true;
    bool exclude = spec[0] == '^';
    std::string s = exclude ? spec + 1 : spec;
    char core[FI_NAME_MAX], util[FI_NAME_MAX];
    bool stacked = split_stacked_name(name, core, sizeof core, util, sizeof util);
    bool listed = false;
    std::size_t i = 0;
    while (i <= s.size()) {
        std::size_t j = s.find(',', i);
        if (j == std::string::npos)
            j = s.size();
        std::string item = s.substr(i, j - i);
        i = j + 1;
        if (item.empty())
            continue;
        if (::strcasecmp(item.c_str(), name) == 0 || (stacked && ::strcasecmp(item.c_str(), util) == 0))
            listed = true;
    }
    return exclude ? !listed : listed;
}

bool split_stacked_name(const char *name, char *core, std::size_t core_len, char *util, std::size_t util_len)
{
    if (!name)
        return false;
    const char *semi = std::strchr(name, ';');
    if (!semi || std::strchr(semi + 1, ';') || semi == name || !semi[1])
        return false;
    std::size_t cl = std::size_t(semi - name), ul = std::strlen(semi + 1);
    if (cl >= core_len || ul >= util_len)
        return false;
    std::memcpy(core, name, cl);
    core[cl] = 0;
    std::memcpy(util, semi + 1, ul + 1);
    return true;
}

int register_provider(const provider *p)
{
    if (check_core(p))
        return -FI_EINVAL;
    registry &r = reg();
    std::lock_guard g(r.mu);
    drain_pending(r);
    if (!r.loaded) {
        // Before the first load, registered providers come after the built-in
        // and registrar ones, as registrars do.
        {
            pending_list &pl = pending();
            std::lock_guard pg(pl.mu);
            for (auto &pe : pl.list)
                if (pe.first && ::strcasecmp(pe.first->name, p->name) == 0)
                    return -FI_EALREADY;
        }
        if (has_name(r, p->name))
            return -FI_EALREADY;
        add_pending({p, nullptr, false});
        return 0;
    }
    return add_locked(r, p, nullptr, "registered");
}

int register_util_provider(const util_provider *u)
{
    if (check_util(u))
        return -FI_EINVAL;
    registry &r = reg();
    std::lock_guard g(r.mu);
    if (!r.loaded) {
        add_pending({nullptr, u, false});
        return 0;
    }
    return add_locked(r, nullptr, u, "registered");
}

provider_registrar::provider_registrar(const provider *p) noexcept
{
    if (check_core(p) == 0)
        add_pending({p, nullptr, false});
}

util_provider_registrar::util_provider_registrar(const util_provider *u) noexcept
{
    if (check_util(u) == 0)
        add_pending({nullptr, u, false});
}

void detail::register_builtin_provider(const provider *p) noexcept
{
    if (check_core(p))
        return;
    add_pending({p, nullptr, true});
}

std::vector<provider_status> providers()
{
    registry &r = reg();
    std::lock_guard g(r.mu);
    ensure_loaded(r);
    std::vector<provider_status> out;
    for (auto &e : r.entries) {
        provider_status s;
        s.name = e.name;
        for (auto &a : e.aliases)
            s.aliases += (s.aliases.empty() ? "" : ",") + a;
        s.version = e.version;
        s.origin = e.origin;
        s.usable = usable(r, e);
        s.note = e.rejected ? e.note : (s.usable ? "" : "excluded by SHUNT_PROVIDER");
        out.push_back(std::move(s));
    }
    return out;
}

const provider *find_provider(const char *name)
{
    if (!name)
        return nullptr;
    registry &r = reg();
    std::lock_guard g(r.mu);
    ensure_loaded(r);
    for (auto &e : r.entries)
        if (e.core && usable(r, e) && answers_to(e, name))
            return e.core;
    return nullptr;
}

void rescan_providers()
{
    registry &r = reg();
    std::lock_guard g(r.mu);
    if (!r.loaded) {
        ensure_loaded(r);
        return;
    }
    std::vector<entry> keep;
    for (auto &e : r.entries)
        if (!e.rejected && !e.dl)
            keep.push_back(e);
    // Plugins stay mapped: objects they created may still be open.
    r.entries = std::move(keep);
    load_path(r, provider_path_tunable.value());
    r.filter = provider_tunable.value();
    r.loaded = true;
}

int getinfo(std::uint32_t version, const char *node, const char *service, std::uint64_t flags, const info *hints,
            info **out)
{
    // The first use of the layer initialises the environment (env.h); a bad
    // SHUNT_* value fails here, with the variable named in the log.
    if (int rc = env::ensure_init())
        return rc;
    if (!out)
        return -FI_EINVAL;
    if (version > FI_API_VERSION || FI_MAJOR(version) < 1)
        return -FI_ENOSYS;
    if (int rc = util::check_hints(hints); rc)
        return rc;
    registry &r = reg();
    std::vector<entry> list;
    std::string filter;
    {
        std::lock_guard g(r.mu);
        ensure_loaded(r);
        list = r.entries;
        filter = r.filter;
    }
    const char *want = hints && hints->fabric_attr ? hints->fabric_attr->prov_name : nullptr;
    info *head = nullptr;
    info **tail = &head;
    int last_err = -FI_ENODATA;
    for (auto &e : list) {
        if (!e.core || e.rejected || !filter_passes(filter.c_str(), e))
            continue;
        if (prov_name_selects_core(want, e)) {
            info *res = nullptr;
            int rc = e.core->getinfo(version, node, service, flags, hints, &res);
            if (rc == 0 && res) {
                if ((rc = stamp(res, e.core->name, e.core->version, version)) != 0) {
                    freeinfo(res);
                    freeinfo(head);
                    return rc;
                }
                append(tail, res);
            } else if (rc != -FI_ENODATA && rc != 0) {
                last_err = rc;
            }
        }
        for (auto &u : list) {
            if (!u.util || u.rejected)
                continue;
            std::string stacked = e.name + ";" + u.name;
            if (!filter_passes(filter.c_str(), e, u.name.c_str()) || !prov_name_selects_stack(want, e, u.name.c_str()))
                continue;
            if (hints && hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC &&
                !(u.util->ep_types & (1u << hints->ep_attr->type)))
                continue;
            info *core_hints = nullptr;
            if (u.util->info_to_core(version, hints, &core_hints) != 0)
                continue;
            info *core_res = nullptr;
            int rc = e.core->getinfo(version, node, service, flags, core_hints, &core_res);
            freeinfo(core_hints);
            if (rc != 0)
                continue;
            for (info *ci = core_res; ci; ci = ci->next) {
                info *ui = nullptr;
                if (u.util->info_to_util(version, hints, ci, &ui) != 0 || !ui)
                    continue;
                if (stamp(ui, stacked.c_str(), u.util->version, version) != 0) {
                    freeinfo(ui);
                    continue;
                }
                append(tail, ui);
            }
            freeinfo(core_res);
        }
    }
    if (!head)
        return last_err;
    *out = head;
    return 0;
}

int fabric_open(fabric_attr *attr, fid_fabric **fabric, void *context)
{
    if (int rc = env::ensure_init())
        return rc;
    if (!attr || !fabric || !attr->prov_name)
        return -FI_EINVAL;
    registry &r = reg();
    std::vector<entry> list;
    std::string filter;
    {
        std::lock_guard g(r.mu);
        ensure_loaded(r);
        list = r.entries;
        filter = r.filter;
    }
    char core[FI_NAME_MAX], util[FI_NAME_MAX];
    bool stacked = split_stacked_name(attr->prov_name, core, sizeof core, util, sizeof util);
    const entry *ce = nullptr;
    const util_provider *up = nullptr;
    for (auto &e : list) {
        if (e.rejected)
            continue;
        if (e.core && answers_to(e, stacked ? core : attr->prov_name))
            ce = &e;
        if (stacked && e.util && ::strcasecmp(e.name.c_str(), util) == 0)
            up = e.util;
    }
    if (!ce || (stacked && !up) || !filter_passes(filter.c_str(), *ce, stacked ? util : nullptr))
        return -FI_ENODATA;
    const provider *cp = ce->core;
    fid_fabric *f = nullptr;
    int rc = stacked ? up->fabric(cp, attr, &f, context) : cp->fabric(attr, &f, context);
    if (rc)
        return rc;
    if (!f || !f->fid.ops || !f->ops) {
        SHUNT_LOG(fabric_log, error, "provider %s returned a malformed fabric", attr->prov_name);
        return -FI_EOTHER;
    }
    f->api_version = attr->api_version ? attr->api_version : FI_API_VERSION;
    detail::live_add(&f->fid);
    *fabric = f;
    return 0;
}

} // namespace shunt::fabric
