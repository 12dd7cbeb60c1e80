/* shunt-perf: what the initiator's timed loops report while they run -- the
 * "perf" statistics block (telemetry), the running line on stderr during a
 * long size, and Ctrl-C. The loops (loops.h) look at the clock they already
 * read against a deadline; past it they call tick(), a cold function whose
 * own time is taken out of the figures. */
#pragma once

#include "env/stats.h"
#include "options.h"

#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

namespace shunt::perf {

/** The "perf" block, written by the initiator's thread only. */
struct perf_stats {
    env::stats::gauge size;         ///< message size of the size running
    env::stats::gauge done;         ///< timed iterations (pingpong) or messages (bw, rate) so far in it
    env::stats::counter sizes_done; ///< sizes finished
    env::stats::histogram one_way;  ///< pingpong: half of each round trip, cycles
    env::stats::histogram tsc_one_way; ///< pingpong --tsc-one-way: echo arrival - responder's stamp, cycles
};

/** One initiator's reporting state, shared by its loops and main. */
struct live_state {
    perf_stats *st = nullptr;       ///< the block, nullptr with SHUNT_TELEMETRY=0
    test_kind test = test_kind::pingpong;
    std::size_t size = 0;
    bool lines = true;              ///< print the running line (not --quiet)
    bool tty = false;               ///< stderr is a terminal: rewrite the line in place
    std::uint64_t check_cycles = 0; ///< between two looks at Ctrl-C (about 50 ms)
    std::uint64_t line_cycles = 0;  ///< between two running lines (1 s)
    // Per size (begin()):
    std::uint64_t start = 0, next_check = 0, next_line = 0, last_done = 0, last_tsc = 0;
    std::vector<std::uint64_t> last_counts; ///< histogram at the previous line
    bool printed = false;           ///< a running line is on the terminal

    /** Prepare for a size of @p bytes starting now. */
    void begin(std::size_t bytes);
    /** After a size: clear the running line, count the size. */
    void end();
};

/** The schema of perf_stats. */
const env::stats::schema &perf_schema();

/** Set by SIGINT while a run is measured (install_interrupt()). */
extern volatile std::sig_atomic_t interrupted;
/** From now on Ctrl-C ends the measurement instead of the process (a second
 *  Ctrl-C still ends the process). */
void install_interrupt();

/** Called by the loops when the TSC passes l.next_check: prints the running
 *  line when due, updates l.next_check. @p done iterations or messages so
 *  far in the size, @p paused cycles taken out of the figures so far.
 *  @return 0, or -FI_ECANCELED after Ctrl-C. */
[[gnu::cold, gnu::noinline]] int tick(live_state &l, std::uint64_t done, std::uint64_t now, std::uint64_t paused);

} // namespace shunt::perf
