// A hostile process for the CM tests of the shm provider: it speaks the vq
// verbs directly (no provider), with one UD QP on the Q_Key the provider's
// connection management uses (more on request: more addresses), and sends
// whatever bytes the test gives it to any UD QP. It also answers like a
// minimal responder: an RC QP the test can name in a REQ or REP, and the
// datagrams endpoints send it; over a connected RC QP it sends what the test
// gives it, and takes what comes back only when told to; memory registered
// for remote access is there to be named in requests. Requests come on fd 3
// (cm_hostile_proto.h).
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cm_hostile_proto.h"
#include "vq/vq.h"

using namespace shunt;
namespace hp = shunt::test::cm_hostile;

namespace {

constexpr std::uint32_t cm_qkey = 0x5348;  // the provider's Q_Key ("SH")
constexpr std::uint32_t nbufs = 256;       // receive buffers
constexpr std::uint32_t rbuf = 4096;
constexpr std::uint32_t sbufs = 1024;      // send buffers (at most max_out in flight)
constexpr std::uint32_t max_out = 512;
constexpr std::uint32_t rc_rbufs = 16;     // RC receive buffers (an RC QP's max_recv_wr)
constexpr std::uint32_t rc_max_out = 16;   // RC sends in flight
constexpr std::uint32_t ud_more_bufs = 4;  // receive buffers of each UD QP made by `ud`

struct state {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::qp *ud = nullptr;
    vq::mr *mr = nullptr;
    std::vector<std::uint8_t> mem = std::vector<std::uint8_t>(std::size_t(nbufs + sbufs) * rbuf);
    std::vector<vq::qp *> rc; // RC QPs handed out (kept until exit)
    std::uint32_t outstanding = 0;
    int send_errors = 0;
    std::uint32_t rc_outstanding = 0; // RC sends not completed yet
    int rc_errors = 0;
    std::vector<std::vector<std::uint8_t>> got; // datagrams received, oldest first
    // RC receives (rc_take only): buffers, the free ones, what was taken.
    std::vector<std::uint8_t> rc_rx = std::vector<std::uint8_t>(std::size_t(rc_rbufs) * rbuf);
    vq::mr *rc_rx_mr = nullptr;
    std::vector<std::uint64_t> rc_free;
    std::vector<hp::taken> rc_got;
    int rc_recv_errors = 0;
    // Regions handed out (kept until exit).
    std::vector<std::vector<std::uint8_t>> regions;
    std::vector<vq::mr *> region_mrs;
    // UD QPs made by `ud` (kept until exit), each with its receive buffers.
    struct more_ud {
        vq::qp *qp = nullptr;
        std::vector<std::uint8_t> mem = std::vector<std::uint8_t>(std::size_t(ud_more_bufs) * rbuf);
        vq::mr *mr = nullptr;
    };
    std::vector<more_ud> uds;
};

std::uint64_t buf_addr(state &s, std::uint32_t i)
{
    return reinterpret_cast<std::uint64_t>(s.mem.data()) + std::uint64_t(i) * rbuf;
}

/** A datagram received into @p b (its GRH area skipped) joins s.got. */
void keep_datagram(state &s, const std::uint8_t *b, const vq::wc &w)
{
    std::uint32_t len = w.byte_len;
    if ((w.wc_flags & vq::WC_GRH) && len >= 40) {
        b += 40;
        len -= 40;
    }
    s.got.emplace_back(b, b + len);
}

void poll_some(state &s)
{
    vq::wc w[32];
    int n = vq::poll_cq(s.cq, 32, w);
    for (int k = 0; k < n; k++) {
        auto more = std::find_if(s.uds.begin(), s.uds.end(),
                                 [&](const state::more_ud &u) { return u.qp->qp_num == w[k].qp_num; });
        if (more != s.uds.end()) { // a receive (they send nothing)
            if (w[k].status == vq::wc_status::success)
                keep_datagram(s, more->mem.data() + w[k].wr_id * rbuf, w[k]);
            (void)vq::post_recv(more->qp, w[k].wr_id,
                                reinterpret_cast<std::uint64_t>(more->mem.data()) + w[k].wr_id * rbuf, rbuf,
                                more->mr->lkey);
            continue;
        }
        if (w[k].qp_num != s.ud->qp_num) {
            if (w[k].opcode == vq::wc_opcode::send) {
                s.rc_outstanding--;
                if (w[k].status != vq::wc_status::success)
                    s.rc_errors++;
                continue;
            }
            // A receive rc_take posted.
            s.rc_free.push_back(w[k].wr_id);
            if (w[k].status != vq::wc_status::success) {
                s.rc_recv_errors++;
                continue;
            }
            hp::taken t;
            t.imm = w[k].imm_data;
            t.len = w[k].byte_len;
            std::memcpy(t.head, s.rc_rx.data() + w[k].wr_id * rbuf, std::min<std::size_t>(t.len, sizeof t.head));
            s.rc_got.push_back(t);
            continue;
        }
        if (w[k].opcode == vq::wc_opcode::send) {
            s.outstanding--;
            if (w[k].status != vq::wc_status::success)
                s.send_errors++;
            continue;
        }
        if (w[k].status == vq::wc_status::success)
            keep_datagram(s, s.mem.data() + w[k].wr_id * rbuf, w[k]);
        (void)vq::post_recv(s.ud, w[k].wr_id, buf_addr(s, std::uint32_t(w[k].wr_id)), rbuf, s.mr->lkey);
    }
}

/** The length of the item of @p list ([u32 length][bytes]...) at @p off
 *  into @p len. @return false when the list is malformed there (a length
 *  cut short, over rbuf, or past the list's end). */
bool list_item(const std::vector<std::uint8_t> &list, std::size_t off, std::uint32_t &len)
{
    if (list.size() - off < 4)
        return false;
    std::memcpy(&len, list.data() + off, 4);
    return len <= rbuf && len <= list.size() - off - 4;
}

/** The datagrams of @p list ([u32 length][bytes]...), @p r.n times over, to
 *  r.to; with vary_byte, byte r.b of the i-th datagram sent is i * 37 + 11. */
int send_list(state &s, const hp::request &r, const std::vector<std::uint8_t> &list)
{
    vq::ah *ah = nullptr;
    vq::ah_attr aa;
    aa.dest = r.to.dev;
    if (int rc = vq::create_ah(s.pd, &aa, &ah))
        return rc;
    int rc = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::uint32_t i = 0; // datagrams sent
    for (std::uint32_t t = 0; t < r.n && !rc; t++) {
        for (std::size_t off = 0; off < list.size() && !rc;) {
            std::uint32_t len = 0;
            if (!list_item(list, off, len)) {
                rc = -FI_EINVAL;
                break;
            }
            if (std::chrono::steady_clock::now() > end) {
                rc = -FI_ETIMEDOUT;
                break;
            }
            if (s.outstanding >= max_out) {
                poll_some(s);
                continue;
            }
            std::uint8_t *m = s.mem.data() + std::size_t(nbufs + i % sbufs) * rbuf;
            if (len)
                std::memcpy(m, list.data() + off + 4, len);
            if ((r.a & hp::vary_byte) && len > r.b)
                m[r.b] = std::uint8_t(i * 37 + 11);
            vq::wr_start(s.ud);
            s.ud->wr_id = i;
            s.ud->wr_flags = vq::WR_SIGNALED;
            vq::wr_send(s.ud);
            vq::wr_set_sge(s.ud, s.mr->lkey, reinterpret_cast<std::uint64_t>(m), len);
            vq::wr_set_ud_addr(s.ud, ah, r.to.qpn, cm_qkey);
            int w = vq::wr_complete(s.ud);
            if (w == -FI_EAGAIN) {
                poll_some(s);
                continue;
            }
            if (w) {
                rc = w;
                break;
            }
            s.outstanding++;
            i++;
            off += 4 + len;
        }
    }
    while (s.outstanding && std::chrono::steady_clock::now() < end)
        poll_some(s);
    if (!rc && s.outstanding)
        rc = -FI_ETIMEDOUT;
    (void)vq::destroy_ah(ah);
    return rc;
}

/** A UD QP on the CM Q_Key, in RTS, room for @p recvs receives. */
int make_ud(state &s, std::uint32_t recvs, vq::qp *&q)
{
    vq::qp_init_attr ia;
    ia.type = vq::qp_type::ud;
    ia.send_cq = ia.recv_cq = s.cq;
    ia.send_ops_flags = vq::OPS_SEND;
    ia.cap.max_send_wr = 1024;
    ia.cap.max_recv_wr = recvs;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    if (int rc = vq::create_qp(s.pd, &ia, &q))
        return rc;
    vq::qp_attr a;
    a.qkey = cm_qkey;
    for (vq::qp_state st : {vq::qp_state::init, vq::qp_state::rtr, vq::qp_state::rts}) {
        a.state = st;
        if (int rc = vq::modify_qp(q, &a, vq::QP_ATTR_STATE | (st == vq::qp_state::init ? vq::QP_ATTR_QKEY : 0))) {
            (void)vq::destroy_qp(q);
            q = nullptr;
            return rc;
        }
    }
    return 0;
}

/** `ud`: another UD QP with its receives posted; its address into @p out. */
int more_ud(state &s, vq::qp_addr &out)
{
    state::more_ud u;
    if (int rc = vq::reg_mr(s.pd, u.mem.data(), u.mem.size(), vq::ACCESS_LOCAL_WRITE, &u.mr))
        return rc;
    int rc = make_ud(s, ud_more_bufs, u.qp);
    for (std::uint32_t i = 0; rc == 0 && i < ud_more_bufs; i++)
        rc = vq::post_recv(u.qp, i, reinterpret_cast<std::uint64_t>(u.mem.data()) + std::uint64_t(i) * rbuf, rbuf,
                           u.mr->lkey);
    if (rc) {
        if (u.qp)
            (void)vq::destroy_qp(u.qp);
        (void)vq::dereg_mr(u.mr);
        return rc;
    }
    out = vq::get_qp_addr(u.qp);
    s.uds.push_back(std::move(u));
    return 0;
}

int rc_qp(state &s, std::uint32_t &qpn)
{
    vq::qp_init_attr ia;
    ia.type = vq::qp_type::rc;
    ia.send_cq = ia.recv_cq = s.cq;
    ia.send_ops_flags = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM;
    ia.cap.max_send_wr = 16;
    ia.cap.max_recv_wr = 16;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    vq::qp *q = nullptr;
    if (int rc = vq::create_qp(s.pd, &ia, &q))
        return rc;
    vq::qp_attr a;
    a.state = vq::qp_state::init;
    // Peers may read and write the regions it names (region).
    a.qp_access_flags = vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_WRITE;
    if (int rc = vq::modify_qp(q, &a, vq::QP_ATTR_STATE | vq::QP_ATTR_ACCESS_FLAGS)) {
        (void)vq::destroy_qp(q);
        return rc;
    }
    s.rc.push_back(q);
    qpn = q->qp_num;
    return 0;
}

vq::qp *rc_of(state &s, std::uint64_t qpn)
{
    for (vq::qp *q : s.rc)
        if (q->qp_num == qpn)
            return q;
    return nullptr;
}

/** RC QP r.a, in INIT, to RTR and RTS towards r.to. */
int rc_connect(state &s, const hp::request &r)
{
    vq::qp *q = rc_of(s, r.a);
    if (!q)
        return -FI_EINVAL;
    vq::qp_attr a;
    a.state = vq::qp_state::rtr;
    a.dest = r.to.dev;
    a.dest_qp_num = r.to.qpn;
    if (int rc = vq::modify_qp(q, &a, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN))
        return rc;
    a.state = vq::qp_state::rts;
    return vq::modify_qp(q, &a, vq::QP_ATTR_STATE);
}

/** Sends with immediate r.b on RC QP r.a: each of @p list ([u32
 *  length][bytes]...), r.n times over; at most rc_max_out outstanding.
 *  Bounded: 30 s. */
int rc_send(state &s, const hp::request &r, const std::vector<std::uint8_t> &list)
{
    vq::qp *q = rc_of(s, r.a);
    if (!q)
        return -FI_EINVAL;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    s.rc_errors = 0;
    std::uint32_t i = 0; // sends posted
    for (std::uint32_t t = 0; t < r.n; t++) {
        for (std::size_t off = 0; off < list.size();) {
            std::uint32_t len = 0;
            if (!list_item(list, off, len))
                return -FI_EINVAL;
            if (std::chrono::steady_clock::now() > end)
                return -FI_ETIMEDOUT;
            if (s.rc_outstanding >= rc_max_out) {
                poll_some(s);
                continue;
            }
            // The UD send buffers, in turn (free here: send_list returns once
            // its sends completed); a buffer is reused sbufs sends later, long
            // after its send (one of the last rc_max_out) completed.
            std::uint8_t *m = s.mem.data() + std::size_t(nbufs + i % sbufs) * rbuf;
            if (len)
                std::memcpy(m, list.data() + off + 4, len);
            vq::wr_start(q);
            q->wr_id = i;
            q->wr_flags = vq::WR_SIGNALED;
            vq::wr_send_imm(q, std::uint32_t(r.b));
            vq::wr_set_sge(q, s.mr->lkey, reinterpret_cast<std::uint64_t>(m), len);
            int rc = vq::wr_complete(q);
            if (rc == -FI_EAGAIN) {
                poll_some(s);
                continue;
            }
            if (rc)
                return rc;
            s.rc_outstanding++;
            i++;
            off += 4 + len;
        }
    }
    while (s.rc_outstanding && std::chrono::steady_clock::now() < end)
        poll_some(s);
    return s.rc_outstanding ? -FI_ETIMEDOUT : s.rc_errors ? -FI_EIO : 0;
}

/** r.a bytes registered for remote read and write, byte i region_byte(i);
 *  its rkey into @p key, its address into @p out. */
int region(state &s, const hp::request &r, std::uint32_t &key, std::vector<std::uint8_t> &out)
{
    if (r.a == 0 || r.a > (std::uint64_t(1) << 26))
        return -FI_EINVAL;
    std::vector<std::uint8_t> b(r.a);
    for (std::uint64_t i = 0; i < r.a; i++)
        b[i] = hp::region_byte(i);
    vq::mr *m = nullptr;
    if (int rc = vq::reg_mr(s.pd, b.data(), b.size(),
                            vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_WRITE, &m))
        return rc;
    const std::uint64_t addr = reinterpret_cast<std::uint64_t>(b.data());
    s.regions.push_back(std::move(b)); // (the bytes stay where they are)
    s.region_mrs.push_back(m);
    key = m->rkey;
    out.resize(8);
    std::memcpy(out.data(), &addr, 8);
    return 0;
}

/** Take r.n messages received on RC QP r.a, posting at most that many
 *  receives, within r.b ms; what was taken into @p out (hp::taken each). */
int rc_take(state &s, const hp::request &r, std::vector<std::uint8_t> &out)
{
    vq::qp *q = rc_of(s, r.a);
    if (!q)
        return -FI_EINVAL;
    s.rc_got.clear();
    s.rc_recv_errors = 0;
    int rc = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(r.b);
    while (s.rc_got.size() < r.n) {
        if (std::chrono::steady_clock::now() > end) {
            rc = -FI_ETIMEDOUT;
            break;
        }
        // Receives for what is still to come, no more.
        std::size_t posted = rc_rbufs - s.rc_free.size();
        while (!s.rc_free.empty() && s.rc_got.size() + posted < r.n) {
            const std::uint64_t b = s.rc_free.back();
            if (int p = vq::post_recv(q, b, reinterpret_cast<std::uint64_t>(s.rc_rx.data()) + b * rbuf, rbuf,
                                      s.rc_rx_mr->lkey))
                return p;
            s.rc_free.pop_back();
            posted++;
        }
        poll_some(s);
        if (s.rc_recv_errors)
            return -FI_EIO;
    }
    out.resize(s.rc_got.size() * sizeof(hp::taken));
    if (!s.rc_got.empty())
        std::memcpy(out.data(), s.rc_got.data(), out.size());
    return rc;
}

} // namespace

int main()
{
    const int fd = 3;
    state s;
    vq::device *dev = vq::find_device("shm0");
    if (!dev || vq::open_device(dev, &s.ctx) || vq::alloc_pd(s.ctx, &s.pd))
        return 2;
    vq::cq_init_attr ca;
    ca.cqe = 4096;
    if (vq::create_cq(s.ctx, &ca, &s.cq))
        return 3;
    if (make_ud(s, nbufs, s.ud))
        return 4;
    if (vq::reg_mr(s.pd, s.mem.data(), s.mem.size(), vq::ACCESS_LOCAL_WRITE, &s.mr) ||
        vq::reg_mr(s.pd, s.rc_rx.data(), s.rc_rx.size(), vq::ACCESS_LOCAL_WRITE, &s.rc_rx_mr))
        return 6;
    for (std::uint32_t i = 0; i < rc_rbufs; i++)
        s.rc_free.push_back(i);
    for (std::uint32_t i = 0; i < nbufs; i++)
        if (vq::post_recv(s.ud, i, buf_addr(s, i), rbuf, s.mr->lkey))
            return 7;

    for (;;) {
        pollfd pf{fd, POLLIN, 0};
        if (::poll(&pf, 1, 0) <= 0) {
            poll_some(s);
            sched_yield();
            continue;
        }
        hp::request r;
        if (!hp::read_all(fd, &r, sizeof r))
            break;
        std::vector<std::uint8_t> bytes(r.len);
        if (r.len > hp::max_request || !hp::read_all(fd, bytes.data(), r.len))
            break;
        hp::response o{};
        std::vector<std::uint8_t> out;
        switch (r.op) {
        case hp::hello:
            o.addr = vq::get_qp_addr(s.ud);
            break;
        case hp::send:
            o.rc = send_list(s, r, bytes);
            break;
        case hp::rc:
            o.rc = rc_qp(s, o.qpn);
            break;
        case hp::recv: {
            auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(r.a);
            while (s.got.empty() && std::chrono::steady_clock::now() < end) {
                poll_some(s);
                sched_yield();
            }
            if (s.got.empty()) {
                o.rc = -FI_ETIMEDOUT;
            } else {
                out = std::move(s.got.front());
                s.got.erase(s.got.begin());
            }
            break;
        }
        case hp::rc_connect:
            o.rc = rc_connect(s, r);
            break;
        case hp::rc_send:
            o.rc = rc_send(s, r, bytes);
            break;
        case hp::region:
            o.rc = region(s, r, o.qpn, out);
            break;
        case hp::rc_take:
            o.rc = rc_take(s, r, out);
            break;
        case hp::ud:
            o.rc = more_ud(s, o.addr);
            break;
        case hp::forget:
            poll_some(s);
            o.len = std::uint32_t(s.got.size());
            s.got.clear();
            break;
        case hp::quit:
            (void)hp::write_all(fd, &o, sizeof o);
            for (vq::qp *q : s.rc)
                (void)vq::destroy_qp(q);
            for (state::more_ud &u : s.uds) {
                (void)vq::destroy_qp(u.qp);
                (void)vq::dereg_mr(u.mr);
            }
            (void)vq::destroy_qp(s.ud);
            for (vq::mr *m : s.region_mrs)
                (void)vq::dereg_mr(m);
            (void)vq::dereg_mr(s.rc_rx_mr);
            (void)vq::dereg_mr(s.mr);
            (void)vq::destroy_cq(s.cq);
            (void)vq::dealloc_pd(s.pd);
            (void)vq::close_device(s.ctx);
            return 0;
        default:
            o.rc = -FI_EINVAL;
        }
        if (r.op != hp::forget)
            o.len = std::uint32_t(out.size());
        if (!hp::write_all(fd, &o, sizeof o) || (!out.empty() && !hp::write_all(fd, out.data(), out.size())))
            break;
    }
    return 1;
}
