/* For provider writers: the receive side shared by every provider —
 * posted receives (message and tagged), matching with source and ignore
 * bits, unexpected messages, multi-receive buffers, cancel.
 *
 * Entries come from a pool sized at enable (rx_attr::size): posting a
 * receive allocates nothing. Unexpected messages (arrived before a matching
 * receive) are copied into heap buffers: a slow path by definition. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/uio.h>
#include <vector>

#include "fabric/flags.h"
#include "fabric/util/lock.h"

namespace shunt::fabric::util {

inline constexpr std::size_t rx_iov_max = 4;

struct rx_entry {
    rx_entry *next = nullptr;
    void *context = nullptr;
    std::uint64_t flags = 0;      ///< FI_MSG or FI_TAGGED | FI_COMPLETION (resolved) | FI_MULTI_RECV
    fi_addr_t src = FI_ADDR_UNSPEC;
    std::uint64_t tag = 0;
    std::uint64_t ignore = 0;
    std::size_t iov_count = 0;
    iovec iov[rx_iov_max];
    void *desc[rx_iov_max];
    std::size_t total = 0;        ///< bytes of the buffer
    std::size_t used = 0;         ///< multi-recv: bytes consumed
};

struct unexp_msg {
    unexp_msg *next = nullptr;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    std::uint64_t tag = 0;
    std::uint64_t data = 0;
    std::uint64_t flags = 0;      ///< FI_REMOTE_CQ_DATA when data is valid
    std::size_t len = 0;
    std::uint8_t *payload = nullptr;
    void *claim = nullptr;        ///< FI_CLAIM context that owns it
};

template <class T>
struct fifo {
    T *head = nullptr;
    T *tail = nullptr;
    void push(T *e)
    {
        e->next = nullptr;
        if (tail)
            tail->next = e;
        else
            head = e;
        tail = e;
    }
    void unlink(T *prev, T *e)
    {
        if (prev)
            prev->next = e->next;
        else
            head = e->next;
        if (tail == e)
            tail = prev;
        e->next = nullptr;
    }
    bool empty() const { return !head; }
};

/** Does a posted receive accept a message? */
inline bool rx_matches(const rx_entry *r, bool directed, fi_addr_t src, std::uint64_t tag, bool tagged)
{
    if (directed && r->src != FI_ADDR_UNSPEC && r->src != src)
        return false;
    return !tagged || ((r->tag ^ tag) & ~r->ignore) == 0;
}

struct rxq {
    std::vector<rx_entry> pool;
    rx_entry *free = nullptr;
    std::size_t nfree = 0;
    fifo<rx_entry> msg, tagged;
    fifo<unexp_msg> umsg, utagged;
    bool directed_msg = false;     ///< FI_DIRECTED_RECV
    bool directed_tagged = false;  ///< FI_DIRECTED_RECV or FI_TAGGED_DIRECTED_RECV
    std::size_t min_multi_recv = 64;
    maybe_lock lock;               ///< FI_THREAD_SAFE / shared / auto progress

    /** Allocate the pool. @return 0 or -FI_ENOMEM. */
    int init(std::size_t depth);
    ~rxq();
    rx_entry *get()
    {
        rx_entry *e = free;
        if (e) {
            free = e->next;
            nfree--;
        }
        return e;
    }
    void put(rx_entry *e)
    {
        e->next = free;
        free = e;
        nfree++;
    }
    /** First posted receive matching; unlinked unless it is a multi-recv
     *  buffer (which stays posted until released). */
    rx_entry *match(bool tagged, fi_addr_t src, std::uint64_t tag);
    /** First unexpected message a receive matches; unlinked. */
    unexp_msg *match_unexp(bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t ignore, bool peek);
    /** Remove a posted receive with @p context. @return it or null. */
    rx_entry *remove_ctx(void *context);
    /** Drop everything (endpoint close): no completions. */
    void clear();
};

} // namespace shunt::fabric::util
