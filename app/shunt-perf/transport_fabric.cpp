/* shunt-perf at the endpoint level (-p PROVIDER): lib/fabric providers.
 *
 * HOOK POINT, empty until lib/fabric lands. To add the providers: one class
 * following the transport concept of transport.h, instantiated per endpoint
 * type and operation if that keeps branches out of the loop (getinfo with
 * -e/--op as hints, fabric/domain/endpoint, CQ bound with selective
 * completion for 'rate', AV for RDM/DGRAM, MRs on tx/rx buffers; the
 * endpoint names exchanged over the oob_channel in open(); send/inject/recv
 * mapped to fi_send/fi_inject/fi_tsend/fi_write/fi_atomic per --op), one
 * transport_ops table per provider name whose open() returns a
 * typed_session<ThatClass> (loops.h), pushed here. Until then '-p shm' is
 * rejected with exit code 2 ("not available in this build yet"). */
#include "transport.h"

namespace shunt::perf {

void register_fabric(std::vector<const transport_ops *> &) {}

} // namespace shunt::perf
