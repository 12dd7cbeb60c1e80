/* Object pools backed by rte_mempool (per-lcore caches) and the EAL heap. */
#pragma once

#include <cstddef>
#include <string>

struct rte_mempool;

namespace shunt::env {

/** A pool of fixed-size objects. Threads that are EAL lcores get a per-lcore
 *  cache; other threads go to the shared ring. */
class pool {
public:
    pool() noexcept = default;
    ~pool();
    pool(pool &&) noexcept;
    pool &operator=(pool &&) noexcept;
    pool(const pool &) = delete;
    pool &operator=(const pool &) = delete;

    /** Create (initialises the environment if needed). @p count objects of
     *  @p elt_size bytes each, cache of @p cache_size per lcore (0: none).
     *  @return 0; -FI_EINVAL bad sizes or name (the EAL limits names to 25
     *  characters and cache_size to 512 and count/1.5); -FI_EEXIST name in
     *  use; -FI_ENOMEM no memory. */
    [[nodiscard]] int create(const std::string &name, std::size_t count, std::size_t elt_size,
                             std::size_t cache_size = 0);
    void destroy() noexcept;

    /** Get one object. @return 0 and sets @p obj; -FI_EAGAIN pool empty. */
    [[nodiscard]] int get(void *&obj) noexcept;
    /** Get @p n objects, all or none. @return 0 or -FI_EAGAIN. */
    [[nodiscard]] int get_bulk(void **objs, unsigned n) noexcept;
    void put(void *obj) noexcept;
    void put_bulk(void *const *objs, unsigned n) noexcept;

    std::size_t available() const noexcept;   ///< free objects (approximate with caches)
    std::size_t capacity() const noexcept;
    std::size_t element_size() const noexcept;
    bool valid() const noexcept { return mp_ != nullptr; }
    rte_mempool *raw() const noexcept { return mp_; }

private:
    rte_mempool *mp_ = nullptr;
};

/** Allocate from the EAL heap (hugepages when present), zeroed, aligned to
 *  @p align (power of two, 0 = cache line). @return the pointer or nullptr. */
void *heap_alloc(std::size_t size, std::size_t align = 0) noexcept;
void heap_free(void *p) noexcept;

} // namespace shunt::env
