/* drivers/ethdev: the RoCEv2 wire format (IBTA Annex A17 over IPv4/UDP 4791).
 *
 *   Ethernet (14) | IPv4 (20) | UDP (8, dst 4791) | BTH (12) | ext headers |
 *   payload | pad (0..3, to a 4-byte multiple) | ICRC (4)
 *
 * Extension headers per opcode (IBTA vol. 1, 9.2-9.4): RETH (16: VA, R_Key,
 * DMA length), AETH (4: syndrome, MSN), AtomicETH (28: VA, R_Key, swap/add,
 * compare), AtomicAckETH (8: original value), ImmDt (4), IETH (4: R_Key to
 * invalidate), DETH (8: Q_Key, source QP), FETH (4: flush type and level).
 * Multi-byte fields are big-endian. Everything here is header-only and
 * allocation-free: it runs per packet. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace shunt::drv::ethdev::wire {

inline constexpr std::uint16_t roce_udp_port = 4791;
inline constexpr std::uint16_t ethertype_ipv4 = 0x0800, ethertype_arp = 0x0806, ethertype_vlan = 0x8100;
inline constexpr std::size_t eth_len = 14, ip_len = 20, udp_len = 8, bth_len = 12;
inline constexpr std::size_t reth_len = 16, aeth_len = 4, atomic_eth_len = 28, atomic_ack_len = 8;
inline constexpr std::size_t imm_len = 4, ieth_len = 4, deth_len = 8, feth_len = 4, icrc_len = 4;
inline constexpr std::size_t ip_off = eth_len, udp_off = ip_off + ip_len, bth_off = udp_off + udp_len;
/** Largest BTH + extension headers of any opcode (BTH + AtomicETH). */
inline constexpr std::size_t max_transport_hdr = bth_len + atomic_eth_len;
inline constexpr std::uint16_t default_pkey = 0xffff;

/* ---- big-endian loads and stores ---- */
inline std::uint16_t ld16(const std::uint8_t *p) noexcept { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }
inline std::uint32_t ld24(const std::uint8_t *p) noexcept
{
    return static_cast<std::uint32_t>(p[0]) << 16 | static_cast<std::uint32_t>(p[1]) << 8 | p[2];
}
inline std::uint32_t ld32(const std::uint8_t *p) noexcept
{
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}
inline std::uint64_t ld64(const std::uint8_t *p) noexcept
{
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}
inline void st16(std::uint8_t *p, std::uint16_t v) noexcept
{
    p[0] = static_cast<std::uint8_t>(v >> 8);
    p[1] = static_cast<std::uint8_t>(v);
}
inline void st24(std::uint8_t *p, std::uint32_t v) noexcept
{
    p[0] = static_cast<std::uint8_t>(v >> 16);
    p[1] = static_cast<std::uint8_t>(v >> 8);
    p[2] = static_cast<std::uint8_t>(v);
}
inline void st32(std::uint8_t *p, std::uint32_t v) noexcept
{
    v = __builtin_bswap32(v);
    std::memcpy(p, &v, 4);
}
inline void st64(std::uint8_t *p, std::uint64_t v) noexcept
{
    v = __builtin_bswap64(v);
    std::memcpy(p, &v, 8);
}

/* ---- BTH opcodes (IBTA 9.2, table 38) ---- */
enum : std::uint8_t {
    op_rc = 0x00, op_uc = 0x20, op_ud = 0x60, // transport bits (7..5)
    // low five bits, the same for RC and UC where both define them
    op_send_first = 0x00, op_send_middle = 0x01, op_send_last = 0x02, op_send_last_imm = 0x03,
    op_send_only = 0x04, op_send_only_imm = 0x05, op_write_first = 0x06, op_write_middle = 0x07,
    op_write_last = 0x08, op_write_last_imm = 0x09, op_write_only = 0x0a, op_write_only_imm = 0x0b,
    op_read_req = 0x0c, op_read_resp_first = 0x0d, op_read_resp_middle = 0x0e, op_read_resp_last = 0x0f,
    op_read_resp_only = 0x10, op_ack = 0x11, op_atomic_ack = 0x12, op_cmp_swap = 0x13, op_fetch_add = 0x14,
    op_send_last_inv = 0x16, op_send_only_inv = 0x17, op_flush = 0x1c,
    // UD (full opcodes)
    op_ud_send_only = 0x64, op_ud_send_only_imm = 0x65,
};

/** Extension headers present after the BTH (bits of op_desc::hdrs). */
enum : std::uint8_t {
    h_reth = 1, h_aeth = 2, h_atomic = 4, h_atomic_ack = 8, h_imm = 16, h_ieth = 32, h_deth = 64, h_feth = 128,
};
/** What an opcode is (op_desc::kind). */
enum : std::uint8_t {
    k_invalid = 0, k_send, k_write, k_read_req, k_read_resp, k_ack, k_atomic_ack, k_atomic, k_flush,
};
/** Position of a packet in its message (op_desc::pos). */
enum : std::uint8_t { p_first = 1, p_middle = 2, p_last = 4, p_only = p_first | p_last };

struct op_desc {
    std::uint8_t kind;  ///< k_*, k_invalid for opcodes this driver does not speak
    std::uint8_t pos;   ///< p_*
    std::uint8_t hdrs;  ///< h_* extension headers
    std::uint8_t hlen;  ///< BTH + extension headers, bytes
};

constexpr std::uint8_t hdr_bytes(std::uint8_t h) noexcept
{
    return static_cast<std::uint8_t>(bth_len + ((h & h_reth) ? reth_len : 0) + ((h & h_aeth) ? aeth_len : 0) +
                                     ((h & h_atomic) ? atomic_eth_len : 0) +
                                     ((h & h_atomic_ack) ? atomic_ack_len : 0) + ((h & h_imm) ? imm_len : 0) +
                                     ((h & h_ieth) ? ieth_len : 0) + ((h & h_deth) ? deth_len : 0) +
                                     ((h & h_feth) ? feth_len : 0));
}

/** The opcode table for RC (base 0x00), UC (0x20) and UD (0x60). */
struct op_table {
    op_desc d[256] = {};
    constexpr op_table()
    {
        auto set = [this](unsigned op, std::uint8_t kind, std::uint8_t pos, std::uint8_t h) {
            d[op] = {kind, pos, h, hdr_bytes(h)};
        };
        for (unsigned base : {0x00u, 0x20u}) {
            set(base | op_send_first, k_send, p_first, 0);
            set(base | op_send_middle, k_send, p_middle, 0);
            set(base | op_send_last, k_send, p_last, 0);
            set(base | op_send_last_imm, k_send, p_last, h_imm);
            set(base | op_send_only, k_send, p_only, 0);
            set(base | op_send_only_imm, k_send, p_only, h_imm);
            set(base | op_write_first, k_write, p_first, h_reth);
            set(base | op_write_middle, k_write, p_middle, 0);
            set(base | op_write_last, k_write, p_last, 0);
            set(base | op_write_last_imm, k_write, p_last, h_imm);
            set(base | op_write_only, k_write, p_only, h_reth);
            set(base | op_write_only_imm, k_write, p_only, h_reth | h_imm);
        }
        // Only RC has reads, atomics, acknowledgements and flush.
        set(op_read_req, k_read_req, p_only, h_reth);
        set(op_read_resp_first, k_read_resp, p_first, h_aeth);
        set(op_read_resp_middle, k_read_resp, p_middle, 0);
        set(op_read_resp_last, k_read_resp, p_last, h_aeth);
        set(op_read_resp_only, k_read_resp, p_only, h_aeth);
        set(op_ack, k_ack, p_only, h_aeth);
        set(op_atomic_ack, k_atomic_ack, p_only, h_aeth | h_atomic_ack);
        set(op_cmp_swap, k_atomic, p_only, h_atomic);
        set(op_fetch_add, k_atomic, p_only, h_atomic);
        set(op_flush, k_flush, p_only, h_feth | h_reth);
        // Send with invalidate exists only for RC (and XRC): IBTA reserves UC's 0x36/0x37.
        set(op_send_last_inv, k_send, p_last, h_ieth);
        set(op_send_only_inv, k_send, p_only, h_ieth);
        set(op_ud_send_only, k_send, p_only, h_deth);
        set(op_ud_send_only_imm, k_send, p_only, h_deth | h_imm);
    }
};
inline constexpr op_table ops{};

/* ---- BTH fields ---- */
inline constexpr std::uint8_t bth_se = 0x80, bth_migreq = 0x40, bth_a_bit = 0x80;
inline std::uint8_t bth_opcode(const std::uint8_t *b) noexcept { return b[0]; }
inline bool bth_solicited(const std::uint8_t *b) noexcept { return b[1] & bth_se; }
inline unsigned bth_pad(const std::uint8_t *b) noexcept { return (b[1] >> 4) & 3; }
inline unsigned bth_tver(const std::uint8_t *b) noexcept { return b[1] & 0xf; }
inline std::uint16_t bth_pkey(const std::uint8_t *b) noexcept { return ld16(b + 2); }
inline std::uint32_t bth_dqpn(const std::uint8_t *b) noexcept { return ld24(b + 5); }
inline bool bth_ackreq(const std::uint8_t *b) noexcept { return b[8] & bth_a_bit; }
inline std::uint32_t bth_psn(const std::uint8_t *b) noexcept { return ld24(b + 9); }

/** Write a BTH. */
inline void put_bth(std::uint8_t *b, std::uint8_t opcode, bool se, unsigned pad, std::uint32_t dqpn, bool ackreq,
                    std::uint32_t psn) noexcept
{
    b[0] = opcode;
    b[1] = static_cast<std::uint8_t>((se ? bth_se : 0) | bth_migreq | (pad << 4));
    st16(b + 2, default_pkey);
    b[4] = 0;
    st24(b + 5, dqpn);
    b[8] = ackreq ? bth_a_bit : 0;
    st24(b + 9, psn);
}

/* ---- PSNs: 24-bit sequence numbers, compared modulo 2^24 ---- */
inline constexpr std::uint32_t psn_mask = 0xffffff;
inline std::uint32_t psn_add(std::uint32_t a, std::uint32_t n) noexcept { return (a + n) & psn_mask; }
/** a - b as a signed distance in (-2^23, 2^23]. */
inline std::int32_t psn_diff(std::uint32_t a, std::uint32_t b) noexcept
{
    return static_cast<std::int32_t>((a - b) << 8) >> 8;
}

/* ---- AETH syndromes (IBTA 9.7.5.1, table 43) ---- */
enum : std::uint8_t {
    aeth_ack = 0x00, aeth_rnr = 0x20, aeth_nak = 0x60,   // bits 6..5 of the syndrome
    nak_psn_seq = 0, nak_inv_req = 1, nak_rem_access = 2, nak_rem_op = 3, nak_inv_rd_req = 4,
    aeth_no_credits = 0x1f, // ACK: credit count field "invalid" (no end-to-end flow control)
};
inline std::uint8_t aeth_syndrome(const std::uint8_t *a) noexcept { return a[0]; }
inline std::uint32_t aeth_msn(const std::uint8_t *a) noexcept { return ld24(a + 1); }
inline void put_aeth(std::uint8_t *a, std::uint8_t syndrome, std::uint32_t msn) noexcept
{
    a[0] = syndrome;
    st24(a + 1, msn);
}

/** RNR timer field (5 bits) to microseconds (IBTA 9.7.5.2.8, table 45). */
inline std::uint32_t rnr_timer_us(unsigned code) noexcept
{
    static constexpr std::uint32_t t[32] = {
        655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
        2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760,
        327680, 491520,
    };
    return t[code & 31];
}

/** Path MTU enumeration (IBV_MTU_256 = 1 .. IBV_MTU_4096 = 5) to bytes; 0 for others. */
constexpr std::uint32_t mtu_bytes(unsigned e) noexcept { return e >= 1 && e <= 5 ? 128u << e : 0; }

/* ---- IPv4 ---- */
/** Ones'-complement sum of @p n bytes (n even) added to @p s. */
inline std::uint32_t sum16(const std::uint8_t *p, std::size_t n, std::uint32_t s = 0) noexcept
{
    for (; n >= 2; p += 2, n -= 2)
        s += static_cast<std::uint32_t>(p[0] << 8 | p[1]);
    if (n)
        s += static_cast<std::uint32_t>(p[0]) << 8;
    return s;
}
inline std::uint16_t fold16(std::uint32_t s) noexcept
{
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    return static_cast<std::uint16_t>(~s);
}
/** The unfolded sum ip_hdr_sum folds: the header's five 32-bit words in
 *  host order. */
inline std::uint64_t ip_hdr_words(const std::uint8_t *ip) noexcept
{
    std::uint64_t s = 0;
    for (std::size_t i = 0; i < ip_len; i += 4) {
        std::uint32_t w;
        std::memcpy(&w, ip + i, 4);
        s += w;
    }
    return s;
}
/** A sum of 32-bit words folded to 16 bits (end-around carries), not
 *  complemented. */
inline std::uint16_t fold_words(std::uint64_t s) noexcept
{
    s = (s & 0xffffffffu) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    return static_cast<std::uint16_t>(s);
}
/** The one's complement sum of the 20-byte IPv4 header at @p ip, folded to
 *  16 bits, in the header's own byte order: five 32-bit words added in
 *  host order (RFC 1071: the sum does not depend on the byte order; the
 *  result comes out byte-swapped with it, as it is stored). */
inline std::uint16_t ip_hdr_sum(const std::uint8_t *ip) noexcept { return fold_words(ip_hdr_words(ip)); }
/** The checksum field of an IPv4 header whose words, with total length,
 *  identification and checksum zero, add up to @p sum (ip_hdr_words),
 *  once @p tot and @p id are stored, in the header's byte order (ready to
 *  store at byte 10), without reading the header back. */
inline std::uint16_t ip_csum_of(std::uint64_t sum, std::uint16_t tot, std::uint16_t id) noexcept
{
    // Each field as its two stored bytes read in host order: the half of
    // its word it sits in does not matter once the sum is folded.
    auto stored = [](std::uint16_t v) {
        const std::uint8_t b[2] = {static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v)};
        std::uint16_t h;
        std::memcpy(&h, b, 2);
        return h;
    };
    return static_cast<std::uint16_t>(~fold_words(sum + stored(tot) + stored(id)));
}
/** Is the checksum of the 20-byte IPv4 header at @p ip right? */
inline bool ip_hdr_ok(const std::uint8_t *ip) noexcept { return ip_hdr_sum(ip) == 0xffff; }

} // namespace shunt::drv::ethdev::wire
