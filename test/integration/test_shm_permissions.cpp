// Segments are 0600: a process of another user cannot attach ours, and we
// do not attach theirs (needs root to switch users; skipped otherwise).
#include "shm_peer_client.h"

namespace shunt::test {
namespace {

TEST(ShmPermissions, AnotherUserCannotAttach)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to run a peer as another user";
    local_end me(vq::qp_type::rc);
    shm_peer other("rc", 65534); // nobody
    ASSERT_NE(other.addr.dev.len, 0u) << "the peer could not start as nobody";
    // -FI_EACCES, or -FI_ENOENT when our segment sits in a directory that user
    // cannot even search (a root-only hugetlbfs mount).
    int rc = other.connect(vq::get_qp_addr(me.qp));
    EXPECT_TRUE(rc == -FI_EACCES || rc == -FI_ENOENT) << rc;
    EXPECT_EQ(me.connect(other.addr), -FI_EACCES);
    EXPECT_EQ(vq::get_qp_state(me.qp), vq::qp_state::init) << "a failed RTR leaves the QP in INIT";
    vq::ah *ah = nullptr;
    vq::ah_attr aa;
    aa.dest = other.addr.dev;
    EXPECT_EQ(vq::create_ah(me.pd, &aa, &ah), -FI_EACCES);
}

} // namespace
} // namespace shunt::test
