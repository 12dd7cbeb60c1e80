// The OPS_* operations by the names the guides' feature matrices use.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "vq/types.h"

namespace shunt::test {

/** "SEND" → vq::OPS_SEND, ... for every operation of IBV_WR API(3)'s table. */
inline const std::map<std::string, std::uint64_t> &vq_ops_by_name()
{
    static const std::map<std::string, std::uint64_t> ops = {
        {"SEND", vq::OPS_SEND}, {"SEND_WITH_IMM", vq::OPS_SEND_WITH_IMM},
        {"SEND_WITH_INV", vq::OPS_SEND_WITH_INV}, {"TSO", vq::OPS_TSO},
        {"RDMA_WRITE", vq::OPS_RDMA_WRITE}, {"RDMA_WRITE_WITH_IMM", vq::OPS_RDMA_WRITE_WITH_IMM},
        {"RDMA_READ", vq::OPS_RDMA_READ}, {"ATOMIC_CMP_AND_SWP", vq::OPS_ATOMIC_CMP_AND_SWP},
        {"ATOMIC_FETCH_AND_ADD", vq::OPS_ATOMIC_FETCH_AND_ADD}, {"BIND_MW", vq::OPS_BIND_MW},
        {"LOCAL_INV", vq::OPS_LOCAL_INV}, {"FLUSH", vq::OPS_FLUSH},
    };
    return ops;
}

} // namespace shunt::test
