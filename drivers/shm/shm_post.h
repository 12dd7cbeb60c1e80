/* drivers/shm: declarations shared by the posting files. */
#pragma once

#include "shm.h"

namespace shunt::drv::shm {

/** Fill q's fast-path pointers from its type, send_ops_flags and threading. */
void install_fast_path(shm_qp *q) noexcept;
/** Latch an error into q's current batch (the stubs' target). */
void latch_stub(vq::qp *q, int err) noexcept;

} // namespace shunt::drv::shm
