/* drivers/ethdev: CRC-32 of IEEE 802.3 (the polynomial of Ethernet's FCS,
 * zlib and RoCEv2's ICRC), and the ICRC of a RoCEv2 packet. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace shunt::drv::ethdev {

/** Continue the reflected CRC-32 state @p crc over @p n bytes (no pre or
 *  post inversion: zlib's crc32(d) is ~crc32_update(~0u, d)). Uses carry-less
 *  multiplication (PCLMULQDQ) for the whole 16-byte blocks of runs of 16
 *  bytes and more when the CPU has it (one lane below 64 bytes, four from
 *  there; from 256 bytes sixteen, in four 512-bit registers, when it has
 *  VPCLMULQDQ and AVX-512), a slicing-by-8 table for the rest and
 *  otherwise. */
std::uint32_t crc32_update(std::uint32_t crc, const void *p, std::size_t n) noexcept;
/** The table-only form (reference for tests; also used for short runs). */
std::uint32_t crc32_update_table(std::uint32_t crc, const void *p, std::size_t n) noexcept;

/** ICRC state after its 64-bit prefix of ones (the masked LRH of IBTA A17.3.3)
 *  from the initial ~0: the seed the IPv4 header is added to. */
inline constexpr std::uint32_t icrc_seed = 0xdebb20e3;

/** ICRC state over the IPv4 (20 bytes, no options), UDP and BTH headers at
 *  @p ip with the variant fields masked to ones (IPv4 TOS, TTL and checksum;
 *  UDP checksum; BTH FECN/BECN/reserved byte), as IBTA A17.3.3 says. Continue
 *  it with crc32_update over the rest of the packet up to the ICRC and store
 *  icrc_value() of the result. */
inline std::uint32_t icrc_headers(const std::uint8_t *ip) noexcept
{
    std::uint8_t m[40];
    std::memcpy(m, ip, sizeof m);
    m[1] = 0xff;                  // IPv4 TOS (DSCP, ECN)
    m[8] = 0xff;                  // IPv4 TTL
    m[10] = m[11] = 0xff;         // IPv4 header checksum
    m[20 + 6] = m[20 + 7] = 0xff; // UDP checksum
    m[28 + 4] = 0xff;             // BTH FECN, BECN, reserved
    return crc32_update(icrc_seed, m, sizeof m);
}
/** ICRC state over a whole RoCEv2 packet held in one buffer from its IPv4
 *  header @p ip: the 40 header bytes as icrc_headers masks them and the
 *  @p n bytes after them, up to the ICRC (store icrc_value() of it). The
 *  same value as icrc_headers(ip) continued over ip + 40; with PCLMULQDQ
 *  the mask is applied in registers and the headers and the rest are
 *  folded in one pass. */
std::uint32_t icrc_packet(const std::uint8_t *ip, std::size_t n) noexcept;

/** The ICRC field for a final state: inverted, transmitted least significant
 *  byte first (as the Ethernet FCS). */
inline void icrc_store(std::uint8_t *at, std::uint32_t crc) noexcept
{
    std::uint32_t v = ~crc;
    at[0] = static_cast<std::uint8_t>(v);
    at[1] = static_cast<std::uint8_t>(v >> 8);
    at[2] = static_cast<std::uint8_t>(v >> 16);
    at[3] = static_cast<std::uint8_t>(v >> 24);
}
inline bool icrc_matches(const std::uint8_t *at, std::uint32_t crc) noexcept
{
    std::uint32_t v = ~crc;
    return at[0] == static_cast<std::uint8_t>(v) && at[1] == static_cast<std::uint8_t>(v >> 8) &&
           at[2] == static_cast<std::uint8_t>(v >> 16) && at[3] == static_cast<std::uint8_t>(v >> 24);
}

} // namespace shunt::drv::ethdev
