/* The vq provider (private): endpoints of lib/fabric over lib/vq queues.
 *
 * RDM: each endpoint owns a UD QP (its address: segment name + UD QP number)
 * used only for connection management, and one RC QP per peer, created on
 * the first send to that peer (REQ/REP over UD, invisible to the user; the
 * send returns -FI_EAGAIN until the connection is up). Every message is
 * copied inline into the peer's ring (vq's inline data): a message up to
 * frag_max bytes is one send; larger ones are cut into fragments that the
 * receiver reassembles. Receives land in per-QP bounce buffers and are
 * matched by the shared endpoint base (util::rx_deliver). RMA and atomics
 * are vq RDMA and atomics on the peer's registered memory (keys are vq
 * rkeys: FI_MR_PROV_KEY | FI_MR_VIRT_ADDR).
 * DGRAM: the UD QP carries the data. MSG: one RC QP set up through a
 * passive endpoint's UD QP (CONNREQ / accept / reject / shutdown). */
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "env/log.h"
#include "fabric/api.h"
#include "fabric/ext_tso.h"
#include "fabric/util/ep.h"
#include "fabric/util/mr.h"
#include "vq/vq.h"

namespace shunt::prov::vqprov {

using namespace ::shunt::fabric; // the API and kit this provider implements
namespace vq = ::shunt::vq;

/** The provider's logging component (SHUNT_LOG_LEVEL=fabric:...). */
extern env::log::component prov_log;

/** Address of an endpoint (addr_format FI_FORMAT_UNSPEC: opaque binary, 64
 *  bytes): its device context's address and its UD QP. */
struct ep_addr {
    std::uint32_t qpn;    ///< the endpoint's UD QP
    std::uint8_t len;     ///< bytes of name
    char name[59];        ///< vq context address (context::addr; shm: the segment name)
};
static_assert(sizeof(ep_addr) == 64);

// The provider's own choices. Every limit of the device comes from its
// device_attr (dev_limits below), never from a copy of a driver's constant.
inline constexpr std::uint32_t hdr_max = 32;                 ///< largest wire header of an RC message
inline constexpr std::uint32_t stage_keep = 64 * 1024;       ///< largest staging buffer kept per RC QP
inline constexpr std::uint32_t cm_data_max = 128;            ///< CM data of connect/accept/reject
inline constexpr std::size_t max_ctx = 16;                   ///< tx / rx contexts per scalable endpoint
inline constexpr std::uint32_t qkey = 0x5348;                ///< "SH"
inline constexpr std::size_t max_msg = std::size_t(64) << 20; ///< largest message (reassembled by the receiver)
inline constexpr std::size_t iov_max = 4;                    ///< iov_limit of sends and receives
inline constexpr std::uint32_t tso_segments_max = 64;        ///< TSO extension: segments per send
/** Header of a DGRAM message (dgram.cpp): op, flags, padding, the sender's
 *  address; a tag and remote CQ data follow when present. */
inline constexpr std::uint32_t dgram_hdr_size = 8 + sizeof(ep_addr);
inline constexpr std::uint32_t dgram_hdr_max = dgram_hdr_size + 16;

/** What the provider uses of one vq device, derived from its device_attr by
 *  limits_of(): each is the provider's wish bounded by the device. */
struct dev_limits {
    std::uint32_t inline_max = 0;  ///< bytes one send carries inline (max_inline_data): one bounce buffer
    std::uint32_t frag_max = 0;    ///< RC payload per send: inline_max - hdr_max (larger messages fragment)
    std::uint32_t dgram_max = 0;   ///< DGRAM message: inline_max - the datagram header
    std::uint32_t sq_depth = 0;    ///< send queue entries per QP (wish 1024)
    std::uint32_t rq_depth = 0;    ///< bounce buffers per RC QP (wish 128)
    std::uint32_t ud_depth = 0;    ///< receives posted on the UD QP (wish 64)
    std::uint32_t ud_buf = 0;      ///< a UD receive buffer of an RDM / MSG endpoint (CM messages)
    std::uint32_t dgram_buf = 0;   ///< a UD receive buffer of a DGRAM endpoint: the UD MTU
    std::uint32_t send_sge = 0;    ///< gather entries per send (wish iov_max)
    std::uint32_t max_conns = 0;   ///< RC QPs (connections) per endpoint (wish 63; its receive CQ must hold them)
    std::uint32_t scq_depth = 0;   ///< send CQ entries per endpoint (wish 4096)
    std::uint32_t rcq_depth = 0;   ///< receive CQ entries: every bounce buffer, the UD receives, and slack
    std::uint32_t ep_cnt = 0;      ///< endpoints per domain (wish 256)
    std::uint32_t mr_cnt = 0;      ///< memory regions per domain (max_mr)
    std::uint32_t tso_hdr_max = 0; ///< TSO extension: the application's header (0: no TSO)
    std::uint32_t tso_mss_max = 0; ///< TSO extension: largest MSS
    bool host_local = false;       ///< peers only on this host (shared memory)
};

/** Derive the provider's limits on a device.
 *  @return 0; -FI_ENODATA the device cannot carry this provider's protocol
 *  (no RC/UD send, inline data below a CM message, ...). */
[[nodiscard]] int limits_of(const vq::device_attr &a, dev_limits &out);

/** The device attributes of @p dev, queried once per process (getinfo and
 *  every domain read them; opening a device context costs a segment).
 *  @return 0 and *out; the device's open/query error. */
[[nodiscard]] int device_attr_of(vq::device *dev, vq::device_attr &out);

/** The device a domain name names; null: the first device of driver
 *  @p fabric (any driver when null) when @p domain is null or empty. */
vq::device *device_named(const char *fabric, const char *domain);

/** Wire header of an RC message (before the payload). */
enum : std::uint8_t { w_msg = 1, w_tagged = 2, w_frag = 3, w_ack = 4, w_shutdown = 5 };
enum : std::uint8_t { wf_data = 1, wf_more = 2, wf_ack = 4 };
struct wire_hdr {
    std::uint8_t op;
    std::uint8_t flags;
    std::uint16_t pad;    ///< w_msg / w_tagged: receive context of a scalable target (FI_NAMED_RX_CTX)
    std::uint32_t total;  ///< message bytes (all fragments)
};
static_assert(sizeof(wire_hdr) == 8);

/** CM messages (UD). */
enum : std::uint8_t { cm_req = 1, cm_rep = 2, cm_rej = 3, cm_rtu = 4 };
struct cm_msg {
    std::uint8_t op;
    std::uint8_t ep_type;
    std::uint16_t datalen;
    std::uint32_t req_qpn;   ///< requester's RC QP
    std::uint32_t rep_qpn;   ///< responder's RC QP (REP)
    std::uint32_t pad;
    ep_addr from;           ///< sender's endpoint address
    /** MSG REQ: the segment of the sender's RC QPs when it differs from
     *  from's (an endpoint that took over a passive endpoint's address);
     *  len 0 otherwise. */
    ep_addr rc_at;
    std::uint8_t data[cm_data_max];
};

struct prov_domain;
struct prov_ep;

/** One RC QP of an endpoint with its bounce buffers. */
struct rc_slot {
    vq::qp *qp = nullptr;
    struct conn *c = nullptr;
    std::uint8_t *bounce = nullptr;   ///< rq_depth * bounce_size
    vq::mr *bounce_mr = nullptr;
    std::uint32_t accepted_from = 0;  ///< requester's QP when we accepted (REQ retries)
    bool retired = false;             ///< failed QP kept until the endpoint closes
    // reassembly of a fragmented message; the staging buffer is kept for the
    // next one when it is at most stage_keep bytes (no allocation per message)
    std::uint8_t *stage = nullptr;
    std::uint32_t stage_cap = 0;      ///< bytes of stage
    bool staging = false;             ///< a fragmented message is being reassembled
    bool stage_ok = false;            ///< ... and stage holds it (false: allocation failed, dropped)
    std::uint32_t stage_total = 0, stage_got = 0;
    std::uint8_t stage_op = 0, stage_flags = 0;
    std::uint64_t stage_tag = 0, stage_data = 0, stage_ack = 0;
    std::uint16_t stage_rx = 0;       ///< receive context index of the staged message
};

struct tx_entry;

/** A peer as seen by one endpoint. */
struct conn {
    enum state_t : std::uint8_t { idle, connecting, connected, failed } state = idle;
    ep_addr peer{};
    int slot = -1;                ///< rc_slot used to send to this peer
    vq::ah *ah = nullptr;         ///< to the peer's UD QP
    tx_entry *active = nullptr;   ///< fragmented send in progress (FIFO head)
    fi_addr_t src = FI_ADDR_NOTAVAIL; ///< this peer in the endpoint's AV
    std::size_t src_av_count = 0; ///< AV size when src was last looked up
    std::uint64_t req_sent_ns = 0;
    std::uint32_t req_qpn = 0;    ///< our QP the REQ announced (connecting)
    int dead_slot = -1;           ///< QP that failed, closed by progress
    // MSG endpoints
    bool shut = false;
};

/** An outstanding transmit. */
struct tx_entry {
    tx_entry *next = nullptr;
    util::ep_core *owner = nullptr; ///< endpoint or transmit context that posted it (its CQ, counters)
    void *context = nullptr;
    std::uint64_t flags = 0;      ///< op flags (FI_COMPLETION...)
    std::uint64_t cq_flags = 0;   ///< FI_SEND|FI_MSG, FI_RMA|FI_WRITE...
    std::size_t len = 0;
    conn *c = nullptr;
    // fragmented sends
    iovec iov[4];
    std::size_t iov_count = 0, off = 0;
    wire_hdr hdr{};
    std::uint64_t tag = 0, data = 0;
    bool failed = false;
    bool want_ack = false;
    bool acked = false, wc_done = false;
    // RMA / atomics
    vq::mr *tmp_mr = nullptr;
    void *result = nullptr;       ///< atomics: user result buffer
    std::uint64_t scratch_off = 0;
    std::uint32_t gen = 0;
};

struct prov_domain : util::domain_obj {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::td *td = nullptr;         ///< FI_THREAD_DOMAIN + manual progress: lock-free queues
    vq::device_attr dattr{};
    dev_limits lim{};             ///< from dattr
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
    ep_addr own{};               ///< the endpoint's own UD address (its RC QPs' segment)
    struct service_binding *svc = nullptr; ///< the passive endpoint's service, now the endpoint's (addr.h)
    const struct addr_resolver *res = nullptr; ///< what unbinds it
};

/** The provider state of an endpoint (util::ep_core::prov). */
struct prov_ep {
    util::ep_core *core = nullptr;
    prov_domain *dom = nullptr;
    vq::cq *scq = nullptr, *rcq = nullptr;
    vq::qp *ud = nullptr;
    std::uint8_t *ud_bufs = nullptr;
    vq::mr *ud_mr = nullptr;
    std::vector<std::uint8_t> ud_mem;
    ep_addr addr{};
    util::maybe_lock lock;        ///< provider state when the domain is multi-threaded
    std::vector<rc_slot> slots;   ///< dom->lim.max_conns RC QPs, sized at creation (never moves)
    // peers by AV index (chunks never move) and by address
    std::vector<conn *> by_index;
    std::unordered_map<std::string, conn *> by_addr;
    std::vector<conn *> all;
    // transmit entries
    std::vector<tx_entry> tx;
    tx_entry *tx_free = nullptr;
    std::uint64_t *scratch = nullptr; ///< 8 bytes per tx entry, registered (atomics)
    vq::mr *scratch_mr = nullptr;
    int progress_handle = 0;      ///< auto progress poller, 0 if none
    bool msg_type = false;        ///< FI_EP_MSG
    conn *msg_conn = nullptr;     ///< FI_EP_MSG: the connection
    bool dgram = false;
    bool scalable = false;        ///< core is a scalable endpoint: receives go to its rx contexts
    adopted_ud *pep_ud = nullptr; ///< MSG: a passive endpoint's address taken over (its CM replies arrive there)
    std::vector<std::uint8_t> tso_hdr; ///< DGRAM: our datagram header + the application's, for send_tso
    struct service_binding *svc = nullptr; ///< the service its source address names, bound to addr (addr.h)
};

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

/** Progress of one endpoint (rx.cpp). */
void progress(util::ep_core *c);
/** Transmit hook (tx.cpp). */
ssize_t transmit(util::ep_core *c, const util::tx_req &r);
/** Resume fragmented sends (tx.cpp). Lock held. */
void tx_resume(prov_ep *e, conn *c);
/** Fail a transmit that will never complete and free its entry. Lock held. */
void tx_abort(prov_ep *e, tx_entry *t, int err);
/** Transmit completion from a vq send CQ entry (tx.cpp). Lock held. */
void tx_complete(prov_ep *e, const vq::wc &w);
/** An ack for a delivery-complete send arrived (tx.cpp). Lock held. */
void tx_acked(prov_ep *e, std::uint64_t id);
/** Fast inject ops (tx.cpp). */
extern const ops_msg msg_ops;
extern const ops_tagged tagged_ops;

/** A connection's QP failed: RDM forgets it (the next send reconnects),
 *  MSG marks the connection failed. Lock held. */
void conn_broken(prov_ep *e, conn *c);
/** Connections (conn.cpp). Lock held. */
conn *conn_for(prov_ep *e, util::av_entry *peer);
int conn_start(prov_ep *e, conn *c);
void cm_handle(prov_ep *e, const cm_msg &m);
int slot_open(prov_ep *e, const ep_addr &peer, std::uint32_t peer_qpn, bool connect_now, int &slot_out);
void slot_close(prov_ep *e, int slot);
void slot_retire(prov_ep *e, int slot);
int slot_connect(prov_ep *e, int slot, const ep_addr &peer, std::uint32_t peer_qpn);
int ud_send(prov_ep *e, vq::ah *ah, std::uint32_t qpn, const void *buf, std::size_t len);
vq::ah *ah_for(prov_ep *e, const ep_addr &a);
fi_addr_t conn_src(prov_ep *e, conn *c);

/** Address helpers (addr.cpp). */
std::string addr_key(const ep_addr &a);
vq::dev_addr to_dev(const ep_addr &a);

inline prov_ep *ep_of(util::ep_core *c) { return static_cast<prov_ep *>(c->prov); }
inline prov_domain *dom_of(util::domain_obj *d) { return static_cast<prov_domain *>(d); }

/** Map a vq completion status to a positive fabric error code. */
int wc_to_err(vq::wc_status s);

} // namespace shunt::prov::vqprov
