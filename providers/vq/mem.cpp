// vq provider: registrations of buffers passed without a descriptor, and
// the shunt_mem extension (memory peers reach without a system call).
#include <algorithm>
#include <cstring>

#include "env/errors.h"
#include "prov.h"

namespace shunt::prov::vqprov {

namespace {

constexpr unsigned cache_access = vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_WRITE;
constexpr std::uintptr_t page = 4096;

int mem_alloc(fid_domain *fd, std::size_t len, void **buf)
{
    if (!fd || !buf || !len)
        return -FI_EINVAL;
    prov_domain *d = dom_of(util::to_domain(fd));
    void *p = nullptr;
    if (int rc = vq::alloc_buf(d->ctx, len, &p))
        return rc;
    util::guard g(d->shared_lock);
    auto lo = reinterpret_cast<std::uintptr_t>(p);
    auto it = std::lower_bound(d->shared.begin(), d->shared.end(), lo,
                               [](const prov_domain::shared_buf &b, std::uintptr_t x) { return b.lo < x; });
    try {
        d->shared.insert(it, {lo, lo + len});
    } catch (...) {
        (void)vq::free_buf(d->ctx, p);
        return -FI_ENOMEM;
    }
    *buf = p;
    return 0;
}

int mem_free(fid_domain *fd, void *buf)
{
    if (!fd || !buf)
        return -FI_EINVAL;
    prov_domain *d = dom_of(util::to_domain(fd));
    auto lo = reinterpret_cast<std::uintptr_t>(buf);
    std::uintptr_t hi = 0;
    {
        util::guard g(d->shared_lock);
        auto it = std::find_if(d->shared.begin(), d->shared.end(), [lo](const auto &b) { return b.lo == lo; });
        if (it == d->shared.end())
            return -FI_EINVAL;
        hi = it->hi;
    }
    {
        // Regions over it must be gone first: peers may still access them.
        util::guard m(d->mr_lock);
        for (auto &[key, mr] : d->mrs)
            for (const iovec &v : mr->iov) {
                auto a = reinterpret_cast<std::uintptr_t>(v.iov_base);
                if (a < hi && a + v.iov_len > lo)
                    return -FI_EBUSY;
            }
    }
    {
        // And no cached registration of ours may name it.
        util::guard c(d->mrc.lock);
        for (auto &en : d->mrc.v)
            if (en.mr && en.lo < hi && en.hi > lo) {
                if (en.refs)
                    return -FI_EBUSY;
                (void)vq::dereg_mr(en.mr);
                en = mr_cache::entry{};
            }
    }
    util::guard g(d->shared_lock);
    auto it = std::find_if(d->shared.begin(), d->shared.end(), [lo](const auto &b) { return b.lo == lo; });
    if (it == d->shared.end())
        return -FI_EINVAL; // freed meanwhile by another thread
    if (int rc = vq::free_buf(d->ctx, buf))
        return rc;
    d->shared.erase(it);
    return 0;
}

const ops_mem mem_ops{.alloc = mem_alloc, .free = mem_free};

} // namespace

int mem_ops_open(util::domain_obj *, const char *name, void **ops)
{
    if (std::strcmp(name, FI_SHUNT_MEM_OPS_1) != 0)
        return -FI_ENOSYS;
    *ops = const_cast<ops_mem *>(&mem_ops);
    return 0;
}

bool mem_is_shared(prov_domain *d, const void *addr, std::size_t len)
{
    auto a = reinterpret_cast<std::uintptr_t>(addr);
    util::guard g(d->shared_lock);
    auto it = std::upper_bound(d->shared.begin(), d->shared.end(), a,
                               [](std::uintptr_t x, const prov_domain::shared_buf &b) { return x < b.lo; });
    if (it == d->shared.begin())
        return false;
    --it;
    return a >= it->lo && a <= it->hi && len <= it->hi - a;
}

int mr_get(prov_domain *d, const void *addr, std::size_t len, mr_ref &ref)
{
    auto a = reinterpret_cast<std::uintptr_t>(addr);
    mr_cache &c = d->mrc;
    if (!c.v.empty()) {
        util::guard g(c.lock);
        c.clock++;
        int victim = -1;
        for (int i = 0; i < int(c.v.size()); i++) {
            mr_cache::entry &en = c.v[std::size_t(i)];
            if (en.mr && a >= en.lo && a <= en.hi && len <= en.hi - a) [[likely]] {
                en.refs++;
                en.used = c.clock;
                ref = {en.mr, i};
                return 0;
            }
            if (!en.refs && (victim < 0 || !en.mr || (c.v[std::size_t(victim)].mr && en.used < c.v[std::size_t(victim)].used)))
                victim = i;
        }
        if (victim >= 0) {
            // Page-aligned, so that neighbouring buffers share it.
            std::uintptr_t lo = a & ~(page - 1), hi = (a + len + page - 1) & ~(page - 1);
            vq::mr *m = nullptr;
            if (int rc = vq::reg_mr(d->pd, reinterpret_cast<void *>(lo), hi - lo, cache_access, &m))
                return rc;
            mr_cache::entry &en = c.v[std::size_t(victim)];
            if (en.mr)
                (void)vq::dereg_mr(en.mr);
            en = {lo, hi, m, 1, c.clock};
            ref = {m, victim};
            return 0;
        }
    }
    // No cache (the device pins what it registers), or every entry in use:
    // a registration of this operation's own.
    vq::mr *m = nullptr;
    if (int rc = vq::reg_mr(d->pd, const_cast<void *>(addr), len ? len : 1, cache_access, &m))
        return rc;
    ref = {m, -1};
    return 0;
}

void mr_put(prov_domain *d, mr_ref &ref)
{
    if (!ref.mr)
        return;
    if (ref.slot < 0) {
        if (int rc = vq::dereg_mr(ref.mr))
            SHUNT_LOG(prov_log, warning, "vq: releasing a registration failed: %s", shunt::strerror(rc));
    } else {
        util::guard g(d->mrc.lock);
        d->mrc.v[std::size_t(ref.slot)].refs--;
    }
    ref = mr_ref{};
}

} // namespace shunt::prov::vqprov
