// Objects opened from a fabric: domains and event queues. EQ entries carry
// Shunt fids and Shunt infos; they are translated to the wrappers and to
// libfabric infos when read (control path).
#include "ofi/shim.h"

#include <cstring>
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

bool is_cm_event(std::uint32_t event)
{
    return event == FI_CONNREQ || event == FI_CONNECTED || event == FI_SHUTDOWN;
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

ssize_t eq_read(::fid_eq *eq, std::uint32_t *event, void *buf, std::size_t len, std::uint64_t flags)
{
    auto *w = reinterpret_cast<eq_w *>(eq);
    std::uint32_t ev = 0;
    ssize_t n = sf::eq_read(w->sh, &ev, buf, len, flags);
    if (n < 0)
        return n;
    if (event)
        *event = ev;
    return fix_entry(w, ev, buf, n, flags);
}

ssize_t eq_sread(::fid_eq *eq, std::uint32_t *event, void *buf, std::size_t len, int timeout, std::uint64_t flags)
{
    auto *w = reinterpret_cast<eq_w *>(eq);
    std::uint32_t ev = 0;
    ssize_t n = sf::eq_sread(w->sh, &ev, buf, len, timeout, flags);
    if (n < 0)
        return n;
    if (event)
        *event = ev;
    return fix_entry(w, ev, buf, n, flags);
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
    if (!buf || len < sizeof(::fid_t))
        return sf::eq_write(sh_eq(eq), event, buf, len, flags);
    // The entry names libfabric handles: store the Shunt ones, so that every
    // entry read back is translated the same way. Small copy, control path.
    alignas(16) unsigned char local[256];
    unsigned char *copy = len <= sizeof local ? local : new (std::nothrow) unsigned char[len];
    if (!copy)
        return -FI_ENOMEM;
    std::memcpy(copy, buf, len);
    ::fid_t lf = *reinterpret_cast<const ::fid_t *>(buf);
    sf::fid *sh = to_shunt(lf);
    ::fid_t as_is = sh ? reinterpret_cast<::fid_t>(sh) : lf;
    std::memcpy(copy, &as_is, sizeof as_is);
    if (is_cm_event(event) && len >= sizeof(::fi_eq_cm_entry)) {
        // An info in an application-written CM event cannot be carried: Shunt
        // would have to own a libfabric info.
        const auto *cm = static_cast<const ::fi_eq_cm_entry *>(buf);
        if (cm->info) {
            if (copy != local)
                delete[] copy;
            return -FI_EINVAL;
        }
    }
    ssize_t n = sf::eq_write(sh_eq(eq), event, copy, len, flags);
    if (copy != local)
        delete[] copy;
    return n;
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
    if (attr->wait_set)
        return -FI_ENOSYS; // wait sets are not part of Shunt
    auto *fab = reinterpret_cast<fabric_w *>(fabric);
    sf::eq_attr sa;
    sa.size = attr->size;
    sa.flags = attr->flags;
    sa.wait_obj = static_cast<sf::wait_obj>(attr->wait_obj);
    sa.signaling_vector = attr->signaling_vector;
    return open_wrapped<eq_w>(eq, context, FI_CLASS_EQ, &g_eq_fi_ops, &g_eq_ops, [&](eq_w *w) {
        w->api_version = fab->lf.api_version;
        return sf::eq_open(fab->sh, &sa, &w->sh, context);
    });
}

} // namespace shunt::ofi
