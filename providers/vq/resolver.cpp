// vq provider: the resolvers of addr.h. Host-local devices (shm): a node names
// this host or nothing, and services are bound in per-user files.
//
// A binding of service S is the file /dev/shm/.shunt-svc-<uid>-S holding the
// bound endpoint's address. The binding endpoint holds an open file
// description lock (F_OFD_SETLK) on it for as long as it lives; the kernel
// drops the lock when the process dies, so a file without a lock is a stale
// binding: lookups ignore it and the next bind takes it over. Lookups only
// ask (F_OFD_GETLK) and never take the lock, so they cannot make a binder
// fail. Another user's services are another user's files: they do not
// collide, and segments of other users are not reachable anyway.
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <new>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "addr.h"
#include "env/errors.h"
#include "env/log.h"

namespace shunt::prov::vqprov {

struct service_binding {
    int fd = -1;
    std::string path;
};

namespace {

constexpr char rec_magic[8] = {'S', 'H', 'U', 'N', 'T', 'S', 'V', '1'};

/** What a binding file holds. */
struct service_record {
    char magic[8];
    std::int32_t pid;   ///< the binder (for people reading the file)
    std::uint32_t pad;
    ep_addr ep;         ///< the bound endpoint
};

std::string this_host()
{
    char h[256] = {};
    if (::gethostname(h, sizeof h - 1) != 0)
        return "localhost";
    return h;
}

bool same_ip(const sockaddr *a, const sockaddr *b)
{
    if (!a || !b || a->sa_family != b->sa_family)
        return false;
    if (a->sa_family == AF_INET)
        return reinterpret_cast<const sockaddr_in *>(a)->sin_addr.s_addr ==
               reinterpret_cast<const sockaddr_in *>(b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return std::memcmp(&reinterpret_cast<const sockaddr_in6 *>(a)->sin6_addr,
                           &reinterpret_cast<const sockaddr_in6 *>(b)->sin6_addr, sizeof(in6_addr)) == 0;
    return false;
}

bool loopback(const sockaddr *a)
{
    if (a->sa_family == AF_INET)
        return (ntohl(reinterpret_cast<const sockaddr_in *>(a)->sin_addr.s_addr) >> 24) == 127;
    if (a->sa_family == AF_INET6) {
        const in6_addr &x = reinterpret_cast<const sockaddr_in6 *>(a)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(&x) ||
               (IN6_IS_ADDR_V4MAPPED(&x) && x.s6_addr[12] == 127);
    }
    return false;
}

// An address of one of this host's interfaces?
bool local_ip(const sockaddr *a)
{
    if (loopback(a))
        return true;
    ifaddrs *ifs = nullptr;
    if (::getifaddrs(&ifs) != 0)
        return false;
    bool found = false;
    for (ifaddrs *i = ifs; i && !found; i = i->ifa_next)
        found = same_ip(i->ifa_addr, a);
    ::freeifaddrs(ifs);
    return found;
}

// fi_getinfo(3) node for a host-local device: this host's name (full or
// short), localhost, or a name or address that resolves to an address of
// one of its interfaces. Anything else is another host, which a host-local
// device cannot reach: -FI_ENODATA either way.
int host_local_host(const char *node, std::uint64_t flags, bool, std::string &out)
{
    out.clear();
    if (!node)
        return 0;
    if (!*node)
        return -FI_EINVAL;
    if (!(flags & FI_NUMERICHOST)) {
        std::string me = this_host();
        std::string shortname = me.substr(0, me.find('.'));
        if (!::strcasecmp(node, "localhost") || !::strcasecmp(node, me.c_str()) ||
            !::strcasecmp(node, shortname.c_str()))
            return 0;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = (flags & FI_NUMERICHOST) ? AI_NUMERICHOST : 0;
    addrinfo *res = nullptr;
    if (::getaddrinfo(node, nullptr, &hints, &res) != 0 || !res)
        return -FI_ENODATA;
    bool local = false;
    for (addrinfo *a = res; a && !local; a = a->ai_next)
        local = local_ip(a->ai_addr);
    ::freeaddrinfo(res);
    return local ? 0 : -FI_ENODATA;
}

std::string host_local_text(const std::string &host) { return host.empty() ? this_host() : host; }

std::string service_of(const ep_addr &svc)
{
    std::string name(svc.name, svc.len <= sizeof svc.name ? svc.len : sizeof svc.name);
    auto colon = name.find(':');
    return colon == std::string::npos ? std::string() : name.substr(colon + 1);
}

std::string binding_path(const ep_addr &svc)
{
    return "/dev/shm/.shunt-svc-" + std::to_string(::getuid()) + "-" + service_of(svc);
}

flock whole_file(short type)
{
    flock l{};
    l.l_type = type;
    l.l_whence = SEEK_SET;
    l.l_start = 0;
    l.l_len = 0;
    return l;
}

int host_local_bind(const ep_addr &svc, const ep_addr &ep, service_binding **out)
{
    std::string path = binding_path(svc);
    // A few rounds: a file removed by its unbinder between our open and our
    // lock is not the file at the path any more.
    for (int round = 0; round < 8; round++) {
        int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
            return -errno;
        flock l = whole_file(F_WRLCK);
        if (::fcntl(fd, F_OFD_SETLK, &l) != 0) {
            int e = errno;
            ::close(fd);
            return e == EAGAIN || e == EACCES ? -FI_EADDRINUSE : -e;
        }
        struct stat a, b;
        if (::fstat(fd, &a) != 0 || ::stat(path.c_str(), &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
            ::close(fd);
            continue;
        }
        service_record rec{};
        std::memcpy(rec.magic, rec_magic, sizeof rec.magic);
        rec.pid = ::getpid();
        rec.ep = ep;
        if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, &rec, sizeof rec, 0) != ssize_t(sizeof rec)) {
            int e = errno ? errno : EIO;
            ::close(fd);
            return -e;
        }
        auto *b2 = new (std::nothrow) service_binding;
        if (!b2) {
            ::unlink(path.c_str());
            ::close(fd);
            return -FI_ENOMEM;
        }
        b2->fd = fd;
        b2->path = path;
        *out = b2;
        return 0;
    }
    return -FI_EADDRINUSE;
}

void host_local_unbind(service_binding *b)
{
    if (!b)
        return;
    // Remove the name first, then let go of the lock: a binder that opened
    // the old file finds it is no longer at the path and makes a new one.
    ::unlink(b->path.c_str());
    ::close(b->fd);
    delete b;
}

int host_local_lookup(const ep_addr &svc, ep_addr &ep)
{
    std::string path = binding_path(svc);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -FI_ECONNREFUSED;
    flock l = whole_file(F_WRLCK);
    service_record rec{};
    bool live = ::fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
    bool ok = live && ::pread(fd, &rec, sizeof rec, 0) == ssize_t(sizeof rec) &&
              std::memcmp(rec.magic, rec_magic, sizeof rec.magic) == 0 && rec.ep.qpn != 0 && rec.ep.len &&
              rec.ep.len <= sizeof rec.ep.name;
    ::close(fd);
    if (!ok)
        return -FI_ECONNREFUSED; // nobody, a dead binder, or one still writing
    ep = rec.ep;
    return 0;
}

const addr_resolver host_local{
    .scheme = "fi_shm",
    .host = host_local_host,
    .host_text = host_local_text,
    .bind = host_local_bind,
    .unbind = host_local_unbind,
    .lookup = host_local_lookup,
};

// Devices with peers on other hosts: their drivers' address kinds (an IP
// address for Ethernet) are not resolvable here yet, so only the wildcard
// (no node) works; services cannot be bound.
int remote_host(const char *node, std::uint64_t, bool, std::string &out)
{
    out.clear();
    return node ? -FI_ENODATA : 0;
}
std::string remote_text(const std::string &host) { return host; }
int remote_bind(const ep_addr &, const ep_addr &, service_binding **) { return -FI_ENOSYS; }
void remote_unbind(service_binding *) {}
int remote_lookup(const ep_addr &, ep_addr &) { return -FI_ECONNREFUSED; }

const addr_resolver remote{
    .scheme = "fi_vq",
    .host = remote_host,
    .host_text = remote_text,
    .bind = remote_bind,
    .unbind = remote_unbind,
    .lookup = remote_lookup,
};

} // namespace

const addr_resolver &resolver_for(bool host_local_dev) { return host_local_dev ? host_local : remote; }

} // namespace shunt::prov::vqprov
