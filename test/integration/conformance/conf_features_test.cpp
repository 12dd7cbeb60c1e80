// The remaining builders and features across two processes: send_inv,
// bind_mw / local_inv (type-2 windows), flush, TSO and IP_CSUM on UD, Q_Keys,
// shared receive queues, receive-queue limits.
#include <sched.h>

#include <atomic>
#include <thread>

#include "conf_harness.h"

namespace shunt::conf {
namespace {

using vq::qp_type;
using vq::wc_opcode;
using vq::wc_status;

class Features : public conf_test {};

constexpr unsigned acc_mw = ACC_ALL_REMOTE | vq::ACCESS_MW_BIND;

/** A signaled RDMA request for the peer to post: @p op (OP_WRITE, OP_READ)
 *  of @p len bytes at (@p rkey, @p raddr); a write's data from the
 *  request's inline bytes, a read's into peer region @p into at offset 0. */
wr_desc peer_rdma(std::uint8_t op, std::uint64_t wr_id, std::uint32_t rkey, std::uint64_t raddr, std::uint32_t len,
                  std::uint32_t into = 0)
{
    wr_desc d;
    d.op = op;
    d.wr_id = wr_id;
    d.flags = vq::WR_SIGNALED;
    d.rkey = rkey;
    d.raddr = raddr;
    d.data = op == OP_WRITE ? DATA_INLINE : DATA_SGE;
    d.npieces = 1;
    d.pieces[0] = {op == OP_WRITE ? 0 : into, len, 0};
    return d;
}

/** Bind a peer window over [off, off+len) of peer region @p r with @p access;
 *  @return the window's new rkey (0 on failure). */
std::uint32_t peer_bind(conn &c, const reg_rep &r, std::uint32_t mw_idx, std::uint64_t off, std::uint64_t len,
                        unsigned access)
{
    wr_desc d;
    d.op = OP_BIND_MW;
    d.wr_id = 4242;
    d.flags = vq::WR_SIGNALED;
    d.imm = mw_idx;
    d.a2 = r.index;
    d.a0 = r.addr + off;
    d.a1 = len;
    d.a3 = access;
    EXPECT_EQ(c.P.post(c.pq.index, {d}), 0);
    auto w = c.P.wait_wcs(c.pq.index, 1);
    EXPECT_EQ(w.size(), 1u);
    if (w.size() != 1)
        return 0;
    EXPECT_EQ(w[0].status, wc_status::success) << wc_str(w[0]);
    EXPECT_EQ(w[0].wr_id, 4242u);
    EXPECT_EQ(w[0].opcode, wc_opcode::bind_mw);
    mw_rep m{};
    EXPECT_EQ(c.P.query_mw(mw_idx, &m), 0);
    return m.rkey;
}

/** One RDMA write of @p len bytes from local region @p src to (rkey, raddr). */
vq::wc write_once(conn &c, int src, std::uint32_t rkey, std::uint64_t raddr, std::uint32_t len, std::uint64_t id)
{
    vq::wr_start(c.qp());
    c.qp()->wr_id = id;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_write(c.qp(), rkey, raddr);
    vq::wr_set_sge(c.qp(), c.L.mr(src)->lkey, c.L.addr(src), len);
    EXPECT_EQ(vq::wr_complete(c.qp()), 0);
    auto w = c.L.wait_wcs(c.lq, 1);
    return w.empty() ? vq::wc{} : w[0];
}

TEST_F(Features, SendInvInvalidatesThePeersWindowBeforeTheReceiveCompletes)
{
    conn c;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::rc, vq::OPS_SEND_WITH_INV | vq::OPS_RDMA_WRITE | vq::OPS_BIND_MW);
    ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_SEND_WITH_INV | vq::OPS_RDMA_WRITE | vq::OPS_SEND), 0);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(16384, acc_mw, false, 21, &r), 0);
    mw_rep mw{};
    ASSERT_EQ(c.P.alloc_mw(&mw), 0);
    std::uint32_t k = peer_bind(c, r, mw.index, 4096, 4096, vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ);
    ASSERT_NE(k, 0u);
    EXPECT_EQ(k, vq::inc_rkey(mw.rkey)) << "the window takes the key given to bind_mw";
    int src = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 22);
    // Through the window: lands.
    vq::wc w = write_once(c, src, k, r.addr + 4096, 4096, 1);
    EXPECT_EQ(w.status, wc_status::success) << wc_str(w);
    auto got = c.P.read_mem(r.index, 4096, 4096);
    EXPECT_EQ(std::memcmp(got.data(), c.L.mem(src), 4096), 0);
    // send_inv names the window; the receive reports it.
    ASSERT_EQ(c.P.post_recv(c.pq.index, 8, {{r.index, 64, 0}}), 0);
    vq::wr_start(c.qp());
    c.qp()->wr_id = 2;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_inv(c.qp(), k);
    vq::wr_set_inline_data(c.qp(), "inv", 3);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto s = c.L.wait_wcs(c.lq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
    EXPECT_EQ(s[0].opcode, wc_opcode::send);
    auto rv = c.P.wait_wcs(c.pq.index, 1);
    ASSERT_EQ(rv.size(), 1u);
    EXPECT_EQ(rv[0].status, wc_status::success) << wc_str(rv[0]);
    EXPECT_EQ(rv[0].opcode, wc_opcode::recv);
    EXPECT_TRUE(rv[0].wc_flags & vq::WC_WITH_INV) << wc_str(rv[0]);
    EXPECT_EQ(rv[0].invalidated_rkey, k);
    EXPECT_EQ(rv[0].byte_len, 3u);
    // The window is dead: a write through it fails and changes nothing.
    auto before = c.P.read_mem(r.index, 0, 16384);
    w = write_once(c, src, k, r.addr + 4096, 64, 3);
    EXPECT_EQ(w.status, wc_status::rem_access_err) << "write through an invalidated window: " << wc_str(w);
    EXPECT_EQ(c.P.read_mem(r.index, 0, 16384), before);
}

TEST_F(Features, SendInvNamingNothingIsRemoteInvalidRequest)
{
    conn c;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::rc, vq::OPS_SEND_WITH_INV);
    ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_SEND_WITH_INV), 0);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(4096, ACC_ALL_REMOTE, false, 21, &r), 0);
    ASSERT_EQ(c.P.post_recv(c.pq.index, 8, {{r.index, 64, 0}}), 0);
    vq::wr_start(c.qp());
    c.qp()->wr_id = 2;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_inv(c.qp(), 0x00fff0ee);
    vq::wr_set_inline_data(c.qp(), "inv", 3);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto rv = c.P.wait_wcs(c.pq.index, 1);
    ASSERT_EQ(rv.size(), 1u);
    EXPECT_EQ(rv[0].status, wc_status::rem_inv_req_err) << wc_str(rv[0]);
    (void)c.L.wait_wcs(c.lq, 1);
}

TEST_F(Features, SendInvOnUcReportsTheInvalidatedKey)
{
    conn c;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::uc, vq::OPS_SEND_WITH_INV | vq::OPS_BIND_MW);
    ASSERT_EQ(c.setup(qp_type::uc, vq::OPS_SEND_WITH_INV), 0);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(16384, acc_mw, true, 21, &r), 0);
    mw_rep mw{};
    ASSERT_EQ(c.P.alloc_mw(&mw), 0);
    std::uint32_t k = peer_bind(c, r, mw.index, 0, 4096, vq::ACCESS_REMOTE_WRITE);
    ASSERT_NE(k, 0u);
    ASSERT_EQ(c.P.post_recv(c.pq.index, 8, {{r.index, 64, 8192}}), 0);
    vq::wr_start(c.qp());
    c.qp()->wr_id = 2;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_inv(c.qp(), k);
    vq::wr_set_inline_data(c.qp(), "uc-inv", 6);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto rv = c.P.wait_wcs(c.pq.index, 1);
    ASSERT_EQ(rv.size(), 1u);
    EXPECT_EQ(rv[0].status, wc_status::success) << wc_str(rv[0]);
    EXPECT_TRUE(rv[0].wc_flags & vq::WC_WITH_INV);
    EXPECT_EQ(rv[0].invalidated_rkey, k);
    auto got = c.P.read_mem(r.index, 8192, 6);
    EXPECT_EQ(std::memcmp(got.data(), "uc-inv", 6), 0);
}

/** The test binds a window on its own region; the peer reads through it. */
TEST_F(Features, BoundWindowAllowsExactlyItsRangeAndAccessAndLocalInvRevokesIt)
{
    conn c;
    constexpr std::uint64_t ops = vq::OPS_BIND_MW | vq::OPS_LOCAL_INV | vq::OPS_SEND;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::rc, ops | vq::OPS_RDMA_READ | vq::OPS_RDMA_WRITE);
    ASSERT_EQ(c.setup(qp_type::rc, ops), 0);
    int reg = c.L.reg(16384, acc_mw, false, 31);
    ASSERT_GE(reg, 0);
    vq::mw *w = nullptr;
    ASSERT_EQ(vq::alloc_mw(c.L.pd, vq::mw_type::type2, &w), 0);
    c.L.o.mws.push_back(w);
    std::uint32_t old = w->rkey, key = vq::inc_rkey(old);
    vq::mw_bind_info bi{c.L.o.mrs[static_cast<std::size_t>(reg)].mr, c.L.addr(reg, 4096), 2048,
                        vq::ACCESS_REMOTE_READ};
    vq::wr_start(c.qp());
    c.qp()->wr_id = 1;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_bind_mw(c.qp(), w, key, &bi);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto b = c.L.wait_wcs(c.lq, 1);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0].status, wc_status::success) << wc_str(b[0]);
    EXPECT_EQ(b[0].opcode, wc_opcode::bind_mw);
    EXPECT_EQ(w->rkey, key) << "window key updated when the bind completed";

    auto peer_op = [&](std::uint8_t op, std::uint64_t raddr, std::uint32_t len, std::uint32_t rkey) {
        wr_desc d;
        d.op = op;
        d.wr_id = 7;
        d.flags = vq::WR_SIGNALED;
        d.rkey = rkey;
        d.raddr = raddr;
        d.data = DATA_SGE;
        d.npieces = 1;
        d.pieces[0] = {0, len, 0}; // the peer's scratch region
        EXPECT_EQ(c.P.post(c.pq.index, {d}), 0);
        auto r = c.P.wait_wcs(c.pq.index, 1);
        return r.empty() ? vq::wc{} : r[0];
    };
    // Read inside the window: the bytes of this process's region.
    vq::wc r = peer_op(OP_READ, c.L.addr(reg, 4096 + 100), 1000, key);
    EXPECT_EQ(r.status, wc_status::success) << wc_str(r);
    EXPECT_EQ(r.byte_len, 1000u);
    std::vector<std::uint8_t> snap(c.L.mem(reg), c.L.mem(reg) + 16384);
    // A read crossing the window's end fails (the region itself continues).
    r = peer_op(OP_READ, c.L.addr(reg, 4096 + 2000), 100, key);
    EXPECT_EQ(r.status, wc_status::rem_access_err) << "read past the window end: " << wc_str(r);
    // The peer's QP is now in ERR: reconnect a fresh pair for the next checks.
    unsigned q2;
    ASSERT_EQ(c.L.create_qp(qp_type::rc, ops, {}, &q2), 0);
    qp_rep p2{};
    ASSERT_EQ(c.P.create_qp(qp_type::rc, vq::OPS_RDMA_READ | vq::OPS_RDMA_WRITE, {}, &p2), 0);
    ASSERT_EQ(c.L.connect(q2, {c.P.addr(), p2.qpn}), 0);
    ASSERT_EQ(c.P.connect(p2.index, vq::get_qp_addr(c.L.qp(q2))), 0);
    c.lq = q2;
    c.pq = p2;
    r = peer_op(OP_WRITE, c.L.addr(reg, 4096), 64, key);
    EXPECT_EQ(r.status, wc_status::rem_access_err) << "write through a read-only window: " << wc_str(r);
    EXPECT_EQ(std::memcmp(snap.data(), c.L.mem(reg), 16384), 0) << "memory changed through a read-only window";
    // New pair again; invalidate locally; reads fail.
    unsigned q3;
    ASSERT_EQ(c.L.create_qp(qp_type::rc, ops, {}, &q3), 0);
    qp_rep p3{};
    ASSERT_EQ(c.P.create_qp(qp_type::rc, vq::OPS_RDMA_READ, {}, &p3), 0);
    ASSERT_EQ(c.L.connect(q3, {c.P.addr(), p3.qpn}), 0);
    ASSERT_EQ(c.P.connect(p3.index, vq::get_qp_addr(c.L.qp(q3))), 0);
    c.lq = q3;
    c.pq = p3;
    vq::wr_start(c.qp());
    c.qp()->wr_id = 9;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_local_inv(c.qp(), key);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto li = c.L.wait_wcs(c.lq, 1);
    ASSERT_EQ(li.size(), 1u);
    EXPECT_EQ(li[0].status, wc_status::success) << wc_str(li[0]);
    EXPECT_EQ(li[0].opcode, wc_opcode::local_inv);
    r = peer_op(OP_READ, c.L.addr(reg, 4096), 64, key);
    EXPECT_EQ(r.status, wc_status::rem_access_err) << "read through an invalidated window: " << wc_str(r);
}

TEST_F(Features, AFailedBindOrInvalidationFlushesEveryLaterRequestUnexecuted)
{
    // A bind or local invalidation that fails completes in error and moves
    // the QP to ERR: the requests after it in the same batch complete as
    // flushed and are never executed, so the peer receives nothing and its
    // memory stays as it was. (These run without a packet: a driver must not
    // let later requests out before the failure is reported.)
    constexpr std::uint64_t ops = vq::OPS_BIND_MW | vq::OPS_LOCAL_INV | vq::OPS_SEND | vq::OPS_RDMA_WRITE;
    for (const qp_type t : {qp_type::rc, qp_type::uc}) {
        for (const bool bind : {true, false}) {
            SCOPED_TRACE(std::string(t == qp_type::rc ? "RC, " : "UC, ") + (bind ? "bind" : "local_inv"));
            conn c;
            CONF_REQUIRE_OPS(c.L.attr, t, ops);
            ASSERT_EQ(c.setup(t, ops), 0);
            reg_rep r{};
            ASSERT_EQ(c.P.reg(4096, ACC_ALL_REMOTE, false, 41, &r), 0);
            ASSERT_EQ(c.P.post_recv(c.pq.index, 8, {{r.index, 64, 0}}), 0);
            const auto before = c.P.read_mem(r.index, 0, 4096);
            int plain = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 42); // no MW_BIND
            ASSERT_GE(plain, 0);
            vq::mw *w = nullptr;
            ASSERT_EQ(vq::alloc_mw(c.L.pd, vq::mw_type::type2, &w), 0);
            c.L.o.mws.push_back(w);
            vq::mw_bind_info bi{c.L.o.mrs[static_cast<std::size_t>(plain)].mr, c.L.addr(plain), 1024,
                                vq::ACCESS_REMOTE_READ};
            vq::wr_start(c.qp());
            c.qp()->wr_id = 1;
            c.qp()->wr_flags = vq::WR_SIGNALED;
            if (bind)
                vq::wr_bind_mw(c.qp(), w, vq::inc_rkey(w->rkey), &bi); // the region lacks MW_BIND
            else
                vq::wr_local_inv(c.qp(), vq::inc_rkey(w->rkey)); // a key nothing has
            c.qp()->wr_id = 2;
            vq::wr_send(c.qp());
            vq::wr_set_inline_data(c.qp(), "late", 4);
            c.qp()->wr_id = 3;
            vq::wr_rdma_write(c.qp(), r.rkey, r.addr + 1024);
            vq::wr_set_inline_data(c.qp(), "later", 5);
            ASSERT_EQ(vq::wr_complete(c.qp()), 0);
            auto l = c.L.wait_wcs(c.lq, 3);
            ASSERT_EQ(l.size(), 3u);
            EXPECT_EQ(l[0].wr_id, 1u);
            EXPECT_NE(l[0].status, wc_status::success) << wc_str(l[0]);
            EXPECT_NE(l[0].status, wc_status::wr_flush_err) << "the failure itself is reported: " << wc_str(l[0]);
            if (bind) {
                EXPECT_EQ(l[0].status, wc_status::mw_bind_err) << wc_str(l[0]);
            }
            for (int i = 1; i < 3; i++) {
                EXPECT_EQ(l[static_cast<std::size_t>(i)].wr_id, static_cast<std::uint64_t>(i + 1));
                EXPECT_EQ(l[static_cast<std::size_t>(i)].status, wc_status::wr_flush_err)
                    << wc_str(l[static_cast<std::size_t>(i)]);
            }
            EXPECT_EQ(vq::get_qp_state(c.qp()), vq::qp_state::err);
            for (const vq::wc &p : c.P.wait_wcs(c.pq.index, 0, 300))
                EXPECT_NE(p.status, wc_status::success) << "the peer received a request that was flushed: "
                                                        << wc_str(p);
            EXPECT_EQ(c.P.read_mem(r.index, 0, 4096), before) << "a flushed write reached the peer's memory";
        }
    }
}

TEST_F(Features, InvalidatingAFreeWindowByItsKeySucceedsAndLeavesItFree)
{
    // Local invalidation names a type-2 window by its key (IBV_WR API(3)).
    // A window that is free (never bound, or invalidated already) and named
    // by its current key has nothing to take away: the request succeeds and
    // the QP goes on (Linux rxe and the mlx5 device do the same), and the
    // key stays dead for remote access.
    constexpr std::uint64_t ops = vq::OPS_BIND_MW | vq::OPS_LOCAL_INV | vq::OPS_SEND;
    for (const qp_type t : {qp_type::rc, qp_type::uc}) {
        SCOPED_TRACE(t == qp_type::rc ? "RC" : "UC");
        conn c;
        CONF_REQUIRE_OPS(c.L.attr, t, ops);
        ASSERT_EQ(c.setup(t, ops), 0);
        int reg = c.L.reg(8192, acc_mw, false, 0);
        ASSERT_GE(reg, 0);
        vq::mw *w = nullptr;
        ASSERT_EQ(vq::alloc_mw(c.L.pd, vq::mw_type::type2, &w), 0);
        c.L.o.mws.push_back(w);
        auto one = [&](std::uint64_t id, auto &&build) {
            vq::wr_start(c.qp());
            c.qp()->wr_id = id;
            c.qp()->wr_flags = vq::WR_SIGNALED;
            build();
            EXPECT_EQ(vq::wr_complete(c.qp()), 0);
            auto l = c.L.wait_wcs(c.lq, 1);
            return l.empty() ? vq::wc{} : l[0];
        };
        const std::uint32_t fresh = w->rkey;
        vq::wc r = one(1, [&] { vq::wr_local_inv(c.qp(), fresh); });
        EXPECT_EQ(r.wr_id, 1u);
        EXPECT_EQ(r.status, wc_status::success) << "a window never bound, by its key: " << wc_str(r);
        ASSERT_EQ(vq::get_qp_state(c.qp()), vq::qp_state::rts);
        const std::uint32_t key = vq::inc_rkey(w->rkey);
        vq::mw_bind_info bi{c.L.o.mrs[static_cast<std::size_t>(reg)].mr, c.L.addr(reg, 1024), 1024,
                            vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_WRITE};
        r = one(2, [&] { vq::wr_bind_mw(c.qp(), w, key, &bi); });
        EXPECT_EQ(r.status, wc_status::success) << wc_str(r);
        EXPECT_EQ(w->rkey, key);
        r = one(3, [&] { vq::wr_local_inv(c.qp(), key); });
        EXPECT_EQ(r.status, wc_status::success) << "a bound window: " << wc_str(r);
        r = one(4, [&] { vq::wr_local_inv(c.qp(), key); });
        EXPECT_EQ(r.status, wc_status::success) << "the same window again, free now: " << wc_str(r);
        ASSERT_EQ(vq::get_qp_state(c.qp()), vq::qp_state::rts);
        // The QP still works, and the key still opens nothing.
        reg_rep pr{};
        ASSERT_EQ(c.P.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 0, &pr), 0);
        ASSERT_EQ(c.P.post_recv(c.pq.index, 8, {{pr.index, 64, 0}}), 0);
        r = one(5, [&] {
            vq::wr_send(c.qp());
            vq::wr_set_inline_data(c.qp(), "after", 5);
        });
        EXPECT_EQ(r.status, wc_status::success) << wc_str(r);
        auto p = c.P.wait_wcs(c.pq.index, 1);
        ASSERT_EQ(p.size(), 1u);
        EXPECT_EQ(p[0].status, wc_status::success) << wc_str(p[0]);
        EXPECT_EQ(p[0].byte_len, 5u);
        if (t == qp_type::rc) {
            std::memset(c.L.mem(reg) + 1024, 0x5c, 16);
            ASSERT_EQ(c.P.post(c.pq.index, {peer_rdma(OP_WRITE, 9, key, c.L.addr(reg, 1024), 16)}), 0);
            auto pw = c.P.wait_wcs(c.pq.index, 1);
            ASSERT_EQ(pw.size(), 1u);
            EXPECT_EQ(pw[0].status, wc_status::rem_access_err) << "a write through the invalidated key: " << wc_str(pw[0]);
            EXPECT_EQ(c.L.mem(reg)[1024], 0x5c) << "a write through an invalidated window landed";
        }
    }
}

TEST_F(Features, SendWithInvalidatePlacesTheMessageBeforeItInvalidates)
{
    // send_inv invalidates the receiver's key "before delivering a
    // completion" (IBV_WR API(3)): after the message is placed, so a message
    // may land in the very region it invalidates (Linux rxe invalidates at
    // completion). shm and ethdev invalidate regions registered with reg_mr;
    // the mlx5 device invalidates only windows and answers a region's key
    // with an invalid request on both sides (doc/guides/vq.md).
    constexpr std::uint64_t ops = vq::OPS_SEND | vq::OPS_SEND_WITH_INV | vq::OPS_RDMA_WRITE;
    conn c;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::rc, ops);
    ASSERT_EQ(c.setup(qp_type::rc, ops), 0);
    reg_rep rb{};
    ASSERT_EQ(c.P.reg(4096, ACC_ALL_REMOTE, false, 0, &rb), 0);
    ASSERT_EQ(c.P.post_recv(c.pq.index, 8, {{rb.index, 64, 0}}), 0);
    int src = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 0x77);
    ASSERT_GE(src, 0);
    const vq::mr *sm = c.L.o.mrs[static_cast<std::size_t>(src)].mr;
    std::memcpy(c.L.mem(src), "into the region it invalidates", 30);
    vq::wr_start(c.qp());
    c.qp()->wr_id = 1;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_inv(c.qp(), rb.rkey);
    vq::wr_set_sge(c.qp(), sm->lkey, c.L.addr(src), 30);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto p = c.P.wait_wcs(c.pq.index, 1);
    auto l = c.L.wait_wcs(c.lq, 1);
    ASSERT_EQ(p.size(), 1u);
    ASSERT_EQ(l.size(), 1u);
    if (std::strncmp(conf_device(), "mlx5", 4) == 0) {
        EXPECT_EQ(p[0].status, wc_status::rem_inv_req_err) << wc_str(p[0]);
        EXPECT_EQ(l[0].status, wc_status::rem_inv_req_err) << wc_str(l[0]);
        return;
    }
    EXPECT_EQ(l[0].status, wc_status::success) << wc_str(l[0]);
    EXPECT_EQ(p[0].status, wc_status::success) << "the message was placed before the invalidation: " << wc_str(p[0]);
    EXPECT_EQ(p[0].byte_len, 30u);
    EXPECT_TRUE(p[0].wc_flags & vq::WC_WITH_INV) << wc_str(p[0]);
    EXPECT_EQ(p[0].invalidated_rkey, rb.rkey);
    const auto got = c.P.read_mem(rb.index, 0, 30);
    EXPECT_EQ(std::string(got.begin(), got.end()), "into the region it invalidates");
    // The key is dead: a write through it fails and changes nothing.
    vq::wr_start(c.qp());
    c.qp()->wr_id = 2;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_write(c.qp(), rb.rkey, rb.addr + 64);
    vq::wr_set_sge(c.qp(), sm->lkey, c.L.addr(src), 16);
    EXPECT_EQ(vq::wr_complete(c.qp()), 0);
    l = c.L.wait_wcs(c.lq, 1);
    ASSERT_EQ(l.size(), 1u);
    EXPECT_EQ(l[0].status, wc_status::rem_access_err) << "a write through the invalidated key: " << wc_str(l[0]);
    EXPECT_EQ(c.P.read_mem(rb.index, 64, 16), std::vector<std::uint8_t>(16, 0));
}

TEST_F(Features, AWindowRebindsWithNextKeysPastTheKeyByteWrapping)
{
    // ibv_inc_rkey (vq::inc_rkey) takes the key byte from 0xff to 0x00: an
    // application that rebinds a window with the next key each time gets
    // every key byte, 0 included, and each bind must work. 300 binds cross
    // the wrap once whatever the first key; the last key opens the window.
    constexpr std::uint64_t ops = vq::OPS_BIND_MW | vq::OPS_SEND;
    conn c;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::rc, ops);
    ASSERT_EQ(c.setup(qp_type::rc, ops), 0);
    int reg = c.L.reg(8192, acc_mw, false, 0x3c);
    ASSERT_GE(reg, 0);
    vq::mw *w = nullptr;
    ASSERT_EQ(vq::alloc_mw(c.L.pd, vq::mw_type::type2, &w), 0);
    c.L.o.mws.push_back(w);
    vq::mw_bind_info bi{c.L.o.mrs[static_cast<std::size_t>(reg)].mr, c.L.addr(reg, 1024), 1024,
                        vq::ACCESS_REMOTE_READ};
    bool wrapped = false;
    for (int i = 0; i < 300; i++) {
        const std::uint32_t key = vq::inc_rkey(w->rkey);
        wrapped |= (key & 0xff) == 0;
        vq::wr_start(c.qp());
        c.qp()->wr_id = static_cast<std::uint64_t>(i);
        c.qp()->wr_flags = vq::WR_SIGNALED;
        vq::wr_bind_mw(c.qp(), w, key, &bi);
        ASSERT_EQ(vq::wr_complete(c.qp()), 0);
        auto l = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(l.size(), 1u);
        ASSERT_EQ(l[0].status, wc_status::success) << "bind " << i << " with key " << std::hex << key << ": "
                                                   << wc_str(l[0]);
        ASSERT_EQ(w->rkey, key);
    }
    EXPECT_TRUE(wrapped);
    reg_rep pr{};
    ASSERT_EQ(c.P.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 0, &pr), 0);
    ASSERT_EQ(c.P.post(c.pq.index, {peer_rdma(OP_READ, 7, w->rkey, c.L.addr(reg, 1024), 64, pr.index)}), 0);
    auto r = c.P.wait_wcs(c.pq.index, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, wc_status::success) << wc_str(r[0]);
    EXPECT_EQ(c.P.read_mem(pr.index, 0, 64), std::vector<std::uint8_t>(c.L.mem(reg) + 1024, c.L.mem(reg) + 1088));
}

TEST_F(Features, AWindowKeepsTheKeyOfItsLastBindThatRan)
{
    // One batch binds a window, fails a bind of another, and binds the first
    // window again (flushed). The window's key is the first bind's: the one
    // the device gave it. (A type-2 window answers only the QP that bound
    // it, now in ERR, so no peer can read through it to show more.)
    conn c;
    constexpr std::uint64_t ops = vq::OPS_BIND_MW | vq::OPS_SEND;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::rc, ops);
    ASSERT_EQ(c.setup(qp_type::rc, ops), 0);
    int reg = c.L.reg(8192, acc_mw, false, 61);
    int plain = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 62); // no MW_BIND
    ASSERT_TRUE(reg >= 0 && plain >= 0);
    vq::mw *w = nullptr, *w2 = nullptr;
    ASSERT_EQ(vq::alloc_mw(c.L.pd, vq::mw_type::type2, &w), 0);
    c.L.o.mws.push_back(w);
    ASSERT_EQ(vq::alloc_mw(c.L.pd, vq::mw_type::type2, &w2), 0);
    c.L.o.mws.push_back(w2);
    const std::uint32_t k1 = vq::inc_rkey(w->rkey), k2 = vq::inc_rkey(k1);
    vq::mw_bind_info good{c.L.o.mrs[static_cast<std::size_t>(reg)].mr, c.L.addr(reg), 4096,
                          vq::ACCESS_REMOTE_READ};
    vq::mw_bind_info bad{c.L.o.mrs[static_cast<std::size_t>(plain)].mr, c.L.addr(plain), 1024,
                         vq::ACCESS_REMOTE_READ};
    vq::wr_start(c.qp());
    c.qp()->wr_flags = vq::WR_SIGNALED;
    c.qp()->wr_id = 1;
    vq::wr_bind_mw(c.qp(), w, k1, &good);
    c.qp()->wr_id = 2;
    vq::wr_bind_mw(c.qp(), w2, vq::inc_rkey(w2->rkey), &bad);
    c.qp()->wr_id = 3;
    vq::wr_bind_mw(c.qp(), w, k2, &good);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto l = c.L.wait_wcs(c.lq, 3);
    ASSERT_EQ(l.size(), 3u);
    EXPECT_EQ(l[0].status, wc_status::success) << wc_str(l[0]);
    EXPECT_EQ(l[1].status, wc_status::mw_bind_err) << wc_str(l[1]);
    EXPECT_EQ(l[2].status, wc_status::wr_flush_err) << wc_str(l[2]);
    EXPECT_EQ(w->rkey, k1) << "the key of the bind that ran";
}

TEST_F(Features, ZeroByteWritesAndReadsNeedNoValidKeyOrAddress)
{
    // IBTA C9-88: the responder checks neither the R_Key nor the address of
    // a zero-byte RDMA write or read. They complete, touch nothing, and the
    // QP stays up; a zero-byte write with immediate still consumes a receive.
    conn c;
    constexpr std::uint64_t ops = vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ | vq::OPS_RDMA_WRITE_WITH_IMM;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::rc, ops);
    ASSERT_EQ(c.setup(qp_type::rc, ops), 0);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(4096, ACC_ALL_REMOTE, false, 51, &r), 0);
    const auto before = c.P.read_mem(r.index, 0, 4096);
    ASSERT_EQ(c.P.post_recv(c.pq.index, 9, {{r.index, 64, 0}}), 0);
    int src = c.L.reg(64, vq::ACCESS_LOCAL_WRITE, false, 52);
    ASSERT_GE(src, 0);
    const std::uint32_t lkey = c.L.mr(src)->lkey;
    constexpr std::uint32_t nokey = 0x00fff0ee; // names nothing on the peer
    vq::qp *q = c.qp();
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    q->wr_id = 1;
    vq::wr_rdma_write(q, nokey, 0);
    vq::wr_set_sge(q, lkey, c.L.addr(src), 0);
    q->wr_id = 2;
    vq::wr_rdma_read(q, nokey, 8);
    vq::wr_set_sge(q, lkey, c.L.addr(src), 0);
    q->wr_id = 3;
    vq::wr_rdma_write_imm(q, nokey, 16, 0xfeed);
    vq::wr_set_sge(q, lkey, c.L.addr(src), 0);
    q->wr_id = 4; // and the QP still works: a real write
    vq::wr_rdma_write(q, r.rkey, r.addr + 100);
    vq::wr_set_sge(q, lkey, c.L.addr(src), 64);
    ASSERT_EQ(vq::wr_complete(q), 0);
    auto l = c.L.wait_wcs(c.lq, 4);
    ASSERT_EQ(l.size(), 4u);
    const wc_opcode want[4] = {wc_opcode::rdma_write, wc_opcode::rdma_read, wc_opcode::rdma_write,
                               wc_opcode::rdma_write};
    for (std::size_t i = 0; i < 4; i++) {
        EXPECT_EQ(l[i].wr_id, i + 1);
        EXPECT_EQ(l[i].status, wc_status::success) << "zero bytes need no key: " << wc_str(l[i]);
        EXPECT_EQ(l[i].opcode, want[i]) << wc_str(l[i]);
    }
    EXPECT_EQ(l[1].byte_len, 0u);
    auto rv = c.P.wait_wcs(c.pq.index, 1);
    ASSERT_EQ(rv.size(), 1u);
    EXPECT_EQ(rv[0].status, wc_status::success) << wc_str(rv[0]);
    EXPECT_EQ(rv[0].opcode, wc_opcode::recv_rdma_with_imm);
    EXPECT_EQ(rv[0].byte_len, 0u);
    EXPECT_EQ(rv[0].imm_data, 0xfeedu);
    auto after = c.P.read_mem(r.index, 0, 4096);
    EXPECT_EQ(std::memcmp(after.data() + 100, c.L.mem(src), 64), 0) << "the real write landed";
    std::memcpy(after.data() + 100, before.data() + 100, 64);
    EXPECT_EQ(after, before) << "the zero-byte operations touched the peer's memory";
    EXPECT_EQ(vq::get_qp_state(q), vq::qp_state::rts);
}

TEST_F(Features, FlushCompletesAfterTheWritesBeforeIt)
{
    conn c;
    constexpr std::uint64_t ops = vq::OPS_RDMA_WRITE | vq::OPS_FLUSH;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::rc, ops);
    ASSERT_EQ(c.setup(qp_type::rc, ops), 0);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(65536, ACC_ALL_REMOTE | vq::ACCESS_FLUSH_GLOBAL, true, 41, &r), 0);
    int src = c.L.reg(65536, vq::ACCESS_LOCAL_WRITE, false, 42);
    vq::wr_start(c.qp());
    for (int i = 0; i < 4; i++) {
        c.qp()->wr_id = static_cast<std::uint64_t>(i);
        c.qp()->wr_flags = 0;
        vq::wr_rdma_write(c.qp(), r.rkey, r.addr + static_cast<std::uint64_t>(i) * 16384);
        vq::wr_set_sge(c.qp(), c.L.mr(src)->lkey, c.L.addr(src, static_cast<std::size_t>(i) * 16384), 16384);
    }
    c.qp()->wr_id = 10;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_flush(c.qp(), r.rkey, r.addr, 65536, vq::FLUSH_GLOBAL, vq::FLUSH_RANGE);
    c.qp()->wr_id = 11;
    vq::wr_flush(c.qp(), r.rkey, r.addr, 0, vq::FLUSH_GLOBAL, vq::FLUSH_MR);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto w = c.L.wait_wcs(c.lq, 2);
    ASSERT_EQ(w.size(), 2u);
    for (auto &x : w) {
        EXPECT_EQ(x.status, wc_status::success) << wc_str(x);
        EXPECT_EQ(x.opcode, wc_opcode::flush);
    }
    EXPECT_EQ(w[0].wr_id, 10u);
    EXPECT_EQ(w[1].wr_id, 11u);
    auto got = c.P.read_mem(r.index, 0, 65536);
    EXPECT_EQ(std::memcmp(got.data(), c.L.mem(src), 65536), 0);
}

TEST_F(Features, FlushWithoutFlushAccessIsRemoteAccessError)
{
    conn c;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::rc, vq::OPS_FLUSH);
    ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_FLUSH), 0);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(4096, ACC_ALL_REMOTE, false, 41, &r), 0);
    vq::wr_start(c.qp());
    c.qp()->wr_id = 10;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_flush(c.qp(), r.rkey, r.addr, 64, vq::FLUSH_GLOBAL, vq::FLUSH_RANGE);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto w = c.L.wait_wcs(c.lq, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, wc_status::rem_access_err) << wc_str(w[0]);
}

/** One flush of [off, off+len) of a fresh peer region with @p access. */
vq::wc flush_once(unsigned access, std::uint8_t type, std::uint8_t level, std::uint64_t off, std::uint64_t len)
{
    conn c;
    if (c.setup(qp_type::rc, vq::OPS_FLUSH) != 0)
        return {};
    reg_rep r{};
    EXPECT_EQ(c.P.reg(4096, access, false, 41, &r), 0);
    vq::wr_start(c.qp());
    c.qp()->wr_id = 10;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_flush(c.qp(), r.rkey, r.addr + off, len, type, level);
    EXPECT_EQ(vq::wr_complete(c.qp()), 0);
    auto w = c.L.wait_wcs(c.lq, 1);
    return w.empty() ? vq::wc{} : w[0];
}

TEST_F(Features, FlushPersistentNeedsFlushPersistentAccess)
{
    local_side probe;
    CONF_REQUIRE_OPS(probe.attr, qp_type::rc, vq::OPS_FLUSH);
    vq::wc w = flush_once(ACC_ALL_REMOTE | vq::ACCESS_FLUSH_PERSISTENT, vq::FLUSH_PERSISTENT, vq::FLUSH_RANGE, 0, 64);
    EXPECT_EQ(w.status, wc_status::success) << wc_str(w);
    EXPECT_EQ(w.opcode, wc_opcode::flush);
    w = flush_once(ACC_ALL_REMOTE | vq::ACCESS_FLUSH_GLOBAL, vq::FLUSH_PERSISTENT, vq::FLUSH_RANGE, 0, 64);
    EXPECT_EQ(w.status, wc_status::rem_access_err) << "persistent flush of a region without FLUSH_PERSISTENT: "
                                                   << wc_str(w);
}

TEST_F(Features, FlushRangeOutsideTheRegionIsRemoteAccessError)
{
    local_side probe;
    CONF_REQUIRE_OPS(probe.attr, qp_type::rc, vq::OPS_FLUSH);
    vq::wc w = flush_once(ACC_ALL_REMOTE | vq::ACCESS_FLUSH_GLOBAL, vq::FLUSH_GLOBAL, vq::FLUSH_RANGE, 4000, 200);
    EXPECT_EQ(w.status, wc_status::rem_access_err) << wc_str(w);
}

/** Bind a window as @p info says on a fresh QP; @return the bind's completion. */
vq::wc bind_once(unsigned mr_access, std::uint64_t off, std::uint64_t len, unsigned mw_access)
{
    conn c;
    if (c.setup(qp_type::rc, vq::OPS_BIND_MW) != 0)
        return {};
    int reg = c.L.reg(8192, mr_access, false, 0);
    vq::mw *w = nullptr;
    EXPECT_EQ(vq::alloc_mw(c.L.pd, vq::mw_type::type2, &w), 0);
    if (!w || reg < 0)
        return {};
    c.L.o.mws.push_back(w);
    std::uint32_t before = w->rkey;
    vq::mw_bind_info bi{c.L.o.mrs[static_cast<std::size_t>(reg)].mr, c.L.addr(reg, off), len, mw_access};
    vq::wr_start(c.qp());
    c.qp()->wr_id = 1;
    c.qp()->wr_flags = 0; // errors complete anyway
    vq::wr_bind_mw(c.qp(), w, vq::inc_rkey(before), &bi);
    EXPECT_EQ(vq::wr_complete(c.qp()), 0);
    auto r = c.L.wait_wcs(c.lq, 1);
    if (r.empty())
        return {};
    EXPECT_EQ(w->rkey, before) << "a failed bind changed the window's key";
    return r[0];
}

TEST_F(Features, BindMwOutsideItsRegionIsMwBindError)
{
    local_side probe;
    CONF_REQUIRE_OPS(probe.attr, qp_type::rc, vq::OPS_BIND_MW);
    vq::wc w = bind_once(acc_mw, 8000, 1000, vq::ACCESS_REMOTE_READ);
    EXPECT_EQ(w.status, wc_status::mw_bind_err) << wc_str(w);
}

TEST_F(Features, BindMwOnARegionWithoutMwBindAccessIsMwBindError)
{
    local_side probe;
    CONF_REQUIRE_OPS(probe.attr, qp_type::rc, vq::OPS_BIND_MW);
    vq::wc w = bind_once(ACC_ALL_REMOTE, 0, 1000, vq::ACCESS_REMOTE_READ);
    EXPECT_EQ(w.status, wc_status::mw_bind_err) << wc_str(w);
}

TEST_F(Features, BindMwRemoteWriteOnARegionWithoutLocalWriteIsMwBindError)
{
    local_side probe;
    CONF_REQUIRE_OPS(probe.attr, qp_type::rc, vq::OPS_BIND_MW);
    vq::wc w = bind_once(vq::ACCESS_REMOTE_READ | vq::ACCESS_MW_BIND, 0, 1000, vq::ACCESS_REMOTE_WRITE);
    EXPECT_EQ(w.status, wc_status::mw_bind_err) << wc_str(w);
}

/* ---- UD: Q_Key, TSO, IP checksums ---- */

TEST_F(Features, UdSendWithAWrongQkeyIsDroppedAtTheReceiver)
{
    conn c;
    ASSERT_EQ(c.setup(qp_type::ud, vq::OPS_SEND), 0);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(8192, vq::ACCESS_LOCAL_WRITE, false, 5, &r), 0);
    int src = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 6);
    ASSERT_EQ(c.P.post_recv(c.pq.index, 1, {{r.index, 4096, 0}}), 0);
    for (std::uint32_t qk : {c.qkey + 1, c.qkey}) {
        vq::wr_start(c.qp());
        c.qp()->wr_id = qk;
        c.qp()->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(c.qp());
        vq::wr_set_sge(c.qp(), c.L.mr(src)->lkey, c.L.addr(src, qk == c.qkey ? 100 : 0), 500);
        vq::wr_set_ud_addr(c.qp(), c.L.o.ahs[c.ah], c.pq.qpn, qk);
        ASSERT_EQ(vq::wr_complete(c.qp()), 0);
        auto s = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(s.size(), 1u);
    }
    auto rv = c.P.wait_wcs(c.pq.index, 1);
    ASSERT_EQ(rv.size(), 1u);
    EXPECT_EQ(rv[0].byte_len, 500u + grh_of(rv[0]));
    auto got = c.P.read_mem(r.index, grh_of(rv[0]), 500);
    EXPECT_EQ(std::memcmp(got.data(), c.L.mem(src) + 100, 500), 0) << "the wrong-Q_Key message was delivered";
    EXPECT_TRUE(c.P.wait_wcs(c.pq.index, 0, 50).empty());
}

std::uint16_t be16(const std::uint8_t *p) { return static_cast<std::uint16_t>((p[0] << 8) | p[1]); }
std::uint32_t be32(const std::uint8_t *p)
{
    return (static_cast<std::uint32_t>(p[0]) << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
}
/** One's-complement sum over @p n bytes (independent of the driver's). */
std::uint32_t ocsum(const std::uint8_t *p, std::size_t n, std::uint32_t s = 0)
{
    for (std::size_t i = 0; i + 1 < n; i += 2)
        s += be16(p + i);
    if (n & 1)
        s += static_cast<std::uint32_t>(p[n - 1]) << 8;
    return s;
}
std::uint16_t ocfold(std::uint32_t s)
{
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return static_cast<std::uint16_t>(s);
}
/** IPv4 header checksum and TCP/UDP checksum of a frame (Ethernet at 0) verify. */
void expect_checksums_valid(const std::uint8_t *f, std::size_t len, const char *what)
{
    const std::uint8_t *ip = f + 14;
    std::size_t ihl = (ip[0] & 0xf) * 4u;
    EXPECT_EQ(ocfold(ocsum(ip, ihl)), 0xffff) << what << ": IPv4 header checksum";
    std::size_t tot = be16(ip + 2);
    ASSERT_LE(14 + tot, len) << what;
    std::uint32_t ps = ocsum(ip + 12, 8) + ip[9] + static_cast<std::uint32_t>(tot - ihl);
    EXPECT_EQ(ocfold(ocsum(ip + ihl, tot - ihl, ps)), 0xffff) << what << ": L4 checksum (proto " << unsigned(ip[9]) << ")";
}
/** Ethernet + IPv4 + TCP (or UDP) header with zero checksums. */
std::vector<std::uint8_t> make_header(bool tcp, std::uint16_t ip_id, std::uint32_t seq, std::size_t payload)
{
    std::vector<std::uint8_t> h(14 + 20 + (tcp ? 20 : 8), 0);
    for (int i = 0; i < 12; i++)
        h[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(0x10 + i);
    h[12] = 0x08;
    std::uint8_t *ip = h.data() + 14;
    ip[0] = 0x45;
    std::size_t tot = 20 + (tcp ? 20 : 8) + payload;
    ip[2] = static_cast<std::uint8_t>(tot >> 8);
    ip[3] = static_cast<std::uint8_t>(tot);
    ip[4] = static_cast<std::uint8_t>(ip_id >> 8);
    ip[5] = static_cast<std::uint8_t>(ip_id);
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = tcp ? 6 : 17;
    const std::uint8_t addrs[8] = {10, 0, 0, 1, 10, 0, 0, 2};
    std::memcpy(ip + 12, addrs, 8);
    std::uint8_t *l4 = ip + 20;
    l4[0] = 0x30, l4[1] = 0x39, l4[2] = 0x01, l4[3] = 0xbb;
    if (tcp) {
        l4[4] = static_cast<std::uint8_t>(seq >> 24), l4[5] = static_cast<std::uint8_t>(seq >> 16);
        l4[6] = static_cast<std::uint8_t>(seq >> 8), l4[7] = static_cast<std::uint8_t>(seq);
        l4[12] = 0x50;
        l4[13] = 0x19; // ACK | PSH | FIN
        l4[14] = 0xff, l4[15] = 0xff;
    } else {
        std::size_t ul = 8 + payload;
        l4[4] = static_cast<std::uint8_t>(ul >> 8), l4[5] = static_cast<std::uint8_t>(ul);
    }
    return h;
}

TEST_F(Features, TsoCutsThePayloadIntoMssSegmentsEachWithAFixedUpHeader)
{
    conn c;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::ud, vq::OPS_TSO);
    ASSERT_EQ(c.setup(qp_type::ud, vq::OPS_SEND | vq::OPS_TSO, {0, 0, 4, 1, 0}, 0, {0, 512, 1, 1, 0}), 0);
    const std::uint32_t mtu = c.L.attr.ud_mtu;
    const std::uint32_t g = ud_grh_bytes(c.P.attr()), stride = mtu + g; // receives hold the GRH area too
    reg_rep r{};
    ASSERT_EQ(c.P.reg(static_cast<std::size_t>(stride) * 512, vq::ACCESS_LOCAL_WRITE, true, 0, &r), 0);
    int src = c.L.reg(1 << 20, vq::ACCESS_LOCAL_WRITE, false, rnd(1, 1u << 30));
    for (int it = 0; it < 6 && !HasFailure(); it++) {
        std::uint32_t payload = static_cast<std::uint32_t>(rnd(1, 200000));
        auto h0 = make_header(true, 0, 0, 0);
        std::uint16_t mss = static_cast<std::uint16_t>(rnd(64, mtu - h0.size()));
        std::uint32_t nseg = (payload + mss - 1) / mss;
        if (nseg > 512) {
            mss = static_cast<std::uint16_t>(mtu - h0.size());
            nseg = (payload + mss - 1) / mss;
        }
        std::uint16_t id = static_cast<std::uint16_t>(rnd(0, 0xffff));
        std::uint32_t seq = static_cast<std::uint32_t>(rnd(0, 0xffffffffu));
        auto hdr = make_header(true, id, seq, payload);
        SCOPED_TRACE("payload " + std::to_string(payload) + " mss " + std::to_string(mss));
        for (std::uint32_t i = 0; i < nseg; i++)
            ASSERT_EQ(c.P.post_recv(c.pq.index, i, {{r.index, stride, static_cast<std::uint64_t>(i) * stride}}), 0);
        auto sp = random_pieces(rng, static_cast<std::uint32_t>(src), 1 << 20, payload,
                                static_cast<unsigned>(rnd(1, c.qp()->cap.max_send_sge)));
        auto bytes = gather(c.L.mem(src), sp);
        std::vector<vq::sge> sg;
        for (auto &p : sp)
            sg.push_back({c.L.addr(src, p.off), p.len, c.L.mr(src)->lkey});
        vq::wr_start(c.qp());
        c.qp()->wr_id = 99;
        c.qp()->wr_flags = vq::WR_SIGNALED;
        vq::wr_send_tso(c.qp(), hdr.data(), static_cast<std::uint16_t>(hdr.size()), mss);
        vq::wr_set_sge_list(c.qp(), sg.size(), sg.data());
        vq::wr_set_ud_addr(c.qp(), c.L.o.ahs[c.ah], c.pq.qpn, c.qkey);
        std::memset(hdr.data(), 0xee, hdr.size()); // copied during the call
        ASSERT_EQ(vq::wr_complete(c.qp()), 0);
        auto s = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
        EXPECT_EQ(s[0].opcode, wc_opcode::tso);
        auto rv = c.P.wait_wcs(c.pq.index, nseg);
        ASSERT_EQ(rv.size(), nseg) << "one receive completion per segment";
        auto mem = c.P.read_mem(r.index, 0, static_cast<std::uint64_t>(nseg) * stride);
        for (std::uint32_t i = 0; i < nseg && !HasFailure(); i++) {
            std::uint32_t seg = std::min<std::uint32_t>(mss, payload - i * mss);
            EXPECT_EQ(rv[i].wr_id, i);
            EXPECT_EQ(rv[i].status, wc_status::success) << wc_str(rv[i]);
            EXPECT_EQ(rv[i].byte_len, h0.size() + seg + g);
            const std::uint8_t *f = mem.data() + static_cast<std::size_t>(i) * stride + g;
            EXPECT_EQ(std::memcmp(f, make_header(true, 0, 0, 0).data(), 14), 0) << "Ethernet header copied";
            const std::uint8_t *ip = f + 14, *tcp = ip + 20;
            EXPECT_EQ(be16(ip + 2), 40 + seg) << "segment " << i << ": IPv4 total length";
            EXPECT_EQ(be16(ip + 4), static_cast<std::uint16_t>(id + i)) << "segment " << i << ": IPv4 id";
            EXPECT_EQ(be32(tcp + 4), seq + i * mss) << "segment " << i << ": TCP sequence";
            EXPECT_EQ(tcp[13], i + 1 == nseg ? 0x19 : 0x10) << "segment " << i << ": FIN/PSH only on the last";
            expect_checksums_valid(f, h0.size() + seg, "TSO segment");
            EXPECT_EQ(std::memcmp(f + h0.size(), bytes.data() + static_cast<std::size_t>(i) * mss, seg), 0)
                << "segment " << i << " payload";
        }
    }
}

TEST_F(Features, IpCsumFillsIpv4AndUdpTcpChecksumsOfUdSends)
{
    conn c;
    ASSERT_EQ(c.setup(qp_type::ud, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM, {0, 0, 4, 1, 512}), 0);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(4 * 4096, vq::ACCESS_LOCAL_WRITE, false, 0, &r), 0);
    int src = c.L.reg(8192, vq::ACCESS_LOCAL_WRITE, false, 61);
    for (int it = 0; it < 8 && !HasFailure(); it++) {
        bool tcp = it % 2;
        // Up to 1400 bytes, as the UD MTU allows.
        std::uint32_t payload = static_cast<std::uint32_t>(rnd(0, std::min<std::uint32_t>(1400, c.L.attr.ud_mtu - 54)));
        auto hdr = make_header(tcp, static_cast<std::uint16_t>(it), 1000, payload);
        std::vector<std::uint8_t> frame(hdr);
        frame.insert(frame.end(), c.L.mem(src), c.L.mem(src) + payload);
        ASSERT_EQ(c.P.post_recv(c.pq.index, static_cast<std::uint64_t>(it), {{r.index, 4096, 0}}), 0);
        vq::wr_start(c.qp());
        c.qp()->wr_id = static_cast<std::uint64_t>(it);
        c.qp()->wr_flags = vq::WR_SIGNALED | vq::WR_IP_CSUM;
        vq::wr_send(c.qp());
        if (it < 4) {
            vq::data_buf b[2] = {{hdr.data(), hdr.size()}, {c.L.mem(src), payload}};
            vq::wr_set_inline_data_list(c.qp(), frame.size() <= c.qp()->cap.max_inline_data ? 2 : 0, b);
            if (frame.size() > c.qp()->cap.max_inline_data) {
                vq::wr_abort(c.qp());
                continue;
            }
        } else {
            int h = c.L.reg(hdr.size(), vq::ACCESS_LOCAL_WRITE);
            std::memcpy(c.L.mem(h), hdr.data(), hdr.size());
            vq::sge sg[2] = {{c.L.addr(h), static_cast<std::uint32_t>(hdr.size()), c.L.mr(h)->lkey},
                             {c.L.addr(src), payload, c.L.mr(src)->lkey}};
            vq::wr_set_sge_list(c.qp(), payload ? 2 : 1, sg);
        }
        vq::wr_set_ud_addr(c.qp(), c.L.o.ahs[c.ah], c.pq.qpn, c.qkey);
        int wrc = vq::wr_complete(c.qp());
        if (wrc == -FI_EOPNOTSUPP)
            GTEST_SKIP() << "no checksum offload on UD QPs (WR_IP_CSUM: -FI_EOPNOTSUPP)";
        ASSERT_EQ(wrc, 0);
        auto s = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
        auto rv = c.P.wait_wcs(c.pq.index, 1);
        ASSERT_EQ(rv.size(), 1u);
        EXPECT_EQ(rv[0].byte_len, frame.size() + grh_of(rv[0]));
        auto got = c.P.read_mem(r.index, grh_of(rv[0]), frame.size());
        expect_checksums_valid(got.data(), got.size(), tcp ? "TCP" : "UDP");
        // Everything but the checksum fields is as sent.
        std::vector<std::uint8_t> a(got), b(frame);
        for (auto *v : {&a, &b}) {
            (*v)[14 + 10] = (*v)[14 + 11] = 0;
            std::size_t cs = 14 + 20 + (tcp ? 16 : 6);
            (*v)[cs] = (*v)[cs + 1] = 0;
        }
        EXPECT_EQ(a, b) << "bytes other than checksums changed";
    }
}

TEST_F(Features, IpCsumLeavesANonIpMessageAlone)
{
    conn c;
    ASSERT_EQ(c.setup(qp_type::ud, vq::OPS_SEND), 0);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 0, &r), 0);
    int src = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 62);
    c.L.mem(src)[12] = 0x86; // EtherType IPv6: not ours to touch
    c.L.mem(src)[13] = 0xdd;
    c.L.mem(src)[0] = 0x60;
    ASSERT_EQ(c.P.post_recv(c.pq.index, 1, {{r.index, 4096, 0}}), 0);
    vq::wr_start(c.qp());
    c.qp()->wr_id = 1;
    c.qp()->wr_flags = vq::WR_SIGNALED | vq::WR_IP_CSUM;
    vq::wr_send(c.qp());
    vq::wr_set_sge(c.qp(), c.L.mr(src)->lkey, c.L.addr(src), 300);
    vq::wr_set_ud_addr(c.qp(), c.L.o.ahs[c.ah], c.pq.qpn, c.qkey);
    int wrc = vq::wr_complete(c.qp());
    if (wrc == -FI_EOPNOTSUPP)
        GTEST_SKIP() << "no checksum offload on UD QPs (WR_IP_CSUM: -FI_EOPNOTSUPP)";
    ASSERT_EQ(wrc, 0);
    ASSERT_EQ(c.L.wait_wcs(c.lq, 1).size(), 1u);
    auto rw = c.P.wait_wcs(c.pq.index, 1);
    ASSERT_EQ(rw.size(), 1u);
    auto got = c.P.read_mem(r.index, grh_of(rw[0]), 300);
    EXPECT_EQ(std::memcmp(got.data(), c.L.mem(src), 300), 0);
}

/* ---- Shared receive queue ---- */

TEST_F(Features, TwoQpsOnOneSrqConsumeItsReceivesInArrivalOrder)
{
    local_side L;
    peer_proc P(&L);
    ASSERT_TRUE(L.ok && P.ok());
    std::uint32_t srq = 0;
    ASSERT_EQ(P.create_srq(64, 4, &srq), 0);
    qp_rep pa{}, pb{};
    ASSERT_EQ(P.create_qp(qp_type::rc, vq::OPS_SEND, {}, &pa, static_cast<int>(srq)), 0);
    ASSERT_EQ(P.create_qp(qp_type::rc, vq::OPS_SEND, {}, &pb, static_cast<int>(srq)), 0);
    unsigned qa, qb;
    ASSERT_EQ(L.create_qp(qp_type::rc, vq::OPS_SEND, {0, 0, 1, 1, 64}, &qa), 0);
    ASSERT_EQ(L.create_qp(qp_type::rc, vq::OPS_SEND, {0, 0, 1, 1, 64}, &qb), 0);
    ASSERT_EQ(L.connect(qa, {P.addr(), pa.qpn}), 0);
    ASSERT_EQ(L.connect(qb, {P.addr(), pb.qpn}), 0);
    ASSERT_EQ(P.connect(pa.index, vq::get_qp_addr(L.qp(qa))), 0);
    ASSERT_EQ(P.connect(pb.index, vq::get_qp_addr(L.qp(qb))), 0);
    reg_rep r{};
    ASSERT_EQ(P.reg(64 * 1024, vq::ACCESS_LOCAL_WRITE, false, 0, &r), 0);
    int src = L.reg(64 * 1024, vq::ACCESS_LOCAL_WRITE, false, 71);
    const int n = 40;
    std::vector<std::vector<piece>> rps;
    for (int i = 0; i < n; i++) {
        auto rp = random_pieces(rng, r.index, 1024, 1000, static_cast<unsigned>(rnd(1, 4)));
        for (auto &p : rp)
            p.off += static_cast<std::uint64_t>(i) * 1024;
        rps.push_back(rp);
        ASSERT_EQ(P.post_recv(srq, 1000 + static_cast<std::uint64_t>(i), rp, true), 0);
    }
    // Alternate senders; each message is received before the next is sent, so the
    // order in which the SRQ's receives are consumed is known.
    std::vector<vq::wc> all;
    for (int i = 0; i < n; i++) {
        bool b = i % 3 == 0;
        unsigned q = b ? qb : qa;
        ASSERT_EQ(vq::post_send(L.qp(q), static_cast<std::uint64_t>(i), L.mem(src) + i * 1000, 1000,
                                L.mr(src)->lkey, vq::WR_SIGNALED),
                  0);
        ASSERT_EQ(L.wait_wcs(q, 1).size(), 1u);
        auto w = P.wait_wcs(b ? pb.index : pa.index, 1);
        ASSERT_EQ(w.size(), 1u) << "message " << i << " not received on the QP it was sent to";
        all.push_back(w[0]);
    }
    EXPECT_TRUE(P.wait_wcs(pa.index, 0, 20).empty());
    EXPECT_TRUE(P.wait_wcs(pb.index, 0, 20).empty());
    auto mem = P.read_mem(r.index, 0, 64 * 1024);
    for (int i = 0; i < n; i++) {
        const vq::wc &w = all[static_cast<std::size_t>(i)];
        EXPECT_EQ(w.wr_id, 1000u + static_cast<unsigned>(i)) << "SRQ receives not consumed in arrival order";
        EXPECT_EQ(w.status, wc_status::success) << wc_str(w);
        EXPECT_EQ(w.byte_len, 1000u);
        std::uint32_t want_qp = i % 3 == 0 ? pb.qpn : pa.qpn;
        EXPECT_EQ(w.qp_num, want_qp) << "receive " << i << " reports the wrong QP";
        EXPECT_EQ(w.src_qp, L.qp(i % 3 == 0 ? qb : qa)->qp_num);
    }
    // Data: receive i (random pieces in its own 1 KiB slot) holds message i.
    for (int i = 0; i < n; i++) {
        auto got = gather(mem.data(), rps[static_cast<std::size_t>(i)]);
        EXPECT_EQ(std::memcmp(got.data(), L.mem(src) + i * 1000, 1000), 0) << "receive " << i << " data";
    }
}

TEST_F(Features, ReceiveQueueLimitsAreEnforcedAtPostRecv)
{
    local_side L;
    ASSERT_TRUE(L.ok);
    unsigned q;
    ASSERT_EQ(L.create_qp(qp_type::rc, vq::OPS_SEND, {0, 8, 1, 2, 0}, &q), 0);
    vq::qp_attr a;
    a.state = vq::qp_state::init;
    ASSERT_EQ(vq::modify_qp(L.qp(q), &a, vq::QP_ATTR_STATE), 0);
    int m = L.reg(4096, vq::ACCESS_LOCAL_WRITE);
    std::uint32_t depth = L.qp(q)->cap.max_recv_wr, sges = L.qp(q)->cap.max_recv_sge;
    ASSERT_GE(depth, 8u);
    ASSERT_GE(sges, 2u);
    std::vector<vq::sge> s(sges + 1, vq::sge{L.addr(m), 8, L.mr(m)->lkey});
    EXPECT_EQ(vq::post_recv(L.qp(q), 1, s.data(), sges + 1), -FI_E2BIG);
    EXPECT_EQ(vq::post_recv(L.qp(q), 1, nullptr, 2), -FI_EINVAL);
    for (std::uint32_t i = 0; i < depth; i++)
        ASSERT_EQ(vq::post_recv(L.qp(q), i, s.data(), sges), 0) << i;
    EXPECT_EQ(vq::post_recv(L.qp(q), 99, s.data(), 1), -FI_EAGAIN) << "receive queue of " << depth << " overfilled";
}

/* ---- Receive side read through the iterator poll form ---- */

TEST_F(Features, IteratorPollFormReadsEveryReceiveField)
{
    conn c;
    ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_SEND, {0, 64, 1, 2, 0}), 0);
    // Only the loop below reads this CQ. (Over a wire the local side polls
    // while it waits for the peer's reply to the post, and that polling took
    // all twelve receives before start_poll saw them.)
    c.L.qps[c.lq].self_polled = true;
    reg_rep src{};
    ASSERT_EQ(c.P.reg(8192, vq::ACCESS_LOCAL_WRITE, false, 123, &src), 0);
    int rx = c.L.reg(16 * 1024, vq::ACCESS_LOCAL_WRITE);
    constexpr int n = 12;
    for (int i = 0; i < n; i++) {
        vq::sge s[2] = {{c.L.addr(rx, static_cast<std::size_t>(i) * 1024), 100, c.L.mr(rx)->lkey},
                        {c.L.addr(rx, static_cast<std::size_t>(i) * 1024 + 200), 500, c.L.mr(rx)->lkey}};
        ASSERT_EQ(vq::post_recv(c.qp(), 50 + static_cast<std::uint64_t>(i), s, 2), 0);
    }
    std::vector<wr_desc> ds;
    for (int i = 0; i < n; i++) {
        wr_desc d;
        d.wr_id = static_cast<std::uint64_t>(i);
        d.op = i % 2 ? OP_SEND_IMM : OP_SEND;
        d.imm = 0xa0000000u + static_cast<std::uint32_t>(i);
        d.flags = i % 3 == 0 ? vq::WR_SOLICITED : 0;
        d.data = DATA_SGE;
        d.npieces = 1;
        d.pieces[0] = {src.index, static_cast<std::uint32_t>(10 * i + 1), static_cast<std::uint64_t>(i) * 300};
        ds.push_back(d);
    }
    ASSERT_EQ(c.P.post(c.pq.index, ds), 0);
    vq::cq *cq = c.L.qps[c.lq].cq;
    int seen = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (seen < n && std::chrono::steady_clock::now() < end) {
        if (vq::start_poll(cq) != 0) {
            sched_yield();
            continue;
        }
        do {
            int i = seen++;
            SCOPED_TRACE("receive " + std::to_string(i));
            EXPECT_EQ(cq->wr_id, 50u + static_cast<unsigned>(i));
            EXPECT_EQ(cq->status, wc_status::success);
            EXPECT_EQ(vq::read_opcode(cq), wc_opcode::recv);
            EXPECT_EQ(vq::read_byte_len(cq), static_cast<std::uint32_t>(10 * i + 1));
            EXPECT_EQ(vq::read_qp_num(cq), c.qp()->qp_num);
            EXPECT_EQ(vq::read_src_qp(cq), c.pq.qpn);
            unsigned fl = vq::read_wc_flags(cq);
            EXPECT_EQ(bool(fl & vq::WC_WITH_IMM), i % 2 == 1);
            EXPECT_EQ(bool(fl & vq::WC_SOLICITED), i % 3 == 0);
            EXPECT_FALSE(fl & vq::WC_WITH_INV);
            if (i % 2) {
                EXPECT_EQ(vq::read_imm_data(cq), 0xa0000000u + static_cast<std::uint32_t>(i));
            }
        } while (vq::next_poll(cq) == 0);
        vq::end_poll(cq);
    }
    ASSERT_EQ(seen, n) << "timed out (10 s) polling receives with start_poll (" << c.L.qps[c.lq].wcs.size()
                       << " taken by the harness's plain polls)";
    std::vector<std::uint8_t> pat(8192);
    fill_pattern(pat.data(), pat.size(), 123);
    for (int i = 0; i < n; i++) {
        std::uint32_t len = static_cast<std::uint32_t>(10 * i + 1);
        std::vector<std::uint8_t> got(c.L.mem(rx) + i * 1024, c.L.mem(rx) + i * 1024 + std::min<std::uint32_t>(len, 100));
        if (len > 100)
            got.insert(got.end(), c.L.mem(rx) + i * 1024 + 200, c.L.mem(rx) + i * 1024 + 200 + (len - 100));
        EXPECT_EQ(std::memcmp(got.data(), pat.data() + i * 300, len), 0) << "receive " << i << " data";
    }
    auto sw = c.P.wait_wcs(c.pq.index, 0, 50);
    EXPECT_TRUE(sw.empty()) << "unsignaled sends completed at the sender";
}

TEST_F(Features, SingleCallPostSendOnUdIsInvalid)
{
    conn c;
    ASSERT_EQ(c.setup(qp_type::ud, vq::OPS_SEND), 0);
    int m = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE);
    EXPECT_EQ(vq::post_send(c.qp(), 1, c.L.mem(m), 8, c.L.mr(m)->lkey, vq::WR_SIGNALED), -FI_EINVAL);
    EXPECT_TRUE(c.L.drain(c.lq, 30).empty());
}

TEST_F(Features, UdSendsToANonexistentQpNumberCompleteAndDoNotHang)
{
    conn c;
    ASSERT_EQ(c.setup(qp_type::ud, vq::OPS_SEND), 0);
    int m = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 3);
    for (int i = 0; i < 20; i++) {
        vq::wr_start(c.qp());
        c.qp()->wr_id = static_cast<std::uint64_t>(i);
        c.qp()->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(c.qp());
        vq::wr_set_sge(c.qp(), c.L.mr(m)->lkey, c.L.addr(m), 1000);
        vq::wr_set_ud_addr(c.qp(), c.L.o.ahs[c.ah], c.pq.qpn + 777, c.qkey);
        ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    }
    auto w = c.L.wait_wcs(c.lq, 20, 10000);
    ASSERT_EQ(w.size(), 20u) << "UD sends to a QP number that does not exist never completed";
    EXPECT_EQ(vq::get_qp_state(c.qp()), vq::qp_state::rts);
    EXPECT_TRUE(c.P.wait_wcs(c.pq.index, 0, 30).empty()) << "delivered to the wrong QP";
}

TEST_F(Features, TwoPeerProcessesSendingToOneUdQpDeliverEveryMessageOnce)
{
    CONF_REQUIRE_PEERS(2);
    local_side L;
    peer_proc A(&L), B(&L);
    ASSERT_TRUE(L.ok && A.ok() && B.ok());
    const std::uint32_t qkey = 0x77;
    unsigned lq;
    ASSERT_EQ(L.create_qp(qp_type::ud, vq::OPS_SEND, {0, 1024, 1, 1, 0}, &lq), 0);
    ASSERT_EQ(L.connect(lq, {}, qkey), 0);
    constexpr std::uint32_t per = 300, msg = 200;
    const int nrx = 512;
    int rx = L.reg(static_cast<std::size_t>(nrx) * 256, vq::ACCESS_LOCAL_WRITE);
    for (int i = 0; i < nrx; i++)
        ASSERT_EQ(vq::post_recv(L.qp(lq), static_cast<std::uint64_t>(i), L.addr(rx, static_cast<std::size_t>(i) * 256),
                                256, L.mr(rx)->lkey),
                  0);
    struct sender {
        peer_proc *p;
        qp_rep q{};
        reg_rep r{};
        std::uint32_t ah = 0;
    } snd[2] = {{&A, {}, {}, 0}, {&B, {}, {}, 0}};
    // QP numbers are per context: make B's differ from A's so src_qp tells them apart.
    qp_rep dummy{};
    ASSERT_EQ(B.create_qp(qp_type::ud, vq::OPS_SEND, {}, &dummy), 0);
    std::vector<std::uint8_t> content[2];
    for (std::uint32_t k = 0; k < 2; k++) {
        auto &s = snd[k];
        ASSERT_EQ(s.p->create_qp(qp_type::ud, vq::OPS_SEND, {64, 0, 1, 1, 0}, &s.q), 0);
        ASSERT_EQ(s.p->connect(s.q.index, {}, qkey), 0);
        ASSERT_EQ(s.p->reg(per * msg, vq::ACCESS_LOCAL_WRITE, false, 1000 + k, &s.r), 0);
        ASSERT_EQ(s.p->create_ah(L.ctx->addr, &s.ah), 0);
        // Message i of sender k starts with (k, i).
        content[k].resize(per * msg);
        fill_pattern(content[k].data(), content[k].size(), 1000 + k);
        for (std::uint32_t i = 0; i < per; i++) {
            std::memcpy(&content[k][i * msg], &k, 4);
            std::memcpy(&content[k][i * msg + 4], &i, 4);
        }
        ASSERT_EQ(s.p->write_mem(s.r.index, 0, content[k].data(), content[k].size()), 0);
    }
    ASSERT_NE(snd[0].q.qpn, snd[1].q.qpn);
    std::uint32_t next[2] = {0, 0}, got[2] = {0, 0};
    std::vector<std::vector<bool>> seen(2, std::vector<bool>(per, false));
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((got[0] < per || got[1] < per) && std::chrono::steady_clock::now() < end) {
        for (std::uint32_t k = 0; k < 2; k++) {
            // At most 48 undelivered on a 64-deep send queue: a UD send may stay
            // queued until the receiving port has taken it, and a delivered batch
            // holds its slots until the sender has polled its signaled completion
            // (a full queue refuses the batch whole: it is posted again later).
            if (next[k] >= per || next[k] - got[k] > 32)
                continue;
            const std::uint32_t first = next[k];
            std::vector<wr_desc> ds;
            for (int j = 0; j < 16 && next[k] < per; j++, next[k]++) {
                wr_desc d;
                d.wr_id = next[k];
                d.op = OP_SEND;
                d.flags = j == 15 ? vq::WR_SIGNALED : 0;
                d.data = DATA_SGE;
                d.npieces = 1;
                d.pieces[0] = {snd[k].r.index, msg, static_cast<std::uint64_t>(next[k]) * msg};
                d.ud_ah = snd[k].ah;
                d.ud_qpn = L.qp(lq)->qp_num;
                d.ud_qkey = qkey;
                ds.push_back(d);
            }
            int rc = snd[k].p->post(snd[k].q.index, ds);
            if (rc == -FI_EAGAIN)
                next[k] = first;
            else
                ASSERT_EQ(rc, 0);
        }
        L.pump();
        auto &dq = L.qps[lq].wcs;
        while (!dq.empty()) {
            vq::wc w = dq.front();
            dq.pop_front();
            ASSERT_EQ(w.status, wc_status::success) << wc_str(w);
            ASSERT_EQ(w.byte_len, msg + grh_of(w));
            const std::uint8_t *m = L.mem(rx) + w.wr_id * 256 + grh_of(w);
            std::uint32_t k, i;
            std::memcpy(&k, m, 4);
            std::memcpy(&i, m + 4, 4);
            ASSERT_TRUE(k < 2 && i < per) << "garbage message";
            EXPECT_EQ(w.src_qp, snd[k].q.qpn) << "src_qp of sender " << k;
            EXPECT_FALSE(seen[k][i]) << "sender " << k << " message " << i << " delivered twice";
            seen[k][i] = true;
            EXPECT_EQ(std::memcmp(m, &content[k][i * msg], msg), 0) << "sender " << k << " message " << i << " corrupt";
            got[k]++;
            ASSERT_EQ(vq::post_recv(L.qp(lq), w.wr_id, L.addr(rx, w.wr_id * 256), 256, L.mr(rx)->lkey), 0);
        }
    }
    EXPECT_EQ(got[0], per) << "messages of sender A lost (receives were always available)";
    EXPECT_EQ(got[1], per) << "messages of sender B lost (receives were always available)";
}

TEST_F(Features, SgeListsOfExactlyTheDeviceMaximumWork)
{
    conn c;
    ASSERT_TRUE(c.L.ok);
    const std::uint32_t ms = c.L.attr.max_sge;
    ASSERT_GE(ms, 2u);
    ASSERT_LE(ms, max_desc_sge) << "the suite's descriptions hold at most 32 pieces";
    ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_SEND | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ, {0, 0, ms, ms, 0}, 0,
                      {0, 0, 1, ms, 0}),
              0);
    ASSERT_EQ(c.qp()->cap.max_send_sge, ms);
    ASSERT_EQ(c.pq.cap.max_recv_sge, ms);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(65536, ACC_ALL_REMOTE, false, 0, &r), 0);
    int src = c.L.reg(65536, vq::ACCESS_LOCAL_WRITE, false, 111);
    int dst = c.L.reg(65536, vq::ACCESS_LOCAL_WRITE);
    const std::uint32_t len = ms * 97;
    auto sp = random_pieces(rng, static_cast<std::uint32_t>(src), 65536, len, ms);
    ASSERT_EQ(sp.size(), ms);
    auto bytes = gather(c.L.mem(src), sp);
    // Send: ms SGEs into a receive of ms SGEs.
    auto rp = random_pieces(rng, r.index, 32768, len, ms);
    ASSERT_EQ(c.P.post_recv(c.pq.index, 1, rp), 0);
    wr_desc d;
    d.op = OP_SEND;
    d.wr_id = 1;
    d.flags = vq::WR_SIGNALED;
    d.data = DATA_SGE_LIST;
    d.npieces = static_cast<std::uint16_t>(ms);
    std::copy(sp.begin(), sp.end(), d.pieces);
    wr_desc wr = d;
    wr.op = OP_WRITE;
    wr.wr_id = 2;
    wr.rkey = r.rkey;
    wr.raddr = r.addr + 40000;
    wr_desc rd = d;
    rd.op = OP_READ;
    rd.wr_id = 3;
    rd.rkey = r.rkey;
    rd.raddr = r.addr + 40000;
    auto dp = random_pieces(rng, static_cast<std::uint32_t>(dst), 65536, len, ms);
    std::copy(dp.begin(), dp.end(), rd.pieces);
    ASSERT_EQ(c.L.post(c.lq, {d, wr, rd}), 0);
    auto w = c.L.wait_wcs(c.lq, 3);
    ASSERT_EQ(w.size(), 3u);
    for (auto &x : w)
        EXPECT_EQ(x.status, wc_status::success) << wc_str(x);
    auto rv = c.P.wait_wcs(c.pq.index, 1);
    ASSERT_EQ(rv.size(), 1u);
    EXPECT_EQ(rv[0].byte_len, len);
    auto mem = c.P.read_mem(r.index, 0, 65536);
    EXPECT_EQ(gather(mem.data(), rp), bytes) << "send scattered over the maximum receive SGEs";
    EXPECT_EQ(std::memcmp(mem.data() + 40000, bytes.data(), len), 0) << "write gathered from the maximum SGEs";
    EXPECT_EQ(gather(c.L.mem(dst), dp), bytes) << "read scattered into the maximum SGEs";
}

TEST_F(Features, UcWindowBindAndLocalInv)
{
    conn c;
    constexpr std::uint64_t ops = vq::OPS_BIND_MW | vq::OPS_LOCAL_INV | vq::OPS_SEND;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::uc, ops | vq::OPS_RDMA_WRITE);
    ASSERT_EQ(c.setup(qp_type::uc, ops), 0);
    int reg = c.L.reg(8192, acc_mw, true, 0);
    ASSERT_GE(reg, 0);
    vq::mw *w = nullptr;
    ASSERT_EQ(vq::alloc_mw(c.L.pd, vq::mw_type::type2, &w), 0);
    c.L.o.mws.push_back(w);
    std::uint32_t key = vq::inc_rkey(w->rkey);
    vq::mw_bind_info bi{c.L.o.mrs[static_cast<std::size_t>(reg)].mr, c.L.addr(reg, 1024), 1024,
                        vq::ACCESS_REMOTE_WRITE};
    vq::wr_start(c.qp());
    c.qp()->wr_id = 1;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_bind_mw(c.qp(), w, key, &bi);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto b = c.L.wait_wcs(c.lq, 1);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0].status, wc_status::success) << wc_str(b[0]);
    auto peer_write = [&](std::uint64_t wr_id) {
        EXPECT_EQ(c.P.post(c.pq.index, {peer_rdma(OP_WRITE, wr_id, key, c.L.addr(reg, 1024), 16)}), 0);
        return c.P.wait_wcs(c.pq.index, 1);
    };
    std::memset(c.L.mem(reg) + 1024, 0xab, 16);
    auto r = peer_write(5);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, wc_status::success) << wc_str(r[0]);
    std::vector<std::uint8_t> zero(16, 0);
    EXPECT_EQ(std::memcmp(c.L.mem(reg) + 1024, zero.data(), 16), 0) << "UC write through the window did not land";
    vq::wr_start(c.qp());
    c.qp()->wr_id = 2;
    c.qp()->wr_flags = vq::WR_SIGNALED;
    vq::wr_local_inv(c.qp(), key);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto li = c.L.wait_wcs(c.lq, 1);
    ASSERT_EQ(li.size(), 1u);
    EXPECT_EQ(li[0].status, wc_status::success) << wc_str(li[0]);
    std::memset(c.L.mem(reg) + 1024, 0xcd, 16);
    (void)peer_write(6); // UC: the requester may or may not see an error
    EXPECT_EQ(c.L.mem(reg)[1024], 0xcd) << "a write through an invalidated window landed";
}

/* ---- Small inline sends (the fast path) ---- */

TEST_F(Features, OneRequestSessionsOfEverySmallInlineSizeArriveExactly)
{
    conn c;
    ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM, {0, 0, 1, 1, 256}, 0, {0, 512, 1, 1, 0}), 0);
    const std::uint32_t mi = std::min<std::uint32_t>(c.qp()->cap.max_inline_data, 256);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(512 * 256, vq::ACCESS_LOCAL_WRITE, false, 0, &r), 0);
    int src = c.L.reg(4096, vq::ACCESS_LOCAL_WRITE, false, 131);
    std::vector<std::uint32_t> lens;
    for (std::uint32_t l = 0; l <= mi; l++)
        lens.push_back(l);
    ASSERT_LE(lens.size(), 512u);
    recv_req rr{c.pq.index, 0, {}, 0, static_cast<std::uint32_t>(lens.size()), 0};
    piece p0{r.index, 256, 0};
    std::vector<std::uint8_t> body(sizeof rr + sizeof p0);
    std::memcpy(body.data(), &rr, sizeof rr);
    std::memcpy(body.data() + sizeof rr, &p0, sizeof p0);
    ASSERT_EQ(c.P.request(CMD_POST_RECVS, body.data(), body.size()), 0);
    std::size_t signaled = 0;
    for (std::size_t i = 0; i < lens.size(); i++) {
        vq::wr_start(c.qp());
        c.qp()->wr_id = i;
        c.qp()->wr_flags = (i % 7 == 0 ? vq::WR_SIGNALED : 0) | (i % 5 == 0 ? vq::WR_SOLICITED : 0);
        if (i % 3 == 0)
            vq::wr_send_imm(c.qp(), static_cast<std::uint32_t>(i) * 0x01010101u);
        else
            vq::wr_send(c.qp());
        vq::wr_set_inline_data(c.qp(), c.L.mem(src) + i, lens[i]);
        int rc = vq::wr_complete(c.qp());
        // A full send queue (a device that completes on acknowledgement):
        // poll and post again, as the API says.
        for (int tries = 0; rc == -FI_EAGAIN && tries < 100000; tries++) {
            c.L.pump();
            vq::wr_start(c.qp());
            c.qp()->wr_id = i;
            c.qp()->wr_flags = (i % 7 == 0 ? vq::WR_SIGNALED : 0) | (i % 5 == 0 ? vq::WR_SOLICITED : 0);
            if (i % 3 == 0)
                vq::wr_send_imm(c.qp(), static_cast<std::uint32_t>(i) * 0x01010101u);
            else
                vq::wr_send(c.qp());
            vq::wr_set_inline_data(c.qp(), c.L.mem(src) + i, lens[i]);
            rc = vq::wr_complete(c.qp());
        }
        ASSERT_EQ(rc, 0) << "send " << i;
        signaled += i % 7 == 0;
    }
    auto s = c.L.wait_wcs(c.lq, signaled);
    ASSERT_EQ(s.size(), signaled);
    for (std::size_t k = 0; k < s.size(); k++)
        EXPECT_EQ(s[k].wr_id, k * 7);
    EXPECT_TRUE(c.L.drain(c.lq, 30).empty()) << "unsignaled sends completed";
    auto rv = c.P.wait_wcs(c.pq.index, static_cast<std::uint32_t>(lens.size()));
    ASSERT_EQ(rv.size(), lens.size());
    auto mem = c.P.read_mem(r.index, 0, lens.size() * 256);
    for (std::size_t i = 0; i < lens.size(); i++) {
        SCOPED_TRACE("message " + std::to_string(i) + " " + wc_str(rv[i]));
        EXPECT_EQ(rv[i].wr_id, i);
        EXPECT_EQ(rv[i].status, wc_status::success);
        EXPECT_EQ(rv[i].byte_len, lens[i]);
        EXPECT_EQ(bool(rv[i].wc_flags & vq::WC_WITH_IMM), i % 3 == 0);
        if (i % 3 == 0) {
            EXPECT_EQ(rv[i].imm_data, static_cast<std::uint32_t>(i) * 0x01010101u);
        }
        EXPECT_EQ(bool(rv[i].wc_flags & vq::WC_SOLICITED), i % 5 == 0);
        EXPECT_EQ(std::memcmp(mem.data() + i * 256, c.L.mem(src) + i, lens[i]), 0);
        if (HasFailure())
            break;
    }
}

TEST_F(Features, SendsWhileTheReceiverStallsQueueUpAndArriveInOrder)
{
    conn c;
    ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_SEND, {256, 0, 1, 1, 64}, 0, {0, 4096, 1, 1, 0}), 0);
    constexpr std::uint32_t n = 3000, len = 40;
    reg_rep r{};
    ASSERT_EQ(c.P.reg(n * 64, vq::ACCESS_LOCAL_WRITE, false, 0, &r), 0);
    recv_req rr{c.pq.index, 0, {}, 0, n, 0};
    piece p0{r.index, 64, 0};
    std::vector<std::uint8_t> body(sizeof rr + sizeof p0);
    std::memcpy(body.data(), &rr, sizeof rr);
    std::memcpy(body.data() + sizeof rr, &p0, sizeof p0);
    ASSERT_EQ(c.P.request(CMD_POST_RECVS, body.data(), body.size()), 0);
    std::uint32_t ms = 300;
    ASSERT_EQ(c.P.request(CMD_SLEEP, &ms, sizeof ms), 0);
    int src = c.L.reg(n * len, vq::ACCESS_LOCAL_WRITE, false, 141);
    std::uint32_t eagain = 0;
    std::size_t signaled = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (std::uint32_t i = 0; i < n;) {
        std::memcpy(c.L.mem(src) + i * len, &i, 4);
        vq::wr_start(c.qp());
        c.qp()->wr_id = i;
        c.qp()->wr_flags = i % 64 == 63 ? vq::WR_SIGNALED : 0;
        vq::wr_send(c.qp());
        if (i % 2)
            vq::wr_set_inline_data(c.qp(), c.L.mem(src) + i * len, len);
        else
            vq::wr_set_sge(c.qp(), c.L.mr(src)->lkey, c.L.addr(src, i * len), len);
        int rc = vq::wr_complete(c.qp());
        if (rc == -FI_EAGAIN) {
            eagain++;
            c.L.pump();
            ASSERT_LT(std::chrono::steady_clock::now(), end) << "send queue never drained";
            std::this_thread::yield();
            continue;
        }
        ASSERT_EQ(rc, 0) << "send " << i;
        signaled += i % 64 == 63;
        i++;
    }
    std::printf("%u sends posted against a stalled receiver; %u EAGAIN retries\n", n, eagain);
    auto s = c.L.wait_wcs(c.lq, signaled, 20000);
    ASSERT_EQ(s.size(), signaled);
    for (auto &w : s)
        EXPECT_EQ(w.status, wc_status::success) << wc_str(w);
    auto rv = c.P.wait_wcs(c.pq.index, n, 20000);
    ASSERT_EQ(rv.size(), n);
    auto mem = c.P.read_mem(r.index, 0, n * 64);
    for (std::uint32_t i = 0; i < n; i++) {
        std::uint32_t seq;
        std::memcpy(&seq, mem.data() + i * 64, 4);
        if (rv[i].wr_id != i || rv[i].byte_len != len || seq != i ||
            std::memcmp(mem.data() + i * 64, c.L.mem(src) + i * len, len) != 0) {
            ADD_FAILURE() << "receive " << i << ": " << wc_str(rv[i]) << " carries message " << seq;
            break;
        }
    }
}

/* ---- Threading ---- */

TEST_F(Features, ThreadDomainQpAndSingleThreadedCqWork)
{
    local_side L;
    peer_proc P(&L);
    ASSERT_TRUE(L.ok && P.ok());
    vq::td *td = nullptr;
    ASSERT_EQ(vq::alloc_td(L.ctx, &td), 0);
    vq::cq_init_attr ca;
    ca.cqe = 256;
    ca.single_threaded = true;
    vq::cq *cq = nullptr;
    ASSERT_EQ(vq::create_cq(L.ctx, &ca, &cq), 0);
    vq::qp_init_attr ia;
    ia.type = qp_type::rc;
    ia.send_cq = ia.recv_cq = cq;
    ia.send_ops_flags = vq::OPS_RDMA_WRITE | vq::OPS_SEND;
    ia.td = td;
    vq::qp *q = nullptr;
    ASSERT_EQ(vq::create_qp(L.pd, &ia, &q), 0);
    EXPECT_TRUE(q->has_td);
    L.qps.push_back({q, cq, {}});
    unsigned lq = static_cast<unsigned>(L.qps.size() - 1);
    qp_rep pq{};
    ASSERT_EQ(P.create_qp(qp_type::rc, vq::OPS_SEND, {}, &pq), 0);
    ASSERT_EQ(L.connect(lq, {P.addr(), pq.qpn}), 0);
    ASSERT_EQ(P.connect(pq.index, vq::get_qp_addr(q)), 0);
    reg_rep r{};
    ASSERT_EQ(P.reg(65536, ACC_ALL_REMOTE, true, 0, &r), 0);
    int src = L.reg(65536, vq::ACCESS_LOCAL_WRITE, false, 81);
    for (int i = 0; i < 64; i++) {
        ASSERT_EQ(vq::post_write(q, static_cast<std::uint64_t>(i), L.mem(src) + i * 1024, 1024, L.mr(src)->lkey,
                                 r.rkey, r.addr + static_cast<std::uint64_t>(i) * 1024, vq::WR_SIGNALED),
                  0);
    }
    auto w = L.wait_wcs(lq, 64);
    ASSERT_EQ(w.size(), 64u);
    for (int i = 0; i < 64; i++)
        EXPECT_EQ(w[static_cast<std::size_t>(i)].wr_id, static_cast<std::uint64_t>(i));
    auto got = P.read_mem(r.index, 0, 65536);
    EXPECT_EQ(std::memcmp(got.data(), L.mem(src), 65536), 0);
    int rc = vq::dealloc_td(td);
    EXPECT_EQ(rc, -FI_EBUSY) << "dealloc_td while a QP still uses the thread domain";
    EXPECT_EQ(vq::destroy_qp(q), 0);
    L.qps[lq].qp = nullptr;
    if (rc != 0) { // (when it wrongly succeeded, td is gone: do not free it twice)
        EXPECT_EQ(vq::dealloc_td(td), 0);
    }
}

TEST_F(Features, TwoThreadsPostingOnOneQpNeverInterleaveTheirBatches)
{
    conn c;
    ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_RDMA_WRITE, {512, 0, 1, 1, 64}), 0);
    reg_rep r{};
    ASSERT_EQ(c.P.reg(1 << 20, ACC_ALL_REMOTE, true, 0, &r), 0);
    int src = c.L.reg(1 << 20, vq::ACCESS_LOCAL_WRITE, false, 91);
    constexpr int batches = 200, per = 4;
    std::atomic<int> bad{0};
    auto poster = [&](int t) {
        for (int b = 0; b < batches; b++) {
            for (;;) {
                vq::wr_start(c.qp());
                for (int k = 0; k < per; k++) {
                    std::uint64_t slot = static_cast<std::uint64_t>((t * batches + b) * per + k);
                    c.qp()->wr_id = slot;
                    c.qp()->wr_flags = vq::WR_SIGNALED;
                    vq::wr_rdma_write(c.qp(), r.rkey, r.addr + slot * 512);
                    vq::wr_set_sge(c.qp(), c.L.mr(src)->lkey, c.L.addr(src, slot * 512), 512);
                }
                int rc = vq::wr_complete(c.qp());
                if (rc == 0)
                    break;
                if (rc != -FI_EAGAIN) {
                    bad++;
                    return;
                }
                std::this_thread::yield();
            }
        }
    };
    // This thread polls the CQ (locked) while two others post (QP lock).
    std::vector<vq::wc> all;
    std::thread t0(poster, 0), t1(poster, 1);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    vq::cq *cq = c.L.qps[c.lq].cq;
    while (all.size() < 2u * batches * per && std::chrono::steady_clock::now() < end) {
        vq::wc w[32];
        int k = vq::poll_cq(cq, 32, w);
        for (int i = 0; i < k; i++)
            all.push_back(w[i]);
        if (k == 0)
            std::this_thread::yield();
    }
    t0.join();
    t1.join();
    EXPECT_EQ(bad.load(), 0) << "wr_complete failed with something other than -FI_EAGAIN";
    ASSERT_EQ(all.size(), 2u * batches * per) << "completions missing after 20 s";
    // Each batch's requests complete contiguously and in order.
    for (std::size_t i = 0; i < all.size(); i += per) {
        EXPECT_EQ(all[i].wr_id % per, 0u) << "a batch was split at completion " << i;
        for (int k = 1; k < per; k++)
            EXPECT_EQ(all[i + static_cast<std::size_t>(k)].wr_id, all[i].wr_id + static_cast<unsigned>(k))
                << "batches interleaved at completion " << i;
        if (HasFailure())
            break;
    }
    for (auto &w : all)
        EXPECT_EQ(w.status, wc_status::success);
    auto got = c.P.read_mem(r.index, 0, 2u * batches * per * 512);
    EXPECT_EQ(std::memcmp(got.data(), c.L.mem(src), got.size()), 0);
}

} // namespace
} // namespace shunt::conf
