// A decoder and builder for the frames tests check on the wire, independent
// of the drivers that produce them: Ethernet / IPv4 / TCP or UDP with both
// checksums verified.
#pragma once

#include <cstddef>
#include <cstdint>
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

} // namespace shunt::test
