// libFuzzer: the shm receive path (slot parsing, scatter, rendezvous
// descriptors, lent receives) against arbitrary ring contents. The input is
// copied into the receive ring of a live RC QP as 64-byte slots, each slot's
// sequence word set so that the receiver takes it, and the CQ is polled.
// ASan/UBSan and libFuzzer's -timeout catch a bad access or a hang; the
// checks below catch a completion that claims more than was posted or a
// write outside the receive buffers.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "env/segment.h"
#include "shm.h"
#include "vq/vq.h"

namespace {

namespace vq = shunt::vq;
namespace shm = shunt::drv::shm;

constexpr std::size_t rx_bytes = 4096, guard = 256, nrecv = 4;
constexpr std::uint8_t guard_byte = 0xa5;

void check(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "fuzz_shm_ring: %s\n", what);
        std::abort();
    }
}

/** Two contexts (the receiver's peer is not itself), one QP in each, connected. */
struct rig {
    vq::context *ctx[2] = {};
    vq::pd *pd[2] = {};
    vq::cq *cq[2] = {};
    vq::qp *qp[2] = {};
    vq::qp *lend = nullptr; ///< a lent-receive QP of context 0 (qp[1] connects to it instead)
    std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(nrecv * (rx_bytes + guard) + guard);
    vq::mr *mr = nullptr;
    shunt::env::segment view; ///< our own mapping of context 0's segment, to write its ring
    char *base = nullptr;
    bool lend_mode = false;

    vq::qp *make_qp(int i, bool lend_recv)
    {
        vq::qp_init_attr ia;
        ia.type = vq::qp_type::rc;
        ia.send_cq = ia.recv_cq = cq[i];
        ia.send_ops_flags = vq::ops_allowed(ia.type);
        ia.cap.max_recv_sge = 4;
        ia.lend_recv = lend_recv;
        vq::qp *q = nullptr;
        check(vq::create_qp(pd[i], &ia, &q) == 0, "create_qp");
        return q;
    }
    rig()
    {
        for (int i = 0; i < 2; i++) {
            check(vq::open_device(vq::find_device("shm0"), &ctx[i]) == 0, "open_device");
            check(vq::alloc_pd(ctx[i], &pd[i]) == 0, "alloc_pd");
            vq::cq_init_attr ca;
            ca.cqe = 64;
            check(vq::create_cq(ctx[i], &ca, &cq[i]) == 0, "create_cq");
            qp[i] = make_qp(i, false);
        }
        check(vq::reg_mr(pd[0], buf.data(), buf.size(), vq::ACCESS_LOCAL_WRITE, &mr) == 0, "reg_mr");
        const vq::dev_addr &a = ctx[0]->addr;
        check(view.attach(std::string(reinterpret_cast<const char *>(a.raw), a.len)) == 0, "attach");
        base = static_cast<char *>(view.data());
    }
    static int to(vq::qp *q, vq::qp_state s, const vq::qp_addr *peer = nullptr)
    {
        vq::qp_attr at;
        at.state = s;
        unsigned m = vq::QP_ATTR_STATE;
        if (s == vq::qp_state::init) {
            at.qp_access_flags = vq::ACCESS_REMOTE_WRITE;
            m |= vq::QP_ATTR_ACCESS_FLAGS;
        }
        if (peer) {
            at.dest = peer->dev;
            at.dest_qp_num = peer->qpn;
            m |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
        }
        return vq::modify_qp(q, &at, m);
    }
    /** Both QPs back to RESET and connected again: the ring starts at 0. */
    void reconnect(vq::qp *rx)
    {
        check(to(qp[1], vq::qp_state::reset) == 0 && to(rx, vq::qp_state::reset) == 0, "reset");
        vq::qp_addr ra = vq::get_qp_addr(rx), sa = vq::get_qp_addr(qp[1]);
        check(to(rx, vq::qp_state::init) == 0 && to(rx, vq::qp_state::rtr, &sa) == 0 &&
                  to(rx, vq::qp_state::rts) == 0,
              "connect receiver");
        check(to(qp[1], vq::qp_state::init) == 0 && to(qp[1], vq::qp_state::rtr, &ra) == 0 &&
                  to(qp[1], vq::qp_state::rts) == 0,
              "connect sender");
    }
    shm::slot *ring(vq::qp *rx, std::uint32_t *slots)
    {
        auto *h = reinterpret_cast<const shm::ctx_hdr *>(base);
        auto *d = reinterpret_cast<const shm::qp_desc *>(base + h->qp_off) + shm::qpn_index(rx->qp_num);
        *slots = d->ring_slots;
        return reinterpret_cast<shm::slot *>(base + d->ring_off + sizeof(shm::ring_ctrl));
    }
};

rig &the_rig()
{
    static rig *r = new rig; // lives for the whole run: contexts are not torn down per input
    return *r;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    rig &r = the_rig();
    // First byte: bit 0 selects a lent-receive QP; bits 1..2 the SGEs per receive.
    if (size < 1)
        return 0;
    const bool lend = data[0] & 1;
    const std::uint32_t nsge = 1 + ((data[0] >> 1) & 3);
    data++;
    size--;
    vq::qp *rx = r.qp[0];
    if (lend) {
        if (!r.lend)
            r.lend = r.make_qp(0, true);
        rx = r.lend;
    }
    r.reconnect(rx);
    // Drain what the resets flushed.
    vq::wc w[64];
    for (int i = 0; i < 4; i++)
        while (vq::poll_cq(r.cq[0], 64, w) > 0) {
        }
    while (vq::poll_cq(r.cq[1], 64, w) > 0) {
    }
    std::memset(r.buf.data(), guard_byte, r.buf.size());
    if (!lend)
        for (std::size_t i = 0; i < nrecv; i++) {
            vq::sge sg[4];
            std::uint8_t *at = r.buf.data() + guard + i * (rx_bytes + guard);
            std::uint32_t per = static_cast<std::uint32_t>(rx_bytes / nsge);
            for (std::uint32_t k = 0; k < nsge; k++)
                sg[k] = {reinterpret_cast<std::uint64_t>(at + k * per), per, r.mr->lkey};
            check(vq::post_recv(rx, i, sg, nsge) == 0, "post_recv");
        }
    std::uint32_t nslots = 0;
    shm::slot *ring = r.ring(rx, &nslots);
    std::size_t n = size / sizeof(shm::slot);
    if (n > nslots / 2)
        n = nslots / 2;
    std::memcpy(static_cast<void *>(ring), data, n * sizeof(shm::slot));
    for (std::size_t i = 0; i < n; i++)
        ring[i].seq = static_cast<std::uint32_t>(i + 1); // every slot published in order
    std::size_t got = 0;
    for (int round = 0; round < 8; round++) {
        int k = vq::poll_cq(r.cq[0], 64, w);
        check(k >= 0, "poll_cq failed");
        for (int i = 0; i < k; i++) {
            check(lend || w[i].wr_id < nrecv, "a completion for a receive never posted");
            // (recv_rdma_with_imm reports the write's length, not bytes received.)
            check(lend || w[i].opcode == vq::wc_opcode::recv_rdma_with_imm || w[i].byte_len <= rx_bytes,
                  "a completion longer than its receive");
            if (lend && w[i].status == vq::wc_status::success && w[i].opcode == vq::wc_opcode::recv &&
                w[i].byte_len) {
                // A lent completion points into the ring (or its bounce
                // buffer): read it all, as a consumer would.
                check(w[i].data != nullptr, "a lent completion without data");
                volatile std::uint8_t sum = 0;
                for (std::uint32_t b = 0; b < w[i].byte_len; b++)
                    sum = static_cast<std::uint8_t>(sum + w[i].data[b]);
            }
        }
        got += static_cast<std::size_t>(k);
    }
    check(lend || got <= nrecv, "more receive completions than receives");
    for (std::size_t i = 0; i < r.buf.size(); i++) {
        std::size_t rel = i < guard ? rx_bytes : (i - guard) % (rx_bytes + guard);
        check(rel < rx_bytes || r.buf[i] == guard_byte, "a write outside the receive buffers");
    }
    std::memset(static_cast<void *>(ring), 0, n * sizeof(shm::slot));
    return 0;
}
