// The eventfd wait object of CQs, counters and EQs.
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <poll.h>
#include <linux/membarrier.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "env/errors.h"
#include "fabric/util/wait.h"

namespace shunt::fabric::util {

namespace {

/** Can this process use membarrier(PRIVATE_EXPEDITED)? Registered once
 *  (Linux 4.14 and later; refused under some seccomp filters and by tools
 *  such as valgrind: then waiters and writers fence instead). */
bool heavy_barrier_available() noexcept
{
    static const bool ok = [] {
        long cmds = ::syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
        if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
            return false;
        return ::syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    }();
    return ok;
}

} // namespace

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
    heavy_ = heavy_barrier_available();
    return 0;
}

void waiter::arm() noexcept
{
    armed_.fetch_add(1, std::memory_order_relaxed);
    // The heavy half (see signal()): every thread of the process passes a
    // full barrier before this returns, so a writer either sees armed_ or
    // its publish is visible to the re-check that follows.
    if (heavy_ && ::syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
        return;
    // No membarrier (or no wait object): pairs with signal()'s fence.
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

void waiter::kick() noexcept
{
    if (fd_ < 0)
        return;
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof one);
    // After the write: a drain that misses the flag leaves the wake-up for
    // the next drain, never a flag without a wake-up behind it.
    kicked_.store(true, std::memory_order_release);
}

void waiter::drain() noexcept
{
    if (fd_ < 0 || !kicked_.exchange(false, std::memory_order_acquire))
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
        // Readable: consume it whatever the flag says (it may not be set yet).
        kicked_.store(false, std::memory_order_relaxed);
        std::uint64_t v;
        [[maybe_unused]] ssize_t n = ::read(fd_, &v, sizeof v);
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
