/* drivers/ethdev: the per-QP and per-port statistics blocks. */
#include "eth_stats.h"

#include <cstddef>
#include <new>
#include <vector>

#include "env/errors.h"
#include "env/log.h"
#include "eth.h"

namespace shunt::drv::ethdev {

namespace st = env::stats;

SHUNT_LOG_COMPONENT(stats_log, "ethdev");

namespace {

static_assert(offsetof(qp_stats, io) == 0, "the io fields keep their offsets in the ethdev block");

/** The io fields, then the transport's. */
const st::schema &qp_schema()
{
    static const std::vector<st::field> fields = [] {
        const st::schema &io = st::io_schema();
        std::vector<st::field> f(io.fields, io.fields + io.count);
        f.push_back(SHUNT_STATS_FIELD(qp_stats, rx_ring_full, counter, none, "frames dropped: receive ring full"));
        f.push_back(SHUNT_STATS_FIELD(qp_stats, naks_sent, counter, none, "NAKs sent (sequence, invalid, access)"));
        f.push_back(SHUNT_STATS_FIELD(qp_stats, rnr_naks_sent, counter, none, "RNR NAKs sent (no receive posted)"));
        f.push_back(SHUNT_STATS_FIELD(qp_stats, naks_received, counter, none, "sequence NAKs received"));
        f.push_back(SHUNT_STATS_FIELD(qp_stats, rnr_naks_received, counter, none, "RNR NAKs received"));
        return f;
    }();
    static const st::schema s{"ethdev.qp", fields.data(), fields.size()};
    return s;
}

/** port::cnt as a block: one counter per reason, by counter_name(). */
const st::schema &port_schema()
{
    static const std::vector<st::field> fields = [] {
        std::vector<st::field> f;
        for (unsigned c = 0; c < num_counters; c++)
            f.push_back(st::field{counter_name(c), st::kind::counter, st::unit::none,
                                  c * sizeof(std::atomic<std::uint64_t>), "port counter (ethdev_ext.h)"});
        return f;
    }();
    static const st::schema s{"ethdev.port", fields.data(), fields.size()};
    return s;
}

} // namespace

int qp_block::open(const std::string &name)
{
    if (s_)
        return -FI_EBUSY;
    if (!st::enabled())
        return 0;
    auto *s = new (std::nothrow) qp_stats{};
    if (!s)
        return -FI_ENOMEM;
    if (int rc = reg_.open(name, qp_schema(), s)) {
        delete s;
        return rc;
    }
    s_ = s;
    return 0;
}

void qp_block::close() noexcept
{
    reg_.close();
    delete s_;
    s_ = nullptr;
}

void port_stats_open(port *p)
{
    static_assert(sizeof(std::atomic<std::uint64_t>) == 8, "readers see each counter as one 64-bit word");
    if (!st::enabled())
        return;
    if (int rc = p->stats_reg.open("ethdev." + p->name, port_schema(), p->cnt))
        SHUNT_LOG(stats_log, warning, "%s: no statistics block ethdev.%s: %s", p->name.c_str(), p->name.c_str(),
                  shunt::strerror(rc));
}

} // namespace shunt::drv::ethdev
