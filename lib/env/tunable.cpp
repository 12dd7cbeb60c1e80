#include "env/tunable.h"

#include "env/env.h"
#include "env/errors.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace shunt::env {
namespace {

struct table {
    std::mutex lock;
    std::vector<const tunable *> items;
};

table &tab()
{
    static table t;
    return t;
}

} // namespace

tunable_registrar::tunable_registrar(const tunable *t) noexcept
{
    table &tb = tab();
    std::lock_guard g(tb.lock);
    tb.items.push_back(t);
}

std::string tunable::value() const
{
    const char *v = std::getenv(name);
    return v ? std::string(v) : std::string(defval);
}

bool tunable::is_set() const { return std::getenv(name) != nullptr; }

int tunable::as_int(std::int64_t &out) const
{
    std::string v = value();
    if (v.empty())
        return -FI_EINVAL;
    char *end = nullptr;
    errno = 0;
    long long x = std::strtoll(v.c_str(), &end, 0);
    if (errno != 0 || *end != '\0')
        return -FI_EINVAL;
    out = x;
    return 0;
}

int tunable::as_bool(bool &out) const
{
    std::string v = value();
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    if (v == "1" || v == "yes" || v == "true" || v == "on") {
        out = true;
        return 0;
    }
    if (v == "0" || v == "no" || v == "false" || v == "off") {
        out = false;
        return 0;
    }
    return -FI_EINVAL;
}

int tunable::check(std::string &accepted) const
{
    std::int64_t i;
    bool b;
    switch (type) {
    case tunable_type::integer:
        accepted = "an integer";
        if (int rc = as_int(i))
            return rc;
        return validate ? validate(value(), accepted) : 0;
    case tunable_type::boolean:
        accepted = "1/0, yes/no, true/false, on/off";
        return as_bool(b);
    case tunable_type::list: {
        std::vector<unsigned> cpus;
        const std::string v = value();
        accepted = "a CPU list such as 0-3,6 within this process's affinity (" +
                   format_cpu_list(affinity_cpus()) + ")";
        return v.empty() ? 0 : parse_cpu_list(v, cpus);
    }
    case tunable_type::string:
        break;
    }
    if (!choices)
        return 0;
    accepted = choices;
    const std::string v = value();
    std::string c = choices;
    for (std::size_t i0 = 0; i0 <= c.size();) {
        std::size_t j = c.find('|', i0);
        if (j == std::string::npos)
            j = c.size();
        if (c.compare(i0, j - i0, v) == 0 && j - i0 == v.size())
            return 0;
        i0 = j + 1;
    }
    return -FI_EINVAL;
}

int check_tunables(std::string &why)
{
    for (const tunable *t : tunables()) {
        std::string accepted;
        if (!t->is_set())
            continue;
        if (int rc = t->check(accepted)) {
            why = std::string(t->name) + "='" + t->value() + "' is not valid (accepted: " + accepted + ")";
            return rc;
        }
    }
    return 0;
}

std::vector<const tunable *> tunables()
{
    table &tb = tab();
    std::lock_guard g(tb.lock);
    std::vector<const tunable *> v = tb.items;
    std::sort(v.begin(), v.end(), [](auto *a, auto *b) { return std::strcmp(a->name, b->name) < 0; });
    v.erase(std::unique(v.begin(), v.end(), [](auto *a, auto *b) { return std::strcmp(a->name, b->name) == 0; }),
            v.end());
    return v;
}

const tunable *find_tunable(const std::string &name)
{
    for (const tunable *t : tunables())
        if (name == t->name)
            return t;
    return nullptr;
}

} // namespace shunt::env
