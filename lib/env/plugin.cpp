#include "env/plugin.h"

#include "env/log.h"
#include "env/tunable.h"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>

namespace shunt::env {

SHUNT_LOG_COMPONENT(plugin_log, "env");

namespace {

SHUNT_TUNABLE(plugin_dir_tunable, "SHUNT_PLUGIN_DIR", string, "",
              "Directory of the installed driver and provider libraries (default: shunt/ beside libshunt_env.so)",
              "env");

struct plugin_table {
    std::mutex lock;
    std::map<std::string, std::vector<plugin>> by_prefix;
};

plugin_table &table()
{
    static auto *t = new plugin_table; // never destroyed: plugins stay mapped
    return *t;
}

} // namespace

std::string plugin_dir()
{
    if (plugin_dir_tunable.is_set())
        return plugin_dir_tunable.value();
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void *>(&plugin_dir), &info) || !info.dli_fname)
        return {};
    std::string self = info.dli_fname;
    std::size_t slash = self.rfind('/');
    if (slash == std::string::npos)
        return {};
    return self.substr(0, slash) + "/shunt";
}

std::vector<plugin> open_plugins(const std::string &prefix)
{
    plugin_table &t = table();
    // Held across dlopen(): a plugin's constructors may call back into the
    // registries, never into open_plugins().
    std::lock_guard g(t.lock);
    auto it = t.by_prefix.find(prefix);
    if (it != t.by_prefix.end())
        return it->second;
    std::vector<plugin> out;
    const std::string dir = plugin_dir();
    const std::string head = "lib" + prefix;
    std::vector<std::string> names;
    if (DIR *d = dir.empty() ? nullptr : ::opendir(dir.c_str())) {
        while (dirent *de = ::readdir(d)) {
            std::string n = de->d_name;
            if (n.size() > head.size() + 3 && n.compare(0, head.size(), head) == 0 &&
                n.compare(n.size() - 3, 3, ".so") == 0)
                names.push_back(n);
        }
        ::closedir(d);
    }
    std::sort(names.begin(), names.end());
    for (const std::string &n : names) {
        plugin p;
        p.path = dir + "/" + n;
        p.name = n.substr(head.size(), n.size() - head.size() - 3);
        p.handle = ::dlopen(p.path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!p.handle) {
            const char *err = ::dlerror();
            SHUNT_LOG(plugin_log, warning, "plugin %s not loaded: %s", p.path.c_str(), err ? err : "?");
            continue;
        }
        SHUNT_LOG(plugin_log, info, "opened plugin %s", p.path.c_str());
        out.push_back(std::move(p));
    }
    t.by_prefix.emplace(prefix, out);
    return out;
}

} // namespace shunt::env
