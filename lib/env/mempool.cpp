#include "env/mempool.h"

#include "env/compiler.h"
#include "env/env.h"
#include "env/errors.h"
#include "env/log.h"
#include "env/stats.h"

#include <rte_errno.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

#if defined(__SANITIZE_THREAD__)
#include <rte_mbuf_pool_ops.h>
#include <sanitizer/tsan_interface.h>
#endif

namespace shunt::env {

namespace {

SHUNT_LOG_COMPONENT(pool_log, "env");

static_assert(pool_name_max == RTE_MEMPOOL_NAMESIZE - 1);
static_assert(pool_cache_max == RTE_MEMPOOL_CACHE_MAX_SIZE);

SHUNT_COLD int fail(int code, const std::string &name, const char *what)
{
    SHUNT_LOG(pool_log, error, "pool '%s': %s", name.c_str(), what);
    return code;
}

bool name_ok(const std::string &name) noexcept
{
    if (name.empty() || name.size() > pool_name_max)
        return false;
    for (char c : name)
        if (c <= ' ' || c > '~')
            return false;
    return true;
}

/** The EAL did not create pool @p name: say why (rte_errno). */
SHUNT_COLD int create_failed(const std::string &name)
{
    int e = rte_errno;
    if (e == EEXIST) {
        SHUNT_LOG(pool_log, info, "pool '%s': name in use", name.c_str());
        return -FI_EEXIST;
    }
    if (e == EINVAL)
        return fail(-FI_EINVAL, name, "the EAL refused the parameters");
    return fail(-FI_ENOMEM, name, rte_strerror(e));
}

} // namespace

namespace detail {
/** A pool's statistics block. The gauges are taken by refresh, on the
 *  reader's thread; `empty` is the only field the fast path writes. */
struct pool_stats {
    stats::gauge capacity;
    stats::gauge available;
    stats::gauge in_use;
    stats::gauge element_size;
    stats::shared_counter empty;
    rte_mempool *mp = nullptr;
    stats::registration reg;
};
} // namespace detail

namespace {
#define POOL_FIELD(n, k, u, help) SHUNT_STATS_FIELD(detail::pool_stats, n, k, u, help)
const stats::field pool_fields[] = {
    POOL_FIELD(capacity, gauge, none, "objects in the pool"),
    POOL_FIELD(available, gauge, none, "free objects (shared ring and every lcore cache)"),
    POOL_FIELD(in_use, gauge, none, "objects taken"),
    POOL_FIELD(element_size, gauge, bytes, "usable bytes per object"),
    POOL_FIELD(empty, counter, none, "gets that found too few free objects (-FI_EAGAIN)"),
};
#undef POOL_FIELD
const stats::schema pool_schema{"env.pool", pool_fields, sizeof pool_fields / sizeof pool_fields[0]};

void refresh_pool(void *arg) noexcept
{
    auto *ps = static_cast<detail::pool_stats *>(arg);
    const std::size_t avail = rte_mempool_avail_count(ps->mp);
    ps->capacity.set(ps->mp->size);
    ps->available.set(avail);
    ps->in_use.set(ps->mp->size > avail ? ps->mp->size - avail : 0);
    ps->element_size.set(ps->mp->elt_size);
}
} // namespace

int pool::note_empty() noexcept
{
    if (stats_)
        stats_->empty.add();
    return -FI_EAGAIN;
}

pool::~pool()
{
    destroy();
}

pool::pool(pool &&o) noexcept : mp_(std::exchange(o.mp_, nullptr)), stats_(std::exchange(o.stats_, nullptr)) {}

pool &pool::operator=(pool &&o) noexcept
{
    if (this != &o) {
        destroy();
        mp_ = std::exchange(o.mp_, nullptr);
        stats_ = std::exchange(o.stats_, nullptr);
    }
    return *this;
}

int pool::create(const std::string &name, std::size_t count, std::size_t elt_size, std::size_t cache_size)
{
    if (mp_)
        return fail(-FI_EBUSY, name, "this object already holds a pool");
    if (!name_ok(name))
        return fail(-FI_EINVAL, name, "bad name (1..25 printable characters, no spaces)");
    if (count == 0 || count > UINT_MAX)
        return fail(-FI_EINVAL, name, "count must be 1..2^32-1");
    if (elt_size == 0 || elt_size > UINT_MAX)
        return fail(-FI_EINVAL, name, "element size must be 1..2^32-1");
    // The EAL's own rule (it flushes a cache at 1.5 times its size).
    if (cache_size > pool_cache_max || cache_size * 3 / 2 > count)
        return fail(-FI_EINVAL, name, "cache size above 512 or above count / 1.5");
    int rc = ensure_init();
    if (rc != 0)
        return rc; // logged by init()
    rte_mempool *mp = rte_mempool_create(name.c_str(), static_cast<unsigned>(count),
                                         static_cast<unsigned>(elt_size), static_cast<unsigned>(cache_size),
                                         0, nullptr, nullptr, nullptr, nullptr, SOCKET_ID_ANY, 0);
    if (!mp)
        return create_failed(name);
    mp_ = mp;
    publish(name);
    return 0;
}

namespace {

#if defined(__SANITIZE_THREAD__)
/* DPDK is not instrumented: a pool's ring hands a freed mbuf to the thread
 * that allocates it next with a release/acquire pair ThreadSanitizer never
 * sees, and the new owner's first write (rte_pktmbuf_reset) looks like a race
 * with the old owner's last access. Under ThreadSanitizer mbuf pools use the
 * default ops behind a wrapper that restates the pair on each object's
 * address. (Per-lcore caches are inline code, instrumented, and one thread's.) */
rte_mempool_ops tsan_base_ops;

int tsan_enqueue(rte_mempool *mp, void *const *objs, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        __tsan_release(objs[i]);
    return tsan_base_ops.enqueue(mp, objs, n);
}

int tsan_dequeue(rte_mempool *mp, void **objs, unsigned n)
{
    int rc = tsan_base_ops.dequeue(mp, objs, n);
    if (rc == 0)
        for (unsigned i = 0; i < n; i++)
            __tsan_acquire(objs[i]);
    return rc;
}

/** The wrapped ops' name, registered on first use (nullptr: the default's). */
const char *tsan_mbuf_ops() noexcept
{
    static const char *name = [] () -> const char * {
        const char *base = rte_mbuf_best_mempool_ops();
        for (unsigned i = 0; base && i < rte_mempool_ops_table.num_ops; i++) {
            if (std::strcmp(rte_mempool_ops_table.ops[i].name, base) != 0)
                continue;
            tsan_base_ops = rte_mempool_ops_table.ops[i];
            rte_mempool_ops ops = tsan_base_ops;
            std::snprintf(ops.name, sizeof ops.name, "shunt_tsan");
            ops.enqueue = tsan_enqueue;
            ops.dequeue = tsan_dequeue;
            ops.dequeue_contig_blocks = nullptr;
            return rte_mempool_register_ops(&ops) >= 0 ? "shunt_tsan" : nullptr;
        }
        return nullptr;
    }();
    return name;
}
#else
constexpr const char *tsan_mbuf_ops() noexcept { return nullptr; }
#endif

} // namespace

int pool::create_mbufs(const std::string &name, std::size_t count, std::size_t data_room, std::size_t cache_size,
                       int socket)
{
    if (mp_)
        return fail(-FI_EBUSY, name, "this object already holds a pool");
    if (!name_ok(name))
        return fail(-FI_EINVAL, name, "bad name (1..25 printable characters, no spaces)");
    if (count == 0 || count > UINT_MAX)
        return fail(-FI_EINVAL, name, "count must be 1..2^32-1");
    if (data_room > UINT16_MAX || (data_room != 0 && data_room < RTE_PKTMBUF_HEADROOM))
        return fail(-FI_EINVAL, name, "data room must be 0 or headroom..65535 bytes");
    if (cache_size > pool_cache_max || cache_size * 3 / 2 > count)
        return fail(-FI_EINVAL, name, "cache size above 512 or above count / 1.5");
    if (socket < -1)
        return fail(-FI_EINVAL, name, "socket must be -1 (any) or a NUMA node");
    int rc = ensure_init();
    if (rc != 0)
        return rc;
    rte_mempool *mp = rte_pktmbuf_pool_create_by_ops(name.c_str(), static_cast<unsigned>(count),
                                                     static_cast<unsigned>(cache_size), 0,
                                                     static_cast<std::uint16_t>(data_room),
                                                     socket < 0 ? SOCKET_ID_ANY : socket, tsan_mbuf_ops());
    if (!mp)
        return create_failed(name);
    mp_ = mp;
    publish(name);
    return 0;
}

void pool::publish(const std::string &name)
{
    // Statistics are a convenience: a pool without its block still works.
    stats_ = new (std::nothrow) detail::pool_stats;
    if (stats_) {
        stats_->mp = mp_;
        if (stats_->reg.open("env.pool." + name, pool_schema, stats_, refresh_pool, stats_, true) != 0)
            SHUNT_LOG(pool_log, info, "pool '%s': no statistics block", name.c_str());
    }
}

void pool::destroy() noexcept
{
    // Readers first: the refresh reads the pool.
    delete stats_;
    stats_ = nullptr;
    // After fini() the EAL's memory (and the pool in it) is already gone.
    if (mp_ && initialized())
        rte_mempool_free(mp_);
    mp_ = nullptr;
}

int pool::get(void *&obj) noexcept
{
    if (!mp_) [[unlikely]]
        return -FI_EINVAL;
    void *o;
    if (rte_mempool_get(mp_, &o) != 0) [[unlikely]]
        return note_empty();
    obj = o;
    return 0;
}

namespace {

// The request may drain this lcore's cache and then fail on the shared ring:
// DPDK has by then copied the cache's objects into objs (they stay in the
// cache), so save what it may overwrite and put it back on failure. Taken once
// per cache refill, not per call.
[[gnu::noinline]] int get_bulk_refill(rte_mempool *mp, void **objs, unsigned n, rte_mempool_cache *c) noexcept
{
    void *saved[RTE_MEMPOOL_CACHE_MAX_SIZE * 2]; // cache->len never exceeds its objs[] array
    const unsigned keep = c->len; // < n
    std::memcpy(saved, objs, keep * sizeof(void *));
    if (rte_mempool_generic_get(mp, objs, n, c) == 0)
        return 0;
    std::memcpy(objs, saved, keep * sizeof(void *));
    return -FI_EAGAIN;
}

} // namespace

int pool::get_bulk(void **objs, unsigned n) noexcept
{
    if (!mp_) [[unlikely]]
        return -FI_EINVAL;
    if (n == 0) // the ring treats a zero-object dequeue as a failure
        return 0;
    rte_mempool_cache *c = rte_mempool_default_cache(mp_, rte_lcore_id());
    // Without a cache the ring's bulk dequeue is all-or-none and writes objs
    // only on success; with enough in the cache the call cannot fail.
    if (c == nullptr || n <= c->len) [[likely]]
        return rte_mempool_generic_get(mp_, objs, n, c) == 0 ? 0 : note_empty();
    return get_bulk_refill(mp_, objs, n, c) == 0 ? 0 : note_empty();
}

void pool::put(void *obj) noexcept
{
    if (mp_) [[likely]]
        rte_mempool_put(mp_, obj);
}

void pool::put_bulk(void *const *objs, unsigned n) noexcept
{
    if (mp_) [[likely]]
        rte_mempool_put_bulk(mp_, objs, n);
}

std::size_t pool::available() const noexcept
{
    return mp_ ? rte_mempool_avail_count(mp_) : 0;
}

std::size_t pool::capacity() const noexcept
{
    return mp_ ? mp_->size : 0;
}

std::size_t pool::element_size() const noexcept
{
    return mp_ ? mp_->elt_size : 0;
}

void *heap_alloc(std::size_t size, std::size_t align) noexcept
{
    if (align == 0)
        align = cache_line;
    if (size == 0 || (align & (align - 1)) != 0 || align > UINT_MAX)
        return nullptr;
    if (ensure_init() != 0)
        return nullptr;
    return rte_zmalloc("shunt", size, static_cast<unsigned>(align));
}

void heap_free(void *p) noexcept
{
    if (p && initialized())
        rte_free(p);
}

} // namespace shunt::env
