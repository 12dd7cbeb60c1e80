// getinfo hint matching (util::match): the rules of fi_getinfo(3), checked
// and applied the way libfabric's reference does (util_attr.c:
// ofi_check_info, ofi_check_mr_mode, ofi_alter_info, ofi_get_caps).
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
                                      FI_RMA_EVENT | FI_SOURCE_ERR | FI_COLLECTIVE | FI_XPU | FI_VARIABLE_MSG;
// Receive-side bits an application may leave in tx_attr->caps (and the
// reverse): ignored there, as libfabric does (OFI_IGNORED_TX/RX_CAPS).
constexpr std::uint64_t ignored_tx_caps = FI_REMOTE_READ | FI_REMOTE_WRITE | FI_RECV | FI_DIRECTED_RECV |
                                          FI_TAGGED_DIRECTED_RECV | FI_VARIABLE_MSG | FI_MULTI_RECV |
                                          FI_TAGGED_MULTI_RECV | FI_SOURCE | FI_RMA_EVENT | FI_SOURCE_ERR;
constexpr std::uint64_t ignored_rx_caps = FI_READ | FI_WRITE | FI_SEND | FI_FENCE | FI_MULTICAST | FI_NAMED_RX_CTX;
// Secondary capabilities that cost something on every operation: reported
// only when asked for once the application names what it wants.
constexpr std::uint64_t costly_caps = FI_SOURCE | FI_SOURCE_ERR | FI_RMA_EVENT;
constexpr std::uint64_t known_op_flags = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE |
                                         FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE | FI_MULTI_RECV | FI_MULTICAST |
                                         FI_MATCH_COMPLETE | FI_MORE | FI_FENCE | FI_REMOTE_CQ_DATA;
// MR mode bits that only matter to the target of RMA and atomics.
constexpr int mr_rma_target = FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_RMA_EVENT;
constexpr int mr_legacy = FI_MR_BASIC | FI_MR_SCALABLE;
constexpr std::uint32_t v1_5 = FI_VERSION(1, 5);

int fail(const info *offer, const char *why)
{
    SHUNT_DEBUG(fabric_log, "getinfo: %s %s does not match: %s",
                offer->fabric_attr && offer->fabric_attr->prov_name ? offer->fabric_attr->prov_name : "?",
                offer->domain_attr && offer->domain_attr->name ? offer->domain_attr->name : "?", why);
    (void)offer;
    (void)why;
    return -FI_ENODATA;
}

bool name_eq(const char *a, const char *b) { return a && b && ::strcasecmp(a, b) == 0; }

// fi_getinfo(3): a memory capability without modifiers is all of them.
bool rma_target_allowed(std::uint64_t caps)
{
    if (!(caps & (FI_RMA | FI_ATOMIC)))
        return false;
    if (caps & (FI_REMOTE_READ | FI_REMOTE_WRITE))
        return true;
    return !(caps & (FI_READ | FI_WRITE));
}

// The MR mode bits that matter for @p caps (libfabric's ofi_cap_mr_mode).
int cap_mr_mode(std::uint64_t caps, int mode)
{
    if (!(caps & FI_HMEM))
        mode &= ~FI_MR_HMEM;
    if (!rma_target_allowed(caps)) {
        if (!(mode & (FI_MR_LOCAL | FI_MR_HMEM)))
            return 0;
        mode &= ~mr_rma_target;
    }
    return mode & ~mr_legacy;
}

// Primary capabilities of @p caps plus the modifiers they imply.
std::uint64_t expand_modifiers(std::uint64_t caps)
{
    if ((caps & (FI_MSG | FI_TAGGED)) && !(caps & FI_MSG_DIRECTION_CAPS))
        caps |= FI_MSG_DIRECTION_CAPS;
    if ((caps & (FI_RMA | FI_ATOMIC)) && !(caps & FI_RMA_DIRECTION_CAPS))
        caps |= FI_RMA_DIRECTION_CAPS;
    return caps;
}

// ofi_check_mr_mode: does the application accept the provider's modes?
bool mr_mode_ok(std::uint32_t version, int prov, const info *h)
{
    int user = h->domain_attr->mr_mode;
    if ((prov & FI_MR_LOCAL) && !((h->mode & FI_LOCAL_MR) || (user & FI_MR_LOCAL)))
        return false;
    if (version < v1_5) {
        switch (user) {
        case FI_MR_UNSPEC: return (prov & mr_legacy) != 0;
        case FI_MR_BASIC: return (prov & FI_MR_BASIC) != 0;
        case FI_MR_SCALABLE: return (prov & FI_MR_SCALABLE) != 0;
        default: return false;
        }
    }
    if (user & FI_MR_BASIC)
        return !(user & ~FI_MR_BASIC) && (prov & FI_MR_BASIC);
    if (user & FI_MR_SCALABLE)
        return !(user & ~FI_MR_SCALABLE) && (prov & FI_MR_SCALABLE);
    int need = cap_mr_mode(h->caps, prov);
    return user == FI_MR_UNSPEC || (user & need) == need;
}

// ofi_get_info_caps: the answer's capabilities. An application whose MR
// modes do not let it be an RMA target (mr_mode 0 at 1.5+, or no domain
// attributes at all) gets RMA as initiator only.
std::uint64_t info_caps(std::uint32_t version, const info *o, int prov_mr, const info *h)
{
    std::uint64_t caps = answer_caps(o->caps, h->caps, o->caps);
    if (!rma_target_allowed(caps) || !(prov_mr & mr_rma_target))
        return caps;
    if (h->domain_attr) {
        int user = h->domain_attr->mr_mode;
        if ((version < v1_5 && user == FI_MR_UNSPEC) || user == FI_MR_BASIC ||
            (user & prov_mr & mr_rma_target) == (prov_mr & mr_rma_target))
            return caps;
    }
    return caps & ~(FI_REMOTE_READ | FI_REMOTE_WRITE);
}

// fi_alter_domain_attr's MR part: what the answer says.
int answer_mr_mode(std::uint32_t version, int prov, std::uint64_t caps, const domain_attr *hd)
{
    int hint = hd ? hd->mr_mode : 0;
    if (hint & mr_legacy)
        return hint; // the legacy mode asked for (mr_mode_ok checked it)
    if (version < v1_5)
        return prov && prov != FI_MR_SCALABLE ? FI_MR_BASIC : FI_MR_SCALABLE;
    int m = prov & ~mr_legacy;
    if (hd && (hint & m) != m)
        m = cap_mr_mode(caps, m & hint);
    return m;
}

std::uint64_t offer_tx_caps(const info *o) { return o->tx_attr->caps ? o->tx_attr->caps : o->caps & tx_cap_bits; }
std::uint64_t offer_rx_caps(const info *o) { return o->rx_attr->caps ? o->rx_attr->caps : o->caps & rx_cap_bits; }

// ofi_check_ep_attr's context counts.
const char *ctx_cnt_problem(std::size_t want, std::size_t offer_cnt, std::size_t max, bool shared_ok)
{
    if (want > max) {
        if (want != FI_SHARED_CONTEXT)
            return "context count above the domain's limit";
        if (!shared_ok)
            return "shared contexts";
    } else if (!want && offer_cnt == FI_SHARED_CONTEXT) {
        return "the provider requires shared contexts";
    }
    return nullptr;
}

// Every check of ofi_check_info (and Shunt's own limits): nullptr if the
// offer can serve the hints, else why not.
const char *mismatch(std::uint32_t version, const info *o, const info_limits &lim, const info *h)
{
    const ep_attr *oe = o->ep_attr;
    const domain_attr *od = o->domain_attr;
    if (h->ep_attr && h->ep_attr->type != FI_EP_UNSPEC && h->ep_attr->type != oe->type)
        return "endpoint type";
    if (h->caps & ~o->caps)
        return "capabilities";
    // mode: FI_LOCAL_MR stands for FI_MR_LOCAL where mr_mode cannot say it
    std::uint64_t need_mode = o->mode;
    if ((lim.mr_mode_required & FI_MR_LOCAL) &&
        (version < v1_5 || (h->domain_attr && !(h->domain_attr->mr_mode & FI_MR_LOCAL))))
        need_mode |= FI_LOCAL_MR;
    if ((h->mode & need_mode) != need_mode)
        return "mode bits the application does not accept";
    if (h->addr_format != FI_FORMAT_UNSPEC && h->addr_format != o->addr_format &&
        !(h->addr_format < 64 && (lim.addr_formats & (1ULL << h->addr_format))))
        return "address format";
    if (const fabric_attr *f = h->fabric_attr) {
        if (f->name && !name_eq(f->name, o->fabric_attr->name))
            return "fabric name";
        if (f->prov_version && f->prov_version > o->fabric_attr->prov_version)
            return "provider version";
    }
    if (const domain_attr *d = h->domain_attr) {
        if (d->name && !name_eq(d->name, od->name))
            return "domain name";
        if (d->threading != FI_THREAD_UNSPEC && !(lim.threading_mask & (1u << d->threading)))
            return "threading";
        if (d->data_progress != FI_PROGRESS_UNSPEC && !(lim.progress_mask & (1u << d->data_progress)))
            return "data progress";
        if (d->control_progress != FI_PROGRESS_UNSPEC && d->control_progress != FI_PROGRESS_CONTROL_UNIFIED &&
            !(lim.progress_mask & (1u << d->control_progress)))
            return "control progress";
        if (d->av_type != FI_AV_UNSPEC && !(lim.av_type_mask & (1u << d->av_type)))
            return "av type";
        if (d->cq_data_size > od->cq_data_size || d->mr_key_size > od->mr_key_size)
            return "cq data or key size";
        if (!mr_mode_ok(version, lim.mr_mode_required | lim.mr_mode_legacy, h))
            return "mr_mode: the application does not accept the modes the provider needs";
        if (d->cq_cnt > od->cq_cnt || d->ep_cnt > od->ep_cnt || d->tx_ctx_cnt > od->tx_ctx_cnt ||
            d->rx_ctx_cnt > od->rx_ctx_cnt || d->max_ep_tx_ctx > od->max_ep_tx_ctx ||
            d->max_ep_rx_ctx > od->max_ep_rx_ctx || d->max_ep_stx_ctx > od->max_ep_stx_ctx ||
            d->max_ep_srx_ctx > od->max_ep_srx_ctx)
            return "domain queue or context limits";
        if (d->auth_key_size)
            return "authorization keys";
        if (version >= v1_5) {
            if (d->cntr_cnt > od->cntr_cnt || d->mr_iov_limit > od->mr_iov_limit || d->mr_cnt > od->mr_cnt ||
                d->max_err_data > od->max_err_data)
                return "domain counter, MR or error data limits";
            if (d->caps & ~od->caps)
                return "domain capabilities";
            if ((d->mode & od->mode) != od->mode)
                return "domain mode bits";
        }
    }
    if (const ep_attr *e = h->ep_attr) {
        if (e->protocol != FI_PROTO_UNSPEC && e->protocol != oe->protocol)
            return "protocol";
        if (e->protocol_version && e->protocol_version > oe->protocol_version)
            return "protocol version";
        if (e->max_msg_size > oe->max_msg_size)
            return "max_msg_size";
        if (const char *why = ctx_cnt_problem(e->tx_ctx_cnt, oe->tx_ctx_cnt, od->max_ep_tx_ctx,
                                              lim.shared_ctx && od->max_ep_stx_ctx))
            return why;
        if (const char *why = ctx_cnt_problem(e->rx_ctx_cnt, oe->rx_ctx_cnt, od->max_ep_rx_ctx,
                                              lim.shared_ctx && od->max_ep_srx_ctx))
            return why;
        if ((h->caps & (FI_RMA | FI_ATOMIC)) &&
            (e->max_order_raw_size > oe->max_order_raw_size || e->max_order_war_size > oe->max_order_war_size ||
             e->max_order_waw_size > oe->max_order_waw_size))
            return "data ordering sizes";
        if (e->auth_key_size)
            return "authorization keys";
        if ((e->mem_tag_format == FI_TAG_MPI || e->mem_tag_format == FI_TAG_CCL) && !lim.tag_formats)
            return "tag format";
        if (e->mem_tag_format >= FI_TAG_MAX_FORMAT && (e->mem_tag_format & ~oe->mem_tag_format))
            return "mem_tag_format bits";
    }
    if (const rx_attr *x = h->rx_attr) {
        const rx_attr *p = o->rx_attr;
        if ((x->caps & ~ignored_rx_caps) & ~offer_rx_caps(o))
            return "rx caps";
        std::uint64_t m = x->mode ? x->mode : h->mode;
        if ((m & p->mode) != p->mode)
            return "rx mode";
        if (x->op_flags & ~known_op_flags)
            return "rx op_flags unknown";
        if (x->msg_order & ~p->msg_order)
            return "rx msg_order";
        if (x->comp_order & ~p->comp_order)
            return "rx comp_order";
        if (x->size > p->size || x->iov_limit > p->iov_limit)
            return "rx sizes";
    }
    if (const tx_attr *t = h->tx_attr) {
        const tx_attr *p = o->tx_attr;
        if ((t->caps & ~ignored_tx_caps) & ~offer_tx_caps(o))
            return "tx caps";
        std::uint64_t m = t->mode ? t->mode : h->mode;
        if ((m & p->mode) != p->mode)
            return "tx mode";
        if (t->op_flags & ~known_op_flags)
            return "tx op_flags unknown";
        if (t->op_flags & (FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE) &
            ~lim.op_flags)
            return "tx completion level";
        if (t->msg_order & ~p->msg_order)
            return "tx msg_order";
        if (t->comp_order & ~p->comp_order)
            return "tx comp_order";
        if (t->inject_size > p->inject_size || t->size > p->size || t->iov_limit > p->iov_limit ||
            t->rma_iov_limit > p->rma_iov_limit)
            return "tx sizes";
    }
    return nullptr;
}

bool copy_addr(void *&dst, std::size_t &dst_len, const void *src, std::size_t len)
{
    if (!src || !len || dst)
        return true;
    dst = std::malloc(len);
    if (!dst)
        return false;
    std::memcpy(dst, src, len);
    dst_len = len;
    return true;
}

// ofi_alter_info: shape the answer @p r (a copy of the offer) by the hints.
void shape(std::uint32_t version, const info *o, const info_limits &lim, const info *h, info *r)
{
    const int prov_mr = lim.mr_mode_required | lim.mr_mode_legacy;
    if (h)
        r->caps = info_caps(version, o, prov_mr, h);
    const domain_attr *hd = h ? h->domain_attr : nullptr;
    // Local registration the application agreed to through the FI_LOCAL_MR
    // mode bit (mr_mode cannot say it) is a requirement the answer keeps.
    if ((lim.mr_mode_required & FI_MR_LOCAL) && (version < v1_5 || (hd && !(hd->mr_mode & FI_MR_LOCAL))))
        r->mode |= FI_LOCAL_MR;
    domain_attr *rd = r->domain_attr;
    rd->mr_mode = answer_mr_mode(version, prov_mr, r->caps, hd);
    rd->caps = answer_caps(r->caps, hd ? hd->caps : 0, o->domain_attr->caps);
    r->tx_attr->caps = answer_caps(r->caps, h && h->tx_attr ? h->tx_attr->caps & ~ignored_tx_caps : 0,
                                   offer_tx_caps(o));
    r->rx_attr->caps = answer_caps(r->caps, h && h->rx_attr ? h->rx_attr->caps & ~ignored_rx_caps : 0,
                                   offer_rx_caps(o));
    if (!h)
        return;
    if (h->addr_format != FI_FORMAT_UNSPEC)
        r->addr_format = h->addr_format;
    r->handle = h->handle;
    if (hd) {
        if (hd->threading != FI_THREAD_UNSPEC)
            rd->threading = hd->threading;
        if (hd->data_progress != FI_PROGRESS_UNSPEC)
            rd->data_progress = hd->data_progress;
        if (hd->control_progress != FI_PROGRESS_UNSPEC)
            rd->control_progress = hd->control_progress;
        if (hd->av_type != FI_AV_UNSPEC)
            rd->av_type = hd->av_type;
        if (hd->tclass)
            rd->tclass = hd->tclass;
    }
    if (const ep_attr *e = h->ep_attr) {
        ep_attr *re = r->ep_attr;
        if (r->caps & (FI_RMA | FI_ATOMIC)) {
            if (e->max_order_raw_size)
                re->max_order_raw_size = e->max_order_raw_size;
            if (e->max_order_war_size)
                re->max_order_war_size = e->max_order_war_size;
            if (e->max_order_waw_size)
                re->max_order_waw_size = e->max_order_waw_size;
        }
        if (e->tx_ctx_cnt)
            re->tx_ctx_cnt = e->tx_ctx_cnt;
        if (e->rx_ctx_cnt)
            re->rx_ctx_cnt = e->rx_ctx_cnt;
        if (e->mem_tag_format == FI_TAG_MPI || e->mem_tag_format == FI_TAG_CCL ||
            e->mem_tag_format >= FI_TAG_MAX_FORMAT)
            re->mem_tag_format = e->mem_tag_format;
    }
    if (const rx_attr *x = h->rx_attr) {
        r->rx_attr->op_flags = x->op_flags;
        if (x->size)
            r->rx_attr->size = x->size;
        if (x->iov_limit)
            r->rx_attr->iov_limit = x->iov_limit;
    }
    if (const tx_attr *t = h->tx_attr) {
        r->tx_attr->op_flags = t->op_flags;
        if (t->inject_size)
            r->tx_attr->inject_size = t->inject_size;
        if (t->size)
            r->tx_attr->size = t->size;
        if (t->iov_limit)
            r->tx_attr->iov_limit = t->iov_limit;
        if (t->rma_iov_limit)
            r->tx_attr->rma_iov_limit = t->rma_iov_limit;
        if (t->tclass)
            r->tx_attr->tclass = t->tclass;
    }
}

} // namespace

std::uint64_t answer_caps(std::uint64_t info_caps, std::uint64_t hint_caps, std::uint64_t offer_caps)
{
    std::uint64_t secondary = offer_caps & info_caps & FI_SECONDARY_CAPS;
    std::uint64_t caps;
    if (!hint_caps)
        caps = (info_caps & offer_caps & FI_PRIMARY_CAPS) | secondary;
    else
        caps = (hint_caps & FI_PRIMARY_CAPS) | (secondary & ~costly_caps) | (hint_caps & secondary & costly_caps);
    if ((caps & (FI_MSG | FI_TAGGED)) && !(caps & FI_MSG_DIRECTION_CAPS))
        caps |= offer_caps & info_caps & FI_MSG_DIRECTION_CAPS;
    if ((caps & (FI_RMA | FI_ATOMIC)) && !(caps & FI_RMA_DIRECTION_CAPS))
        caps |= offer_caps & info_caps & FI_RMA_DIRECTION_CAPS;
    return caps;
}

int mr_mode_normalize(int m)
{
    if (m & FI_MR_BASIC)
        return (m & ~mr_legacy) | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    if (m & FI_MR_SCALABLE)
        return m & ~(mr_legacy | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
    return m;
}

int check_hints(const info *h)
{
    if (!h)
        return 0;
    if (h->caps) {
        // tx/rx caps name primary capabilities the info asks for, or the
        // modifiers those imply (libfabric's ofi_check_attr_subset).
        std::uint64_t base = expand_modifiers(h->caps);
        if (h->tx_attr && (h->tx_attr->caps & ~ignored_tx_caps & ~base & FI_PRIMARY_CAPS))
            return -FI_EINVAL;
        if (h->rx_attr && (h->rx_attr->caps & ~ignored_rx_caps & ~base & FI_PRIMARY_CAPS))
            return -FI_EINVAL;
    }
    if (h->ep_attr && h->ep_attr->type > FI_EP_SOCK_DGRAM)
        return -FI_EINVAL;
    if (h->domain_attr && (h->domain_attr->threading > FI_THREAD_ENDPOINT ||
                           h->domain_attr->data_progress > FI_PROGRESS_CONTROL_UNIFIED ||
                           h->domain_attr->control_progress > FI_PROGRESS_CONTROL_UNIFIED ||
                           h->domain_attr->av_type > FI_AV_TABLE ||
                           h->domain_attr->resource_mgmt > FI_RM_ENABLED))
        return -FI_EINVAL;
    return 0;
}

int match(std::uint32_t version, const info *o, const info_limits &lim, const info *h, info **out)
{
    if (!o || !out || !o->ep_attr || !o->domain_attr || !o->tx_attr || !o->rx_attr || !o->fabric_attr)
        return -FI_EINVAL;
    if (int rc = check_hints(h); rc)
        return rc;
    if (h)
        if (const char *why = mismatch(version, o, lim, h))
            return fail(o, why);
    info *r = dupinfo(o);
    if (!r)
        return -FI_ENOMEM;
    shape(version, o, lim, h, r);
    // addresses from the hints are the caller's choice and pass through
    if (h && (!copy_addr(r->src_addr, r->src_addrlen, h->src_addr, h->src_addrlen) ||
              !copy_addr(r->dest_addr, r->dest_addrlen, h->dest_addr, h->dest_addrlen))) {
        freeinfo(r);
        return -FI_ENOMEM;
    }
    *out = r;
    return 0;
}

} // namespace shunt::fabric::util
