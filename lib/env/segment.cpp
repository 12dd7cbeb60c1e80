#include "env/segment.h"

#include "env/compiler.h"
#include "env/env.h"
#include "env/errors.h"
#include "env/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <mntent.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

/* Protocol (all of it is setup, none of it is a fast path):
 *
 * - Liveness is flock(): every process holding a segment holds LOCK_SH on its
 *   own open file. A file nobody holds a lock on is stale: its owners died
 *   (the kernel drops flocks when a process dies, however it dies).
 * - A segment is built in an unnamed O_TMPFILE file (sized, mapped, header
 *   written, 'ready' published, LOCK_SH taken) and only then linked under its
 *   name, so no process ever sees a half-built segment under the final name.
 * - Steps that look at or change names (the existence check and link in
 *   create, the probe in attach, the last-owner check and unlink in close,
 *   cleanup, segment_exists) run under a per-user lock file,
 *   /dev/shm/.shunt-<uid>/lock (user_file: a directory only that user can
 *   create entries in; when it is not the user's own, those steps fail
 *   rather than run unlocked). Without it, a probe that briefly takes
 *   LOCK_EX to learn whether anyone holds a segment could make a concurrent
 *   last closer believe it is not last and leave the file behind; and two
 *   creators of one name could pick different directories. Nobody holds a
 *   segment's LOCK_EX except under that lock, so a LOCK_SH taken under it
 *   waits at most for another holder's short critical section. */

namespace shunt::env {

namespace {

SHUNT_LOG_COMPONENT(seg_log, "env");

} // namespace

int user_file(const char *leaf, char *out, std::size_t len) noexcept
{
    char dir[128];
    std::snprintf(dir, sizeof dir, "/dev/shm/.shunt-%u", static_cast<unsigned>(geteuid()));
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        SHUNT_LOG(seg_log, error, "cannot create %s: %s", dir, std::strerror(errno));
        return -FI_EACCES;
    }
    // /dev/shm is sticky: once the directory is ours, nobody else can
    // rename or remove it, and with mode 0700 nobody else adds entries.
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        SHUNT_LOG(seg_log, error,
                  "%s is not a directory of this user's that only it can write (another user or a "
                  "stray file holds the name): remove it",
                  dir);
        return -FI_EACCES;
    }
    int n = std::snprintf(out, len, "%s/%s", dir, leaf);
    return n > 0 && static_cast<std::size_t>(n) < len ? 0 : -FI_EINVAL;
}

namespace {

constexpr std::uint64_t seg_magic = 0x474553544e554853ull; // "SHUNTSEG" in memory order
constexpr std::uint32_t flag_hugepages = 1u;
constexpr const char *shm_dir = "/dev/shm";
constexpr const char *file_prefix = "shunt.";
constexpr long hugetlbfs_magic = 0x958458f6;
constexpr std::size_t path_max = 512;

// The header at offset 0 of every segment. Offsets and sizes only: mapped
// addresses differ between processes.
struct seg_header {
    std::uint64_t magic;
    std::uint32_t version;
    std::uint32_t header_size; ///< offset of the data area
    std::uint64_t total_size;  ///< bytes in the file (= the mapping)
    std::uint64_t data_size;   ///< total_size - header_size
    std::uint64_t page_size;   ///< page size of the backing
    std::uint64_t created_ns;  ///< CLOCK_REALTIME at creation
    std::int32_t creator_pid;
    std::uint32_t creator_uid;
    std::uint32_t flags;       ///< flag_hugepages
    std::uint32_t ready;       ///< 1 once everything above is written (release/acquire)
};
static_assert(sizeof(seg_header) == segment_header_size);
static_assert(segment_header_size % SHUNT_CACHE_LINE == 0, "data() must stay cache-line aligned");

// Owns a file descriptor.
struct unique_fd {
    int fd = -1;
    unique_fd() noexcept = default;
    explicit unique_fd(int f) noexcept : fd(f) {}
    ~unique_fd() { reset(); }
    unique_fd(const unique_fd &) = delete;
    unique_fd &operator=(const unique_fd &) = delete;
    void reset() noexcept
    {
        if (fd >= 0)
            ::close(fd);
        fd = -1;
    }
    int release() noexcept { return std::exchange(fd, -1); }
};

int flock_retry(int fd, int op) noexcept
{
    int rc;
    do
        rc = flock(fd, op);
    while (rc != 0 && errno == EINTR);
    return rc;
}

// The per-user lock that serialises name operations between processes (see
// the protocol above). When it cannot be had (the private directory is not
// this user's), status() says so and the operation fails: without the lock
// the protocol is not safe.
class uid_lock {
public:
    uid_lock() noexcept
    {
        char p[path_max];
        status_ = user_file("lock", p, sizeof p);
        if (status_ != 0)
            return;
        fd_.fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        struct stat st;
        if (fd_.fd < 0 || fstat(fd_.fd, &st) != 0 || st.st_uid != geteuid() || !S_ISREG(st.st_mode)) {
            SHUNT_LOG(seg_log, error, "segment: cannot use the lock file %s (%s): remove it", p,
                      fd_.fd < 0 ? std::strerror(errno) : "not this user's regular file");
            fd_.reset();
            status_ = -FI_EACCES;
            return;
        }
        flock_retry(fd_.fd, LOCK_EX);
    }
    /** 0 when held, else why not (already logged). */
    int status() const noexcept { return status_; }

private:
    unique_fd fd_;
    int status_ = 0;
};

// A hugetlbfs mount we may create files in, with its page size and free pages.
struct huge_dir {
    char path[path_max] = {};
    std::size_t page_size = 0;
    unsigned long free = 0;
    bool usable() const noexcept { return path[0] != '\0' && page_size != 0; }
};

huge_dir find_huge_dir() noexcept
{
    huge_dir d;
    hugepage_info h = probe_hugepages();
    if (h.mount.empty() || h.mount.size() > 300) // make_path keeps 300 bytes for the directory
        return d;
    struct statfs sf;
    if (statfs(h.mount.c_str(), &sf) != 0 || static_cast<long>(sf.f_type) != hugetlbfs_magic)
        return d;
    std::memcpy(d.path, h.mount.c_str(), h.mount.size() + 1);
    d.page_size = static_cast<std::size_t>(sf.f_bsize); // hugetlbfs reports its page size here
    // Free pages of this mount's page size (it need not be the default size).
    char sys[160];
    std::snprintf(sys, sizeof sys, "/sys/kernel/mm/hugepages/hugepages-%zukB/free_hugepages",
                  d.page_size >> 10);
    if (FILE *f = std::fopen(sys, "re")) {
        if (std::fscanf(f, "%lu", &d.free) != 1)
            d.free = 0;
        std::fclose(f);
    } else if (d.page_size == h.page_size) {
        d.free = h.free;
    }
    // A mount with a size= limit may have fewer free blocks than the system.
    if (sf.f_blocks > 0 && static_cast<unsigned long>(sf.f_bfree) < d.free)
        d.free = static_cast<unsigned long>(sf.f_bfree);
    return d;
}

constexpr int max_huge_mounts = 8;

// Every hugetlbfs mount, writable by us or not (attach: another user's
// segment may be in one we cannot create files in). @return how many.
int read_huge_mounts(char (&out)[max_huge_mounts][path_max]) noexcept
{
    FILE *f = setmntent("/proc/mounts", "re");
    if (!f)
        return 0;
    int n = 0;
    struct mntent ent;
    char buf[4096];
    while (n < max_huge_mounts && getmntent_r(f, &ent, buf, sizeof buf)) {
        if (std::strcmp(ent.mnt_type, "hugetlbfs") == 0 && std::strlen(ent.mnt_dir) <= 300)
            std::snprintf(out[n++], path_max, "%s", ent.mnt_dir);
    }
    endmntent(f);
    return n;
}

/* The list read_huge_mounts() gives, kept between attaches: reading
 * /proc/mounts takes about 100 us, and a connection to a new peer attaches
 * its segment on both sides. It is read again when the mount table may have
 * changed: /proc/self/mounts, kept open, is pollable, and a mount or unmount
 * in its namespace marks it with POLLPRI (proc(5)); a process that moved to
 * another mount namespace (setns, unshare) opens it anew. Where it cannot be
 * kept open or polled, every call reads the table. */
struct mount_cache {
    std::mutex mu;
    int fd = -1;     ///< /proc/self/mounts, polled for changes
    ino_t ns = 0;    ///< the mount namespace fd was opened in
    bool valid = false;
    int n = 0;
    char dirs[max_huge_mounts][path_max];
};

ino_t mount_ns() noexcept
{
    struct stat st;
    return stat("/proc/self/ns/mnt", &st) == 0 ? st.st_ino : 0;
}

int all_huge_mounts(char (&out)[max_huge_mounts][path_max]) noexcept
{
    static mount_cache mc;
    std::lock_guard<std::mutex> g(mc.mu);
    const ino_t ns = mount_ns();
    if (mc.fd >= 0 && (ns == 0 || ns != mc.ns)) {
        ::close(mc.fd);
        mc.fd = -1;
        mc.valid = false;
    }
    if (mc.fd < 0 && ns != 0) {
        mc.fd = open("/proc/self/mounts", O_RDONLY | O_CLOEXEC);
        mc.ns = ns;
        mc.valid = false;
    }
    if (mc.fd >= 0 && mc.valid) {
        // A change since the last poll (or since the open, for the first):
        // POLLPRI | POLLERR. This poll takes the event, so the table read
        // below is at least as new as it; a later change shows at the next.
        struct pollfd p{mc.fd, POLLPRI, 0};
        if (poll(&p, 1, 0) != 0)
            mc.valid = false;
    }
    if (mc.fd >= 0 && mc.valid) {
        std::memcpy(out, mc.dirs, sizeof mc.dirs);
        return mc.n;
    }
    const int n = read_huge_mounts(out);
    if (mc.fd >= 0) {
        std::memcpy(mc.dirs, out, sizeof mc.dirs);
        mc.n = n;
        mc.valid = true;
    }
    return n;
}

bool make_path(char (&out)[path_max], const char *dir, const char *name) noexcept
{
    // Callers check: dir < path_max (a mount path) and name <= 200 characters.
    int n = std::snprintf(out, sizeof out, "%.*s/%s%.*s", 300, dir, file_prefix, 200, name);
    return n > 0 && static_cast<std::size_t>(n) < sizeof out;
}

// True if @p path names the file open as @p fd.
bool same_file(int fd, const char *path) noexcept
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::uint64_t now_ns() noexcept
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

int neg_errno(int e) noexcept
{
    return e == ENOMEM || e == ENOSPC || e == EFBIG ? -FI_ENOMEM : -e;
}

SHUNT_COLD int fail(int code, const char *what, const char *name) noexcept
{
    SHUNT_LOG(seg_log, error, "segment '%s': %s (%s)", name, what, strerror(code));
    return code;
}

// With the uid lock held: make @p path free for a new segment. A stale
// segment of ours is removed. @return 0 free; -FI_EEXIST in use (live, or
// something not ours in the way); -errno.
int clear_name(const char *path) noexcept
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (st.st_uid != geteuid() || !S_ISREG(st.st_mode))
        return -FI_EEXIST;
    unique_fd fd(open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (fd.fd < 0)
        return errno == ENOENT ? 0 : -FI_EEXIST;
    if (flock(fd.fd, LOCK_EX | LOCK_NB) != 0)
        return -FI_EEXIST; // a live holder
    if (same_file(fd.fd, path) && unlink(path) == 0)
        SHUNT_LOG(seg_log, notice, "segment: removed stale %s (its owners are gone)", path);
    return 0;
}

// Build an unnamed, locked, mapped segment file of @p total bytes in @p dir.
int build(const char *dir, std::size_t total, std::size_t page, bool huge, unique_fd &fd_out,
          void *&map_out) noexcept
{
    unique_fd fd(open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
    if (fd.fd < 0)
        return errno == EOPNOTSUPP || errno == EISDIR ? -FI_EOPNOTSUPP : -errno;
    // The umask may have removed bits; the contract is exactly 0600.
    if (fchmod(fd.fd, 0600) != 0)
        return -errno;
    // Held from before the file has a name: it is never visible unheld.
    if (flock_retry(fd.fd, LOCK_SH) != 0)
        return -errno;
    // Allocate now, so that no later access faults for lack of memory (a
    // tmpfs or hugetlbfs page missing at fault time is a SIGBUS).
    int rc;
    do
        rc = fallocate(fd.fd, 0, 0, static_cast<off_t>(total));
    while (rc != 0 && errno == EINTR);
    if (rc != 0)
        return neg_errno(errno);
    void *m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.fd, 0);
    if (m == MAP_FAILED)
        return neg_errno(errno);
    // Fresh file pages are zero: the data area needs no clearing.
    auto *h = static_cast<seg_header *>(m);
    h->magic = seg_magic;
    h->version = segment_version;
    h->header_size = segment_header_size;
    h->total_size = total;
    h->data_size = total - segment_header_size;
    h->page_size = page;
    h->created_ns = now_ns();
    h->creator_pid = static_cast<std::int32_t>(getpid());
    h->creator_uid = static_cast<std::uint32_t>(geteuid());
    h->flags = huge ? flag_hugepages : 0;
    // Publish the header: a reader that sees ready == 1 (acquire) sees every field above.
    std::atomic_ref<std::uint32_t>(h->ready).store(1, std::memory_order_release);
    fd_out.fd = fd.release();
    map_out = m;
    return 0;
}

// Give the unnamed file @p fd the name @p path; fails with EEXIST if taken.
int link_tmpfile(int fd, const char *path) noexcept
{
    if (linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH) == 0)
        return 0;
    if (errno == EEXIST)
        return -FI_EEXIST;
    // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc link does not.
    char proc[64];
    std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0)
        return 0;
    return errno == EEXIST ? -FI_EEXIST : -errno;
}

std::size_t round_up(std::size_t v, std::size_t a) noexcept
{
    return (v + a - 1) / a * a;
}

} // namespace

int segment_name_valid(const std::string &name) noexcept
{
    if (name.empty() || name.size() > segment_name_max || name == "." || name == "..")
        return -FI_EINVAL;
    for (char c : name) {
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok)
            return -FI_EINVAL;
    }
    return 0;
}

segment::~segment()
{
    close();
}

segment::segment(segment &&o) noexcept
    : map_(std::exchange(o.map_, nullptr)), map_len_(std::exchange(o.map_len_, 0)),
      data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
      fd_(std::exchange(o.fd_, -1)), owner_pid_(std::exchange(o.owner_pid_, 0)),
      huge_(std::exchange(o.huge_, false)), name_(std::move(o.name_)), path_(std::move(o.path_))
{
    o.name_.clear();
    o.path_.clear();
}

segment &segment::operator=(segment &&o) noexcept
{
    if (this != &o) {
        close();
        map_ = std::exchange(o.map_, nullptr);
        map_len_ = std::exchange(o.map_len_, 0);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
        fd_ = std::exchange(o.fd_, -1);
        owner_pid_ = std::exchange(o.owner_pid_, 0);
        huge_ = std::exchange(o.huge_, false);
        name_ = std::move(o.name_);
        path_ = std::move(o.path_);
        o.name_.clear();
        o.path_.clear();
    }
    return *this;
}

int segment::create(const std::string &name, std::size_t size, segment_backing backing)
{
    if (fd_ >= 0)
        return fail(-FI_EBUSY, "create on an object that is already open", name_.c_str());
    if (segment_name_valid(name) != 0)
        return fail(-FI_EINVAL, "bad name (use [A-Za-z0-9_.-], 1..200 characters)", name.c_str());
    if (size == 0)
        return fail(-FI_EINVAL, "size 0", name.c_str());
    {
        // A process that creates a segment soon attaches its peers', each in
        // a connection's setup: the mount table is read here, before any.
        char huge[max_huge_mounts][path_max];
        (void)all_huge_mounts(huge);
    }
    const std::size_t limit = std::size_t{1} << 50; // far above any memory; keeps sums exact
    if (size > limit)
        return fail(-FI_ENOMEM, "impossible size", name.c_str());

    huge_dir hd = find_huge_dir();
    unique_fd fd;
    void *map = nullptr;
    std::size_t total = 0;
    bool huge = false;
    const char *dir = shm_dir;
    if (backing != segment_backing::shm) {
        std::size_t t = hd.usable() ? round_up(size + segment_header_size, hd.page_size) : 0;
        if (!hd.usable() || t / hd.page_size > hd.free) {
            if (backing == segment_backing::hugepages)
                return fail(-FI_ENOMEM, hd.usable() ? "not enough free hugepages"
                                                    : "no writable hugetlbfs mount with free hugepages",
                            name.c_str());
        } else {
            int rc = build(hd.path, t, hd.page_size, true, fd, map);
            if (rc == 0) {
                total = t;
                huge = true;
                dir = hd.path;
            } else if (backing == segment_backing::hugepages) {
                return fail(rc, "cannot allocate hugepages", name.c_str());
            } else {
                SHUNT_LOG(seg_log, info, "segment '%s': hugepages failed (%s), using %s", name.c_str(),
                          strerror(-rc), shm_dir);
            }
        }
    }
    if (!huge) {
        std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
        std::size_t t = round_up(size + segment_header_size, page);
        int rc = build(shm_dir, t, page, false, fd, map);
        if (rc != 0)
            return fail(rc, "cannot create the backing file in /dev/shm", name.c_str());
        total = t;
    }

    char path[path_max];
    make_path(path, dir, name.c_str()); // fits: names are at most 200 characters
    int rc = 0;
    {
        uid_lock lk;
        rc = lk.status();
        // One name, one segment: a live segment in the other directory counts too.
        char other[path_max];
        if (rc == 0 && hd.path[0] != '\0' && make_path(other, huge ? shm_dir : hd.path, name.c_str()))
            rc = clear_name(other);
        if (rc == 0)
            rc = clear_name(path);
        if (rc == 0)
            rc = link_tmpfile(fd.fd, path);
    }
    if (rc != 0) {
        munmap(map, total);
        if (rc == -FI_EEXIST) {
            SHUNT_LOG(seg_log, info, "segment '%s': a live segment of that name exists", name.c_str());
            return rc;
        }
        return fail(rc, "cannot name the backing file", name.c_str());
    }
    map_ = map;
    map_len_ = total;
    data_ = static_cast<char *>(map) + segment_header_size;
    size_ = total - segment_header_size;
    fd_ = fd.release();
    owner_pid_ = static_cast<int>(getpid());
    huge_ = huge;
    name_ = name;
    path_ = path;
    return 0;
}

int segment::attach(const std::string &name)
{
    if (fd_ >= 0)
        return fail(-FI_EBUSY, "attach on an object that is already open", name_.c_str());
    if (segment_name_valid(name) != 0)
        return fail(-FI_EINVAL, "bad name (use [A-Za-z0-9_.-], 1..200 characters)", name.c_str());
    // Every hugetlbfs mount, not only the one we would create in: a segment
    // we may not use must be reported as such, not as missing.
    char huge[max_huge_mounts][path_max];
    const int nhuge = all_huge_mounts(huge);
    uid_lock lk;
    if (lk.status() != 0)
        return fail(lk.status(), "no per-user lock (see above)", name.c_str());
    for (int di = 0; di <= nhuge; di++) {
        const char *dir = di < nhuge ? huge[di] : shm_dir;
        char path[path_max];
        make_path(path, dir, name.c_str());
        unique_fd fd(open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
        if (fd.fd < 0) {
            if (errno == ENOENT)
                continue;
            struct stat ls;
            if (errno == EACCES || errno == EPERM) {
                // There but not ours; or a directory we cannot look into (go on).
                if (lstat(path, &ls) == 0)
                    return fail(-FI_EACCES, "permission denied", name.c_str());
                continue;
            }
            if (errno == ELOOP)
                return fail(-FI_EINVAL, "not a Shunt segment (a symbolic link)", name.c_str());
            return fail(-errno, "cannot open", name.c_str());
        }
        struct stat st;
        if (fstat(fd.fd, &st) != 0)
            return fail(-errno, "fstat", name.c_str());
        // Ownership before anything touches the file's locks: root opening a
        // user's segment must not disturb it.
        if (st.st_uid != geteuid() || (st.st_mode & 07777) != 0600)
            return fail(-FI_EACCES, "not owned by this user with mode 0600", name.c_str());
        if (!S_ISREG(st.st_mode))
            return fail(-FI_EINVAL, "not a regular file", name.c_str());
        // Live? Taking LOCK_EX succeeds only when nobody holds the segment.
        // A stale file is removed, and the other directory still looked at.
        if (flock(fd.fd, LOCK_EX | LOCK_NB) == 0) {
            if (same_file(fd.fd, path) && unlink(path) == 0)
                SHUNT_LOG(seg_log, notice, "segment: removed stale %s (its owners are gone)", path);
            continue;
        }
        if (flock_retry(fd.fd, LOCK_SH) != 0)
            return fail(-errno, "flock", name.c_str());
        if (fstat(fd.fd, &st) != 0)
            return fail(-errno, "fstat", name.c_str());
        if (st.st_nlink == 0) {
            SHUNT_LOG(seg_log, info, "segment '%s': removed while attaching", name.c_str());
            continue;
        }
        const std::size_t total = static_cast<std::size_t>(st.st_size);
        if (total <= segment_header_size)
            return fail(-FI_EINVAL, "not a Shunt segment (too small)", name.c_str());
        void *m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
        if (m == MAP_FAILED)
            return fail(neg_errno(errno), "mmap", name.c_str());
        auto *h = static_cast<seg_header *>(m);
        const char *bad = nullptr;
        // Acquire: pairs with the creator's release store of 'ready'.
        if (h->magic != seg_magic)
            bad = "not a Shunt segment (bad magic)";
        else if (h->version != segment_version)
            bad = "segment layout version differs from this library's";
        else if (std::atomic_ref<std::uint32_t>(h->ready).load(std::memory_order_acquire) != 1)
            bad = "segment header not ready";
        else if (h->header_size != segment_header_size || h->total_size != total ||
                 h->data_size != total - segment_header_size)
            bad = "segment header inconsistent with the file";
        if (bad) {
            munmap(m, total);
            return fail(-FI_EINVAL, bad, name.c_str());
        }
        map_ = m;
        map_len_ = total;
        data_ = static_cast<char *>(m) + segment_header_size;
        size_ = total - segment_header_size;
        fd_ = fd.release();
        owner_pid_ = static_cast<int>(getpid());
        huge_ = (h->flags & flag_hugepages) != 0;
        name_ = name;
        path_ = path;
        return 0;
    }
    SHUNT_LOG(seg_log, info, "segment '%s': no such segment", name.c_str());
    return -FI_ENOENT;
}

void segment::close() noexcept
{
    if (map_)
        munmap(map_, map_len_);
    if (fd_ >= 0) {
        // A fork()ed child shares the parent's open file and so its lock:
        // converting that lock here would take it from the parent.
        if (owner_pid_ == static_cast<int>(getpid())) {
            uid_lock lk;
            // Last owner iff nobody else holds the file. (A failed conversion
            // drops our shared lock: harmless, the file is being closed.)
            // Without the lock the file stays; cleanup removes it later.
            if (lk.status() == 0 && flock(fd_, LOCK_EX | LOCK_NB) == 0 && same_file(fd_, path_.c_str()))
                unlink(path_.c_str());
            ::close(fd_);
        } else {
            ::close(fd_);
        }
    }
    map_ = nullptr;
    map_len_ = 0;
    data_ = nullptr;
    size_ = 0;
    fd_ = -1;
    owner_pid_ = 0;
    huge_ = false;
    name_.clear();
    path_.clear();
}

int cleanup_stale_segments() noexcept
{
    huge_dir hd = find_huge_dir();
    const char *dirs[2] = {hd.path[0] != '\0' ? hd.path : nullptr, shm_dir};
    const std::uint64_t now = now_ns();
    const std::size_t plen = std::strlen(file_prefix);
    int removed = 0;

    uid_lock lk;
    if (lk.status() != 0)
        return 0;
    for (const char *dir : dirs) {
        if (!dir)
            continue;
        DIR *d = opendir(dir);
        if (!d)
            continue;
        while (struct dirent *e = readdir(d)) {
            if (std::strncmp(e->d_name, file_prefix, plen) != 0)
                continue;
            const char *name = e->d_name + plen;
            if (std::strlen(name) == 0 || std::strlen(name) > segment_name_max)
                continue;
            char path[path_max];
            if (!make_path(path, dir, name))
                continue;
            struct stat st;
            if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
                continue;
            unique_fd fd(open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
            if (fd.fd < 0 || flock(fd.fd, LOCK_EX | LOCK_NB) != 0)
                continue; // gone, or live
            if (!same_file(fd.fd, path) || fstat(fd.fd, &st) != 0)
                continue;
            // Unheld. Take it when it is not brand new (a file that appeared
            // under its name less than a second ago; ctime changes on link)
            // or its creator is dead.
            const std::uint64_t ctime_ns = static_cast<std::uint64_t>(st.st_ctim.tv_sec) * 1000000000ull +
                                           static_cast<std::uint64_t>(st.st_ctim.tv_nsec);
            bool stale = now > ctime_ns + 1000000000ull;
            seg_header h;
            if (!stale && pread(fd.fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
                h.magic == seg_magic && h.creator_pid > 0 && kill(h.creator_pid, 0) != 0 && errno == ESRCH)
                stale = true;
            if (stale && unlink(path) == 0) {
                SHUNT_LOG(seg_log, info, "segment: removed stale %s", path);
                removed++;
            }
        }
        closedir(d);
    }
    return removed;
}

bool segment_exists(const std::string &name) noexcept
{
    if (segment_name_valid(name) != 0)
        return false;
    huge_dir hd = find_huge_dir();
    const char *dirs[2] = {hd.path[0] != '\0' ? hd.path : nullptr, shm_dir};
    uid_lock lk;
    if (lk.status() != 0)
        return true; // cannot tell: say the name is taken
    for (const char *dir : dirs) {
        if (!dir)
            continue;
        char path[path_max];
        make_path(path, dir, name.c_str());
        struct stat st;
        if (lstat(path, &st) != 0)
            continue;
        if (st.st_uid != geteuid() || !S_ISREG(st.st_mode))
            return true; // something not ours holds the name
        unique_fd fd(open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
        if (fd.fd < 0)
            continue;
        if (flock(fd.fd, LOCK_EX | LOCK_NB) != 0)
            return true; // held by a live process
    }
    return false;
}

} // namespace shunt::env
