// vq provider: the receive side of stamped connections (one-way latency
// from the sender's TSC, SHUNT_TELEMETRY_ONE_WAY). Apart from rx.cpp so
// that the receive path of connections that are not stamped is built
// exactly as without them.
#include <cstring>

#include "env/tsc.h"
#include "prov.h"
#include "rx_fp.h"

namespace shunt::prov::vqprov {

void rx_stamped(prov_ep *e, rc_slot &sl, hdr_word h, const std::uint8_t *p, std::size_t len)
{
    if ((h.op != w_eager_ts && h.op != w_rts_ts && h.op != w_frag_first_ts) || len < stamp_len)
        return; // an unknown op, or shorter than its stamp: not ours
    // Recorded only on a connection both ends agreed to stamp (one clock);
    // a stamp later than its arrival (TSCs out of step after all) counts as 0.
    if (e->ow && sl.c && sl.c->one_way) {
        const std::uint64_t now = env::tsc::now();
        std::uint64_t sent;
        std::memcpy(&sent, p, stamp_len);
        e->ow->one_way.record(now > sent ? now - sent : 0);
    }
    h.op = unstamped_op(h.op);
    p += stamp_len;
    len -= stamp_len;
    if (h.op == w_eager)
        rx_eager(e, sl, h, p, len);
    else if (h.op == w_rts)
        rx_rts(e, sl, h, p, len);
    else
        frag_rx(e, int(&sl - e->slots.data()), h, p, len);
}

} // namespace shunt::prov::vqprov
