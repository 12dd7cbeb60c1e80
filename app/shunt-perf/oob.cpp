#include "oob.h"

#include "env/errors.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace shunt::perf {
namespace {

using clock_type = std::chrono::steady_clock;

int ms_left(clock_type::time_point deadline)
{
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
    return left < 0 ? 0 : static_cast<int>(left);
}

clock_type::time_point after(double s)
{
    return clock_type::now() + std::chrono::microseconds(static_cast<long long>(s * 1e6));
}

} // namespace

oob_channel::~oob_channel()
{
    if (fd_ >= 0)
        ::close(fd_);
}

int oob_channel::send(const std::string &line)
{
    std::string msg = line + '\n';
    std::size_t off = 0;
    while (off < msg.size()) {
        ssize_t n = ::send(fd_, msg.data() + off, msg.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -FI_ECONNRESET;
        off += static_cast<std::size_t>(n);
    }
    return 0;
}

int oob_channel::recv(std::string &line, double timeout_s)
{
    auto deadline = after(timeout_s);
    for (;;) {
        auto nl = buf_.find('\n');
        if (nl != std::string::npos) {
            line = buf_.substr(0, nl);
            buf_.erase(0, nl + 1);
            return 0;
        }
        if (buf_.size() > 65536)
            return -FI_EMSGSIZE;
        pollfd p{fd_, POLLIN, 0};
        int r = ::poll(&p, 1, ms_left(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -FI_ECONNRESET;
        if (r == 0)
            return -FI_ETIMEDOUT;
        char tmp[4096];
        ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -FI_ECONNRESET;
        buf_.append(tmp, static_cast<std::size_t>(n));
    }
}

int oob_channel::expect(const char *word, std::string &line, double timeout_s)
{
    int rc = recv(line, timeout_s);
    if (rc != 0)
        return rc;
    std::size_t len = std::strlen(word);
    if (line.compare(0, len, word) == 0 && (line.size() == len || line[len] == ' ')) {
        line.erase(0, line.size() == len ? len : len + 1);
        return 0;
    }
    if (line.compare(0, 6, "ERROR ") == 0) {
        line.erase(0, 6);
        return -FI_EREMOTEIO;
    }
    line = "unexpected message from the peer: '" + line + "' (wanted " + word + ")";
    return -FI_EREMOTEIO;
}

bool peer_gone(int fd)
{
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0)
        return false;
    return (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) != 0;
}

int tcp_accept_one(const std::string &bind, std::uint16_t port, double timeout_s, std::string &why)
{
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    std::string svc = std::to_string(port);
    int g = ::getaddrinfo(bind.empty() ? nullptr : bind.c_str(), svc.c_str(), &hints, &res);
    if (g != 0) {
        why = "cannot resolve '" + bind + "': " + gai_strerror(g);
        return -FI_EADDRNOTAVAIL;
    }
    int ls = -1, err = 0;
    for (addrinfo *a = res; a; a = a->ai_next) {
        ls = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (ls < 0)
            continue;
        int one = 1;
        ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(ls, a->ai_addr, a->ai_addrlen) == 0 && ::listen(ls, 1) == 0)
            break;
        err = errno;
        ::close(ls);
        ls = -1;
    }
    ::freeaddrinfo(res);
    if (ls < 0) {
        why = "cannot listen on port " + svc + ": " + std::strerror(err);
        return -FI_EADDRINUSE;
    }
    pollfd p{ls, POLLIN, 0};
    int r;
    do {
        r = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
    } while (r < 0 && errno == EINTR);
    if (r <= 0) {
        ::close(ls);
        why = "no client connected within the timeout";
        return -FI_ETIMEDOUT;
    }
    int fd = ::accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
    err = errno;
    ::close(ls);
    if (fd < 0) {
        why = std::string("accept: ") + std::strerror(err);
        return -FI_ECONNABORTED;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int tcp_connect(const std::string &host, std::uint16_t port, double timeout_s, std::string &why)
{
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    std::string svc = std::to_string(port);
    int g = ::getaddrinfo(host.c_str(), svc.c_str(), &hints, &res);
    if (g != 0) {
        why = "cannot resolve '" + host + "': " + gai_strerror(g);
        return -FI_EADDRNOTAVAIL;
    }
    auto deadline = after(timeout_s);
    int err = 0;
    for (;;) {
        for (addrinfo *a = res; a; a = a->ai_next) {
            int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0)
                continue;
            if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                ::freeaddrinfo(res);
                int one = 1;
                ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                return fd;
            }
            err = errno;
            ::close(fd);
        }
        if (clock_type::now() >= deadline)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::freeaddrinfo(res);
    why = "cannot connect to " + host + ":" + svc + ": " + std::strerror(err);
    return -FI_ECONNREFUSED;
}

} // namespace shunt::perf
