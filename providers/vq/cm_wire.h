/* The vq provider's connection-management messages (private): UD
 * datagrams between endpoints, in host order (peers are the same code), and
 * the endpoint address they carry. */
#pragma once

#include <cstddef>
#include <cstdint>

namespace shunt::prov::vqprov {

/** Address of an endpoint (addr_format FI_FORMAT_UNSPEC: opaque binary, 64
 *  bytes): its device context's address and its UD QP. */
struct ep_addr {
    std::uint32_t qpn;    ///< the endpoint's UD QP
    std::uint8_t len;     ///< bytes of name
    char name[59];        ///< vq context address (context::addr; shm: the segment name)
};
static_assert(sizeof(ep_addr) == 64);

inline constexpr std::uint32_t cm_data_max = 128; ///< CM data of connect/accept/reject

/** CM messages (UD). */
enum : std::uint8_t { cm_req = 1, cm_rep = 2, cm_rej = 3, cm_rtu = 4 };
struct cm_msg {
    std::uint8_t op;
    std::uint8_t ep_type;
    std::uint16_t datalen;
    std::uint32_t req_qpn;   ///< requester's RC QP
    std::uint32_t rep_qpn;   ///< responder's RC QP (REP)
    std::uint32_t pad;
    ep_addr from;           ///< sender's endpoint address
    /** MSG REQ: the segment of the sender's RC QPs when it differs from
     *  from's (an endpoint that took over a passive endpoint's address);
     *  len 0 otherwise. */
    ep_addr rc_at;
    std::uint8_t data[cm_data_max];
};

} // namespace shunt::prov::vqprov
