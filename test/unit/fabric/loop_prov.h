// "loop": an in-process provider built on the generic layer, registered by
// a static registrar, used to test the provider-independent rules and the
// generic components through the public API. Endpoints of one process
// reach each other by an 8-byte id; data moves at post time.
#pragma once

#include <cstddef>

#include "fabric/api.h"

namespace shunt::test {

/** Hints for the loop provider with @p type and @p caps. Caller frees. */
fabric::info *loop_hints(fabric::ep_type type, std::uint64_t caps = 0);

/** An opened fabric + domain of the loop provider. */
struct loop_env {
    fabric::info *info = nullptr;
    fabric::fid_fabric *fabric = nullptr;
    fabric::fid_domain *domain = nullptr;
    /** @return 0 or a negative code. */
    int open(fabric::ep_type type = fabric::FI_EP_RDM, std::uint64_t caps = 0,
             fabric::threading thr = fabric::FI_THREAD_DOMAIN, int mr_mode = 0);
    void close();
    ~loop_env() { close(); }
};

/** Counts of loop transmits (for tests of what reaches the provider). */
extern int loop_transmits;

/** Messages of at least this many bytes (0: none) go as a rendezvous: the
 *  receiver gets a description (rx_deliver_fetch) and a matched receive's
 *  fetch stays running until loop_finish_fetches. */
extern std::size_t loop_rndv_bytes;
/** Fetches started and not yet finished. */
std::size_t loop_fetches_running();
/** Finish the running fetches, oldest first (@p newest_first: newest
 *  first): the bytes are copied and each receive is handed back to the
 *  kit. @return how many. */
std::size_t loop_finish_fetches(bool newest_first = false);

} // namespace shunt::test
