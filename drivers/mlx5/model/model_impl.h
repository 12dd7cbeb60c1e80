/* drivers/mlx5/model: internal definitions (device objects, wire layout).
 * Shared-memory layouts carry a version and offsets, never pointers. */
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../mlx5.h"
#include "env/segment.h"
#include "model.h"

namespace shunt::drv::mlx5::model {

/* ---------------- What the driver writes while the device runs ----------------
 * Doorbell records, the doorbell and the BlueFlame register are written by
 * the driver whenever it likes and read by the device as it runs: DMA and
 * MMIO see each aligned word whole. The model reads (and poisons) them one
 * atomic word at a time, acquire where the driver's store is a release
 * (dbrec_store, mmio_write64), so the overlap is defined and the ordering
 * is the one the hardware gives (ThreadSanitizer checks it). */

/** A doorbell record word (acquire: the WQEs it counts were written before). */
inline std::uint32_t dbrec_load(const volatile std::uint32_t *rec) noexcept
{
    return __atomic_load_n(rec, __ATOMIC_ACQUIRE);
}
/** An 8-byte register word (the doorbell: acquire, the WQE was written before). */
inline std::uint64_t load64(const void *p) noexcept
{
    return __atomic_load_n(static_cast<const std::uint64_t *>(p), __ATOMIC_ACQUIRE);
}
/** Copy @p n bytes (a multiple of 8) of the register at @p reg to @p out. */
inline void reg_read(const std::uint8_t *reg, std::uint8_t *out, std::size_t n) noexcept
{
    for (std::size_t i = 0; i < n; i += 8) {
        std::uint64_t w = __atomic_load_n(reinterpret_cast<const std::uint64_t *>(reg + i), __ATOMIC_RELAXED);
        std::memcpy(out + i, &w, 8);
    }
}
/** Fill @p n bytes (a multiple of 8) of the register at @p reg with @p byte. */
inline void reg_fill(std::uint8_t *reg, std::uint8_t byte, std::size_t n) noexcept
{
    std::uint64_t w;
    std::memset(&w, byte, 8);
    for (std::size_t i = 0; i < n; i += 8)
        __atomic_store_n(reinterpret_cast<std::uint64_t *>(reg + i), w, __ATOMIC_RELAXED);
}

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char *file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char *file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char *file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char *file, int line);
#endif
/** A responder's DMA at the memory an RDMA write, read or atomic names.
 *  Its owner learns that the access is over only from the requester (the
 *  requester's completion, then whatever the application does across
 *  processes), an order ThreadSanitizer cannot follow out of this process:
 *  under it the accesses in this scope are not recorded, as a device's are
 *  not. Besides receive_dma_scope below, nothing else of the model is hidden. */
struct remote_dma_scope {
#if defined(__SANITIZE_THREAD__)
    remote_dma_scope() noexcept
    {
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
    }
    ~remote_dma_scope()
    {
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    }
#endif
    remote_dma_scope(const remote_dma_scope &) = delete;
    remote_dma_scope &operator=(const remote_dma_scope &) = delete;
#if !defined(__SANITIZE_THREAD__)
    remote_dma_scope() noexcept = default;
#endif
};
/** A receive's DMA into the buffers of the receive WQE it consumes. The
 *  owner may read a posted buffer (a test inspecting its memory) until it
 *  lets the sender send; the order between that read and this write runs
 *  through the sender, in another process, where ThreadSanitizer cannot
 *  follow it: under it the accesses in this scope (the writes, and the
 *  reads of the packet) are not recorded. What the owner reads after the
 *  completion stays checked: the CQE, written by the same thread after the
 *  data and handed over by the owner byte's release, is recorded
 *  (write_cqe), so a poller that misses the acquire is still reported on
 *  the CQE's own bytes. */
struct receive_dma_scope {
#if defined(__SANITIZE_THREAD__)
    receive_dma_scope() noexcept { AnnotateIgnoreWritesBegin(__FILE__, __LINE__); }
    ~receive_dma_scope() { AnnotateIgnoreWritesEnd(__FILE__, __LINE__); }
#else
    receive_dma_scope() noexcept = default;
#endif
    receive_dma_scope(const receive_dma_scope &) = delete;
    receive_dma_scope &operator=(const receive_dma_scope &) = delete;
};

/* ---------------- Wire (shared memory between ports) ---------------- */

inline constexpr std::uint64_t port_magic = 0x3154524f5035584dull; // "MX5PORT1"
inline constexpr std::uint32_t port_version = 1;
inline constexpr std::uint32_t max_mtu = 4096;
inline constexpr std::uint32_t num_lanes = 16;   ///< senders one port receives from at once
inline constexpr std::uint32_t lane_slots = 64;  ///< packets in flight per lane
inline constexpr std::uint32_t max_qps = 4095;   ///< QP index 1..4095 (qpn = tag << 12 | index)

/** IBTA BTH opcodes the model uses (IBA vol. 1, table 38). */
enum : std::uint8_t {
    rc_send_first = 0x00, rc_send_middle = 0x01, rc_send_last = 0x02, rc_send_last_imm = 0x03,
    rc_send_only = 0x04, rc_send_only_imm = 0x05, rc_write_first = 0x06, rc_write_middle = 0x07,
    rc_write_last = 0x08, rc_write_last_imm = 0x09, rc_write_only = 0x0a, rc_write_only_imm = 0x0b,
    rc_read_req = 0x0c, rc_read_resp_first = 0x0d, rc_read_resp_middle = 0x0e, rc_read_resp_last = 0x0f,
    rc_read_resp_only = 0x10, rc_ack = 0x11, rc_atomic_ack = 0x12, rc_cas = 0x13, rc_faa = 0x14,
    rc_send_last_inv = 0x16, rc_send_only_inv = 0x17,
    uc_base = 0x20,  ///< UC opcodes are RC's (send/write) | 0x20
    ud_send_only = 0x64, ud_send_only_imm = 0x65,
    raw_frame = 0xf0, ///< not IBTA: an Ethernet frame of a RAW_PACKET QP
};
/** AETH syndromes (IBA 9.7.5.2.6). */
enum : std::uint8_t {
    aeth_ack = 0x00, aeth_rnr = 0x20, aeth_nak_seq = 0x60, aeth_nak_inv = 0x61, aeth_nak_access = 0x62,
    aeth_nak_op = 0x63,
};

/** A packet in a lane slot: header, then payload. seq (position + 1) is
 *  stored last and publishes the slot. */
struct alignas(64) wire_pkt {
    std::atomic<std::uint32_t> seq;
    std::uint8_t opcode;   ///< BTH opcode
    std::uint8_t flags;    ///< pf_*
    std::uint16_t len;     ///< payload bytes
    std::uint32_t dqpn, sqpn, psn;
    std::uint32_t imm;     ///< ImmDt, or IETH (rkey to invalidate)
    std::uint64_t raddr;   ///< RETH / AtomicETH virtual address
    std::uint32_t rkey;
    std::uint32_t dmalen;  ///< RETH DMA length
    std::uint64_t swap_add, compare; ///< AtomicETH; atomic ack: original value in swap_add
    std::uint32_t aeth;    ///< syndrome << 24 | MSN
    std::uint32_t qkey;    ///< DETH
    std::uint64_t src_port; ///< sender's port id (GRH source)
    std::uint32_t icrc;    ///< CRC of header fields and payload (bad: dropped)
    std::uint32_t pad[7];
};
static_assert(sizeof(wire_pkt) == 128);
enum : std::uint8_t { pf_solicited = 1, pf_ackreq = 2 };
inline constexpr std::size_t slot_bytes = sizeof(wire_pkt) + max_mtu + 64;

/** One sender's ring into a port: the receiver's and the sender's lines apart. */
struct alignas(64) lane_ctrl {
    std::atomic<std::uint64_t> owner; ///< sender port id, 0 free
    alignas(64) std::atomic<std::uint32_t> consumed; ///< receiver
    alignas(64) std::atomic<std::uint32_t> produced; ///< sender (its private copy is authoritative)
};

/** A port's published QP entry (for RTR checks by peers). */
struct alignas(8) qp_pub {
    std::atomic<std::uint32_t> qpn;  ///< 0: free
    std::uint32_t type;
};

/** Head of a port's segment. */
struct alignas(64) port_hdr {
    std::uint64_t magic;
    std::uint32_t version;
    std::int32_t pid;
    std::uint64_t port_id;      ///< pid << 16 | tag
    std::uint32_t nlanes, lane_slots, slot_bytes, max_qp;
    std::uint64_t lanes_off;    ///< nlanes lane_ctrl
    std::uint64_t slots_off;    ///< nlanes * lane_slots slots
    std::uint64_t qpt_off;      ///< max_qp + 1 qp_pub
    alignas(64) std::atomic<std::uint32_t> closed;
};

/** Host-wide table of port tags (1..4095): pid of the owner, 0 free. */
struct tag_table {
    std::uint64_t magic;
    std::atomic<std::int32_t> owner[4096];
};

/* ---------------- Device objects (process-private) ---------------- */

struct mr_obj {
    std::uint32_t key = 0;     ///< lkey = rkey
    void *pd = nullptr;
    std::uint64_t addr = 0, len = 0;
    unsigned access = 0;
    bool window = false;       ///< a memory window (rkey only)
    bool bound = false;        ///< window: bound
    std::uint32_t bound_qpn = 0;
    std::uint32_t parent = 0;  ///< window: the region's key
    int windows = 0;           ///< region: windows bound to it
};

struct mcq {
    std::uint32_t cqn = 0;
    std::uint8_t *buf = nullptr;
    std::uint32_t cnt = 0, size = 64, log = 0;
    volatile std::uint32_t *dbrec = nullptr;
    std::uint8_t *uar = nullptr;
    std::uint32_t pi = 0;       ///< producer index
    bool overrun = false;
    std::uint32_t arms = 0;     ///< arm doorbells seen
    std::uint64_t last_arm = 0;
};

struct msrq {
    std::uint32_t srqn = 0;
    std::uint8_t *buf = nullptr;
    std::uint32_t cnt = 0, stride = 0, max_sge = 0;
    volatile std::uint32_t *dbrec = nullptr;
    std::uint32_t pos = 0;       ///< next WQE index to consume
    std::uint16_t consumed = 0;
    void *pd = nullptr;
};

/** A piece of local memory a WQE names. */
struct mseg {
    std::uint64_t addr;
    std::uint32_t len;
    std::uint32_t lkey;
};

/** A fetched send WQE, as the requester executes it. */
struct swqe {
    std::uint16_t idx = 0;       ///< wqe_counter (first BB)
    std::uint8_t opcode = 0;     ///< MLX5_OPCODE_*
    std::uint8_t fm_ce_se = 0;
    std::uint32_t imm = 0;       ///< ctrl imm (as stored)
    std::uint64_t raddr = 0;
    std::uint32_t rkey = 0;
    std::uint64_t swap_add = 0, compare = 0;
    std::vector<mseg> sg;        ///< gather (or scatter for read/atomic)
    std::vector<std::uint8_t> inl; ///< inline data
    std::vector<std::uint8_t> hdr; ///< RAW: inline header
    std::uint16_t mss = 0;
    std::uint8_t cs_flags = 0;
    std::uint64_t total = 0;     ///< message bytes
    /* UD destination. */
    std::uint8_t av[48] = {};
    /* Transport. */
    std::uint32_t first_psn = 0, npkts = 0, sent = 0; ///< packets of this message; sent so far
    std::uint32_t acked = 0;     ///< read: response packets received
    bool done = false;
    std::uint8_t err = 0, vsynd = 0; ///< error syndrome to report
    std::uint32_t bbs = 0;
    /* UC/UD/RAW: done once the destination port has taken the last packet. */
    std::uint64_t wire_port = 0;   ///< destination port id (0: nothing to wait for)
    std::uint32_t wire_pos = 0;    ///< its lane's position after our last packet
    std::uint64_t wire_deadline = 0;
};

/** An incoming message being assembled by the responder. */
struct rx_msg {
    bool active = false;
    bool is_write = false;
    std::vector<mseg> sg;        ///< receive WQE's buffers
    std::uint32_t rq_idx = 0;
    std::uint64_t offset = 0;    ///< bytes placed
    std::uint64_t raddr = 0;     ///< write: next address
    std::uint32_t rkey = 0;
    std::uint64_t wlen = 0;      ///< write: bytes left
    std::uint64_t total = 0;     ///< write: message length
    bool have_wqe = false;
};

struct mport;

struct mqp {
    std::uint32_t qpn = 0;
    vq::qp_type type = vq::qp_type::rc;
    vq::qp_state state = vq::qp_state::reset;
    void *pd = nullptr;
    mcq *scq = nullptr, *rcq = nullptr;
    msrq *srq = nullptr;
    bool sig_all = false;
    /* Queues (device memory). */
    std::uint8_t *sq = nullptr;
    std::uint32_t sq_cnt = 0;
    std::uint8_t *rq = nullptr;
    std::uint32_t rq_cnt = 0, rq_stride = 0;
    volatile std::uint32_t *dbrec = nullptr;
    std::uint8_t *uar = nullptr;
    std::uint32_t max_inline = 0, eth_min_inline = 0, max_send_sge = 0;
    /* Doorbells. */
    std::uint64_t bf_last[2] = {};
    bool bf_unverified[2] = {};
    unsigned last_half = 1;       ///< half of the last doorbell seen (the first goes to half 0)
    std::uint16_t db_end = 0;     ///< BB after the furthest doorbelled WQE
    std::uint16_t sq_ci = 0;      ///< next BB the device fetches
    std::uint16_t rq_ci = 0;      ///< receive WQEs consumed
    /* Attributes. */
    unsigned access = 0;
    std::uint32_t qkey = 0;
    std::uint64_t dport = 0;      ///< RC/UC: destination port id
    std::uint32_t dqpn = 0;
    std::uint32_t mtu = 4096;
    std::uint64_t timeout_ns = 0; ///< 0: infinite
    std::uint32_t retry_cnt = 7, rnr_retry = 7, min_rnr_timer = 12;
    std::uint32_t sq_psn = 0, rq_psn = 0;
    /* Requester. */
    std::deque<swqe> out;         ///< fetched, not completed
    std::uint32_t next_psn = 0;
    std::uint32_t retries = 0, rnr_tries = 0;
    std::uint64_t last_progress = 0, rnr_until = 0;
    std::vector<std::uint8_t> snap;  ///< strict: copies of outstanding WQEs (sq_cnt * 64)
    std::uint16_t snap_from = 0;     ///< first BB whose snapshot is live
    /* Responder. */
    std::uint32_t epsn = 0, msn = 0;
    bool nak_sent = false;
    rx_msg rx;
    struct atomic_reply { std::uint32_t psn; std::uint64_t orig; };
    std::deque<atomic_reply> atomics; ///< replayed for duplicate atomic requests
};

/** A peer port this port sends to. */
struct peer {
    std::uint64_t port_id = 0;
    env::segment seg;
    port_hdr *hdr = nullptr;
    char *base = nullptr;         ///< the segment's data (ours for self)
    int lane = -1;
    std::uint32_t produced = 0;
    bool self = false;
};

struct mport {
    std::mutex lock;
    options opt;
    std::uint32_t tag = 0;
    std::uint64_t port_id = 0;
    env::segment seg;
    env::segment tags;
    port_hdr *hdr = nullptr;
    std::map<std::uint32_t, std::unique_ptr<mqp>> qps;     ///< by qpn
    std::map<std::uint32_t, std::unique_ptr<mcq>> cqs;     ///< by cqn
    std::map<std::uint32_t, std::unique_ptr<msrq>> srqs;
    std::map<std::uint32_t, mr_obj> mrs;                   ///< by key index (key >> 8)
    std::map<std::uint64_t, std::unique_ptr<peer>> peers;
    std::uint32_t next_cqn = 1, next_srqn = 1, next_key = 1;
    std::vector<std::uint32_t> key_ver;                    ///< per key index: last variant used
    std::vector<void *> allocs;
    /* Faults. */
    std::vector<fault> faults;
    std::uint64_t pkt_counter = 0;
    std::uint64_t stalled_until = 0;
    /* Counters, trace. */
    stats st;
    std::string last_violation;
    std::FILE *trace = nullptr;
    std::string trace_file;
    std::uint32_t trace_seq = 0;
    /* Thread. */
    std::thread th;
    std::atomic<bool> stop{false};
    std::uint64_t next_housekeeping = 0;

    lane_ctrl *lanes() const noexcept
    {
        return reinterpret_cast<lane_ctrl *>(static_cast<char *>(seg.data()) + hdr->lanes_off);
    }
    wire_pkt *slot(std::uint32_t lane, std::uint32_t i) const noexcept
    {
        return reinterpret_cast<wire_pkt *>(static_cast<char *>(seg.data()) + hdr->slots_off +
                                            (static_cast<std::size_t>(lane) * lane_slots + (i % lane_slots)) *
                                                slot_bytes);
    }
    qp_pub *qpt() const noexcept
    {
        return reinterpret_cast<qp_pub *>(static_cast<char *>(seg.data()) + hdr->qpt_off);
    }
};

/* ---- model.cpp ---- */
std::uint64_t now_ns() noexcept;
void violation(mport &p, const char *fmt, ...);
/** Look up key @p key for local use by @p pd; null when invalid. */
mr_obj *find_key(mport &p, std::uint32_t key) noexcept;
/** Copy between host memory and a segment list, checking each key.
 *  @return 0, or the vendor syndrome of the first bad piece. */
std::uint8_t check_sg(mport &p, const std::vector<mseg> &sg, void *pd, bool write) noexcept;
/** GID-style address of a port, and back. */
void port_address(std::uint64_t port_id, std::uint8_t out[20]) noexcept;
bool parse_address(const std::uint8_t *raw, std::size_t len, std::uint64_t *port_id) noexcept;
std::string port_segment_name(std::uint64_t port_id);

/* ---- model_sq.cpp ---- */
/** Doorbells, WQE fetch and parse for one QP. @return work done. */
int process_sq(mport &p, mqp &q);

/* ---- model_xport.cpp ---- */
int progress_requester(mport &p, mqp &q);
int receive_packets(mport &p);
/** Write a CQE (64 bytes given) into @p c at its producer index; owner byte last. */
void write_cqe(mport &p, mcq &c, const std::uint8_t cqe[64]);
/** Requester error: error CQE for @p w, QP to ERR, flushes. */
void fail_wqe(mport &p, mqp &q, swqe &w, std::uint8_t synd, std::uint8_t vsynd);
/** Move @p q to ERR: flush every outstanding send and posted receive. */
void enter_error(mport &p, mqp &q);
/** Flush receive WQEs posted to a QP in ERR. @return work done. */
int flush_rq(mport &p, mqp &q);
/** Complete finished WQEs at the head of q.out (CQEs for the signaled ones). */
int retire(mport &p, mqp &q);
void reset_qp(mport &p, mqp &q);
/** The peer port @p port_id (attached on first use); null when unreachable,
 *  with the reason in *err (-FI_ENOENT, -FI_EACCES) when given. */
peer *get_peer(mport &p, std::uint64_t port_id, int *err = nullptr);

/* ---- model_trace.cpp ---- */
enum trace_type : std::uint16_t { tr_wqe = 1, tr_cqe = 2, tr_rwqe = 3, tr_doorbell = 4, tr_violation = 5 };
void trace_open(mport &p);
void trace_close(mport &p);
void trace(mport &p, trace_type t, std::uint32_t queue, std::uint32_t index, const void *data, std::size_t len);

} // namespace shunt::drv::mlx5::model
