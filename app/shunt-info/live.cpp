// shunt-info --live PID: the statistics of a running Shunt process, read
// through its DPDK telemetry socket and shown refreshing: counters with
// their rate, gauges, and each histogram over the last interval and in total.
#include "live.h"

#include "env/errors.h"
#include "env/stats.h"
#include "env/telemetry.h"
#include "json.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <thread>

namespace shunt::info {
namespace {

using env::stats::format_count;
using env::stats::format_ns;

volatile sig_atomic_t interrupted = 0;

void on_signal(int) { interrupted = 1; }

/** One histogram of a block: its buckets (upper edge -> count). */
struct hist {
    std::map<std::uint64_t, std::uint64_t> buckets;
    std::uint64_t total = 0, max = 0;
    bool time = false;
};

struct block {
    std::string name, type;
    jvalue raw;                               ///< the block as the socket gave it
    std::vector<std::pair<std::string, std::uint64_t>> scalars;
    std::vector<std::string> gauges, bytes;   ///< names of scalars that are gauges / byte counts
    std::map<std::string, hist> hists;
};

std::uint64_t u64(const jvalue &v) { return v.k == jvalue::number_v ? std::strtoull(v.s.c_str(), nullptr, 10) : 0; }

std::vector<std::string> names_of(const jvalue *v)
{
    std::vector<std::string> out;
    if (v && v->k == jvalue::array_v)
        for (const jvalue &x : v->a)
            if (x.k == jvalue::string_v)
                out.push_back(x.s);
    return out;
}

bool ends_with(const std::string &s, const std::string &t)
{
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

/** Split a /shunt/stats reply into scalars and histograms (a histogram H
 *  is the set of keys H_count, H_p50[_ns] ..., H_le[_ns], H_n). */
block decode(const jvalue &d)
{
    block b;
    b.raw = d;
    if (const jvalue *n = d.get("name"))
        b.name = n->s;
    if (const jvalue *t = d.get("type"))
        b.type = t->s;
    b.gauges = names_of(d.get("gauges"));
    b.bytes = names_of(d.get("bytes"));
    std::vector<std::string> bases;
    for (const auto &[k, v] : d.o)
        if (v.k == jvalue::array_v && ends_with(k, "_n"))
            bases.push_back(k.substr(0, k.size() - 2));
    auto owned = [&](const std::string &k) {
        for (const std::string &h : bases)
            if (k.size() > h.size() + 1 && k.compare(0, h.size() + 1, h + "_") == 0)
                return true;
        return false;
    };
    for (const std::string &h : bases) {
        hist x;
        x.time = d.get(h + "_p50_ns") != nullptr;
        const std::string sfx = x.time ? "_ns" : "";
        const jvalue *le = d.get(h + "_le" + sfx), *n = d.get(h + "_n");
        if (le && n && le->a.size() == n->a.size())
            for (std::size_t i = 0; i < le->a.size(); i++)
                x.buckets[u64(le->a[i])] += u64(n->a[i]);
        if (const jvalue *c = d.get(h + "_count"))
            x.total = u64(*c);
        if (const jvalue *m = d.get(h + "_max" + sfx))
            x.max = u64(*m);
        b.hists[h] = std::move(x);
    }
    for (const auto &[k, v] : d.o)
        if (v.k == jvalue::number_v && !owned(k))
            b.scalars.emplace_back(k, u64(v));
    return b;
}

/** Nearest-rank percentile over buckets (upper edges). */
std::uint64_t pct(const std::map<std::uint64_t, std::uint64_t> &b, std::uint64_t total, double p)
{
    if (!total)
        return 0;
    const double want = std::ceil(p / 100.0 * static_cast<double>(total) - 1e-9);
    const std::uint64_t rank = want < 1 ? 1 : static_cast<std::uint64_t>(want);
    std::uint64_t seen = 0;
    for (const auto &[le, n] : b) {
        seen += n;
        if (seen >= rank)
            return le;
    }
    return b.empty() ? 0 : b.rbegin()->first;
}

std::string value_text(double v, bool time)
{
    return time ? format_ns(v) : format_count(v);
}

std::string summary(const std::map<std::uint64_t, std::uint64_t> &b, std::uint64_t total, bool time)
{
    std::uint64_t hi = b.empty() ? 0 : b.rbegin()->first;
    char line[256];
    std::snprintf(line, sizeof line, "n %-7s p50 %-9s p99 %-9s p99.9 %-9s max %s", format_count(static_cast<double>(total)).c_str(),
                  value_text(static_cast<double>(pct(b, total, 50)), time).c_str(),
                  value_text(static_cast<double>(pct(b, total, 99)), time).c_str(),
                  value_text(static_cast<double>(pct(b, total, 99.9)), time).c_str(),
                  value_text(static_cast<double>(hi), time).c_str());
    return line;
}

void print_block(const block &b, const block *prev, double dt)
{
    std::printf("%s (%s)\n", b.name.c_str(), b.type.c_str());
    for (const auto &[k, v] : b.scalars) {
        const bool gauge = std::find(b.gauges.begin(), b.gauges.end(), k) != b.gauges.end();
        const bool bytes = std::find(b.bytes.begin(), b.bytes.end(), k) != b.bytes.end();
        std::string rate;
        if (!gauge && prev && dt > 0) {
            for (const auto &[pk, pv] : prev->scalars)
                if (pk == k && v >= pv) {
                    double r = static_cast<double>(v - pv) / dt;
                    rate = bytes ? format_count(r) + "B/s" : format_count(r) + "/s";
                }
        }
        std::printf("  %-22s %20llu  %s%s\n", k.c_str(), static_cast<unsigned long long>(v),
                    gauge ? "(now)" : rate.c_str(), bytes && !gauge ? " bytes" : "");
    }
    for (const auto &[h, x] : b.hists) {
        std::printf("  %-22s total: %s\n", h.c_str(), summary(x.buckets, x.total, x.time).c_str());
        if (!prev)
            continue;
        auto it = prev->hists.find(h);
        if (it == prev->hists.end())
            continue;
        std::map<std::uint64_t, std::uint64_t> d;
        std::uint64_t n = 0;
        for (const auto &[le, c] : x.buckets) {
            auto p = it->second.buckets.find(le);
            std::uint64_t old = p == it->second.buckets.end() ? 0 : p->second;
            if (c > old) {
                d[le] = c - old;
                n += c - old;
            }
        }
        char what[48];
        std::snprintf(what, sizeof what, "last %.1f s:", dt);
        std::printf("  %-22s %-6s %s\n", "", "", n ? (std::string(what) + " " + summary(d, n, x.time)).c_str()
                                                   : "last interval: nothing recorded");
    }
}

void emit(json &j, const jvalue &v)
{
    switch (v.k) {
    case jvalue::null_v: j.null(); break;
    case jvalue::bool_v: j.boolean(v.b); break;
    case jvalue::number_v: j.raw(v.s); break;
    case jvalue::string_v: j.str(v.s); break;
    case jvalue::array_v:
        j.begin_array();
        for (const jvalue &x : v.a)
            emit(j, x);
        j.end_array();
        break;
    case jvalue::object_v:
        j.begin_object();
        for (const auto &[k, x] : v.o) {
            j.key(k);
            emit(j, x);
        }
        j.end_object();
        break;
    }
}

/** Send @p cmd and parse the value under the command's own key. */
int ask(env::telemetry::client &c, const std::string &cmd, jvalue &out)
{
    std::string reply;
    int rc = c.query(cmd, reply);
    if (rc != 0)
        return rc;
    jvalue all;
    if (!parse_json(reply, all) || all.k != jvalue::object_v || all.o.empty())
        return -FI_EIO;
    out = all.o.front().second;
    return 0;
}

std::string comm_of(pid_t pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
    std::string s;
    std::getline(f, s);
    return s;
}

} // namespace

int run_live(pid_t pid, double interval, long count, bool as_json)
{
    const std::string path = env::telemetry::socket_path(pid);
    env::telemetry::client c;
    int rc = c.connect(path);
    if (rc != 0) {
        std::fprintf(stderr, "shunt-info: cannot read process %d: %s (%s)\n", static_cast<int>(pid),
                     rc == -FI_ENOENT ? "it serves no telemetry socket" : shunt::strerror(rc), path.c_str());
        std::vector<pid_t> procs = env::telemetry::processes();
        if (procs.empty()) {
            std::fprintf(stderr, "  no Shunt process of this user serves telemetry (is SHUNT_TELEMETRY=0 set?)\n");
        } else {
            std::fprintf(stderr, "  Shunt processes serving telemetry:");
            for (pid_t p : procs)
                std::fprintf(stderr, " %d (%s)", static_cast<int>(p), comm_of(p).c_str());
            std::fputc('\n', stderr);
        }
        return 1;
    }
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    const bool tty = !as_json && isatty(STDOUT_FILENO);
    const std::string comm = comm_of(pid);
    std::map<std::string, block> prev;
    auto last = std::chrono::steady_clock::now();
    for (long k = 1; !interrupted && (count <= 0 || k <= count); k++) {
        jvalue names;
        if ((rc = ask(c, "/shunt/list", names)) != 0)
            break;
        std::map<std::string, block> now;
        for (const std::string &n : names_of(&names)) {
            jvalue d;
            if ((rc = ask(c, "/shunt/stats," + n, d)) != 0)
                break;
            if (d.k == jvalue::object_v) // null: closed since the list
                now[n] = decode(d);
        }
        if (rc != 0)
            break;
        const auto t = std::chrono::steady_clock::now();
        const double dt = std::chrono::duration<double>(t - last).count();
        last = t;
        if (as_json) {
            json j;
            j.begin_object().key("pid").num(static_cast<int>(pid)).key("command").str(comm);
            j.key("refresh").num(static_cast<std::int64_t>(k)).key("time").num(static_cast<std::int64_t>(std::time(nullptr)));
            j.key("blocks").begin_object();
            for (const auto &[n, b] : now) {
                j.key(n);
                emit(j, b.raw);
            }
            j.end_object().end_object();
            std::printf("%s\n", j.text().c_str());
        } else {
            if (tty)
                std::fputs("\033[H\033[2J", stdout);
            char when[32];
            std::time_t tt = std::time(nullptr);
            std::strftime(when, sizeof when, "%H:%M:%S", std::localtime(&tt));
            std::printf("shunt-info --live %d (%s): %zu block(s), refresh %ld every %.1f s, %s%s\n",
                        static_cast<int>(pid), comm.c_str(), now.size(), k, interval, when,
                        tty ? "  (Ctrl-C to stop)" : "");
            for (const auto &[n, b] : now) {
                auto p = prev.find(n);
                print_block(b, p == prev.end() ? nullptr : &p->second, dt);
            }
            if (!tty)
                std::printf("\n");
        }
        std::fflush(stdout);
        prev = std::move(now);
        if (count > 0 && k == count)
            break;
        // Sleep in small steps so that Ctrl-C ends the view at once.
        const auto until = t + std::chrono::microseconds(static_cast<long long>(interval * 1e6));
        while (!interrupted && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (rc == -FI_ECONNRESET || rc == -FI_ETIMEDOUT) {
        std::fprintf(stderr, "shunt-info: process %d is gone\n", static_cast<int>(pid));
        return 0;
    }
    if (rc != 0) {
        std::fprintf(stderr, "shunt-info: reading process %d: %s\n", static_cast<int>(pid), shunt::strerror(rc));
        return 1;
    }
    return 0;
}

} // namespace shunt::info
