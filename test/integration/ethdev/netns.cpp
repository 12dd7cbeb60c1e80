// Network namespaces, veth pairs, sockets and processes for the ethdev wire tests.
#include "netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <sstream>
#include <thread>

extern char **environ;

namespace shunt::test::net {

namespace {

using clk = std::chrono::steady_clock;

int ms_left(clk::time_point end)
{
    auto d = std::chrono::duration_cast<std::chrono::milliseconds>(end - clk::now()).count();
    return d < 0 ? 0 : static_cast<int>(d);
}

/** Wait for @p pid at most @p ms. @return true and *status (exit status, or
 *  128 + the signal that ended it) when it ended. */
bool wait_pid(pid_t pid, int ms, int *status)
{
    auto end = clk::now() + std::chrono::milliseconds(ms);
    for (;;) {
        int st = 0;
        pid_t r = ::waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            // A signal's number shows in a failed check (128 + n, as shells
            // report it); -1 stays "did not exit in time".
            *status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
            return true;
        }
        if (r < 0)
            return false;
        if (clk::now() >= end)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

std::vector<char *> cargv(const std::vector<std::string> &v)
{
    std::vector<char *> a;
    for (const auto &s : v)
        a.push_back(const_cast<char *>(s.c_str()));
    a.push_back(nullptr);
    return a;
}

std::atomic<unsigned> seq{0};

/** A short name unique to this process (interface names have 15 bytes). */
std::string unique(const std::string &tag)
{
    std::string s = "s";
    s += std::to_string(getpid() % 100000);
    s += tag;
    s += std::to_string(seq++);
    return s;
}

/** Namespaces are named "shunt-test-<pid>-...": remove those of test
 *  processes that died without cleaning up (killed, or their output pipe
 *  closed under them). */
void remove_stale_namespaces()
{
    std::string out;
    if (run({"ip", "netns", "list"}, &out) != 0)
        return;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
        std::string name = line.substr(0, line.find(' '));
        if (name.rfind("shunt-test-", 0) != 0)
            continue;
        pid_t pid = static_cast<pid_t>(std::strtol(name.c_str() + 11, nullptr, 10));
        if (pid > 0 && pid != getpid() && ::kill(pid, 0) != 0 && errno == ESRCH)
            run({"ip", "netns", "del", name});
    }
}

/** Run @p fn on a thread that has entered namespace @p ns. */
bool in_ns(const netns &ns, const std::function<void()> &fn)
{
    bool entered = false;
    std::thread t([&] {
        int fd = ::open(("/run/netns/" + ns.name()).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return;
        entered = ::setns(fd, CLONE_NEWNET) == 0;
        ::close(fd);
        if (entered)
            fn();
    });
    t.join();
    return entered;
}

void write_file(const char *path, const char *v)
{
    int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!::write(fd, v, std::strlen(v));
        ::close(fd);
    }
}

} // namespace

int run(const std::vector<std::string> &argv, std::string *out, int timeout_ms)
{
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid = -1;
    auto a = cargv(argv);
    int rc = posix_spawnp(&pid, a[0], &fa, nullptr, a.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(p[1]);
    if (rc != 0) {
        ::close(p[0]);
        return -1;
    }
    std::string text;
    auto end = clk::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        pollfd pf{p[0], POLLIN, 0};
        int r = ::poll(&pf, 1, ms_left(end));
        if (r <= 0)
            break;
        char b[4096];
        ssize_t k = ::read(p[0], b, sizeof b);
        if (k <= 0)
            break;
        text.append(b, static_cast<std::size_t>(k));
    }
    ::close(p[0]);
    int status = -1;
    if (!wait_pid(pid, ms_left(end) + 100, &status)) {
        ::kill(pid, SIGKILL);
        wait_pid(pid, 1000, &status);
        status = -1;
    }
    if (out)
        *out = text;
    return status;
}

std::string unavailable()
{
    if (geteuid() != 0)
        return "needs root (network namespaces)";
    if (run({"ip", "-V"}) != 0)
        return "no 'ip' command (iproute2)";
    if (run({"tc", "-V"}) != 0)
        return "no 'tc' command (iproute2)";
    return "";
}

netns::netns(const std::string &tag)
    : name_("shunt-test-" + std::to_string(getpid()) + "-" + tag + std::to_string(seq++))
{
    static const bool cleaned = (remove_stale_namespaces(), true);
    (void)cleaned;
    std::string err;
    if (run({"ip", "netns", "add", name_}, &err) != 0) {
        std::fprintf(stderr, "ip netns add %s: %s\n", name_.c_str(), err.c_str());
        return;
    }
    ok_ = ip({"link", "set", "lo", "up"}) == 0;
    // No IPv6 chatter (router solicitations, MLD) in the captures.
    in_ns(*this, [] {
        write_file("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
        write_file("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
    });
}

netns::~netns()
{
    if (!name_.empty())
        run({"ip", "netns", "del", name_});
}

int netns::ip(const std::vector<std::string> &args, std::string *out) const
{
    std::vector<std::string> a{"ip", "-n", name_};
    a.insert(a.end(), args.begin(), args.end());
    return run(a, out);
}

int netns::tc(const std::vector<std::string> &args, std::string *out) const
{
    std::vector<std::string> a{"tc", "-n", name_};
    a.insert(a.end(), args.begin(), args.end());
    return run(a, out);
}

veth::veth(const netns &na, const netns &nb, const std::string &tag, const std::string &ip_a, const std::string &ip_b,
           unsigned mtu)
{
    std::string base = unique(tag);
    a = base + "a";
    b = base + "b";
    std::string err;
    if (run({"ip", "link", "add", "name", a, "netns", na.name(), "type", "veth", "peer", "name", b, "netns",
             nb.name()},
            &err) != 0) {
        std::fprintf(stderr, "ip link add %s/%s: %s\n", a.c_str(), b.c_str(), err.c_str());
        return;
    }
    const std::string m = std::to_string(mtu);
    ok = na.ip({"link", "set", a, "mtu", m, "up"}) == 0 && nb.ip({"link", "set", b, "mtu", m, "up"}) == 0;
    if (ok && !ip_a.empty())
        ok = na.ip({"addr", "add", ip_a + "/24", "dev", a}) == 0;
    if (ok && !ip_b.empty())
        ok = nb.ip({"addr", "add", ip_b + "/24", "dev", b}) == 0;
}

int packet_socket(const netns &ns, const std::string &ifname)
{
    int fd = -1;
    in_ns(ns, [&] {
        int s = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
        if (s < 0)
            return;
        sockaddr_ll sa{};
        sa.sll_family = AF_PACKET;
        sa.sll_protocol = htons(ETH_P_ALL);
        sa.sll_ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
        int big = 8 << 20;
        ::setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
        if (sa.sll_ifindex == 0 || ::bind(s, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) {
            ::close(s);
            return;
        }
        fd = s;
    });
    return fd;
}

int udp_socket(const netns &ns, std::uint16_t port)
{
    int fd = -1;
    in_ns(ns, [&] {
        int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            return;
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_port = htons(port);
        if (::bind(s, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) {
            ::close(s);
            return;
        }
        fd = s;
    });
    return fd;
}

std::vector<std::uint8_t> recv_frame(int fd, int ms, bool outgoing)
{
    auto end = clk::now() + std::chrono::milliseconds(ms);
    for (;;) {
        pollfd pf{fd, POLLIN, 0};
        if (::poll(&pf, 1, ms_left(end)) <= 0)
            return {};
        std::vector<std::uint8_t> b(70000);
        sockaddr_ll from{};
        socklen_t fl = sizeof from;
        ssize_t k = ::recvfrom(fd, b.data(), b.size(), 0, reinterpret_cast<sockaddr *>(&from), &fl);
        if (k < 0)
            return {};
        if (!outgoing && from.sll_pkttype == PACKET_OUTGOING)
            continue;
        b.resize(static_cast<std::size_t>(k));
        return b;
    }
}

std::vector<std::uint8_t> mac_of(const netns &ns, const std::string &ifname)
{
    std::vector<std::uint8_t> m;
    in_ns(ns, [&] {
        int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            return;
        ifreq r{};
        std::snprintf(r.ifr_name, sizeof r.ifr_name, "%s", ifname.c_str());
        if (::ioctl(s, SIOCGIFHWADDR, &r) == 0)
            m.assign(reinterpret_cast<std::uint8_t *>(r.ifr_hwaddr.sa_data),
                     reinterpret_cast<std::uint8_t *>(r.ifr_hwaddr.sa_data) + 6);
        ::close(s);
    });
    return m;
}

proc::proc(const netns *ns, const std::vector<std::string> &argv, const std::map<std::string, std::string> &env,
           bool with_stderr)
{
    // A child that exited must not kill us when we write to its stdin.
    static const bool no_sigpipe = (::signal(SIGPIPE, SIG_IGN), true);
    (void)no_sigpipe;
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0)
        return;
    if (::pipe2(out, O_CLOEXEC) != 0) {
        ::close(in[0]);
        ::close(in[1]);
        return;
    }
    std::vector<std::string> a;
    if (ns)
        a = {"ip", "netns", "exec", ns->name()};
    a.insert(a.end(), argv.begin(), argv.end());
    std::vector<std::string> envs;
    for (char **e = environ; *e; e++) {
        std::string s = *e;
        auto eq = s.find('=');
        if (eq != std::string::npos && env.count(s.substr(0, eq)))
            continue;
        envs.push_back(s);
    }
    for (const auto &[k, v] : env)
        envs.push_back(k + "=" + v);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    if (with_stderr)
        posix_spawn_file_actions_adddup2(&fa, out[1], 2);
    auto ca = cargv(a), ce = cargv(envs);
    int rc = posix_spawnp(&pid_, ca[0], &fa, nullptr, ca.data(), ce.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    if (rc != 0) {
        pid_ = -1;
        ::close(in[1]);
        ::close(out[0]);
        return;
    }
    in_ = in[1];
    out_ = out[0];
}

proc::~proc() { finish(5000); }

std::string proc::line(int ms, bool *timed_out)
{
    auto end = clk::now() + std::chrono::milliseconds(ms);
    if (timed_out)
        *timed_out = false;
    for (;;) {
        auto nl = buf_.find('\n');
        if (nl != std::string::npos) {
            std::string l = buf_.substr(0, nl);
            buf_.erase(0, nl + 1);
            seen_.push_back(l);
            return l;
        }
        pollfd pf{out_, POLLIN, 0};
        if (out_ < 0 || ::poll(&pf, 1, ms_left(end)) <= 0) {
            if (timed_out)
                *timed_out = true;
            return "";
        }
        char b[4096];
        ssize_t k = ::read(out_, b, sizeof b);
        if (k <= 0) {
            if (timed_out)
                *timed_out = true;
            return "";
        }
        buf_.append(b, static_cast<std::size_t>(k));
    }
}

std::string proc::expect(const std::string &prefix, int ms)
{
    auto end = clk::now() + std::chrono::milliseconds(ms);
    for (;;) {
        bool to = false;
        std::string l = line(ms_left(end), &to);
        if (to)
            return "";
        if (l.rfind(prefix, 0) == 0)
            return l;
    }
}

bool proc::say(const std::string &s)
{
    if (in_ < 0)
        return false;
    std::string l = s + "\n";
    return ::write(in_, l.data(), l.size()) == static_cast<ssize_t>(l.size());
}

int proc::finish(int ms)
{
    if (pid_ <= 0 || reaped_)
        return status_;
    if (in_ >= 0) {
        say("QUIT");
        ::close(in_);
        in_ = -1;
    }
    int st = -1;
    if (wait_pid(pid_, ms, &st)) {
        status_ = st;
    } else {
        ::kill(pid_, SIGKILL);
        wait_pid(pid_, 2000, &st);
        status_ = -1;
    }
    reaped_ = true;
    if (out_ >= 0) {
        ::close(out_);
        out_ = -1;
    }
    return status_;
}

std::map<std::string, std::string> fields(const std::string &line)
{
    std::map<std::string, std::string> m;
    std::istringstream in(line);
    std::string w;
    while (in >> w) {
        auto eq = w.find('=');
        if (eq != std::string::npos)
            m[w.substr(0, eq)] = w.substr(eq + 1);
    }
    return m;
}

} // namespace shunt::test::net
