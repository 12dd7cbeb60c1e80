// getinfo hint matching (util::match): the rules of fi_getinfo(3).
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "env/errors.h"
#include "env/log.h"
#include "fabric/util/info.h"

namespace shunt::fabric {
extern env::log::component fabric_log;
}

namespace shunt::fabric::util {

namespace {

constexpr std::uint64_t tx_cap_bits = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_READ | FI_WRITE | FI_SEND |
                                      FI_HMEM | FI_TRIGGER | FI_FENCE | FI_MULTICAST | FI_RMA_PMEM |
                                      FI_NAMED_RX_CTX | FI_COLLECTIVE | FI_XPU;
constexpr std::uint64_t rx_cap_bits = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_REMOTE_READ | FI_REMOTE_WRITE |
                                      FI_RECV | FI_HMEM | FI_TRIGGER | FI_RMA_PMEM | FI_DIRECTED_RECV |
                                      FI_TAGGED_DIRECTED_RECV | FI_TAGGED_MULTI_RECV | FI_MULTI_RECV | FI_SOURCE |
                                      FI_RMA_EVENT | FI_SOURCE_ERR | FI_COLLECTIVE | FI_XPU;
constexpr std::uint64_t known_op_flags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE |
                                         FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE | FI_MULTI_RECV | FI_MULTICAST |
                                         FI_MATCH_COMPLETE | FI_MORE | FI_FENCE | FI_REMOTE_CQ_DATA;

int fail(const info *offer, const char *why)
{
    SHUNT_DEBUG(fabric_log, "getinfo: %s does not match: %s",
                offer->fabric_attr && offer->fabric_attr->prov_name ? offer->fabric_attr->prov_name : "?", why);
    (void)offer;
    (void)why;
    return -FI_ENODATA;
}

bool name_eq(const char *a, const char *b) { return a && b && ::strcasecmp(a, b) == 0; }

} // namespace

int mr_mode_normalize(int m)
{
    if (m == FI_MR_BASIC)
        return FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    if (m == FI_MR_SCALABLE)
        return 0;
    return m & ~(FI_MR_BASIC | FI_MR_SCALABLE);
}

int check_hints(const info *h)
{
    if (!h)
        return 0;
    if (h->caps) {
        if (h->tx_attr && (h->tx_attr->caps & ~h->caps & FI_PRIMARY_CAPS))
            return -FI_EINVAL;
        if (h->rx_attr && (h->rx_attr->caps & ~h->caps & FI_PRIMARY_CAPS))
            return -FI_EINVAL;
    }
    if (h->ep_attr && h->ep_attr->type > FI_EP_SOCK_DGRAM)
        return -FI_EINVAL;
    if (h->domain_attr && (h->domain_attr->threading > FI_THREAD_ENDPOINT ||
                           h->domain_attr->data_progress > FI_PROGRESS_CONTROL_UNIFIED ||
                           h->domain_attr->control_progress > FI_PROGRESS_CONTROL_UNIFIED ||
                           h->domain_attr->av_type > FI_AV_TABLE))
        return -FI_EINVAL;
    return 0;
}

int match(std::uint32_t version, const info *o, const info_limits &lim, const info *h, info **out)
{
    if (!o || !out)
        return -FI_EINVAL;
    (void)version;
    if (int rc = check_hints(h); rc)
        return rc;
    info *r = dupinfo(o);
    if (!r)
        return -FI_ENOMEM;
    auto bad = [&](const char *why) {
        freeinfo(r);
        return fail(o, why);
    };
    if (!h) {
        *out = r;
        return 0;
    }
    // capabilities and mode
    std::uint64_t want = h->caps & (FI_PRIMARY_CAPS | FI_SECONDARY_CAPS);
    if (h->tx_attr)
        want |= h->tx_attr->caps;
    if (h->rx_attr)
        want |= h->rx_attr->caps;
    if (want & ~o->caps)
        return bad("capabilities");
    if (want) {
        // Asked-for primaries plus the provider's secondaries; FI_MSG alone
        // implies both directions as in libfabric.
        std::uint64_t prim = want & FI_PRIMARY_CAPS;
        if (!(prim & (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)))
            prim |= o->caps & (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
        r->caps = prim | (o->caps & FI_SECONDARY_CAPS & ~FI_RMA_EVENT) | (want & FI_SECONDARY_CAPS);
    }
    if (o->mode & ~h->mode)
        return bad("mode bits the application does not accept");
    r->mode = o->mode;
    if (h->addr_format != FI_FORMAT_UNSPEC && h->addr_format != o->addr_format)
        return bad("address format");
    // endpoint
    if (const ep_attr *e = h->ep_attr) {
        const ep_attr *p = o->ep_attr;
        if (e->type != FI_EP_UNSPEC && e->type != p->type)
            return bad("endpoint type");
        if (e->protocol != FI_PROTO_UNSPEC && e->protocol != p->protocol)
            return bad("protocol");
        if (e->protocol_version && e->protocol_version > p->protocol_version)
            return bad("protocol version");
        if (e->max_msg_size > p->max_msg_size)
            return bad("max_msg_size");
        if (e->max_order_raw_size > p->max_order_raw_size || e->max_order_war_size > p->max_order_war_size ||
            e->max_order_waw_size > p->max_order_waw_size)
            return bad("data ordering sizes");
        if (e->tx_ctx_cnt == FI_SHARED_CONTEXT || e->rx_ctx_cnt == FI_SHARED_CONTEXT) {
            if (!lim.shared_ctx)
                return bad("shared contexts");
        }
        if (e->tx_ctx_cnt != FI_SHARED_CONTEXT && e->tx_ctx_cnt > o->domain_attr->max_ep_tx_ctx)
            return bad("tx_ctx_cnt");
        if (e->rx_ctx_cnt != FI_SHARED_CONTEXT && e->rx_ctx_cnt > o->domain_attr->max_ep_rx_ctx)
            return bad("rx_ctx_cnt");
        if (e->auth_key_size)
            return bad("authorization keys");
        if (e->mem_tag_format == FI_TAG_MPI || e->mem_tag_format == FI_TAG_CCL) {
            if (!lim.tag_formats)
                return bad("tag format");
            r->ep_attr->mem_tag_format = e->mem_tag_format;
        } else if (e->mem_tag_format >= FI_TAG_MAX_FORMAT) {
            // bit-field format: every requested bit must be usable
            if (e->mem_tag_format & ~p->mem_tag_format)
                return bad("mem_tag_format bits");
            r->ep_attr->mem_tag_format = e->mem_tag_format;
        }
        if (e->tx_ctx_cnt)
            r->ep_attr->tx_ctx_cnt = e->tx_ctx_cnt;
        if (e->rx_ctx_cnt)
            r->ep_attr->rx_ctx_cnt = e->rx_ctx_cnt;
    }
    // domain
    if (const domain_attr *d = h->domain_attr) {
        domain_attr *rd = r->domain_attr;
        const domain_attr *p = o->domain_attr;
        if (d->name && !name_eq(d->name, p->name))
            return bad("domain name");
        if (d->threading != FI_THREAD_UNSPEC) {
            if (!(lim.threading_mask & (1u << d->threading)))
                return bad("threading");
            rd->threading = d->threading;
        }
        if (d->data_progress != FI_PROGRESS_UNSPEC) {
            if (!(lim.progress_mask & (1u << d->data_progress)))
                return bad("data progress");
            rd->data_progress = d->data_progress;
        }
        if (d->control_progress != FI_PROGRESS_UNSPEC) {
            if (!(lim.progress_mask & (1u << d->control_progress)) && d->control_progress != FI_PROGRESS_CONTROL_UNIFIED)
                return bad("control progress");
            rd->control_progress = d->control_progress;
        }
        if (d->av_type != FI_AV_UNSPEC) {
            if (!(lim.av_type_mask & (1u << d->av_type)))
                return bad("av type");
            rd->av_type = d->av_type;
        }
        if (d->resource_mgmt != FI_RM_UNSPEC)
            rd->resource_mgmt = d->resource_mgmt;
        int asked = mr_mode_normalize(d->mr_mode);
        if (lim.mr_mode_required & ~asked)
            return bad("mr_mode bits the application does not accept");
        // fi_domain(3): the hints list the modes the application supports; the
        // answer lists the modes the provider requires (a subset). Bits it could
        // merely honour are not reported: each one is work for the application.
        rd->mr_mode = lim.mr_mode_required;
        if (d->mr_key_size > p->mr_key_size || d->cq_data_size > p->cq_data_size)
            return bad("key or cq data size");
        if (d->cq_cnt > p->cq_cnt || d->ep_cnt > p->ep_cnt || d->cntr_cnt > p->cntr_cnt ||
            d->mr_iov_limit > p->mr_iov_limit || d->max_ep_tx_ctx > p->max_ep_tx_ctx ||
            d->max_ep_rx_ctx > p->max_ep_rx_ctx)
            return bad("domain limits");
        if (p->mode & ~d->mode & ~h->mode)
            return bad("domain mode bits");
        if (d->auth_key_size)
            return bad("authorization keys");
        if (d->caps & ~o->caps & FI_SECONDARY_CAPS)
            return bad("domain caps");
        if (d->tclass)
            rd->tclass = d->tclass;
    } else {
        r->domain_attr->mr_mode = lim.mr_mode_required;
    }
    // transmit
    if (const tx_attr *t = h->tx_attr) {
        const tx_attr *p = o->tx_attr;
        if (t->msg_order & ~p->msg_order)
            return bad("tx msg_order");
        if (t->inject_size > p->inject_size || t->size > p->size || t->iov_limit > p->iov_limit ||
            t->rma_iov_limit > p->rma_iov_limit)
            return bad("tx sizes");
        if (t->op_flags & ~known_op_flags)
            return bad("tx op_flags unknown");
        if (t->op_flags & (FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE) &
            ~lim.op_flags)
            return bad("tx completion level");
        if (p->mode & ~t->mode & ~h->mode)
            return bad("tx mode");
        r->tx_attr->op_flags = t->op_flags;
        if (t->size)
            r->tx_attr->size = t->size;
        if (t->tclass)
            r->tx_attr->tclass = t->tclass;
    }
    if (const rx_attr *x = h->rx_attr) {
        const rx_attr *p = o->rx_attr;
        if (x->msg_order & ~p->msg_order)
            return bad("rx msg_order");
        if (x->size > p->size || x->iov_limit > p->iov_limit)
            return bad("rx sizes");
        if (x->op_flags & ~known_op_flags)
            return bad("rx op_flags unknown");
        if (p->mode & ~x->mode & ~h->mode)
            return bad("rx mode");
        r->rx_attr->op_flags = x->op_flags;
        if (x->size)
            r->rx_attr->size = x->size;
    }
    // context caps: the hints' if given, else those of info caps that apply
    r->tx_attr->caps = (h->tx_attr && h->tx_attr->caps ? h->tx_attr->caps : r->caps) & tx_cap_bits;
    r->rx_attr->caps = (h->rx_attr && h->rx_attr->caps ? h->rx_attr->caps : r->caps) & rx_cap_bits;
    if (const fabric_attr *f = h->fabric_attr) {
        if (f->name && !name_eq(f->name, o->fabric_attr->name))
            return bad("fabric name");
        if (f->prov_version && f->prov_version > o->fabric_attr->prov_version)
            return bad("provider version");
    }
    // addresses from the hints are the caller's choice and pass through
    if (h->src_addr && h->src_addrlen && !r->src_addr) {
        r->src_addr = std::malloc(h->src_addrlen);
        if (!r->src_addr) {
            freeinfo(r);
            return -FI_ENOMEM;
        }
        std::memcpy(r->src_addr, h->src_addr, h->src_addrlen);
        r->src_addrlen = h->src_addrlen;
    }
    if (h->dest_addr && h->dest_addrlen && !r->dest_addr) {
        r->dest_addr = std::malloc(h->dest_addrlen);
        if (!r->dest_addr) {
            freeinfo(r);
            return -FI_ENOMEM;
        }
        std::memcpy(r->dest_addr, h->dest_addr, h->dest_addrlen);
        r->dest_addrlen = h->dest_addrlen;
    }
    r->handle = h->handle;
    *out = r;
    return 0;
}

} // namespace shunt::fabric::util
