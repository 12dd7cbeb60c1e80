/* Provider extension: TCP-style segmentation offload (TSO) on datagram
 * endpoints. Opened by name with open_ops() on an endpoint:
 *
 *     const shunt::fabric::ops_tso *tso;
 *     int rc = open_ops(&ep->fid, FI_SHUNT_TSO_OPS_1, 0, (void **)&tso, nullptr);
 *
 * -FI_ENOSYS means the endpoint has no TSO (e.g. not FI_EP_DGRAM).
 * send_tso sends @p hdr followed by payload bytes cut into segments of at
 * most @p mss bytes: each datagram carries a copy of the header and the
 * next segment, so the receiver gets ceil(payload / mss) messages, each
 * hdr_len + segment bytes, in order (as vq's send_tso). One transmit
 * completion is generated for the whole call. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>
#include <sys/uio.h>

#include "fabric/endpoint.h"

namespace shunt::fabric {

/** Name of version 1 of the TSO extension. */
inline constexpr const char *FI_SHUNT_TSO_OPS_1 = "shunt_tso_v1";

/** Limits of an endpoint's TSO. */
struct tso_attr {
    std::size_t max_hdr_len = 0;     ///< largest header copied into each segment
    std::size_t max_mss = 0;         ///< largest segment payload
    std::size_t max_payload = 0;     ///< largest total payload of one call
    std::size_t max_segments = 0;    ///< most segments one call may produce
};

struct tso_attr;
/** TSO extension operations (version 1). */
struct ops_tso {
    std::size_t size = sizeof(ops_tso);
    /** Limits. @return 0; -FI_EINVAL null. */
    int (*query)(fid_ep *ep, tso_attr *attr) = detail::nosys<int>;
    /** Send a header and a segmented payload to @p dest.
     *  @param hdr, hdr_len header copied before each segment (<= max_hdr_len).
     *  @param payload, count, desc payload gather list (count <= iov_limit).
     *  @param mss segment size, 0 < mss <= max_mss.
     *  @param flags operation flags (FI_COMPLETION with selective completion).
     *  @return 0 posted; -FI_EAGAIN full; -FI_EINVAL bad sizes or null;
     *  -FI_EMSGSIZE payload above max_payload or too many segments;
     *  -FI_EOPBADSTATE not enabled. */
    ssize_t (*send_tso)(fid_ep *ep, const void *hdr, std::size_t hdr_len, const iovec *payload, void **desc,
                        std::size_t count, std::size_t mss, fi_addr_t dest, std::uint64_t flags,
                        void *context) = detail::nosys<ssize_t>;
};

} // namespace shunt::fabric
