// vq provider: FI_EP_DGRAM over the endpoint's UD QP, and the TSO extension.
#include <cstring>

#include "env/errors.h"
#include "prov.h"

namespace shunt::prov::vqprov {

namespace {

/** Datagram ops (their own header, not the RC protocol's). */
enum : std::uint8_t { dg_msg = 1, dg_tagged = 2 };
enum : std::uint8_t { dgf_data = 2 };

struct dgram_hdr {
    std::uint8_t op;    ///< dg_msg / dg_tagged
    std::uint8_t flags; ///< dgf_data
    std::uint16_t pad;
    std::uint32_t pad2;
    ep_addr from;      ///< sender (for FI_SOURCE)
};

static_assert(sizeof(dgram_hdr) == dgram_hdr_size);

std::size_t hdr_size_of(bool tagged, bool data) { return sizeof(dgram_hdr) + (tagged ? 8 : 0) + (data ? 8 : 0); }

vq::ah *peer_ah(prov_ep *e, util::av_entry *pe, std::uint32_t &qpn, conn **cn = nullptr)
{
    conn *c = conn_for(e, pe);
    if (!c)
        return nullptr;
    if (!c->ah)
        c->ah = ah_for(e, c->peer);
    qpn = c->peer.qpn;
    if (cn)
        *cn = c;
    return c->ah;
}

/** A datagram larger than one inline send (up to the UD MTU): our header
 *  from the entry's registered line and the user's buffers as an SGE list,
 *  read when the device executes it; completes on its send completion. */
ssize_t send_sge(prov_ep *e, util::ep_core *core, const util::tx_req &r, conn *c, vq::ah *ah, std::uint32_t qpn,
                 const std::uint8_t *h, std::size_t hl, std::uint64_t cqf)
{
    if (!e->dgram_hdrs_mr) [[unlikely]]
        return -FI_EMSGSIZE;
    tx_entry *t = new_tx(e, core, r, c, cqf);
    if (!t)
        return -FI_EAGAIN;
    std::uint8_t *line = e->dgram_hdrs.get() + std::size_t(t - e->tx.data()) * dgram_hdr_max;
    std::memcpy(line, h, hl);
    vq::sge sg[1 + iov_max];
    std::size_t ns = 0;
    sg[ns++] = {reinterpret_cast<std::uint64_t>(line), std::uint32_t(hl), e->dgram_hdrs_mr->lkey};
    for (std::size_t i = 0; i < r.count; i++) {
        if (!r.iov[i].iov_len)
            continue;
        vq::mr *m = nullptr;
        if (r.desc && r.desc[i])
            m = static_cast<vq::mr *>(static_cast<util::mr_obj *>(r.desc[i])->prov);
        if (!m) {
            if (int rc = mr_get(e->dom, r.iov[i].iov_base, r.iov[i].iov_len, t->mrs[t->nmrs])) {
                tx_put(e, t);
                return rc;
            }
            m = t->mrs[t->nmrs++].mr;
        }
        sg[ns++] = {reinterpret_cast<std::uint64_t>(r.iov[i].iov_base), std::uint32_t(r.iov[i].iov_len), m->lkey};
    }
    vq::wr_start(e->ud);
    e->ud->wr_id = tx_id(e, t);
    e->ud->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(e->ud);
    vq::wr_set_sge_list(e->ud, ns, sg);
    vq::wr_set_ud_addr(e->ud, ah, qpn, qkey);
    if (int rc = wr_finish(e, e->ud)) {
        tx_put(e, t);
        return rc;
    }
    e->scq_pending++;
    return 0;
}

} // namespace

ssize_t dgram_transmit(util::ep_core *core, const util::tx_req &r)
{
    prov_ep *e = ep_of(core);
    if (r.kind != util::tx_req::send && r.kind != util::tx_req::tsend)
        return -FI_EOPNOTSUPP;
    util::guard g(e->lock);
    bool tagged = r.kind == util::tx_req::tsend;
    bool data = r.flags & FI_REMOTE_CQ_DATA;
    std::uint32_t qpn = 0;
    conn *c = nullptr;
    vq::ah *ah = peer_ah(e, r.peer, qpn, &c);
    if (!ah)
        return -FI_EINVAL;
    std::uint8_t h[sizeof(dgram_hdr) + 16];
    dgram_hdr dh{tagged ? dg_tagged : dg_msg, std::uint8_t(data ? dgf_data : 0), 0, 0, e->addr};
    std::memcpy(h, &dh, sizeof dh);
    std::size_t hl = sizeof dh;
    if (tagged) {
        std::memcpy(h + hl, &r.tag, 8);
        hl += 8;
    }
    if (data) {
        std::uint64_t d = r.data & 0xffffffffu;
        std::memcpy(h + hl, &d, 8);
        hl += 8;
    }
    const std::uint64_t cqf = FI_SEND | (tagged ? FI_TAGGED : FI_MSG);
    if (hl + r.len > e->dom->lim.inline_max) {
        if (hl + r.len > e->dom->lim.dgram_max + dgram_hdr_max)
            return -FI_EMSGSIZE;
        return send_sge(e, core, r, c, ah, qpn, h, hl, cqf);
    }
    vq::data_buf bufs[5];
    bufs[0] = vq::data_buf{h, hl};
    std::size_t nb = 1;
    for (std::size_t i = 0; i < r.count; i++)
        if (r.iov[i].iov_len)
            bufs[nb++] = vq::data_buf{r.iov[i].iov_base, r.iov[i].iov_len};
    vq::wr_start(e->ud);
    e->ud->wr_id = ~0ULL;
    e->ud->wr_flags = 0;
    vq::wr_send(e->ud);
    if (hl + r.len > e->dom->lim.inline_max) {
        vq::wr_abort(e->ud);
        return -FI_EMSGSIZE;
    }
    vq::wr_set_inline_data_list(e->ud, nb, bufs);
    vq::wr_set_ud_addr(e->ud, ah, qpn, qkey);
    int rc = vq::wr_complete(e->ud);
    if (rc)
        return rc;
    // The datagram is in the peer's ring (or dropped, as datagrams may be).
    env::stats::on_tx(e->io, r.len);
    util::tx_done(core, r.flags, r.context, FI_SEND | (tagged ? FI_TAGGED : FI_MSG), r.len);
    return 0;
}

void dgram_rx(prov_ep *e, const std::uint8_t *b, std::size_t len)
{
    if (len < sizeof(dgram_hdr))
        return;
    dgram_hdr dh;
    std::memcpy(&dh, b, sizeof dh);
    bool tagged = dh.op == dg_tagged;
    bool data = dh.flags & dgf_data;
    std::size_t hl = hdr_size_of(tagged, data);
    if (len < hl)
        return;
    std::uint64_t tag = 0, d = 0;
    std::size_t o = sizeof dh;
    if (tagged) {
        std::memcpy(&tag, b + o, 8);
        o += 8;
    }
    if (data)
        std::memcpy(&d, b + o, 8);
    fi_addr_t src = e->core->av ? util::av_reverse(e->core->av, &dh.from) : FI_ADDR_NOTAVAIL;
    env::stats::on_rx(e->io, len - hl);
    (void)util::rx_deliver(e->core, tagged, src, tag, d, data ? FI_REMOTE_CQ_DATA : 0, b + hl, len - hl, false);
}

// ---- TSO extension ----

namespace {

int tso_query(fid_ep *ep, tso_attr *attr)
{
    if (!ep || !attr)
        return -FI_EINVAL;
    const dev_limits &l = ep_of(util::to_handle(ep)->core)->dom->lim;
    attr->max_hdr_len = l.tso_hdr_max;
    attr->max_mss = l.tso_mss_max;
    attr->max_payload = l.inline_max; // copied inline at the call
    attr->max_segments = tso_segments_max;
    return 0;
}

ssize_t tso_send(fid_ep *ep, const void *hdr, std::size_t hdr_len, const iovec *payload, void **, std::size_t count,
                 std::size_t mss, fi_addr_t dest, std::uint64_t flags, void *context)
{
    if (!ep)
        return -FI_EINVAL;
    util::ep_handle *h = util::to_handle(ep);
    util::ep_core *core = h->core;
    prov_ep *e = ep_of(core);
    if (!util::ep_ready(core))
        return -FI_EOPBADSTATE;
    const dev_limits &l = e->dom->lim;
    if ((!hdr && hdr_len) || (!payload && count) || hdr_len > l.tso_hdr_max || mss == 0 || mss > l.tso_mss_max ||
        count > iov_max)
        return -FI_EINVAL;
    std::size_t total = 0;
    for (std::size_t i = 0; i < count; i++)
        total += payload[i].iov_len;
    if (total > l.inline_max || (total + mss - 1) / mss > tso_segments_max)
        return -FI_EMSGSIZE;
    util::av_entry *pe = core->av ? util::av_get(core->av, dest) : nullptr;
    if (!pe)
        return -FI_EINVAL;
    util::guard g(e->lock);
    std::uint32_t qpn = 0;
    vq::ah *ah = peer_ah(e, pe, qpn);
    if (!ah)
        return -FI_EINVAL;
    // Each segment: our datagram header + the user's header + mss bytes:
    // vq's send_tso repeats a header of ours + theirs before each segment.
    // The endpoint's buffer (lock held) has room for both; the builder
    // copies it.
    std::uint8_t *full = e->tso_hdr.data();
    dgram_hdr dh{dg_msg, 0, 0, 0, e->addr};
    std::memcpy(full, &dh, sizeof dh);
    if (hdr_len)
        std::memcpy(full + sizeof dh, hdr, hdr_len);
    vq::data_buf bufs[iov_max];
    std::size_t nb = 0;
    for (std::size_t i = 0; i < count; i++)
        if (payload[i].iov_len)
            bufs[nb++] = vq::data_buf{payload[i].iov_base, payload[i].iov_len};
    vq::wr_start(e->ud);
    e->ud->wr_id = ~0ULL;
    e->ud->wr_flags = 0;
    vq::wr_send_tso(e->ud, full, std::uint16_t(sizeof dh + hdr_len), std::uint16_t(mss));
    vq::wr_set_inline_data_list(e->ud, nb, bufs);
    vq::wr_set_ud_addr(e->ud, ah, qpn, qkey);
    int rc = vq::wr_complete(e->ud);
    if (rc)
        return rc;
    env::stats::on_tx(e->io, total);
    util::tx_done(core, flags | h->tx_comp_force, context, FI_SEND | FI_MSG, total);
    return 0;
}

const ops_tso tso_ops{.query = tso_query, .send_tso = tso_send};

} // namespace

int dgram_ops_open(util::ep_core *c, const char *name, void **ops)
{
    if (!ep_of(c)->dgram || std::strcmp(name, FI_SHUNT_TSO_OPS_1) != 0)
        return -FI_ENOSYS;
    *ops = const_cast<ops_tso *>(&tso_ops);
    return 0;
}

} // namespace shunt::prov::vqprov
