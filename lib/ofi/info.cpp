// fi_info <-> shunt::fabric::info. Setup path only: allocations are fine.
//
// What does not pass through unchanged, and why:
//  - rx_attr: libfabric 1.17 has total_buffered_recv (removed in 2.x): 0 out, ignored in.
//  - domain_attr: 1.17 lacks max_ep_auth_key and max_group_id (2.x): dropped.
//  - protocol: the enumerations differ (1.17 keeps FI_PROTO_PSMX2 and
//    FI_PROTO_MRAIL): mapped by name; protocols 1.17 cannot name are
//    reported as FI_PROTO_UNSPEC.
//  - mem_tag_format: 2.x's FI_TAG_BITS / FI_TAG_MPI / FI_TAG_CCL are not
//    1.17 bit formats: reported as 0xaaaa... (64 tag bits, FI_TAG_GENERIC);
//    a 1.17 bit format in the hints is not forwarded (Shunt gives 64 bits).
//  - caps: Shunt-only bits (FI_TAGGED_DIRECTED_RECV, FI_TAGGED_MULTI_RECV,
//    FI_XPU) are masked out.
//  - MR mode for applications of API < 1.5: FI_MR_BASIC / FI_MR_SCALABLE /
//    FI_MR_UNSPEC and the FI_LOCAL_MR mode bit are translated both ways.
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

struct proto_pair {
    std::uint32_t sh;
    std::uint32_t lf;
};
#define PROTO(n) {std::uint32_t(sf::n), std::uint32_t(::n)}
constexpr proto_pair k_protos[] = {
    PROTO(FI_PROTO_UNSPEC),   PROTO(FI_PROTO_RDMA_CM_IB_RC), PROTO(FI_PROTO_IWARP),    PROTO(FI_PROTO_IB_UD),
    PROTO(FI_PROTO_PSMX),     PROTO(FI_PROTO_UDP),           PROTO(FI_PROTO_SOCK_TCP), PROTO(FI_PROTO_MXM),
    PROTO(FI_PROTO_IWARP_RDM), PROTO(FI_PROTO_IB_RDM),       PROTO(FI_PROTO_GNI),      PROTO(FI_PROTO_RXM),
    PROTO(FI_PROTO_RXD),      PROTO(FI_PROTO_MLX),           PROTO(FI_PROTO_NETWORKDIRECT), PROTO(FI_PROTO_SHM),
    PROTO(FI_PROTO_RSTREAM),  PROTO(FI_PROTO_RDMA_CM_IB_XRC), PROTO(FI_PROTO_EFA),     PROTO(FI_PROTO_PSMX3),
    PROTO(FI_PROTO_RXM_TCP),  PROTO(FI_PROTO_OPX),           PROTO(FI_PROTO_CXI),      PROTO(FI_PROTO_XNET),
};
#undef PROTO

std::uint32_t proto_to_lf(std::uint32_t p)
{
    if (p & FI_PROV_SPECIFIC)
        return p;
    for (const auto &e : k_protos)
        if (e.sh == p)
            return e.lf;
    return FI_PROTO_UNSPEC;
}

std::uint32_t proto_to_shunt(std::uint32_t p)
{
    if (p & FI_PROV_SPECIFIC)
        return p;
    for (const auto &e : k_protos)
        if (e.lf == p)
            return e.sh;
    // A 1.17 protocol Shunt cannot name (PSMX2, MRAIL): no Shunt provider speaks it.
    return p | FI_PROV_SPECIFIC;
}

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

} // namespace

void tx_attr_to_shunt(const ::fi_tx_attr *in, sf::tx_attr *out) noexcept
{
    out->caps = in->caps;
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

void tx_attr_to_lf(const sf::tx_attr *in, ::fi_tx_attr *out) noexcept
{
    out->caps = in->caps & ~k_shunt_only_caps;
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

void rx_attr_to_shunt(const ::fi_rx_attr *in, sf::rx_attr *out) noexcept
{
    out->caps = in->caps;
    out->mode = in->mode;
    out->op_flags = in->op_flags;
    out->msg_order = in->msg_order;
    out->comp_order = in->comp_order;
    out->size = in->size;
    out->iov_limit = in->iov_limit;
}

void rx_attr_to_lf(const sf::rx_attr *in, ::fi_rx_attr *out) noexcept
{
    out->caps = in->caps & ~k_shunt_only_caps;
    out->mode = in->mode;
    out->op_flags = in->op_flags;
    out->msg_order = in->msg_order;
    out->comp_order = in->comp_order;
    out->total_buffered_recv = 0;
    out->size = in->size;
    out->iov_limit = in->iov_limit;
}

int info_to_shunt(const ::fi_info *in, std::uint32_t api_version, bool for_hints, sf::info **out)
{
    sf::info *o = sf::allocinfo();
    if (!o)
        return -FI_ENOMEM;
    bool ok = true;
    const bool old_mr = api_version < FI_VERSION(1, 5);

    o->caps = in->caps;
    o->mode = in->mode;
    o->addr_format = in->addr_format;
    o->src_addrlen = in->src_addr ? in->src_addrlen : 0;
    o->dest_addrlen = in->dest_addr ? in->dest_addrlen : 0;
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
        s->protocol = proto_to_shunt(e->protocol);
        s->protocol_version = e->protocol_version;
        s->max_msg_size = e->max_msg_size;
        s->msg_prefix_size = e->msg_prefix_size;
        s->max_order_raw_size = e->max_order_raw_size;
        s->max_order_war_size = e->max_order_war_size;
        s->max_order_waw_size = e->max_order_waw_size;
        s->mem_tag_format = 0; // FI_TAG_BITS; see the note at the top
        s->tx_ctx_cnt = e->tx_ctx_cnt;
        s->rx_ctx_cnt = e->rx_ctx_cnt;
        s->auth_key_size = e->auth_key ? e->auth_key_size : 0;
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
        int mr_mode = d->mr_mode;
        if (old_mr) {
            // Before 1.5 mr_mode is an enumeration and FI_LOCAL_MR a mode bit.
            int local = (in->mode & FI_LOCAL_MR) ? FI_MR_LOCAL : 0;
            if (mr_mode == FI_MR_SCALABLE)
                mr_mode = local;
            else if (mr_mode == FI_MR_BASIC)
                mr_mode = k_mr_basic_map | local;
            else // FI_MR_UNSPEC: either of the two
                mr_mode = k_mr_basic_map | local;
        }
        s->mr_mode = mr_mode;
        s->mr_key_size = d->mr_key_size;
        s->cq_data_size = d->cq_data_size;
        s->cq_cnt = d->cq_cnt;
        s->ep_cnt = d->ep_cnt;
        s->tx_ctx_cnt = d->tx_ctx_cnt;
        s->rx_ctx_cnt = d->rx_ctx_cnt;
        s->max_ep_tx_ctx = d->max_ep_tx_ctx;
        s->max_ep_rx_ctx = d->max_ep_rx_ctx;
        s->max_ep_stx_ctx = d->max_ep_stx_ctx;
        s->max_ep_srx_ctx = d->max_ep_srx_ctx;
        s->cntr_cnt = d->cntr_cnt;
        s->mr_iov_limit = d->mr_iov_limit;
        s->caps = d->caps;
        s->mode = d->mode;
        s->auth_key_size = d->auth_key ? d->auth_key_size : 0;
        ok = ok && dup_key(&s->auth_key, d->auth_key, s->auth_key_size);
        s->max_err_data = d->max_err_data;
        s->mr_cnt = d->mr_cnt;
        s->tclass = d->tclass;
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
        (void)for_hints;
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

    o->caps = in->caps & ~k_shunt_only_caps;
    o->mode = in->mode;
    o->addr_format = in->addr_format;
    o->src_addrlen = in->src_addr ? in->src_addrlen : 0;
    o->dest_addrlen = in->dest_addr ? in->dest_addrlen : 0;
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
        e->protocol = proto_to_lf(s->protocol);
        e->protocol_version = s->protocol_version;
        e->max_msg_size = s->max_msg_size;
        e->msg_prefix_size = s->msg_prefix_size;
        e->max_order_raw_size = s->max_order_raw_size;
        e->max_order_war_size = s->max_order_war_size;
        e->max_order_waw_size = s->max_order_waw_size;
        // 2.x formats (0 = FI_TAG_BITS, 1 = MPI, 2 = CCL) have no 1.17
        // spelling; a real bit format (above them) passes.
        e->mem_tag_format = s->mem_tag_format > 0xffff ? s->mem_tag_format : k_tag_generic;
        e->tx_ctx_cnt = s->tx_ctx_cnt;
        e->rx_ctx_cnt = s->rx_ctx_cnt;
        e->auth_key_size = s->auth_key ? s->auth_key_size : 0;
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
        if (old_mr) {
            d->mr_mode = (s->mr_mode & k_mr_basic_map) ? FI_MR_BASIC : FI_MR_SCALABLE;
            if (s->mr_mode & FI_MR_LOCAL)
                o->mode |= FI_LOCAL_MR;
        } else {
            d->mr_mode = s->mr_mode;
        }
        d->mr_key_size = s->mr_key_size;
        d->cq_data_size = s->cq_data_size;
        d->cq_cnt = s->cq_cnt;
        d->ep_cnt = s->ep_cnt;
        d->tx_ctx_cnt = s->tx_ctx_cnt;
        d->rx_ctx_cnt = s->rx_ctx_cnt;
        d->max_ep_tx_ctx = s->max_ep_tx_ctx;
        d->max_ep_rx_ctx = s->max_ep_rx_ctx;
        d->max_ep_stx_ctx = s->max_ep_stx_ctx;
        d->max_ep_srx_ctx = s->max_ep_srx_ctx;
        d->cntr_cnt = s->cntr_cnt;
        d->mr_iov_limit = s->mr_iov_limit;
        d->caps = s->caps & ~k_shunt_only_caps;
        d->mode = s->mode;
        d->auth_key_size = s->auth_key ? s->auth_key_size : 0;
        ok = ok && dup_key(&d->auth_key, s->auth_key, d->auth_key_size);
        d->max_err_data = s->max_err_data;
        d->mr_cnt = s->mr_cnt;
        d->tclass = s->tclass;
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
