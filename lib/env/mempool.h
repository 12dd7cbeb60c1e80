/* Object pools backed by rte_mempool (per-lcore caches) and the EAL heap.
 *
 * A pool holds a fixed number of fixed-size objects, allocated once at
 * create() from the EAL's memory (hugepages when init() chose them).
 * get/put are the fast path: no system call, no allocation, no lock (the
 * shared ring is lock-free, multi-producer/multi-consumer), no logging.
 * Threads that are EAL lcores (pinned threads, or threads that called
 * rte_thread_register()) get a per-lcore cache; other threads go to the
 * shared ring. get/put and the queries may be called from any number of
 * threads at once; create, destroy and moves may not overlap any other call
 * on the same pool object.
 *
 * Each pool is a statistics block "env.pool.<name>" (env/stats.h): its
 * capacity, free and in-use objects (read when asked, nothing on the fast
 * path) and how often a get found too few objects (one atomic add on that
 * failure path only). */
#pragma once

#include <cstddef>
#include <string>

struct rte_mempool;

namespace shunt::env {

namespace detail {
struct pool_stats;
}

/** Longest pool name (the EAL names the pool's ring "MP_<name>" in 29 bytes). */
inline constexpr std::size_t pool_name_max = 25;
/** Largest per-lcore cache (RTE_MEMPOOL_CACHE_MAX_SIZE). */
inline constexpr std::size_t pool_cache_max = 512;

/** A pool of fixed-size objects. */
class pool {
public:
    pool() noexcept = default;
    ~pool(); ///< destroy()
    pool(pool &&) noexcept;
    pool &operator=(pool &&) noexcept; ///< destroys what this object held first
    pool(const pool &) = delete;
    pool &operator=(const pool &) = delete;

    /** Create (initialises the environment with ensure_init() if needed).
     *  @param name       unique among this process's pools: 1..25 printable
     *                    characters, no spaces
     *  @param count      number of objects, 1..2^32-1
     *  @param elt_size   bytes per object, 1..2^32-1 (the EAL rounds it up to
     *                    a multiple of 8); objects are cache-line aligned
     *  @param cache_size objects cached per lcore (0: none); at most 512, and
     *                    cache_size * 1.5 (rounded down) at most @p count
     *  @return 0; -FI_EINVAL bad name, count, size or cache size; -FI_EBUSY
     *  this object already holds a pool; -FI_EEXIST a pool of that name
     *  exists in this process; -FI_ENOMEM not enough memory; an error of
     *  ensure_init() (e.g. -FI_EIO) if the environment cannot start. */
    [[nodiscard]] int create(const std::string &name, std::size_t count, std::size_t elt_size,
                             std::size_t cache_size = 0);
    /** Create a pool of DPDK packet buffers (rte_pktmbuf_pool_create), for
     *  drivers/ethdev: each object is an rte_mbuf with @p data_room bytes of
     *  buffer, RTE_PKTMBUF_HEADROOM included (0: bare mbufs that only point
     *  at external buffers or at other mbufs' data). Take and return them
     *  with DPDK's rte_pktmbuf_alloc / rte_pktmbuf_free on raw(), not get/put.
     *  @param socket NUMA node of the memory, -1 for any.
     *  @return as create(); also -FI_EINVAL for @p data_room above 65535 or
     *  below the headroom (but not 0), or @p socket below -1. */
    [[nodiscard]] int create_mbufs(const std::string &name, std::size_t count, std::size_t data_room,
                                   std::size_t cache_size = 0, int socket = -1);
    /** Free the pool and its memory. Objects still out become invalid. Safe
     *  on an empty object and after env::fini() (the memory is then gone
     *  with the EAL). */
    void destroy() noexcept;

    /** Get one object. @return 0 and sets @p obj; -FI_EAGAIN pool empty
     *  (@p obj untouched); -FI_EINVAL no pool. */
    [[nodiscard]] int get(void *&obj) noexcept;
    /** Get @p n objects into @p objs[0..n), all or none.
     *  @return 0 (also for n == 0); -FI_EAGAIN fewer than @p n free (nothing
     *  taken, @p objs untouched); -FI_EINVAL no pool. */
    [[nodiscard]] int get_bulk(void **objs, unsigned n) noexcept;
    /** Return @p obj, which must have come from this pool and not been
     *  returned since. No-op without a pool. */
    void put(void *obj) noexcept;
    /** Return @p n objects (as put()). */
    void put_bulk(void *const *objs, unsigned n) noexcept;

    /** Free objects, in the shared ring and every lcore cache: exact when no
     *  thread is in get/put, a snapshot otherwise. 0 without a pool. */
    std::size_t available() const noexcept;
    /** Objects in the pool (count given to create()); 0 without a pool. */
    std::size_t capacity() const noexcept;
    /** Usable bytes per object: the size given to create() rounded up to a
     *  multiple of 8; 0 without a pool. */
    std::size_t element_size() const noexcept;
    bool valid() const noexcept { return mp_ != nullptr; }
    /** The underlying rte_mempool (for lib/env and drivers/ethdev only). */
    rte_mempool *raw() const noexcept { return mp_; }

private:
    [[gnu::cold]] int note_empty() noexcept;
    /** Register the pool's "env.pool.<name>" statistics block (setup path). */
    void publish(const std::string &name);

    rte_mempool *mp_ = nullptr;
    detail::pool_stats *stats_ = nullptr; ///< the "env.pool.<name>" statistics block
};

/** Allocate @p size bytes from the EAL heap (hugepages when init() chose
 *  them), zeroed, aligned to @p align (a power of two; 0 = cache line).
 *  Initialises the environment if needed. Not for the fast path (it takes
 *  the heap's lock).
 *  @return the pointer; nullptr for size 0, a bad alignment, no memory, or
 *  an environment that cannot start. */
void *heap_alloc(std::size_t size, std::size_t align = 0) noexcept;
/** Free memory from heap_alloc(). nullptr is ignored, as is any call after
 *  env::fini(). */
void heap_free(void *p) noexcept;

} // namespace shunt::env
