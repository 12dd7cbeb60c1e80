// Receive matching structures.
#include <cstdlib>

#include "env/errors.h"
#include "fabric/util/rxq.h"

namespace shunt::fabric::util {

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
    return 0;
}

rxq::~rxq() { clear(); }

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
            if (e->context == context) {
                l->unlink(prev, e);
                return e;
            }
    }
    return nullptr;
}

void rxq::drop_owned(const void *owner)
{
    for (fifo<unexp_msg> *l : {&umsg, &utagged}) {
        unexp_msg *prev = nullptr;
        for (unexp_msg *u = l->head; u;) {
            unexp_msg *next = u->next;
            if (u->owner == owner) {
                l->unlink(prev, u);
                std::free(u->payload);
                delete u;
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
            std::free(u->payload);
            delete u;
        }
    }
    msg = {};
    tagged = {};
    free = nullptr;
    nfree = 0;
    for (auto &e : pool)
        put(&e);
}

} // namespace shunt::fabric::util
