/* drivers/mlx5: private definitions of the ConnectX driver.
 *
 * One fast path (mlx5_post.cpp, mlx5_cq.cpp) over plain queue views, filled
 * at setup by one of two back ends: real hardware through verbs and
 * mlx5dv_init_obj (mlx5_verbs.cpp), or the software model of the device
 * (model/). The fast path never asks which one it runs on.
 * doc/guides/drivers/mlx5.md describes the mapping of every call. */
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "common/session.h"
#include "env/errors.h"
#include "env/stats.h"
#include "mlx5_prm.h"
#include "vq/driver.h"

namespace shunt::drv::mlx5 {

namespace vq = shunt::vq;

/* ---------------- Queue views: what the device hands the driver ---------------- */

/** A send queue (mlx5dv_qp.sq + dbrec + bf). */
struct sq_view {
    std::uint8_t *buf = nullptr;          ///< wqe_cnt * 64 bytes
    std::uint32_t wqe_cnt = 0;            ///< power of two
    volatile std::uint32_t *dbrec = nullptr; ///< [MLX5_RCV_DBR], [MLX5_SND_DBR]
    std::uint8_t *bf_reg = nullptr;       ///< BlueFlame register pair (or the 8-byte doorbell)
    std::uint32_t bf_size = 0;            ///< bytes per BF half; 0: 8-byte doorbells only
};
/** A receive queue (mlx5dv_qp.rq) or SRQ (mlx5dv_srq). */
struct rq_view {
    std::uint8_t *buf = nullptr;
    std::uint32_t wqe_cnt = 0;            ///< power of two
    std::uint32_t stride = 0;             ///< bytes per receive WQE (power of two)
    volatile std::uint32_t *dbrec = nullptr; ///< the receive counter word
};
/** A completion queue (mlx5dv_cq). */
struct cq_view {
    std::uint8_t *buf = nullptr;
    std::uint32_t cqe_cnt = 0;            ///< power of two
    std::uint32_t cqe_size = 64;          ///< 64 or 128 (the CQE64 is the last 64 bytes)
    volatile std::uint32_t *dbrec = nullptr; ///< [SET_CI], [ARM_DB]
    std::uint8_t *uar = nullptr;          ///< UAR page of the CQ doorbell (arming)
    std::uint32_t cqn = 0;
};

/* ---------------- Setup back ends ---------------- */

/** What create_qp asks the back end for. */
struct qp_request {
    vq::qp_type type = vq::qp_type::rc;
    void *send_cq = nullptr, *recv_cq = nullptr, *srq = nullptr; ///< back-end handles
    void *pd = nullptr;
    std::uint32_t sq_wqe_cnt = 0;   ///< basic blocks (power of two)
    std::uint32_t rq_wqe_cnt = 0;   ///< receive WQEs (power of two; 0 with an SRQ)
    std::uint32_t rq_stride = 0;    ///< bytes per receive WQE
    std::uint32_t max_send_wr = 0, max_recv_wr = 0, max_send_sge = 0, max_recv_sge = 0;
    std::uint32_t max_inline = 0;
    std::uint32_t max_tso_header = 0; ///< RAW_PACKET with OPS_TSO: header bytes a TSO WQE inlines
    bool sig_all = false;
};
/** What it answers. */
struct qp_created {
    sq_view sq;
    rq_view rq;
    std::uint32_t qpn = 0;
    std::uint32_t max_inline = 0;   ///< granted inline bytes
    std::uint32_t eth_min_inline = 0; ///< RAW_PACKET: header bytes every WQE must inline (0 or 18)
    bool bf_wc = false;             ///< the BF register is write-combining MMIO (hardware)
};

/** Setup operations of a back end: never on the fast path. Errors are
 *  negative libfabric codes. Handles are the back end's own objects. */
class backend {
public:
    virtual ~backend() = default;
    virtual const char *name() const noexcept = 0;
    virtual void query(vq::device_attr *out) = 0;
    virtual void address(vq::dev_addr *out) = 0;
    virtual int alloc_pd(void **h) = 0;
    virtual int dealloc_pd(void *h) = 0;
    virtual int reg_mr(void *pd, void *addr, std::size_t len, unsigned access, std::uint32_t *lkey,
                       std::uint32_t *rkey, void **h) = 0;
    virtual int dereg_mr(void *h) = 0;
    virtual int alloc_mw(void *pd, std::uint32_t *rkey, void **h) = 0;
    virtual int dealloc_mw(void *h) = 0;
    virtual int create_cq(std::uint32_t cqe, cq_view *out, void **h) = 0;
    virtual int destroy_cq(void *h) = 0;
    virtual int create_srq(void *pd, std::uint32_t wqe_cnt, std::uint32_t max_sge, rq_view *out,
                           std::uint32_t *srqn, void **h) = 0;
    virtual int destroy_srq(void *h) = 0;
    virtual int create_qp(const qp_request &rq, qp_created *out, void **h) = 0;
    virtual int destroy_qp(void *h) = 0;
    /** Move the QP as verbs does (the driver has checked the transition). */
    virtual int modify_qp(void *h, const vq::qp_attr &a, unsigned mask, vq::qp_state cur) = 0;
    /** Address vector for UD sends to @p dest (the 48-byte datagram segment). */
    virtual int create_ah(void *pd, const vq::dev_addr &dest, mlx5_wqe_av *av, void **h) = 0;
    virtual int destroy_ah(void *h) = 0;
};

/** The hardware back end for ConnectX device @p index of ibv_get_device_list
 *  (null when it cannot be opened; the reason is logged). */
std::unique_ptr<backend> make_verbs_backend(int index);
/** The names of the ConnectX devices verbs offers, in ibv_get_device_list
 *  order (none: the reason in *why). */
std::vector<std::string> verbs_probe(const char **why);

/* ---------------- Driver objects ---------------- */

/** Test-and-test-and-set spinlock (the QP / CQ lock when not single-threaded). */
struct spinlock {
    std::atomic<bool> held{false};
    void lock() noexcept
    {
        while (held.exchange(true, std::memory_order_acquire))
            while (held.load(std::memory_order_relaxed))
                _mm_pause();
    }
    void unlock() noexcept { held.store(false, std::memory_order_release); }
};

struct mlx5_qp;
struct mlx5_srq;

/** Two-level QP-number table (rdma-core's qp_table): CQEs name QPs by number. */
struct qp_table {
    static constexpr unsigned shift = 12, mask = (1u << shift) - 1;
    mlx5_qp **top[1u << (24 - shift)] = {};
    mlx5_qp *find(std::uint32_t qpn) const noexcept
    {
        mlx5_qp **l = top[(qpn >> shift) & ((1u << (24 - shift)) - 1)];
        return l ? l[qpn & mask] : nullptr;
    }
    int set(std::uint32_t qpn, mlx5_qp *q);
    ~qp_table();
};

struct mlx5_ctx : vq::context {
    std::unique_ptr<backend> be;
    std::vector<void *> bufs;    ///< alloc_buf memory
    vq::device_attr attr{};
    std::mutex lock;
    qp_table qps;
    int nobj = 0; ///< objects alive (close returns -FI_EBUSY while > 0)
};
inline mlx5_ctx *to_ctx(vq::context *c) noexcept { return static_cast<mlx5_ctx *>(c); }

struct mlx5_pd : vq::pd {
    void *h = nullptr;
    int refs = 0;
};
struct mlx5_mr : vq::mr {
    void *h = nullptr;
    int windows = 0;
};
struct mlx5_mw : vq::mw {
    void *h = nullptr;
};
struct mlx5_ah : vq::ah {
    void *h = nullptr;
    alignas(16) mlx5_wqe_av av{};
};
struct mlx5_td : vq::td {
    int refs = 0;
};

/** Completion queue: the view and the consumer index. */
struct mlx5_cq : vq::cq {
    /* Hot (line 2): what a poll touches. */
    alignas(64) std::uint8_t *buf = nullptr; ///< the CQE64 of entry 0 (the second half of a 128-byte CQE)
    std::uint32_t ci = 0;                  ///< consumer index
    std::uint32_t mask = 0;                ///< cqe_cnt - 1
    std::uint32_t owner_shift = 0;         ///< log2(cqe_cnt): owner of index i is (i >> shift) & 1
    std::uint32_t cqe_shift = 6;           ///< log2(cqe_size)
    volatile std::uint32_t *dbrec = nullptr;
    mlx5_qp *last_qp = nullptr;            ///< QP of the previous CQE (cache)
    /** sop_drop_qpn of last_qp's send and write CQEs as loaded (opcode
     *  byte first) with the opcode's two low bits cleared:
     *  be32(qpn) | MLX5_OPCODE_RDMA_WRITE; ~0 matches nothing. */
    std::uint32_t last_qpn_key = ~0u;
    mlx5_cqe64 *cur = nullptr;             ///< start/next_poll: the current CQE
    spinlock lock;
    vq::wc cur_wc{};                       ///< start/next_poll: the current CQE decoded
    /* Cold. */
    cq_view view;
    void *h = nullptr;
    mlx5_ctx *mctx = nullptr;
    int refs = 0;
    std::uint32_t arm_sn = 0;              ///< arm sequence number (mlx5_arm_cq)
    std::uint8_t *entries = nullptr;       ///< the CQ buffer (entry 0)
    void set_last(mlx5_qp *q) noexcept;
};

/** A receive ring (a QP's RQ or an SRQ). */
struct recv_ring {
    std::uint8_t *buf = nullptr;
    std::uint32_t mask = 0;       ///< wqe_cnt - 1
    std::uint32_t stride_shift = 0;
    std::uint32_t max_sge = 0;    ///< data segments per WQE (stride / 16)
    std::uint32_t limit_sge = 0;  ///< SGEs a receive may have (cap.max_recv_sge)
    std::uint32_t max_post = 0;   ///< receives outstanding
    std::uint32_t head = 0;       ///< producer (post_recv)
    std::atomic<std::uint32_t> tail{0}; ///< consumer (poll)
    volatile std::uint32_t *dbrec = nullptr;
    std::uint64_t *wrid = nullptr;
    spinlock lock;
    std::uint8_t *wqe(std::uint32_t i) const noexcept { return buf + ((i & mask) << stride_shift); }
};

struct mlx5_srq : vq::srq {
    recv_ring rq;
    /* SRQ free list (rdma-core mlx5_srq: head / tail through next_wqe_index). */
    std::uint32_t free_head = 0, free_tail = 0;
    std::uint16_t counter = 0; ///< posted receives, the doorbell-record value
    std::uint32_t srqn = 0;
    void *h = nullptr;
    mlx5_ctx *mctx = nullptr;
    int refs = 0;
};

/** Per basic block of the SQ: what the poller needs of the WQE that starts
 *  there (rdma-core keeps wrid[] and wqe_head[] apart; one 32-byte record is
 *  one base pointer and one line for the poster and the poller). */
struct wqe_meta {
    std::uint64_t wr_id;
    std::uint32_t done;   ///< the SQ's tail once it has completed: WQEs posted up to and including it
    std::uint32_t opcode; ///< vq::wc_opcode of its completion
    /** With statistics only (sq.io set): TSC at the post of a signalled WQE
     *  (0: unsignalled), for the poller's post-to-completion latency.
     *  Written by the poster before its doorbell, read after the CQE. */
    std::uint64_t stamp;
    std::uint64_t unused;
};
static_assert(sizeof(wqe_meta) == 32);
/** log2(sizeof(wqe_meta)): a BB index to its record's byte offset. */
constexpr unsigned wqe_meta_shift = 5;
static_assert(sizeof(wqe_meta) == 1u << wqe_meta_shift);

/** Most inline bytes the single-call send writes: what one BB holds after
 *  the control segment and the inline segment's byte count. */
constexpr std::uint32_t fast_inline_max = 64 - 16 - 4;

/** Send-queue bookkeeping (rdma-core struct mlx5_wq for the SQ). */
struct alignas(64) send_state {
    /* Line A: what the single-call inline send touches (and every post). */
    std::uint8_t *buf = nullptr;     ///< SQ start
    wqe_meta *meta = nullptr;        ///< per BB index
    std::uint8_t *bf_cur = nullptr;  ///< the BlueFlame half the next doorbell goes to
    volatile std::uint32_t *dbrec = nullptr; ///< [MLX5_RCV_DBR], [MLX5_SND_DBR]
    std::uint32_t mask = 0;          ///< wqe_cnt - 1 (BBs)
    std::uint32_t cur_post = 0;      ///< next BB (16-bit wrap in the WQE)
    std::uint32_t head = 0;          ///< WQEs posted (the last one's wqe_meta::done)
    /** Single-call inline sends the fast path may post before it looks at the
     *  queue again: free slots when it last looked, 0 whenever something else
     *  must be checked first (a session batch took slots, a fence is pending,
     *  the state changed). Never more than the slots really free. */
    std::int32_t fast_credits = 0;
    std::uint32_t fast_inline = 0;   ///< inline bytes the single-call send writes in one BB (0: never)
    std::uint32_t meta_off_mask = 0; ///< mask << wqe_meta_shift: a WQE counter's byte offset in meta (poll)
    /* Line B: the session. */
    /** fm_ce_se of wr_flags & 7 (FENCE, SIGNALED, SOLICITED) with sq_sig_all's
     *  CQ update, in place: the third word of the control segment. */
    alignas(64) std::uint32_t ctrl_w2[8] = {};
    std::uint32_t bf_size = 0;       ///< bytes per BF half (the toggle between them)
    std::uint32_t max_post = 0;      ///< WQEs outstanding at most
    std::uint32_t qpn_be = 0;        ///< be32(qpn << 8): qpn_ds without ds
    std::uint8_t fm_cache = 0;       ///< fence for the next WQE (after a UMR)
    std::uint8_t not_ready = 1;      ///< the QP is in neither RTS nor ERR (posting is refused)
    std::uint8_t inl = 0;            ///< batch has inline data (prefer BlueFlame)
    std::uint8_t need = 0;           ///< setters the open WQE still needs (need_* bits)
    /** Thread domain: between wr_start and wr_complete/wr_abort (a locked QP
     *  has mlx5_qp::session instead). Single-call posts refuse to run then. */
    std::uint8_t session_open = 0;
    std::uint8_t *qend = nullptr;    ///< SQ end
    std::uint32_t cur_post_rb = 0;   ///< wr_start snapshot
    std::uint32_t nreq = 0;          ///< WQEs of this batch
    int err = 0;                     ///< latched error of the batch
    std::uint32_t size = 0;          ///< ds of the open WQE
    mlx5_wqe_ctrl_seg *ctrl = nullptr; ///< open WQE, null when none
    std::uint8_t *data = nullptr;    ///< where the next segment goes
    mlx5_wqe_ctrl_seg *last_ctrl_ = nullptr; ///< last finished WQE (the doorbell's)
    std::uint32_t last_bbs = 0;      ///< BBs of the last WQE (BlueFlame length)
    std::uint32_t nbind = 0;         ///< bind_mw requests of this batch
    std::uint8_t fm_cache_rb = 0;    ///< wr_start snapshot of fm_cache
    /** The QP's statistics (mlx5_qp::io_blk), nullptr when telemetry is off:
     *  the poster writes tx_*, depth and its errors. */
    env::stats::io_stats *io = nullptr;
    std::uint64_t batch_bytes = 0;   ///< data bytes of this batch (counted only with io)
    /* Cold: limits and rarer state. */
    std::uint8_t *bf_reg = nullptr;  ///< BlueFlame register pair (first half)
    std::uint32_t max_inline = 0;
    std::uint32_t max_sge = 0;
    std::uint32_t eth_min_inline = 0;
    mlx5_wqe_eth_seg *eth = nullptr; ///< RAW_PACKET: the open WQE's eth seg needing inline headers
    std::uint64_t max_msg = 0;       ///< largest message (UD: the MTU)
    std::uint32_t max_tso_header = 0;
    unsigned allowed_flags = 0;      ///< WR_* accepted (WR_IP_CSUM on RAW_PACKET only)
    struct bind { vq::mw *mw; std::uint32_t rkey; };
    bind *binds = nullptr;           ///< windows bound by this batch (their keys change at wr_complete)
    std::uint32_t max_bind = 0;
    /** A bind's window, its key before the bind and the bind's new key. */
    struct undo { vq::mw *mw; std::uint32_t old_rkey, new_rkey; };
    undo *bind_undo = nullptr;       ///< per BB index: what an error completion of its bind undoes
    /** The single-call send's control segment, first 8 bytes before byte
     *  swapping, per inline length (1..fast_inline): opcode SEND << 32 |
     *  qpn << 8 | ds (ctrl and the inline octowords); the WQE index is added
     *  per post. One load replaces computing ds from the length. */
    std::uint64_t fast_ctrl0[fast_inline_max + 1] = {};
    /* Own line: the consumer side (poll, maybe another thread). */
    alignas(64) std::atomic<std::uint32_t> tail{0}; ///< WQEs completed (wqe_meta::done of the last CQE's WQE)
};
// The single-call send touches line A and the table and BF size opening line B; the
// consumer's tail never shares a line with the producer.
static_assert(offsetof(send_state, meta_off_mask) < 64 && offsetof(send_state, ctrl_w2) == 64 &&
              offsetof(send_state, bf_size) < 128 &&
              offsetof(send_state, tail) % 64 == 0 &&
              offsetof(send_state, tail) >= offsetof(send_state, bind_undo) + sizeof(void *));

/** need bits: what the open WQE still waits for. */
enum : std::uint8_t {
    need_data = 1,      ///< a data setter is mandatory (atomics; RAW with inline headers)
    need_addr = 2,      ///< set_ud_addr is mandatory (UD)
    has_data = 4,       ///< a data setter was called
    need_no_data = 8,   ///< the operation takes no data setter (UMR)
    need_no_inline = 16, ///< no inline data (read, atomics)
    need_atomic = 32,   ///< the data is the 8-byte atomic result
};

struct mlx5_qp : vq::qp {
    send_state sq;
    recv_ring rq;             ///< unused with an SRQ
    mlx5_srq *msrq = nullptr;
    /** sq.io for the poller (rx_*, error completions): its own copy, off
     *  the poster's lines. */
    env::stats::io_stats *rx_io = nullptr;
    struct mlx5_td *mtd = nullptr;
    spinlock lock;
    common::session_owner session; ///< locked QPs: the thread between wr_start and wr_complete/abort
    std::atomic<std::uint8_t> state{static_cast<std::uint8_t>(vq::qp_state::reset)};
    mlx5_ctx *mctx = nullptr;
    void *h = nullptr;
    sq_view sqv;
    rq_view rqv;
    vq::qp_attr attr{};       ///< what query_qp reports
    std::uint32_t rq_wqe_cnt = 0;
    env::stats::io_block io_blk; ///< mlx5.<device>.qp.<qpn>: owns *sq.io
};

/** send_state::ctrl_w2's CQ update bit (fm_ce_se, the word's top byte): the
 *  WQE is signalled (WR_SIGNALED or sq_sig_all). */
constexpr std::uint32_t ctrl_w2_signalled = static_cast<std::uint32_t>(MLX5_WQE_CTRL_CQ_UPDATE) << 24;

/** Stamp the record @p m of a WQE whose control word pair is @p w2
 *  (statistics on: s.io set). */
inline void stamp_wqe(wqe_meta &m, std::uint64_t w2) noexcept
{
    m.stamp = (w2 & ctrl_w2_signalled) ? env::tsc::now() : 0;
}

inline void mlx5_cq::set_last(mlx5_qp *q) noexcept
{
    last_qp = q;
    last_qpn_key = q ? be32(q->qp_num) | MLX5_OPCODE_RDMA_WRITE : ~0u;
}

/* ---------------- Fast path entry points (mlx5_post.cpp, mlx5_cq.cpp) ---------------- */

/** Install the QP's fast-path pointers from its type, send_ops_flags, td and
 *  statistics block (sq.io, set before). */
void install_qp_ops(mlx5_qp *q);
/** Reset the driver-side queue state (RESET transition, creation). */
void reset_qp_queues(mlx5_qp *q);
/** Install the CQ's poll functions. */
void install_cq_ops(mlx5_cq *c);
/** Initialise the SRQ free list and install its post function. */
void init_srq(mlx5_srq *s);
/** Remove @p qpn's CQEs from @p c (RESET transition; rdma-core __mlx5_cq_clean). */
void cq_clean(mlx5_cq *c, std::uint32_t qpn, mlx5_srq *srq);
/** Arm @p c for the next completion (solicited only when @p solicited):
 *  the arm doorbell record and the CQ doorbell register (rdma-core mlx5_arm_cq). */
void arm_cq(mlx5_cq *c, bool solicited) noexcept;

} // namespace shunt::drv::mlx5
