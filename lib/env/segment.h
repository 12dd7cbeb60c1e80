/* Shared-memory segments for cross-process drivers.
 *
 * A segment is a named file in a hugetlbfs mount (when hugepages are free) or
 * in /dev/shm, created with mode 0600 by the creating user, so a process of
 * another user cannot attach. Each process that has it open holds a shared
 * lock on the file; the last one to close it unlinks it, and a segment whose
 * owners have all died (no lock held) is removed by cleanup_stale(), which
 * init() runs. Names are restricted to [A-Za-z0-9_.-], 1..200 characters.
 *
 * The segment records a version and its size in a header; mapped addresses
 * differ between processes, so what is stored inside must be offsets. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shunt::env {

/** Where a segment's memory comes from. */
enum class segment_backing { any, hugepages, shm };

class segment {
public:
    segment() noexcept = default;
    ~segment();
    segment(segment &&) noexcept;
    segment &operator=(segment &&) noexcept;
    segment(const segment &) = delete;
    segment &operator=(const segment &) = delete;

    /** Create segment @p name of at least @p size bytes (rounded up to the page
     *  size), zero-filled. @return 0; -FI_EINVAL bad name or size 0;
     *  -FI_EEXIST a live segment of that name exists; -FI_ENOMEM no memory
     *  (or hugepages asked for and none free); -errno for other failures. */
    [[nodiscard]] int create(const std::string &name, std::size_t size,
                             segment_backing backing = segment_backing::any);
    /** Attach to an existing segment. @return 0; -FI_EINVAL bad name;
     *  -FI_ENOENT no such segment; -FI_EACCES owned by another user or not
     *  0600; -FI_EINVAL not a Shunt segment or wrong version. */
    [[nodiscard]] int attach(const std::string &name);
    /** Unmap and release; unlinks the file when this was the last process
     *  holding it. Idempotent. */
    void close() noexcept;

    /** Start of the usable area (after the header); null when not open. */
    void *data() const noexcept { return data_; }
    /** Usable bytes. */
    std::size_t size() const noexcept { return size_; }
    bool is_open() const noexcept { return data_ != nullptr; }
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
    bool huge_ = false;
    std::string name_;
    std::string path_;
};

/** Check a segment name. @return 0 or -FI_EINVAL. */
[[nodiscard]] int segment_name_valid(const std::string &name) noexcept;

/** Remove segments whose owners are all gone. @return the number removed. */
int cleanup_stale_segments() noexcept;

/** True if a live segment of that name exists (some process holds it). */
bool segment_exists(const std::string &name) noexcept;

} // namespace shunt::env
