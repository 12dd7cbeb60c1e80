#include "env/stats.h"

#include "env/errors.h"
#include "env/tunable.h"
#include "env/telemetry_detail.h"
#include "env/tsc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

namespace shunt::env::stats {
namespace {

SHUNT_TUNABLE(telemetry_tunable, "SHUNT_TELEMETRY", boolean, "1",
              "Per-message statistics and DPDK's telemetry socket (0: off; object counts stay)", "env");
SHUNT_TUNABLE(one_way_tunable, "SHUNT_TELEMETRY_ONE_WAY", boolean, "0",
              "Endpoints stamp their messages with the TSC for a one-way latency histogram, on connections "
              "whose peer agrees and reads the same clock (1: on; needs SHUNT_TELEMETRY)",
              "env");

struct entry {
    std::uint64_t id;
    const schema *s;
    const void *block;
    void (*refresh)(void *);
    void *arg;
    bool needs_eal;
};

struct registry {
    std::mutex mu;
    std::map<std::string, entry> by_name;
    std::uint64_t next_id = 1;
    bool eal_up = true;
};

registry &reg()
{
    static registry *r = new registry; // outlives every static block that closes at exit
    return *r;
}

bool name_ok(const std::string &n)
{
    if (n.empty() || n.size() > 63)
        return false;
    for (char c : n)
        if (c <= ' ' || c > '~' || c == ',' || c == '"' || c == '\\')
            return false;
    return true;
}

bool field_name_ok(const char *n)
{
    std::size_t len = n ? std::strlen(n) : 0;
    if (len == 0 || len > 40)
        return false;
    for (std::size_t i = 0; i < len; i++)
        if (!((n[i] >= 'a' && n[i] <= 'z') || (n[i] >= '0' && n[i] <= '9') || n[i] == '_'))
            return false;
    return true;
}

bool schema_ok(const schema &s)
{
    if (!s.type || !s.fields || s.count == 0)
        return false;
    for (std::size_t i = 0; i < s.count; i++) {
        if (!field_name_ok(s.fields[i].name))
            return false;
        for (std::size_t j = 0; j < i; j++)
            if (std::strcmp(s.fields[i].name, s.fields[j].name) == 0)
                return false;
    }
    return true;
}

void read_entry(const std::string &name, const entry &e, block_snapshot &out)
{
    if (e.refresh && (!e.needs_eal || reg().eal_up))
        e.refresh(e.arg);
    out.name = name;
    out.type = e.s->type;
    out.tsc = tsc::now();
    out.fields.clear();
    out.fields.reserve(e.s->count);
    const auto *base = static_cast<const unsigned char *>(e.block);
    for (std::size_t i = 0; i < e.s->count; i++) {
        const field &f = e.s->fields[i];
        field_value v;
        v.name = f.name;
        v.k = f.k;
        v.u = f.u;
        if (f.k == kind::histogram) {
            const auto *h = reinterpret_cast<const histogram *>(base + f.offset);
            v.hist.counts.resize(histogram::buckets);
            for (unsigned b = 0; b < histogram::buckets; b++) {
                v.hist.counts[b] = h->count(b);
                v.hist.total += v.hist.counts[b];
            }
            v.hist.sum = h->sum();
            v.hist.max = h->max();
        } else {
            v.value = reinterpret_cast<const std::atomic<std::uint64_t> *>(base + f.offset)->load(std::memory_order_relaxed);
        }
        out.fields.push_back(std::move(v));
    }
}

#define IO_FIELD(n, k, u, help) SHUNT_STATS_FIELD(io_stats, n, k, u, help)
const field io_fields[] = {
    IO_FIELD(tx_msgs, counter, none, "messages posted"),
    IO_FIELD(tx_bytes, counter, bytes, "payload bytes posted"),
    IO_FIELD(rx_msgs, counter, none, "messages received"),
    IO_FIELD(rx_bytes, counter, bytes, "payload bytes received"),
    IO_FIELD(errors, counter, none, "error completions and failed posts"),
    IO_FIELD(drops, counter, none, "messages dropped"),
    IO_FIELD(retransmits, counter, none, "frames or messages sent again"),
    IO_FIELD(depth, gauge, none, "operations outstanding"),
    IO_FIELD(depth_max, gauge, none, "most operations outstanding"),
    IO_FIELD(completion, histogram, cycles, "send-to-completion latency"),
};
#undef IO_FIELD
const schema io_schema_v{"io", io_fields, sizeof io_fields / sizeof io_fields[0]};

} // namespace

bool enabled() noexcept
{
    static const bool on = [] {
        bool b = true;
        return telemetry_tunable.as_bool(b) == 0 ? b : true;
    }();
    return on;
}

const std::string &one_way_clock()
{
    static const std::string id = [] {
        bool on = false;
        if (!enabled() || one_way_tunable.as_bool(on) != 0 || !on)
            return std::string();
        std::string why;
        return tsc::clock_id(why); // "" without an invariant TSC: nothing is stamped
    }();
    return id;
}

const char *kind_name(kind k) noexcept
{
    switch (k) {
    case kind::counter: return "counter";
    case kind::gauge: return "gauge";
    case kind::histogram: return "histogram";
    }
    return "?";
}

const char *unit_name(unit u) noexcept
{
    switch (u) {
    case unit::none: return "";
    case unit::bytes: return "bytes";
    case unit::cycles: return "cycles";
    case unit::ns: return "ns";
    }
    return "?";
}

const schema &io_schema() noexcept { return io_schema_v; }

int registration::open(const std::string &name, const schema &s, const void *block, void (*refresh)(void *),
                       void *arg, bool needs_eal)
{
    if (id_ != 0)
        return -FI_EBUSY;
    if (!block || !name_ok(name) || !schema_ok(s))
        return -FI_EINVAL;
    registry &r = reg();
    std::lock_guard g(r.mu);
    if (r.by_name.count(name))
        return -FI_EEXIST;
    const std::uint64_t id = r.next_id++;
    r.by_name.emplace(name, entry{id, &s, block, refresh, arg, needs_eal});
    id_ = id;
    name_ = name;
    return 0;
}

void registration::close() noexcept
{
    if (id_ == 0)
        return;
    registry &r = reg();
    {
        std::lock_guard g(r.mu);
        auto it = r.by_name.find(name_);
        if (it != r.by_name.end() && it->second.id == id_)
            r.by_name.erase(it);
    }
    id_ = 0;
    name_.clear();
}

int io_block::open(const std::string &name)
{
    if (s_)
        return -FI_EBUSY;
    if (!enabled())
        return 0;
    auto *s = new (std::align_val_t{alignof(io_stats)}, std::nothrow) io_stats{};
    if (!s)
        return -FI_ENOMEM;
    int rc = reg_.open(name, io_schema_v, s);
    if (rc != 0) {
        ::operator delete(s, std::align_val_t{alignof(io_stats)});
        return rc;
    }
    s_ = s;
    return 0;
}

void io_block::close() noexcept
{
    reg_.close();
    if (s_) {
        s_->~io_stats();
        ::operator delete(s_, std::align_val_t{alignof(io_stats)});
        s_ = nullptr;
    }
}

std::uint64_t histogram_snapshot::percentile(double pct) const noexcept
{
    if (total == 0 || counts.size() < histogram::buckets)
        return 0;
    double want = std::ceil(pct / 100.0 * static_cast<double>(total) - 1e-9);
    const std::uint64_t rank = want < 1 ? 1 : static_cast<std::uint64_t>(want);
    std::uint64_t seen = 0;
    for (unsigned b = 0; b < histogram::buckets; b++) {
        seen += counts[b];
        if (seen >= rank)
            return std::min(histogram::bucket_high(b), max);
    }
    return max;
}

double histogram_snapshot::mean() const noexcept
{
    return total ? static_cast<double>(sum) / static_cast<double>(total) : 0;
}

std::uint64_t histogram_snapshot::min() const noexcept
{
    for (unsigned b = 0; b < counts.size(); b++)
        if (counts[b])
            return histogram::bucket_low(b);
    return 0;
}

const field_value *block_snapshot::find(const std::string &n) const noexcept
{
    for (const field_value &f : fields)
        if (f.name == n)
            return &f;
    return nullptr;
}

namespace {
/** Three significant digits of @p v followed by @p unit. */
std::string sig3(double v, const char *unit)
{
    char b[48];
    const double a = std::fabs(v);
    std::snprintf(b, sizeof b, a >= 99.95 ? "%.0f%s" : a >= 9.995 ? "%.1f%s" : "%.2f%s", v, unit);
    return b;
}
} // namespace

std::string format_ns(double ns)
{
    const double a = std::fabs(ns);
    if (a < 999.5)
        return sig3(ns, " ns");
    if (a < 999.5e3)
        return sig3(ns / 1e3, " \u00b5s");
    if (a < 999.5e6)
        return sig3(ns / 1e6, " ms");
    return sig3(ns / 1e9, " s");
}

std::string format_count(double v)
{
    const double a = std::fabs(v);
    if (a < 999.5)
        return v == std::floor(v) ? std::to_string(static_cast<long long>(v)) : sig3(v, "");
    if (a < 999.5e3)
        return sig3(v / 1e3, "k");
    if (a < 999.5e6)
        return sig3(v / 1e6, "M");
    return sig3(v / 1e9, "G");
}

std::vector<std::string> list()
{
    registry &r = reg();
    std::lock_guard g(r.mu);
    std::vector<std::string> v;
    v.reserve(r.by_name.size());
    for (const auto &[n, e] : r.by_name)
        v.push_back(n);
    return v;
}

int read(const std::string &name, block_snapshot &out)
{
    registry &r = reg();
    std::lock_guard g(r.mu);
    auto it = r.by_name.find(name);
    if (it == r.by_name.end())
        return -FI_ENOENT;
    read_entry(it->first, it->second, out);
    return 0;
}

std::vector<block_snapshot> read_all()
{
    registry &r = reg();
    std::lock_guard g(r.mu);
    std::vector<block_snapshot> v(r.by_name.size());
    std::size_t i = 0;
    for (const auto &[n, e] : r.by_name)
        read_entry(n, e, v[i++]);
    return v;
}

} // namespace shunt::env::stats

namespace shunt::env::detail {

void stats_eal_down() noexcept
{
    auto &r = stats::reg();
    std::lock_guard g(r.mu);
    r.eal_up = false;
}

} // namespace shunt::env::detail
