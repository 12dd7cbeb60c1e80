// libFuzzer: the checks a context makes of a peer's segment before it uses
// it — the context header when it attaches (create_ah, modify_qp), the QP
// descriptor when it connects an RC QP to it, and a UD destination's
// descriptor when it claims a ring there. The input is the peer's header and
// one descriptor, written into a real segment that the harness owns.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "env/segment.h"
#include "shm.h"
#include "vq/vq.h"

namespace {

namespace vq = shunt::vq;
namespace shm = shunt::drv::shm;

void check(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "fuzz_shm_peer: %s\n", what);
        std::abort();
    }
}

constexpr std::size_t fake_size = 4 << 20;

struct rig {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::qp *rc = nullptr, *ud = nullptr;
    shunt::env::segment fake; ///< the "peer": a segment with whatever header the input says
    vq::dev_addr fake_addr{};
    rig()
    {
        check(vq::open_device(vq::find_device("shm0"), &ctx) == 0, "open_device");
        check(vq::alloc_pd(ctx, &pd) == 0, "alloc_pd");
        vq::cq_init_attr ca;
        ca.cqe = 64;
        check(vq::create_cq(ctx, &ca, &cq) == 0, "create_cq");
        for (vq::qp **q : {&rc, &ud}) {
            vq::qp_init_attr ia;
            ia.type = q == &rc ? vq::qp_type::rc : vq::qp_type::ud;
            ia.send_cq = ia.recv_cq = cq;
            ia.send_ops_flags = vq::ops_allowed(ia.type);
            check(vq::create_qp(pd, &ia, q) == 0, "create_qp");
        }
        vq::qp_attr at;
        at.state = vq::qp_state::init;
        at.qkey = 7;
        check(vq::modify_qp(ud, &at, vq::QP_ATTR_STATE | vq::QP_ATTR_QKEY) == 0, "ud init");
        at.state = vq::qp_state::rtr;
        check(vq::modify_qp(ud, &at, vq::QP_ATTR_STATE) == 0, "ud rtr");
        at.state = vq::qp_state::rts;
        check(vq::modify_qp(ud, &at, vq::QP_ATTR_STATE) == 0, "ud rts");
        std::string name = "shunt-fuzz-peer-" + std::to_string(getpid());
        check(fake.create(name, fake_size) == 0, "segment create");
        fake_addr.len = static_cast<std::uint8_t>(name.size());
        std::memcpy(fake_addr.raw, name.data(), name.size());
    }
};

rig &the_rig()
{
    static rig *r = new rig;
    return *r;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    rig &r = the_rig();
    constexpr std::size_t hdr_n = sizeof(shm::ctx_hdr), desc_n = sizeof(shm::qp_desc);
    if (size < hdr_n + desc_n + 4)
        return 0;
    auto *base = static_cast<char *>(r.fake.data());
    std::memset(base, 0, 1 << 20);
    std::memcpy(base, data, hdr_n);
    auto *h = reinterpret_cast<shm::ctx_hdr *>(base);
    h->pid = static_cast<std::int32_t>(getpid()); // a live owner: the checks, not the dead-peer path
    h->closed.store(0);
    std::uint32_t qpn;
    std::memcpy(&qpn, data + hdr_n + desc_n, 4);
    // The descriptor goes where the header says descriptor qpn's lies, when
    // that is inside the segment at all (else the header alone is the input).
    std::uint64_t at = h->qp_off + std::uint64_t{shm::qpn_index(qpn)} * desc_n;
    if (h->qp_off < r.fake.size() && at + desc_n <= r.fake.size() && at >= h->qp_off)
        std::memcpy(base + at, data + hdr_n, desc_n);
    // Attach (create_ah), then send a datagram to descriptor qpn (UD claim).
    vq::ah_attr aa;
    aa.dest = r.fake_addr;
    vq::ah *ah = nullptr;
    if (vq::create_ah(r.pd, &aa, &ah) == 0) {
        std::uint8_t msg[8] = {};
        vq::wr_start(r.ud);
        r.ud->wr_id = 1;
        r.ud->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(r.ud);
        vq::wr_set_inline_data(r.ud, msg, sizeof msg);
        vq::wr_set_ud_addr(r.ud, ah, qpn, 7);
        if (vq::wr_complete(r.ud) == 0) {
            vq::wc w[4];
            for (int i = 0; i < 4; i++)
                (void)vq::poll_cq(r.cq, 4, w);
        }
        // The UD QP's destinations hold the peer: reset it to let go.
        vq::qp_attr at2;
        at2.state = vq::qp_state::reset;
        check(vq::modify_qp(r.ud, &at2, vq::QP_ATTR_STATE) == 0, "ud reset");
        at2.state = vq::qp_state::init;
        at2.qkey = 7;
        check(vq::modify_qp(r.ud, &at2, vq::QP_ATTR_STATE | vq::QP_ATTR_QKEY) == 0, "ud init");
        at2.state = vq::qp_state::rtr;
        check(vq::modify_qp(r.ud, &at2, vq::QP_ATTR_STATE) == 0, "ud rtr");
        at2.state = vq::qp_state::rts;
        check(vq::modify_qp(r.ud, &at2, vq::QP_ATTR_STATE) == 0, "ud rts");
        check(vq::destroy_ah(ah) == 0, "destroy_ah");
    }
    // Connect the RC QP to descriptor qpn.
    vq::qp_attr a;
    a.state = vq::qp_state::init;
    check(vq::modify_qp(r.rc, &a, vq::QP_ATTR_STATE) == 0, "rc init");
    a.state = vq::qp_state::rtr;
    a.dest = r.fake_addr;
    a.dest_qp_num = qpn;
    if (vq::modify_qp(r.rc, &a, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN) == 0) {
        // Connected: one send into the ring the descriptor named.
        a.state = vq::qp_state::rts;
        check(vq::modify_qp(r.rc, &a, vq::QP_ATTR_STATE) == 0, "rc rts");
        std::uint8_t msg[100] = {};
        (void)vq::post_send(r.rc, 2, msg, sizeof msg, 0, vq::WR_INLINE | vq::WR_SIGNALED);
        vq::wc w[4];
        for (int i = 0; i < 4; i++)
            (void)vq::poll_cq(r.cq, 4, w);
    }
    a.state = vq::qp_state::reset;
    check(vq::modify_qp(r.rc, &a, vq::QP_ATTR_STATE) == 0, "rc reset");
    return 0;
}
