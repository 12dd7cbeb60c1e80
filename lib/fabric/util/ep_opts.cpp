// Endpoint base: control (operation flags, aliases, enable), options,
// cancel, size queries, and the endpoint's fid/ep ops tables.
#include <cstring>
#include <new>

#include "env/errors.h"
#include "fabric/util/ep.h"

namespace shunt::fabric::util {

int ep_tx_ctx(fid_ep *sep, int index, tx_attr *attr, fid_ep **out, void *context);
int ep_rx_ctx(fid_ep *sep, int index, rx_attr *attr, fid_ep **out, void *context);

namespace {

constexpr std::uint64_t tx_flag_bits = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE |
                                       FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE | FI_MULTICAST | FI_MORE |
                                       FI_FENCE | FI_REMOTE_CQ_DATA | FI_MATCH_COMPLETE;
constexpr std::uint64_t rx_flag_bits = FI_COMPLETION | FI_MULTI_RECV | FI_MORE;

} // namespace

/** Check default operation flags for a direction.
 *  @return 0; -FI_EBADFLAGS unknown; -FI_EOPNOTSUPP a completion level the
 *  provider does not give (FI_COMMIT_COMPLETE...). */
int ep_check_op_flags(const ep_core *c, bool tx, std::uint64_t f)
{
    if (f & ~(tx ? tx_flag_bits : rx_flag_bits))
        return -FI_EBADFLAGS;
    std::uint64_t levels = FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_COMMIT_COMPLETE |
                           FI_MATCH_COMPLETE;
    if (f & levels & ~c->supported_op_flags)
        return -FI_EOPNOTSUPP;
    if ((f & FI_MULTI_RECV) && !(c->caps & FI_MULTI_RECV))
        return -FI_EOPNOTSUPP;
    return 0;
}

void ep_recompute(ep_handle *h)
{
    ep_core *c = h->core;
    h->tx_comp_force = c->tx_selective ? 0 : FI_COMPLETION;
    h->rx_comp_force = c->rx_selective ? 0 : FI_COMPLETION;
    h->tx_default = h->tx_op_flags | h->tx_comp_force;
    h->rx_default = h->rx_op_flags | h->rx_comp_force;
}

namespace {

int alias_create(ep_handle *h, alias *a)
{
    if (!a || !a->alias_fid)
        return -FI_EINVAL;
    std::uint64_t f = a->flags;
    if (!(f & FI_TRANSMIT) == !(f & FI_RECV))
        return -FI_EINVAL;
    bool tx = f & FI_TRANSMIT;
    std::uint64_t op = f & ~(FI_TRANSMIT | FI_RECV);
    ep_core *c = h->core;
    if (int rc = ep_check_op_flags(c, tx, op); rc)
        return rc;
    ep_handle *root = h->parent ? h->parent : h;
    auto *n = new (std::nothrow) ep_handle(*root);
    if (!n)
        return -FI_ENOMEM;
    n->parent = root;
    if (tx)
        n->tx_op_flags = op;
    else
        n->rx_op_flags = op;
    ep_recompute(n);
    c->aliases.fetch_add(1);
    *a->alias_fid = &n->ep.fid;
    return 0;
}

} // namespace

int ep_control_generic(fid *f, int cmd, void *arg)
{
    ep_handle *h = reinterpret_cast<ep_handle *>(f);
    ep_core *c = h->core;
    switch (cmd) {
    case FI_ENABLE:
        if (int rc = ep_enable(c); rc)
            return rc;
        ep_recompute(h);
        return 0;
    case FI_GETOPSFLAG:
    case FI_SETOPSFLAG: {
        if (!arg)
            return -FI_EINVAL;
        std::uint64_t *fl = static_cast<std::uint64_t *>(arg);
        if (!(*fl & FI_TRANSMIT) == !(*fl & FI_RECV))
            return -FI_EINVAL; // exactly one direction
        bool tx = *fl & FI_TRANSMIT;
        if (cmd == FI_GETOPSFLAG) {
            *fl = tx ? h->tx_op_flags : h->rx_op_flags;
            return 0;
        }
        std::uint64_t op = *fl & ~(FI_TRANSMIT | FI_RECV);
        if (int rc = ep_check_op_flags(c, tx, op); rc)
            return rc;
        (tx ? h->tx_op_flags : h->rx_op_flags) = op;
        ep_recompute(h);
        return 0;
    }
    case FI_ALIAS:
        return alias_create(h, static_cast<alias *>(arg));
    default:
        return -FI_ENOSYS; // FI_GETWAIT: only socket endpoints; FI_BACKLOG: only passive
    }
}

namespace {

int opt_index(int name, bool inject)
{
    int base = inject ? FI_OPT_INJECT_MSG_SIZE : FI_OPT_MAX_MSG_SIZE;
    return name - base;
}

int ep_getopt(fid *f, int level, int name, void *val, std::size_t *len)
{
    ep_core *c = ep_core_of(f);
    if (level != FI_OPT_ENDPOINT)
        return -FI_ENOPROTOOPT;
    auto put_size = [&](std::size_t v) {
        if (*len < sizeof(std::size_t)) {
            *len = sizeof(std::size_t);
            return -FI_ETOOSMALL;
        }
        std::memcpy(val, &v, sizeof v);
        *len = sizeof v;
        return 0;
    };
    switch (name) {
    case FI_OPT_MIN_MULTI_RECV:
        return put_size(c->rx->min_multi_recv);
    case FI_OPT_CM_DATA_SIZE:
        return put_size(c->cm_data_size);
    case FI_OPT_FI_HMEM_P2P:
        if (*len < sizeof(int)) {
            *len = sizeof(int);
            return -FI_ETOOSMALL;
        }
        std::memcpy(val, &c->hmem_p2p, sizeof(int));
        *len = sizeof(int);
        return 0;
    case FI_OPT_MAX_MSG_SIZE:
    case FI_OPT_MAX_TAGGED_SIZE:
    case FI_OPT_MAX_RMA_SIZE:
    case FI_OPT_MAX_ATOMIC_SIZE:
        return put_size(c->max_size[opt_index(name, false)]);
    case FI_OPT_INJECT_MSG_SIZE:
    case FI_OPT_INJECT_TAGGED_SIZE:
    case FI_OPT_INJECT_RMA_SIZE:
    case FI_OPT_INJECT_ATOMIC_SIZE:
        return put_size(c->inject_max[opt_index(name, true)]);
    default:
        // includes the set-only FI_OPT_CUDA_API_PERMITTED / SHARED_MEMORY_PERMITTED
        return -FI_ENOPROTOOPT;
    }
}

int ep_setopt(fid *f, int level, int name, const void *val, std::size_t len)
{
    ep_core *c = ep_core_of(f);
    if (level != FI_OPT_ENDPOINT)
        return -FI_ENOPROTOOPT;
    bool enabled = c->state.load() != ep_state::disabled;
    auto get_size = [&](std::size_t &v) {
        if (len != sizeof(std::size_t))
            return -FI_EINVAL;
        std::memcpy(&v, val, sizeof v);
        return 0;
    };
    std::size_t v = 0;
    switch (name) {
    case FI_OPT_MIN_MULTI_RECV:
        // May change after enable: applies to receives posted afterwards.
        if (get_size(v))
            return -FI_EINVAL;
        c->rx->min_multi_recv = v;
        return 0;
    case FI_OPT_CM_DATA_SIZE:
        return -FI_ENOPROTOOPT; // read only
    default:
        break;
    }
    if (enabled)
        return -FI_EOPBADSTATE; // options are set before fi_enable
    switch (name) {
    case FI_OPT_FI_HMEM_P2P: {
        if (len != sizeof(int))
            return -FI_EINVAL;
        int p;
        std::memcpy(&p, val, sizeof p);
        if (p < FI_HMEM_P2P_ENABLED || p > FI_HMEM_P2P_DISABLED)
            return -FI_EINVAL;
        if (p == FI_HMEM_P2P_REQUIRED)
            return -FI_EOPNOTSUPP; // no peer-to-peer device memory path
        c->hmem_p2p = p;
        return 0;
    }
    case FI_OPT_CUDA_API_PERMITTED:
        if (len != sizeof(bool))
            return -FI_EINVAL;
        if (!(c->caps & FI_HMEM))
            return -FI_ENOPROTOOPT; // only FI_HMEM endpoints implement it
        return 0;
    case FI_OPT_SHARED_MEMORY_PERMITTED: {
        if (len != sizeof(bool))
            return -FI_EINVAL;
        bool p;
        std::memcpy(&p, val, sizeof p);
        if (c->hooks && c->hooks->shm_permitted)
            if (int rc = c->hooks->shm_permitted(c, p); rc)
                return rc;
        c->shm_permitted = p;
        return 0;
    }
    case FI_OPT_MAX_MSG_SIZE:
    case FI_OPT_MAX_TAGGED_SIZE:
    case FI_OPT_MAX_RMA_SIZE:
    case FI_OPT_MAX_ATOMIC_SIZE:
        if (get_size(v) || v > c->max_msg_size)
            return -FI_EINVAL;
        c->max_size[opt_index(name, false)] = v;
        return 0;
    case FI_OPT_INJECT_MSG_SIZE:
    case FI_OPT_INJECT_TAGGED_SIZE:
    case FI_OPT_INJECT_RMA_SIZE:
    case FI_OPT_INJECT_ATOMIC_SIZE:
        if (get_size(v) || v > c->inject_size)
            return -FI_EINVAL;
        c->inject_max[opt_index(name, true)] = v;
        return 0;
    default:
        return -FI_ENOPROTOOPT;
    }
}

ssize_t ep_cancel(fid *f, void *context)
{
    ep_core *c = ep_core_of(f);
    if (!context)
        return 0; // operations without context cannot be cancelled
    rx_entry *e;
    {
        guard g(c->rx->lock);
        e = c->rx->remove_ctx(context);
    }
    if (e) {
        cq_err_entry err{};
        err.op_context = e->context;
        err.flags = FI_RECV | (e->flags & (FI_MSG | FI_TAGGED)) | (e->used ? FI_MULTI_RECV : 0);
        err.buf = e->iov_count ? e->iov[0].iov_base : nullptr;
        err.tag = e->tag;
        err.err = FI_ECANCELED;
        err.prov_errno = FI_ECANCELED;
        err.src_addr = FI_ADDR_NOTAVAIL;
        if (c->rx_cq)
            cq_write_err(c->rx_cq, err);
        guard g(c->rx->lock);
        c->rx->put(e);
        return 0;
    }
    if (c->hooks && c->hooks->cancel_tx)
        (void)c->hooks->cancel_tx(c, context);
    return 0;
}

ssize_t ep_rx_size_left(fid_ep *e)
{
    ep_core *c = core_of(e);
    if (!ep_ready(c))
        return -FI_EOPBADSTATE;
    guard g(c->rx->lock);
    return ssize_t(c->rx->nfree);
}

ssize_t ep_tx_size_left(fid_ep *e)
{
    ep_core *c = core_of(e);
    if (!ep_ready(c))
        return -FI_EOPBADSTATE;
    if (c->hooks && c->hooks->tx_size_left)
        return c->hooks->tx_size_left(c);
    return -FI_ENOSYS;
}

int ep_ops_open(fid *f, const char *name, std::uint64_t, void **ops, void *)
{
    ep_core *c = ep_core_of(f);
    if (c->hooks && c->hooks->ops_open)
        return c->hooks->ops_open(c, name, ops);
    return -FI_ENOSYS;
}

} // namespace

const ops_fid ep_fid_ops{.close = ep_close_generic,
                         .bind = ep_bind_generic,
                         .control = ep_control_generic,
                         .ops_open = ep_ops_open};
const ops_ep ep_ops{.cancel = ep_cancel,
                    .getopt = ep_getopt,
                    .setopt = ep_setopt,
                    .tx_ctx = ep_tx_ctx,
                    .rx_ctx = ep_rx_ctx,
                    .rx_size_left = ep_rx_size_left,
                    .tx_size_left = ep_tx_size_left};

} // namespace shunt::fabric::util
