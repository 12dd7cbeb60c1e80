// vq provider: endpoint addresses -- their checks, text form and parsing
// (the domain's AV hooks) and the helpers the endpoints use.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "addr.h"
#include "env/errors.h"

namespace shunt::prov::vqprov {

int addr_check(const void *a)
{
    ep_addr x;
    std::memcpy(&x, a, sizeof x);
    if (x.len == 0 || x.len > sizeof x.name || x.qpn == 0)
        return -FI_EINVAL;
    return 0;
}

std::size_t addr_to_str(const void *a, char *buf, std::size_t len)
{
    ep_addr x;
    std::memcpy(&x, a, sizeof x);
    char tmp[96];
    int n = std::snprintf(tmp, sizeof tmp, "fi_shm://%.*s/%u", int(x.len <= 59 ? x.len : 59), x.name, x.qpn);
    if (len) {
        std::strncpy(buf, tmp, len - 1);
        buf[len - 1] = 0;
    }
    return std::size_t(n) + 1;
}

// "name/qpn" or "fi_shm://name/qpn" as node (service ignored), or node = name, service = qpn.
int addr_from_svc(const char *node, const char *service, void *out)
{
    if (!node)
        return -FI_EINVAL;
    std::string s = node;
    if (s.rfind("fi_shm://", 0) == 0)
        s = s.substr(9);
    std::string name = s, qpn = service ? service : "";
    if (!service) {
        auto slash = s.rfind('/');
        if (slash == std::string::npos)
            return -FI_EINVAL;
        name = s.substr(0, slash);
        qpn = s.substr(slash + 1);
    }
    char *end = nullptr;
    unsigned long q = std::strtoul(qpn.c_str(), &end, 10);
    if (qpn.empty() || !end || *end || q == 0 || q > 0xffffffffUL || name.empty() || name.size() > 59)
        return -FI_EINVAL;
    ep_addr a{};
    a.qpn = std::uint32_t(q);
    a.len = std::uint8_t(name.size());
    std::memcpy(a.name, name.data(), name.size());
    std::memcpy(out, &a, sizeof a);
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
