/* The vq provider's wire protocol on RC QPs (private).
 *
 * Every message is one vq send_imm. Its immediate (network byte order) is
 * the header word:
 *
 *     31      24 23     16 15               0
 *     |   op    |  flags  |   rx context    |
 *
 * and its payload starts with the fields the flags announce, in this order:
 * the tag (8 bytes, wf_tagged), the sender's id for an acknowledgement (8,
 * wf_ack), remote CQ data (4, wf_data); then the op's own payload. A message
 * of the application of up to max_inline_slot bytes (minus a tag) is
 * therefore one ring slot: one line written by the sender, one read by the
 * receiver. A message larger than one lent receive goes through the ring
 * in fragments: w_frag_first carries the fields and the message's length,
 * w_frag the rest, in order on one QP (fragments of two messages never
 * interleave: a sender posts all of one message in one vq batch). On a
 * connection whose two ends agreed to stamp (cm_f_one_way), messages go as
 * w_eager_ts, w_rts_ts and w_frag_first_ts: the sender's TSC (8 bytes) in
 * front of the fields, then exactly what w_eager, w_rts and w_frag_first
 * carry; every other op is unchanged. Peers are
 * the same code: every field is in host order except
 * the immediate, and every field a peer wrote is checked before use. */
#pragma once

#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace shunt::prov::vqprov {

enum : std::uint8_t {
    w_eager = 1,       ///< a whole message: [fields] payload
    w_rts = 2,         ///< rendezvous: [fields, wf_ack always] rndv_desc of the sender's buffer
    w_fin = 3,         ///< fin_body: a pull or push is done, a delivery was acknowledged, an RMA was executed
    w_shutdown = 4,    ///< MSG: the peer closed
    w_write = 5,       ///< RMA write into private memory: rma_hdr then the data
    w_write_rts = 6,   ///< large RMA write: rma_hdr then rndv_desc of the initiator's buffer (the target pulls)
    w_read_req = 7,    ///< RMA read: rma_hdr [then rndv_desc of the initiator's buffer when large: the target pushes]
    w_read_resp = 8,   ///< small read: id (8) then the data
    w_atomic_req = 9,  ///< atomic_hdr
    w_atomic_resp = 10,///< fin_body then the old value (8)
    w_frag_first = 11, ///< first fragment of a larger message: [fields] total (8) payload
    w_frag = 12,       ///< next fragment of the message in progress on this QP: payload
    w_rma_note = 13,   ///< rma_note: a direct RMA or atomic on the receiver's memory is done (FI_RMA_EVENT)
    w_eager_ts = 14,   ///< stamped connection: TSC (8) then as w_eager
    w_rts_ts = 15,     ///< stamped connection: TSC (8) then as w_rts
    w_frag_first_ts = 16, ///< stamped connection: TSC (8) then as w_frag_first
    /** RDM: the requester's first message on a connection it asked for
     *  with a REQ (no body): its QP is connected to the one the REP named,
     *  so the connection is finished (conn.cpp, "half-open"). */
    w_hello = 17,
};
/** The op a stamped op carries after its stamp. */
constexpr std::uint8_t unstamped_op(std::uint8_t op) noexcept
{
    return op == w_eager_ts ? w_eager : op == w_rts_ts ? w_rts : w_frag_first;
}
inline constexpr std::size_t stamp_len = 8; ///< the TSC in front of a stamped op's fields
enum : std::uint8_t { wf_tagged = 1, wf_data = 2, wf_ack = 4, wf_complete = 8 };

constexpr std::uint32_t imm_of(std::uint8_t op, std::uint8_t flags, std::uint16_t rx) noexcept
{
    return std::uint32_t(op) << 24 | std::uint32_t(flags) << 16 | rx;
}
inline std::uint32_t imm_wire(std::uint8_t op, std::uint8_t flags, std::uint16_t rx) noexcept
{
    return htonl(imm_of(op, flags, rx));
}
struct hdr_word {
    std::uint8_t op, flags;
    std::uint16_t rx;
};
inline hdr_word hdr_of(std::uint32_t wire) noexcept
{
    std::uint32_t h = ntohl(wire);
    return {std::uint8_t(h >> 24), std::uint8_t(h >> 16), std::uint16_t(h)};
}

/** Bytes of the fields by the three field flags (wf_tagged 8, wf_data 4,
 *  wf_ack 8): one load on the receive path instead of three tests. */
inline constexpr std::uint8_t fields_len_of[8] = {0, 8, 4, 12, 8, 16, 12, 20};
static_assert(wf_tagged == 1 && wf_data == 2 && wf_ack == 4, "fields_len_of is indexed by these bits");
/** Bytes the flags' fields take at the start of the payload. */
constexpr std::size_t fields_len(std::uint8_t flags) noexcept
{
    return fields_len_of[flags & (wf_tagged | wf_data | wf_ack)];
}
inline constexpr std::size_t fields_max = 20;
static_assert(fields_len(wf_tagged | wf_data | wf_ack) == fields_max);

/** The fields of a received message. */
struct msg_fields {
    std::uint64_t tag = 0, ack = 0;
    std::uint32_t data = 0;
};
/** Parse the fields at @p p (@p len bytes). @return bytes used, or 0 when the
 *  payload is too short for them. */
inline std::size_t parse_fields(std::uint8_t flags, const std::uint8_t *p, std::size_t len, msg_fields &f) noexcept
{
    std::size_t n = fields_len(flags);
    if (len < n)
        return 0;
    if ((flags & (wf_tagged | wf_data | wf_ack)) == wf_tagged) [[likely]] { // a tagged send
        std::memcpy(&f.tag, p, 8);
        return n;
    }
    std::size_t off = 0;
    if (flags & wf_tagged) {
        std::memcpy(&f.tag, p, 8);
        off = 8;
    }
    if (flags & wf_ack) {
        std::memcpy(&f.ack, p + off, 8);
        off += 8;
    }
    if (flags & wf_data)
        std::memcpy(&f.data, p + off, 4);
    return n;
}

/** Where a peer's buffer is, for the other side's vq RDMA: up to 4 pieces
 *  of registered memory (the iov_limit of sends). */
struct rndv_desc {
    std::uint64_t total;   ///< bytes of the whole buffer
    std::uint32_t niov;
    std::uint32_t pad;
    struct piece {
        std::uint64_t addr;
        std::uint64_t len;
        std::uint32_t rkey;
        std::uint32_t pad;
    } iov[4];
};
static_assert(sizeof(rndv_desc) == 16 + 4 * 24);
/** Bytes of a description of @p niov pieces. */
constexpr std::size_t rndv_desc_len(std::uint32_t niov) noexcept { return 16 + std::size_t(niov) * 24; }
/** Copy a peer's description out of @p p and check it. @return false when malformed. */
inline bool parse_desc(const std::uint8_t *p, std::size_t len, rndv_desc &d) noexcept
{
    if (len < 16)
        return false;
    std::memcpy(&d, p, 16);
    if (d.niov > 4 || len < rndv_desc_len(d.niov))
        return false;
    std::memcpy(d.iov, p + 16, std::size_t(d.niov) * 24);
    std::uint64_t sum = 0;
    for (std::uint32_t i = 0; i < d.niov; i++) {
        if (d.iov[i].len > (std::uint64_t(1) << 40))
            return false;
        sum += d.iov[i].len;
    }
    return sum == d.total;
}

/** Body of w_fin and the head of w_atomic_resp. */
struct fin_body {
    std::uint64_t id;     ///< the id the request carried
    std::int32_t err;     ///< 0, or a positive fabric error code
    std::uint32_t pad;
};
static_assert(sizeof(fin_body) == 16);

/** Head of every RMA request to private memory. */
struct rma_hdr {
    std::uint64_t addr;   ///< target address (FI_MR_VIRT_ADDR)
    std::uint64_t key;    ///< the target region's key
    std::uint64_t len;    ///< bytes
    std::uint64_t id;     ///< the initiator's tx id (fin / response)
    std::uint32_t data;   ///< remote CQ data (wf_data)
    std::uint32_t pad;
};
static_assert(sizeof(rma_hdr) == 40);

/** An atomic on private memory, executed by the target's CPU. */
struct atomic_hdr {
    std::uint64_t addr;
    std::uint64_t key;
    std::uint64_t id;
    std::uint64_t operand;
    std::uint64_t compare;
    std::uint32_t aop;    ///< fabric::op: FI_SUM, FI_ATOMIC_READ, FI_CSWAP
    std::uint32_t fetch;  ///< 1: the old value is wanted
};
static_assert(sizeof(atomic_hdr) == 48);

/** What a remote access did, for the target's FI_RMA_EVENT counters
 *  (fi_endpoint(3) ep_bind FI_REMOTE_WRITE / FI_REMOTE_READ, fi_mr(3)
 *  mr_bind FI_REMOTE_WRITE). */
enum : std::uint32_t {
    ra_write = 1,       ///< RMA write: remote-write counter, the region's counter
    ra_read = 2,        ///< RMA read: remote-read counter
    ra_atomic = 3,      ///< base atomic: remote-write counter, the region's counter
    ra_fetch = 4,       ///< fetching or compare atomic that may write: remote-read counter, the region's counter
    ra_atomic_read = 5, ///< FI_ATOMIC_READ: remote-read counter
};

/** Body of w_rma_note: the initiator performed an RMA or atomic on the
 *  receiver's memory directly (vq RDMA), posted on the same QP after that
 *  request, so it arrives after the request's data is in place. */
struct rma_note {
    std::uint64_t addr;   ///< target address (FI_MR_VIRT_ADDR)
    std::uint64_t key;    ///< the target region's key
    std::uint64_t len;    ///< bytes
    std::uint32_t kind;   ///< ra_*
    std::uint32_t pad;
};
static_assert(sizeof(rma_note) == 32);

} // namespace shunt::prov::vqprov
