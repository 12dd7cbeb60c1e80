// The vq provider: record, getinfo offers, fabric and domain over a vq
// device context, address/MR/atomic hooks of the generic domain.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "env/errors.h"
#include "env/log.h"
#include "env/tunable.h"
#include "fabric/util/atomic_apply.h"
#include "fabric/util/info.h"
#include "addr.h"
#include "prov.h"

extern const ::shunt::fabric::provider shunt_fabric_provider_vq;

namespace shunt::prov::vqprov {

SHUNT_LOG_COMPONENT(prov_log, "fabric");

SHUNT_TUNABLE(single_host_tunable, "SHUNT_VQ_SINGLE_HOST", boolean, "0",
              "every peer is on this host: host-local devices (shm) report FI_REMOTE_COMM too, for applications "
              "that demand it (Open MPI's OFI MTL); a peer on another host stays unreachable",
              "vq");
SHUNT_TUNABLE(t_rndv_bytes, "SHUNT_VQ_RNDV_BYTES", integer, "6144",
              "vq provider: messages from private memory of at least this many bytes are copied once by the "
              "receiver (rendezvous, cross-memory attach on shm); smaller ones go through the ring (two copies); "
              "0: never",
              "vq");
SHUNT_TUNABLE(t_rndv_shared_bytes, "SHUNT_VQ_RNDV_SHARED_BYTES", integer, "2048",
              "vq provider: messages from memory peers reach directly (shunt_mem) of at least this many bytes are "
              "copied once by the receiver (rendezvous, memcpy on shm); smaller ones go through the ring; unset: "
              "2048 on host-local devices (shm), 16384 on network devices (every buffer counts as reachable); 0: never",
              "vq");

namespace {

constexpr std::uint32_t prov_version = FI_VERSION(1, 0);

// SHUNT_VQ_SINGLE_HOST, read once.
bool single_host()
{
    static const bool on = [] {
        bool b = false;
        if (single_host_tunable.as_bool(b))
            SHUNT_LOG(prov_log, warning, "SHUNT_VQ_SINGLE_HOST=%s is not a boolean: ignored",
                      single_host_tunable.value().c_str());
        return b;
    }();
    return on;
}

info *offer(const vq::device *dev, const dev_limits &l, ep_type t)
{
    info *i = allocinfo();
    if (!i)
        return nullptr;
    i->caps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_MULTI_RECV | FI_DIRECTED_RECV | FI_SOURCE | FI_LOCAL_COMM;
    if (!l.host_local || single_host())
        i->caps |= FI_REMOTE_COMM;
    if (t != FI_EP_DGRAM)
        i->caps |= FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
                   FI_RMA_EVENT; // remote-access counters (rma.cpp): only when the hints ask for it
    if (t == FI_EP_RDM)
        i->caps |= FI_NAMED_RX_CTX; // receive contexts of scalable endpoints by fi_rx_addr
    // Addresses are a binary ep_addr (fi_getinfo(3): FI_FORMAT_UNSPEC is a
    // provider-specific format, opaque to the application), or their text
    // (FI_ADDR_STR, "fi_shm://<segment>/<qpn>", "fi_shm://<host>:<service>")
    // when the hints ask for it (addr.h).
    i->addr_format = FI_FORMAT_UNSPEC;
    i->ep_attr->type = t;
    // Shared memory, or IB transport semantics (RC and UD QPs) elsewhere.
    i->ep_attr->protocol = l.host_local             ? FI_PROTO_SHM
                           : t == FI_EP_RDM        ? FI_PROTO_RXM
                           : t == FI_EP_MSG        ? FI_PROTO_RDMA_CM_IB_RC
                                                   : FI_PROTO_IB_UD;
    i->ep_attr->protocol_version = 1;
    i->ep_attr->max_msg_size = t == FI_EP_DGRAM ? l.dgram_max : max_msg;
    i->ep_attr->mem_tag_format = ~0ULL;
    i->ep_attr->tx_ctx_cnt = 1;
    i->ep_attr->rx_ctx_cnt = 1;
    i->ep_attr->max_order_raw_size = max_msg;
    i->ep_attr->max_order_war_size = max_msg;
    i->ep_attr->max_order_waw_size = max_msg;
    domain_attr *d = i->domain_attr;
    d->name = ::strdup(dev->name);
    d->threading = FI_THREAD_SAFE;
    d->data_progress = FI_PROGRESS_MANUAL;
    d->control_progress = FI_PROGRESS_MANUAL;
    d->resource_mgmt = FI_RM_ENABLED;
    d->av_type = FI_AV_TABLE;
    d->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
    d->mr_key_size = 8;
    d->cq_data_size = 4;
    d->cq_cnt = 1024;
    d->ep_cnt = l.ep_cnt;
    d->cntr_cnt = 1024;
    d->mr_iov_limit = 1;
    d->max_ep_tx_ctx = t == FI_EP_RDM ? max_ctx : 1; // scalable endpoints: RDM
    d->max_ep_rx_ctx = t == FI_EP_RDM ? max_ctx : 1;
    // Every endpoint of the domain may have its contexts; an endpoint binds
    // at most one shared transmit and one shared receive context.
    d->tx_ctx_cnt = std::size_t(l.ep_cnt) * d->max_ep_tx_ctx;
    d->rx_ctx_cnt = std::size_t(l.ep_cnt) * d->max_ep_rx_ctx;
    d->max_ep_stx_ctx = 1;
    d->max_ep_srx_ctx = 1;
    d->caps = i->caps & FI_DOMAIN_CAPS;
    d->max_err_data = 0;
    d->mr_cnt = l.mr_cnt;
    i->fabric_attr->name = ::strdup(vq::device_driver_name(dev));
    tx_attr *tx = i->tx_attr;
    tx->inject_size = t == FI_EP_DGRAM ? l.dgram_inject : l.inject_max;
    tx->size = l.sq_depth;
    tx->iov_limit = iov_max;
    tx->rma_iov_limit = 1;
    tx->msg_order = FI_ORDER_SAS | FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_WAR | FI_ORDER_WAW | FI_ORDER_SAW |
                    FI_ORDER_SAR | FI_ORDER_RAS | FI_ORDER_WAS;
    rx_attr *rx = i->rx_attr;
    rx->size = 1024;
    rx->iov_limit = iov_max;
    rx->msg_order = tx->msg_order;
    if (t == FI_EP_DGRAM)
        tx->msg_order = rx->msg_order = FI_ORDER_SAS;
    if (!d->name || !i->fabric_attr->name) {
        freeinfo(i);
        return nullptr;
    }
    return i;
}

util::info_limits limits(ep_type t)
{
    util::info_limits l;
    l.threading_mask = (1u << FI_THREAD_SAFE) | (1u << FI_THREAD_DOMAIN) | (1u << FI_THREAD_COMPLETION) |
                       (1u << FI_THREAD_ENDPOINT) | (1u << FI_THREAD_FID);
    l.progress_mask = (1u << FI_PROGRESS_MANUAL) | (1u << FI_PROGRESS_AUTO);
    l.av_type_mask = (1u << FI_AV_TABLE) | (1u << FI_AV_MAP);
    l.mr_mode_required = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
    // FI_MR_BASIC's rules are those: provider keys, virtual addresses.
    // FI_MR_SCALABLE (keys the application picks, offsets) cannot name a vq
    // region for RMA; a DGRAM endpoint has no RMA, so it follows either.
    l.mr_mode_legacy = FI_MR_BASIC | (t == FI_EP_DGRAM ? FI_MR_SCALABLE : 0);
    l.op_flags = FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
    l.shared_ctx = true;
    l.addr_formats = 1ULL << FI_ADDR_STR;
    return l;
}

// One answer per device and endpoint type; the domain name is the device,
// the fabric name its driver (devices of one driver reach each other).
int vq_getinfo(std::uint32_t version, const char *node, const char *service, std::uint64_t flags,
               const info *hints, info **out)
{
    if ((flags & FI_SOURCE) && !node && !service)
        return -FI_EINVAL; // fi_getinfo(3): FI_SOURCE names the source in node and/or service
    std::vector<vq::device *> devs;
    vq::get_device_list(devs);
    info *head = nullptr, **tail = &head;
    // The names resolve once per kind of device (host-local or not).
    info_addrs addrs[2];
    int addrs_rc[2] = {1, 1};
    for (vq::device *dev : devs) {
        vq::device_attr a;
        dev_limits l;
        if (device_attr_of(dev, a) || limits_of(a, l))
            continue; // logged; the device cannot serve this provider
        const addr_resolver &res = resolver_for(l.host_local);
        int &arc = addrs_rc[l.host_local];
        if (arc == 1)
            arc = resolve_info_addrs(res, node, service, flags, addrs[l.host_local]);
        if (arc == -FI_EINVAL) {
            freeinfo(head);
            return arc;
        }
        if (arc)
            continue; // the node names nothing this device reaches
        for (ep_type t : {FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM}) {
            info *o = offer(dev, l, t);
            if (!o) {
                freeinfo(head);
                return -FI_ENOMEM;
            }
            info *r = nullptr;
            int rc = util::match(version, o, limits(t), hints, &r);
            freeinfo(o);
            if (rc == 0 && (rc = fill_info_addrs(res, addrs[l.host_local], r))) {
                freeinfo(r);
                r = nullptr;
            }
            if (rc == -FI_EINVAL || rc == -FI_ENOMEM) {
                freeinfo(head);
                return rc;
            }
            if (rc == 0) {
                *tail = r;
                tail = &r->next;
            }
        }
    }
    if (!head)
        return -FI_ENODATA;
    *out = head;
    return 0;
}

// ---- domain hooks ----

int mr_reg_hook(util::domain_obj *d, util::mr_obj *m)
{
    prov_domain *sd = dom_of(d);
    if (m->iov.size() != 1 || !m->iov[0].iov_len)
        return m->iov.size() > 1 ? -FI_EINVAL : 0;
    unsigned acc = vq::ACCESS_LOCAL_WRITE;
    if (m->access & FI_REMOTE_WRITE)
        acc |= vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_ATOMIC;
    if (m->access & FI_REMOTE_READ)
        acc |= vq::ACCESS_REMOTE_READ;
    vq::mr *vm = nullptr;
    int rc = vq::reg_mr(sd->pd, m->iov[0].iov_base, m->iov[0].iov_len, acc, &vm);
    if (rc)
        return rc;
    m->prov = vm;
    // Keys are the vq rkeys (what the initiator hands to vq); local-only
    // regions get a key outside the 32-bit rkey space. key_direct: peers
    // reach the memory without a system call (a shunt_mem buffer on a
    // host-local device; any region of a device with RDMA in hardware), so
    // RMA into it is vq RDMA; else the owner's progress executes it.
    bool direct = !sd->lim.host_local || mem_is_shared(sd, m->iov[0].iov_base, m->iov[0].iov_len);
    m->key = vm->rkey ? (vm->rkey | (direct ? key_direct : 0)) : (key_local_only | vm->lkey);
    return 0;
}

void mr_dereg_hook(util::domain_obj *, util::mr_obj *m)
{
    if (m->prov)
        (void)vq::dereg_mr(static_cast<vq::mr *>(m->prov));
    m->prov = nullptr;
}

int query_atomic_hook(util::domain_obj *, datatype dt, op o, atomic_attr *attr, std::uint64_t flags)
{
    // vq offers 64-bit compare-and-swap and fetch-and-add on one element.
    if (dt != FI_UINT64 && dt != FI_INT64)
        return -FI_EOPNOTSUPP;
    bool ok = (flags & FI_COMPARE_ATOMIC) ? o == FI_CSWAP
              : (flags & FI_FETCH_ATOMIC) ? (o == FI_SUM || o == FI_ATOMIC_READ)
                                          : o == FI_SUM;
    if (!ok)
        return -FI_EOPNOTSUPP;
    if (attr) {
        attr->count = 1;
        attr->size = 8;
    }
    return 0;
}

void domain_close_hook(util::domain_obj *d)
{
    prov_domain *sd = dom_of(d);
    for (mr_cache::entry &en : sd->mrc.v)
        if (en.mr)
            (void)vq::dereg_mr(en.mr);
    sd->mrc.v.clear();
    if (sd->td)
        (void)vq::dealloc_td(sd->td);
    if (sd->pd)
        (void)vq::dealloc_pd(sd->pd);
    if (sd->ctx)
        (void)vq::close_device(sd->ctx);
}

const util::domain_hooks hooks = [] {
    util::domain_hooks h;
    h.addrlen = sizeof(ep_addr);
    h.addr_check = addr_check;
    h.addr_resolve = addr_resolve_hook;
    h.addr_from_str = addr_from_str_hook;
    h.addr_from_names = addr_from_names_hook;
    h.addr_to_text = addr_to_text_hook;
    h.query_atomic = query_atomic_hook;
    h.mr_reg = mr_reg_hook;
    h.mr_dereg = mr_dereg_hook;
    h.av_insert = av_attach;
    h.av_remove = av_detach;
    h.av_inserted = av_inserted;
    h.close = domain_close_hook;
    h.ops_open = mem_ops_open;
    return h;
}();

const ops_domain domain_ops = [] {
    ops_domain o = util::default_domain_ops();
    o.endpoint = ep_open;
    o.scalable_ep = sep_open;
    // Shared contexts are the base's (default_domain_ops): a shared receive
    // context's queue is matched by every endpoint bound to it; a shared
    // transmit context is accepted, each endpoint still sends on its own QPs.
    return o;
}();

int domain_open_op(fid_fabric *fabric, info *in, fid_domain **out, void *context)
{
    if (!in || !out)
        return -FI_EINVAL;
    auto *d = new (std::nothrow) prov_domain;
    if (!d)
        return -FI_ENOMEM;
    d->free_fn = [](util::domain_obj *x) { delete static_cast<prov_domain *>(x); };
    int rc = util::domain_init(d, util::to_fabric(fabric), in, context, &domain_ops, &hooks);
    if (rc) {
        delete d;
        return rc;
    }
    // A peer writes into our queues, not our wait objects: with manual
    // progress only polling turns arrivals into completions.
    d->waits_need_progress = d->data_progress != FI_PROGRESS_AUTO;
    // The domain name names the device (getinfo answers carry it); an info
    // built by hand without one gets the fabric's first device.
    const char *want = in->domain_attr ? in->domain_attr->name : nullptr;
    vq::device *dev = device_named(util::to_fabric(fabric)->name.c_str(), want);
    if (!dev) {
        SHUNT_LOG(prov_log, warning, "vq: no device %s in fabric %s", want ? want : "(any)",
                  util::to_fabric(fabric)->name.c_str());
        (void)util::domain_close(&d->domain.fid);
        return -FI_ENODEV;
    }
    if ((rc = vq::open_device(dev, &d->ctx)) || (rc = vq::alloc_pd(d->ctx, &d->pd)) ||
        (rc = vq::query_device(d->ctx, &d->dattr)) || (rc = limits_of(d->dattr, d->lim)) ||
        (!d->mt && (rc = vq::alloc_td(d->ctx, &d->td)))) {
        SHUNT_LOG(prov_log, error, "vq: cannot open the %s queues: %s", dev->name, shunt::strerror(rc));
        (void)util::domain_close(&d->domain.fid);
        return rc;
    }
    // Endpoints of the domain may run on several threads unless it is
    // FI_THREAD_DOMAIN: the registration cache and shunt_mem list lock then.
    bool shared = d->mt || d->thread != FI_THREAD_DOMAIN;
    d->mrc.lock.enable(shared);
    d->shared_lock.enable(shared);
    if (d->lim.host_local)
        d->mrc.v.resize(32);
    *out = &d->domain;
    return 0;
}

const ops_fabric fabric_ops = [] {
    ops_fabric o = util::default_fabric_ops();
    o.domain = domain_open_op;
    o.passive_ep = pep_open;
    return o;
}();

int fabric_open_op(fabric_attr *attr, fid_fabric **out, void *context)
{
    // A fabric is the devices of one driver; its name is the driver's.
    if (attr && attr->name && !device_named(attr->name, nullptr))
        return -FI_ENODATA;
    auto *f = new (std::nothrow) util::fabric_obj;
    if (!f)
        return -FI_ENOMEM;
    util::fabric_init(f, &shunt_fabric_provider_vq, attr, context, &fabric_ops);
    *out = &f->fabric;
    return 0;
}

} // namespace

namespace {

/** @p t's value, or @p def when it is not set. */
std::uint64_t rndv_threshold(const env::tunable &t, std::uint64_t def)
{
    if (!t.is_set())
        return def;
    std::int64_t v = std::int64_t(def);
    if (t.as_int(v) < 0 || v < 0) {
        SHUNT_LOG(prov_log, warning, "%s is not a byte count: using %llu", t.name, static_cast<unsigned long long>(def));
        v = std::int64_t(def);
    }
    return v == 0 ? ~std::uint64_t(0) : std::uint64_t(v); // 0: never
}

} // namespace

int limits_of(const vq::device_attr &a, dev_limits &out)
{
    auto rc_ops = a.ops[static_cast<unsigned>(vq::qp_type::rc)];
    auto ud_ops = a.ops[static_cast<unsigned>(vq::qp_type::ud)];
    if (!(rc_ops & vq::OPS_SEND_WITH_IMM) || !(rc_ops & vq::OPS_RDMA_READ) || !(ud_ops & vq::OPS_SEND))
        return -FI_ENODATA; // RDM and MSG ride RC QPs (send_imm, RDMA read), CM and DGRAM a UD QP
    dev_limits l;
    l.host_local = a.host_local;
    // Sends, writes and datagrams go inline (copied at the call) up to
    // 1 KiB; above, the driver reads the caller's buffers once instead of
    // a copy into the send queue and another out of it.
    l.inline_max = std::min<std::uint32_t>(a.max_inline_data, send_inline_max);
    l.rc_inline = a.max_inline_data;
    // A CM message, and an RC message's fields plus a useful payload, must
    // fit one inline send.
    if (l.inline_max < sizeof(cm_msg) || l.inline_max <= 32 + dgram_hdr_max || a.max_qp_wr < 2 ||
        a.max_sge < 1 || a.max_qp < 2 || a.max_cq < 2)
        return -FI_ENODATA;
    l.slot_max = a.max_inline_slot ? a.max_inline_slot : l.inline_max;
    l.lend = a.lend_qp_types & (1u << static_cast<unsigned>(vq::qp_type::rc));
    // One message up to 16 KiB, bounded by what one lent receive takes;
    // without lent receives every receive buffer holds that much.
    l.eager_max = l.lend ? 16384 : 4096;
    if (l.lend && a.max_lend_msg)
        l.eager_max = std::min<std::uint32_t>(l.eager_max, a.max_lend_msg - 32);
    // Larger messages through the ring go in fragments small enough that
    // several are in the ring at once (the sender fills one while the
    // receiver empties another).
    l.frag_max = std::min<std::uint32_t>(8192, l.eager_max);
    // inject_size: an inject of any kind is copied during the call, so it
    // is one inline send on an RC QP (the device's whole inline size) with
    // room for its largest head (an RMA write's to private memory, rma_hdr;
    // a stamped message's is shorter), and one message a lent receive
    // takes; at most 4 KiB, libfabric's shm's.
    const std::uint32_t head = std::uint32_t(std::max(sizeof(rma_hdr), stamp_len + fields_max));
    l.inject_max = std::min<std::uint32_t>(inject_max_cap, l.rc_inline - head);
    if (l.lend)
        l.inject_max = std::min<std::uint32_t>(l.inject_max, l.eager_max + 32 - head);
    // Rendezvous from where one copy by the receiver beats two through the
    // ring on shm (doc/guides/perf.md, "Where the rendezvous starts"):
    // between 4 and 6 KiB from private memory (a cross-memory read is a
    // system call), between 1 and 2 KiB from shareable memory (a memcpy).
    // On a network device every buffer counts as reachable (RDMA in the
    // device) and its RDMA read is no cheaper than a send plus a round
    // trip: from 16 KiB there. Without RDMA to private memory (shm without
    // cross-memory attach) a message from it goes through the ring whatever
    // its size, as far as the send queue holds its fragments.
    l.rndv_private = a.rdma_private ? rndv_threshold(t_rndv_bytes, 6144) : ~std::uint64_t(0);
    l.rndv_shared = rndv_threshold(t_rndv_shared_bytes, a.host_local ? 2048 : 16384);
    // Writes to private memory up to inject_size are carried in the message
    // (the target copies them); a read's answer up to small_max.
    l.rma_inline = l.inject_max;
    l.small_max = l.inline_max - std::uint32_t(sizeof(rma_hdr));
    // A datagram is one UD message: up to the UD MTU from the user's
    // buffers, up to the inline size copied at the call (inject).
    l.dgram_inject = l.inline_max - dgram_hdr_max;
    l.dgram_max = std::max(a.ud_mtu, l.inline_max) - dgram_hdr_max;
    l.sq_depth = std::min<std::uint32_t>(1024, a.max_qp_wr);
    l.rq_depth = l.lend ? 0 : std::min<std::uint32_t>(128, a.max_qp_wr);
    l.bounce = l.eager_max + 32; // the fields, and a fragment's length
    l.ud_depth = std::min<std::uint32_t>(64, a.max_qp_wr);
    l.grh = a.ud_grh ? 40 : 0;
    l.ud_buf = std::uint32_t(std::min<std::size_t>(512, l.inline_max)) + l.grh;
    l.dgram_buf = (a.ud_mtu ? a.ud_mtu : l.inline_max) + l.grh;
    // Gather: a message's header fields plus iov_max buffers.
    l.send_sge = std::min<std::uint32_t>(iov_max + 1, a.max_sge);
    l.scq_depth = std::min<std::uint32_t>(4096, a.max_cqe);
    // RC QPs of an endpoint: the UD QP takes one; their receives complete
    // on the endpoint's one receive CQ (posted buffers, or at most one poll's
    // worth of lent ones plus a flush each).
    std::uint32_t per_conn = l.lend ? 4 : l.rq_depth;
    std::uint64_t cq_room = a.max_cqe > l.ud_depth + 64 ? (a.max_cqe - l.ud_depth - 64) / per_conn : 0;
    l.max_conns = std::uint32_t(std::min<std::uint64_t>({63, a.max_qp - 1, cq_room}));
    if (!l.max_conns)
        return -FI_ENODATA;
    l.rcq_depth = l.max_conns * per_conn + l.ud_depth + 64;
    // An endpoint takes a UD QP, two CQs and up to max_conns RC QPs.
    l.ep_cnt = std::min<std::uint32_t>({256, a.max_cq / 2, a.max_qp});
    l.mr_cnt = a.max_mr;
    if ((ud_ops & vq::OPS_TSO) && a.max_tso_hdr > dgram_hdr_size && a.ud_mtu > a.max_tso_hdr) {
        // vq's send_tso repeats our datagram header and the application's
        // before every segment: together within the device's header limit,
        // and with the MSS within its UD MTU.
        l.tso_hdr_max = a.max_tso_hdr - dgram_hdr_size;
        l.tso_mss_max = a.ud_mtu - a.max_tso_hdr;
    }
    out = l;
    return 0;
}

int device_attr_of(vq::device *dev, vq::device_attr &out)
{
    // Device limits do not change while the process runs: open a context
    // once per device to ask (as libfabric's verbs provider does at init),
    // and answer every later getinfo from the copy.
    struct cached {
        vq::device *dev;
        vq::device_attr attr;
        int rc;
    };
    static std::mutex mu;
    static std::vector<cached> cache;
    std::lock_guard g(mu);
    for (const cached &c : cache)
        if (c.dev == dev) {
            if (c.rc == 0)
                out = c.attr;
            return c.rc;
        }
    vq::context *ctx = nullptr;
    vq::device_attr a;
    int rc = vq::open_device(dev, &ctx);
    if (rc == 0)
        rc = vq::query_device(ctx, &a);
    if (ctx)
        (void)vq::close_device(ctx);
    if (rc)
        SHUNT_LOG(prov_log, warning, "vq: device %s: %s", dev->name, shunt::strerror(rc));
    cache.push_back({dev, a, rc});
    if (rc == 0)
        out = a;
    return rc;
}

vq::device *device_named(const char *fabric, const char *domain)
{
    std::vector<vq::device *> devs;
    vq::get_device_list(devs);
    for (vq::device *d : devs) {
        if (fabric && *fabric && std::strcmp(vq::device_driver_name(d), fabric) != 0)
            continue;
        if (!domain || !*domain || std::strcmp(d->name, domain) == 0)
            return d;
    }
    return nullptr;
}

int wc_to_err(vq::wc_status s)
{
    switch (s) {
    case vq::wc_status::success: return 0;
    case vq::wc_status::rem_access_err:
    case vq::wc_status::loc_prot_err:
    case vq::wc_status::loc_access_err: return FI_EACCES;
    case vq::wc_status::retry_exc_err:
    case vq::wc_status::rnr_retry_exc_err: return FI_EHOSTUNREACH;
    // The provider moves a QP to ERR only when its connection failed (the
    // peer died, an access error, a connection given up), never for
    // fi_cancel: what the QP flushes failed with the connection. One
    // request reports the cause (a dead peer's retry_exc_err); the rest,
    // a rendezvous pull among them, would otherwise look cancelled.
    case vq::wc_status::wr_flush_err: return FI_ECONNRESET;
    case vq::wc_status::rem_inv_req_err:
    case vq::wc_status::loc_len_err: return FI_EMSGSIZE;
    default: return FI_EIO;
    }
}

} // namespace shunt::prov::vqprov

// Named after what it stands on; "shm" is what users typed when the only
// vq device was the shm driver's (SHUNT_PROVIDER=shm, shunt-perf -p shm).
SHUNT_FABRIC_PROVIDER(vq, .version = shunt::prov::vqprov::prov_version,
                      .getinfo = shunt::prov::vqprov::vq_getinfo, .fabric = shunt::prov::vqprov::fabric_open_op,
                      .aliases = "shm");
