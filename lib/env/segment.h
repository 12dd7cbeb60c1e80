/* Shared-memory segments for cross-process drivers.
 *
 * A segment is a named file "shunt.<name>" in a writable hugetlbfs mount (when
 * hugepages are free) or in /dev/shm, created with mode 0600 by the creating
 * user, so a process of another user cannot attach. Each process that has it
 * open holds a shared flock() on the file; the last one to close it unlinks
 * it, and a segment whose owners have all died (no lock held) is removed by
 * cleanup_stale_segments(), which init() and the shm driver's device open
 * run, or by a create() of the same name. Names are restricted to
 * [A-Za-z0-9_.-], 1..200 characters, and may not be "." or "..".
 *
 * The file starts with a header (magic, version, sizes, creator) of one cache
 * line; data() points just after it, so it is cache-line aligned. Mapped
 * addresses differ between processes, so what is stored inside must be
 * offsets, never pointers.
 *
 * Everything here is setup: these calls make system calls and may briefly
 * wait on a per-user lock file (/dev/shm/.shunt-<uid>/lock, see user_file) that serialises
 * creation, attachment and removal between processes. A segment object is
 * not thread-safe; distinct objects may be used from distinct threads.
 *
 * fork(): a child inherits the parent's hold on a segment (the lock belongs
 * to the open file, which is shared). Closing the object in the child only
 * unmaps it there; the parent's hold is untouched. Attach in the child (or
 * after exec) to hold the segment in its own right. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shunt::env {

/** Where a segment's memory comes from. */
enum class segment_backing {
    any,       ///< hugepages when enough are free in a writable hugetlbfs mount, else /dev/shm
    hugepages, ///< hugetlbfs only; create() fails with -FI_ENOMEM when not possible
    shm,       ///< /dev/shm (ordinary pages) only
};

/** Layout version of the segment header; attach() refuses other versions. */
inline constexpr std::uint32_t segment_version = 1;
/** Bytes of header before data() (one cache line). */
inline constexpr std::size_t segment_header_size = 64;
/** Longest segment name. */
inline constexpr std::size_t segment_name_max = 200;

class segment {
public:
    segment() noexcept = default;
    ~segment(); ///< close()
    segment(segment &&) noexcept;
    segment &operator=(segment &&) noexcept; ///< closes what this object held first
    segment(const segment &) = delete;
    segment &operator=(const segment &) = delete;

    /** Create segment @p name with at least @p size usable bytes, zero-filled.
     *  The file (header included) is rounded up to the page size of its
     *  backing (the hugepage size on hugetlbfs), and size() reports every
     *  usable byte. Memory is allocated and mapped now (prefaulted), so no
     *  later access faults for lack of memory.
     *  @param name    segment name ([A-Za-z0-9_.-], 1..200 characters, not "." or "..")
     *  @param size    usable bytes wanted, > 0
     *  @param backing where the memory comes from; ::any falls back silently
     *  @return 0; -FI_EINVAL bad name or size 0; -FI_EBUSY this object is
     *  already open; -FI_EEXIST a live segment of that name exists (in either
     *  directory), or a file of that name owned by another user; -FI_ENOMEM
     *  no memory, impossible size, or ::hugepages asked for and not enough
     *  free (or no writable hugetlbfs mount); -errno for other failures.
     *  A stale segment of that name (no process holds it) is removed first. */
    [[nodiscard]] int create(const std::string &name, std::size_t size,
                             segment_backing backing = segment_backing::any);
    /** Attach to an existing live segment (looked up in every hugetlbfs
     *  mount, writable by this user or not, then /dev/shm).
     *  @return 0; -FI_EINVAL bad name; -FI_EBUSY this object is already open;
     *  -FI_ENOENT no live segment of that name (a stale file, which no
     *  process holds, is removed on the way; so is one being removed); -FI_EACCES not owned by this user, not
     *  mode 0600, or not readable; -FI_EINVAL not a Shunt segment, wrong
     *  version, or its header is inconsistent or not ready; -errno for other
     *  failures. */
    [[nodiscard]] int attach(const std::string &name);
    /** Unmap and release; unlinks the file when this was the last process
     *  holding it. Idempotent. */
    void close() noexcept;

    /** Start of the usable area (after the header, cache-line aligned); null when not open. */
    void *data() const noexcept { return data_; }
    /** Usable bytes (0 when not open). */
    std::size_t size() const noexcept { return size_; }
    bool is_open() const noexcept { return data_ != nullptr; }
    /** True when the segment lives in hugepages. */
    bool hugepages() const noexcept { return huge_; }
    const std::string &name() const noexcept { return name_; }
    /** Path of the backing file (for diagnostics). */
    const std::string &path() const noexcept { return path_; }

private:
    void *map_ = nullptr;
    std::size_t map_len_ = 0;
    void *data_ = nullptr;
    std::size_t size_ = 0;
    int fd_ = -1;
    int owner_pid_ = 0; ///< process that opened fd_ (a fork()ed child does not release the lock)
    bool huge_ = false;
    std::string name_;
    std::string path_;
};

/** Check a segment name. @return 0 or -FI_EINVAL. */
[[nodiscard]] int segment_name_valid(const std::string &name) noexcept;

/** Remove this user's segments whose owners are all gone: files "shunt.*" in
 *  /dev/shm and the hugetlbfs mount that no process holds and that are older
 *  than about one second or whose creator process is dead.
 *  @return the number removed (0 when none or on error). */
int cleanup_stale_segments() noexcept;

/** Path of this user's host-wide file @p leaf ("lock", "qpn", ...) in its
 *  private directory, /dev/shm/.shunt-<euid>/, created (mode 0700) when
 *  missing. Only this user can create entries there; a directory of that
 *  name owned by another user, writable by others or not a directory is
 *  refused (logged with its path and the fix). Writes at most @p len bytes.
 *  @return 0, -FI_EACCES (the directory is not this user's own, or cannot
 *  be made), or -FI_EINVAL when @p len is too small. */
[[nodiscard]] int user_file(const char *leaf, char *out, std::size_t len) noexcept;

/** True if a live segment of that name exists (some process holds it), or a
 *  file of that name owned by another user is in the way. False for a bad
 *  name or a stale segment. */
bool segment_exists(const std::string &name) noexcept;

} // namespace shunt::env
