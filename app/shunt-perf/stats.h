/* shunt-perf: statistics of one size, and the three printed shapes of them
 * (human table, JSON lines, CSV). The JSON and CSV shapes are documented in
 * doc/guides/perf.md and stay stable: fields are only ever added. */
#pragma once

#include "env/stats_fp.h"
#include "options.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace shunt::perf {

inline constexpr int json_schema_version = 1;

struct latency_summary {
    double min, mean, p50, p90, p99, p999, p9999, max;  ///< one-way ns
};

struct size_result {
    std::size_t size = 0;
    std::uint64_t iterations = 0;
    std::uint64_t warmup = 0;
    unsigned window = 0;           ///< bw / rate: effective window; pingpong: 1
    double elapsed_ns = 0;         ///< timed part
    bool has_latency = false;      ///< pingpong only
    latency_summary one_way{};
    bool has_tsc_one_way = false;  ///< pingpong --tsc-one-way
    latency_summary tsc_one_way{}; ///< responder to initiator from TSC stamps (bucket upper edges, ns)
    double bandwidth_mbps = 0;     ///< 10^6 B/s
    double msg_rate_mmps = 0;      ///< 10^6 messages/s
    bool verified = false;         ///< every payload byte was checked (--verify)
    bool interrupted = false;      ///< Ctrl-C ended this size early: figures of what was done
};

/** Nearest-rank percentile of sorted samples: the smallest sample with at
 *  least @p pct percent of all samples at or below it. */
std::uint64_t percentile(const std::vector<std::uint64_t> &sorted, double pct);

/** Fill @p r from a pingpong run: sorts @p rt_cycles (round trips) in place.
 *  One-way latency is half the round trip. */
void summarize_pingpong(std::vector<std::uint64_t> &rt_cycles, std::uint64_t elapsed_cycles, size_result &r);
/** Fill r.tsc_one_way from the --tsc-one-way histogram @p h (cycles):
 *  percentiles are bucket upper edges (at most 12.5 % high), min a low edge. */
void summarize_tsc_one_way(const env::stats::histogram &h, size_result &r);
/** Fill @p r from a bw / rate run. */
void summarize_stream(std::uint64_t elapsed_cycles, size_result &r);

/** Run description printed with every result. */
struct run_info {
    test_config cfg;
    std::vector<unsigned> cores;   ///< CPUs used (initiator first)
    double tsc_ghz = 0;
};

/** Where and when the figures were taken, for JSON, CSV and plots. */
struct machine_info {
    std::string host, cpu_model, kernel, shunt_version, date; ///< date: UTC, ISO 8601, at the first call
};
/** Read once per process (hostname, /proc/cpuinfo, uname, the build). */
const machine_info &machine();

void print_table_header(FILE *f, const run_info &info);
void print_table_row(FILE *f, const run_info &info, const size_result &r);
void print_json(FILE *f, const run_info &info, const size_result &r);
void print_csv_header(FILE *f);
void print_csv_row(FILE *f, const run_info &info, const size_result &r);

/** Write the SVG picture: the one-way latency histogram of @p sorted_one_way
 *  samples (cycles of round trips, sorted) when there is one pingpong size,
 *  otherwise the results against size. @return 0 or -errno. */
int write_plot(const std::string &path, const run_info &info, const std::vector<size_result> &results,
               const std::vector<std::uint64_t> &sorted_rt_cycles);

} // namespace shunt::perf
