// Generic event queue.
#include <cstring>
#include <new>

#include "env/errors.h"
#include "fabric/detail/err_data.h"
#include "fabric/util/eq.h"
#include "fabric/util/poll.h"

namespace shunt::fabric::util {

namespace {

void progress(eq_obj *eq) { eq_progress(eq); }

ssize_t read_locked(eq_obj *eq, std::uint32_t *event, void *buf, std::size_t len, std::uint64_t flags)
{
    if (eq->q.empty())
        return -FI_EAGAIN;
    eq_obj::event &ev = eq->q.front();
    if (ev.is_err)
        return -FI_EAVAIL;
    if (len < ev.bytes.size())
        return -FI_ETOOSMALL;
    *event = ev.type;
    std::size_t n = ev.bytes.size();
    if (n)
        std::memcpy(buf, ev.bytes.data(), n);
    if (!(flags & FI_PEEK))
        eq->q.pop_front(); // ownership of a CONNREQ info passes to the reader
    return ssize_t(n);
}

ssize_t eq_read_op(fid_eq *f, std::uint32_t *event, void *buf, std::size_t len, std::uint64_t flags)
{
    eq_obj *eq = to_eq(f);
    if (flags & ~FI_PEEK)
        return -FI_EBADFLAGS;
    progress(eq);
    std::lock_guard g(eq->mu);
    ssize_t rc = read_locked(eq, event, buf, len, flags);
    if (eq->wait.enabled())
        eq->wait.drain();
    return rc;
}

ssize_t eq_readerr_op(fid_eq *f, eq_err_entry *buf, std::uint64_t flags)
{
    eq_obj *eq = to_eq(f);
    if (flags & ~FI_PEEK)
        return -FI_EBADFLAGS;
    progress(eq);
    std::lock_guard g(eq->mu);
    if (eq->q.empty() || !eq->q.front().is_err)
        return -FI_EAGAIN;
    eq_obj::event &ev = eq->q.front();
    void *user = buf->err_data;
    std::size_t user_size = buf->err_data_size;
    *buf = ev.err;
    detail::lend_err_data(buf, user, user_size, ev.err_data, eq->err_keep);
    if (!(flags & FI_PEEK))
        eq->q.pop_front();
    return sizeof(eq_err_entry);
}

ssize_t eq_write_op(fid_eq *f, std::uint32_t event, const void *buf, std::size_t len, std::uint64_t flags)
{
    eq_obj *eq = to_eq(f);
    if (!(eq->flags & FI_WRITE))
        return -FI_EINVAL;
    if (flags & ~FI_EQ_ERROR_FLAG)
        return -FI_EBADFLAGS;
    if (flags & FI_EQ_ERROR_FLAG) {
        if (len < sizeof(eq_err_entry))
            return -FI_EINVAL;
        const auto *e = static_cast<const eq_err_entry *>(buf);
        int rc = eq_post_err(eq, *e, e->err_data, e->err_data_size);
        return rc ? rc : ssize_t(len);
    }
    if (len > 4096)
        return -FI_EINVAL;
    int rc = eq_post(eq, event, buf, len);
    return rc ? rc : ssize_t(len);
}

ssize_t eq_sread_op(fid_eq *f, std::uint32_t *event, void *buf, std::size_t len, int timeout, std::uint64_t flags)
{
    eq_obj *eq = to_eq(f);
    if (!eq->wait.enabled())
        return -FI_ENOSYS;
    long long deadline = deadline_after(timeout);
    for (;;) {
        ssize_t rc = eq_read_op(f, event, buf, len, flags);
        if (rc != -FI_EAGAIN)
            return rc;
        int left = ms_left(deadline);
        if (left == 0)
            return -FI_EAGAIN;
        eq->wait.arm();
        bool empty;
        {
            std::lock_guard g(eq->mu);
            empty = eq->q.empty();
        }
        if (empty) {
            int slice = eq->progress.empty() ? left : 1;
            if (left >= 0 && (slice < 0 || slice > left))
                slice = left;
            eq->wait.wait(slice);
        }
        eq->wait.disarm();
    }
}

const char *eq_strerror_op(fid_eq *, int prov_errno, const void *, char *buf, std::size_t len)
{
    const char *s = shunt::strerror(prov_errno);
    if (buf && len) {
        std::strncpy(buf, s, len - 1);
        buf[len - 1] = 0;
        return buf;
    }
    return s;
}

int eq_close(fid *f)
{
    eq_obj *eq = reinterpret_cast<eq_obj *>(f);
    if (eq->refs.load())
        return -FI_EBUSY;
    for (auto &ev : eq->q)
        freeinfo(ev.owned_info);
    wait_set_leave(eq->wait_set, f);
    eq->fabric->refs.fetch_sub(1);
    delete eq;
    return 0;
}

int eq_control(fid *f, int cmd, void *arg)
{
    eq_obj *eq = reinterpret_cast<eq_obj *>(f);
    if (cmd == FI_GETWAITOBJ) {
        if (!arg)
            return -FI_EINVAL;
        *static_cast<wait_obj *>(arg) = eq->wait.kind();
        return 0;
    }
    if (cmd == FI_GETWAIT) {
        if (!arg)
            return -FI_EINVAL;
        if (eq->wait.fd() < 0)
            return -FI_ENODATA;
        *static_cast<int *>(arg) = eq->wait.fd();
        return 0;
    }
    return -FI_ENOSYS;
}

constexpr ops_fid eq_fid_ops{.close = eq_close, .control = eq_control};
constexpr ops_eq eq_ops{.read = eq_read_op,
                        .readerr = eq_readerr_op,
                        .write = eq_write_op,
                        .sread = eq_sread_op,
                        .strerror = eq_strerror_op};

} // namespace

int eq_post(eq_obj *eq, std::uint32_t type, const void *buf, std::size_t len, info *owned_info)
{
    {
        std::lock_guard g(eq->mu);
        if (eq->q.size() >= eq->size)
            return -FI_EAGAIN;
        eq_obj::event ev{};
        ev.type = type;
        ev.is_err = false;
        if (len)
            ev.bytes.assign(static_cast<const std::uint8_t *>(buf), static_cast<const std::uint8_t *>(buf) + len);
        ev.owned_info = owned_info;
        eq->q.push_back(std::move(ev));
    }
    eq->wait.signal();
    return 0;
}

int eq_post_err(eq_obj *eq, const eq_err_entry &e, const void *err_data, std::size_t err_data_size)
{
    {
        std::lock_guard g(eq->mu);
        if (eq->q.size() >= eq->size)
            return -FI_EAGAIN;
        eq_obj::event ev{};
        ev.is_err = true;
        ev.err = e;
        ev.err.err_data = nullptr;
        ev.err.err_data_size = 0;
        if (err_data && err_data_size)
            ev.err_data.assign(static_cast<const std::uint8_t *>(err_data),
                               static_cast<const std::uint8_t *>(err_data) + err_data_size);
        eq->q.push_back(std::move(ev));
    }
    eq->wait.signal();
    return 0;
}

void eq_add_progress(eq_obj *eq, progress_hook h)
{
    guard g(eq->plock);
    eq->progress.push_back(h);
}

void eq_remove_progress(eq_obj *eq, void *arg)
{
    guard g(eq->plock);
    for (std::size_t i = 0; i < eq->progress.size(); i++)
        if (eq->progress[i].arg == arg) {
            eq->progress.erase(eq->progress.begin() + long(i));
            return;
        }
}

void eq_progress(eq_obj *eq)
{
    guard g(eq->plock);
    for (auto &h : eq->progress)
        h.fn(h.arg);
}

std::size_t eq_pending(eq_obj *eq)
{
    std::lock_guard g(eq->mu);
    return eq->q.size();
}

int eq_open(fid_fabric *fabric, eq_attr *attr, fid_eq **out, void *context)
{
    fabric_obj *f = to_fabric(fabric);
    if (!attr || !out)
        return -FI_EINVAL;
    if (attr->flags & ~FI_WRITE)
        return -FI_EBADFLAGS;
    auto *eq = new (std::nothrow) eq_obj;
    if (!eq)
        return -FI_ENOMEM;
    if (attr->wait_obj != FI_WAIT_SET) {
        if (int rc = eq->wait.open(attr->wait_obj); rc) {
            delete eq;
            return rc;
        }
    }
    eq->fabric = f;
    eq->flags = attr->flags;
    eq->size = attr->size ? attr->size : 1024;
    eq->plock.enable(true);
    eq->eq.fid.fclass = FI_CLASS_EQ;
    eq->eq.fid.context = context;
    eq->eq.fid.ops = &eq_fid_ops;
    eq->eq.ops = &eq_ops;
    // last: once a member, the set's waits look at it
    if (attr->wait_obj == FI_WAIT_SET) {
        if (int rc = wait_set_join(attr->wait_set, f, &eq->eq.fid, eq->wait); rc) {
            delete eq;
            return rc;
        }
        eq->wait_set = attr->wait_set;
    }
    f->refs.fetch_add(1);
    *out = &eq->eq;
    return 0;
}

} // namespace shunt::fabric::util
