// What the ethdev wire tests and their node processes (eth_node) agree on:
// message contents and the layout of a test message.
#pragma once

#include <cstdint>
#include <cstring>

namespace shunt::test::net {

/** Byte @p i of message @p seq of a run with @p seed. */
inline std::uint8_t pattern(std::uint64_t seed, std::uint64_t seq, std::uint64_t i)
{
    std::uint64_t h = (seed * 0x9e3779b97f4a7c15ull) ^ (seq * 0xbf58476d1ce4e5b9ull) ^ (i * 0x94d049bb133111ebull);
    h ^= h >> 31;
    return static_cast<std::uint8_t>((h * 0xd6e8feb86659fd93ull) >> 56);
}

/** A test message: seq (8 bytes), total length (4), then pattern bytes. */
inline constexpr std::uint32_t msg_hdr = 12;

inline void make_message(std::uint8_t *p, std::uint64_t seed, std::uint64_t seq, std::uint32_t len)
{
    std::memcpy(p, &seq, 8);
    std::memcpy(p + 8, &len, 4);
    for (std::uint32_t i = msg_hdr; i < len; i++)
        p[i] = pattern(seed, seq, i);
}

/** @return the first wrong byte's offset, or -1 when @p p is message @p seq of @p len bytes. */
inline long check_message(const std::uint8_t *p, std::uint64_t seed, std::uint64_t seq, std::uint32_t len)
{
    std::uint64_t s;
    std::uint32_t l;
    std::memcpy(&s, p, 8);
    std::memcpy(&l, p + 8, 4);
    if (s != seq)
        return 0;
    if (l != len)
        return 8;
    for (std::uint32_t i = msg_hdr; i < len; i++)
        if (p[i] != pattern(seed, seq, i))
            return static_cast<long>(i);
    return -1;
}

/** Length of message @p seq: msg_hdr .. @p max bytes, from the seed. */
inline std::uint32_t message_len(std::uint64_t seed, std::uint64_t seq, std::uint32_t max)
{
    std::uint64_t h = (seed + seq) * 0x2545f4914f6cdd1dull;
    h ^= h >> 29;
    // Mostly small, some large: a quarter of the messages span many packets.
    std::uint32_t cap = (h & 3) == 0 ? max : (max < 2048 ? max : 2048);
    return msg_hdr + static_cast<std::uint32_t>((h >> 8) % (cap - msg_hdr + 1));
}

} // namespace shunt::test::net
