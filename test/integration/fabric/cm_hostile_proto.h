// Requests from the CM tests to their hostile process (cm_hostile.cpp), over
// a socketpair it inherits as fd 3: a request, then len bytes.
#pragma once

#include <cstdint>

#include "fab_common.h"
#include "vq/types.h"

namespace shunt::test::cm_hostile {

using fab::read_all;
using fab::write_all;

enum op : std::uint32_t {
    hello = 1, ///< → addr: its UD QP (on the provider's CM Q_Key)
    send,      ///< UD datagrams to `to`: the list that follows ([u32 length][bytes], each at most 4096
               ///< bytes), n times over; a: vary_byte (then byte b of the i-th one sent is i * 37 + 11)
               ///< → rc when all left its send queue
    rc,        ///< a new RC QP in INIT (nobody owns its ring), remote read and write allowed → qpn
    recv,      ///< the oldest datagram received, waiting up to a ms → rc, len, then the bytes
    forget,    ///< drop what it received → len: how many
    quit,
    rc_connect, ///< RC QP a (one `rc` made) to RTR and RTS, connected to `to` → rc
    rc_send,    ///< sends with immediate b (as given: network order) on RC QP a: the list that follows
                ///< ([u32 length][bytes], each at most 4096), n times over; it takes no receive on that QP
                ///< → rc when all completed
    region,     ///< a bytes registered for remote read and write, byte i region_byte(i) → qpn: its rkey,
                ///< then its address (8 bytes)
    rc_take,    ///< take n messages received on RC QP a (posting receives for them), waiting up to b ms
                ///< → rc (0: all n), then a taken per message, oldest first
    ud,         ///< another UD QP on the CM Q_Key (another address of the same process); what it
                ///< receives joins what `recv` takes → addr
};
/** What rc_take gives of one message: its immediate (as received), its
 *  length and its first 16 bytes (zeros beyond the length). */
struct taken {
    std::uint32_t imm = 0;
    std::uint32_t len = 0;
    std::uint8_t head[16] = {};
};
/** Byte @p i of a region the hostile process made. */
inline std::uint8_t region_byte(std::uint64_t i) { return std::uint8_t((i * 7 + 3 + (i >> 9)) & 0xff); }
inline constexpr std::uint64_t vary_byte = 1;
inline constexpr std::uint32_t max_request = 1 << 22; ///< bytes following a request

struct request {
    std::uint32_t op = 0;
    std::uint32_t n = 1;
    std::uint32_t len = 0;
    std::uint32_t pad = 0;
    std::uint64_t a = 0, b = 0;
    vq::qp_addr to{};
};
struct response {
    std::int32_t rc = 0;
    std::uint32_t len = 0;
    std::uint32_t qpn = 0;
    std::uint32_t pad = 0;
    vq::qp_addr addr{};
};

} // namespace shunt::test::cm_hostile
