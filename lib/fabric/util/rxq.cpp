// Receive matching structures.
#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>

#include "env/errors.h"
#include "env/tunable.h"
#include "fabric/util/rxq.h"

namespace shunt::fabric::util {

namespace {

int check_unexp_bytes(const std::string &v, std::string &accepted)
{
    accepted = "0 (no bound) or a number of bytes";
    return std::strtoll(v.c_str(), nullptr, 0) >= 0 ? 0 : -FI_EINVAL;
}

SHUNT_TUNABLE_CHECKED(t_unexp_bytes, "SHUNT_UNEXPECTED_BYTES", integer, "268435456",
              "Bytes the unexpected store of each receive queue (endpoint or shared receive context) may "
              "hold at a time: messages that arrived before a matching receive, their entries and "
              "buffers included; a message beyond it is not kept and is reported by an error completion "
              "(FI_ENOMEM) on the receiving endpoint's CQ, and its sender's FI_DELIVERY_COMPLETE send "
              "fails; 0: no bound",
              "fabric", check_unexp_bytes);

/** The bound of a store: the tunable, or its declared default when it is
 *  not a number of bytes (a value set after init's check). */
std::size_t unexp_bound()
{
    std::int64_t v = 0;
    if (t_unexp_bytes.as_int(v) != 0 || v < 0)
        return std::size_t(std::strtoull(t_unexp_bytes.defval, nullptr, 0));
    return std::size_t(v);
}

void add_entries(rxq &q, unexp_msg *v, std::size_t n)
{
    for (std::size_t i = n; i-- > 0;) {
        v[i].next = q.ufree;
        q.ufree = &v[i];
    }
}

constexpr std::size_t class_bytes[unexp_classes] = {512, 4096, 32768, 131072};

[[gnu::cold]] unexp_msg *grow_entries(rxq &q)
{
    constexpr std::size_t chunk = 64;
    auto *v = new (std::nothrow) unexp_msg[chunk];
    if (!v)
        return nullptr;
    try {
        q.uchunks.push_back(v);
    } catch (...) {
        delete[] v;
        return nullptr;
    }
    add_entries(q, v + 1, chunk - 1);
    return &v[0];
}

} // namespace

int rxq::init(std::size_t depth)
{
    try {
        pool.assign(depth ? depth : 1, rx_entry{});
    } catch (...) {
        return -FI_ENOMEM;
    }
    free = nullptr;
    nfree = 0;
    for (auto &e : pool)
        put(&e);
    unexp_limit = unexp_bound();
    if (uchunks.empty()) {
        // As many unexpected entries as receives, up front: an unexpected
        // message up to unexp_inline bytes (or a rendezvous description)
        // then never allocates.
        const std::size_t n = pool.size();
        auto *v = new (std::nothrow) unexp_msg[n];
        if (!v)
            return -FI_ENOMEM;
        try {
            uchunks.push_back(v);
        } catch (...) {
            delete[] v;
            return -FI_ENOMEM;
        }
        add_entries(*this, v, n);
    }
    // The first chunk of held records too: the first receive that a fetch
    // completes (a rendezvous) then neither allocates nor faults its pages in.
    if (hchunks.empty() && !held_grow())
        return -FI_ENOMEM;
    return 0;
}

unexp_msg *rxq::unexp_get(std::size_t n, std::size_t kept)
{
    // What it will hold: the entry, its payload's buffer above the inline
    // bytes, and what the provider keeps for it. (Each term is bounded by a
    // message size; the bound's test cannot overflow.)
    std::size_t charge = sizeof(unexp_msg) + kept;
    if (n > unexp_inline)
        charge += n > class_bytes[unexp_classes - 1] ? n
                                                     : *std::lower_bound(class_bytes, class_bytes + unexp_classes, n);
    if (unexp_limit && (charge > unexp_limit || unexp_held > unexp_limit - charge)) [[unlikely]]
        return nullptr;
    unexp_msg *u = ufree;
    if (u) [[likely]]
        ufree = u->next;
    else if (!(u = grow_entries(*this)))
        return nullptr;
    u->next = nullptr;
    u->src = FI_ADDR_NOTAVAIL;
    u->tag = u->data = u->flags = 0;
    u->len = u->plen = n;
    u->rndv = false;
    u->claim = u->owner = nullptr;
    u->charge = charge;
    unexp_held += charge;
    if (n <= unexp_inline) [[likely]] {
        u->payload = u->inline_buf;
        u->cls = 0;
        return u;
    }
    for (std::size_t c = 0; c < unexp_classes; c++) {
        if (n > class_bytes[c])
            continue;
        void *b = bfree[c];
        if (b) [[likely]]
            bfree[c] = *static_cast<void **>(b);
        else if (!(b = std::malloc(class_bytes[c]))) // first time this class runs short
            break;
        u->payload = static_cast<std::uint8_t *>(b);
        u->cls = static_cast<std::uint8_t>(c + 1);
        return u;
    }
    // Larger than every class (or out of memory): a buffer of its own.
    u->payload = static_cast<std::uint8_t *>(std::malloc(n));
    u->cls = unexp_classes + 1;
    if (!u->payload) {
        unexp_held -= charge;
        u->next = ufree;
        ufree = u;
        return nullptr;
    }
    return u;
}

void rxq::unexp_put(unexp_msg *u)
{
    if (u->cls >= 1 && u->cls <= unexp_classes) {
        *reinterpret_cast<void **>(u->payload) = bfree[u->cls - 1];
        bfree[u->cls - 1] = u->payload;
    } else if (u->cls > unexp_classes) {
        std::free(u->payload);
    }
    u->payload = nullptr;
    unexp_held -= u->charge;
    u->charge = 0;
    u->next = ufree;
    ufree = u;
}

bool rxq::held_grow()
{
    constexpr std::size_t chunk = 64;
    auto *v = new (std::nothrow) held_rx[chunk];
    if (!v)
        return false;
    try {
        hchunks.push_back(v);
    } catch (...) {
        delete[] v;
        return false;
    }
    for (std::size_t i = chunk; i-- > 0;)
        held_put(&v[i]);
    return true;
}

held_rx *rxq::held_get()
{
    if (!hfree && !held_grow()) [[unlikely]]
        return nullptr;
    held_rx *h = hfree;
    hfree = h->next;
    *h = held_rx{};
    return h;
}

void rxq::held_put(held_rx *h)
{
    h->next = hfree;
    hfree = h;
}

void rxq::fetch_over(held_rx *h)
{
    for (held_rx **p = &fetching; *p; p = &(*p)->fnext)
        if (*p == h) {
            *p = h->fnext;
            h->fnext = nullptr;
            h->fetching = false;
            nfetching--;
            return;
        }
}

rxq::~rxq()
{
    clear();
    for (void *&b : bfree)
        while (b) {
            void *n = *static_cast<void **>(b);
            std::free(b);
            b = n;
        }
    for (unexp_msg *v : uchunks)
        delete[] v;
    for (held_rx *v : hchunks)
        delete[] v;
}

rx_entry *rxq::match(bool is_tagged, fi_addr_t src, std::uint64_t tag)
{
    fifo<rx_entry> &l = is_tagged ? tagged : msg;
    bool directed = is_tagged ? directed_tagged : directed_msg;
    rx_entry *prev = nullptr;
    for (rx_entry *e = l.head; e; prev = e, e = e->next) {
        if (!rx_matches(e, directed, src, tag, is_tagged))
            continue;
        if (!(e->flags & FI_MULTI_RECV))
            l.unlink(prev, e);
        return e;
    }
    return nullptr;
}

unexp_msg *rxq::match_unexp(bool is_tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t ignore, bool peek)
{
    fifo<unexp_msg> &l = is_tagged ? utagged : umsg;
    bool directed = is_tagged ? directed_tagged : directed_msg;
    unexp_msg *prev = nullptr;
    for (unexp_msg *u = l.head; u; prev = u, u = u->next) {
        if (u->claim)
            continue;
        if (directed && src != FI_ADDR_UNSPEC && src != u->src)
            continue;
        if (is_tagged && ((u->tag ^ tag) & ~ignore) != 0)
            continue;
        if (!peek)
            l.unlink(prev, u);
        return u;
    }
    return nullptr;
}

rx_entry *rxq::remove_ctx(void *context)
{
    for (fifo<rx_entry> *l : {&msg, &tagged}) {
        rx_entry *prev = nullptr;
        for (rx_entry *e = l->head; e; prev = e, e = e->next)
            if (e->context == context && e->pending == 0) { // a buffer being fetched into is not cancelled
                l->unlink(prev, e);
                return e;
            }
    }
    return nullptr;
}

void rxq::drop_owned(const void *owner)
{
    // Its held completions go with it (its fetches are dropped with it).
    held_rx *hprev = nullptr;
    for (held_rx *h = held.head; h;) {
        held_rx *next = h->next;
        if (h->reporter == owner) {
            if (h->fetching) {
                fetch_over(h);
            } else if (!(h->e->flags & FI_MULTI_RECV)) {
                put(h->e);
            } else if (--h->e->pending == 0 && h->e->released) {
                put(h->e);
            }
            held.unlink(hprev, h);
            held_put(h);
        } else {
            hprev = h;
        }
        h = next;
    }
    for (fifo<unexp_msg> *l : {&umsg, &utagged}) {
        unexp_msg *prev = nullptr;
        for (unexp_msg *u = l->head; u;) {
            unexp_msg *next = u->next;
            if (u->owner == owner) {
                l->unlink(prev, u);
                unexp_put(u);
            } else {
                prev = u;
            }
            u = next;
        }
    }
}

void rxq::clear()
{
    for (fifo<unexp_msg> *l : {&umsg, &utagged}) {
        while (unexp_msg *u = l->head) {
            l->unlink(nullptr, u);
            unexp_put(u);
        }
    }
    while (held_rx *h = held.head) {
        held.unlink(nullptr, h);
        held_put(h);
    }
    fetching = nullptr;
    nfetching = 0;
    msg = {};
    tagged = {};
    free = nullptr;
    nfree = 0;
    for (auto &e : pool)
        put(&e);
}

} // namespace shunt::fabric::util
