/* drivers/shm: private definitions (shared-segment layout, local objects).
 * The layout and the ordering argument are described in
 * doc/guides/drivers/shm.md; keep the two in step. */
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include <immintrin.h>

#include "env/compiler.h"
#include "env/errors.h"
#include "env/segment.h"
#include "env/stats.h"
#include "common/csum.h"
#include "vq/driver.h"

namespace shunt::drv::shm {

namespace vq = shunt::vq;

/* ---------------- Shared layout (offsets only, never pointers) ---------------- */

inline constexpr std::uint64_t ctx_magic = 0x314d48535154564eull; // "NVTQSHM1"
inline constexpr std::uint32_t layout_version = 5;
inline constexpr unsigned num_lock_stripes = 64;

/** Head of a context's segment (data area offset 0). Written by the owner at
 *  open (before the segment is published by name) and at close. */
struct alignas(64) ctx_hdr {
    std::uint64_t magic;
    std::uint32_t version;
    std::uint32_t uid;
    std::int32_t pid;           ///< owner process
    std::uint32_t max_qp;
    std::uint64_t start_time;   ///< owner's start time (/proc/<pid>/stat field 22): pid reuse guard
    std::uint32_t max_mr;
    std::uint32_t pad0;
    std::uint64_t locks_off;    ///< num_lock_stripes lines: atomics' locks
    std::uint64_t mr_off;       ///< max_mr mr_entry
    std::uint64_t qp_off;       ///< max_qp qp_desc
    std::uint64_t heap_off;     ///< rings and alloc_buf memory
    std::uint64_t heap_size;
    alignas(64) std::atomic<std::uint32_t> closed; ///< owner closed the context (peers: gone)
};

/** One stripe lock for atomics on memory outside segments. Holder's pid, 0 when free. */
struct alignas(64) lock_line {
    std::atomic<std::int32_t> holder;
};

/** A region or window as peers see it. The owner invalidates (key = 0) before
 *  changing the other fields and publishes the key last (release); a peer
 *  loads the key (acquire), reads the fields, and re-checks the key. */
struct alignas(64) mr_entry {
    std::atomic<std::uint32_t> key; ///< 0: invalid; else generation << 20 | index << 8 | tag
    /** Initiators inside an access through this entry (check + copy): the
     *  owner waits for 0 after invalidating the key before the memory may be
     *  reused (dereg_mr, dealloc_mw, rebind, invalidation). */
    std::atomic<std::uint32_t> users;
    std::uint32_t access;           ///< vq::ACCESS_*
    std::uint64_t addr;             ///< owner's virtual address
    std::uint64_t length;
    std::uint64_t seg_off;          ///< offset in the owner's data area, or no_seg_off
};
static_assert(sizeof(mr_entry) == 64);
/** Table index of a key (max_mr <= 4096). */
inline std::uint32_t key_index(std::uint32_t key) noexcept { return (key >> 8) & 0xfff; }
/** Keys per table entry before it is retired: 255 tags x 4096 generations. */
inline constexpr std::uint32_t key_versions = 255u * 4096u;
inline constexpr std::uint64_t no_seg_off = ~0ull;
/** mr_entry::access bit marking a window (windows are not usable as lkeys). */
inline constexpr std::uint32_t entry_mw = 1u << 31;

/** Ring control: the receiver's line and the sender's line, apart. */
struct alignas(64) ring_ctrl {
    std::atomic<std::uint32_t> consumed; ///< receiver: slots consumed, published in batches
    /** Which incarnation of which QP receives from this ring (written by it
     *  when the ring is initialised, at creation and at every reset):
     *  ring_epoch_of(). A sender's goodbye names the epoch it attached to,
     *  so a late goodbye for an older QP, or for this QP before its last
     *  reset, is recognisably stale. */
    std::atomic<std::uint32_t> epoch;
    alignas(64) std::atomic<std::uint64_t> owner; ///< UD: claiming sender id (0: free)
    std::uint32_t src_qpn;                 ///< sender's QP number (UD)
    /** 0, or the epoch of the ring when its sender attached, stored when the
     *  sender went to ERR / was destroyed / reset (its last store to the
     *  ring). The receiver accepts only its ring's current epoch here. */
    std::atomic<std::uint32_t> sender_gone;
};
static_assert(sizeof(ring_ctrl) == 128);

/** A queue pair as peers see it. */
struct alignas(64) qp_desc {
    std::atomic<std::uint32_t> state; ///< vq::qp_state, or desc_free
    std::uint32_t qpn;                 ///< current QP number of this index (generation check)
    std::uint32_t type;
    std::uint32_t qkey;
    std::uint32_t access;              ///< qp_access_flags (responder)
    std::uint32_t flags;               ///< desc_* bits (set at creation)
    std::uint64_t ring_off;            ///< RC/UC: ring_ctrl + slots
    std::uint32_t ring_slots;
    std::uint32_t ud_nrings;           ///< UD: rings, each ring_ctrl + ud_ring_slots slots
    std::uint64_t ud_rings_off;
    std::uint32_t ud_ring_slots;
    std::atomic<std::uint64_t> ud_active; ///< UD: bit i set once ring i is claimed
    /** Large sends of this QP whose data the receiver has copied (written by
     *  the peer's receive side; own line). */
    alignas(64) std::atomic<std::uint32_t> rndv_acked;
    std::atomic<std::uint32_t> rndv_nak; ///< the receiver refused a large send (status + 1)
    /** Peers between reading this descriptor and claiming one of its rings
     *  (owner CAS and re-check): ring memory is not reclaimed while > 0. */
    std::atomic<std::uint32_t> entering;
    /** The split read this QP offered its peer (own line, written by both):
     *  split_word(ticket, split_*). */
    alignas(64) std::atomic<std::uint64_t> split_claim;
};
static_assert(sizeof(qp_desc) == 192);
inline constexpr std::uint32_t desc_free = 0xff;
/** qp_desc::flags: the QP lends its ring to its consumer (lent receives):
 *  senders must deliver each message as one chunk of the ring, never by
 *  rendezvous (the receiver has no buffer of its own to copy into). */
inline constexpr std::uint32_t desc_lend = 1;

/** A ring's epoch: the receiving QP's number (24 bits) and, above it, the
 *  count of its rings' initialisations (mod 256), @p prev the last one. */
inline std::uint32_t ring_epoch_of(std::uint32_t qpn, std::uint32_t prev) noexcept
{
    return ((prev >> 24) + 1) << 24 | (qpn & 0xffffff);
}

/** A sender's goodbye: tell the receiver of ring @p c, whose epoch was
 *  @p epoch when we attached, that we stopped writing. Skipped when the
 *  ring has been initialised again since (the goodbye is stale: the ring
 *  belongs to another QP, or to a new connection of the same one). Should
 *  the receiver initialise it between our check and our store, the store
 *  names the old epoch, which the receiver ignores. */
inline void say_gone(ring_ctrl *c, std::uint32_t epoch) noexcept
{
    if (c->epoch.load(std::memory_order_acquire) == epoch)
        c->sender_gone.store(epoch, std::memory_order_release);
}

/** QP numbers (24 bits, host-unique per user): ctx_id << 14 | generation
 *  << 10 | descriptor index. ctx_id comes from the host-wide table
 *  (ctx_id_alloc), the generation runs 1..15 per index. */
inline constexpr unsigned qpn_index_bits = 10, qpn_gen_bits = 4, max_ctx_ids = 1024;
inline std::uint32_t qpn_index(std::uint32_t qpn) noexcept { return qpn & ((1u << qpn_index_bits) - 1); }
inline std::uint32_t qpn_gen(std::uint32_t qpn) noexcept
{
    return (qpn >> qpn_index_bits) & ((1u << qpn_gen_bits) - 1);
}

/** Message opcodes in a slot. msg_split is no message: it asks the receiving
 *  side to copy a part of a read (split_req), and consumes no receive. */
enum : std::uint8_t {
    msg_send = 1, msg_send_imm = 2, msg_send_inv = 3, msg_write_imm = 4, msg_rndv = 5, msg_split = 6,
};

/** Payload of a msg_split message: the part of an RDMA read of the
 *  receiving side's memory that the initiator offers it to copy from its
 *  own region into the initiator's buffer (memcpy into the initiator's
 *  segment, process_vm_writev elsewhere). */
struct split_req {
    std::uint32_t ticket; ///< the offer's ticket in the initiator's qp_desc::split_claim
    std::uint32_t rkey;   ///< the read's rkey (a region or window of the receiving side)
    std::uint64_t raddr;  ///< the part's address in the receiving side's memory
    std::uint64_t dst;    ///< where it goes: the initiator's address, or with split_dst_seg an offset in its segment
    std::uint32_t len;    ///< bytes of the part
    std::uint32_t flags;  ///< split_dst_seg
};
inline constexpr std::uint32_t split_dst_seg = 1;
static_assert(sizeof(split_req) == 32 && sizeof(split_req) <= 48, "one slot");
/** qp_desc::split_claim: who copies the offered part. The initiator offers
 *  it (split_offered) and takes it back when nobody claimed it before its
 *  own part was done (split_taken_back); the peer claims it (split_claimed),
 *  then says split_done or split_failed (it copied nothing usable: the
 *  initiator copies the part itself). Each transition is one CAS from
 *  split_offered, or the claimer's final store, on the word of one ticket. */
enum : std::uint64_t {
    split_offered = 0, split_taken_back = 1, split_claimed = 2, split_done = 3, split_failed = 4,
};
constexpr std::uint64_t split_word(std::uint32_t ticket, std::uint64_t state) noexcept
{
    return std::uint64_t{ticket} << 8 | state;
}

/** Payload of a msg_rndv message: where the receiver copies a large send
 *  from (the sender's registered memory), followed by nsge rndv_piece. */
struct rndv_hdr {
    std::uint8_t op;       ///< the send's msg_* opcode
    std::uint8_t pad[3];
    std::uint32_t total;   ///< message length
    std::uint32_t nsge;
    std::uint32_t pad2;
};
struct rndv_piece {
    std::uint64_t where;   ///< offset in the sender's segment, or its virtual address
    std::uint32_t len;
    std::uint32_t in_seg;  ///< 1: where is a segment offset (memcpy); 0: process_vm_readv
};
static_assert(sizeof(rndv_hdr) == 16 && sizeof(rndv_piece) == 16);
/** Slot flags. */
enum : std::uint8_t { sf_first = 1, sf_last = 2, sf_solicited = 4 };

/** A slot: one cache line. The first slot of a chunk carries the header and
 *  up to slot_payload bytes; the chunk's other slots carry 64 data bytes each.
 *  seq is written last and publishes the whole chunk. */
struct alignas(64) slot {
    std::uint32_t seq;    ///< position + 1 (mod 2^32) when valid
    std::uint8_t op;      ///< msg_*
    std::uint8_t flags;   ///< sf_*
    std::uint16_t nslots; ///< slots of this chunk, this one included
    std::uint32_t len;    ///< bytes in this chunk; first chunk: see total in data[0..3] when !sf_last
    std::uint32_t imm;    ///< immediate data / rkey to invalidate
    std::uint8_t data[48];
};
static_assert(sizeof(slot) == 64);
inline constexpr std::uint32_t slot_payload = 48;
static_assert(offsetof(slot, data) + slot_payload == sizeof(slot),
              "a chunk's bytes run on from the first slot's data into the next slots");
/** Slots a chunk of @p len bytes takes. */
inline std::uint32_t slots_for(std::uint32_t len) noexcept
{
    return len <= slot_payload ? 1 : 1 + (len - slot_payload + 63) / 64;
}
/** Largest chunk (one message part) in a ring of @p slots slots: half the ring. */
constexpr std::uint32_t max_chunk_bytes(std::uint32_t slots) noexcept { return (slots / 2 - 1) * 64 + slot_payload; }

/* ---------------- Local objects ---------------- */

/** Test-and-test-and-set spinlock (the per-QP / per-CQ lock when not single-threaded). */
struct spinlock {
    std::atomic<bool> held{false};
    void lock() noexcept
    {
        while (held.exchange(true, std::memory_order_acquire))
            while (held.load(std::memory_order_relaxed))
                _mm_pause();
    }
    bool try_lock() noexcept
    {
        return !held.load(std::memory_order_relaxed) && !held.exchange(true, std::memory_order_acquire);
    }
    void unlock() noexcept { held.store(false, std::memory_order_release); }
};

struct shm_ctx;

/** An attached context: ours (self) or a peer's. */
struct peer {
    vq::dev_addr addr{};
    env::segment seg;       ///< unused for self
    char *base = nullptr;   ///< data area
    ctx_hdr *hdr = nullptr; ///< for the peer-written words only (closed): geometry is below
    int pid = 0;
    std::uint64_t start_time = 0;
    /** A pidfd of the owner (pidfd_open), taken at attach once its start
     *  time matched the header's: readable once the process exited, one
     *  poll(2) per check; -1 where the kernel or the fd limit refused it
     *  (then kill(2) and /proc/<pid>/stat are asked). */
    int pidfd = -1;
    int refs = 0;
    bool self = false;
    std::atomic<bool> dead{false};
    /* The segment's geometry, validated once when it is attached (or
     * created) and kept here: every process attached to the segment can
     * write its header, so nothing below is re-read from it. */
    std::uint64_t size = 0;      ///< bytes of the data area
    std::uint64_t mr_off = 0, qp_off = 0, locks_off = 0, heap_off = 0, heap_size = 0;
    std::uint32_t max_qp = 0, max_mr = 0;

    mr_entry *mrs() const noexcept { return reinterpret_cast<mr_entry *>(base + mr_off); }
    qp_desc *qps() const noexcept { return reinterpret_cast<qp_desc *>(base + qp_off); }
    lock_line *locks() const noexcept { return reinterpret_cast<lock_line *>(base + locks_off); }
    peer() = default;
    peer(const peer &) = delete;
    peer &operator=(const peer &) = delete;
    ~peer();

    /** Does [off, off + len) lie inside the heap of this segment? Overflow-safe. */
    bool in_heap(std::uint64_t off, std::uint64_t len) const noexcept
    {
        return off >= heap_off && off - heap_off <= heap_size && len <= heap_size - (off - heap_off);
    }
};

/** Is [off, off + len) inside [0, size)? Overflow-safe: the one bound check
 *  for offsets and lengths a peer wrote. */
constexpr bool range_ok(std::uint64_t off, std::uint64_t len, std::uint64_t size) noexcept
{
    return off <= size && len <= size - off;
}

struct shm_pd : vq::pd {
    int refs = 0;
};
struct shm_mr : vq::mr {
    std::uint32_t index = 0;
    int windows = 0;
};
struct shm_mw : vq::mw {
    std::uint32_t index = 0;
    shm_mr *bound = nullptr;
};
struct shm_ah : vq::ah {
    peer *p = nullptr;
};
struct shm_td : vq::td {};

struct shm_qp;
inline constexpr std::uint32_t max_sge_rx = 32;
inline constexpr std::uint32_t max_cq_qps = 1024; ///< QPs per CQ and direction

/** Completion queue: a local ring of vq::wc. */
struct shm_cq : vq::cq {
    vq::wc *ring = nullptr;
    std::uint32_t mask = 0;
    std::uint32_t head = 0; ///< consumer
    std::uint32_t tail = 0; ///< producer
    std::uint32_t cur = 0;  ///< start/next_poll: index of the current entry
    spinlock lock;
    std::uint32_t idle = 0;          ///< polls since the TSC was last looked at
    std::uint64_t next_check = 0;    ///< TSC of the next peer check
    shm_qp *rx[max_cq_qps] = {};     ///< QPs whose recv CQ this is
    shm_qp *tx[max_cq_qps] = {};     ///< QPs whose send CQ this is
    std::uint32_t nrx = 0, ntx = 0;
    shm_ctx *sctx = nullptr;
    /* poll_cq's output array while it progresses an empty CQ: completions go
     * straight to the caller (no copy through the ring). */
    vq::wc *direct = nullptr;
    std::uint32_t direct_cap = 0, direct_n = 0;

    std::uint32_t space() const noexcept { return (direct_cap - direct_n) + (mask + 1 - (tail - head)); }
    /** Where the next completion goes; commit() makes it visible. */
    vq::wc *next_entry() noexcept { return direct_n < direct_cap ? &direct[direct_n] : &ring[tail & mask]; }
    void commit() noexcept
    {
        if (direct_n < direct_cap)
            direct_n++;
        else
            tail++;
    }
};

/** A posted receive. */
struct rwqe {
    std::uint64_t wr_id;
    std::uint32_t num_sge;
    std::uint32_t pad;
};

/** Receive queue storage (QP or SRQ): single producer / single consumer ring. */
struct recvq {
    rwqe *wqe = nullptr;
    vq::sge *sges = nullptr;
    std::uint32_t max_sge = 0;
    std::uint32_t mask = 0;
    alignas(64) std::atomic<std::uint32_t> tail{0}; ///< producer (post_recv)
    spinlock plock;                                ///< producers, unless single-threaded
    alignas(64) std::atomic<std::uint32_t> head{0}; ///< consumer (polling)
    spinlock clock;                                ///< consumers (SRQ shared by several CQs)
};

struct shm_srq : vq::srq {
    recvq rq;
    int refs = 0;
    shm_ctx *sctx = nullptr;
};

/** How far the execution of a send-queue entry got (sq_run). */
enum class wqe_stage : std::uint8_t {
    fresh,        ///< posted, nothing done yet
    keys_checked, ///< its local keys were validated (a blocked send resumes here)
    data_written, ///< write_imm: the data is written, its notification waits for ring space
    rndv_pending, ///< rendezvous published: completes when the receiver's ack passes rndv_ticket
    split_pending, ///< split read: our part copied, the peer's claimed part not yet done (split_ticket)
    finished,     ///< executed (or failed): status holds the outcome, the completion is owed
};

/** Send work-queue entry (local). */
struct wqe {
    std::uint64_t wr_id;
    std::uint8_t op;       ///< op_*
    std::uint8_t flags;    ///< WR_* subset
    std::uint16_t num_sge; ///< SGEs in the per-entry list; 0 with inline data
    std::uint32_t len;     ///< data bytes (SGE total or inline)
    std::uint32_t rkey;
    std::uint32_t imm;     ///< immediate / rkey to invalidate / bind access
    std::uint64_t raddr;
    std::uint64_t a0, a1;  ///< compare,swap / add / bind addr,length / flush len,(type|level<<8)
    void *p0;              ///< bind: mw; UD: destination
    void *p1;              ///< bind: mr
    std::uint32_t done;    ///< bytes already pushed (chunked sends, TSO)
    std::uint16_t mss, hdr_sz;
    std::uint8_t has_data, is_inline, need;
    wqe_stage stage;       ///< execution progress
    std::uint32_t qkey;
    vq::wc_status status;  ///< outcome once stage is finished; split_pending: that of our part
    std::uint32_t rndv_ticket; ///< rendezvous: the value of rndv_acked that completes it
    std::uint32_t split_ticket; ///< split read: the ticket of its offer (qp_desc::split_claim)
    std::uint64_t posted;  ///< env::stats::stamp() at the builder: send-to-completion latency
};

enum : std::uint8_t {
    op_send = 1, op_send_imm, op_send_inv, op_tso, op_write, op_write_imm, op_read, op_cas,
    op_faa, op_bind, op_local_inv, op_flush,
};

/** A UD destination: a claimed ring in a peer's UD QP. */
struct ud_dest {
    peer *p = nullptr;
    std::uint32_t qpn = 0;
    std::uint32_t epoch = 0;   ///< the ring's epoch when claimed (say_gone)
    ring_ctrl *ctrl = nullptr; ///< null until claimed
    slot *slots = nullptr;
    std::uint32_t mask = 0;
    std::uint32_t tail = 0;
    std::uint32_t credit_head = 0;
    std::uint64_t pool_off = 0; ///< the receiver's ud_rings_off when claimed (it moves at its reset)
    bool failed = false;       ///< no ring available / no such QP: sends are dropped
};

/** Split reads of an RC QP (shm.qp.<QP number>.split). The send side
 *  writes the first two, the receive side the third. */
struct split_stats {
    env::stats::counter offered;     ///< RDMA reads of ours split with the peer
    env::stats::counter peer_copied; ///< of those, parts the peer copied
    env::stats::counter copied;      ///< parts of the peer's reads we copied for it
};

struct shm_qp : vq::qp {
    /* Sender state. */
    int err = 0;                  ///< first latched error of the batch
    /** This QP's statistics (shm.qp.<qpn>), nullptr when telemetry is off:
     *  the send side writes tx_*, drops, depth and completion, the receive
     *  side rx_*, both errors (stats_fp.h). */
    env::stats::io_stats *io = nullptr;
    /** The thread with a session open (wr_start .. wr_complete/wr_abort):
     *  its thread pointer, 0 when none. Written by that thread under the
     *  QP lock; read by any (relaxed) only to compare with its own. */
    std::atomic<std::uintptr_t> session{0};
    std::uint32_t sq_start = 0;   ///< sq_tail at wr_start
    std::uint32_t sq_tail = 0;    ///< producer
    std::uint32_t sq_head = 0;    ///< oldest not completed
    std::uint32_t sq_exec = 0;    ///< oldest not executed (sq_head <= sq_exec <= sq_tail)
    std::uint32_t sq_mask = 0;
    wqe *cur = nullptr;           ///< WR being built
    wqe *sq = nullptr;
    vq::sge *sq_sge = nullptr;
    std::uint8_t *sq_inl = nullptr;
    std::uint32_t inl_stride = 0;
    std::uint32_t max_sge_cap = 0;
    /* Transmit ring (RC/UC): the peer's ring. */
    slot *tx_slots = nullptr;
    ring_ctrl *tx_ctrl = nullptr;
    std::uint32_t tx_mask = 0;
    std::uint32_t tx_tail = 0;
    std::uint32_t tx_credit_head = 0;
    std::uint32_t rndv_posted = 0;    ///< rendezvous messages sent (ticket of the last)
    std::uint32_t split_tickets = 0;  ///< split reads offered (ticket of the last)
    bool split_busy = false;          ///< a split read waits for the peer's part (one at a time)
    /** Our bytes [split_lo, split_hi) that the peer's part of the pending
     *  split read writes: a later read into them waits for it. */
    std::uint64_t split_lo = 0, split_hi = 0;
    std::uint64_t blocked_since = 0;  ///< TSC when the head WR first waited for ring space
    std::atomic<std::uint32_t> state{static_cast<std::uint32_t>(vq::qp_state::reset)};
    spinlock lock;
    /* Receive side (touched under the recv CQ's lock). */
    slot *rx_slots = nullptr;
    ring_ctrl *rx_ctrl = nullptr;
    std::uint32_t rx_mask = 0;
    std::uint32_t rx_head = 0;
    std::uint32_t rx_published = 0;
    recvq *rq = nullptr;         ///< own receive queue or the SRQ's
    recvq own_rq;
    bool rx_busy = false;        ///< a multi-chunk message is being received
    std::uint32_t rx_wqe = 0;    ///< its receive (index in rq)
    std::uint32_t rx_off = 0;    ///< bytes placed
    std::uint32_t rx_total = 0;
    vq::wc rx_wc{};              ///< its completion, finished at the last chunk
    int rx_ud_next = 0;          ///< UD: ring to scan first
    /* Identity / wiring. */
    shm_ctx *sctx = nullptr;
    shm_cq *scq = nullptr, *rcq = nullptr;
    shm_srq *ssrq = nullptr;
    vq::td *td = nullptr;        ///< thread domain (dealloc_td: busy while set)
    qp_desc *desc = nullptr;     ///< ours, in our segment
    std::uint32_t index = 0;
    std::uint32_t ring_epoch = 0; ///< our rings' epoch (ring_ctrl::epoch), new at every reset
    std::uint64_t ring_mem = 0;  ///< heap offset of our ring(s)
    std::uint64_t ring_bytes = 0;
    peer *rpeer = nullptr;       ///< RC/UC: connected peer
    std::uint32_t dest_qpn = 0;
    std::uint32_t tx_epoch = 0;  ///< the epoch of the peer's ring when we claimed it (say_gone)
    qp_desc *rdesc = nullptr;    ///< peer's descriptor
    vq::qp_attr attr{};
    std::uint8_t *stage = nullptr; ///< staging for TSO / IP_CSUM messages (ud_mtu bytes)
    /* Lent receives (qp_init_attr::lend_recv). */
    bool lend = false;           ///< completions point into our ring; credits return at the next poll
    bool lend_flushed = false;   ///< ERR: the one flush completion was given
    bool lend_bounce_used = false; ///< the bounce holds a message lent in this poll
    bool peer_lends = false;     ///< RC/UC: the peer QP lends (no rendezvous, one chunk per message)
    std::uint32_t max_lend = 0;  ///< largest message we take (one chunk of our ring; UD: the MTU)
    std::uint8_t *lend_bounce = nullptr; ///< a message that wraps around the ring's end is lent from here
    ud_dest *dests = nullptr;    ///< UD destinations
    std::uint16_t *dest_hash = nullptr; ///< (peer, qpn) → index + 1 into dests, 0 = empty
    std::uint32_t ndests = 0;
    std::uint32_t last_dest = 0;
    bool notified = false;       ///< peer told we are gone
    std::atomic<bool> peer_died{false}; ///< ERR because the peer died: first flushed WR gets retry_exc_err
    /** ERR because the peer died or closed (RC/UC): the messages it had
     *  published in our ring (its sends completed) are delivered before the
     *  receives are flushed. Set by whoever sees the peer gone, cleared by
     *  the receive side once the ring shows nothing more. */
    std::atomic<bool> rx_drain{false};
    /** sq_head != sq_tail, published for pollers of the send CQ (written under
     *  the QP lock, or by the td thread), so they never read the indices. */
    std::atomic<bool> sq_busy{false};
    std::uint64_t ud_id = 0;     ///< our sender id (pid << 32 | n) in the owner word of rings we write
    std::uint32_t *ud_rx_head = nullptr; ///< UD: per ring consumer positions
    std::uint32_t *ud_rx_pub = nullptr;
    /* UD: our ring pool's geometry (the descriptor's copies are for peers:
     * they can write them, so the receive side never reads them back). */
    std::uint32_t ud_nrings = 0;     ///< at most 64 (ud_active's bits)
    std::uint32_t ud_ring_slots = 0;
    /** A peer broke the protocol on one of our rings: the QP is in ERR and
     *  the first receive it flushes completes with bad_resp_err. */
    bool rx_violated = false;
    bool violation_logged = false;   ///< logged once per QP
    vq::sge rx_sges[max_sge_rx]; ///< receive in progress: its SGEs
    std::uint32_t rx_nsge = 0;
    /* Last receive SGE validated (fast path): valid while key_gen is unchanged. */
    std::uint32_t ck_lkey = 0, ck_gen = 0;
    std::uint64_t ck_lo = 0, ck_hi = 0;
    env::stats::io_block io_blk; ///< owns *io
    split_stats split_st;             ///< RC: split reads
    env::stats::registration split_reg; ///< after split_st: unregistered before it goes
};

struct shm_ctx : vq::context {
    env::segment seg;
    peer self;
    ctx_hdr *hdr = nullptr;
    std::mutex lock;            ///< setup calls
    std::vector<peer *> peers;  ///< attached peers (refcounted)
    std::vector<shm_mr *> mr_obj;  ///< index → region (or null)
    std::vector<shm_mw *> mw_obj;  ///< index → window (or null)
    std::vector<std::uint32_t> mr_ver; ///< per index: keys handed out (key_versions: retired)
    std::vector<std::uint32_t> mr_stuck; ///< per index: users a dead peer left counted (see entry_invalidate)
    std::uint32_t mr_next = 0;          ///< next index to try (round robin: slow reuse)
    std::vector<shm_qp *> qp_obj;  ///< index → QP
    struct block { std::uint64_t off, size; };
    std::vector<block> free_blocks; ///< heap free list (owner only)
    std::vector<block> used_bufs;   ///< alloc_buf allocations
    /** Ring memory of destroyed (or reset) QPs that a peer may still write:
     *  returned to the heap only once every ring's sender said goodbye,
     *  released it or died (reclaim_rings). index: the QP's descriptor,
     *  held with the memory when the QP was destroyed. */
    struct zombie { std::uint64_t off, bytes; std::uint32_t index, epoch, nrings; bool held; };
    std::vector<zombie> zombies;
    std::vector<std::uint8_t> qp_held; ///< descriptor index held by a zombie
    std::uint32_t qp_next = 0;          ///< next descriptor index to try (round robin)
    std::uint32_t ctx_id = 0;           ///< host-wide context id (QP number bits 14..23)
    int npd = 0, ncq = 0, nqp = 0, nsrq = 0, nmr = 0, nmw = 0, nah = 0, ntd = 0;
    /** Bumped whenever a key of ours stops being valid (dereg, invalidate,
     *  unbind, rebind): receive-side lkey caches compare it. */
    std::atomic<std::uint32_t> key_gen{1};
};

/* ---------------- Limits and tunables ---------------- */

struct limits {
    std::uint32_t segment_mb;
    std::uint32_t ring_slots;    ///< RC/UC ring per QP
    std::uint32_t ud_rings;
    std::uint32_t ud_ring_slots;
    std::uint32_t rndv_bytes;    ///< sends of at least this many bytes (SGE data) use rendezvous
    std::uint32_t split_bytes;   ///< RC RDMA reads of at least this many bytes are split with the target (0: never)
    std::uint32_t max_qp, max_mr;
    std::uint32_t peer_check_ms;
    /** Cross-memory attach (process_vm_readv/writev) reaches peers' memory
     *  outside their segments: SHUNT_SHM_CMA, and this process allowed to
     *  (no seccomp filter refusing the calls, Yama's ptrace_scope below 2 or
     *  CAP_SYS_PTRACE). Without it RDMA to such memory fails with a remote
     *  access error and sends from it are copied through the ring. */
    bool cma;
};
const limits &lim() noexcept;

inline constexpr std::uint32_t max_wr = 1u << 15;
inline constexpr std::uint32_t max_sge = 32;
inline constexpr std::uint32_t max_inline = 4160;
inline constexpr std::uint32_t default_wr = 256;
inline constexpr std::uint32_t default_inline = 64;
inline constexpr std::uint32_t max_msg = 1u << 30;
inline constexpr std::uint32_t ud_mtu = 4096;
inline constexpr std::uint32_t max_tso_hdr = 256;
inline constexpr std::uint32_t max_cqe = 1u << 20;
inline constexpr std::uint32_t max_cq = 1024;  ///< CQs per context (device_attr::max_cq)
inline constexpr std::uint32_t max_srq = 1024; ///< SRQs per context (device_attr::max_srq)
inline constexpr std::uint32_t max_ud_dests = 1024;
inline constexpr std::uint32_t ud_dest_hash = 2048; ///< open-addressing index over dests (power of two)

/* ---------------- Shared helpers (shm_ctx.cpp) ---------------- */

inline shm_ctx *to_ctx(vq::context *c) noexcept { return static_cast<shm_ctx *>(c); }
inline shm_qp *to_qp(vq::qp *q) noexcept { return static_cast<shm_qp *>(q); }
inline shm_cq *to_cq(vq::cq *c) noexcept { return static_cast<shm_cq *>(c); }

/** Attach (refcounted) the context at @p a; self when it is ours. Context lock held. */
int peer_get(shm_ctx *c, const vq::dev_addr &a, peer **out);
void peer_put(shm_ctx *c, peer *p);
/** Slow path: is the peer's process gone (or its context closed)? Latches dead. */
bool peer_dead(peer *p) noexcept;
/** Heap allocation in our segment (context lock held). @return offset or no_seg_off. */
std::uint64_t heap_alloc(shm_ctx *c, std::uint64_t size);
void heap_free(shm_ctx *c, std::uint64_t off, std::uint64_t size);
/** May no sender write into the @p nrings rings at @p off (stamped with
 *  @p epoch) any more? Slow path (kill(2) per claimed ring). */
bool rings_quiet(shm_ctx *c, std::uint64_t off, std::uint64_t bytes, std::uint32_t nrings,
                 std::uint32_t epoch) noexcept;
/** Return the memory of quiet zombies to the heap (context lock held). */
void reclaim_rings(shm_ctx *c) noexcept;

/** Where an access lands in a region's owner. */
struct region_ref {
    std::uint64_t addr;   ///< owner VA of the start of the access
    std::uint64_t seg_off; ///< offset of that in the owner's data area, or no_seg_off
};
/** Is @p key a valid region (or window, unless @p local) of @p p allowing
 *  @p need over [addr, addr+len)? On success fills @p out. */
bool check_key(peer *p, std::uint32_t key, std::uint64_t addr, std::uint64_t len, unsigned need,
               region_ref *out, bool local = false) noexcept;

/** check_key for a remote access, counted in the entry's users until
 *  unpin(*pin): the owner does not complete an invalidation meanwhile. */
inline bool pin_key(peer *p, std::uint32_t key, std::uint64_t addr, std::uint64_t len, unsigned need,
                    region_ref *out, mr_entry **pin) noexcept
{
    std::uint32_t idx = key_index(key);
    if (key == 0 || idx >= p->max_mr)
        return false;
    mr_entry &e = p->mrs()[idx];
    e.users.fetch_add(1, std::memory_order_seq_cst);
    if (!check_key(p, key, addr, len, need, out)) {
        e.users.fetch_sub(1, std::memory_order_release);
        return false;
    }
    *pin = &e;
    return true;
}
inline void unpin(mr_entry *e) noexcept { e->users.fetch_sub(1, std::memory_order_release); }
/** Owner, under c->lock: invalidate entry @p idx of our table (dereg_mr,
 *  dealloc_mw, unbinding or rebinding a window, local_inv, send_inv). Stores
 *  key = 0 (seq_cst) and waits until no initiator is inside an access through
 *  the entry (bounded: see the driver guide). A wait that gives up (a peer
 *  died inside an access: its count stays) retires the entry, so it is never
 *  handed out again once its region or window is gone, and records the count
 *  left, so later invalidations of a window bound there wait only for
 *  accesses beyond it. */
void entry_invalidate(shm_ctx *c, std::uint32_t idx) noexcept;

/** Copy between local memory and a peer's memory (memcpy within segments,
 *  process_vm_readv/writev otherwise). @return true on success. */
bool peer_write(peer *p, const region_ref &dst, const void *src, std::size_t len) noexcept;
bool peer_read(peer *p, const region_ref &src, void *dst, std::size_t len) noexcept;

/* ---------------- QP / CQ (shm_qp.cpp, shm_rx.cpp, shm_cq.cpp) ---------------- */

int create_qp(vq::pd *p, const vq::qp_init_attr *a, vq::qp **out);
int destroy_qp(vq::qp *q);
int modify_qp(vq::qp *q, const vq::qp_attr *a, unsigned mask);
int query_qp(vq::qp *q, vq::qp_attr *out);
int check_dest_qp(vq::context *c, const vq::qp_addr *dest, vq::qp_type type);
vq::qp_state qp_state_of(const vq::qp *q);
int create_cq(vq::context *c, const vq::cq_init_attr *a, vq::cq **out);
int destroy_cq(vq::cq *c);
int create_srq(vq::pd *p, const vq::srq_init_attr *a, vq::srq **out);
int destroy_srq(vq::srq *s);

/** Fill a completion: the one place a vq::wc is written field by field
 *  (receives, send completions, flushes). */
inline void fill_wc(vq::wc &w, std::uint64_t wr_id, vq::wc_status status, vq::wc_opcode opcode,
                    std::uint32_t byte_len, std::uint32_t qp_num, std::uint32_t src_qp = 0, std::uint32_t imm = 0,
                    unsigned wc_flags = 0, std::uint32_t invalidated_rkey = 0,
                    const std::uint8_t *data = nullptr) noexcept
{
    w.wr_id = wr_id;
    w.status = status;
    w.opcode = opcode;
    w.vendor_err = 0;
    w.byte_len = byte_len;
    w.imm_data = imm;
    w.invalidated_rkey = invalidated_rkey;
    w.qp_num = qp_num;
    w.src_qp = src_qp;
    w.wc_flags = wc_flags;
    w.reserved = 0;
    w.data = data;
}

/** Push a completion (CQ lock held by the caller or single-threaded). */
inline void cq_push(shm_cq *c, const vq::wc &w) noexcept
{
    *c->next_entry() = w;
    c->commit();
}
/** Send-side progress: execute queued WRs while possible (QP lock held). */
void sq_progress(shm_qp *q, bool cq_locked) noexcept;
/** sq_progress without publishing sq_busy. */
void sq_run(shm_qp *q, bool cq_locked) noexcept;
/** poll_lent of a lent-receive RC/UC QP (shm_lend.cpp); other QPs keep
 *  the stub. Call after install_fast_path. */
void install_poll_lent(shm_qp *q) noexcept;
/** Receive-side progress for one QP (recv CQ lock held). @return completions added. */
unsigned rx_progress(shm_qp *q, unsigned budget) noexcept;
/** Move a QP to ERR and tell its peer (any thread). */
void qp_to_err(shm_qp *q) noexcept;
/** Before @p q lets go of its peer (destroy, reset): wait for the part of
 *  a split read the peer claimed, which it writes into the read's buffer;
 *  bounded (shm_tx.cpp). */
void split_settle(shm_qp *q) noexcept;
/** A peer wrote something into one of @p q's rings that breaks the protocol
 *  (@p what names the field, @p value is what it held): log it once, move
 *  the QP to ERR and report bad_resp_err on its next receive completion.
 *  Every other QP and the process carry on. Cold; recv CQ lock held. */
void rx_violation(shm_qp *q, const char *what, std::uint64_t value) noexcept;
/** Is @p slots a ring size this driver could have made (a power of two in
 *  the range SHUNT_SHM_RING_SLOTS allows)? Peers' descriptors are checked with it. */
constexpr bool ring_slots_ok(std::uint32_t slots) noexcept
{
    return slots >= 64 && slots <= 65536 && (slots & (slots - 1)) == 0;
}
/** Bytes of one ring of @p slots slots: its control lines and its slots. */
constexpr std::uint64_t ring_bytes(std::uint32_t slots) noexcept
{
    return sizeof(ring_ctrl) + std::uint64_t{slots} * sizeof(slot);
}
/** Periodic slow-path check of the peers of a CQ's QPs (CQ lock held). */
void cq_check_peers(shm_cq *c) noexcept;
/** The peer of a connected QP died or closed: before flushing, its receive
 *  side delivers what the peer had published in our ring (rx_drain). Not
 *  for UD (its rings drain by sender_gone) or lent receives. Call before
 *  the QP goes to ERR. */
inline void drain_before_flush(shm_qp *q) noexcept
{
    if (q->type != vq::qp_type::ud && !q->lend)
        q->rx_drain.store(true, std::memory_order_release);
}

/** Checksums and segmentation (drivers/common/csum.h). */
using common::ip_checksums;
using common::tso_fixup;

/** Invalidate key @p k of our context (local_inv, send_inv). @return success. */
bool invalidate_key(shm_ctx *c, std::uint32_t k) noexcept;
/** Receive-queue storage. @return 0 or -FI_ENOMEM. */
int rq_init(recvq *rq, std::uint32_t wr, std::uint32_t sge) noexcept;
void rq_free(recvq *rq) noexcept;
/** Cycles between peer checks. */
std::uint64_t peer_check_cycles() noexcept;

/** Copy @p n <= 64 bytes without a library call (overlapping word moves). */
// GCC 12 reports -Warray-bounds "subscript -1" here when this is inlined into
// rndv_send with a 528-byte source on the stack: it cannot see that the
// n >= 4 / n >= 8 branches imply d + n - 4 >= d. A false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
inline void small_copy(void *dst, const void *src, std::uint32_t n) noexcept
{
    auto *d = static_cast<std::uint8_t *>(dst);
    auto *s = static_cast<const std::uint8_t *>(src);
    if (n >= 16) {
        if (n > 32) {
            __builtin_memcpy(d, s, 32);
            __builtin_memcpy(d + n - 32, s + n - 32, 32);
        } else {
            __builtin_memcpy(d, s, 16);
            __builtin_memcpy(d + n - 16, s + n - 16, 16);
        }
    } else if (n >= 8) {
        __builtin_memcpy(d, s, 8);
        __builtin_memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        __builtin_memcpy(d, s, 4);
        __builtin_memcpy(d + n - 4, s + n - 4, 4);
    } else if (n) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
}
#pragma GCC diagnostic pop

/** Receive-queue helper shared by QPs and SRQs: post one receive. */
inline int rq_post(recvq *rq, bool locked, std::uint64_t wr_id, const vq::sge *sg, std::uint32_t n) noexcept
{
    if (n > 0 && !sg) [[unlikely]]
        return -FI_EINVAL;
    if (locked)
        rq->plock.lock();
    std::uint32_t t = rq->tail.load(std::memory_order_relaxed);
    if (t - rq->head.load(std::memory_order_acquire) > rq->mask) [[unlikely]] {
        if (locked)
            rq->plock.unlock();
        return -FI_EAGAIN;
    }
    std::uint32_t i = t & rq->mask;
    rwqe &r = rq->wqe[i];
    r.wr_id = wr_id;
    r.num_sge = n;
    vq::sge *d = &rq->sges[static_cast<std::size_t>(i) * rq->max_sge];
    if (n == 1) [[likely]] {
        // Field by field: the caller usually built *sg just now with three
        // narrower stores, and one 16-byte load of it would miss forwarding.
        std::uint64_t a = sg[0].addr;
        std::uint32_t len = sg[0].length;
        asm volatile("" ::: "memory"); // keep the two 4-byte loads apart
        std::uint32_t key = sg[0].lkey;
        d[0].addr = a;
        d[0].length = len;
        d[0].lkey = key;
    } else
        for (std::uint32_t k = 0; k < n; k++)
            d[k] = sg[k];
    // Publish the receive to the consumer (polling thread): entry before tail.
    rq->tail.store(t + 1, std::memory_order_release);
    if (locked)
        rq->plock.unlock();
    return 0;
}

} // namespace shunt::drv::shm
