// Generic poll sets and wait sets (fi_poll(3)).
#include <algorithm>
#include <new>
#include <sched.h>

#include "env/errors.h"
#include "fabric/util/cntr.h"
#include "fabric/util/cq.h"
#include "fabric/util/eq.h"
#include "fabric/util/poll.h"

namespace shunt::fabric::util {

waiter &waiter_of(fid *f)
{
    switch (f->fclass) {
    case FI_CLASS_CQ: return reinterpret_cast<cq_obj *>(f)->wait;
    case FI_CLASS_CNTR: return reinterpret_cast<cntr_obj *>(f)->wait;
    default: return reinterpret_cast<eq_obj *>(f)->wait;
    }
}

namespace {

// Manual progress: nothing else moves the members' endpoints forward, so a
// wait wakes up every millisecond to drive them.
bool needs_progress(fid *f)
{
    switch (f->fclass) {
    case FI_CLASS_CQ: return reinterpret_cast<cq_obj *>(f)->domain->data_progress != FI_PROGRESS_AUTO;
    case FI_CLASS_CNTR: return reinterpret_cast<cntr_obj *>(f)->do_progress;
    default: return !reinterpret_cast<eq_obj *>(f)->progress.empty();
    }
}

domain_obj *owner_domain(fid *f)
{
    switch (f->fclass) {
    case FI_CLASS_CQ: return reinterpret_cast<cq_obj *>(f)->domain;
    case FI_CLASS_CNTR: return reinterpret_cast<cntr_obj *>(f)->domain;
    default: return nullptr;
    }
}

wait_set_obj *set_of(fid_wait *w) { return reinterpret_cast<wait_set_obj *>(w); }
poll_obj *poll_of(fid_poll *p) { return reinterpret_cast<poll_obj *>(p); }

int wait_op(fid_wait *f, int timeout)
{
    wait_set_obj *ws = set_of(f);
    long long deadline = deadline_after(timeout);
    for (;;) {
        std::vector<fid *> armed;
        bool ready = false, progress = false, woken = false;
        ws->w.drain(); // wake-ups of earlier waits
        {
            std::lock_guard g(ws->mu);
            armed = ws->members;
            // Arm before looking: a write after the look wakes the set.
            for (fid *m : armed)
                waiter_of(m).arm();
            for (fid *m : armed) {
                progress = progress || needs_progress(m);
                if (!ready && has_events(m))
                    ready = true;
            }
        }
        int left = ms_left(deadline);
        if (!ready && left != 0) {
            if (ws->w.enabled()) {
                int slice = progress ? 1 : left;
                if (left >= 0 && (slice < 0 || slice > left))
                    slice = left;
                // Woken: a member signalled (an entry, or fi_cq_signal), as
                // libfabric's wait sets report it.
                woken = ws->w.wait(slice) == 0;
            } else {
                sched_yield(); // FI_WAIT_YIELD
            }
        }
        {
            // Disarm what was armed and is still a member (a member that
            // closed meanwhile is gone, one that joined was not armed).
            std::lock_guard g(ws->mu);
            for (fid *m : armed)
                if (std::find(ws->members.begin(), ws->members.end(), m) != ws->members.end())
                    waiter_of(m).disarm();
        }
        if (ready || woken)
            return 0;
        if (left == 0)
            return -FI_ETIMEDOUT;
    }
}

int wait_close(fid *f)
{
    wait_set_obj *ws = reinterpret_cast<wait_set_obj *>(f);
    {
        std::lock_guard g(ws->mu);
        if (!ws->members.empty())
            return -FI_EBUSY;
    }
    ws->fabric->refs.fetch_sub(1);
    delete ws;
    return 0;
}

int wait_control(fid *f, int cmd, void *arg)
{
    wait_set_obj *ws = reinterpret_cast<wait_set_obj *>(f);
    if (cmd != FI_GETWAIT && cmd != FI_GETWAITOBJ)
        return -FI_ENOSYS;
    if (!arg)
        return -FI_EINVAL;
    if (cmd == FI_GETWAITOBJ) {
        *static_cast<wait_obj *>(arg) = ws->w.kind();
        return 0;
    }
    if (ws->w.fd() < 0)
        return -FI_ENODATA;
    *static_cast<int *>(arg) = ws->w.fd();
    return 0;
}

constexpr ops_fid wait_fid_ops{.close = wait_close, .control = wait_control};
constexpr ops_wait wait_ops{.wait = wait_op};

int poll_op(fid_poll *f, void **context, int count)
{
    poll_obj *ps = poll_of(f);
    std::lock_guard g(ps->mu);
    int n = 0;
    for (fid *m : ps->members) {
        // every member is looked at (and progressed), also past count
        if (has_events(m) && n < count)
            context[n++] = m->context;
    }
    return n;
}

std::atomic<int> &refs_of(fid *f)
{
    return f->fclass == FI_CLASS_CQ ? reinterpret_cast<cq_obj *>(f)->refs : reinterpret_cast<cntr_obj *>(f)->refs;
}

int poll_add_op(fid_poll *f, fid *m, std::uint64_t flags)
{
    poll_obj *ps = poll_of(f);
    if (flags)
        return -FI_EBADFLAGS;
    if (m->fclass != FI_CLASS_CQ && m->fclass != FI_CLASS_CNTR)
        return -FI_EINVAL;
    if (owner_domain(m) != ps->domain)
        return -FI_EINVAL;
    std::lock_guard g(ps->mu);
    if (std::find(ps->members.begin(), ps->members.end(), m) != ps->members.end())
        return 0;
    try {
        ps->members.push_back(m);
    } catch (...) {
        return -FI_ENOMEM;
    }
    refs_of(m).fetch_add(1); // the member cannot close while in the set
    return 0;
}

int poll_del_op(fid_poll *f, fid *m, std::uint64_t flags)
{
    poll_obj *ps = poll_of(f);
    if (flags)
        return -FI_EBADFLAGS;
    std::lock_guard g(ps->mu);
    auto it = std::find(ps->members.begin(), ps->members.end(), m);
    if (it == ps->members.end())
        return 0;
    ps->members.erase(it);
    refs_of(m).fetch_sub(1);
    return 0;
}

int poll_close(fid *f)
{
    poll_obj *ps = reinterpret_cast<poll_obj *>(f);
    for (fid *m : ps->members)
        refs_of(m).fetch_sub(1);
    ps->domain->refs.fetch_sub(1);
    delete ps;
    return 0;
}

constexpr ops_fid poll_fid_ops{.close = poll_close};
constexpr ops_poll poll_ops{.poll = poll_op, .poll_add = poll_add_op, .poll_del = poll_del_op};

} // namespace

bool wait_needs_progress(fid *f)
{
    if (!needs_progress(f))
        return false;
    domain_obj *d = owner_domain(f);
    // An EQ's progress hooks are a provider's connection management, which
    // a peer cannot signal either.
    return d ? d->waits_need_progress : true;
}

bool has_events(fid *f)
{
    switch (f->fclass) {
    case FI_CLASS_CQ: {
        cq_obj *cq = reinterpret_cast<cq_obj *>(f);
        if (cq->domain->data_progress != FI_PROGRESS_AUTO)
            cq_progress(cq);
        return cq_pending(cq) != 0;
    }
    case FI_CLASS_CNTR: {
        cntr_obj *c = reinterpret_cast<cntr_obj *>(f);
        cntr_progress(c);
        return cntr_changed(c);
    }
    case FI_CLASS_EQ: {
        eq_obj *eq = reinterpret_cast<eq_obj *>(f);
        eq_progress(eq);
        return eq_pending(eq) != 0;
    }
    default:
        return false;
    }
}

int wait_set_join(fid_wait *set, fabric_obj *fabric, fid *member, waiter &w)
{
    if (!set || set->fid.fclass != FI_CLASS_WAIT || set->fid.ops != &wait_fid_ops)
        return -FI_EINVAL;
    wait_set_obj *ws = set_of(set);
    if (ws->fabric != fabric)
        return -FI_EINVAL;
    std::lock_guard g(ws->mu);
    try {
        ws->members.push_back(member);
    } catch (...) {
        return -FI_ENOMEM;
    }
    w.attach(ws->w);
    return 0;
}

void wait_set_leave(fid_wait *set, fid *member)
{
    if (!set)
        return;
    wait_set_obj *ws = set_of(set);
    std::lock_guard g(ws->mu);
    auto it = std::find(ws->members.begin(), ws->members.end(), member);
    if (it != ws->members.end())
        ws->members.erase(it);
}

int wait_open(fid_fabric *fabric, wait_attr *attr, fid_wait **out)
{
    if (!attr || !out)
        return -FI_EINVAL;
    if (attr->flags)
        return -FI_EINVAL;
    if (attr->wait_obj != FI_WAIT_UNSPEC && attr->wait_obj != FI_WAIT_FD && attr->wait_obj != FI_WAIT_YIELD)
        return attr->wait_obj == FI_WAIT_MUTEX_COND || attr->wait_obj == FI_WAIT_POLLFD ? -FI_ENOSYS : -FI_EINVAL;
    auto *ws = new (std::nothrow) wait_set_obj;
    if (!ws)
        return -FI_ENOMEM;
    if (int rc = ws->w.open(attr->wait_obj); rc) {
        delete ws;
        return rc;
    }
    ws->fabric = to_fabric(fabric);
    ws->wait.fid.fclass = FI_CLASS_WAIT;
    ws->wait.fid.context = nullptr;
    ws->wait.fid.ops = &wait_fid_ops;
    ws->wait.ops = &wait_ops;
    ws->fabric->refs.fetch_add(1);
    *out = &ws->wait;
    return 0;
}

int poll_open(fid_domain *domain, poll_attr *attr, fid_poll **out)
{
    if (!out)
        return -FI_EINVAL;
    if (attr && attr->flags)
        return -FI_EINVAL;
    auto *ps = new (std::nothrow) poll_obj;
    if (!ps)
        return -FI_ENOMEM;
    ps->domain = to_domain(domain);
    ps->poll.fid.fclass = FI_CLASS_POLL;
    ps->poll.fid.context = nullptr;
    ps->poll.fid.ops = &poll_fid_ops;
    ps->poll.ops = &poll_ops;
    ps->domain->refs.fetch_add(1);
    *out = &ps->poll;
    return 0;
}

} // namespace shunt::fabric::util
