// shunt-perf: latency, bandwidth and message rate between two processes, at
// the endpoint level (lib/fabric providers) or the raw queue level (lib/vq
// drivers), with the cache-line floor as the reference.
//
// Roles: the launcher (default) spawns the responder as a second process
// (fork + exec of itself with the hidden --role responder), pins both, and is
// the initiator; -s makes a server (a responder over TCP) and a positional
// address a client (an initiator over TCP). The initiator sends the test
// configuration and then one RUN per size over the out-of-band channel;
// measurements and output happen on the initiator only.
#include "env/errors.h"
#include "env/stats.h"
#include "env/topology.h"
#include "env/tsc.h"
#include "live.h"
#include "oob.h"
#include "options.h"
#include "stats.h"
#include "transport.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <sstream>
#include <thread>

using namespace shunt;
using namespace shunt::perf;

namespace {

int pin_self(unsigned cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        std::fprintf(stderr, "shunt-perf: cannot pin to CPU %u: %s\n", cpu, std::strerror(errno));
        return 1;
    }
    return 0;
}

/** The two CPUs to use: --cores, or the topology helper's choice. */
int choose_cores(const options &o, std::vector<unsigned> &cores)
{
    if (!o.cores.empty()) {
        cores = o.cores;
        return 0;
    }
    int rc = env::pick_cores(2, cores);
    if (rc != 0 || cores.size() < 2) {
        std::fprintf(stderr, "shunt-perf: cannot choose two polling cores (%s); give --cores A,B\n",
                     shunt::strerror(rc ? rc : -FI_ENOSPC));
        return 1;
    }
    return 0;
}

// ---- responder side (locally spawned child, or server) ----

int serve(oob_channel &ch, double timeout, unsigned cpu, const std::string &own_domain)
{
    std::string line;
    int rc = ch.expect("CONFIG", line, timeout);
    if (rc != 0) {
        std::fprintf(stderr, "shunt-perf: responder: no configuration from the initiator: %s\n",
                     rc == -FI_EREMOTEIO ? line.c_str() : shunt::strerror(rc));
        return 1;
    }
    test_config cfg;
    if (from_wire(line, cfg) != 0) {
        (void)ch.send("ERROR responder cannot parse the configuration '" + line + "'");
        return 1;
    }
    if (!own_domain.empty())
        cfg.domain = own_domain; // a server's own device, not the client's name for its own
    const transport_ops *t = find_transport(cfg);
    std::string why;
    if (!t) {
        why = std::string("responder has no ") + (cfg.vq ? "driver '" : "provider '") + cfg.provider + "'";
    } else if (t->validate(cfg, why) != 0) {
        why = "responder: " + why;
    } else if (cfg.tsc_one_way) {
        // One-way latency from stamps needs one clock: this host's invariant TSC, the initiator's too.
        std::string mine = env::tsc::clock_id(why);
        if (mine.empty())
            why = "responder: --tsc-one-way: " + why;
        else if (mine != cfg.clock_id)
            why = "--tsc-one-way: the responder runs on another host (or boot) than the initiator: their TSCs "
                  "are not one clock";
        else
            why.clear();
    }
    if (!why.empty()) {
        (void)ch.send("ERROR " + why);
        std::fprintf(stderr, "shunt-perf: %s\n", why.c_str());
        return 1;
    }
    if (ch.send("OK " + std::to_string(cpu)) != 0)
        return 1;
    std::unique_ptr<transport_session> sess;
    rc = t->open(cfg, false, ch, timeout, sess, why);
    if (rc != 0) {
        std::fprintf(stderr, "shunt-perf: responder: %s\n", why.c_str());
        return 1;
    }
    const double idle = std::max(timeout, 600.0); // the initiator may sort many samples between sizes
    const std::uint64_t stall = env::tsc::from_ns(static_cast<std::uint64_t>(timeout * 1e9));
    for (;;) {
        rc = ch.recv(line, idle);
        if (rc != 0) {
            std::fprintf(stderr, "shunt-perf: responder: initiator gone: %s\n", shunt::strerror(rc));
            return 1;
        }
        if (line == "QUIT")
            return 0;
        if (line == "ABORT") {
            std::fprintf(stderr, "shunt-perf: responder: the initiator stopped the run (Ctrl-C)\n");
            return 0;
        }
        run_request r;
        unsigned long long size, iters, warm;
        unsigned window, verify;
        if (std::sscanf(line.c_str(), "RUN %llu %llu %llu %u %u", &size, &iters, &warm, &window, &verify) != 5 ||
            size == 0 || size > max_size || iters == 0 || window == 0 || verify > 1) {
            (void)ch.send("ERROR responder: bad request '" + line + "'");
            return 1;
        }
        r.test = cfg.test;
        r.size = size;
        r.iterations = iters;
        r.warmup = warm;
        r.window = window;
        r.verify = verify != 0;
        r.watch_fd = ch.fd();
        r.stall_cycles = stall;
        r.tsc_stamp = cfg.tsc_one_way && cfg.test == test_kind::pingpong;
        if (ch.send("GO") != 0)
            return 1;
        rc = sess->run_responder(r);
        if (rc == -FI_ECONNRESET && ch.recv(line, 0.5) == 0 && line == "ABORT") {
            std::fprintf(stderr, "shunt-perf: responder: the initiator stopped the run (Ctrl-C)\n");
            return 0;
        }
        if (rc != 0) {
            std::fprintf(stderr, "shunt-perf: responder: size %llu failed: %s\n", size,
                         rc == -FI_ECONNRESET ? "the initiator died"
                         : rc == -FI_ETIMEDOUT ? "no progress within the timeout"
                         : rc == -FI_EIO ? "received payload differs from what was sent"
                                         : shunt::strerror(rc));
            (void)ch.send(std::string("ERROR responder failed at size ") + std::to_string(size) + ": " +
                          (rc == -FI_EIO ? "received payload differs from what was sent" : shunt::strerror(rc)));
            return 1;
        }
        if (ch.send("DONE") != 0)
            return 1;
    }
}

// ---- initiator side (launcher or client) ----

struct initiator {
    const options &o;
    oob_channel &ch;
    std::unique_ptr<transport_session> sess;
    std::vector<std::uint64_t> samples;
    std::uint64_t stall = 0;

    int run(run_request r, run_output &out, std::string &why)
    {
        r.watch_fd = ch.fd();
        r.stall_cycles = stall;
        if (r.test == test_kind::pingpong && samples.size() < r.iterations) {
            try {
                samples.assign(r.iterations, 0); // touched here, outside the timed loop
            } catch (const std::bad_alloc &) {
                why = "cannot allocate " + std::to_string(r.iterations) + " samples of 8 bytes; lower -I";
                return -FI_ENOMEM;
            }
        }
        std::ostringstream cmd;
        cmd << "RUN " << r.size << ' ' << r.iterations << ' ' << r.warmup << ' ' << r.window << ' '
            << (r.verify ? 1 : 0);
        std::string line;
        int rc = ch.send(cmd.str());
        if (rc == 0)
            rc = ch.expect("GO", line, o.timeout);
        if (rc != 0) {
            why = rc == -FI_EREMOTEIO ? line : std::string("responder gone: ") + shunt::strerror(rc);
            return rc;
        }
        rc = sess->run_initiator(r, samples.data(), out);
        if (rc == -FI_ECANCELED)
            return rc; // Ctrl-C: out holds what was measured; the responder is told by ABORT
        if (rc != 0) {
            // The responder may have said why.
            if (ch.recv(line, 0.2) == 0 && line.compare(0, 6, "ERROR ") == 0)
                why = line.substr(6);
            else
                why = rc == -FI_ECONNRESET ? "the responder died"
                      : rc == -FI_ETIMEDOUT ? "no progress within the timeout"
                      : rc == -FI_EIO       ? "the echo differs from what was sent"
                                            : shunt::strerror(rc);
            // Where it stopped: a stall late in a size is not one at its start.
            char at[160];
            std::snprintf(at, sizeof at, " (after %llu of %llu timed %s, --timeout %g s)",
                          static_cast<unsigned long long>(out.iterations),
                          static_cast<unsigned long long>(r.iterations),
                          r.test == test_kind::pingpong ? "iterations" : "messages", o.timeout);
            why += at;
            return rc;
        }
        rc = ch.expect("DONE", line, o.timeout);
        if (rc != 0)
            why = rc == -FI_EREMOTEIO ? line : std::string("responder did not finish: ") + shunt::strerror(rc);
        return rc;
    }
};

int initiate(oob_channel &ch, const options &o, std::vector<unsigned> cores)
{
    const test_config &cfg = o.cfg;
    std::string line;
    int rc = ch.send("CONFIG " + to_wire(cfg));
    if (rc == 0)
        rc = ch.expect("OK", line, o.timeout);
    if (rc != 0) {
        std::fprintf(stderr, "shunt-perf: %s\n",
                     rc == -FI_EREMOTEIO ? line.c_str()
                                         : (std::string("no answer from the responder: ") + shunt::strerror(rc)).c_str());
        return 1;
    }
    unsigned peer_cpu;
    if (std::sscanf(line.c_str(), "%u", &peer_cpu) == 1 && cores.size() == 1)
        cores.push_back(peer_cpu);

    initiator in{o, ch, nullptr, {}, env::tsc::from_ns(static_cast<std::uint64_t>(o.timeout * 1e9))};
    std::string why;
    const transport_ops *t = find_transport(cfg);
    rc = t->open(cfg, true, ch, o.timeout, in.sess, why);
    if (rc != 0) {
        std::fprintf(stderr, "shunt-perf: %s\n", why.c_str());
        return 1;
    }

    run_info info{cfg, cores, static_cast<double>(env::tsc::hz()) / 1e9};
    // What the loops report while they run: the "perf" block for telemetry
    // readers, the running line, Ctrl-C.
    perf_stats pst;
    env::stats::registration preg;
    live_state live;
    live.test = cfg.test;
    live.lines = !o.quiet;
    live.tty = isatty(STDERR_FILENO);
    live.check_cycles = env::tsc::from_ns(50000000);
    live.line_cycles = env::tsc::from_ns(1000000000);
    if (env::stats::enabled() && preg.open("perf", perf_schema(), &pst) == 0)
        live.st = &pst;
    // --tsc-one-way: the histogram of stamps, the perf block's when it is published.
    std::unique_ptr<env::stats::histogram> own_tsc_hist;
    env::stats::histogram *tsc_hist = nullptr;
    if (cfg.tsc_one_way) {
        if (live.st) {
            tsc_hist = &pst.tsc_one_way;
        } else {
            own_tsc_hist = std::make_unique<env::stats::histogram>();
            tsc_hist = own_tsc_hist.get();
        }
    }
    install_interrupt();
    if (o.format == out_format::table) {
        if (o.verify)
            std::printf("# --verify: every payload byte checked; the figures include the checks\n");
        print_table_header(stdout, info);
    }
    else if (o.format == out_format::csv)
        print_csv_header(stdout);

    std::vector<size_result> results;
    const bool progress = o.sizes.size() > 1 && !o.quiet;
    const bool tty = isatty(STDERR_FILENO);
    bool stopped = false;
    for (std::size_t i = 0; i < o.sizes.size() && !interrupted; i++) {
        const std::size_t size = o.sizes[i];
        if (progress)
            std::fprintf(stderr, "shunt-perf: %s size %zu (%zu/%zu)%s", name(cfg.test), size, i + 1,
                         o.sizes.size(), tty ? "\033[K\r" : "\n");
        run_request r;
        r.test = cfg.test;
        r.size = size;
        r.window = cfg.test == test_kind::pingpong ? 1 : std::min(cfg.window, in.sess->max_window(size));
        r.warmup = o.warmup;
        r.verify = o.verify;
        r.iterations = o.iterations ? o.iterations : default_iterations(cfg.test, size);
        r.live = &live;
        run_output out;
        if (tsc_hist)
            tsc_hist->reset();
        if (o.duration > 0) {
            // Estimate the count from a timed warm-up of its own.
            run_request probe = r;
            probe.iterations = std::max<std::uint64_t>(o.warmup, 1000);
            probe.warmup = 0;
            if ((rc = in.run(probe, out, why)) != 0)
                break;
            if (tsc_hist)
                tsc_hist->reset();
            const double per_iter = static_cast<double>(out.cycles) / static_cast<double>(out.iterations);
            const double want = o.duration * static_cast<double>(env::tsc::hz()) / std::max(per_iter, 1.0);
            r.iterations = static_cast<std::uint64_t>(std::clamp(want, 1.0, static_cast<double>(max_iterations)));
            r.warmup = 0;
        }
        r.tsc_hist = tsc_hist;
        rc = in.run(r, out, why);
        live.end();
        if (rc == -FI_ECANCELED) {
            stopped = true;
            rc = 0;
            if (out.iterations == 0)
                break;
        } else if (rc != 0) {
            break;
        }
        size_result res;
        res.size = size;
        res.iterations = out.iterations;
        res.warmup = r.warmup;
        res.window = r.window;
        res.verified = r.verify;
        res.interrupted = stopped;
        if (cfg.test == test_kind::pingpong) {
            in.samples.resize(out.iterations);
            summarize_pingpong(in.samples, out.cycles, res);
            if (tsc_hist)
                summarize_tsc_one_way(*tsc_hist, res);
        } else {
            summarize_stream(out.cycles, res);
        }
        results.push_back(res);
        switch (o.format) {
        case out_format::table: print_table_row(stdout, info, res); break;
        case out_format::json: print_json(stdout, info, res); break;
        case out_format::csv: print_csv_row(stdout, info, res); break;
        }
        if (stopped)
            break;
    }
    stopped |= interrupted != 0;
    if (progress && tty)
        std::fputs("\033[K", stderr);
    if (rc == -FI_ECANCELED) { // Ctrl-C in the --duration probe
        stopped = true;
        rc = 0;
    }
    if (rc != 0) {
        std::fprintf(stderr, "shunt-perf: %s size %zu failed: %s\n", name(cfg.test), o.sizes[results.size()],
                     why.c_str());
        return 1;
    }
    if (stopped) {
        // The responder may be inside a size: ABORT tells it why the channel closes.
        if (ch.send("ABORT") != 0)
            std::fprintf(stderr, "shunt-perf: the responder is gone already\n");
        std::fprintf(stderr, "shunt-perf: interrupted (Ctrl-C): %zu size(s) reported, the last one partly\n",
                     results.size());
    } else if (ch.send("QUIT") != 0) {
        std::fprintf(stderr, "shunt-perf: the responder is gone already\n");
    }
    if (!o.plot.empty() && !results.empty()) {
        // The histogram needs the samples of the single pingpong size, which
        // summarize_pingpong left sorted.
        static const std::vector<std::uint64_t> none;
        const bool one = results.size() == 1 && cfg.test == test_kind::pingpong;
        rc = write_plot(o.plot, info, results, one ? in.samples : none);
        if (rc != 0) {
            std::fprintf(stderr, "shunt-perf: cannot write %s: %s\n", o.plot.c_str(), std::strerror(-rc));
            return 1;
        }
        if (o.format == out_format::table)
            std::printf("# plot: %s\n", o.plot.c_str());
    }
    return stopped ? 128 + SIGINT : 0;
}

/** Wait for the spawned responder; kill it if it lingers. @return its status. */
int reap(pid_t pid, double timeout)
{
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(timeout * 1000));
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            return -1;
        if (std::chrono::steady_clock::now() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            std::fprintf(stderr, "shunt-perf: the responder did not exit; killed it\n");
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int launch(const options &o)
{
    std::vector<unsigned> cores;
    if (choose_cores(o, cores) != 0)
        return 1;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        std::fprintf(stderr, "shunt-perf: cannot find my own executable: %s\n", std::strerror(errno));
        return 1;
    }
    self[n] = 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        std::fprintf(stderr, "shunt-perf: socketpair: %s\n", std::strerror(errno));
        return 1;
    }
    std::string fd_arg = "--oob-fd=" + std::to_string(sv[1]);
    std::string timeout_arg = "--timeout=" + std::to_string(o.timeout);
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) {
        std::fprintf(stderr, "shunt-perf: fork: %s\n", std::strerror(errno));
        return 1;
    }
    if (pid == 0) {
        // Child: keep its end across exec, pin (inherited by the exec'd
        // image), become the responder.
        ::close(sv[0]);
        int flags = fcntl(sv[1], F_GETFD);
        fcntl(sv[1], F_SETFD, flags & ~FD_CLOEXEC);
        if (pin_self(cores[1]) != 0)
            _exit(1);
        execl(self, "shunt-perf", "--role=responder", fd_arg.c_str(), timeout_arg.c_str(),
              static_cast<char *>(nullptr));
        std::fprintf(stderr, "shunt-perf: exec %s: %s\n", self, std::strerror(errno));
        _exit(127);
    }
    ::close(sv[1]);
    int rc = pin_self(cores[0]);
    {
        oob_channel ch(sv[0]);
        if (rc == 0)
            rc = initiate(ch, o, cores);
    } // closing the channel tells a still running responder to stop
    int child = reap(pid, 5.0);
    if (rc == 0 && child != 0) {
        std::fprintf(stderr, "shunt-perf: the responder failed (status %d)\n", child);
        rc = 1;
    }
    return rc;
}

} // namespace

int main(int argc, char **argv)
{
    options o;
    int rc = parse_command_line(argc, argv, o);
    if (rc >= 0)
        return rc;
    switch (o.who) {
    case role::responder: {
        // Ctrl-C on the terminal reaches both processes: the initiator
        // decides, and tells this side (ABORT).
        signal(SIGINT, SIG_IGN);
        oob_channel ch(o.oob_fd);
        int cpu = sched_getcpu();
        return serve(ch, o.timeout, cpu < 0 ? 0 : static_cast<unsigned>(cpu), "");
    }
    case role::server: {
        std::vector<unsigned> cores;
        if (o.cores.empty() && choose_cores(o, cores) != 0)
            return 1;
        unsigned cpu = o.cores.empty() ? cores[1] : o.cores.back();
        if (pin_self(cpu) != 0)
            return 1;
        std::string why;
        int fd = tcp_accept_one(o.address, o.port, o.timeout, why);
        if (fd < 0) {
            std::fprintf(stderr, "shunt-perf: server: %s\n", why.c_str());
            return 1;
        }
        oob_channel ch(fd);
        return serve(ch, o.timeout, cpu, o.cfg.domain);
    }
    case role::client: {
        std::vector<unsigned> cores;
        if (o.cores.empty() && choose_cores(o, cores) != 0)
            return 1;
        unsigned cpu = o.cores.empty() ? cores[0] : o.cores.front();
        if (pin_self(cpu) != 0)
            return 1;
        std::string why;
        int fd = tcp_connect(o.address, o.port, 0, why); // one try
        if (fd < 0 && fd != -FI_EADDRNOTAVAIL) {
            std::fprintf(stderr, "shunt-perf: waiting for the server at %s port %u (up to %.0f s; start it with "
                                 "'shunt-perf %s -s')\n",
                         o.address.c_str(), static_cast<unsigned>(o.port), o.timeout, name(o.cfg.test));
            fd = tcp_connect(o.address, o.port, o.timeout, why);
            if (fd >= 0)
                std::fprintf(stderr, "shunt-perf: connected to the server\n");
        }
        if (fd < 0) {
            std::fprintf(stderr, "shunt-perf: client: %s\n", why.c_str());
            return 1;
        }
        oob_channel ch(fd);
        return initiate(ch, o, {cpu});
    }
    case role::launcher: return launch(o);
    }
    return 2;
}
