// Info objects: allocation, deep copy, release and text form.
#include "fabric/info.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace shunt::fabric {

namespace {

char *dupstr(const char *s, bool &ok)
{
    if (!s)
        return nullptr;
    char *d = ::strdup(s);
    if (!d)
        ok = false;
    return d;
}

void *dupmem(const void *p, std::size_t len, bool &ok)
{
    if (!p || len == 0)
        return nullptr;
    void *d = std::malloc(len);
    if (!d) {
        ok = false;
        return nullptr;
    }
    std::memcpy(d, p, len);
    return d;
}

template <class T>
T *dupattr(const T *a, bool &ok)
{
    T *d = new (std::nothrow) T{};
    if (!d) {
        ok = false;
        return nullptr;
    }
    if (a)
        *d = *a;
    return d;
}

void free_one(info *i)
{
    if (!i)
        return;
    std::free(i->src_addr);
    std::free(i->dest_addr);
    delete i->tx_attr;
    delete i->rx_attr;
    if (i->ep_attr) {
        std::free(i->ep_attr->auth_key);
        delete i->ep_attr;
    }
    if (i->domain_attr) {
        std::free(i->domain_attr->name);
        std::free(i->domain_attr->auth_key);
        delete i->domain_attr;
    }
    if (i->fabric_attr) {
        std::free(i->fabric_attr->name);
        std::free(i->fabric_attr->prov_name);
        delete i->fabric_attr;
    }
    delete i;
}

} // namespace

info *allocinfo() { return dupinfo(nullptr); }

info *dupinfo(const info *in)
{
    bool ok = true;
    info *d = new (std::nothrow) info{};
    if (!d)
        return nullptr;
    if (in) {
        *d = *in;
        d->next = nullptr;
        d->src_addr = d->dest_addr = nullptr;
        d->tx_attr = nullptr;
        d->rx_attr = nullptr;
        d->ep_attr = nullptr;
        d->domain_attr = nullptr;
        d->fabric_attr = nullptr;
        d->src_addr = dupmem(in->src_addr, in->src_addrlen, ok);
        d->dest_addr = dupmem(in->dest_addr, in->dest_addrlen, ok);
        if (!d->src_addr)
            d->src_addrlen = 0;
        if (!d->dest_addr)
            d->dest_addrlen = 0;
    }
    d->tx_attr = dupattr(in ? in->tx_attr : nullptr, ok);
    d->rx_attr = dupattr(in ? in->rx_attr : nullptr, ok);
    d->ep_attr = dupattr(in ? in->ep_attr : nullptr, ok);
    if (d->ep_attr) {
        d->ep_attr->auth_key = static_cast<std::uint8_t *>(
            dupmem(d->ep_attr->auth_key, d->ep_attr->auth_key_size, ok));
        if (!d->ep_attr->auth_key)
            d->ep_attr->auth_key_size = 0;
    }
    d->domain_attr = dupattr(in ? in->domain_attr : nullptr, ok);
    if (d->domain_attr) {
        d->domain_attr->name = dupstr(d->domain_attr->name, ok);
        d->domain_attr->auth_key = static_cast<std::uint8_t *>(
            dupmem(d->domain_attr->auth_key, d->domain_attr->auth_key_size, ok));
        if (!d->domain_attr->auth_key)
            d->domain_attr->auth_key_size = 0;
    }
    d->fabric_attr = dupattr(in ? in->fabric_attr : nullptr, ok);
    if (d->fabric_attr) {
        d->fabric_attr->name = dupstr(d->fabric_attr->name, ok);
        d->fabric_attr->prov_name = dupstr(d->fabric_attr->prov_name, ok);
    }
    if (!ok) {
        free_one(d);
        return nullptr;
    }
    return d;
}

void freeinfo(info *in)
{
    while (in) {
        info *next = in->next;
        free_one(in);
        in = next;
    }
}

namespace {

struct out_buf {
    char *buf;
    std::size_t len;
    std::size_t used = 0;
    void add(const char *fmt, ...) __attribute__((format(printf, 2, 3)))
    {
        va_list ap;
        va_start(ap, fmt);
        char *p = used < len ? buf + used : nullptr;
        int n = std::vsnprintf(p, p ? len - used : 0, fmt, ap);
        va_end(ap);
        if (n > 0)
            used += std::size_t(n);
    }
};

const char *ep_type_name(int t)
{
    static const char *names[] = {"FI_EP_UNSPEC", "FI_EP_MSG", "FI_EP_DGRAM", "FI_EP_RDM", "FI_EP_SOCK_STREAM",
                                  "FI_EP_SOCK_DGRAM"};
    return t >= 0 && t < 6 ? names[t] : "?";
}

void caps_str(out_buf &o, std::uint64_t caps)
{
    static const struct {
        std::uint64_t bit;
        const char *name;
    } names[] = {
        {FI_MSG, "FI_MSG"}, {FI_RMA, "FI_RMA"}, {FI_TAGGED, "FI_TAGGED"}, {FI_ATOMIC, "FI_ATOMIC"},
        {FI_MULTICAST, "FI_MULTICAST"}, {FI_COLLECTIVE, "FI_COLLECTIVE"}, {FI_READ, "FI_READ"},
        {FI_WRITE, "FI_WRITE"}, {FI_RECV, "FI_RECV"}, {FI_SEND, "FI_SEND"}, {FI_REMOTE_READ, "FI_REMOTE_READ"},
        {FI_REMOTE_WRITE, "FI_REMOTE_WRITE"}, {FI_MULTI_RECV, "FI_MULTI_RECV"},
        {FI_REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"}, {FI_TRIGGER, "FI_TRIGGER"}, {FI_FENCE, "FI_FENCE"},
        {FI_HMEM, "FI_HMEM"}, {FI_RMA_EVENT, "FI_RMA_EVENT"}, {FI_SOURCE, "FI_SOURCE"},
        {FI_SOURCE_ERR, "FI_SOURCE_ERR"}, {FI_NAMED_RX_CTX, "FI_NAMED_RX_CTX"},
        {FI_DIRECTED_RECV, "FI_DIRECTED_RECV"}, {FI_LOCAL_COMM, "FI_LOCAL_COMM"},
        {FI_REMOTE_COMM, "FI_REMOTE_COMM"}, {FI_SHARED_AV, "FI_SHARED_AV"}, {FI_AV_USER_ID, "FI_AV_USER_ID"},
    };
    bool first = true;
    for (auto &n : names)
        if (caps & n.bit) {
            o.add("%s%s", first ? "" : " | ", n.name);
            first = false;
        }
    if (first)
        o.add("0");
}

const char *threading_name(int t)
{
    static const char *names[] = {"FI_THREAD_UNSPEC", "FI_THREAD_SAFE", "FI_THREAD_FID", "FI_THREAD_DOMAIN",
                                  "FI_THREAD_COMPLETION", "FI_THREAD_ENDPOINT"};
    return t >= 0 && t < 6 ? names[t] : "?";
}

const char *progress_name(int p)
{
    static const char *names[] = {"FI_PROGRESS_UNSPEC", "FI_PROGRESS_AUTO", "FI_PROGRESS_MANUAL",
                                  "FI_PROGRESS_CONTROL_UNIFIED"};
    return p >= 0 && p < 4 ? names[p] : "?";
}

} // namespace

std::size_t info_tostr(const info *in, char *buf, std::size_t len)
{
    out_buf o{buf, len};
    if (len)
        buf[0] = 0;
    if (!in) {
        o.add("(null)");
        return o.used;
    }
    o.add("provider: %s\n", in->fabric_attr && in->fabric_attr->prov_name ? in->fabric_attr->prov_name : "?");
    o.add("    fabric: %s\n", in->fabric_attr && in->fabric_attr->name ? in->fabric_attr->name : "?");
    o.add("    domain: %s\n", in->domain_attr && in->domain_attr->name ? in->domain_attr->name : "?");
    if (in->fabric_attr)
        o.add("    version: %u.%u\n", FI_MAJOR(in->fabric_attr->prov_version),
              FI_MINOR(in->fabric_attr->prov_version));
    o.add("    type: %s\n", in->ep_attr ? ep_type_name(in->ep_attr->type) : "?");
    o.add("    caps: ");
    caps_str(o, in->caps);
    o.add("\n    mode: 0x%llx\n    addr_format: %u\n", (unsigned long long)in->mode, in->addr_format);
    if (in->domain_attr)
        o.add("    threading: %s\n    data_progress: %s\n    control_progress: %s\n    mr_mode: 0x%x\n"
              "    av_type: %d\n    cq_data_size: %zu\n    mr_key_size: %zu\n",
              threading_name(in->domain_attr->threading), progress_name(in->domain_attr->data_progress),
              progress_name(in->domain_attr->control_progress), in->domain_attr->mr_mode, in->domain_attr->av_type,
              in->domain_attr->cq_data_size, in->domain_attr->mr_key_size);
    if (in->ep_attr)
        o.add("    max_msg_size: %zu\n    mem_tag_format: 0x%llx\n    tx_ctx_cnt: %zu\n    rx_ctx_cnt: %zu\n",
              in->ep_attr->max_msg_size, (unsigned long long)in->ep_attr->mem_tag_format, in->ep_attr->tx_ctx_cnt,
              in->ep_attr->rx_ctx_cnt);
    if (in->tx_attr)
        o.add("    tx: inject_size %zu, size %zu, iov_limit %zu, rma_iov_limit %zu, msg_order 0x%llx, op_flags "
              "0x%llx\n",
              in->tx_attr->inject_size, in->tx_attr->size, in->tx_attr->iov_limit, in->tx_attr->rma_iov_limit,
              (unsigned long long)in->tx_attr->msg_order, (unsigned long long)in->tx_attr->op_flags);
    if (in->rx_attr)
        o.add("    rx: size %zu, iov_limit %zu, msg_order 0x%llx, op_flags 0x%llx\n", in->rx_attr->size,
              in->rx_attr->iov_limit, (unsigned long long)in->rx_attr->msg_order,
              (unsigned long long)in->rx_attr->op_flags);
    return o.used;
}

} // namespace shunt::fabric
