// The vq provider over the ethdev driver, in one process: two domains on the
// cross-wired net_ring pair (SHUNT_ETHDEV_RING_PAIRS=1, net_ring_pair0a <->
// net_ring_pair0b), each side progressed by polling its own CQ.
//  - DGRAM: max_msg_size comes from the port's UD MTU; datagrams of exactly
//    that size arrive byte for byte, one byte more is -FI_EMSGSIZE.
//  - RDM: an endpoint reaches itself and another endpoint of its port
//    (the port loops its own frames back).
//  - RDM: an inject flushed behind a write the target refused is reported
//    (on an endpoint, and on the transmit context of a scalable endpoint
//    that posted it), or arrives; an answer outlives the QP a refused
//    write broke.
//  - RDM: SHUNT_VQ_RC_TIMEOUT / _RETRY_CNT / _RNR_RETRY reach the RC QPs:
//    with the peer silent, a send fails after exactly RETRY_CNT
//    retransmissions (the port's tx_retransmit counter), no sooner than the
//    timeout allows; an out-of-range value is reported by name and the
//    driver's default used. meson runs this binary with different settings.
#include <gtest/gtest.h>

#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "env/errors.h"
#include "ethdev/ethdev_ext.h"
#include "fabric/api.h"
#include "vq/vq.h"

using namespace shunt;
using namespace shunt::fabric;
namespace eth = shunt::drv::ethdev;

namespace {

constexpr const char *port_a = "net_ring_pair0a";
constexpr const char *port_b = "net_ring_pair0b";

std::uint8_t pattern(std::uint64_t seed, std::size_t i) { return std::uint8_t((seed * 131 + i * 7 + (i >> 8)) & 0xff); }

/** Fabric, domain on one port, CQ, AV, EQ and an enabled endpoint. */
struct side {
    info *fi = nullptr;
    fid_fabric *fabric = nullptr;
    fid_domain *domain = nullptr;
    fid_ep *ep = nullptr;
    fid_cq *cq = nullptr;
    fid_av *av = nullptr;
    fid_eq *eq = nullptr;
    std::uint8_t addr[64] = {};
    std::uint64_t extra_caps = 0; ///< asked for by the caller before open

    int open(const char *port, ep_type type)
    {
        info *h = allocinfo();
        h->caps = FI_MSG | FI_TAGGED | extra_caps;
        h->mode = FI_CONTEXT;
        h->ep_attr->type = type;
        h->domain_attr->name = ::strdup(port);
        h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
        h->domain_attr->threading = FI_THREAD_DOMAIN;
        h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
        int rc = getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &fi);
        freeinfo(h);
        if (rc)
            return rc;
        if ((rc = fabric_open(fi->fabric_attr, &fabric, nullptr)) || (rc = domain_open(fabric, fi, &domain, nullptr)))
            return rc;
        cq_attr ca;
        ca.format = FI_CQ_FORMAT_TAGGED;
        ca.wait_obj = FI_WAIT_UNSPEC;
        eq_attr ea;
        ea.wait_obj = FI_WAIT_UNSPEC;
        av_attr aa;
        if ((rc = cq_open(domain, &ca, &cq, nullptr)) || (rc = eq_open(fabric, &ea, &eq, nullptr)) ||
            (rc = av_open(domain, &aa, &av, nullptr)) || (rc = endpoint(domain, fi, &ep, nullptr)) ||
            (rc = ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = ep_bind(ep, &av->fid, 0)) ||
            (rc = ep_bind(ep, &eq->fid, 0)) || (rc = enable(ep)))
            return rc;
        std::size_t len = sizeof addr;
        return getname(&ep->fid, addr, &len);
    }
    ~side()
    {
        for (fid *f : {ep ? &ep->fid : nullptr, av ? &av->fid : nullptr, cq ? &cq->fid : nullptr,
                       eq ? &eq->fid : nullptr, domain ? &domain->fid : nullptr, fabric ? &fabric->fid : nullptr})
            if (f) {
                EXPECT_EQ(fabric::close(f), 0);
            }
        freeinfo(fi);
    }
};

/** Open @p a on port_a and @p b on port_b, each knowing the other
 *  (@p to_b, @p to_a: the AV entries). */
void open_pair(side &a, side &b, ep_type t, fi_addr_t &to_b, fi_addr_t &to_a)
{
    ASSERT_EQ(a.open(port_a, t), 0);
    ASSERT_EQ(b.open(port_b, t), 0);
    ASSERT_EQ(av_insert(a.av, b.addr, 1, &to_b, 0, nullptr), 1);
    ASSERT_EQ(av_insert(b.av, a.addr, 1, &to_a, 0, nullptr), 1);
}

/** Poll @p polled (each once per round) until @p want has an entry for
 *  @p ctx; other entries are dropped. @return 1, a CQ error, or
 *  -FI_ETIMEDOUT after @p ms. */
ssize_t wait_for(fid_cq *want, void *ctx, std::vector<fid_cq *> polled, cq_tagged_entry &e, int ms = 10000)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        for (fid_cq *c : polled) {
            cq_tagged_entry x{};
            ssize_t n = cq_read(c, &x, 1);
            if (c != want)
                continue;
            if (n == 1 && x.op_context == ctx) {
                e = x;
                return 1;
            }
            if (n != 1 && n != -FI_EAGAIN)
                return n;
        }
        if (std::chrono::steady_clock::now() > end)
            return -FI_ETIMEDOUT;
        sched_yield();
    }
}

/** Post with @p post while it says -FI_EAGAIN, polling @p cqs; bounded. */
template <class F>
ssize_t post_retry(std::vector<fid_cq *> cqs, F &&post)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
        ssize_t rc = post();
        if (rc != -FI_EAGAIN || std::chrono::steady_clock::now() > end)
            return rc;
        for (fid_cq *c : cqs) {
            cq_tagged_entry x;
            (void)cq_read(c, &x, 1);
        }
        sched_yield();
    }
}

std::uint64_t port_counter(const char *port, unsigned c)
{
    eth::port_counters pc{};
    EXPECT_EQ(eth::query_counters(vq::find_device(port), &pc), 0);
    return pc.drv[c];
}

std::uint32_t port_ud_mtu(const char *port)
{
    vq::device *d = vq::find_device(port);
    vq::context *ctx = nullptr;
    vq::device_attr da;
    EXPECT_NE(d, nullptr);
    if (!d || vq::open_device(d, &ctx) != 0)
        return 0;
    EXPECT_EQ(vq::query_device(ctx, &da), 0);
    EXPECT_EQ(vq::close_device(ctx), 0);
    return da.ud_mtu;
}

} // namespace

// getinfo's max_msg_size for a DGRAM endpoint on an ethdev port is the
// port's UD MTU (its RoCE path MTU) less the provider's datagram header; the
// endpoint accepts exactly that (FI_OPT_MAX_MSG_SIZE agrees) and delivers
// every byte, and refuses one byte more with -FI_EMSGSIZE (fi_msg(3)).
TEST(EthdevDgram, DatagramsOfMaxMsgSizeArriveAndOneMoreByteIsRefused)
{
    side a, b;
    fi_addr_t to_b = FI_ADDR_NOTAVAIL, to_a = FI_ADDR_NOTAVAIL;
    ASSERT_NO_FATAL_FAILURE(open_pair(a, b, FI_EP_DGRAM, to_b, to_a));
    const std::uint32_t ud_mtu = port_ud_mtu(port_a);
    ASSERT_GT(ud_mtu, 88u);
    const std::size_t max = a.fi->ep_attr->max_msg_size;
    EXPECT_EQ(max, ud_mtu - 88u) << "the UD MTU (" << ud_mtu << ") less the 88-byte datagram header";
    EXPECT_LE(a.fi->tx_attr->inject_size, max);
    std::size_t opt = 0, optlen = sizeof opt;
    ASSERT_EQ(getopt(&a.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_MSG_SIZE, &opt, &optlen), 0);
    EXPECT_EQ(opt, max);

    for (int tagged = 0; tagged < 2; tagged++)
        for (std::size_t len : {max - 1, max}) {
            std::vector<std::uint8_t> out(len), in(len + 16, 0xee);
            for (std::size_t i = 0; i < len; i++)
                out[i] = pattern(len + std::size_t(tagged), i);
            context rctx{}, sctx{};
            if (tagged)
                ASSERT_EQ(trecv(b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, 7, 0, &rctx), 0);
            else
                ASSERT_EQ(recv(b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
            ASSERT_EQ(post_retry({a.cq, b.cq},
                                 [&] {
                                     return tagged ? tsend(a.ep, out.data(), len, nullptr, to_b, 7, &sctx)
                                                   : send(a.ep, out.data(), len, nullptr, to_b, &sctx);
                                 }),
                      0)
                << len;
            cq_tagged_entry e{};
            ASSERT_EQ(wait_for(b.cq, &rctx, {a.cq, b.cq}, e), 1) << len << " bytes did not arrive";
            EXPECT_EQ(e.len, len);
            for (std::size_t i = 0; i < len; i++)
                ASSERT_EQ(in[i], out[i]) << "byte " << i << " of " << len;
            EXPECT_EQ(in[len], 0xee) << "nothing beyond the datagram written";
        }
    std::vector<std::uint8_t> big(max + 1);
    EXPECT_EQ(send(a.ep, big.data(), big.size(), nullptr, to_b, nullptr), -FI_EMSGSIZE);
    EXPECT_EQ(tsend(a.ep, big.data(), big.size(), nullptr, to_b, 1, nullptr), -FI_EMSGSIZE);
    iovec v[2] = {{big.data(), max}, {big.data() + max, 1}};
    msg m{};
    m.msg_iov = v;
    m.iov_count = 2;
    m.addr = to_b;
    EXPECT_EQ(sendmsg(a.ep, &m, 0), -FI_EMSGSIZE) << "the limit is on the sum of the iov";
}

namespace {

/** An integer from the environment, or @p def. */
long env_int(const char *name, long def)
{
    const char *v = std::getenv(name);
    if (!v || !*v)
        return def;
    char *end = nullptr;
    long x = std::strtol(v, &end, 10);
    return end && *end == 0 ? x : def;
}

} // namespace

// With the peer's endpoint silent (its CQ never polled again, so nothing of
// ours is acknowledged), a send over the RDM connection's RC QP is resent
// once per timeout until the retries run out: exactly SHUNT_VQ_RC_RETRY_CNT
// retransmissions, no sooner than (RETRY_CNT + 1) timeouts of 4.096 us x
// 2^SHUNT_VQ_RC_TIMEOUT, then an FI_EHOSTUNREACH error completion. A value
// out of range is named in a warning and the driver's default used instead
// (timeout 16, retry_cnt 7).
namespace {

/** What came of an RMA write the target refuses and an inject posted
 *  behind it on the same connection. */
struct flush_outcome {
    bool write_failed = false;    ///< the write's error entry, on its CQ
    bool inject_reported = false; ///< the inject's late error entry (FI_SEND, no operation context), on its CQ
    bool inject_arrived = false;  ///< the peer received it
    bool elsewhere = false;       ///< any other error entry
};

/** A write with a bad key from @p wep (completing on @p wcq) to @p b's
 *  region, then an inject from @p iep (reported on @p icq) to @p b, whose
 *  receive is posted; @p cqs are polled (bounded) until both are settled. */
flush_outcome write_refused_then_inject(side &b, fi_addr_t to_b, fid_ep *wep, fid_cq *wcq, fid_ep *iep, fid_cq *icq,
                                        std::vector<fid_cq *> cqs)
{
    flush_outcome o;
    std::vector<std::uint8_t> region(4096);
    fid_mr *mr = nullptr;
    EXPECT_EQ(mr_reg(b.domain, region.data(), region.size(), FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr), 0);
    if (!mr)
        return o;
    char out[8] = {'w', 'r', 'i', 't', 'e'};
    int wctx = 0, r2 = 0;
    char in2[16] = {};
    EXPECT_EQ(write(wep, out, sizeof out, nullptr, to_b, reinterpret_cast<std::uintptr_t>(region.data()),
                    mr_key(mr) ^ 0x55, &wctx),
              0);
    EXPECT_EQ(fabric::inject(iep, "flushed", 8, to_b), 0);
    EXPECT_EQ(recv(b.ep, in2, sizeof in2, nullptr, FI_ADDR_UNSPEC, &r2), 0);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!(o.write_failed && (o.inject_reported || o.inject_arrived)) && std::chrono::steady_clock::now() < end) {
        for (fid_cq *c : cqs) {
            cq_tagged_entry x{};
            ssize_t n = cq_read(c, &x, 1);
            if (n == 1 && c == b.cq && x.op_context == &r2)
                o.inject_arrived = true;
            if (n != -FI_EAVAIL)
                continue;
            cq_err_entry err{};
            EXPECT_EQ(cq_readerr(c, &err, 0), 1);
            if (c == wcq && err.op_context == &wctx) {
                o.write_failed = true;
            } else if (c == icq && err.op_context == nullptr && (err.flags & FI_SEND)) {
                o.inject_reported = true;
                EXPECT_EQ(err.err, FI_ECONNRESET);
            } else {
                o.elsewhere = true;
            }
        }
    }
    EXPECT_EQ(fabric::close(&mr->fid), 0);
    return o;
}

} // namespace

// An inject completes when it is posted. One posted behind an RMA write
// that the target refuses travels on the same RC QP, which the refusal puts
// in ERR: the inject is flushed, never delivered. It is not lost silently:
// the initiator reports it with an error entry carrying the endpoint's
// context (FI_SEND, FI_ECONNRESET); its counter counted it already.
TEST(EthdevRdm, AnInjectFlushedBehindARefusedWriteIsReportedNotLostSilently)
{
    side a, b;
    a.extra_caps = b.extra_caps = FI_RMA;
    fi_addr_t to_b = FI_ADDR_NOTAVAIL, to_a = FI_ADDR_NOTAVAIL;
    open_pair(a, b, FI_EP_RDM, to_b, to_a);
    // The connection first.
    char in[16] = {}, out[8] = {'c', 'o', 'n', 'n'};
    int rctx = 0, sctx = 0;
    ASSERT_EQ(recv(b.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(post_retry({a.cq, b.cq}, [&] { return send(a.ep, out, sizeof out, nullptr, to_b, &sctx); }), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_for(b.cq, &rctx, {a.cq, b.cq}, e), 1);
    flush_outcome o = write_refused_then_inject(b, to_b, a.ep, a.cq, a.ep, a.cq, {a.cq, b.cq});
    EXPECT_TRUE(o.write_failed) << "the refused write's own error entry";
    EXPECT_TRUE(o.inject_reported || o.inject_arrived) << "the inject neither arrived nor was reported lost";
    EXPECT_FALSE(o.inject_reported && o.inject_arrived);
    EXPECT_FALSE(o.elsewhere) << "an error entry on a CQ that posted nothing failing";
}

// The same on a scalable endpoint: the write refused on transmit context
// 0 breaks the QP under both contexts, and the inject posted on context 1
// behind it is reported on context 1's CQ, where it was posted (the
// scalable endpoint itself has no CQ).
TEST(EthdevRdm, AFlushedInjectIsReportedOnTheTransmitContextThatPostedIt)
{
    side b;
    b.extra_caps = FI_RMA;
    ASSERT_EQ(b.open(port_b, FI_EP_RDM), 0);
    info *h = allocinfo();
    h->caps = FI_MSG | FI_TAGGED | FI_RMA;
    h->mode = FI_CONTEXT;
    h->ep_attr->type = FI_EP_RDM;
    h->ep_attr->tx_ctx_cnt = 2;
    h->ep_attr->rx_ctx_cnt = 1;
    h->domain_attr->name = ::strdup(port_a);
    h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    info *fi = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &fi), 0);
    freeinfo(h);
    fid_fabric *fab = nullptr;
    fid_domain *dom = nullptr;
    fid_av *av = nullptr;
    fid_ep *sep = nullptr, *tx[2] = {}, *rx = nullptr;
    fid_cq *txcq[2] = {}, *rxcq = nullptr;
    ASSERT_EQ(fabric_open(fi->fabric_attr, &fab, nullptr), 0);
    ASSERT_EQ(domain_open(fab, fi, &dom, nullptr), 0);
    av_attr aa;
    ASSERT_EQ(av_open(dom, &aa, &av, nullptr), 0);
    ASSERT_EQ(scalable_ep(dom, fi, &sep, nullptr), 0);
    ASSERT_EQ(scalable_ep_bind(sep, &av->fid, 0), 0);
    ASSERT_EQ(enable(sep), 0);
    cq_attr ca;
    ca.format = FI_CQ_FORMAT_TAGGED;
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(cq_open(dom, &ca, &txcq[i], nullptr), 0);
        ASSERT_EQ(tx_context(sep, i, nullptr, &tx[i], nullptr), 0);
        ASSERT_EQ(ep_bind(tx[i], &txcq[i]->fid, FI_TRANSMIT), 0);
        ASSERT_EQ(enable(tx[i]), 0);
    }
    ASSERT_EQ(cq_open(dom, &ca, &rxcq, nullptr), 0);
    ASSERT_EQ(rx_context(sep, 0, nullptr, &rx, nullptr), 0);
    ASSERT_EQ(ep_bind(rx, &rxcq->fid, FI_RECV), 0);
    ASSERT_EQ(enable(rx), 0);
    fi_addr_t to_b = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(av, b.addr, 1, &to_b, 0, nullptr), 1);
    // The connection first (context 0).
    char in[16] = {}, out[8] = {'c', 'o', 'n', 'n'};
    int rctx = 0, sctx = 0;
    ASSERT_EQ(recv(b.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(post_retry({txcq[0], b.cq}, [&] { return send(tx[0], out, sizeof out, nullptr, to_b, &sctx); }), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_for(b.cq, &rctx, {txcq[0], b.cq}, e), 1);
    flush_outcome o = write_refused_then_inject(b, to_b, tx[0], txcq[0], tx[1], txcq[1], {txcq[0], txcq[1], rxcq, b.cq});
    EXPECT_TRUE(o.write_failed) << "the refused write's own error entry";
    EXPECT_TRUE(o.inject_reported || o.inject_arrived) << "the inject neither arrived nor was reported on its context";
    EXPECT_FALSE(o.inject_reported && o.inject_arrived);
    EXPECT_FALSE(o.elsewhere) << "an error entry on a CQ that posted nothing failing";
    for (fid *f : {&tx[0]->fid, &tx[1]->fid, &rx->fid, &sep->fid, &av->fid, &txcq[0]->fid, &txcq[1]->fid,
                   &rxcq->fid, &dom->fid, &fab->fid})
        EXPECT_EQ(fabric::close(f), 0);
    freeinfo(fi);
}

// The port loops RoCE frames to its own address back (as a RoCE NIC
// does), so an RDM endpoint reaches itself, and another endpoint of its
// port: eager and rendezvous messages (the rendezvous an RDMA read from its
// own memory) arrive byte for byte, and no frame goes to the wire.
TEST(EthdevRdm, AnEndpointReachesItselfAndAnotherEndpointOfItsPort)
{
    side a, c;
    ASSERT_EQ(a.open(port_a, FI_EP_RDM), 0);
    ASSERT_EQ(c.open(port_a, FI_EP_RDM), 0);
    fi_addr_t self = FI_ADDR_NOTAVAIL, to_c = FI_ADDR_NOTAVAIL, to_a = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(a.av, a.addr, 1, &self, 0, nullptr), 1);
    ASSERT_EQ(av_insert(a.av, c.addr, 1, &to_c, 0, nullptr), 1);
    ASSERT_EQ(av_insert(c.av, a.addr, 1, &to_a, 0, nullptr), 1);
    const std::uint64_t wire = port_counter(port_a, eth::c_tx_frames);
    const std::uint64_t looped = port_counter(port_a, eth::c_tx_loopback);
    // (sender, receiver, destination at the sender, length, tagged)
    struct leg {
        side *from, *to;
        fi_addr_t dest;
        std::size_t len;
        bool tagged;
    };
    const leg legs[] = {{&a, &a, self, 8, false},        {&a, &a, self, 64 * 1024, true},
                        {&a, &c, to_c, 8, true},         {&a, &c, to_c, 100000, false},
                        {&c, &a, to_a, 3000, false},     {&c, &a, to_a, 64 * 1024, true}};
    std::uint64_t seed = 1;
    for (const leg &l : legs) {
        std::vector<std::uint8_t> out(l.len), in(l.len + 16, 0xee);
        for (std::size_t i = 0; i < l.len; i++)
            out[i] = pattern(seed, i);
        int rctx = 0, sctx = 0;
        if (l.tagged)
            ASSERT_EQ(trecv(l.to->ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, 9, 0, &rctx), 0);
        else
            ASSERT_EQ(recv(l.to->ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
        ASSERT_EQ(post_retry({a.cq, c.cq},
                             [&] {
                                 return l.tagged ? tsend(l.from->ep, out.data(), l.len, nullptr, l.dest, 9, &sctx)
                                                 : send(l.from->ep, out.data(), l.len, nullptr, l.dest, &sctx);
                             }),
                  0)
            << l.len;
        cq_tagged_entry e{};
        ASSERT_EQ(wait_for(l.to->cq, &rctx, {a.cq, c.cq}, e), 1) << l.len << " bytes did not arrive";
        EXPECT_EQ(e.len, l.len);
        for (std::size_t i = 0; i < l.len; i++)
            ASSERT_EQ(in[i], out[i]) << "byte " << i << " of " << l.len;
        EXPECT_EQ(in[l.len], 0xee);
        ASSERT_EQ(wait_for(l.from->cq, &sctx, {a.cq, c.cq}, e), 1) << "the send's completion";
        seed++;
    }
    EXPECT_EQ(port_counter(port_a, eth::c_tx_frames), wire) << "a frame to the port itself went to the PMD";
    EXPECT_GT(port_counter(port_a, eth::c_tx_loopback), looped);
}

// A peer answers a request of ours (here the delivery acknowledgement of a
// send with FI_DELIVERY_COMPLETE) on the QP the request came on. Its own QP
// to us may fail meanwhile (a write of its own that we refuse puts it in
// ERR), and the answer must not be lost with it: our send completes.
TEST(EthdevRdm, AnAnswerOutlivesThePeersOwnQpThatARefusedWriteBroke)
{
    side a, b;
    a.extra_caps = b.extra_caps = FI_RMA;
    fi_addr_t to_b = FI_ADDR_NOTAVAIL, to_a = FI_ADDR_NOTAVAIL;
    open_pair(a, b, FI_EP_RDM, to_b, to_a);
    std::vector<std::uint8_t> out(6143);
    for (std::size_t i = 0; i < out.size(); i++)
        out[i] = pattern(6, i);
    iovec v[3] = {{out.data(), 2047}, {out.data() + 2047, 2047}, {out.data() + 4094, 2049}};
    msg m{};
    m.msg_iov = v;
    m.iov_count = 3;
    m.addr = to_b;
    int sctx = 0;
    m.context = &sctx;
    m.data = 0x01020304;
    ASSERT_EQ(sendmsg(a.ep, &m, FI_COMPLETION | FI_REMOTE_CQ_DATA | FI_DELIVERY_COMPLETE), 0);
    for (int i = 0; i < 6; i++) // the message's way to b, kept there as unexpected
        for (fid_cq *c : {b.cq, a.cq}) {
            cq_tagged_entry x{};
            ASSERT_EQ(cq_read(c, &x, 1), -FI_EAGAIN);
        }
    std::vector<std::uint8_t> region(4096);
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(a.domain, region.data(), region.size(), FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr), 0);
    int wctx = 0;
    ASSERT_EQ(write(b.ep, out.data(), 64, nullptr, to_a, reinterpret_cast<std::uintptr_t>(region.data()),
                    mr_key(mr) ^ 0x55, &wctx),
              0);
    bool sent = false, write_failed = false;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!(sent && write_failed) && std::chrono::steady_clock::now() < end) {
        for (fid_cq *c : {a.cq, b.cq}) {
            cq_tagged_entry x{};
            ssize_t n = cq_read(c, &x, 1);
            if (n == 1 && c == a.cq && x.op_context == &sctx)
                sent = true;
            if (n != -FI_EAVAIL)
                continue;
            cq_err_entry err{};
            ASSERT_EQ(cq_readerr(c, &err, 0), 1);
            if (c == b.cq && err.op_context == &wctx) {
                write_failed = true;
                EXPECT_EQ(err.err, FI_EACCES);
            }
            ASSERT_NE(err.op_context, &sctx) << "the send failed: " << err.err;
        }
    }
    EXPECT_TRUE(write_failed) << "the refused write's own error entry";
    EXPECT_TRUE(sent) << "the send delivered never completed: its delivery acknowledgement was lost";
    std::vector<std::uint8_t> in(8192);
    int rctx = 0;
    ASSERT_EQ(recv(b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_for(b.cq, &rctx, {a.cq, b.cq}, e), 1);
    EXPECT_EQ(e.len, out.size());
    EXPECT_EQ(std::memcmp(in.data(), out.data(), out.size()), 0);
    EXPECT_EQ(fabric::close(&mr->fid), 0);
}

TEST(EthdevRcTunables, ASilentPeerFailsTheSendAfterTheConfiguredRetries)
{
    const long t_set = env_int("SHUNT_VQ_RC_TIMEOUT", -1), r_set = env_int("SHUNT_VQ_RC_RETRY_CNT", -1);
    const bool t_bad = t_set < -1 || t_set > 31, r_bad = r_set < -1 || r_set > 7;
    const long timeout = t_set >= 0 && !t_bad ? t_set : 16, retries = r_set >= 0 && !r_bad ? r_set : 7;
    if (timeout == 0 || timeout + retries > 16 + 2)
        GTEST_SKIP() << "run with SHUNT_VQ_RC_TIMEOUT / _RETRY_CNT that fail within seconds (meson sets them)";
    const char *rnr = std::getenv("SHUNT_VQ_RC_RNR_RETRY");

    testing::internal::CaptureStderr();
    side a, b;
    fi_addr_t to_b = FI_ADDR_NOTAVAIL, to_a = FI_ADDR_NOTAVAIL;
    open_pair(a, b, FI_EP_RDM, to_b, to_a);
    // One message each way sets the connection up; both sides are polled.
    std::vector<std::uint8_t> out(2048), in(4096);
    for (std::size_t i = 0; i < out.size(); i++)
        out[i] = pattern(3, i);
    context rctx{}, sctx{};
    ASSERT_EQ(recv(b.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(post_retry({a.cq, b.cq}, [&] { return send(a.ep, out.data(), out.size(), nullptr, to_b, &sctx); }), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_for(b.cq, &rctx, {a.cq, b.cq}, e), 1);
    ASSERT_EQ(e.len, out.size());
    ASSERT_EQ(std::memcmp(in.data(), out.data(), out.size()), 0);
    ASSERT_EQ(wait_for(a.cq, &sctx, {a.cq, b.cq}, e), 1) << "the first send completes";
    // Let acknowledgements still on their way arrive.
    auto settle = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (std::chrono::steady_clock::now() < settle)
        for (fid_cq *c : {a.cq, b.cq}) {
            cq_tagged_entry x;
            (void)cq_read(c, &x, 1);
        }
    const std::string log = testing::internal::GetCapturedStderr();
    if (t_bad) {
        EXPECT_NE(log.find("SHUNT_VQ_RC_TIMEOUT=" + std::string(std::getenv("SHUNT_VQ_RC_TIMEOUT")) +
                           " is not -1 or 0..31"),
                  std::string::npos)
            << log;
    }
    if (r_bad) {
        EXPECT_NE(log.find("SHUNT_VQ_RC_RETRY_CNT="), std::string::npos) << log;
    }
    if (rnr && (env_int("SHUNT_VQ_RC_RNR_RETRY", -1) < -1 || env_int("SHUNT_VQ_RC_RNR_RETRY", -1) > 7)) {
        EXPECT_NE(log.find("SHUNT_VQ_RC_RNR_RETRY=" + std::string(rnr) + " is not -1 or 0..7"), std::string::npos)
            << log;
    }

    // From here on b is never polled: nothing acknowledges a's packets.
    const std::uint64_t re0 = port_counter(port_a, eth::c_tx_retransmit);
    const auto t0 = std::chrono::steady_clock::now();
    context fctx{};
    ASSERT_EQ(post_retry({a.cq}, [&] { return send(a.ep, out.data(), out.size(), nullptr, to_b, &fctx); }), 0);
    ssize_t n = wait_for(a.cq, &fctx, {a.cq}, e, 20000);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(n, -FI_EAVAIL) << "the send to a silent peer fails (after " << secs << " s)";
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(a.cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, &fctx);
    EXPECT_EQ(err.err, FI_EHOSTUNREACH);
    EXPECT_EQ(port_counter(port_a, eth::c_tx_retransmit) - re0, std::uint64_t(retries))
        << "one retransmission per retry (timeout " << timeout << ", retry_cnt " << retries << ")";
    const double floor = double(retries + 1) * 4.096e-6 * double(1u << timeout);
    EXPECT_GE(secs, floor * 0.99) << "no sooner than retry_cnt + 1 timeouts";
}
