/* shunt-perf: the test configuration, its command line, and its wire form
 * for the out-of-band exchange between the two sides. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shunt::perf {

enum class test_kind { pingpong, bw, rate };
enum class role { launcher, server, client, responder };
enum class out_format { table, json, csv };

inline constexpr std::size_t max_size = 4u << 20;          ///< largest message, 4 MiB
inline constexpr std::uint64_t max_iterations = 100000000;  ///< per size (samples are 8 B each)
inline constexpr unsigned max_window = 4096;
inline constexpr std::uint16_t default_port = 47592;

/** What both sides must agree on; travels from the initiator to the
 *  responder in the out-of-band exchange (to_wire / from_wire). */
struct test_config {
    test_kind test = test_kind::pingpong;
    std::string provider;          ///< endpoint level: provider name; vq level: driver name
    bool vq = false;               ///< raw queue level (--vq)
    std::string ep_type = "rdm";   ///< rdm | msg | dgram (endpoint level)
    std::string qp_type = "rc";    ///< rc | uc | ud (vq level)
    std::string op = "msg";        ///< msg | tagged | write | atomic
    unsigned window = 64;          ///< bw / rate: outstanding operations
    bool verify = false;           ///< --verify (transports may lay out receives for it)
    bool shared_buffers = false;   ///< --shared-buffers: endpoint-level buffers peers reach directly
    std::string threading = "domain"; ///< --threading: endpoint level, domain | completion | safe
    /** --domain: endpoint level, the provider's domain (device) to open;
     *  empty: the provider's first. A server given its own keeps it. */
    std::string domain;
    /** --tsc-one-way: the responder stamps each echo with its TSC and the
     *  initiator records its arrival time less the stamp. clock_id names
     *  the initiator's clock (env::tsc::clock_id()); the responder refuses a
     *  different one. */
    bool tsc_one_way = false;
    std::string clock_id;
};

/** Everything the command line says. */
struct options {
    test_config cfg;
    role who = role::launcher;
    std::vector<std::size_t> sizes{8};
    bool sweep = false;            ///< -S all
    std::uint64_t iterations = 0;  ///< 0: default per size (see default_iterations)
    double duration = 0;           ///< seconds; 0: use iterations
    std::uint64_t warmup = 1000;
    std::vector<unsigned> cores;   ///< empty: env::pick_cores(2)
    std::string address;           ///< client: server to connect to; server: address to bind
    std::uint16_t port = default_port;
    out_format format = out_format::table;
    std::string plot;              ///< SVG file to write, empty: none
    double timeout = 30;           ///< seconds without progress before giving up
    bool verify = false;           ///< --verify: check every payload byte
    bool quiet = false;            ///< -q: no progress or running lines on stderr
    int oob_fd = -1;               ///< responder role: inherited stream socket
};

/** Parse argv. @return -1 to go on, or an exit code (0 after --help, 2 after
 *  a usage error, whose message has been printed on stderr). */
int parse_command_line(int argc, char **argv, options &o);

/** Default iteration count for one size: 100000, fewer for sizes above
 *  8 KiB so that a sweep finishes (at least 100). */
std::uint64_t default_iterations(test_kind t, std::size_t size);

const char *name(test_kind t);
const char *level_name(const test_config &c);

/** Wire form "key=value ..." (one line, no spaces in values). */
std::string to_wire(const test_config &c);
/** @return 0, or -FI_EINVAL on a malformed line. */
int from_wire(const std::string &line, test_config &c);

} // namespace shunt::perf
