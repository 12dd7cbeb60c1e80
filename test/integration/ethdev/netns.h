// Network set-ups the ethdev wire tests make and remove themselves: network
// namespaces, veth pairs between them, qdiscs, sockets inside a namespace,
// and processes started in a namespace with a line protocol on their
// stdin/stdout. Every wait is bounded.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shunt::test::net {

/** Run a command (argv[0] looked up in PATH), wait at most @p timeout_ms.
 *  @return its exit status, 128 + the signal that ended it, or -1 (not run,
 *  killed after the timeout). The
 *  command's stdout and stderr go into @p out when given. */
int run(const std::vector<std::string> &argv, std::string *out = nullptr, int timeout_ms = 10000);

/** Why network tests cannot run here ("" when they can): root, ip, tc. */
std::string unavailable();

/** A network namespace with its loopback up, deleted (with everything in
 *  it) on destruction. Names are unique to this process. */
class netns {
public:
    explicit netns(const std::string &tag);
    ~netns();
    netns(const netns &) = delete;
    netns &operator=(const netns &) = delete;
    bool ok() const { return ok_; }
    const std::string &name() const { return name_; }
    /** `ip -n NAME args...` @return its exit status. */
    int ip(const std::vector<std::string> &args, std::string *out = nullptr) const;
    /** `tc -n NAME args...` */
    int tc(const std::vector<std::string> &args, std::string *out = nullptr) const;

private:
    std::string name_;
    bool ok_ = false;
};

/** A veth pair with one end in each namespace (up, MTU @p mtu), optional
 *  IPv4 addresses (/24). Interface names are unique to this process. */
struct veth {
    std::string a, b; ///< interface names in na and nb
    bool ok = false;
    veth(const netns &na, const netns &nb, const std::string &tag, const std::string &ip_a = "",
         const std::string &ip_b = "", unsigned mtu = 1500);
};

/** A socket created inside namespace @p ns (it stays there): AF_PACKET raw
 *  bound to @p ifname (ETH_P_ALL), or UDP bound to @p port.
 *  @return the descriptor, or -1. */
int packet_socket(const netns &ns, const std::string &ifname);
int udp_socket(const netns &ns, std::uint16_t port);
/** Receive one frame within @p ms; empty on timeout. Outgoing frames of
 *  the socket's interface are skipped unless @p outgoing. */
std::vector<std::uint8_t> recv_frame(int fd, int ms, bool outgoing = false);
/** The MAC address of @p ifname in @p ns (6 bytes), empty when unknown. */
std::vector<std::uint8_t> mac_of(const netns &ns, const std::string &ifname);

/** A process started in a namespace (`ip netns exec`) with pipes on its
 *  stdin and stdout; stderr is this process's, or joins stdout when
 *  @p with_stderr. Killed on destruction if it has not exited after QUIT. */
class proc {
public:
    proc(const netns *ns, const std::vector<std::string> &argv, const std::map<std::string, std::string> &env = {},
         bool with_stderr = false);
    ~proc();
    proc(const proc &) = delete;
    proc &operator=(const proc &) = delete;
    bool ok() const { return pid_ > 0; }
    pid_t pid() const { return pid_; }
    /** The next line of its stdout within @p ms ("" and *timed_out on timeout or EOF). */
    std::string line(int ms, bool *timed_out = nullptr);
    /** The next line that starts with @p prefix (other lines are kept in
     *  lines_seen()); "" after @p ms. */
    std::string expect(const std::string &prefix, int ms);
    /** Write one line to its stdin. */
    bool say(const std::string &s);
    /** Close its stdin, wait at most @p ms for it to exit (then SIGKILL).
     *  @return its exit status, 128 + the signal that ended it, or -1 when
     *  it did not exit in time and was killed. */
    int finish(int ms);
    /** Every line read so far. */
    const std::vector<std::string> &lines_seen() const { return seen_; }

private:
    pid_t pid_ = -1;
    int in_ = -1, out_ = -1;
    std::string buf_;
    std::vector<std::string> seen_;
    bool reaped_ = false;
    int status_ = -1;
};

/** The key=value words of a line ("ADDR qpn=5 mac=..." -> {qpn: 5, mac: ...}). */
std::map<std::string, std::string> fields(const std::string &line);

} // namespace shunt::test::net
