/* Who holds a locked QP's posting session (wr_start .. wr_complete or
 * wr_abort), so that a call which would take the QP lock again on the
 * thread already holding it is refused instead of waiting forever. */
#pragma once

#include <atomic>
#include <cassert>
#include <cstdint>

#include "env/log.h"

namespace shunt::drv::common {

/** This thread's identity: the thread pointer (one register read, no TLS
 *  lookup). */
inline std::uintptr_t this_thread() noexcept
{
    return reinterpret_cast<std::uintptr_t>(__builtin_thread_pointer());
}

/** The thread with a session open, 0 when none. Stored by that thread only
 *  (under the QP lock), read by any thread (relaxed) only to compare with its
 *  own identity: a thread always sees its own last store, so mine() is exact
 *  for the caller even while another thread holds the session. */
struct session_owner {
    std::atomic<std::uintptr_t> id{0};

    bool mine() const noexcept { return id.load(std::memory_order_relaxed) == this_thread(); }
    void open() noexcept { id.store(this_thread(), std::memory_order_relaxed); }
    void close() noexcept { id.store(0, std::memory_order_relaxed); }
};

/** The session API was misused on QP @p qpn (@p what): a log line on @p log
 *  and an assertion in a debug build. The caller leaves the lock and any
 *  open batch as a correct caller needs them. */
[[gnu::cold, gnu::noinline]] inline void session_misuse(env::log::component &log, std::uint32_t qpn,
                                                        const char *what) noexcept
{
    SHUNT_LOG(log, error, "QP %#x: %s (the session API needs wr_start, builders, then one "
              "wr_complete or wr_abort)", qpn, what);
    assert(!"session API misuse: see the log line above");
}

/** Thread-domain QPs keep only a flag for their session, and check it in a
 *  debug build alone (session_misuse: a log line and an assertion): in a
 *  release build the check would cost every batch (shunt_wr(3)). */
#ifdef NDEBUG
inline constexpr bool check_unlocked_sessions = false;
#else
inline constexpr bool check_unlocked_sessions = true;
#endif

} // namespace shunt::drv::common
