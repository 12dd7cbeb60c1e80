// The table of live objects (see detail/live.h) and the calls every object
// answers: close, bind, control, open_ops.
#include <mutex>
#include <unordered_set>

#include "env/errors.h"
#include "env/stats.h"
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
/** Open objects per class: the "fabric.objects" statistics block, counted
 *  from the live table when a reader asks (nothing on any data path). */
struct object_counts {
    env::stats::gauge fabrics, domains, endpoints, scalable_endpoints, passive_endpoints, contexts, avs, mrs, eqs,
        cqs, cntrs, waits, polls, other;
};
#define OBJ_FIELD(n, help) SHUNT_STATS_FIELD(object_counts, n, gauge, none, help)
const env::stats::field object_fields[] = {
    OBJ_FIELD(fabrics, "fabrics open"), OBJ_FIELD(domains, "domains"), OBJ_FIELD(endpoints, "active endpoints"),
    OBJ_FIELD(scalable_endpoints, "scalable endpoints"), OBJ_FIELD(passive_endpoints, "passive endpoints"),
    OBJ_FIELD(contexts, "tx/rx contexts, shared or not"), OBJ_FIELD(avs, "address vectors"),
    OBJ_FIELD(mrs, "memory regions"), OBJ_FIELD(eqs, "event queues"), OBJ_FIELD(cqs, "completion queues"),
    OBJ_FIELD(cntrs, "counters"), OBJ_FIELD(waits, "wait sets"), OBJ_FIELD(polls, "poll sets"),
    OBJ_FIELD(other, "other objects (aliases included)"),
};
#undef OBJ_FIELD
const env::stats::schema object_schema{"fabric.objects", object_fields, sizeof object_fields / sizeof object_fields[0]};

void count_objects(void *arg) noexcept
{
    auto *c = static_cast<object_counts *>(arg);
    std::uint64_t n[14] = {};
    {
        std::lock_guard g(tab().mu);
        for (const fid *f : tab().set) {
            switch (f->fclass) {
            case FI_CLASS_FABRIC: n[0]++; break;
            case FI_CLASS_DOMAIN: n[1]++; break;
            case FI_CLASS_EP: n[2]++; break;
            case FI_CLASS_SEP: n[3]++; break;
            case FI_CLASS_PEP: n[4]++; break;
            case FI_CLASS_RX_CTX:
            case FI_CLASS_TX_CTX:
            case FI_CLASS_SRX_CTX:
            case FI_CLASS_STX_CTX: n[5]++; break;
            case FI_CLASS_AV: n[6]++; break;
            case FI_CLASS_MR: n[7]++; break;
            case FI_CLASS_EQ: n[8]++; break;
            case FI_CLASS_CQ: n[9]++; break;
            case FI_CLASS_CNTR: n[10]++; break;
            case FI_CLASS_WAIT: n[11]++; break;
            case FI_CLASS_POLL: n[12]++; break;
            default: n[13]++; break;
            }
        }
    }
    env::stats::gauge *g[14] = {&c->fabrics, &c->domains, &c->endpoints, &c->scalable_endpoints,
                                &c->passive_endpoints, &c->contexts, &c->avs, &c->mrs, &c->eqs, &c->cqs,
                                &c->cntrs, &c->waits, &c->polls, &c->other};
    for (int i = 0; i < 14; i++)
        g[i]->set(n[i]);
}

/** Register "fabric.objects" once, at the first object. */
void publish_object_counts()
{
    static object_counts *counts = new object_counts; // read by count_objects until exit
    static env::stats::registration reg;
    static std::once_flag once;
    std::call_once(once, [] { (void)reg.open("fabric.objects", object_schema, counts, count_objects, counts); });
}
} // namespace

void live_add(fid *f)
{
    publish_object_counts();
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
