/* For provider writers: the shared endpoint base.
 *
 * It enforces the provider-independent rules of fi_endpoint(3) (see
 * fabric/endpoint.h): disabled at creation, bind rules and -FI_ENOCQ /
 * -FI_ENOAV / -FI_ENOEQ at enable, -FI_EOPBADSTATE for posting before
 * enable, setopt rules, operation-flag control, aliases, scalable
 * endpoints and their contexts, shared contexts, cancel of receives, and
 * it turns bind decisions into data for the fast path: per handle a
 * completion-force word (FI_COMPLETION unless bound with
 * FI_SELECTIVE_COMPLETION) and per event type a counter increment function
 * (a no-op when no counter is bound).
 *
 * Structure: the public fid_ep lives in an ep_handle; the endpoint and each
 * of its aliases are handles (with their own default flags) sharing one
 * ep_core (queues, bindings, provider state). */
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fabric/api.h"
#include "fabric/ext_tso.h"
#include "fabric/util/av.h"
#include "fabric/util/cntr.h"
#include "fabric/util/cq.h"
#include "fabric/util/domain.h"
#include "fabric/util/eq.h"
#include "fabric/util/rxq.h"

namespace shunt::fabric::util {

struct ep_core;
struct ep_handle;

/** A transmit request handed to the provider (built by the generic ops). */
struct tx_req {
    enum kind_t : std::uint8_t { send, tsend, read, write, atomic, fetch_atomic, compare_atomic } kind;
    const iovec *iov;           ///< local buffers (atomics: element bytes)
    void **desc;
    std::size_t count;
    std::size_t len;            ///< total bytes of iov
    fi_addr_t dest;
    av_entry *peer;             ///< resolved (connectionless), or null (connected)
    std::uint64_t tag;
    std::uint64_t data;
    std::uint64_t flags;        ///< resolved op flags: FI_COMPLETION set if a completion is due
    void *context;
    const rma_iov *rma;         ///< RMA/atomic remote segments
    std::size_t rma_count;
    datatype dt;                ///< atomics
    op aop;
    const iovec *result;        ///< fetch/compare results
    std::size_t result_count;
    const iovec *compare;
    std::size_t compare_count;
};

struct rx_entry;

/** A posted receive matched a message whose bytes the provider fetches
 *  itself (a rendezvous: rx_deliver_fetch, or such an unexpected message
 *  matched later). What the provider needs to fetch and to complete it. */
struct rx_fetch_req {
    ep_core *reporter = nullptr; ///< whose CQ and counter report the receive
    rxq *queue = nullptr;        ///< the receive queue the entry belongs to
    bool tagged = false;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    std::uint64_t tag = 0, data = 0;
    std::uint64_t msg_flags = 0; ///< FI_REMOTE_CQ_DATA when data is valid
    std::size_t len = 0;         ///< the message's length
    std::size_t offset = 0;      ///< where in the receive's buffer it goes (multi-recv)
    std::size_t n = 0;           ///< bytes to fetch: min(len, room); fewer than len is FI_ETRUNC
    const void *desc = nullptr;  ///< the provider's description of the data (valid during the hook)
    std::size_t desc_len = 0;
    /** The kit's record of this fetch, which keeps later completions from
     *  the same source behind it (null: none could be had). The provider
     *  hands r back unchanged in rx_fetch_done. */
    held_rx *hold = nullptr;
};

/** What a provider adds to the endpoint base. Null slots: not supported. */
struct ep_hooks {
    std::size_t size = sizeof(ep_hooks);
    /** Provider resources after the base checks passed (also re-enable). */
    int (*enable)(ep_core *c) = nullptr;
    /** Release provider resources; outstanding operations are dropped silently. */
    void (*close)(ep_core *c) = nullptr;
    /** Manual progress (CQ / counter reads). */
    void (*progress)(ep_core *c) = nullptr;
    /** Start a transmit. @return 0; -FI_EAGAIN; or an error code. */
    ssize_t (*transmit)(ep_core *c, const tx_req &r) = nullptr;
    /** Cancel a provider-held transmit with @p context. @return 1 cancelled, 0 not found. */
    int (*cancel_tx)(ep_core *c, void *context) = nullptr;
    ssize_t (*tx_size_left)(ep_core *c) = nullptr;
    /** Extensions by name (open_ops). @return 0 / -FI_ENOSYS. */
    int (*ops_open)(ep_core *c, const char *name, void **ops) = nullptr;
    /** Validate FI_OPT_SHARED_MEMORY_PERMITTED = @p permitted. */
    int (*shm_permitted)(ep_core *c, bool permitted) = nullptr;
    /** Start fetching r.n bytes of a rendezvous message into receive @p e at
     *  r.offset; the provider completes it later with rx_fetch_done. Called
     *  with the receive lock held. @return 0 started; 1 the bytes are in
     *  place already (the kit completes the receive at once); a negative
     *  error code completes the receive with that error at once. */
    int (*rx_fetch)(ep_core *c, rx_entry *e, const rx_fetch_req &r) = nullptr;
    /** A rendezvous message kept as unexpected was discarded (FI_DISCARD):
     *  tell its sender, whose send is waiting for the fetch. Rx lock held. */
    void (*rx_discard)(ep_core *c, const void *desc, std::size_t desc_len) = nullptr;
};

enum class ep_state : int { disabled, enabled, failed };

struct stx_obj {
    fid_stx stx;                  ///< first
    domain_obj *domain = nullptr;
    tx_attr attr{};
    std::atomic<int> refs{0};
};

/** State shared by an endpoint and its aliases. */
struct ep_core {
    domain_obj *domain = nullptr;
    fabric::info *info = nullptr;
    const ep_hooks *hooks = nullptr;
    ep_type type = FI_EP_RDM;
    std::size_t fclass = FI_CLASS_EP;
    std::uint64_t caps = 0;
    std::atomic<ep_state> state{ep_state::disabled};
    // bindings
    cq_obj *tx_cq = nullptr, *rx_cq = nullptr;
    bool tx_selective = false, rx_selective = false;
    cntr_obj *c_send = nullptr, *c_recv = nullptr, *c_read = nullptr, *c_write = nullptr;
    cntr_obj *c_rread = nullptr, *c_rwrite = nullptr;
    cntr_inc_fn inc_send = cntr_inc_noop, inc_recv = cntr_inc_noop, inc_read = cntr_inc_noop;
    cntr_inc_fn inc_write = cntr_inc_noop, inc_rread = cntr_inc_noop, inc_rwrite = cntr_inc_noop;
    av_obj *av = nullptr;
    bool av_inherited = false;    ///< context using its scalable endpoint's AV
    eq_obj *eq = nullptr;
    stx_obj *stx = nullptr;
    ep_core *srx = nullptr;       ///< shared receive context bound
    rxq own_rx;
    rxq *rx = &own_rx;            ///< own or the shared receive context's
    // limits and options
    std::size_t max_msg_size = 0, inject_size = 0, iov_limit = 0, rma_iov_limit = 0, cq_data_size = 0;
    std::size_t max_size[4] = {};    ///< FI_OPT_MAX_{MSG,TAGGED,RMA,ATOMIC}_SIZE
    std::size_t inject_max[4] = {};  ///< FI_OPT_INJECT_{MSG,TAGGED,RMA,ATOMIC}_SIZE
    std::size_t cm_data_size = 0;
    /** Tag bits a receive may not ignore: all under FI_TAG_CCL, whose one
     *  field "may not be wild carded" (fi_endpoint(3)); else none. */
    std::uint64_t tag_unignorable = 0;
    int hmem_p2p = FI_HMEM_P2P_ENABLED;
    bool shm_permitted = true;
    std::uint64_t supported_op_flags = 0; ///< completion levels etc. the provider honours
    // handles
    ep_handle *main = nullptr;
    std::atomic<int> aliases{0};
    // scalable endpoints
    ep_core *sep = nullptr;        ///< for a context: its scalable endpoint
    std::uint32_t ctx_index = 0;   ///< for a context: its index among its scalable endpoint's tx or rx contexts
    std::vector<ep_handle *> tx_ctx, rx_ctx;
    std::atomic<int> open_ctx{0};
    std::atomic<int> bound_to_srx{0}; ///< for a shared rx context: endpoints using it
    maybe_lock tx_lock;           ///< FI_THREAD_SAFE data path (provider's choice to use)
    void *prov = nullptr;
};

/** The public endpoint (or alias, context, shared rx context). */
struct ep_handle {
    fid_ep ep;                    ///< first: the public object
    ep_core *core = nullptr;
    ep_handle *parent = nullptr;  ///< alias: the endpoint it aliases
    std::uint64_t tx_op_flags = 0, rx_op_flags = 0;
    /** FI_COMPLETION when successful completions are always written, 0 with
     *  FI_SELECTIVE_COMPLETION: OR-ed into every operation's flags. */
    std::uint64_t tx_comp_force = FI_COMPLETION, rx_comp_force = FI_COMPLETION;
    /** Precomputed flags of calls without a flags argument. */
    std::uint64_t tx_default = 0, rx_default = 0;
};

inline ep_handle *to_handle(fid_ep *e) { return reinterpret_cast<ep_handle *>(e); }
inline ep_core *core_of(fid_ep *e) { return to_handle(e)->core; }
ep_core *ep_core_of(fid *f);

/** Ops tables a provider's endpoint normally uses: every call checked by
 *  the base and handed to hooks->transmit; receives go to the rxq. */
extern const ops_fid ep_fid_ops;
extern const ops_ep ep_ops;
extern const ops_msg ep_msg_ops;
extern const ops_tagged ep_tagged_ops;
extern const ops_rma ep_rma_ops;
extern const ops_atomic ep_atomic_ops;

/** Create an endpoint object (disabled) of @p fclass from @p info.
 *  @param ops the provider's table set (each may be the generic one).
 *  @return 0 and *out; -FI_EINVAL bad info; -FI_EOPNOTSUPP type/caps the
 *  domain cannot give; -FI_ENOMEM. */
struct ep_tables {
    const ops_fid *fid = &ep_fid_ops;
    const ops_ep *ep = &ep_ops;
    const ops_cm *cm = nullptr;
    const ops_msg *msg = &ep_msg_ops;
    const ops_tagged *tagged = &ep_tagged_ops;
    const ops_rma *rma = &ep_rma_ops;
    const ops_atomic *atomic = &ep_atomic_ops;
};
[[nodiscard]] int ep_create(domain_obj *d, const info *info, std::size_t fclass, const ep_hooks *hooks,
                            const ep_tables &tables, void *context, ep_handle **out);

/** Generic bodies of the endpoint calls, for providers that wrap them. */
int ep_bind_generic(fid *f, fid *b, std::uint64_t flags);
int ep_control_generic(fid *f, int cmd, void *arg);
int ep_close_generic(fid *f);
int ep_enable(ep_core *c);

/** Critical error: disable the endpoint and report on its EQ. */
void ep_fail(ep_core *c, int err);

// ---- completion helpers (fast path) ----

/** Successful transmit-side completion: CQ entry if due, and the counter. */
inline void tx_done(ep_core *c, std::uint64_t flags, void *ctx, std::uint64_t cq_flags, std::size_t len = 0)
{
    if (flags & FI_COMPLETION)
        cq_write(c->tx_cq, ctx, cq_flags, len, nullptr, 0, 0, FI_ADDR_NOTAVAIL);
    if (cq_flags & (FI_READ))
        c->inc_read(c->c_read);
    else if (cq_flags & (FI_WRITE))
        c->inc_write(c->c_write);
    else
        c->inc_send(c->c_send);
}
/** Failed transmit: always a CQ error entry, and the error counter. */
void tx_fail(ep_core *c, void *ctx, std::uint64_t cq_flags, int err, std::size_t len = 0);
/** A transmit already reported complete (an inject, counted when it was
 *  posted) failed afterwards — its target refused it, or its connection
 *  broke before delivering it: a CQ error entry with the endpoint's
 *  context, and no counter change — the counter counted the operation once
 *  already (fi_endpoint(3): each operation "completed successfully or in
 *  error"). */
void tx_fail_after_done(ep_core *c, std::uint64_t cq_flags, int err);

/** A message arrived: match it and place it (or keep it unexpected).
 *  @param queue_unexpected false for DGRAM (dropped when nothing is posted).
 *  @return 0 delivered or queued; 1 dropped (DGRAM, no receive); -FI_ENOMEM:
 *  nothing matched and the unexpected store could not keep it (past its
 *  bound, SHUNT_UNEXPECTED_BYTES, or no memory), reported on @p c by an
 *  FI_ENOMEM error completion with the endpoint's context and the error
 *  counter. */
int rx_deliver(ep_core *c, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
               std::uint64_t msg_flags, const void *payload, std::size_t len, bool queue_unexpected = true);
/** rx_deliver of a message whose kind the caller knows (@p Tagged): no
 *  test of the kind on the common receive. Defined for both kinds. */
template <bool Tagged>
int rx_deliver_as(ep_core *c, fi_addr_t src, std::uint64_t tag, std::uint64_t data, std::uint64_t msg_flags,
                  const void *payload, std::size_t len, bool queue_unexpected = true);
/** A rendezvous message arrived: its bytes stay where the sender has them,
 *  @p desc (@p desc_len bytes, copied if kept) says where. A matching receive
 *  goes to hooks->rx_fetch; without one the description is kept as an
 *  unexpected message, fetched when a receive matches it, and @p kept
 *  bytes that the provider holds for it meanwhile (a staging buffer)
 *  count against the unexpected store's bound with it.
 *  @return 0; -FI_ENOMEM: not kept (past the bound, or no memory),
 *  reported on @p c as rx_deliver's. */
int rx_deliver_fetch(ep_core *c, bool tagged, fi_addr_t src, std::uint64_t tag, std::uint64_t data,
                     std::uint64_t msg_flags, std::size_t len, const void *desc, std::size_t desc_len,
                     std::size_t kept = 0);
/** A fetch started by hooks->rx_fetch is over: @p err 0 (the bytes are in
 *  place) or a positive error code. Writes the receive's completion (or
 *  error; FI_ETRUNC when r.n < r.len) and releases the entry. */
void rx_fetch_done(rx_entry *e, const rx_fetch_req &r, int err);
/** Remote-CQ-data of an RMA write arrived (FI_REMOTE_CQ_DATA). */
void rx_remote_data(ep_core *c, std::uint64_t data, std::uint64_t cq_flags, std::size_t len);

/** Posted-before-enable and similar state checks of the fast path. */
inline bool ep_ready(const ep_core *c) { return c->state.load(std::memory_order_relaxed) == ep_state::enabled; }

} // namespace shunt::fabric::util
