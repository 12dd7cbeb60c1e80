// Every builder and setter on every QP type that allows it, between this
// process and a spawned peer: data checked byte for byte (including the bytes
// around it, which must stay untouched), random sizes and random SGE lists.
#include <sched.h>

#include "conf_harness.h"

namespace shunt::conf {
namespace {

using vq::qp_type;
using vq::wc_opcode;
using vq::wc_status;

struct variant {
    qp_type type;
    bool seg; ///< regions in alloc_buf (shared-segment) memory, else private heap memory
};
std::string variant_name(const ::testing::TestParamInfo<variant> &i)
{
    std::string t = i.param.type == qp_type::rc ? "RC" : i.param.type == qp_type::uc ? "UC" : "UD";
    return t + (i.param.seg ? "_SegmentMemory" : "_HeapMemory");
}

constexpr std::size_t region_size = 512 * 1024;

/** A pair of the variant's type plus a source region here and a target region at the peer. */
class Builders : public conf_test, public ::testing::WithParamInterface<variant> {
protected:
    conn c;
    int src = -1;        ///< local region (pattern)
    int dst = -1;        ///< local region (zeros) for reads / receives here
    reg_rep tgt{};       ///< peer region (pattern)
    std::vector<std::uint8_t> model; ///< expected content of tgt
    std::uint64_t tgt_seed = 0;

    /** @return false when the test was skipped or failed. */
    bool open(std::uint64_t ops, vq::qp_cap cap = {}, vq::qp_cap peer_cap = {})
    {
        const variant v = GetParam();
        if (!c.L.ok)
            return false;
        std::uint64_t have = c.L.attr.ops[static_cast<unsigned>(v.type)];
        if ((have & ops) != ops) {
            skipped = true;
            skip_reason = "device does not claim ops 0x" + std::to_string(ops & ~have) + " (decimal) for this QP type";
            return false;
        }
        int rc = c.setup(v.type, ops, cap, 0, peer_cap);
        if (rc) {
            ADD_FAILURE() << "setup: " << rc;
            return false;
        }
        src = c.L.reg(region_size, ACC_ALL_REMOTE, v.seg, rnd(1, ~0ull >> 1));
        if (src == -2) {
            skipped = true;
            skip_reason = "alloc_buf not supported (no shared-segment memory)";
            return false;
        }
        dst = c.L.reg(region_size, ACC_ALL_REMOTE, v.seg, 0);
        tgt_seed = rnd(1, ~0ull >> 1);
        if (src < 0 || dst < 0 || c.P.reg(region_size, ACC_ALL_REMOTE, v.seg, tgt_seed, &tgt) != 0) {
            ADD_FAILURE() << "registration failed";
            return false;
        }
        model.resize(region_size);
        fill_pattern(model.data(), region_size, tgt_seed);
        return true;
    }
    bool skipped = false;
    std::string skip_reason;

    void expect_target_matches_model(const char *what)
    {
        auto got = c.P.read_mem(tgt.index, 0, region_size);
        ASSERT_EQ(got.size(), model.size());
        for (std::size_t i = 0; i < model.size(); i++)
            if (got[i] != model[i]) {
                ADD_FAILURE() << what << ": peer memory differs from the model at byte " << i << " (got "
                              << unsigned(got[i]) << ", want " << unsigned(model[i]) << ")";
                return;
            }
    }

    /** A random message length, biased to the interesting sizes. */
    std::uint32_t rand_len(std::uint32_t max)
    {
        switch (rnd(0, 5)) {
        case 0: return static_cast<std::uint32_t>(rnd(0, std::min<std::uint32_t>(max, 48)));
        case 1: return static_cast<std::uint32_t>(rnd(0, std::min<std::uint32_t>(max, 200)));
        case 2: return static_cast<std::uint32_t>(rnd(0, std::min<std::uint32_t>(max, 4096)));
        case 3: return static_cast<std::uint32_t>(rnd(0, std::min<std::uint32_t>(max, 70000)));
        default: return static_cast<std::uint32_t>(rnd(0, max));
        }
    }

    /** Send one message of @p len bytes with data setter @p data; the peer receives it into a
     *  random SGE list; check both completions and every byte of the peer region. */
    void send_one(std::uint8_t op, std::uint8_t data, std::uint32_t len, unsigned nsge, std::uint32_t imm,
                  unsigned flags)
    {
        SCOPED_TRACE("send op " + std::to_string(op) + " data " + std::to_string(data) + " len " +
                     std::to_string(len) + " nsge " + std::to_string(nsge));
        // Receive: a random list of pieces of the peer region totalling len + slack.
        // UD: room for the 40-byte GRH a verbs device may put first (WC_GRH).
        std::uint32_t rtotal = len + static_cast<std::uint32_t>(rnd(0, 64)) + (c.type == qp_type::ud ? 40 : 0);
        unsigned nr = static_cast<unsigned>(rnd(1, std::min<std::uint32_t>(c.pq.cap.max_recv_sge, 8)));
        std::size_t grh = 0;
        auto rp = random_pieces(rng, tgt.index, region_size / 2, rtotal, nr);
        std::uint64_t rid = rnd(1, 1u << 30);
        ASSERT_EQ(c.P.post_recv(c.pq.index, rid, rp), 0);

        wr_desc d;
        d.wr_id = rnd(1, 1u << 30);
        d.op = op;
        d.imm = imm;
        d.flags = flags | vq::WR_SIGNALED;
        d.ud_ah = c.type == qp_type::ud ? c.ah : ~0u;
        d.ud_qpn = c.pq.qpn;
        d.ud_qkey = c.qkey;
        std::vector<piece> sp;
        if (len == 0 && data == DATA_NONE) {
            d.data = DATA_NONE;
        } else {
            sp = random_pieces(rng, static_cast<std::uint32_t>(src), region_size, len,
                               data == DATA_SGE || data == DATA_INLINE ? 1 : nsge);
            d.data = data;
            d.npieces = static_cast<std::uint16_t>(sp.size());
            std::copy(sp.begin(), sp.end(), d.pieces);
        }
        std::vector<std::uint8_t> payload = gather(c.L.mem(src), sp);
        ASSERT_EQ(payload.size(), len);
        ASSERT_EQ(c.L.post(c.lq, {d}), 0);

        auto s = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
        EXPECT_EQ(s[0].wr_id, d.wr_id);
        EXPECT_EQ(s[0].opcode, wc_opcode::send);
        EXPECT_EQ(s[0].qp_num, c.qp()->qp_num);

        auto r = c.P.wait_wcs(c.pq.index, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].status, wc_status::success) << wc_str(r[0]);
        EXPECT_EQ(r[0].wr_id, rid);
        EXPECT_EQ(r[0].opcode, wc_opcode::recv);
        if (r[0].wc_flags & vq::WC_GRH)
            grh = 40;
        EXPECT_EQ(r[0].byte_len, len + grh);
        EXPECT_EQ(r[0].qp_num, c.pq.qpn);
        EXPECT_EQ(r[0].src_qp, c.qp()->qp_num);
        unsigned want_flags = (op == OP_SEND_IMM ? vq::WC_WITH_IMM : 0) |
                              (flags & vq::WR_SOLICITED ? vq::WC_SOLICITED : 0);
        EXPECT_EQ(r[0].wc_flags & ~(vq::WC_GRH | vq::WC_IP_CSUM_OK), want_flags) << wc_str(r[0]);
        if (op == OP_SEND_IMM) {
            EXPECT_EQ(r[0].imm_data, imm);
        }
        // Model: the payload (after a GRH, if any) scattered over the receive pieces.
        std::vector<std::uint8_t> landed(grh, 0);
        landed.insert(landed.end(), payload.begin(), payload.end());
        std::size_t k = 0;
        auto got = c.P.read_mem(tgt.index, 0, region_size);
        for (auto &p : rp)
            for (std::uint32_t i = 0; i < p.len && k < landed.size(); i++, k++)
                model[p.off + i] = k >= grh ? landed[k] : got[p.off + i]; // GRH content is not specified
        expect_target_matches_model("after send");
    }
};

/** Operations of connected QPs only (RC, UC). */
class ConnectedBuilders : public Builders {};
/** Operations of RC only (read, atomics). */
class RcBuilders : public Builders {};

constexpr std::uint64_t send_ops = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM;

TEST_P(Builders, SendWithRandomSgeListsIsScatteredIntoRandomReceiveLists)
{
    if (!open(send_ops, {0, 0, 8, 8, 0}, {0, 0, 8, 8, 0})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    std::uint32_t max = GetParam().type == qp_type::ud ? c.L.attr.ud_mtu : 200000;
    for (int it = 0; it < 24 && !HasFailure(); it++) {
        std::uint32_t len = rand_len(max);
        unsigned ns = static_cast<unsigned>(rnd(1, c.qp()->cap.max_send_sge));
        send_one(OP_SEND, it % 3 == 0 ? DATA_SGE : DATA_SGE_LIST, len, ns, 0, 0);
    }
}

TEST_P(Builders, ZeroLengthSendNeedsNoDataSetter)
{
    if (!open(send_ops)) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    send_one(OP_SEND, DATA_NONE, 0, 0, 0, 0);
    send_one(OP_SEND_IMM, DATA_NONE, 0, 0, 0xdeadbeef, 0);
}

TEST_P(Builders, SendImmCarriesImmediateAndSolicitedFlag)
{
    if (!open(send_ops, {0, 0, 4, 4, 256})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    std::uint32_t max = GetParam().type == qp_type::ud ? c.L.attr.ud_mtu : 100000;
    for (int it = 0; it < 10 && !HasFailure(); it++) {
        std::uint32_t imm = static_cast<std::uint32_t>(rnd(0, 0xffffffffu));
        unsigned fl = it % 2 ? vq::WR_SOLICITED : 0;
        std::uint8_t data = static_cast<std::uint8_t>(DATA_SGE + it % 4);
        std::uint32_t len = data >= DATA_INLINE ? rand_len(c.qp()->cap.max_inline_data) : rand_len(max);
        send_one(OP_SEND_IMM, data, len, static_cast<unsigned>(rnd(1, 4)), imm, fl);
    }
}

TEST_P(Builders, InlineAndInlineListSendsUpToMaxInlineData)
{
    if (!open(send_ops, {0, 0, 1, 8, 512}, {0, 0, 1, 8, 0})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    std::uint32_t mi = c.qp()->cap.max_inline_data;
    ASSERT_GE(mi, 1u) << "asked for 512 bytes of inline data";
    if (GetParam().type == qp_type::ud)
        mi = std::min(mi, c.L.attr.ud_mtu);
    send_one(OP_SEND, DATA_INLINE, mi, 1, 0, 0); // exactly the limit
    for (int it = 0; it < 16 && !HasFailure(); it++) {
        std::uint32_t len = static_cast<std::uint32_t>(rnd(0, mi));
        if (it % 2)
            send_one(OP_SEND, DATA_INLINE, len, 1, 0, 0);
        else
            send_one(OP_SEND, DATA_INLINE_LIST, len, static_cast<unsigned>(rnd(1, 8)), 0, 0);
    }
}

TEST_P(ConnectedBuilders, SingleCallPostSendMatchesTheSession)
{
    if (!open(send_ops, {0, 0, 1, 4, 128})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    for (int it = 0; it < 12 && !HasFailure(); it++) {
        bool inl = it % 2;
        std::uint32_t len = inl ? static_cast<std::uint32_t>(rnd(0, c.qp()->cap.max_inline_data))
                                : rand_len(100000);
        std::uint64_t off = rnd(0, region_size - len);
        auto rp = random_pieces(rng, tgt.index, region_size / 2, len + 8,
                                static_cast<unsigned>(rnd(1, std::min<std::uint32_t>(4, c.pq.cap.max_recv_sge))));
        ASSERT_EQ(c.P.post_recv(c.pq.index, 77, rp), 0);
        std::uint64_t id = 1000 + static_cast<std::uint64_t>(it);
        ASSERT_EQ(vq::post_send(c.qp(), id, c.L.mem(src) + off, len, inl ? 0 : c.L.mr(src)->lkey,
                                vq::WR_SIGNALED | (inl ? vq::WR_INLINE : 0)),
                  0);
        auto s = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].wr_id, id);
        EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
        auto r = c.P.wait_wcs(c.pq.index, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].status, wc_status::success) << wc_str(r[0]);
        EXPECT_EQ(r[0].byte_len, len);
        std::size_t k = 0;
        for (auto &p : rp)
            for (std::uint32_t i = 0; i < p.len && k < len; i++, k++)
                model[p.off + i] = c.L.mem(src)[off + k];
        expect_target_matches_model("after post_send");
    }
}

/* ---- RDMA write / write_imm (RC, UC) ---- */

TEST_P(ConnectedBuilders, RdmaWriteWithEveryDataSetterLandsExactly)
{
    if (!open(vq::OPS_RDMA_WRITE, {0, 0, 16, 1, 256})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    for (int batch = 0; batch < 8 && !HasFailure(); batch++) {
        std::vector<wr_desc> ds;
        unsigned n = static_cast<unsigned>(rnd(1, 6));
        for (unsigned i = 0; i < n; i++) {
            wr_desc d;
            d.op = OP_WRITE;
            d.wr_id = batch * 100 + i;
            d.flags = vq::WR_SIGNALED;
            d.data = static_cast<std::uint8_t>(DATA_SGE + rnd(0, 3));
            std::uint32_t len = d.data >= DATA_INLINE ? static_cast<std::uint32_t>(rnd(1, c.qp()->cap.max_inline_data))
                                                      : static_cast<std::uint32_t>(rnd(1, 100000));
            std::uint64_t roff = rnd(0, region_size - len);
            d.rkey = tgt.rkey;
            d.raddr = tgt.addr + roff;
            auto sp = random_pieces(rng, static_cast<std::uint32_t>(src), region_size, len,
                                    d.data == DATA_SGE || d.data == DATA_INLINE ? 1
                                        : static_cast<unsigned>(rnd(1, c.qp()->cap.max_send_sge)));
            d.npieces = static_cast<std::uint16_t>(sp.size());
            std::copy(sp.begin(), sp.end(), d.pieces);
            auto bytes = gather(c.L.mem(src), sp);
            std::copy(bytes.begin(), bytes.end(), model.begin() + static_cast<std::ptrdiff_t>(roff));
            ds.push_back(d);
        }
        ASSERT_EQ(c.L.post(c.lq, ds), 0);
        auto s = c.L.wait_wcs(c.lq, n);
        ASSERT_EQ(s.size(), n);
        for (unsigned i = 0; i < n; i++) {
            EXPECT_EQ(s[i].wr_id, ds[i].wr_id) << "completions out of order";
            EXPECT_EQ(s[i].status, wc_status::success) << wc_str(s[i]);
            EXPECT_EQ(s[i].opcode, wc_opcode::rdma_write);
        }
        expect_target_matches_model("after RDMA writes");
    }
}

TEST_P(ConnectedBuilders, SingleCallPostWriteLandsExactly)
{
    if (!open(vq::OPS_RDMA_WRITE, {0, 0, 1, 1, 128})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    for (int it = 0; it < 10 && !HasFailure(); it++) {
        bool inl = it % 2;
        std::uint32_t len = inl ? static_cast<std::uint32_t>(rnd(1, c.qp()->cap.max_inline_data))
                                : static_cast<std::uint32_t>(rnd(1, 200000));
        std::uint64_t loff = rnd(0, region_size - len), roff = rnd(0, region_size - len);
        ASSERT_EQ(vq::post_write(c.qp(), 5000 + static_cast<std::uint64_t>(it), c.L.mem(src) + loff, len,
                                 inl ? 0 : c.L.mr(src)->lkey, tgt.rkey, tgt.addr + roff,
                                 vq::WR_SIGNALED | (inl ? vq::WR_INLINE : 0)),
                  0);
        std::copy(c.L.mem(src) + loff, c.L.mem(src) + loff + len, model.begin() + static_cast<std::ptrdiff_t>(roff));
        auto s = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
        EXPECT_EQ(s[0].wr_id, 5000u + static_cast<unsigned>(it));
        expect_target_matches_model("after post_write");
    }
}

TEST_P(ConnectedBuilders, RdmaWriteImmLandsAndConsumesAReceiveWithImm)
{
    if (!open(vq::OPS_RDMA_WRITE_WITH_IMM, {0, 0, 8, 1, 128})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    for (int it = 0; it < 10 && !HasFailure(); it++) {
        ASSERT_EQ(c.P.post_recv(c.pq.index, 900 + static_cast<std::uint64_t>(it), {}), 0);
        wr_desc d;
        d.op = OP_WRITE_IMM;
        d.wr_id = static_cast<std::uint64_t>(it);
        d.flags = vq::WR_SIGNALED | (it % 3 == 0 ? vq::WR_SOLICITED : 0);
        d.imm = static_cast<std::uint32_t>(rnd(0, 0xffffffffu));
        d.data = it % 4 == 3 ? DATA_INLINE : DATA_SGE_LIST;
        std::uint32_t len = static_cast<std::uint32_t>(
            it == 0 ? 0 : d.data == DATA_INLINE ? rnd(1, c.qp()->cap.max_inline_data) : rnd(1, 100000));
        if (len == 0)
            d.data = DATA_NONE;
        std::uint64_t roff = rnd(0, region_size - len);
        d.rkey = tgt.rkey;
        d.raddr = tgt.addr + roff;
        if (len) {
            auto sp = random_pieces(rng, static_cast<std::uint32_t>(src), region_size, len,
                                    d.data == DATA_INLINE ? 1 : static_cast<unsigned>(rnd(1, c.qp()->cap.max_send_sge)));
            d.npieces = static_cast<std::uint16_t>(sp.size());
            std::copy(sp.begin(), sp.end(), d.pieces);
            auto bytes = gather(c.L.mem(src), sp);
            std::copy(bytes.begin(), bytes.end(), model.begin() + static_cast<std::ptrdiff_t>(roff));
        }
        ASSERT_EQ(c.L.post(c.lq, {d}), 0);
        auto s = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
        EXPECT_EQ(s[0].opcode, wc_opcode::rdma_write);
        auto r = c.P.wait_wcs(c.pq.index, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].status, wc_status::success) << wc_str(r[0]);
        EXPECT_EQ(r[0].wr_id, 900u + static_cast<unsigned>(it));
        EXPECT_EQ(r[0].opcode, wc_opcode::recv_rdma_with_imm);
        EXPECT_EQ(r[0].imm_data, d.imm);
        EXPECT_EQ(r[0].byte_len, len) << "byte_len of a write-with-imm receive is the length written";
        EXPECT_TRUE(r[0].wc_flags & vq::WC_WITH_IMM);
        EXPECT_EQ(r[0].src_qp, c.qp()->qp_num);
        EXPECT_EQ(bool(r[0].wc_flags & vq::WC_SOLICITED), bool(d.flags & vq::WR_SOLICITED));
        expect_target_matches_model("after RDMA write with imm");
    }
}

/* ---- RDMA read, atomics (RC only) ---- */

TEST_P(RcBuilders, RdmaReadScattersIntoRandomSgeLists)
{
    if (!open(vq::OPS_RDMA_READ | vq::OPS_RDMA_WRITE, {0, 0, 16, 1, 0})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    std::vector<std::uint8_t> local(c.L.mem(dst), c.L.mem(dst) + region_size);
    for (int it = 0; it < 16 && !HasFailure(); it++) {
        std::uint32_t len = static_cast<std::uint32_t>(rnd(1, it % 4 == 0 ? 200000 : 5000));
        std::uint64_t roff = rnd(0, region_size - len);
        wr_desc d;
        d.op = OP_READ;
        d.wr_id = 300 + static_cast<std::uint64_t>(it);
        d.flags = vq::WR_SIGNALED;
        d.rkey = tgt.rkey;
        d.raddr = tgt.addr + roff;
        d.data = it % 3 == 0 ? DATA_SGE : DATA_SGE_LIST;
        auto sp = random_pieces(rng, static_cast<std::uint32_t>(dst), region_size, len,
                                d.data == DATA_SGE ? 1 : static_cast<unsigned>(rnd(1, c.qp()->cap.max_send_sge)));
        d.npieces = static_cast<std::uint16_t>(sp.size());
        std::copy(sp.begin(), sp.end(), d.pieces);
        ASSERT_EQ(c.L.post(c.lq, {d}), 0);
        auto s = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
        EXPECT_EQ(s[0].opcode, wc_opcode::rdma_read);
        EXPECT_EQ(s[0].byte_len, len);
        std::size_t k = 0;
        for (auto &p : sp)
            for (std::uint32_t i = 0; i < p.len; i++, k++)
                local[p.off + i] = model[roff + k];
        ASSERT_EQ(std::memcmp(local.data(), c.L.mem(dst), region_size), 0)
            << "local memory differs from what the read should have placed (iteration " << it << ")";
    }
    expect_target_matches_model("reads do not modify the target");
}

TEST_P(RcBuilders, AtomicsReturnTheOriginalAndUpdateTheTargetWord)
{
    if (!open(vq::OPS_ATOMIC_CMP_AND_SWP | vq::OPS_ATOMIC_FETCH_AND_ADD)) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    auto *res = reinterpret_cast<std::uint64_t *>(c.L.mem(dst));
    for (int it = 0; it < 40 && !HasFailure(); it++) {
        std::uint64_t woff = rnd(0, region_size / 8 - 1) * 8;
        std::uint64_t cur;
        std::memcpy(&cur, &model[woff], 8);
        wr_desc d;
        d.wr_id = static_cast<std::uint64_t>(it);
        d.flags = vq::WR_SIGNALED;
        d.rkey = tgt.rkey;
        d.raddr = tgt.addr + woff;
        d.data = it % 2 ? DATA_SGE : DATA_SGE_LIST;
        d.npieces = 1;
        std::uint64_t roff = rnd(0, 511) * 8;
        d.pieces[0] = {static_cast<std::uint32_t>(dst), 8, roff};
        std::uint64_t next = cur;
        switch (it % 3) {
        case 0:
            d.op = OP_FAA;
            d.a0 = rnd(0, ~0ull);
            next = cur + d.a0;
            break;
        case 1: // compare matches
            d.op = OP_CAS;
            d.a0 = cur;
            d.a1 = rnd(0, ~0ull);
            next = d.a1;
            break;
        default: // compare fails: no change
            d.op = OP_CAS;
            d.a0 = cur ^ 1;
            d.a1 = rnd(0, ~0ull);
            break;
        }
        ASSERT_EQ(c.L.post(c.lq, {d}), 0);
        auto s = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
        EXPECT_EQ(s[0].opcode, d.op == OP_FAA ? wc_opcode::fetch_add : wc_opcode::comp_swap);
        EXPECT_EQ(s[0].byte_len, 8u);
        EXPECT_EQ(res[roff / 8], cur) << "the original value is returned";
        std::memcpy(&model[woff], &next, 8);
    }
    expect_target_matches_model("after atomics");
}

/* ---- Reconnecting ---- */

// A connection that failed is reset at both ends and connected again, as an
// application recovers it: the new connection carries messages, whichever
// end is reset first (the second end's reset happens after the first end
// is ready for the new connection, and must not reach it).
TEST_P(ConnectedBuilders, APairResetAtBothEndsConnectsAgainWhicheverEndResetsFirst)
{
    if (!open(vq::OPS_SEND, {0, 0, 1, 1, 64})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    send_one(OP_SEND, DATA_SGE, 100, 1, 0, 0);
    for (int local_first = 0; local_first < 2 && !HasFailure(); local_first++) {
        SCOPED_TRACE(local_first ? "this end reset first" : "the peer reset first");
        vq::qp_attr a;
        a.state = vq::qp_state::err; // the failure
        ASSERT_EQ(vq::modify_qp(c.qp(), &a, vq::QP_ATTR_STATE), 0);
        c.L.drain(c.lq, 50);
        a.state = vq::qp_state::reset;
        if (local_first) {
            ASSERT_EQ(vq::modify_qp(c.qp(), &a, vq::QP_ATTR_STATE), 0);
        }
        ASSERT_EQ(c.P.modify(c.pq.index, vq::qp_state::reset), 0);
        if (!local_first) {
            ASSERT_EQ(vq::modify_qp(c.qp(), &a, vq::QP_ATTR_STATE), 0);
        }
        ASSERT_EQ(c.L.connect(c.lq, c.peer_addr()), 0);
        ASSERT_EQ(c.P.connect(c.pq.index, c.local_addr()), 0);
        EXPECT_TRUE(c.L.drain(c.lq, 50).empty()) << "the new connection failed at once";
        EXPECT_EQ(vq::get_qp_state(c.qp()), vq::qp_state::rts);
        for (int i = 0; i < 3; i++)
            send_one(OP_SEND, DATA_SGE, static_cast<std::uint32_t>(rnd(1, 5000)), 1, 0, 0);
    }
}

/* ---- Completion forms and signaling ---- */

TEST_P(ConnectedBuilders, UnsignaledRequestsProduceNoCompletionAndSqSigAllSignalsAll)
{
    if (!open(vq::OPS_RDMA_WRITE, {0, 0, 1, 1, 64})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    std::vector<wr_desc> ds;
    for (int i = 0; i < 10; i++) {
        wr_desc d;
        d.op = OP_WRITE;
        d.wr_id = static_cast<std::uint64_t>(i);
        d.flags = i % 4 == 3 ? vq::WR_SIGNALED : 0;
        d.rkey = tgt.rkey;
        d.raddr = tgt.addr + static_cast<std::uint64_t>(i) * 64;
        d.data = DATA_INLINE;
        d.npieces = 1;
        d.pieces[0] = {static_cast<std::uint32_t>(src), 64, static_cast<std::uint64_t>(i) * 64};
        std::copy(c.L.mem(src) + i * 64, c.L.mem(src) + i * 64 + 64, model.begin() + i * 64);
        ds.push_back(d);
    }
    ASSERT_EQ(c.L.post(c.lq, ds), 0);
    auto s = c.L.wait_wcs(c.lq, 2);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0].wr_id, 3u);
    EXPECT_EQ(s[1].wr_id, 7u);
    auto extra = c.L.drain(c.lq, 100);
    EXPECT_TRUE(extra.empty()) << "unsignaled writes completed: " << (extra.empty() ? "" : wc_str(extra[0]));
    expect_target_matches_model("unsignaled writes executed");

    // A second QP with sq_sig_all: every request completes.
    unsigned q2;
    ASSERT_EQ(c.L.create_qp(GetParam().type, vq::OPS_RDMA_WRITE, {0, 0, 1, 1, 64}, &q2, true), 0);
    qp_rep p2;
    ASSERT_EQ(c.P.create_qp(GetParam().type, vq::OPS_SEND, {}, &p2), 0);
    ASSERT_EQ(c.L.connect(q2, {c.P.addr(), p2.qpn}), 0);
    ASSERT_EQ(c.P.connect(p2.index, vq::get_qp_addr(c.L.qp(q2))), 0);
    for (auto &d : ds)
        d.flags = 0;
    ASSERT_EQ(c.L.post(q2, ds), 0);
    auto all = c.L.wait_wcs(q2, ds.size());
    ASSERT_EQ(all.size(), ds.size());
    for (std::size_t i = 0; i < all.size(); i++)
        EXPECT_EQ(all[i].wr_id, i);
}

TEST_P(ConnectedBuilders, IteratorPollFormReportsTheSameFieldsAsBatchPoll)
{
    if (!open(vq::OPS_RDMA_WRITE | vq::OPS_SEND, {0, 0, 1, 1, 64})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    std::vector<wr_desc> ds;
    for (int i = 0; i < 5; i++) {
        wr_desc d;
        d.op = OP_WRITE;
        d.wr_id = 0xabc00 + static_cast<std::uint64_t>(i);
        d.flags = vq::WR_SIGNALED;
        d.rkey = tgt.rkey;
        d.raddr = tgt.addr;
        d.data = DATA_SGE;
        d.npieces = 1;
        d.pieces[0] = {static_cast<std::uint32_t>(src), static_cast<std::uint32_t>(10 + i), 0};
        ds.push_back(d);
    }
    ASSERT_EQ(c.L.post(c.lq, ds), 0);
    vq::cq *cq = c.L.qps[c.lq].cq;
    std::vector<std::uint64_t> ids;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ids.size() < ds.size() && std::chrono::steady_clock::now() < end) {
        if (vq::start_poll(cq) != 0) {
            sched_yield();
            continue;
        }
        do {
            ids.push_back(cq->wr_id);
            EXPECT_EQ(cq->status, wc_status::success);
            EXPECT_EQ(vq::read_opcode(cq), wc_opcode::rdma_write);
            EXPECT_EQ(vq::read_qp_num(cq), c.qp()->qp_num);
            EXPECT_EQ(vq::read_wc_flags(cq), 0u);
        } while (vq::next_poll(cq) == 0);
        vq::end_poll(cq);
    }
    ASSERT_EQ(ids.size(), ds.size()) << "timed out (10 s) reading completions with start_poll";
    for (std::size_t i = 0; i < ids.size(); i++)
        EXPECT_EQ(ids[i], ds[i].wr_id);
    EXPECT_EQ(vq::start_poll(cq), -FI_EAGAIN) << "no completion left";
}

TEST_P(RcBuilders, FencedWriteAfterReadDoesNotOvertakeIt)
{
    if (!open(vq::OPS_RDMA_READ | vq::OPS_RDMA_WRITE, {0, 0, 1, 1, 64})) {
        if (skipped)
            GTEST_SKIP() << skip_reason;
        return;
    }
    // read X, then a fenced write to X: the read returns the old bytes.
    wr_desc rd;
    rd.op = OP_READ;
    rd.wr_id = 1;
    rd.flags = vq::WR_SIGNALED;
    rd.rkey = tgt.rkey;
    rd.raddr = tgt.addr + 4096;
    rd.data = DATA_SGE;
    rd.npieces = 1;
    rd.pieces[0] = {static_cast<std::uint32_t>(dst), 64, 0};
    wr_desc wr = rd;
    wr.op = OP_WRITE;
    wr.wr_id = 2;
    wr.flags = vq::WR_SIGNALED | vq::WR_FENCE;
    wr.data = DATA_INLINE;
    wr.pieces[0] = {static_cast<std::uint32_t>(src), 64, 0};
    ASSERT_EQ(c.L.post(c.lq, {rd, wr}), 0);
    auto s = c.L.wait_wcs(c.lq, 2);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0].status, wc_status::success);
    EXPECT_EQ(s[1].status, wc_status::success);
    EXPECT_EQ(std::memcmp(c.L.mem(dst), &model[4096], 64), 0) << "the read saw the later write";
    std::copy(c.L.mem(src), c.L.mem(src) + 64, model.begin() + 4096);
    expect_target_matches_model("after fenced write");
}

INSTANTIATE_TEST_SUITE_P(Conf, Builders,
                         ::testing::Values(variant{qp_type::rc, false}, variant{qp_type::rc, true},
                                           variant{qp_type::uc, false}, variant{qp_type::uc, true},
                                           variant{qp_type::ud, false}, variant{qp_type::ud, true}),
                         variant_name);
INSTANTIATE_TEST_SUITE_P(Conf, ConnectedBuilders,
                         ::testing::Values(variant{qp_type::rc, false}, variant{qp_type::rc, true},
                                           variant{qp_type::uc, false}, variant{qp_type::uc, true}),
                         variant_name);
INSTANTIATE_TEST_SUITE_P(Conf, RcBuilders,
                         ::testing::Values(variant{qp_type::rc, false}, variant{qp_type::rc, true}),
                         variant_name);

} // namespace
} // namespace shunt::conf
