/* The vq provider (private): endpoints of lib/fabric over lib/vq queues.
 *
 * RDM: each endpoint owns a UD QP (its address: segment name + UD QP number)
 * used only for connection management, and one RC QP per peer, created on
 * the first send to that peer (REQ/REP over UD, invisible to the user;
 * operations to the peer meanwhile are accepted and kept in order, started
 * once it is up, and fail with an error completion if it cannot be made).
 * DGRAM: the UD QP carries the data. MSG: one RC QP set up through a passive endpoint's UD QP
 * (CONNREQ / accept / reject / shutdown).
 *
 * RC messages (wire.h has the protocol): every message is one vq send_imm
 * whose immediate is the header word. Small ones are posted with
 * post_send_imm_inline (header fields and payload gathered straight into the
 * peer's ring: one line up to device_attr::max_inline_slot), medium ones
 * from the user's buffer (an SGE), large ones by rendezvous: the sender
 * describes its buffer (ready-to-send), the receiver pulls it with a vq RDMA
 * read straight into the matched receive — one copy, by memcpy when the
 * sender's memory is in its shared segment, by the driver's cross-memory
 * attach otherwise — and says so (fin). RC QPs use lent receives where the
 * device offers them: a message is matched and copied once, from the ring
 * into the user's buffer (or into the unexpected store). RMA and atomics on
 * memory peers reach directly (shunt_mem buffers) are vq RDMA; on private
 * memory they are messages executed by the target's progress (rma.cpp).
 * Keys are vq rkeys (FI_MR_PROV_KEY | FI_MR_VIRT_ADDR), with key_direct set
 * when the region is directly reachable. */
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "env/log.h"
#include "env/stats.h"
#include "fabric/api.h"
#include "fabric/ext_mem.h"
#include "fabric/ext_tso.h"
#include "fabric/util/ep.h"
#include "fabric/util/mr.h"
#include "vq/vq.h"
#include "cm_wire.h"
#include "wire.h"

namespace shunt::prov::vqprov {

using namespace ::shunt::fabric; // the API and kit this provider implements
namespace vq = ::shunt::vq;

/** The provider's logging component (SHUNT_LOG_LEVEL=fabric:...). */
extern env::log::component prov_log;

// The provider's own choices. Every limit of the device comes from its
// device_attr (dev_limits below), never from a copy of a driver's constant.
inline constexpr std::size_t max_ctx = 16;                   ///< tx / rx contexts per scalable endpoint
inline constexpr std::uint32_t qkey = 0x5348;                ///< "SH"
inline constexpr std::size_t max_msg = std::size_t(64) << 20; ///< largest message
inline constexpr std::size_t iov_max = 4;                    ///< iov_limit of sends and receives
inline constexpr std::uint32_t tso_segments_max = 64;        ///< TSO extension: segments per send
inline constexpr std::uint32_t send_inline_max = 1024;       ///< sends and writes copied at the call up to this
inline constexpr std::uint32_t inject_max_cap = 4096;        ///< inject_size at most
inline constexpr std::size_t txq_max = 64;                   ///< RDM: operations queued while peers connect
/** Header of a DGRAM message (dgram.cpp): op, flags, padding, the sender's
 *  address; a tag and remote CQ data follow when present. */
inline constexpr std::uint32_t dgram_hdr_size = 8 + sizeof(ep_addr);
inline constexpr std::uint32_t dgram_hdr_max = dgram_hdr_size + 16;

/** Keys (fabric MR keys): the vq rkey in the low 32 bits; a local-only
 *  region's key (no remote access) is outside the rkey space; key_direct
 *  says peers reach the region directly (vq RDMA), else RMA into it is
 *  executed by the owner's progress (rma.cpp). */
inline constexpr std::uint64_t key_local_only = std::uint64_t(1) << 32;
inline constexpr std::uint64_t key_direct = std::uint64_t(1) << 33;

/** What the provider uses of one vq device, derived from its device_attr by
 *  limits_of(): each is the provider's wish bounded by the device. */
struct dev_limits {
    std::uint32_t inline_max = 0;  ///< sends, writes, datagrams inline up to this (max_inline_data, at most 1 KiB)
    std::uint32_t rc_inline = 0;   ///< an RC QP's inline size (max_inline_data): what an inject may take
    std::uint32_t inject_max = 0;  ///< RDM/MSG inject_size: rc_inline minus the largest head, at most 4 KiB
    std::uint32_t slot_max = 0;    ///< payload of the cheapest send (max_inline_slot; 0: inline_max)
    std::uint32_t eager_max = 0;   ///< messages up to this are one message through the ring
    std::uint32_t frag_max = 0;    ///< larger ones sent through the ring go in fragments of this payload
    std::uint64_t rndv_private = 0; ///< messages from private memory of at least this go by rendezvous (SHUNT_VQ_RNDV_BYTES)
    std::uint64_t rndv_shared = 0; ///< from memory peers reach directly (SHUNT_VQ_RNDV_SHARED_BYTES)
    std::uint32_t rma_inline = 0;  ///< a write to private memory up to this is carried in the message
    std::uint32_t small_max = 0;   ///< inline_max minus the largest head: any operation this small, a read's
                                   ///< answer included, is copied at the call
    std::uint32_t dgram_max = 0;   ///< DGRAM message: the UD MTU (inline_max without one) - the datagram header
    std::uint32_t dgram_inject = 0; ///< DGRAM inject_size: inline_max - the datagram header
    std::uint32_t sq_depth = 0;    ///< send queue entries per QP (wish 1024)
    std::uint32_t rq_depth = 0;    ///< receive buffers per RC QP without lent receives (wish 128)
    std::uint32_t bounce = 0;      ///< a receive buffer of an RC QP without lent receives: eager_max + fields
    std::uint32_t ud_depth = 0;    ///< receives posted on the UD QP (wish 64)
    std::uint32_t ud_buf = 0;      ///< a UD receive buffer of an RDM / MSG endpoint (CM messages)
    std::uint32_t dgram_buf = 0;   ///< a UD receive buffer of a DGRAM endpoint: the UD MTU
    std::uint32_t grh = 0;         ///< bytes in front of a UD receive (device_attr::ud_grh: 40), in both buffers
    std::uint32_t send_sge = 0;    ///< gather entries per send (wish iov_max)
    std::uint32_t max_conns = 0;   ///< RC QPs (connections) per endpoint (wish 63)
    std::uint32_t scq_depth = 0;   ///< send CQ entries per endpoint (wish 4096)
    std::uint32_t rcq_depth = 0;   ///< receive CQ entries
    std::uint32_t ep_cnt = 0;      ///< endpoints per domain (wish 256)
    std::uint32_t mr_cnt = 0;      ///< memory regions per domain (max_mr)
    std::uint32_t tso_hdr_max = 0; ///< TSO extension: the application's header (0: no TSO)
    std::uint32_t tso_mss_max = 0; ///< TSO extension: largest MSS
    bool lend = false;             ///< RC QPs use lent receives (device_attr::lend_qp_types)
    bool host_local = false;       ///< peers only on this host (shared memory)
};

/** The message of UD receive completion @p w into buffer @p b: past the
 *  GRH area on a device that reserves one (@p grh, dev_limits::grh: verbs
 *  devices reserve it whether or not a GRH arrived) or when the completion
 *  says one is there (WC_GRH). @return false when the completion is
 *  shorter than that area. */
inline bool ud_message(const vq::wc &w, std::uint32_t grh, const std::uint8_t *&b, std::uint32_t &len)
{
    len = w.byte_len;
    if (grh || (w.wc_flags & vq::WC_GRH)) {
        if (len < 40)
            return false;
        b += 40;
        len -= 40;
    }
    return true;
}

/** Derive the provider's limits on a device.
 *  @return 0; -FI_ENODATA the device cannot carry this provider's protocol
 *  (no RC/UD send with immediate, inline data below a CM message, ...). */
[[nodiscard]] int limits_of(const vq::device_attr &a, dev_limits &out);

/** The device attributes of @p dev, queried once per process (getinfo and
 *  every domain read them; opening a device context costs a segment).
 *  @return 0 and *out; the device's open/query error. */
[[nodiscard]] int device_attr_of(vq::device *dev, vq::device_attr &out);

/** The device a domain name names; null: the first device of driver
 *  @p fabric (any driver when null) when @p domain is null or empty. */
vq::device *device_named(const char *fabric, const char *domain);

struct prov_domain;
struct prov_ep;

/* ---- Registrations of buffers passed without a descriptor ---- */

/** A registration an operation holds (mr_get / mr_put). */
struct mr_ref {
    vq::mr *mr = nullptr;
    int slot = -1;               ///< cache entry, or -1: registered for this operation only
};

/** Registrations of the application's buffers passed without a descriptor
 *  (rendezvous, medium sends, RMA from private memory). On a host-local
 *  device a region is an address range checked at each access (nothing is
 *  pinned), so registrations are cached and reused; on other devices each
 *  operation registers its own and deregisters it when done. */
struct mr_cache {
    struct entry {
        std::uintptr_t lo = 0, hi = 0;
        vq::mr *mr = nullptr;
        std::uint32_t refs = 0;
        std::uint64_t used = 0;  ///< last use (clock), for eviction
    };
    util::maybe_lock lock;       ///< endpoints of the domain may run on several threads
    std::vector<entry> v;        ///< empty: no caching
    std::uint64_t clock = 0;
};

/** A registration covering [addr, addr + len) with local write and remote
 *  read and write. @return 0 and @p ref; the vq error. */
int mr_get(prov_domain *d, const void *addr, std::size_t len, mr_ref &ref);
void mr_put(prov_domain *d, mr_ref &ref);

/** Statistics of an endpoint that stamps its messages (vq.ep.<n>.one_way). */
struct one_way_stats {
    env::stats::histogram one_way;    ///< receiver: arrival (progress) less the sender's stamp, cycles
    env::stats::counter connections;  ///< connections that agreed to stamp
};

/** What connection management keeps for an RDM endpoint (vq.ep.<n>.cm):
 *  object counts, nothing per message, so registered with telemetry off too.
 *  Written under the endpoint's lock (or by its one thread). */
struct cm_stats {
    env::stats::gauge peers;      ///< connection records (by_addr): peers it knows
    env::stats::counter refused;  ///< REQs it could not accept
    env::stats::gauge qps;        ///< RC QPs it holds (rc_slot::qp set)
    env::stats::counter qps_created; ///< RC QPs it created
    env::stats::gauge half_open;  ///< accepted connections the requester has not finished (rc_slot::half_since)
    env::stats::counter expired;  ///< of those, given up after SHUNT_VQ_CONNECT_TIMEOUT_MS
    env::stats::gauge ctl_waiting;   ///< control messages waiting for send-queue room (conn::ctl), all peers
    env::stats::counter ctl_dropped; ///< control messages dropped at the bound of one peer's queue (ctl_send)
    env::stats::gauge moves_waiting;  ///< pulls and pushes waiting for send-queue room (conn::moves), all peers
    env::stats::counter moves_refused; ///< moves refused at the bound of one peer's queue (move_start)
};

/* ---- Connections ---- */

/** One RC QP of an endpoint. */
struct rc_slot {
    vq::qp *qp = nullptr;
    struct conn *c = nullptr;
    std::uint8_t *bounce = nullptr;   ///< without lent receives: rq_depth * lim.bounce
    vq::mr *bounce_mr = nullptr;
    std::uint32_t accepted_from = 0;  ///< requester's QP when we accepted (REQ retries)
    std::uint32_t unsignaled = 0;     ///< unsignaled sends since the last signaled one
    struct frag_msg *rx_frag = nullptr; ///< a fragmented message being received on this QP (frag.cpp)
    bool retired = false;             ///< failed QP, closed when its marker comes back (slot_retire)
    bool drain_posted = false;        ///< retired: its marker is posted
    /** Its lent receives are read in place with vq::poll_lent (the QP
     *  offers it): progress takes the hot slot's messages without the CQ. */
    bool lent_poll = false;
    /** RDM, accepted from a REQ: when (now_ns), until the requester
     *  finishes the connection (anything but an eager message arrives on
     *  the QP, its w_hello first); 0: finished, or not accepted. */
    std::uint64_t half_since = 0;
    ep_addr half_from{};              ///< half_since set: the requester (its device address counts)
};

/** A small message for the peer that could not be posted yet (the send
 *  queue was full): sent from progress, in order, never dropped. The
 *  largest is a small read's answer (its id, then up to
 *  dev_limits::small_max bytes). */
struct ctl_msg {
    std::uint32_t imm = 0;
    std::uint16_t len = 0;
    bool answer = true; ///< goes back on the QP the peer's requests arrive on (answer_slot)
    std::uint8_t bytes[8 + send_inline_max];
};

/** An operation to an RDM peer whose connection is being set up, accepted
 *  by the call and started, in order, once the connection is up (or failed
 *  with an error completion when it cannot be made). The request's arrays
 *  point into the entry; the source bytes of an inject, and those a send to
 *  a connected peer would copy during the call (inline sends, small writes,
 *  atomic operands), are copied into @p data, so the caller's buffer is as
 *  free at return as then. Preallocated per endpoint (prov_ep::txq): a full
 *  queue is -FI_EAGAIN. */
struct queued_tx {
    queued_tx *next = nullptr;
    util::ep_core *owner = nullptr; ///< endpoint or transmit context that posted it (null: it closed)
    util::tx_req r{};
    iovec iov[iov_max];
    void *desc[iov_max];
    rma_iov rma[1];
    iovec result[iov_max];
    iovec compare[iov_max];
    std::uint8_t *data = nullptr;  ///< txq_data_size bytes of the endpoint's txq_data
    std::uint8_t cmp[64];          ///< a compare-atomic's compare operand
};

struct rx_op;

/** A peer as seen by one endpoint. */
struct conn {
    /** draining (RDM): the QP is up, but operations queued while it was set
     *  up are still to start; new ones queue behind them (FI_ORDER_SAS). */
    /** stamped: connected, and both ends agreed to stamp messages with the
     *  TSC (one_way); its sends take conn_not_ready's path, so connections
     *  that are not stamped pay nothing for it. */
    enum state_t : std::uint8_t { idle, connecting, connected, failed, draining, stamped } state = idle;
    ep_addr peer{};
    int slot = -1;                ///< rc_slot used to send to this peer
    vq::ah *ah = nullptr;         ///< to the peer's UD QP
    fi_addr_t src = FI_ADDR_NOTAVAIL; ///< this peer in the endpoint's AV
    std::size_t src_av_count = 0; ///< AV size when src was last looked up
    std::uint64_t req_sent_ns = 0;
    std::uint32_t req_qpn = 0;    ///< our QP the REQ announced (connecting)
    int dead_slot = -1;           ///< QP that failed, closed by progress
    /** The QP last accepted from this peer: its messages arrive there, and
     *  while ours is not up (a simultaneous connect) control messages and
     *  rendezvous reads for the peer go over it (ctl_slot). -1: none. */
    int acc_slot = -1;
    std::deque<ctl_msg> ctl;      ///< control messages waiting for send-queue room, oldest first
    std::uint64_t ctl_dropped = 0; ///< dropped: the queue was at its bound (ctl_send)
    rx_op *moves = nullptr;       ///< pulls and pushes waiting for send-queue room, in order
    rx_op *moves_tail = nullptr;
    std::uint32_t nmoves = 0;     ///< how many (at most max_ctx x dev_limits::sq_depth)
    std::uint64_t moves_refused = 0; ///< refused: the queue was at its bound (move_start)
    bool pending = false;         ///< on the endpoint's pending list
    std::uint64_t connect_ns = 0; ///< RDM: when the first REQ of this attempt went
    /** RDM: the attempt was started by fi_av_insert (av_inserted) and no
     *  operation waits on it yet: the connect timeout is not running (it
     *  starts with the first operation queued), and an attempt without an
     *  answer after that long stops repeating its REQ instead of failing. */
    bool eager = false;
    bool eager_quiet = false;     ///< eager, and it stopped repeating its REQ (no answer in the timeout)
    /** The attempt was started by fi_av_insert: a reply that cannot be
     *  used (the peer gave up its end while this side was not progressing)
     *  starts the connection anew instead of failing what waits on it. */
    bool eager_origin = false;
    queued_tx *q_head = nullptr;  ///< RDM: operations waiting for the connection, oldest first
    queued_tx *q_tail = nullptr;
    /** The peer's endpoint counts remote accesses (FI_RMA_EVENT, said in its
     *  REQ or REP): each direct RMA and atomic on it is followed by a note. */
    bool notify = false;
    /** Both ends stamp (cm_f_one_way with one clock): up is `stamped`. */
    bool one_way = false;
    // MSG endpoints
    /** Shut down (fi_shutdown, either side, or the QP failed): no new
     *  operations (-FI_ENOTCONN); control messages (rendezvous fins and
     *  reads, RMA answers) still go over the QP for what was in flight. */
    bool shut = false;
};

/** An outstanding transmit (or RMA / atomic at the initiator). */
struct tx_entry {
    tx_entry *next = nullptr;
    util::ep_core *owner = nullptr; ///< endpoint or transmit context that posted it (its CQ, counters)
    void *context = nullptr;
    std::uint64_t flags = 0;      ///< op flags (FI_COMPLETION...)
    std::uint64_t cq_flags = 0;   ///< FI_SEND|FI_MSG, FI_RMA|FI_WRITE...
    std::size_t len = 0;
    conn *c = nullptr;
    /** What completes it: a send completion (signaled WR), the peer's fin
     *  (rendezvous, delivery complete, target-executed RMA) or its response
     *  (reads and atomics executed by the target). */
    enum wait_t : std::uint8_t { on_wc, on_fin, on_resp } waits = on_wc;
    bool wc_seen = false;         ///< on_fin/on_resp: the WR's own completion came (or it was unsignaled)
    bool got_fin = false;         ///< the fin / response came first
    int fin_err = 0;              ///< the peer's status in its fin / response
    // reads into iov, atomics' result
    iovec iov[iov_max];
    std::size_t iov_count = 0;
    void *result = nullptr;       ///< atomics: user result buffer
    mr_ref mrs[iov_max];          ///< registrations held for its buffers
    std::uint32_t nmrs = 0;
    std::uint32_t gen = 0;
    std::uint64_t posted = 0;     ///< env::stats::stamp() when posted: send-to-completion latency
};

/** Receive-side work in flight: a rendezvous receive being fetched, or a
 *  large RMA the target executes (pulling the initiator's data or pushing
 *  its own). Completed by the vq send completion of the last RDMA request. */
struct rx_op {
    rx_op *next = nullptr;
    enum kind_t : std::uint8_t { fetch_recv, rma_write, rma_read } kind = fetch_recv;
    util::rx_entry *e = nullptr;  ///< fetch_recv: the matched receive
    util::rx_fetch_req r;         ///< fetch_recv: what the kit needs to complete it
    conn *c = nullptr;            ///< where the fin goes
    std::uint64_t peer_id = 0;    ///< the sender's / initiator's id for the fin
    std::uint32_t data = 0;       ///< rma_write: remote CQ data to report
    bool has_data = false;
    util::ep_core *target = nullptr; ///< rma_write: the endpoint that reports it
    std::uint64_t key = 0, addr = 0; ///< rma_write / rma_read: the region accessed (FI_RMA_EVENT counters)
    std::size_t len = 0;
    mr_ref mrs[iov_max];
    std::uint32_t nmrs = 0;
    std::uint32_t gen = 0;
    std::uint32_t index = 0;      ///< in prov_ep::rx_by_index (its id)
    // What posting its vq RDMA needs (move_start), kept while it waits on
    // conn::moves for send-queue room:
    rndv_desc d{};                ///< the peer's buffers
    iovec v{};                    ///< rma_write / rma_read: the bytes of the region
    void *vdesc = nullptr;        ///< their fabric MR
};

struct prov_domain : util::domain_obj {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::td *td = nullptr;         ///< FI_THREAD_DOMAIN + manual progress: lock-free queues
    vq::device_attr dattr{};
    dev_limits lim{};             ///< from dattr
    mr_cache mrc;
    /** shunt_mem allocations (sorted by address): regions over them are
     *  reached by peers directly (key_direct). */
    struct shared_buf {
        std::uintptr_t lo, hi;
    };
    std::vector<shared_buf> shared;
    util::maybe_lock shared_lock;
    std::atomic<std::uint32_t> av_attached{0}; ///< AV entries holding a peer's address handle (av_attach)
    /** Enabled RDM endpoints, which fi_av_insert connects to the peers it
     *  attaches (av_inserted); eps_mu before an endpoint's lock. */
    std::mutex eps_mu;
    std::vector<struct prov_ep *> rdm_eps;
};

/** A passive endpoint's UD QP (its address) taken over by an active MSG
 *  endpoint created with info->handle = the passive endpoint. */
struct adopted_ud {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::qp *ud = nullptr;
    vq::mr *mr = nullptr;
    std::vector<std::uint8_t> bufs;
    std::uint32_t buf_size = 0;   ///< bytes of one receive buffer in bufs
    std::uint32_t grh = 0;        ///< bytes in front of each receive (dev_limits::grh)
    ep_addr own{};               ///< the endpoint's own UD address (its RC QPs' segment)
    struct service_binding *svc = nullptr; ///< the passive endpoint's service, now the endpoint's (addr.h)
    const struct addr_resolver *res = nullptr; ///< what unbinds it
};

/** A message sent through the ring in fragments (w_frag_first, then
 *  w_frag until total bytes arrived), as its receiver tracks it: copied
 *  straight into the matched receive, or into a staging buffer while no
 *  receive matches it (then into the receive that matches it later). */
struct frag_msg {
    frag_msg *next = nullptr;     ///< free list
    conn *c = nullptr;            ///< the peer (its acknowledgement goes there)
    int slot = -1;                ///< the QP the fragments come on (-1: no more come)
    std::size_t total = 0, got = 0;
    util::rx_entry *e = nullptr;  ///< the matched receive
    util::rx_fetch_req r;         ///< what the kit needs to complete it
    std::uint8_t *buf = nullptr;  ///< staging (unexpected), stash_class(total) bytes
    std::uint64_t ack_id = 0;     ///< FI_DELIVERY_COMPLETE: the sender's id
    int err = 0;                  ///< positive fabric code: the message failed
    bool want_ack = false;
    bool done = false;            ///< every fragment arrived (or err)
    bool discarded = false;       ///< nobody takes it: fragments are dropped
};

/** What the kit keeps of a message whose data the provider moves itself
 *  (rx_deliver_fetch): a rendezvous (fm null: the sender's buffers in d) or
 *  a fragmented message (fm). */
struct fetch_blob {
    conn *c;               ///< where it came from (connections live until the endpoint closes)
    std::uint64_t peer_id; ///< the sender's id for the fin (rendezvous)
    frag_msg *fm;          ///< fragmented message, or null
    rndv_desc d;           ///< rendezvous: the sender's buffers
};

/** A fetch the kit asked for (rx_fetch) while this endpoint's lock was not
 *  held by the calling thread: started by its next progress. */
struct queued_fetch {
    util::rx_entry *e;            ///< null: a discarded message, only its sender is told
    util::rx_fetch_req r;
    std::uint8_t desc[sizeof(fetch_blob)]; ///< the provider's description
};

/** The provider state of an endpoint (util::ep_core::prov). */
struct prov_ep {
    util::ep_core *core = nullptr;
    prov_domain *dom = nullptr;
    /** With a lock (above FI_THREAD_DOMAIN): the thread running this
     *  endpoint's progress (pthread_self), else 0; written only by that
     *  thread under the lock. Not thread_local: dynamic TLS in a module the
     *  libfabric shim dlopens costs a call per access, and LeakSanitizer
     *  mis-reads it in forked children. */
    std::atomic<std::uintptr_t> progress_owner{0};
    vq::cq *scq = nullptr, *rcq = nullptr;
    /** RDM: the UD QP's receive CQ (connection requests and replies), apart
     *  from rcq so that receiving a message does not also visit the UD QP
     *  and the rings peers claimed on it; polled every ud_every-th progress
     *  call and on every call while connections are pending.
     *  Null for MSG and DGRAM: their UD completions arrive on rcq. */
    vq::cq *ucq = nullptr;
    /** Progress calls so far (wrapping): the periodic work (ucq poll,
     *  send-CQ sweep) is due when its low bits are zero. */
    std::uint32_t tick = 0;
    /** The RC slot that delivered last (receive completions of one peer
     *  come in runs): the first guess of slot_of. */
    int rx_last = -1;
    vq::qp *ud = nullptr;
    std::uint8_t *ud_bufs = nullptr;
    vq::mr *ud_mr = nullptr;
    std::vector<std::uint8_t> ud_mem;
    ep_addr addr{};
    util::maybe_lock lock;        ///< provider state when the domain is multi-threaded
    /** The endpoint's statistics (vq.ep.<n>), nullptr when telemetry is
     *  off; written under the endpoint's lock (or by its one thread). */
    env::stats::io_stats *io = nullptr;
    /** The one-way block (vq.ep.<n>.one_way) when this endpoint stamps
     *  (SHUNT_TELEMETRY_ONE_WAY), else nullptr; written like *io. */
    struct one_way_stats *ow = nullptr;
    std::vector<rc_slot> slots;   ///< dom->lim.max_conns RC QPs, sized at creation (never moves)
    // peers by AV index (chunks never move) and by address
    std::vector<conn *> by_index;
    std::unordered_map<std::string, conn *> by_addr;
    std::vector<conn *> all;
    /** Connections that need progress (dead QP to close, connection request
     *  to repeat, control messages to send): progress visits only these. */
    std::vector<conn *> pending;
    // transmit entries
    std::vector<tx_entry> tx;
    tx_entry *tx_free = nullptr;
    std::uint64_t *scratch = nullptr; ///< scratch_words per tx entry, registered (scratch_of)
    vq::mr *scratch_mr = nullptr;
    // receive-side operations (grown on demand, never shrunk)
    std::vector<std::unique_ptr<rx_op[]>> rx_chunks;
    std::vector<rx_op *> rx_by_index;
    rx_op *rx_free = nullptr;
    std::vector<queued_fetch> fetch_q; ///< rx_fetch calls from other threads
    // fragmented messages being received or kept unexpected, and their
    // staging buffers (free lists by power-of-two class; grown on demand)
    std::vector<std::unique_ptr<frag_msg[]>> frag_chunks;
    frag_msg *frag_free = nullptr;
    void *stash_free[12] = {};      ///< 32 KiB << class, up to max_msg
    util::maybe_lock fetch_lock;
    std::atomic<bool> fetch_waiting{false};
    /** Signaled vq sends not yet completed: the send CQ is polled only while
     *  there are some (and on a periodic sweep for unsignaled errors). */
    std::uint32_t scq_pending = 0;
    /** Retired slots whose marker could not be posted yet (send queue
     *  full): posted again on the sweep. */
    std::uint32_t undrained = 0;
    /** A post found the send queue full: the driver may hold requests it
     *  executes only when the send CQ is polled, so the next progress does. */
    bool tx_unpolled = false;
    std::uint32_t sq_depth = 0;   ///< send queue entries per RC QP: tx_attr.size, at most lim.sq_depth
    std::uint32_t signal_every = 0; ///< an unsignaled send in this many is signaled (a quarter of sq_depth)
    int progress_handle = 0;      ///< auto progress poller, 0 if none
    int spare_slot = -1;          ///< a slot with a QP in INIT for the next connection (slot_prepare)
    bool msg_type = false;        ///< FI_EP_MSG
    conn *msg_conn = nullptr;     ///< FI_EP_MSG: the connection
    bool dgram = false;
    bool scalable = false;        ///< core is a scalable endpoint: receives go to its rx contexts
    adopted_ud *pep_ud = nullptr; ///< MSG: a passive endpoint's address taken over (its CM replies arrive there)
    std::vector<std::uint8_t> tso_hdr; ///< DGRAM: our datagram header + the application's, for send_tso
    /** DGRAM: the header of each datagram larger than one inline send, by
     *  transmit entry (dgram_hdr_max bytes each, registered): it is read
     *  with the user's buffers when the device executes the send. */
    std::unique_ptr<std::uint8_t[]> dgram_hdrs;
    vq::mr *dgram_hdrs_mr = nullptr;
    struct service_binding *svc = nullptr; ///< the service its source address names, bound to addr (addr.h)
    /** RDM: operations accepted while their peer's connection is set up
     *  (queued_tx), allocated at set-up; their inject copies. */
    std::vector<queued_tx> txq;
    queued_tx *txq_free = nullptr;
    std::unique_ptr<std::uint8_t[]> txq_data;
    std::size_t txq_data_size = 0;
    std::uint64_t connect_timeout_ns = 0; ///< RDM: a connection not up after this fails (0: never)
    std::uint32_t eager_left = 0; ///< RDM: connections fi_av_insert may still start (SHUNT_VQ_AV_CONNECT)
    env::stats::io_block io_blk;  ///< owns *io
    std::unique_ptr<one_way_stats> ow_mem; ///< owns *ow
    env::stats::registration ow_reg;
    cm_stats cm;                  ///< RDM (vq.ep.<n>.cm)
    env::stats::registration cm_reg; ///< after cm: unregistered before cm goes
};

/** While it lives, the calling thread is the one running @p e's progress
 *  (prov_ep::progress_owner; @p e's lock held), the previous owner restored
 *  after: progress inside progress nests. */
class progress_scope {
public:
    explicit progress_scope(prov_ep *e) noexcept
        : e_(e), outer_(e->progress_owner.load(std::memory_order_relaxed))
    {
        e_->progress_owner.store(std::uintptr_t(::pthread_self()), std::memory_order_relaxed);
    }
    ~progress_scope() { e_->progress_owner.store(outer_, std::memory_order_relaxed); }
    progress_scope(const progress_scope &) = delete;
    progress_scope &operator=(const progress_scope &) = delete;

private:
    prov_ep *e_;
    std::uintptr_t outer_;
};

/** Does @p c have a connected QP (operations may go on it)? */
inline bool qp_up(const conn *c)
{
    return c->state == conn::connected || c->state == conn::draining || c->state == conn::stamped;
}
/** Connected with nothing queued (stamped or not). */
inline bool is_connected(const conn *c) { return c->state == conn::connected || c->state == conn::stamped; }
/** The state of @p c once its QP is up and nothing waits. */
inline conn::state_t up_state(const conn *c) { return c->one_way ? conn::stamped : conn::connected; }

/** Receive context index a destination address names (fi_rx_addr with the
 *  AV's rx_ctx_bits), 0 without named receive contexts. Fast path. */
inline std::uint16_t rx_index_of(const util::ep_core *c, fi_addr_t dest)
{
    int bits = c->av ? c->av->rx_ctx_bits : 0;
    return bits ? std::uint16_t(dest >> (64 - bits)) : 0;
}

/** The endpoint core a message for receive context @p index is reported on:
 *  the endpoint itself, or for a scalable endpoint that receive context if it
 *  is open and enabled (else the first enabled one; null if none). */
util::ep_core *rx_target(prov_ep *e, std::uint16_t index);

/** Endpoint hooks and tables (prov_ep.cpp). */
int ep_open(fid_domain *domain, info *info, fid_ep **ep, void *context);
/** Scalable endpoints (RDM): tx/rx contexts share the endpoint's transport. */
int sep_open(fid_domain *domain, info *info, fid_ep **sep, void *context);
/** Passive endpoints (cm.cpp). */
int pep_open(fid_fabric *fabric, info *info, fid_pep **pep, void *context);
extern const ops_cm msg_cm_ops;
/** Take over passive endpoint @p handle's address for MSG endpoint @p e
 *  (fi_endpoint(3): info->handle = a passive endpoint). The passive endpoint
 *  is no longer usable (listen: -FI_EOPBADSTATE) and only needs closing.
 *  @return 0; -FI_EINVAL not a vq passive endpoint of this fabric;
 *  -FI_EOPBADSTATE already taken or listening; -FI_ENOMEM. */
int pep_adopt(fid *handle, prov_ep *e);
/** Poll the adopted UD QP (CM replies). Lock held. */
void adopted_progress(prov_ep *e);
void adopted_destroy(adopted_ud *a);

/** Progress of one endpoint (rx.cpp): progress_as<true> takes its lock
 *  (a multi-threaded domain's endpoints), progress_as<false> has none to
 *  take; progress chooses by the endpoint. */
template <bool Locked>
void progress_as(util::ep_core *c);
void progress(util::ep_core *c);
/** Transmit hook (tx.cpp). */
ssize_t transmit(util::ep_core *c, const util::tx_req &r);
/** Fail a transmit that will never complete and free its entry. Lock held. */
void tx_abort(prov_ep *e, tx_entry *t, int err);
/** Transmit completion from a vq send CQ entry (tx.cpp). Lock held. */
void tx_complete(prov_ep *e, const vq::wc &w);
/** A fin or response for transmit @p id arrived (@p err: the peer's status,
 *  a positive code or 0). Lock held. */
void tx_fin(prov_ep *e, std::uint64_t id, int err);
/** The message and tagged tables with the fast inject (tx.cpp), [1] for a
 *  multi-threaded domain (its inject takes the endpoint's lock). */
extern const ops_msg msg_ops[2];
extern const ops_tagged tagged_ops[2];
/** The same for a scalable endpoint's transmit contexts (origin_of). */
extern const ops_msg ctx_msg_ops[2];
extern const ops_tagged ctx_tagged_ops[2];

/** Post a small control message answering the peer of @p c (fin, ack,
 *  response, nak) on the QP its requests arrive on (answer_slot), or queue
 *  it on the connection when the send queue is full: never dropped, but for
 *  a peer with more queued than it can have asked for (twice max_ctx x
 *  dev_limits::sq_depth), which takes none of them. Lock held. */
void ctl_send(prov_ep *e, conn *c, std::uint32_t imm, const void *bytes, std::size_t len);
/** ctl_send of a message that is not an answer (a hello, a note that
 *  follows our own RMA): on our own QP to the peer (ctl_slot), in order
 *  behind what we sent on it. Lock held. */
void ctl_send_own(prov_ep *e, conn *c, std::uint32_t imm, const void *bytes, std::size_t len);
/** Send the queued control messages of @p c. @return true when none is left. Lock held. */
bool ctl_flush(prov_ep *e, conn *c);
/** Drop the oldest @p n queued control messages of @p c (sent, or the
 *  connection is gone), keeping the endpoint's count of them. Lock held. */
void ctl_forget(prov_ep *e, conn *c, std::size_t n);
/** Put @p c on the pending list (idempotent). Lock held. */
void conn_pend(prov_ep *e, conn *c);

/** A received op of the stamped set (w_eager_ts, w_rts_ts,
 *  w_frag_first_ts): the one-way latency from its stamp, then the op it
 *  carries; any other op is ignored (stamp.cpp). Lock held. */
[[gnu::cold]] void rx_stamped(prov_ep *e, rc_slot &sl, hdr_word h, const std::uint8_t *p, std::size_t len);
/** Fragmented messages, receive side (frag.cpp). Lock held. */
void frag_rx(prov_ep *e, int slot, hdr_word h, const std::uint8_t *p, std::size_t len);
/** The kit's rx_fetch of a fragmented message. @return as ep_hooks::rx_fetch. */
int frag_match(prov_ep *e, util::rx_entry *en, const util::rx_fetch_req &r, frag_msg *fm);
/** An unexpected fragmented message was discarded. */
void frag_discard(prov_ep *e, frag_msg *fm);
/** The QP of a message in progress failed or closes: the message fails. */
void frag_fail(prov_ep *e, int slot, int err);
/** Release every fragmented message and staging buffer (endpoint close). */
void frag_destroy(prov_ep *e);

/** Receive-side operations (rx.cpp): a free one, from chunks made by
 *  rx_op_grow (the first at enable, more when that many are in flight). */
rx_op *rx_op_get(prov_ep *e);
/** One more chunk of free receive-side operations. @return false: no memory. */
bool rx_op_grow(prov_ep *e);
void rx_op_put(prov_ep *e, rx_op *o);
std::uint64_t rx_op_id(const rx_op *o);
rx_op *rx_op_from_id(prov_ep *e, std::uint64_t id);
/** Kit hooks (util::ep_hooks::rx_fetch / rx_discard). */
int fetch_hook(util::ep_core *c, util::rx_entry *e, const util::rx_fetch_req &r);
void discard_hook(util::ep_core *c, const void *desc, std::size_t desc_len);
/** Post the vq RDMA requests of one pull or push between the peer's buffer
 *  (@p remote) and local iovs; the last one is signaled with @p wr_id.
 *  @return 0; a vq error (nothing posted). Lock held. */
int rdma_move(prov_ep *e, conn *c, bool read, const rndv_desc &remote, const iovec *iov, std::size_t count,
              std::size_t offset, std::size_t n, void **desc, mr_ref *mrs, std::uint32_t *nmrs, std::uint64_t wr_id);
/** Post the vq RDMA of @p o (kind, c, peer_id and the move's fields set;
 *  its receive or region as its kind says): now, or from progress once the
 *  send queue has room, behind the moves already waiting on its connection.
 *  A peer has at most its transmit entries outstanding (max_ctx contexts of
 *  at most dev_limits::sq_depth each), so no more than that many wait:
 *  beyond, a peer that asks without taking what it gets has its request
 *  fail.
 *  @return 0 posted or waiting; else the error (-FI_EAGAIN: too many
 *  waiting), and @p o is the caller's. Lock held. */
int move_start(prov_ep *e, rx_op *o);
/** Progress: post the moves waiting on @p c, in order, as far as the send
 *  queue takes them; one that fails ends with its error. @return true when
 *  none waits. Lock held. */
bool moves_flush(prov_ep *e, conn *c);
/** A target-executed RMA request arrived (rma.cpp). Lock held. */
void rma_request(prov_ep *e, conn *c, hdr_word h, const std::uint8_t *p, std::size_t len);
/** The cm_msg flags of @p e's REQ and REP (cm_f_rma_event, cm_f_one_way),
 *  and its clock with cm_f_one_way. */
void cm_sign(const prov_ep *e, cm_msg &m);
/** The flags of @p m, cm_f_one_way cleared unless its clock is this process's. */
std::uint32_t cm_peer_flags(const cm_msg &m);
/** Connection @p c of @p e is up with a peer whose REQ or REP said
 *  @p flags (cm_peer_flags): what it counts and whether it is stamped. */
void conn_agree(prov_ep *e, conn *c, std::uint32_t flags);
/** Initiator side of RMA and atomics (rma.cpp). Lock held. */
ssize_t rma(prov_ep *e, util::ep_core *core, const util::tx_req &r);
ssize_t atomic_op(prov_ep *e, util::ep_core *core, const util::tx_req &r);
/** An rx_op's RDMA finished (rma.cpp for RMA kinds, rx.cpp for receives). Lock held. */
void rx_op_done(prov_ep *e, rx_op *o, vq::wc_status st);
/** An rx_op ends with positive error @p err (0: success): its receive or
 *  request completes, the peer is told, the op is freed. Lock held. */
void rx_op_end(prov_ep *e, rx_op *o, int err);

/** Transmit entries (tx.cpp). Lock held. */
tx_entry *tx_get(prov_ep *e);
void tx_put(prov_ep *e, tx_entry *t);
std::uint64_t tx_id(prov_ep *e, tx_entry *t);
tx_entry *tx_from_id(prov_ep *e, std::uint64_t id);
/** A transmit entry for @p r of @p core on @p c, reported with @p cqf;
 *  null when none is free. Lock held. */
inline tx_entry *new_tx(prov_ep *e, util::ep_core *core, const util::tx_req &r, conn *c, std::uint64_t cqf)
{
    tx_entry *t = tx_get(e);
    if (!t) [[unlikely]]
        return nullptr;
    t->context = r.context;
    t->owner = core;
    t->flags = r.flags;
    t->cq_flags = cqf;
    t->len = r.len;
    t->c = c;
    t->posted = env::stats::stamp(e->io);
    return t;
}
/** A send or tagged send on stamped connection @p c (tx.cpp).
 *  @return 1 posted (the call returns 0); the error. */
[[gnu::cold]] int send_stamped(prov_ep *e, util::ep_core *core, const util::tx_req &r, conn *c);
/** conn_ready when @p c is null, not connected or stamped (conn.cpp). */
[[gnu::cold]] int conn_not_ready(prov_ep *e, conn *c, util::ep_core *core, const util::tx_req &r);
/** A connection ready for a new operation @p r of @p core: 0 post it now;
 *  1 it was queued until the connection is up (the call returns 0);
 *  or the code to return (-FI_EAGAIN: the queue is full). */
inline int conn_ready(prov_ep *e, conn *c, util::ep_core *core, const util::tx_req &r)
{
    if (c && c->state == conn::connected) [[likely]]
        return 0;
    return conn_not_ready(e, c, core, r);
}
/** Start an operation (under the endpoint's lock). */
ssize_t tx_dispatch(prov_ep *e, util::ep_core *core, const util::tx_req &r);
conn *conn_of(prov_ep *e, const util::tx_req &r);
/** Post a send_imm of gathered pieces on @p c (signaled with @p wr_id when
 *  @p signaled, or every signal_every-th one to reclaim queue slots).
 *  @return 0 or the vq error. Lock held. */
int post_imm(prov_ep *e, conn *c, std::uint32_t imm, const vq::data_buf *bufs, std::size_t n, bool signaled,
             std::uint64_t wr_id);
/** The same on slot @p s. */
int post_imm_on(prov_ep *e, int s, std::uint32_t imm, const vq::data_buf *bufs, std::size_t n, bool signaled,
                std::uint64_t wr_id);

/** The QP accepted from the peer of @p c (its messages arrive there), while
 *  it is live and still the peer's; -1: none. */
inline int accepted_slot(const prov_ep *e, const conn *c)
{
    const int s = c->acc_slot;
    if (s >= 0 && std::size_t(s) < e->slots.size() && e->slots[std::size_t(s)].qp &&
        !e->slots[std::size_t(s)].retired && e->slots[std::size_t(s)].c == c)
        return s;
    return -1;
}

/** Where control messages (fins) and rendezvous reads for @p c go: its own
 *  QP once up; while that is being set up, the QP accepted from the peer
 *  (connected, since the peer's messages arrive on it: a rendezvous that
 *  comes in during a simultaneous connect is pulled and answered at once,
 *  outside the order of our messages, which neither needs). -1: neither. */
inline int ctl_slot(const prov_ep *e, const conn *c)
{
    // A shut-down MSG connection keeps its QP until the endpoint closes:
    // what was in flight still completes over it (no new operations).
    if ((qp_up(c) || c->shut) && c->slot >= 0)
        return c->slot;
    return accepted_slot(e, c);
}

/** The QP an answer to the peer of @p c goes back on: the one its requests
 *  arrive on (the QP accepted from it), as an RC responder answers on the
 *  QP a request came on. When both sides connected at once there are two
 *  QP pairs, and our own may fail (a request of ours the peer refused puts
 *  it in error) while the peer waits for an answer to a request of its own:
 *  the answer must not be lost with our QP. Else ctl_slot. */
inline int answer_slot(const prov_ep *e, const conn *c)
{
    const int s = accepted_slot(e, c);
    return s >= 0 ? s : ctl_slot(e, c);
}

/** A connection's QP failed: RDM forgets it (the next send reconnects),
 *  MSG marks the connection failed; operations waiting on the peer fail.
 *  Lock held. */
void conn_broken(prov_ep *e, conn *c);
/** Connections (conn.cpp). Lock held. */
conn *conn_for(prov_ep *e, util::av_entry *peer);
int conn_start(prov_ep *e, conn *c);
/** RDM, @p c not connected: start connecting if idle and queue @p r behind
 *  what waits. @return 1 queued; -FI_EAGAIN queue full; another error
 *  (the connection cannot even be started). */
int conn_wait(prov_ep *e, conn *c, util::ep_core *core, const util::tx_req &r);
/** Start the operations queued on @p c (its QP is up); stops at a full send
 *  queue (progress goes on). Lock held. */
void conn_drain(prov_ep *e, conn *c);
/** Fail the operations queued on @p c with error completions (@p err). */
void conn_fail_queued(prov_ep *e, conn *c, int err);
/** Queue storage of an RDM endpoint (set-up). @return 0; -FI_ENOMEM. */
int txq_setup(prov_ep *e, std::size_t entries, std::size_t data_size);
/** A transmit context closes: its queued operations are dropped silently. */
void txq_forget(prov_ep *e, util::ep_core *owner);
void cm_handle(prov_ep *e, const cm_msg &m);
/** The half-open connection on @p sl is finished (or given up). */
void half_done(prov_ep *e, rc_slot &sl);
/** RDM: free the QPs of accepted connections whose requester did not
 *  finish them within SHUNT_VQ_CONNECT_TIMEOUT_MS (progress, lock held). */
void half_open_expire(prov_ep *e);
/** Whether @p e has a slot slot_open can take (no QP yet, or the spare). */
bool slot_free(const prov_ep *e);
/** Whether an RC QP of @p e could connect to QP @p peer_qpn at @p peer, as
 *  far as the driver tells before a QP exists (vq::check_dest_qp): false
 *  only when it could not. */
bool dest_qp_ok(const prov_ep *e, const ep_addr &peer, std::uint32_t peer_qpn);
/** A slot with an RC QP for a connection to @p peer (QP @p peer_qpn,
 *  connected to it when @p connect_now): the spare if there is one. */
int slot_open(prov_ep *e, const ep_addr &peer, std::uint32_t peer_qpn, bool connect_now, int &slot_out);
/** RDM: the spare, a slot whose QP is made before any connection needs it
 *  (at enable), so that the first connection, on either side, does not
 *  wait for a QP's creation; not made again once taken. */
void slot_prepare(prov_ep *e);
void slot_close(prov_ep *e, int slot);
/** A failed connection's slot: its QP goes to ERR, and the slot is closed
 *  (free for a new connection) once everything posted on it has come back. */
void slot_retire(prov_ep *e, int slot);
/** The wr_id of retired slot @p slot's marker, and whether @p id is one. */
inline std::uint64_t drain_id(int slot, std::uint32_t qpn)
{
    return (std::uint64_t(3) << 61) | (std::uint64_t(std::uint32_t(slot)) << 32) | qpn;
}
inline bool is_drain_id(std::uint64_t id) { return (id >> 61) == 3; }
/** The wr_id of an operation reported complete when posted (an inject, or
 *  FI_INJECT_COMPLETE), which asks for no completion: top bits 101, the
 *  kind in the low bits, posted_signaled when the send queue's reclaiming
 *  signals it anyway, and in bits 16-23 its origin (origin_of). Its error
 *  or flush completion (a connection that broke before it was delivered)
 *  is reported late (util::tx_fail_after_done), on the endpoint or context
 *  that posted it: the operation was counted already. */
enum posted_kind : std::uint64_t { posted_send = 0, posted_write = 1, posted_atomic = 2 };
inline constexpr std::uint64_t posted_base = std::uint64_t(5) << 61;
inline constexpr std::uint64_t posted_signaled = std::uint64_t(1) << 8;
inline constexpr std::uint64_t posted_id(posted_kind k, std::uint64_t origin = 0)
{
    return posted_base | k | origin << 16;
}
inline bool is_posted_id(std::uint64_t id) { return (id >> 61) == 5; }
inline std::uint64_t posted_origin(std::uint64_t id) { return (id >> 16) & 0xff; }
/** Where an operation that completes when posted comes from: 0 the
 *  endpoint itself, i + 1 transmit context i of a scalable endpoint. */
inline std::uint64_t origin_of(const util::ep_core *c) { return c->sep ? std::uint64_t(c->ctx_index) + 1 : 0; }
/** The endpoint or context of @p origin (the endpoint when that context
 *  is gone), where a late failure is reported. */
util::ep_core *origin_core(prov_ep *e, std::uint64_t origin);
/** The id an RMA write or atomic that completes when posted carries to the
 *  target, which echoes it in the fin of a failure: all ones but the low
 *  byte, its origin. */
inline constexpr std::uint64_t late_id(std::uint64_t origin) { return ~std::uint64_t(0) << 8 | origin; }
inline bool is_late_id(std::uint64_t id) { return (id >> 8) == (~std::uint64_t(0) >> 8); }
/** The marker @p id of a retired slot came back from QP @p qpn: close it. */
void slot_drained(prov_ep *e, std::uint64_t id, std::uint32_t qpn);
/** Post the markers that found the send queue full (e->undrained). */
void slots_drain_retry(prov_ep *e);
int slot_connect(prov_ep *e, int slot, const ep_addr &peer, std::uint32_t peer_qpn);
int ud_send(prov_ep *e, vq::ah *ah, std::uint32_t qpn, const void *buf, std::size_t len);
vq::ah *ah_for(prov_ep *e, const ep_addr &a);
/** AV hooks: on a host-local device, an inserted address's peer is
 *  reached (its memory attached) at the insert, for the first
 *  SHUNT_VQ_AV_ATTACH addresses of the domain; av_detach lets it go. */
int av_attach(util::domain_obj *d, util::av_entry *a);
/** After the insert of @p a: each enabled RDM endpoint bound to @p av
 *  answers the connection requests waiting for it, then starts connecting
 *  to the peer if @p a is attached (its process is there) and the endpoint
 *  has SHUNT_VQ_AV_CONNECT connections of this kind left; so that neither
 *  the request nor its acceptance falls on the first operation. */
void av_inserted(util::domain_obj *d, util::av_obj *av, util::av_entry *a);
/** Endpoint @p e (RDM, enabled) joins / leaves its domain's list for
 *  av_inserted. */
void eager_join(prov_ep *e);
void eager_leave(prov_ep *e);
/** Fewer than half of @p e's QP slots taken (the spare not counted): an
 *  eager request (cm_f_eager) may be accepted. */
bool eager_room(const prov_ep *e);
/** RDM: answer the connection requests and replies waiting on the UD QP
 *  (rx.cpp). Lock held, progress_scope in place. */
void cm_poll(prov_ep *e);
void av_detach(util::domain_obj *d, util::av_entry *a);
fi_addr_t conn_src(prov_ep *e, conn *c);

/** Address helpers (addr.cpp). */
std::string addr_key(const ep_addr &a);
vq::dev_addr to_dev(const ep_addr &a);

/** shunt_mem (mem.cpp): the domain extension and the test for key_direct. */
int mem_ops_open(util::domain_obj *d, const char *name, void **ops);
bool mem_is_shared(prov_domain *d, const void *addr, std::size_t len);

inline prov_ep *ep_of(util::ep_core *c) { return static_cast<prov_ep *>(c->prov); }

/** 8-byte words of a transmit entry's registered scratch line: the header
 *  of a send from the user's buffers (fields, a fragment's length, a
 *  stamp: at most 36 bytes), an atomic's old value. */
inline constexpr std::size_t scratch_words = 6;
inline std::uint64_t *scratch_of(prov_ep *e, const tx_entry *t)
{
    return &e->scratch[scratch_words * std::size_t(t - e->tx.data())];
}

/** vq::wr_complete of a batch of @p e, noting a full send queue (tx_unpolled). */
[[nodiscard]] inline int wr_finish(prov_ep *e, vq::qp *q)
{
    int rc = vq::wr_complete(q);
    if (rc == -FI_EAGAIN) [[unlikely]]
        e->tx_unpolled = true;
    return rc;
}
inline prov_domain *dom_of(util::domain_obj *d) { return static_cast<prov_domain *>(d); }

/** Map a vq completion status to a positive fabric error code (a flushed
 *  request: FI_ECONNRESET, its connection failed). */
int wc_to_err(vq::wc_status s);

} // namespace shunt::prov::vqprov
