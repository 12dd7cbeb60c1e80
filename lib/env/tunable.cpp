#include "env/tunable.h"

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
