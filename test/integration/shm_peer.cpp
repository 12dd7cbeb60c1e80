// Peer process for the shm integration tests: opens an shm context, creates
// one QP of the type named in argv[1] and obeys requests from the test over
// fd 3 (see shm_peer_proto.h). Polls with yields so it never starves the test.
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <map>
#include <memory>

#include "shm_peer_proto.h"
#include "env/errors.h"
#include "env/segment.h"
#include "vq/vq.h"

using namespace shunt;
namespace pp = shunt::test::peer_proto;

namespace {

constexpr std::size_t priv_size = 4 << 20;
constexpr std::size_t seg_size = 1 << 20;

struct peer_state {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::qp *qp = nullptr;
    std::vector<std::uint8_t> priv;
    std::uint8_t *seg = nullptr;
    vq::mr *priv_mr = nullptr, *seg_mr = nullptr;
    std::vector<vq::wc> pending; ///< completions polled but not yet reported
    std::map<std::string, std::unique_ptr<env::segment>> scribbled; ///< segments attached for scribble
};

int poll_some(peer_state &s, std::size_t want, int ms)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    vq::wc w[16];
    while (s.pending.size() < want) {
        int k = vq::poll_cq(s.cq, 16, w);
        if (k < 0)
            return k;
        for (int i = 0; i < k; i++)
            s.pending.push_back(w[i]);
        if (k == 0) {
            if (std::chrono::steady_clock::now() > end)
                break;
            sched_yield();
        }
    }
    return 0;
}

std::uint8_t *buf(peer_state &s, std::uint64_t which) { return which ? s.seg : s.priv.data(); }

} // namespace

int main(int argc, char **argv)
{
    const int fd = 3;
    std::string type = argc > 1 ? argv[1] : "rc";
    peer_state s;
    s.priv.resize(priv_size);
    vq::device *dev = vq::find_device("shm0");
    if (!dev || vq::open_device(dev, &s.ctx) || vq::alloc_pd(s.ctx, &s.pd))
        return 2;
    vq::cq_init_attr ca;
    ca.cqe = 4096;
    if (vq::create_cq(s.ctx, &ca, &s.cq))
        return 3;
    vq::qp_init_attr ia;
    ia.type = type == "ud" ? vq::qp_type::ud : type == "uc" ? vq::qp_type::uc : vq::qp_type::rc;
    ia.send_cq = ia.recv_cq = s.cq;
    ia.send_ops_flags = vq::ops_allowed(ia.type);
    ia.cap.max_send_wr = 1024;
    ia.cap.max_recv_wr = 1024;
    ia.cap.max_send_sge = 8;
    ia.cap.max_recv_sge = 8;
    ia.cap.max_inline_data = 256;
    if (vq::create_qp(s.pd, &ia, &s.qp))
        return 4;
    unsigned all = vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ |
                   vq::ACCESS_REMOTE_ATOMIC | vq::ACCESS_FLUSH_GLOBAL;
    void *segp = nullptr;
    if (vq::alloc_buf(s.ctx, seg_size, &segp))
        return 5;
    s.seg = static_cast<std::uint8_t *>(segp);
    if (vq::reg_mr(s.pd, s.priv.data(), priv_size, all, &s.priv_mr) ||
        vq::reg_mr(s.pd, s.seg, seg_size, all, &s.seg_mr))
        return 6;

    pp::request rq;
    while (pp::read_all(fd, &rq, sizeof rq)) {
        pp::response rs{};
        std::vector<std::uint8_t> extra;
        switch (rq.op) {
        case pp::hello:
            rs.addr = vq::get_qp_addr(s.qp);
            rs.a = reinterpret_cast<std::uint64_t>(s.priv.data());
            rs.b = s.priv_mr->rkey;
            rs.c = reinterpret_cast<std::uint64_t>(s.seg);
            rs.d = s.seg_mr->rkey;
            break;
        case pp::connect: {
            vq::qp_attr a;
            a.state = vq::qp_state::init;
            a.qkey = 0x1234;
            a.qp_access_flags = vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC;
            rs.rc = vq::modify_qp(s.qp, &a, vq::QP_ATTR_STATE | vq::QP_ATTR_QKEY | vq::QP_ATTR_ACCESS_FLAGS);
            a.state = vq::qp_state::rtr;
            a.dest = rq.addr.dev;
            a.dest_qp_num = rq.addr.qpn;
            unsigned m = vq::QP_ATTR_STATE;
            if (ia.type != vq::qp_type::ud)
                m |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
            if (!rs.rc)
                rs.rc = vq::modify_qp(s.qp, &a, m);
            a.state = vq::qp_state::rts;
            if (!rs.rc)
                rs.rc = vq::modify_qp(s.qp, &a, vq::QP_ATTR_STATE);
            break;
        }
        case pp::post_recv: {
            std::uint32_t pieces = rq.c ? static_cast<std::uint32_t>(rq.c) : 1;
            for (std::uint32_t i = 0; i < rq.n && !rs.rc; i++) {
                std::uint64_t base = reinterpret_cast<std::uint64_t>(s.priv.data()) + rq.b + i * rq.a;
                vq::sge sg[8];
                std::uint64_t per = rq.a / pieces;
                for (std::uint32_t k = 0; k < pieces; k++)
                    sg[k] = {base + k * per, static_cast<std::uint32_t>(k + 1 == pieces ? rq.a - per * k : per),
                             s.priv_mr->lkey};
                rs.rc = vq::post_recv(s.qp, 1000 + i, sg, pieces);
            }
            break;
        }
        case pp::poll: {
            rs.rc = poll_some(s, rq.n, static_cast<int>(rq.a));
            std::size_t k = s.pending.size() < rq.n ? s.pending.size() : rq.n;
            rs.n = static_cast<std::uint32_t>(k);
            extra.resize(k * sizeof(vq::wc));
            std::memcpy(extra.data(), s.pending.data(), extra.size());
            s.pending.erase(s.pending.begin(), s.pending.begin() + static_cast<std::ptrdiff_t>(k));
            break;
        }
        case pp::read_mem:
            rs.n = static_cast<std::uint32_t>(rq.b);
            extra.assign(buf(s, rq.c) + rq.a, buf(s, rq.c) + rq.a + rq.b);
            break;
        case pp::write_mem:
            if (!pp::read_all(fd, buf(s, rq.c) + rq.a, rq.b))
                return 7;
            break;
        case pp::send:
            rs.rc = vq::post_send(s.qp, 77, s.priv.data() + rq.a, static_cast<std::uint32_t>(rq.b),
                                  s.priv_mr->lkey, static_cast<unsigned>(rq.d) | (rq.n ? vq::WR_INLINE : 0));
            break;
        case pp::atomic_loop: {
            std::uint64_t done = 0;
            auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
            auto reap = [&] {
                vq::wc w[64];
                int k = vq::poll_cq(s.cq, 64, w);
                for (int j = 0; j < k; j++) {
                    if (w[j].status != vq::wc_status::success)
                        rs.rc = -FI_EIO;
                    done++;
                }
                return k;
            };
            for (std::uint32_t i = 0; i < rq.n && !rs.rc;) {
                vq::wr_start(s.qp);
                s.qp->wr_id = i;
                s.qp->wr_flags = vq::WR_SIGNALED;
                vq::wr_atomic_fetch_add(s.qp, static_cast<std::uint32_t>(rq.c), rq.d, rq.a);
                vq::wr_set_sge(s.qp, s.priv_mr->lkey, reinterpret_cast<std::uint64_t>(s.priv.data()), 8);
                int rc = vq::wr_complete(s.qp);
                if (rc == -FI_EAGAIN)
                    reap();
                else if (rc)
                    rs.rc = rc;
                else
                    i++;
                if ((i & 255) == 0)
                    reap();
                if (std::chrono::steady_clock::now() > end)
                    rs.rc = -FI_ETIMEDOUT;
            }
            while (!rs.rc && done < rq.n) {
                if (reap() == 0)
                    sched_yield();
                if (std::chrono::steady_clock::now() > end)
                    rs.rc = -FI_ETIMEDOUT;
            }
            break;
        }
        case pp::echo: {
            for (std::uint32_t i = 0; i < rq.n && !rs.rc; i++) {
                rs.rc = vq::post_recv(s.qp, i, reinterpret_cast<std::uint64_t>(s.priv.data()),
                                      static_cast<std::uint32_t>(rq.b), s.priv_mr->lkey);
                if (rs.rc)
                    break;
                poll_some(s, 1, 10000);
                if (s.pending.empty() || s.pending[0].status != vq::wc_status::success) {
                    rs.rc = -FI_EIO;
                    break;
                }
                std::uint32_t len = s.pending[0].byte_len;
                s.pending.clear();
                rs.rc = vq::post_send(s.qp, i, s.priv.data(), len, s.priv_mr->lkey, 0);
            }
            break;
        }
        case pp::rdma: {
            auto rkey = static_cast<std::uint32_t>(rq.c);
            std::uint64_t lbuf = reinterpret_cast<std::uint64_t>(s.priv.data());
            vq::wr_start(s.qp);
            s.qp->wr_id = 555;
            s.qp->wr_flags = vq::WR_SIGNALED;
            switch (rq.n) {
            case 0:
                vq::wr_rdma_write(s.qp, rkey, rq.d);
                vq::wr_set_sge(s.qp, s.priv_mr->lkey, lbuf, static_cast<std::uint32_t>(rq.a));
                break;
            case 1:
                vq::wr_rdma_read(s.qp, rkey, rq.d);
                vq::wr_set_sge(s.qp, s.priv_mr->lkey, lbuf, static_cast<std::uint32_t>(rq.a));
                break;
            case 2:
                vq::wr_atomic_cmp_swp(s.qp, rkey, rq.d, rq.a, rq.b);
                vq::wr_set_sge(s.qp, s.priv_mr->lkey, lbuf, 8);
                break;
            default:
                vq::wr_atomic_fetch_add(s.qp, rkey, rq.d, rq.b);
                vq::wr_set_sge(s.qp, s.priv_mr->lkey, lbuf, 8);
                break;
            }
            rs.rc = vq::wr_complete(s.qp);
            if (!rs.rc) {
                poll_some(s, 1, 10000);
                if (s.pending.empty()) {
                    rs.rc = -FI_ETIMEDOUT;
                } else {
                    rs.a = static_cast<std::uint64_t>(s.pending[0].status);
                    s.pending.erase(s.pending.begin());
                    std::memcpy(&rs.b, s.priv.data(), 8);
                }
            }
            break;
        }
        case pp::ud_send: {
            vq::ah *ah = nullptr;
            vq::ah_attr aa;
            aa.dest = rq.addr.dev;
            rs.rc = vq::create_ah(s.pd, &aa, &ah);
            auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
            for (std::uint32_t i = 0; i < rq.n && !rs.rc;) {
                std::uint8_t *m = s.priv.data() + (i % 1024) * 4096; // reused only after its WR left the 1024-entry queue
                std::memset(m, static_cast<int>(rq.c), rq.a);
                std::memcpy(m + 1, &i, 4);
                vq::wr_start(s.qp);
                s.qp->wr_id = i;
                s.qp->wr_flags = 0;
                vq::wr_send(s.qp);
                vq::wr_set_sge(s.qp, s.priv_mr->lkey, reinterpret_cast<std::uint64_t>(m), static_cast<std::uint32_t>(rq.a));
                vq::wr_set_ud_addr(s.qp, ah, rq.addr.qpn, static_cast<std::uint32_t>(rq.b));
                int rc = vq::wr_complete(s.qp);
                if (rc == -FI_EAGAIN)
                    poll_some(s, 1, 1);
                else if (rc)
                    rs.rc = rc;
                else
                    i++;
                if (std::chrono::steady_clock::now() > end)
                    rs.rc = -FI_ETIMEDOUT;
            }
            // Wait until everything left the send queue (errors would complete).
            while (!rs.rc && std::chrono::steady_clock::now() < end) {
                poll_some(s, 1, 1);
                for (auto &w : s.pending)
                    if (w.status != vq::wc_status::success)
                        rs.rc = -FI_EIO;
                s.pending.clear();
                vq::wr_start(s.qp);
                s.qp->wr_id = ~0ull;
                s.qp->wr_flags = vq::WR_SIGNALED;
                vq::wr_send(s.qp);
                vq::wr_set_ud_addr(s.qp, ah, rq.addr.qpn, static_cast<std::uint32_t>(rq.b) + 1); // dropped: wrong Q_Key
                if (vq::wr_complete(s.qp) == 0) {
                    poll_some(s, 1, 20000);
                    bool done = !s.pending.empty();
                    s.pending.clear();
                    if (done)
                        break;
                }
            }
            if (ah && vq::destroy_ah(ah))
                rs.rc = -FI_EIO;
            break;
        }
        case pp::state:
            rs.a = static_cast<std::uint64_t>(vq::get_qp_state(s.qp));
            break;
        case pp::scribble: {
            // Attach the segment on our own, as any process of the user can,
            // and write where we are told: nothing checks it.
            std::string name(reinterpret_cast<const char *>(rq.addr.dev.raw), rq.addr.dev.len);
            std::vector<std::uint8_t> bytes(rq.b);
            if (!pp::read_all(fd, bytes.data(), bytes.size()))
                return 7;
            auto &seg = s.scribbled[name];
            if (!seg) {
                seg = std::make_unique<env::segment>();
                rs.rc = seg->attach(name);
            }
            if (rs.rc == 0 && (rq.a > seg->size() || rq.b > seg->size() - rq.a))
                rs.rc = -FI_EINVAL;
            if (rs.rc == 0)
                std::memcpy(static_cast<std::uint8_t *>(seg->data()) + rq.a, bytes.data(), bytes.size());
            if (rs.rc)
                s.scribbled.erase(name);
            break;
        }
        case pp::quit:
            pp::write_all(fd, &rs, sizeof rs);
            {
                int bad = 0;
                bad |= vq::dereg_mr(s.priv_mr);
                bad |= vq::dereg_mr(s.seg_mr);
                bad |= vq::free_buf(s.ctx, s.seg);
                bad |= vq::destroy_qp(s.qp);
                bad |= vq::destroy_cq(s.cq);
                bad |= vq::dealloc_pd(s.pd);
                bad |= vq::close_device(s.ctx);
                return bad ? 8 : 0;
            }
        default:
            rs.rc = -FI_EINVAL;
        }
        if (!pp::write_all(fd, &rs, sizeof rs) || (!extra.empty() && !pp::write_all(fd, extra.data(), extra.size())))
            return 9;
    }
    return 0;
}
