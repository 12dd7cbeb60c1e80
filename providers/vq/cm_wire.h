/* The vq provider's connection-management messages (private): UD
 * datagrams between endpoints, in host order (peers are the same code), and
 * the endpoint address they carry. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

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
/** RDM: connections one requester process (one device address, from.name)
 *  may have accepted and not yet finished at a time (its w_hello has not
 *  arrived over the accepted QP); a REQ beyond them goes unanswered until
 *  one finishes or expires (SHUNT_VQ_CONNECT_TIMEOUT_MS), so a process that
 *  never finishes its connections holds this many of an endpoint's RC QPs,
 *  not all of them. A legitimate requester's connection is finished one
 *  round trip after the REP; a repeated REQ (every 100 ms) gets the next
 *  place. */
inline constexpr std::uint32_t cm_half_open_max = 8;

/** CM messages (UD). */
enum : std::uint8_t { cm_req = 1, cm_rep = 2, cm_rej = 3, cm_rtu = 4 };
/** cm_msg::flags (REQ and REP). cm_f_rma_event: the sender's endpoint
 *  counts remote accesses to its memory (FI_RMA_EVENT), so RMA and atomics
 *  the peer performs on it directly are each followed by a w_rma_note. */
inline constexpr std::uint32_t cm_f_rma_event = 1;
/** cm_f_one_way: the sender's endpoint stamps its messages with the TSC for
 *  one-way latency (SHUNT_TELEMETRY_ONE_WAY) and reads clock @c clock; a
 *  connection is stamped when both ends said so with the same clock. */
inline constexpr std::uint32_t cm_f_one_way = 2;
/** cm_f_eager (REQ): asked by fi_av_insert, not by an operation (no
 *  operation waits on it): accepted only while at least half of the
 *  endpoint's QP slots are free; refused silently otherwise, and asked for
 *  again, without the flag, by the requester's first operation. */
inline constexpr std::uint32_t cm_f_eager = 4;
inline constexpr std::size_t clock_id_max = 40; ///< cm_msg::clock: a boot id (36 characters), NUL-padded
struct cm_msg {
    std::uint8_t op;
    std::uint8_t ep_type;
    std::uint16_t datalen;
    std::uint32_t req_qpn;   ///< requester's RC QP
    std::uint32_t rep_qpn;   ///< responder's RC QP (REP)
    std::uint32_t flags;     ///< cm_f_* of the sender's endpoint (0 from older peers)
    ep_addr from;           ///< sender's endpoint address
    /** MSG REQ: the segment of the sender's RC QPs when it differs from
     *  from's (an endpoint that took over a passive endpoint's address);
     *  len 0 otherwise. */
    ep_addr rc_at;
    /** cm_f_one_way: the sender's env::stats::one_way_clock(), NUL-padded
     *  (compared whole, never read as a string); zero otherwise. */
    char clock[clock_id_max];
    std::uint8_t data[cm_data_max];
};

/** The CM message in the @p len bytes a peer sent at @p b, into @p m. Every
 *  field a peer wrote is checked here, before any use.
 *  @return false (m unspecified) when it is shorter than its header, names
 *  an unknown operation, a sender address that is empty or longer than its
 *  field, an rc_at longer than its field, or more CM data than cm_data_max
 *  or than arrived. */
inline bool cm_parse(const std::uint8_t *b, std::size_t len, cm_msg &m) noexcept
{
    constexpr std::size_t hdr = offsetof(cm_msg, data);
    constexpr std::size_t name_max = sizeof m.from.name;
    if (len < hdr)
        return false;
    m = cm_msg{};
    std::memcpy(&m, b, len < sizeof m ? len : sizeof m);
    return m.op >= cm_req && m.op <= cm_rtu && m.from.len != 0 && m.from.len <= name_max &&
           m.rc_at.len <= name_max && m.datalen <= cm_data_max && m.datalen <= len - hdr;
}

} // namespace shunt::prov::vqprov
