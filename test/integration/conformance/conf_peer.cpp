// conf_peer: the remote side of the vq conformance suite.
//
// Spawned by the test binary with "--fd=N" (one end of a socketpair) and
// optionally "--uid=N" (run as another user), or run as a thread of it
// (SHUNT_CONF_PEER_THREAD: conf_peer_serve). Opens its own context on the
// device under test (SHUNT_CONF_DEVICE, default shm0) and serves requests
// (conf_common.h): register memory, create and connect QPs, post receives and
// work requests, report completions, run atomic loops. Between requests it keeps polling every CQ
// it owns (the shm driver progresses when polled) and yields when idle, so it
// never starves the test process on a shared core. It exits on CMD_QUIT, when
// the socket closes, or when its parent dies (PR_SET_PDEATHSIG).
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <grp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>

#include "conf_common.h"

using namespace shunt;
using namespace shunt::conf;

namespace {

struct peer_qp {
    vq::qp *qp = nullptr;
    vq::cq *cq = nullptr;
    std::deque<vq::wc> wcs;
};

struct stream_state {
    bool active = false;
    std::uint32_t qp = 0, mr = 0, len = 0, count = 0, posted = 0;
};

struct peer_state {
    int fd = -1;
    bool quit = false;  ///< CMD_QUIT, or the socket failed
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    objects o;
    std::vector<peer_qp> qps;
    std::vector<vq::srq *> srqs;
    stream_state stream;
    const char *device = nullptr; ///< what it opened (and reopens on CMD_RESET)
};

thread_local peer_state S; // one per peer thread (a spawned peer has one thread)

[[noreturn, maybe_unused]] void die(const char *what, int rc)
{
    std::fprintf(stderr, "conf_peer[%d]: %s failed: %d\n", static_cast<int>(getpid()), what, rc);
    std::_Exit(3);
}

/** Poll every CQ once. @return completions gathered. */
int pump()
{
    int got = 0;
    for (auto &q : S.qps) {
        if (!q.cq)
            continue;
        vq::wc w[16];
        int k = vq::poll_cq(q.cq, 16, w);
        for (int i = 0; i < k; i++)
            q.wcs.push_back(w[i]);
        if (k > 0)
            got += k;
    }
    auto &st = S.stream;
    if (st.active && (st.count == 0 || st.posted < st.count)) {
        const local_mr &m = S.o.mrs[st.mr];
        int rc = vq::post_send(S.qps[st.qp].qp, st.posted, m.base, st.len, m.mr->lkey, vq::WR_SIGNALED);
        if (rc == 0)
            st.posted++, got++;
        else if (rc != -FI_EAGAIN)
            st.active = false;
    }
    return got;
}

void idle() { usleep(20); }

/** Wait for one completion of QP @p qi (bounded). */
bool wait_one(std::uint32_t qi, vq::wc *out, int timeout_ms = 10000)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (S.qps[qi].wcs.empty()) {
        if (pump() == 0) {
            if (std::chrono::steady_clock::now() > end)
                return false;
            sched_yield();
        }
    }
    *out = S.qps[qi].wcs.front();
    S.qps[qi].wcs.pop_front();
    return true;
}

int open_state(const char *device);

void reply(int rc, const void *p = nullptr, std::size_t n = 0)
{
    if (!send_msg(S.fd, static_cast<std::uint32_t>(rc), p, n))
        S.quit = true; // the test side is gone
}

template <class T>
bool body_as(const std::vector<std::uint8_t> &b, T &out)
{
    if (b.size() < sizeof(T))
        return false;
    std::memcpy(&out, b.data(), sizeof(T));
    return true;
}

int do_reg(const reg_req &r, reg_rep &out)
{
    if (r.size == 0 || r.size > (1ull << 30))
        return -FI_EINVAL;
    void *mem = nullptr;
    if (r.seg) {
        int rc = vq::alloc_buf(S.ctx, r.size, &mem);
        if (rc)
            return rc;
    } else {
        mem = std::aligned_alloc(64, (r.size + 63) & ~63ull);
        if (!mem)
            return -FI_ENOMEM;
    }
    if (r.fill_seed)
        fill_pattern(mem, r.size, r.fill_seed);
    else
        std::memset(mem, 0, r.size);
    vq::mr *m = nullptr;
    int rc = vq::reg_mr(S.pd, mem, r.size, r.access, &m);
    if (rc) {
        if (r.seg)
            (void)vq::free_buf(S.ctx, mem);
        else
            std::free(mem);
        return rc;
    }
    S.o.mrs.push_back({m, static_cast<std::uint8_t *>(mem), r.size, r.seg != 0});
    out = {static_cast<std::uint32_t>(S.o.mrs.size() - 1), m->lkey, m->rkey, 0,
           reinterpret_cast<std::uint64_t>(mem)};
    return 0;
}

int do_dereg(std::uint32_t i)
{
    if (i >= S.o.mrs.size() || !S.o.mrs[i].mr)
        return -FI_EINVAL;
    int rc = vq::dereg_mr(S.o.mrs[i].mr);
    if (rc)
        return rc;
    // Keep the memory: a late access through a stale key must not touch freed memory.
    S.o.mrs[i].mr = nullptr;
    return 0;
}

int do_create_qp(const qp_req &r, qp_rep &out)
{
    peer_qp pq;
    vq::cq_init_attr ca;
    ca.cqe = 4096;
    int rc = vq::create_cq(S.ctx, &ca, &pq.cq);
    if (rc)
        return rc;
    vq::qp_init_attr ia;
    ia.type = r.type;
    ia.send_cq = ia.recv_cq = pq.cq;
    ia.send_ops_flags = r.ops;
    ia.cap = r.cap;
    ia.sq_sig_all = r.sq_sig_all != 0;
    if (r.srq >= 0) {
        if (static_cast<std::size_t>(r.srq) >= S.srqs.size())
            return -FI_EINVAL;
        ia.srq = S.srqs[static_cast<std::size_t>(r.srq)];
    }
    rc = vq::create_qp(S.pd, &ia, &pq.qp);
    if (rc) {
        (void)vq::destroy_cq(pq.cq);
        return rc;
    }
    S.qps.push_back(std::move(pq));
    out.index = static_cast<std::uint32_t>(S.qps.size() - 1);
    out.qpn = S.qps.back().qp->qp_num;
    out.cap = S.qps.back().qp->cap;
    return 0;
}

int do_connect(const connect_req &r)
{
    if (r.index >= S.qps.size() || !S.qps[r.index].qp)
        return -FI_EINVAL;
    vq::qp *q = S.qps[r.index].qp;
    vq::qp_attr a;
    a.state = vq::qp_state::init;
    unsigned mask = vq::QP_ATTR_STATE;
    if (q->type == vq::qp_type::ud) {
        a.qkey = r.qkey;
        mask |= vq::QP_ATTR_QKEY;
    } else {
        // ~0u: "the harness default", every remote access (verbs' own
        // default, which shm follows, is none).
        a.qp_access_flags = r.access == ~0u ? (vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ |
                                              vq::ACCESS_REMOTE_ATOMIC)
                                           : r.access;
        mask |= vq::QP_ATTR_ACCESS_FLAGS;
    }
    int rc = vq::modify_qp(q, &a, mask);
    if (rc)
        return rc;
    a.state = vq::qp_state::rtr;
    mask = vq::QP_ATTR_STATE;
    if (q->type != vq::qp_type::ud) {
        a.dest = r.remote.dev;
        a.dest_qp_num = r.remote.qpn;
        mask |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
    }
    rc = vq::modify_qp(q, &a, mask);
    if (rc)
        return rc;
    a.state = vq::qp_state::rts;
    return vq::modify_qp(q, &a, vq::QP_ATTR_STATE);
}

int do_post_recv(const recv_req &r, const piece *p)
{
    if (r.n > max_desc_sge)
        return -FI_EOVERFLOW;
    vq::sge s[max_desc_sge];
    for (std::uint32_t k = 0; k < r.n; k++) {
        if (p[k].mr >= S.o.mrs.size() || !S.o.mrs[p[k].mr].mr ||
            p[k].off + p[k].len > S.o.mrs[p[k].mr].size)
            return -FI_EOVERFLOW;
        const local_mr &m = S.o.mrs[p[k].mr];
        s[k] = {reinterpret_cast<std::uint64_t>(m.base + p[k].off), p[k].len, m.mr->lkey};
    }
    if (r.srq) {
        if (r.index >= S.srqs.size())
            return -FI_EINVAL;
        return vq::post_srq_recv(S.srqs[r.index], r.wr_id, s, r.n);
    }
    if (r.index >= S.qps.size() || !S.qps[r.index].qp)
        return -FI_EINVAL;
    return vq::post_recv(S.qps[r.index].qp, r.wr_id, s, r.n);
}

void do_wait_wcs(const wait_req &r)
{
    if (r.index >= S.qps.size()) {
        reply(-FI_EINVAL);
        return;
    }
    auto &dq = S.qps[r.index].wcs;
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(r.timeout_ms);
    while (r.n == 0 || dq.size() < r.n) {
        if (std::chrono::steady_clock::now() > end)
            break;
        if (pump() == 0)
            idle();
    }
    std::size_t k = r.n == 0 ? dq.size() : std::min<std::size_t>(dq.size(), r.n);
    std::vector<vq::wc> out(dq.begin(), dq.begin() + static_cast<std::ptrdiff_t>(k));
    dq.erase(dq.begin(), dq.begin() + static_cast<std::ptrdiff_t>(k));
    reply(0, out.data(), out.size() * sizeof(vq::wc));
}

/** One atomic (or read/write) on QP @p qi into the scratch word; waits for its completion. */
bool one_op(std::uint32_t qi, const wr_desc &d, vq::wc *w)
{
    int rc = conf_post_batch(S.qps[qi].qp, &d, 1, S.o);
    if (rc) {
        w->status = vq::wc_status::general_err;
        w->vendor_err = static_cast<std::uint32_t>(-rc);
        return false;
    }
    if (!wait_one(qi, w))
        return false;
    return w->status == vq::wc_status::success;
}

void do_atomic_loop(const atomic_req &r)
{
    atomic_rep rep{};
    std::vector<std::uint64_t> fetched;
    if (r.index >= S.qps.size()) {
        reply(-FI_EINVAL);
        return;
    }
    auto *scratch = reinterpret_cast<std::uint64_t *>(S.o.mrs[0].base);
    auto fail = [&](const vq::wc &w) {
        rep.bad_wcs++;
        if (rep.bad_wcs == 1)
            rep.first_bad_status = static_cast<std::uint32_t>(w.status) | (w.vendor_err << 16);
    };
    wr_desc d;
    d.flags = vq::WR_SIGNALED;
    d.rkey = r.rkey;
    d.data = DATA_SGE;
    d.npieces = 1;
    d.pieces[0] = {0, 8, 0};
    vq::wc w{};
    std::uint64_t guess = 0;
    while (rep.done < r.iters && rep.bad_wcs == 0) {
        switch (r.mode) {
        case ATOM_FAA:
            d.op = OP_FAA;
            d.raddr = r.raddr;
            d.a0 = 1;
            if (!one_op(r.index, d, &w)) {
                fail(w);
                break;
            }
            fetched.push_back(scratch[0]);
            rep.done++;
            break;
        case ATOM_CAS_COUNTER:
            d.op = OP_CAS;
            d.raddr = r.raddr;
            d.a0 = guess;
            d.a1 = guess + 1;
            if (!one_op(r.index, d, &w)) {
                fail(w);
                break;
            }
            if (scratch[0] == guess) {
                rep.done++;
                guess++;
            } else {
                rep.retries++;
                guess = scratch[0];
            }
            break;
        case ATOM_CAS_LOCK: {
            // Acquire: cas(lock, 0, me) until the old value was 0.
            d.op = OP_CAS;
            d.raddr = r.lock_addr;
            d.a0 = 0;
            d.a1 = r.me;
            if (!one_op(r.index, d, &w)) {
                fail(w);
                break;
            }
            if (scratch[0] != 0) {
                rep.retries++;
                sched_yield();
                break;
            }
            // Critical section: read the counter, write it back + 1 (plain RDMA).
            wr_desc rd = d;
            rd.op = OP_READ;
            rd.raddr = r.raddr;
            if (!one_op(r.index, rd, &w)) {
                fail(w);
                break;
            }
            scratch[1] = scratch[0] + 1;
            wr_desc wrt = rd;
            wrt.op = OP_WRITE;
            wrt.pieces[0] = {0, 8, 8};
            if (!one_op(r.index, wrt, &w)) {
                fail(w);
                break;
            }
            // Release: cas(lock, me, 0) must find our id.
            d.a0 = r.me;
            d.a1 = 0;
            if (!one_op(r.index, d, &w)) {
                fail(w);
                break;
            }
            if (scratch[0] != r.me) {
                w.status = vq::wc_status::general_err;
                w.vendor_err = 0x7777;
                fail(w);
                break;
            }
            rep.done++;
            break;
        }
        default:
            reply(-FI_EINVAL);
            return;
        }
    }
    std::vector<std::uint8_t> out(sizeof rep + fetched.size() * 8);
    std::memcpy(out.data(), &rep, sizeof rep);
    if (!fetched.empty())
        std::memcpy(out.data() + sizeof rep, fetched.data(), fetched.size() * 8);
    reply(0, out.data(), out.size());
}

void cleanup()
{
    for (auto &q : S.qps)
        if (q.qp)
            (void)vq::destroy_qp(q.qp);
    for (auto *s : S.srqs)
        (void)vq::destroy_srq(s);
    for (auto &q : S.qps)
        if (q.cq)
            (void)vq::destroy_cq(q.cq);
    for (auto *a : S.o.ahs)
        (void)vq::destroy_ah(a);
    for (auto *m : S.o.mws)
        (void)vq::dealloc_mw(m);
    for (auto &m : S.o.mrs)
        if (m.mr)
            (void)vq::dereg_mr(m.mr);
    for (auto &m : S.o.mrs) {
        if (m.seg)
            (void)vq::free_buf(S.ctx, m.base);
        else
            std::free(m.base);
    }
    if (S.pd)
        (void)vq::dealloc_pd(S.pd);
    if (S.ctx)
        (void)vq::close_device(S.ctx);
}

void handle(std::uint32_t cmd, const std::vector<std::uint8_t> &b)
{
    switch (cmd) {
    case CMD_HELLO: {
        hello_rep h{};
        h.addr = S.ctx->addr;
        h.pid = static_cast<std::int32_t>(getpid());
        int rc = vq::query_device(S.ctx, &h.attr);
        reply(rc, &h, sizeof h);
        return;
    }
    case CMD_REG_MR: {
        reg_req r;
        reg_rep out{};
        if (!body_as(b, r))
            return reply(-FI_EINVAL);
        int rc = do_reg(r, out);
        return reply(rc, &out, sizeof out);
    }
    case CMD_DEREG_MR: {
        std::uint32_t i;
        if (!body_as(b, i))
            return reply(-FI_EINVAL);
        return reply(do_dereg(i));
    }
    case CMD_MEM_WRITE: {
        mem_req r;
        if (!body_as(b, r) || r.index >= S.o.mrs.size() || r.off + r.len > S.o.mrs[r.index].size ||
            b.size() != sizeof r + r.len)
            return reply(-FI_EINVAL);
        std::memcpy(S.o.mrs[r.index].base + r.off, b.data() + sizeof r, r.len);
        return reply(0);
    }
    case CMD_MEM_READ: {
        mem_req r;
        if (!body_as(b, r) || r.index >= S.o.mrs.size() || r.off + r.len > S.o.mrs[r.index].size)
            return reply(-FI_EINVAL);
        // Take in what has arrived first: a UC or unsignaled write completes
        // at its sender when sent, and on a wire it may still be in flight.
        for (int i = 0; i < 64; i++)
            pump();
        return reply(0, S.o.mrs[r.index].base + r.off, r.len);
    }
    case CMD_CREATE_QP: {
        qp_req r;
        qp_rep out{};
        if (!body_as(b, r))
            return reply(-FI_EINVAL);
        int rc = do_create_qp(r, out);
        return reply(rc, &out, sizeof out);
    }
    case CMD_CONNECT: {
        connect_req r;
        if (!body_as(b, r))
            return reply(-FI_EINVAL);
        return reply(do_connect(r));
    }
    case CMD_MODIFY: {
        modify_req r;
        if (!body_as(b, r) || r.index >= S.qps.size())
            return reply(-FI_EINVAL);
        vq::qp_attr a;
        a.state = r.state;
        return reply(vq::modify_qp(S.qps[r.index].qp, &a, vq::QP_ATTR_STATE));
    }
    case CMD_POST_RECV: {
        recv_req r;
        if (!body_as(b, r) || b.size() != sizeof r + r.n * sizeof(piece))
            return reply(-FI_EINVAL);
        std::vector<piece> p(r.n);
        if (r.n)
            std::memcpy(p.data(), b.data() + sizeof r, r.n * sizeof(piece));
        return reply(do_post_recv(r, p.data()));
    }
    case CMD_WAIT_WCS: {
        wait_req r;
        if (!body_as(b, r))
            return reply(-FI_EINVAL);
        return do_wait_wcs(r);
    }
    case CMD_POST: {
        post_req r;
        if (!body_as(b, r) || b.size() != sizeof r + r.n * sizeof(wr_desc) || r.index >= S.qps.size())
            return reply(-FI_EINVAL);
        std::vector<wr_desc> d(r.n);
        if (r.n)
            std::memcpy(static_cast<void *>(d.data()), b.data() + sizeof r, r.n * sizeof(wr_desc));
        return reply(conf_post_batch(S.qps[r.index].qp, d.data(), d.size(), S.o));
    }
    case CMD_ATOMIC_LOOP: {
        atomic_req r;
        if (!body_as(b, r))
            return reply(-FI_EINVAL);
        return do_atomic_loop(r);
    }
    case CMD_CREATE_AH: {
        vq::ah_attr a;
        if (!body_as(b, a.dest))
            return reply(-FI_EINVAL);
        vq::ah *ah = nullptr;
        int rc = vq::create_ah(S.pd, &a, &ah);
        if (rc)
            return reply(rc);
        S.o.ahs.push_back(ah);
        std::uint32_t i = static_cast<std::uint32_t>(S.o.ahs.size() - 1);
        return reply(0, &i, sizeof i);
    }
    case CMD_ALLOC_MW: {
        vq::mw *m = nullptr;
        int rc = vq::alloc_mw(S.pd, vq::mw_type::type2, &m);
        if (rc)
            return reply(rc);
        S.o.mws.push_back(m);
        mw_rep out{static_cast<std::uint32_t>(S.o.mws.size() - 1), m->rkey};
        return reply(0, &out, sizeof out);
    }
    case CMD_QUERY_MW: {
        std::uint32_t i;
        if (!body_as(b, i) || i >= S.o.mws.size())
            return reply(-FI_EINVAL);
        mw_rep out{i, S.o.mws[i]->rkey};
        return reply(0, &out, sizeof out);
    }
    case CMD_CREATE_SRQ: {
        srq_req r;
        if (!body_as(b, r))
            return reply(-FI_EINVAL);
        vq::srq_init_attr a;
        a.max_wr = r.max_wr;
        a.max_sge = r.max_sge;
        vq::srq *s = nullptr;
        int rc = vq::create_srq(S.pd, &a, &s);
        if (rc)
            return reply(rc);
        S.srqs.push_back(s);
        std::uint32_t i = static_cast<std::uint32_t>(S.srqs.size() - 1);
        return reply(0, &i, sizeof i);
    }
    case CMD_DESTROY_QP: {
        std::uint32_t i;
        if (!body_as(b, i) || i >= S.qps.size() || !S.qps[i].qp)
            return reply(-FI_EINVAL);
        int rc = vq::destroy_qp(S.qps[i].qp);
        if (rc == 0)
            S.qps[i].qp = nullptr;
        return reply(rc);
    }
    case CMD_SEND_STREAM: {
        stream_req r;
        if (!body_as(b, r) || r.index >= S.qps.size() || r.mr >= S.o.mrs.size() ||
            r.len > S.o.mrs[r.mr].size)
            return reply(-FI_EINVAL);
        S.stream = {true, r.index, r.mr, r.len, r.count, 0};
        return reply(0);
    }
    case CMD_SLEEP: {
        std::uint32_t ms;
        if (!body_as(b, ms) || ms > 10000)
            return reply(-FI_EINVAL);
        reply(0);
        usleep(ms * 1000); // not polling: the receiver looks stalled
        return;
    }
    case CMD_POST_RECVS: {
        recv_req r;
        piece p;
        if (!body_as(b, r) || b.size() != sizeof r + sizeof p)
            return reply(-FI_EINVAL);
        std::memcpy(&p, b.data() + sizeof r, sizeof p);
        std::uint32_t count = r.n;
        r.n = 1;
        for (std::uint32_t i = 0; i < count; i++) {
            int rc = do_post_recv(r, &p);
            if (rc)
                return reply(rc);
            r.wr_id++;
            p.off += p.len;
        }
        return reply(0);
    }
    case CMD_QUIT:
        S.quit = true;
        return reply(0);
    case CMD_RESET: {
        // Back to the state of a new peer, for the next test: every object
        // destroyed, the device closed and opened again.
        cleanup();
        peer_state fresh;
        fresh.fd = S.fd;
        fresh.device = S.device;
        S = std::move(fresh);
        int rc = open_state(S.device);
        if (rc)
            S.quit = true; // the test side sees the failure and spawns a new peer
        return reply(rc);
    }
    default:
        return reply(-FI_ENOSYS);
    }
}

} // namespace

namespace {
/** Opens the device, a PD and the scratch region: the state a new peer and a
 *  reset one start from. */
int open_state(const char *device)
{
    vq::device *dev = vq::find_device(device);
    if (!dev)
        return -FI_ENODEV;
    int rc = vq::open_device(dev, &S.ctx);
    if (rc)
        return rc;
    rc = vq::alloc_pd(S.ctx, &S.pd);
    if (rc)
        return rc;
    // Region 0: scratch for atomic results and the atomic loop's reads/writes.
    reg_rep scratch;
    return do_reg({4096, vq::ACCESS_LOCAL_WRITE, 0, {}, 0}, scratch);
}
} // namespace

int shunt::conf::conf_peer_serve(int fd, const char *device)
{
    S = peer_state{};
    S.fd = fd;
    S.device = device;
    int rc = open_state(device);
    if (rc)
        return rc;
    std::vector<std::uint8_t> body;
    while (!S.quit) {
        pollfd pf{S.fd, POLLIN, 0};
        int r = ::poll(&pf, 1, 0);
        if (r > 0) {
            msg_hdr h;
            if (!read_all(S.fd, &h, sizeof h, 10000))
                break; // test process gone or closed the socket
            body.resize(h.len);
            if (h.len && !read_all(S.fd, body.data(), h.len, 10000))
                break;
            handle(h.cmd_or_rc, body);
            continue;
        }
        if (pump() == 0)
            idle();
    }
    cleanup();
    return 0;
}

#ifndef CONF_PEER_NO_MAIN
int main(int argc, char **argv)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int uid = -1, fd = -1;
    for (int i = 1; i < argc; i++) {
        if (std::strncmp(argv[i], "--fd=", 5) == 0)
            fd = std::atoi(argv[i] + 5);
        if (std::strncmp(argv[i], "--uid=", 6) == 0)
            uid = std::atoi(argv[i] + 6);
    }
    if (uid >= 0) {
        // Run as another user (permission tests): drop privileges before any segment exists.
        if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)
            die("setresuid", -errno);
        prctl(PR_SET_PDEATHSIG, SIGKILL); // cleared by the credential change
    }
    if (fd < 0) {
        std::fprintf(stderr, "usage: conf_peer --fd=N (spawned by integration-vq-conformance)\n");
        return 2;
    }
    if (getppid() == 1)
        return 5; // parent already gone
    int rc = conf_peer_serve(fd, conf_device());
    if (rc)
        die("set-up", rc);
    return 0;
}
#endif
