// Limits the device reports are enforced; the per-user host-wide files live
// in a directory only that user can write; misuse of the posting session is
// reported, never a hang or a poisoned next batch.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdio>

#include <cstdlib>
#include <filesystem>

#include "shm_peer_client.h"
#include "test_util.h"

namespace shunt::test {
namespace {

TEST(ShmLimits, CreateCqBeyondMaxCqFails)
{
    local_end me(vq::qp_type::rc, 4096);
    vq::device_attr da;
    ASSERT_EQ(vq::query_device(me.ctx, &da), 0);
    std::vector<vq::cq *> cqs;
    vq::cq_init_attr ca;
    ca.cqe = 1;
    // local_end holds one CQ already.
    for (std::uint32_t i = 1; i < da.max_cq; i++) {
        vq::cq *c = nullptr;
        ASSERT_EQ(vq::create_cq(me.ctx, &ca, &c), 0) << i;
        cqs.push_back(c);
    }
    vq::cq *extra = nullptr;
    EXPECT_EQ(vq::create_cq(me.ctx, &ca, &extra), -FI_ENOSPC) << "max_cq is " << da.max_cq;
    EXPECT_EQ(vq::destroy_cq(cqs.back()), 0);
    cqs.pop_back();
    EXPECT_EQ(vq::create_cq(me.ctx, &ca, &extra), 0) << "a freed CQ can be created again";
    cqs.push_back(extra);
    for (vq::cq *c : cqs)
        EXPECT_EQ(vq::destroy_cq(c), 0);
}

TEST(ShmLimits, CreateSrqBeyondMaxSrqFails)
{
    local_end me(vq::qp_type::rc, 4096);
    vq::device_attr da;
    ASSERT_EQ(vq::query_device(me.ctx, &da), 0);
    std::vector<vq::srq *> srqs;
    vq::srq_init_attr sa;
    sa.max_wr = 1;
    sa.max_sge = 1;
    for (std::uint32_t i = 0; i < da.max_srq; i++) {
        vq::srq *s = nullptr;
        ASSERT_EQ(vq::create_srq(me.pd, &sa, &s), 0) << i;
        srqs.push_back(s);
    }
    vq::srq *extra = nullptr;
    EXPECT_EQ(vq::create_srq(me.pd, &sa, &extra), -FI_ENOSPC);
    for (vq::srq *s : srqs)
        EXPECT_EQ(vq::destroy_srq(s), 0);
}

/* ---- the per-user directory ---- */

constexpr uid_t victim_uid = 54321, squatter_uid = 54322;

/** open_device of shm0 in a child running as victim_uid. @return its result. */
int open_as_victim()
{
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(victim_uid) || setuid(victim_uid))
            _exit(200);
        vq::context *ctx = nullptr;
        int rc = vq::open_device(vq::find_device("shm0"), &ctx);
        if (rc == 0 && vq::close_device(ctx) != 0)
            _exit(201);
        _exit(rc == 0 ? 0 : rc == -FI_EACCES ? 1 : rc == -FI_ENOMEM ? 2 : 3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st))
        return -1000;
    switch (WEXITSTATUS(st)) {
    case 0: return 0;
    case 1: return -FI_EACCES;
    case 2: return -FI_ENOMEM;
    default: return -2000 - WEXITSTATUS(st);
    }
}

struct squat_paths {
    std::string dir = "/dev/shm/.shunt-" + std::to_string(victim_uid);
    std::string old_table = "/dev/shm/.shunt-qpn-" + std::to_string(victim_uid);
    std::string old_lock = "/dev/shm/.shunt-" + std::to_string(victim_uid) + ".lock";
    void clear()
    {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
        std::filesystem::remove(old_table, ec);
        std::filesystem::remove(old_lock, ec);
    }
    squat_paths() { clear(); }
    ~squat_paths() { clear(); }
};

TEST(ShmPrivateDir, AnotherUsersDirectoryIsRefusedByName)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to act as two other users";
    squat_paths p;
    // Files another user planted where older versions kept them are no
    // obstacle: the table and the lock live in the private directory.
    for (const std::string &f : {p.old_table, p.old_lock}) {
        int fd = ::open(f.c_str(), O_CREAT | O_RDWR, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(fchown(fd, squatter_uid, squatter_uid), 0);
        ::close(fd);
    }
    EXPECT_EQ(open_as_victim(), 0) << "planted files in /dev/shm must not stop open_device";
    struct stat st;
    ASSERT_EQ(stat(p.dir.c_str(), &st), 0) << "the private directory was not created";
    EXPECT_EQ(st.st_uid, victim_uid);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    p.clear();

    // The directory itself, made by someone else: refused with -FI_EACCES
    // (not a misleading -FI_ENOMEM).
    ASSERT_EQ(mkdir(p.dir.c_str(), 0755), 0);
    ASSERT_EQ(chown(p.dir.c_str(), squatter_uid, squatter_uid), 0);
    EXPECT_EQ(open_as_victim(), -FI_EACCES);
    p.clear();

    // Ours, but others may write into it: refused too.
    ASSERT_EQ(mkdir(p.dir.c_str(), 0700), 0);
    ASSERT_EQ(chown(p.dir.c_str(), victim_uid, victim_uid), 0);
    ASSERT_EQ(chmod(p.dir.c_str(), 0777), 0);
    EXPECT_EQ(open_as_victim(), -FI_EACCES);
    p.clear();

    // A file in the way of the directory.
    int fd = ::open(p.dir.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fchown(fd, victim_uid, victim_uid), 0);
    ::close(fd);
    EXPECT_EQ(open_as_victim(), -FI_EACCES);
}

/* ---- session misuse on a locked QP ---- */

/** Two connected RC QPs in this process (locked: no thread domain). */
struct loop_pair {
    local_end a{vq::qp_type::rc, 1 << 16}, b{vq::qp_type::rc, 1 << 16};
    loop_pair()
    {
        EXPECT_EQ(a.connect(vq::get_qp_addr(b.qp)), 0);
        EXPECT_EQ(b.connect(vq::get_qp_addr(a.qp)), 0);
    }
    /** A correct one-send batch from a to b, received. */
    void one_good_batch(std::uint64_t id)
    {
        ASSERT_EQ(vq::post_recv(b.qp, id, b.addr(), 64, b.mr->lkey), 0);
        vq::wr_start(a.qp);
        a.qp->wr_id = id;
        a.qp->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(a.qp);
        vq::wr_set_sge(a.qp, a.mr->lkey, a.addr(), 16);
        ASSERT_EQ(vq::wr_complete(a.qp), 0) << "a correct batch after the misuse";
        auto s = a.poll(1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].status, vq::wc_status::success);
        auto r = b.poll(1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].wr_id, id);
    }
};

/** Run @p body in a child process: a hang there is a failure with a message
 *  after @p secs, not a suite timeout. @return the child's wait status
 *  (exit 1 when an expectation in @p body failed), -1 when it hung. */
template <class F>
int in_child_within(F body, int secs)
{
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
        body();
        _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    EXPECT_GT(pid, 0);
    int st = 0;
    if (pid <= 0)
        return -1;
    if (!wait_until([&] { return waitpid(pid, &st, WNOHANG) == pid; }, std::chrono::seconds(secs))) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        return -1;
    }
    return st;
}

/** Single-call posts from inside this thread's own open session (a locked
 *  QP: each would wait for the lock the session holds). */
[[maybe_unused]] void single_calls_inside_a_session(loop_pair &lp)
{
    vq::qp *q = lp.a.qp;
    vq::wr_start(q);
    q->wr_id = 1;
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    vq::wr_set_sge(q, lp.a.mr->lkey, lp.a.addr(), 16);
    const void *src = lp.a.buf.data();
    EXPECT_EQ(vq::post_send(q, 2, src, 8, 0, vq::WR_INLINE), -FI_EOPBADSTATE) << "inline fast path";
    EXPECT_EQ(vq::post_send(q, 3, src, 4096, lp.a.mr->lkey, vq::WR_SIGNALED), -FI_EOPBADSTATE);
    vq::data_buf d{src, 8};
    EXPECT_EQ(vq::post_send_imm_inline(q, 4, 7, &d, 1, 0), -FI_EOPBADSTATE);
    EXPECT_EQ(vq::post_send_imm_hdr_inline(q, 4, 7, 0x55, src, 8, 0), -FI_EOPBADSTATE) << "one-slot word path";
    EXPECT_EQ(vq::post_write(q, 5, src, 8, lp.a.mr->lkey, lp.b.mr->rkey, lp.b.addr(), vq::WR_SIGNALED),
              -FI_EOPBADSTATE);
    EXPECT_EQ(vq::wr_complete(q), -FI_EOPBADSTATE) << "the open batch fails with the misuse";
    EXPECT_TRUE(lp.a.poll(1, 100).empty()) << "nothing of the batch or the calls was posted";
    EXPECT_TRUE(lp.b.poll(1, 100).empty());
    lp.one_good_batch(6);
}

#ifdef NDEBUG
// Release builds: the misuse is an error return, the next batch is clean.
TEST(ShmSessionMisuse, SingleCallPostsInsideTheSessionFailWithoutHanging)
{
    int st = in_child_within(
        [] {
            loop_pair lp;
            single_calls_inside_a_session(lp);
        },
        10);
    ASSERT_NE(st, -1) << "a single-call post inside the open session hung (10 s)";
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "wait status " << st << ": see the child's failures above";
}

TEST(ShmSessionMisuse, WrStartTwiceFailsTheBatchWithoutHanging)
{
    loop_pair lp;
    vq::wr_start(lp.a.qp);
    lp.a.qp->wr_id = 1;
    lp.a.qp->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(lp.a.qp);
    vq::wr_set_sge(lp.a.qp, lp.a.mr->lkey, lp.a.addr(), 16);
    vq::wr_start(lp.a.qp); // would wait for its own lock
    EXPECT_EQ(vq::wr_complete(lp.a.qp), -FI_EOPBADSTATE);
    EXPECT_TRUE(lp.a.poll(1, 100).empty()) << "the failed batch posted nothing";
    lp.one_good_batch(2);
}

TEST(ShmSessionMisuse, UnbalancedCompleteAndAbortLeaveTheNextBatchClean)
{
    loop_pair lp;
    lp.one_good_batch(1);
    EXPECT_EQ(vq::wr_complete(lp.a.qp), -FI_EOPBADSTATE);
    vq::wr_abort(lp.a.qp);
    vq::wr_abort(lp.a.qp);
    EXPECT_EQ(vq::wr_complete(lp.a.qp), -FI_EOPBADSTATE);
    lp.one_good_batch(2);
    lp.one_good_batch(3);
}
#else
// Debug builds: the same misuse is an assertion.
TEST(ShmSessionMisuseDeathTest, WrStartTwiceAsserts)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    loop_pair lp;
    EXPECT_DEATH(
        {
            vq::wr_start(lp.a.qp);
            vq::wr_start(lp.a.qp);
        },
        "session API misuse");
    lp.one_good_batch(1);
}

TEST(ShmSessionMisuseDeathTest, SingleCallPostInsideTheSessionAsserts)
{
    int st = in_child_within(
        [] {
            loop_pair lp;
            vq::wr_start(lp.a.qp);
            (void)vq::post_send(lp.a.qp, 1, lp.a.buf.data(), 8, 0, vq::WR_INLINE);
        },
        10);
    ASSERT_NE(st, -1) << "a single-call post inside the open session hung (10 s)";
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) << "wait status " << st;
}

TEST(ShmSessionMisuseDeathTest, UnbalancedCompleteAsserts)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    loop_pair lp;
    EXPECT_DEATH((void)vq::wr_complete(lp.a.qp), "session API misuse");
    EXPECT_DEATH(vq::wr_abort(lp.a.qp), "session API misuse");
    lp.one_good_batch(1);
}
#endif

} // namespace
} // namespace shunt::test
