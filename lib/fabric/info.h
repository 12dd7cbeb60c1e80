/* fi_getinfo(3): the description of a provider's fabric, domain and
 * endpoints, used as hints on input and as the answer on output.
 *
 * Info objects returned by getinfo, allocinfo and dupinfo are owned by the
 * caller and freed with freeinfo; every attribute struct and string they
 * point to belongs to them. */
#pragma once

#include <cstddef>
#include <cstdint>

#include "fabric/fid.h"
#include "fabric/flags.h"

namespace shunt::fabric {

struct fid_fabric;
struct fid_domain;
struct fid_nic;

/** Transmit attributes (fi_tx_attr), see fi_endpoint(3) "TRANSMIT CONTEXT ATTRIBUTES". */
struct tx_attr {
    std::uint64_t caps = 0;       ///< subset of info::caps; 0 on input: take info::caps
    std::uint64_t mode = 0;       ///< transmit mode bits
    std::uint64_t op_flags = 0;   ///< default flags of transmit operations
    std::uint64_t msg_order = 0;  ///< FI_ORDER_* bits guaranteed
    std::uint64_t comp_order = 0; ///< deprecated, 0
    std::size_t inject_size = 0;  ///< largest FI_INJECT / inject payload
    std::size_t size = 0;         ///< queue depth
    std::size_t iov_limit = 0;    ///< max iov entries per operation
    std::size_t rma_iov_limit = 0;///< max rma_iov entries per RMA/atomic
    std::uint32_t tclass = 0;     ///< traffic class (FI_TC_* or tc_dscp_set())
};

/** Receive attributes (fi_rx_attr). */
struct rx_attr {
    std::uint64_t caps = 0;
    std::uint64_t mode = 0;
    std::uint64_t op_flags = 0;
    std::uint64_t msg_order = 0;
    std::uint64_t comp_order = 0;
    std::size_t size = 0;
    std::size_t iov_limit = 0;
};

/** Endpoint attributes (fi_ep_attr). */
struct ep_attr {
    ep_type type = FI_EP_UNSPEC;
    std::uint32_t protocol = FI_PROTO_UNSPEC;
    std::uint32_t protocol_version = 0;
    std::size_t max_msg_size = 0;
    std::size_t msg_prefix_size = 0;
    std::size_t max_order_raw_size = 0;
    std::size_t max_order_war_size = 0;
    std::size_t max_order_waw_size = 0;
    std::uint64_t mem_tag_format = 0; ///< FI_TAG_BITS, FI_TAG_MPI, FI_TAG_CCL or a bit-field format
    std::size_t tx_ctx_cnt = 0;       ///< 0: one; FI_SHARED_CONTEXT: shared tx context
    std::size_t rx_ctx_cnt = 0;       ///< 0: one; FI_SHARED_CONTEXT: shared rx context
    std::size_t auth_key_size = 0;
    std::uint8_t *auth_key = nullptr;
};

/** Domain attributes (fi_domain_attr). */
struct domain_attr {
    fid_domain *domain = nullptr; ///< an open domain to match, or null
    char *name = nullptr;
    fabric::threading threading = FI_THREAD_UNSPEC;
    fabric::progress control_progress = FI_PROGRESS_UNSPEC;
    fabric::progress data_progress = FI_PROGRESS_UNSPEC;
    fabric::resource_mgmt resource_mgmt = FI_RM_UNSPEC;
    fabric::av_type av_type = FI_AV_UNSPEC;
    int mr_mode = 0;              ///< FI_MR_* bits
    std::size_t mr_key_size = 0;
    std::size_t cq_data_size = 0; ///< bytes of remote CQ data
    std::size_t cq_cnt = 0;
    std::size_t ep_cnt = 0;
    std::size_t tx_ctx_cnt = 0;
    std::size_t rx_ctx_cnt = 0;
    std::size_t max_ep_tx_ctx = 0;
    std::size_t max_ep_rx_ctx = 0;
    std::size_t max_ep_stx_ctx = 0;
    std::size_t max_ep_srx_ctx = 0;
    std::size_t cntr_cnt = 0;
    std::size_t mr_iov_limit = 0;
    std::uint64_t caps = 0;
    std::uint64_t mode = 0;
    std::uint8_t *auth_key = nullptr;
    std::size_t auth_key_size = 0;
    std::size_t max_err_data = 0;
    std::size_t mr_cnt = 0;
    std::uint32_t tclass = 0;
    std::size_t max_ep_auth_key = 0;
    std::uint32_t max_group_id = 0;
};

/** Fabric attributes (fi_fabric_attr). */
struct fabric_attr {
    fid_fabric *fabric = nullptr; ///< an open fabric to match, or null
    char *name = nullptr;
    char *prov_name = nullptr;    ///< "shm", or "core;util" for a stacked provider
    std::uint32_t prov_version = 0;
    std::uint32_t api_version = 0;
};

/** One answer of getinfo, or the hints given to it (fi_info). */
struct info {
    info *next = nullptr;
    std::uint64_t caps = 0;
    std::uint64_t mode = 0;
    std::uint32_t addr_format = FI_FORMAT_UNSPEC;
    std::size_t src_addrlen = 0;
    std::size_t dest_addrlen = 0;
    void *src_addr = nullptr;
    void *dest_addr = nullptr;
    fid_t handle = nullptr; ///< passive endpoint or connection request this info refers to
    fabric::tx_attr *tx_attr = nullptr;
    fabric::rx_attr *rx_attr = nullptr;
    fabric::ep_attr *ep_attr = nullptr;
    fabric::domain_attr *domain_attr = nullptr;
    fabric::fabric_attr *fabric_attr = nullptr;
    fid_nic *nic = nullptr;
};

/** Providers matching @p hints, best first (fi_getinfo).
 *
 * A provider answers if it offers every capability in hints->caps (secondary
 * capabilities may be added), every mode bit it requires is in hints->mode
 * (as libfabric: hints->mode 0 accepts none), and every attribute set in
 * the hints is met: endpoint type, protocol, address format, threading,
 * progress, AV type, MR mode (the provider's required bits must be in the
 * hints; FI_MR_BASIC / FI_MR_SCALABLE are read as their v1.5 equivalents),
 * sizes not above its limits, ordering bits it guarantees, tag format,
 * names, open fabric/domain handles. Unset (0 / UNSPEC) fields match
 * anything.
 * Attributes are filled on output: the caller gets the provider's actual
 * values (sizes raised to what was asked when within limits).
 * SHUNT_PROVIDER selects/excludes providers (FI_PROVIDER syntax).
 *
 * @param version API version the caller was written for (FI_VERSION(2,5));
 *   versions above FI_API_VERSION are refused.
 * @param node, service address to resolve (provider's address format) or null.
 * @param flags FI_SOURCE (node/service are the local address), FI_NUMERICHOST,
 *   FI_PROV_ATTR_ONLY (only fabric attributes are filled).
 * @param hints may be null: every provider, every endpoint type.
 * @param out list of results; written on success only; free with freeinfo.
 * @return 0; -FI_ENODATA nothing matches; -FI_ENOSYS version too new;
 *   -FI_EINVAL null @p out or inconsistent hints (rx/tx caps not a subset of
 *   caps); -FI_ENOMEM. */
[[nodiscard]] int getinfo(std::uint32_t version, const char *node, const char *service, std::uint64_t flags,
                          const info *hints, info **out);

/** A zeroed info with every attribute struct allocated (fi_allocinfo).
 *  @return the info, or null when out of memory. */
info *allocinfo();

/** Deep copy of one info (fi_dupinfo); @p in null gives allocinfo().
 *  The copy's next is null. @return the copy or null (out of memory). */
info *dupinfo(const info *in);

/** Free a list of infos and everything they own (fi_freeinfo). Null is fine. */
void freeinfo(info *in);

/** Text form of an info for logs and shunt-info (like fi_tostr(FI_TYPE_INFO)).
 *  @param in info (null gives "(null)"); @param buf, len output buffer,
 *  always NUL terminated when len > 0. @return characters the full text
 *  needs (as snprintf). */
std::size_t info_tostr(const info *in, char *buf, std::size_t len);

} // namespace shunt::fabric
