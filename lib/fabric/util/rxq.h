/* For provider writers: the receive side shared by every provider —
 * posted receives (message and tagged), matching with source and ignore
 * bits, unexpected messages, multi-receive buffers, cancel.
 *
 * Entries come from a pool sized at enable (rx_attr::size): posting a
 * receive allocates nothing. Unexpected messages (arrived before a matching
 * receive) are copied once into the unexpected store: entries and payload
 * buffers from free lists by size class, which grow to the high-water mark
 * the first time they run short and are reused from then on (no allocation
 * per message in a steady state). A message whose data the provider fetches
 * itself (a rendezvous) keeps only the provider's description of it.
 *
 * The store is bounded (SHUNT_UNEXPECTED_BYTES, read at init): what it
 * holds at a time, entries and payload buffers, and what providers keep
 * for the messages it describes (a fragmented message's staging buffer),
 * stays within the bound, so that peers sending what nobody receives
 * cannot exhaust the process's memory. A message beyond it is not kept
 * (unexp_get fails). */
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
    /** Multi-recv: fetches (rx_fetch) still writing into the buffer; it is
     *  released (FI_MULTI_RECV completion) only when the last one is done. */
    std::uint32_t pending = 0;
    bool released = false;        ///< multi-recv: below the minimum, unlinked, waits for pending
};

inline constexpr std::size_t unexp_inline = 64; ///< payload bytes kept inside the entry
inline constexpr std::size_t unexp_classes = 4; ///< payload buffer size classes above that

struct unexp_msg {
    unexp_msg *next = nullptr;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    std::uint64_t tag = 0;
    std::uint64_t data = 0;
    std::uint64_t flags = 0;      ///< FI_REMOTE_CQ_DATA when data is valid
    std::size_t len = 0;          ///< the message's length
    std::uint8_t *payload = nullptr; ///< its bytes (rndv: the provider's description of them)
    std::size_t plen = 0;         ///< bytes at payload (len, or the description's size)
    bool rndv = false;            ///< the provider fetches the data when a receive matches (rx_fetch)
    std::uint8_t cls = 0;         ///< payload's storage: 0 inline, 1..unexp_classes a class, else malloc
    alignas(8) std::uint8_t inline_buf[unexp_inline];
    std::size_t charge = 0;       ///< bytes it counts against the store's bound
    void *claim = nullptr;        ///< FI_CLAIM context that owns it
    /** The endpoint (its ep_core) that received it: with a shared receive
     *  context, the one whose CQ and counter report the receive. */
    void *owner = nullptr;
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

/** A receive completion kept back so that one source's receive
 *  completions are reported in the order its messages were matched
 *  (ep_data.cpp): a fetch (rendezvous) still running, or a completion
 *  matched after a running fetch from the same source. */
struct held_rx {
    held_rx *next = nullptr;      ///< in rxq::held (matching order)
    held_rx *fnext = nullptr;     ///< in rxq::fetching (fetches still running)
    void *reporter = nullptr;     ///< the ep_core whose CQ and counter report it
    rx_entry *e = nullptr;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    bool fetching = false;        ///< the provider has not finished the fetch yet
    bool tagged = false;
    int err = 0;                  ///< positive error code, 0 success
    std::size_t offset = 0;       ///< placement in e's buffer
    std::size_t n = 0;
    void *buf = nullptr;
    std::uint64_t tag = 0, data = 0, msg_flags = 0;
    std::size_t len = 0;
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

    /* The unexpected store. */
    unexp_msg *ufree = nullptr;                  ///< free entries
    std::vector<unexp_msg *> uchunks;            ///< their storage (freed at destruction)
    void *bfree[unexp_classes] = {};             ///< free payload buffers per class (linked through their first word)
    std::size_t unexp_limit = 0;                 ///< bytes the store may hold (0: no bound)
    std::size_t unexp_held = 0;                  ///< bytes its messages hold now (lock held)
    bool unexp_warned = false;                   ///< the first refusal was logged

    /* Completions held for order (ep_data.cpp). nfetching is what the fast
     * path tests: with no fetch running, nothing is held. */
    fifo<held_rx> held;                          ///< every held completion, in matching order
    held_rx *fetching = nullptr;                 ///< the running fetches among them (through fnext)
    std::size_t nfetching = 0;
    held_rx *hfree = nullptr;                    ///< free records
    std::vector<held_rx *> hchunks;              ///< their storage (freed at destruction)

    /** Allocate the pool. @return 0 or -FI_ENOMEM. */
    int init(std::size_t depth);
    /** An unexpected entry with room for @p n payload bytes (entry fields
     *  reset, payload/plen set), counted against the bound with @p kept
     *  more bytes that the provider keeps for it until it is put back. Null
     *  when that would take the store past its bound or memory is
     *  exhausted. Lock held. */
    unexp_msg *unexp_get(std::size_t n, std::size_t kept = 0);
    /** Return an entry and its payload to the store. Lock held. */
    void unexp_put(unexp_msg *u);
    /** A reset hold record (from a free list made by init and grown when it
     *  runs short). Null when memory is exhausted. Lock held. */
    held_rx *held_get();
    /** One more chunk of free hold records. @return false: no memory. */
    bool held_grow();
    void held_put(held_rx *h);
    /** Unlink @p h from the running fetches. Lock held. */
    void fetch_over(held_rx *h);
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
    /** The first posted receive when it accepts the message and is not a
     *  multi-recv buffer (the common case: match() would unlink it), else
     *  null. Nothing is unlinked. */
    rx_entry *first_match(bool is_tagged, fi_addr_t src, std::uint64_t tag) const
    {
        rx_entry *e = (is_tagged ? tagged : msg).head;
        if (!e || (e->flags & FI_MULTI_RECV) ||
            !rx_matches(e, is_tagged ? directed_tagged : directed_msg, src, tag, is_tagged))
            return nullptr;
        return e;
    }
    /** Unlink the first posted receive (the one first_match returned). */
    void unlink_first(bool is_tagged)
    {
        fifo<rx_entry> &l = is_tagged ? tagged : msg;
        l.unlink(nullptr, l.head);
    }
    /** First unexpected message a receive matches; unlinked. */
    unexp_msg *match_unexp(bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t ignore, bool peek);
    /** Remove a posted receive with @p context. @return it or null. */
    rx_entry *remove_ctx(void *context);
    /** Drop everything (endpoint close): no completions. */
    void clear();
    /** Drop the unexpected messages @p owner received (an endpoint leaving a
     *  shared receive context): no completions. Caller holds the lock. */
    void drop_owned(const void *owner);
};

} // namespace shunt::fabric::util
