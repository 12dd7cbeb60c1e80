/* shunt-perf transport "line" (-p line, or --vq --driver raw-line): the
 * machine's floor reference. Two processes share one mapping holding a ring
 * of 64-byte slots per direction; a slot carries its own sequence word, the
 * length and up to 48 bytes of payload in the same cache line, so a small
 * message costs exactly one line transfer each way: the same thing as
 * devtools/cacheline_pingpong.cpp, but between processes and through
 * the same timed loops as every other transport. Larger payloads are copied
 * through a per-direction data area. No Shunt layer is involved: anything a
 * Shunt transport measures above this is the cost of that layer.
 *
 * Ordering: the sender fills len and payload, then stores seq with release
 * (publish a slot); the receiver loads seq with acquire (observe a slot),
 * then reads len and payload. The receiver returns credit by storing its
 * consumed count with release after its reads (publish credit); the sender
 * loads it with acquire only when its cached credit runs out.
 *
 * The mapping is a POSIX shm object (mode 0600) created by the responder,
 * named over the out-of-band channel, and unlinked as soon as the initiator
 * has mapped it (or when the responder closes). */
#include "env/errors.h"
#include "loops.h"
#include "oob.h"
#include "transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace shunt::perf {
namespace {

constexpr std::uint64_t line_magic = 0x5348554e544c494eull; // "SHUNTLIN"
constexpr std::uint32_t line_version = 1;
constexpr unsigned ring_slots = 256;                 // power of two
constexpr std::size_t inline_max = 48;
constexpr std::size_t data_bytes = 2 * max_size;     // per direction: 2 x 4 MiB in flight

struct alignas(64) slot {
    std::atomic<std::uint64_t> seq;  ///< message number + 1 once published
    std::uint32_t len;
    std::uint32_t reserved;
    std::byte payload[inline_max];
};
static_assert(sizeof(slot) == 64);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

struct alignas(64) credit_line {
    std::atomic<std::uint64_t> consumed; ///< messages the receiver is done with
};
static_assert(sizeof(credit_line) == 64);

struct alignas(4096) ring {
    slot slots[ring_slots];
    credit_line credit;              ///< own line: written by the receiver only
    alignas(4096) std::byte data[data_bytes];
};

/** Shared header: version and offsets, never pointers. */
struct alignas(64) header {
    std::uint64_t magic;
    std::uint32_t version;
    std::uint32_t ring_count;
    std::uint64_t total_size;
    std::uint64_t ring_offset[2];    ///< [0] initiator to responder, [1] back
};

constexpr std::size_t ring_bytes = sizeof(ring);
constexpr std::size_t first_ring = 4096;
constexpr std::size_t segment_bytes = first_ring + 2 * ring_bytes;

/** Copy of at most inline_max bytes without a call into libc: overlapping
 *  fixed-size moves, which compile to a few loads and stores. The call that a
 *  variable-length memcpy costs is measurable at these latencies. */
inline void copy_small(void *dst, const void *src, std::size_t len) noexcept
{
    auto *d = static_cast<unsigned char *>(dst);
    auto *s = static_cast<const unsigned char *>(src);
    if (len >= 16) {
        std::memcpy(d, s, 16);
        if (len > 32)
            std::memcpy(d + 16, s + 16, 16);
        std::memcpy(d + len - 16, s + len - 16, 16);
    } else if (len >= 8) {
        std::memcpy(d, s, 8);
        std::memcpy(d + len - 8, s + len - 8, 8);
    } else if (len >= 4) {
        std::memcpy(d, s, 4);
        std::memcpy(d + len - 4, s + len - 4, 4);
    } else if (len) {
        d[0] = s[0];
        d[len / 2] = s[len / 2];
        d[len - 1] = s[len - 1];
    }
}
static_assert(inline_max <= 48, "copy_small covers 48 bytes");

class line_transport {
public:
    line_transport(void *base, bool initiator) : base_(base)
    {
        auto *h = static_cast<header *>(base);
        auto *b = static_cast<std::byte *>(base);
        tx_ = reinterpret_cast<ring *>(b + h->ring_offset[initiator ? 0 : 1]);
        rx_ = reinterpret_cast<ring *>(b + h->ring_offset[initiator ? 1 : 0]);
        // Local buffers, touched now so that no page fault lands in a timed loop.
        txbuf_.assign(max_size, std::byte{0x5a});
        rxbuf_.assign(max_size, std::byte{0});
    }
    ~line_transport() { ::munmap(base_, segment_bytes); }

    void begin_run(const run_request &r)
    {
        stride_ = (r.size + 63) & ~std::size_t{63};
        keff_ = window_for(r.size, r.test == test_kind::pingpong ? ring_slots : r.window);
        batch_ = keff_ / 4 ? keff_ / 4 : 1;
        cached_consumed_ = tx_->credit.consumed.load(std::memory_order_acquire);
    }

    void end_run()
    {
        // Return all credit, so the next size starts from a clean state.
        rx_->credit.consumed.store(tail_, std::memory_order_release);
        published_ = tail_;
    }

    int send(const void *buf, std::size_t len) noexcept
    {
        if (head_ - cached_consumed_ >= keff_) {
            // Observe credit: pairs with the receiver's release in recv().
            cached_consumed_ = tx_->credit.consumed.load(std::memory_order_acquire);
            if (head_ - cached_consumed_ >= keff_)
                return -FI_EAGAIN;
        }
        slot &s = tx_->slots[head_ & (ring_slots - 1)];
        s.len = static_cast<std::uint32_t>(len);
        if (len <= inline_max)
            copy_small(s.payload, buf, len);
        else
            std::memcpy(tx_->data + (head_ % keff_) * stride_, buf, len);
        // Publish the slot: len and payload become visible with seq.
        s.seq.store(head_ + 1, std::memory_order_release);
        head_++;
        return 0;
    }

    int inject(const void *buf, std::size_t len) noexcept { return send(buf, len); }

    ssize_t recv(void *buf, std::size_t cap) noexcept
    {
        slot &s = rx_->slots[tail_ & (ring_slots - 1)];
        // Observe the slot: pairs with the sender's release in send().
        if (s.seq.load(std::memory_order_acquire) != tail_ + 1)
            return -FI_EAGAIN;
        const std::size_t len = s.len;
        if (len > cap) [[unlikely]]
            return -FI_EMSGSIZE;
        if (len <= inline_max)
            copy_small(buf, s.payload, len);
        else
            std::memcpy(buf, rx_->data + (tail_ % keff_) * stride_, len);
        tail_++;
        if (tail_ - published_ >= batch_) {
            // Publish credit: our reads of the slot happen before the sender
            // may reuse it.
            rx_->credit.consumed.store(tail_, std::memory_order_release);
            published_ = tail_;
        }
        return static_cast<ssize_t>(len);
    }

    int progress() noexcept { return 0; }
    std::byte *tx_buf() noexcept { return txbuf_.data(); }
    std::byte *rx_buf() noexcept { return rxbuf_.data(); }

    static unsigned window_for(std::size_t size, unsigned want)
    {
        std::size_t stride = (size + 63) & ~std::size_t{63};
        std::size_t fit = size <= inline_max ? ring_slots : data_bytes / stride;
        std::size_t w = want < fit ? want : fit;
        if (w > ring_slots)
            w = ring_slots;
        return w ? static_cast<unsigned>(w) : 1;
    }
    unsigned max_window(std::size_t size) const { return window_for(size, ring_slots); }

private:
    void *base_;
    ring *tx_;
    ring *rx_;
    // Sender-side state (local).
    std::uint64_t head_ = 0, cached_consumed_ = 0;
    // Receiver-side state (local).
    std::uint64_t tail_ = 0, published_ = 0;
    // Per run.
    std::size_t stride_ = 64;
    std::uint64_t keff_ = 1, batch_ = 1;
    std::vector<std::byte> txbuf_, rxbuf_;
};

int validate(const test_config &c, std::string &why)
{
    if (c.op != "msg") {
        why = "transport 'line' supports --op msg only, not '" + c.op + "'";
        return -FI_EOPNOTSUPP;
    }
    if (c.shared_buffers) {
        why = "--shared-buffers selects endpoint-level provider memory; transport 'line' has none";
        return -FI_EOPNOTSUPP;
    }
    if (c.threading != "domain") {
        why = "--threading asks a provider's domain; transport 'line' has none (one thread per side)";
        return -FI_EOPNOTSUPP;
    }
    if (c.vq ? c.qp_type != "rc" : c.ep_type == "dgram") {
        why = c.vq ? "driver 'raw-line' supports --qp-type rc only, not '" + c.qp_type + "'"
                   : std::string("transport 'line' is reliable: -e rdm or msg, not dgram");
        return -FI_EOPNOTSUPP;
    }
    return 0;
}

/** Remove segments left by responders that were killed between creating and
 *  unlinking theirs (the name carries the creator's pid). */
void remove_stale_segments()
{
    DIR *d = ::opendir("/dev/shm");
    if (!d)
        return;
    const std::string prefix = "shunt-perf.";
    while (dirent *e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n.compare(0, prefix.size(), prefix) != 0)
            continue;
        long pid = std::strtol(n.c_str() + prefix.size(), nullptr, 10);
        if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
            ::shm_unlink(("/" + n).c_str());
    }
    ::closedir(d);
}

int open_responder(oob_channel &oob, double timeout_s, void *&base, std::string &why)
{
    remove_stale_segments();
    static unsigned counter;
    std::string name = "/shunt-perf." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        why = "shm_open " + name + ": " + std::strerror(errno);
        return -FI_ENOMEM;
    }
    void *p = MAP_FAILED;
    if (::ftruncate(fd, segment_bytes) == 0)
        p = ::mmap(nullptr, segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
        ::shm_unlink(name.c_str());
        why = "mapping " + name + ": " + std::strerror(err);
        return -FI_ENOMEM;
    }
    auto *h = new (p) header{};
    h->ring_count = 2;
    h->total_size = segment_bytes;
    h->ring_offset[0] = first_ring;
    h->ring_offset[1] = first_ring + ring_bytes;
    h->version = line_version;
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = line_magic;
    std::string line;
    int rc = oob.send("ADDR " + name);
    if (rc == 0)
        rc = oob.expect("ATTACHED", line, timeout_s);
    ::shm_unlink(name.c_str()); // both sides hold it mapped now (or it failed)
    if (rc != 0) {
        ::munmap(p, segment_bytes);
        why = rc == -FI_EREMOTEIO ? line : std::string("peer did not attach: ") + shunt::strerror(rc);
        return rc;
    }
    base = p;
    return 0;
}

int open_initiator(oob_channel &oob, double timeout_s, void *&base, std::string &why)
{
    std::string name;
    int rc = oob.expect("ADDR", name, timeout_s);
    if (rc != 0) {
        why = rc == -FI_EREMOTEIO ? name : std::string("no address from the peer: ") + shunt::strerror(rc);
        return rc;
    }
    auto fail = [&](const std::string &msg) {
        why = msg;
        (void)oob.send("ERROR " + msg);
        return -FI_ENOMEM;
    };
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return fail("cannot open " + name + " (the peer must be on this host): " + std::strerror(errno));
    struct stat st {};
    void *p = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == segment_bytes)
        p = ::mmap(nullptr, segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED)
        return fail("cannot map " + name + " (size or permission mismatch)");
    auto *h = static_cast<header *>(p);
    if (h->magic != line_magic || h->version != line_version || h->total_size != segment_bytes) {
        ::munmap(p, segment_bytes);
        return fail("segment " + name + " has another layout version");
    }
    rc = oob.send("ATTACHED");
    if (rc != 0) {
        ::munmap(p, segment_bytes);
        why = "peer gone during setup";
        return rc;
    }
    base = p;
    return 0;
}

int open_line(const test_config &, bool initiator, oob_channel &oob, double timeout_s,
              std::unique_ptr<transport_session> &out, std::string &why)
{
    void *base = nullptr;
    int rc = initiator ? open_initiator(oob, timeout_s, base, why) : open_responder(oob, timeout_s, base, why);
    if (rc != 0)
        return rc;
    out = std::make_unique<typed_session<line_transport>>(std::make_unique<line_transport>(base, initiator));
    return 0;
}

const transport_ops line_ops = {
    "line", false, "cache-line ring between the two processes: the machine's floor (no Shunt layer)", validate,
    open_line,
};
const transport_ops raw_line_ops = {
    "raw-line", true, "the same floor reference, listed at the queue level", validate, open_line,
};

} // namespace

void register_line(std::vector<const transport_ops *> &v)
{
    v.push_back(&line_ops);
    v.push_back(&raw_line_ops);
}

} // namespace shunt::perf
