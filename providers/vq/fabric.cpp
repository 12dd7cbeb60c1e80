// The vq provider: record, getinfo offers, fabric and domain over a vq
// device context, address/MR/atomic hooks of the generic domain.
#include <cstdio>
#include <cstring>
#include <new>

#include "env/errors.h"
#include "env/log.h"
#include "fabric/util/atomic_apply.h"
#include "fabric/util/info.h"
#include "prov.h"

extern const ::shunt::fabric::provider shunt_fabric_provider_vq;

namespace shunt::prov::vqprov {

SHUNT_LOG_COMPONENT(prov_log, "fabric");

namespace {

constexpr std::uint32_t prov_version = FI_VERSION(1, 0);

info *offer(ep_type t)
{
    info *i = allocinfo();
    if (!i)
        return nullptr;
    i->caps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_MULTI_RECV | FI_DIRECTED_RECV | FI_SOURCE | FI_LOCAL_COMM;
    if (t != FI_EP_DGRAM)
        i->caps |= FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (t == FI_EP_RDM)
        i->caps |= FI_NAMED_RX_CTX; // receive contexts of scalable endpoints by fi_rx_addr
    // Addresses are a binary ep_addr (fi_getinfo(3): FI_FORMAT_UNSPEC is a
    // provider-specific format, opaque to the application); av_straddr prints
    // them as "fi_shm://<segment>/<qpn>", which av_insertsvc accepts back.
    i->addr_format = FI_FORMAT_UNSPEC;
    i->ep_attr->type = t;
    i->ep_attr->protocol = FI_PROTO_SHM;
    i->ep_attr->protocol_version = 1;
    i->ep_attr->max_msg_size = t == FI_EP_DGRAM ? dgram_max : max_msg;
    i->ep_attr->mem_tag_format = ~0ULL;
    i->ep_attr->tx_ctx_cnt = 1;
    i->ep_attr->rx_ctx_cnt = 1;
    i->ep_attr->max_order_raw_size = max_msg;
    i->ep_attr->max_order_war_size = max_msg;
    i->ep_attr->max_order_waw_size = max_msg;
    domain_attr *d = i->domain_attr;
    d->name = ::strdup("shm");
    d->threading = FI_THREAD_SAFE;
    d->data_progress = FI_PROGRESS_MANUAL;
    d->control_progress = FI_PROGRESS_MANUAL;
    d->resource_mgmt = FI_RM_ENABLED;
    d->av_type = FI_AV_TABLE;
    d->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
    d->mr_key_size = 8;
    d->cq_data_size = 4;
    d->cq_cnt = 1024;
    d->ep_cnt = 256;
    d->cntr_cnt = 1024;
    d->mr_iov_limit = 1;
    d->max_ep_tx_ctx = t == FI_EP_RDM ? max_ctx : 1; // scalable endpoints: RDM
    d->max_ep_rx_ctx = t == FI_EP_RDM ? max_ctx : 1;
    d->max_err_data = 0;
    d->mr_cnt = 4096;
    i->fabric_attr->name = ::strdup("shm");
    tx_attr *tx = i->tx_attr;
    tx->inject_size = t == FI_EP_DGRAM ? dgram_max : frag_max;
    tx->size = 1024;
    tx->iov_limit = 4;
    tx->rma_iov_limit = 1;
    tx->msg_order = FI_ORDER_SAS | FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_WAR | FI_ORDER_WAW | FI_ORDER_SAW |
                    FI_ORDER_SAR | FI_ORDER_RAS | FI_ORDER_WAS;
    rx_attr *rx = i->rx_attr;
    rx->size = 1024;
    rx->iov_limit = 4;
    rx->msg_order = tx->msg_order;
    if (t == FI_EP_DGRAM)
        tx->msg_order = rx->msg_order = FI_ORDER_SAS;
    return i;
}

util::info_limits limits()
{
    util::info_limits l;
    l.threading_mask = (1u << FI_THREAD_SAFE) | (1u << FI_THREAD_DOMAIN) | (1u << FI_THREAD_COMPLETION) |
                       (1u << FI_THREAD_ENDPOINT) | (1u << FI_THREAD_FID);
    l.progress_mask = (1u << FI_PROGRESS_MANUAL) | (1u << FI_PROGRESS_AUTO);
    l.av_type_mask = (1u << FI_AV_TABLE) | (1u << FI_AV_MAP);
    l.mr_mode_required = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
    l.op_flags = FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
    l.shared_ctx = true;
    return l;
}

int vq_getinfo(std::uint32_t version, const char *, const char *, std::uint64_t, const info *hints, info **out)
{
    if (!vq::find_device("shm0"))
        return -FI_ENODATA;
    info *head = nullptr, **tail = &head;
    for (ep_type t : {FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM}) {
        info *o = offer(t);
        if (!o) {
            freeinfo(head);
            return -FI_ENOMEM;
        }
        info *r = nullptr;
        int rc = util::match(version, o, limits(), hints, &r);
        freeinfo(o);
        if (rc == -FI_EINVAL || rc == -FI_ENOMEM) {
            freeinfo(head);
            return rc;
        }
        if (rc == 0) {
            *tail = r;
            tail = &r->next;
        }
    }
    if (!head)
        return -FI_ENODATA;
    *out = head;
    return 0;
}

// ---- domain hooks ----

int addr_check(const void *a)
{
    ep_addr x;
    std::memcpy(&x, a, sizeof x);
    if (x.len == 0 || x.len > sizeof x.name || x.qpn == 0)
        return -FI_EINVAL;
    return 0;
}

std::size_t addr_to_str(const void *a, char *buf, std::size_t len)
{
    ep_addr x;
    std::memcpy(&x, a, sizeof x);
    char tmp[96];
    int n = std::snprintf(tmp, sizeof tmp, "fi_shm://%.*s/%u", int(x.len <= 59 ? x.len : 59), x.name, x.qpn);
    if (len) {
        std::strncpy(buf, tmp, len - 1);
        buf[len - 1] = 0;
    }
    return std::size_t(n) + 1;
}

// "name/qpn" or "fi_shm://name/qpn" as node (service ignored), or node = name, service = qpn.
int addr_from_svc(const char *node, const char *service, void *out)
{
    if (!node)
        return -FI_EINVAL;
    std::string s = node;
    if (s.rfind("fi_shm://", 0) == 0)
        s = s.substr(9);
    std::string name = s, qpn = service ? service : "";
    if (!service) {
        auto slash = s.rfind('/');
        if (slash == std::string::npos)
            return -FI_EINVAL;
        name = s.substr(0, slash);
        qpn = s.substr(slash + 1);
    }
    char *end = nullptr;
    unsigned long q = std::strtoul(qpn.c_str(), &end, 10);
    if (qpn.empty() || !end || *end || q == 0 || q > 0xffffffffUL || name.empty() || name.size() > 59)
        return -FI_EINVAL;
    ep_addr a{};
    a.qpn = std::uint32_t(q);
    a.len = std::uint8_t(name.size());
    std::memcpy(a.name, name.data(), name.size());
    std::memcpy(out, &a, sizeof a);
    return 0;
}

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
    // regions get a key outside the 32-bit rkey space.
    m->key = vm->rkey ? vm->rkey : ((1ULL << 32) | vm->lkey);
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
    h.addr_from_svc = addr_from_svc;
    h.addr_to_str = addr_to_str;
    h.query_atomic = query_atomic_hook;
    h.mr_reg = mr_reg_hook;
    h.mr_dereg = mr_dereg_hook;
    h.close = domain_close_hook;
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
    vq::device *dev = vq::find_device("shm0");
    if (!dev || (rc = vq::open_device(dev, &d->ctx)) || (rc = vq::alloc_pd(d->ctx, &d->pd)) ||
        (rc = vq::query_device(d->ctx, &d->dattr)) || (!d->mt && (rc = vq::alloc_td(d->ctx, &d->td)))) {
        SHUNT_LOG(prov_log, error, "vq: cannot open the shm0 queues: %s", shunt::strerror(dev ? rc : -FI_ENODEV));
        (void)util::domain_close(&d->domain.fid);
        return dev ? rc : -FI_ENODEV;
    }
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
    if (attr && attr->name && std::strcmp(attr->name, "shm") != 0)
        return -FI_ENODATA;
    auto *f = new (std::nothrow) util::fabric_obj;
    if (!f)
        return -FI_ENOMEM;
    util::fabric_init(f, &shunt_fabric_provider_vq, attr, context, &fabric_ops);
    *out = &f->fabric;
    return 0;
}

} // namespace

std::string addr_key(const ep_addr &a)
{
    return std::string(a.name, a.len <= 59 ? a.len : 59) + "/" + std::to_string(a.qpn);
}

vq::dev_addr to_dev(const ep_addr &a)
{
    vq::dev_addr d{};
    d.len = a.len;
    std::memcpy(d.raw, a.name, a.len);
    return d;
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
    case vq::wc_status::wr_flush_err: return FI_ECANCELED;
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
