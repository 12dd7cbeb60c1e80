/* shunt-fwd: its command line. */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shunt::fwd {

enum class mode { io, macswap };

/** Random impairments applied to every forwarded frame (a netem box). */
struct impairments {
    double drop = 0;    ///< probability a frame is dropped
    double dup = 0;     ///< probability a frame is sent twice
    double reorder = 0; ///< probability a frame is held back and sent after the next one
    double corrupt = 0; ///< probability one byte after the Ethernet header is flipped
    std::uint64_t seed = 1;
    bool any() const { return drop > 0 || dup > 0 || reorder > 0 || corrupt > 0; }
};

struct options {
    std::string port[2];           ///< the two vq devices (ethdev ports)
    mode how = mode::io;
    unsigned burst = 32;           ///< frames per receive poll / send batch
    std::vector<unsigned> cores;   ///< forwarding lcores (one queue pair per port each); empty: pick one
    double seconds = 0;            ///< 0: until SIGINT / SIGTERM
    unsigned stats_ms = 1000;      ///< live counters on stderr every this many ms (0: off)
    bool json = false;             ///< JSON summary on stdout at the end
    unsigned ring = 1024;          ///< receive buffers (and send queue) per QP
    std::vector<std::string> eal;  ///< extra EAL arguments (--eal, repeatable)
    impairments imp;
};

/** Parse argv. @return -1 to go on, else an exit code (0 after --help, 2
 *  after a usage error whose message is on stderr). */
int parse_command_line(int argc, char **argv, options &o);

/** The --help text. */
const char *usage();

} // namespace shunt::fwd
