#include "stats.h"

#include "shunt_config.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <ctime>
#include <fstream>

#include "env/stats.h"
#include "env/tsc.h"

#include <algorithm>
#include <cmath>

namespace shunt::perf {
namespace {

double cycles_to_ns(double c) { return c * 1e9 / static_cast<double>(env::tsc::hz()); }

void json_num(FILE *f, const char *key, double v, bool comma = true)
{
    std::fprintf(f, "\"%s\":%.1f%s", key, v, comma ? "," : "");
}

std::string cores_text(const std::vector<unsigned> &c)
{
    std::string s;
    for (unsigned x : c)
    {
        if (!s.empty())
            s += ',';
        s += std::to_string(x);
    }
    return s;
}

} // namespace

std::uint64_t percentile(const std::vector<std::uint64_t> &sorted, double pct)
{
    if (sorted.empty())
        return 0;
    const double n = static_cast<double>(sorted.size());
    // Rank ceil(pct/100 * n), 1-based; a tiny epsilon keeps exact products
    // (99.9% of 1000) from rounding up to the next rank.
    double rank = std::ceil(pct / 100.0 * n - 1e-9);
    std::size_t idx = rank < 1 ? 0 : static_cast<std::size_t>(rank) - 1;
    return sorted[std::min(idx, sorted.size() - 1)];
}

void summarize_pingpong(std::vector<std::uint64_t> &rt, std::uint64_t elapsed_cycles, size_result &r)
{
    std::sort(rt.begin(), rt.end());
    long double sum = 0;
    for (std::uint64_t c : rt)
        sum += c;
    auto ow = [](std::uint64_t c) { return cycles_to_ns(static_cast<double>(c)) / 2; };
    r.has_latency = true;
    r.one_way.min = ow(rt.front());
    r.one_way.mean = cycles_to_ns(static_cast<double>(sum / rt.size())) / 2;
    r.one_way.p50 = ow(percentile(rt, 50));
    r.one_way.p90 = ow(percentile(rt, 90));
    r.one_way.p99 = ow(percentile(rt, 99));
    r.one_way.p999 = ow(percentile(rt, 99.9));
    r.one_way.p9999 = ow(percentile(rt, 99.99));
    r.one_way.max = ow(rt.back());
    r.elapsed_ns = cycles_to_ns(static_cast<double>(elapsed_cycles));
    // Both directions carry a message per iteration.
    const double msgs = 2.0 * static_cast<double>(r.iterations);
    r.bandwidth_mbps = r.elapsed_ns > 0 ? msgs * static_cast<double>(r.size) / r.elapsed_ns * 1e3 : 0;
    r.msg_rate_mmps = r.elapsed_ns > 0 ? msgs / r.elapsed_ns * 1e3 : 0;
}

void summarize_tsc_one_way(const env::stats::histogram &h, size_result &r)
{
    env::stats::histogram_snapshot s;
    s.counts.resize(env::stats::histogram::buckets);
    for (unsigned b = 0; b < env::stats::histogram::buckets; b++) {
        s.counts[b] = h.count(b);
        s.total += s.counts[b];
    }
    s.sum = h.sum();
    s.max = h.max();
    r.has_tsc_one_way = s.total > 0;
    if (!r.has_tsc_one_way)
        return;
    auto ns = [](std::uint64_t c) { return cycles_to_ns(static_cast<double>(c)); };
    r.tsc_one_way = {ns(s.min()),         cycles_to_ns(s.mean()), ns(s.percentile(50)),   ns(s.percentile(90)),
                     ns(s.percentile(99)), ns(s.percentile(99.9)), ns(s.percentile(99.99)), ns(s.max)};
}

void summarize_stream(std::uint64_t elapsed_cycles, size_result &r)
{
    r.has_latency = false;
    r.elapsed_ns = cycles_to_ns(static_cast<double>(elapsed_cycles));
    const double msgs = static_cast<double>(r.iterations);
    r.bandwidth_mbps = r.elapsed_ns > 0 ? msgs * static_cast<double>(r.size) / r.elapsed_ns * 1e3 : 0;
    r.msg_rate_mmps = r.elapsed_ns > 0 ? msgs / r.elapsed_ns * 1e3 : 0;
}

/** @p s right-aligned in @p width columns (UTF-8: one column per code point). */
static std::string pad(const std::string &s, std::size_t width)
{
    std::size_t cols = 0;
    for (unsigned char c : s)
        cols += (c & 0xc0) != 0x80;
    return cols >= width ? s : std::string(width - cols, ' ') + s;
}

void print_table_header(FILE *f, const run_info &info)
{
    const test_config &c = info.cfg;
    std::fprintf(f, "# shunt-perf %s: %s %s '%s'", name(c.test), level_name(c), c.vq ? "driver" : "provider",
                 c.provider.c_str());
    if (c.vq)
        std::fprintf(f, ", qp %s", c.qp_type.c_str());
    else
        std::fprintf(f, ", ep %s", c.ep_type.c_str());
    std::fprintf(f, ", op %s%s%s%s, cores %s, TSC %.3f GHz\n", c.op.c_str(),
                 c.shared_buffers ? ", shared buffers" : "", c.threading != "domain" ? ", threading " : "",
                 c.threading != "domain" ? c.threading.c_str() : "", cores_text(info.cores).c_str(), info.tsc_ghz);
    if (c.test == test_kind::pingpong)
        std::fprintf(f, "# one-way latency (half of each round trip, every iteration timed)\n");
    std::fprintf(f, "%9s %10s %6s %9s %9s %9s %9s %9s %10s %11s %9s\n", "size", "iters", "window", "p50", "p90",
                 "p99", "p99.9", "p99.99", "max", "MB/s", "Mmsg/s");
}

void print_table_row(FILE *f, const run_info &, const size_result &r)
{
    std::fprintf(f, "%9zu %10llu %6u ", r.size, static_cast<unsigned long long>(r.iterations), r.window);
    if (r.has_latency) {
        const double v[] = {r.one_way.p50, r.one_way.p90, r.one_way.p99, r.one_way.p999, r.one_way.p9999, r.one_way.max};
        for (int i = 0; i < 6; i++)
            std::fprintf(f, "%s ", pad(env::stats::format_ns(v[i]), i == 5 ? 10 : 9).c_str());
    } else {
        std::fprintf(f, "%9s %9s %9s %9s %9s %10s ", "-", "-", "-", "-", "-", "-");
    }
    std::fprintf(f, "%11.2f %9.3f%s\n", r.bandwidth_mbps, r.msg_rate_mmps,
                 r.interrupted ? (r.has_latency ? "  (interrupted)" : "  (interrupted: sender side)") : "");
    if (r.has_tsc_one_way) {
        const latency_summary &t = r.tsc_one_way;
        std::fprintf(f, "#   one way from TSC stamps (responder to initiator): p50 %s  p90 %s  p99 %s  p99.9 %s  "
                     "p99.99 %s  max %s\n",
                     env::stats::format_ns(t.p50).c_str(), env::stats::format_ns(t.p90).c_str(),
                     env::stats::format_ns(t.p99).c_str(), env::stats::format_ns(t.p999).c_str(),
                     env::stats::format_ns(t.p9999).c_str(), env::stats::format_ns(t.max).c_str());
    }
    std::fflush(f);
}

const machine_info &machine()
{
    static const machine_info m = [] {
        machine_info x;
        char h[256] = {};
        if (gethostname(h, sizeof h - 1) == 0)
            x.host = h;
        std::ifstream ci("/proc/cpuinfo");
        std::string line;
        while (std::getline(ci, line))
            if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
                x.cpu_model = line.substr(line.find(':') + 1);
                x.cpu_model.erase(0, x.cpu_model.find_first_not_of(" \t"));
                break;
            }
        utsname u{};
        if (uname(&u) == 0)
            x.kernel = u.release;
        x.shunt_version = SHUNT_VERSION;
        char d[32];
        std::time_t t = std::time(nullptr);
        std::tm tm{};
        gmtime_r(&t, &tm);
        std::strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%SZ", &tm);
        x.date = d;
        return x;
    }();
    return m;
}

namespace {
// JSON string content: quotes, backslashes and control bytes escaped.
std::string esc(const std::string &s)
{
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\')
            o += '\\';
        if (static_cast<unsigned char>(c) >= 0x20)
            o += c;
    }
    return o;
}
// CSV field: quoted when it holds a comma or a quote.
std::string csv_field(const std::string &s)
{
    if (s.find_first_of(",\"") == std::string::npos)
        return s;
    std::string o = "\"";
    for (char c : s)
        o += c == '"' ? std::string("\"\"") : std::string(1, c);
    return o + "\"";
}
} // namespace

/** "key":{min,mean,p50,...,max}, and a comma. */
static void json_latency(FILE *f, const char *key, const latency_summary &l)
{
    std::fprintf(f, "\"%s\":{", key);
    json_num(f, "min", l.min);
    json_num(f, "mean", l.mean);
    json_num(f, "p50", l.p50);
    json_num(f, "p90", l.p90);
    json_num(f, "p99", l.p99);
    json_num(f, "p999", l.p999);
    json_num(f, "p9999", l.p9999);
    json_num(f, "max", l.max, false);
    std::fputs("},", f);
}

void print_json(FILE *f, const run_info &info, const size_result &r)
{
    const test_config &c = info.cfg;
    std::fprintf(f, "{\"schema\":%d,\"test\":\"%s\",\"level\":\"%s\",\"provider\":\"%s\",", json_schema_version,
                 name(c.test), level_name(c), c.provider.c_str());
    std::fprintf(f, "\"ep_type\":\"%s\",\"qp_type\":\"%s\",\"op\":\"%s\",", c.ep_type.c_str(), c.qp_type.c_str(),
                 c.op.c_str());
    std::fprintf(f, "\"cores\":[%s],\"tsc_ghz\":%.4f,", cores_text(info.cores).c_str(), info.tsc_ghz);
    std::fprintf(f, "\"size\":%zu,\"iterations\":%llu,\"warmup\":%llu,\"window\":%u,", r.size,
                 static_cast<unsigned long long>(r.iterations), static_cast<unsigned long long>(r.warmup),
                 r.window);
    json_num(f, "elapsed_ns", r.elapsed_ns);
    if (r.has_latency)
        json_latency(f, "one_way_ns", r.one_way);
    else
        std::fputs("\"one_way_ns\":null,", f);
    if (r.has_tsc_one_way)
        json_latency(f, "tsc_one_way_ns", r.tsc_one_way);
    const machine_info &m = machine();
    std::fprintf(f, "\"bandwidth_MBps\":%.3f,\"msg_rate_Mmps\":%.6f,\"verified\":%s,\"interrupted\":%s,\"shared_buffers\":%s,",
                 r.bandwidth_mbps, r.msg_rate_mmps, r.verified ? "true" : "false", r.interrupted ? "true" : "false",
                 c.shared_buffers ? "true" : "false");
    std::fprintf(f, "\"threading\":\"%s\",", c.threading.c_str());
    std::fprintf(f, "\"host\":\"%s\",\"cpu_model\":\"%s\",\"kernel\":\"%s\",\"shunt_version\":\"%s\",\"date\":\"%s\"}\n",
                 esc(m.host).c_str(), esc(m.cpu_model).c_str(), esc(m.kernel).c_str(), esc(m.shunt_version).c_str(),
                 esc(m.date).c_str());
    std::fflush(f);
}

void print_csv_header(FILE *f)
{
    std::fputs("test,level,provider,ep_type,qp_type,op,size,iterations,warmup,window,elapsed_ns,"
               "min_ns,mean_ns,p50_ns,p90_ns,p99_ns,p999_ns,p9999_ns,max_ns,bandwidth_MBps,msg_rate_Mmps,verified,"
               "host,cpu_model,kernel,shunt_version,date,interrupted,shared_buffers,threading\n",
               f);
}

void print_csv_row(FILE *f, const run_info &info, const size_result &r)
{
    const test_config &c = info.cfg;
    std::fprintf(f, "%s,%s,%s,%s,%s,%s,%zu,%llu,%llu,%u,%.1f,", name(c.test), level_name(c), c.provider.c_str(),
                 c.ep_type.c_str(), c.qp_type.c_str(), c.op.c_str(), r.size,
                 static_cast<unsigned long long>(r.iterations), static_cast<unsigned long long>(r.warmup), r.window,
                 r.elapsed_ns);
    if (r.has_latency)
        std::fprintf(f, "%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,", r.one_way.min, r.one_way.mean, r.one_way.p50,
                     r.one_way.p90, r.one_way.p99, r.one_way.p999, r.one_way.p9999, r.one_way.max);
    else
        std::fputs(",,,,,,,,", f);
    const machine_info &m = machine();
    std::fprintf(f, "%.3f,%.6f,%d,%s,%s,%s,%s,%s,%d,%d,%s\n", r.bandwidth_mbps, r.msg_rate_mmps, r.verified ? 1 : 0,
                 csv_field(m.host).c_str(), csv_field(m.cpu_model).c_str(), csv_field(m.kernel).c_str(),
                 csv_field(m.shunt_version).c_str(), csv_field(m.date).c_str(), r.interrupted ? 1 : 0,
                 c.shared_buffers ? 1 : 0, c.threading.c_str());
    std::fflush(f);
}

} // namespace shunt::perf
