#include "env/log.h"

#include "env/errors.h"
#include "env/tunable.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace shunt::env::log {
namespace {

SHUNT_TUNABLE(log_level_tunable, "SHUNT_LOG_LEVEL", string, "warning",
              "Log levels: a level for all (error|warning|notice|info|debug|none), or "
              "component:level pairs, comma separated, e.g. env:debug,vq:info",
              "env");

struct registry {
    std::mutex lock;
    std::vector<component *> components;
    level default_level = level::warning;
    std::map<std::string, level> overrides;
    bool env_read = false;
};

registry &reg()
{
    static registry r;
    return r;
}

const char *const level_names[] = {"none", "error", "warning", "notice", "info", "debug"};

struct parsed_spec {
    bool has_default = false;
    level def = level::warning;
    std::map<std::string, level> per;
};

int parse_spec(const std::string &spec, parsed_spec &out)
{
    std::size_t pos = 0;
    while (pos <= spec.size()) {
        std::size_t comma = spec.find(',', pos);
        std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
        if (item.empty())
            continue;
        std::size_t colon = item.find(':');
        level l;
        if (colon == std::string::npos) {
            if (parse_level(item, l) != 0)
                return -FI_EINVAL;
            out.has_default = true;
            out.def = l;
        } else {
            std::string comp = item.substr(0, colon);
            if (comp.empty() || parse_level(item.substr(colon + 1), l) != 0)
                return -FI_EINVAL;
            out.per[comp] = l;
        }
    }
    return 0;
}

level level_for(const registry &r, const char *name)
{
    auto it = r.overrides.find(name);
    return it == r.overrides.end() ? r.default_level : it->second;
}

void read_env_locked(registry &r)
{
    if (r.env_read)
        return;
    r.env_read = true;
    const char *v = std::getenv("SHUNT_LOG_LEVEL");
    if (!v)
        return;
    parsed_spec p;
    if (parse_spec(v, p) != 0) {
        std::fprintf(stderr, "shunt env warning: ignoring malformed SHUNT_LOG_LEVEL='%s'\n", v);
        return;
    }
    if (p.has_default)
        r.default_level = p.def;
    for (auto &[k, l] : p.per)
        r.overrides[k] = l;
}

} // namespace

component::component(const char *n) noexcept : name(n), current(level::warning)
{
    registry &r = reg();
    std::lock_guard g(r.lock);
    read_env_locked(r);
    current = level_for(r, n);
    r.components.push_back(this);
}

int parse_level(const std::string &name, level &out)
{
    if (name.size() == 1 && name[0] >= '0' && name[0] <= '5') {
        out = static_cast<level>(name[0] - '0');
        return 0;
    }
    for (int i = 0; i < 6; i++) {
        if (name == level_names[i]) {
            out = static_cast<level>(i);
            return 0;
        }
    }
    if (name == "warn") {
        out = level::warning;
        return 0;
    }
    return -FI_EINVAL;
}

int set_levels(const std::string &spec)
{
    parsed_spec p;
    if (parse_spec(spec, p) != 0)
        return -FI_EINVAL;
    registry &r = reg();
    std::lock_guard g(r.lock);
    read_env_locked(r);
    if (p.has_default)
        r.default_level = p.def;
    for (auto &[k, l] : p.per)
        r.overrides[k] = l;
    for (component *c : r.components)
        c->current = level_for(r, c->name);
    return 0;
}

void emit(const component &c, level l, const char *fmt, ...) noexcept
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "shunt %s %s: %s\n", c.name, level_names[static_cast<int>(l)], buf);
}

} // namespace shunt::env::log
