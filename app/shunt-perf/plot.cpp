// shunt-perf --plot: a hand-written SVG (no library). One pingpong size: the
// one-way latency histogram (log count) with its CDF and the p50/p99/p99.9
// markers. Several sizes (or bw / rate): the results against size on a log2
// size axis and a log10 value axis.
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
    if (v != 0 && (std::fabs(v) >= 1e6 || std::fabs(v) < 0.01))
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

/** 1-2-5 tick step giving about @p want ticks over @p range. */
double nice_step(double range, int want)
{
    double raw = range / want;
    double p = std::pow(10, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * p >= raw)
            return m * p;
    return 10 * p;
}

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

std::string histogram(const run_info &info, const size_result &r, const std::vector<std::uint64_t> &sorted)
{
    const double k = 1e9 / static_cast<double>(env::tsc::hz()) / 2; // cycles of a round trip -> one-way ns
    const double lo = static_cast<double>(sorted.front()) * k;
    // The body of the distribution: up to p99.9 plus half its spread, so a
    // rare interrupt does not squeeze the peak into one bar; the tail beyond
    // is counted in the note under the plot.
    double hi = std::min(r.one_way.max, r.one_way.p999 + (r.one_way.p999 - lo) * 0.5);
    if (hi <= lo)
        hi = lo + 1;
    const int bins = 80;
    std::vector<unsigned long long> count(bins, 0);
    unsigned long long beyond = 0;
    for (std::uint64_t c : sorted) {
        double v = static_cast<double>(c) * k;
        if (v > hi) {
            beyond++;
            continue;
        }
        int b = static_cast<int>((v - lo) / (hi - lo) * bins);
        count[std::min(b, bins - 1)]++;
    }
    const unsigned long long peak = *std::max_element(count.begin(), count.end());
    svg g;
    char sub[256];
    std::snprintf(sub, sizeof sub,
                  "%zu B, %llu iterations: p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  p99.99 %.1f  max %.1f ns",
                  r.size, static_cast<unsigned long long>(r.iterations), r.one_way.p50, r.one_way.p90, r.one_way.p99,
                  r.one_way.p999, r.one_way.p9999, r.one_way.max);
    frame(g, title_of(info), sub, "one-way latency, ns (half of each round trip)",
          "iterations per bin (log scale)");
    auto x = [&](double v) { return L + (v - lo) / (hi - lo) * PW; };
    // x ticks
    double step = nice_step(hi - lo, 8);
    for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9; t += step) {
        g.line(x(t), T + PH, x(t), T + PH + 6, "#333");
        g.line(x(t), T, x(t), T + PH, "#eee");
        g.text(x(t), T + PH + 20, num(t), "middle", 12);
    }
    log_axis ya = make_log_axis(1, static_cast<double>(std::max(peak, 1ull)));
    ya.draw(g);
    const double bw = PW / bins;
    for (int b = 0; b < bins; b++) {
        if (!count[b])
            continue;
        // Bars start at half a count below 1 so that single samples show.
        double y0 = T + PH, y1 = ya.y(static_cast<double>(count[b]));
        if (count[b] == 1)
            y1 = std::min(y1, y0 - 2);
        g.rect(L + b * bw + 0.5, y1, bw - 1, y0 - y1, "#4a7fb5");
    }
    // CDF on the right axis (0..100 %).
    std::vector<std::pair<double, double>> cdf;
    const double n = static_cast<double>(sorted.size());
    for (int i = 0; i <= 200; i++) {
        double v = lo + (hi - lo) * i / 200;
        auto it = std::upper_bound(sorted.begin(), sorted.end(), static_cast<std::uint64_t>(v / k));
        double frac = static_cast<double>(it - sorted.begin()) / n;
        cdf.push_back({x(v), T + PH - frac * PH});
    }
    g.polyline(cdf, "#d0702a", 2);
    for (int p = 0; p <= 100; p += 20) {
        double y = T + PH - p / 100.0 * PH;
        g.line(L + PW, y, L + PW + 6, y, "#d0702a");
        g.text(L + PW + 9, y + 4, std::to_string(p) + "%", "start", 12, " fill=\"#d0702a\"");
    }
    char rot[96];
    std::snprintf(rot, sizeof rot, " fill=\"#d0702a\" transform=\"rotate(90 %.1f %.1f)\"", W - 18, T + PH / 2);
    g.text(W - 18, T + PH / 2, "cumulative share of iterations", "middle", 13, rot);
    struct mark {
        const char *name;
        double v;
        const char *color;
    } marks[] = {{"p50", r.one_way.p50, "#1b7a1b"}, {"p99", r.one_way.p99, "#b52a2a"}, {"p99.9", r.one_way.p999, "#7a1bb5"}};
    int row = 0;
    for (const mark &m : marks) {
        if (m.v < lo || m.v > hi)
            continue;
        g.line(x(m.v), T, x(m.v), T + PH, m.color, 1.5, "6,4");
        g.text(x(m.v) + 4, T + 16 + 16 * row++, std::string(m.name) + " " + num(std::round(m.v * 10) / 10), "start",
               12, (std::string(" fill=\"") + m.color + "\"").c_str());
    }
    char note[160];
    std::snprintf(note, sizeof note, "%llu iteration(s) beyond the right edge (p99.99 %.1f ns, max %.1f ns)",
                  beyond, r.one_way.p9999, r.one_way.max);
    g.text(L + PW, H - 8, note, "end", 11, " fill=\"#555\"");
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
        ylabel = "one-way latency, ns (log scale)";
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
    std::string body = !sorted_rt_cycles.empty() ? histogram(info, results.front(), sorted_rt_cycles)
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
