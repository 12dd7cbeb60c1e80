/* shunt-perf: the timed loops, templates over a concrete transport class
 * (the concept is described in transport.h). Nothing here allocates, logs or
 * makes a system call while the clock runs; waiting spins on the transport
 * and, after 65536 empty polls, looks at a cold watchdog (stall timeout, peer
 * gone) so that a dead peer never hangs the tool. */
#pragma once

#include "env/compiler.h"
#include "env/errors.h"
#include "env/tsc.h"
#include "oob.h"
#include "transport.h"

#include <cstddef>
#include <cstdint>
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

/** Receive one message into @p buf, spinning. @return 0 or an error. */
template <class T> inline int wait_recv(T &tr, void *buf, std::size_t cap, const run_request &r)
{
    unsigned spins = 0;
    std::uint64_t first = 0;
    for (;;) {
        ssize_t n = tr.recv(buf, cap);
        if (n >= 0) [[likely]]
            return 0;
        if (n != -FI_EAGAIN) [[unlikely]]
            return static_cast<int>(n);
        if ((++spins & 0xffff) == 0) [[unlikely]] {
            int rc = watchdog(r, first);
            if (rc)
                return rc;
        }
    }
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

template <class T>
int pingpong_initiator(T &tr, const run_request &r, std::uint64_t *samples, run_output &out)
{
    std::byte *tx = tr.tx_buf(), *rx = tr.rx_buf();
    const std::size_t len = r.size;
    int rc;
    for (std::uint64_t i = 0; i < r.warmup; i++) {
        if ((rc = post<false>(tr, tx, len, r)) || (rc = wait_recv(tr, rx, len, r)))
            return rc;
    }
    // Chained timestamps: each sample is the whole iteration, so the samples
    // add up to the elapsed time exactly.
    const std::uint64_t start = env::tsc::now();
    std::uint64_t prev = start;
    for (std::uint64_t i = 0; i < r.iterations; i++) {
        if ((rc = post<false>(tr, tx, len, r)) || (rc = wait_recv(tr, rx, len, r))) [[unlikely]]
            return rc;
        const std::uint64_t now = env::tsc::now();
        samples[i] = now - prev;
        prev = now;
    }
    out.iterations = r.iterations;
    out.cycles = prev - start;
    return 0;
}

template <class T> int pingpong_responder(T &tr, const run_request &r)
{
    std::byte *tx = tr.tx_buf(), *rx = tr.rx_buf();
    const std::uint64_t total = r.warmup + r.iterations;
    int rc;
    for (std::uint64_t i = 0; i < total; i++) {
        if ((rc = wait_recv(tr, rx, r.size, r)) || (rc = post<false>(tr, tx, r.size, r)))
            return rc;
    }
    return 0;
}

/** bw and rate: @p count messages one way, then one small acknowledgement
 *  back, which ends the timed part. */
template <bool Inject, class T> int stream_burst(T &tr, const run_request &r, std::uint64_t count)
{
    std::byte *tx = tr.tx_buf(), *rx = tr.rx_buf();
    int rc;
    for (std::uint64_t i = 0; i < count; i++) {
        if ((rc = post<Inject>(tr, tx, r.size, r))) [[unlikely]]
            return rc;
    }
    return wait_recv(tr, rx, ack_size, r);
}

template <class T> int stream_initiator(T &tr, const run_request &r, run_output &out)
{
    const bool inject = r.test == test_kind::rate;
    int rc = 0;
    if (r.warmup)
        rc = inject ? stream_burst<true>(tr, r, r.warmup) : stream_burst<false>(tr, r, r.warmup);
    if (rc)
        return rc;
    const std::uint64_t start = env::tsc::now();
    rc = inject ? stream_burst<true>(tr, r, r.iterations) : stream_burst<false>(tr, r, r.iterations);
    const std::uint64_t end = env::tsc::now();
    if (rc)
        return rc;
    out.iterations = r.iterations;
    out.cycles = end - start;
    return 0;
}

template <class T> int stream_responder(T &tr, const run_request &r)
{
    std::byte *tx = tr.tx_buf(), *rx = tr.rx_buf();
    int rc;
    for (std::uint64_t burst : {r.warmup, r.iterations}) {
        if (burst == 0)
            continue;
        for (std::uint64_t i = 0; i < burst; i++) {
            if ((rc = wait_recv(tr, rx, r.size, r))) [[unlikely]]
                return rc;
        }
        if ((rc = post<false>(tr, tx, ack_size, r)))
            return rc;
    }
    return 0;
}

/** The bridge from the setup-time choice (one virtual call per size) to the
 *  templated loops (direct calls per message). */
template <class T> class typed_session final : public transport_session {
public:
    explicit typed_session(std::unique_ptr<T> t) : tr_(std::move(t)) {}

    int run_initiator(const run_request &r, std::uint64_t *samples, run_output &out) override
    {
        tr_->begin_run(r);
        int rc = r.test == test_kind::pingpong ? pingpong_initiator(*tr_, r, samples, out)
                                               : stream_initiator(*tr_, r, out);
        tr_->end_run();
        return rc;
    }

    int run_responder(const run_request &r) override
    {
        tr_->begin_run(r);
        int rc = r.test == test_kind::pingpong ? pingpong_responder(*tr_, r) : stream_responder(*tr_, r);
        tr_->end_run();
        return rc;
    }

    unsigned max_window(std::size_t size) const override { return tr_->max_window(size); }

private:
    std::unique_ptr<T> tr_;
};

} // namespace shunt::perf
