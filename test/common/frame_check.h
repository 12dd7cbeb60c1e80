// A decoder and builder for the frames tests check on the wire, independent
// of the drivers that produce them: Ethernet / IPv4 / TCP or UDP with both
// checksums verified, and RoCEv2 (IPv4 / UDP 4791 / BTH ...) with its ICRC
// computed bit by bit here (IBTA Annex A17.3.3), not with a driver's CRC code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace shunt::test {

inline std::uint16_t be16(const std::uint8_t *p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }
inline std::uint32_t be32(const std::uint8_t *p)
{
    return static_cast<std::uint32_t>(p[0]) << 24 | static_cast<std::uint32_t>(p[1]) << 16 |
           static_cast<std::uint32_t>(p[2]) << 8 | p[3];
}
/** RFC 1071 sum of @p n bytes, folded. */
inline std::uint16_t ones_sum(const std::uint8_t *p, std::size_t n, std::uint32_t s = 0)
{
    for (std::size_t i = 0; i + 1 < n; i += 2)
        s += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
    if (n & 1)
        s += static_cast<std::uint32_t>(p[n - 1]) << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return static_cast<std::uint16_t>(s);
}
struct tcp_frame {
    bool ok = false;
    std::uint16_t ip_len = 0, ip_id = 0;
    std::uint32_t seq = 0;
    std::uint8_t flags = 0;
    bool ip_csum_ok = false, l4_csum_ok = false;
    const std::uint8_t *payload = nullptr;
    std::size_t payload_len = 0;
};
/** Decode Ethernet / IPv4 / TCP (or UDP, seq 0) and verify both checksums. */
inline tcp_frame decode(const std::uint8_t *f, std::size_t n)
{
    tcp_frame t;
    if (n < 14 + 20 || be16(f + 12) != 0x0800)
        return t;
    const std::uint8_t *ip = f + 14;
    std::size_t ihl = (ip[0] & 0xf) * 4u;
    t.ip_len = be16(ip + 2);
    t.ip_id = be16(ip + 4);
    if (ihl < 20 || std::size_t{14} + t.ip_len > n || t.ip_len < ihl)
        return t;
    t.ip_csum_ok = ones_sum(ip, ihl) == 0xffff;
    const std::uint8_t *l4 = ip + ihl;
    std::size_t l4n = t.ip_len - ihl;
    std::uint32_t pseudo = be16(ip + 12) + be16(ip + 14) + be16(ip + 16) + be16(ip + 18) + ip[9] +
                           static_cast<std::uint32_t>(l4n);
    t.l4_csum_ok = ones_sum(l4, l4n, pseudo) == 0xffff;
    if (ip[9] == 6) {
        std::size_t th = (l4[12] >> 4) * 4u;
        t.seq = be32(l4 + 4);
        t.flags = l4[13];
        t.payload = l4 + th;
        t.payload_len = l4n - th;
    } else {
        t.payload = l4 + 8;
        t.payload_len = l4n - 8;
    }
    t.ok = true;
    return t;
}

/** An Ethernet / IPv4 / TCP header of @p hlen = 54 bytes with zero checksums. */
inline std::vector<std::uint8_t> tcp_header(std::uint32_t seq, std::uint16_t id, std::uint8_t flags = 0x18)
{
    std::vector<std::uint8_t> h(54, 0);
    for (int i = 0; i < 6; i++) {
        h[i] = static_cast<std::uint8_t>(0x02 + i);
        h[6 + i] = static_cast<std::uint8_t>(0x12 + i);
    }
    h[12] = 0x08;
    std::uint8_t *ip = h.data() + 14;
    ip[0] = 0x45;
    ip[4] = static_cast<std::uint8_t>(id >> 8);
    ip[5] = static_cast<std::uint8_t>(id);
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 6;
    ip[12] = 10, ip[13] = 1, ip[14] = 2, ip[15] = 3;
    ip[16] = 10, ip[17] = 4, ip[18] = 5, ip[19] = 6;
    std::uint8_t *t = ip + 20;
    t[0] = 0x30, t[1] = 0x39, t[2] = 0x00, t[3] = 0x50;
    t[4] = static_cast<std::uint8_t>(seq >> 24), t[5] = static_cast<std::uint8_t>(seq >> 16);
    t[6] = static_cast<std::uint8_t>(seq >> 8), t[7] = static_cast<std::uint8_t>(seq);
    t[12] = 0x50;
    t[13] = flags;
    t[14] = 0xff, t[15] = 0xff;
    return h;
}

/* ---- RoCEv2 ---- */

/** Reflected CRC-32 (IEEE 802.3 polynomial), bit by bit, no inversions. */
inline std::uint32_t crc32_bits(std::uint32_t crc, const std::uint8_t *p, std::size_t n)
{
    for (std::size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
    }
    return crc;
}

/** The ICRC of a RoCEv2 frame (Ethernet at @p f, IPv4 without options at 14,
 *  the ICRC in the last 4 of @p n bytes): CRC-32 over 8 bytes of ones (the
 *  masked LRH), then IPv4, UDP and BTH with their variant fields set to ones
 *  (TOS, TTL, IPv4 checksum, UDP checksum, BTH FECN/BECN/reserved byte), then
 *  the rest up to the ICRC; inverted, least significant byte first. */
inline std::uint32_t icrc_of(const std::uint8_t *f, std::size_t n)
{
    std::uint8_t m[48];
    std::memset(m, 0xff, 8);
    std::memcpy(m + 8, f + 14, 40);
    m[8 + 1] = 0xff;
    m[8 + 8] = 0xff;
    m[8 + 10] = m[8 + 11] = 0xff;
    m[8 + 26] = m[8 + 27] = 0xff;
    m[8 + 32] = 0xff;
    std::uint32_t c = crc32_bits(~0u, m, sizeof m);
    c = crc32_bits(c, f + 14 + 40, n - 14 - 40 - 4);
    return ~c;
}
/** Store icrc_of() into the last 4 bytes of the frame. */
inline void put_icrc(std::uint8_t *f, std::size_t n)
{
    std::uint32_t v = icrc_of(f, n);
    for (int i = 0; i < 4; i++)
        f[n - 4 + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

struct roce_frame {
    bool ok = false;       ///< Ethernet/IPv4/UDP 4791 with consistent lengths
    bool ip_csum_ok = false;
    bool icrc_ok = false;
    std::uint32_t src_ip = 0, dst_ip = 0; ///< host order
    std::uint16_t ip_len = 0, udp_len = 0, udp_csum = 0;
    std::uint8_t opcode = 0, pad = 0;
    bool solicited = false, ackreq = false;
    std::uint16_t pkey = 0;
    std::uint32_t dqpn = 0, psn = 0;
    const std::uint8_t *hdrs = nullptr; ///< after the BTH (extension headers, payload)
    std::size_t hdrs_len = 0;           ///< up to the pad (pad and ICRC excluded)
};
/** Decode a RoCEv2 frame (no VLAN) and check its IPv4 checksum and ICRC. */
inline roce_frame decode_roce(const std::uint8_t *f, std::size_t n)
{
    roce_frame r;
    if (n < 14 + 20 + 8 + 12 + 4 || be16(f + 12) != 0x0800 || f[14] != 0x45 || f[14 + 9] != 17)
        return r;
    const std::uint8_t *ip = f + 14, *udp = ip + 20, *bth = udp + 8;
    r.ip_len = be16(ip + 2);
    r.udp_len = be16(udp + 4);
    r.udp_csum = be16(udp + 6);
    if (be16(udp + 2) != 4791 || std::size_t{14} + r.ip_len > n || r.udp_len != r.ip_len - 20 ||
        r.udp_len < 8 + 12 + 4)
        return r;
    r.ip_csum_ok = ones_sum(ip, 20) == 0xffff;
    r.src_ip = be32(ip + 12);
    r.dst_ip = be32(ip + 16);
    r.opcode = bth[0];
    r.solicited = bth[1] & 0x80;
    r.pad = (bth[1] >> 4) & 3;
    r.pkey = be16(bth + 2);
    r.dqpn = be32(bth + 4) & 0xffffff;
    r.ackreq = bth[8] & 0x80;
    r.psn = be32(bth + 8) & 0xffffff;
    const std::size_t end = std::size_t{14} + r.ip_len;
    std::uint32_t want = icrc_of(f, end);
    const std::uint8_t *ic = f + end - 4;
    r.icrc_ok = ic[0] == static_cast<std::uint8_t>(want) && ic[1] == static_cast<std::uint8_t>(want >> 8) &&
                ic[2] == static_cast<std::uint8_t>(want >> 16) && ic[3] == static_cast<std::uint8_t>(want >> 24);
    r.hdrs = bth + 12;
    if (end - 4 < static_cast<std::size_t>(r.hdrs - f) + r.pad)
        return r;
    r.hdrs_len = end - 4 - static_cast<std::size_t>(r.hdrs - f) - r.pad;
    r.ok = true;
    return r;
}

/** A RoCEv2 UD SEND-only frame (opcode 0x64) with a valid IPv4 checksum and
 *  ICRC: @p macs = destination then source MAC, addresses in network order. */
inline std::vector<std::uint8_t> roce_ud_frame(const std::uint8_t *dst_mac, const std::uint8_t *src_mac,
                                               std::uint32_t src_ip_be, std::uint32_t dst_ip_be, std::uint32_t dqpn,
                                               std::uint32_t qkey, std::uint32_t sqpn,
                                               const std::vector<std::uint8_t> &payload, std::uint32_t psn = 0)
{
    const std::size_t pad = (4 - payload.size() % 4) % 4;
    const std::size_t udp_len = 8 + 12 + 8 + payload.size() + pad + 4;
    std::vector<std::uint8_t> f(14 + 20 + udp_len, 0);
    std::memcpy(f.data(), dst_mac, 6);
    std::memcpy(f.data() + 6, src_mac, 6);
    f[12] = 0x08;
    std::uint8_t *ip = f.data() + 14;
    ip[0] = 0x45;
    ip[2] = static_cast<std::uint8_t>((20 + udp_len) >> 8);
    ip[3] = static_cast<std::uint8_t>(20 + udp_len);
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 17;
    std::memcpy(ip + 12, &src_ip_be, 4);
    std::memcpy(ip + 16, &dst_ip_be, 4);
    std::uint16_t c = static_cast<std::uint16_t>(~ones_sum(ip, 20));
    ip[10] = static_cast<std::uint8_t>(c >> 8);
    ip[11] = static_cast<std::uint8_t>(c);
    std::uint8_t *udp = ip + 20;
    udp[0] = 0xc0;
    udp[2] = 0x12;
    udp[3] = 0xb7; // 4791
    udp[4] = static_cast<std::uint8_t>(udp_len >> 8);
    udp[5] = static_cast<std::uint8_t>(udp_len);
    std::uint8_t *bth = udp + 8;
    bth[0] = 0x64;
    bth[1] = static_cast<std::uint8_t>(pad << 4);
    bth[2] = bth[3] = 0xff;
    bth[5] = static_cast<std::uint8_t>(dqpn >> 16);
    bth[6] = static_cast<std::uint8_t>(dqpn >> 8);
    bth[7] = static_cast<std::uint8_t>(dqpn);
    bth[9] = static_cast<std::uint8_t>(psn >> 16);
    bth[10] = static_cast<std::uint8_t>(psn >> 8);
    bth[11] = static_cast<std::uint8_t>(psn);
    std::uint8_t *deth = bth + 12;
    for (int i = 0; i < 4; i++)
        deth[i] = static_cast<std::uint8_t>(qkey >> (24 - 8 * i));
    deth[5] = static_cast<std::uint8_t>(sqpn >> 16);
    deth[6] = static_cast<std::uint8_t>(sqpn >> 8);
    deth[7] = static_cast<std::uint8_t>(sqpn);
    if (!payload.empty())
        std::memcpy(deth + 8, payload.data(), payload.size());
    put_icrc(f.data(), f.size());
    return f;
}

} // namespace shunt::test
