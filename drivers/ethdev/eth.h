/* drivers/ethdev: private definitions (ports, contexts, queues).
 * doc/guides/drivers/ethdev.md describes the design; keep the two in step.
 *
 * Threading. A port is process-wide; its shared queue pair 0 is guarded by
 * two spinlocks (rx: try-locked by pollers; tx). Every QP has one lock (its
 * posting lock, also held by whoever progresses it) unless it has a thread
 * domain. Pollers hold a CQ lock and only try-lock QPs; QP holders may lock
 * CQs: no cycle. A RAW_PACKET QP with a thread domain may own a queue pair
 * of its port exclusively and then takes no port lock at all. */
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <immintrin.h>

#include <rte_ethdev.h>
#include <rte_gso.h>
#include <rte_mbuf.h>

#include "common/session.h"
#include "env/compiler.h"
#include "env/errors.h"
#include "env/mempool.h"
#include "vq/driver.h"
#include "eth_stats.h"
#include "ethdev_ext.h"
#include "wire.h"

struct rte_ring;

namespace shunt::drv::ethdev {

namespace vq = shunt::vq;

/* ---------------- Limits ---------------- */

inline constexpr std::uint32_t max_wr = 1u << 14;
inline constexpr std::uint32_t max_sge = 32;
inline constexpr std::uint32_t max_inline = 1024;
inline constexpr std::uint32_t default_wr = 256;
inline constexpr std::uint32_t default_inline = 64;
inline constexpr std::uint32_t max_msg = 1u << 30;
inline constexpr std::uint32_t max_tso_hdr = 256;
inline constexpr std::uint32_t max_cqe = 1u << 20;
inline constexpr std::uint32_t max_mr = 4096;
inline constexpr std::uint32_t qpn_index_bits = 10;
inline constexpr std::uint32_t max_qp = 1u << qpn_index_bits; ///< per port
inline constexpr std::uint32_t max_cq_qps = 1024;              ///< QPs per CQ
/** Lent receives (qp_init_attr::lend_recv): the largest RC message (device_attr::max_lend_msg;
 *  one of several packets is lent from the QP's bounce buffer, a one-packet one from its mbuf). */
inline constexpr std::uint32_t max_lend_msg = 32768;
/** Lent receive completions a CQ keeps on loan at most (each holds an mbuf of the port's pool). */
inline constexpr std::uint32_t max_lent_out = 512;
inline constexpr std::uint32_t max_raw_shared = 16;            ///< RAW QPs on a port's shared queue
inline constexpr std::uint32_t rx_ring = 512;                  ///< frames parked per QP (power of two)
inline constexpr std::uint32_t burst = 32;
inline constexpr std::uint32_t stage_max = 64;                 ///< mbufs staged per QP for tx_burst (a bit each in stage_ends)
static_assert(stage_max == 64 && max_wr <= 65536, "stage_ends is one 64-bit mask; stage_wqe holds a slot in 16 bits");
inline constexpr std::uint32_t max_rd_atomic = 16;             ///< reads/atomics in flight (both sides)
inline constexpr std::uint32_t rc_window = 256;                ///< RC/UC packets unacknowledged
/** Responses one RDMA read request asks for: a longer read goes as several
 *  requests (each the next part of it), at most rc_window packets of
 *  responses outstanding, so a read never sends more frames at once than
 *  a receiving port's ring takes. */
inline constexpr std::uint32_t read_chunk = 64;
inline constexpr std::uint32_t max_resps = 40;                 ///< responder's queue (reads, atomics, acks)
inline constexpr std::uint32_t max_arp = 64;

/* ---------------- Small helpers ---------------- */

/** Test-and-test-and-set spinlock. */
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

inline std::uint32_t pow2_at_least(std::uint32_t v) noexcept
{
    std::uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

/* ---------------- Ports ---------------- */

struct eth_qp;
struct eth_cq;

/** One frame handed from the port's shared queue to a QP, parsed. */
struct rxpkt {
    rte_mbuf *m;
    std::uint16_t bth;     ///< offset of the BTH in the first segment (RoCE frames)
    std::uint16_t hlen;    ///< BTH + extension headers
    std::uint32_t plen;    ///< payload bytes (without pad and ICRC)
};

/** An ARP cache entry. */
struct arp_entry {
    std::uint32_t ip = 0; ///< network order; 0: free
    rte_ether_addr mac{};
};

struct port {
    /* Shared receive path (queue 0): pollers try-lock rx_lock. */
    alignas(64) spinlock rx_lock;
    /** Queue 0 belongs to one RAW_PACKET QP (thread domain): the shared
     *  receive path leaves it alone. */
    std::atomic<bool> q0_owned{false};
    /** A destination of the port is the port itself (port_loop_on): RoCE
     *  frames to its own MAC and IPv4 go through `loop` instead of the PMD,
     *  and the shared receive path takes them from there. */
    std::atomic<bool> loop_on{false};
    std::uint16_t id = 0;               ///< DPDK port id
    std::atomic<eth_qp *> qps[max_qp];  ///< by QP number index
    eth_qp *raw[max_raw_shared] = {};   ///< RAW_PACKET QPs on queue 0 (under rx_lock)
    std::uint32_t nraw = 0;
    std::uint32_t raw_next = 0;         ///< round robin among them
    /** Queues beyond 0 that no QP owns (under rx_lock): a port that spreads
     *  frames over its queues puts some there, so the shared path polls them. */
    std::uint16_t nunowned = 0;
    std::uint16_t unowned[RTE_MAX_QUEUES_PER_PORT] = {};
    /** RC, UC and UD QPs on the port: frames on queues that RAW_PACKET QPs
     *  own are looked at for RoCE and ARP only while there are any. */
    std::atomic<std::uint32_t> roce_qps{0};
    rte_ring *loop = nullptr;           ///< loopback frames (any thread enqueues; taken under rx_lock)
    /* Shared transmit queue 0. */
    alignas(64) spinlock tx_lock;
    std::uint16_t ip_id = 0;            ///< IPv4 id of frames sent on queue 0 by the port itself
    /* Counters (port_counters). Written with relaxed atomics: several
     * threads may drop frames of their own queues. */
    alignas(64) std::atomic<std::uint64_t> cnt[num_counters] = {};
    /* Identity and configuration (set at probe / configure). */
    alignas(64) std::string name;
    std::string description;
    vq::device dev{};
    rte_ether_addr mac{};
    std::uint32_t ipv4 = 0;             ///< network order
    std::uint16_t mtu = 1500;
    bool kernel_mtu = false;            ///< mtu is the kernel interface's, set on the PMD at start
    std::uint32_t path_mtu = 1024;      ///< RoCE payload per packet (an IBTA MTU)
    std::uint32_t max_frame = 0;        ///< largest frame we send (Ethernet header, no FCS)
    std::uint16_t nq = 1;               ///< queue pairs configured
    std::uint16_t rxd = 1024, txd = 1024;
    rte_eth_dev_info info{};
    std::uint64_t tx_offloads = 0;      ///< enabled at configure
    std::uint64_t rx_offloads = 0;
    bool hw_tso = false, hw_csum = false, hw_rx_csum = false, need_prepare = false;
    bool dma_virtual = true;            ///< the PMD copies (vdev): any address is fine for zero-copy
    rte_device *device = nullptr;       ///< for DMA mappings of registered memory (not dma_virtual)
    env::pool pool;                     ///< data mbufs
    env::pool bare;                     ///< mbufs for external buffers and GSO's indirect segments
    env::pool hdrs;                     ///< GSO's direct (header) segments
    rte_gso_ctx gso{};
    /* Setup state (setup_lock). */
    std::mutex setup_lock;
    bool configured = false;
    int contexts = 0;
    std::uint32_t qpn_gen[max_qp] = {};
    std::uint32_t qp_next = 0;
    std::uint8_t queue_owned[RTE_MAX_QUEUES_PER_PORT] = {}; ///< exclusive owner of queue pair i
    int shared_users = 0;               ///< QPs using queue 0
    std::uint32_t salt = 0;             ///< high bits of QP numbers (stale frames of an older process miss)
    /* ARP cache (arp_lock). */
    std::mutex arp_lock;
    arp_entry arp[max_arp];
    std::uint32_t arp_next = 0;
    env::stats::registration stats_reg; ///< ethdev.<port>: cnt as a statistics block

    void count(counter c, std::uint64_t n = 1) noexcept { cnt[c].fetch_add(n, std::memory_order_relaxed); }
};

/** Every probed port (index = DPDK port id order of probing). */
std::vector<port *> &ports();
port *port_of_device(const vq::device *d) noexcept;
/** Configure and start the port on first use (setup_lock held). */
int port_start(port *p);
/** Poll the shared queue 0 of @p p once and hand frames to their QPs.
 *  @return frames taken (0 when another thread holds the rx lock). */
unsigned port_poll(port *p) noexcept;
/** Rebuild the list of queues the shared path polls beyond queue 0 (after
 *  a queue's owner changed; setup_lock held). */
void port_unowned_queues(port *p) noexcept;
/** A frame from a queue a RAW_PACKET QP owns, on a port with RoCE QPs: a
 *  RoCE frame for one of them goes to the shared path (under the rx lock)
 *  and @return true; an ARP frame goes to the responder too and, like
 *  everything else, stays the owner's (false). */
bool port_divert(port *p, rte_mbuf *m) noexcept;
/** Transmit on queue @p q (locked when it is the shared queue). @return taken. */
std::uint16_t port_tx(port *p, std::uint16_t q, bool locked, rte_mbuf **m, std::uint16_t n) noexcept;
/** Loop the port's RoCE frames to itself back (a destination of the port
 *  is its own address; setup_lock not held). @return 0; -FI_ENOMEM. */
int port_loop_on(port *p);
/** Is the link up? (Reads the PMD's link status: may be a system call.) */
bool port_link_up(port *p) noexcept;
/** Wait (bounded, SHUNT_ETHDEV_LINK_WAIT_MS) for the link to be up. */
void port_wait_link(port *p);
/** Resolve @p ip (network order) to a MAC: the cache, else ARP requests on
 *  the port (bounded, SHUNT_ETHDEV_ARP_MS). @return 0; -FI_EHOSTUNREACH. */
int arp_resolve(port *p, std::uint32_t ip, rte_ether_addr *out);
/** Give a received ARP frame to the responder/resolver. */
void arp_input(port *p, const std::uint8_t *f, std::uint32_t len) noexcept;
/** Allocate a data mbuf of the port (null when the pool is empty). */
inline rte_mbuf *mbuf_get(port *p) noexcept { return rte_pktmbuf_alloc(p->pool.raw()); }

/* ---------------- Context, memory, address handles ---------------- */

/** An entry of a context's key table (regions and windows). The key is
 *  published last (release); a responder loads it (acquire), counts itself
 *  in users, re-checks it, and leaves users when its access is over;
 *  whoever invalidates stores 0 and waits for users to drain. */
struct key_entry {
    std::atomic<std::uint32_t> key{0};  ///< 0: invalid; index << 8 | tag
    std::atomic<std::uint32_t> users{0};
    unsigned access = 0;                ///< ACCESS_*; key_mw marks a window
    std::uint64_t addr = 0, length = 0;
    struct eth_mr *mr = nullptr;        ///< region, or (window) the region it is bound to
    struct eth_mw *mw = nullptr;        ///< window, or null
    vq::pd *pd = nullptr;
};
inline constexpr unsigned key_mw = 1u << 31;
inline std::uint32_t key_index(std::uint32_t k) noexcept { return (k >> 8) & (max_mr - 1); }

struct eth_ctx;

struct eth_pd : vq::pd {
    int refs = 0;
};
struct eth_mr : vq::mr {
    std::uint32_t index = 0;
    int windows = 0;
    bool dma = false;       ///< the port's device may DMA from it (IOVA = VA): zero-copy sends
    bool dma_mapped = false; ///< we registered and mapped it (rte_extmem_register, rte_dev_dma_map)
    void *map_va = nullptr;  ///< the page-aligned range mapped
    std::size_t map_len = 0;
};
struct eth_mw : vq::mw {
    std::uint32_t index = 0;
    eth_mr *bound = nullptr;
};
struct eth_td : vq::td {};

/** A resolved destination: the Ethernet/IPv4/UDP header of every frame to
 *  it, with the length, id and checksum fields filled per packet. */
struct dest_hdr {
    std::uint8_t b[wire::bth_off];
    /** The IPv4 header's words as wire::ip_hdr_sum adds them, with total
     *  length, identification and checksum zero (make_dest): a frame's
     *  checksum is computed from it and the two fields, not read back. */
    std::uint64_t ip_sum = 0;
};

struct eth_ah : vq::ah {
    dest_hdr hdr{};
};

struct eth_ctx : vq::context {
    port *p = nullptr;
    std::mutex lock;                 ///< setup calls
    key_entry *keys = nullptr;       ///< max_mr entries
    /** Keys killed so far (deregistration, invalidation, window binds):
     *  what a QP's cached key check (eth_qp::rx_kc_key) compares with. */
    std::atomic<std::uint64_t> key_epoch{0};
    std::vector<std::uint32_t> key_ver;
    std::uint32_t key_next = 0;
    std::vector<void *> bufs;        ///< alloc_buf memory
    int npd = 0, ncq = 0, nqp = 0, nsrq = 0, nmr = 0, nmw = 0, nah = 0, ntd = 0;
    std::vector<eth_qp *> qps;       ///< this context's QPs (dealloc_td)
};
inline eth_ctx *to_ctx(vq::context *c) noexcept { return static_cast<eth_ctx *>(c); }

/** Where a checked access lands. */
struct key_ref {
    key_entry *e = nullptr;
    std::uint8_t *at = nullptr;
};
/** Check @p key of @p c for @p need over [addr, addr+len) and pin the entry
 *  (release with key_unpin). @p local: an lkey (no windows). */
bool key_pin(eth_ctx *c, std::uint32_t key, std::uint64_t addr, std::uint64_t len, unsigned need, bool local,
             key_ref *out) noexcept;
inline void key_unpin(key_ref &r) noexcept
{
    if (r.e)
        r.e->users.fetch_sub(1, std::memory_order_release);
    r.e = nullptr;
}
/** Check without pinning (local SGEs of a request, checked at execution). */
bool key_check(eth_ctx *c, std::uint32_t key, std::uint64_t addr, std::uint64_t len, unsigned need) noexcept;
/** Invalidate key @p k (local_inv, send_inv). @return success. */
bool key_invalidate(eth_ctx *c, std::uint32_t k) noexcept;
/** Bind or unbind a window (bind_mw executed in order). @return status. */
vq::wc_status key_bind(eth_ctx *c, eth_mw *mw, eth_mr *mr, std::uint32_t rkey, std::uint64_t addr,
                       std::uint64_t len, unsigned access) noexcept;

/** Parse a peer's dev_addr (MAC + IPv4, or IPv4 alone: resolved with ARP)
 *  into a destination header of port @p p. @return 0; -FI_EINVAL malformed;
 *  -FI_EHOSTUNREACH no ARP answer. */
int make_dest(port *p, const vq::dev_addr &a, dest_hdr *out);

/* ---------------- Completion queues, receive queues ---------------- */

struct eth_cq : vq::cq {
    vq::wc *ring = nullptr;
    std::uint32_t mask = 0;
    std::uint32_t head = 0, tail = 0;
    /** Lent receives: per ring slot what its completion lends (0: nothing,
     *  an rte_mbuf *, or an eth_qp * + 1 for that QP's lend_buf), taken
     *  back (lent_release) for the entries before head when a poll begins.
     *  Null until a lent-receive QP uses the CQ. */
    std::uintptr_t *lent = nullptr;
    std::uint32_t lent_from = 0;      ///< entries before it were taken back
    std::uint32_t cur = 0;            ///< start/next_poll: an entry is current
    spinlock lock;
    eth_qp *qps[max_cq_qps] = {};     ///< QPs whose send or recv CQ this is
    std::uint32_t nqps = 0;
    port *ports[8] = {};              ///< distinct ports of those QPs
    std::uint32_t port_refs[8] = {};
    std::uint32_t nports = 0;
    eth_ctx *c = nullptr;

    std::uint32_t space() const noexcept { return mask + 1 - (tail - head); }
};
inline eth_cq *to_cq(vq::cq *c) noexcept { return static_cast<eth_cq *>(c); }

/** Push one completion (caller holds the CQ or is its only thread). */
inline void cq_push(eth_cq *c, const vq::wc &w) noexcept
{
    c->ring[c->tail & c->mask] = w;
    c->tail++;
}
/** Room for a lent receive completion: a free entry whose slot's earlier
 *  loan was taken back, within max_lent_out loans. */
inline bool lend_room(const eth_cq *c) noexcept
{
    return c->space() && c->tail - c->lent_from < std::min(c->mask + 1, max_lent_out);
}
/** Push lent receive completion @p w (data set), lending @p tag (lend_room checked). */
inline void cq_push_lent(eth_cq *c, const vq::wc &w, std::uintptr_t tag) noexcept
{
    c->lent[c->tail & c->mask] = tag;
    cq_push(c, w);
}
/** Take back what the completions before head lent (a poll begins). */
void lent_release(eth_cq *c) noexcept;
/** Lock @p c for a push unless @p held is it or it is single-threaded. */
struct cq_guard {
    eth_cq *c;
    bool locked;
    cq_guard(eth_cq *cq, const eth_cq *held) noexcept : c(cq), locked(cq != held && !cq->single_threaded)
    {
        if (locked)
            c->lock.lock();
    }
    ~cq_guard()
    {
        if (locked)
            c->lock.unlock();
    }
};

/** A posted receive. */
struct rwqe {
    std::uint64_t wr_id;
    std::uint32_t num_sge;
    std::uint32_t pad;
};

/** Receive queue (QP or SRQ): single producer, single consumer, each side
 *  locked when several threads may use it. */
struct recvq {
    rwqe *wqe = nullptr;
    vq::sge *sges = nullptr;
    std::uint32_t max_sge = 0;
    std::uint32_t mask = 0;
    alignas(64) std::atomic<std::uint32_t> tail{0}; ///< producer
    spinlock plock;
    alignas(64) std::atomic<std::uint32_t> head{0}; ///< consumer
    spinlock clock;
};
int rq_init(recvq *rq, std::uint32_t wr, std::uint32_t sge) noexcept;
void rq_free(recvq *rq) noexcept;
int rq_post(recvq *rq, bool locked, std::uint64_t wr_id, const vq::sge *sg, std::uint32_t n) noexcept;

struct eth_srq : vq::srq {
    recvq rq;
    int refs = 0;
    eth_ctx *c = nullptr;
};

/* ---------------- Queue pairs ---------------- */

enum : std::uint8_t {
    op_send = 1, op_send_imm, op_send_inv, op_tso, op_write, op_write_imm, op_read, op_cas,
    op_faa, op_bind, op_local_inv, op_flush,
};

/** Send work-queue entry. */
struct wqe {
    std::uint64_t wr_id;
    std::uint8_t op;        ///< op_*
    std::uint8_t flags;     ///< WR_* subset
    std::uint8_t has_data, is_inline;
    std::uint8_t need_ud;   ///< UD: set_ud_addr still missing
    std::uint8_t state;     ///< ws_*
    std::uint8_t status;    ///< vq::wc_status once done
    std::uint8_t resp_seen; ///< RC read: a response gap was already acted on
    std::uint16_t num_sge;
    std::uint16_t hdr_sz, mss;
    std::uint16_t pad16;
    std::uint32_t len;      ///< data bytes
    std::uint32_t rkey, imm;
    std::uint64_t raddr;
    std::uint64_t a0, a1;   ///< compare,swap / add / bind addr,len / flush len,(type|level<<8)
    void *p0, *p1;          ///< bind: mw, mr; UD: address handle
    std::uint32_t rqpn, qkey;
    /* Transport (RC/UC). */
    std::uint32_t psn;      ///< first PSN
    std::uint32_t npkts;    ///< PSNs it occupies
    std::uint32_t got;      ///< RC read: bytes of responses placed
    std::atomic<std::uint32_t> zc_refs; ///< zero-copy: mbufs still holding the buffer (+1 while posting)
    std::uint64_t posted;   ///< TSC at the builder of a signalled request with statistics on, else 0
};

enum : std::uint8_t {
    ws_queued = 0,   ///< not started
    ws_active,       ///< transmitting / waiting for acknowledgement
    ws_done,         ///< finished with status (completion owed)
};

/** A pending RC response (responder side), sent in order. */
struct resp {
    std::uint8_t kind;      ///< r_*
    std::uint8_t syndrome;  ///< AETH (ack/nak)
    std::uint32_t psn;      ///< ack: PSN acknowledged; read: PSN of the next response packet
    std::uint64_t va;       ///< read: next byte
    std::uint32_t rkey;
    std::uint32_t left;     ///< read: bytes still to send
    std::uint32_t total;    ///< read: bytes of the whole read
    std::uint64_t value;    ///< atomic: original value
};
enum : std::uint8_t { r_ack = 1, r_read, r_atomic };

/** The result of an executed atomic, kept for replays. */
struct atomic_saved {
    std::uint32_t psn;
    bool valid;
    std::uint64_t value;
};

struct eth_qp : vq::qp {
    /* Posting (QP lock). */
    int err = 0;
    std::uint32_t sq_start = 0, sq_tail = 0, sq_head = 0, sq_next = 0, sq_mask = 0;
    wqe *cur = nullptr;
    wqe *sq = nullptr;
    vq::sge *sq_sge = nullptr;
    std::uint8_t *sq_inl = nullptr;
    std::uint32_t inl_stride = 0;
    std::uint32_t max_sge_cap = 0;
    spinlock lock;
    common::session_owner session; ///< locked QPs: the thread between wr_start and wr_complete/abort
    bool session_open = false; ///< thread domain: between wr_start and wr_complete/abort (no owner to compare)
    std::atomic<std::uint32_t> state{static_cast<std::uint32_t>(vq::qp_state::reset)};
    std::atomic<bool> busy{false};     ///< work outstanding (pollers skip idle QPs)
    /* Transmit. */
    port *p = nullptr;
    std::uint16_t txq = 0, rxq = 0;
    bool exclusive = false;            ///< owns queue pair txq == rxq
    bool tx_locked = true;             ///< txq is shared
    rte_mbuf *stage[stage_max];
    std::uint32_t nstage = 0;
    /** Bit i: stage[i] is the last frame of the request in send-queue slot
     *  stage_wqe[i], which is done (sent) when the PMD takes that frame. */
    std::uint64_t stage_ends = 0;
    std::uint16_t stage_wqe[stage_max];
    std::uint64_t stuck_since = 0;     ///< TSC when the PMD last refused every staged frame (0: it takes them)
    std::uint16_t ip_id = 0;
    std::uint16_t udp_sport = 0;
    /* Receive. */
    rxpkt *rx = nullptr;               ///< frames handed over by the port
    std::uint32_t rx_mask = 0;
    alignas(64) std::atomic<std::uint32_t> rx_tail{0}; ///< producer: holder of the port's rx lock
    alignas(64) std::atomic<std::uint32_t> rx_head{0}; ///< consumer: whoever progresses the QP
    recvq *rq = nullptr;
    recvq own_rq;
    eth_srq *ssrq = nullptr;
    /* Identity and wiring. */
    eth_ctx *c = nullptr;
    eth_cq *scq = nullptr, *rcq = nullptr;
    vq::td *tdom = nullptr;
    vq::qp_attr attr{};
    unsigned attr_set = 0;             ///< QP_ATTR_* bits ever set
    std::uint32_t index = 0;
    std::uint32_t dest_qpn = 0;
    dest_hdr dest{};                   ///< RC/UC: the peer
    bool raw_csum_sw = false;          ///< RAW: software checksums (no port offload)
    bool raw_tso_sw = false;           ///< RAW: rte_gso_segment (no port TSO)
    rte_mbuf_ext_shared_info *zc = nullptr; ///< RAW: one per send-queue entry (zero-copy sends)
    std::uint32_t pmtu = 1024;         ///< RC/UC payload per packet
    vq::wc_status flush_status = vq::wc_status::wr_flush_err; ///< first flushed WR reports this
    /* RC/UC requester. */
    std::uint32_t psn = 0;             ///< next PSN to assign
    std::uint32_t una = 0;             ///< oldest unacknowledged PSN
    std::uint32_t tx_psn = 0;          ///< PSN of the next packet to (re)transmit
    std::uint32_t tx_wqe = 0;          ///< WQE index (sq position) holding tx_psn
    std::uint32_t reads_out = 0;       ///< reads/atomics transmitted and not complete
    std::uint32_t retries = 0, rnr_retries = 0;
    std::uint64_t timeout_cycles = 0;  ///< 0: no retransmit timer
    std::uint64_t deadline = 0;        ///< TSC of the next retransmission (0: none armed)
    std::uint64_t rnr_until = 0;       ///< RNR NAK: do not transmit before
    std::uint32_t timer_polls = 0;     ///< progress calls since the timers last read the TSC
    std::uint32_t timer_stride = 1;    ///< the timers read the TSC on every this many calls (rc_timing)
    std::uint32_t since_ackreq = 0;
    /** A request failed before sending (a local check, bind, invalidation):
     *  nothing after it starts; the QP goes to ERR as it completes. */
    bool sq_halted = false;
    bool nak_retry = false;            ///< go back armed by a NAK (once per PSN)
    std::uint32_t nak_psn = 0;
    /* RC/UC responder. */
    std::uint32_t epsn = 0;            ///< expected PSN
    std::uint32_t msn = 0;
    bool nak_sent = false;
    bool rx_busy = false;              ///< a multi-packet send/write is being received
    std::uint8_t rx_kind = 0;          ///< its wire::k_*
    bool rx_drop = false;              ///< UC: rest of a message dropped
    std::uint32_t rx_off = 0;          ///< bytes placed
    std::uint64_t rx_va = 0;           ///< write: next address
    std::uint32_t rx_rkey = 0;
    std::uint32_t rx_left = 0;         ///< write: bytes the RETH announced still to come
    std::uint32_t rx_total = 0;        ///< write: the RETH's DMA length
    vq::wc rx_wc{};                    ///< receive being filled
    /* Lent receives (qp_init_attr::lend_recv): no receive queue; a message
     * is lent from its mbuf (one packet, one segment) or from lend_buf. */
    bool lend = false;
    bool lend_held = false;            ///< lend_buf is on loan (a CQ entry tagged with this QP)
    bool lend_flushed = false;         ///< ERR: the one flush completion was given
    bool lend_in_buf = false;          ///< the message being received goes to lend_buf
    std::uint32_t max_lend = 0;        ///< largest message taken (UD: the path MTU)
    std::uint8_t *lend_buf = nullptr;
    rte_mbuf *lend_m = nullptr;        ///< respond/ud_rx took the frame's mbuf for a loan
    vq::sge rx_sges[max_sge];
    std::uint32_t rx_nsge = 0;
    std::uint32_t rx_sgi = 0, rx_sgoff = 0; ///< where rx_off lands in rx_sges
    /** The lkey a receive buffer was last checked with (for local write),
     *  the region it names and the context's key_epoch then: a later buffer
     *  within that region is valid while no key of the context was killed
     *  since (recv_key_ok), without pinning the entry. 0: none. */
    std::uint32_t rx_kc_key = 0;
    std::uint64_t rx_kc_base = 0, rx_kc_len = 0, rx_kc_epoch = 0;
    bool rx_has_wqe = false;
    std::uint32_t ack_psn = 0;         ///< highest PSN to acknowledge
    bool ack_due = false;
    std::uint32_t unacked = 0;
    std::uint64_t ack_deadline = 0;    ///< TSC by which a deferred ACK goes out (0: none deferred)
    std::uint64_t ack_delay = 0;       ///< how long an ACK the requester did not ask for may wait (rc_timing)
    resp resps[max_resps];             ///< in-order response queue (reads, atomics, acks)
    std::uint32_t resp_head = 0, resp_tail = 0;
    atomic_saved atomics[max_rd_atomic];
    std::uint32_t atomic_next = 0;
    std::uint32_t rnr_code = 0;        ///< our min_rnr_timer for RNR NAKs
    /* Statistics (eth_stats.h): null with telemetry off, every hook skips. */
    qp_stats *st = nullptr;
    env::stats::io_stats *io = nullptr; ///< &st->io
    qp_block st_blk;                   ///< ethdev.<port>.qp.<qpn>: owns *st
};
inline eth_qp *to_qp(vq::qp *q) noexcept { return static_cast<eth_qp *>(q); }

inline vq::qp_state qp_st(const eth_qp *q) noexcept
{
    return static_cast<vq::qp_state>(q->state.load(std::memory_order_relaxed));
}
inline std::uint8_t *wqe_inl(eth_qp *q, const wqe *w) noexcept
{
    return q->sq_inl + static_cast<std::size_t>(w - q->sq) * q->inl_stride + (w->op == op_tso ? max_tso_hdr : 0);
}
inline std::uint8_t *wqe_tso_hdr(eth_qp *q, const wqe *w) noexcept
{
    return q->sq_inl + static_cast<std::size_t>(w - q->sq) * q->inl_stride;
}
inline vq::sge *wqe_sges(eth_qp *q, const wqe *w) noexcept
{
    return &q->sq_sge[static_cast<std::size_t>(w - q->sq) * q->max_sge_cap];
}

/** Reads a WR's data (inline area or SGEs) from an offset, in order. */
struct src_cursor {
    const std::uint8_t *flat = nullptr; ///< inline data, or null
    const vq::sge *sg = nullptr;
    std::uint32_t nsge = 0, i = 0, off = 0;
    src_cursor(eth_qp *q, const wqe *w) noexcept
    {
        if (w->is_inline)
            flat = wqe_inl(q, w);
        else {
            sg = wqe_sges(q, w);
            nsge = w->num_sge;
        }
    }
    void seek(std::uint32_t at) noexcept
    {
        if (flat) {
            off = at;
            return;
        }
        i = 0;
        off = 0;
        while (i < nsge && at >= sg[i].length) {
            at -= sg[i].length;
            i++;
        }
        off = at;
    }
    /** Copy @p n bytes to @p dst. */
    void copy(std::uint8_t *dst, std::uint32_t n) noexcept
    {
        if (flat) {
            std::memcpy(dst, flat + off, n);
            off += n;
            return;
        }
        while (n) {
            std::uint32_t k = sg[i].length - off < n ? sg[i].length - off : n;
            std::memcpy(dst, reinterpret_cast<const std::uint8_t *>(sg[i].addr) + off, k);
            dst += k;
            n -= k;
            off += k;
            if (off == sg[i].length) {
                i++;
                off = 0;
            }
        }
    }
};

/* ---------------- Entry points between files ---------------- */

int create_qp(vq::pd *p, const vq::qp_init_attr *a, vq::qp **out);
int destroy_qp(vq::qp *q);
int modify_qp(vq::qp *q, const vq::qp_attr *a, unsigned mask);
int query_qp(vq::qp *q, vq::qp_attr *out);
vq::qp_state qp_state_of(const vq::qp *q);
int create_cq(vq::context *c, const vq::cq_init_attr *a, vq::cq **out);
int destroy_cq(vq::cq *c);
int create_srq(vq::pd *p, const vq::srq_init_attr *a, vq::srq **out);
int destroy_srq(vq::srq *s);
void cq_attach(eth_cq *c, eth_qp *q);
/** The CQ will carry lent receives: its loan table (once). @return 0 or -FI_ENOMEM. */
int cq_enable_lend(eth_cq *c) noexcept;
void cq_detach(eth_cq *c, eth_qp *q);

/** Fill q's fast-path pointers (eth_post.cpp). */
void install_fast_path(eth_qp *q) noexcept;
void latch_stub(vq::qp *q, int err) noexcept;

/** Progress one QP: its received frames, transmissions, timers and
 *  completions (QP lock held; @p held: the CQ the caller holds, or null). */
void qp_progress(eth_qp *q, const eth_cq *held) noexcept;
/** Move to ERR (QP lock held or setup). */
void qp_to_err(eth_qp *q) noexcept;

/** Per type (eth_raw.cpp, eth_ud.cpp, eth_rc.cpp): transmit what the send
 *  queue holds, as far as the queue lets; consume received frames. */
void raw_tx(eth_qp *q, const eth_cq *held) noexcept;
unsigned raw_rx(eth_qp *q, const eth_cq *held) noexcept;
void ud_tx(eth_qp *q, const eth_cq *held) noexcept;
unsigned ud_rx(eth_qp *q, const eth_cq *held) noexcept;
void rc_tx(eth_qp *q, const eth_cq *held) noexcept;
/** Has rc_tx anything to do: frames staged, responses queued, or requests
 *  not (entirely) sent? tx_wqe at sq_tail means sq_next is there too. A
 *  caller may skip rc_tx, and the registers it saves, when not. */
inline bool rc_tx_due(const eth_qp *q) noexcept
{
    return q->nstage || q->resp_head != q->resp_tail || q->tx_wqe != q->sq_tail;
}
unsigned rc_rx(eth_qp *q, const eth_cq *held) noexcept;
void rc_timers(eth_qp *q, const eth_cq *held) noexcept;
/** Reset the transport state (modify_qp to RESET / RTR). */
void rc_reset(eth_qp *q) noexcept;
/** Derive the ACK deferral and the timers' polling stride from
 *  timeout_cycles (modify_qp, after it changed). */
void rc_timing(eth_qp *q) noexcept;

/** Hand staged frames to the PMD. @return true when the stage is empty. */
bool stage_flush(eth_qp *q) noexcept;
/** The frame staged last ends request @p w (status set by the caller): the
 *  request is done when the PMD takes it (UC, UD and RAW_PACKET sends). */
inline void stage_end(eth_qp *q, const wqe *w) noexcept
{
    const std::uint32_t i = q->nstage - 1;
    q->stage_wqe[i] = static_cast<std::uint16_t>(w - q->sq);
    q->stage_ends |= 1ull << i;
}
/** Room for @p n more staged frames (flushing first if needed)? */
inline bool stage_room(eth_qp *q, std::uint32_t n) noexcept
{
    if (q->nstage + n <= stage_max)
        return true;
    stage_flush(q);
    return q->nstage + n <= stage_max;
}
/** Free a received frame's mbuf and step the QP's rx ring. */
inline void rx_pop(eth_qp *q) noexcept
{
    std::uint32_t h = q->rx_head.load(std::memory_order_relaxed);
    rte_pktmbuf_free(q->rx[h & q->rx_mask].m);
    // Release the slot to the producer: our reads of it come first.
    q->rx_head.store(h + 1, std::memory_order_release);
}
/** The oldest received frame, or null. */
inline rxpkt *rx_peek(eth_qp *q) noexcept
{
    std::uint32_t h = q->rx_head.load(std::memory_order_relaxed);
    // Observe a handed-over frame: its slot was written before tail.
    if (h == q->rx_tail.load(std::memory_order_acquire))
        return nullptr;
    return &q->rx[h & q->rx_mask];
}

/** Statistics of receive completion @p w just pushed: a message of @p bytes,
 *  or an error (not a flush). */
inline void count_recv(eth_qp *q, const vq::wc &w, std::uint32_t bytes) noexcept
{
    if (!q->io)
        return;
    if (w.status == vq::wc_status::success)
        env::stats::on_rx(q->io, bytes);
    else if (w.status != vq::wc_status::wr_flush_err)
        env::stats::on_error(q->io);
}
/** One of the transport's counters in @p s (null: statistics off). */
inline void count_nak(qp_stats *s, env::stats::counter qp_stats::*c) noexcept
{
    if (s)
        (s->*c).add();
}

/** Take the next posted receive into q->rx_wc / rx_sges. @return false: none. */
bool take_recv(eth_qp *q) noexcept;
/** Can the taken receive hold @p n more bytes at q->rx_off? Checks its lkeys
 *  when nothing was placed yet. @return success, loc_len_err or loc_prot_err. */
vq::wc_status rx_room(eth_qp *q, std::uint64_t n) noexcept;
/** Place @p n bytes at q->rx_off of the taken receive (rx_room said yes). */
void rx_put(eth_qp *q, const std::uint8_t *src, std::uint32_t n) noexcept;
/** rx_put from an mbuf chain, @p n bytes at byte @p from. */
void rx_put_mbuf(eth_qp *q, const rte_mbuf *m, std::uint32_t from, std::uint32_t n) noexcept;
/** Copy @p n bytes at @p from of an mbuf chain into @p dst. */
void mbuf_read(const rte_mbuf *m, std::uint32_t from, std::uint32_t n, std::uint8_t *dst) noexcept;
/** ICRC check of a parsed RoCE frame. */
bool icrc_ok(const rte_mbuf *m, std::uint16_t bth_off) noexcept;

/** A send-side completion for @p w (owed until the CQ has room). @return pushed. */
bool push_send_wc(eth_qp *q, const wqe *w, vq::wc_status st, const eth_cq *held) noexcept;
/** sq_complete's loop: the started WQEs at the head that are done. */
void sq_complete_started(eth_qp *q, const eth_cq *held) noexcept;
/** Complete, in order, the WQEs at the head that are done; the depth gauge
 *  either way. Inline: with no request started, no call. */
inline void sq_complete(eth_qp *q, const eth_cq *held) noexcept
{
    if (q->sq_head != q->sq_next)
        sq_complete_started(q, held);
    else
        env::stats::on_depth(q->io, q->sq_tail - q->sq_head);
}
/** Flush everything outstanding (QP in ERR). */
void qp_flush(eth_qp *q, const eth_cq *held) noexcept;

/** Build a RoCE frame for @p q's destination into a fresh mbuf: Ethernet/
 *  IPv4/UDP from @p d, BTH, then @p ext extension-header bytes and
 *  @p payload bytes are left for the caller at the returned pointers; the
 *  caller calls roce_finish. @return the mbuf, or null (pool empty). */
struct roce_frame {
    rte_mbuf *m;
    std::uint64_t ip_sum;   ///< dest_hdr::ip_sum of the header it was made from
    std::uint8_t *bth;      ///< BTH (filled by the caller)
    std::uint8_t *ext;      ///< extension headers
    std::uint8_t *payload;  ///< payload
};
bool roce_alloc(eth_qp *q, const dest_hdr &d, std::uint32_t ext, std::uint32_t payload, roce_frame *f) noexcept;
/** Fill lengths, IPv4 id and checksum, pad and ICRC. */
void roce_finish(eth_qp *q, roce_frame &f, std::uint32_t ext, std::uint32_t payload) noexcept;

/** Tunables read once. */
struct limits {
    std::uint32_t queues;
    std::uint32_t mbufs;
    std::uint32_t ring_pairs;
    std::uint32_t zcopy_bytes;
    std::uint32_t link_wait_ms;
    std::uint32_t arp_ms;
    std::uint32_t mtu;
    std::uint32_t rxd, txd;
    bool rx_csum;
};
const limits &lim() noexcept;

} // namespace shunt::drv::ethdev
