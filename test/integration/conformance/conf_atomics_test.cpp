// Atomics from two initiator processes at once on the same word of a third
// (this process): fetch-add and compare-swap must be atomic with respect to
// each other, so the totals are exact.
#include "conf_harness.h"

namespace shunt::conf {
namespace {

using vq::qp_type;

struct two_initiators {
    local_side L;
    peer_proc A{&L}, B{&L};
    unsigned qa = 0, qb = 0;
    qp_rep pa{}, pb{};
    int tgt = -1;

    /** @return "" or why the test must be skipped. */
    std::string open(bool seg)
    {
        constexpr std::uint64_t ops = vq::OPS_ATOMIC_FETCH_AND_ADD | vq::OPS_ATOMIC_CMP_AND_SWP |
                                      vq::OPS_RDMA_READ | vq::OPS_RDMA_WRITE;
        if (!L.ok || !A.ok() || (!B.ok() && conf_max_peers() >= 2)) {
            ADD_FAILURE() << "setup";
            return "";
        }
        if ((L.attr.ops[static_cast<unsigned>(qp_type::rc)] & ops) != ops)
            return "device does not claim RC atomics, read and write";
        if (conf_max_peers() < 2)
            return "needs two peers at once; the link under test takes one (SHUNT_CONF_MAX_PEERS)";
        tgt = L.reg(4096, ACC_ALL_REMOTE, seg, 0);
        if (tgt == -2)
            return "alloc_buf not supported";
        EXPECT_GE(tgt, 0);
        EXPECT_EQ(L.create_qp(qp_type::rc, vq::OPS_SEND, {}, &qa), 0);
        EXPECT_EQ(L.create_qp(qp_type::rc, vq::OPS_SEND, {}, &qb), 0);
        EXPECT_EQ(A.create_qp(qp_type::rc, ops, {}, &pa), 0);
        EXPECT_EQ(B.create_qp(qp_type::rc, ops, {}, &pb), 0);
        EXPECT_EQ(L.connect(qa, {A.addr(), pa.qpn}), 0);
        EXPECT_EQ(L.connect(qb, {B.addr(), pb.qpn}), 0);
        EXPECT_EQ(A.connect(pa.index, vq::get_qp_addr(L.qp(qa))), 0);
        EXPECT_EQ(B.connect(pb.index, vq::get_qp_addr(L.qp(qb))), 0);
        return "";
    }
    std::uint64_t word(std::size_t i) { return reinterpret_cast<volatile std::uint64_t *>(L.mem(tgt))[i]; }

    /** Run the loop in both peers at once. */
    void run(std::uint32_t mode, std::uint32_t iters, atomic_rep *ra, atomic_rep *rb, std::vector<std::uint64_t> *fa,
             std::vector<std::uint64_t> *fb)
    {
        atomic_req r{};
        r.mode = mode;
        r.rkey = L.mr(tgt)->rkey;
        r.iters = iters;
        r.raddr = L.addr(tgt, 64);
        r.lock_addr = L.addr(tgt, 0);
        r.index = pa.index;
        r.me = 0xA;
        ASSERT_TRUE(A.send_request(CMD_ATOMIC_LOOP, &r, sizeof r));
        r.index = pb.index;
        r.me = 0xB;
        ASSERT_TRUE(B.send_request(CMD_ATOMIC_LOOP, &r, sizeof r));
        std::vector<std::uint8_t> ba, bb;
        ASSERT_EQ(A.await_reply(&ba, 60000), 0);
        ASSERT_EQ(B.await_reply(&bb, 60000), 0);
        ASSERT_GE(ba.size(), sizeof(atomic_rep));
        ASSERT_GE(bb.size(), sizeof(atomic_rep));
        std::memcpy(ra, ba.data(), sizeof *ra);
        std::memcpy(rb, bb.data(), sizeof *rb);
        if (fa) {
            fa->resize((ba.size() - sizeof(atomic_rep)) / 8);
            std::memcpy(fa->data(), ba.data() + sizeof(atomic_rep), fa->size() * 8);
        }
        if (fb) {
            fb->resize((bb.size() - sizeof(atomic_rep)) / 8);
            std::memcpy(fb->data(), bb.data() + sizeof(atomic_rep), fb->size() * 8);
        }
    }
};

class Atomics : public conf_test, public ::testing::WithParamInterface<bool> {};

std::string status_of(const atomic_rep &r)
{
    return vq::wc_status_str(static_cast<vq::wc_status>(r.first_bad_status & 0xffff)) +
           std::string(" vendor_err ") + std::to_string(r.first_bad_status >> 16);
}

TEST_P(Atomics, TwoInitiatorsFetchAddReachTheExactTotalAndSeeEveryValueOnce)
{
    two_initiators t;
    std::string why = t.open(GetParam());
    if (!why.empty())
        GTEST_SKIP() << why;
    ASSERT_FALSE(HasFailure());
    constexpr std::uint32_t n = 20000;
    atomic_rep ra{}, rb{};
    std::vector<std::uint64_t> fa, fb;
    t.run(ATOM_FAA, n, &ra, &rb, &fa, &fb);
    ASSERT_EQ(ra.bad_wcs, 0u) << "initiator A: " << status_of(ra);
    ASSERT_EQ(rb.bad_wcs, 0u) << "initiator B: " << status_of(rb);
    EXPECT_EQ(ra.done, n);
    EXPECT_EQ(rb.done, n);
    EXPECT_EQ(t.word(8), 2ull * n) << "lost or duplicated increments";
    // Every fetch returned a distinct previous value: together exactly 0 .. 2n-1.
    std::vector<std::uint64_t> all(fa);
    all.insert(all.end(), fb.begin(), fb.end());
    std::sort(all.begin(), all.end());
    ASSERT_EQ(all.size(), 2ull * n);
    for (std::uint64_t i = 0; i < all.size(); i++)
        if (all[i] != i) {
            ADD_FAILURE() << "fetched values are not a permutation of 0.." << 2 * n - 1 << ": position " << i
                          << " holds " << all[i];
            break;
        }
    // Each initiator's own fetches increase.
    EXPECT_TRUE(std::is_sorted(fa.begin(), fa.end()));
    EXPECT_TRUE(std::is_sorted(fb.begin(), fb.end()));
    EXPECT_EQ(t.word(0), 0u) << "neighbouring word touched";
    EXPECT_EQ(t.word(9), 0u) << "neighbouring word touched";
}

TEST_P(Atomics, TwoInitiatorsCompareSwapCounterReachesTheExactTotal)
{
    two_initiators t;
    std::string why = t.open(GetParam());
    if (!why.empty())
        GTEST_SKIP() << why;
    ASSERT_FALSE(HasFailure());
    constexpr std::uint32_t n = 5000;
    atomic_rep ra{}, rb{};
    t.run(ATOM_CAS_COUNTER, n, &ra, &rb, nullptr, nullptr);
    ASSERT_EQ(ra.bad_wcs, 0u) << "initiator A: " << status_of(ra);
    ASSERT_EQ(rb.bad_wcs, 0u) << "initiator B: " << status_of(rb);
    EXPECT_EQ(ra.done, n);
    EXPECT_EQ(rb.done, n);
    EXPECT_EQ(t.word(8), 2ull * n);
    std::printf("compare-swap counter: %llu + %llu failed compares\n", static_cast<unsigned long long>(ra.retries),
                static_cast<unsigned long long>(rb.retries));
}

TEST_P(Atomics, TwoInitiatorsCompareSwapLockSerialisesPlainReadModifyWrite)
{
    two_initiators t;
    std::string why = t.open(GetParam());
    if (!why.empty())
        GTEST_SKIP() << why;
    ASSERT_FALSE(HasFailure());
    constexpr std::uint32_t n = 2000;
    atomic_rep ra{}, rb{};
    t.run(ATOM_CAS_LOCK, n, &ra, &rb, nullptr, nullptr);
    ASSERT_EQ(ra.bad_wcs, 0u) << "initiator A: " << status_of(ra);
    ASSERT_EQ(rb.bad_wcs, 0u) << "initiator B: " << status_of(rb);
    EXPECT_EQ(t.word(8), 2ull * n) << "the lock did not exclude: increments lost";
    EXPECT_EQ(t.word(0), 0u) << "lock left held";
}

INSTANTIATE_TEST_SUITE_P(Conf, Atomics, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool> &i) {
                             return std::string(i.param ? "SegmentMemory" : "HeapMemory");
                         });

} // namespace
} // namespace shunt::conf
