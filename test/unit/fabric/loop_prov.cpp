// The in-process "loop" test provider (see loop_prov.h).
#include "loop_prov.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "env/errors.h"
#include "fabric/provider.h"
#include "fabric/util/atomic_apply.h"
#include "fabric/util/cntr.h"
#include "fabric/util/ep.h"
#include "fabric/util/info.h"
#include "fabric/util/mr.h"

namespace shunt::test {

using namespace fabric;
int loop_transmits = 0;
std::size_t loop_rndv_bytes = 0;

namespace {

std::mutex reg_mu;
std::unordered_map<std::uint64_t, util::ep_core *> endpoints;
std::uint64_t next_id = 1;

/** A rendezvous message's description: its bytes, kept on the sender's side. */
struct rndv_desc {
    std::vector<std::uint8_t> *bytes;
};

struct running_fetch {
    util::rx_entry *e;
    util::rx_fetch_req r;
    std::vector<std::uint8_t> *bytes;
};
std::vector<running_fetch> fetches; // under reg_mu

int loop_rx_fetch(util::ep_core *, util::rx_entry *e, const util::rx_fetch_req &r)
{
    rndv_desc d;
    if (r.desc_len != sizeof d)
        return -FI_EINVAL;
    std::memcpy(&d, r.desc, sizeof d);
    running_fetch f{e, r, d.bytes};
    f.r.desc = nullptr;
    std::lock_guard g(reg_mu);
    fetches.push_back(f);
    return 0;
}

void loop_rx_discard(util::ep_core *, const void *desc, std::size_t len)
{
    rndv_desc d;
    if (len == sizeof d) {
        std::memcpy(&d, desc, sizeof d);
        delete d.bytes;
    }
}

info *offer(ep_type t)
{
    info *i = allocinfo();
    i->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
              FI_REMOTE_WRITE | FI_MULTI_RECV | FI_DIRECTED_RECV | FI_RMA_EVENT | FI_SOURCE | FI_LOCAL_COMM;
    i->addr_format = FI_FORMAT_UNSPEC; // 8-byte binary endpoint ids
    i->ep_attr->type = t;
    i->ep_attr->protocol = FI_PROTO_SHM;
    i->ep_attr->max_msg_size = 1 << 20;
    i->ep_attr->mem_tag_format = ~0ULL;
    i->ep_attr->tx_ctx_cnt = 1;
    i->ep_attr->rx_ctx_cnt = 1;
    i->domain_attr->name = ::strdup("loop");
    i->domain_attr->threading = FI_THREAD_SAFE;
    i->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    i->domain_attr->control_progress = FI_PROGRESS_MANUAL;
    i->domain_attr->av_type = FI_AV_TABLE;
    i->domain_attr->mr_key_size = 8;
    i->domain_attr->cq_data_size = 8;
    i->domain_attr->cq_cnt = 64;
    i->domain_attr->ep_cnt = 64;
    i->domain_attr->cntr_cnt = 64;
    i->domain_attr->mr_iov_limit = 4;
    i->domain_attr->max_ep_tx_ctx = 4;
    i->domain_attr->max_ep_rx_ctx = 4;
    i->domain_attr->tx_ctx_cnt = 64 * 4;
    i->domain_attr->rx_ctx_cnt = 64 * 4;
    i->domain_attr->caps = FI_LOCAL_COMM;
    i->fabric_attr->name = ::strdup("loop");
    i->tx_attr->inject_size = 64;
    i->tx_attr->size = 256;
    i->tx_attr->iov_limit = 4;
    i->tx_attr->rma_iov_limit = 1;
    i->tx_attr->msg_order = FI_ORDER_SAS;
    i->rx_attr->size = 256;
    i->rx_attr->iov_limit = 4;
    i->rx_attr->msg_order = FI_ORDER_SAS;
    return i;
}

util::info_limits limits()
{
    util::info_limits l;
    l.threading_mask = (1u << FI_THREAD_SAFE) | (1u << FI_THREAD_DOMAIN) | (1u << FI_THREAD_COMPLETION) |
                       (1u << FI_THREAD_ENDPOINT) | (1u << FI_THREAD_FID);
    l.progress_mask = 1u << FI_PROGRESS_MANUAL;
    l.av_type_mask = (1u << FI_AV_TABLE) | (1u << FI_AV_MAP);
    l.op_flags = FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
    // the generic memory regions follow either legacy mode's rules
    l.mr_mode_legacy = FI_MR_BASIC | FI_MR_SCALABLE;
    l.addr_formats = 1ULL << FI_ADDR_STR;
    return l;
}

int loop_getinfo(std::uint32_t version, const char *, const char *, std::uint64_t, const info *hints, info **out)
{
    info *head = nullptr, **tail = &head;
    for (ep_type t : {FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM}) {
        info *o = offer(t);
        info *r = nullptr;
        if (util::match(version, o, limits(), hints, &r) == 0) {
            *tail = r;
            tail = &r->next;
        }
        freeinfo(o);
    }
    if (!head)
        return -FI_ENODATA;
    *out = head;
    return 0;
}

// ---- endpoints ----

std::uint64_t id_of(util::ep_core *c) { return reinterpret_cast<std::uintptr_t>(c->prov); }

util::ep_core *peer_core(const util::tx_req &r)
{
    if (!r.peer)
        return nullptr;
    std::uint64_t id;
    std::memcpy(&id, r.peer->addr, 8);
    std::lock_guard g(reg_mu);
    auto it = endpoints.find(id);
    return it == endpoints.end() ? nullptr : it->second;
}

fi_addr_t src_in(util::ep_core *target, util::ep_core *from)
{
    if (!target->av)
        return FI_ADDR_NOTAVAIL;
    std::uint8_t a[8];
    std::uint64_t id = id_of(from);
    std::memcpy(a, &id, 8);
    return util::av_reverse(target->av, a);
}

ssize_t loop_transmit(util::ep_core *c, const util::tx_req &r)
{
    loop_transmits++;
    util::ep_core *t = peer_core(r);
    std::uint64_t kindf = r.kind == util::tx_req::tsend ? FI_TAGGED : r.kind == util::tx_req::send ? FI_MSG : 0;
    if (!t || t->state.load() != util::ep_state::enabled) {
        util::tx_fail(c, r.context, FI_SEND | kindf, FI_EHOSTUNREACH, r.len);
        return 0;
    }
    std::vector<std::uint8_t> buf(r.len);
    std::size_t off = 0;
    for (std::size_t i = 0; i < r.count; i++) {
        if (r.iov[i].iov_len)
            std::memcpy(buf.data() + off, r.iov[i].iov_base, r.iov[i].iov_len);
        off += r.iov[i].iov_len;
    }
    switch (r.kind) {
    case util::tx_req::send:
    case util::tx_req::tsend: {
        if (loop_rndv_bytes && r.len >= loop_rndv_bytes && c->type != FI_EP_DGRAM) {
            rndv_desc d{new std::vector<std::uint8_t>(std::move(buf))};
            int rc = util::rx_deliver_fetch(t, r.kind == util::tx_req::tsend, src_in(t, c), r.tag, r.data,
                                            r.flags & FI_REMOTE_CQ_DATA, r.len, &d, sizeof d);
            if (rc < 0) {
                delete d.bytes;
                return rc;
            }
            util::tx_done(c, r.flags, r.context, FI_SEND | kindf, r.len);
            return 0;
        }
        int rc = util::rx_deliver(t, r.kind == util::tx_req::tsend, src_in(t, c), r.tag, r.data,
                                  r.flags & FI_REMOTE_CQ_DATA, buf.data(), r.len, c->type != FI_EP_DGRAM);
        if (rc < 0)
            return rc;
        util::tx_done(c, r.flags, r.context, FI_SEND | kindf, r.len);
        return 0;
    }
    case util::tx_req::write:
    case util::tx_req::read: {
        bool w = r.kind == util::tx_req::write;
        void *p = nullptr;
        util::mr_obj *m = nullptr;
        int rc = util::mr_verify(t->domain, r.rma[0].key, r.rma[0].addr, r.len, w ? FI_REMOTE_WRITE : FI_REMOTE_READ,
                                 &p, &m);
        if (rc) {
            util::tx_fail(c, r.context, FI_RMA | (w ? FI_WRITE : FI_READ), -rc, r.len);
            return 0;
        }
        if (w) {
            std::memcpy(p, buf.data(), r.len);
            t->inc_rwrite(t->c_rwrite);
            if (m && m->cntr) // the region's counter (mr_bind FI_REMOTE_WRITE)
                util::cntr_inc_for(m->cntr)(m->cntr);
            if (r.flags & FI_REMOTE_CQ_DATA)
                util::rx_remote_data(t, r.data, FI_RMA | FI_REMOTE_WRITE, r.len);
        } else {
            off = 0;
            for (std::size_t i = 0; i < r.count; i++) {
                std::memcpy(r.iov[i].iov_base, static_cast<std::uint8_t *>(p) + off, r.iov[i].iov_len);
                off += r.iov[i].iov_len;
            }
            t->inc_rread(t->c_rread);
        }
        util::tx_done(c, r.flags, r.context, FI_RMA | (w ? FI_WRITE : FI_READ), r.len);
        return 0;
    }
    default: {
        bool fetch = r.kind != util::tx_req::atomic;
        void *p = nullptr;
        int rc = util::mr_verify(t->domain, r.rma[0].key, r.rma[0].addr, r.len,
                                 FI_REMOTE_WRITE | (fetch ? FI_REMOTE_READ : 0), &p);
        if (rc) {
            util::tx_fail(c, r.context, FI_ATOMIC | (fetch ? FI_READ : FI_WRITE), -rc, r.len);
            return 0;
        }
        std::vector<std::uint8_t> cmp(r.len), res(r.len);
        off = 0;
        for (std::size_t i = 0; i < r.compare_count; i++) {
            std::memcpy(cmp.data() + off, r.compare[i].iov_base, r.compare[i].iov_len);
            off += r.compare[i].iov_len;
        }
        std::size_t n = r.len / datatype_size(r.dt);
        util::atomic_apply(r.dt, r.aop, p, buf.data(), r.compare_count ? cmp.data() : nullptr, res.data(), n);
        off = 0;
        for (std::size_t i = 0; i < r.result_count; i++) {
            std::memcpy(r.result[i].iov_base, res.data() + off, r.result[i].iov_len);
            off += r.result[i].iov_len;
        }
        util::tx_done(c, r.flags, r.context, FI_ATOMIC | (fetch ? FI_READ : FI_WRITE), r.len);
        return 0;
    }
    }
}

void loop_close(util::ep_core *c)
{
    std::lock_guard g(reg_mu);
    endpoints.erase(id_of(c));
    // Its running fetches are dropped (no completions, as on close).
    std::erase_if(fetches, [c](running_fetch &f) {
        if (f.r.reporter != c)
            return false;
        delete f.bytes;
        return true;
    });
}

ssize_t loop_tx_left(util::ep_core *) { return 256; }

// Re-enabling after a critical error is allowed by this provider.
int loop_enable(util::ep_core *) { return 0; }

const util::ep_hooks loop_hooks = [] {
    util::ep_hooks h;
    h.enable = loop_enable;
    h.close = loop_close;
    h.transmit = loop_transmit;
    h.tx_size_left = loop_tx_left;
    h.rx_fetch = loop_rx_fetch;
    h.rx_discard = loop_rx_discard;
    return h;
}();

int loop_getname(fid *f, void *addr, std::size_t *len)
{
    util::ep_core *c = util::ep_core_of(f);
    if (*len < 8) {
        *len = 8;
        return -FI_ETOOSMALL;
    }
    std::uint64_t id = id_of(c);
    std::memcpy(addr, &id, 8);
    *len = 8;
    return 0;
}

const ops_cm loop_cm{.getname = loop_getname};

int new_ep(fid_domain *domain, info *in, std::size_t fclass, fid_ep **out, void *context)
{
    util::domain_obj *d = util::to_domain(domain);
    util::ep_tables t;
    t.cm = &loop_cm;
    util::ep_handle *h = nullptr;
    int rc = util::ep_create(d, in, fclass, &loop_hooks, t, context, &h);
    if (rc)
        return rc;
    h->core->supported_op_flags = FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
    {
        std::lock_guard g(reg_mu);
        std::uint64_t id = next_id++;
        h->core->prov = reinterpret_cast<void *>(std::uintptr_t(id));
        endpoints[id] = h->core;
    }
    *out = &h->ep;
    return 0;
}

int loop_endpoint(fid_domain *domain, info *in, fid_ep **out, void *context)
{
    return new_ep(domain, in, FI_CLASS_EP, out, context);
}

int loop_sep(fid_domain *domain, info *in, fid_ep **out, void *context)
{
    return new_ep(domain, in, FI_CLASS_SEP, out, context);
}

int addr_check(const void *a)
{
    std::uint64_t id;
    std::memcpy(&id, a, 8);
    return id ? 0 : -FI_EINVAL;
}

int addr_from_svc(const char *node, const char *service, void *addr)
{
    if (!service)
        return -FI_EINVAL;
    (void)node;
    char *end = nullptr;
    unsigned long long id = std::strtoull(service, &end, 10);
    if (!end || *end || !id)
        return -FI_EINVAL;
    std::uint64_t v = id;
    std::memcpy(addr, &v, 8);
    return 0;
}

// FI_ADDR_STR: "loop://<id>".
std::size_t addr_to_text(util::domain_obj *, const void *a, char *buf, std::size_t len)
{
    std::uint64_t id;
    std::memcpy(&id, a, 8);
    std::string t = "loop://" + std::to_string(id);
    if (len) {
        std::size_t c = std::min(t.size(), len - 1);
        std::memcpy(buf, t.data(), c);
        buf[c] = 0;
    }
    return t.size() + 1;
}

int addr_from_str(util::domain_obj *, const char *s, void *addr)
{
    if (std::strncmp(s, "loop://", 7) != 0)
        return -FI_EINVAL;
    return addr_from_svc(nullptr, s + 7, addr);
}

int loop_query_atomic(util::domain_obj *, datatype dt, op o, atomic_attr *attr, std::uint64_t flags)
{
    return util::atomic_query(dt, o, attr, flags, 64);
}

const util::domain_hooks loop_domain_hooks = [] {
    util::domain_hooks h;
    h.addrlen = 8;
    h.addr_check = addr_check;
    h.addr_from_svc = addr_from_svc;
    h.addr_to_text = addr_to_text;
    h.addr_from_str = addr_from_str;
    h.query_atomic = loop_query_atomic;
    return h;
}();

const ops_domain loop_domain_ops = [] {
    ops_domain o = util::default_domain_ops();
    o.endpoint = loop_endpoint;
    o.scalable_ep = loop_sep;
    return o;
}();

int loop_domain(fid_fabric *fabric, info *in, fid_domain **out, void *context)
{
    auto *d = new util::domain_obj;
    int rc = util::domain_init(d, util::to_fabric(fabric), in, context, &loop_domain_ops, &loop_domain_hooks);
    if (rc) {
        delete d;
        return rc;
    }
    *out = &d->domain;
    return 0;
}

const ops_fabric loop_fabric_ops = [] {
    ops_fabric o = util::default_fabric_ops();
    o.domain = loop_domain;
    return o;
}();

extern const provider loop_provider;

int loop_fabric(fabric_attr *attr, fid_fabric **out, void *context)
{
    auto *f = new util::fabric_obj;
    util::fabric_init(f, &loop_provider, attr, context, &loop_fabric_ops);
    *out = &f->fabric;
    return 0;
}

const provider loop_provider = [] {
    provider p;
    p.name = "loop";
    p.version = FI_VERSION(1, 0);
    p.getinfo = loop_getinfo;
    p.fabric = loop_fabric;
    return p;
}();

SHUNT_REGISTER_PROVIDER(loop_provider);

} // namespace

info *loop_hints(ep_type type, std::uint64_t caps)
{
    info *h = allocinfo();
    h->caps = caps;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->ep_attr->type = type;
    h->fabric_attr->prov_name = ::strdup("loop");
    return h;
}

int loop_env::open(ep_type type, std::uint64_t caps, threading thr, int mr_mode)
{
    fabric::info *h = loop_hints(type, caps);
    h->domain_attr->threading = thr;
    h->domain_attr->mr_mode = mr_mode;
    int rc = getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &info);
    freeinfo(h);
    if (rc)
        return rc;
    // getinfo reports only required MR modes (none for loop); the loop domain
    // honours the stricter modes a test asks for when they are in the info.
    info->domain_attr->mr_mode |= mr_mode;
    if ((rc = fabric_open(info->fabric_attr, &fabric, nullptr)))
        return rc;
    return domain_open(fabric, info, &domain, nullptr);
}

void loop_env::close()
{
    if (domain)
        (void)fabric::close(&domain->fid);
    if (fabric)
        (void)fabric::close(&fabric->fid);
    freeinfo(info);
    domain = nullptr;
    fabric = nullptr;
    info = nullptr;
}

std::size_t loop_fetches_running()
{
    std::lock_guard g(reg_mu);
    return fetches.size();
}

std::size_t loop_finish_fetches(bool newest_first)
{
    std::vector<running_fetch> v;
    {
        std::lock_guard g(reg_mu);
        v.swap(fetches);
    }
    if (newest_first)
        std::reverse(v.begin(), v.end());
    for (running_fetch &f : v) {
        // The loop's receives here are one buffer (iov[0]).
        if (f.r.n && f.e->iov_count)
            std::memcpy(static_cast<std::uint8_t *>(f.e->iov[0].iov_base) + f.r.offset, f.bytes->data(), f.r.n);
        delete f.bytes;
        util::rx_fetch_done(f.e, f.r, 0);
    }
    return v.size();
}

} // namespace shunt::test
