/* For provider writers: the generic poll set and wait set (fabric/poll.h).
 *
 * The generic CQ, counter and EQ join a wait set at open (wait_obj
 * FI_WAIT_SET): their waiter is attached to the set's (waiter::attach), so
 * their writers wake the set's wait object exactly as they wake their own --
 * only when a waiter is armed, no system call otherwise. wait() arms every
 * member, checks them (driving manual progress), and blocks on the set's
 * one wait object. Nothing of the CQ or counter fast path changes. */
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "fabric/api.h"
#include "fabric/poll.h"
#include "fabric/util/domain.h"
#include "fabric/util/wait.h"

namespace shunt::fabric::util {

struct wait_set_obj {
    fid_wait wait;                      ///< first: the public object
    fabric_obj *fabric = nullptr;
    waiter w;                           ///< the one wait object of the set
    std::mutex mu;                      ///< members
    std::vector<fid *> members;         ///< CQs, counters, EQs opened on the set
};

struct poll_obj {
    fid_poll poll;                      ///< first: the public object
    domain_obj *domain = nullptr;
    std::mutex mu;                      ///< members
    std::vector<fid *> members;         ///< CQs and counters added
};

/** Generic wait_open for ops_fabric::wait_open. */
int wait_open(fid_fabric *fabric, wait_attr *attr, fid_wait **waitset);
/** Generic poll_open for ops_domain::poll_open. */
int poll_open(fid_domain *domain, poll_attr *attr, fid_poll **pollset);

/** Join @p member (a generic CQ, counter or EQ being opened on @p fabric
 *  with wait_obj FI_WAIT_SET) to @p set and attach its @p w.
 *  @return 0; -FI_EINVAL @p set null, closed, not a generic wait set or of
 *  another fabric; -FI_ENOMEM. */
[[nodiscard]] int wait_set_join(fid_wait *set, fabric_obj *fabric, fid *member, waiter &w);
/** Leave the set (the member closes). */
void wait_set_leave(fid_wait *set, fid *member);

/** The waiter of @p f, a generic CQ, counter or EQ. */
waiter &waiter_of(fid *f);

/** Could blocking natively on @p f's wait object (a generic CQ, counter or
 *  EQ) hang the application, because only polling it makes progress? */
bool wait_needs_progress(fid *f);

/** Does @p f (a generic CQ, counter or EQ) have something to read? Drives
 *  its manual progress first. A counter's change is consumed (reported
 *  once). For trywait, poll and wait. */
bool has_events(fid *f);

} // namespace shunt::fabric::util
