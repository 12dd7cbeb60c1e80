// libFuzzer: the endpoint API against a careless caller. Two endpoints of
// the vq provider, each on a domain of its own, in one process (manual
// progress, FI_THREAD_DOMAIN): over the shm driver, or over the ethdev
// driver's net_ring pair (bit 0 of byte 0), their CQs bound with or without
// FI_SELECTIVE_COMPLETION (bit 1); RDM endpoints, MSG endpoints (bit 2)
// connected through a passive endpoint, where a program may also shut the
// connection down (fi_shutdown on either side, more than once), DGRAM
// endpoints (bit 3 without bit 2), which take no RMA or atomic call and
// drop a datagram that finds no receive posted, or scalable RDM endpoints
// (bit 4 alone of the three) with two transmit and two named receive
// contexts, every call on one of them and a destination that may name a
// receive context (fi_rx_addr). The rest is a
// program of calls on either endpoint: the message, tagged and RMA calls in
// their plain, vector, msg, data and inject forms, with lengths around every
// threshold (inject size, one slot, the rendezvous, the maximum and past
// it), vectors of any count (past the limit too), flags of any mix (unknown
// bits included), destinations that are the peer, the endpoint itself, an
// address removed or never inserted; receives with and without tags, with
// FI_MULTI_RECV and FI_PEEK (claiming the message, or dropping it), the
// FI_CLAIM calls that receive or drop a claimed message, and FI_CLAIM with a
// context that claimed nothing; FI_MORE among the flags; fi_cancel of any
// outstanding receive; RMA to
// the peer's region at any offset and length, with its key or another;
// atomics of any datatype, operation, element count and offset (their
// target bytes are not checked, only their completions).
//
// The caller's side of the contract holds: every buffer is valid for the
// length given, in a heap block of exactly that length (a provider that
// writes or reads past it hits ASan's redzone), and stays untouched until
// its operation completes, except an inject's, which is overwritten as soon
// as the call returns. The checks:
// - every call returns 0, -FI_EAGAIN or an error the API documents;
// - every accepted operation completes exactly once (a multi-receive buffer
//   until the completion that carries FI_MULTI_RECV), successfully or with
//   an error entry, and nothing completes that was not accepted; under
//   selective completion one posted without FI_COMPLETION has an entry only
//   when it fails (its counter tells the rest);
// - a received message is the one sent: length, tag, remote CQ data and
//   every byte (each send carries its number in its first bytes); a
//   truncated one is a prefix of it; a claimed message waits for its
//   FI_CLAIM call, and one dropped is never received;
// - RMA: a read returns, byte for byte, what the target region held or a
//   write put there; at the end of the input every byte a successful write
//   covered holds what it wrote, and every other byte its old value;
// - the counters bound with FI_SEND, FI_WRITE and FI_READ reach exactly the
//   operations of their kind the endpoint started (success and error
//   counts together; injects, which complete nothing, included), and the
//   FI_RECV counters of both sides at least the messages sent successfully
//   (more where a send failed after its message arrived: an RC connection
//   that broke before the sender saw the ACK); no message arrives twice.
// After fi_shutdown, calls may also be -FI_ENOTCONN; what was in flight
// must still complete, every message sent arrive, and the peer of the side
// that shut down see FI_SHUTDOWN. On DGRAM endpoints a datagram may be
// lost (no receive posted): each one received is still checked, byte for
// byte and at most once, and every send and receive completes; an RMA or
// atomic call must be refused.
// At the end of an input both endpoints post receives for whatever is left
// and cancel their own; every accepted operation must then complete within
// a bounded time. Endpoints, CQs and AVs are made per input; fabric,
// domains and regions live for the run.
#include <array>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <vector>

#include "env/errors.h"
#include "fabric/api.h"
#include "fabric/atomic.h"
#include "fabric/cntr.h"

namespace {

using namespace shunt;
using namespace shunt::fabric;

[[noreturn]] void fail(const char *what, long a = 0, long b = 0)
{
    std::fprintf(stderr, "fuzz_fi_ep: %s (%ld, %ld)\n", what, a, b);
    std::abort();
}
void check(bool ok, const char *what, long a = 0, long b = 0)
{
    if (!ok)
        fail(what, a, b);
}

/** With SHUNT_FUZZ_TRACE set: every call and completion to stderr. */
[[gnu::format(printf, 1, 2)]] void trace(const char *fmt, ...)
{
    static const bool on = std::getenv("SHUNT_FUZZ_TRACE") != nullptr;
    if (!on)
        return;
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/** Bytes of the input, read as needed; zeros past its end. */
struct reader {
    const std::uint8_t *p;
    std::size_t n;
    bool done() const { return n == 0; }
    std::uint8_t u8()
    {
        if (!n)
            return 0;
        n--;
        return *p++;
    }
    std::uint32_t u32()
    {
        std::uint32_t v = 0;
        for (int i = 0; i < 4; i++)
            v |= std::uint32_t(u8()) << (8 * i);
        return v;
    }
};

constexpr std::size_t region_len = 1 << 16;
constexpr std::size_t max_ops = 96;

/** Byte @p i of message @p id; its first four bytes are the id itself. */
std::uint8_t msg_byte(std::uint32_t id, std::size_t i)
{
    if (i < 4)
        return std::uint8_t(id >> (8 * i));
    return std::uint8_t(id * 29 + i * 7 + (i >> 9));
}
/** What the target regions hold at offset @p p before any write (0) and
 *  what every write puts there (1): a read can tell each byte's source. */
std::uint8_t rma_byte(int gen, std::size_t p) { return gen ? std::uint8_t(p * 13 + 5) : std::uint8_t(p * 7 + 3) | 1; }

enum kind : std::uint8_t { k_send, k_recv, k_multi, k_peek, k_write, k_read, k_atomic };

constexpr std::size_t arena_len = 256; ///< each side's atomics target

/** Bytes of one element of @p dt; 32 (the largest) for a value past the list. */
std::size_t dt_size(int dt)
{
    static const std::size_t size[] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 16, 32, 16, 16};
    return dt >= 0 && dt < FI_DATATYPE_LAST ? size[dt] : 32;
}

/** One operation handed to the provider. Starts with the FI_CONTEXT area. */
struct op {
    void *prov[4] = {};
    kind k = k_send;
    int side = 0;
    bool accepted = false, done = false, tagged = false, has_data = false, sink = false;
    bool fetch = false; ///< an atomic that returns the old value (counted as a read)
    /** Posted without FI_COMPLETION under FI_SELECTIVE_COMPLETION: no entry
     *  when it succeeds (only its counter says it is done), one if it fails. */
    bool silent = false;
    /** A peek asked FI_CLAIM (claim) or FI_DISCARD (discard); claimed: its
     *  peek found a message, which now waits for this op's FI_CLAIM call. */
    bool claim = false, discard = false, claimed = false;
    bool dropped = false; ///< its claimed message was dropped (counted then)
    std::uint32_t id = 0;
    std::uint64_t tag = 0, data = 0;
    std::size_t len = 0;           ///< sum of the vector
    std::vector<std::unique_ptr<std::uint8_t[]>> bufs;
    std::vector<std::size_t> lens;
    std::size_t roff = 0;          ///< RMA: offset in the peer's region
    bool rma_in_range = false;
    fid_ep *ep = nullptr; ///< the endpoint or context it was posted on (FI_CLAIM, fi_cancel)
    fi_addr_t dest = FI_ADDR_UNSPEC; ///< transmits: the destination (for the trace)
    /** RMA: the target may refuse it (a key not the region's, or bytes
     *  past the region's end), which on MSG takes the connection down. */
    bool refusable = true;
};

struct side_res {
    fid_fabric *fabric = nullptr;
    fid_domain *domain = nullptr;
    fid_mr *mr = nullptr;
    std::uint8_t *region = nullptr;
    std::vector<bool> written;
    fid_mr *arena_mr = nullptr;
    std::uint8_t *arena = nullptr; ///< what atomics change: no byte of it is checked
    bool touched = false; ///< a write to the region was accepted in this input
    /** Inputs (this one and the next) in which an inject_write, which
     *  completes nothing, may still land. */
    int late = 0;
    info *fi = nullptr;
    /** FI_EP_MSG: the info, and (side 1) the passive endpoint that takes
     *  side 0's connection requests and the EQ it reports them on. */
    info *fi_msg = nullptr;
    info *fi_dgram = nullptr; ///< FI_EP_DGRAM
    info *fi_sep = nullptr;   ///< scalable FI_EP_RDM: two transmit and two named receive contexts
    /** Per endpoint type (ep_rdm, ep_msg, ep_dgram, ep_scalable: a domain
     *  serves one type): the domain and the regions' registrations;
     *  domain, mr and arena_mr name the ones of this input's type. */
    fid_domain *domains[4] = {};
    fid_mr *mrs[4] = {}, *arena_mrs[4] = {};
    fid_pep *pep = nullptr;
    fid_eq *pep_eq = nullptr;
    std::uint8_t pep_addr[64] = {};
    // Per input.
    fid_eq *eq = nullptr; ///< MSG: the endpoint's connection events
    fid_ep *ep = nullptr;  ///< the endpoint (scalable: the scalable endpoint)
    /** Where transmits and receives are posted: the endpoint itself, or a
     *  scalable endpoint's contexts. */
    fid_ep *tx[2] = {}, *rx[2] = {};
    fid_cq *cq = nullptr;
    fid_av *av = nullptr;
    /** Counters bound with FI_SEND, FI_WRITE and FI_READ: each counts every
     *  message, write or base atomic, read or fetching atomic the endpoint
     *  started, once, "completed successfully or in error" (fi_endpoint(3));
     *  and one bound with FI_RECV, which counts every message received. */
    fid_cntr *cnt[4] = {};
    fi_addr_t peer = FI_ADDR_NOTAVAIL, self = FI_ADDR_NOTAVAIL, removed = FI_ADDR_NOTAVAIL;
    std::uint8_t addr[64] = {};
};

enum ep_kind : int { ep_rdm, ep_msg, ep_dgram, ep_scalable };

/** What getinfo said of an endpoint type (side 0's). */
struct limits {
    std::size_t inject = 0, iov_limit = 0, rma_iov_limit = 0, max_msg = 0;
};

struct rig {
    side_res s[2];
    std::vector<std::uint8_t> initial = std::vector<std::uint8_t>(region_len); ///< rma_byte(0, *)
    limits lim[4];

    /** Each side a domain of the vq device @p dev[i], on a fabric of its own. */
    explicit rig(const char *const dev[2])
    {
        for (int i = 0; i < 2; i++) {
            side_res &r = s[i];
            info *h = allocinfo();
            h->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_MULTI_RECV | FI_DIRECTED_RECV;
            h->mode = FI_CONTEXT;
            h->ep_attr->type = FI_EP_RDM;
            h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
            h->domain_attr->threading = FI_THREAD_DOMAIN;
            h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
            h->fabric_attr->prov_name = ::strdup("shm");
            h->domain_attr->name = ::strdup(dev[i]);
            check(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &r.fi) == 0, "getinfo");
            h->ep_attr->type = FI_EP_MSG;
            check(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &r.fi_msg) == 0, "getinfo FI_EP_MSG");
            h->ep_attr->type = FI_EP_DGRAM;
            h->caps = FI_MSG | FI_TAGGED | FI_MULTI_RECV | FI_DIRECTED_RECV; // no RMA on DGRAM
            check(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &r.fi_dgram) == 0, "getinfo FI_EP_DGRAM");
            h->ep_attr->type = FI_EP_RDM;
            h->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_MULTI_RECV | FI_DIRECTED_RECV | FI_NAMED_RX_CTX;
            h->ep_attr->tx_ctx_cnt = 2;
            h->ep_attr->rx_ctx_cnt = 2;
            check(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &r.fi_sep) == 0, "getinfo scalable FI_EP_RDM");
            freeinfo(h);
            info *const by_kind[4] = {r.fi, r.fi_msg, r.fi_dgram, r.fi_sep};
            for (int t = 0; i == 0 && t < 4; t++)
                lim[t] = {by_kind[t]->tx_attr->inject_size, by_kind[t]->tx_attr->iov_limit,
                          by_kind[t]->tx_attr->rma_iov_limit, by_kind[t]->ep_attr->max_msg_size};
            check(fabric_open(r.fi->fabric_attr, &r.fabric, nullptr) == 0, "fabric");
            r.region = new std::uint8_t[region_len];
            r.arena = new std::uint8_t[arena_len]();
            for (int t = 0; t < 4; t++) {
                check(domain_open(r.fabric, by_kind[t], &r.domains[t], nullptr) == 0, "domain");
                check(mr_reg(r.domains[t], r.region, region_len, FI_SEND | FI_RECV | FI_READ | FI_WRITE |
                             FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &r.mrs[t], nullptr) == 0, "mr_reg");
                check(mr_reg(r.domains[t], r.arena, arena_len, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0,
                             &r.arena_mrs[t], nullptr) == 0, "mr_reg arena");
            }
            r.written.assign(region_len, false);
            for (std::size_t p = 0; p < region_len; p++)
                initial[p] = rma_byte(0, p);
            std::memcpy(r.region, initial.data(), region_len);
        }
        side_res &l = s[1];
        eq_attr ea;
        check(eq_open(l.fabric, &ea, &l.pep_eq, nullptr) == 0, "eq_open (passive)");
        check(passive_ep(l.fabric, l.fi_msg, &l.pep, nullptr) == 0, "passive_ep");
        check(pep_bind(l.pep, &l.pep_eq->fid, 0) == 0, "pep_bind");
        check(listen(l.pep) == 0, "listen");
        std::size_t len = sizeof l.pep_addr;
        check(getname(&l.pep->fid, l.pep_addr, &len) == 0, "getname (passive)");
    }

    /** Read one event of @p eq within a bounded time: @return its type. */
    static std::uint32_t next_event(fid_eq *eq, fid_eq *also, std::uint8_t (&buf)[256], const char *what)
    {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        for (;;) {
            std::uint32_t ev = 0;
            ssize_t rc = eq_read(eq, &ev, buf, sizeof buf, 0);
            if (rc > 0)
                return ev;
            check(rc == -FI_EAGAIN, what, rc);
            if (also) { // the other side's progress (manual): a look at its EQ
                std::uint32_t other = 0;
                std::uint8_t b2[256];
                (void)eq_read(also, &other, b2, sizeof b2, FI_PEEK);
            }
            check(std::chrono::steady_clock::now() < until, what);
        }
    }
    /** MSG: side 0 connects to side 1's passive endpoint; side 1 accepts
     *  with an endpoint opened from the request. */
    void connect_msg(bool selective)
    {
        side_res &a = s[0], &b = s[1];
        check(connect(a.ep, b.pep_addr, nullptr, 0) == 0, "connect");
        std::uint8_t buf[256];
        check(next_event(b.pep_eq, a.eq, buf, "FI_CONNREQ") == FI_CONNREQ, "FI_CONNREQ");
        info *req = reinterpret_cast<eq_cm_entry *>(buf)->info;
        check(endpoint(b.domain, req, &b.ep, nullptr) == 0, "endpoint (accepting)");
        freeinfo(req);
        bind_common(b, selective);
        check(accept(b.ep, nullptr, 0) == 0, "accept");
        check(next_event(b.eq, nullptr, buf, "FI_CONNECTED (accepting)") == FI_CONNECTED, "FI_CONNECTED b");
        check(next_event(a.eq, nullptr, buf, "FI_CONNECTED (connecting)") == FI_CONNECTED, "FI_CONNECTED a");
    }
    /** The CQ, the counters and (MSG) the EQ; the endpoint enabled. A
     *  scalable endpoint's contexts are opened here, each bound to the
     *  side's one CQ and its counters of the context's direction. */
    void bind_common(side_res &r, bool selective)
    {
        const std::uint64_t sel = selective ? FI_SELECTIVE_COMPLETION : 0;
        const std::uint64_t what[4] = {FI_SEND, FI_WRITE, FI_READ, FI_RECV};
        for (int c = 0; c < 4; c++) {
            cntr_attr ka;
            check(cntr_open(r.domain, &ka, &r.cnt[c], nullptr) == 0, "cntr_open");
        }
        if (r.ep->fid.fclass == FI_CLASS_SEP) {
            check(enable(r.ep) == 0, "enable (scalable)");
            for (int i = 0; i < 2; i++) {
                check(tx_context(r.ep, i, nullptr, &r.tx[i], nullptr) == 0, "tx_context");
                check(rx_context(r.ep, i, nullptr, &r.rx[i], nullptr) == 0, "rx_context");
                check(ep_bind(r.tx[i], &r.cq->fid, FI_TRANSMIT | sel) == 0, "bind cq (tx context)");
                check(ep_bind(r.rx[i], &r.cq->fid, FI_RECV | sel) == 0, "bind cq (rx context)");
                for (int c = 0; c < 4; c++)
                    check(ep_bind(c < 3 ? r.tx[i] : r.rx[i], &r.cnt[c]->fid, what[c]) == 0, "bind counter");
                check(enable(r.tx[i]) == 0, "enable tx context");
                check(enable(r.rx[i]) == 0, "enable rx context");
            }
            return;
        }
        check(ep_bind(r.ep, &r.cq->fid, FI_TRANSMIT | FI_RECV | sel) == 0, "bind cq");
        if (r.eq)
            check(ep_bind(r.ep, &r.eq->fid, 0) == 0, "bind eq");
        for (int c = 0; c < 4; c++)
            check(ep_bind(r.ep, &r.cnt[c]->fid, what[c]) == 0, "bind counter");
        check(enable(r.ep) == 0, "enable");
        r.tx[0] = r.tx[1] = r.rx[0] = r.rx[1] = r.ep;
    }

    /** @p selective: the CQ is bound with FI_SELECTIVE_COMPLETION; @p kind
     *  the endpoint type (ep_msg: connected, no AV: every address is the
     *  peer). */
    void open_endpoints(bool selective, ep_kind kind)
    {
        const bool msg = kind == ep_msg;
        for (side_res &r : s) {
            r.domain = r.domains[kind];
            r.mr = r.mrs[kind];
            r.arena_mr = r.arena_mrs[kind];
            cq_attr ca;
            ca.format = FI_CQ_FORMAT_TAGGED;
            ca.size = 1024;
            check(cq_open(r.domain, &ca, &r.cq, nullptr) == 0, "cq_open");
            if (msg) {
                eq_attr ea;
                check(eq_open(r.fabric, &ea, &r.eq, nullptr) == 0, "eq_open");
                continue;
            }
            av_attr aa;
            aa.rx_ctx_bits = kind == ep_scalable ? 1 : 0;
            check(av_open(r.domain, &aa, &r.av, nullptr) == 0, "av_open");
            if (kind == ep_scalable) {
                check(scalable_ep(r.domain, r.fi_sep, &r.ep, nullptr) == 0, "scalable_ep");
                check(scalable_ep_bind(r.ep, &r.av->fid, 0) == 0, "bind av (scalable)");
            } else {
                check(endpoint(r.domain, kind == ep_dgram ? r.fi_dgram : r.fi, &r.ep, nullptr) == 0, "endpoint");
                check(ep_bind(r.ep, &r.av->fid, 0) == 0, "bind av");
            }
            bind_common(r, selective);
            std::size_t len = sizeof r.addr;
            check(getname(&r.ep->fid, r.addr, &len) == 0, "getname");
        }
        if (msg) {
            int rc = endpoint(s[0].domain, s[0].fi_msg, &s[0].ep, nullptr);
            check(rc == 0, "endpoint (connecting)", rc);
            bind_common(s[0], selective);
            connect_msg(selective);
            for (side_res &r : s)
                r.peer = r.self = r.removed = FI_ADDR_UNSPEC; // ignored
            return;
        }
        for (int i = 0; i < 2; i++) {
            side_res &r = s[i];
            // A third address, inserted and removed: its fi_addr names nothing.
            check(av_insert(r.av, s[1 - i].addr, 1, &r.removed, 0, nullptr) == 1, "av_insert");
            check(av_remove(r.av, &r.removed, 1, 0) == 0, "av_remove");
            check(av_insert(r.av, s[1 - i].addr, 1, &r.peer, 0, nullptr) == 1, "av_insert peer");
            check(av_insert(r.av, r.addr, 1, &r.self, 0, nullptr) == 1, "av_insert self");
        }
    }
    void close_endpoints()
    {
        for (side_res &r : s) {
            if (r.ep->fid.fclass == FI_CLASS_SEP)
                for (int i = 0; i < 2; i++) {
                    check(fabric::close(&r.tx[i]->fid) == 0, "close tx context");
                    check(fabric::close(&r.rx[i]->fid) == 0, "close rx context");
                }
            for (fid_ep *&x : r.tx)
                x = nullptr;
            for (fid_ep *&x : r.rx)
                x = nullptr;
            check(fabric::close(&r.ep->fid) == 0, "close ep");
            if (r.av)
                check(fabric::close(&r.av->fid) == 0, "close av");
            if (r.eq)
                check(fabric::close(&r.eq->fid) == 0, "close eq");
            check(fabric::close(&r.cq->fid) == 0, "close cq");
            for (fid_cntr *&c : r.cnt) {
                check(fabric::close(&c->fid) == 0, "close counter");
                c = nullptr;
            }
            r.ep = nullptr;
            r.av = nullptr;
            r.eq = nullptr;
            r.cq = nullptr;
        }
    }
};

/** The rig of device @p which: 0 shm (two domains of the shm driver), 1
 *  ethdev (the two ports of a net_ring pair). Live for the whole run. */
rig &the_rig(unsigned which)
{
    static bool once = [] {
        setenv("SHUNT_LOG_LEVEL", "error", 0);
        setenv("SHUNT_ETHDEV_RING_PAIRS", "1", 0);
        // A connection nobody answers gives up soon: an input waits for it.
        // One that times out although its peer is there (the peer's side
        // progresses only when the program polls it) fails its operations
        // with error completions, which is allowed.
        setenv("SHUNT_VQ_CONNECT_TIMEOUT_MS", "100", 0);
        return true;
    }();
    (void)once;
    if (which == 1) {
        static const char *const ports[2] = {"net_ring_pair0a", "net_ring_pair0b"};
        static rig *e = new rig(ports);
        return *e;
    }
    static const char *const shm[2] = {"shm0", "shm0"};
    static rig *m = new rig(shm);
    return *m;
}

/** The errors a data call of an enabled RDM endpoint may return besides 0
 *  and -FI_EAGAIN, as fabric_msg(3), fabric_rma(3) and fabric_atomic(3)
 *  list them. */
bool documented(ssize_t rc)
{
    switch (-rc) {
    case FI_EINVAL:
    case FI_EMSGSIZE:
    case FI_EOPNOTSUPP:
    case FI_EBADFLAGS:
    case FI_EHOSTUNREACH: // a peer whose connection timed out (fabric.md, RDM)
    case FI_ENOMEM:       // no memory for a new peer's record
        return true;
    default:
        return false;
    }
}

struct program {
    rig &r;
    reader in;
    bool selective = false; ///< the CQs are bound with FI_SELECTIVE_COMPLETION
    ep_kind type = ep_rdm;
    const limits &L = r.lim[type];
    bool msg_ep = type == ep_msg;     ///< FI_EP_MSG endpoints, connected to each other
    bool dgram = type == ep_dgram;    ///< FI_EP_DGRAM: a datagram may be lost
    /** Scalable RDM endpoints: each call goes to one of two transmit or
     *  receive contexts, and a destination may name a receive context. */
    bool scalable = type == ep_scalable;
    /** MSG: a side shut the connection down (fi_shutdown): from then on a
     *  call may be -FI_ENOTCONN, and what was in flight may be lost. */
    bool shut = false;
    /** MSG: an operation failed, or an RMA or atomic was started that the
     *  target may refuse, which may take the connection with it (a refused
     *  RDMA write puts the RC QP in error, and the provider may see that
     *  before the harness reads the error entry): calls may be
     *  -FI_ENOTCONN from then on too. */
    bool broken = false;
    int shut_by = -1;
    bool shut_ok[2] = {}; ///< fi_shutdown returned 0 on this side
    std::vector<std::unique_ptr<op>> ops;
    std::uint32_t next_id = 1;
    std::map<std::uint32_t, op *> sends; ///< by id: what the receiver checks against
    std::set<std::uint32_t> received;    ///< the ids of the messages received (at least 4 bytes)
    std::uint64_t counted[2][3] = {};    ///< per side: what each counter of side_res::cnt must reach
    long null_send_errs[2] = {}, ctx_send_errs[2] = {}; ///< send error entries without and with a context
    long discarded = 0; ///< messages dropped by FI_DISCARD: sent, never received

    std::size_t pick_len()
    {
        const std::size_t inj = L.inject;
        const std::size_t table[] = {0, 1, 3, 4, 8, 33, 48, 64, 65, inj - 1, inj, inj + 1, 984, 1000, 4096, 6143,
                                     6144, 8192, 16384, 65536, 70000, L.max_msg + 1};
        std::uint8_t b = in.u8();
        if (b & 0x80)
            return (b & 0x7f) * 37u;
        return table[b % (sizeof table / sizeof table[0])];
    }
    /** Two bytes: the tag's top byte and two bits above its low word, where
     *  a send's number goes. */
    std::uint64_t pick_tag(std::uint32_t low)
    {
        std::uint64_t hi = in.u8();
        std::uint64_t mid = in.u8() & 3;
        return hi << 56 | mid << 32 | low;
    }
    fi_addr_t pick_addr(const side_res &sr)
    {
        switch (in.u8() % 8) {
        case 0:
            return sr.self;
        case 1:
            return sr.removed;
        case 2:
            return 57; // never inserted
        case 3:
            return FI_ADDR_UNSPEC;
        default:
            return sr.peer;
        }
    }
    /** The transmit side of @p side: the endpoint, or (scalable) one of
     *  its transmit contexts. */
    fid_ep *tx_of(int side) { return scalable ? r.s[side].tx[in.u8() & 1] : r.s[side].ep; }
    fid_ep *rx_of(int side) { return scalable ? r.s[side].rx[in.u8() & 1] : r.s[side].ep; }
    /** A destination: pick_addr, naming (scalable) receive context 0 or 1
     *  of an address that has them (fi_rx_addr), or none (context 0). */
    fi_addr_t pick_dest(const side_res &sr)
    {
        fi_addr_t a = pick_addr(sr);
        if (!scalable || (a != sr.peer && a != sr.self))
            return a;
        std::uint8_t b = in.u8();
        return b & 2 ? rx_addr(a, b & 1, 1) : a;
    }
    std::uint64_t pick_flags()
    {
        static const std::uint64_t bits[] = {FI_COMPLETION, FI_INJECT, FI_REMOTE_CQ_DATA, FI_TRANSMIT_COMPLETE,
                                             FI_DELIVERY_COMPLETE, FI_INJECT_COMPLETE, FI_FENCE};
        std::uint8_t b = in.u8();
        std::uint64_t f = 0;
        for (int i = 0; i < 7; i++)
            if (b & (1u << i))
                f |= bits[i];
        if (b & 0x80) // FI_MORE (a hint), or a bit no flag has
            f |= in.u8() & 1 ? FI_MORE : 1ULL << 40;
        return f;
    }

    op *new_op(kind k, int side)
    {
        ops.push_back(std::make_unique<op>());
        op *o = ops.back().get();
        o->k = k;
        o->side = side;
        return o;
    }
    /** Cut @p total bytes into @p n buffers of their own (n >= 1 buffers made
     *  even for n == 0, so that the call can be given a valid pointer). */
    void make_bufs(op *o, std::size_t total, std::size_t n)
    {
        std::size_t k = n ? n : 1;
        for (std::size_t i = 0; i < k; i++) {
            std::size_t l = i + 1 == k ? total - total / k * (k - 1) : total / k;
            if (n == 0)
                l = total;
            o->bufs.push_back(std::unique_ptr<std::uint8_t[]>(new std::uint8_t[l ? l : 1]));
            o->lens.push_back(l);
        }
        o->len = total;
    }
    void fill_msg(op *o)
    {
        std::size_t at = 0;
        for (std::size_t i = 0; i < o->bufs.size(); i++)
            for (std::size_t j = 0; j < o->lens[i]; j++)
                o->bufs[i][j] = msg_byte(o->id, at++);
    }
    void scribble(op *o)
    {
        for (std::size_t i = 0; i < o->bufs.size(); i++)
            std::memset(o->bufs[i].get(), 0xee, o->lens[i]);
    }
    std::vector<iovec> iovs(op *o, std::size_t n)
    {
        std::vector<iovec> v;
        for (std::size_t i = 0; i < n && i < o->bufs.size(); i++)
            v.push_back(iovec{o->bufs[i].get(), o->lens[i]});
        return v;
    }

    /** A msg or msg_tagged naming @p n entries of @p v, @p addr and @p o. */
    template <class M> static M message(const std::vector<iovec> &v, std::size_t n, fi_addr_t addr, op *o)
    {
        M m;
        m.msg_iov = v.data();
        m.iov_count = n;
        m.addr = addr;
        m.context = o;
        return m;
    }

    /** The op's flags are @p flags (the plain calls: the endpoint's default,
     *  which has no FI_COMPLETION): is it silent when it succeeds? */
    bool silent_with(std::uint64_t flags) const { return selective && !(flags & FI_COMPLETION); }
    /** FI_COMPLETION where the harness needs to see the entry (a
     *  multi-receive's release, a peek's answer, a drain receive). */
    std::uint64_t seen() const { return selective ? FI_COMPLETION : 0; }

    void accept(op *o, ssize_t rc, bool inject)
    {
        trace("side %d kind %d id %u len %zu nbufs %zu tagged %d tag %#llx on %p to %#llx -> %zd\n", o->side,
              int(o->k), o->id, o->len, o->bufs.size(), int(o->tagged), static_cast<unsigned long long>(o->tag),
              static_cast<void *>(o->ep), static_cast<unsigned long long>(o->dest), rc);
        check(rc == 0 || rc == -FI_EAGAIN || documented(rc) || ((shut || broken) && rc == -FI_ENOTCONN),
              "undocumented return", rc, o->k);
        if (rc == 0) {
            check(!dgram || o->k < k_write, "an RMA or atomic call accepted on a DGRAM endpoint", o->k);
            o->accepted = true;
            if (o->k == k_send)
                sends[o->id] = o;
            if (o->k == k_send)
                counted[o->side][0]++;
            else if (o->k == k_write || (o->k == k_atomic && !o->fetch))
                counted[o->side][1]++;
            else if (o->k == k_read || o->k == k_atomic)
                counted[o->side][2]++;
            if (o->k == k_atomic || ((o->k == k_write || o->k == k_read) && o->refusable))
                broken = broken || msg_ep;
            if (inject) // the buffer is the caller's again
                scribble(o);
        }
    }

    void do_send(int side)
    {
        side_res &sr = r.s[side];
        op *o = new_op(k_send, side);
        o->id = next_id++;
        std::uint8_t form = in.u8();
        o->tagged = form & 1;
        std::size_t len = pick_len();
        if (len > 70000 && (len != L.max_msg + 1 || len > (1u << 22)))
            len = 70000; // past the maximum only where that is no huge allocation
        std::size_t niov = 1;
        unsigned f = (form >> 1) % 5; // 0 plain, 1 data, 2 inject, 3 injectdata, 4 vector/msg
        if (f == 4)
            niov = in.u8() % (L.iov_limit + 2);
        make_bufs(o, len, niov);
        fill_msg(o);
        o->tag = pick_tag(o->id);
        o->data = in.u32();
        fi_addr_t dest = o->dest = pick_dest(sr);
        fid_ep *ep = o->ep = tx_of(side);
        ssize_t rc;
        bool inject = false;
        std::uint64_t used = 0; // the op's flags where the call takes them
        void *buf = o->bufs[0].get();
        switch (f) {
        case 0:
            rc = o->tagged ? tsend(ep, buf, len, nullptr, dest, o->tag, o)
                           : fabric::send(ep, buf, len, nullptr, dest, o);
            break;
        case 1:
            o->has_data = true;
            rc = o->tagged ? tsenddata(ep, buf, len, nullptr, o->data, dest, o->tag, o)
                           : senddata(ep, buf, len, nullptr, o->data, dest, o);
            break;
        case 2:
            inject = true;
            rc = o->tagged ? tinject(ep, buf, len, dest, o->tag) : fabric::inject(ep, buf, len, dest);
            break;
        case 3:
            inject = true;
            o->has_data = true;
            rc = o->tagged ? tinjectdata(ep, buf, len, o->data, dest, o->tag)
                           : injectdata(ep, buf, len, o->data, dest);
            break;
        default: {
            std::vector<iovec> v = iovs(o, niov);
            std::uint64_t flags = pick_flags();
            o->has_data = flags & FI_REMOTE_CQ_DATA;
            inject = flags & FI_INJECT;
            if (in.u8() & 1) {
                rc = o->tagged ? tsendv(ep, v.data(), nullptr, niov, dest, o->tag, o)
                               : sendv(ep, v.data(), nullptr, niov, dest, o);
                inject = false;
                o->has_data = false;
            } else if (o->tagged) {
                msg_tagged m = message<msg_tagged>(v, niov, dest, o);
                m.tag = o->tag;
                m.data = o->data;
                used = flags;
                rc = tsendmsg(ep, &m, flags);
            } else {
                msg m = message<msg>(v, niov, dest, o);
                m.data = o->data;
                used = flags;
                rc = sendmsg(ep, &m, flags);
            }
        }
        }
        o->silent = f != 2 && f != 3 && silent_with(used);
        if (niov == 0)
            o->len = 0;
        // An inject completes nothing; an injecting sendmsg completes like any send.
        bool no_completion = inject && f != 4;
        accept(o, rc, inject);
        if (rc == 0 && no_completion)
            o->done = true;
    }

    void do_recv(int side)
    {
        side_res &sr = r.s[side];
        std::uint8_t form = in.u8();
        unsigned f = form % 6; // 0 recv, 1 trecv, 2 recvv, 3 multi, 4 peek, 5 trecvmsg
        kind k = f == 3 ? k_multi : f == 4 ? k_peek : k_recv;
        op *o = new_op(k, side);
        o->tagged = f == 1 || f == 4 || f == 5;
        std::size_t len = pick_len();
        if (len > 70000)
            len = 70000;
        if (k == k_multi)
            len = 1024 + in.u8() * 512u;
        std::size_t niov = f == 2 || f == 5 ? in.u8() % (L.iov_limit + 2) : 1;
        make_bufs(o, len, niov);
        std::memset(o->bufs[0].get(), 0x5a, o->lens[0]);
        fi_addr_t src = in.u8() & 3 ? FI_ADDR_UNSPEC : pick_addr(sr);
        std::uint64_t tag = pick_tag(0);
        tag |= in.u8();
        std::uint64_t ignore = in.u8() & 1 ? ~0ull : (in.u8() & 1 ? 0xffffffffull : 0);
        o->tag = tag;
        fid_ep *ep = o->ep = rx_of(side);
        ssize_t rc;
        std::uint64_t used = 0; // the op's flags where the call takes them
        std::vector<iovec> v = iovs(o, niov);
        switch (f) {
        case 0:
            rc = fabric::recv(ep, o->bufs[0].get(), len, nullptr, src, o);
            break;
        case 1:
            rc = trecv(ep, o->bufs[0].get(), len, nullptr, src, tag, ignore, o);
            break;
        case 2:
            rc = recvv(ep, v.data(), nullptr, niov, src, o);
            break;
        case 3: {
            msg m = message<msg>(v, 1, src, o);
            used = FI_MULTI_RECV | (in.u8() & 1 ? FI_COMPLETION : 0) | seen();
            rc = recvmsg(ep, &m, used);
            break;
        }
        default: {
            msg_tagged m = message<msg_tagged>(v, f == 4 ? 1 : niov, src, o);
            m.tag = tag;
            m.ignore = ignore;
            if (f == 4) {
                // A peek that may claim the message or drop it.
                unsigned how = form / 6 % 3;
                o->claim = how == 1;
                o->discard = how == 2;
                used = FI_PEEK | (o->claim ? FI_CLAIM : 0) | (o->discard ? FI_DISCARD : 0) | seen();
            } else {
                used = pick_flags() & ~(FI_INJECT | FI_REMOTE_CQ_DATA);
            }
            rc = trecvmsg(ep, &m, used);
        }
        }
        if (niov == 0)
            o->len = 0;
        o->silent = silent_with(used);
        accept(o, rc, false);
    }

    void do_rma(int side)
    {
        side_res &sr = r.s[side], &peer = r.s[1 - side];
        std::uint8_t form = in.u8();
        if (form & 0x80)
            return do_atomic(side, form);
        bool write = form & 1;
        op *o = new_op(write ? k_write : k_read, side);
        std::size_t len = pick_len();
        if (len > 70000)
            len = 70000;
        std::size_t off = in.u8();
        off = (off << 8 | in.u8()) % (region_len + 64);
        o->roff = off;
        o->rma_in_range = off <= region_len && len <= region_len - off;
        std::uint64_t key = mr_key(peer.mr);
        switch (in.u8() % 8) {
        case 0:
            key ^= 1;
            break;
        case 1:
            key = 0;
            break;
        case 2:
            key = mr_key(sr.mr); // our own region's key, at the peer
            break;
        default:
            break;
        }
        const bool right_key = key == mr_key(peer.mr);
        if (!right_key)
            o->rma_in_range = false;
        o->refusable = !o->rma_in_range; // MSG: every address is the peer
        std::uint64_t raddr = reinterpret_cast<std::uintptr_t>(peer.region) + off;
        fi_addr_t dest = o->dest = pick_dest(sr);
        if (dest != sr.peer && !(scalable && (dest & ~(1ULL << 63)) == sr.peer))
            o->rma_in_range = false; // another target's memory: not checked
        fid_ep *ep = o->ep = tx_of(side);
        std::size_t niov = (form >> 1) % 3 == 2 ? in.u8() % (L.iov_limit + 2) : 1;
        make_bufs(o, len, niov);
        if (write) {
            std::size_t at = 0;
            for (std::size_t i = 0; i < o->bufs.size(); i++)
                for (std::size_t j = 0; j < o->lens[i]; j++, at++)
                    o->bufs[i][j] = rma_byte(1, off + at);
        }
        std::vector<iovec> v = iovs(o, niov);
        ssize_t rc;
        bool inject = false;
        o->silent = silent_with(0);
        switch ((form >> 1) % 3) {
        case 0:
            if (write && (form & 8)) {
                inject = true;
                rc = inject_write(ep, o->bufs[0].get(), len, dest, raddr, key);
            } else {
                rc = write ? fabric::write(ep, o->bufs[0].get(), len, nullptr, dest, raddr, key, o)
                           : fabric::read(ep, o->bufs[0].get(), len, nullptr, dest, raddr, key, o);
            }
            break;
        case 1:
            o->has_data = write;
            o->data = in.u32();
            rc = write ? writedata(ep, o->bufs[0].get(), len, nullptr, o->data, dest, raddr, key, o)
                       : fabric::read(ep, o->bufs[0].get(), len, nullptr, dest, raddr, key, o);
            break;
        default: {
            // No remote segment, one, or the range in two (past the limit
            // where it is 1).
            rma_iov ri[2] = {{raddr, len, key}, {raddr + len / 2, len - len / 2, key}};
            msg_rma m;
            m.msg_iov = v.data();
            m.iov_count = niov;
            m.addr = dest;
            m.rma_iov = ri;
            m.rma_iov_count = std::array<std::size_t, 4>{0, 1, 1, 2}[in.u8() % 4];
            if (m.rma_iov_count == 2)
                ri[0].len = len / 2;
            if (m.rma_iov_count > L.rma_iov_limit)
                o->rma_in_range = false; // refused
            m.context = o;
            m.data = in.u32();
            std::uint64_t flags = pick_flags();
            o->silent = silent_with(flags);
            o->has_data = write && (flags & FI_REMOTE_CQ_DATA);
            inject = write && (flags & FI_INJECT);
            if (m.rma_iov_count == 0 || niov == 0)
                o->rma_in_range = false;
            if (niov == 0)
                o->len = 0;
            rc = write ? writemsg(ep, &m, flags) : readmsg(ep, &m, flags);
            if (inject && rc == 0) {
                accept(o, rc, true);
                peer.touched = true;
                return;
            }
        }
        }
        accept(o, rc, inject);
        if (rc == 0 && write)
            peer.touched = true;
        if (rc == 0 && inject) {
            o->done = true; // inject_write completes nothing (and may land after the input: not marked)
            peer.late = 2;
        }
    }

    /** An atomic on the peer's arena: any datatype and operation (one past
     *  each list too), 0 to 5 elements, any offset (past the end too), the
     *  right key or another. Only its completion is checked (and ASan: the
     *  operand, compare and result buffers are exactly count elements). */
    void do_atomic(int side, std::uint8_t form)
    {
        side_res &sr = r.s[side], &peer = r.s[1 - side];
        op *o = new_op(k_atomic, side);
        o->fetch = (form >> 1) % 4 >= 2;
        const int dt = in.u8() % (FI_DATATYPE_LAST + 1);
        const int aop = in.u8() % (FI_ATOMIC_OP_LAST + 1);
        const std::size_t count = in.u8() % 6;
        const std::size_t off = in.u8() % (arena_len + 16);
        std::uint64_t key = mr_key(peer.arena_mr);
        if (in.u8() % 4 == 0)
            key = mr_key(peer.mr); // the RMA region's key, at the arena's address
        const std::uint64_t raddr = reinterpret_cast<std::uintptr_t>(peer.arena) + off;
        const fi_addr_t dest = o->dest = pick_dest(sr);
        fid_ep *ep = o->ep = tx_of(side);
        const std::size_t bytes = count * dt_size(dt);
        make_bufs(o, bytes, 1);                     // the operand
        std::unique_ptr<std::uint8_t[]> cmp(new std::uint8_t[bytes ? bytes : 1]());
        std::unique_ptr<std::uint8_t[]> res(new std::uint8_t[bytes ? bytes : 1]);
        std::memset(o->bufs[0].get(), 1, bytes);
        ssize_t rc;
        bool inject = false;
        o->silent = silent_with(0);
        switch ((form >> 1) % 4) {
        case 0:
            rc = atomic(ep, o->bufs[0].get(), count, nullptr, dest, raddr, key, datatype(dt), op_of(aop), o);
            break;
        case 1:
            inject = true;
            rc = inject_atomic(ep, o->bufs[0].get(), count, dest, raddr, key, datatype(dt), op_of(aop));
            break;
        case 2:
            rc = fetch_atomic(ep, o->bufs[0].get(), count, nullptr, res.get(), nullptr, dest, raddr, key,
                              datatype(dt), op_of(aop), o);
            break;
        default:
            rc = compare_atomic(ep, o->bufs[0].get(), count, nullptr, cmp.get(), nullptr, res.get(), nullptr, dest,
                                raddr, key, datatype(dt), op_of(aop), o);
        }
        accept(o, rc, inject);
        if (rc == 0 && inject)
            o->done = true;
        // The compare and result buffers live as long as the operation.
        o->bufs.push_back(std::move(cmp));
        o->lens.push_back(0);
        o->bufs.push_back(std::move(res));
        o->lens.push_back(0);
    }
    static fabric::op op_of(int v) { return static_cast<fabric::op>(v); }

    void mark_written(op *o)
    {
        std::vector<bool> &w = r.s[1 - o->side].written;
        for (std::size_t i = 0; i < o->len; i++)
            w[o->roff + i] = true;
    }

    /** Receive or drop a message a peek claimed (FI_CLAIM, FI_CLAIM |
     *  FI_DISCARD), or name a context that claimed nothing (refused). */
    void do_claim(int side)
    {
        std::vector<op *> c;
        for (auto &o : ops)
            if (o->side == side && o->claimed)
                c.push_back(o.get());
        std::uint8_t form = in.u8();
        if (c.empty() || form >> 3 == 0x1f) {
            op *o = new_op(k_recv, side); // its context claimed nothing
            make_bufs(o, 64, 1);
            std::vector<iovec> v = iovs(o, 1);
            msg_tagged m = message<msg_tagged>(v, 1, FI_ADDR_UNSPEC, o);
            ssize_t rc = trecvmsg(rx_of(side), &m, FI_CLAIM | (form & 8 ? FI_DISCARD : 0));
            trace("side %d claim of nothing -> %zd\n", side, rc);
            check(rc == -FI_EINVAL, "FI_CLAIM with a context that claimed nothing", rc);
            return;
        }
        op *o = c[in.u8() % c.size()];
        const std::size_t len = pick_len();
        const std::size_t niov = form & 2 ? in.u8() % (L.iov_limit + 2) : 1;
        claim(o, form & 1, len, niov, form & 4 ? FI_COMPLETION : seen());
    }
    /** The FI_CLAIM call for @p o's claimed message: drop it, or receive it
     *  into @p len bytes in @p niov buffers. The same op (its context) then
     *  waits for the completion. */
    void claim(op *o, bool drop, std::size_t len, std::size_t niov, std::uint64_t flags)
    {
        side_res &sr = r.s[o->side];
        o->bufs.clear(); // the peek's: never the provider's
        o->lens.clear();
        make_bufs(o, std::min<std::size_t>(len, 70000), niov);
        std::vector<iovec> v = iovs(o, niov);
        msg_tagged m = message<msg_tagged>(v, niov, FI_ADDR_UNSPEC, o);
        if (drop) { // ignored with FI_DISCARD
            m.msg_iov = nullptr;
            m.iov_count = niov + L.iov_limit;
        }
        ssize_t rc = trecvmsg(o->ep, &m, FI_CLAIM | (drop ? FI_DISCARD : flags));
        trace("side %d claim %s of %p, %zu bytes in %zu -> %zd\n", o->side, drop ? "drop" : "receive",
              static_cast<void *>(o), o->len, niov, rc);
        if (drop)
            check(rc == 0, "FI_CLAIM | FI_DISCARD of a claimed message", rc);
        else if (niov <= L.iov_limit)
            check(rc == 0 || rc == -FI_EAGAIN, "FI_CLAIM into a valid buffer", rc);
        else
            check(rc == -FI_EINVAL, "FI_CLAIM into more buffers than iov_limit", rc);
        if (rc)
            return; // still claimed
        o->claimed = false;
        o->done = false;
        if (drop) {
            o->k = k_peek; // a completion of length 0
            o->claim = false;
            o->dropped = true;
            discarded++;
            return;
        }
        o->k = k_recv;
        o->silent = silent_with(flags);
        if (niov == 0)
            o->len = 0;
    }

    /** MSG: fi_shutdown on @p side. The first one succeeds, a second on
     *  the same side is -FI_ENOTCONN; the peer sees FI_SHUTDOWN (drain). */
    void do_shutdown(int side)
    {
        ssize_t rc = fabric::shutdown(r.s[side].ep, 0);
        trace("side %d shutdown -> %zd\n", side, rc);
        shut_ok[side] = shut_ok[side] || rc == 0;
        if (!shut) {
            check(rc == 0 || (broken && rc == -FI_ENOTCONN), "the first fi_shutdown", rc);
            shut = true;
            shut_by = side;
        } else {
            check(rc == -FI_ENOTCONN || (rc == 0 && side != shut_by), "fi_shutdown after the connection was shut",
                  rc);
        }
    }

    void do_cancel(int side)
    {
        std::vector<op *> c;
        for (auto &o : ops)
            if (o->side == side && o->accepted && !o->done && o->k != k_send)
                c.push_back(o.get());
        op *o = c.empty() ? nullptr : c[in.u8() % c.size()];
        ssize_t rc = fabric::cancel(o ? o->ep : rx_of(side), o ? static_cast<void *>(o) : static_cast<void *>(&next_id));
        check(rc == 0 || rc == -FI_ENOENT, "cancel's return", rc);
    }

    op *find(int side, void *ctx, const char *what)
    {
        for (auto &o : ops)
            if (o.get() == ctx) {
                check(o->side == side, "completion on the other side's CQ", o->k);
                check(o->accepted, what, o->k, o->id);
                check(!o->done, "a second completion", o->k, o->id);
                return o.get();
            }
        fail("completion of an unknown context");
    }

    /** Received @p n bytes at @p at: a prefix of a message this program sent. */
    void check_message(const std::uint8_t *at, std::size_t n, std::size_t full, bool tagged, std::uint64_t tag,
                       std::uint64_t flags, std::uint64_t data)
    {
        if (n < 4 && full < 4)
            return; // too short to carry its number
        if (n < 4)
            return;
        std::uint32_t id = std::uint32_t(at[0]) | std::uint32_t(at[1]) << 8 | std::uint32_t(at[2]) << 16 |
                           std::uint32_t(at[3]) << 24;
        auto it = sends.find(id);
        check(it != sends.end(), "a message nobody sent", id);
        check(received.insert(id).second, "a message received twice", id);
        const op *s = it->second;
        check(full == s->len, "received length", long(full), long(s->len));
        check(tagged == s->tagged, "tagged message on an untagged receive or the reverse", id);
        if (tagged)
            check(tag == s->tag, "received tag", id);
        if (flags & FI_REMOTE_CQ_DATA)
            check(s->has_data && data == (s->data & 0xffffffffull), "remote CQ data", id, long(data));
        for (std::size_t i = 0; i < n; i++)
            if (at[i] != msg_byte(id, i))
                fail("received byte", id, long(i));
    }

    void on_success(int side, const cq_tagged_entry &e)
    {
        trace("side %d completion ctx %p flags %#llx len %zu tag %#llx\n", side, e.op_context,
              static_cast<unsigned long long>(e.flags), e.len, static_cast<unsigned long long>(e.tag));
        if (!e.op_context) {
            check((e.flags & FI_REMOTE_CQ_DATA) && (e.flags & FI_REMOTE_WRITE), "a completion without a context",
                  long(e.flags));
            return;
        }
        op *o = find(side, e.op_context, "completion of a refused call");
        check(!o->silent, "a completion of an operation posted without FI_COMPLETION (selective completion)", o->k);
        switch (o->k) {
        case k_send:
            check(e.flags & FI_SEND, "send completion flags", long(e.flags));
            o->done = true;
            break;
        case k_atomic:
            o->done = true;
            break;
        case k_write:
        case k_read:
            o->done = true;
            if (o->rma_in_range && o->k == k_write)
                mark_written(o);
            if (o->rma_in_range && o->k == k_read) {
                std::size_t at = 0;
                for (std::size_t i = 0; i < o->bufs.size(); i++)
                    for (std::size_t j = 0; j < o->lens[i]; j++, at++) {
                        std::uint8_t b = o->bufs[i][j];
                        if (b != rma_byte(0, o->roff + at) && b != rma_byte(1, o->roff + at))
                            fail("read byte", long(o->roff + at), b);
                    }
            }
            break;
        case k_peek:
            o->done = true;
            // Found: claimed for a later FI_CLAIM call, or dropped.
            o->claimed = o->claim;
            if (o->discard && !o->dropped)
                discarded++;
            break;
        case k_recv: {
            o->done = true;
            check(e.len <= o->len, "receive longer than its buffer", long(e.len), long(o->len));
            // Gather the vector's bytes.
            std::vector<std::uint8_t> got;
            for (std::size_t i = 0; i < o->bufs.size() && got.size() < e.len; i++)
                got.insert(got.end(), o->bufs[i].get(),
                           o->bufs[i].get() + std::min(o->lens[i], e.len - got.size()));
            check_message(got.data(), e.len, e.len, e.flags & FI_TAGGED, e.tag, e.flags, e.data);
            break;
        }
        case k_multi: {
            if (e.len) {
                const std::uint8_t *b = static_cast<const std::uint8_t *>(e.buf), *base = o->bufs[0].get();
                check(b >= base && e.len <= o->len && std::size_t(b - base) <= o->len - e.len,
                      "multi-receive completion outside its buffer", long(b - base), long(e.len));
                check_message(b, e.len, e.len, e.flags & FI_TAGGED, e.tag, e.flags, e.data);
            }
            if (e.flags & FI_MULTI_RECV)
                o->done = true;
            break;
        }
        }
    }

    void on_error(int side, const cq_err_entry &e)
    {
        trace("side %d error ctx %p flags %#llx len %zu olen %zu err %d tag %#llx\n", side, e.op_context,
              static_cast<unsigned long long>(e.flags), e.len, e.olen, e.err, static_cast<unsigned long long>(e.tag));
        check(e.err > 0, "error entry without an error", e.err);
        if (e.err != FI_ETRUNC && e.err != FI_ECANCELED && e.err != FI_ENOMSG)
            broken = broken || msg_ep;
        if (!e.op_context) {
            // An inject's failure: counted as an error if it failed before it
            // was reported complete; reported late (counted as sent) if its
            // connection broke before delivering it. recv_balance tells.
            if (e.flags & FI_SEND)
                null_send_errs[side]++;
            return;
        }
        op *o = find(side, e.op_context, "error completion of a refused call");
        if (o->k == k_send)
            ctx_send_errs[side]++;
        if (o->k == k_multi && !(e.flags & FI_MULTI_RECV) && e.err != FI_ECANCELED)
            return; // one message of the buffer failed; the buffer goes on
        o->done = true;
        if (e.err != FI_ETRUNC || o->bufs.size() != 1 || e.len < 4)
            return;
        // What fitted is the start of the message; a multi-receive placed it at e.buf.
        const std::uint8_t *at = o->bufs[0].get(), *base = at;
        if (o->k == k_multi) {
            at = static_cast<const std::uint8_t *>(e.buf);
            check(at >= base && e.len <= o->len && std::size_t(at - base) <= o->len - e.len,
                  "truncated multi-receive completion outside its buffer", long(at - base), long(e.len));
        } else if (o->k != k_recv) {
            return;
        }
        check(e.len <= o->lens[0], "truncated receive longer than its buffer", long(e.len), long(o->lens[0]));
        check_message(at, e.len, e.len + e.olen, e.flags & FI_TAGGED, e.tag, 0, 0);
    }

    bool poll(int side)
    {
        cq_tagged_entry e[8];
        ssize_t n = cq_read(r.s[side].cq, e, 8);
        if (n > 0) {
            for (ssize_t i = 0; i < n; i++)
                on_success(side, e[i]);
            return true;
        }
        if (n == -FI_EAVAIL) {
            cq_err_entry err{};
            check(cq_readerr(r.s[side].cq, &err, 0) == 1, "cq_readerr after -FI_EAVAIL");
            on_error(side, err);
            return true;
        }
        check(n == -FI_EAGAIN, "cq_read's return", n);
        return false;
    }

    /** Every accepted operation that reports its success has completed
     *  (a silent one's end only its counter shows: counters_reached). */
    bool all_done() const
    {
        for (auto &o : ops)
            if (o->accepted && !o->done && !o->silent)
                return false;
        return true;
    }
    /** Messages received (the FI_RECV counters of both sides, successes and
     *  errors: truncated, or dropped by a full unexpected store) against
     *  messages sent successfully (the FI_SEND successes of both sides):
     *  negative while some wait to be received. */
    long recv_balance()
    {
        long n = 0;
        for (int side = 0; side < 2; side++) {
            side_res &sr = r.s[side];
            n += long(cntr_read(sr.cnt[3]) + cntr_readerr(sr.cnt[3])) - long(cntr_read(sr.cnt[0]));
            // Error entries of sends that the error count does not count:
            // messages counted as sent, then reported lost (a broken
            // connection, util::tx_fail_after_done).
            n += null_send_errs[side] - (long(cntr_readerr(sr.cnt[0])) - ctx_send_errs[side]);
        }
        return n + discarded;
    }
    /** Does every transmit counter show as many operations as its side
     *  started? (More is a failure.) */
    bool counters_reached()
    {
        static const char *const name[3] = {"FI_SEND counter", "FI_WRITE counter", "FI_READ counter"};
        bool all = true;
        for (int side = 0; side < 2; side++)
            for (int c = 0; c < 3; c++) {
                const std::uint64_t n = cntr_read(r.s[side].cnt[c]) + cntr_readerr(r.s[side].cnt[c]);
                if (n != counted[side][c])
                    trace("side %d %s: %llu + %llu errors, %llu started\n", side, name[c],
                          static_cast<unsigned long long>(cntr_read(r.s[side].cnt[c])),
                          static_cast<unsigned long long>(cntr_readerr(r.s[side].cnt[c])),
                          static_cast<unsigned long long>(counted[side][c]));
                check(n <= counted[side][c], name[c], long(n), long(counted[side][c]));
                all = all && n == counted[side][c];
            }
        return all;
    }

    /** Receive whatever is left, cancel what is still posted, and wait for
     *  every accepted operation (bounded). */
    void drain()
    {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(8); // under -timeout=10
        int round = 0;
        for (;;) {
            // Each read once per round: reading a counter drives progress.
            const bool done = all_done(), reached = counters_reached();
            const long balance = recv_balance();
            // Above 0: messages that arrived although their sends failed (an
            // RC connection that broke before the sender saw the ACK); one
            // received twice is caught by its number (check_message). Below
            // 0 on DGRAM: datagrams that found no receive.
            if (done && reached && (balance >= 0 || dgram))
                break;
            const bool ends = done && reached;
            check(std::chrono::steady_clock::now() < until,
                  !done    ? "an accepted operation never completed"
                  : !ends  ? "a counter never reached its operations"
                           : "a message sent was never received",
                  long(pending_kind()));
            bool any = poll(0);
            any = poll(1) || any;
            if (any)
                continue;
            if (++round % 64)
                continue;
            // Nothing moved for a while: while sends are waiting, receive
            // whatever is left (on both sides: a send may name its own
            // endpoint); then cancel this program's receives.
            bool sends_left = false;
            for (auto &o : ops)
                if (o->k == k_send && o->accepted && !o->done && !o->silent)
                    sends_left = true;
            for (int side = 0; side < 2; side++) // silent ones: their counter has not got there yet
                if (cntr_read(r.s[side].cnt[0]) + cntr_readerr(r.s[side].cnt[0]) < counted[side][0])
                    sends_left = true;
            if (balance < 0 && !dgram)
                sends_left = true; // sent, not yet received: waiting unexpected
            for (int side = 0; side < 2; side++) {
                if (sends_left) {
                    post_sinks(side);
                    for (auto &o : ops)
                        if (o->side == side && o->claimed)
                            claim(o.get(), false, 70000, 1, FI_COMPLETION);
                    continue;
                }
                for (auto &o : ops)
                    if (o->side == side && o->accepted && !o->done &&
                        (o->k == k_recv || o->k == k_multi || o->k == k_peek))
                        (void)fabric::cancel(o->ep, o.get());
            }
        }
    }
    long pending_kind() const
    {
        for (auto &o : ops)
            if (o->accepted && !o->done && !o->silent)
                return o->k * 1000 + o->side;
        return -1;
    }
    /** Receives for any message on @p side: up to two open of each kind,
     *  tagged and untagged (counted apart: what one kind does not take must
     *  not keep the other from being posted). */
    void post_sinks(int side)
    {
        for (int c = 0; c < (scalable ? 2 : 1); c++)
            for (int t = 0; t < 2; t++) {
                fid_ep *ep = r.s[side].rx[c];
                int open = 0;
                for (auto &o : ops)
                    open += o->sink && o->side == side && o->ep == ep && o->tagged == bool(t) && o->accepted &&
                            !o->done;
                if (open >= 2)
                    continue;
                op *o = new_op(k_recv, side);
                o->tagged = t;
                o->sink = true;
                o->ep = ep;
                make_bufs(o, 70000, 1);
                std::vector<iovec> v = iovs(o, 1);
                ssize_t rc;
                if (t) {
                    msg_tagged m = message<msg_tagged>(v, 1, FI_ADDR_UNSPEC, o);
                    m.ignore = ~0ull;
                    rc = trecvmsg(ep, &m, FI_COMPLETION);
                } else {
                    msg m = message<msg>(v, 1, FI_ADDR_UNSPEC, o);
                    rc = recvmsg(ep, &m, FI_COMPLETION);
                }
                accept(o, rc, false);
            }
    }


    /** The peer of a side that shut the connection down saw FI_SHUTDOWN
     *  (unless it shut down too before the notice came). */
    void expect_shutdown_seen()
    {
        for (int side = 0; side < 2; side++) {
            if (!shut_ok[1 - side] || shut_ok[side])
                continue;
            auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            bool seen = false;
            while (!seen) {
                check(std::chrono::steady_clock::now() < until, "the peer never saw FI_SHUTDOWN", side);
                std::uint32_t ev = 0;
                std::uint8_t buf[256];
                ssize_t n = eq_read(r.s[side].eq, &ev, buf, sizeof buf, 0);
                if (n > 0)
                    seen = ev == FI_SHUTDOWN;
                else
                    (void)poll(side);
            }
        }
    }

    void verify_regions()
    {
        for (side_res &sr : r.s) {
            if (sr.late > 0)
                sr.late--;
            if (!sr.touched && !sr.late) {
                check(std::memcmp(sr.region, r.initial.data(), region_len) == 0, "a region nobody wrote changed");
                continue;
            }
            sr.touched = false;
            for (std::size_t p = 0; p < region_len; p++) {
                std::uint8_t want = rma_byte(sr.written[p] ? 1 : 0, p);
                if (sr.region[p] != want && !(sr.region[p] == rma_byte(1, p)))
                    fail("region byte", long(p), sr.region[p]);
                if (sr.written[p] && sr.region[p] != want)
                    fail("a completed write is missing", long(p), sr.region[p]);
            }
            std::memcpy(sr.region, r.initial.data(), region_len);
            sr.written.assign(region_len, false);
        }
    }

    void run()
    {
        while (!in.done() && ops.size() < max_ops) {
            std::uint8_t b = in.u8();
            int side = b & 1;
            switch ((b >> 1) % 8) {
            case 0:
            case 1:
                do_send(side);
                break;
            case 2:
            case 3:
                do_recv(side);
                break;
            case 4:
                do_rma(side);
                break;
            case 5:
                do_cancel(side);
                break;
            case 7:
                do_claim(side);
                break;
            default:
                if (msg_ep && b >> 4 == 15) {
                    do_shutdown(side);
                    break;
                }
                for (int i = 0; i < 1 + (b >> 4); i++) {
                    (void)poll(side);
                    (void)poll(1 - side);
                }
            }
        }
        drain(); // which also waits for the counters
        verify_regions();
        if (shut && !broken) // a failed connection may have taken the notice with it
            expect_shutdown_seen();
    }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    if (size < 1)
        return 0;
    rig &r = the_rig(data[0] % 2u);
    const bool selective = data[0] & 2;
    const ep_kind kind = data[0] & 4 ? ep_msg : data[0] & 8 ? ep_dgram : data[0] & 16 ? ep_scalable : ep_rdm;
    r.open_endpoints(selective, kind);
    program{r, reader{data + 1, size - 1}, selective, kind}.run();
    r.close_endpoints();
    return 0;
}
