#include "live.h"

#include "env/errors.h"
#include "env/tsc.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace shunt::perf {

volatile std::sig_atomic_t interrupted = 0;

namespace {

void on_sigint(int)
{
    interrupted = 1;
    signal(SIGINT, SIG_DFL); // a second Ctrl-C ends the process
}

std::string size_text(std::size_t s)
{
    if (s >= (1u << 20) && s % (1u << 20) == 0)
        return std::to_string(s >> 20) + "M";
    if (s >= 1024 && s % 1024 == 0)
        return std::to_string(s >> 10) + "K";
    return std::to_string(s);
}

#define PERF_FIELD(n, k, u, help) SHUNT_STATS_FIELD(perf_stats, n, k, u, help)
const env::stats::field perf_fields[] = {
    PERF_FIELD(size, gauge, bytes, "message size being measured"),
    PERF_FIELD(done, gauge, none, "timed iterations (pingpong) or messages (bw, rate) so far in this size"),
    PERF_FIELD(sizes_done, counter, none, "sizes finished"),
    PERF_FIELD(one_way, histogram, cycles, "pingpong: one-way latency, half of each round trip, this size"),
    PERF_FIELD(tsc_one_way, histogram, cycles,
               "pingpong --tsc-one-way: responder to initiator, arrival less the responder's TSC stamp, this size"),
};
#undef PERF_FIELD
const env::stats::schema perf_schema_v{"perf", perf_fields, sizeof perf_fields / sizeof perf_fields[0]};

} // namespace

const env::stats::schema &perf_schema() { return perf_schema_v; }

void install_interrupt()
{
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
}

void live_state::begin(std::size_t bytes)
{
    size = bytes;
    start = env::tsc::now();
    next_check = start + check_cycles;
    next_line = start + line_cycles;
    last_done = 0;
    last_tsc = start;
    printed = false;
    if (st) {
        st->one_way.reset();
        st->done.set(0);
        st->size.set(bytes);
        last_counts.assign(env::stats::histogram::buckets, 0);
    }
}

void live_state::end()
{
    if (printed && tty)
        std::fputs("\r\033[K", stderr);
    printed = false;
    if (st)
        st->sizes_done.add();
}

int tick(live_state &l, std::uint64_t done, std::uint64_t now, std::uint64_t paused)
{
    l.next_check = now + l.check_cycles;
    if (l.st)
        l.st->done.set(done);
    if (interrupted)
        return -FI_ECANCELED;
    if (!l.lines || now < l.next_line)
        return 0;
    l.next_line = now + l.line_cycles;
    const double secs = env::tsc::to_ns(now - l.start - paused) / 1e9;
    const double dt = env::tsc::to_ns(now - l.last_tsc) / 1e9;
    const std::uint64_t n = done - l.last_done;
    char line[320];
    int len = std::snprintf(line, sizeof line, "shunt-perf: %s size %s: %.0f s, %s %s; last %.1f s: ", name(l.test),
                            size_text(l.size).c_str(), secs, env::stats::format_count(static_cast<double>(done)).c_str(),
                            l.test == test_kind::pingpong ? "iterations" : "messages", dt);
    if (l.test != test_kind::pingpong) {
        const double rate = dt > 0 ? static_cast<double>(n) / dt : 0;
        std::snprintf(line + len, sizeof line - len, "%s msg/s, %sB/s", env::stats::format_count(rate).c_str(),
                      env::stats::format_count(rate * static_cast<double>(l.size)).c_str());
    } else if (l.st) {
        // The interval's histogram: this line's counts less the last line's.
        env::stats::histogram_snapshot h;
        h.counts.resize(env::stats::histogram::buckets);
        for (unsigned b = 0; b < env::stats::histogram::buckets; b++) {
            const std::uint64_t c = l.st->one_way.count(b);
            h.counts[b] = c >= l.last_counts[b] ? c - l.last_counts[b] : 0;
            h.total += h.counts[b];
            l.last_counts[b] = c;
        }
        std::uint64_t hi = 0;
        for (unsigned b = 0; b < h.counts.size(); b++)
            if (h.counts[b])
                hi = env::stats::histogram::bucket_high(b);
        h.max = std::min(hi, l.st->one_way.max());
        auto ns = [&](std::uint64_t c) { return env::stats::format_ns(env::tsc::to_ns(c)); };
        std::snprintf(line + len, sizeof line - len, "one-way p50 %s, p99 %s, p99.9 %s, max %s (histogram)",
                      ns(h.percentile(50)).c_str(), ns(h.percentile(99)).c_str(), ns(h.percentile(99.9)).c_str(),
                      ns(h.max).c_str());
    } else {
        const double mean = n ? env::tsc::to_ns(now - l.last_tsc) / static_cast<double>(n) / 2 : 0;
        std::snprintf(line + len, sizeof line - len, "one-way mean %s", env::stats::format_ns(mean).c_str());
    }
    l.last_done = done;
    l.last_tsc = now;
    std::fprintf(stderr, l.tty ? "\r\033[K%s" : "%s\n", line);
    l.printed = true;
    return 0;
}

} // namespace shunt::perf
