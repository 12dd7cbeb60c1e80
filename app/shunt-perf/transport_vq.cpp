/* shunt-perf at the raw queue level (--vq --driver NAME): lib/vq drivers.
 *
 * HOOK POINT, empty until lib/vq lands. To add a driver: write a class that
 * follows the transport concept of transport.h (one QP of --qp-type, a CQ,
 * tx/rx buffers registered as MRs; send = wr_start/send/set_inline_data or
 * set_sge/wr_complete or the single-call post, recv = poll the CQ and repost
 * the receive; QP numbers exchanged over the oob_channel in open()), give it
 * a transport_ops table whose open() returns a typed_session<ThatClass>
 * (loops.h), and push the table here. Until then a driver name such as
 * 'shm' is rejected with exit code 2 ("not available in this build yet"). */
#include "transport.h"

namespace shunt::perf {

void register_vq(std::vector<const transport_ops *> &) {}

} // namespace shunt::perf
