/* shunt-perf at the endpoint level (-p PROVIDER): lib/fabric providers.
 *
 * Setup: getinfo with the provider's name, -e as the endpoint type, the
 * capabilities --op needs, FI_THREAD_DOMAIN and manual progress (the
 * provider's lock-free paths: shm's inject fast path needs both), then
 * fabric, domain, a transmit CQ bound with FI_SELECTIVE_COMPLETION (no entry
 * per successful operation), a receive CQ (FI_CQ_FORMAT_MSG: the length), a
 * transmit counter (FI_SEND | FI_WRITE: what the window is read from), an AV
 * (RDM, DGRAM) or an EQ and connect/accept (MSG), and one registered buffer
 * per side: tx | rx | a ring the peer writes into | a credit word | an
 * atomic word — aligned_alloc memory, or with --shared-buffers memory from
 * the provider's shunt_mem extension (fabric/ext_mem.h), which the peer
 * reaches without a system call.
 *
 * Data calls, per --op (a template argument, so the per-message code has no
 * branch on it):
 *   msg     fi_inject up to inject_size (pingpong and rate; shm takes its
 *           lock-free fast path up to 64 B on RDM), else fi_send with the
 *           buffer's descriptor; receives preposted (fi_recv on the rx buffer,
 *           reposted when the receive CQ is idle or half of them are owed)
 *   tagged  the same with fi_tinject / fi_tsend / fi_trecv, tag 0x5348
 *   write   fi_writedata / fi_inject_writedata into the peer's ring: the
 *           remote CQ data makes a receive-CQ entry at the target, which is
 *           how the target observes the write (it consumes no receive).
 *           Streams use ring slots and credit written back into the
 *           writer's credit word (as at the vq level)
 *   atomic  fi_atomic / fi_inject_atomic, FI_SUM of 1 on the peer's
 *           FI_UINT64 word; the target observes its word change (a flag word)
 * The window of bw/rate is posted operations minus the transmit counter.
 *
 * --verify with bw/rate keeps one receive posted at a time: a provider may
 * place several arrivals during one progress call, and with every receive
 * on the same buffer a later message would overwrite one not yet checked;
 * arrivals wait as unexpected messages meanwhile.
 *
 * Out-of-band exchange: "FABADDR <name hex> <buffer address> <key>" both
 * ways (MSG: the responder's passive endpoint name), then "READY" once the
 * receives are posted (and, MSG, the connection is up). */
#include "env/compiler.h"
#include "env/errors.h"
#include "fabric/api.h"
#include "fabric/ext_mem.h"
#include "fabric/provider.h"
#include "loops.h"
#include "oob.h"
#include "transport.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace shunt::perf {
namespace {

namespace fab = shunt::fabric;

constexpr std::size_t rx_off = max_size;
constexpr std::size_t ring_off = 2 * max_size;
constexpr std::size_t ring_bytes = 2 * max_size;
constexpr std::size_t credit_off = ring_off + ring_bytes; // own cache line
constexpr std::size_t atomic_off = credit_off + 64;       // own cache line
constexpr std::size_t buf_bytes = atomic_off + 64;
constexpr std::uint32_t rx_depth = 256;
constexpr std::uint64_t perf_tag = 0x5348;

enum class op_kind { msg, tagged, write, atomic };

op_kind kind_of(const std::string &op)
{
    return op == "tagged" ? op_kind::tagged : op == "write" ? op_kind::write : op == "atomic" ? op_kind::atomic
                                                                                             : op_kind::msg;
}

fab::ep_type ep_type_of(const std::string &s)
{
    return s == "msg" ? fab::FI_EP_MSG : s == "dgram" ? fab::FI_EP_DGRAM : fab::FI_EP_RDM;
}

/** getinfo for the configuration. @return 0 and *out, or the code. */
int get_info(const test_config &c, fab::info **out)
{
    fab::info *h = fab::allocinfo();
    if (!h)
        return -FI_ENOMEM;
    const op_kind k = kind_of(c.op);
    h->caps = k == op_kind::tagged ? fab::FI_TAGGED : fab::FI_MSG;
    if (k == op_kind::write)
        h->caps |= fab::FI_RMA | fab::FI_WRITE | fab::FI_REMOTE_WRITE;
    if (k == op_kind::atomic)
        h->caps |= fab::FI_ATOMIC | fab::FI_WRITE | fab::FI_REMOTE_WRITE | fab::FI_RMA | fab::FI_REMOTE_READ;
    h->mode = fab::FI_CONTEXT;
    h->ep_attr->type = ep_type_of(c.ep_type);
    h->domain_attr->threading = c.threading == "safe"         ? fab::FI_THREAD_SAFE
                                : c.threading == "completion" ? fab::FI_THREAD_COMPLETION
                                                              : fab::FI_THREAD_DOMAIN;
    h->domain_attr->data_progress = fab::FI_PROGRESS_MANUAL;
    h->domain_attr->mr_mode = fab::FI_MR_VIRT_ADDR | fab::FI_MR_PROV_KEY | fab::FI_MR_LOCAL | fab::FI_MR_ALLOCATED;
    h->fabric_attr->prov_name = ::strdup(c.provider.c_str());
    if (!c.domain.empty())
        h->domain_attr->name = ::strdup(c.domain.c_str());
    int rc = fab::getinfo(fab::FI_API_VERSION, nullptr, nullptr, 0, h, out);
    fab::freeinfo(h);
    return rc;
}

[[gnu::cold, gnu::noinline]] int cq_error(fab::fid_cq *cq, const char *what)
{
    fab::cq_err_entry e{};
    if (fab::cq_readerr(cq, &e, 0) != 1) {
        std::fprintf(stderr, "shunt-perf: %s failed (no error entry)\n", what);
        return -FI_EIO;
    }
    std::fprintf(stderr, "shunt-perf: %s failed: %s (provider error %d)\n", what, shunt::strerror(-e.err),
                 e.prov_errno);
    return e.err == FI_ECONNRESET || e.err == FI_ESHUTDOWN || e.err == FI_ECANCELED ? -FI_ECONNRESET
                                                                                    : -FI_EREMOTEIO;
}

struct fab_res {
    fab::info *fi = nullptr;
    fab::fid_fabric *fabric = nullptr;
    fab::fid_domain *domain = nullptr;
    fab::fid_eq *eq = nullptr;
    fab::fid_pep *pep = nullptr;
    fab::fid_av *av = nullptr;
    fab::fid_cq *txcq = nullptr, *rxcq = nullptr;
    fab::fid_cntr *txcntr = nullptr;
    fab::fid_ep *ep = nullptr;
    fab::fid_mr *mr = nullptr;
    std::byte *buf = nullptr;
    const fab::ops_mem *mem = nullptr; ///< --shared-buffers: buf came from the provider's shunt_mem

    ~fab_res()
    {
        auto cl = [](auto *&o) {
            if (o)
                (void)fab::close(&o->fid);
            o = nullptr;
        };
        cl(ep);
        cl(pep);
        cl(mr);
        cl(av);
        cl(txcq);
        cl(rxcq);
        cl(txcntr);
        cl(eq);
        if (mem && buf)
            (void)mem->free(domain, buf);
        else
            std::free(buf);
        buf = nullptr;
        cl(domain);
        cl(fabric);
        if (fi)
            fab::freeinfo(fi);
    }
};

template <op_kind K> class fab_transport {
public:
    static constexpr bool one_sided = K == op_kind::write || K == op_kind::atomic;

    fab_transport(std::unique_ptr<fab_res> r, fab::fi_addr_t dest, std::uint64_t peer_buf, std::uint64_t peer_key)
        : r_(std::move(r)), ep_(r_->ep), txcq_(r_->txcq), rxcq_(r_->rxcq), txcntr_(r_->txcntr), dest_(dest),
          desc_(fab::mr_desc(r_->mr)), tx_(r_->buf), rx_(r_->buf + rx_off), ring_(r_->buf + ring_off),
          peer_ring_(peer_buf + ring_off), peer_credit_(peer_buf + credit_off), peer_atomic_(peer_buf + atomic_off),
          peer_key_(peer_key), inject_max_(r_->fi->tx_attr->inject_size)
    {
        credit_word_ = reinterpret_cast<std::atomic<std::uint64_t> *>(r_->buf + credit_off);
        atomic_word_ = reinterpret_cast<std::atomic<std::uint64_t> *>(r_->buf + atomic_off);
    }

    /** Post the first receives. @return 0 or the code. */
    int start(bool verify_stream)
    {
        if constexpr (one_sided)
            return 0;
        depth_ = verify_stream ? 1 : rx_depth;
        for (std::uint32_t i = 0; i < depth_; i++) {
            owed_++;
            int rc = repost();
            if (rc)
                return rc;
        }
        return 0;
    }

    void begin_run(const run_request &r)
    {
        stream_ = r.test != test_kind::pingpong;
        verify_ = r.verify;
        window_ = stream_ ? (r.window ? r.window : 1) : 256;
        stride_ = (r.size + 63) & ~std::size_t{63};
        slots_ = ring_bytes / stride_;
        if (slots_ > 65536)
            slots_ = 65536;
        credit_batch_ = slots_ / 4 ? slots_ / 4 : 1;
        wr_head_ = credit_cache_ = rd_tail_ = credit_sent_ = 0;
        // Reset between sizes: no peer write is in flight (the previous size
        // ended with an acknowledgement).
        credit_word_->store(0, std::memory_order_relaxed);
    }

    void end_run()
    {
        while (owed_ && repost() == 0) {
        }
    }

    int send(const void *buf, std::size_t len) noexcept { return post<false>(buf, len); }
    int inject(const void *buf, std::size_t len) noexcept { return post<true>(buf, len); }

    ssize_t recv(void *buf, std::size_t cap) noexcept
    {
        if constexpr (K == op_kind::atomic) {
            // The peer's fetch-free FI_SUM lands in our word: one message per increment.
            // Observe the peer's atomic add (executed by its provider into our
            // registered word); nothing else is read after it.
            if (atomic_word_->load(std::memory_order_acquire) == seen_) {
                // Progress now and then even with nothing of ours pending:
                // an RDM peer's first operation needs us to accept its
                // connection.
                if (posted_ - done_ >= window_ / 2 || (++idle_ & 1023) == 0) [[unlikely]] {
                    int rc = progress();
                    if (rc)
                        return rc;
                }
                return -FI_EAGAIN;
            }
            seen_++;
            (void)buf;
            (void)cap;
            return 8;
        } else {
            // Completions are read in batches: every cq_read drives the
            // provider's progress, which is the expensive part.
            if (ci_ != cn_) [[likely]]
                return take(buf, cap, cache_[ci_++]);
            ssize_t n = fab::cq_read(rxcq_, cache_, cache_size);
            if (n <= 0) {
                if (n == -FI_EAGAIN) {
                    if (owed_) [[unlikely]]
                        return repost() ? -FI_EIO : -FI_EAGAIN;
                    // Streams drive their sends; a pingpong waiting here
                    // still looks at the transmit side now and then, where a
                    // failed send (the peer gone, a broken connection) is
                    // reported: the wait then ends with that error instead
                    // of the stall timeout.
                    if ((stream_ && posted_ != done_) || (++idle_ & 4095) == 0) {
                        int rc = progress();
                        if (rc)
                            return rc;
                    }
                    return -FI_EAGAIN;
                }
                return n == -FI_EAVAIL ? cq_error(rxcq_, "receive") : n;
            }
            cn_ = static_cast<unsigned>(n);
            ci_ = 1;
            return take(buf, cap, cache_[0]);
        }
    }

    /** One receive completion: the message is in rx_ (or, --op write, in
     *  the ring). */
    ssize_t take(void *buf, std::size_t cap, const fab::cq_msg_entry &e) noexcept
    {
        {
            const std::size_t len = e.len;
            if (len > cap) [[unlikely]]
                return -FI_EMSGSIZE;
            if constexpr (K == op_kind::write) {
                if (verify_) [[unlikely]]
                    std::memcpy(buf, ring_ + (stream_ ? (rd_tail_ % slots_) * stride_ : 0), len);
                if (stream_) {
                    rd_tail_++;
                    if (rd_tail_ - credit_sent_ >= credit_batch_) {
                        credit_val_ = rd_tail_;
                        ssize_t rc;
                        while ((rc = fab::inject_write(ep_, &credit_val_, 8, dest_, peer_credit_, peer_key_)) ==
                               -FI_EAGAIN)
                            if (int p = progress(); p)
                                return p;
                        if (rc)
                            return rc;
                        posted_++;
                        credit_sent_ = rd_tail_;
                    }
                }
            } else {
                // With one receive (--verify streams) the repost waits for
                // the next call: posting matches a waiting unexpected
                // message at once, into the buffer the loop is checking.
                if (++owed_ > depth_ / 2 && depth_ > 1) [[unlikely]] {
                    if (repost())
                        return -FI_EIO;
                }
                if (buf != rx_) [[unlikely]]
                    std::memcpy(buf, rx_, len);
            }
            return static_cast<ssize_t>(len);
        }
    }

    /** Drive the provider and read the transmit side: the counter (what is
     *  done) and the CQ (errors only: selective completion). */
    int progress() noexcept
    {
        fab::cq_msg_entry e;
        ssize_t n = fab::cq_read(txcq_, &e, 1);
        if (n == -FI_EAVAIL) [[unlikely]]
            return cq_error(txcq_, "transmit");
        done_ = fab::cntr_read(txcntr_);
        if (fab::cntr_readerr(txcntr_)) [[unlikely]]
            return fab::cq_read(txcq_, &e, 1) == -FI_EAVAIL ? cq_error(txcq_, "transmit") : -FI_EIO;
        return 0;
    }

    /** 0 once every operation posted so far is complete (the transmit
     *  counter reached it); -FI_EAGAIN while some are still in the provider,
     *  whose progress this call drives; or an error. */
    int drained() noexcept
    {
        if (int rc = progress(); rc)
            return rc;
        return done_ >= posted_ ? 0 : -FI_EAGAIN;
    }

    std::byte *tx_buf() noexcept { return tx_; }
    std::byte *rx_buf() noexcept { return rx_; }
    unsigned max_window(std::size_t) const { return static_cast<unsigned>(r_->fi->tx_attr->size / 2); }

private:
    int repost() noexcept
    {
        ssize_t rc;
        const std::size_t len = r_->fi->ep_attr->max_msg_size < max_size ? r_->fi->ep_attr->max_msg_size : max_size;
        if constexpr (K == op_kind::tagged)
            rc = fab::trecv(ep_, rx_, len, desc_, fab::FI_ADDR_UNSPEC, perf_tag, 0, &ctx_[ctx_i_]);
        else
            rc = fab::recv(ep_, rx_, len, desc_, fab::FI_ADDR_UNSPEC, &ctx_[ctx_i_]);
        if (rc == 0) {
            owed_--;
            ctx_i_ = (ctx_i_ + 1) % rx_depth;
        }
        return static_cast<int>(rc);
    }

    template <bool Inject> int post(const void *buf, std::size_t len) noexcept
    {
        // Pingpong needs no window: the echo proves the send done, and the
        // provider frees its entries while we read the receive CQ. Only
        // atomics, whose target does not answer through the provider, are
        // counted there too. (A check every few hundred round trips would
        // show in p99.9.)
        if ((stream_ || K == op_kind::atomic) && posted_ - done_ >= window_) {
            int rc = progress();
            if (rc)
                return rc;
            if (posted_ - done_ >= window_)
                return -FI_EAGAIN;
        }
        // Pingpong sends inject too when it fits: the buffer is free at
        // return, and nothing waits for a completion.
        const bool inj = (Inject || !stream_) && len <= inject_max_;
        ssize_t rc;
        if constexpr (K == op_kind::msg) {
            rc = inj ? fab::inject(ep_, buf, len, dest_) : fab::send(ep_, buf, len, desc_, dest_, &txctx_[posted_ % tx_ctx_count]);
        } else if constexpr (K == op_kind::tagged) {
            rc = inj ? fab::tinject(ep_, buf, len, dest_, perf_tag)
                     : fab::tsend(ep_, buf, len, desc_, dest_, perf_tag, &txctx_[posted_ % tx_ctx_count]);
        } else if constexpr (K == op_kind::write) {
            std::uint64_t raddr = peer_ring_;
            if (stream_) {
                if (wr_head_ - credit_cache_ >= slots_) {
                    // Observe credit: the peer's RDMA write of its consumed
                    // count lands after it read those slots; our next writes
                    // into them are ordered after this load.
                    credit_cache_ = credit_word_->load(std::memory_order_acquire);
                    if (wr_head_ - credit_cache_ >= slots_) {
                        if (int p = progress(); p)
                            return p;
                        return -FI_EAGAIN;
                    }
                }
                raddr += (wr_head_ % slots_) * stride_;
            }
            rc = inj ? fab::inject_writedata(ep_, buf, len, wr_head_, dest_, raddr, peer_key_)
                     : fab::writedata(ep_, buf, len, desc_, wr_head_, dest_, raddr, peer_key_, &txctx_[posted_ % tx_ctx_count]);
            if (rc == 0)
                wr_head_++;
        } else {
            static const std::uint64_t one = 1;
            (void)buf;
            (void)len;
            rc = Inject ? fab::inject_atomic(ep_, &one, 1, dest_, peer_atomic_, peer_key_, fab::FI_UINT64, fab::FI_SUM)
                        : fab::atomic(ep_, &one, 1, nullptr, dest_, peer_atomic_, peer_key_, fab::FI_UINT64,
                                      fab::FI_SUM, &txctx_[posted_ % tx_ctx_count]);
        }
        if (rc) [[unlikely]] {
            if (rc == -FI_EAGAIN) {
                if (int p = progress(); p)
                    return p;
            }
            return static_cast<int>(rc);
        }
        posted_++;
        if (verify_ && !inj) [[unlikely]]
            return finish_sync();
        return 0;
    }

    /** --verify, a send that reads the buffer later: wait until it is done
     *  (the loop rewrites the buffer for the next message). */
    [[gnu::noinline]] int finish_sync() noexcept
    {
        for (;;) {
            int rc = progress();
            if (rc)
                return rc;
            if (done_ >= posted_)
                return 0;
        }
    }

    std::unique_ptr<fab_res> r_;
    fab::fid_ep *ep_;
    fab::fid_cq *txcq_, *rxcq_;
    fab::fid_cntr *txcntr_;
    fab::fi_addr_t dest_;
    void *desc_;
    std::byte *tx_, *rx_, *ring_;
    std::uint64_t peer_ring_, peer_credit_, peer_atomic_, peer_key_;
    std::size_t inject_max_;
    std::atomic<std::uint64_t> *credit_word_, *atomic_word_;
    fab::context ctx_[rx_depth]{};
    static constexpr std::size_t tx_ctx_count = 4096; // >= any window: one per outstanding operation
    fab::context txctx_[tx_ctx_count]{};
    std::uint32_t ctx_i_ = 0, owed_ = 0, depth_ = rx_depth;
    // Per run.
    bool stream_ = false, verify_ = false;
    std::uint64_t window_ = 256, posted_ = 0, done_ = 0, seen_ = 0;
    std::size_t stride_ = 64;
    std::uint64_t slots_ = 1, credit_batch_ = 1, wr_head_ = 0, credit_cache_ = 0, rd_tail_ = 0, credit_sent_ = 0;
    std::uint64_t credit_val_ = 0;
    std::uint32_t idle_ = 0;
    static constexpr unsigned cache_size = 16;
    fab::cq_msg_entry cache_[cache_size];
    unsigned ci_ = 0, cn_ = 0;
};

int validate(const test_config &c, std::string &why)
{
    fab::info *fi = nullptr;
    int rc = get_info(c, &fi);
    if (rc) {
        why = "provider '" + c.provider + "' offers no " + c.ep_type + " endpoint for --op " + c.op + " (" +
              shunt::strerror(rc) + ")";
        return -FI_EOPNOTSUPP;
    }
    fab::freeinfo(fi);
    if (c.ep_type == "dgram" && c.test != test_kind::pingpong) {
        why = "-e dgram is unreliable: bw and rate would wait for datagrams the provider may drop; use pingpong";
        return -FI_EOPNOTSUPP;
    }
    if (c.op == "atomic" && c.verify) {
        why = "--verify checks payload bytes and --op atomic carries none (every increment is counted anyway)";
        return -FI_EOPNOTSUPP;
    }
    return 0;
}

std::size_t max_msg(const test_config &c)
{
    if (c.op == "atomic")
        return 8;
    fab::info *fi = nullptr;
    if (get_info(c, &fi))
        return 0;
    std::size_t m = fi->ep_attr->max_msg_size;
    fab::freeinfo(fi);
    return m < max_size ? m : 0;
}

std::size_t min_msg(const test_config &c) { return c.op == "atomic" ? 8 : 0; }

std::string hex(const void *p, std::size_t n)
{
    static const char digits[] = "0123456789abcdef";
    auto *b = static_cast<const std::uint8_t *>(p);
    std::string s;
    for (std::size_t i = 0; i < n; i++) {
        s += digits[b[i] >> 4];
        s += digits[b[i] & 15];
    }
    return s;
}

bool unhex(const std::string &s, std::vector<std::uint8_t> &out)
{
    if (s.size() % 2)
        return false;
    out.clear();
    for (std::size_t i = 0; i < s.size(); i += 2) {
        unsigned v;
        if (std::sscanf(s.c_str() + i, "%2x", &v) != 1)
            return false;
        out.push_back(static_cast<std::uint8_t>(v));
    }
    return true;
}

/** Wait for one EQ event of type @p want. @return 0, or the code with @p why. */
int wait_event(fab::fid_eq *eq, std::uint32_t want, double timeout_s, std::uint8_t *buf, std::size_t len,
               std::string &why)
{
    std::uint32_t ev = 0;
    ssize_t n = fab::eq_sread(eq, &ev, buf, len, static_cast<int>(timeout_s * 1000), 0);
    if (n == -FI_EAVAIL) {
        fab::eq_err_entry e{};
        (void)fab::eq_readerr(eq, &e, 0);
        why = std::string("connection failed: ") + shunt::strerror(-e.err);
        return -e.err ? -e.err : -FI_EIO;
    }
    if (n < 0) {
        why = std::string("no connection event: ") + shunt::strerror(static_cast<int>(n));
        return static_cast<int>(n);
    }
    if (ev != want) {
        why = "unexpected connection event " + std::to_string(ev);
        return -FI_EIO;
    }
    return 0;
}

int open_fabric(const test_config &c, bool initiator, oob_channel &oob, double timeout_s,
                std::unique_ptr<transport_session> &out, std::string &why)
{
    const fab::ep_type type = ep_type_of(c.ep_type);
    const op_kind k = kind_of(c.op);
    auto r = std::make_unique<fab_res>();
    int rc;
    auto fail = [&](const char *what, int code) {
        why = std::string("fabric ") + what + ": " + shunt::strerror(code);
        (void)oob.send("ERROR " + why);
        return code;
    };
    if ((rc = get_info(c, &r->fi)))
        return fail("getinfo", rc);
    if ((rc = fab::fabric_open(r->fi->fabric_attr, &r->fabric, nullptr)) ||
        (rc = fab::domain_open(r->fabric, r->fi, &r->domain, nullptr)))
        return fail("fabric/domain", rc);
    fab::cq_attr ca;
    ca.format = fab::FI_CQ_FORMAT_MSG;
    ca.size = r->fi->rx_attr->size * 2;
    if ((rc = fab::cq_open(r->domain, &ca, &r->txcq, nullptr)) || (rc = fab::cq_open(r->domain, &ca, &r->rxcq, nullptr)))
        return fail("cq_open", rc);
    fab::cntr_attr na;
    if ((rc = fab::cntr_open(r->domain, &na, &r->txcntr, nullptr)))
        return fail("cntr_open", rc);
    if (c.shared_buffers) {
        // Memory the peer reaches without a system call (fabric/ext_mem.h).
        void *ops = nullptr;
        if ((rc = fab::open_ops(&r->domain->fid, fab::FI_SHUNT_MEM_OPS_1, 0, &ops, nullptr)))
            return fail("--shared-buffers (the provider has no shareable memory)", rc);
        r->mem = static_cast<const fab::ops_mem *>(ops);
        void *p = nullptr;
        if ((rc = r->mem->alloc(r->domain, buf_bytes, &p)))
            return fail("--shared-buffers allocation", rc);
        r->buf = static_cast<std::byte *>(p);
    } else {
        // aligned_alloc wants a size that is a multiple of the alignment.
        r->buf = static_cast<std::byte *>(std::aligned_alloc(4096, (buf_bytes + 4095) & ~std::size_t{4095}));
    }
    if (!r->buf)
        return fail("buffer", -FI_ENOMEM);
    std::memset(r->buf, 0, buf_bytes); // fault the pages in now
    const std::uint64_t access = fab::FI_SEND | fab::FI_RECV | fab::FI_WRITE | fab::FI_READ | fab::FI_REMOTE_WRITE |
                                 fab::FI_REMOTE_READ;
    if ((rc = fab::mr_reg(r->domain, r->buf, buf_bytes, access, 0, 0, 0, &r->mr, nullptr)))
        return fail("mr_reg", rc);
    const std::uint64_t key = fab::mr_key(r->mr);

    auto make_ep = [&](fab::info *fi) -> int {
        int e;
        if ((e = fab::endpoint(r->domain, fi, &r->ep, nullptr)) ||
            (e = fab::ep_bind(r->ep, &r->txcq->fid, fab::FI_TRANSMIT | fab::FI_SELECTIVE_COMPLETION)) ||
            (e = fab::ep_bind(r->ep, &r->rxcq->fid, fab::FI_RECV)) ||
            (e = fab::ep_bind(r->ep, &r->txcntr->fid, fab::FI_SEND | fab::FI_WRITE)))
            return e;
        if (type == fab::FI_EP_MSG)
            return fab::ep_bind(r->ep, &r->eq->fid, 0);
        return fab::ep_bind(r->ep, &r->av->fid, 0);
    };
    std::uint8_t name[256];
    std::size_t nlen = sizeof name;
    if (type == fab::FI_EP_MSG) {
        fab::eq_attr ea;
        ea.wait_obj = fab::FI_WAIT_UNSPEC;
        if ((rc = fab::eq_open(r->fabric, &ea, &r->eq, nullptr)))
            return fail("eq_open", rc);
        if (!initiator) {
            if ((rc = fab::passive_ep(r->fabric, r->fi, &r->pep, nullptr)) ||
                (rc = fab::pep_bind(r->pep, &r->eq->fid, 0)) || (rc = fab::listen(r->pep)) ||
                (rc = fab::getname(&r->pep->fid, name, &nlen)))
                return fail("passive endpoint", rc);
        } else {
            if ((rc = make_ep(r->fi)) || (rc = fab::enable(r->ep)))
                return fail("endpoint", rc);
            nlen = 0;
        }
    } else {
        fab::av_attr aa;
        if ((rc = fab::av_open(r->domain, &aa, &r->av, nullptr)))
            return fail("av_open", rc);
        if ((rc = make_ep(r->fi)) || (rc = fab::enable(r->ep)) || (rc = fab::getname(&r->ep->fid, name, &nlen)))
            return fail("endpoint", rc);
    }

    std::ostringstream m;
    m << "FABADDR " << (nlen ? hex(name, nlen) : std::string("-")) << ' ' << reinterpret_cast<std::uint64_t>(r->buf)
      << ' ' << key;
    if ((rc = oob.send(m.str()))) {
        why = "peer gone during setup";
        return rc;
    }
    std::string line;
    if ((rc = oob.expect("FABADDR", line, timeout_s))) {
        why = rc == -FI_EREMOTEIO ? line : std::string("no address from the peer: ") + shunt::strerror(rc);
        return rc;
    }
    std::istringstream in(line);
    std::string peerhex;
    unsigned long long pbuf = 0, pkey = 0;
    std::vector<std::uint8_t> peer;
    if (!(in >> peerhex >> pbuf >> pkey) || (peerhex != "-" && !unhex(peerhex, peer)))
        return fail("malformed peer address", -FI_EINVAL);

    fab::fi_addr_t dest = 0;
    std::uint8_t evbuf[512];
    if (type == fab::FI_EP_MSG) {
        if (initiator) {
            if ((rc = fab::connect(r->ep, peer.data(), nullptr, 0)))
                return fail("connect", rc);
            if ((rc = wait_event(r->eq, fab::FI_CONNECTED, timeout_s, evbuf, sizeof evbuf, why)))
                return rc;
        } else {
            if ((rc = wait_event(r->eq, fab::FI_CONNREQ, timeout_s, evbuf, sizeof evbuf, why)))
                return rc;
            auto *cm = reinterpret_cast<fab::eq_cm_entry *>(evbuf);
            rc = make_ep(cm->info);
            fab::freeinfo(cm->info);
            if (rc || (rc = fab::enable(r->ep)))
                return fail("accepted endpoint", rc);
        }
    } else {
        if (fab::av_insert(r->av, peer.data(), 1, &dest, 0, nullptr) != 1)
            return fail("av_insert", -FI_EINVAL);
    }

    fab::fid_ep *ep = r->ep;
    fab::fid_eq *eq = r->eq;
    std::unique_ptr<transport_session> s;
    auto make = [&]<op_kind K>() {
        auto t = std::make_unique<fab_transport<K>>(std::move(r), dest, pbuf, pkey);
        rc = t->start(c.verify && c.test != test_kind::pingpong);
        s = std::make_unique<typed_session<fab_transport<K>>>(std::move(t));
    };
    switch (k) {
    case op_kind::msg: make.template operator()<op_kind::msg>(); break;
    case op_kind::tagged: make.template operator()<op_kind::tagged>(); break;
    case op_kind::write: make.template operator()<op_kind::write>(); break;
    case op_kind::atomic: make.template operator()<op_kind::atomic>(); break;
    }
    if (rc)
        return fail("posting receives", rc);
    if (type == fab::FI_EP_MSG && !initiator) {
        // Receives are posted: accept, and wait for the connection.
        if ((rc = fab::accept(ep, nullptr, 0)))
            return fail("accept", rc);
        if ((rc = wait_event(eq, fab::FI_CONNECTED, timeout_s, evbuf, sizeof evbuf, why)))
            return rc;
    }
    if ((rc = oob.send("READY")) || (rc = oob.expect("READY", line, timeout_s))) {
        why = rc == -FI_EREMOTEIO ? line : std::string("peer not ready: ") + shunt::strerror(rc);
        return rc;
    }
    out = std::move(s);
    return 0;
}

// The vq provider, by its name and by its alias shm (what -p took before it
// was named after what it stands on).
const transport_ops vq_ops = {
    "vq", false,
    "lib/fabric vq provider: -e rdm|msg|dgram, --op msg|tagged|write|atomic (the endpoint API)", validate,
    open_fabric, max_msg, min_msg,
};
const transport_ops shm_ops = {
    "shm", false, "the vq provider under its alias shm", validate, open_fabric, max_msg, min_msg,
};

} // namespace

void register_fabric(std::vector<const transport_ops *> &v)
{
    for (const transport_ops *t : {&vq_ops, &shm_ops})
        if (fab::find_provider(t->name))
            v.push_back(t);
}

} // namespace shunt::perf
