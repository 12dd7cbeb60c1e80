// libFuzzer: the posting API against a careless caller, on the shm driver
// (two contexts of shm0), the ethdev driver (a net_ring pair) and the mlx5
// driver over its model of a ConnectX port (two contexts of mlx5_model0),
// in one process; byte 0 of the input picks one (mod 3). The rest is a
// program of calls: sessions of builders and setters in any order
// (wr_start ... wr_complete or wr_abort), the single-call posts and
// post_recv, with arguments that are often wrong:
// keys of another region, context or of nothing, addresses and lengths
// past a region's end, too many SGEs, inline data over the limit, TSO
// headers and MSS out of range, unaligned atomics, unknown flag bits,
// unknown flush types and levels, UD destinations that do not exist; and
// memory windows: binds (by either side) of any range of any region with
// any access and new key, local invalidation, send-with-invalidate, and
// remote operations through windows bound, unbound, invalidated or stale.
//
// Every buffer handed to the API is valid for the length given (the
// caller's side of the contract); every region is registered over a whole
// heap block of its own, so a driver that reads or writes past a region or
// past the length it was given hits ASan's redzone. The checks: wr_complete
// and the single-call posts return 0 or an error the API documents; a
// completion carries a wr_id that was accepted and not yet completed (a
// failed batch generates none); a receive completion is no longer than its
// receive. Every input starts from QPs reset at both ends and connected
// again, which must leave them in RTS.
//
// Comparing drivers (devtools/fuzz_vq_diff.py): with SHUNT_FUZZ_TRACE set,
// each step's operation, QP type and next wr_id and each completion of the
// input's own requests (wr_id, status) go to stderr; SHUNT_FUZZ_SETTLE_MS
// polls up to that long at the end of an input until every accepted request
// has completed (the mlx5 model's device thread sleeps while idle, so its
// completions come milliseconds later). Both are off by default.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "env/errors.h"
#include "vq/vq.h"

namespace {

/** SHUNT_FUZZ_TRACE and SHUNT_FUZZ_SETTLE_MS (read once). */
bool tracing()
{
    static const bool on = std::getenv("SHUNT_FUZZ_TRACE") != nullptr;
    return on;
}
long settle_ms()
{
    static const char *v = std::getenv("SHUNT_FUZZ_SETTLE_MS");
    static const long ms = v ? std::atol(v) : 0;
    return ms;
}

namespace vq = shunt::vq;
using shunt::FI_E2BIG;
using shunt::FI_EAGAIN;
using shunt::FI_EINVAL;
using shunt::FI_EMSGSIZE;
using shunt::FI_ENOSPC;
using shunt::FI_EOPBADSTATE;
using shunt::FI_EOPNOTSUPP;

constexpr std::size_t big = 65536, small = 100, src_len = 4096, rslot = 2048, nrecv = 16, nmw = 2;
constexpr std::uint32_t qkey = 0x2222;

void check(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "fuzz_vq_post: %s\n", what);
        std::abort();
    }
}

/** A region registered over a whole heap block of its own. */
struct region {
    std::uint8_t *p = nullptr;
    std::size_t n = 0;
    vq::mr *mr = nullptr;
    void make(vq::pd *pd, std::size_t bytes, unsigned extra_access = 0)
    {
        n = bytes;
        p = static_cast<std::uint8_t *>(std::malloc(bytes));
        check(p != nullptr, "no memory");
        std::memset(p, 0, bytes);
        check(vq::reg_mr(pd, p, bytes,
                         vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ |
                             vq::ACCESS_REMOTE_ATOMIC | extra_access,
                         &mr) == 0,
              "reg_mr");
    }
    std::uint64_t at(std::size_t off) const { return reinterpret_cast<std::uint64_t>(p) + off; }
};

enum { q_rc, q_uc, q_ud, q_raw, nq };

struct side {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    region r_big, r_small;
    /** A third region: registered once on side 0, and on side 1 registered,
     *  deregistered and registered again, so that each side's key names
     *  nothing on the other (keys are per context and the first ones agree). */
    region r_other;
    vq::qp *q[nq] = {};
    vq::mw *mw[nmw] = {}; ///< type-2 windows (none where the driver has no windows)
    vq::device_attr da;

    void open(const char *dev, bool rereg)
    {
        vq::device *d = vq::find_device(dev);
        check(d != nullptr, "no device");
        check(vq::open_device(d, &ctx) == 0, "open_device");
        check(vq::query_device(ctx, &da) == 0, "query_device");
        check(vq::alloc_pd(ctx, &pd) == 0, "alloc_pd");
        vq::cq_init_attr ca;
        ca.cqe = 4096;
        check(vq::create_cq(ctx, &ca, &cq) == 0, "create_cq");
        r_big.make(pd, big, vq::ACCESS_FLUSH_GLOBAL | vq::ACCESS_MW_BIND); // the small one is neither
        r_small.make(pd, small);
        r_other.make(pd, small);
        if (rereg) {
            check(vq::dereg_mr(r_other.mr) == 0, "dereg_mr");
            std::free(r_other.p);
            r_other.make(pd, small);
        }
        for (int t = 0; t < nq; t++) {
            const auto type = t == q_rc ? vq::qp_type::rc
                              : t == q_uc ? vq::qp_type::uc
                              : t == q_ud ? vq::qp_type::ud
                                          : vq::qp_type::raw_packet;
            const std::uint64_t ops = da.ops[static_cast<unsigned>(type)] & vq::ops_allowed(type);
            if (!ops)
                continue; // the driver has no such QP type
            vq::qp_init_attr ia;
            ia.type = type;
            ia.send_cq = ia.recv_cq = cq;
            ia.send_ops_flags = ops;
            ia.cap.max_send_wr = 64;
            ia.cap.max_recv_wr = nrecv;
            ia.cap.max_send_sge = 8;
            ia.cap.max_recv_sge = 4;
            ia.cap.max_inline_data = 256;
            check(vq::create_qp(pd, &ia, &q[t]) == 0, "create_qp");
        }
        if (da.max_mw)
            for (vq::mw *&w : mw)
                check(vq::alloc_mw(pd, vq::mw_type::type2, &w) == 0, "alloc_mw");
    }
};

/** Move @p q to @p s (RTR: connected to @p peer; RTS: an RC QP with one
 *  retry and retransmit timeout @p timeout, verbs' exponent). */
int to(vq::qp *q, vq::qp_state s, vq::qp *peer, std::uint8_t timeout = 8)
{
    vq::qp_attr a;
    a.state = s;
    unsigned m = vq::QP_ATTR_STATE;
    if (s == vq::qp_state::init && q->type == vq::qp_type::ud) {
        a.qkey = qkey;
        m |= vq::QP_ATTR_QKEY;
    } else if (s == vq::qp_state::init && q->type != vq::qp_type::raw_packet) {
        a.qp_access_flags = vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC;
        m |= vq::QP_ATTR_ACCESS_FLAGS;
    }
    if (s == vq::qp_state::rtr && peer) {
        a.dest = peer->ctx->addr;
        a.dest_qp_num = peer->qp_num;
        m |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
    }
    if (s == vq::qp_state::rts && q->type == vq::qp_type::rc) { // errors surface soon
        a.retry_cnt = 1;
        a.timeout = timeout;
        m |= vq::QP_ATTR_RETRY_CNT | vq::QP_ATTR_TIMEOUT;
    }
    return vq::modify_qp(q, &a, m);
}

/** One driver: two sides, their QPs paired (RC with RC, UC with UC), an
 *  address handle from side 0 to side 1. */
struct rig {
    side s[2];
    vq::ah *ah = nullptr;
    std::uint8_t *src = nullptr; ///< inline data and TSO headers: the end of a heap block
    bool posted[nq][nrecv] = {};
    std::uint64_t gen = 0;
    std::set<std::uint64_t> issued;   ///< send wr_ids accepted and not completed (this input)
    std::set<std::uint64_t> recv_ids; ///< the program's own receives, accepted and not completed
    std::uint8_t rc_timeout;          ///< RC retransmit timeout (verbs' exponent)

    rig(const char *d0, const char *d1, std::uint8_t timeout = 8) : rc_timeout(timeout)
    {
        s[0].open(d0, false);
        s[1].open(d1, true);
        check(s[0].r_other.mr->lkey != s[1].r_other.mr->lkey && s[0].r_other.mr->rkey != s[1].r_other.mr->rkey,
              "the two sides' third regions have the same keys");
        vq::ah_attr aa;
        aa.dest = s[1].ctx->addr;
        check(vq::create_ah(s[0].pd, &aa, &ah) == 0, "create_ah");
        src = static_cast<std::uint8_t *>(std::malloc(src_len));
        check(src != nullptr, "no memory");
        for (std::size_t i = 0; i < src_len; i++)
            src[i] = static_cast<std::uint8_t>(i * 7);
        // Its last 54 bytes an Ethernet / IPv4 / TCP header, for TSO and
        // WR_IP_CSUM with a header length of 54 (other lengths get bytes).
        static const std::uint8_t hdr[54] = {
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00,                       // Ethernet
            0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
            0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0, // TCP
        };
        std::memcpy(src + src_len - sizeof hdr, hdr, sizeof hdr);
    }
    void restart()
    {
        gen++;
        issued.clear();
        recv_ids.clear();
        // Both ends reset before either comes up again, as an application
        // reconnects: a QP connected to a peer not yet reset would be
        // connected to the peer's old incarnation.
        for (side &x : s)
            for (vq::qp *q : x.q)
                if (q)
                    check(to(q, vq::qp_state::reset, nullptr) == 0, "reset");
        for (int k = 0; k < nq; k++) {
            vq::qp *a = s[0].q[k], *b = s[1].q[k];
            if (!a || !b)
                continue;
            const bool conn = k == q_rc || k == q_uc;
            for (int i = 0; i < 2; i++) {
                vq::qp *x = i ? b : a, *peer = conn ? (i ? a : b) : nullptr;
                check(to(x, vq::qp_state::init, nullptr) == 0 && to(x, vq::qp_state::rtr, peer) == 0 &&
                          to(x, vq::qp_state::rts, peer, rc_timeout) == 0,
                      "bringing a QP up");
            }
        }
        vq::wc w[64];
        for (int i = 0; i < 4; i++)
            for (side &x : s)
                while (vq::poll_cq(x.cq, 64, w) > 0) {
                }
        // Nothing of the last input may reach the new connections.
        for (side &x : s)
            for (int k : {q_rc, q_uc})
                if (x.q[k])
                    check(vq::get_qp_state(x.q[k]) == vq::qp_state::rts,
                          "a QP connected again left RTS at its first polls");
        std::memset(posted, 0, sizeof posted);
        for (int k = 0; k < nq; k++) {
            vq::qp *b = s[1].q[k];
            if (!b || k == q_raw)
                continue;
            for (std::size_t j = 0; j < nrecv; j++) {
                const std::uint64_t id = gen << 32 | 1u << 31 | static_cast<std::uint64_t>(k) << 8 | j;
                check(vq::post_recv(b, id, s[1].r_big.at((k * nrecv + j) * rslot / 2), rslot / 2,
                                    s[1].r_big.mr->lkey) == 0,
                      "post_recv");
                posted[k][j] = true;
            }
        }
    }
    void on_wc(const vq::wc &w)
    {
        if (w.wr_id >> 32 != gen)
            return; // from an earlier input (flushed by the reset, or late)
        if (tracing() && !(w.wr_id & 1u << 31))
            std::fprintf(stderr, "wc %u %d\n", static_cast<unsigned>(w.wr_id), static_cast<int>(w.status));
        if (w.wr_id & 1u << 31) { // one of the rig's receives
            const unsigned k = (w.wr_id >> 8) & 0xff, j = w.wr_id & 0xff;
            check(k < nq && j < nrecv && posted[k][j], "a completion for a receive never posted");
            posted[k][j] = false;
            check(w.status != vq::wc_status::success || w.opcode == vq::wc_opcode::recv_rdma_with_imm ||
                      w.byte_len <= rslot / 2,
                  "a receive completion longer than its receive");
            return;
        }
        // (An error completion's opcode is not defined: tell them by wr_id.)
        if (recv_ids.erase(w.wr_id) == 1)
            return; // a receive the program posted
        check(issued.erase(w.wr_id) == 1, "a completion for a request never accepted, or completed twice");
    }
    void pump(int rounds)
    {
        vq::wc w[64];
        for (int r = 0; r < rounds; r++)
            for (side &x : s) {
                int k = vq::poll_cq(x.cq, 64, w);
                check(k >= 0, "poll_cq failed");
                for (int i = 0; i < k; i++)
                    on_wc(w[i]);
            }
    }
};

/** The input, read a byte at a time (zeros once it runs out). */
struct reader {
    const std::uint8_t *p;
    std::size_t n;
    bool empty() const { return n == 0; }
    std::uint8_t u8()
    {
        if (!n)
            return 0;
        n--;
        return *p++;
    }
    // (Each read in its own statement: the order of operands is unspecified.)
    std::uint16_t u16()
    {
        const std::uint16_t lo = u8();
        return static_cast<std::uint16_t>(lo | u8() << 8);
    }
    std::uint32_t u32()
    {
        const std::uint32_t lo = u16();
        return lo | static_cast<std::uint32_t>(u16()) << 16;
    }
    std::uint64_t u64()
    {
        const std::uint64_t lo = u32();
        return lo | static_cast<std::uint64_t>(u32()) << 32;
    }
};

bool documented(int rc)
{
    return rc == 0 || rc == -FI_EOPBADSTATE || rc == -FI_EOPNOTSUPP || rc == -FI_EINVAL || rc == -FI_ENOSPC ||
           rc == -FI_E2BIG || rc == -FI_EMSGSIZE || rc == -FI_EAGAIN;
}

/** The program's view of one QP's pending batch: the wr_ids it built. */
struct session {
    vq::qp *q = nullptr;
    std::vector<std::uint64_t> ids;
};

struct program {
    rig &r;
    reader in;
    side &me = r.s[0];
    side &peer = r.s[1];
    std::uint64_t next_id = 1;

    /** A local key and buffer: often right, often not. */
    void local(std::uint32_t *lkey, std::uint64_t *addr, std::uint32_t *len)
    {
        const std::uint8_t c = in.u8();
        const region &g = (c & 1) ? me.r_small : me.r_big;
        const std::size_t off = in.u16() % (g.n + 64);
        *addr = g.at(off);
        *len = (c & 2) ? in.u16() : static_cast<std::uint32_t>(in.u8());
        switch ((c >> 2) & 3) {
        case 0: case 1: *lkey = g.mr->lkey; break;
        case 2: *lkey = peer.r_other.mr->lkey; break; // another context's, unknown here
        default: *lkey = in.u32(); break;
        }
    }
    /** A remote key and address in the peer's memory (or not). Bit 4 of
     *  the first byte: the key of one of the peer's windows (bit 5), its
     *  current one or (bit 6) the one before. */
    void remote(std::uint32_t *rkey, std::uint64_t *raddr)
    {
        const std::uint8_t c = in.u8();
        const region &g = (c & 1) ? peer.r_small : peer.r_big;
        *raddr = g.at(in.u16() % (g.n + 64));
        switch ((c >> 1) & 3) {
        case 0: case 1: *rkey = g.mr->rkey; break;
        case 2: *rkey = me.r_other.mr->rkey; break; // ours, unknown there
        default: *rkey = in.u32(); break;
        }
        if (c & 8)
            *raddr = in.u64();
        if ((c & 16) && peer.mw[0]) {
            const std::uint32_t k = peer.mw[(c >> 5) & 1]->rkey;
            *rkey = (c & 64) ? (k & 0xffffff00u) | ((k - 1) & 0xffu) : k;
        }
    }
    /** A bind of window @p w of side @p x: a range of one of its regions
     *  (often out of it, or a region without MW_BIND access), any access
     *  bits, and usually the window's next key. */
    void bind_args(side &x, vq::mw *w, std::uint32_t *rkey, vq::mw_bind_info *b)
    {
        const std::uint8_t c = in.u8();
        const region &g = (c & 1) ? x.r_small : (c & 2) ? x.r_other : x.r_big;
        b->mr = g.mr;
        b->addr = g.at(in.u16() % (g.n + 64));
        b->length = (c & 4) ? in.u32() : in.u16() % (g.n + 1); // 0: unbind
        const std::uint8_t a = in.u8();
        b->mw_access_flags = (c & 8) ? a : a & (vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ |
                                                 vq::ACCESS_REMOTE_ATOMIC);
        *rkey = (c & 16) ? in.u32() : vq::inc_rkey(w->rkey);
        if (tracing())
            std::fprintf(stderr, "  bind %s region at %llu length %llu access %#x key %s\n",
                         &g == &x.r_small ? "small" : &g == &x.r_other ? "other" : "big",
                         static_cast<unsigned long long>(b->addr - g.at(0)),
                         static_cast<unsigned long long>(b->length), b->mw_access_flags,
                         (c & 16) ? "any" : "next");
    }
    /** Inline data: the last @p len bytes of the source block. */
    const void *inline_src(std::size_t len) const { return r.src + src_len - len; }
    /** An inline buffer list of up to @p max pieces, each in its own part of
     *  the source block. @return the number of pieces. */
    std::size_t buf_list(vq::data_buf *l, std::size_t max)
    {
        const std::size_t n = in.u8() % (max + 1), part = src_len / max;
        for (std::size_t i = 0; i < n; i++) {
            const std::size_t k = in.u16() % (part + 1);
            l[i] = {r.src + src_len - k - i * part, k};
        }
        return n;
    }
    unsigned flags()
    {
        const std::uint8_t f = in.u8();
        return (f & 0x80) ? f : f & (vq::WR_FENCE | vq::WR_SIGNALED | vq::WR_SOLICITED | vq::WR_INLINE |
                                     vq::WR_IP_CSUM);
    }
    vq::qp *pick()
    {
        for (int tries = 0; tries < nq; tries++) {
            vq::qp *q = me.q[in.u8() % nq];
            if (q)
                return q;
        }
        return me.q[q_rc];
    }
    void builder_prologue(session &s)
    {
        s.q->wr_id = r.gen << 32 | next_id++;
        s.q->wr_flags = flags();
        s.ids.push_back(s.q->wr_id);
    }
    void step(session &s)
    {
        const std::uint8_t op = in.u8() % 27;
        const bool in_session = op < 16 || op == 22 || op == 23 || op == 24; // builders and setters
        if (in_session && !s.q) {
            s.q = pick();
            s.ids.clear();
            vq::wr_start(s.q);
        }
        vq::qp *q = s.q;
        std::uint32_t key, len;
        std::uint64_t addr;
        if (tracing())
            std::fprintf(stderr, "step op %u qp %d id %llu\n", op, q ? static_cast<int>(q->type) : -1,
                         static_cast<unsigned long long>(next_id));
        switch (op) {
        case 0: builder_prologue(s); vq::wr_send(q); break;
        case 1: builder_prologue(s); vq::wr_send_imm(q, in.u32()); break;
        case 2: remote(&key, &addr); builder_prologue(s); vq::wr_send_inv(q, key); break;
        case 3: remote(&key, &addr); builder_prologue(s); vq::wr_rdma_write(q, key, addr); break;
        case 4: remote(&key, &addr); builder_prologue(s); vq::wr_rdma_write_imm(q, key, addr, in.u32()); break;
        case 5: remote(&key, &addr); builder_prologue(s); vq::wr_rdma_read(q, key, addr); break;
        case 6: {
            remote(&key, &addr);
            builder_prologue(s);
            const std::uint64_t cmp = in.u64();
            vq::wr_atomic_cmp_swp(q, key, addr, cmp, in.u64());
            break;
        }
        case 7: remote(&key, &addr); builder_prologue(s); vq::wr_atomic_fetch_add(q, key, addr, in.u64()); break;
        case 8: {
            const std::uint16_t hdr_sz = static_cast<std::uint16_t>(in.u16() % (src_len + 1));
            const std::uint16_t mss = in.u16();
            builder_prologue(s);
            vq::wr_send_tso(q, inline_src(hdr_sz), hdr_sz, mss);
            break;
        }
        case 9: local(&key, &addr, &len); vq::wr_set_sge(q, key, addr, len); break;
        case 10: {
            vq::sge l[40];
            const std::size_t n = in.u8() % 41;
            for (std::size_t i = 0; i < n; i++)
                local(&l[i].lkey, &l[i].addr, &l[i].length);
            vq::wr_set_sge_list(q, n, n ? l : nullptr);
            break;
        }
        case 11: {
            const std::size_t n = in.u16() % (src_len + 1);
            vq::wr_set_inline_data(q, inline_src(n), n);
            break;
        }
        case 12: {
            vq::data_buf l[8];
            const std::size_t n = buf_list(l, 8);
            vq::wr_set_inline_data_list(q, n, n ? l : nullptr);
            break;
        }
        case 13: {
            const std::uint8_t c = in.u8();
            const std::uint32_t qpn = (c & 1) && peer.q[q_ud] ? peer.q[q_ud]->qp_num : in.u32();
            vq::wr_set_ud_addr(q, r.ah, qpn, (c & 2) ? qkey : in.u32());
            break;
        }
        case 14: case 15: { // end the session
            if (op == 14) {
                const int rc = vq::wr_complete(q);
                if (tracing())
                    std::fprintf(stderr, "  wr_complete %d\n", rc);
                check(documented(rc), "wr_complete returned an error the API does not document");
                if (rc == 0)
                    r.issued.insert(s.ids.begin(), s.ids.end());
            } else {
                vq::wr_abort(q);
            }
            s.q = nullptr;
            s.ids.clear();
            break;
        }
        case 22: {
            remote(&key, &addr);
            const std::uint64_t n = in.u32();
            const std::uint8_t tl = in.u8();
            builder_prologue(s);
            vq::wr_flush(q, key, addr, n, tl & 3, (tl >> 2) & 3); // types 0..3, levels 0..3: some unknown
            break;
        }
        case 23: { // bind one of our windows (a region's key in place of a window: some drivers check)
            if (!me.mw[0]) {
                builder_prologue(s);
                vq::wr_send(q);
                break;
            }
            vq::mw *w = me.mw[in.u8() % nmw];
            vq::mw_bind_info b{};
            bind_args(me, w, &key, &b);
            builder_prologue(s);
            vq::wr_bind_mw(q, w, key, &b);
            break;
        }
        case 24: { // invalidate one of our windows, a region or anything
            const std::uint8_t c = in.u8();
            key = (c & 3) == 0 ? me.r_big.mr->rkey
                  : (c & 3) == 3 || !me.mw[0] ? in.u32()
                                              : me.mw[(c >> 2) & 1]->rkey;
            builder_prologue(s);
            vq::wr_local_inv(q, key);
            break;
        }
        default:
            if (s.q)
                break; // single-call posts only outside a session (one QP's lock)
            if (op == 25)
                peer_bind();
            else
                single(op);
        }
    }
    /** The peer binds one of its windows in a session of its own, on its RC
     *  or UC QP: the targets of our remote operations and invalidations. */
    void peer_bind()
    {
        const std::uint8_t c = in.u8();
        vq::qp *q = peer.q[(c & 1) ? q_uc : q_rc];
        if (!q || !peer.mw[0])
            return;
        vq::mw *w = peer.mw[(c >> 1) & 1];
        vq::mw_bind_info b{};
        std::uint32_t key;
        bind_args(peer, w, &key, &b);
        vq::wr_start(q);
        q->wr_id = r.gen << 32 | next_id++;
        q->wr_flags = flags();
        const std::uint64_t id = q->wr_id;
        vq::wr_bind_mw(q, w, key, &b);
        const int rc = vq::wr_complete(q);
        check(documented(rc), "wr_complete of a bind returned an error the API does not document");
        if (rc == 0)
            r.issued.insert(id);
    }
    void single(std::uint8_t op)
    {
        vq::qp *q = pick();
        const std::uint64_t id = r.gen << 32 | next_id++;
        std::uint32_t lkey, len, rkey;
        std::uint64_t addr, raddr;
        int rc = 0;
        switch (op) {
        case 16: {
            local(&lkey, &addr, &len);
            const unsigned f = flags();
            if (f & vq::WR_INLINE) { // the data is copied at the call: the caller's pointer is valid for len
                len %= src_len + 1;
                addr = reinterpret_cast<std::uint64_t>(inline_src(len));
            }
            rc = vq::post_send(q, id, reinterpret_cast<const void *>(addr), len, lkey, f);
            break;
        }
        case 17: {
            local(&lkey, &addr, &len);
            remote(&rkey, &raddr);
            const unsigned f = flags();
            if (f & vq::WR_INLINE) {
                len %= src_len + 1;
                addr = reinterpret_cast<std::uint64_t>(inline_src(len));
            }
            rc = vq::post_write(q, id, reinterpret_cast<const void *>(addr), len, lkey, rkey, raddr, f);
            break;
        }
        case 18: {
            vq::data_buf l[4];
            const std::size_t n = buf_list(l, 4);
            const std::uint32_t imm = in.u32();
            rc = vq::post_send_imm_inline(q, id, imm, n ? l : nullptr, n, flags());
            break;
        }
        case 19: {
            const std::uint32_t n = in.u16() % (src_len + 1);
            const std::uint32_t imm = in.u32();
            const std::uint64_t hdr = in.u64();
            rc = vq::post_send_imm_hdr_inline(q, id, imm, hdr, inline_src(n), n, flags());
            break;
        }
        case 20: { // a receive on one of our QPs, its buffer often wrong
            vq::sge l[4];
            const std::uint32_t n = in.u8() % 5;
            for (std::uint32_t i = 0; i < n; i++)
                local(&l[i].lkey, &l[i].addr, &l[i].length);
            if (q->type == vq::qp_type::raw_packet || q->type == vq::qp_type::ud)
                return; // (their receives are not the subject here)
            rc = vq::post_recv(q, id, n ? l : nullptr, n);
            check(rc == 0 || rc == -FI_EAGAIN || rc == -FI_E2BIG || rc == -FI_EINVAL,
                  "post_recv returned an error the API does not document");
            if (rc == 0)
                r.recv_ids.insert(id);
            return;
        }
        default:
            r.pump(1);
            return;
        }
        if (tracing())
            std::fprintf(stderr, "  post %d\n", rc);
        check(documented(rc), "a single-call post returned an error the API does not document");
        if (rc == 0)
            r.issued.insert(id);
    }
    void run()
    {
        session s;
        for (int i = 0; i < 200 && !in.empty(); i++)
            step(s);
        if (s.q)
            vq::wr_abort(s.q);
        r.pump(32);
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(settle_ms());
        while (!r.issued.empty() && std::chrono::steady_clock::now() < until) {
            r.pump(1);
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    }
};

/** The rig of driver @p which: 0 shm (two contexts of shm0), 1 ethdev (a
 *  net_ring pair), 2 the mlx5 driver over its software model of a ConnectX
 *  port (two contexts of mlx5_model0), or shm where there is no model. */
rig &the_rig(unsigned which)
{
    static bool once = [] {
        setenv("SHUNT_ETHDEV_RING_PAIRS", "1", 0);
        setenv("SHUNT_MLX5_MODEL", "1", 0);
        setenv("SHUNT_LOG_LEVEL", "error", 0);
        return true;
    }();
    (void)once;
    // Live for the whole run: contexts are not torn down per input.
    static bool have_model = vq::find_device("mlx5_model0") != nullptr;
    if (which == 1) {
        static rig *e = new rig("net_ring_pair0a", "net_ring_pair0b");
        return *e;
    }
    if (which == 2 && have_model) {
        // timeout 14 (67 ms): the model's device thread sleeps while idle,
        // so a round trip takes milliseconds, and 1 ms would fail most.
        static rig *x = new rig("mlx5_model0", "mlx5_model0", 14);
        return *x;
    }
    static rig *m = new rig("shm0", "shm0");
    return *m;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    if (size < 1)
        return 0;
    rig &r = the_rig(data[0] % 3u);
    r.restart();
    program{r, reader{data + 1, size - 1}}.run();
    return 0;
}
