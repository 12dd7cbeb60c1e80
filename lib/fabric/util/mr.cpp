// Generic memory regions: registration, keys, bind/enable per MR mode,
// remote access checks.
#include <cstring>
#include <new>

#include "env/errors.h"
#include "fabric/util/cntr.h"
#include "fabric/util/mr.h"

namespace shunt::fabric::util {

namespace {

// Caller holds d->mr_lock.
void publish(mr_obj *m)
{
    m->enabled = true;
    m->mr.key = m->key;
}

int mr_close(fid *f)
{
    mr_obj *m = reinterpret_cast<mr_obj *>(f);
    domain_obj *d = m->domain;
    {
        guard g(d->mr_lock);
        d->mrs.erase(m->key);
    }
    if (d->hooks && d->hooks->mr_dereg)
        d->hooks->mr_dereg(d, m);
    if (m->cntr)
        m->cntr->refs.fetch_sub(1);
    d->refs.fetch_sub(1);
    delete m;
    return 0;
}

int mr_bind_op(fid *f, fid *b, std::uint64_t flags)
{
    mr_obj *m = reinterpret_cast<mr_obj *>(f);
    if (m->enabled && (m->domain->mr_mode & FI_MR_ENDPOINT))
        return -FI_EOPBADSTATE;
    if (b->fclass == FI_CLASS_EP) {
        if (!(m->domain->mr_mode & FI_MR_ENDPOINT))
            return -FI_EINVAL;
        if (flags)
            return -FI_EBADFLAGS;
        m->ep = ep_core_of(b);
        return 0;
    }
    if (b->fclass == FI_CLASS_CNTR) {
        if (flags & ~FI_REMOTE_WRITE || !flags)
            return -FI_EBADFLAGS;
        if (m->cntr)
            return -FI_EBUSY;
        m->cntr = reinterpret_cast<cntr_obj *>(b);
        m->cntr->refs.fetch_add(1);
        return 0;
    }
    return -FI_EINVAL;
}

int mr_control(fid *f, int cmd, void *)
{
    mr_obj *m = reinterpret_cast<mr_obj *>(f);
    if (cmd == FI_ENABLE) {
        if ((m->domain->mr_mode & FI_MR_ENDPOINT) && !m->ep)
            return -FI_EOPBADSTATE;
        guard g(m->domain->mr_lock);
        publish(m);
        return 0;
    }
    return -FI_ENOSYS;
}

constexpr ops_fid mr_fid_ops{.close = mr_close, .bind = mr_bind_op, .control = mr_control};

int regattr(fid *f, const mr_attr *attr, std::uint64_t flags, fid_mr **out)
{
    if (!attr || !out || (!attr->mr_iov && attr->iov_count))
        return -FI_EINVAL;
    domain_obj *d = reinterpret_cast<domain_obj *>(f);
    if (f->fclass != FI_CLASS_DOMAIN)
        return -FI_EINVAL;
    if (attr->iface != FI_HMEM_SYSTEM)
        return -FI_EOPNOTSUPP;
    if (attr->access & ~FI_MR_ACCESS_MASK)
        return -FI_EINVAL;
    if (flags & ~FI_RMA_EVENT)
        return -FI_EBADFLAGS;
    if (d->info && d->info->domain_attr && attr->iov_count > d->info->domain_attr->mr_iov_limit)
        return -FI_EINVAL;
    for (std::size_t i = 0; i < attr->iov_count; i++)
        if (!attr->mr_iov[i].iov_base && attr->mr_iov[i].iov_len)
            return -FI_EINVAL;
    auto *m = new (std::nothrow) mr_obj;
    if (!m)
        return -FI_ENOMEM;
    m->domain = d;
    m->iov.assign(attr->mr_iov, attr->mr_iov + attr->iov_count);
    m->access = attr->access ? attr->access : FI_MR_ACCESS_MASK;
    m->offset = attr->offset;
    m->flags = flags;
    m->mr.fid.fclass = FI_CLASS_MR;
    m->mr.fid.context = attr->context;
    m->mr.fid.ops = &mr_fid_ops;
    m->mr.mem_desc = m;
    m->mr.key = FI_KEY_NOTAVAIL;
    m->key = 0;
    if (d->hooks && d->hooks->mr_reg) {
        if (int rc = d->hooks->mr_reg(d, m); rc) {
            delete m;
            return rc;
        }
    }
    {
        guard g(d->mr_lock);
        if ((d->mr_mode & FI_MR_PROV_KEY) && m->key) {
            if (d->mrs.count(m->key)) {
                if (d->hooks && d->hooks->mr_dereg)
                    d->hooks->mr_dereg(d, m);
                delete m;
                return -FI_ENOKEY;
            }
        } else if (d->mr_mode & FI_MR_PROV_KEY) {
            while (d->mrs.count(d->next_key))
                d->next_key++;
            m->key = d->next_key++;
        } else {
            if (attr->requested_key == FI_KEY_NOTAVAIL || d->mrs.count(attr->requested_key)) {
                if (d->hooks && d->hooks->mr_dereg)
                    d->hooks->mr_dereg(d, m);
                delete m;
                return -FI_ENOKEY;
            }
            m->key = attr->requested_key;
        }
        d->mrs[m->key] = m;
        if (!(d->mr_mode & FI_MR_ENDPOINT))
            publish(m);
    }
    d->refs.fetch_add(1);
    *out = &m->mr;
    return 0;
}

int reg(fid *f, const void *buf, std::size_t len, std::uint64_t access, std::uint64_t offset,
        std::uint64_t requested_key, std::uint64_t flags, fid_mr **out, void *context)
{
    iovec v{const_cast<void *>(buf), len};
    mr_attr a;
    a.mr_iov = &v;
    a.iov_count = 1;
    a.access = access;
    a.offset = offset;
    a.requested_key = requested_key;
    a.context = context;
    return regattr(f, &a, flags, out);
}

int regv(fid *f, const iovec *iov, std::size_t count, std::uint64_t access, std::uint64_t offset,
         std::uint64_t requested_key, std::uint64_t flags, fid_mr **out, void *context)
{
    mr_attr a;
    a.mr_iov = iov;
    a.iov_count = count;
    a.access = access;
    a.offset = offset;
    a.requested_key = requested_key;
    a.context = context;
    return regattr(f, &a, flags, out);
}

} // namespace

const ops_mr mr_ops{.reg = reg, .regv = regv, .regattr = regattr};

int mr_verify(domain_obj *d, std::uint64_t key, std::uint64_t addr, std::size_t len, std::uint64_t access,
              void **ptr, mr_obj **out) noexcept
{
    guard g(d->mr_lock);
    auto it = d->mrs.find(key);
    if (it == d->mrs.end() || !it->second->enabled)
        return -FI_EKEYREJECTED;
    mr_obj *m = it->second;
    if ((m->access & access) != access)
        return -FI_EACCES;
    // FI_MR_VIRT_ADDR: addr is a virtual address inside one segment;
    // otherwise it is an offset from m->offset across the whole iov.
    if (d->mr_mode & FI_MR_VIRT_ADDR) {
        for (auto &v : m->iov) {
            auto base = reinterpret_cast<std::uint64_t>(v.iov_base);
            if (addr >= base && addr - base <= v.iov_len && len <= v.iov_len - (addr - base)) {
                *ptr = reinterpret_cast<void *>(addr);
                if (out)
                    *out = m;
                return 0;
            }
        }
        return -FI_EINVAL;
    }
    if (addr < m->offset)
        return -FI_EINVAL;
    std::uint64_t off = addr - m->offset;
    for (auto &v : m->iov) {
        if (off < v.iov_len || (off == v.iov_len && len == 0)) {
            if (len > v.iov_len - off)
                return -FI_EINVAL; // spans segments: not supported by a single pointer
            *ptr = static_cast<std::uint8_t *>(v.iov_base) + off;
            if (out)
                *out = m;
            return 0;
        }
        off -= v.iov_len;
    }
    return -FI_EINVAL;
}

void mr_unbind_ep(domain_obj *d, ep_core *ep)
{
    guard g(d->mr_lock);
    for (auto &kv : d->mrs)
        if (kv.second->ep == ep) {
            kv.second->ep = nullptr;
            kv.second->enabled = false;
            kv.second->mr.key = FI_KEY_NOTAVAIL;
        }
}

} // namespace shunt::fabric::util
