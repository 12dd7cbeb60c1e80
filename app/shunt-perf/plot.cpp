// shunt-perf --plot: a hand-written SVG (no library). One pingpong size: the
// one-way latency against the percentile, both on log scales, with the
// p50 .. p99.99 and max markers. Several sizes (or bw / rate): the results
// against size on a log2 size axis and a log10 value axis. Times are
// labelled in ns / µs / ms by magnitude, other values without exponents.
#include "env/stats.h"
#include "env/tsc.h"
#include "stats.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace shunt::perf {
namespace {

constexpr double W = 960, H = 600;
constexpr double L = 90, R = 70, T = 80, B = 80; // margins
constexpr double PW = W - L - R, PH = H - T - B; // plot area

std::string esc(const std::string &s)
{
    std::string o;
    for (char c : s) {
        switch (c) {
        case '&': o += "&amp;"; break;
        case '<': o += "&lt;"; break;
        case '>': o += "&gt;"; break;
        case '"': o += "&quot;"; break;
        default: o += c;
        }
    }
    return o;
}

std::string num(double v)
{
    char b[64];
    if (std::fabs(v) >= 1e4)
        return env::stats::format_count(v); // 20k, 1.5M: never 1e+06
    if (v != 0 && std::fabs(v) < 0.01)
        std::snprintf(b, sizeof b, "%.3g", v);
    else if (std::fabs(v - std::round(v)) < 1e-9)
        std::snprintf(b, sizeof b, "%.0f", v);
    else
        std::snprintf(b, sizeof b, "%.4g", v);
    return b;
}

std::string size_label(double s)
{
    auto v = static_cast<unsigned long long>(s);
    if (v >= (1ull << 20) && v % (1ull << 20) == 0)
        return std::to_string(v >> 20) + "M";
    if (v >= 1024 && v % 1024 == 0)
        return std::to_string(v >> 10) + "K";
    return std::to_string(v);
}

struct svg {
    std::string s;
    void line(double x1, double y1, double x2, double y2, const char *color, double w = 1, const char *dash = nullptr)
    {
        char b[256];
        std::snprintf(b, sizeof b,
                      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"%s%s%s/>\n",
                      x1, y1, x2, y2, color, w, dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
        s += b;
    }
    void text(double x, double y, const std::string &t, const char *anchor = "middle", double size = 12,
              const char *extra = "")
    {
        char b[320];
        std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" text-anchor=\"%s\"%s>", x, y, size,
                      anchor, extra);
        s += b;
        s += esc(t);
        s += "</text>\n";
    }
    void rect(double x, double y, double w, double h, const char *fill, const char *stroke = "none")
    {
        char b[192];
        std::snprintf(b, sizeof b,
                      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"%s\"/>\n", x, y,
                      w, h, fill, stroke);
        s += b;
    }
    void polyline(const std::vector<std::pair<double, double>> &pts, const char *color, double w = 2,
                  const char *dash = nullptr)
    {
        s += "<polyline fill=\"none\" stroke=\"";
        s += color;
        s += "\" stroke-width=\"" + num(w) + "\"";
        if (dash)
            s += std::string(" stroke-dasharray=\"") + dash + "\"";
        s += " points=\"";
        char b[48];
        for (auto [x, y] : pts) {
            std::snprintf(b, sizeof b, "%.1f,%.1f ", x, y);
            s += b;
        }
        s += "\"/>\n";
    }
    void dot(double x, double y, const char *color)
    {
        char b[128];
        std::snprintf(b, sizeof b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", x, y, color);
        s += b;
    }
};

std::string title_of(const run_info &info)
{
    const test_config &c = info.cfg;
    std::string t = std::string("shunt-perf ") + name(c.test) + ": " + (c.vq ? "driver " : "provider ") + c.provider +
                    " (" + level_name(c) + ", " + (c.vq ? "qp " + c.qp_type : "ep " + c.ep_type) + ", op " + c.op +
                    "), cores ";
    for (std::size_t i = 0; i < info.cores.size(); i++) {
        if (i)
            t += ',';
        t += std::to_string(info.cores[i]);
    }
    return t;
}

void frame(svg &g, const std::string &title, const std::string &subtitle, const std::string &xlabel,
           const std::string &ylabel)
{
    g.rect(0, 0, W, H, "white");
    g.text(W / 2, 30, title, "middle", 17, " font-weight=\"bold\"");
    g.text(W / 2, 54, subtitle, "middle", 13, " fill=\"#444\"");
    g.text(L + PW / 2, H - 25, xlabel, "middle", 14);
    char rot[96];
    std::snprintf(rot, sizeof rot, " transform=\"rotate(-90 %.1f %.1f)\"", 24.0, T + PH / 2);
    g.text(24, T + PH / 2, ylabel, "middle", 14, rot);
    g.rect(L, T, PW, PH, "none", "#333");
    const machine_info &m = machine();
    g.text(W - 8, H - 6, m.host + " · " + m.cpu_model + " · Linux " + m.kernel + " · Shunt " + m.shunt_version + " · " +
                             m.date, "end", 10, " fill=\"#666\"");
}

/** Log10 axis on the left from lo to hi (powers of ten). Returns y(v). */
struct log_axis {
    double lo, hi;
    double y(double v) const
    {
        v = std::max(v, lo);
        return T + PH - (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) * PH;
    }
    void draw(svg &g) const
    {
        for (double d = lo; d <= hi * 1.0001; d *= 10) {
            g.line(L - 6, y(d), L, y(d), "#333");
            g.line(L, y(d), L + PW, y(d), "#ddd");
            g.text(L - 9, y(d) + 4, num(d), "end", 12);
            for (double m : {2.0, 5.0})
                if (d * m < hi * 0.9999) {
                    g.line(L - 3, y(d * m), L, y(d * m), "#333");
                    g.line(L, y(d * m), L + PW, y(d * m), "#f0f0f0");
                    g.text(L - 9, y(d * m) + 4, num(d * m), "end", 10, " fill=\"#777\"");
                }
        }
    }
};

log_axis make_log_axis(double mn, double mx)
{
    mn = std::max(mn, 1e-6);
    mx = std::max(mx, mn);
    double lo = std::pow(10, std::floor(std::log10(mn)));
    double hi = std::pow(10, std::ceil(std::log10(mx)));
    if (hi <= lo)
        hi = lo * 10;
    return {lo, hi};
}

/** An axis label for a duration: "200 ns", "1 µs", "2.5 ms" (trailing
 *  zeros dropped). */
std::string tick_ns(double ns)
{
    std::string t = env::stats::format_ns(ns);
    const std::size_t sp = t.find(' ');
    std::size_t dot = t.find('.');
    if (dot != std::string::npos && dot < sp) {
        std::size_t e = sp;
        while (e > dot + 1 && t[e - 1] == '0')
            e--;
        if (e == dot + 1)
            e = dot;
        t.erase(e, sp - e);
    }
    return t;
}

/** Log10 axis of durations (ns) on the left, with 1-2-5 ticks labelled in
 *  ns / µs / ms. */
void draw_time_axis(svg &g, const log_axis &ya)
{
    for (double d = ya.lo; d <= ya.hi * 1.0001; d *= 10) {
        g.line(L - 6, ya.y(d), L, ya.y(d), "#333");
        g.line(L, ya.y(d), L + PW, ya.y(d), "#ddd");
        g.text(L - 9, ya.y(d) + 4, tick_ns(d), "end", 12);
        for (double m : {2.0, 5.0})
            if (d * m < ya.hi * 0.9999) {
                g.line(L - 3, ya.y(d * m), L, ya.y(d * m), "#333");
                g.line(L, ya.y(d * m), L + PW, ya.y(d * m), "#f0f0f0");
                g.text(L - 9, ya.y(d * m) + 4, tick_ns(d * m), "end", 10, " fill=\"#777\"");
            }
    }
}

/** One pingpong size: one-way latency against percentile, the percentile
 *  on a log scale of 1 / (1 - p) (each step right ten times rarer) and the
 *  latency on a log scale, so the body (p50) and the tail (p99.99, max) are
 *  both readable however heavy the tail. */
std::string percentiles(const run_info &info, const size_result &r, const std::vector<std::uint64_t> &sorted)
{
    const double k = 1e9 / static_cast<double>(env::tsc::hz()) / 2; // cycles of a round trip -> one-way ns
    const double n = static_cast<double>(sorted.size());
    const double xmax = std::max(std::log10(n), 1.0); // the last sample (max) sits at 1 - 1/n
    auto x = [&](double decades) { return L + decades / xmax * PW; };
    auto at = [&](double decades) { // nearest-rank sample at p = 1 - 10^-decades
        double p = 1 - std::pow(10, -decades);
        std::size_t i = static_cast<std::size_t>(std::ceil(p * n - 1e-9));
        i = i < 1 ? 0 : std::min(i - 1, sorted.size() - 1);
        return static_cast<double>(sorted[i]) * k;
    };
    svg g;
    std::string sub = std::to_string(r.size) + " B, " + std::to_string(r.iterations) + " iterations" +
                      (r.interrupted ? " (interrupted)" : "") + ": p50 " + env::stats::format_ns(r.one_way.p50) +
                      "  p90 " + env::stats::format_ns(r.one_way.p90) + "  p99 " + env::stats::format_ns(r.one_way.p99) +
                      "  p99.9 " + env::stats::format_ns(r.one_way.p999) + "  p99.99 " +
                      env::stats::format_ns(r.one_way.p9999) + "  max " + env::stats::format_ns(r.one_way.max);
    frame(g, title_of(info), sub, "percentile (log scale of 1/(1-p): each step right is ten times rarer)",
          "one-way latency (half of each round trip, log scale)");
    log_axis ya = make_log_axis(static_cast<double>(sorted.front()) * k, static_cast<double>(sorted.back()) * k);
    draw_time_axis(g, ya);
    // x ticks: 0 %, 90 %, 99 %, ... as far as the samples reach, and 50 %.
    static const char *const names[] = {"0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%",
                                        "99.99999%", "99.999999%"};
    for (int d = 0; d <= static_cast<int>(std::floor(xmax + 1e-9)) && d < 9; d++) {
        g.line(x(d), T + PH, x(d), T + PH + 6, "#333");
        g.line(x(d), T, x(d), T + PH, "#eee");
        g.text(x(d), T + PH + 20, names[d], "middle", 12);
    }
    g.line(x(std::log10(2.0)), T + PH, x(std::log10(2.0)), T + PH + 6, "#333");
    g.text(x(std::log10(2.0)), T + PH + 20, "50%", "middle", 11, " fill=\"#555\"");
    std::vector<std::pair<double, double>> pts;
    const int steps = 600;
    for (int i = 0; i <= steps; i++) {
        const double d = xmax * i / steps;
        pts.push_back({x(d), ya.y(at(d))});
    }
    g.polyline(pts, "#4a7fb5", 2);
    struct mark {
        const char *name;
        double decades;
        double v;
        const char *color;
    } marks[] = {{"p50", std::log10(2.0), r.one_way.p50, "#1b7a1b"},
                 {"p90", 1, r.one_way.p90, "#4a7fb5"},
                 {"p99", 2, r.one_way.p99, "#b52a2a"},
                 {"p99.9", 3, r.one_way.p999, "#7a1bb5"},
                 {"p99.99", 4, r.one_way.p9999, "#b5671b"},
                 {"max", xmax, r.one_way.max, "#333333"}};
    for (const mark &m : marks) {
        if (m.decades > xmax + 1e-9)
            continue;
        g.dot(x(m.decades), ya.y(m.v), m.color);
        const bool right = x(m.decades) > L + PW - 140;
        g.text(x(m.decades) + (right ? -8 : 8), ya.y(m.v) - 8, std::string(m.name) + " " + env::stats::format_ns(m.v),
               right ? "end" : "start", 12, (std::string(" fill=\"") + m.color + "\"").c_str());
    }
    return g.s;
}

std::string sweep(const run_info &info, const std::vector<size_result> &rs)
{
    struct series {
        const char *label;
        const char *color;
        const char *dash;
        std::vector<double> v;
    };
    std::vector<series> ss;
    std::string ylabel;
    const test_kind t = info.cfg.test;
    if (t == test_kind::pingpong) {
        ylabel = "one-way latency (log scale)";
        ss = {{"p50", "#1b7a1b", nullptr, {}}, {"p99", "#b52a2a", nullptr, {}}, {"p99.9", "#7a1bb5", nullptr, {}},
              {"max", "#999999", "5,4", {}}};
        for (const size_result &r : rs) {
            ss[0].v.push_back(r.one_way.p50);
            ss[1].v.push_back(r.one_way.p99);
            ss[2].v.push_back(r.one_way.p999);
            ss[3].v.push_back(r.one_way.max);
        }
    } else if (t == test_kind::bw) {
        ylabel = "bandwidth, MB/s (10^6 B/s, log scale)";
        ss = {{"MB/s", "#4a7fb5", nullptr, {}}};
        for (const size_result &r : rs)
            ss[0].v.push_back(r.bandwidth_mbps);
    } else {
        ylabel = "message rate, Mmsg/s (log scale)";
        ss = {{"Mmsg/s", "#4a7fb5", nullptr, {}}};
        for (const size_result &r : rs)
            ss[0].v.push_back(r.msg_rate_mmps);
    }
    double mn = 1e300, mx = 0;
    for (const series &s : ss)
        for (double v : s.v)
            if (v > 0) {
                mn = std::min(mn, v);
                mx = std::max(mx, v);
            }
    if (mx <= 0)
        mn = mx = 1;
    log_axis ya = make_log_axis(mn, mx);
    const bool time_axis = t == test_kind::pingpong;
    double smin = 1e300, smax = 0;
    for (const size_result &r : rs) {
        smin = std::min(smin, static_cast<double>(r.size));
        smax = std::max(smax, static_cast<double>(r.size));
    }
    double xl = std::log2(smin) - 0.5, xh = std::log2(smax) + 0.5;
    auto x = [&](double s) { return L + (std::log2(s) - xl) / (xh - xl) * PW; };
    svg g;
    std::string biggest = size_label(static_cast<double>(rs.back().size));
    biggest += biggest.back() == 'K' || biggest.back() == 'M' ? "iB" : " B";
    std::string sub = std::to_string(rs.size()) + " size(s), " + std::to_string(rs.front().size) + " B to " + biggest;
    frame(g, title_of(info), sub, "message size, bytes (log2 scale)", ylabel);
    if (time_axis)
        draw_time_axis(g, ya);
    else
        ya.draw(g);
    // x ticks at every power of two in range; labels every other one when crowded.
    const int first = static_cast<int>(std::ceil(xl)), last = static_cast<int>(std::floor(xh));
    const int every = (last - first) > 12 ? 2 : 1;
    for (int e = first; e <= last; e++) {
        double s = std::ldexp(1.0, e);
        g.line(x(s), T + PH, x(s), T + PH + 6, "#333");
        g.line(x(s), T, x(s), T + PH, "#f0f0f0");
        if ((e - first) % every == 0)
            g.text(x(s), T + PH + 20, size_label(s), "middle", 12);
    }
    double ly = T + 14;
    for (const series &s : ss) {
        std::vector<std::pair<double, double>> pts;
        for (std::size_t i = 0; i < rs.size(); i++) {
            pts.push_back({x(static_cast<double>(rs[i].size)), ya.y(s.v[i])});
            g.dot(pts.back().first, pts.back().second, s.color);
        }
        if (pts.size() > 1)
            g.polyline(pts, s.color, 2, s.dash);
        // legend
        g.line(L + 14, ly - 4, L + 40, ly - 4, s.color, 3, s.dash);
        g.text(L + 46, ly, s.label, "start", 12);
        ly += 18;
    }
    return g.s;
}

} // namespace

int write_plot(const std::string &path, const run_info &info, const std::vector<size_result> &results,
               const std::vector<std::uint64_t> &sorted_rt_cycles)
{
    if (results.empty())
        return -EINVAL;
    std::string body = !sorted_rt_cycles.empty() ? percentiles(info, results.front(), sorted_rt_cycles)
                                                 : sweep(info, results);
    FILE *f = std::fopen(path.c_str(), "w");
    if (!f)
        return -errno;
    std::fprintf(f,
                 "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                 "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
                 W, H, W, H);
    std::fputs(body.c_str(), f);
    std::fputs("</svg>\n", f);
    if (std::fclose(f) != 0)
        return -errno;
    return 0;
}

} // namespace shunt::perf
