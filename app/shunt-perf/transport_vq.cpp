/* shunt-perf at the raw queue level (--vq --driver NAME): lib/vq drivers.
 *
 * One QP of --qp-type (rc, uc, ud) per side, a send CQ and a receive CQ
 * (single-threaded, a thread domain: no locks), and two buffers from the
 * driver's alloc_buf (shm: inside the context's shared segment, so RDMA and
 * rendezvous copies go straight from memory to memory), registered as one
 * region each.
 *
 * --op msg: send/receive. Up to inline_max bytes the data is copied into the
 * request (WR_INLINE); shm writes a small unsignaled inline send on an idle
 * queue directly into the peer's ring slot. Larger sends use an SGE of the
 * registered tx buffer. Every receive is posted on the rx buffer with room
 * for max_size: the driver copies a message into it when the receiver polls,
 * one completion at a time, so a message is never overwritten before the
 * loop has looked at it. A consumed receive is reposted when the receive CQ
 * is idle (off the critical path, as a latency-minded application does), or
 * at once when half the receive queue is owed.
 *
 * --op write (RC/UC): RDMA write with immediate data into the peer's rx
 * buffer; the immediate consumes a zero-length receive there, which is how
 * the receiving side observes the write (recv_rdma_with_imm, byte_len = the
 * write's length). Pingpong writes at offset 0. Streams write into a ring of
 * slots of the peer's rx buffer, and the receiver hands back credit by an
 * inline RDMA write of its consumed count into a word of the writer's rx
 * buffer every quarter ring: a writer never overwrites a slot the receiver
 * has not yet looked at (the flow control a real ring over RDMA needs).
 *
 * Windows (bw, rate): every window/2-th send is signaled; the number of
 * sends not yet known complete is kept at most the window. inject (rate) is
 * the inline send when the size fits, else the same send as bw.
 *
 * --verify: a send that reads the tx buffer at execution time (SGE) is
 * waited for before send() reports it posted, because the loop rewrites the
 * buffer for the next message; figures of a --verify run include that.
 *
 * The QP addresses, buffer addresses and keys go over the out-of-band
 * channel: "VQADDR <dev hex> <qpn> <rx addr> <rx rkey>", then "READY" once
 * the receives are posted. */
#include "env/compiler.h"
#include "env/errors.h"
#include "loops.h"
#include "oob.h"
#include "transport.h"
#include "vq/driver.h"
#include "vq/vq.h"

#include <arpa/inet.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace shunt::perf {
namespace {

constexpr std::uint32_t inline_max = 256;     // inline up to here (vq_pingpong does the same)
constexpr std::uint32_t sq_depth = 1024;
constexpr std::uint32_t rq_depth = 512;
constexpr std::uint64_t pingpong_sig_every = 256; // well inside sq_depth
constexpr std::uint32_t ud_grh = 40;
// One registered buffer per side: tx | rx (where receives land and what the
// loops read) | the ring the peer writes into (--op write) | the credit word.
constexpr std::size_t rx_off = max_size;
constexpr std::size_t ring_off = 2 * max_size;
constexpr std::size_t ring_bytes = 2 * max_size;
constexpr std::size_t credit_off = ring_off + ring_bytes; // own cache line
constexpr std::size_t buf_bytes = credit_off + 64;
constexpr std::uint32_t ud_qkey = 0x5348554eu;
constexpr std::uint64_t gen_shift = 40;        // wr_id: run generation << 40 | message count

/** Report a failed completion (cold) and turn it into a code. */
[[gnu::cold, gnu::noinline]] int wc_error(const char *what, const vq::wc &w)
{
    std::fprintf(stderr, "shunt-perf: vq %s completion failed: %s (vendor error %u)\n", what,
                 vq::wc_status_str(w.status), w.vendor_err);
    return w.status == vq::wc_status::retry_exc_err || w.status == vq::wc_status::wr_flush_err ? -FI_ECONNRESET
                                                                                              : -FI_EREMOTEIO;
}

struct vq_res {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::td *td = nullptr;
    vq::cq *scq = nullptr, *rcq = nullptr;
    vq::qp *qp = nullptr;
    vq::ah *ah = nullptr;
    std::byte *buf = nullptr;            // buf_bytes: tx, rx, ring, credit
    bool seg = false;                    // from alloc_buf (else aligned_alloc)
    vq::mr *mr = nullptr;

    ~vq_res()
    {
        // Reverse order of creation; errors here change nothing for the tool.
        if (qp) (void)vq::destroy_qp(qp);
        if (ah) (void)vq::destroy_ah(ah);
        if (mr) (void)vq::dereg_mr(mr);
        if (buf) seg ? (void)vq::free_buf(ctx, buf) : std::free(buf);
        if (scq) (void)vq::destroy_cq(scq);
        if (rcq) (void)vq::destroy_cq(rcq);
        if (td) (void)vq::dealloc_td(td);
        if (pd) (void)vq::dealloc_pd(pd);
        if (ctx) (void)vq::close_device(ctx);
    }
};

/** The transport: Write selects RDMA write + immediate, Ud the UD session
 *  path (address per request). Both are template arguments so that the
 *  per-message code carries no branch on them. */
template <bool Write, bool Ud> class vq_transport {
public:
    vq_transport(std::unique_ptr<vq_res> res, bool initiator, std::uint64_t peer_buf, std::uint32_t peer_rkey,
                 std::uint32_t peer_qpn)
        : initiator_(initiator), r_(std::move(res)), qp_(r_->qp), scq_(r_->scq), rcq_(r_->rcq), tx_(r_->buf),
          rx_(r_->buf + rx_off),
          ring_(r_->buf + ring_off), lkey_(r_->mr->lkey), peer_ring_(peer_buf + ring_off),
          peer_credit_(peer_buf + credit_off), peer_rkey_(peer_rkey), peer_qpn_(peer_qpn)
    {
        credit_word_ = reinterpret_cast<std::atomic<std::uint64_t> *>(r_->buf + credit_off);
    }

    void begin_run(const run_request &r)
    {
        gen_++;
        stream_ = r.test != test_kind::pingpong;
        verify_ = r.verify;
        size_ = r.size;
        window_ = r.window ? r.window : 1;
        sig_every_ = window_ / 2 ? window_ / 2 : 1;
        posted_ = completed_ = 0;
        sync_wr_ = 0;
        last_post_ = stream_ ? 0 : r.warmup + r.iterations;
        sig_last_ = 0;
        // Write streams: slots in the peer's rx buffer, and credit.
        stride_ = (r.size + 63) & ~std::size_t{63};
        slots_ = ring_bytes / stride_;
        if (slots_ > 65536)
            slots_ = 65536;
        credit_batch_ = slots_ / 4 ? slots_ / 4 : 1;
        wr_head_ = 0;
        credit_cache_ = 0;
        rd_tail_ = 0;
        credit_sent_ = 0;
        // Reset between sizes: no peer write is in flight (the previous size
        // ended with an acknowledgement).
        credit_word_->store(0, std::memory_order_relaxed);
    }

    void end_run()
    {
        // Give every owed receive back so the next size starts full.
        while (owed_ && repost() == 0) {
        }
    }

    int send(const void *buf, std::size_t len) noexcept { return post_one<false>(buf, len); }
    int inject(const void *buf, std::size_t len) noexcept { return post_one<true>(buf, len); }

    ssize_t recv(void *buf, std::size_t cap) noexcept
    {
        vq::wc w;
        int n = vq::poll_cq(rcq_, 1, &w);
        if (n == 0) {
            // Idle: the moment to give receives back, and to drive sends
            // that wait for ring space (shm progresses them on a poll).
            if (owed_) [[unlikely]]
                return repost() ? -FI_EIO : -FI_EAGAIN;
            // Streams drive their sends; a pingpong waiting here still
            // polls the send CQ now and then, where a failed send (peer
            // gone: retry_exc_err) is reported, so the wait ends with it.
            if ((stream_ && posted_ != completed_) || (++idle_ & 4095) == 0) {
                int rc = progress();
                if (rc)
                    return rc;
            }
            return -FI_EAGAIN;
        }
        if (n < 0) [[unlikely]]
            return n;
        if (w.status != vq::wc_status::success) [[unlikely]]
            return wc_error("receive", w);
        // A verbs UD receive starts with the 40-byte GRH area (WC_GRH); shm has none.
        const std::size_t grh = Ud && (w.wc_flags & vq::WC_GRH) ? ud_grh : 0;
        if (w.byte_len < grh) [[unlikely]]
            return -FI_EIO;
        const std::size_t len = w.byte_len - grh;
        if (len > cap) [[unlikely]]
            return -FI_EMSGSIZE;
        if (++owed_ >= rq_depth / 2) [[unlikely]] {
            if (repost())
                return -FI_EIO;
        }
        if constexpr (Write) {
            // The data is in our ring (slot 0 for pingpong). Only --verify
            // looks at it, through buf.
            if (verify_) [[unlikely]]
                std::memcpy(buf, ring_ + (stream_ ? (rd_tail_ % slots_) * stride_ : 0), len);
            if (stream_) {
                rd_tail_++;
                if (rd_tail_ - credit_sent_ >= credit_batch_) {
                    // Hand back credit: the writer may reuse every slot before rd_tail_.
                    credit_val_ = rd_tail_;
                    int rc = vq::post_write(qp_, 0, &credit_val_, 8, 0, peer_rkey_, peer_credit_, vq::WR_INLINE);
                    if (rc) [[unlikely]]
                        return rc;
                    credit_sent_ = rd_tail_;
                }
            }
            return static_cast<ssize_t>(len);
        }
        if (buf != rx_ + grh) [[unlikely]]
            std::memcpy(buf, rx_ + grh, len);
        return static_cast<ssize_t>(len);
    }

    /** Drain the send CQ: signaled completions move the known-complete
     *  count; any error ends the run. */
    int progress() noexcept
    {
        vq::wc ws[16];
        int n;
        while ((n = vq::poll_cq(scq_, 16, ws)) > 0) {
            for (int i = 0; i < n; i++) {
                if (ws[i].status != vq::wc_status::success) [[unlikely]]
                    return wc_error("send", ws[i]);
                if ((ws[i].wr_id >> gen_shift) == gen_)
                    completed_ = ws[i].wr_id & ((1ull << gen_shift) - 1);
            }
        }
        return n < 0 ? n : 0;
    }

    /** 0 once the last signaled send completed; -FI_EAGAIN not yet (the
     *  send CQ is polled, which is what moves a send the driver holds for
     *  ring space); or an error. The loops call it after their last post of
     *  a run, which is signaled: a pingpong's last message, and every post
     *  of a stream's responder (its acknowledgements). */
    int drained() noexcept
    {
        if (int rc = progress(); rc)
            return rc;
        return completed_ >= sig_last_ ? 0 : -FI_EAGAIN;
    }

    std::byte *tx_buf() noexcept { return tx_; }
    std::byte *rx_buf() noexcept { return rx_; }
    unsigned max_window(std::size_t) const { return sq_depth / 2; }

private:
    int repost() noexcept
    {
        int rc;
        if constexpr (Write)
            rc = vq::post_recv(qp_, 0, nullptr, 0);
        else
            rc = vq::post_recv(qp_, 0, reinterpret_cast<std::uint64_t>(rx_), rx_len_, lkey_);
        if (rc == 0)
            owed_--;
        return rc;
    }

    template <bool Inject> int post_one(const void *buf, std::size_t len) noexcept
    {
        if (sync_wr_) [[unlikely]]
            return finish_sync();
        const bool inl = len <= inline_max;
        unsigned flags = inl ? vq::WR_INLINE : 0;
        std::uint64_t raddr = peer_ring_;
        if (stream_) {
            if (posted_ - completed_ >= window_) {
                int rc = progress();
                if (rc)
                    return rc;
                if (posted_ - completed_ >= window_)
                    return -FI_EAGAIN;
            }
            if constexpr (Write) {
                if (wr_head_ - credit_cache_ >= slots_) {
                    // Observe credit: the peer's RDMA write of its consumed
                    // count lands after it read those slots; our next writes
                    // into them are ordered after this load.
                    credit_cache_ = credit_word_->load(std::memory_order_acquire);
                    if (wr_head_ - credit_cache_ >= slots_)
                        return -FI_EAGAIN;
                }
                raddr += (wr_head_ % slots_) * stride_;
            }
            if ((posted_ + 1) % sig_every_ == 0)
                flags |= vq::WR_SIGNALED;
        } else if ((posted_ + 1) % pingpong_sig_every == 0) [[unlikely]] {
            // A hardware send queue frees its slots only when a CQE covers
            // them: a ping-pong signals now and then, and drains here.
            flags |= vq::WR_SIGNALED;
            if (posted_ - completed_ >= 2 * pingpong_sig_every) {
                int rc = progress();
                if (rc)
                    return rc;
            }
        }
        const bool sync = verify_ && !inl;
        // The post drained() waits for is signaled: the run's last one
        // (pingpong), each acknowledgement of a stream's responder.
        if (sync || posted_ + 1 == last_post_ || (stream_ && !initiator_)) [[unlikely]]
            flags |= vq::WR_SIGNALED;
        const std::uint64_t id = (gen_ << gen_shift) | (posted_ + 1);
        const std::uint32_t n = static_cast<std::uint32_t>(len);
        int rc;
        if constexpr (Ud) {
            vq::wr_start(qp_);
            qp_->wr_id = id;
            qp_->wr_flags = flags & ~vq::WR_INLINE;
            vq::wr_send(qp_);
            if (inl)
                vq::wr_set_inline_data(qp_, buf, len);
            else
                vq::wr_set_sge(qp_, lkey_, reinterpret_cast<std::uint64_t>(buf), n);
            vq::wr_set_ud_addr(qp_, r_->ah, peer_qpn_, ud_qkey);
            rc = vq::wr_complete(qp_);
        } else if constexpr (Write) {
            vq::wr_start(qp_);
            qp_->wr_id = id;
            qp_->wr_flags = flags & ~vq::WR_INLINE;
            vq::wr_rdma_write_imm(qp_, peer_rkey_, raddr, htonl(static_cast<std::uint32_t>(posted_)));
            if (inl)
                vq::wr_set_inline_data(qp_, buf, len);
            else
                vq::wr_set_sge(qp_, lkey_, reinterpret_cast<std::uint64_t>(buf), n);
            rc = vq::wr_complete(qp_);
        } else {
            rc = vq::post_send(qp_, id, buf, n, lkey_, flags);
        }
        if (rc) [[unlikely]]
            return rc;
        posted_++;
        if (flags & vq::WR_SIGNALED)
            sig_last_ = posted_;
        if constexpr (Write)
            wr_head_++;
        if (sync) [[unlikely]] {
            sync_wr_ = posted_;
            return finish_sync();
        }
        return 0;
    }

    /** --verify, SGE send: report it posted once it completed. */
    [[gnu::noinline]] int finish_sync() noexcept
    {
        int rc = progress();
        if (rc)
            return rc;
        if (completed_ < sync_wr_)
            return -FI_EAGAIN;
        sync_wr_ = 0;
        return 0;
    }

    bool initiator_;
    std::unique_ptr<vq_res> r_;
    vq::qp *qp_;
    vq::cq *scq_, *rcq_;
    std::byte *tx_, *rx_, *ring_;
    std::uint32_t lkey_;
    std::uint32_t rx_len_ = Ud ? 4096 + ud_grh : static_cast<std::uint32_t>(max_size); // UD: room for a GRH
    std::uint64_t peer_ring_, peer_credit_;
    std::uint32_t peer_rkey_, peer_qpn_;
    std::atomic<std::uint64_t> *credit_word_;
    // Per run.
    std::uint64_t gen_ = 0;
    bool stream_ = false, verify_ = false;
    std::size_t size_ = 8, stride_ = 64;
    std::uint64_t window_ = 1, sig_every_ = 1;
    std::uint64_t posted_ = 0, completed_ = 0, sync_wr_ = 0;
    std::uint64_t last_post_ = 0;  // pingpong: the run's last message (signaled), else 0
    std::uint64_t sig_last_ = 0;   // the last signaled post
    std::uint64_t slots_ = 1, credit_batch_ = 1;
    std::uint64_t wr_head_ = 0, credit_cache_ = 0;   // writer
    std::uint64_t rd_tail_ = 0, credit_sent_ = 0;    // receiver
    std::uint64_t credit_val_ = 0;
    std::uint32_t owed_ = 0;                         // receives to repost
    std::uint32_t idle_ = 0;                         // empty receive polls
};

vq::qp_type qp_type_of(const std::string &s)
{
    return s == "uc" ? vq::qp_type::uc : s == "ud" ? vq::qp_type::ud : vq::qp_type::rc;
}

int validate(const test_config &c, std::string &why)
{
    if (c.op != "msg" && c.op != "write") {
        why = "the vq level supports --op msg (send/receive) and write (RDMA write with immediate), not '" + c.op + "'";
        return -FI_EOPNOTSUPP;
    }
    if (c.op == "write" && c.qp_type == "ud") {
        why = "--qp-type ud has no RDMA write (IBV_WR API: send only); use rc or uc";
        return -FI_EOPNOTSUPP;
    }
    if (c.shared_buffers) {
        why = "--shared-buffers is an endpoint-level option; the vq level always uses the driver's alloc_buf memory";
        return -FI_EOPNOTSUPP;
    }
    if (c.ep_type != "rdm") {
        why = "-e selects an endpoint type, which the vq level does not have; use --qp-type";
        return -FI_EOPNOTSUPP;
    }
    return 0;
}

/** The first device of driver @p drv (mlx5: a ConnectX port if there is one,
 *  else mlx5_model0 when SHUNT_MLX5_MODEL offers it). */
vq::device *device_of(const std::string &drv)
{
    std::vector<vq::device *> devs;
    vq::get_device_list(devs);
    for (vq::device *d : devs)
        if (d->drv && drv == d->drv->name)
            return d;
    return nullptr;
}

std::size_t max_msg(const test_config &c)
{
    if (c.qp_type != "ud")
        return 0;
    vq::device *d = device_of(c.provider);
    vq::context *ctx = nullptr;
    vq::device_attr a;
    std::size_t mtu = 4096;
    if (d && vq::open_device(d, &ctx) == 0) {
        if (vq::query_device(ctx, &a) == 0 && a.ud_mtu)
            mtu = a.ud_mtu;
        (void)vq::close_device(ctx);
    }
    return mtu;
}

std::string hex(const std::uint8_t *p, std::size_t n)
{
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (std::size_t i = 0; i < n; i++) {
        s += digits[p[i] >> 4];
        s += digits[p[i] & 15];
    }
    return s;
}

bool unhex(const std::string &s, vq::dev_addr &a)
{
    if (s.size() % 2 || s.size() / 2 > sizeof a.raw)
        return false;
    a.len = static_cast<std::uint8_t>(s.size() / 2);
    for (std::size_t i = 0; i < a.len; i++) {
        unsigned v;
        if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1)
            return false;
        a.raw[i] = static_cast<std::uint8_t>(v);
    }
    return true;
}

/** Memory peers reach directly: alloc_buf, else the heap (the driver then
 *  copies with process_vm_* for RDMA: slower, still correct). */
int get_buf(vq_res &r, std::size_t n, std::byte *&out, bool &seg)
{
    void *p = nullptr;
    if (vq::alloc_buf(r.ctx, n, &p) == 0) {
        seg = true;
    } else {
        p = std::aligned_alloc(4096, (n + 4095) & ~std::size_t{4095});
        if (!p)
            return -FI_ENOMEM;
        seg = false;
    }
    std::memset(p, 0, n); // fault the pages in now, not in a timed loop
    out = static_cast<std::byte *>(p);
    return 0;
}

int open_vq(const test_config &c, bool initiator, oob_channel &oob, double timeout_s,
            std::unique_ptr<transport_session> &out, std::string &why)
{
    const bool write = c.op == "write";
    const vq::qp_type type = qp_type_of(c.qp_type);
    auto r = std::make_unique<vq_res>();
    int rc;
    auto fail = [&](const char *what, int code) {
        why = std::string("vq ") + what + ": " + shunt::strerror(code);
        (void)oob.send("ERROR " + why);
        return code;
    };
    vq::device *dev = device_of(c.provider);
    if (!dev)
        return fail("no device of the driver", -FI_ENODEV);
    if ((rc = vq::open_device(dev, &r->ctx)))
        return fail("open_device", rc);
    if ((rc = vq::alloc_pd(r->ctx, &r->pd)) || (rc = vq::alloc_td(r->ctx, &r->td)))
        return fail("alloc_pd/td", rc);
    vq::cq_init_attr ca;
    ca.cqe = 4096;
    ca.single_threaded = true;
    if ((rc = vq::create_cq(r->ctx, &ca, &r->scq)) || (rc = vq::create_cq(r->ctx, &ca, &r->rcq)))
        return fail("create_cq", rc);
    if ((rc = get_buf(*r, buf_bytes, r->buf, r->seg)))
        return fail("buffers", rc);
    if ((rc = vq::reg_mr(r->pd, r->buf, buf_bytes, vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE, &r->mr)))
        return fail("reg_mr", rc);
    vq::qp_init_attr ia;
    ia.type = type;
    ia.send_cq = r->scq;
    ia.recv_cq = r->rcq;
    ia.send_ops_flags = write ? (vq::OPS_RDMA_WRITE | vq::OPS_RDMA_WRITE_WITH_IMM) : vq::OPS_SEND;
    ia.td = r->td;
    ia.cap.max_send_wr = sq_depth;
    ia.cap.max_recv_wr = rq_depth;
    ia.cap.max_inline_data = inline_max;
    if ((rc = vq::create_qp(r->pd, &ia, &r->qp)))
        return fail("create_qp", rc);

    // Exchange addresses.
    vq::qp_addr mine = vq::get_qp_addr(r->qp);
    std::ostringstream m;
    m << "VQADDR " << hex(mine.dev.raw, mine.dev.len) << ' ' << mine.qpn << ' '
      << reinterpret_cast<std::uint64_t>(r->buf) << ' ' << r->mr->rkey;
    if ((rc = oob.send(m.str()))) {
        why = "peer gone during setup";
        return rc;
    }
    std::string line;
    if ((rc = oob.expect("VQADDR", line, timeout_s))) {
        why = rc == -FI_EREMOTEIO ? line : std::string("no address from the peer: ") + shunt::strerror(rc);
        return rc;
    }
    std::istringstream in(line);
    std::string devhex;
    vq::qp_addr peer{};
    unsigned long long prx = 0;
    std::uint32_t prkey = 0;
    if (!(in >> devhex >> peer.qpn >> prx >> prkey) || !unhex(devhex, peer.dev))
        return fail("malformed peer address", -FI_EINVAL);

    vq::qp_attr a;
    a.state = vq::qp_state::init;
    unsigned mask = vq::QP_ATTR_STATE;
    if (type == vq::qp_type::ud) {
        a.qkey = ud_qkey;
        mask |= vq::QP_ATTR_QKEY;
    } else {
        a.qp_access_flags = vq::ACCESS_REMOTE_WRITE;
        mask |= vq::QP_ATTR_ACCESS_FLAGS;
    }
    if ((rc = vq::modify_qp(r->qp, &a, mask)))
        return fail("modify_qp INIT", rc);
    a.state = vq::qp_state::rtr;
    mask = vq::QP_ATTR_STATE;
    if (type != vq::qp_type::ud) {
        a.dest = peer.dev;
        a.dest_qp_num = peer.qpn;
        mask |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
    }
    if ((rc = vq::modify_qp(r->qp, &a, mask)))
        return fail("modify_qp RTR", rc);
    a.state = vq::qp_state::rts;
    if ((rc = vq::modify_qp(r->qp, &a, vq::QP_ATTR_STATE)))
        return fail("modify_qp RTS", rc);
    if (type == vq::qp_type::ud) {
        vq::ah_attr aa;
        aa.dest = peer.dev;
        if ((rc = vq::create_ah(r->pd, &aa, &r->ah)))
            return fail("create_ah", rc);
    }
    for (std::uint32_t i = 0; i < rq_depth; i++) {
        rc = write ? vq::post_recv(r->qp, 0, nullptr, 0)
                   : vq::post_recv(r->qp, 0, reinterpret_cast<std::uint64_t>(r->buf + rx_off),
                                   static_cast<std::uint32_t>(type == vq::qp_type::ud ? 4096 + ud_grh : max_size),
                                   r->mr->lkey);
        if (rc)
            return fail("post_recv", rc);
    }
    // Both sides' receives are posted before anything is sent.
    if ((rc = oob.send("READY")) || (rc = oob.expect("READY", line, timeout_s))) {
        why = rc == -FI_EREMOTEIO ? line : std::string("peer not ready: ") + shunt::strerror(rc);
        return rc;
    }
    auto make = [&]<bool W, bool U>() {
        out = std::make_unique<typed_session<vq_transport<W, U>>>(
            std::make_unique<vq_transport<W, U>>(std::move(r), initiator, prx, prkey, peer.qpn));
    };
    if (type == vq::qp_type::ud)
        make.template operator()<false, true>();
    else if (write)
        make.template operator()<true, false>();
    else
        make.template operator()<false, false>();
    return 0;
}

const transport_ops shm_ops = {
    "shm", true, "lib/vq shm driver: --qp-type rc|uc|ud, --op msg|write (raw queues, no endpoint layer)", validate,
    open_vq, max_msg, nullptr,
};

const transport_ops mlx5_ops = {
    "mlx5", true,
    "lib/vq mlx5 driver (a ConnectX, or its software model with SHUNT_MLX5_MODEL=1): --qp-type rc|uc|ud, "
    "--op msg|write",
    validate, open_vq, max_msg, nullptr,
};

} // namespace

void register_vq(std::vector<const transport_ops *> &v)
{
    if (device_of("shm"))
        v.push_back(&shm_ops);
    if (device_of("mlx5"))
        v.push_back(&mlx5_ops);
}

} // namespace shunt::perf
