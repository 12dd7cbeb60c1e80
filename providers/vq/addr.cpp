// vq provider: endpoint and service addresses -- resolution of node/service
// names, text form (FI_ADDR_STR), getinfo's source/destination addresses,
// and the domain's AV hooks.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>

#include "addr.h"
#include "env/errors.h"

namespace shunt::prov::vqprov {

namespace {

constexpr std::size_t name_max = sizeof(ep_addr::name);

// Service names: what a file name and an ep_addr can carry.
bool service_ok(const char *s)
{
    std::size_t n = 0;
    for (; s[n]; n++) {
        unsigned char c = static_cast<unsigned char>(s[n]);
        if (n >= service_max || !(std::isalnum(c) || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return n > 0;
}

int make_service(const std::string &host, const char *service, ep_addr &out)
{
    std::string name = host + ":" + (service ? service : "");
    if (name.size() > name_max)
        return -FI_EINVAL;
    ep_addr a{};
    a.qpn = 0;
    a.len = std::uint8_t(name.size());
    std::memcpy(a.name, name.data(), name.size());
    out = a;
    return 0;
}

// "<name>/<qpn>": an endpoint address in text (name as text or 0x + hex).
int parse_endpoint(const std::string &s, ep_addr &out)
{
    auto slash = s.rfind('/');
    if (slash == std::string::npos || slash == 0)
        return -FI_EINVAL;
    std::string name = s.substr(0, slash), qpn = s.substr(slash + 1);
    char *end = nullptr;
    unsigned long q = std::strtoul(qpn.c_str(), &end, 10);
    if (qpn.empty() || !end || *end || q == 0 || q > 0xffffffffUL)
        return -FI_EINVAL;
    std::string bytes;
    if (name.size() > 2 && name[0] == '0' && name[1] == 'x') {
        if (name.size() % 2)
            return -FI_EINVAL;
        for (std::size_t i = 2; i < name.size(); i += 2) {
            char hex[3] = {name[i], name[i + 1], 0};
            char *e = nullptr;
            long v = std::strtol(hex, &e, 16);
            if (!e || *e)
                return -FI_EINVAL;
            bytes.push_back(char(v));
        }
    } else {
        bytes = name;
    }
    if (bytes.empty() || bytes.size() > name_max)
        return -FI_EINVAL;
    ep_addr a{};
    a.qpn = std::uint32_t(q);
    a.len = std::uint8_t(bytes.size());
    std::memcpy(a.name, bytes.data(), bytes.size());
    out = a;
    return 0;
}

bool printable(const ep_addr &a)
{
    for (std::size_t i = 0; i < a.len; i++) {
        unsigned char c = static_cast<unsigned char>(a.name[i]);
        if (!std::isgraph(c) || c == '/' || c == ':')
            return false;
    }
    return a.len > 0;
}

const addr_resolver &dom_resolver(util::domain_obj *d) { return resolver_for(dom_of(d)->lim.host_local); }

int set_addr(const addr_resolver &r, std::uint32_t fmt, const ep_addr &a, void *&buf, std::size_t &len)
{
    void *b = nullptr;
    std::size_t n = 0;
    if (int rc = addr_encode(r, fmt, a, b, n); rc)
        return rc;
    std::free(buf);
    buf = b;
    len = n;
    return 0;
}

} // namespace

int resolve_names(const addr_resolver &r, const char *node, const char *service, std::uint64_t flags, bool local,
                  ep_addr &out)
{
    if (node && !service && std::strstr(node, "://"))
        return addr_parse(r, node, out); // an FI_ADDR_STR address as node
    if (service && !service_ok(service))
        return -FI_EINVAL;
    std::string host;
    if (int rc = r.host(node, flags, local, host); rc)
        return rc;
    return make_service(host, service, out);
}

int resolve_endpoint(const addr_resolver &r, const ep_addr &a, ep_addr &out)
{
    if (a.len > name_max)
        return -FI_EINVAL;
    if (!is_service(a)) {
        if (a.len == 0)
            return -FI_EINVAL;
        out = a;
        return 0;
    }
    const char *colon = static_cast<const char *>(std::memchr(a.name, ':', a.len));
    if (!colon || colon == a.name + a.len - 1)
        return -FI_EINVAL; // a host's wildcard names no endpoint
    return r.lookup(a, out);
}

std::string addr_text(const addr_resolver &r, const ep_addr &a)
{
    std::string s = std::string(r.scheme) + "://";
    std::size_t len = a.len <= name_max ? a.len : name_max;
    if (is_service(a)) {
        std::string name(a.name, len);
        auto colon = name.find(':');
        std::string host = colon == std::string::npos ? name : name.substr(0, colon);
        std::string svc = colon == std::string::npos ? "" : name.substr(colon + 1);
        return s + r.host_text(host) + ":" + svc;
    }
    if (printable(a)) {
        s.append(a.name, len);
    } else {
        s += "0x";
        for (std::size_t i = 0; i < len; i++) {
            char h[3];
            std::snprintf(h, sizeof h, "%02x", static_cast<unsigned char>(a.name[i]));
            s += h;
        }
    }
    return s + "/" + std::to_string(a.qpn);
}

int addr_parse(const addr_resolver &r, const char *text, ep_addr &out)
{
    if (!text)
        return -FI_EINVAL;
    std::string s = text;
    std::string prefix = std::string(r.scheme) + "://";
    if (s.rfind(prefix, 0) == 0)
        s = s.substr(prefix.size());
    else if (s.find("://") != std::string::npos)
        return -FI_EINVAL; // another provider's format
    if (s.find('/') != std::string::npos)
        return parse_endpoint(s, out);
    auto colon = s.rfind(':');
    if (colon == std::string::npos)
        return -FI_EINVAL;
    std::string node = s.substr(0, colon), svc = s.substr(colon + 1);
    if (!svc.empty() && !service_ok(svc.c_str()))
        return -FI_EINVAL;
    std::string host;
    if (int rc = r.host(node.empty() ? nullptr : node.c_str(), 0, false, host); rc)
        return rc;
    return make_service(host, svc.c_str(), out);
}

int addr_encode(const addr_resolver &r, std::uint32_t fmt, const ep_addr &a, void *&buf, std::size_t &len)
{
    if (fmt == FI_ADDR_STR) {
        std::string t = addr_text(r, a);
        char *p = ::strdup(t.c_str());
        if (!p)
            return -FI_ENOMEM;
        buf = p;
        len = t.size() + 1;
        return 0;
    }
    void *p = std::malloc(sizeof a);
    if (!p)
        return -FI_ENOMEM;
    std::memcpy(p, &a, sizeof a);
    buf = p;
    len = sizeof a;
    return 0;
}

int addr_decode(const addr_resolver &r, std::uint32_t fmt, const void *buf, std::size_t len, ep_addr &out)
{
    if (!buf)
        return -FI_EINVAL;
    if (fmt == FI_ADDR_STR) {
        const char *t = static_cast<const char *>(buf);
        if (!len || !std::memchr(t, 0, len))
            return -FI_EINVAL;
        return addr_parse(r, t, out);
    }
    if (len < sizeof(ep_addr))
        return -FI_EINVAL;
    std::memcpy(&out, buf, sizeof out);
    return out.len <= name_max ? 0 : -FI_EINVAL;
}

int addr_out(const addr_resolver &r, std::uint32_t fmt, const ep_addr &a, void *addr, std::size_t *len)
{
    if (fmt == FI_ADDR_STR) {
        std::string t = addr_text(r, a);
        if (*len < t.size() + 1) {
            *len = t.size() + 1;
            return -FI_ETOOSMALL;
        }
        std::memcpy(addr, t.c_str(), t.size() + 1);
        *len = t.size() + 1;
        return 0;
    }
    if (*len < sizeof(ep_addr)) {
        *len = sizeof(ep_addr);
        return -FI_ETOOSMALL;
    }
    std::memcpy(addr, &a, sizeof a);
    *len = sizeof(ep_addr);
    return 0;
}

int resolve_info_addrs(const addr_resolver &r, const char *node, const char *service, std::uint64_t flags,
                       info_addrs &out)
{
    info_addrs a;
    int rc = 0;
    if (flags & FI_SOURCE) {
        rc = resolve_names(r, node, service, flags, true, a.src);
        a.src_named = true;
    } else if (node) {
        rc = resolve_names(r, node, service, flags, false, a.dest);
        a.dest_named = true;
    } else if (service) {
        // a service alone: where a server listens (fi_getinfo(3), "passive")
        rc = resolve_names(r, nullptr, service, flags, true, a.src);
        a.src_named = true;
    }
    if (!rc && !a.src_named)
        rc = resolve_names(r, nullptr, nullptr, 0, true, a.src); // the wildcard
    if (rc)
        return rc;
    out = a;
    return 0;
}

int fill_info_addrs(const addr_resolver &r, const info_addrs &a, info *ans)
{
    const std::uint32_t fmt = ans->addr_format;
    ep_addr x{};
    // Addresses the hints carried (copied into the answer) must be ours.
    if (ans->src_addr && addr_decode(r, fmt, ans->src_addr, ans->src_addrlen, x))
        return -FI_EINVAL;
    if (ans->dest_addr && addr_decode(r, fmt, ans->dest_addr, ans->dest_addrlen, x))
        return -FI_EINVAL;
    if (a.dest_named)
        if (int rc = set_addr(r, fmt, a.dest, ans->dest_addr, ans->dest_addrlen); rc)
            return rc;
    if (a.src_named || !ans->src_addr)
        if (int rc = set_addr(r, fmt, a.src, ans->src_addr, ans->src_addrlen); rc)
            return rc;
    return 0;
}

int bind_source(const addr_resolver &r, const info *in, const ep_addr &ep, service_binding **out)
{
    *out = nullptr;
    if (!in || !in->src_addr)
        return 0;
    // An endpoint opened for a connection request takes no source address of
    // its own (it is the accepting side of the passive endpoint's service),
    // nor one that takes over a passive endpoint (its binding moves along).
    if (in->handle && (in->handle->fclass == FI_CLASS_CONNREQ || in->handle->fclass == FI_CLASS_PEP))
        return 0;
    ep_addr src{};
    if (addr_decode(r, in->addr_format, in->src_addr, in->src_addrlen, src))
        return -FI_EINVAL;
    if (!is_service(src))
        return std::memcmp(&src, &ep, sizeof src) == 0 ? 0 : -FI_EADDRNOTAVAIL;
    const char *colon = static_cast<const char *>(std::memchr(src.name, ':', src.len));
    if (!colon || colon == src.name + src.len - 1)
        return 0; // the wildcard: any address
    return r.bind(src, ep, out);
}

int ep_getname(fid *f, void *addr, std::size_t *len)
{
    util::ep_core *c = util::ep_core_of(f);
    prov_ep *e = ep_of(c);
    return addr_out(resolver_for(e->dom->lim.host_local), c->info->addr_format, e->addr, addr, len);
}

// ---- AV hooks ----

int addr_check(const void *a)
{
    ep_addr x;
    std::memcpy(&x, a, sizeof x);
    if (x.len == 0 || x.len > sizeof x.name || x.qpn == 0)
        return -FI_EINVAL;
    return 0;
}

std::size_t addr_to_text_hook(util::domain_obj *d, const void *a, char *buf, std::size_t len)
{
    ep_addr x;
    std::memcpy(&x, a, sizeof x);
    std::string t = addr_text(dom_resolver(d), x);
    if (len) {
        std::size_t c = std::min(t.size(), len - 1);
        std::memcpy(buf, t.data(), c);
        buf[c] = 0;
    }
    return t.size() + 1;
}

int addr_from_names_hook(util::domain_obj *d, const char *node, const char *service, void *out)
{
    ep_addr a{};
    const addr_resolver &r = dom_resolver(d);
    int rc = node && !service ? addr_parse(r, node, a) : resolve_names(r, node, service, 0, false, a);
    if (rc)
        return rc;
    std::memcpy(out, &a, sizeof a);
    return 0;
}

int addr_from_str_hook(util::domain_obj *d, const char *str, void *out)
{
    ep_addr a{};
    if (int rc = addr_parse(dom_resolver(d), str, a); rc)
        return rc;
    std::memcpy(out, &a, sizeof a);
    return 0;
}

int addr_resolve_hook(util::domain_obj *d, const void *in, void *out)
{
    ep_addr a, e;
    std::memcpy(&a, in, sizeof a);
    if (int rc = resolve_endpoint(dom_resolver(d), a, e); rc)
        return rc;
    std::memcpy(out, &e, sizeof e);
    return 0;
}

std::string addr_key(const ep_addr &a)
{
    return std::string(a.name, a.len <= 59 ? a.len : 59) + "/" + std::to_string(a.qpn);
}

vq::dev_addr to_dev(const ep_addr &a)
{
    vq::dev_addr d{};
    d.len = a.len;
    std::memcpy(d.raw, a.name, a.len);
    return d;
}

} // namespace shunt::prov::vqprov
