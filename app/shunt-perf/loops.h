/* shunt-perf: the timed loops, templates over a concrete transport class
 * (the concept is described in transport.h). Nothing here allocates, logs or
 * makes a system call while the clock runs; waiting spins on the transport
 * and, after 65536 empty polls, looks at a cold watchdog (stall timeout, peer
 * gone) so that a dead peer never hangs the tool.
 *
 * The initiator's timed loops also compare the TSC they read anyway with a
 * deadline (live.h): past it, tick() looks for Ctrl-C and prints the running
 * line; the cycles it takes are taken out of the samples and the elapsed
 * time. With telemetry on (Live) each round trip also goes into the "perf"
 * block's histogram, which readers of the telemetry socket see. */
#pragma once

#include "env/compiler.h"
#include "env/errors.h"
#include "env/tsc.h"
#include "live.h"
#include "oob.h"
#include "transport.h"

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

namespace shunt::perf {

/** Slow-path check, called after every 65536 empty polls of one wait.
 *  @p first is the TSC when this wait went idle for the first time (0 on the
 *  first call, which sets it). @return 0 to keep waiting, -FI_ETIMEDOUT,
 *  -FI_ECONNRESET. */
[[gnu::cold, gnu::noinline]] inline int watchdog(const run_request &r, std::uint64_t &first)
{
    std::uint64_t now = env::tsc::now();
    if (first == 0) {
        first = now;
        return 0;
    }
    if (r.watch_fd >= 0 && peer_gone(r.watch_fd))
        return -FI_ECONNRESET;
    if (r.stall_cycles && now - first > r.stall_cycles)
        return -FI_ETIMEDOUT;
    return 0;
}

/** Receive one message into @p buf, spinning. @return its length, or an
 *  error. */
template <class T> inline ssize_t wait_recv(T &tr, void *buf, std::size_t cap, const run_request &r)
{
    unsigned spins = 0;
    std::uint64_t first = 0;
    for (;;) {
        ssize_t n = tr.recv(buf, cap);
        if (n >= 0) [[likely]]
            return n;
        if (n != -FI_EAGAIN) [[unlikely]]
            return n;
        if ((++spins & 0xffff) == 0) [[unlikely]] {
            int rc = watchdog(r, first);
            if (rc)
                return rc;
        }
    }
}

// --verify: every message carries a pattern derived from its number, which
// the receiving side checks byte for byte (and the echo too). Chosen at
// setup as a template argument: the measuring loops carry no check.
inline std::uint8_t pattern_byte(std::uint64_t msg, std::size_t j)
{
    return static_cast<std::uint8_t>(msg * 7 + j * 13 + 1);
}
inline void fill_pattern(std::byte *buf, std::size_t len, std::uint64_t msg)
{
    for (std::size_t j = 0; j < len; j++)
        buf[j] = std::byte{pattern_byte(msg, j)};
}
/** @return 0, or -FI_EIO if the message is not the expected one. */
[[gnu::noinline]] inline int check_pattern(const std::byte *buf, ssize_t got, std::size_t len, std::uint64_t msg)
{
    if (got != static_cast<ssize_t>(len))
        return got < 0 ? static_cast<int>(got) : -FI_EIO;
    for (std::size_t j = 0; j < len; j++)
        if (buf[j] != std::byte{pattern_byte(msg, j)})
            return -FI_EIO;
    return 0;
}

/** Receive and, when verifying, check message @p msg of length @p len. */
template <bool Verify, class T>
inline int recv_one(T &tr, std::byte *buf, std::size_t len, std::uint64_t msg, const run_request &r)
{
    ssize_t n = wait_recv(tr, buf, len, r);
    if constexpr (Verify)
        return check_pattern(buf, n, len, msg);
    return n < 0 ? static_cast<int>(n) : 0;
}

/** Post one message (send or inject), retrying while the transport has no
 *  credit. @return 0 or an error. */
template <bool Inject, class T> inline int post(T &tr, const void *buf, std::size_t len, const run_request &r)
{
    unsigned spins = 0;
    std::uint64_t first = 0;
    for (;;) {
        int rc = Inject ? tr.inject(buf, len) : tr.send(buf, len);
        if (rc == 0) [[likely]]
            return 0;
        if (rc != -FI_EAGAIN) [[unlikely]]
            return rc;
        rc = tr.progress();
        if (rc < 0) [[unlikely]]
            return rc;
        if ((++spins & 0xffff) == 0) [[unlikely]] {
            rc = watchdog(r, first);
            if (rc)
                return rc;
        }
    }
}

inline constexpr std::size_t ack_size = 4;

/** Wait, driving the transport, until every operation this side posted is
 *  complete: its drained() returns 0 (or an error); a transport without
 *  drained() has nothing left in flight once a post returns. A side that
 *  stops calling its transport after its last post must do this first:
 *  under manual progress (what the endpoint level asks for) a send the
 *  provider could not finish inside the call (a message larger than the
 *  room in the peer's ring, moved on as the peer frees room) advances only
 *  while its sender calls the provider. @return 0 or an error
 *  (-FI_ETIMEDOUT, -FI_ECONNRESET from the watchdog). */
template <class T> inline int wait_drained(T &tr, const run_request &r)
{
    if constexpr (requires { tr.drained(); }) {
        unsigned spins = 0;
        std::uint64_t first = 0;
        for (;;) {
            int rc = tr.drained();
            if (rc != -FI_EAGAIN)
                return rc;
            if ((++spins & 0xffff) == 0) [[unlikely]] {
                rc = watchdog(r, first);
                if (rc)
                    return rc;
            }
        }
    }
    return 0;
}

/** --tsc-one-way: record @p now less the stamp in the first 8 bytes of
 *  @p msg. A stamp after now (clocks that differ after all) counts as 0. */
inline void record_stamp(env::stats::histogram &h, const std::byte *msg, std::uint64_t now) noexcept
{
    std::uint64_t stamp;
    std::memcpy(&stamp, msg, sizeof stamp);
    h.record(now > stamp ? now - stamp : 0);
}

template <bool Verify, bool Live, class T>
int pingpong_initiator(T &tr, const run_request &r, std::uint64_t *samples, run_output &out)
{
    std::byte *tx = tr.tx_buf(), *rx = tr.rx_buf();
    const std::size_t len = r.size;
    int rc;
    std::uint64_t msg = 0;
    for (std::uint64_t i = 0; i < r.warmup; i++, msg++) {
        if constexpr (Verify)
            fill_pattern(tx, len, msg);
        if ((rc = post<false>(tr, tx, len, r)) || (rc = recv_one<Verify>(tr, rx, len, msg, r)))
            return rc;
    }
    // Chained timestamps: each sample is the whole iteration, so the samples
    // add up to the elapsed time exactly (less the ticks' own time, paused).
    live_state *l = r.live;
    if (l)
        l->begin(r.size);
    const std::uint64_t start = env::tsc::now();
    std::uint64_t next = l ? l->next_check : ~0ull;
    std::uint64_t prev = start, paused = 0;
    for (std::uint64_t i = 0; i < r.iterations; i++, msg++) {
        if constexpr (Verify)
            fill_pattern(tx, len, msg);
        if ((rc = post<false>(tr, tx, len, r)) || (rc = recv_one<Verify>(tr, rx, len, msg, r))) [[unlikely]] {
            out.iterations = i;
            out.cycles = prev - start - paused;
            return rc;
        }
        const std::uint64_t now = env::tsc::now();
        samples[i] = now - prev;
        if (r.tsc_hist) // --tsc-one-way: the responder's stamp, one clock on one host
            record_stamp(*r.tsc_hist, rx, now);
        if constexpr (Live)
            l->st->one_way.record(samples[i] / 2);
        prev = now;
        if (now >= next) [[unlikely]] {
            rc = tick(*l, i + 1, now, paused);
            if (rc) {
                out.iterations = i + 1;
                out.cycles = now - start - paused;
                return rc;
            }
            prev = env::tsc::now();
            paused += prev - now;
            next = l->next_check;
        }
    }
    out.iterations = r.iterations;
    out.cycles = prev - start - paused;
    return 0;
}

/** Answers each message with one of the same size, and returns once its
 *  last answer is complete: nothing of the size is left in its transport
 *  when it reports the size done. The answer comes from the responder's
 *  own send buffer, which nobody writes during the run, as in UCX's
 *  ucx_perftest and libfabric's fi_pingpong (so the figures compare); with
 *  --verify it echoes what it received, so both directions are checked. */
template <bool Verify, class T> int pingpong_responder(T &tr, const run_request &r)
{
    std::byte *rx = tr.rx_buf();
    std::byte *out = Verify ? rx : tr.tx_buf();
    const std::uint64_t total = r.warmup + r.iterations;
    int rc;
    for (std::uint64_t msg = 0; msg < total; msg++) {
        if ((rc = recv_one<Verify>(tr, rx, r.size, msg, r)))
            return rc;
        if (r.tsc_stamp) {
            const std::uint64_t t = env::tsc::now();
            std::memcpy(out, &t, sizeof t);
        }
        if ((rc = post<false>(tr, out, r.size, r)))
            return rc;
    }
    return wait_drained(tr, r);
}

/** bw and rate: @p count messages one way, then one small acknowledgement
 *  back, which ends the timed part. With @p l (the timed burst) the clock is
 *  looked at every 1024 messages for tick(); @p done and @p paused say how
 *  far it got and how long the ticks took. */
template <bool Inject, bool Verify, class T>
int stream_burst(T &tr, const run_request &r, std::uint64_t count, live_state *l = nullptr,
                 std::uint64_t *done = nullptr, std::uint64_t *paused = nullptr)
{
    std::byte *tx = tr.tx_buf(), *rx = tr.rx_buf();
    int rc;
    for (std::uint64_t i = 0; i < count; i++) {
        if constexpr (Verify)
            fill_pattern(tx, r.size, i);
        if ((rc = post<Inject>(tr, tx, r.size, r))) [[unlikely]] {
            if (done)
                *done = i;
            return rc;
        }
        if (l && (i & 1023) == 1023) [[unlikely]] {
            const std::uint64_t now = env::tsc::now();
            if (now >= l->next_check) {
                rc = tick(*l, i + 1, now, *paused);
                *paused += env::tsc::now() - now;
                if (rc) {
                    *done = i + 1;
                    return rc;
                }
            }
        }
    }
    if (done)
        *done = count;
    ssize_t n = wait_recv(tr, rx, ack_size, r);
    return n < 0 ? static_cast<int>(n) : 0;
}

template <bool Verify, class T> int stream_initiator(T &tr, const run_request &r, run_output &out)
{
    const bool inject = r.test == test_kind::rate;
    int rc = 0;
    if (r.warmup)
        rc = inject ? stream_burst<true, Verify>(tr, r, r.warmup) : stream_burst<false, Verify>(tr, r, r.warmup);
    if (rc)
        return rc;
    live_state *l = r.live;
    if (l)
        l->begin(r.size);
    std::uint64_t done = 0, paused = 0;
    const std::uint64_t start = env::tsc::now();
    rc = inject ? stream_burst<true, Verify>(tr, r, r.iterations, l, &done, &paused)
                : stream_burst<false, Verify>(tr, r, r.iterations, l, &done, &paused);
    const std::uint64_t end = env::tsc::now();
    // Interrupted or failed: what was posted so far, over the time it took
    // (the sender's view: the last messages may not have arrived).
    out.iterations = rc ? done : r.iterations;
    out.cycles = end - start - paused;
    return rc;
}

template <bool Verify, class T> int stream_responder(T &tr, const run_request &r)
{
    std::byte *tx = tr.tx_buf(), *rx = tr.rx_buf();
    int rc;
    for (std::uint64_t burst : {r.warmup, r.iterations}) {
        if (burst == 0)
            continue;
        for (std::uint64_t i = 0; i < burst; i++) {
            if ((rc = recv_one<Verify>(tr, rx, r.size, i, r))) [[unlikely]]
                return rc;
        }
        if ((rc = post<false>(tr, tx, ack_size, r)))
            return rc;
    }
    return wait_drained(tr, r);
}

/** The bridge from the setup-time choice (one virtual call per size) to the
 *  templated loops (direct calls per message). */
template <class T> class typed_session final : public transport_session {
public:
    explicit typed_session(std::unique_ptr<T> t) : tr_(std::move(t)) {}

    int run_initiator(const run_request &r, std::uint64_t *samples, run_output &out) override
    {
        tr_->begin_run(r);
        int rc;
        const bool live = r.live && r.live->st;
        if (r.test == test_kind::pingpong)
            rc = r.verify ? (live ? pingpong_initiator<true, true>(*tr_, r, samples, out)
                                  : pingpong_initiator<true, false>(*tr_, r, samples, out))
                          : (live ? pingpong_initiator<false, true>(*tr_, r, samples, out)
                                  : pingpong_initiator<false, false>(*tr_, r, samples, out));
        else
            rc = r.verify ? stream_initiator<true>(*tr_, r, out) : stream_initiator<false>(*tr_, r, out);
        tr_->end_run();
        return rc;
    }

    int run_responder(const run_request &r) override
    {
        tr_->begin_run(r);
        int rc;
        if (r.test == test_kind::pingpong)
            rc = r.verify ? pingpong_responder<true>(*tr_, r) : pingpong_responder<false>(*tr_, r);
        else
            rc = r.verify ? stream_responder<true>(*tr_, r) : stream_responder<false>(*tr_, r);
        tr_->end_run();
        return rc;
    }

    unsigned max_window(std::size_t size) const override { return tr_->max_window(size); }

private:
    std::unique_ptr<T> tr_;
};

} // namespace shunt::perf
