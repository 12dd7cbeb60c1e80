// Instructions per operation, counted by callgrind: the endpoint's small
// send and receive against the vq calls under them, in one process (the
// same code as between two processes, without the cache-line transfer, so
// the counts do not depend on the machine's load).
//
// Run it with test/bench/instr_count.sh (valgrind --tool=callgrind
// --collect-atstart=no): each phase collects only the calls it measures
// (CALLGRIND_TOGGLE_COLLECT around each one) and dumps its totals under its
// name; the script divides by the number of calls. Outside valgrind the
// client requests do nothing and the program only checks that every phase
// ran (exit code 1 otherwise).
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "env/errors.h"
#include "fabric/api.h"
#include "vq/vq.h"

using namespace shunt;
namespace fab = shunt::fabric;

namespace {

constexpr int calls = 20000; ///< measured calls per phase (printed for the script)
constexpr int warm = 2000;

#define COLLECT(expr)                                                                                              \
    do {                                                                                                           \
        CALLGRIND_TOGGLE_COLLECT;                                                                                  \
        expr;                                                                                                      \
        CALLGRIND_TOGGLE_COLLECT;                                                                                  \
    } while (0)

void phase_done(const char *name)
{
    CALLGRIND_DUMP_STATS_AT(name);
    std::printf("phase %s %d\n", name, calls);
}

[[noreturn]] void die(const char *what, long rc)
{
    std::fprintf(stderr, "instr-count: %s failed (%ld)\n", what, rc);
    std::exit(1);
}

/** The toggle pair alone: subtracted by the script from every phase. */
void empty_phase()
{
    volatile int x = 0;
    for (int i = 0; i < calls; i++)
        COLLECT(x = x + 1);
    phase_done("empty");
}

/* ---- vq: a loopback RC pair on shm0, thread domain, single-threaded CQs ---- */

void vq_phases()
{
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::td *td = nullptr;
    vq::cq *cqa = nullptr, *cqb = nullptr;
    vq::qp *a = nullptr, *b = nullptr;
    vq::mr *mr = nullptr;
    std::vector<std::uint8_t> buf(1 << 16);
    int rc;
    if ((rc = vq::open_device(vq::find_device("shm0"), &ctx)) || (rc = vq::alloc_pd(ctx, &pd)) ||
        (rc = vq::alloc_td(ctx, &td)))
        die("vq open", rc);
    vq::cq_init_attr ca;
    ca.cqe = 4096;
    ca.single_threaded = true;
    if ((rc = vq::create_cq(ctx, &ca, &cqa)) || (rc = vq::create_cq(ctx, &ca, &cqb)))
        die("create_cq", rc);
    vq::qp_init_attr ia;
    ia.send_cq = ia.recv_cq = cqa;
    ia.td = td;
    ia.cap.max_send_wr = 1024;
    ia.cap.max_recv_wr = 1024;
    if ((rc = vq::create_qp(pd, &ia, &a)))
        die("create_qp", rc);
    ia.send_cq = ia.recv_cq = cqb;
    if ((rc = vq::create_qp(pd, &ia, &b)) || (rc = vq::reg_mr(pd, buf.data(), buf.size(), vq::ACCESS_LOCAL_WRITE, &mr)))
        die("create_qp/reg_mr", rc);
    for (auto [q, peer] : {std::pair{a, b}, std::pair{b, a}}) {
        vq::qp_attr at;
        vq::qp_addr pa = vq::get_qp_addr(peer);
        at.state = vq::qp_state::init;
        rc = vq::modify_qp(q, &at, vq::QP_ATTR_STATE);
        at.state = vq::qp_state::rtr;
        at.dest = pa.dev;
        at.dest_qp_num = pa.qpn;
        rc |= vq::modify_qp(q, &at, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN);
        at.state = vq::qp_state::rts;
        rc |= vq::modify_qp(q, &at, vq::QP_ATTR_STATE);
        if (rc)
            die("modify_qp", rc);
    }
    const auto addr = reinterpret_cast<std::uint64_t>(buf.data());
    for (int i = 0; i < 512; i++)
        if ((rc = vq::post_recv(b, 0, addr, 64, mr->lkey)))
            die("post_recv", rc);
    std::uint64_t payload = 0x1122334455667788ull;
    vq::wc w[16];
    // One message at a time: post, poll its completion, repost the receive.
    auto round = [&](bool measure_send, bool measure_poll, bool measure_recv) {
        int r;
        if (measure_send)
            COLLECT(r = vq::post_send(a, 1, &payload, 8, 0, vq::WR_INLINE));
        else
            r = vq::post_send(a, 1, &payload, 8, 0, vq::WR_INLINE);
        if (r)
            die("post_send", r);
        int n;
        if (measure_poll)
            COLLECT(n = vq::poll_cq(cqb, 16, w));
        else
            n = vq::poll_cq(cqb, 16, w);
        if (n != 1 || w[0].status != vq::wc_status::success || w[0].byte_len != 8)
            die("poll_cq", n);
        if (measure_recv)
            COLLECT(r = vq::post_recv(b, 0, addr, 64, mr->lkey));
        else
            r = vq::post_recv(b, 0, addr, 64, mr->lkey);
        if (r)
            die("post_recv", r);
    };
    for (int i = 0; i < warm; i++)
        round(false, false, false);
    for (int i = 0; i < calls; i++)
        round(true, false, false);
    phase_done("vq_post_send_8B_inline");
    for (int i = 0; i < calls; i++)
        round(false, true, false);
    phase_done("vq_poll_cq_1_recv");
    for (int i = 0; i < calls; i++)
        round(false, false, true);
    phase_done("vq_post_recv");
    (void)vq::dereg_mr(mr);
    (void)vq::destroy_qp(a);
    (void)vq::destroy_qp(b);
    (void)vq::destroy_cq(cqa);
    (void)vq::destroy_cq(cqb);
    (void)vq::dealloc_td(td);
    (void)vq::dealloc_pd(pd);
    (void)vq::close_device(ctx);
}

/* ---- endpoint: two RDM endpoints of the vq provider, set up as shunt-perf
 * sets them up (FI_THREAD_DOMAIN, manual progress, transmit CQ with
 * selective completion, a transmit counter, receive CQ in FI_CQ_FORMAT_MSG) ---- */

struct side {
    fab::fid_domain *domain = nullptr;
    fab::fid_ep *ep = nullptr;
    fab::fid_cq *txcq = nullptr, *rxcq = nullptr;
    fab::fid_cntr *cntr = nullptr;
    fab::fid_av *av = nullptr;
    std::uint8_t addr[64] = {};
};

void open_side(fab::fid_fabric *fabric, fab::info *fi, side &s)
{
    int rc;
    fab::cq_attr ca;
    ca.format = fab::FI_CQ_FORMAT_MSG;
    ca.size = 4096;
    fab::av_attr aa;
    fab::cntr_attr na;
    if ((rc = fab::domain_open(fabric, fi, &s.domain, nullptr)) || (rc = fab::endpoint(s.domain, fi, &s.ep, nullptr)) ||
        (rc = fab::cq_open(s.domain, &ca, &s.txcq, nullptr)) || (rc = fab::cq_open(s.domain, &ca, &s.rxcq, nullptr)) ||
        (rc = fab::cntr_open(s.domain, &na, &s.cntr, nullptr)) || (rc = fab::av_open(s.domain, &aa, &s.av, nullptr)) ||
        (rc = fab::ep_bind(s.ep, &s.txcq->fid, fab::FI_TRANSMIT | fab::FI_SELECTIVE_COMPLETION)) ||
        (rc = fab::ep_bind(s.ep, &s.rxcq->fid, fab::FI_RECV)) ||
        (rc = fab::ep_bind(s.ep, &s.cntr->fid, fab::FI_SEND | fab::FI_WRITE)) ||
        (rc = fab::ep_bind(s.ep, &s.av->fid, 0)) || (rc = fab::enable(s.ep)))
        die("endpoint set-up", rc);
    std::size_t len = sizeof s.addr;
    if ((rc = fab::getname(&s.ep->fid, s.addr, &len)))
        die("getname", rc);
}

void close_side(side &s)
{
    for (fab::fid *f : {s.ep ? &s.ep->fid : nullptr, s.av ? &s.av->fid : nullptr, s.cntr ? &s.cntr->fid : nullptr,
                        s.txcq ? &s.txcq->fid : nullptr, s.rxcq ? &s.rxcq->fid : nullptr,
                        s.domain ? &s.domain->fid : nullptr})
        if (f)
            (void)fab::close(f);
}

template <bool Tagged>
void fabric_phases(fab::fid_fabric *fabric, fab::info *fi)
{
    side a, b;
    open_side(fabric, fi, a);
    open_side(fabric, fi, b);
    fab::fi_addr_t to_b = 0, to_a = 0;
    if (fab::av_insert(a.av, b.addr, 1, &to_b, 0, nullptr) != 1 || fab::av_insert(b.av, a.addr, 1, &to_a, 0, nullptr) != 1)
        die("av_insert", 0);
    std::vector<std::uint8_t> rbuf(64);
    fab::context rctx{};
    constexpr std::uint64_t tag = 0x5348;
    auto post = [&]() {
        ssize_t r = Tagged ? fab::trecv(b.ep, rbuf.data(), rbuf.size(), nullptr, fab::FI_ADDR_UNSPEC, tag, 0, &rctx)
                           : fab::recv(b.ep, rbuf.data(), rbuf.size(), nullptr, fab::FI_ADDR_UNSPEC, &rctx);
        return r;
    };
    auto send = [&](const void *p) {
        return Tagged ? fab::tinject(a.ep, p, 8, to_b, tag) : fab::inject(a.ep, p, 8, to_b);
    };
    if (ssize_t r = post())
        die("recv", r);
    // Connect (hidden in RDM): the first inject returns -FI_EAGAIN until the
    // connection is up, which reading the CQs drives.
    std::uint64_t payload = 0x1122334455667788ull;
    fab::cq_msg_entry e[16];
    for (int i = 0;; i++) {
        ssize_t r = send(&payload);
        (void)fab::cq_read(b.rxcq, e, 16);
        (void)fab::cq_read(a.rxcq, e, 16);
        if (r == 0)
            break;
        if (r != -FI_EAGAIN || i > 1000000)
            die("connect", r);
    }
    // Take the message that connected, driving the sender's side too: without
    // its progress the messages after the connection did not arrive.
    for (int i = 0; i < 1000000; i++) {
        fab::cq_msg_entry ea[16];
        (void)fab::cq_read(a.rxcq, ea, 16);
        if (fab::cq_read(b.rxcq, e, 16) == 1)
            break;
    }
    if (ssize_t r = post())
        die("recv", r);
    auto round = [&](bool measure_send, bool measure_read, bool measure_recv) {
        ssize_t r;
        if (measure_send)
            COLLECT(r = send(&payload));
        else
            r = send(&payload);
        if (r)
            die("inject", r);
        ssize_t n;
        if (measure_read)
            COLLECT(n = fab::cq_read(b.rxcq, e, 16));
        else
            n = fab::cq_read(b.rxcq, e, 16);
        if (n != 1 || e[0].len != 8 || e[0].op_context != &rctx)
            die("cq_read", n);
        if (measure_recv)
            COLLECT(r = post());
        else
            r = post();
        if (r)
            die("recv", r);
    };
    for (int i = 0; i < warm; i++)
        round(false, false, false);
    for (int i = 0; i < calls; i++)
        round(true, false, false);
    phase_done(Tagged ? "fi_tinject_8B" : "fi_inject_8B");
    for (int i = 0; i < calls; i++)
        round(false, true, false);
    phase_done(Tagged ? "fi_cq_read_1_trecv" : "fi_cq_read_1_recv");
    for (int i = 0; i < calls; i++)
        round(false, false, true);
    phase_done(Tagged ? "fi_trecv" : "fi_recv");
    close_side(a);
    close_side(b);
}

void fabric_all()
{
    fab::info *h = fab::allocinfo();
    h->caps = fab::FI_MSG | fab::FI_TAGGED;
    h->ep_attr->type = fab::FI_EP_RDM;
    h->domain_attr->threading = fab::FI_THREAD_DOMAIN;
    h->domain_attr->data_progress = fab::FI_PROGRESS_MANUAL;
    h->domain_attr->mr_mode = fab::FI_MR_VIRT_ADDR | fab::FI_MR_PROV_KEY;
    h->fabric_attr->prov_name = ::strdup("vq");
    fab::info *fi = nullptr;
    int rc = fab::getinfo(fab::FI_API_VERSION, nullptr, nullptr, 0, h, &fi);
    fab::freeinfo(h);
    if (rc)
        die("getinfo", rc);
    fab::fid_fabric *fabric = nullptr;
    if ((rc = fab::fabric_open(fi->fabric_attr, &fabric, nullptr)))
        die("fabric_open", rc);
    fabric_phases<false>(fabric, fi);
    fabric_phases<true>(fabric, fi);
    (void)fab::close(&fabric->fid);
    fab::freeinfo(fi);
}

} // namespace

int main()
{
    empty_phase();
    vq_phases();
    fabric_all();
    return 0;
}
