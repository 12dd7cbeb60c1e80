/* drivers/mlx5: the ConnectX PRM structures as rdma-core's <infiniband/mlx5dv.h>
 * defines them, the few constants mlx5dv.h leaves to its provider, and the
 * named memory barriers of the data path. Shared by the driver and the model
 * (drivers/mlx5/model), which must agree byte for byte.
 *
 * Every multi-byte field the device reads or writes is big-endian. */
#pragma once

#include <endian.h>
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <infiniband/mlx5dv.h>

namespace shunt::drv::mlx5 {

/* ---- Sizes and offsets the fast path relies on (checked against mlx5dv.h) ---- */

inline constexpr unsigned wqe_bb = MLX5_SEND_WQE_BB;   ///< 64-byte basic block
inline constexpr unsigned wqe_shift = MLX5_SEND_WQE_SHIFT;
inline constexpr unsigned octo = 16;                   ///< `ds` unit
static_assert(wqe_bb == 64 && wqe_shift == 6);
static_assert(sizeof(mlx5_wqe_ctrl_seg) == 16);
static_assert(offsetof(mlx5_wqe_ctrl_seg, qpn_ds) == 4 && offsetof(mlx5_wqe_ctrl_seg, fm_ce_se) == 11 &&
              offsetof(mlx5_wqe_ctrl_seg, imm) == 12);
static_assert(sizeof(mlx5_wqe_data_seg) == 16 && sizeof(mlx5_wqe_raddr_seg) == 16);
static_assert(sizeof(mlx5_wqe_atomic_seg) == 16 && sizeof(mlx5_wqe_datagram_seg) == 48);
static_assert(sizeof(mlx5_wqe_eth_seg) == 32 && offsetof(mlx5_wqe_eth_seg, inline_hdr_start) == 14);
static_assert(sizeof(mlx5_wqe_umr_ctrl_seg) == 48 && sizeof(mlx5_wqe_mkey_context_seg) == 64);
static_assert(sizeof(mlx5_wqe_umr_klm_seg) == 16 && sizeof(mlx5_wqe_srq_next_seg) == 16);
static_assert(sizeof(mlx5_cqe64) == 64 && offsetof(mlx5_cqe64, op_own) == 63 &&
              offsetof(mlx5_cqe64, wqe_counter) == 60 && offsetof(mlx5_cqe64, sop_drop_qpn) == 56 &&
              offsetof(mlx5_cqe64, byte_cnt) == 44 && offsetof(mlx5_cqe64, imm_inval_pkey) == 36 &&
              offsetof(mlx5_cqe64, flags_rqpn) == 24 && offsetof(mlx5_cqe64, hds_ip_ext) == 28);
static_assert(sizeof(mlx5_err_cqe) == 64 && offsetof(mlx5_err_cqe, syndrome) == 55 &&
              offsetof(mlx5_err_cqe, vendor_err_synd) == 54);

/** Doorbell-record words of a CQ (rdma-core mlx5.h: MLX5_CQ_SET_CI, MLX5_CQ_ARM_DB). */
inline constexpr unsigned cq_set_ci = 0, cq_arm_db = 1;
/** UAR page layout: the BlueFlame register pair starts at 0x800, each half
 *  bf_buf_size bytes (mlx5 UAR: MLX5_BF_OFFSET, 256-byte halves). The CQ
 *  doorbell (arming) is the 8-byte register at MLX5_CQ_DOORBELL (0x20). */
inline constexpr unsigned uar_bf_offset = 0x800, bf_buf_size = 256, uar_page = 4096;
/** Completion mode "CQE always" (fm_ce_se bits 2-3) and the fence bits. */
inline constexpr std::uint8_t ce_always = MLX5_WQE_CTRL_CQ_UPDATE;
inline constexpr std::uint8_t se_bit = MLX5_WQE_CTRL_SOLICITED;
inline constexpr std::uint8_t fence_bits = MLX5_WQE_CTRL_FENCE;
inline constexpr std::uint8_t small_fence_bits = MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE;
/** Largest WQE: ds is 6 bits. */
inline constexpr unsigned max_wqe_ds = 63;
/** Header bytes a RAW_PACKET WQE inlines when the device needs L2 headers inline
 *  (rdma-core wqe.h MLX5_ETH_L2_INLINE_HEADER_SIZE). */
inline constexpr unsigned eth_l2_inline = 18;
/** Smallest TSO header (rdma-core wqe.h MLX5_ETH_L2_MIN_HEADER_SIZE). */
inline constexpr unsigned eth_l2_min_header = 14;
/** Bytes an RX CQE64 can carry inline (scatter to CQE, MLX5_INLINE_SCATTER_32). */
inline constexpr unsigned scatter_cqe_max = 32;

inline std::uint32_t be32(std::uint32_t v) noexcept { return htobe32(v); }
inline std::uint64_t be64(std::uint64_t v) noexcept { return htobe64(v); }
inline std::uint16_t be16(std::uint16_t v) noexcept { return htobe16(v); }

/* ---- Named barriers (rdma-core util/udma_barrier.h for x86-64) ----
 * Each says what it orders; the comment at each use says why it is needed. */

/** Device-visible memory (WQEs, receive WQEs) before the doorbell record that
 *  publishes them. x86 keeps stores in order: a compiler barrier. */
inline void udma_to_device_barrier() noexcept { asm volatile("" ::: "memory"); }
/** The owner byte of a CQE before the rest of it: the device writes the CQE
 *  and the owner byte last; loads after this see the whole CQE. */
inline void udma_from_device_barrier() noexcept { asm volatile("lfence" ::: "memory"); }
/** The doorbell record before the write-combining stores to the BlueFlame
 *  register (x86: sfence, as rdma-core's mmio_wc_start). */
inline void mmio_wc_start() noexcept { asm volatile("sfence" ::: "memory"); }
/** Push the write-combining buffer out, so the device sees the doorbell now
 *  and two CPUs' doorbells cannot pass each other (rdma-core mmio_flush_writes). */
inline void mmio_flush_writes() noexcept { asm volatile("sfence" ::: "memory"); }

/** One 64-bit MMIO store (the 8-byte doorbell): a single instruction, never split. */
inline void mmio_write64(void *reg, std::uint64_t v) noexcept
{
#if defined(__SANITIZE_THREAD__)
    // The same mov, seen by ThreadSanitizer as the release it is on x86 (the
    // software model's device thread loads the register with acquire).
    __atomic_store_n(static_cast<volatile std::uint64_t *>(reg), v, __ATOMIC_RELEASE);
#else
    *static_cast<volatile std::uint64_t *>(reg) = v;
#endif
}

/** Store word @p v to the doorbell record @p rec, which the device reads by
 *  DMA whenever it likes. */
inline void dbrec_store(volatile std::uint32_t *rec, std::uint32_t v) noexcept
{
#if defined(__SANITIZE_THREAD__)
    // The same mov, seen by ThreadSanitizer as the release it is on x86 (the
    // model's device thread loads the record with acquire).
    __atomic_store_n(rec, v, __ATOMIC_RELEASE);
#else
    *rec = v;
#endif
}

/** Store @p v big-endian to the doorbell record @p rec: dbrec_store as a
 *  plain store followed by a compiler barrier, so that on x86-64-v3 it can
 *  be one movbe (a volatile store cannot). Every caller stores after a
 *  barrier (udma_to_device_barrier); with the one here the compiler keeps
 *  the store where it is written and whole, and x86 keeps it in order with
 *  the stores around it. */
inline void dbrec_store_be(volatile std::uint32_t *rec, std::uint32_t v) noexcept
{
#if defined(__SANITIZE_THREAD__)
    dbrec_store(rec, be32(v));
#else
    const std::uint32_t w = be32(v);
    std::memcpy(const_cast<std::uint32_t *>(rec), &w, 4);
    asm volatile("" ::: "memory");
#endif
}

/** Store the 16-bit WQE counter @p counter to a send or receive doorbell
 *  record @p rec, whose device-read field is the big-endian word's low 16
 *  bits (the PRM's wqe_counter; rdma-core writes be32(counter & 0xffff)).
 *  Its high 16 bits are 0 from the queue's reset on, so a big-endian 16-bit
 *  store to bytes 2..3 writes the same word: on x86-64-v3 one movbe where
 *  the 32-bit form takes a zero extension, a bswap and a mov. A plain store
 *  and a compiler barrier, as in dbrec_store_be. */
inline void dbrec_store_counter(volatile std::uint32_t *rec, std::uint16_t counter) noexcept
{
#if defined(__SANITIZE_THREAD__)
    // The 32-bit word, as the model's device thread loads it (one access size for ThreadSanitizer).
    dbrec_store(rec, be32(counter));
#else
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
    const std::uint16_t v = __builtin_bswap16(counter);
    std::memcpy(reinterpret_cast<std::uint8_t *>(const_cast<std::uint32_t *>(rec)) + 2, &v, 2);
    asm volatile("" ::: "memory");
#endif
}

/** The op_own byte of a CQE the device may be writing (it writes it last). */
inline std::uint8_t cqe_op_own(const mlx5_cqe64 *cqe) noexcept
{
#if defined(__SANITIZE_THREAD__)
    // The same load, seen by ThreadSanitizer as the acquire it is on x86
    // (the model stores the byte with release after the rest of the CQE).
    return __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);
#else
    return cqe->op_own;
#endif
}

#if defined(__SANITIZE_THREAD__)
/** Under ThreadSanitizer a BlueFlame burst is eight 8-byte atomic stores in
 *  the order of the SSE ones, the first (the doorbell) a release: the model's
 *  device thread reads the register while the driver writes it, as a device
 *  does, and an SSE store is a plain access to ThreadSanitizer. */
inline void bf_burst_tsan(void *dst, const void *src) noexcept
{
    auto *d = static_cast<volatile std::uint64_t *>(dst);
    auto *s = static_cast<const std::uint64_t *>(src);
    __atomic_store_n(d, s[0], __ATOMIC_RELEASE);
    for (unsigned i = 1; i < 8; i++)
        __atomic_store_n(d + i, s[i], __ATOMIC_RELAXED);
}
#endif

/** One 64-byte BlueFlame burst, in ascending address order, from the WQE
 *  basic block at @p src to the register at @p dst (both 64-byte aligned);
 *  either form fills one write-combining line.
 *  - With AVX: two 32-byte loads and stores. The moves are assembly: with
 *    __m256i values GCC sets up a frame pointer in every caller, more
 *    instructions than the two stores save. The clobbered registers tell
 *    GCC their upper halves are in use, so an optimizing GCC issues
 *    vzeroupper where the caller leaves AVX code (once, not once per
 *    burst), and SSE code after it (DPDK's, libc's) pays no transition; a
 *    unit test checks it (TheBlueFlameCopyLeavesNoDirtyUpperHalves).
 *  - Otherwise four 16-byte SSE loads and stores.
 *  Not 64-byte AVX-512 stores: on Skylake-SP any 512-bit instruction lowers
 *  the core's clock for a while. */
inline void bf_burst(void *dst, const void *src) noexcept
{
#if defined(__AVX__)
    asm volatile("vmovdqa (%1), %%ymm0\n\t"
                 "vmovdqa 32(%1), %%ymm1\n\t"
                 "vmovdqa %%ymm0, (%0)\n\t"
                 "vmovdqa %%ymm1, 32(%0)"
                 :
                 : "r"(dst), "r"(src)
                 : "memory", "xmm0", "xmm1");
#else
    auto *d = static_cast<__m128i *>(dst);
    auto *s = static_cast<const __m128i *>(src);
    __m128i a = _mm_load_si128(s), b = _mm_load_si128(s + 1), c = _mm_load_si128(s + 2),
            e = _mm_load_si128(s + 3);
    _mm_store_si128(d, a);
    _mm_store_si128(d + 1, b);
    _mm_store_si128(d + 2, c);
    _mm_store_si128(d + 3, e);
#endif
}

/** BlueFlame copy of one basic block from the WQE at @p src (a BB never
 *  wraps) to the register at @p dst: one burst. */
inline void bf_copy_bb(void *dst, const void *src) noexcept
{
#if defined(__SANITIZE_THREAD__)
    bf_burst_tsan(dst, src);
#else
    bf_burst(dst, src);
#endif
}

/** BlueFlame copy of @p bytes (a multiple of 64) from the WQE at @p src to the
 *  register at @p dst, 64 bytes per burst, wrapping from @p qend to @p qstart.
 *  Not memcpy: rep movs does not keep the stores in order (rdma-core qp.c
 *  mlx5_bf_copy). One burst (bf_burst) per WQE basic block. */
inline void bf_copy(void *dst, const void *src, unsigned bytes, const void *qstart, const void *qend) noexcept
{
#if defined(__SANITIZE_THREAD__)
    auto *d = static_cast<std::uint8_t *>(dst);
    auto *s = static_cast<const std::uint8_t *>(src);
    do {
        bf_burst_tsan(d, s);
        d += 64;
        s += 64;
        if (s == qend) [[unlikely]]
            s = static_cast<const std::uint8_t *>(qstart);
        bytes -= 64;
    } while (bytes);
#else
    auto *d = static_cast<std::uint8_t *>(dst);
    auto *s = static_cast<const std::uint8_t *>(src);
    do {
        bf_burst(d, s);
        d += 64;
        s += 64;
        if (s == qend) [[unlikely]]
            s = static_cast<const std::uint8_t *>(qstart);
        bytes -= 64;
    } while (bytes);
#endif
}

} // namespace shunt::drv::mlx5
