// Generic completion queue.
#include <algorithm>
#include <cstring>
#include <new>
#include <sched.h>

#include "env/errors.h"
#include "fabric/detail/err_data.h"
#include "fabric/detail/live.h"
#include "fabric/util/cq.h"
#include "fabric/util/poll.h"

namespace shunt::fabric::util {

namespace {

struct cq_impl : cq_obj {
    bool do_progress = false;
    maybe_lock plock;
};

cq_impl *impl(fid_cq *c) { return static_cast<cq_impl *>(to_cq(c)); }

void put_context(void *buf, std::size_t i, const cq_slot &s) noexcept
{
    static_cast<cq_entry *>(buf)[i] = cq_entry{s.op_context};
}
void put_msg(void *buf, std::size_t i, const cq_slot &s) noexcept
{
    static_cast<cq_msg_entry *>(buf)[i] = cq_msg_entry{s.op_context, s.flags, s.len};
}
void put_data(void *buf, std::size_t i, const cq_slot &s) noexcept
{
    static_cast<cq_data_entry *>(buf)[i] = cq_data_entry{s.op_context, s.flags, s.len, s.buf, s.data};
}
void put_tagged(void *buf, std::size_t i, const cq_slot &s) noexcept
{
    static_cast<cq_tagged_entry *>(buf)[i] = cq_tagged_entry{s.op_context, s.flags, s.len, s.buf, s.data, s.tag};
}

cq_put_fn put_for(cq_format f)
{
    switch (f) {
    case FI_CQ_FORMAT_MSG: return put_msg;
    case FI_CQ_FORMAT_DATA: return put_data;
    case FI_CQ_FORMAT_TAGGED: return put_tagged;
    default: return put_context;
    }
}

/** The hooks of the endpoints bound to @p cq (cq_progress, inline). */
inline void run_progress(cq_impl *cq)
{
    guard g(cq->plock);
    for (auto &h : cq->progress)
        h.fn(h.arg);
}

/** read_impl past direct output: the ring, spilled entries, errors.
 *  @p progressed: direct output ran the progress already (and found nothing). */
[[gnu::noinline]] ssize_t read_ring(cq_impl *cq, void *buf, std::size_t count, fi_addr_t *src, bool progressed)
{
    if (!buf && count) [[unlikely]]
        return -FI_EINVAL;
    // Progress only when the ring holds less than the caller asks for: with
    // a full batch waiting it would only add to what is not read yet, and
    // under a flood that backlog takes up the posted receives, so that every
    // message after it went the unexpected way. The next read that finds
    // fewer entries drives it. A read of none (count 0) is how
    // applications drive progress: it always does.
    if (cq->do_progress && !progressed &&
        (count == 0 || cq->head.load(std::memory_order_relaxed) - cq->tail.load(std::memory_order_relaxed) < count))
        run_progress(cq);
    cq->rlock.lock();
    if (cq->nerr.load(std::memory_order_acquire)) [[unlikely]] {
        // Only what was written before the oldest error, then the error
        // (under the read lock: no other reader moves tail meanwhile).
        std::lock_guard g(cq->cold_mu);
        if (!cq->errs.empty()) {
            const std::size_t read = cq->tail.load(std::memory_order_relaxed) + cq->spill_out;
            const std::size_t at = cq->errs.front().at;
            if (read >= at) {
                cq->rlock.unlock();
                return -FI_EAVAIL;
            }
            count = std::min(count, at - read);
        }
    }
    std::size_t t = cq->tail.load(std::memory_order_relaxed);
    // Observe published slots: pairs with the release store in cq_write.
    std::size_t h = cq->head.load(std::memory_order_acquire);
    std::size_t n = 0;
    for (; n < count && t != h; n++, t++) {
        const cq_slot &s = cq->ring[t & cq->mask];
        cq->put(buf, n, s);
        if (src)
            src[n] = s.src;
    }
    // Release the slots to the producer.
    cq->tail.store(t, std::memory_order_release);
    if (n < count && t == h && cq->spilled.load(std::memory_order_acquire)) [[unlikely]] {
        std::lock_guard g(cq->cold_mu);
        while (n < count && !cq->overflow.empty()) {
            cq->put(buf, n, cq->overflow.front());
            if (src)
                src[n] = cq->overflow.front().src;
            cq->overflow.pop_front();
            cq->spill_out++;
            n++;
        }
        if (cq->overflow.empty())
            cq->spilled.store(false, std::memory_order_release);
    }
    cq->rlock.unlock();
    if (cq->wait.enabled())
        cq->wait.drain();
    return n ? ssize_t(n) : -FI_EAGAIN;
}

ssize_t read_impl(fid_cq *c, void *buf, std::size_t count, fi_addr_t *src)
{
    cq_impl *cq = impl(c);
    if (cq->direct_ok && count && buf &&
        cq->head.load(std::memory_order_relaxed) == cq->tail.load(std::memory_order_relaxed) &&
        !cq->spilled.load(std::memory_order_relaxed) && !cq->nerr.load(std::memory_order_relaxed)) [[likely]] {
        // Nothing stored (and every entry is older than what progress
        // produces now): direct output, the progress writing into the
        // caller's array.
        cq->direct = buf;
        cq->direct_src = src;
        cq->direct_n = 0;
        cq->direct_cap = count;
        run_progress(cq);
        const std::size_t n = cq->direct_n;
        cq->direct_cap = cq->direct_n = 0;
        cq->direct = nullptr;
        cq->direct_src = nullptr;
        if (n) {
            if (cq->wait_bound)
                cq->wait.drain();
            return ssize_t(n);
        }
        return read_ring(cq, buf, count, src, true);
    }
    return read_ring(cq, buf, count, src, false);
}

ssize_t cq_read_op(fid_cq *c, void *buf, std::size_t count) { return read_impl(c, buf, count, nullptr); }
ssize_t cq_readfrom_op(fid_cq *c, void *buf, std::size_t count, fi_addr_t *src)
{
    return read_impl(c, buf, count, src);
}

ssize_t cq_readerr_op(fid_cq *c, cq_err_entry *buf, std::uint64_t flags)
{
    cq_impl *cq = impl(c);
    if (!buf)
        return -FI_EINVAL;
    if (flags & ~FI_PEEK)
        return -FI_EBADFLAGS;
    std::lock_guard g(cq->cold_mu);
    if (cq->errs.empty())
        return -FI_EAGAIN;
    cq_obj::err in = cq->errs.front();
    void *user_data = buf->err_data;
    std::size_t user_size = buf->err_data_size;
    *buf = in.e;
    detail::lend_err_data(buf, user_data, user_size, in.data, cq->err_data_keep);
    if (!(flags & FI_PEEK)) {
        cq->errs.pop_front();
        cq->nerr.fetch_sub(1, std::memory_order_release);
    }
    return 1;
}

ssize_t sread_impl(fid_cq *c, void *buf, std::size_t count, fi_addr_t *src, const void *cond, int timeout)
{
    cq_impl *cq = impl(c);
    if (!cq->wait.enabled())
        return -FI_ENOSYS;
    std::size_t threshold = 1;
    if (cq->wait_cond == FI_CQ_COND_THRESHOLD && cond)
        threshold = std::min<std::size_t>(reinterpret_cast<std::uintptr_t>(cond), count);
    if (threshold == 0)
        threshold = 1;
    long long deadline = deadline_after(timeout);
    for (;;) {
        if (cq->signalled.exchange(false))
            return -FI_EAGAIN;
        if (cq->do_progress)
            cq_progress(cq);
        if (cq->nerr.load(std::memory_order_acquire))
            return read_impl(c, buf, count, src); // what came before the error, or -FI_EAVAIL
        std::size_t avail = cq->head.load(std::memory_order_acquire) - cq->tail.load(std::memory_order_relaxed);
        if (avail >= threshold || (avail && count < threshold) || cq->spilled.load(std::memory_order_acquire))
            return read_impl(c, buf, count, src);
        int left = ms_left(deadline);
        if (left == 0)
            return avail ? read_impl(c, buf, count, src) : -FI_EAGAIN;
        cq->wait.arm();
        std::size_t again = cq->head.load(std::memory_order_acquire) - cq->tail.load(std::memory_order_relaxed);
        if (again == avail && !cq->nerr.load() && !cq->signalled.load()) {
            // Manual progress: nobody else moves the endpoints forward, so
            // wake up regularly to drive them.
            int slice = cq->do_progress ? 1 : left;
            if (left >= 0 && slice > left)
                slice = left;
            if (slice < 0)
                slice = left;
            cq->wait.wait(slice);
        }
        cq->wait.disarm();
    }
}

ssize_t cq_sread_op(fid_cq *c, void *buf, std::size_t count, const void *cond, int timeout)
{
    if (!buf && count)
        return -FI_EINVAL;
    return sread_impl(c, buf, count, nullptr, cond, timeout);
}

ssize_t cq_sreadfrom_op(fid_cq *c, void *buf, std::size_t count, fi_addr_t *src, const void *cond, int timeout)
{
    if (!buf && count)
        return -FI_EINVAL;
    return sread_impl(c, buf, count, src, cond, timeout);
}

int cq_signal_op(fid_cq *c)
{
    cq_impl *cq = impl(c);
    cq->signalled.store(true);
    cq->wait.kick();
    return 0;
}

const char *cq_strerror_op(fid_cq *, int prov_errno, const void *, char *buf, std::size_t len)
{
    const char *s = shunt::strerror(prov_errno);
    if (buf && len) {
        std::strncpy(buf, s, len - 1);
        buf[len - 1] = 0;
        return buf;
    }
    return s;
}

int cq_close(fid *f)
{
    cq_impl *cq = static_cast<cq_impl *>(reinterpret_cast<cq_obj *>(f));
    if (cq->refs.load())
        return -FI_EBUSY;
    wait_set_leave(cq->wait_set, f);
    cq->domain->refs.fetch_sub(1);
    delete[] cq->ring;
    delete cq;
    return 0;
}

int cq_control(fid *f, int cmd, void *arg)
{
    cq_impl *cq = static_cast<cq_impl *>(reinterpret_cast<cq_obj *>(f));
    if (cmd == FI_GETWAIT || cmd == FI_GETWAITOBJ) {
        if (!arg)
            return -FI_EINVAL;
        if (cmd == FI_GETWAITOBJ) {
            *static_cast<wait_obj *>(arg) = cq->wait.kind();
            return 0;
        }
        if (cq->wait.fd() < 0)
            return -FI_ENODATA;
        *static_cast<int *>(arg) = cq->wait.fd();
        return 0;
    }
    return -FI_ENOSYS;
}

constexpr ops_fid cq_fid_ops{.close = cq_close, .control = cq_control};
constexpr ops_cq cq_ops{.read = cq_read_op,
                        .readfrom = cq_readfrom_op,
                        .readerr = cq_readerr_op,
                        .sread = cq_sread_op,
                        .sreadfrom = cq_sreadfrom_op,
                        .signal = cq_signal_op,
                        .strerror = cq_strerror_op};

} // namespace

void cq_spill(cq_obj *cq, const cq_slot &s)
{
    std::lock_guard g(cq->cold_mu);
    cq->overflow.push_back(s);
    cq->spill_in++;
    cq->spilled.store(true, std::memory_order_release);
}

void cq_write_err(cq_obj *cq, const cq_err_entry &e, const void *err_data, std::size_t err_data_size)
{
    // Inside this CQ's own direct read (same thread): what comes after the
    // error must not be returned before it, so the rest goes to the ring.
    if (cq->direct_cap)
        cq->direct_cap = cq->direct_n;
    {
        std::lock_guard g(cq->cold_mu);
        cq_obj::err x;
        x.at = cq->head.load(std::memory_order_acquire) + cq->spill_in;
        x.e = e;
        x.e.err_data = nullptr;
        x.e.err_data_size = 0;
        if (err_data && err_data_size)
            x.data.assign(static_cast<const std::uint8_t *>(err_data),
                          static_cast<const std::uint8_t *>(err_data) + err_data_size);
        cq->errs.push_back(std::move(x));
        cq->nerr.fetch_add(1, std::memory_order_release);
    }
    cq->wait.signal();
}

void cq_add_progress(cq_obj *c, progress_hook h)
{
    auto *cq = static_cast<cq_impl *>(c);
    guard g(cq->plock);
    cq->progress.push_back(h);
}

void cq_remove_progress(cq_obj *c, void *arg)
{
    auto *cq = static_cast<cq_impl *>(c);
    guard g(cq->plock);
    for (std::size_t i = 0; i < cq->progress.size(); i++)
        if (cq->progress[i].arg == arg) {
            cq->progress.erase(cq->progress.begin() + long(i));
            return;
        }
}

void cq_progress(cq_obj *c) { run_progress(static_cast<cq_impl *>(c)); }

std::size_t cq_pending(cq_obj *cq)
{
    std::size_t n = cq->head.load(std::memory_order_acquire) - cq->tail.load(std::memory_order_acquire);
    return n + cq->nerr.load() + (cq->spilled.load() ? 1 : 0);
}

int cq_open(fid_domain *domain, cq_attr *attr, fid_cq **out, void *context)
{
    domain_obj *d = to_domain(domain);
    if (!attr || !out)
        return -FI_EINVAL;
    if (attr->format < FI_CQ_FORMAT_UNSPEC || attr->format > FI_CQ_FORMAT_TAGGED)
        return -FI_EINVAL;
    if (attr->wait_cond != FI_CQ_COND_NONE && attr->wait_cond != FI_CQ_COND_THRESHOLD)
        return -FI_EINVAL;
    if (attr->wait_cond == FI_CQ_COND_THRESHOLD && attr->wait_obj == FI_WAIT_NONE)
        return -FI_EINVAL;
    if (attr->flags & ~FI_AFFINITY)
        return -FI_EBADFLAGS;
    if (attr->size > (std::size_t(1) << 24))
        return -FI_EINVAL;
    auto *cq = new (std::nothrow) cq_impl;
    if (!cq)
        return -FI_ENOMEM;
    if (attr->wait_obj != FI_WAIT_SET) {
        if (int rc = cq->wait.open(attr->wait_obj); rc) {
            delete cq;
            return rc;
        }
    }
    std::size_t size = attr->size ? attr->size : 1024;
    std::size_t n = 1;
    while (n < size)
        n <<= 1;
    // Value-initialised: every page of the ring touched now, none faulted in
    // by a completion later.
    cq->ring = new (std::nothrow) cq_slot[n]();
    if (!cq->ring) {
        delete cq;
        return -FI_ENOMEM;
    }
    cq->mask = n - 1;
    cq->domain = d;
    cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
    cq->wait_cond = attr->wait_cond;
    cq->wlock.enable(d->mt);
    cq->rlock.enable(d->thread == FI_THREAD_SAFE);
    cq->plock.enable(d->mt);
    cq->do_progress = d->data_progress != FI_PROGRESS_AUTO;
    cq->put = put_for(cq->format);
    // Direct output needs the reader to be the only producer while it reads:
    // manual progress and one thread at a time on the CQ and its endpoints.
    cq->direct_ok = cq->do_progress && !d->mt && (d->thread == FI_THREAD_DOMAIN || d->thread == FI_THREAD_COMPLETION);
    cq->wait_bound = cq->wait.enabled();
    cq->cq.fid.fclass = FI_CLASS_CQ;
    cq->cq.fid.context = context;
    cq->cq.fid.ops = &cq_fid_ops;
    cq->cq.ops = &cq_ops;
    // last: once a member, the set's waits look at it
    if (attr->wait_obj == FI_WAIT_SET) {
        if (int rc = wait_set_join(attr->wait_set, d->fabric, &cq->cq.fid, cq->wait); rc) {
            delete[] cq->ring;
            delete cq;
            return rc;
        }
        cq->wait_set = attr->wait_set;
    }
    d->refs.fetch_add(1);
    *out = &cq->cq;
    return 0;
}

} // namespace shunt::fabric::util
