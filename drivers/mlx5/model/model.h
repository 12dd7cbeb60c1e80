/* drivers/mlx5/model: a software model of a ConnectX port, for the mlx5
 * driver's second back end.
 *
 * The model allocates what the hardware would (send/receive queue buffers,
 * doorbell records, a UAR page with the BlueFlame register pair per QP, CQ
 * buffers), is driven only by what the driver writes there (WQEs, doorbell
 * records, BlueFlame/doorbell stores), parses every WQE per the PRM,
 * executes it between modelled ports (in this process or another, over
 * shared-memory wires) and writes CQEs with owner bits, storing the owner
 * byte last. doc/guides/drivers/mlx5.md describes what it checks, its error
 * syndromes, its wire and its trace format.
 *
 * Besides the back end, this header is the model's test interface: stepping
 * the device by hand, fault injection, violation counters and the location
 * of a QP's queues. */
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace shunt::vq {
struct context;
}

namespace shunt::drv::mlx5 {
class backend;
}

namespace shunt::drv::mlx5::model {

/** Model-specific vendor syndromes (mlx5_err_cqe::vendor_err_synd): which
 *  check produced an error CQE. Real devices put firmware-specific values
 *  there; these are the model's, documented in the driver guide. */
enum vendor_synd : std::uint8_t {
    vs_none = 0,
    vs_bad_opcode = 0x01,       ///< opcode unknown or not valid on the QP type
    vs_bad_index = 0x02,        ///< opmod_idx_opcode index != the device's WQE counter
    vs_bad_qpn = 0x03,          ///< qpn_ds names another QP
    vs_bad_ds = 0x04,           ///< ds 0, past the WQE limit, or segments not matching it
    vs_inline_too_long = 0x05,  ///< inline data over the QP's max_inline_data
    vs_bad_lkey = 0x06,         ///< lkey unknown, of another PD, or SGE outside the region
    vs_no_local_write = 0x07,   ///< scatter into a region without local write
    vs_msg_too_long = 0x08,     ///< message over the port's limit (UD: the MTU)
    vs_bad_eth = 0x09,          ///< Ethernet segment: inline header too short, bad mss
    vs_bad_atomic = 0x0a,       ///< atomic result SGE not 8 bytes, or unaligned address
    vs_bad_umr = 0x0b,          ///< UMR: window unknown, region lacks MW_BIND, range or access
    vs_remote_access = 0x10,    ///< NAK remote access error received
    vs_remote_inval = 0x11,     ///< NAK invalid request received
    vs_remote_op = 0x12,        ///< NAK remote operational error received
    vs_retry = 0x13,            ///< transport retries exhausted
    vs_rnr = 0x14,              ///< RNR retries exhausted
    vs_recv_too_short = 0x20,   ///< responder: message longer than the receive WQE
    vs_recv_bad_lkey = 0x21,    ///< responder: receive WQE lkey bad
    vs_recv_inval = 0x22,       ///< responder: send-with-invalidate of a key it cannot invalidate
    vs_flush = 0x30,            ///< flushed (QP in ERR)
};

/** Create the model back end for model device @p index (SHUNT_MLX5_MODEL_*
 *  tunables apply). @return 0 and *out, or a negative code. */
int make_backend(int index, std::unique_ptr<backend> *out);

/** Options for contexts opened from now on in this process (tests). */
struct options {
    bool threaded = true;      ///< a device thread polls; false: only step() runs the device
    bool strict = true;        ///< fetch only what a doorbell covers; report violations
    unsigned eth_min_inline = 0; ///< 0 or 18
    std::string trace;         ///< trace file prefix ("" off; files are <prefix>.<pid>.<port>)
};
/** Set the options for later opens (overrides the tunables until reset_options()). */
void set_options(const options &o);
void reset_options();

/** Run the device of @p ctx until idle (any mode). @return units of work done. */
int step(vq::context *ctx);

/** Fault injection on the packets @p ctx's port sends. */
enum class fault_kind : std::uint8_t {
    drop,    ///< lose the packet
    corrupt, ///< flip a payload bit (the receiver's ICRC check drops it)
    stall,   ///< the port stops sending and receiving for stall_ms
};
struct fault {
    fault_kind kind = fault_kind::drop;
    std::uint32_t skip = 0;     ///< packets to let through first
    std::uint32_t count = 1;    ///< packets affected
    std::uint32_t stall_ms = 0; ///< stall: duration
    std::uint8_t only_opcode = 0xff; ///< affect only this BTH opcode (0xff: any)
};
int inject(vq::context *ctx, const fault &f);

/** Counters of the port of @p ctx. */
struct stats {
    std::uint64_t wqes = 0, cqes = 0, doorbells = 0, bf_copies = 0;
    std::uint64_t pkts_sent = 0, pkts_recv = 0, pkts_dropped = 0, retransmits = 0;
    std::uint64_t naks_sent = 0, rnr_naks = 0;
    std::uint64_t cq_arms = 0;    ///< CQ arm doorbells seen
    std::uint64_t violations = 0; ///< driver behaviour a strict device rejects (see last_violation)
};
int get_stats(vq::context *ctx, stats *out);
/** Text of the last violation ("" when none). */
std::string last_violation(vq::context *ctx);
/** Trace file of @p ctx's port ("" when tracing is off). Flushes it. */
std::string trace_path(vq::context *ctx);

} // namespace shunt::drv::mlx5::model
