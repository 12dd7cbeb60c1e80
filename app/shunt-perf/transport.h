/* shunt-perf: how a transport plugs into the measurement framework.
 *
 * A transport is chosen once, at setup, by name (-p PROVIDER, or --vq
 * --driver DRIVER). Its ops table opens one side of a connection (the
 * address exchange goes over the out-of-band channel) and returns a
 * transport_session. The session runs one size at a time: one virtual call
 * per size, never per message. Inside, the timed loops of loops.h are
 * templates instantiated on the transport's concrete class, so the per-message
 * calls are direct and inlined.
 *
 * A concrete transport class T used with typed_session<T> (loops.h) provides,
 * all noexcept and without allocation or system calls:
 *   void begin_run(const run_request &r);      both sides, before a size
 *   void end_run();                            both sides, after a size
 *   int send(const void *buf, size_t len);     0, or -FI_EAGAIN: no credit
 *                                              yet, call again
 *   int inject(const void *buf, size_t len);   as send; the buffer is free
 *                                              again on return, no completion
 *   ssize_t recv(void *buf, size_t cap);       bytes received, or -FI_EAGAIN:
 *                                              nothing yet; other negative
 *                                              codes are errors
 *   int progress();                            drive completions; 0 or error
 *   int drained();                             optional: drive completions;
 *                                              0 once everything posted is
 *                                              complete, -FI_EAGAIN not yet,
 *                                              or an error (a transport whose
 *                                              sends can stay in flight after
 *                                              the post returns needs it)
 *   std::byte *tx_buf(), *rx_buf();            buffers of at least max_size
 *                                              bytes (registered if the
 *                                              transport needs it)
 *   unsigned max_window(size_t size) const;    operations it can keep
 *                                              outstanding at that size
 *
 * Files: transport_line.cpp (the cache-line floor, available now),
 * transport_vq.cpp (lib/vq drivers) and transport_fabric.cpp (lib/fabric
 * providers) are the hook points for the other levels. */
#pragma once

#include "env/stats_fp.h"
#include "options.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shunt::perf {

class oob_channel;
struct live_state;

/** One size of one test, as both sides run it. */
struct run_request {
    test_kind test = test_kind::pingpong;
    std::size_t size = 8;
    std::uint64_t iterations = 0;  ///< timed iterations (messages for bw / rate)
    std::uint64_t warmup = 0;      ///< untimed iterations before them
    unsigned window = 64;          ///< bw / rate: outstanding operations
    bool verify = false;           ///< check every payload byte (--verify)
    int watch_fd = -1;             ///< out-of-band socket: EOF on it means the peer died
    std::uint64_t stall_cycles = 0;///< give up after this long without progress
    live_state *live = nullptr;    ///< initiator: running line, Ctrl-C, telemetry (live.h); null: none
    /** pingpong --tsc-one-way. Responder: stamp each echo's first 8 bytes
     *  with the TSC. Initiator: tsc_hist gets arrival - stamp of each timed
     *  echo (cycles). */
    bool tsc_stamp = false;
    env::stats::histogram *tsc_hist = nullptr;
};

/** What the initiator measured for one size. */
struct run_output {
    std::uint64_t iterations = 0;  ///< timed iterations done
    std::uint64_t cycles = 0;      ///< TSC cycles of the timed part, end to end
};

class transport_session {
public:
    virtual ~transport_session() = default;
    /** Initiator side of one size. Pingpong stores the round-trip cycles of
     *  every timed iteration in samples[0..iterations). @return 0, or a
     *  negative code (-FI_ETIMEDOUT stall, -FI_ECONNRESET peer gone). */
    virtual int run_initiator(const run_request &r, std::uint64_t *samples, run_output &out) = 0;
    /** Responder side of one size. @return as run_initiator. */
    virtual int run_responder(const run_request &r) = 0;
    /** Largest window the transport can keep outstanding for @p size. */
    virtual unsigned max_window(std::size_t size) const = 0;
};

struct transport_ops {
    const char *name;    ///< provider (endpoint level) or driver (vq level) name
    bool vq;             ///< true: selected with --vq --driver NAME
    const char *help;    ///< one line for --help
    /** Check the configuration (endpoint type, operation, QP type).
     *  @return 0, or -FI_EOPNOTSUPP with @p why set. */
    int (*validate)(const test_config &c, std::string &why);
    /** Open one side; exchanges addresses over @p oob, waiting at most
     *  @p timeout_s for each message. @return 0 and sets
     *  @p out, or a negative code with @p why set. */
    int (*open)(const test_config &c, bool initiator, oob_channel &oob, double timeout_s,
                std::unique_ptr<transport_session> &out, std::string &why);
    /** Largest message of this configuration (UD MTU, datagram size, one
     *  atomic element...), or 0 for max_size. Sizes above it are a usage
     *  error; a sweep (-S all) is cut there. May be null. */
    std::size_t (*max_msg)(const test_config &c) = nullptr;
    /** Smallest message of this configuration (an atomic element), or 0 for
     *  1. May be null. */
    std::size_t (*min_msg)(const test_config &c) = nullptr;
};

/** Transports built into this shunt-perf, in order of preference (the first
 *  of a level is that level's default). */
std::vector<const transport_ops *> transports();

/** The transport for @p c (name in c.provider, level in c.vq), or nullptr. */
const transport_ops *find_transport(const test_config &c);

/** Names that are Shunt providers or drivers but whose transport is not in
 *  this build yet (so that the error says so rather than "unknown"). */
bool is_pending_name(const std::string &name, bool vq);

// Per-file registration hooks (each returns its tables, possibly none).
void register_line(std::vector<const transport_ops *> &v);
void register_vq(std::vector<const transport_ops *> &v);
void register_fabric(std::vector<const transport_ops *> &v);

} // namespace shunt::perf
