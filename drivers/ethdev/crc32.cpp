/* drivers/ethdev: CRC-32 (reflected polynomial 0xedb88320).
 *
 * The folding method is Intel's "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ" (Gopal et al., 2009) in the form of Linux's
 * arch/x86/crypto/crc32-pclmul_asm.S: four 128-bit lanes folded by 512 bits
 * per 64-byte step (constants R1/R2), reduced to one lane (R3/R4), then 64 ->
 * 32 bits (R5) and a Barrett reduction (P', u'). With VPCLMULQDQ the same
 * folds run on 512-bit registers (crc32_fold_wide). The table form checks
 * them in unit-ethdev over random lengths and alignments. */
#include "crc32.h"

#include <immintrin.h>

namespace shunt::drv::ethdev {

namespace {

struct tables {
    std::uint32_t t[8][256];
    constexpr tables() : t{}
    {
        for (std::uint32_t i = 0; i < 256; i++) {
            std::uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = (c & 1) ? (c >> 1) ^ 0xedb88320u : c >> 1;
            t[0][i] = c;
        }
        for (std::uint32_t i = 0; i < 256; i++)
            for (int s = 1; s < 8; s++)
                t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
};
constexpr tables tab{};

[[gnu::target("pclmul,sse4.1")]] inline __m128i ld(const std::uint8_t *q) noexcept
{
    return _mm_loadu_si128(reinterpret_cast<const __m128i *>(q));
}
/** x times the folding constants (low and high halves), plus the next 128 bits. */
[[gnu::target("pclmul,sse4.1")]] inline __m128i fold(__m128i x, __m128i k, __m128i next) noexcept
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

/** 128 -> 64 -> 32 bits of the folded remainder @p x1: the CRC state. */
[[gnu::target("pclmul,sse4.1")]] inline std::uint32_t reduce(__m128i x1) noexcept
{
    const __m128i r4r3 = _mm_set_epi64x(0x0ccaa009ell, 0x1751997d0ll);
    const __m128i r5 = _mm_set_epi64x(0, 0x163cd6124ll);
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    const __m128i poly = _mm_set_epi64x(0x1f7011641ll, 0x1db710641ll); // u' (high), P' (low)
    // 128 -> 64 bits (appending 32 zero bits), then 64 -> 32.
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(r4r3, x1, 0x01), _mm_srli_si128(x1, 8));
    __m128i x2b = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), r5, 0x00), x2b);
    // Barrett reduction.
    __m128i t = x1;
    x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
    x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x00);
    x1 = _mm_xor_si128(x1, t);
    return static_cast<std::uint32_t>(_mm_extract_epi32(x1, 1));
}

/** One lane @p x1 folded over the whole 16-byte blocks of the @p n bytes at
 *  @p p (by 128 bits each, R4/R3), then reduced: the CRC state. */
[[gnu::target("pclmul,sse4.1")]] inline std::uint32_t fold_reduce(__m128i x1, const std::uint8_t *p,
                                                                   std::size_t n) noexcept
{
    const __m128i r4r3 = _mm_set_epi64x(0x0ccaa009ell, 0x1751997d0ll);
    for (; n >= 16; p += 16, n -= 16)
        x1 = fold(x1, r4r3, ld(p));
    return reduce(x1);
}

[[gnu::target("pclmul,sse4.1")]] std::uint32_t crc32_fold(std::uint32_t crc, const std::uint8_t *p,
                                                           std::size_t n) noexcept
{
    // n >= 16 and a multiple of 16. Below 64 bytes one lane, folded by 128
    // bits per block (R4/R3); from 64 four lanes, folded by 512 (R2/R1).
    const __m128i r2r1 = _mm_set_epi64x(0x1c6e41596ll, 0x154442bd4ll);
    const __m128i r4r3 = _mm_set_epi64x(0x0ccaa009ell, 0x1751997d0ll);
    __m128i x1 = _mm_xor_si128(ld(p), _mm_cvtsi32_si128(static_cast<int>(crc)));
    if (n >= 64) {
        __m128i x2 = ld(p + 16), x3 = ld(p + 32), x4 = ld(p + 48);
        p += 64;
        n -= 64;
        while (n >= 64) {
            x1 = fold(x1, r2r1, ld(p));
            x2 = fold(x2, r2r1, ld(p + 16));
            x3 = fold(x3, r2r1, ld(p + 32));
            x4 = fold(x4, r2r1, ld(p + 48));
            p += 64;
            n -= 64;
        }
        x1 = fold(x1, r4r3, x2);
        x1 = fold(x1, r4r3, x3);
        x1 = fold(x1, r4r3, x4);
    } else {
        p += 16;
        n -= 16;
    }
    return fold_reduce(x1, p, n);
}

[[gnu::target("avx512f")]] inline __m512i ld4(const std::uint8_t *q) noexcept { return _mm512_loadu_si512(q); }

/** The four-lane 128-bit state of 64 consecutive bytes as one 512-bit
 *  register, folded forward by @p k (its 128-bit pair in every lane) and
 *  the next 64 bytes added: a three-way exclusive or. */
[[gnu::target("avx512f,avx512vl,vpclmulqdq")]] inline __m512i fold4(__m512i z, __m512i k, __m512i next) noexcept
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z, k, 0x00), _mm512_clmulepi64_epi128(z, k, 0x11), next,
                                     0x96);
}

/** crc32_fold for n >= 256 (a multiple of 16) with VPCLMULQDQ: four 512-bit
 *  registers, each four 128-bit lanes, folded by 2048 bits per 256-byte
 *  step; then into one register (by 512 bits: R1/R2 in every lane), which
 *  holds what crc32_fold's four lanes hold, and on as there. The constants
 *  are (x^(D+32) mod P, x^(D-32) mod P) bit-reflected and shifted left by
 *  one for a fold distance of D bits: D = 2048 here, 512 for R1/R2 and 128
 *  for R3/R4. */
[[gnu::target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")]] std::uint32_t crc32_fold_wide(std::uint32_t crc,
                                                                                         const std::uint8_t *p,
                                                                                         std::size_t n) noexcept
{
    const __m512i k2048 = _mm512_set_epi64(0x1322d1430ll, 0x11542778all, 0x1322d1430ll, 0x11542778all,
                                           0x1322d1430ll, 0x11542778all, 0x1322d1430ll, 0x11542778all);
    const __m512i k512 = _mm512_set_epi64(0x1c6e41596ll, 0x154442bd4ll, 0x1c6e41596ll, 0x154442bd4ll,
                                          0x1c6e41596ll, 0x154442bd4ll, 0x1c6e41596ll, 0x154442bd4ll);
    const __m128i r4r3 = _mm_set_epi64x(0x0ccaa009ell, 0x1751997d0ll);
    __m512i z0 = _mm512_xor_si512(ld4(p), _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, static_cast<long long>(crc)));
    __m512i z1 = ld4(p + 64), z2 = ld4(p + 128), z3 = ld4(p + 192);
    p += 256;
    n -= 256;
    while (n >= 256) {
        z0 = fold4(z0, k2048, ld4(p));
        z1 = fold4(z1, k2048, ld4(p + 64));
        z2 = fold4(z2, k2048, ld4(p + 128));
        z3 = fold4(z3, k2048, ld4(p + 192));
        p += 256;
        n -= 256;
    }
    z0 = fold4(z0, k512, z1);
    z0 = fold4(z0, k512, z2);
    z0 = fold4(z0, k512, z3);
    while (n >= 64) {
        z0 = fold4(z0, k512, ld4(p));
        p += 64;
        n -= 64;
    }
    // The four lanes, first to last (GCC 12's _mm512_extracti32x4_epi32
    // passes an undefined vector it then warns about).
    alignas(64) std::uint8_t lanes[64];
    _mm512_store_si512(lanes, z0);
    __m128i x1 = ld(lanes);
    x1 = fold(x1, r4r3, ld(lanes + 16));
    x1 = fold(x1, r4r3, ld(lanes + 32));
    x1 = fold(x1, r4r3, ld(lanes + 48));
    return fold_reduce(x1, p, n);
}

/** icrc_packet's folded form: the first two or three blocks with the
 *  variant header fields set to ones in registers; a packet shorter than
 *  three blocks (n < 8: an acknowledgement) ends with its last bytes and
 *  the masked BTH byte through the table. */
[[gnu::target("pclmul,sse4.1")]] std::uint32_t icrc_fold(const std::uint8_t *ip, std::size_t n) noexcept
{
    const __m128i r4r3 = _mm_set_epi64x(0x0ccaa009ell, 0x1751997d0ll);
    // Bytes 1 (TOS), 8 (TTL), 10-11 (header checksum) of the IPv4 header;
    // 26-27 (UDP checksum); 32 (BTH FECN, BECN, reserved).
    const __m128i m0 = _mm_setr_epi8(0, -1, 0, 0, 0, 0, 0, 0, -1, 0, -1, -1, 0, 0, 0, 0);
    const __m128i m1 = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, 0, 0, 0, 0);
    const __m128i m2 = _mm_setr_epi8(-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const std::size_t total = 40 + n, bulk = total & ~std::size_t{15};
    __m128i x1 = _mm_xor_si128(_mm_or_si128(ld(ip), m0), _mm_cvtsi32_si128(static_cast<int>(icrc_seed)));
    x1 = fold(x1, r4r3, _mm_or_si128(ld(ip + 16), m1));
    if (n < 8) { // bytes 32 .. 40 + n: the BTH's last 8 (byte 32 masked) and the rest
        std::uint8_t t[15];
        std::memcpy(t, ip + 32, 8 + n);
        t[0] = 0xff;
        return crc32_update_table(reduce(x1), t, 8 + n);
    }
    x1 = fold(x1, r4r3, _mm_or_si128(ld(ip + 32), m2));
    if (total - 48 >= 64) // the rest in four lanes: one lane is bound by the multiply's latency
        return crc32_update(reduce(x1), ip + 48, total - 48);
    const std::uint32_t crc = fold_reduce(x1, ip + 48, bulk - 48);
    return bulk == total ? crc : crc32_update_table(crc, ip + bulk, total - bulk);
}

bool have_pclmul() noexcept
{
    static const bool yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    return yes;
}

bool have_vpclmul() noexcept
{
    static const bool yes = have_pclmul() && __builtin_cpu_supports("vpclmulqdq") &&
                            __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    return yes;
}

} // namespace

std::uint32_t crc32_update_table(std::uint32_t crc, const void *data, std::size_t n) noexcept
{
    auto *p = static_cast<const std::uint8_t *>(data);
    while (n >= 8) {
        std::uint32_t lo, hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = tab.t[7][lo & 0xff] ^ tab.t[6][(lo >> 8) & 0xff] ^ tab.t[5][(lo >> 16) & 0xff] ^ tab.t[4][lo >> 24] ^
              tab.t[3][hi & 0xff] ^ tab.t[2][(hi >> 8) & 0xff] ^ tab.t[1][(hi >> 16) & 0xff] ^ tab.t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ tab.t[0][(crc ^ *p++) & 0xff];
    return crc;
}

std::uint32_t crc32_update(std::uint32_t crc, const void *data, std::size_t n) noexcept
{
    auto *p = static_cast<const std::uint8_t *>(data);
    if (n >= 16 && have_pclmul()) {
        std::size_t bulk = n & ~std::size_t{15};
        crc = bulk >= 256 && have_vpclmul() ? crc32_fold_wide(crc, p, bulk) : crc32_fold(crc, p, bulk);
        p += bulk;
        n -= bulk;
    }
    return crc32_update_table(crc, p, n);
}

std::uint32_t icrc_packet(const std::uint8_t *ip, std::size_t n) noexcept
{
    if (have_pclmul())
        return icrc_fold(ip, n);
    return crc32_update(icrc_headers(ip), ip + 40, n);
}

} // namespace shunt::drv::ethdev
