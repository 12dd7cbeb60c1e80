// The eventfd wait object of CQs, counters and EQs.
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "env/errors.h"
#include "fabric/util/wait.h"

namespace shunt::fabric::util {

waiter::~waiter()
{
    if (fd_ >= 0 && owns_fd_)
        ::close(fd_);
}

int waiter::open(wait_obj w)
{
    switch (w) {
    case FI_WAIT_NONE:
    case FI_WAIT_YIELD:
        kind_ = w;
        return 0;
    case FI_WAIT_UNSPEC:
    case FI_WAIT_FD:
        break;
    case FI_WAIT_SET:
    case FI_WAIT_MUTEX_COND:
    case FI_WAIT_POLLFD:
        return -FI_ENOSYS;
    default:
        return -FI_EINVAL;
    }
    int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    fd_ = fd;
    kind_ = w;
    return 0;
}

void waiter::kick() noexcept
{
    if (fd_ < 0)
        return;
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof one);
}

void waiter::drain() noexcept
{
    if (fd_ < 0)
        return;
    std::uint64_t v;
    [[maybe_unused]] ssize_t n = ::read(fd_, &v, sizeof v);
}

int waiter::wait(int timeout_ms) noexcept
{
    if (fd_ < 0)
        return -FI_ETIMEDOUT;
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, timeout_ms);
    if (rc > 0) {
        drain();
        return 0;
    }
    return -FI_ETIMEDOUT;
}

namespace {
long long now_ns()
{
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
} // namespace

long long deadline_after(int timeout_ms) noexcept
{
    return timeout_ms < 0 ? -1 : now_ns() + timeout_ms * 1000000LL;
}

int ms_left(long long deadline) noexcept
{
    if (deadline < 0)
        return -1;
    long long left = deadline - now_ns();
    if (left <= 0)
        return 0;
    return int((left + 999999) / 1000000);
}

} // namespace shunt::fabric::util
