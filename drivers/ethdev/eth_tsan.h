// ThreadSanitizer's view of an mbuf handed from thread to thread inside DPDK.
#pragma once

#include <rte_mbuf.h>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace shunt::drv::ethdev {

/* DPDK is not instrumented. The ring PMD (net_ring) moves a transmitted
 * mbuf to the thread that receives it through an rte_ring whose release /
 * acquire pair ThreadSanitizer never sees, so the receiver's first read of
 * a header the sender wrote looks like a race. tsan_handed() before
 * rte_eth_tx_burst and tsan_taken() after rte_eth_rx_burst restate that
 * pair on each segment's address (the mempool's own hand-off, free to
 * alloc, is restated in lib/env). Without -fsanitize=thread both are empty. */
#if defined(__SANITIZE_THREAD__)
inline void tsan_handed(rte_mbuf *const *m, std::uint16_t n) noexcept
{
    for (std::uint16_t i = 0; i < n; i++)
        for (const rte_mbuf *s = m[i]; s; s = s->next)
            __tsan_release(const_cast<rte_mbuf *>(s));
}
inline void tsan_taken(rte_mbuf *const *m, std::uint16_t n) noexcept
{
    for (std::uint16_t i = 0; i < n; i++)
        for (rte_mbuf *s = m[i]; s; s = s->next)
            __tsan_acquire(s); // before reading s->next: the sender wrote it
}
#else
inline void tsan_handed(rte_mbuf *const *, std::uint16_t) noexcept {}
inline void tsan_taken(rte_mbuf *const *, std::uint16_t) noexcept {}
#endif

} // namespace shunt::drv::ethdev
