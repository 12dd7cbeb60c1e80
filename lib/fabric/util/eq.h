/* For provider writers: the generic event queue (slow path: a mutex-guarded
 * list). Providers post CM events with eq_post / eq_post_err. */
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "fabric/api.h"
#include "fabric/util/cq.h"
#include "fabric/util/domain.h"
#include "fabric/util/wait.h"

namespace shunt::fabric::util {

struct eq_obj {
    fid_eq eq;                            ///< first: the public object
    fabric_obj *fabric = nullptr;
    std::uint64_t flags = 0;
    std::size_t size = 0;
    struct event {
        std::uint32_t type;
        bool is_err;
        std::vector<std::uint8_t> bytes;  ///< event data as read
        eq_err_entry err;
        std::vector<std::uint8_t> err_data;
        info *owned_info;                 ///< CONNREQ info, freed if never read
    };
    std::mutex mu;
    std::deque<event> q;
    std::vector<std::uint8_t> err_keep;
    waiter wait;
    maybe_lock plock;
    std::vector<progress_hook> progress;
    std::atomic<int> refs{0};
    fid_wait *wait_set = nullptr;         ///< the wait set it was opened on (util/poll.h)
};

inline eq_obj *to_eq(fid_eq *e) { return reinterpret_cast<eq_obj *>(e); }

/** Generic eq_open for ops_fabric::eq_open. */
int eq_open(fid_fabric *fabric, eq_attr *attr, fid_eq **eq, void *context);

/** Post an event: @p buf / @p len is what eq_read returns. For FI_CONNREQ
 *  pass the info in an eq_cm_entry and @p owned_info = that info (the EQ
 *  frees it if it is never read).
 *  @return 0; -FI_EAGAIN queue full. */
int eq_post(eq_obj *eq, std::uint32_t type, const void *buf, std::size_t len, info *owned_info = nullptr);
/** Post an error event (err_data copied). */
int eq_post_err(eq_obj *eq, const eq_err_entry &e, const void *err_data = nullptr, std::size_t err_data_size = 0);
void eq_add_progress(eq_obj *eq, progress_hook h);
void eq_remove_progress(eq_obj *eq, void *arg);
std::size_t eq_pending(eq_obj *eq);
/** Run the progress hooks (passive endpoints' connection requests...). */
void eq_progress(eq_obj *eq);

} // namespace shunt::fabric::util
