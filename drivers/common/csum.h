/* Software IPv4/TCP/UDP checksums and TSO header fix-ups, shared by the
 * software drivers (shm, ethdev) for messages that carry network headers.
 * A message's headers are recognised as Ethernet (optionally one VLAN tag)
 * carrying IPv4, or as a bare IPv4 header; anything else is left alone. */
#pragma once

#include <cstddef>
#include <cstdint>

namespace shunt::drv::common {

/** Fill the IPv4 header checksum and the TCP or UDP checksum of the
 *  contiguous message @p msg of @p len bytes (WR_IP_CSUM). A length field
 *  that does not fit the buffer is not trusted: the buffer's end is used. */
void ip_checksums(std::uint8_t *msg, std::size_t len) noexcept;
/** Are the IPv4 header checksum and the TCP or UDP checksum (a UDP checksum
 *  of 0 means none) of the contiguous frame or packet @p msg valid?
 *  @return false also when it is not IPv4 carrying TCP or UDP, or when a
 *  length field does not fit the buffer. */
bool ip_checksums_valid(const std::uint8_t *msg, std::size_t len) noexcept;
/** Fix up the copied TSO header of segment @p seg_index (0-based) at the
 *  start of @p msg: IPv4 total length for @p payload bytes after the
 *  @p hdr_sz-byte header, IPv4 id + seg_index, TCP sequence + @p seq_off,
 *  and FIN/PSH cleared unless @p last. Checksums are not touched. */
void tso_fixup(std::uint8_t *msg, std::size_t hdr_sz, std::size_t payload, std::uint32_t seg_index,
               std::uint32_t seq_off, bool last) noexcept;

} // namespace shunt::drv::common
