// Generic counter.
#include <new>
#include <sched.h>
#include <thread>

#include "env/errors.h"
#include "fabric/util/cntr.h"
#include "fabric/util/poll.h"

namespace shunt::fabric::util {

namespace {

cntr_obj *obj(fid_cntr *c) { return to_cntr(c); }

void progress(cntr_obj *c) { cntr_progress(c); }

std::uint64_t cntr_read_op(fid_cntr *f)
{
    cntr_obj *c = obj(f);
    progress(c);
    return c->value.load(std::memory_order_acquire);
}

std::uint64_t cntr_readerr_op(fid_cntr *f)
{
    cntr_obj *c = obj(f);
    progress(c);
    return c->err.load(std::memory_order_acquire);
}

// The application's own set / add is not an event for poll and wait sets
// (fi_poll(3)): the new count is marked seen.
int cntr_add_op(fid_cntr *f, std::uint64_t v)
{
    cntr_obj *c = obj(f);
    c->seen_value.store(c->value.fetch_add(v, std::memory_order_acq_rel) + v, std::memory_order_relaxed);
    c->wait.signal();
    return 0;
}

int cntr_set_op(fid_cntr *f, std::uint64_t v)
{
    cntr_obj *c = obj(f);
    c->value.store(v, std::memory_order_release);
    c->seen_value.store(v, std::memory_order_relaxed);
    c->wait.signal();
    return 0;
}

int cntr_adderr_op(fid_cntr *f, std::uint64_t v)
{
    cntr_obj *c = obj(f);
    c->seen_err.store(c->err.fetch_add(v, std::memory_order_acq_rel) + v, std::memory_order_relaxed);
    c->wait.signal();
    return 0;
}

int cntr_seterr_op(fid_cntr *f, std::uint64_t v)
{
    cntr_obj *c = obj(f);
    c->err.store(v, std::memory_order_release);
    c->seen_err.store(v, std::memory_order_relaxed);
    c->wait.signal();
    return 0;
}

int cntr_wait_op(fid_cntr *f, std::uint64_t threshold, int timeout)
{
    cntr_obj *c = obj(f);
    if (!c->wait.enabled() && c->wait.kind() != FI_WAIT_YIELD)
        return -FI_ENOSYS;
    std::uint64_t err0 = c->err.load(std::memory_order_acquire);
    long long deadline = deadline_after(timeout);
    for (;;) {
        progress(c);
        if (c->value.load(std::memory_order_acquire) >= threshold)
            return 0;
        if (c->err.load(std::memory_order_acquire) != err0)
            return -FI_EAVAIL;
        int left = ms_left(deadline);
        if (left == 0)
            return -FI_ETIMEDOUT;
        if (!c->wait.enabled()) {
            sched_yield();
            continue;
        }
        c->wait.arm();
        if (c->value.load(std::memory_order_acquire) < threshold &&
            c->err.load(std::memory_order_acquire) == err0) {
            int slice = c->do_progress ? 1 : left;
            if (left >= 0 && (slice < 0 || slice > left))
                slice = left;
            c->wait.wait(slice);
        }
        c->wait.disarm();
    }
}

int cntr_close(fid *f)
{
    cntr_obj *c = reinterpret_cast<cntr_obj *>(f);
    if (c->refs.load())
        return -FI_EBUSY;
    wait_set_leave(c->wait_set, f);
    c->domain->refs.fetch_sub(1);
    delete c;
    return 0;
}

int cntr_control(fid *f, int cmd, void *arg)
{
    cntr_obj *c = reinterpret_cast<cntr_obj *>(f);
    if (cmd == FI_GETWAITOBJ) {
        if (!arg)
            return -FI_EINVAL;
        *static_cast<wait_obj *>(arg) = c->wait.kind();
        return 0;
    }
    if (cmd == FI_GETWAIT) {
        if (!arg)
            return -FI_EINVAL;
        if (c->wait.fd() < 0)
            return -FI_ENODATA;
        *static_cast<int *>(arg) = c->wait.fd();
        return 0;
    }
    return -FI_ENOSYS;
}

constexpr ops_fid cntr_fid_ops{.close = cntr_close, .control = cntr_control};
constexpr ops_cntr cntr_ops{.read = cntr_read_op,
                            .readerr = cntr_readerr_op,
                            .add = cntr_add_op,
                            .set = cntr_set_op,
                            .wait = cntr_wait_op,
                            .adderr = cntr_adderr_op,
                            .seterr = cntr_seterr_op};

} // namespace

void cntr_progress(cntr_obj *c)
{
    if (!c->do_progress)
        return;
    guard g(c->plock);
    for (auto &h : c->progress)
        h.fn(h.arg);
}

bool cntr_changed(cntr_obj *c)
{
    std::uint64_t v = c->value.load(std::memory_order_acquire), e = c->err.load(std::memory_order_acquire);
    bool changed = v != c->seen_value.exchange(v, std::memory_order_relaxed);
    changed = (e != c->seen_err.exchange(e, std::memory_order_relaxed)) || changed;
    return changed;
}

void cntr_add_progress(cntr_obj *c, progress_hook h)
{
    guard g(c->plock);
    c->progress.push_back(h);
}

void cntr_remove_progress(cntr_obj *c, void *arg)
{
    guard g(c->plock);
    for (std::size_t i = 0; i < c->progress.size(); i++)
        if (c->progress[i].arg == arg) {
            c->progress.erase(c->progress.begin() + long(i));
            return;
        }
}

int cntr_open(fid_domain *domain, cntr_attr *attr, fid_cntr **out, void *context)
{
    domain_obj *d = to_domain(domain);
    if (!attr || !out)
        return -FI_EINVAL;
    if (attr->events != FI_CNTR_EVENTS_COMP)
        return attr->events == FI_CNTR_EVENTS_BYTES ? -FI_EOPNOTSUPP : -FI_EINVAL;
    if (attr->flags)
        return -FI_EBADFLAGS;
    auto *c = new (std::nothrow) cntr_obj;
    if (!c)
        return -FI_ENOMEM;
    if (attr->wait_obj != FI_WAIT_SET) {
        if (int rc = c->wait.open(attr->wait_obj); rc) {
            delete c;
            return rc;
        }
    }
    c->domain = d;
    c->mt = d->mt;
    c->do_progress = d->data_progress != FI_PROGRESS_AUTO;
    c->plock.enable(d->mt);
    c->cntr.fid.fclass = FI_CLASS_CNTR;
    c->cntr.fid.context = context;
    c->cntr.fid.ops = &cntr_fid_ops;
    c->cntr.ops = &cntr_ops;
    // last: once a member, the set's waits look at it
    if (attr->wait_obj == FI_WAIT_SET) {
        if (int rc = wait_set_join(attr->wait_set, d->fabric, &c->cntr.fid, c->wait); rc) {
            delete c;
            return rc;
        }
        c->wait_set = attr->wait_set;
    }
    d->refs.fetch_add(1);
    *out = &c->cntr;
    return 0;
}

} // namespace shunt::fabric::util
