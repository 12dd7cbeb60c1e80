/* Endpoints (fi_endpoint(3)): allocation, binding, enabling, cancel, alias,
 * control, options, scalable endpoints and their contexts, shared contexts.
 *
 * Rules every provider follows (the shared endpoint base enforces them):
 * - Active endpoints are created disabled; data transfers and receive posts
 *   before enable() fail with -FI_EOPBADSTATE.
 * - Before enable: a CQ for every direction that can generate completions
 *   (FI_TRANSMIT if the endpoint can send/RMA/atomic, FI_RECV if it can
 *   receive), even when bound with FI_SELECTIVE_COMPLETION (errors are
 *   always reported) - else enable() is -FI_ENOCQ; connectionless endpoints
 *   (RDM, DGRAM) need exactly one AV - else -FI_ENOAV; shared contexts and
 *   counters must be bound before enable (binding after is -FI_EOPBADSTATE).
 * - One CQ per direction and one counter per event type.
 * - A critical error disables the endpoint and is reported on its EQ;
 *   enable() may re-enable it. close() discards outstanding operations
 *   without completions. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

#include "fabric/domain.h"
#include "fabric/fabric.h"
#include "fabric/fid.h"
#include "fabric/info.h"

namespace shunt::fabric {

struct fid_ep;
struct ops_cm;
struct ops_msg;
struct ops_rma;
struct ops_tagged;
struct ops_atomic;

/** Endpoint operations (libfabric struct fi_ops_ep). */
struct ops_ep {
    std::size_t size = sizeof(ops_ep);
    ssize_t (*cancel)(fid *f, void *context) = detail::nosys<ssize_t>;
    int (*getopt)(fid *f, int level, int optname, void *optval, std::size_t *optlen) = detail::nosys<int>;
    int (*setopt)(fid *f, int level, int optname, const void *optval, std::size_t optlen) = detail::nosys<int>;
    int (*tx_ctx)(fid_ep *sep, int index, tx_attr *attr, fid_ep **tx_ep, void *context) = detail::nosys<int>;
    int (*rx_ctx)(fid_ep *sep, int index, rx_attr *attr, fid_ep **rx_ep, void *context) = detail::nosys<int>;
    ssize_t (*rx_size_left)(fid_ep *ep) = detail::nosys<ssize_t>;
    ssize_t (*tx_size_left)(fid_ep *ep) = detail::nosys<ssize_t>;
};

/** An active endpoint, scalable endpoint, tx/rx context or shared receive
 *  context (libfabric struct fid_ep); fid.fclass tells which. */
struct fid_ep {
    struct fid fid;
    const ops_ep *ops = nullptr;
    const ops_cm *cm = nullptr;
    const ops_msg *msg = nullptr;
    const ops_rma *rma = nullptr;
    const ops_tagged *tagged = nullptr;
    const ops_atomic *atomic = nullptr;
};

/** A passive endpoint (libfabric struct fid_pep). */
struct fid_pep {
    struct fid fid;
    const ops_ep *ops = nullptr;
    const ops_cm *cm = nullptr;
};

/** A shared transmit context (libfabric struct fid_stx). */
struct fid_stx {
    struct fid fid;
    const ops_ep *ops = nullptr;
};

/** Argument of control(FI_ALIAS) (libfabric struct fi_alias). */
struct alias {
    fid **alias_fid;
    std::uint64_t flags;
};

/** Allocate an active endpoint (fi_endpoint), in the disabled state.
 *  @param domain open domain; @param info from getinfo/dupinfo (for an
 *    accepted connection: the FI_CONNREQ event's info; info->handle may
 *    name a passive endpoint whose address the endpoint takes over).
 *  @param ep out: written on success only. @param context user context.
 *  @return 0; -FI_EINVAL null/closed domain, null info/ep, info of another
 *  provider; -FI_EOPNOTSUPP endpoint type or caps the domain cannot give;
 *  -FI_ENOMEM. */
[[nodiscard]] int endpoint(fid_domain *domain, info *info, fid_ep **ep, void *context);

/** fi_endpoint2: endpoint() with flags (FI_PEER_TRANSFER ...).
 *  @return as endpoint(); -FI_EBADFLAGS flags the provider does not know. */
[[nodiscard]] int endpoint2(fid_domain *domain, info *info, fid_ep **ep, std::uint64_t flags, void *context);

/** Allocate a scalable endpoint (fi_scalable_ep) with
 *  info->ep_attr->tx_ctx_cnt / rx_ctx_cnt contexts.
 *  @return as endpoint(); -FI_EOPNOTSUPP the domain has no scalable endpoints. */
[[nodiscard]] int scalable_ep(fid_domain *domain, info *info, fid_ep **sep, void *context);

/** Allocate a passive endpoint (fi_passive_ep) on @p fabric (FI_EP_MSG).
 *  @return 0; -FI_EINVAL null arguments or info not for FI_EP_MSG;
 *  -FI_EOPNOTSUPP provider has no passive endpoints; -FI_ENOMEM. */
[[nodiscard]] int passive_ep(fid_fabric *fabric, info *info, fid_pep **pep, void *context);

/** Bind a CQ, counter, AV, EQ, shared context or MR to an endpoint (fi_ep_bind).
 *  @param flags for a CQ: FI_TRANSMIT and/or FI_RECV, optionally with
 *    FI_SELECTIVE_COMPLETION; for a counter: FI_SEND, FI_RECV, FI_READ,
 *    FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE (the remote ones need
 *    FI_RMA_EVENT); 0 for AV, EQ, shared contexts.
 *  @return 0; -FI_EINVAL null/closed objects, object of another domain,
 *  missing or unknown flags (a CQ bind without FI_TRANSMIT/FI_RECV,
 *  FI_SELECTIVE_COMPLETION alone); -FI_EBUSY the direction or counter
 *  event is already bound, or a second AV on a connectionless endpoint;
 *  -FI_EOPBADSTATE binding a CQ, counter, AV or shared context after
 *  enable (when the provider cannot); -FI_ENOSYS object class not bindable. */
[[nodiscard]] int ep_bind(fid_ep *ep, fid *bfid, std::uint64_t flags);

/** Bind an AV to a scalable endpoint (fi_scalable_ep_bind); its contexts
 *  inherit it. @return as ep_bind(). */
[[nodiscard]] int scalable_ep_bind(fid_ep *sep, fid *bfid, std::uint64_t flags);

/** Bind an EQ to a passive endpoint (fi_pep_bind). @return as ep_bind(). */
[[nodiscard]] int pep_bind(fid_pep *pep, fid *bfid, std::uint64_t flags);

/** Enable an endpoint (fi_enable); also re-enables one disabled by a
 *  critical error when the provider can.
 *  @return 0 (also when already enabled); -FI_EINVAL null/closed;
 *  -FI_ENOCQ a direction that can generate completions has no CQ;
 *  -FI_ENOAV connectionless endpoint without AV; -FI_ENOEQ MSG endpoint
 *  without EQ; -FI_EOPBADSTATE cannot be re-enabled. */
[[nodiscard]] int enable(fid_ep *ep);

/** Cancel the outstanding operation posted with @p context (fi_cancel). If
 *  it is still pending it completes with an FI_ECANCELED error entry on its
 *  CQ; if it completed already nothing more is reported.
 *  @return 0 request submitted (also when nothing matched); -FI_EAGAIN retry
 *  after progress; -FI_EINVAL null/closed endpoint. */
[[nodiscard]] ssize_t cancel(fid_ep *ep, void *context);

/** Create an alias of @p ep (fi_ep_alias) whose default operation flags
 *  differ. @param flags FI_TRANSMIT or FI_RECV (exactly one) OR-ed with the
 *  operation flags that replace the parent's for that direction.
 *  @return 0; -FI_EINVAL null/closed, neither or both directions;
 *  -FI_EBADFLAGS unknown operation flags. The parent cannot be closed
 *  (-FI_EBUSY) while aliases are open. */
[[nodiscard]] int ep_alias(fid_ep *ep, fid_ep **alias_ep, std::uint64_t flags);

/** Read an endpoint option (fi_getopt).
 *  @param f endpoint or passive endpoint; @param level FI_OPT_ENDPOINT;
 *  @param optname one of ep_option; @param optval buffer;
 *  @param optlen in: size of @p optval; out: size of the value.
 *  @return 0; -FI_EINVAL null arguments; -FI_ETOOSMALL buffer too small
 *  (*optlen set to the size needed); -FI_ENOPROTOOPT option not supported
 *  (or set-only: FI_OPT_CUDA_API_PERMITTED, FI_OPT_SHARED_MEMORY_PERMITTED). */
[[nodiscard]] int getopt(fid *f, int level, int optname, void *optval, std::size_t *optlen);

/** Set an endpoint option (fi_setopt); must precede enable().
 *  @return 0; -FI_EINVAL null value, wrong optlen, value out of the spec's
 *  bounds (MAX_*_SIZE > ep_attr::max_msg_size, INJECT_*_SIZE >
 *  tx_attr::inject_size, unknown FI_HMEM_P2P mode); -FI_ENOPROTOOPT option
 *  unknown or read only (FI_OPT_CM_DATA_SIZE); -FI_EOPBADSTATE endpoint
 *  already enabled; -FI_EOPNOTSUPP P2P mode or CUDA setting not possible. */
[[nodiscard]] int setopt(fid *f, int level, int optname, const void *optval, std::size_t optlen);

/** Open transmit context @p index of a scalable endpoint (fi_tx_context).
 *  @param attr null to inherit the endpoint's; else requested attributes,
 *    overwritten with the actual ones.
 *  @return 0; -FI_EINVAL bad index or null; -FI_EBUSY already open. */
[[nodiscard]] int tx_context(fid_ep *sep, int index, tx_attr *attr, fid_ep **tx_ep, void *context);
/** Open receive context @p index of a scalable endpoint (fi_rx_context). As tx_context(). */
[[nodiscard]] int rx_context(fid_ep *sep, int index, rx_attr *attr, fid_ep **rx_ep, void *context);
/** Open a shared transmit context (fi_stx_context).
 *  @return 0; -FI_EINVAL null; -FI_EOPNOTSUPP not supported by the domain. */
[[nodiscard]] int stx_context(fid_domain *domain, tx_attr *attr, fid_stx **stx, void *context);
/** Open a shared receive context (fi_srx_context). As stx_context(). */
[[nodiscard]] int srx_context(fid_domain *domain, rx_attr *attr, fid_ep **rx_ep, void *context);

/** Deprecated (fi_rx_size_left): lower bound of receives that can be posted
 *  without -FI_EAGAIN. @return the count; -FI_EOPBADSTATE not enabled;
 *  -FI_EINVAL null. */
[[deprecated("fi_rx_size_left is deprecated by the spec")]] ssize_t rx_size_left(fid_ep *ep);
/** Deprecated (fi_tx_size_left): as rx_size_left for transmits. */
[[deprecated("fi_tx_size_left is deprecated by the spec")]] ssize_t tx_size_left(fid_ep *ep);

} // namespace shunt::fabric
