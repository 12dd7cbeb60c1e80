// Generic address vector.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "env/errors.h"
#include "fabric/util/av.h"

namespace shunt::fabric::util {

namespace {

// Caller holds av->mu. @return 0 and the entry, or -FI_ENOSPC / -FI_ENOMEM.
int alloc_entry(av_obj *av, av_entry *&out)
{
    std::size_t i = av->count.load(std::memory_order_relaxed);
    std::size_t c = i >> av_chunk_bits;
    if (c >= av_max_chunks)
        return -FI_ENOSPC;
    if (!av->chunks[c]) {
        av->chunks[c] = new (std::nothrow) av_entry[av_chunk];
        if (!av->chunks[c])
            return -FI_ENOMEM;
    }
    out = &av->chunks[c][i & (av_chunk - 1)];
    out->index = i;
    return 0;
}

// Text of a binary address (length needed with the NUL), or -FI_ENOSYS
// when the provider has no text form.
long addr_text(av_obj *av, const void *addr, char *buf, std::size_t len)
{
    const domain_hooks *h = av->domain->hooks;
    if (SHUNT_HOOK(h, addr_to_text))
        return long(h->addr_to_text(av->domain, addr, buf, len));
    if (h->addr_to_str)
        return long(h->addr_to_str(addr, buf, len));
    return -FI_ENOSYS;
}

// The binary address to store for @p addr: checked, and resolved by the
// provider when it names something else than an endpoint (a service).
int resolve_one(av_obj *av, const void *addr, std::uint8_t *out)
{
    domain_obj *d = av->domain;
    if (SHUNT_HOOK(d->hooks, addr_resolve))
        return d->hooks->addr_resolve(d, addr, out);
    if (d->hooks->addr_check && d->hooks->addr_check(addr) != 0)
        return -FI_EINVAL;
    std::memcpy(out, addr, av->addrlen);
    return 0;
}

int insert_one(av_obj *av, const void *given, fi_addr_t &out)
{
    domain_obj *d = av->domain;
    std::uint8_t addr[av_addr_max];
    if (int rc = resolve_one(av, given, addr); rc)
        return rc;
    av_entry *e = nullptr;
    {
        std::lock_guard g(av->mu);
        if (int rc = alloc_entry(av, e); rc)
            return rc;
        std::memcpy(e->addr, addr, av->addrlen);
        e->prov = nullptr;
        if (d->hooks->av_insert)
            if (int rc = d->hooks->av_insert(d, e); rc)
                return rc;
        e->used.store(true, std::memory_order_release);
        // Publish the slot: av_get's acquire load of count sees the entry.
        av->count.store(e->index + 1, std::memory_order_release);
        out = av_addr_of(av, e);
    }
    if (SHUNT_HOOK(d->hooks, av_inserted))
        d->hooks->av_inserted(d, av, e);
    return 0;
}

int av_insert_op(fid_av *f, const void *addr, std::size_t count, fi_addr_t *fi_addr, std::uint64_t flags,
                 void *context)
{
    av_obj *av = to_av(f);
    if (flags & ~(FI_MORE | FI_SYNC_ERR | FI_AV_USER_ID))
        return -FI_EBADFLAGS;
    if (flags & FI_AV_USER_ID)
        return -FI_EOPNOTSUPP;
    if (av->type == FI_AV_MAP && !fi_addr && count)
        return -FI_EINVAL;
    if (av->str && !SHUNT_HOOK(av->domain->hooks, addr_from_str))
        return -FI_EOPNOTSUPP;
    int *errs = (flags & FI_SYNC_ERR) ? static_cast<int *>(context) : nullptr;
    int ok = 0;
    for (std::size_t i = 0; i < count; i++) {
        fi_addr_t a = FI_ADDR_NOTAVAIL;
        int rc;
        if (av->str) {
            // fi_av(3): an FI_ADDR_STR AV takes an array of strings
            const char *text = static_cast<const char *const *>(addr)[i];
            std::uint8_t bin[av_addr_max] = {};
            rc = text ? av->domain->hooks->addr_from_str(av->domain, text, bin) : -FI_EINVAL;
            if (!rc)
                rc = insert_one(av, bin, a);
        } else {
            rc = insert_one(av, static_cast<const std::uint8_t *>(addr) + i * av->addrlen, a);
        }
        if (fi_addr)
            fi_addr[i] = rc ? FI_ADDR_NOTAVAIL : a;
        if (errs)
            errs[i] = rc ? -rc : 0;
        if (!rc)
            ok++;
    }
    return ok;
}

int av_insertsvc_op(fid_av *f, const char *node, const char *service, fi_addr_t *fi_addr, std::uint64_t flags,
                    void *context)
{
    av_obj *av = to_av(f);
    domain_obj *d = av->domain;
    if (flags & ~(FI_MORE | FI_SYNC_ERR | FI_AV_USER_ID))
        return -FI_EBADFLAGS;
    if (flags & FI_AV_USER_ID)
        return -FI_EOPNOTSUPP;
    if (av->type == FI_AV_MAP && !fi_addr)
        return -FI_EINVAL;
    std::uint8_t addr[av_addr_max] = {};
    int rc;
    if (SHUNT_HOOK(d->hooks, addr_from_names))
        rc = d->hooks->addr_from_names(d, node, service, addr);
    else if (d->hooks->addr_from_svc)
        rc = d->hooks->addr_from_svc(node, service, addr);
    else
        return -FI_ENOSYS;
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    if (!rc)
        rc = insert_one(av, addr, a);
    if (fi_addr)
        *fi_addr = rc ? FI_ADDR_NOTAVAIL : a;
    if ((flags & FI_SYNC_ERR) && context)
        *static_cast<int *>(context) = -rc;
    if (rc == -FI_EINVAL)
        return rc;
    return rc ? 0 : 1;
}

int av_insertsym_op(fid_av *f, const char *node, std::size_t nodecnt, const char *service, std::size_t svccnt,
                    fi_addr_t *fi_addr, std::uint64_t flags, void *context)
{
    // node: a name ending in a number that is incremented nodecnt times
    // ("host01" -> host01, host02...); service: a number incremented svccnt times.
    std::string n = node;
    std::size_t digits = 0;
    while (digits < n.size() && std::isdigit(static_cast<unsigned char>(n[n.size() - 1 - digits])))
        digits++;
    if (nodecnt > 1 && digits == 0)
        return -FI_EINVAL;
    std::string prefix = n.substr(0, n.size() - digits);
    unsigned long base = digits ? std::strtoul(n.c_str() + prefix.size(), nullptr, 10) : 0;
    char *end = nullptr;
    unsigned long svc = std::strtoul(service, &end, 10);
    if (!end || *end)
        return -FI_EINVAL;
    int total = 0;
    std::size_t k = 0;
    for (std::size_t i = 0; i < nodecnt; i++) {
        std::string name = n;
        if (digits) {
            char num[32];
            std::snprintf(num, sizeof num, "%0*lu", int(digits), base + i);
            name = prefix + num;
        }
        for (std::size_t j = 0; j < svccnt; j++, k++) {
            std::string s = std::to_string(svc + j);
            int rc = av_insertsvc_op(f, name.c_str(), s.c_str(), fi_addr ? fi_addr + k : nullptr, flags, context);
            if (rc < 0)
                return total ? total : rc;
            total += rc;
        }
    }
    return total;
}

int av_remove_op(fid_av *f, fi_addr_t *fi_addr, std::size_t count, std::uint64_t flags)
{
    av_obj *av = to_av(f);
    if (flags)
        return -FI_EBADFLAGS;
    int rc = 0;
    std::lock_guard g(av->mu);
    for (std::size_t i = 0; i < count; i++) {
        av_entry *e = av_get(av, fi_addr[i]);
        if (!e) {
            rc = -FI_EINVAL;
            continue;
        }
        e->used.store(false, std::memory_order_release);
        if (av->domain->hooks->av_remove)
            av->domain->hooks->av_remove(av->domain, e);
        e->prov = nullptr;
    }
    return rc;
}

int av_lookup_op(fid_av *f, fi_addr_t a, void *addr, std::size_t *addrlen)
{
    av_obj *av = to_av(f);
    av_entry *e = av_get(av, a);
    if (!e)
        return -FI_EINVAL;
    if (av->str) {
        // the text form, truncated (and NUL terminated) when it does not fit
        long n = addr_text(av, e->addr, static_cast<char *>(addr), *addrlen);
        if (n < 0)
            return int(n);
        *addrlen = std::size_t(n);
        return 0;
    }
    std::size_t n = std::min(*addrlen, av->addrlen);
    if (n)
        std::memcpy(addr, e->addr, n);
    *addrlen = av->addrlen;
    return 0;
}

const char *av_straddr_op(fid_av *f, const void *addr, char *buf, std::size_t *len)
{
    av_obj *av = to_av(f);
    if (av->str) {
        // fi_av_straddr(3): the address is in the AV's format, a string
        const char *text = static_cast<const char *>(addr);
        std::size_t n = ::strnlen(text, 4096);
        if (*len) {
            std::size_t c = std::min(n, *len - 1);
            std::memcpy(buf, text, c);
            buf[c] = 0;
        }
        *len = n + 1;
        return buf;
    }
    if (long n = addr_text(av, addr, buf, *len); n >= 0) {
        *len = std::size_t(n);
        return buf;
    }
    // Fallback: hex bytes.
    std::string s = "0x";
    for (std::size_t i = 0; i < av->addrlen; i++) {
        char h[3];
        std::snprintf(h, sizeof h, "%02x", static_cast<const std::uint8_t *>(addr)[i]);
        s += h;
    }
    if (*len) {
        std::strncpy(buf, s.c_str(), *len - 1);
        buf[*len - 1] = 0;
    }
    *len = s.size() + 1;
    return buf;
}

int av_close(fid *f)
{
    av_obj *av = reinterpret_cast<av_obj *>(f);
    if (av->refs.load())
        return -FI_EBUSY;
    std::size_t n = av->count.load();
    for (std::size_t i = 0; i < n; i++) {
        av_entry *e = &av->chunks[i >> av_chunk_bits][i & (av_chunk - 1)];
        if (e->used.load() && av->domain->hooks->av_remove)
            av->domain->hooks->av_remove(av->domain, e);
    }
    for (auto *c : av->chunks)
        delete[] c;
    av->domain->refs.fetch_sub(1);
    delete av;
    return 0;
}

constexpr ops_fid av_fid_ops{.close = av_close};
constexpr ops_av av_ops{.insert = av_insert_op,
                        .insertsvc = av_insertsvc_op,
                        .insertsym = av_insertsym_op,
                        .remove = av_remove_op,
                        .lookup = av_lookup_op,
                        .straddr = av_straddr_op};

} // namespace

fi_addr_t av_reverse(av_obj *av, const void *addr) noexcept
{
    std::size_t n = av->count.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; i++) {
        av_entry *e = &av->chunks[i >> av_chunk_bits][i & (av_chunk - 1)];
        if (e->used.load(std::memory_order_acquire) && std::memcmp(e->addr, addr, av->addrlen) == 0)
            return av_addr_of(av, e);
    }
    return FI_ADDR_NOTAVAIL;
}

int av_open(fid_domain *domain, av_attr *attr, fid_av **out, void *context)
{
    domain_obj *d = to_domain(domain);
    if (!attr || !out)
        return -FI_EINVAL;
    if (attr->name)
        return -FI_ENOSYS;
    if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP && attr->type != FI_AV_TABLE)
        return -FI_EINVAL;
    if (attr->rx_ctx_bits < 0 || attr->rx_ctx_bits > 16)
        return -FI_EINVAL;
    if (attr->flags & ~(FI_EVENT | FI_READ | FI_SYMMETRIC))
        return -FI_EBADFLAGS;
    if (attr->flags & (FI_EVENT | FI_READ))
        return -FI_EOPNOTSUPP;
    if (!d->hooks || d->hooks->addrlen == 0 || d->hooks->addrlen > av_addr_max)
        return -FI_EOPNOTSUPP;
    auto *av = new (std::nothrow) av_obj;
    if (!av)
        return -FI_ENOMEM;
    av->domain = d;
    av->type = attr->type == FI_AV_UNSPEC ? d->avt : attr->type;
    av->rx_ctx_bits = attr->rx_ctx_bits;
    av->rx_mask = attr->rx_ctx_bits ? (~0ULL >> attr->rx_ctx_bits) : ~0ULL;
    av->addrlen = d->hooks->addrlen;
    av->str = d->info && d->info->addr_format == FI_ADDR_STR;
    av->av.fid.fclass = FI_CLASS_AV;
    av->av.fid.context = context;
    av->av.fid.ops = &av_fid_ops;
    av->av.ops = &av_ops;
    d->refs.fetch_add(1);
    *out = &av->av;
    return 0;
}

} // namespace shunt::fabric::util
