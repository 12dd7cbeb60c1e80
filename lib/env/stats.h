/* Statistics registry: named blocks of counters, gauges and histograms
 * (env/stats_fp.h) that readers enumerate and read while their writers run.
 *
 * A block is any struct of stats_fp.h scalars and histograms, described by a
 * schema (field names, kinds, units and offsets) and registered under a name
 * for as long as it lives. Readers -- this process through list()/read(), or
 * another one through DPDK's telemetry socket (`/shunt/list`,
 * `/shunt/stats,NAME`; see doc/guides/telemetry.md) -- take the registry
 * lock, which writers never touch: registering and closing are setup calls,
 * the fast path only writes its own block.
 *
 * SHUNT_TELEMETRY=0 turns both the socket and the per-message statistics off
 * (io_block gives nullptr, so the stats_fp.h hooks do nothing); blocks that
 * cost nothing per message (object counts, pools) stay readable in process. */
#pragma once

#include "env/stats_fp.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shunt::env::stats {

/** Per-message statistics and the telemetry socket are on (SHUNT_TELEMETRY,
 *  default 1). Read once; the same answer for the life of the process. */
bool enabled() noexcept;

/** One-way latency stamps (SHUNT_TELEMETRY_ONE_WAY=1, default 0): the
 *  identity of this process's clock (tsc::clock_id(): the boot id of an
 *  invariant TSC) that endpoints compare with their peers' at connection
 *  time, or "" when stamps are off: not asked for, SHUNT_TELEMETRY=0, or
 *  no invariant TSC. Read once; the same answer for the life of the process. */
const std::string &one_way_clock();

enum class kind : std::uint8_t {
    counter,   ///< a count that only grows (counter, shared_counter)
    gauge,     ///< a current value (gauge, shared_counter used with sub())
    histogram, ///< a histogram
};
enum class unit : std::uint8_t {
    none,   ///< a plain count
    bytes,
    cycles, ///< TSC cycles: readers also show them in ns
    ns,
};
const char *kind_name(kind k) noexcept;
const char *unit_name(unit u) noexcept;

/** One field of a block. */
struct field {
    const char *name;   ///< 1..40 characters of [a-z0-9_], unique in the schema
    kind k;
    unit u;
    std::size_t offset; ///< of the counter / gauge / shared_counter / histogram in the block
    const char *help;   ///< one line
};

/** The layout of one kind of block. */
struct schema {
    const char *type;     ///< what the block describes, e.g. "io", "env.progress"
    const field *fields;
    std::size_t count;
};

/** One field of a schema: SHUNT_STATS_FIELD(block_type, member, counter, bytes, "help"). */
#define SHUNT_STATS_FIELD(T, member, k, u, help)                                                          \
    ::shunt::env::stats::field                                                                            \
    {                                                                                                     \
        #member, ::shunt::env::stats::kind::k, ::shunt::env::stats::unit::u, offsetof(T, member), help \
    }

/** The schema of io_stats (stats_fp.h). */
const schema &io_schema() noexcept;

/** A block registered under a name while this object holds it. Not
 *  copyable; close() (or the destructor) unregisters. */
class registration {
public:
    registration() noexcept = default;
    ~registration() { close(); }
    registration(const registration &) = delete;
    registration &operator=(const registration &) = delete;

    /** Register @p block (laid out as @p s says) under @p name.
     *  @param name 1..63 printable characters, no spaces or commas (e.g.
     *         "env.pool.rx", "shm.qp.7"); unique among open blocks
     *  @param refresh if not null, called with @p arg under the registry
     *         lock on the reader's thread before each read (to update gauges
     *         that are computed, such as a pool's free objects); it must not
     *         call into the registry. It is not called once env::fini() has
     *         run when @p needs_eal is set.
     *  @return 0; -FI_EBUSY this object holds a block; -FI_EINVAL bad name or
     *          schema, null block; -FI_EEXIST the name is taken. */
    [[nodiscard]] int open(const std::string &name, const schema &s, const void *block,
                           void (*refresh)(void *arg) = nullptr, void *arg = nullptr, bool needs_eal = false);
    /** Unregister. On return no reader touches the block. Safe when not open. */
    void close() noexcept;
    bool is_open() const noexcept { return id_ != 0; }
    const std::string &name() const noexcept { return name_; }

private:
    std::uint64_t id_ = 0;
    std::string name_;
};

/** An io_stats block allocated and registered in one call: what a driver or
 *  provider keeps per queue or endpoint. */
class io_block {
public:
    io_block() noexcept = default;
    ~io_block() { close(); }
    io_block(const io_block &) = delete;
    io_block &operator=(const io_block &) = delete;

    /** Allocate (zeroed) and register under @p name. With telemetry off,
     *  does nothing and returns 0: get() stays nullptr and the hooks skip.
     *  @return 0; -FI_ENOMEM; as registration::open (the block is then
     *  freed and get() is nullptr). */
    [[nodiscard]] int open(const std::string &name);
    /** Unregister and free. get() is nullptr afterwards. */
    void close() noexcept;
    /** The block to pass to the hooks; nullptr when closed or telemetry is off. */
    io_stats *get() const noexcept { return s_; }

private:
    io_stats *s_ = nullptr;
    registration reg_;
};

/** A histogram read out. */
struct histogram_snapshot {
    std::vector<std::uint64_t> counts; ///< per bucket (histogram::buckets entries)
    std::uint64_t total = 0;           ///< values counted (sum of counts)
    std::uint64_t sum = 0;             ///< of the values
    std::uint64_t max = 0;             ///< largest value
    /** Upper edge of the bucket holding the nearest-rank @p pct percentile
     *  (at most max); 0 when empty. At most 12.5 % above the exact value. */
    std::uint64_t percentile(double pct) const noexcept;
    /** sum / total, 0 when empty. */
    double mean() const noexcept;
    /** Smallest value's bucket low edge, 0 when empty. */
    std::uint64_t min() const noexcept;
};

/** One field read out. */
struct field_value {
    std::string name;
    kind k = kind::counter;
    unit u = unit::none;
    std::uint64_t value = 0;  ///< counter and gauge
    histogram_snapshot hist;  ///< histogram
};

/** One block read out. */
struct block_snapshot {
    std::string name;
    std::string type;
    std::uint64_t tsc = 0;    ///< when it was read (tsc::now())
    std::vector<field_value> fields;
    /** The field named @p n, or nullptr. */
    const field_value *find(const std::string &n) const noexcept;
};

/** A duration for people: "850 ns", "12.3 µs", "4.56 ms", "1.25 s" (unit
 *  by magnitude, three significant digits). */
std::string format_ns(double ns);
/** A count for people: "950", "12.3k", "4.56M", "1.25G". */
std::string format_count(double v);

/** Names of the open blocks, sorted. */
std::vector<std::string> list();
/** Read the block named @p name. @return 0; -FI_ENOENT no such block. */
[[nodiscard]] int read(const std::string &name, block_snapshot &out);
/** Read every open block, sorted by name. */
std::vector<block_snapshot> read_all();

} // namespace shunt::env::stats
