// vq provider: FI_EP_MSG connection management — passive endpoints
// (listen, CONNREQ, reject) and active ones (connect, accept, shutdown) over
// UD datagrams, with CM data up to FI_OPT_CM_DATA_SIZE bytes.
#include <cstring>
#include <new>

#include "env/errors.h"
#include "addr.h"
#include "prov.h"

namespace shunt::prov::vqprov {

namespace {

/** A connection request waiting for accept or reject (info->handle). */
struct connreq {
    struct fid fid;
    ep_addr from{};
    ep_addr rc_at{};             ///< where the requester's RC QP lives
    std::uint32_t req_qpn = 0;
    std::uint32_t flags = 0;     ///< the REQ's cm_f_* flags
    struct pep_obj *pep = nullptr;
};

/** A passive endpoint: a UD QP on its own vq context. */
struct pep_obj {
    fid_pep pep;
    util::fabric_obj *fabric = nullptr;
    fabric::info *info = nullptr;
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::qp *ud = nullptr;
    vq::mr *mr = nullptr;
    std::vector<std::uint8_t> bufs;
    std::uint32_t buf_size = 0;   ///< bytes of one receive buffer in bufs
    std::uint32_t grh = 0;        ///< bytes in front of each receive (dev_limits::grh)
    ep_addr addr{};
    service_binding *svc = nullptr; ///< the service its source address names (addr.h)
    const addr_resolver *res = nullptr;
    util::eq_obj *eq = nullptr;
    bool listening = false;
    bool taken = false;           ///< an active endpoint took its address (info->handle)
    int backlog = 128;
    std::vector<connreq *> pending;
    std::mutex mu;
};


int ud_to(vq::pd *pd, vq::qp *ud, const ep_addr &to, const void *buf, std::size_t len)
{
    vq::ah_attr at;
    at.dest = to_dev(to);
    vq::ah *ah = nullptr;
    int rc = vq::create_ah(pd, &at, &ah);
    if (rc)
        return rc;
    vq::wr_start(ud);
    ud->wr_id = ~0ULL;
    ud->wr_flags = 0;
    vq::wr_send(ud);
    vq::wr_set_inline_data(ud, buf, len);
    vq::wr_set_ud_addr(ud, ah, to.qpn, qkey);
    rc = vq::wr_complete(ud);
    (void)vq::destroy_ah(ah);
    return rc;
}

void pep_progress(void *arg)
{
    auto *p = static_cast<pep_obj *>(arg);
    std::lock_guard g(p->mu);
    if (p->taken)
        return;
    vq::wc w[8];
    int n = vq::poll_cq(p->cq, 8, w);
    for (int k = 0; k < n; k++) {
        if (w[k].qp_num != p->ud->qp_num || w[k].wr_id == ~0ULL)
            continue;
        const std::uint8_t *b = p->bufs.data() + w[k].wr_id * p->buf_size;
        std::uint32_t len = 0;
        cm_msg m;
        if (w[k].status == vq::wc_status::success && ud_message(w[k], p->grh, b, len) && cm_parse(b, len, m) &&
            p->listening) {
            // Only an MSG endpoint's REQ is a connection request (an RDM
            // endpoint's hidden set-up, or another type, is not).
            if (m.op == cm_req && m.ep_type == FI_EP_MSG) {
                auto *cr = new (std::nothrow) connreq;
                info *ci = dupinfo(p->info);
                if (cr && ci && int(p->pending.size()) < p->backlog) {
                    cr->fid.fclass = FI_CLASS_CONNREQ;
                    cr->from = m.from;
                    cr->rc_at = m.rc_at.len ? m.rc_at : m.from;
                    cr->req_qpn = m.req_qpn;
                    cr->flags = cm_peer_flags(m);
                    cr->pep = p;
                    ci->handle = &cr->fid;
                    std::free(ci->dest_addr);
                    ci->dest_addr = nullptr;
                    ci->dest_addrlen = 0;
                    void *d = nullptr;
                    std::size_t dlen = 0;
                    if (addr_encode(*p->res, ci->addr_format, m.from, d, dlen) == 0) {
                        ci->dest_addr = d;
                        ci->dest_addrlen = dlen;
                    }
                    std::uint8_t ev[sizeof(eq_cm_entry) + cm_data_max];
                    eq_cm_entry e{&p->pep.fid, ci};
                    std::memcpy(ev, &e, sizeof e);
                    std::memcpy(ev + sizeof e, m.data, m.datalen);
                    if (util::eq_post(p->eq, FI_CONNREQ, ev, sizeof e + m.datalen, ci) == 0) {
                        p->pending.push_back(cr);
                        cr = nullptr;
                        ci = nullptr;
                    }
                }
                delete cr;
                freeinfo(ci);
            }
        }
        (void)vq::post_recv(p->ud, w[k].wr_id,
                            reinterpret_cast<std::uint64_t>(p->bufs.data()) + w[k].wr_id * p->buf_size, p->buf_size,
                            p->mr->lkey);
    }
}

void pep_destroy(pep_obj *p)
{
    if (p->eq) {
        util::eq_remove_progress(p->eq, p);
        p->eq->refs.fetch_sub(1);
    }
    for (connreq *c : p->pending)
        delete c;
    if (p->ud)
        (void)vq::destroy_qp(p->ud);
    if (p->mr)
        (void)vq::dereg_mr(p->mr);
    if (p->cq)
        (void)vq::destroy_cq(p->cq);
    if (p->pd)
        (void)vq::dealloc_pd(p->pd);
    if (p->ctx)
        (void)vq::close_device(p->ctx);
    if (p->res)
        p->res->unbind(p->svc);
    if (p->fabric)
        p->fabric->refs.fetch_sub(1);
    freeinfo(p->info);
    delete p;
}

int pep_close(fid *f)
{
    pep_destroy(reinterpret_cast<pep_obj *>(f));
    return 0;
}

int pep_bind(fid *f, fid *b, std::uint64_t flags)
{
    auto *p = reinterpret_cast<pep_obj *>(f);
    if (b->fclass != FI_CLASS_EQ)
        return -FI_EINVAL;
    if (flags)
        return -FI_EBADFLAGS;
    if (p->eq)
        return -FI_EBUSY;
    p->eq = util::to_eq(reinterpret_cast<fid_eq *>(b));
    p->eq->refs.fetch_add(1);
    util::eq_add_progress(p->eq, util::progress_hook{pep_progress, p});
    return 0;
}

int pep_control(fid *f, int cmd, void *arg)
{
    auto *p = reinterpret_cast<pep_obj *>(f);
    if (cmd == FI_BACKLOG) {
        if (!arg || *static_cast<int *>(arg) <= 0)
            return -FI_EINVAL;
        p->backlog = *static_cast<int *>(arg);
        return 0;
    }
    return -FI_ENOSYS;
}

int pep_getname(fid *f, void *addr, std::size_t *len)
{
    auto *p = reinterpret_cast<pep_obj *>(f);
    return addr_out(*p->res, p->info->addr_format, p->addr, addr, len);
}

int pep_listen(fid_pep *pe)
{
    auto *p = reinterpret_cast<pep_obj *>(pe);
    if (p->taken)
        return -FI_EOPBADSTATE; // its address belongs to an active endpoint now
    if (!p->eq)
        return -FI_ENOEQ;
    if (p->listening)
        return -FI_EOPBADSTATE;
    p->listening = true;
    return 0;
}

int pep_reject(fid_pep *pe, fid_t handle, const void *param, std::size_t len)
{
    auto *p = reinterpret_cast<pep_obj *>(pe);
    if (len > cm_data_max)
        return -FI_EINVAL;
    std::lock_guard g(p->mu);
    for (std::size_t i = 0; i < p->pending.size(); i++) {
        connreq *cr = p->pending[i];
        if (&cr->fid != handle)
            continue;
        cm_msg m{};
        m.op = cm_rej;
        m.req_qpn = cr->req_qpn;
        m.from = p->addr;
        m.datalen = std::uint16_t(len);
        if (len)
            std::memcpy(m.data, param, len);
        int rc = ud_to(p->pd, p->ud, cr->from, &m, offsetof(cm_msg, data) + len);
        p->pending.erase(p->pending.begin() + long(i));
        delete cr;
        return rc;
    }
    return -FI_EINVAL;
}

int pep_getopt(fid *, int level, int name, void *val, std::size_t *len)
{
    if (level != FI_OPT_ENDPOINT || name != FI_OPT_CM_DATA_SIZE)
        return -FI_ENOPROTOOPT;
    if (*len < sizeof(std::size_t)) {
        *len = sizeof(std::size_t);
        return -FI_ETOOSMALL;
    }
    std::size_t v = cm_data_max;
    std::memcpy(val, &v, sizeof v);
    *len = sizeof v;
    return 0;
}

int pep_setopt(fid *, int level, int name, const void *, std::size_t)
{
    if (level == FI_OPT_ENDPOINT && name == FI_OPT_CM_DATA_SIZE)
        return -FI_ENOPROTOOPT; // read only
    return -FI_ENOPROTOOPT;
}

constexpr ops_fid pep_fid_ops{.close = pep_close, .bind = pep_bind, .control = pep_control};
constexpr ops_ep pep_ep_ops{.getopt = pep_getopt, .setopt = pep_setopt};
constexpr ops_cm pep_cm_ops{.getname = pep_getname, .listen = pep_listen, .reject = pep_reject};

// ---- active side ----

int ep_getpeer(fid_ep *ep, void *addr, std::size_t *len)
{
    util::ep_core *c = util::core_of(ep);
    prov_ep *e = ep_of(c);
    if (!e->msg_conn || !is_connected(e->msg_conn))
        return -FI_ENOTCONN;
    return addr_out(resolver_for(e->dom->lim.host_local), c->info->addr_format, e->msg_conn->peer, addr, len);
}

int ep_connect(fid_ep *ep, const void *addr, const void *param, std::size_t len)
{
    util::ep_core *c = util::core_of(ep);
    prov_ep *e = ep_of(c);
    if (len > cm_data_max)
        return -FI_EINVAL;
    if (!c->eq)
        return -FI_ENOEQ;
    if (e->msg_conn)
        return -FI_EISCONN;
    // The address in the endpoint's format; a service address leads to the
    // passive endpoint bound to it now (none: refused, as a port nobody
    // listens on).
    const addr_resolver &res = resolver_for(e->dom->lim.host_local);
    ep_addr given{}, to{};
    std::size_t alen = c->info->addr_format == FI_ADDR_STR ? ::strnlen(static_cast<const char *>(addr), 4096) + 1
                                                           : sizeof(ep_addr);
    if (addr_decode(res, c->info->addr_format, addr, alen, given))
        return -FI_EINVAL;
    if (int rc = resolve_endpoint(res, given, to); rc)
        return rc;
    if (int rc = util::ep_enable(c); rc)
        return rc;
    util::guard g(e->lock);
    auto *cn = new (std::nothrow) conn;
    if (!cn)
        return -FI_ENOMEM;
    cn->peer = to;
    int s = -1;
    int rc = slot_open(e, to, 0, false, s);
    if (rc) {
        delete cn;
        return rc;
    }
    e->slots[s].c = cn;
    cn->slot = s;
    cn->req_qpn = e->slots[s].qp->qp_num;
    cn->state = conn::connecting;
    cn->ah = ah_for(e, to);
    cm_msg m{};
    m.op = cm_req;
    m.ep_type = FI_EP_MSG;
    m.req_qpn = cn->req_qpn;
    cm_sign(e, m);
    m.from = e->addr;
    if (e->pep_ud)
        m.rc_at = e->pep_ud->own; // our RC QP is not in the adopted address's segment
    m.datalen = std::uint16_t(len);
    if (len)
        std::memcpy(m.data, param, len);
    if (!cn->ah || ud_send(e, cn->ah, to.qpn, &m, offsetof(cm_msg, data) + len) != 0) {
        slot_close(e, s);
        if (cn->ah)
            (void)vq::destroy_ah(cn->ah);
        delete cn;
        return -FI_ECONNREFUSED;
    }
    e->msg_conn = cn;
    e->all.push_back(cn);
    return 0;
}

int ep_accept(fid_ep *ep, const void *param, std::size_t len)
{
    util::ep_core *c = util::core_of(ep);
    prov_ep *e = ep_of(c);
    if (len > cm_data_max)
        return -FI_EINVAL;
    fid *h = c->info->handle;
    if (!h || h->fclass != FI_CLASS_CONNREQ)
        return -FI_EINVAL;
    auto *cr = reinterpret_cast<connreq *>(h);
    if (e->msg_conn)
        return -FI_EISCONN;
    if (int rc = util::ep_enable(c); rc)
        return rc;
    pep_obj *p = cr->pep;
    {
        std::lock_guard g(p->mu);
        bool found = false;
        for (std::size_t i = 0; i < p->pending.size(); i++)
            if (p->pending[i] == cr) {
                p->pending.erase(p->pending.begin() + long(i));
                found = true;
                break;
            }
        if (!found)
            return -FI_EINVAL; // already accepted or rejected
    }
    // The request is ours from here on, accepted or not: the endpoint's
    // info must not keep pointing at it once it is freed.
    c->info->handle = nullptr;
    util::guard g(e->lock);
    auto *cn = new (std::nothrow) conn;
    if (!cn) {
        delete cr;
        return -FI_ENOMEM;
    }
    cn->peer = cr->from;
    int s = -1;
    // A requester QP that does not exist is found without creating a QP.
    int rc = dest_qp_ok(e, cr->rc_at, cr->req_qpn) ? slot_open(e, cr->rc_at, cr->req_qpn, true, s) : -FI_ENOENT;
    if (rc) {
        delete cn;
        delete cr;
        return rc == -FI_ENOENT ? -FI_ECONNABORTED : rc;
    }
    e->slots[s].c = cn;
    cn->slot = s;
    conn_agree(e, cn, cr->flags);
    cn->state = up_state(cn);
    cn->ah = ah_for(e, cr->from);
    cm_msg m{};
    m.op = cm_rep;
    m.req_qpn = cr->req_qpn;
    m.rep_qpn = e->slots[s].qp->qp_num;
    cm_sign(e, m);
    m.from = e->addr;
    m.datalen = std::uint16_t(len);
    if (len)
        std::memcpy(m.data, param, len);
    rc = cn->ah ? ud_send(e, cn->ah, cr->from.qpn, &m, offsetof(cm_msg, data) + len) : -FI_ECONNABORTED;
    delete cr;
    e->msg_conn = cn;
    e->all.push_back(cn);
    if (rc)
        return rc;
    eq_cm_entry ev{&ep->fid, nullptr};
    (void)util::eq_post(c->eq, FI_CONNECTED, &ev, sizeof ev);
    return 0;
}

int ep_shutdown(fid_ep *ep, std::uint64_t flags)
{
    util::ep_core *c = util::core_of(ep);
    prov_ep *e = ep_of(c);
    if (flags)
        return -FI_EBADFLAGS;
    util::guard g(e->lock);
    conn *cn = e->msg_conn;
    if (!cn || !is_connected(cn) || cn->shut)
        return -FI_ENOTCONN;
    int rc = vq::post_send_imm_inline(e->slots[cn->slot].qp, ~0ULL, imm_wire(w_shutdown, 0, 0), nullptr, 0, 0);
    cn->shut = true;
    cn->state = conn::failed;
    return rc;
}

} // namespace

const ops_cm msg_cm_ops{.getname = ep_getname,
                        .getpeer = ep_getpeer,
                        .connect = ep_connect,
                        .accept = ep_accept,
                        .shutdown = ep_shutdown};

void msg_event(prov_ep *e, std::uint32_t event)
{
    if (!e->core->eq)
        return;
    eq_cm_entry ev{&e->core->main->ep.fid, nullptr};
    (void)util::eq_post(e->core->eq, event, &ev, sizeof ev);
}

// Active MSG endpoint: REP / REJ for our connect.
void pep_cm(prov_ep *e, const cm_msg &m)
{
    conn *cn = e->msg_conn;
    if (!cn || cn->state != conn::connecting || m.req_qpn != cn->req_qpn || m.datalen > cm_data_max)
        return;
    util::ep_core *c = e->core;
    if (m.op == cm_rep) {
        if (slot_connect(e, cn->slot, m.from, m.rep_qpn) != 0) {
            cn->state = conn::failed;
            eq_err_entry err{};
            err.fid = &c->main->ep.fid;
            err.context = c->main->ep.fid.context;
            err.err = FI_ECONNABORTED;
            (void)util::eq_post_err(c->eq, err);
            return;
        }
        cn->peer = m.from;
        conn_agree(e, cn, cm_peer_flags(m));
        cn->state = up_state(cn);
        std::uint8_t ev[sizeof(eq_cm_entry) + cm_data_max];
        eq_cm_entry x{&c->main->ep.fid, nullptr};
        std::memcpy(ev, &x, sizeof x);
        std::memcpy(ev + sizeof x, m.data, m.datalen);
        (void)util::eq_post(c->eq, FI_CONNECTED, ev, sizeof x + m.datalen);
    } else if (m.op == cm_rej) {
        cn->state = conn::failed;
        eq_err_entry err{};
        err.fid = &c->main->ep.fid;
        err.context = c->main->ep.fid.context;
        err.err = FI_ECONNREFUSED;
        (void)util::eq_post_err(c->eq, err, m.data, m.datalen);
    }
}

int pep_adopt(fid *handle, prov_ep *e)
{
    auto *p = reinterpret_cast<pep_obj *>(handle);
    if (!(fid_live(handle) && handle->fclass == FI_CLASS_PEP) || p->pep.fid.ops != &pep_fid_ops)
        return -FI_EINVAL; // not a passive endpoint of this provider
    if (p->fabric != e->dom->fabric)
        return -FI_EINVAL;
    std::lock_guard g(p->mu);
    if (p->taken || p->listening)
        return -FI_EOPBADSTATE; // a listening passive endpoint keeps its address
    if (p->ctx->dev != e->dom->ctx->dev)
        return -FI_EINVAL; // its address is on another device
    auto *a = new (std::nothrow) adopted_ud;
    if (!a)
        return -FI_ENOMEM;
    a->ctx = p->ctx;
    a->pd = p->pd;
    a->cq = p->cq;
    a->ud = p->ud;
    a->mr = p->mr;
    a->bufs = std::move(p->bufs);
    a->buf_size = p->buf_size;
    a->grh = p->grh;
    a->svc = p->svc; // the service leads to the endpoint now
    a->res = p->res;
    p->svc = nullptr;
    p->ctx = nullptr;
    p->pd = nullptr;
    p->cq = nullptr;
    p->ud = nullptr;
    p->mr = nullptr;
    p->taken = true;
    a->own = e->addr;
    e->pep_ud = a;
    e->addr = p->addr;
    return 0;
}

void adopted_progress(prov_ep *e)
{
    adopted_ud *a = e->pep_ud;
    vq::wc w[8];
    int n = vq::poll_cq(a->cq, 8, w);
    for (int k = 0; k < n; k++) {
        if (w[k].qp_num != a->ud->qp_num || w[k].wr_id == ~0ULL)
            continue;
        const std::uint8_t *b = a->bufs.data() + w[k].wr_id * a->buf_size;
        std::uint32_t len = 0;
        cm_msg m;
        if (w[k].status == vq::wc_status::success && ud_message(w[k], a->grh, b, len) && cm_parse(b, len, m))
            pep_cm(e, m); // REP / REJ for a connect from the adopted address
        (void)vq::post_recv(a->ud, w[k].wr_id,
                            reinterpret_cast<std::uint64_t>(a->bufs.data()) + w[k].wr_id * a->buf_size, a->buf_size,
                            a->mr->lkey);
    }
}

void adopted_destroy(adopted_ud *a)
{
    if (!a)
        return;
    if (a->ud)
        (void)vq::destroy_qp(a->ud);
    if (a->mr)
        (void)vq::dereg_mr(a->mr);
    if (a->cq)
        (void)vq::destroy_cq(a->cq);
    if (a->pd)
        (void)vq::dealloc_pd(a->pd);
    if (a->ctx)
        (void)vq::close_device(a->ctx);
    if (a->res)
        a->res->unbind(a->svc);
    delete a;
}

int pep_open(fid_fabric *fabric, info *in, fid_pep **out, void *context)
{
    auto *p = new (std::nothrow) pep_obj;
    if (!p)
        return -FI_ENOMEM;
    p->fabric = util::to_fabric(fabric);
    p->fabric->refs.fetch_add(1);
    p->info = dupinfo(in);
    // The passive endpoint listens on the device its info's domain names
    // (the fabric's first device when none is named).
    vq::device *dev = device_named(p->fabric->name.c_str(), in && in->domain_attr ? in->domain_attr->name : nullptr);
    int rc = !p->info ? -FI_ENOMEM : !dev ? -FI_ENODEV : 0;
    vq::device_attr da;
    dev_limits l;
    if (!rc)
        rc = device_attr_of(dev, da);
    if (!rc)
        rc = limits_of(da, l);
    vq::cq_init_attr ca;
    ca.cqe = int(std::min<std::uint32_t>(256, da.max_cqe));
    vq::qp_init_attr ia;
    if (!rc)
        rc = vq::open_device(dev, &p->ctx);
    if (!rc)
        rc = vq::alloc_pd(p->ctx, &p->pd);
    if (!rc)
        rc = vq::create_cq(p->ctx, &ca, &p->cq);
    if (!rc) {
        ia.type = vq::qp_type::ud;
        ia.send_cq = ia.recv_cq = p->cq;
        ia.cap.max_recv_wr = l.ud_depth;
        ia.cap.max_send_wr = l.ud_depth;
        ia.cap.max_inline_data = l.inline_max;
        rc = vq::create_qp(p->pd, &ia, &p->ud);
    }
    vq::qp_attr a;
    a.qkey = qkey;
    for (vq::qp_state st : {vq::qp_state::init, vq::qp_state::rtr, vq::qp_state::rts}) {
        a.state = st;
        if (!rc)
            rc = vq::modify_qp(p->ud, &a, vq::QP_ATTR_STATE | (st == vq::qp_state::init ? vq::QP_ATTR_QKEY : 0));
    }
    if (!rc) {
        p->buf_size = l.ud_buf;
        p->grh = l.grh;
        p->bufs.assign(std::size_t(l.ud_depth) * p->buf_size, 0);
        rc = vq::reg_mr(p->pd, p->bufs.data(), p->bufs.size(), vq::ACCESS_LOCAL_WRITE, &p->mr);
    }
    for (std::uint64_t i = 0; !rc && i < l.ud_depth; i++)
        rc = vq::post_recv(p->ud, i, reinterpret_cast<std::uint64_t>(p->bufs.data()) + i * p->buf_size, p->buf_size,
                           p->mr->lkey);
    if (rc) {
        pep_destroy(p);
        return rc;
    }
    vq::qp_addr qa = vq::get_qp_addr(p->ud);
    p->addr.qpn = qa.qpn;
    p->addr.len = std::uint8_t(std::min<std::size_t>(qa.dev.len, 59));
    std::memcpy(p->addr.name, qa.dev.raw, p->addr.len);
    // A source address naming a service (a server's getinfo): clients that
    // connect to that service reach this passive endpoint.
    p->res = &resolver_for(l.host_local);
    if ((rc = bind_source(*p->res, p->info, p->addr, &p->svc))) {
        pep_destroy(p);
        return rc;
    }
    p->pep.fid.fclass = FI_CLASS_PEP;
    p->pep.fid.context = context;
    p->pep.fid.ops = &pep_fid_ops;
    p->pep.ops = &pep_ep_ops;
    p->pep.cm = &pep_cm_ops;
    *out = &p->pep;
    return 0;
}

} // namespace shunt::prov::vqprov
