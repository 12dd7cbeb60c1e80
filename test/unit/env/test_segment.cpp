// env::segment: shared-memory segments between processes.
// Cross-process cases use real processes: the test binary re-executes itself
// (posix_spawn) to run one DISABLED_ helper test, with the segment name in
// SHUNT_TEST_SEGMENT. Nothing here initialises the EAL.
#include "env/env.h"
#include "env/errors.h"
#include "env/segment.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <spawn.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace shunt;
using namespace shunt::env;

extern char **environ;

namespace {

constexpr const char *name_var = "SHUNT_TEST_SEGMENT";

bool file_exists(const std::string &path)
{
    struct stat st;
    return lstat(path.c_str(), &st) == 0;
}

std::string shm_path(const std::string &name)
{
    return "/dev/shm/shunt." + name;
}

bool huge_usable()
{
    hugepage_info h = probe_hugepages();
    return !h.mount.empty() && h.free >= 2;
}

// Re-execute this binary to run Segment.DISABLED_<test> with @p name in the environment.
pid_t spawn_helper(const char *test, const std::string &name)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    std::string filter = std::string("--gtest_filter=Segment.DISABLED_") + test;
    std::string also = "--gtest_also_run_disabled_tests";
    char *argv[] = {self, filter.data(), also.data(), nullptr};
    std::vector<std::string> env_strings;
    for (char **e = environ; *e; e++)
        if (std::strncmp(*e, name_var, std::strlen(name_var)) != 0)
            env_strings.emplace_back(*e);
    env_strings.push_back(std::string(name_var) + "=" + name);
    std::vector<char *> envp;
    for (std::string &s : env_strings)
        envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, self, nullptr, nullptr, argv, envp.data()) != 0)
        return -1;
    return pid;
}

// Reap @p pid within @p timeout; kills it if it overruns. @return true and the status.
bool reap(pid_t pid, int &status, std::chrono::milliseconds timeout = std::chrono::seconds(30))
{
    bool done = test::wait_until([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout);
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    return done;
}

const char *helper_name()
{
    return std::getenv(name_var);
}

} // namespace

TEST(Segment, CreateAttachClose)
{
    std::string name = test::unique_name("seg");
    segment a;
    ASSERT_EQ(a.create(name, 100), 0);
    ASSERT_TRUE(a.is_open());
    EXPECT_EQ(a.name(), name);
    EXPECT_GE(a.size(), 100u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 64, 0u) << "data() must be cache-line aligned";
    ASSERT_TRUE(file_exists(a.path()));
    EXPECT_NE(a.path().find("/shunt." + name), std::string::npos);
    const auto *bytes = static_cast<const unsigned char *>(a.data());
    for (std::size_t i = 0; i < a.size(); i++)
        ASSERT_EQ(bytes[i], 0) << "not zero-filled at " << i;
    std::memset(a.data(), 0x5a, a.size());
    EXPECT_TRUE(segment_exists(name));

    segment b;
    ASSERT_EQ(b.attach(name), 0);
    EXPECT_EQ(b.size(), a.size());
    EXPECT_EQ(b.path(), a.path());
    EXPECT_EQ(b.hugepages(), a.hugepages());
    EXPECT_NE(b.data(), a.data()) << "a second mapping in the same process";
    EXPECT_EQ(static_cast<unsigned char *>(b.data())[b.size() - 1], 0x5a);
    static_cast<unsigned char *>(b.data())[0] = 0x11;
    EXPECT_EQ(bytes[0], 0x11) << "both mappings see the same memory";

    std::string path = a.path();
    a.close();
    EXPECT_FALSE(a.is_open());
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(a.size(), 0u);
    a.close(); // idempotent
    EXPECT_TRUE(file_exists(path)) << "b still holds it";
    EXPECT_TRUE(segment_exists(name));
    b.close();
    EXPECT_FALSE(file_exists(path)) << "the last owner unlinks";
    EXPECT_FALSE(segment_exists(name));
}

TEST(Segment, BadNamesAreEinval)
{
    std::vector<std::string> bad = {"", ".", "..", "a/b", "../x", "a b", "x\ty", "caf\xc3\xa9", "*",
                                    std::string(201, 'n'), std::string("a\0b", 3)};
    for (const std::string &n : bad) {
        EXPECT_EQ(segment_name_valid(n), -FI_EINVAL) << n;
        segment s;
        EXPECT_EQ(s.create(n, 4096), -FI_EINVAL) << n;
        EXPECT_FALSE(s.is_open());
        EXPECT_EQ(s.attach(n), -FI_EINVAL) << n;
        EXPECT_FALSE(segment_exists(n));
    }
    for (const std::string &n : {std::string("A-z_0.9"), std::string(".hidden"), std::string("-")})
        EXPECT_EQ(segment_name_valid(n), 0) << n;
    // The longest name works end to end.
    std::string longest = test::unique_name("L");
    longest += std::string(segment_name_max - longest.size(), 'x');
    ASSERT_EQ(segment_name_valid(longest), 0);
    segment s;
    ASSERT_EQ(s.create(longest, 1), 0);
    segment t;
    EXPECT_EQ(t.attach(longest), 0);
}

TEST(Segment, BadSizes)
{
    std::string name = test::unique_name("seg");
    segment s;
    EXPECT_EQ(s.create(name, 0), -FI_EINVAL);
    EXPECT_EQ(s.create(name, SIZE_MAX), -FI_ENOMEM);
    EXPECT_EQ(s.create(name, std::size_t{1} << 60), -FI_ENOMEM);
    EXPECT_FALSE(s.is_open());
    EXPECT_FALSE(segment_exists(name));
    EXPECT_FALSE(file_exists(shm_path(name)));
}

TEST(Segment, SizeIsRoundedToPages)
{
    std::string name = test::unique_name("seg");
    segment s;
    ASSERT_EQ(s.create(name, 1, segment_backing::shm), 0);
    struct stat st;
    ASSERT_EQ(stat(s.path().c_str(), &st), 0);
    long page = sysconf(_SC_PAGESIZE);
    EXPECT_EQ(st.st_size % page, 0);
    EXPECT_EQ(static_cast<std::size_t>(st.st_size), s.size() + segment_header_size);
    EXPECT_GE(s.size(), 1u);
    segment t;
    ASSERT_EQ(t.create(test::unique_name("seg"), static_cast<std::size_t>(page), segment_backing::shm), 0);
    EXPECT_GE(t.size(), static_cast<std::size_t>(page)) << "the header does not eat into the size asked";
}

TEST(Segment, DuplicateLiveNameIsEexist)
{
    std::string name = test::unique_name("seg");
    segment a;
    ASSERT_EQ(a.create(name, 4096), 0);
    static_cast<char *>(a.data())[0] = 'A';
    segment b;
    EXPECT_EQ(b.create(name, 4096), -FI_EEXIST);
    EXPECT_EQ(b.create(name, 4096, segment_backing::shm), -FI_EEXIST);
    EXPECT_FALSE(b.is_open());
    EXPECT_EQ(static_cast<char *>(a.data())[0], 'A') << "the live segment is untouched";
    EXPECT_TRUE(file_exists(a.path()));
    a.close();
    EXPECT_EQ(b.create(name, 4096), 0) << "the name is free once the owner closed";
    EXPECT_EQ(static_cast<char *>(b.data())[0], 0);
}

TEST(Segment, SameNameInTheOtherDirectoryIsEexist)
{
    if (!huge_usable())
        GTEST_SKIP() << "no free hugepages in a writable hugetlbfs mount";
    std::string name = test::unique_name("seg");
    segment a;
    ASSERT_EQ(a.create(name, 4096, segment_backing::shm), 0);
    segment b;
    EXPECT_EQ(b.create(name, 4096, segment_backing::hugepages), -FI_EEXIST);
    a.close();
    ASSERT_EQ(b.create(name, 4096, segment_backing::hugepages), 0);
    EXPECT_EQ(a.create(name, 4096, segment_backing::shm), -FI_EEXIST);
}

TEST(Segment, AttachSkipsAStaleFileInTheOtherDirectory)
{
    if (!huge_usable())
        GTEST_SKIP() << "no free hugepages in a writable hugetlbfs mount";
    std::string name = test::unique_name("seg");
    segment live;
    ASSERT_EQ(live.create(name, 4096, segment_backing::shm), 0);
    static_cast<char *>(live.data())[0] = 'L';
    // An unheld file of that name where attach looks first.
    std::string stale = probe_hugepages().mount + "/shunt." + name;
    int fd = open(stale.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    close(fd);
    segment s;
    ASSERT_EQ(s.attach(name), 0);
    EXPECT_EQ(static_cast<char *>(s.data())[0], 'L');
    EXPECT_FALSE(file_exists(stale)) << "the stale file is removed on the way";
}

TEST(Segment, CreateOrAttachOnOpenObjectIsEbusy)
{
    std::string name = test::unique_name("seg");
    segment a;
    ASSERT_EQ(a.create(name, 4096), 0);
    void *d = a.data();
    EXPECT_EQ(a.create(test::unique_name("seg"), 4096), -FI_EBUSY);
    EXPECT_EQ(a.attach(name), -FI_EBUSY);
    EXPECT_EQ(a.data(), d);
    EXPECT_EQ(a.name(), name);
}

TEST(Segment, ModeIs0600OnDiskWhateverTheUmask)
{
    for (mode_t mask : {mode_t{0}, mode_t{022}, mode_t{0277}}) {
        mode_t old = umask(mask);
        segment s;
        int rc = s.create(test::unique_name("seg"), 4096);
        umask(old);
        ASSERT_EQ(rc, 0);
        struct stat st;
        ASSERT_EQ(lstat(s.path().c_str(), &st), 0);
        EXPECT_TRUE(S_ISREG(st.st_mode));
        EXPECT_EQ(st.st_mode & 07777, 0600u) << "umask " << std::oct << mask;
        EXPECT_EQ(st.st_uid, geteuid());
        EXPECT_EQ(st.st_nlink, 1u);
    }
}

TEST(Segment, UnlinkedWhenTheLastOfSeveralOwnersCloses)
{
    std::string name = test::unique_name("seg");
    segment owners[4];
    ASSERT_EQ(owners[0].create(name, 8192), 0);
    for (int i = 1; i < 4; i++)
        ASSERT_EQ(owners[i].attach(name), 0);
    std::string path = owners[0].path();
    for (int i : {2, 0, 3}) {
        owners[i].close();
        EXPECT_TRUE(file_exists(path)) << "closed " << i;
        EXPECT_TRUE(segment_exists(name));
    }
    owners[1].close();
    EXPECT_FALSE(file_exists(path));
}

TEST(Segment, MoveTransfersOwnership)
{
    std::string name = test::unique_name("seg");
    segment a;
    ASSERT_EQ(a.create(name, 4096), 0);
    std::string path = a.path();
    segment b(std::move(a));
    EXPECT_FALSE(a.is_open());
    EXPECT_TRUE(a.name().empty());
    ASSERT_TRUE(b.is_open());
    a.close(); // closing the moved-from object does not release b's hold
    EXPECT_TRUE(file_exists(path));
    segment c;
    ASSERT_EQ(c.create(test::unique_name("seg"), 4096), 0);
    std::string cpath = c.path();
    c = std::move(b); // c's own segment is released first
    EXPECT_FALSE(file_exists(cpath));
    EXPECT_EQ(c.name(), name);
    c.close();
    EXPECT_FALSE(file_exists(path));
}

TEST(Segment, AttachMissingIsEnoent)
{
    segment s;
    EXPECT_EQ(s.attach(test::unique_name("nosuch")), -FI_ENOENT);
    EXPECT_FALSE(s.is_open());
}

TEST(Segment, AttachRefusesWrongModeAndBadHeader)
{
    std::string name = test::unique_name("seg");
    segment a;
    ASSERT_EQ(a.create(name, 4096, segment_backing::shm), 0);
    segment b;
    ASSERT_EQ(chmod(a.path().c_str(), 0644), 0);
    EXPECT_EQ(b.attach(name), -FI_EACCES);
    ASSERT_EQ(chmod(a.path().c_str(), 0600), 0);

    int fd = open(a.path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    std::uint64_t magic, junk = 0x1234;
    ASSERT_EQ(pread(fd, &magic, sizeof magic, 0), 8);
    ASSERT_EQ(pwrite(fd, &junk, sizeof junk, 0), 8);
    EXPECT_EQ(b.attach(name), -FI_EINVAL) << "bad magic";
    ASSERT_EQ(pwrite(fd, &magic, sizeof magic, 0), 8);
    std::uint32_t version = segment_version + 1;
    ASSERT_EQ(pwrite(fd, &version, sizeof version, 8), 4);
    EXPECT_EQ(b.attach(name), -FI_EINVAL) << "other version";
    version = segment_version;
    ASSERT_EQ(pwrite(fd, &version, sizeof version, 8), 4);
    close(fd);
    EXPECT_FALSE(b.is_open());
    EXPECT_EQ(b.attach(name), 0) << "restored header attaches";
}

TEST(Segment, HugepageBacked)
{
    if (!huge_usable())
        GTEST_SKIP() << "no free hugepages in a writable hugetlbfs mount "
                        "(reserve with sysctl vm.nr_hugepages=N; mount hugetlbfs)";
    hugepage_info h = probe_hugepages();
    std::string name = test::unique_name("seg");
    segment a;
    ASSERT_EQ(a.create(name, 1000, segment_backing::hugepages), 0);
    EXPECT_TRUE(a.hugepages());
    EXPECT_EQ(a.path().rfind(h.mount + "/shunt.", 0), 0u) << a.path();
    struct stat st;
    ASSERT_EQ(stat(a.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(static_cast<std::size_t>(st.st_size) % h.page_size, 0u);
    EXPECT_EQ(a.size() + segment_header_size, static_cast<std::size_t>(st.st_size));
    std::memset(a.data(), 0x77, a.size());
    segment b;
    ASSERT_EQ(b.attach(name), 0);
    EXPECT_TRUE(b.hugepages());
    EXPECT_EQ(static_cast<unsigned char *>(b.data())[a.size() - 1], 0x77);
    std::string path = a.path();
    a.close();
    b.close();
    EXPECT_FALSE(file_exists(path));

    // ::any prefers hugepages when they are free.
    segment c;
    ASSERT_EQ(c.create(test::unique_name("seg"), 4096), 0);
    EXPECT_TRUE(c.hugepages());
}

TEST(Segment, HugepagesWhenNotEnoughAreFreeIsEnomem)
{
    hugepage_info h = probe_hugepages();
    std::size_t page = h.page_size ? h.page_size : (2u << 20);
    std::string name = test::unique_name("seg");
    segment s;
    EXPECT_EQ(s.create(name, (h.free + 16) * page, segment_backing::hugepages), -FI_ENOMEM);
    EXPECT_FALSE(s.is_open());
    EXPECT_FALSE(segment_exists(name));
}

TEST(Segment, ShmBacking)
{
    segment s;
    ASSERT_EQ(s.create(test::unique_name("seg"), 4096, segment_backing::shm), 0);
    EXPECT_FALSE(s.hugepages());
    EXPECT_EQ(s.path(), shm_path(s.name()));
}

TEST(Segment, ConcurrentCreatorsOneWins)
{
    // Separate segment objects have separate open files, so threads race here
    // exactly as processes would.
    std::string name = test::unique_name("race");
    constexpr int n = 6;
    segment segs[n];
    int rcs[n];
    std::atomic<int> start{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < n; i++)
        ts.emplace_back([&, i] {
            start.fetch_add(1);
            while (start.load() < n)
                std::this_thread::yield();
            rcs[i] = segs[i].create(name, 4096);
        });
    for (auto &t : ts)
        t.join();
    int winners = 0;
    for (int i = 0; i < n; i++) {
        EXPECT_TRUE(rcs[i] == 0 || rcs[i] == -FI_EEXIST) << rcs[i];
        winners += rcs[i] == 0;
    }
    EXPECT_EQ(winners, 1);
}

TEST(Segment, ChurnOfCreateAttachCloseLeavesNothingBehind)
{
    std::string name = test::unique_name("churn");
    constexpr int threads = 4, rounds = 150;
    std::atomic<int> creates{0}, attaches{0}, failures{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; i++)
        ts.emplace_back([&] {
            for (int r = 0; r < rounds; r++) {
                segment s;
                int rc = -1;
                for (int tries = 0; tries < 1000 && rc != 0; tries++) {
                    rc = s.create(name, 4096);
                    if (rc == 0) {
                        creates++;
                    } else if (rc == -FI_EEXIST) {
                        rc = s.attach(name);
                        if (rc == 0)
                            attaches++;
                        else if (rc != -FI_ENOENT)
                            break; // only "removed meanwhile" is a reason to retry
                    } else {
                        break;
                    }
                }
                if (rc != 0) {
                    failures++;
                    return;
                }
                std::atomic_ref<std::uint64_t>(*static_cast<std::uint64_t *>(s.data())).fetch_add(1);
            }
        });
    for (auto &t : ts)
        t.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(creates + attaches, threads * rounds);
    EXPECT_GE(creates.load(), 1);
    EXPECT_FALSE(segment_exists(name));
    hugepage_info h = probe_hugepages();
    EXPECT_FALSE(file_exists(shm_path(name)));
    if (!h.mount.empty()) {
        EXPECT_FALSE(file_exists(h.mount + "/shunt." + name));
    }
}

// --- across processes ---------------------------------------------------

constexpr std::size_t pattern_bytes = 1 << 16;

unsigned char pattern(std::size_t i)
{
    return static_cast<unsigned char>(i * 131 + 7);
}

// Helper: attach the parent's segment, check its pattern, write a reply.
TEST(Segment, DISABLED_ChildAttachVerifyReply)
{
    const char *name = helper_name();
    if (!name)
        GTEST_SKIP() << "run by Segment.WrittenByOneProcessReadByAnother";
    segment s;
    ASSERT_EQ(s.attach(name), 0);
    ASSERT_GE(s.size(), 2 * pattern_bytes);
    const auto *p = static_cast<const unsigned char *>(s.data());
    for (std::size_t i = 0; i < pattern_bytes; i++)
        ASSERT_EQ(p[i], pattern(i)) << "at " << i;
    auto *reply = static_cast<unsigned char *>(s.data()) + pattern_bytes;
    for (std::size_t i = 0; i < pattern_bytes; i++)
        reply[i] = static_cast<unsigned char>(~pattern(i));
}

TEST(Segment, WrittenByOneProcessReadByAnother)
{
    std::string name = test::unique_name("xp");
    segment s;
    ASSERT_EQ(s.create(name, 2 * pattern_bytes), 0);
    auto *p = static_cast<unsigned char *>(s.data());
    for (std::size_t i = 0; i < pattern_bytes; i++)
        p[i] = pattern(i);
    pid_t pid = spawn_helper("ChildAttachVerifyReply", name);
    ASSERT_GT(pid, 0);
    int st = 0;
    ASSERT_TRUE(reap(pid, st)) << "helper did not finish in time";
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "helper failed, status " << st;
    for (std::size_t i = 0; i < pattern_bytes; i++)
        ASSERT_EQ(p[pattern_bytes + i], static_cast<unsigned char>(~pattern(i))) << "at " << i;
    EXPECT_TRUE(file_exists(s.path())) << "the child's close must not unlink: we still hold it";
    EXPECT_TRUE(segment_exists(name));
}

// Helper: attach finds segments in hugetlbfs mounts made after its last
// call (it keeps the mount list), in the same mount namespace and after a
// move to a new one. Runs in its own process, in a private mount namespace:
// nothing it mounts is seen outside. Exit 77: this machine cannot (not
// root, no hugetlbfs, fewer than 2 free hugepages).
TEST(Segment, DISABLED_ChildMountsAfterAttach)
{
    const char *base = helper_name();
    if (!base)
        GTEST_SKIP() << "run by Segment.AttachSeesHugetlbfsMountedLater";
    if (!huge_usable())
        _exit(77);
    segment probe;
    ASSERT_EQ(probe.attach(std::string(base) + "-none"), -FI_ENOENT); // the list is read and kept
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        _exit(77);
    // The namespace changed: the next create and attach must read it anew.
    const std::string old_mount = probe_hugepages().mount;
    char d1[] = "/tmp/shunt-huge1-XXXXXX", d2[] = "/tmp/shunt-huge2-XXXXXX";
    ASSERT_NE(mkdtemp(d1), nullptr);
    ASSERT_NE(mkdtemp(d2), nullptr);
    struct rm_dirs { // the mounts go with this process's namespace; the directories stay outside it
        const char *a, *b;
        ~rm_dirs() { (void)rmdir(a), (void)rmdir(b); }
    } rm{d1, d2};
    ASSERT_EQ(umount2(old_mount.c_str(), MNT_DETACH), 0) << std::strerror(errno);
    if (mount("none", d1, "hugetlbfs", 0, "mode=0700") != 0)
        _exit(77);
    segment a, a2;
    ASSERT_EQ(a.create(std::string(base) + "-1", 4096, segment_backing::hugepages), 0);
    ASSERT_EQ(a.path().rfind(std::string(d1) + "/", 0), 0u) << a.path();
    ASSERT_EQ(a2.attach(std::string(base) + "-1"), 0) << "a mount of a new namespace not seen";
    // The same namespace: a mount and an unmount after the last attach.
    ASSERT_EQ(mount("none", d2, "hugetlbfs", 0, "mode=0700"), 0) << std::strerror(errno);
    ASSERT_EQ(umount2(d1, MNT_DETACH), 0) << std::strerror(errno);
    segment b, b2;
    ASSERT_EQ(b.create(std::string(base) + "-2", 4096, segment_backing::hugepages), 0);
    ASSERT_EQ(b.path().rfind(std::string(d2) + "/", 0), 0u) << b.path();
    ASSERT_EQ(b2.attach(std::string(base) + "-2"), 0) << "a mount made after the last attach not seen";
    b2.close();
    b.close();
    a2.close();
    a.close();
    (void)umount2(d2, MNT_DETACH);
}

TEST(Segment, AttachSeesHugetlbfsMountedLater)
{
    pid_t pid = spawn_helper("ChildMountsAfterAttach", test::unique_name("mnt"));
    ASSERT_GT(pid, 0);
    int st = 0;
    ASSERT_TRUE(reap(pid, st)) << "helper did not finish in time";
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
        GTEST_SKIP() << "needs root, hugetlbfs and 2 free hugepages (sysctl vm.nr_hugepages=N)";
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "helper failed, status " << st;
}

// Helper: create, fill, wait (bounded) for the parent's go word, check its reply.
TEST(Segment, DISABLED_ChildCreateAndWait)
{
    const char *name = helper_name();
    if (!name)
        GTEST_SKIP() << "run by Segment.CreatedByAnotherProcessOutlivesIt";
    segment s;
    ASSERT_EQ(s.create(name, pattern_bytes + 64), 0);
    auto *p = static_cast<unsigned char *>(s.data());
    for (std::size_t i = 64; i < pattern_bytes + 64; i++)
        p[i] = pattern(i);
    // The name is visible as soon as create() returns: say when the data is there.
    std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t *>(p + 8)).store(0xf111u, std::memory_order_release);
    std::atomic_ref<std::uint32_t> go(*reinterpret_cast<std::uint32_t *>(p));
    ASSERT_TRUE(test::wait_until([&] { return go.load(std::memory_order_acquire) == 0xfeedu; }))
        << "the parent never wrote the go word";
    EXPECT_EQ(p[4], 0x42);
}

TEST(Segment, CreatedByAnotherProcessOutlivesIt)
{
    std::string name = test::unique_name("xp");
    pid_t pid = spawn_helper("ChildCreateAndWait", name);
    ASSERT_GT(pid, 0);
    int st = 0;
    bool seen = test::wait_until([&] { return segment_exists(name); });
    segment s;
    int rc = seen ? s.attach(name) : -1;
    if (rc == 0) {
        auto *p = static_cast<unsigned char *>(s.data());
        std::atomic_ref<std::uint32_t> filled(*reinterpret_cast<std::uint32_t *>(p + 8));
        EXPECT_TRUE(test::wait_until([&] { return filled.load(std::memory_order_acquire) == 0xf111u; }))
            << "the child never said its data is written";
        for (std::size_t i = 64; i < pattern_bytes + 64; i++)
            EXPECT_EQ(p[i], pattern(i));
        p[4] = 0x42;
        std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t *>(p)).store(0xfeedu, std::memory_order_release);
    }
    ASSERT_TRUE(reap(pid, st)) << "helper did not finish in time";
    ASSERT_TRUE(seen) << "the child's segment never appeared";
    ASSERT_EQ(rc, 0);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "helper failed, status " << st;
    EXPECT_TRUE(file_exists(s.path())) << "the creator exited, but we still hold it";
    EXPECT_TRUE(segment_exists(name));
    std::string path = s.path();
    s.close();
    EXPECT_FALSE(file_exists(path)) << "we were the last owner";
}

// Helper: create and die without closing.
TEST(Segment, DISABLED_ChildCreateAndDie)
{
    const char *name = helper_name();
    if (!name)
        GTEST_SKIP() << "run by the stale-segment tests";
    segment s;
    ASSERT_EQ(s.create(name, 4096), 0);
    std::memset(s.data(), 0xee, 4096);
    kill(getpid(), SIGKILL);
}

namespace {

// Run the helper that creates @p name and is killed; @return its path.
std::string leave_stale_segment(const std::string &name)
{
    pid_t pid = spawn_helper("ChildCreateAndDie", name);
    EXPECT_GT(pid, 0);
    if (pid <= 0)
        return {};
    int st = 0;
    EXPECT_TRUE(reap(pid, st));
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "status " << st;
    hugepage_info h = probe_hugepages();
    for (std::string dir : {h.mount, std::string("/dev/shm")})
        if (!dir.empty() && file_exists(dir + "/shunt." + name))
            return dir + "/shunt." + name;
    ADD_FAILURE() << "the killed child left no file";
    return {};
}

} // namespace

TEST(Segment, CleanupRemovesSegmentOfKilledOwner)
{
    std::string live_name = test::unique_name("live");
    segment live;
    ASSERT_EQ(live.create(live_name, 4096), 0);

    std::string name = test::unique_name("dead");
    std::string path = leave_stale_segment(name);
    ASSERT_FALSE(path.empty());
    EXPECT_FALSE(segment_exists(name)) << "nobody holds it";
    EXPECT_GE(cleanup_stale_segments(), 1);
    EXPECT_FALSE(file_exists(path));
    EXPECT_TRUE(file_exists(live.path())) << "cleanup leaves live segments alone";
    EXPECT_TRUE(segment_exists(live_name));
    segment again;
    EXPECT_EQ(again.create(name, 4096), 0);
    EXPECT_EQ(static_cast<unsigned char *>(again.data())[0], 0) << "a fresh segment, not the dead one's";
}

TEST(Segment, CleanupSparesAnUnheldFileOfALiveCreatorUntilItIsOneSecondOld)
{
    // An unheld copy of a real segment whose recorded creator (this process)
    // is alive: only its age can make it stale.
    segment real;
    ASSERT_EQ(real.create(test::unique_name("src"), 4096, segment_backing::shm), 0);
    std::vector<char> bytes(real.size() + segment_header_size);
    int src = open(real.path().c_str(), O_RDONLY);
    ASSERT_GE(src, 0);
    ASSERT_EQ(pread(src, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    close(src);
    std::string name = test::unique_name("young");
    std::string path = shm_path(name);
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    close(fd);
    (void)cleanup_stale_segments();
    EXPECT_TRUE(file_exists(path)) << "younger than a second and its creator is alive";
    usleep(1200 * 1000);
    (void)cleanup_stale_segments();
    EXPECT_FALSE(file_exists(path)) << "unheld and older than a second";
    EXPECT_TRUE(file_exists(real.path()));
}

TEST(Segment, CreateReplacesStaleSegment)
{
    std::string name = test::unique_name("dead");
    std::string path = leave_stale_segment(name);
    ASSERT_FALSE(path.empty());
    segment s;
    ASSERT_EQ(s.create(name, 4096), 0);
    EXPECT_EQ(static_cast<unsigned char *>(s.data())[0], 0);
}

TEST(Segment, AttachToStaleSegmentIsEnoent)
{
    std::string name = test::unique_name("dead");
    std::string path = leave_stale_segment(name);
    ASSERT_FALSE(path.empty());
    segment s;
    EXPECT_EQ(s.attach(name), -FI_ENOENT);
    EXPECT_FALSE(s.is_open());
    EXPECT_FALSE(file_exists(path)) << "the stale file is removed on the way";
}

// Helper: become 'nobody' and try to attach the parent's (root's) segment.
TEST(Segment, DISABLED_ChildAttachAsNobody)
{
    const char *name = helper_name();
    if (!name)
        GTEST_SKIP() << "run by Segment.OtherUserCannotAttach";
    ASSERT_EQ(setgroups(0, nullptr), 0);
    ASSERT_EQ(setgid(65534), 0);
    ASSERT_EQ(setuid(65534), 0);
    ASSERT_EQ(geteuid(), 65534u);
    segment s;
    int rc = s.attach(name);
    EXPECT_TRUE(rc == -FI_EACCES || rc == -FI_ENOENT) << "attach as another user returned " << rc;
    EXPECT_FALSE(s.is_open());
    EXPECT_FALSE(segment_exists(name)) << "not a segment this user can see";
    // An unprivileged user gets segments of its own (no CAP_DAC_READ_SEARCH
    // for linkat(AT_EMPTY_PATH); no writable hugetlbfs mount here).
    std::string own = std::string(name) + ".nobody";
    segment mine;
    ASSERT_EQ(mine.create(own, 4096), 0);
    struct stat st;
    ASSERT_EQ(lstat(mine.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    segment again;
    EXPECT_EQ(again.attach(own), 0);
    std::string path = mine.path();
    mine.close();
    again.close();
    EXPECT_FALSE(file_exists(path));
}

TEST(Segment, OtherUserCannotAttach)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to switch to user 'nobody'";
    std::string name = test::unique_name("priv");
    segment s;
    ASSERT_EQ(s.create(name, 4096), 0);
    static_cast<char *>(s.data())[0] = 'R';
    pid_t pid = spawn_helper("ChildAttachAsNobody", name);
    ASSERT_GT(pid, 0);
    int st = 0;
    ASSERT_TRUE(reap(pid, st)) << "helper did not finish in time";
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "helper failed, status " << st;
    EXPECT_TRUE(segment_exists(name)) << "the other user's attempt left the segment alone";
    EXPECT_EQ(static_cast<char *>(s.data())[0], 'R');
    segment again;
    EXPECT_EQ(again.attach(name), 0);
}

TEST(Segment, RootCannotAttachAnotherUsersSegment)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to create a file owned by another user";
    // A segment file owned by 'nobody': root can open it, but the ownership
    // check must refuse it before touching its lock.
    std::string name = test::unique_name("foreign");
    std::string path = shm_path(name);
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fchown(fd, 65534, 65534), 0);
    ASSERT_EQ(ftruncate(fd, 4096), 0);
    segment s;
    EXPECT_EQ(s.attach(name), -FI_EACCES);
    EXPECT_EQ(s.create(name, 4096, segment_backing::shm), -FI_EEXIST) << "never removes another user's file";
    EXPECT_TRUE(file_exists(path));
    (void)cleanup_stale_segments();
    EXPECT_TRUE(file_exists(path)) << "cleanup only removes this user's files";
    close(fd);
    unlink(path.c_str());
}
