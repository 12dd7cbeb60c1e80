/* drivers/ethdev: statistics blocks (doc/guides/telemetry.md).
 *
 * ethdev.<port>.qp.<QP number>: every QP's io block (env/stats_fp.h) and,
 * behind it, what the RoCE transport adds. Written by whoever progresses the
 * QP (its lock holder), except rx_ring_full, which the holder of the port's
 * receive lock writes: one writer per field.
 *
 * ethdev.<port>: the port's drop counters by reason (port::cnt), for frames
 * dropped before they reach a QP (malformed, bad ICRC, unknown QP number). */
#pragma once

#include <string>

#include "env/stats.h"

namespace shunt::drv::ethdev {

struct qp_stats {
    env::stats::io_stats io;
    env::stats::counter rx_ring_full;      ///< frames for this QP dropped: its receive ring was full
    env::stats::counter naks_sent;         ///< NAKs sent (sequence error, invalid request, access)
    env::stats::counter rnr_naks_sent;     ///< RNR NAKs sent (no receive posted)
    env::stats::counter naks_received;     ///< sequence-error NAKs received (each starts a go-back)
    env::stats::counter rnr_naks_received; ///< RNR NAKs received
};

/** A QP's block, allocated and registered only with telemetry on. */
class qp_block {
public:
    qp_block() noexcept = default;
    ~qp_block() { close(); }
    qp_block(const qp_block &) = delete;
    qp_block &operator=(const qp_block &) = delete;

    /** @return 0 (also with telemetry off: get() stays null); -FI_ENOMEM;
     *  as env::stats::registration::open. */
    [[nodiscard]] int open(const std::string &name);
    void close() noexcept;
    qp_stats *get() const noexcept { return s_; }

private:
    qp_stats *s_ = nullptr;
    env::stats::registration reg_;
};

struct port;
/** Register the port's ethdev.<port> block (its counters live as long as the
 *  process). Logs and goes on without it when refused. */
void port_stats_open(port *p);

} // namespace shunt::drv::ethdev
