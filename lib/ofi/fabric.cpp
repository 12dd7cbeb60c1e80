// Objects opened from a fabric: domains and event queues. EQ entries carry
// Shunt fids and Shunt infos; they are translated to the wrappers and to
// libfabric infos when read (control path).
#include "ofi/shim.h"

#include <cstring>
#include <ctime>
#include <new>

namespace shunt::ofi {

// ---- domains (their ops are in domain.cpp) ----
extern ::fi_ops_domain g_domain_ops;
extern ::fi_ops_mr g_domain_mr_ops;

namespace {

int wrap_domain(fabric_w *fab, sf::fid_domain *sh, void *context, ::fid_domain **dom)
{
    auto *w = new (std::nothrow) domain_w{};
    if (!w) {
        (void)sf::close(&sh->fid);
        return -FI_ENOMEM;
    }
    w->sh = sh;
    w->fab = fab;
    w->api_version = fab->lf.api_version;
    w->lf.fid.fclass = FI_CLASS_DOMAIN;
    w->lf.fid.context = context;
    w->lf.fid.ops = &g_domain_fi_ops;
    w->lf.ops = &g_domain_ops;
    w->lf.mr = &g_domain_mr_ops;
    return publish(w, dom);
}

// fi_domain and fi_domain2 differ only in the Shunt call:
// @p open(shunt fabric, shunt info, &shunt domain) opens the domain.
template <class Open>
int open_domain(::fid_fabric *fabric, ::fi_info *info, ::fid_domain **dom, void *context, Open open)
{
    if (!fabric || !info || !dom)
        return -FI_EINVAL;
    auto *fab = reinterpret_cast<fabric_w *>(fabric);
    sf::info *si = nullptr;
    int rc = info_to_shunt_for(fab, info, fab->lf.api_version, &si);
    if (rc)
        return rc;
    sf::fid_domain *sh = nullptr;
    rc = open(fab->sh, si, &sh);
    sf::freeinfo(si);
    if (rc)
        return rc;
    return wrap_domain(fab, sh, context, dom);
}

} // namespace

int domain_open(::fid_fabric *fabric, ::fi_info *info, ::fid_domain **dom, void *context)
{
    return open_domain(fabric, info, dom, context, [context](sf::fid_fabric *f, sf::info *si, sf::fid_domain **sh) {
        return sf::domain_open(f, si, sh, context);
    });
}

int domain_open2(::fid_fabric *fabric, ::fi_info *info, ::fid_domain **dom, std::uint64_t flags, void *context)
{
    return open_domain(fabric, info, dom, context,
                       [flags, context](sf::fid_fabric *f, sf::info *si, sf::fid_domain **sh) {
                           return sf::domain_open2(f, si, sh, flags, context);
                       });
}

// ---- event queues ----

namespace {

inline sf::fid_eq *sh_eq(::fid_eq *eq) { return reinterpret_cast<eq_w *>(eq)->sh; }

long long now_ms()
{
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

bool is_cm_event(std::uint32_t event)
{
    return event == FI_CONNREQ || event == FI_CONNECTED || event == FI_SHUTDOWN;
}

// Entries the application writes are opaque bytes (fi_eq(3)): their fid
// may be anything, even garbage, and comes back as written. Shunt's own
// entries carry Shunt fids and infos, which become the wrappers and
// libfabric infos when read. To tell them apart, an application entry is
// stored behind this tag, a pointer no Shunt fid can equal; reads look at
// the next entry (FI_PEEK) under the EQ's read lock, then take it.
const unsigned char g_app_entry_tag = 0;
constexpr std::size_t k_tag_size = sizeof(const void *);
// Shunt's EQs hold entries of at most 4096 bytes (eq_write's limit); the
// provider's own are smaller (a CM entry and its data).
constexpr std::size_t k_entry_max = 4096;

bool is_app_entry(const unsigned char *e, ssize_t n)
{
    const void *tag = &g_app_entry_tag;
    return n >= ssize_t(k_tag_size) && std::memcmp(e, &tag, k_tag_size) == 0;
}

// Rewrite an entry Shunt wrote into the application's buffer: Shunt fids
// become wrappers, a Shunt info becomes a libfabric info.
ssize_t fix_entry(eq_w *w, std::uint32_t event, void *buf, ssize_t n, std::uint64_t flags)
{
    if (n < ssize_t(sizeof(::fid_t)))
        return n;
    auto *fidp = static_cast<::fid_t *>(buf);
    *fidp = to_lf(reinterpret_cast<sf::fid *>(*fidp));
    if (is_cm_event(event) && n >= ssize_t(sizeof(::fi_eq_cm_entry))) {
        auto *cm = static_cast<::fi_eq_cm_entry *>(buf);
        auto *si = reinterpret_cast<sf::info *>(cm->info);
        if (si) {
            ::fi_info *li = info_to_lf(si, w->api_version);
            if (li && !li->fabric_attr->prov_name)
                li->fabric_attr->prov_name = ::strdup("shunt");
            if (!(flags & FI_PEEK))
                sf::freeinfo(si);
            cm->info = li;
            if (!li) {
                SHUNT_LOG(ofi_log, error, "EQ event %u: out of memory converting its info", event);
                return -FI_ENOMEM;
            }
        }
    }
    return n;
}

// One entry into the application's buffer: its own entries as written,
// Shunt's translated. Nothing is taken that does not fit (-FI_ETOOSMALL).
ssize_t read_entry(eq_w *w, std::uint32_t *event, void *buf, std::size_t len, std::uint64_t flags)
{
    std::lock_guard<std::mutex> g(w->read_mu);
    unsigned char scratch[k_tag_size + k_entry_max];
    std::uint32_t ev = 0;
    ssize_t n = sf::eq_read(w->sh, &ev, scratch, sizeof scratch, FI_PEEK);
    if (n < 0)
        return n;
    const bool app = is_app_entry(scratch, n);
    const unsigned char *body = app ? scratch + k_tag_size : scratch;
    std::size_t size = app ? std::size_t(n) - k_tag_size : std::size_t(n);
    if (size > len)
        return -FI_ETOOSMALL;
    if (!(flags & FI_PEEK)) {
        std::uint32_t ev2 = 0;
        ssize_t again = sf::eq_read(w->sh, &ev2, scratch, sizeof scratch, 0);
        if (again != n || ev2 != ev)
            return again < 0 ? again : -FI_EIO; // every read of this EQ holds the lock
    }
    if (size)
        std::memcpy(buf, body, size);
    if (event)
        *event = ev;
    return app ? ssize_t(size) : fix_entry(w, ev, buf, ssize_t(size), flags);
}

ssize_t eq_read(::fid_eq *eq, std::uint32_t *event, void *buf, std::size_t len, std::uint64_t flags)
{
    if (!buf && len)
        return -FI_EINVAL;
    if (flags & ~FI_PEEK)
        return -FI_EBADFLAGS;
    return read_entry(reinterpret_cast<eq_w *>(eq), event, buf, len, flags);
}

ssize_t eq_sread(::fid_eq *eq, std::uint32_t *event, void *buf, std::size_t len, int timeout, std::uint64_t flags)
{
    auto *w = reinterpret_cast<eq_w *>(eq);
    if (!buf && len)
        return -FI_EINVAL;
    if (flags & ~FI_PEEK)
        return -FI_EBADFLAGS;
    // Wait (without the lock) until an entry is there, then read it as
    // eq_read does; another reader may have taken it meanwhile.
    const long long deadline = timeout < 0 ? -1 : now_ms() + timeout;
    for (;;) {
        int left = deadline < 0 ? -1 : int(deadline > now_ms() ? deadline - now_ms() : 0);
        unsigned char scratch[k_tag_size + k_entry_max];
        std::uint32_t ev = 0;
        ssize_t n = sf::eq_sread(w->sh, &ev, scratch, sizeof scratch, left, FI_PEEK);
        if (n < 0)
            return n;
        ssize_t r = read_entry(w, event, buf, len, flags);
        if (r != -FI_EAGAIN || left == 0)
            return r;
    }
}

ssize_t eq_readerr(::fid_eq *eq, ::fi_eq_err_entry *buf, std::uint64_t flags)
{
    if (!buf)
        return -FI_EINVAL;
    auto *w = reinterpret_cast<eq_w *>(eq);
    ssize_t n = sf::eq_readerr(w->sh, reinterpret_cast<sf::eq_err_entry *>(buf), flags);
    if (n < 0)
        return n;
    buf->fid = to_lf(reinterpret_cast<sf::fid *>(buf->fid));
    return n;
}

ssize_t eq_write(::fid_eq *eq, std::uint32_t event, const void *buf, std::size_t len, std::uint64_t flags)
{
    if (!buf && len)
        return -FI_EINVAL;
    if (len > k_entry_max)
        return -FI_EINVAL;
    if (flags)
        return -FI_EBADFLAGS; // libfabric 1.17 defines no fi_eq_write flag
    // Opaque: the bytes behind the tag, never looked into.
    unsigned char copy[k_tag_size + k_entry_max];
    const void *tag = &g_app_entry_tag;
    std::memcpy(copy, &tag, k_tag_size);
    if (len)
        std::memcpy(copy + k_tag_size, buf, len);
    ssize_t n = sf::eq_write(sh_eq(eq), event, copy, k_tag_size + len, flags);
    return n < 0 ? n : ssize_t(len);
}

const char *eq_strerror(::fid_eq *eq, int prov_errno, const void *err_data, char *buf, std::size_t len)
{
    return sf::eq_strerror(sh_eq(eq), prov_errno, err_data, buf, len);
}

int eq_close(::fid *f) { return close_wrapper<eq_w>(f); }

::fi_ops_eq g_eq_ops = {
    sizeof(::fi_ops_eq), eq_read, eq_readerr, eq_write, eq_sread, eq_strerror,
};

} // namespace

::fi_ops g_eq_fi_ops = {
    sizeof(::fi_ops), eq_close, fid_bind, fid_control, fid_ops_open, fid_tostr, fid_ops_set,
};

int eq_open(::fid_fabric *fabric, ::fi_eq_attr *attr, ::fid_eq **eq, void *context)
{
    if (!fabric || !attr || !eq)
        return -FI_EINVAL;
    auto *fab = reinterpret_cast<fabric_w *>(fabric);
    sf::eq_attr sa;
    sa.size = attr->size;
    sa.flags = attr->flags;
    sa.wait_obj = static_cast<sf::wait_obj>(attr->wait_obj);
    sa.signaling_vector = attr->signaling_vector;
    if (int rc = shunt_wait_set(attr->wait_set, &sa.wait_set); rc)
        return rc;
    return open_wrapped<eq_w>(eq, context, FI_CLASS_EQ, &g_eq_fi_ops, &g_eq_ops, [&](eq_w *w) {
        w->api_version = fab->lf.api_version;
        return sf::eq_open(fab->sh, &sa, &w->sh, context);
    });
}

} // namespace shunt::ofi

// ---- wait sets ----

namespace shunt::ofi {

namespace {

int wait_wait(::fid_wait *w, int timeout) { return sf::wait(reinterpret_cast<wait_w *>(w)->sh, timeout); }
int wait_close(::fid *f) { return close_wrapper<wait_w>(f); }

::fi_ops_wait g_wait_ops = {sizeof(::fi_ops_wait), wait_wait};

} // namespace

::fi_ops g_wait_fi_ops = {
    sizeof(::fi_ops), wait_close, fid_bind, fid_control, fid_ops_open, fid_tostr, fid_ops_set,
};

int wait_open(::fid_fabric *fabric, ::fi_wait_attr *attr, ::fid_wait **waitset)
{
    if (!fabric || !attr || !waitset)
        return -FI_EINVAL;
    auto *fab = reinterpret_cast<fabric_w *>(fabric);
    sf::wait_attr sa;
    sa.wait_obj = static_cast<sf::wait_obj>(attr->wait_obj);
    sa.flags = attr->flags;
    return open_wrapped<wait_w>(waitset, nullptr, FI_CLASS_WAIT, &g_wait_fi_ops, &g_wait_ops,
                                [&](wait_w *w) { return sf::wait_open(fab->sh, &sa, &w->sh); });
}

int shunt_wait_set(::fid_wait *w, sf::fid_wait **out)
{
    *out = nullptr;
    if (!w)
        return 0;
    if (w->fid.ops != &g_wait_fi_ops)
        return -FI_EINVAL; // another provider's wait set
    *out = reinterpret_cast<wait_w *>(w)->sh;
    return 0;
}

} // namespace shunt::ofi
