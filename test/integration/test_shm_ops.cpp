// Every builder and setter on every QP type that allows it, across two real
// processes (RC, UC, UD), with the data checked at the other end.
#include <arpa/inet.h>

#include <random>

#include "shm_peer_client.h"

namespace shunt::test {
namespace {

using vq::wc_status;

struct ShmOps : ::testing::TestWithParam<vq::qp_type> {
    vq::qp_type t = GetParam();
    const char *name = t == vq::qp_type::rc ? "rc" : t == vq::qp_type::uc ? "uc" : "ud";
    shm_peer peer{name};
    local_end me{t};
    vq::ah *ah = nullptr;
    std::mt19937_64 rng{static_cast<std::uint64_t>(t) * 1000 + 1};

    void SetUp() override
    {
        ASSERT_EQ(me.connect(peer.addr), 0);
        ASSERT_EQ(peer.connect(vq::get_qp_addr(me.qp)), 0);
        if (t == vq::qp_type::ud) {
            vq::ah_attr aa;
            aa.dest = peer.addr.dev;
            ASSERT_EQ(vq::create_ah(me.pd, &aa, &ah), 0);
        }
    }
    void TearDown() override
    {
        if (ah) {
            EXPECT_EQ(vq::destroy_ah(ah), 0);
        }
    }
    bool allowed(std::uint64_t op) const { return (vq::ops_allowed(t) & op) != 0; }
    void addr_setter()
    {
        if (t == vq::qp_type::ud)
            vq::wr_set_ud_addr(me.qp, ah, peer.addr.qpn, 0x1234);
    }
    /** Post one signaled WR built by @p f; expect success at our end. */
    template <class F>
    void post(F f)
    {
        vq::wr_start(me.qp);
        me.qp->wr_id = 1;
        me.qp->wr_flags = vq::WR_SIGNALED;
        f();
        addr_setter();
        ASSERT_EQ(vq::wr_complete(me.qp), 0);
        auto w = me.poll(1);
        ASSERT_EQ(w.size(), 1u);
        ASSERT_EQ(w[0].status, wc_status::success) << vq::wc_status_str(w[0].status);
    }
    std::vector<std::uint8_t> fill(std::size_t off, std::size_t len)
    {
        for (std::size_t i = 0; i < len; i++)
            me.buf[off + i] = static_cast<std::uint8_t>(rng());
        return {me.buf.begin() + static_cast<std::ptrdiff_t>(off), me.buf.begin() + static_cast<std::ptrdiff_t>(off + len)};
    }
    /** The peer received @p want (byte for byte) with the expected flags. */
    void expect_received(const std::vector<std::uint8_t> &want, unsigned flags, std::uint32_t imm = 0,
                         std::uint32_t inv = 0)
    {
        auto r = peer.poll(1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].status, wc_status::success) << vq::wc_status_str(r[0].status);
        EXPECT_EQ(r[0].byte_len, want.size());
        EXPECT_EQ(r[0].wc_flags & (vq::WC_WITH_IMM | vq::WC_WITH_INV), flags);
        if (flags & vq::WC_WITH_IMM) {
            EXPECT_EQ(r[0].imm_data, imm);
        }
        if (flags & vq::WC_WITH_INV) {
            EXPECT_EQ(r[0].invalidated_rkey, inv);
        }
        EXPECT_EQ(peer.read((r[0].wr_id - 1000) * 8192, want.size()), want);
    }
};

TEST_P(ShmOps, SendWithEveryDataSetter)
{
    ASSERT_EQ(peer.post_recv(4, 8192, 0, 2), 0);
    auto a = fill(0, 40);
    post([&] {
        vq::wr_send(me.qp);
        vq::wr_set_inline_data(me.qp, me.buf.data(), 40);
    });
    expect_received(a, 0);
    auto b = fill(100, 200);
    post([&] {
        vq::wr_send(me.qp);
        vq::data_buf d[3] = {{me.buf.data() + 100, 10}, {me.buf.data() + 110, 0}, {me.buf.data() + 110, 190}};
        vq::wr_set_inline_data_list(me.qp, 3, d);
    });
    expect_received(b, 0);
    auto c = fill(1000, 3000);
    post([&] { vq::wr_send(me.qp); vq::wr_set_sge(me.qp, me.mr->lkey, me.addr(1000), 3000); });
    expect_received(c, 0);
    auto d = fill(5000, 4000);
    post([&] {
        vq::wr_send(me.qp);
        vq::sge s[3] = {{me.addr(5000), 1, me.mr->lkey}, {me.addr(5001), 2999, me.mr->lkey}, {me.addr(8000), 1000, me.mr->lkey}};
        vq::wr_set_sge_list(me.qp, 3, s);
    });
    expect_received(d, 0);
}

TEST_P(ShmOps, SendWithImmediate)
{
    ASSERT_EQ(peer.post_recv(1, 8192), 0);
    auto a = fill(0, 77);
    post([&] {
        vq::wr_send_imm(me.qp, htonl(0xdead));
        vq::wr_set_sge(me.qp, me.mr->lkey, me.addr(), 77);
    });
    expect_received(a, vq::WC_WITH_IMM, htonl(0xdead));
}

TEST_P(ShmOps, SendWithInvalidate)
{
    if (!allowed(vq::OPS_SEND_WITH_INV))
        GTEST_SKIP() << "not allowed on this QP type";
    ASSERT_EQ(peer.post_recv(1, 8192), 0);
    auto a = fill(0, 16);
    post([&] {
        vq::wr_send_inv(me.qp, peer.seg_rkey);
        vq::wr_set_inline_data(me.qp, me.buf.data(), 16);
    });
    expect_received(a, vq::WC_WITH_INV, 0, peer.seg_rkey);
    // The peer's segment region can no longer be written through that key.
    std::uint64_t v = 1;
    vq::wr_start(me.qp);
    me.qp->wr_id = 2;
    me.qp->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_write(me.qp, peer.seg_rkey, peer.seg_addr);
    vq::wr_set_inline_data(me.qp, &v, 8);
    ASSERT_EQ(vq::wr_complete(me.qp), 0);
    auto w = me.poll(1);
    ASSERT_EQ(w.size(), 1u);
    // RC reports the violation; UC's responder drops it silently.
    EXPECT_EQ(w[0].status, t == vq::qp_type::rc ? wc_status::rem_access_err : wc_status::success);
    EXPECT_EQ(peer.read(0, 8, true), std::vector<std::uint8_t>(8, 0));
}

TEST_P(ShmOps, WriteAndWriteWithImmediate)
{
    if (!allowed(vq::OPS_RDMA_WRITE))
        GTEST_SKIP() << "not allowed on this QP type";
    auto a = fill(0, 5000);
    post([&] {
        vq::wr_rdma_write(me.qp, peer.priv_rkey, peer.priv_addr + 100);
        vq::sge s[2] = {{me.addr(0), 2500, me.mr->lkey}, {me.addr(2500), 2500, me.mr->lkey}};
        vq::wr_set_sge_list(me.qp, 2, s);
    });
    EXPECT_EQ(peer.read(100, 5000), a);
    ASSERT_EQ(peer.post_recv(1, 16), 0);
    auto b = fill(6000, 100);
    post([&] {
        vq::wr_rdma_write_imm(me.qp, peer.seg_rkey, peer.seg_addr + 64, htonl(5));
        vq::data_buf d[2] = {{me.buf.data() + 6000, 50}, {me.buf.data() + 6050, 50}};
        vq::wr_set_inline_data_list(me.qp, 2, d);
    });
    auto r = peer.poll(1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].opcode, vq::wc_opcode::recv_rdma_with_imm);
    EXPECT_EQ(r[0].imm_data, htonl(5));
    EXPECT_EQ(r[0].byte_len, 100u);
    EXPECT_EQ(peer.read(64, 100, true), b);
}

TEST_P(ShmOps, ReadCompareSwapFetchAddFlush)
{
    if (!allowed(vq::OPS_RDMA_READ))
        GTEST_SKIP() << "not allowed on this QP type";
    std::vector<std::uint8_t> pat(3000);
    for (auto &x : pat)
        x = static_cast<std::uint8_t>(rng());
    peer.write(500, pat);
    post([&] {
        vq::wr_rdma_read(me.qp, peer.priv_rkey, peer.priv_addr + 500);
        vq::sge s[2] = {{me.addr(0), 1000, me.mr->lkey}, {me.addr(4096), 2000, me.mr->lkey}};
        vq::wr_set_sge_list(me.qp, 2, s);
    });
    EXPECT_EQ(std::memcmp(me.buf.data(), pat.data(), 1000), 0);
    EXPECT_EQ(std::memcmp(me.buf.data() + 4096, pat.data() + 1000, 2000), 0);
    std::uint64_t init = 10;
    std::vector<std::uint8_t> iv(8);
    std::memcpy(iv.data(), &init, 8);
    peer.write(128, iv, true);
    post([&] {
        vq::wr_atomic_cmp_swp(me.qp, peer.seg_rkey, peer.seg_addr + 128, 10, 20);
        vq::wr_set_sge(me.qp, me.mr->lkey, me.addr(), 8);
    });
    std::uint64_t old;
    std::memcpy(&old, me.buf.data(), 8);
    EXPECT_EQ(old, 10u);
    post([&] {
        vq::wr_atomic_fetch_add(me.qp, peer.seg_rkey, peer.seg_addr + 128, 5);
        vq::wr_set_sge(me.qp, me.mr->lkey, me.addr(), 8);
    });
    std::memcpy(&old, me.buf.data(), 8);
    EXPECT_EQ(old, 20u);
    auto now = peer.read(128, 8, true);
    std::uint64_t v;
    std::memcpy(&v, now.data(), 8);
    EXPECT_EQ(v, 25u);
    post([&] { vq::wr_flush(me.qp, peer.seg_rkey, peer.seg_addr, 4096, vq::FLUSH_GLOBAL, vq::FLUSH_RANGE); });
}

TEST_P(ShmOps, WindowBoundHereIsUsedByThePeerThenInvalidated)
{
    if (!allowed(vq::OPS_BIND_MW))
        GTEST_SKIP() << "not allowed on this QP type";
    // The window lives in our memory; the peer writes through it over its
    // own QP, which is connected to ours.
    std::vector<std::uint8_t> region(8192);
    vq::mr *rm = nullptr;
    ASSERT_EQ(vq::reg_mr(me.pd, region.data(), region.size(), vq::ACCESS_LOCAL_WRITE | vq::ACCESS_MW_BIND, &rm), 0);
    vq::mw *mw = nullptr;
    ASSERT_EQ(vq::alloc_mw(me.pd, vq::mw_type::type2, &mw), 0);
    std::uint32_t key = vq::inc_rkey(mw->rkey);
    vq::mw_bind_info bi{rm, reinterpret_cast<std::uint64_t>(region.data()) + 4096, 1024,
                        vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ};
    post([&] { vq::wr_bind_mw(me.qp, mw, key, &bi); });
    EXPECT_EQ(mw->rkey, key);
    if (t == vq::qp_type::rc) {
        std::vector<std::uint8_t> pat(64, 0x3c);
        peer.write(0, pat);
        pp::request r{};
        r.op = pp::rdma;
        r.n = 0; // write
        r.a = 64;
        r.c = key;
        r.d = bi.addr + 100;
        pp::response s = peer.call(r);
        ASSERT_EQ(s.rc, 0);
        EXPECT_EQ(static_cast<wc_status>(s.a), wc_status::success);
        EXPECT_EQ(std::memcmp(region.data() + 4196, pat.data(), 64), 0);
    }
    post([&] { vq::wr_local_inv(me.qp, key); });
    if (t == vq::qp_type::rc) {
        pp::request r{};
        r.op = pp::rdma;
        r.n = 1; // read
        r.a = 8;
        r.c = key;
        r.d = bi.addr;
        pp::response s = peer.call(r);
        ASSERT_EQ(s.rc, 0);
        EXPECT_EQ(static_cast<wc_status>(s.a), wc_status::rem_access_err);
    }
    EXPECT_EQ(vq::dealloc_mw(mw), 0);
    EXPECT_EQ(vq::dereg_mr(rm), 0);
}

INSTANTIATE_TEST_SUITE_P(Types, ShmOps, ::testing::Values(vq::qp_type::rc, vq::qp_type::uc, vq::qp_type::ud),
                         [](const auto &i) {
                             return std::string(i.param == vq::qp_type::rc ? "rc" : i.param == vq::qp_type::uc ? "uc" : "ud");
                         });

} // namespace
} // namespace shunt::test
