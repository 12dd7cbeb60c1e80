// The table of live objects (see detail/live.h) and the calls every object
// answers: close, bind, control, open_ops.
#include <mutex>
#include <unordered_set>

#include "env/errors.h"
#include "fabric/detail/live.h"
#include "fabric/endpoint.h"

namespace shunt::fabric {

namespace detail {
namespace {
struct table {
    std::mutex mu;
    std::unordered_set<const fid *> set;
};
table &tab()
{
    static table *t = new table; // outlives every static object that may close fids
    return *t;
}
} // namespace

void live_add(fid *f)
{
    std::lock_guard g(tab().mu);
    tab().set.insert(f);
}

void live_remove(fid *f)
{
    std::lock_guard g(tab().mu);
    tab().set.erase(f);
}

bool live_is(const fid *f, std::size_t c1, std::size_t c2, std::size_t c3, std::size_t c4)
{
    if (!f)
        return false;
    std::lock_guard g(tab().mu);
    if (!tab().set.count(f))
        return false;
    if (!c1)
        return true;
    return f->fclass == c1 || (c2 && f->fclass == c2) || (c3 && f->fclass == c3) || (c4 && f->fclass == c4);
}
} // namespace detail

bool fid_live(const fid *f) noexcept { return detail::live_is(f); }

int close(fid *f)
{
    if (!detail::live_is(f))
        return -FI_EINVAL;
    // Out of the table first: once the provider frees it, the address may be
    // reused by another object that must not be removed by us.
    detail::live_remove(f);
    int rc = f->ops->close(f);
    if (rc)
        detail::live_add(f);
    return rc;
}

int bind(fid *f, fid *bfid, std::uint64_t flags)
{
    if (!detail::live_is(f) || !detail::live_is(bfid))
        return -FI_EINVAL;
    return f->ops->bind(f, bfid, flags);
}

int control(fid *f, int command, void *arg)
{
    if (!detail::live_is(f))
        return -FI_EINVAL;
    int rc = f->ops->control(f, command, arg);
    if (rc == 0 && command == FI_ALIAS && arg) {
        auto *a = static_cast<alias *>(arg);
        if (a->alias_fid && *a->alias_fid)
            detail::live_add(*a->alias_fid);
    }
    return rc;
}

int open_ops(fid *f, const char *name, std::uint64_t flags, void **ops, void *context)
{
    if (!detail::live_is(f) || !name || !ops)
        return -FI_EINVAL;
    return f->ops->ops_open(f, name, flags, ops, context);
}

} // namespace shunt::fabric
