// Generic fabric and domain objects.
#include <new>

#include "env/errors.h"
#include "fabric/util/cntr.h"
#include "fabric/util/cq.h"
#include "fabric/util/av.h"
#include "fabric/util/eq.h"
#include "fabric/util/info.h"
#include "fabric/util/poll.h"
#include "fabric/util/ep.h"

namespace shunt::fabric::util {

int stx_open(fid_domain *domain, tx_attr *attr, fid_stx **out, void *context);
int srx_open(fid_domain *domain, rx_attr *attr, fid_ep **out, void *context);

namespace {

constexpr std::uint64_t FI_REG_MR = 1ULL << 59; // domain_bind: MR completion events

int trywait_op(fid_fabric *, fid **fids, int count)
{
    for (int i = 0; i < count; i++) {
        fid *f = fids[i];
        switch (f->fclass) {
        case FI_CLASS_CQ: {
            cq_obj *cq = reinterpret_cast<cq_obj *>(f);
            if (!cq->wait.enabled())
                return -FI_EINVAL;
            cq->wait.arm();
            cq_progress(cq);
            if (cq_pending(cq) || wait_needs_progress(f)) {
                cq->wait.disarm();
                return -FI_EAGAIN;
            }
            // stays armed: a later write wakes the user's poll on the fd
            break;
        }
        case FI_CLASS_CNTR: {
            cntr_obj *c = reinterpret_cast<cntr_obj *>(f);
            if (!c->wait.enabled())
                return -FI_EINVAL;
            if (wait_needs_progress(f)) {
                cntr_progress(c);
                return -FI_EAGAIN;
            }
            c->wait.arm();
            break;
        }
        case FI_CLASS_EQ: {
            eq_obj *eq = reinterpret_cast<eq_obj *>(f);
            if (!eq->wait.enabled())
                return -FI_EINVAL;
            eq->wait.arm();
            if (eq_pending(eq) || wait_needs_progress(f)) {
                eq->wait.disarm();
                if (wait_needs_progress(f))
                    eq_progress(eq);
                return -FI_EAGAIN;
            }
            break;
        }
        case FI_CLASS_WAIT: {
            // fi_poll(3): only the set is passed for its members; they stay
            // armed so that a later event wakes the user's wait on its fd
            wait_set_obj *ws = reinterpret_cast<wait_set_obj *>(f);
            if (!ws->w.enabled())
                return -FI_EINVAL;
            std::lock_guard g(ws->mu);
            for (fid *m : ws->members)
                waiter_of(m).arm();
            for (fid *m : ws->members) {
                if (has_events(m) || wait_needs_progress(m)) {
                    for (fid *x : ws->members)
                        waiter_of(x).disarm();
                    return -FI_EAGAIN;
                }
            }
            break;
        }
        default:
            return -FI_EINVAL;
        }
    }
    return 0;
}

int query_atomic_op(fid_domain *domain, datatype dt, op o, atomic_attr *attr, std::uint64_t flags)
{
    domain_obj *d = to_domain(domain);
    if (!d->hooks || !d->hooks->query_atomic)
        return -FI_EOPNOTSUPP;
    return d->hooks->query_atomic(d, dt, o, attr, flags);
}

int domain_bind_op(fid *f, fid *b, std::uint64_t flags)
{
    domain_obj *d = reinterpret_cast<domain_obj *>(f);
    if (b->fclass != FI_CLASS_EQ)
        return -FI_EINVAL;
    if (flags & ~FI_REG_MR)
        return -FI_EBADFLAGS;
    if (d->eq)
        return -FI_EBUSY;
    d->eq = reinterpret_cast<eq_obj *>(b);
    d->eq->refs.fetch_add(1);
    return 0;
}

int domain_close_op(fid *f) { return domain_close(f); }

constexpr ops_fid domain_fid_ops{.close = domain_close_op, .bind = domain_bind_op};
constexpr ops_fid fabric_fid_ops{.close = fabric_close};

} // namespace

ops_fabric default_fabric_ops()
{
    ops_fabric o;
    o.eq_open = eq_open;
    o.trywait = trywait_op;
    o.wait_open = wait_open;
    return o;
}

ops_domain default_domain_ops()
{
    ops_domain o;
    o.av_open = av_open;
    o.cq_open = cq_open;
    o.cntr_open = cntr_open;
    o.stx_ctx = stx_open;
    o.srx_ctx = srx_open;
    o.query_atomic = query_atomic_op;
    o.poll_open = poll_open;
    return o;
}

void fabric_init(fabric_obj *f, const provider *prov, const fabric_attr *attr, void *context, const ops_fabric *ops)
{
    f->prov = prov;
    f->name = attr && attr->name ? attr->name : (prov ? prov->name : "");
    f->fabric.fid.fclass = FI_CLASS_FABRIC;
    f->fabric.fid.context = context;
    f->fabric.fid.ops = &fabric_fid_ops;
    f->fabric.ops = ops;
}

int fabric_close(fid *fid)
{
    fabric_obj *f = reinterpret_cast<fabric_obj *>(fid);
    if (f->refs.load())
        return -FI_EBUSY;
    delete f;
    return 0;
}

int domain_init(domain_obj *d, fabric_obj *f, const info *in, void *context, const ops_domain *ops,
                const domain_hooks *hooks)
{
    if (!d || !f || !in)
        return -FI_EINVAL;
    if (in->fabric_attr && in->fabric_attr->name && f->name != in->fabric_attr->name)
        return -FI_EINVAL;
    d->info = dupinfo(in);
    if (!d->info)
        return -FI_ENOMEM;
    d->fabric = f;
    d->hooks = hooks;
    if (const domain_attr *a = in->domain_attr) {
        d->thread = a->threading == FI_THREAD_UNSPEC ? FI_THREAD_SAFE : a->threading;
        d->data_progress = a->data_progress == FI_PROGRESS_UNSPEC ? FI_PROGRESS_MANUAL : a->data_progress;
        d->control_progress = a->control_progress == FI_PROGRESS_UNSPEC ? d->data_progress : a->control_progress;
        // An info of the legacy registration modes (FI_MR_BASIC, or
        // FI_MR_SCALABLE with the FI_LOCAL_MR mode bit) opens a domain that
        // follows their rules.
        d->mr_mode = mr_mode_normalize(a->mr_mode);
        if ((a->mr_mode & (FI_MR_BASIC | FI_MR_SCALABLE)) && (in->mode & FI_LOCAL_MR))
            d->mr_mode |= FI_MR_LOCAL;
        d->avt = a->av_type == FI_AV_UNSPEC ? FI_AV_TABLE : a->av_type;
    }
    d->caps = in->caps;
    d->mt = d->thread == FI_THREAD_SAFE || d->data_progress == FI_PROGRESS_AUTO;
    d->mr_lock.enable(d->mt);
    d->domain.fid.fclass = FI_CLASS_DOMAIN;
    d->domain.fid.context = context;
    d->domain.fid.ops = &domain_fid_ops;
    d->domain.ops = ops;
    d->domain.mr = &mr_ops;
    f->refs.fetch_add(1);
    return 0;
}

int domain_close(fid *fid)
{
    domain_obj *d = reinterpret_cast<domain_obj *>(fid);
    if (d->refs.load())
        return -FI_EBUSY;
    if (d->hooks && d->hooks->close)
        d->hooks->close(d);
    if (d->eq)
        d->eq->refs.fetch_sub(1);
    d->fabric->refs.fetch_sub(1);
    freeinfo(d->info);
    if (d->free_fn)
        d->free_fn(d);
    else
        delete d;
    return 0;
}

} // namespace shunt::fabric::util
