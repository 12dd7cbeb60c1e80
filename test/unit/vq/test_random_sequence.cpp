// Randomised sequence: batches mixing sends (inline and SGE lists),
// RDMA writes and reads, write-with-immediate, atomics and deliberately bad
// batches, checked against a model of the target memory and of the expected
// completions. The seed is printed on failure; SHUNT_TEST_SEED overrides it.
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>

#include "vq_fixture.h"

namespace shunt::test {
namespace {

using vq::wc_status;

struct expect_send {
    std::uint64_t wr_id;
    vq::wc_opcode opcode;
    std::uint32_t byte_len;
    std::vector<std::uint8_t> read_back; ///< rdma_read: expected bytes
    std::uint64_t read_at = 0;            ///< rdma_read: local offset
    bool atomic = false;
    std::uint64_t old = 0;                ///< atomic: expected original value
};
struct expect_recv {
    std::vector<std::uint8_t> bytes;
    bool imm = false;
    std::uint32_t imm_data = 0;
    bool write_imm = false;
};

TEST(RandomSequence, MixedBatchesMatchTheModel)
{
    std::uint64_t seed = 20261130;
    if (const char *s = std::getenv("SHUNT_TEST_SEED"))
        seed = std::strtoull(s, nullptr, 0);
    SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with SHUNT_TEST_SEED=" + std::to_string(seed) + ")");
    std::mt19937_64 rng(seed);
    auto rnd = [&](std::uint64_t n) { return n ? rng() % n : 0; };

    vq_env e;
    qp_pair p(e, vq::qp_type::rc, vq::OPS_ALL & ~vq::OPS_TSO, vq::qp_cap{64, 256, 4, 4, 128});
    const std::size_t tsize = 1 << 16, lsize = 1 << 20;
    reg_buf target(e.pd, tsize), local(e.pd, lsize), rx(e.pd, 256 * 4096);
    std::vector<std::uint8_t> model(tsize, 0);
    std::deque<expect_recv> recvs;
    std::uint64_t next_rx = 0;
    for (int i = 0; i < 256; i++)
        ASSERT_EQ(vq::post_recv(p.b, static_cast<std::uint64_t>(i), rx.addr(i * 4096), 4096, rx.mr->lkey), 0);

    for (int round = 0; round < 300; round++) {
        SCOPED_TRACE("round " + std::to_string(round));
        std::vector<expect_send> sends;
        std::vector<expect_recv> new_recvs;
        std::vector<std::uint8_t> new_model = model;
        std::uint64_t local_off = 0;
        bool bad = rnd(10) == 0;
        int n = 1 + static_cast<int>(rnd(4));
        int bad_at = static_cast<int>(rnd(static_cast<std::uint64_t>(n)));
        vq::wr_start(p.a);
        for (int k = 0; k < n; k++) {
            p.a->wr_id = static_cast<std::uint64_t>(round) * 100 + static_cast<std::uint64_t>(k);
            p.a->wr_flags = vq::WR_SIGNALED;
            expect_send es{p.a->wr_id, vq::wc_opcode::send, 0, {}};
            if (bad && k == bad_at) {
                static const std::uint8_t big[200] = {};
                vq::wr_send(p.a);
                vq::wr_set_inline_data(p.a, big, sizeof big); // over max_inline_data: latched
                continue;
            }
            std::uint64_t what = rnd(6);
            std::uint32_t len = static_cast<std::uint32_t>(rnd(what == 0 ? 4000 : 2000));
            std::uint8_t *src = local.bytes.data() + local_off;
            for (std::uint32_t i = 0; i < len; i++)
                src[i] = static_cast<std::uint8_t>(rng());
            auto data_setter = [&](bool allow_inline) {
                if (allow_inline && len <= 128 && rnd(2)) {
                    vq::data_buf d[2] = {{src, len / 3}, {src + len / 3, len - len / 3}};
                    vq::wr_set_inline_data_list(p.a, 2, d);
                } else {
                    vq::sge s[4];
                    std::uint32_t at = 0, pieces = 1 + static_cast<std::uint32_t>(rnd(4));
                    for (std::uint32_t i = 0; i < pieces; i++) {
                        std::uint32_t piece = i + 1 == pieces ? len - at : static_cast<std::uint32_t>(rnd(len - at + 1));
                        s[i] = {local.addr(local_off + at), piece, local.mr->lkey};
                        at += piece;
                    }
                    vq::wr_set_sge_list(p.a, pieces, s);
                }
            };
            if (what == 0 || what == 1) { // send (maybe with imm)
                expect_recv er{std::vector<std::uint8_t>(src, src + len)};
                if (what == 1) {
                    er.imm = true;
                    er.imm_data = static_cast<std::uint32_t>(rng());
                    vq::wr_send_imm(p.a, er.imm_data);
                } else {
                    vq::wr_send(p.a);
                }
                data_setter(true);
                es.opcode = vq::wc_opcode::send;
                new_recvs.push_back(er);
            } else if (what == 2 || what == 3) { // write (maybe with imm)
                std::uint64_t off = rnd(tsize - len + 1);
                if (what == 3) {
                    expect_recv er;
                    er.write_imm = true;
                    er.imm_data = static_cast<std::uint32_t>(rng());
                    er.bytes.resize(len);
                    vq::wr_rdma_write_imm(p.a, target.mr->rkey, target.addr(off), er.imm_data);
                    new_recvs.push_back(er);
                } else {
                    vq::wr_rdma_write(p.a, target.mr->rkey, target.addr(off));
                }
                data_setter(true);
                std::memcpy(new_model.data() + off, src, len);
                es.opcode = vq::wc_opcode::rdma_write;
            } else if (what == 4) { // read
                std::uint64_t off = rnd(tsize - len + 1);
                vq::wr_rdma_read(p.a, target.mr->rkey, target.addr(off));
                data_setter(false);
                es.opcode = vq::wc_opcode::rdma_read;
                es.byte_len = len;
                es.read_back.assign(new_model.begin() + static_cast<std::ptrdiff_t>(off),
                                    new_model.begin() + static_cast<std::ptrdiff_t>(off + len));
                es.read_at = local_off;
            } else { // atomic
                std::uint64_t off = rnd(tsize / 8) * 8;
                std::uint64_t cur;
                std::memcpy(&cur, new_model.data() + off, 8);
                es.atomic = true;
                es.old = cur;
                es.byte_len = 8;
                es.read_at = local_off;
                std::uint64_t nv;
                if (rnd(2)) {
                    std::uint64_t add = rng();
                    vq::wr_atomic_fetch_add(p.a, target.mr->rkey, target.addr(off), add);
                    nv = cur + add;
                    es.opcode = vq::wc_opcode::fetch_add;
                } else {
                    std::uint64_t cmp = rnd(2) ? cur : cur + 1, swp = rng();
                    vq::wr_atomic_cmp_swp(p.a, target.mr->rkey, target.addr(off), cmp, swp);
                    nv = cmp == cur ? swp : cur;
                    es.opcode = vq::wc_opcode::comp_swap;
                }
                vq::wr_set_sge(p.a, local.mr->lkey, local.addr(local_off), 8);
                std::memcpy(new_model.data() + off, &nv, 8);
            }
            sends.push_back(std::move(es));
            local_off += (len > 8 ? len : 8) + 64;
        }
        int rc = vq::wr_complete(p.a);
        if (bad) {
            ASSERT_EQ(rc, -FI_EMSGSIZE);
            EXPECT_TRUE(drain(p.cq_a, 5).empty());
            EXPECT_EQ(target.bytes, model) << "a discarded batch changed memory";
            continue;
        }
        ASSERT_EQ(rc, 0);
        model = std::move(new_model);
        for (auto &r : new_recvs)
            recvs.push_back(std::move(r));
        // Completions: the sender's in order; the receiver's in order too.
        std::vector<vq::wc> sw, rw;
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        vq::wc w[16];
        while ((sw.size() < sends.size() || rw.size() < recvs.size()) && std::chrono::steady_clock::now() < end) {
            int k = vq::poll_cq(p.cq_a, 16, w);
            sw.insert(sw.end(), w, w + (k > 0 ? k : 0));
            k = vq::poll_cq(p.cq_b, 16, w);
            rw.insert(rw.end(), w, w + (k > 0 ? k : 0));
        }
        ASSERT_EQ(sw.size(), sends.size());
        ASSERT_EQ(rw.size(), recvs.size());
        for (std::size_t i = 0; i < sends.size(); i++) {
            const auto &x = sw[i];
            const auto &es = sends[i];
            ASSERT_EQ(x.status, wc_status::success) << vq::wc_status_str(x.status);
            EXPECT_EQ(x.wr_id, es.wr_id);
            EXPECT_EQ(x.opcode, es.opcode);
            if (es.opcode == vq::wc_opcode::rdma_read) {
                EXPECT_EQ(x.byte_len, es.byte_len);
                EXPECT_EQ(std::memcmp(local.bytes.data() + es.read_at, es.read_back.data(), es.read_back.size()), 0);
            }
            if (es.atomic) {
                std::uint64_t got;
                std::memcpy(&got, local.bytes.data() + es.read_at, 8);
                EXPECT_EQ(got, es.old);
            }
        }
        for (auto &x : rw) {
            ASSERT_EQ(x.status, wc_status::success);
            ASSERT_EQ(x.wr_id, next_rx % 256);
            expect_recv er = std::move(recvs.front());
            recvs.pop_front();
            EXPECT_EQ(x.byte_len, er.bytes.size());
            if (er.write_imm) {
                EXPECT_EQ(x.opcode, vq::wc_opcode::recv_rdma_with_imm);
                EXPECT_EQ(x.imm_data, er.imm_data);
            } else {
                EXPECT_EQ(x.opcode, vq::wc_opcode::recv);
                EXPECT_EQ(std::memcmp(rx.bytes.data() + (next_rx % 256) * 4096, er.bytes.data(), er.bytes.size()), 0);
                EXPECT_EQ((x.wc_flags & vq::WC_WITH_IMM) != 0, er.imm);
                if (er.imm) {
                    EXPECT_EQ(x.imm_data, er.imm_data);
                }
            }
            ASSERT_EQ(vq::post_recv(p.b, next_rx % 256, rx.addr((next_rx % 256) * 4096), 4096, rx.mr->lkey), 0);
            next_rx++;
        }
        ASSERT_EQ(target.bytes, model) << "target memory differs from the model";
    }
}

} // namespace
} // namespace shunt::test
