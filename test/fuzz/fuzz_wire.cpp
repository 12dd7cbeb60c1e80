// libFuzzer: the vq provider's wire parsers (message header word, the fields
// after it, the rendezvous description) on arbitrary bytes from a peer.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "wire.h"

namespace {

void check(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "fuzz_wire: %s\n", what);
        std::abort();
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    namespace w = shunt::prov::vqprov;
    if (size < 5)
        return 0;
    std::uint32_t word;
    std::memcpy(&word, data, 4);
    w::hdr_word h = w::hdr_of(word);
    std::uint8_t flags = data[4];
    (void)h;
    data += 5;
    size -= 5;
    w::msg_fields f;
    std::size_t used = w::parse_fields(flags, data, size, f);
    check(used <= size && used <= w::fields_max, "parse_fields used more than it had");
    check(used == 0 || used == w::fields_len(flags), "parse_fields used a length its flags do not say");
    w::rndv_desc d;
    if (w::parse_desc(data, size, d)) {
        check(d.niov <= 4 && w::rndv_desc_len(d.niov) <= size, "parse_desc accepted a short description");
        std::uint64_t sum = 0;
        for (std::uint32_t i = 0; i < d.niov; i++)
            sum += d.iov[i].len;
        check(sum == d.total, "parse_desc accepted pieces that do not add up");
    }
    return 0;
}
