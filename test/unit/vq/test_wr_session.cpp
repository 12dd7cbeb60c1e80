// The ibv_wr session on loopback QPs: delivery, batches, and every latched error.
#include <cstring>

#include "vq_fixture.h"

namespace shunt::test {
namespace {

using vq::wc_status;

TEST(WrSession, InlineSendArrivesWithImmAndFlags)
{
    vq_env e;
    qp_pair p(e);
    reg_buf rx(e.pd, 64);
    ASSERT_EQ(vq::post_recv(p.b, 7, rx.addr(), 64, rx.mr->lkey), 0);
    const char msg[] = "hello, queue";
    vq::wr_start(p.a);
    p.a->wr_id = 42;
    p.a->wr_flags = vq::WR_SIGNALED | vq::WR_SOLICITED;
    vq::wr_send_imm(p.a, 0x01020304);
    vq::wr_set_inline_data(p.a, msg, sizeof msg);
    ASSERT_EQ(vq::wr_complete(p.a), 0);
    auto s = poll_n(p.cq_a, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].wr_id, 42u);
    EXPECT_EQ(s[0].status, wc_status::success);
    EXPECT_EQ(s[0].opcode, vq::wc_opcode::send);
    auto r = poll_n(p.cq_b, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 7u);
    EXPECT_EQ(r[0].status, wc_status::success);
    EXPECT_EQ(r[0].opcode, vq::wc_opcode::recv);
    EXPECT_EQ(r[0].byte_len, sizeof msg);
    EXPECT_EQ(r[0].imm_data, 0x01020304u);
    EXPECT_EQ(r[0].wc_flags, vq::WC_WITH_IMM | vq::WC_SOLICITED);
    EXPECT_EQ(r[0].qp_num, p.b->qp_num);
    EXPECT_EQ(r[0].src_qp, p.a->qp_num);
    EXPECT_EQ(std::memcmp(rx.bytes.data(), msg, sizeof msg), 0);
}

TEST(WrSession, UnsignaledSingleSendKeepsImmAndSolicited)
{
    vq_env e;
    qp_pair p(e);
    reg_buf rx(e.pd, 64);
    ASSERT_EQ(vq::post_recv(p.b, 3, rx.addr(), 64, rx.mr->lkey), 0);
    const char msg[] = "0123456789abcdef0123456789abcdef0123456789abcde"; // 48 bytes: one slot
    vq::wr_start(p.a);
    p.a->wr_id = 1;
    p.a->wr_flags = vq::WR_SOLICITED;
    vq::wr_send_imm(p.a, 0xfeedbeef);
    vq::wr_set_inline_data(p.a, msg, sizeof msg);
    ASSERT_EQ(vq::wr_complete(p.a), 0);
    auto r = poll_n(p.cq_b, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].byte_len, sizeof msg);
    EXPECT_EQ(r[0].imm_data, 0xfeedbeefu);
    EXPECT_EQ(r[0].wc_flags, vq::WC_WITH_IMM | vq::WC_SOLICITED);
    EXPECT_EQ(std::memcmp(rx.bytes.data(), msg, sizeof msg), 0);
    EXPECT_TRUE(drain(p.cq_a, 20).empty()) << "unsignaled";
}

TEST(WrSession, LargeSgeSendIsChunkedAndScatteredAcrossReceiveSges)
{
    vq_env e;
    qp_pair p(e, vq::qp_type::rc, vq::OPS_SEND, vq::qp_cap{0, 0, 4, 4, 0});
    const std::size_t n = 300000; // several ring-fulls
    reg_buf tx(e.pd, n), rx(e.pd, n + 100);
    for (std::size_t i = 0; i < n; i++)
        tx.bytes[i] = static_cast<std::uint8_t>(i * 7 + 3);
    vq::sge rs[3] = {{rx.addr(0), 1000, rx.mr->lkey}, {rx.addr(1000), 99, rx.mr->lkey},
                     {rx.addr(1099), static_cast<std::uint32_t>(n + 1 - 1099), rx.mr->lkey}};
    ASSERT_EQ(vq::post_recv(p.b, 1, rs, 3), 0);
    vq::sge ts[2] = {{tx.addr(0), 12345, tx.mr->lkey}, {tx.addr(12345), static_cast<std::uint32_t>(n - 12345), tx.mr->lkey}};
    vq::wr_start(p.a);
    p.a->wr_id = 9;
    p.a->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(p.a);
    vq::wr_set_sge_list(p.a, 2, ts);
    ASSERT_EQ(vq::wr_complete(p.a), 0);
    // The sender needs the receiver to drain the ring: poll both.
    std::vector<vq::wc> s, r;
    for (int i = 0; i < 200000 && (s.empty() || r.empty()); i++) {
        vq::wc w;
        if (vq::poll_cq(p.cq_a, 1, &w) == 1) s.push_back(w);
        if (vq::poll_cq(p.cq_b, 1, &w) == 1) r.push_back(w);
    }
    ASSERT_EQ(s.size(), 1u);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(s[0].status, wc_status::success);
    EXPECT_EQ(r[0].status, wc_status::success);
    EXPECT_EQ(r[0].byte_len, n);
    EXPECT_EQ(std::memcmp(rx.bytes.data(), tx.bytes.data(), n), 0);
}

} // namespace
} // namespace shunt::test
