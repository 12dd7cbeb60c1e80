/* For provider writers: the generic counter.
 *
 * Endpoints keep, per event type, a counter pointer and an increment
 * function chosen at bind: cntr_inc_noop when nothing is bound, a plain
 * load/store when the domain is single-threaded, an atomic add otherwise. */
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "fabric/api.h"
#include "fabric/util/cq.h"
#include "fabric/util/domain.h"
#include "fabric/util/wait.h"

namespace shunt::fabric::util {

struct cntr_obj {
    fid_cntr cntr;                          ///< first: the public object
    domain_obj *domain = nullptr;
    alignas(64) std::atomic<std::uint64_t> value{0};
    alignas(64) std::atomic<std::uint64_t> err{0};
    alignas(64) waiter wait;
    bool do_progress = false;
    bool mt = true;
    maybe_lock plock;
    std::vector<progress_hook> progress;
    std::atomic<int> refs{0};               ///< endpoints, MRs and poll sets bound
    // ---- cold: poll and wait sets (util/poll.h) ----
    /** The counts a poll or wait set last reported, or the application last
     *  set or added to (fi_poll(3)): a change since is an event. */
    std::atomic<std::uint64_t> seen_value{0};
    std::atomic<std::uint64_t> seen_err{0};
    fid_wait *wait_set = nullptr;           ///< the wait set it was opened on
};

inline cntr_obj *to_cntr(fid_cntr *c) { return reinterpret_cast<cntr_obj *>(c); }

/** Increment functions (chosen at bind time). */
using cntr_inc_fn = void (*)(cntr_obj *c) noexcept;
inline void cntr_inc_noop(cntr_obj *) noexcept {}
inline void cntr_inc_st(cntr_obj *c) noexcept
{
    // Single writer: no read-modify-write needed; readers see whole values.
    c->value.store(c->value.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    c->wait.signal();
}
inline void cntr_inc_mt(cntr_obj *c) noexcept
{
    c->value.fetch_add(1, std::memory_order_release);
    c->wait.signal();
}
inline void cntr_inc_err(cntr_obj *c) noexcept
{
    c->err.fetch_add(1, std::memory_order_release);
    c->wait.signal();
}
/** The increment a bind of @p c should use. */
inline cntr_inc_fn cntr_inc_for(cntr_obj *c) { return !c ? cntr_inc_noop : c->mt ? cntr_inc_mt : cntr_inc_st; }

/** Generic cntr_open for ops_domain::cntr_open. */
int cntr_open(fid_domain *domain, cntr_attr *attr, fid_cntr **cntr, void *context);

void cntr_add_progress(cntr_obj *c, progress_hook h);
void cntr_remove_progress(cntr_obj *c, void *arg);
/** Run the progress hooks (manual progress; what reading does). */
void cntr_progress(cntr_obj *c);
/** Did a count change since it was last seen (fi_poll(3))? Marks the
 *  change seen. */
bool cntr_changed(cntr_obj *c);

} // namespace shunt::fabric::util
