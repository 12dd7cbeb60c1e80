// Randomised sequence across two processes: batches of RDMA writes and reads
// (to the peer's private memory through process_vm_* and to its segment
// memory directly), atomics and sends of random sizes and SGE lists, checked
// against a model of the peer's memory. Seed printed on failure;
// SHUNT_TEST_SEED overrides it.
#include <cstdlib>
#include <random>

#include "shm_peer_client.h"

namespace shunt::test {
namespace {

using vq::wc_status;

TEST(ShmRandom, MixedOperationsAgainstAPeerMatchTheModel)
{
    std::uint64_t seed = 777;
    if (const char *s = std::getenv("SHUNT_TEST_SEED"))
        seed = std::strtoull(s, nullptr, 0);
    SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with SHUNT_TEST_SEED=" + std::to_string(seed) + ")");
    std::mt19937_64 rng(seed);
    auto rnd = [&](std::uint64_t n) { return n ? rng() % n : 0; };

    shm_peer peer("rc");
    local_end me(vq::qp_type::rc);
    ASSERT_EQ(me.connect(peer.addr), 0);
    ASSERT_EQ(peer.connect(vq::get_qp_addr(me.qp)), 0);
    const std::size_t region = 1 << 20; // the peer's segment buffer size; private uses its first MiB
    std::vector<std::uint8_t> model[2] = {std::vector<std::uint8_t>(region, 0), std::vector<std::uint8_t>(region, 0)};
    // The peer's receive area is its private memory from 2 MiB on, 16 KiB per receive.
    const std::uint64_t rx_base = 2 << 20, rx_slot = 16384;
    for (int round = 0; round < 150; round++) {
        SCOPED_TRACE("round " + std::to_string(round));
        struct check {
            int kind; // 0 none, 1 read, 2 atomic
            std::uint64_t local;
            std::vector<std::uint8_t> bytes;
        };
        std::vector<check> checks;
        std::vector<std::vector<std::uint8_t>> sends;
        std::uint64_t loff = 0;
        int n = 1 + static_cast<int>(rnd(6));
        vq::wr_start(me.qp);
        for (int k = 0; k < n; k++) {
            me.qp->wr_id = static_cast<std::uint64_t>(k);
            me.qp->wr_flags = vq::WR_SIGNALED;
            int seg = static_cast<int>(rnd(2));
            std::uint64_t raddr = seg ? peer.seg_addr : peer.priv_addr;
            std::uint32_t rkey = seg ? peer.seg_rkey : peer.priv_rkey;
            std::uint64_t what = rnd(5);
            std::uint32_t len = 1 + static_cast<std::uint32_t>(rnd(what == 4 ? 12000 : 70000));
            std::uint8_t *src = me.buf.data() + loff;
            for (std::uint32_t i = 0; i < len; i++)
                src[i] = static_cast<std::uint8_t>(rng());
            auto sges = [&] {
                vq::sge s[8];
                std::uint32_t at = 0, pieces = 1 + static_cast<std::uint32_t>(rnd(8));
                for (std::uint32_t i = 0; i < pieces; i++) {
                    std::uint32_t piece = i + 1 == pieces ? len - at : static_cast<std::uint32_t>(rnd(len - at + 1));
                    s[i] = {me.addr(loff + at), piece, me.mr->lkey};
                    at += piece;
                }
                vq::wr_set_sge_list(me.qp, pieces, s);
            };
            if (what == 0 || what == 1) { // write
                std::uint64_t off = rnd(region - len);
                vq::wr_rdma_write(me.qp, rkey, raddr + off);
                if (len <= 256 && what == 1)
                    vq::wr_set_inline_data(me.qp, src, len);
                else
                    sges();
                std::copy(src, src + len, model[seg].begin() + static_cast<std::ptrdiff_t>(off));
                checks.push_back({0, 0, {}});
            } else if (what == 2) { // read
                std::uint64_t off = rnd(region - len);
                vq::wr_rdma_read(me.qp, rkey, raddr + off);
                sges();
                checks.push_back({1, loff, {model[seg].begin() + static_cast<std::ptrdiff_t>(off),
                                            model[seg].begin() + static_cast<std::ptrdiff_t>(off + len)}});
            } else if (what == 3) { // atomic
                std::uint64_t off = rnd(region / 8) * 8;
                std::uint64_t cur;
                std::memcpy(&cur, model[seg].data() + off, 8);
                std::uint64_t nv;
                if (rnd(2)) {
                    std::uint64_t add = rng();
                    vq::wr_atomic_fetch_add(me.qp, rkey, raddr + off, add);
                    nv = cur + add;
                } else {
                    std::uint64_t cmp = rnd(2) ? cur : ~cur, swp = rng();
                    vq::wr_atomic_cmp_swp(me.qp, rkey, raddr + off, cmp, swp);
                    nv = cmp == cur ? swp : cur;
                }
                vq::wr_set_sge(me.qp, me.mr->lkey, me.addr(loff), 8);
                std::memcpy(model[seg].data() + off, &nv, 8);
                std::vector<std::uint8_t> old(8);
                std::memcpy(old.data(), &cur, 8);
                checks.push_back({2, loff, old});
            } else { // send (rendezvous from 32 KiB is not reached: < 12 KB)
                vq::wr_send(me.qp);
                sges();
                sends.emplace_back(src, src + len);
                checks.push_back({0, 0, {}});
            }
            loff += len + 64;
        }
        if (!sends.empty()) {
            ASSERT_EQ(peer.post_recv(static_cast<std::uint32_t>(sends.size()), rx_slot, rx_base, 1), 0);
        }
        ASSERT_EQ(vq::wr_complete(me.qp), 0);
        auto w = me.poll(checks.size());
        ASSERT_EQ(w.size(), checks.size());
        for (std::size_t i = 0; i < checks.size(); i++) {
            ASSERT_EQ(w[i].status, wc_status::success) << vq::wc_status_str(w[i].status);
            ASSERT_EQ(w[i].wr_id, i);
            if (checks[i].kind) {
                EXPECT_EQ(std::memcmp(me.buf.data() + checks[i].local, checks[i].bytes.data(), checks[i].bytes.size()), 0)
                    << "request " << i << (checks[i].kind == 1 ? " (read)" : " (atomic)");
            }
        }
        if (!sends.empty()) {
            auto r = peer.poll(static_cast<std::uint32_t>(sends.size()));
            ASSERT_EQ(r.size(), sends.size());
            for (std::size_t i = 0; i < sends.size(); i++) {
                ASSERT_EQ(r[i].status, wc_status::success);
                ASSERT_EQ(r[i].byte_len, sends[i].size());
                EXPECT_EQ(peer.read(rx_base + i * rx_slot, sends[i].size()), sends[i]) << "send " << i;
            }
        }
        if (round % 25 == 24) {
            EXPECT_EQ(peer.read(0, region, false), model[0]) << "peer private memory differs from the model";
            EXPECT_EQ(peer.read(0, region, true), model[1]) << "peer segment memory differs from the model";
        }
    }
}

} // namespace
} // namespace shunt::test
