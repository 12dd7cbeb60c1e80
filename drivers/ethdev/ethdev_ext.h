/* drivers/ethdev: what the driver offers beyond lib/vq, for tools and tests
 * that link the driver (shunt-fwd, shunt-info, the ethdev tests). Nothing in
 * here is needed to use an ethdev device through lib/vq. No DPDK header is
 * included: callers stay out of rte_*. */
#pragma once

#include <cstdint>
#include <string>

#include "vq/vq.h"

namespace shunt::drv::ethdev {

/** Counters of a port: frames the driver dropped, by reason, and the
 *  PMD's own statistics. */
enum counter : unsigned {
    c_rx_frames,        ///< frames received on queues the driver polls
    c_tx_frames,        ///< frames accepted by the PMD
    c_rx_short,         ///< RoCE/ARP/IPv4 frame shorter than its headers say
    c_rx_bad_len,       ///< IPv4 or UDP length field inconsistent with the frame
    c_rx_bad_ip,        ///< IPv4 header checksum, options or fragment
    c_rx_bad_icrc,      ///< RoCE ICRC mismatch
    c_rx_bad_opcode,    ///< BTH opcode this driver does not speak, or of another QP type
    c_rx_bad_bth,       ///< BTH version, P_Key, pad or header length invalid
    c_rx_no_qp,         ///< destination QP number unknown
    c_rx_qp_full,       ///< the QP's receive ring was full
    c_rx_no_raw,        ///< non-RoCE frame and no RAW_PACKET QP on the shared queue
    c_rx_seq,           ///< RC/UC packet outside the expected PSN (duplicate or gap)
    c_rx_qkey,          ///< UD send with the wrong Q_Key
    c_rx_multiseg,      ///< headers not in the first segment
    c_tx_retransmit,    ///< RC packets sent again (go-back-N)
    c_tx_nak,           ///< RC NAKs sent (sequence error, RNR, invalid, access)
    c_arp_replies,      ///< ARP requests for our address answered
    c_tx_busy,          ///< times the PMD took fewer frames than offered (queue full, link down)
    c_tx_link_down,     ///< frames dropped because the link was down (the wire lost them)
    c_tx_loopback,      ///< RoCE frames to the port's own MAC and IPv4, handed to its receive path (no PMD)
    num_counters
};
/** Name of a counter ("rx_bad_icrc", ...). */
const char *counter_name(unsigned c) noexcept;

struct port_counters {
    std::uint64_t drv[num_counters];
    /* rte_eth_stats of the port */
    std::uint64_t ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf;
};

/** What a port is (shunt-info -D prints the same). */
struct port_info {
    std::string name;          ///< the device name (the DPDK port name)
    std::string driver;        ///< PMD, e.g. "net_memif"
    std::uint8_t mac[6];
    std::uint32_t ipv4;        ///< network order: GID 0 is ::ffff:<ipv4>
    std::uint16_t mtu;
    std::uint32_t path_mtu;    ///< RoCE payload bytes per packet
    std::uint16_t rx_queues, tx_queues, max_rx_queues, max_tx_queues;
    std::uint64_t tx_offload_capa, rx_offload_capa; ///< RTE_ETH_*_OFFLOAD_* bits
    bool hw_tso, hw_csum, hw_rx_csum;               ///< offloads the driver uses
    bool started;
};

/** @return true when @p dev is an ethdev device. */
bool is_ethdev(const vq::device *dev) noexcept;
/** @return 0 and *out for ethdev device @p dev; -FI_EINVAL otherwise. */
[[nodiscard]] int query_port(const vq::device *dev, port_info *out);
/** @return 0 and *out; -FI_EINVAL not an ethdev device. */
[[nodiscard]] int query_counters(const vq::device *dev, port_counters *out);
/** Configure @p n queue pairs on @p dev (before it is first opened; the
 *  default is SHUNT_ETHDEV_QUEUES). Queue pairs beyond the first can be
 *  owned by RAW_PACKET QPs with a thread domain, one each.
 *  @return 0; -FI_EINVAL not ethdev, n 0 or over the PMD's limit;
 *  -FI_EBUSY already started. */
[[nodiscard]] int set_port_queues(const vq::device *dev, unsigned n);
/** Printable name of an offload bit set (tx or rx), "none" when empty. */
std::string offload_names(std::uint64_t bits, bool tx);

} // namespace shunt::drv::ethdev
