/* The whole endpoint API in one include (libfabric's <rdma/fabric.h> plus
 * fi_domain.h, fi_endpoint.h, fi_cm.h, fi_eq.h, fi_rma.h, fi_tagged.h,
 * fi_atomic.h; poll and wait sets). Names: fi_X is shunt::fabric::X; constants and error codes
 * keep libfabric's names and values. */
#pragma once

#include "fabric/atomic.h"
#include "fabric/av.h"
#include "fabric/cm.h"
#include "fabric/cntr.h"
#include "fabric/cq.h"
#include "fabric/domain.h"
#include "fabric/endpoint.h"
#include "fabric/eq.h"
#include "fabric/fabric.h"
#include "fabric/fid.h"
#include "fabric/flags.h"
#include "fabric/info.h"
#include "fabric/mr.h"
#include "fabric/msg.h"
#include "fabric/poll.h"
#include "fabric/rma.h"
#include "fabric/tagged.h"
