// fi_info <-> shunt::fabric::info. Setup path only: allocations are fine.
//
// What does not pass through unchanged, and why:
//  - rx_attr: libfabric 1.17 has total_buffered_recv (removed in 2.x): 0 out, ignored in.
//  - domain_attr: 1.17 lacks max_ep_auth_key and max_group_id (2.x): dropped.
//  - protocol: passed through (the values are libfabric's; abi.cpp checks
//    every one 1.17 names; later ones keep their libfabric values).
//  - mem_tag_format: 2.x's FI_TAG_BITS / FI_TAG_MPI / FI_TAG_CCL are not
//    1.17 bit formats: reported as 0xaaaa... (64 tag bits, FI_TAG_GENERIC);
//    a 1.17 bit format in the hints is not forwarded (Shunt gives 64 bits).
//  - caps: Shunt-only bits (FI_TAGGED_DIRECTED_RECV, FI_TAGGED_MULTI_RECV,
//    FI_XPU) are masked out.
//  - MR mode for applications of API < 1.5: getinfo hands Shunt the
//    application's version, so FI_MR_BASIC / FI_MR_SCALABLE / FI_MR_UNSPEC
//    and the FI_LOCAL_MR mode bit follow that version's rules there; infos
//    Shunt did not shape for the application (events) are translated.
//  - control_progress FI_PROGRESS_CONTROL_UNIFIED (2.x) is reported as the
//    data progress model.
//  - handles: libfabric wrappers <-> Shunt objects.
#include "ofi/shim.h"

#include <cstdlib>
#include <cstring>

namespace shunt::ofi {

namespace {

constexpr std::uint64_t k_tag_generic = 0xaaaaaaaaaaaaaaaaULL;
constexpr int k_mr_basic_map = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

bool dup_str(char **dst, const char *src)
{
    *dst = nullptr;
    if (!src)
        return true;
    *dst = ::strdup(src);
    return *dst != nullptr;
}

bool dup_mem(void **dst, const void *src, std::size_t len)
{
    *dst = nullptr;
    if (!src || len == 0)
        return true;
    *dst = std::malloc(len);
    if (!*dst)
        return false;
    std::memcpy(*dst, src, len);
    return true;
}

bool dup_key(std::uint8_t **dst, const std::uint8_t *src, std::size_t len)
{
    void *p = nullptr;
    bool ok = dup_mem(&p, src, len);
    *dst = static_cast<std::uint8_t *>(p);
    return ok;
}

// ---- fields with the same name, type and meaning in both worlds ----
// One template per struct copies them in either direction, so both
// directions always carry the same fields; the callers convert the rest.
// @p caps_mask: ~0 towards Shunt, ~k_shunt_only_caps towards libfabric.

template <class In, class Out>
void same_info_fields(const In *in, Out *out, std::uint64_t caps_mask) noexcept
{
    out->caps = in->caps & caps_mask;
    out->mode = in->mode;
    out->addr_format = in->addr_format;
    out->src_addrlen = in->src_addr ? in->src_addrlen : 0;
    out->dest_addrlen = in->dest_addr ? in->dest_addrlen : 0;
}

template <class In, class Out>
void same_tx_fields(const In *in, Out *out, std::uint64_t caps_mask) noexcept
{
    out->caps = in->caps & caps_mask;
    out->mode = in->mode;
    out->op_flags = in->op_flags;
    out->msg_order = in->msg_order;
    out->comp_order = in->comp_order;
    out->inject_size = in->inject_size;
    out->size = in->size;
    out->iov_limit = in->iov_limit;
    out->rma_iov_limit = in->rma_iov_limit;
    out->tclass = in->tclass;
}

template <class In, class Out>
void same_rx_fields(const In *in, Out *out, std::uint64_t caps_mask) noexcept
{
    out->caps = in->caps & caps_mask;
    out->mode = in->mode;
    out->op_flags = in->op_flags;
    out->msg_order = in->msg_order;
    out->comp_order = in->comp_order;
    out->size = in->size;
    out->iov_limit = in->iov_limit;
}

template <class In, class Out>
void same_ep_fields(const In *in, Out *out) noexcept
{
    out->protocol = in->protocol;
    out->protocol_version = in->protocol_version;
    out->max_msg_size = in->max_msg_size;
    out->msg_prefix_size = in->msg_prefix_size;
    out->max_order_raw_size = in->max_order_raw_size;
    out->max_order_war_size = in->max_order_war_size;
    out->max_order_waw_size = in->max_order_waw_size;
    out->tx_ctx_cnt = in->tx_ctx_cnt;
    out->rx_ctx_cnt = in->rx_ctx_cnt;
    out->auth_key_size = in->auth_key ? in->auth_key_size : 0;
}

template <class In, class Out>
void same_domain_fields(const In *in, Out *out, std::uint64_t caps_mask) noexcept
{
    out->mr_key_size = in->mr_key_size;
    out->cq_data_size = in->cq_data_size;
    out->cq_cnt = in->cq_cnt;
    out->ep_cnt = in->ep_cnt;
    out->tx_ctx_cnt = in->tx_ctx_cnt;
    out->rx_ctx_cnt = in->rx_ctx_cnt;
    out->max_ep_tx_ctx = in->max_ep_tx_ctx;
    out->max_ep_rx_ctx = in->max_ep_rx_ctx;
    out->max_ep_stx_ctx = in->max_ep_stx_ctx;
    out->max_ep_srx_ctx = in->max_ep_srx_ctx;
    out->cntr_cnt = in->cntr_cnt;
    out->mr_iov_limit = in->mr_iov_limit;
    out->caps = in->caps & caps_mask;
    out->mode = in->mode;
    out->auth_key_size = in->auth_key ? in->auth_key_size : 0;
    out->max_err_data = in->max_err_data;
    out->mr_cnt = in->mr_cnt;
    out->tclass = in->tclass;
}

} // namespace

void tx_attr_to_shunt(const ::fi_tx_attr *in, sf::tx_attr *out) noexcept { same_tx_fields(in, out, ~0ULL); }

void tx_attr_to_lf(const sf::tx_attr *in, ::fi_tx_attr *out) noexcept
{
    same_tx_fields(in, out, ~k_shunt_only_caps);
}

void rx_attr_to_shunt(const ::fi_rx_attr *in, sf::rx_attr *out) noexcept { same_rx_fields(in, out, ~0ULL); }

void rx_attr_to_lf(const sf::rx_attr *in, ::fi_rx_attr *out) noexcept
{
    same_rx_fields(in, out, ~k_shunt_only_caps);
    out->total_buffered_recv = 0;
}

int info_to_shunt(const ::fi_info *in, std::uint32_t api_version, bool for_hints, sf::info **out)
{
    sf::info *o = sf::allocinfo();
    if (!o)
        return -FI_ENOMEM;
    bool ok = true;
    const bool old_mr = api_version < FI_VERSION(1, 5);

    same_info_fields(in, o, ~0ULL);
    ok = ok && dup_mem(&o->src_addr, in->src_addr, o->src_addrlen);
    ok = ok && dup_mem(&o->dest_addr, in->dest_addr, o->dest_addrlen);
    if (in->handle) {
        if (in->handle->fclass == FI_CLASS_CONNREQ) {
            // Connection requests are Shunt objects carried as they are (see to_lf).
            o->handle = reinterpret_cast<sf::fid *>(in->handle);
        } else {
            o->handle = to_shunt(in->handle);
            if (!o->handle) {
                sf::freeinfo(o);
                return -FI_EINVAL;
            }
        }
    }
    if (in->tx_attr)
        tx_attr_to_shunt(in->tx_attr, o->tx_attr);
    if (in->rx_attr)
        rx_attr_to_shunt(in->rx_attr, o->rx_attr);
    if (in->ep_attr) {
        const ::fi_ep_attr *e = in->ep_attr;
        sf::ep_attr *s = o->ep_attr;
        s->type = static_cast<sf::ep_type>(e->type);
        same_ep_fields(e, s);
        s->mem_tag_format = 0; // FI_TAG_BITS; see the note at the top
        ok = ok && dup_key(&s->auth_key, e->auth_key, s->auth_key_size);
    }
    if (in->domain_attr) {
        const ::fi_domain_attr *d = in->domain_attr;
        sf::domain_attr *s = o->domain_attr;
        if (d->domain) {
            s->domain = reinterpret_cast<sf::fid_domain *>(to_shunt(&d->domain->fid));
            if (!s->domain) {
                sf::freeinfo(o);
                return -FI_EINVAL;
            }
        }
        ok = ok && dup_str(&s->name, d->name);
        s->threading = static_cast<sf::threading>(d->threading);
        s->control_progress = static_cast<sf::progress>(d->control_progress);
        s->data_progress = static_cast<sf::progress>(d->data_progress);
        s->resource_mgmt = static_cast<sf::resource_mgmt>(d->resource_mgmt);
        s->av_type = static_cast<sf::av_type>(d->av_type);
        // Hints go to Shunt as the application wrote them, with its API
        // version (provider_getinfo): Shunt applies the rules of that
        // version, legacy modes included. An info that opens an object
        // carries the legacy mode of its answer (Shunt's domains follow
        // FI_MR_BASIC / FI_MR_SCALABLE and the FI_LOCAL_MR mode bit); one an
        // application of API < 1.5 leaves at FI_MR_UNSPEC gets FI_MR_BASIC,
        // the mode Shunt answers such applications with.
        s->mr_mode = d->mr_mode;
        if (old_mr && !for_hints && d->mr_mode == FI_MR_UNSPEC)
            s->mr_mode = FI_MR_BASIC;
        same_domain_fields(d, s, ~0ULL);
        ok = ok && dup_key(&s->auth_key, d->auth_key, s->auth_key_size);
    }
    if (in->fabric_attr) {
        const ::fi_fabric_attr *f = in->fabric_attr;
        sf::fabric_attr *s = o->fabric_attr;
        if (f->fabric) {
            s->fabric = reinterpret_cast<sf::fid_fabric *>(to_shunt(&f->fabric->fid));
            if (!s->fabric) {
                sf::freeinfo(o);
                return -FI_EINVAL;
            }
        }
        ok = ok && dup_str(&s->name, f->name);
        // libfabric's provider name ("shunt") is not a Shunt provider name.
        s->prov_name = nullptr;
        s->prov_version = 0;
        s->api_version = 0;
    }
    if (!ok) {
        sf::freeinfo(o);
        return -FI_ENOMEM;
    }
    *out = o;
    return 0;
}

int info_to_shunt_for(const fabric_w *fab, const ::fi_info *in, std::uint32_t api_version, sf::info **out)
{
    sf::info *o = nullptr;
    int rc = info_to_shunt(in, api_version, false, &o);
    if (rc)
        return rc;
    if (fab && fab->shunt_prov[0]) {
        o->fabric_attr->prov_name = ::strdup(fab->shunt_prov);
        if (!o->fabric_attr->prov_name) {
            sf::freeinfo(o);
            return -FI_ENOMEM;
        }
    }
    *out = o;
    return 0;
}

::fi_info *info_to_lf(const sf::info *in, std::uint32_t api_version)
{
    ::fi_info *o = fi_allocinfo();
    if (!o)
        return nullptr;
    bool ok = true;
    const bool old_mr = api_version < FI_VERSION(1, 5);

    same_info_fields(in, o, ~k_shunt_only_caps);
    ok = ok && dup_mem(&o->src_addr, in->src_addr, o->src_addrlen);
    ok = ok && dup_mem(&o->dest_addr, in->dest_addr, o->dest_addrlen);
    o->handle = in->handle ? to_lf(in->handle) : nullptr;
    if (in->tx_attr)
        tx_attr_to_lf(in->tx_attr, o->tx_attr);
    if (in->rx_attr)
        rx_attr_to_lf(in->rx_attr, o->rx_attr);
    if (in->ep_attr) {
        const sf::ep_attr *s = in->ep_attr;
        ::fi_ep_attr *e = o->ep_attr;
        e->type = static_cast<::fi_ep_type>(s->type);
        same_ep_fields(s, e);
        // 2.x formats (0 = FI_TAG_BITS, 1 = MPI, 2 = CCL) have no 1.17
        // spelling; a real bit format (above them) passes.
        e->mem_tag_format = s->mem_tag_format > 0xffff ? s->mem_tag_format : k_tag_generic;
        ok = ok && dup_key(&e->auth_key, s->auth_key, e->auth_key_size);
    }
    if (in->domain_attr) {
        const sf::domain_attr *s = in->domain_attr;
        ::fi_domain_attr *d = o->domain_attr;
        d->domain = s->domain ? reinterpret_cast<::fid_domain *>(to_lf(&s->domain->fid)) : nullptr;
        ok = ok && dup_str(&d->name, s->name);
        d->threading = static_cast<::fi_threading>(s->threading);
        d->data_progress = static_cast<::fi_progress>(s->data_progress);
        d->control_progress = s->control_progress == sf::FI_PROGRESS_CONTROL_UNIFIED
                                  ? d->data_progress
                                  : static_cast<::fi_progress>(s->control_progress);
        d->resource_mgmt = static_cast<::fi_resource_mgmt>(s->resource_mgmt);
        d->av_type = static_cast<::fi_av_type>(s->av_type);
        d->mr_mode = s->mr_mode;
        if (old_mr && !(s->mr_mode & (FI_MR_BASIC | FI_MR_SCALABLE))) {
            // Before 1.5 mr_mode is an enumeration and FI_LOCAL_MR a mode bit:
            // an info Shunt did not shape for such an application (events).
            d->mr_mode = (s->mr_mode & k_mr_basic_map) ? FI_MR_BASIC : FI_MR_SCALABLE;
            if (s->mr_mode & FI_MR_LOCAL)
                o->mode |= FI_LOCAL_MR;
        }
        same_domain_fields(s, d, ~k_shunt_only_caps);
        ok = ok && dup_key(&d->auth_key, s->auth_key, d->auth_key_size);
    }
    if (in->fabric_attr) {
        const sf::fabric_attr *s = in->fabric_attr;
        ::fi_fabric_attr *f = o->fabric_attr;
        f->fabric = s->fabric ? reinterpret_cast<::fid_fabric *>(to_lf(&s->fabric->fid)) : nullptr;
        ok = ok && dup_str(&f->name, s->name);
        f->prov_name = nullptr; // libfabric's core sets "shunt"
        f->prov_version = k_prov_version;
        f->api_version = api_version; // the application's (the core sets the same for getinfo)
    }
    if (!ok) {
        fi_freeinfo(o);
        return nullptr;
    }
    return o;
}

::fi_info *info_list_to_lf(const sf::info *in, std::uint32_t api_version)
{
    ::fi_info *head = nullptr, **tail = &head;
    for (const sf::info *i = in; i; i = i->next) {
        ::fi_info *o = info_to_lf(i, api_version);
        if (!o) {
            fi_freeinfo(head);
            return nullptr;
        }
        *tail = o;
        tail = &o->next;
    }
    return head;
}

} // namespace shunt::ofi
