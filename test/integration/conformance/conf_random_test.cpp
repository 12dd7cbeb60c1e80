// A randomised sequence of mixed operations on one RC QP to a peer (send,
// send_imm, rdma_write, write_imm, rdma_read, atomics; SGE, SGE-list, inline
// and inline-list data; signaled and unsignaled; batches of 1..8; single-call
// posts), checked against a model of the peer's memory, of this process's
// read/atomic destinations, and of every completion on both sides.
// The seed is printed on failure; SHUNT_TEST_SEED replays it.
#include "conf_harness.h"

namespace shunt::conf {
namespace {

using vq::qp_type;
using vq::wc_opcode;
using vq::wc_status;

constexpr std::size_t tsize = 64 * 1024;  ///< peer target (RDMA, atomics)
constexpr std::size_t rsize = 512 * 1024; ///< peer receive area (8 slots of 64 KiB)
constexpr std::size_t lsize = 256 * 1024; ///< local source / destination

struct expect_wc {
    std::uint64_t wr_id;
    wc_opcode opcode;
    std::uint32_t byte_len; ///< checked when check_len
    bool check_len;
};
struct expect_rwc {
    std::uint64_t wr_id;
    wc_opcode opcode;
    std::uint32_t byte_len;
    bool imm;
    std::uint32_t imm_data;
    bool solicited;
};

class RandomSequence : public conf_test, public ::testing::WithParamInterface<bool> {};

TEST_P(RandomSequence, MixedOperationsMatchTheModel)
{
    const bool seg = GetParam();
    conn c;
    constexpr std::uint64_t ops = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM | vq::OPS_RDMA_WRITE |
                                  vq::OPS_RDMA_WRITE_WITH_IMM | vq::OPS_RDMA_READ |
                                  vq::OPS_ATOMIC_CMP_AND_SWP | vq::OPS_ATOMIC_FETCH_AND_ADD;
    CONF_REQUIRE_OPS(c.L.attr, qp_type::rc, ops);
    ASSERT_EQ(c.setup(qp_type::rc, ops, {64, 0, 8, 1, 256}, 0, {0, 128, 1, 8, 0}), 0);
    const std::uint32_t max_sge = c.qp()->cap.max_send_sge, max_inl = c.qp()->cap.max_inline_data;
    const std::uint32_t max_rsge = c.pq.cap.max_recv_sge;
    const std::uint64_t tseed = rnd(1, ~0ull >> 2);
    reg_rep T{}, R{};
    int trc = c.P.reg(tsize, ACC_ALL_REMOTE, seg, tseed, &T);
    if (seg && trc == -FI_EOPNOTSUPP)
        GTEST_SKIP() << "alloc_buf not supported";
    ASSERT_EQ(trc, 0);
    ASSERT_EQ(c.P.reg(rsize, vq::ACCESS_LOCAL_WRITE, seg, tseed + 1, &R), 0);
    int S = c.L.reg(lsize, vq::ACCESS_LOCAL_WRITE, seg, rnd(1, ~0ull >> 2));
    int D = c.L.reg(lsize, vq::ACCESS_LOCAL_WRITE, seg, 0);
    if (S == -2)
        GTEST_SKIP() << "alloc_buf not supported";
    ASSERT_GE(S, 0);
    ASSERT_GE(D, 0);

    std::vector<std::uint8_t> mT(tsize), mR(rsize), mD(lsize, 0);
    fill_pattern(mT.data(), tsize, tseed);
    fill_pattern(mR.data(), rsize, tseed + 1);
    std::uint64_t next_id = 1, next_rid = 1u << 20;
    std::size_t nops = 0, nsig = 0, nrecv = 0;

    auto rand_data_len = [&](bool inl) -> std::uint32_t {
        if (inl)
            return static_cast<std::uint32_t>(rnd(1, max_inl));
        switch (rnd(0, 3)) {
        case 0: return static_cast<std::uint32_t>(rnd(1, 48));
        case 1: return static_cast<std::uint32_t>(rnd(1, 1024));
        case 2: return static_cast<std::uint32_t>(rnd(1, 16384));
        default: return static_cast<std::uint32_t>(rnd(1, 60000));
        }
    };
    auto check_memory = [&](const char *when) {
        auto gT = c.P.read_mem(T.index, 0, tsize);
        auto gR = c.P.read_mem(R.index, 0, rsize);
        for (std::size_t i = 0; i < tsize; i++)
            if (gT[i] != mT[i]) {
                ADD_FAILURE() << when << ": peer target differs from the model at byte " << i;
                break;
            }
        for (std::size_t i = 0; i < rsize; i++)
            if (gR[i] != mR[i]) {
                ADD_FAILURE() << when << ": peer receive area differs from the model at byte " << i;
                break;
            }
        for (std::size_t i = 0; i < lsize; i++)
            if (c.L.mem(D)[i] != mD[i]) {
                ADD_FAILURE() << when << ": local read/atomic area differs from the model at byte " << i;
                break;
            }
    };

    const int batches = 400;
    for (int b = 0; b < batches && !HasFailure(); b++) {
        std::vector<wr_desc> ds;
        std::vector<expect_wc> want;
        std::vector<expect_rwc> rwant;
        unsigned n = static_cast<unsigned>(rnd(1, 8));
        bool single = rnd(0, 9) == 0; // a single-call post instead of a session
        if (single)
            n = 1;
        std::uint64_t d_cursor = 0; // local destination pieces never overlap within a batch
        // Nor do the receives of a batch: verbs leaves overlapping receive buffers in
        // flight undefined (mlx5 copies small receives out of the CQE when polled).
        std::uint64_t r_cursor = 0;
        for (unsigned i = 0; i < n; i++) {
            wr_desc d;
            d.wr_id = next_id++;
            bool sig = rnd(0, 2) != 0;
            d.flags = sig ? vq::WR_SIGNALED : 0;
            int kind = static_cast<int>(rnd(0, single ? 1 : 7));
            if (single)
                kind = kind == 0 ? 0 : 2; // post_send or post_write
            switch (kind) {
            case 0: // send
            case 1: // send_imm
            case 3: // write_imm
            case 2: { // write
                bool is_send = kind <= 1;
                d.op = kind == 0 ? OP_SEND : kind == 1 ? OP_SEND_IMM : kind == 2 ? OP_WRITE : OP_WRITE_IMM;
                if (single)
                    d.op = is_send ? OP_SEND : OP_WRITE;
                d.imm = static_cast<std::uint32_t>(rnd(0, 0xffffffffu));
                unsigned dk = static_cast<unsigned>(rnd(0, 4));
                std::uint32_t len = dk == 0 && kind != 2 ? 0 : rand_data_len(dk >= 3);
                if (single)
                    dk = rnd(0, 1) ? 1 : 3, len = rand_data_len(dk == 3);
                d.data = static_cast<std::uint8_t>(len == 0 ? unsigned{DATA_NONE} : dk == 0 ? unsigned{DATA_SGE} : dk);
                std::vector<piece> sp;
                if (len) {
                    unsigned np = d.data == DATA_SGE || d.data == DATA_INLINE ? 1
                                  : d.data == DATA_SGE_LIST ? static_cast<unsigned>(rnd(1, max_sge))
                                                            : static_cast<unsigned>(rnd(1, 6));
                    sp = random_pieces(rng, static_cast<std::uint32_t>(S), lsize, len, np);
                    d.npieces = static_cast<std::uint16_t>(sp.size());
                    std::copy(sp.begin(), sp.end(), d.pieces);
                }
                auto bytes = gather(c.L.mem(S), sp);
                bool sol = rnd(0, 3) == 0;
                if (sol)
                    d.flags |= vq::WR_SOLICITED;
                if (!is_send) {
                    std::uint64_t off = rnd(0, tsize - len);
                    d.rkey = T.rkey;
                    d.raddr = T.addr + off;
                    std::copy(bytes.begin(), bytes.end(), mT.begin() + static_cast<std::ptrdiff_t>(off));
                }
                if (is_send || d.op == OP_WRITE_IMM) {
                    // The peer posts the receive this message consumes.
                    std::vector<piece> rp;
                    if (is_send) {
                        std::uint32_t rtot = len + static_cast<std::uint32_t>(rnd(0, 100));
                        rp = random_pieces(rng, R.index, rsize / 8, rtot, static_cast<unsigned>(rnd(1, max_rsge)));
                        for (auto &p : rp)
                            p.off += r_cursor;
                        r_cursor += rsize / 8;
                        std::size_t k = 0;
                        for (auto &p : rp)
                            for (std::uint32_t x = 0; x < p.len && k < len; x++, k++)
                                mR[p.off + x] = bytes[k];
                    }
                    std::uint64_t rid = next_rid++;
                    ASSERT_EQ(c.P.post_recv(c.pq.index, rid, rp), 0);
                    rwant.push_back({rid, is_send ? wc_opcode::recv : wc_opcode::recv_rdma_with_imm, len,
                                     d.op == OP_SEND_IMM || d.op == OP_WRITE_IMM, d.imm, sol});
                }
                if (sig)
                    want.push_back({d.wr_id, is_send ? wc_opcode::send : wc_opcode::rdma_write, len, false});
                break;
            }
            case 4:
            case 5: { // read
                d.op = OP_READ;
                std::uint32_t len = rand_data_len(false);
                std::uint64_t off = rnd(0, tsize - len);
                d.rkey = T.rkey;
                d.raddr = T.addr + off;
                unsigned np = static_cast<unsigned>(rnd(1, max_sge));
                std::size_t room = lsize / 8;
                if (d_cursor + room > lsize)
                    d_cursor = 0;
                auto dp = random_pieces(rng, static_cast<std::uint32_t>(D), room, len, np);
                for (auto &p : dp)
                    p.off += d_cursor;
                d_cursor += room;
                d.data = np == 1 && rnd(0, 1) ? DATA_SGE : DATA_SGE_LIST;
                if (dp.size() > 1)
                    d.data = DATA_SGE_LIST;
                d.npieces = static_cast<std::uint16_t>(dp.size());
                std::copy(dp.begin(), dp.end(), d.pieces);
                std::size_t k = 0;
                for (auto &p : dp)
                    for (std::uint32_t x = 0; x < p.len; x++, k++)
                        mD[p.off + x] = mT[off + k];
                if (sig)
                    want.push_back({d.wr_id, wc_opcode::rdma_read, len, true});
                break;
            }
            default: { // atomics
                std::uint64_t woff = rnd(0, tsize / 8 - 1) * 8;
                std::uint64_t cur;
                std::memcpy(&cur, &mT[woff], 8);
                std::uint64_t res_off = rnd(0, lsize / 8 - 1) * 8;
                d.rkey = T.rkey;
                d.raddr = T.addr + woff;
                d.data = DATA_SGE;
                d.npieces = 1;
                d.pieces[0] = {static_cast<std::uint32_t>(D), 8, res_off};
                std::uint64_t next = cur;
                if (kind == 6) {
                    d.op = OP_FAA;
                    d.a0 = rnd(0, 1000);
                    next = cur + d.a0;
                } else {
                    d.op = OP_CAS;
                    bool match = rnd(0, 1);
                    d.a0 = match ? cur : cur + 1;
                    d.a1 = rnd(0, ~0ull);
                    if (match)
                        next = d.a1;
                }
                std::memcpy(&mT[woff], &next, 8);
                std::memcpy(&mD[res_off], &cur, 8);
                if (sig)
                    want.push_back({d.wr_id, d.op == OP_FAA ? wc_opcode::fetch_add : wc_opcode::comp_swap, 8, true});
                break;
            }
            }
            ds.push_back(d);
            nops++;
        }
        int rc;
        if (single) {
            const wr_desc &d = ds[0];
            bool inl = d.data == DATA_INLINE;
            const std::uint8_t *p = d.data == DATA_NONE ? c.L.mem(S) : c.L.mem(S) + d.pieces[0].off;
            std::uint32_t len = d.data == DATA_NONE ? 0 : d.pieces[0].len;
            unsigned fl = d.flags | (inl ? vq::WR_INLINE : 0);
            rc = d.op == OP_SEND ? vq::post_send(c.qp(), d.wr_id, p, len, c.L.mr(S)->lkey, fl)
                                 : vq::post_write(c.qp(), d.wr_id, p, len, c.L.mr(S)->lkey, d.rkey, d.raddr, fl);
        } else {
            rc = c.L.post(c.lq, ds);
        }
        ASSERT_EQ(rc, 0) << "batch " << b;
        nsig += want.size();
        nrecv += rwant.size();
        auto got = c.L.wait_wcs(c.lq, want.size());
        ASSERT_EQ(got.size(), want.size()) << "batch " << b;
        for (std::size_t i = 0; i < want.size(); i++) {
            SCOPED_TRACE("batch " + std::to_string(b) + " completion " + std::to_string(i) + " " + wc_str(got[i]));
            EXPECT_EQ(got[i].status, wc_status::success);
            EXPECT_EQ(got[i].wr_id, want[i].wr_id);
            EXPECT_EQ(got[i].opcode, want[i].opcode);
            if (want[i].check_len) {
                EXPECT_EQ(got[i].byte_len, want[i].byte_len);
            }
        }
        std::vector<vq::wc> rg;
        if (!rwant.empty()) // (n = 0 would mean "everything within the timeout")
            rg = c.P.wait_wcs(c.pq.index, static_cast<std::uint32_t>(rwant.size()));
        ASSERT_EQ(rg.size(), rwant.size()) << "batch " << b;
        for (std::size_t i = 0; i < rwant.size(); i++) {
            SCOPED_TRACE("batch " + std::to_string(b) + " receive " + std::to_string(i) + " " + wc_str(rg[i]));
            EXPECT_EQ(rg[i].status, wc_status::success);
            EXPECT_EQ(rg[i].wr_id, rwant[i].wr_id);
            EXPECT_EQ(rg[i].opcode, rwant[i].opcode);
            EXPECT_EQ(rg[i].byte_len, rwant[i].byte_len);
            EXPECT_EQ(bool(rg[i].wc_flags & vq::WC_WITH_IMM), rwant[i].imm);
            if (rwant[i].imm) {
                EXPECT_EQ(rg[i].imm_data, rwant[i].imm_data);
            }
            EXPECT_EQ(bool(rg[i].wc_flags & vq::WC_SOLICITED), rwant[i].solicited);
            EXPECT_EQ(rg[i].src_qp, c.qp()->qp_num);
        }
        // Every tenth batch: a signaled barrier (requests execute in order), then
        // compare all three memory areas with the model.
        if (b % 10 == 9 || b == batches - 1) {
            wr_desc z;
            z.op = OP_WRITE;
            z.wr_id = next_id++;
            z.flags = vq::WR_SIGNALED;
            z.rkey = T.rkey;
            z.raddr = T.addr;
            ASSERT_EQ(c.L.post(c.lq, {z}), 0);
            auto zw = c.L.wait_wcs(c.lq, 1);
            ASSERT_EQ(zw.size(), 1u);
            EXPECT_EQ(zw[0].wr_id, z.wr_id);
            check_memory(("after batch " + std::to_string(b)).c_str());
        }
    }
    EXPECT_TRUE(c.L.drain(c.lq, 50).empty()) << "extra completions (unsignaled successes must not complete)";
    std::printf("random sequence: %zu requests, %zu signaled, %zu receives\n", nops, nsig, nrecv);
}

INSTANTIATE_TEST_SUITE_P(Conf, RandomSequence, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool> &i) {
                             return std::string(i.param ? "SegmentMemory" : "HeapMemory");
                         });

} // namespace
} // namespace shunt::conf
