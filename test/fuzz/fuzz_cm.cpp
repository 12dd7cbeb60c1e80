// libFuzzer: the vq provider's CM message parser (REQ / REP / REJ datagrams
// between endpoints) on arbitrary bytes from a peer. What it accepts is then
// used the way the provider uses it: the sender's address (and rc_at)
// copied into a device address, the CM data copied out of what arrived.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cm_wire.h"
#include "vq/types.h"

namespace {

void check(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "fuzz_cm: %s\n", what);
        std::abort();
    }
}

/** What the provider's to_dev does with an address of a CM message. */
shunt::vq::dev_addr to_dev(const shunt::prov::vqprov::ep_addr &a)
{
    shunt::vq::dev_addr d{};
    d.len = a.len;
    std::memcpy(d.raw, a.name, a.len);
    return d;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    namespace w = shunt::prov::vqprov;
    // Exactly the bytes that arrived, so a read past them is a heap overflow.
    std::vector<std::uint8_t> rx(data, data + size);
    w::cm_msg m;
    if (!w::cm_parse(rx.data(), rx.size(), m))
        return 0;
    constexpr std::size_t hdr = offsetof(w::cm_msg, data);
    check(size >= hdr, "accepted a message shorter than its header");
    check(m.op >= w::cm_req && m.op <= w::cm_rtu, "accepted an unknown operation");
    check(m.from.len >= 1 && m.from.len <= sizeof m.from.name, "accepted a sender address longer than its field");
    check(m.rc_at.len <= sizeof m.rc_at.name, "accepted an rc_at longer than its field");
    check(m.datalen <= w::cm_data_max, "accepted more CM data than cm_data_max");
    check(std::memcmp(&m, rx.data(), hdr) == 0, "the header is not what arrived");
    shunt::vq::dev_addr from = to_dev(m.from), at = to_dev(m.rc_at);
    check(std::memcmp(from.raw, rx.data() + offsetof(w::cm_msg, from.name), from.len) == 0,
          "the sender's address is not what arrived");
    (void)at;
    // The CM data an event hands the application: read from what arrived.
    std::uint8_t ev[w::cm_data_max];
    std::memcpy(ev, rx.data() + hdr, m.datalen);
    check(std::memcmp(ev, m.data, m.datalen) == 0, "the CM data is not what arrived");
    return 0;
}
