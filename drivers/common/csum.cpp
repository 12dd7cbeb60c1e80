/* drivers/common: software IPv4/TCP/UDP checksums and TSO header fix-ups
 * (see csum.h). */
#include "csum.h"

#include <bit>
#include <cstring>

namespace shunt::drv::common {

namespace {

/** Offset of the IPv4 header in @p m, or -1. */
long ipv4_offset(const std::uint8_t *m, std::size_t len) noexcept
{
    if (len >= 14 + 20) {
        unsigned et = (m[12] << 8) | m[13];
        if (et == 0x0800 && (m[14] >> 4) == 4)
            return 14;
        if (et == 0x8100 && len >= 18 + 20 && ((m[16] << 8) | m[17]) == 0x0800 && (m[18] >> 4) == 4)
            return 18;
    }
    if (len >= 20 && (m[0] >> 4) == 4 && (m[0] & 0xf) >= 5)
        return 0;
    return -1;
}

/** @p s plus the 16-bit big-endian words of @p p[0, n) (an odd last byte
 *  padded with zero), not folded. The one's-complement sum does not depend
 *  on byte order (RFC 1071 2(B)): the words are added as host-order 32-bit
 *  loads into 64-bit sums, folded to 16 bits and swapped once at the end. */
std::uint32_t sum16(const std::uint8_t *p, std::size_t n, std::uint32_t s) noexcept
{
    std::uint64_t a = 0, b = 0;
    for (; n >= 16; p += 16, n -= 16) {
        std::uint64_t x, y;
        std::memcpy(&x, p, 8);
        std::memcpy(&y, p + 8, 8);
        a += (x & 0xffffffffu) + (x >> 32);
        b += (y & 0xffffffffu) + (y >> 32);
    }
    a += b;
    for (; n >= 4; p += 4, n -= 4) {
        std::uint32_t x;
        std::memcpy(&x, p, 4);
        a += x;
    }
    if (n >= 2) {
        std::uint16_t x;
        std::memcpy(&x, p, 2);
        a += x;
        p += 2;
        n -= 2;
    }
    if (n) {
        std::uint8_t last[2] = {p[0], 0};
        std::uint16_t x;
        std::memcpy(&x, last, 2);
        a += x;
    }
    a = (a & 0xffffffffu) + (a >> 32);
    a = (a & 0xffffffffu) + (a >> 32);
    a = (a & 0xffffu) + (a >> 16);
    a = (a & 0xffffu) + (a >> 16);
    auto w = static_cast<std::uint16_t>(a);
    if constexpr (std::endian::native == std::endian::little)
        w = static_cast<std::uint16_t>(w << 8 | w >> 8);
    return s + w;
}

std::uint16_t fold(std::uint32_t s) noexcept
{
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return static_cast<std::uint16_t>(~s & 0xffff);
}

inline void put16(std::uint8_t *p, std::uint16_t v) noexcept
{
    p[0] = static_cast<std::uint8_t>(v >> 8);
    p[1] = static_cast<std::uint8_t>(v);
}
inline std::uint16_t get16(const std::uint8_t *p) noexcept { return static_cast<std::uint16_t>((p[0] << 8) | p[1]); }

} // namespace

void ip_checksums(std::uint8_t *m, std::size_t len) noexcept
{
    long off = ipv4_offset(m, len);
    if (off < 0)
        return;
    std::uint8_t *ip = m + off;
    std::size_t ihl = static_cast<std::size_t>(ip[0] & 0xf) * 4;
    if (static_cast<std::size_t>(off) + ihl > len)
        return;
    ip[10] = ip[11] = 0;
    put16(ip + 10, fold(sum16(ip, ihl, 0)));
    std::size_t tot = get16(ip + 2);
    if (tot < ihl || static_cast<std::size_t>(off) + tot > len)
        tot = len - static_cast<std::size_t>(off); // trust the buffer, not a bad length
    std::uint8_t proto = ip[9];
    std::uint8_t *l4 = ip + ihl;
    std::size_t l4len = tot - ihl;
    std::size_t csum_at;
    if (proto == 6 && l4len >= 20)
        csum_at = 16;
    else if (proto == 17 && l4len >= 8)
        csum_at = 6;
    else
        return;
    l4[csum_at] = l4[csum_at + 1] = 0;
    std::uint32_t s = sum16(ip + 12, 8, 0); // source and destination addresses
    s += proto;
    s += static_cast<std::uint32_t>(l4len);
    std::uint16_t c = fold(sum16(l4, l4len, s));
    if (proto == 17 && c == 0)
        c = 0xffff;
    put16(l4 + csum_at, c);
}

bool ip_checksums_valid(const std::uint8_t *m, std::size_t len) noexcept
{
    long off = ipv4_offset(m, len);
    if (off < 0)
        return false;
    const std::uint8_t *ip = m + off;
    std::size_t ihl = static_cast<std::size_t>(ip[0] & 0xf) * 4;
    std::size_t tot = get16(ip + 2);
    if (ihl < 20 || tot < ihl || static_cast<std::size_t>(off) + tot > len)
        return false;
    if (fold(sum16(ip, ihl, 0)) != 0)
        return false;
    std::uint8_t proto = ip[9];
    const std::uint8_t *l4 = ip + ihl;
    std::size_t l4len = tot - ihl;
    if (proto == 17 && l4len >= 8 && get16(l4 + 6) == 0)
        return true; // UDP without a checksum
    if (!((proto == 6 && l4len >= 20) || (proto == 17 && l4len >= 8)))
        return false;
    std::uint32_t s = sum16(ip + 12, 8, 0) + proto + static_cast<std::uint32_t>(l4len);
    return fold(sum16(l4, l4len, s)) == 0;
}

void tso_fixup(std::uint8_t *m, std::size_t hdr_sz, std::size_t payload, std::uint32_t seg_index,
               std::uint32_t seq_off, bool last) noexcept
{
    long off = ipv4_offset(m, hdr_sz + payload);
    if (off < 0)
        return;
    std::uint8_t *ip = m + off;
    std::size_t ihl = static_cast<std::size_t>(ip[0] & 0xf) * 4;
    if (static_cast<std::size_t>(off) + ihl > hdr_sz)
        return;
    put16(ip + 2, static_cast<std::uint16_t>(hdr_sz - static_cast<std::size_t>(off) + payload));
    put16(ip + 4, static_cast<std::uint16_t>(get16(ip + 4) + seg_index));
    if (ip[9] == 6 && static_cast<std::size_t>(off) + ihl + 20 <= hdr_sz) {
        std::uint8_t *tcp = ip + ihl;
        std::uint32_t seq = (static_cast<std::uint32_t>(tcp[4]) << 24) | (tcp[5] << 16) | (tcp[6] << 8) | tcp[7];
        seq += seq_off;
        tcp[4] = static_cast<std::uint8_t>(seq >> 24);
        tcp[5] = static_cast<std::uint8_t>(seq >> 16);
        tcp[6] = static_cast<std::uint8_t>(seq >> 8);
        tcp[7] = static_cast<std::uint8_t>(seq);
        if (!last)
            tcp[13] &= static_cast<std::uint8_t>(~0x09); // FIN and PSH only on the last segment
    }
}

} // namespace shunt::drv::common
