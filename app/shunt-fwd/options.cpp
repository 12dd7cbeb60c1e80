/* shunt-fwd: command line. */
#include "options.h"

#include <getopt.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "env/env.h"

namespace shunt::fwd {

const char *usage()
{
    return "Usage: shunt-fwd -p PORT_A,PORT_B [OPTION]...\n"
           "Forward Ethernet frames between two ethdev ports (vq devices, see shunt-info -D)\n"
           "on RAW_PACKET queue pairs, from pinned polling lcores: what arrives on A\n"
           "leaves on B and the other way round. With impairment options it is a netem\n"
           "box in miniature between two links.\n"
           "\n"
           "  -p, --ports=A,B      the two devices, e.g. net_af_packet0,net_af_packet1\n"
           "  -m, --mode=MODE      io (frames as they are; default) or macswap (swap the\n"
           "                       Ethernet destination and source addresses)\n"
           "  -b, --burst=N        frames per receive poll and send batch (1..512, 32)\n"
           "  -c, --cores=LIST     CPUs of the forwarding lcores, e.g. 1 or 2-3; each owns\n"
           "                       one queue pair of both ports (default: one picked core)\n"
           "  -r, --ring=N         receive buffers and send queue entries per queue pair\n"
           "                       (64..16384, 1024)\n"
           "  -t, --time=S         run S seconds, then stop (default: until SIGINT/SIGTERM)\n"
           "  -s, --stats=MS       live counters on stderr every MS ms (0: none; 1000)\n"
           "  -j, --json           a JSON summary on stdout at the end\n"
           "  -e, --eal=ARGS       extra DPDK EAL arguments (space separated; repeatable),\n"
           "                       e.g. --eal='--vdev=net_af_packet0,iface=veth0'; also\n"
           "                       SHUNT_EAL_ARGS\n"
           "\n"
           "Impairments (each frame, independently; from a seeded generator):\n"
           "      --drop=P         drop with probability P (0..1)\n"
           "      --dup=P          send twice with probability P\n"
           "      --reorder=P      hold back with probability P and send after the next\n"
           "                       frame of the same direction (or when the line is idle)\n"
           "      --corrupt=P      flip one byte after the Ethernet header with probability P\n"
           "      --seed=N         seed of the generator (1)\n"
           "\n"
           "  -h, --help           print this help and exit\n"
           "\n"
           "Live counters (stderr, every --stats ms): frames per second forwarded in each\n"
           "direction, and the drops: impairment, no send queue room, the ports' own\n"
           "(imissed, rx_nombuf). The JSON summary has the same totals.\n"
           "Exit status: 0 success; 1 a port or the environment cannot be set up, or a\n"
           "send failed (the forwarder stops and says why); 2 bad usage.\n";
}

namespace {

bool parse_prob(const char *s, double &out)
{
    char *end = nullptr;
    errno = 0;
    double v = std::strtod(s, &end);
    if (errno || end == s || *end || v < 0 || v > 1)
        return false;
    out = v;
    return true;
}

bool parse_uint(const char *s, unsigned long lo, unsigned long hi, unsigned long &out)
{
    char *end = nullptr;
    errno = 0;
    unsigned long v = std::strtoul(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v < lo || v > hi)
        return false;
    out = v;
    return true;
}

int bad(const char *fmt, const char *arg)
{
    std::fprintf(stderr, "shunt-fwd: ");
    std::fprintf(stderr, fmt, arg);
    std::fprintf(stderr, "\nTry 'shunt-fwd --help'.\n");
    return 2;
}

} // namespace

int parse_command_line(int argc, char **argv, options &o)
{
    enum { o_drop = 256, o_dup, o_reorder, o_corrupt, o_seed };
    static const option longopts[] = {
        {"ports", required_argument, nullptr, 'p'}, {"mode", required_argument, nullptr, 'm'},
        {"burst", required_argument, nullptr, 'b'}, {"cores", required_argument, nullptr, 'c'},
        {"ring", required_argument, nullptr, 'r'},  {"time", required_argument, nullptr, 't'},
        {"stats", required_argument, nullptr, 's'}, {"json", no_argument, nullptr, 'j'},
        {"eal", required_argument, nullptr, 'e'},   {"help", no_argument, nullptr, 'h'},
        {"drop", required_argument, nullptr, o_drop}, {"dup", required_argument, nullptr, o_dup},
        {"reorder", required_argument, nullptr, o_reorder}, {"corrupt", required_argument, nullptr, o_corrupt},
        {"seed", required_argument, nullptr, o_seed}, {nullptr, 0, nullptr, 0},
    };
    optind = 1;
    opterr = 0;
    int c;
    unsigned long v;
    while ((c = getopt_long(argc, argv, ":p:m:b:c:r:t:s:je:h", longopts, nullptr)) != -1) {
        switch (c) {
        case 'p': {
            std::string s = optarg;
            auto comma = s.find(',');
            if (comma == std::string::npos || comma == 0 || comma + 1 == s.size() ||
                s.find(',', comma + 1) != std::string::npos)
                return bad("--ports takes two devices separated by a comma, not '%s'", optarg);
            o.port[0] = s.substr(0, comma);
            o.port[1] = s.substr(comma + 1);
            if (o.port[0] == o.port[1])
                return bad("--ports: the two devices must differ ('%s')", optarg);
            break;
        }
        case 'm':
            if (std::strcmp(optarg, "io") == 0)
                o.how = mode::io;
            else if (std::strcmp(optarg, "macswap") == 0)
                o.how = mode::macswap;
            else
                return bad("unknown --mode '%s' (io or macswap)", optarg);
            break;
        case 'b':
            if (!parse_uint(optarg, 1, 512, v))
                return bad("--burst must be 1..512, not '%s'", optarg);
            o.burst = static_cast<unsigned>(v);
            break;
        case 'c':
            if (env::parse_cpu_list(optarg, o.cores) != 0)
                return bad("--cores: '%s' is not a CPU list this process may use", optarg);
            break;
        case 'r':
            if (!parse_uint(optarg, 64, 16384, v))
                return bad("--ring must be 64..16384, not '%s'", optarg);
            o.ring = static_cast<unsigned>(v);
            break;
        case 't': {
            char *end = nullptr;
            double d = std::strtod(optarg, &end);
            if (end == optarg || *end || d <= 0 || d > 1e7)
                return bad("--time must be a positive number of seconds, not '%s'", optarg);
            o.seconds = d;
            break;
        }
        case 's':
            if (!parse_uint(optarg, 0, 3600000, v))
                return bad("--stats must be 0..3600000 ms, not '%s'", optarg);
            o.stats_ms = static_cast<unsigned>(v);
            break;
        case 'j': o.json = true; break;
        case 'e': {
            std::istringstream in(optarg);
            std::string w;
            while (in >> w)
                o.eal.push_back(w);
            break;
        }
        case 'h': std::fputs(usage(), stdout); return 0;
        case o_drop:
            if (!parse_prob(optarg, o.imp.drop))
                return bad("--drop takes a probability 0..1, not '%s'", optarg);
            break;
        case o_dup:
            if (!parse_prob(optarg, o.imp.dup))
                return bad("--dup takes a probability 0..1, not '%s'", optarg);
            break;
        case o_reorder:
            if (!parse_prob(optarg, o.imp.reorder))
                return bad("--reorder takes a probability 0..1, not '%s'", optarg);
            break;
        case o_corrupt:
            if (!parse_prob(optarg, o.imp.corrupt))
                return bad("--corrupt takes a probability 0..1, not '%s'", optarg);
            break;
        case o_seed: {
            char *end = nullptr;
            errno = 0;
            unsigned long long s = std::strtoull(optarg, &end, 0);
            if (errno || end == optarg || *end)
                return bad("--seed takes an integer, not '%s'", optarg);
            o.imp.seed = s ? s : 1;
            break;
        }
        case ':': return bad("option '%s' needs an argument", argv[optind - 1]);
        default: return bad("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad("unexpected argument '%s'", argv[optind]);
    if (o.port[0].empty())
        return bad("%s", "--ports is required (two devices, see shunt-info -D)");
    return -1;
}

} // namespace shunt::fwd
