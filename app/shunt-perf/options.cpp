#include "options.h"

#include "env/env.h"
#include "env/errors.h"
#include "env/tsc.h"
#include "shunt_config.h"
#include "transport.h"

#include <getopt.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace shunt::perf {
namespace {

const char usage_text[] =
    "Usage: shunt-perf TEST [OPTION]...              both sides spawned locally\n"
    "       shunt-perf TEST -s [OPTION]... [BIND]     server side\n"
    "       shunt-perf TEST [OPTION]... SERVER        client side\n"
    "Measure latency, bandwidth and message rate between two processes.\n"
    "\n"
    "Tests:\n"
    "  pingpong   one message each way per iteration; one-way latency is half\n"
    "             the round trip, timed with the TSC for every iteration\n"
    "  bw         streaming: the initiator keeps a window of operations\n"
    "             outstanding; bandwidth in MB/s (10^6 B/s)\n"
    "  rate       as bw with inject (no completion per message): message rate\n"
    "             in Mmsg/s, the way a trading gateway sends\n"
    "\n"
    "Transport:\n"
    "  -p, --provider NAME   endpoint-level provider (default: the first in this\n"
    "                        build, see the list below)\n"
    "  -e, --ep-type TYPE    endpoint type: rdm (default), msg, dgram\n"
    "      --op OP           operation: msg (default), tagged, write, atomic\n"
    "  -d, --domain NAME     endpoint level: the provider's domain, i.e. the vq\n"
    "                        device (shm0, net_af_packet0, ...; default: the\n"
    "                        provider's first); a server keeps its own\n"
    "      --vq              measure at the raw queue level (lib/vq) instead of\n"
    "                        the endpoint level\n"
    "      --driver NAME     vq driver for --vq (default: the first in this build)\n"
    "      --qp-type TYPE    QP type for --vq: rc (default), uc, ud\n"
    "      --shared-buffers  endpoint level: take both sides' buffers from the\n"
    "                        provider's shareable memory (the shunt_mem\n"
    "                        extension), which peers reach without a system\n"
    "                        call; default: plain aligned_alloc memory. The\n"
    "                        queue level always uses the driver's alloc_buf\n"
    "                        memory\n"
    "      --threading LEVEL endpoint level: the threading level asked of the\n"
    "                        domain (fi_domain(3)): domain (default: the\n"
    "                        caller serializes its calls, no locks),\n"
    "                        completion, or safe (what a libfabric application\n"
    "                        that asks for none gets: the provider locks)\n"
    "\n"
    "Sizes and duration:\n"
    "  -S, --size SIZES      message size in bytes: one (8), a comma list\n"
    "                        (8,64,4K) or 'all' (powers of two 1 B..4 MiB);\n"
    "                        K and M suffixes are binary; 1..4M (default 8)\n"
    "  -I, --iterations N    timed iterations per size (default 100000, fewer\n"
    "                        above 8 KiB; at most 100000000)\n"
    "      --duration SEC    run each size for about SEC seconds instead (the\n"
    "                        count comes from a timed probe of max(warm-up,\n"
    "                        1000) iterations)\n"
    "  -w, --warmup N        untimed iterations before each size (default 1000)\n"
    "  -W, --window N        bw/rate: operations outstanding (default 64, 1..4096)\n"
    "  -c, --cores A,B       CPUs of the initiator and the responder (default:\n"
    "                        two cores chosen by the topology helper, sharing\n"
    "                        an L3 if possible); server and client use one\n"
    "                        each: a single CPU given is used as is; of two\n"
    "                        (given or chosen) the client takes the first and\n"
    "                        the server the second\n"
    "      --timeout SEC     give up after SEC seconds without progress\n"
    "                        (default 30)\n"
    "      --verify          fill every message with a pattern derived from its\n"
    "                        number and check every byte on arrival (and the\n"
    "                        echo); a correctness run, its figures include the\n"
    "                        checks\n"
    "      --tsc-one-way     pingpong: also measure the true one-way latency\n"
    "                        (responder to initiator) from TSC stamps: the\n"
    "                        responder writes its TSC into the first 8 bytes of\n"
    "                        each answer, the initiator records arrival - stamp.\n"
    "                        Valid only with both ends on one host and an\n"
    "                        invariant TSC (constant_tsc, nonstop_tsc): refused\n"
    "                        otherwise. Sizes of at least 8 bytes, not with\n"
    "                        --verify\n"
    "\n"
    "Server / client (out-of-band exchange over TCP; the client's test\n"
    "options apply to both sides, the client prints the results):\n"
    "  -s, --server          wait for one client, run its test, exit\n"
    "  -P, --port PORT       TCP port (default 47592)\n"
    "  SERVER                client mode: the server's address (name or IP)\n"
    "  BIND                  server mode: address to listen on (default: all)\n"
    "\n"
    "Output:\n"
    "  -j, --json            one JSON object per size, one per line\n"
    "      --csv             CSV with a header line\n"
    "      --plot FILE.svg   draw an SVG picture: for one pingpong size the\n"
    "                        one-way latency against the percentile (both on\n"
    "                        log scales: body and tail readable); for several\n"
    "                        sizes (or bw / rate) the results against size\n"
    "  -q, --quiet           no progress or running lines on stderr\n"
    "  -V, --version         print the version and exit\n"
    "  -h, --help            print this help and exit\n"
    "\n"
    "Latency percentiles p50 p90 p99 p99.9 p99.99 max are exact (nearest rank\n"
    "over every timed iteration), shown in ns, \u00b5s or ms by magnitude (JSON\n"
    "and CSV: always ns). On stderr: a progress line for sweeps, and a running\n"
    "line every second of a long size (its last second's percentiles, from\n"
    "the live histogram). Ctrl-C stops the run and prints what was measured so\n"
    "far (exit status 130). A client says when it is waiting for its server.\n"
    "With SHUNT_TELEMETRY on (default) the initiator publishes the block\n"
    "\"perf\" (size, progress, the one-way histogram) on its telemetry socket:\n"
    "shunt-info --live PID shows it refreshing.\n"
    "See doc/guides/perf.md for the method and the JSON/CSV shape.\n"
    "\n"
    "Exit status: 0 success, 1 run failure, 2 bad usage, 130 interrupted.\n";

void print_transports(FILE *f)
{
    std::fputs("\nTransports in this build:\n", f);
    for (const transport_ops *t : transports())
        std::fprintf(f, "  %-4s %-10s %s\n", t->vq ? "--vq" : "-p", t->name, t->help);
}

int usage_error(const char *fmt, const std::string &arg)
{
    std::fputs("shunt-perf: ", stderr);
    std::fprintf(stderr, fmt, arg.c_str());
    std::fputs("\nTry 'shunt-perf --help'.\n", stderr);
    return 2;
}

/** Strict unsigned parse with optional binary K/M/G suffix. */
bool parse_u64(const char *s, std::uint64_t &out, bool suffix)
{
    if (!s || !*s || *s == '-' || *s == '+' || std::isspace(static_cast<unsigned char>(*s)))
        return false;
    errno = 0;
    char *end = nullptr;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    unsigned shift = 0;
    if (suffix && *end) {
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return false;
        }
        end++;
    }
    if (*end)
        return false;
    if (shift && v > (~0ull >> shift))
        return false;
    out = v << shift;
    return true;
}

bool parse_double(const char *s, double &out)
{
    if (!s || !*s)
        return false;
    errno = 0;
    char *end = nullptr;
    out = std::strtod(s, &end);
    return !errno && end != s && !*end && std::isfinite(out);
}

std::vector<std::string> split(const std::string &s, char sep)
{
    std::vector<std::string> v;
    std::string cur;
    for (char ch : s) {
        if (ch == sep) {
            v.push_back(cur);
            cur.clear();
        } else {
            cur += ch;
        }
    }
    v.push_back(cur);
    return v;
}

int parse_sizes(const std::string &arg, options &o)
{
    o.sizes.clear();
    o.sweep = false;
    if (arg == "all") {
        for (std::size_t s = 1; s <= max_size; s <<= 1)
            o.sizes.push_back(s);
        o.sweep = true;
        return -1;
    }
    for (const std::string &item : split(arg, ',')) {
        std::uint64_t v;
        if (!parse_u64(item.c_str(), v, true))
            return usage_error("bad size '%s' (a number of bytes, K/M suffixes allowed)", item);
        if (v == 0)
            return usage_error("size must be at least 1 byte: '%s'", item);
        if (v > max_size)
            return usage_error("size '%s' is over the maximum of 4M (4194304 bytes)", item);
        o.sizes.push_back(v);
    }
    return -1;
}

int parse_cores(const std::string &arg, options &o)
{
    // Ordered (initiator, responder) and without duplicates, so not
    // env::parse_cpu_list, which sorts and merges.
    o.cores.clear();
    const std::vector<unsigned> allowed = env::affinity_cpus();
    for (const std::string &item : split(arg, ',')) {
        std::uint64_t v;
        if (!parse_u64(item.c_str(), v, false) || v >= CPU_SETSIZE)
            return usage_error("bad core '%s' (a CPU number)", item);
        if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
            return usage_error("core %s does not exist or is not allowed for this process", item);
        o.cores.push_back(static_cast<unsigned>(v));
    }
    if (o.cores.size() > 2)
        return usage_error("--cores takes one or two CPUs, not '%s'", arg);
    if (o.cores.size() == 2 && o.cores[0] == o.cores[1])
        return usage_error("--cores %s: the two sides busy-poll and would starve each other on one core", arg);
    return -1;
}

int pick_one_of(const char *what, const std::string &v, std::initializer_list<const char *> allowed)
{
    for (const char *a : allowed)
        if (v == a)
            return -1;
    std::string list;
    for (const char *a : allowed)
        list += std::string(list.empty() ? "" : ", ") + a;
    std::fprintf(stderr, "shunt-perf: bad %s '%s' (one of: %s)\nTry 'shunt-perf --help'.\n", what, v.c_str(),
                 list.c_str());
    return 2;
}

} // namespace

const char *name(test_kind t)
{
    switch (t) {
    case test_kind::pingpong: return "pingpong";
    case test_kind::bw: return "bw";
    case test_kind::rate: return "rate";
    }
    return "?";
}

const char *level_name(const test_config &c) { return c.vq ? "vq" : "endpoint"; }

std::uint64_t default_iterations(test_kind, std::size_t size)
{
    const std::uint64_t base = 100000;
    if (size <= 8192)
        return base;
    std::uint64_t n = base * 8192 / size;
    return n < 100 ? 100 : n;
}

std::string to_wire(const test_config &c)
{
    std::ostringstream s;
    s << "test=" << name(c.test) << " provider=" << c.provider << " vq=" << (c.vq ? 1 : 0)
      << " ep_type=" << c.ep_type << " qp_type=" << c.qp_type << " op=" << c.op << " window=" << c.window
      << " verify=" << (c.verify ? 1 : 0) << " shared=" << (c.shared_buffers ? 1 : 0)
      << " threading=" << c.threading << " domain=" << c.domain
      << " tsc_one_way=" << (c.tsc_one_way ? c.clock_id : std::string("0"));
    return s.str();
}

int from_wire(const std::string &line, test_config &c)
{
    test_config r;
    int seen = 0;
    for (const std::string &kv : split(line, ' ')) {
        auto eq = kv.find('=');
        if (eq == std::string::npos)
            return -FI_EINVAL;
        std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
        std::uint64_t n;
        if (k == "test") {
            if (v == "pingpong") r.test = test_kind::pingpong;
            else if (v == "bw") r.test = test_kind::bw;
            else if (v == "rate") r.test = test_kind::rate;
            else return -FI_EINVAL;
        } else if (k == "provider") {
            r.provider = v;
        } else if (k == "vq") {
            r.vq = v == "1";
        } else if (k == "ep_type") {
            r.ep_type = v;
        } else if (k == "qp_type") {
            r.qp_type = v;
        } else if (k == "op") {
            r.op = v;
        } else if (k == "window") {
            if (!parse_u64(v.c_str(), n, false) || n == 0 || n > max_window)
                return -FI_EINVAL;
            r.window = static_cast<unsigned>(n);
        } else if (k == "verify") {
            if (v != "0" && v != "1")
                return -FI_EINVAL;
            r.verify = v == "1";
        } else if (k == "shared") {
            if (v != "0" && v != "1")
                return -FI_EINVAL;
            r.shared_buffers = v == "1";
        } else if (k == "threading") {
            if (v != "domain" && v != "completion" && v != "safe")
                return -FI_EINVAL;
            r.threading = v;
        } else if (k == "domain") {
            r.domain = v;
        } else if (k == "tsc_one_way") {
            if (v.empty())
                return -FI_EINVAL;
            r.tsc_one_way = v != "0";
            r.clock_id = r.tsc_one_way ? v : "";
        } else {
            return -FI_EINVAL;
        }
        seen++;
    }
    if (seen != 12)
        return -FI_EINVAL;
    c = r;
    return 0;
}

int parse_command_line(int argc, char **argv, options &o)
{
    enum { OPT_OP = 256, OPT_VQ, OPT_DRIVER, OPT_QP, OPT_DURATION, OPT_CSV, OPT_PLOT, OPT_TIMEOUT, OPT_ROLE,
           OPT_OOB_FD, OPT_VERIFY, OPT_SHARED, OPT_TSC_ONE_WAY, OPT_THREADING };
    static const option longopts[] = {
        {"provider", required_argument, nullptr, 'p'}, {"ep-type", required_argument, nullptr, 'e'},
        {"op", required_argument, nullptr, OPT_OP},      {"vq", no_argument, nullptr, OPT_VQ},
        {"domain", required_argument, nullptr, 'd'},
        {"driver", required_argument, nullptr, OPT_DRIVER}, {"qp-type", required_argument, nullptr, OPT_QP},
        {"size", required_argument, nullptr, 'S'},     {"iterations", required_argument, nullptr, 'I'},
        {"duration", required_argument, nullptr, OPT_DURATION}, {"warmup", required_argument, nullptr, 'w'},
        {"window", required_argument, nullptr, 'W'},   {"cores", required_argument, nullptr, 'c'},
        {"timeout", required_argument, nullptr, OPT_TIMEOUT}, {"server", no_argument, nullptr, 's'},
        {"port", required_argument, nullptr, 'P'},     {"json", no_argument, nullptr, 'j'},
        {"csv", no_argument, nullptr, OPT_CSV},        {"plot", required_argument, nullptr, OPT_PLOT},
        {"verify", no_argument, nullptr, OPT_VERIFY}, {"help", no_argument, nullptr, 'h'},
        {"quiet", no_argument, nullptr, 'q'},
        {"shared-buffers", no_argument, nullptr, OPT_SHARED},
        {"threading", required_argument, nullptr, OPT_THREADING},
        {"tsc-one-way", no_argument, nullptr, OPT_TSC_ONE_WAY},
        {"version", no_argument, nullptr, 'V'},
        // Hidden: the locally spawned responder.
        {"role", required_argument, nullptr, OPT_ROLE}, {"oob-fd", required_argument, nullptr, OPT_OOB_FD},
        {nullptr, 0, nullptr, 0},
    };
    std::string provider, driver, cores_arg;
    bool have_iterations = false, json = false, csv = false, server = false, want_help = false;
    std::uint64_t n;
    int ch, rc;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":p:e:d:S:I:w:W:c:sP:jhVq", longopts, nullptr)) != -1) {
        switch (ch) {
        case 'p': provider = optarg; break;
        case 'd': o.cfg.domain = optarg; break;
        case 'e':
            if ((rc = pick_one_of("endpoint type", optarg, {"rdm", "msg", "dgram"})) >= 0)
                return rc;
            o.cfg.ep_type = optarg;
            break;
        case OPT_OP:
            if ((rc = pick_one_of("operation", optarg, {"msg", "tagged", "write", "atomic"})) >= 0)
                return rc;
            o.cfg.op = optarg;
            break;
        case OPT_VQ: o.cfg.vq = true; break;
        case OPT_DRIVER: driver = optarg; break;
        case OPT_QP:
            if ((rc = pick_one_of("QP type", optarg, {"rc", "uc", "ud"})) >= 0)
                return rc;
            o.cfg.qp_type = optarg;
            break;
        case 'S':
            if ((rc = parse_sizes(optarg, o)) >= 0)
                return rc;
            break;
        case 'I':
            if (!parse_u64(optarg, n, false) || n == 0 || n > max_iterations)
                return usage_error("bad iteration count '%s' (1..100000000)", optarg);
            o.iterations = n;
            have_iterations = true;
            break;
        case OPT_DURATION:
            if (!parse_double(optarg, o.duration) || o.duration <= 0 || o.duration > 3600)
                return usage_error("bad duration '%s' (seconds, more than 0, at most 3600)", optarg);
            break;
        case 'w':
            if (!parse_u64(optarg, n, false) || n > max_iterations)
                return usage_error("bad warm-up count '%s' (0..100000000)", optarg);
            o.warmup = n;
            break;
        case 'W':
            if (!parse_u64(optarg, n, false) || n == 0 || n > max_window)
                return usage_error("bad window '%s' (1..4096)", optarg);
            o.cfg.window = static_cast<unsigned>(n);
            break;
        case 'c': cores_arg = optarg; break;
        case OPT_TIMEOUT:
            if (!parse_double(optarg, o.timeout) || o.timeout <= 0 || o.timeout > 86400)
                return usage_error("bad timeout '%s' (seconds, more than 0)", optarg);
            break;
        case 's': server = true; break;
        case 'P':
            if (!parse_u64(optarg, n, false) || n == 0 || n > 65535)
                return usage_error("bad port '%s' (1..65535)", optarg);
            o.port = static_cast<std::uint16_t>(n);
            break;
        case 'j': json = true; break;
        case OPT_CSV: csv = true; break;
        case OPT_PLOT:
            if (!*optarg)
                return usage_error("--plot needs a file name%s", "");
            o.plot = optarg;
            break;
        case 'h': want_help = true; break;
        case 'q': o.quiet = true; break;
        case 'V': std::printf("shunt-perf (Shunt) %s\n", SHUNT_VERSION); return 0;
        case OPT_VERIFY: o.verify = true; break;
        case OPT_TSC_ONE_WAY: o.cfg.tsc_one_way = true; break;
        case OPT_SHARED: o.cfg.shared_buffers = true; break;
        case OPT_THREADING:
            if ((rc = pick_one_of("threading level", optarg, {"domain", "completion", "safe"})) >= 0)
                return rc;
            o.cfg.threading = optarg;
            break;
        case OPT_ROLE:
            if (std::strcmp(optarg, "responder") != 0)
                return usage_error("bad role '%s'", optarg);
            o.who = role::responder;
            break;
        case OPT_OOB_FD:
            if (!parse_u64(optarg, n, false) || n > 1 << 20)
                return usage_error("bad descriptor '%s'", optarg);
            o.oob_fd = static_cast<int>(n);
            break;
        case ':': return usage_error("option '%s' needs an argument", argv[optind - 1]);
        default: return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (want_help) {
        std::fputs(usage_text, stdout);
        print_transports(stdout);
        return 0;
    }
    // An unwritable --plot fails now, not after the whole run.
    if (!o.plot.empty()) {
        struct stat st {};
        bool existed = ::stat(o.plot.c_str(), &st) == 0;
        FILE *f = std::fopen(o.plot.c_str(), "a");
        if (!f)
            return usage_error("cannot write the plot file '%s'", o.plot);
        std::fclose(f);
        if (!existed)
            ::unlink(o.plot.c_str());
    }
    if (o.who == role::responder) {
        if (o.oob_fd < 0 || optind != argc)
            return usage_error("--role responder needs --oob-fd and nothing else%s", "");
        return -1;
    }

    if (optind >= argc)
        return usage_error("no test given (pingpong, bw or rate)%s", "");
    std::string test = argv[optind++];
    if (test == "pingpong") o.cfg.test = test_kind::pingpong;
    else if (test == "bw") o.cfg.test = test_kind::bw;
    else if (test == "rate") o.cfg.test = test_kind::rate;
    else return usage_error("unknown test '%s' (pingpong, bw or rate)", test);
    if (optind < argc)
        o.address = argv[optind++];
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    o.who = server ? role::server : (o.address.empty() ? role::launcher : role::client);

    if (json && csv)
        return usage_error("--json and --csv exclude each other%s", "");
    o.format = json ? out_format::json : csv ? out_format::csv : out_format::table;
    if (have_iterations && o.duration > 0)
        return usage_error("-I/--iterations and --duration exclude each other%s", "");
    if (!cores_arg.empty() && (rc = parse_cores(cores_arg, o)) >= 0)
        return rc;
    if (o.who == role::launcher && o.cores.size() == 1)
        return usage_error("--cores needs two CPUs when both sides run here, got '%s'", cores_arg);

    // The transport: by name, or the first of the level in this build.
    if (o.cfg.vq && !provider.empty())
        return usage_error("--vq selects a driver with --driver, not a provider ('-p %s')", provider);
    if (!o.cfg.vq && !driver.empty())
        return usage_error("--driver '%s' needs --vq", driver);
    if (o.cfg.vq && !o.cfg.domain.empty())
        return usage_error("--domain '%s' is for the endpoint level; --vq takes --driver", o.cfg.domain);
    if (o.cfg.vq && o.cfg.threading != "domain")
        return usage_error("--threading %s is an endpoint-level option; the vq level has no domain to ask",
                           o.cfg.threading);
    if (o.cfg.domain.find_first_of(" =") != std::string::npos)
        return usage_error("bad domain name '%s'", o.cfg.domain);
    o.cfg.provider = o.cfg.vq ? driver : provider;
    o.cfg.verify = o.verify;
    if (o.cfg.provider.empty()) {
        for (const transport_ops *t : transports())
            if (t->vq == o.cfg.vq) {
                o.cfg.provider = t->name;
                break;
            }
    }
    const char *what = o.cfg.vq ? "driver" : "provider";
    const transport_ops *t = find_transport(o.cfg);
    if (!t) {
        if (is_pending_name(o.cfg.provider, o.cfg.vq))
            std::fprintf(stderr, "shunt-perf: %s '%s' is not available in this build of shunt-perf yet\n", what,
                         o.cfg.provider.c_str());
        else
            std::fprintf(stderr, "shunt-perf: unknown %s '%s'\n", what, o.cfg.provider.c_str());
        print_transports(stderr);
        return 2;
    }
    std::string why;
    if (t->validate(o.cfg, why) != 0)
        return usage_error("%s", why);
    if (o.cfg.tsc_one_way) {
        if (o.cfg.test != test_kind::pingpong)
            return usage_error("--tsc-one-way measures pingpong only, not %s", name(o.cfg.test));
        if (o.cfg.op != "msg" && o.cfg.op != "tagged")
            return usage_error("--tsc-one-way needs --op msg or tagged (the stamp travels in a message), not %s",
                               o.cfg.op);
        if (o.verify)
            return usage_error("--tsc-one-way and --verify exclude each other (the stamp overwrites the "
                               "pattern)%s", "");
        for (std::size_t s : o.sizes)
            if (s < 8 && !o.sweep)
                return usage_error("--tsc-one-way needs sizes of at least 8 bytes (the stamp), got %s",
                                   std::to_string(s));
        if (o.sweep)
            o.sizes.erase(std::remove_if(o.sizes.begin(), o.sizes.end(), [](std::size_t s) { return s < 8; }),
                          o.sizes.end());
        o.cfg.clock_id = env::tsc::clock_id(why);
        if (o.cfg.clock_id.empty())
            return usage_error("--tsc-one-way: %s", why);
    }
    // Sizes the configuration can carry: a list must fit, a sweep is cut.
    const std::size_t hi = t->max_msg && t->max_msg(o.cfg) ? t->max_msg(o.cfg) : max_size;
    const std::size_t lo = t->min_msg && t->min_msg(o.cfg) ? t->min_msg(o.cfg) : 1;
    if (o.sweep) {
        std::vector<std::size_t> keep;
        for (std::size_t s : o.sizes)
            if (s >= lo && s <= hi)
                keep.push_back(s);
        o.sizes = keep;
        if (o.sizes.empty())
            return usage_error("no size of the sweep fits this transport%s", "");
    } else {
        for (std::size_t s : o.sizes) {
            if (s > hi)
                return usage_error(("size %s is over the largest message of this configuration (" +
                                    std::to_string(hi) + " bytes)").c_str(),
                                   std::to_string(s));
            if (s < lo)
                return usage_error(("size %s is under the smallest message of this configuration (" +
                                    std::to_string(lo) + " bytes)").c_str(),
                                   std::to_string(s));
        }
    }
    return -1;
}

} // namespace shunt::perf
