/* drivers/ethdev: ports — probing, configuration, the shared receive path
 * (classification and hand-over by QP number), transmit, ARP. */
#include <arpa/inet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_kvargs.h>
#include <rte_ethdev.h>
#include <rte_eth_ring.h>
#include <rte_ring.h>

#include "crc32.h"
#include "env/env.h"
#include "env/log.h"
#include "env/tsc.h"
#include "env/tunable.h"
#include "eth.h"
#include "eth_tsan.h"

namespace shunt::drv::ethdev {

SHUNT_LOG_COMPONENT(eth_log, "ethdev");

SHUNT_TUNABLE(t_addrs, "SHUNT_ETHDEV_ADDRS", string, "",
              "ethdev driver: IPv4 address of each port (its GID 0), e.g. net_af_packet0=10.77.0.1,net_ring_pair0b=10.9.0.2; "
              "default: the kernel interface's address, else 169.254.x.y from the MAC",
              "ethdev");
SHUNT_TUNABLE(t_queues, "SHUNT_ETHDEV_QUEUES", integer, "1",
              "ethdev driver: queue pairs per port (the first is shared; the others go to RAW_PACKET QPs "
              "with a thread domain)",
              "ethdev");
SHUNT_TUNABLE(t_mbufs, "SHUNT_ETHDEV_MBUFS", integer, "8191", "ethdev driver: packet buffers per port", "ethdev");
SHUNT_TUNABLE(t_ring_pairs, "SHUNT_ETHDEV_RING_PAIRS", integer, "0",
              "ethdev driver: create this many cross-wired pairs of net_ring ports in this process "
              "(devices net_ring_pair<i>a and net_ring_pair<i>b; tests and benchmarks)",
              "ethdev");
SHUNT_TUNABLE(t_zcopy, "SHUNT_ETHDEV_ZCOPY_BYTES", integer, "4096",
              "ethdev driver: RAW_PACKET and TSO sends of at least this many SGE bytes go out zero-copy "
              "(external buffers) instead of copied (0: always copy)",
              "ethdev");
SHUNT_TUNABLE(t_link_wait, "SHUNT_ETHDEV_LINK_WAIT_MS", integer, "3000",
              "ethdev driver: how long connecting a QP or creating an address handle waits for the link", "ethdev");
SHUNT_TUNABLE(t_arp_ms, "SHUNT_ETHDEV_ARP_MS", integer, "1000",
              "ethdev driver: how long address resolution (ARP) waits for an answer", "ethdev");
SHUNT_TUNABLE(t_mtu, "SHUNT_ETHDEV_MTU", integer, "0",
              "ethdev driver: MTU to set on every port at start (0: the kernel interface's where the PMD is "
              "bound to one and accepts it, else the PMD's)",
              "ethdev");
SHUNT_TUNABLE(t_rxd, "SHUNT_ETHDEV_RXD", integer, "1024", "ethdev driver: receive descriptors per queue", "ethdev");
SHUNT_TUNABLE(t_txd, "SHUNT_ETHDEV_TXD", integer, "1024", "ethdev driver: transmit descriptors per queue", "ethdev");
SHUNT_TUNABLE(t_rx_csum, "SHUNT_ETHDEV_RX_CSUM", boolean, "1",
              "ethdev driver: RAW_PACKET receives check IPv4/TCP/UDP checksums in software when the port "
              "does not (sets WC_IP_CSUM_OK)",
              "ethdev");

namespace {

std::uint32_t tun(const env::tunable &t, std::int64_t lo, std::int64_t hi, std::int64_t def)
{
    std::int64_t v = def;
    if (t.as_int(v) < 0 || v < lo || v > hi) {
        SHUNT_LOG(eth_log, warning, "%s out of range [%lld, %lld]: using %lld", t.name, static_cast<long long>(lo),
                  static_cast<long long>(hi), static_cast<long long>(def));
        v = def;
    }
    return static_cast<std::uint32_t>(v);
}

limits make_limits()
{
    limits l{};
    l.queues = tun(t_queues, 1, RTE_MAX_QUEUES_PER_PORT, 1);
    l.mbufs = tun(t_mbufs, 1023, 1 << 22, 8191);
    l.ring_pairs = tun(t_ring_pairs, 0, 16, 0);
    l.zcopy_bytes = tun(t_zcopy, 0, 1 << 30, 4096);
    l.link_wait_ms = tun(t_link_wait, 0, 600000, 3000);
    l.arp_ms = tun(t_arp_ms, 1, 600000, 1000);
    l.mtu = tun(t_mtu, 0, 65535, 0);
    l.rxd = tun(t_rxd, 64, 32768, 1024);
    l.txd = tun(t_txd, 64, 32768, 1024);
    bool b = true;
    l.rx_csum = t_rx_csum.as_bool(b) == 0 ? b : true;
    return l;
}

std::string mac_str(const rte_ether_addr &m)
{
    char b[24];
    std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m.addr_bytes[0], m.addr_bytes[1], m.addr_bytes[2],
                  m.addr_bytes[3], m.addr_bytes[4], m.addr_bytes[5]);
    return b;
}
std::string ip_str(std::uint32_t ip)
{
    char b[INET_ADDRSTRLEN] = "";
    in_addr a{ip};
    inet_ntop(AF_INET, &a, b, sizeof b);
    return b;
}

/** The address SHUNT_ETHDEV_ADDRS gives port @p name, or 0. */
std::uint32_t configured_ip(const std::string &name)
{
    std::stringstream ss(t_addrs.value());
    std::string item;
    while (std::getline(ss, item, ',')) {
        auto eq = item.find('=');
        if (eq == std::string::npos || item.substr(0, eq) != name)
            continue;
        in_addr a{};
        if (inet_pton(AF_INET, item.substr(eq + 1).c_str(), &a) == 1)
            return a.s_addr;
        SHUNT_LOG(eth_log, warning, "SHUNT_ETHDEV_ADDRS: bad address for %s: %s", name.c_str(), item.c_str());
    }
    return 0;
}

/** Ask the kernel about interface @p ifindex: ioctl @p request (SIOCGIF*)
 *  on @p r, its name filled in. @return false: no such interface or the
 *  call failed. */
bool kernel_ifreq(unsigned ifindex, unsigned long request, ifreq &r)
{
    char name[IF_NAMESIZE];
    if (!ifindex || !if_indextoname(ifindex, name))
        return false;
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    r = ifreq{};
    std::snprintf(r.ifr_name, sizeof r.ifr_name, "%s", name);
    bool ok = ::ioctl(fd, request, &r) == 0;
    ::close(fd);
    return ok;
}

/** IPv4 address of kernel interface @p ifindex (af_packet, af_xdp, tap), or 0. */
std::uint32_t kernel_ip(unsigned ifindex)
{
    ifreq r;
    return kernel_ifreq(ifindex, SIOCGIFADDR, r) ? reinterpret_cast<sockaddr_in *>(&r.ifr_addr)->sin_addr.s_addr : 0;
}

/** The MTU of kernel interface @p ifindex (0: none or unknown). A PMD
 *  bound to a kernel interface (net_af_packet, net_af_xdp, net_tap)
 *  reports DPDK's default MTU, not the interface's. */
std::uint16_t kernel_mtu(unsigned ifindex)
{
    ifreq r;
    if (!kernel_ifreq(ifindex, SIOCGIFMTU, r) || r.ifr_mtu <= 0 || r.ifr_mtu > UINT16_MAX)
        return 0;
    return static_cast<std::uint16_t>(r.ifr_mtu);
}

/** net_af_packet's frame size: the vdev's framesz argument, 2048 by
 *  default (0: another PMD). Its receive queues refuse buffers with less
 *  room than a frame less 32 bytes (TPACKET2_HDRLEN less the sockaddr_ll),
 *  and it carries every frame that fits a frame after the TPACKET_V2
 *  header, the sockaddr_ll and the kernel's alignment before the MAC header
 *  (80 bytes), whatever MTU DPDK lets be set on it (DPDK 22.11's PMD
 *  reports max_rx_pktlen 1518 whatever its frames, so rte_eth_dev_set_mtu
 *  refuses every MTU above 1500). */
std::uint32_t af_packet_framesz(const port *p)
{
    if (!p->info.driver_name || std::strcmp(p->info.driver_name, "net_af_packet") != 0)
        return 0;
    std::uint32_t framesz = 2048;
    const rte_devargs *da = p->device ? rte_dev_devargs(p->device) : nullptr;
    if (da && da->args) {
        if (rte_kvargs *kv = rte_kvargs_parse(da->args, nullptr)) {
            if (const char *v = rte_kvargs_get(kv, "framesz"))
                framesz = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
            rte_kvargs_free(kv);
        }
    }
    return framesz;
}

/** The largest MTU net_af_packet with frames of @p framesz carries: the
 *  frame less 80 bytes (see af_packet_framesz), an Ethernet header and a
 *  VLAN tag. */
constexpr std::uint32_t af_packet_max_mtu(std::uint32_t framesz)
{
    return framesz > 80 + 18 ? framesz - 80 - 18 : 0;
}

/** Queue pairs of each net_ring port of SHUNT_ETHDEV_RING_PAIRS (the port
 *  uses SHUNT_ETHDEV_QUEUES of them, or set_port_queues'). */
constexpr unsigned ring_pair_queues = 2;

/** 169.254.x.y from the last two bytes of the MAC (x, y kept in 1..254). */
std::uint32_t link_local(const rte_ether_addr &m)
{
    unsigned x = m.addr_bytes[4] % 254 + 1, y = m.addr_bytes[5] % 254 + 1;
    return htonl((169u << 24) | (254u << 16) | (x << 8) | y);
}

bool probed_ok = false;

/** Is there anything for this driver to find? Without EAL arguments that
 *  name devices the EAL has no port, and initialising it only for that
 *  would cost every vq user its memory. */
bool eal_has_ports()
{
    if (env::initialized())
        return true;
    if (lim().ring_pairs)
        return true;
    const env::tunable *a = env::find_tunable("SHUNT_EAL_ARGS");
    if (!a)
        return false;
    std::istringstream in(a->value());
    std::string w;
    while (in >> w)
        if (w.rfind("--vdev", 0) == 0 || w.rfind("-a", 0) == 0 || w.rfind("--allow", 0) == 0)
            return true;
    return false;
}

int make_ring_pairs(unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        char pa[32], pb[32];
        std::snprintf(pa, sizeof pa, "pair%ua", i); // the PMD names the port net_ring_pair<i>a
        std::snprintf(pb, sizeof pb, "pair%ub", i);
        // a -> b on rings "a<q>", b -> a on rings "b<q>": queue q of one
        // port feeds queue q of the other. Each ring has one producer (a
        // port's tx queue, serialised by the driver) and one consumer.
        rte_ring *ra[ring_pair_queues], *rb[ring_pair_queues];
        for (unsigned q = 0; q < ring_pair_queues; q++) {
            char an[RTE_RING_NAMESIZE], bn[RTE_RING_NAMESIZE];
            std::snprintf(an, sizeof an, "shunt_rp%ua%u", i, q);
            std::snprintf(bn, sizeof bn, "shunt_rp%ub%u", i, q);
            ra[q] = rte_ring_create(an, 4096, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
            rb[q] = rte_ring_create(bn, 4096, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
            if (!ra[q] || !rb[q]) {
                SHUNT_LOG(eth_log, error, "cannot create the rings of pair %u", i);
                return -FI_ENOMEM;
            }
        }
        if (rte_eth_from_rings(pa, rb, ring_pair_queues, ra, ring_pair_queues, SOCKET_ID_ANY) < 0 ||
            rte_eth_from_rings(pb, ra, ring_pair_queues, rb, ring_pair_queues, SOCKET_ID_ANY) < 0) {
            SHUNT_LOG(eth_log, error, "cannot create ring port pair %u", i);
            return -FI_ENOMEM;
        }
    }
    return 0;
}

void describe(port *p)
{
    std::ostringstream d;
    d << "DPDK port " << p->id << " (" << (p->info.driver_name ? p->info.driver_name : "?") << "): MAC "
      << mac_str(p->mac) << ", IPv4 " << ip_str(p->ipv4) << " (GID 0 ::ffff:" << ip_str(p->ipv4) << "), MTU "
      << p->mtu << ", path MTU " << p->path_mtu << ", queues " << p->nq << " (max rx " << p->info.max_rx_queues
      << ", tx " << p->info.max_tx_queues << "), tx offloads " << offload_names(p->info.tx_offload_capa, true)
      << ", rx offloads " << offload_names(p->info.rx_offload_capa, false) << ", TSO "
      << (p->hw_tso ? "port" : "software (rte_gso)") << ", checksums " << (p->hw_csum ? "port" : "software");
    p->description = d.str();
    p->dev.description = p->description.c_str();
}

/** Path MTU: the largest IBTA MTU whose packets (with the largest
 *  extension headers) fit the port's MTU and our buffers. */
std::uint32_t path_mtu_of(std::uint32_t mtu)
{
    for (std::uint32_t pm = 4096; pm >= 256; pm /= 2)
        if (wire::ip_len + wire::udp_len + wire::max_transport_hdr + pm + wire::icrc_len + wire::imm_len <= mtu)
            return pm;
    return 256;
}

} // namespace

const limits &lim() noexcept
{
    static const limits l = make_limits();
    return l;
}

std::vector<port *> &ports()
{
    // Never destroyed: ports live as long as the process (DPDK's ports do),
    // and other static destructors may still reach them at exit.
    static auto *v = new std::vector<port *>;
    return *v;
}

const char *counter_name(unsigned c) noexcept
{
    static const char *const n[num_counters] = {
        "rx_frames", "tx_frames", "rx_short", "rx_bad_len", "rx_bad_ip", "rx_bad_icrc", "rx_bad_opcode",
        "rx_bad_bth", "rx_no_qp", "rx_qp_full", "rx_no_raw", "rx_seq", "rx_qkey", "rx_multiseg",
        "tx_retransmit", "tx_nak", "arp_replies", "tx_busy",
        "tx_link_down", "tx_loopback",
    };
    return c < num_counters ? n[c] : "unknown";
}

std::string offload_names(std::uint64_t bits, bool tx)
{
    std::string s;
    for (unsigned b = 0; b < 64; b++) {
        if (!(bits & (1ull << b)))
            continue;
        const char *n = tx ? rte_eth_dev_tx_offload_name(1ull << b) : rte_eth_dev_rx_offload_name(1ull << b);
        s += s.empty() ? "" : "|";
        for (const char *c = n; c && *c; c++)
            s += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
    }
    return s.empty() ? "none" : s;
}

/** Probe: one device per DPDK port. */
int probe_ports(std::vector<vq::device *> &out)
{
    if (!eal_has_ports())
        return 0;
    int rc = env::ensure_init();
    if (rc < 0)
        return rc;
    if (lim().ring_pairs && (rc = make_ring_pairs(lim().ring_pairs)) < 0)
        return rc;
    std::uint16_t id;
    RTE_ETH_FOREACH_DEV(id)
    {
        auto *p = new (std::nothrow) port;
        if (!p)
            return -FI_ENOMEM;
        char name[RTE_ETH_NAME_MAX_LEN];
        if (rte_eth_dev_get_name_by_port(id, name) != 0 || rte_eth_dev_info_get(id, &p->info) != 0) {
            delete p;
            continue;
        }
        p->id = id;
        p->name = name;
        // Virtual devices copy frames (or hand mbufs over): any address will
        // do for zero-copy. Others DMA and need mapped memory.
        p->device = p->info.device;
        p->dma_virtual = !p->device || std::strcmp(rte_bus_name(rte_dev_bus(p->device)), "vdev") == 0;
        for (auto &q : p->qps)
            q.store(nullptr, std::memory_order_relaxed);
        rte_eth_macaddr_get(id, &p->mac);
        if (rte_is_zero_ether_addr(&p->mac)) {
            // net_ring has none: a random locally administered unicast one.
            rte_eth_random_addr(p->mac.addr_bytes);
            rte_eth_dev_default_mac_addr_set(id, &p->mac);
        }
        p->ipv4 = configured_ip(p->name);
        if (!p->ipv4)
            p->ipv4 = kernel_ip(p->info.if_index);
        if (!p->ipv4)
            p->ipv4 = link_local(p->mac);
        std::uint16_t mtu = 1500;
        if (rte_eth_dev_get_mtu(id, &mtu) == 0)
            p->mtu = mtu;
        if (lim().mtu) {
            p->mtu = static_cast<std::uint16_t>(lim().mtu);
        } else if (std::uint16_t k = kernel_mtu(p->info.if_index); k && k != p->mtu) {
            // The kernel interface's MTU is the link's: taken when the PMD
            // accepts it (set at start; kept as the PMD's if it refuses).
            if (k >= p->info.min_mtu && k <= p->info.max_mtu) {
                p->mtu = k;
                p->kernel_mtu = true;
            } else {
                SHUNT_LOG(eth_log, warning, "%s: interface MTU %u is outside the PMD's %u-%u: using %u", p->name.c_str(),
                          k, p->info.min_mtu, p->info.max_mtu, p->mtu);
            }
        }
        p->nq = static_cast<std::uint16_t>(std::min<std::uint32_t>(
            lim().queues, std::min(p->info.max_rx_queues, p->info.max_tx_queues)));
        if (p->nq == 0)
            p->nq = 1;
        p->hw_tso = p->info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_TCP_TSO;
        p->hw_csum = (p->info.tx_offload_capa & (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM |
                                                 RTE_ETH_TX_OFFLOAD_UDP_CKSUM)) ==
                     (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM);
        p->hw_rx_csum = (p->info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM |
                                                    RTE_ETH_RX_OFFLOAD_UDP_CKSUM)) ==
                        (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
        p->path_mtu = path_mtu_of(p->mtu);
        p->max_frame = wire::eth_len + 4 + p->mtu;
        std::random_device rd;
        p->salt = rd() & 0x3ff;
        p->dev.name = p->name.c_str();
        describe(p);
        ports().push_back(p);
        port_stats_open(p);
        out.push_back(&p->dev);
    }
    probed_ok = true;
    return 0;
}

port *port_of_device(const vq::device *d) noexcept
{
    for (port *p : ports())
        if (&p->dev == d)
            return p;
    return nullptr;
}

int port_start(port *p)
{
    if (p->configured)
        return 0;
    const limits &l = lim();
    // net_af_packet: room for a whole frame of its (see af_packet_framesz).
    const std::uint32_t framesz = af_packet_framesz(p);
    std::uint32_t room = std::max<std::uint32_t>({2048, p->max_frame, framesz > 32 ? framesz - 32 : 0}) +
                         RTE_PKTMBUF_HEADROOM;
    if (room > 65535)
        room = 65535;
    char n1[24], n2[24], n3[24];
    std::snprintf(n1, sizeof n1, "shunt.eth%u.d", p->id);
    std::snprintf(n2, sizeof n2, "shunt.eth%u.x", p->id);
    std::snprintf(n3, sizeof n3, "shunt.eth%u.h", p->id);
    int rc = p->pool.create_mbufs(n1, l.mbufs, room, 256);
    if (rc == 0)
        rc = p->bare.create_mbufs(n2, l.mbufs, 0, 256);
    if (rc == 0)
        rc = p->hdrs.create_mbufs(n3, 2047, 256 + RTE_PKTMBUF_HEADROOM, 64);
    if (rc < 0) {
        SHUNT_LOG(eth_log, error, "%s: no memory for packet buffers (%u of %u bytes): %s", p->name.c_str(), l.mbufs,
                  room, shunt::strerror(rc));
        p->pool.destroy();
        p->bare.destroy();
        p->hdrs.destroy();
        return rc;
    }
    rte_eth_conf conf{};
    const std::uint64_t tcapa = p->info.tx_offload_capa, rcapa = p->info.rx_offload_capa;
    conf.txmode.offloads = tcapa & (RTE_ETH_TX_OFFLOAD_MULTI_SEGS | RTE_ETH_TX_OFFLOAD_TCP_TSO |
                                    RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM |
                                    RTE_ETH_TX_OFFLOAD_UDP_CKSUM);
    if (!p->hw_csum)
        conf.txmode.offloads &= ~(RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM |
                                  RTE_ETH_TX_OFFLOAD_UDP_CKSUM);
    if (p->hw_rx_csum)
        conf.rxmode.offloads = rcapa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM |
                                        RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
    if (rcapa & RTE_ETH_RX_OFFLOAD_SCATTER)
        conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_SCATTER;
    if (p->nq > 1 && p->info.flow_type_rss_offloads) {
        conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
        conf.rx_adv_conf.rss_conf.rss_hf = p->info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP |
                                                                             RTE_ETH_RSS_TCP);
    }
    p->tx_offloads = conf.txmode.offloads;
    p->rx_offloads = conf.rxmode.offloads;
    p->need_prepare = p->tx_offloads & (RTE_ETH_TX_OFFLOAD_TCP_TSO | RTE_ETH_TX_OFFLOAD_IPV4_CKSUM);
    int e = rte_eth_dev_configure(p->id, p->nq, p->nq, &conf);
    if (e < 0) {
        SHUNT_LOG(eth_log, error, "%s: rte_eth_dev_configure(%u queues): %s", p->name.c_str(), p->nq,
                  rte_strerror(-e));
        return -FI_EIO;
    }
    p->rxd = static_cast<std::uint16_t>(l.rxd);
    p->txd = static_cast<std::uint16_t>(l.txd);
    rte_eth_dev_adjust_nb_rx_tx_desc(p->id, &p->rxd, &p->txd);
    int sock = rte_eth_dev_socket_id(p->id);
    for (std::uint16_t q = 0; q < p->nq && e == 0; q++) {
        e = rte_eth_rx_queue_setup(p->id, q, p->rxd, sock < 0 ? SOCKET_ID_ANY : sock, nullptr, p->pool.raw());
        if (e == 0)
            e = rte_eth_tx_queue_setup(p->id, q, p->txd, sock < 0 ? SOCKET_ID_ANY : sock, nullptr);
    }
    if (e == 0 && lim().mtu)
        e = rte_eth_dev_set_mtu(p->id, p->mtu);
    bool mtu_by_frames = false; // net_af_packet: the interface's MTU without the PMD's consent
    if (e == 0 && p->kernel_mtu && (e = rte_eth_dev_set_mtu(p->id, p->mtu)) < 0) {
        if (p->mtu <= af_packet_max_mtu(framesz)) {
            SHUNT_LOG(eth_log, info, "%s: MTU %u: the interface's, which net_af_packet's frames hold", p->name.c_str(),
                      p->mtu);
            mtu_by_frames = true;
        } else {
            SHUNT_LOG(eth_log, warning, "%s: the PMD refuses the interface's MTU %u (%s): using its own",
                      p->name.c_str(), p->mtu, rte_strerror(-e));
            p->kernel_mtu = false;
        }
        e = 0;
    }
    if (e == 0)
        e = rte_eth_dev_start(p->id);
    if (e < 0) {
        SHUNT_LOG(eth_log, error, "%s: queue setup / start: %s", p->name.c_str(), rte_strerror(-e));
        return -FI_EIO;
    }
    std::uint16_t mtu;
    if (!lim().mtu && !mtu_by_frames && rte_eth_dev_get_mtu(p->id, &mtu) == 0)
        p->mtu = mtu;
    p->path_mtu = path_mtu_of(p->mtu);
    p->max_frame = wire::eth_len + 4 + p->mtu;
    p->gso.direct_pool = p->hdrs.raw();
    p->gso.indirect_pool = p->bare.raw();
    p->gso.gso_types = RTE_ETH_TX_OFFLOAD_TCP_TSO;
    p->gso.flag = 0;
    p->configured = true;
    port_unowned_queues(p);
    describe(p);
    SHUNT_LOG(eth_log, info, "%s started: %s", p->name.c_str(), p->description.c_str());
    return 0;
}

bool port_link_up(port *p) noexcept
{
    rte_eth_link link{};
    return rte_eth_link_get_nowait(p->id, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
}

void port_wait_link(port *p)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(lim().link_wait_ms);
    for (;;) {
        rte_eth_link link{};
        if (rte_eth_link_get_nowait(p->id, &link) == 0 && link.link_status == RTE_ETH_LINK_UP)
            return;
        if (std::chrono::steady_clock::now() >= end) {
            SHUNT_LOG(eth_log, notice, "%s: link still down after %u ms", p->name.c_str(), lim().link_wait_ms);
            return;
        }
        port_poll(p);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

namespace {

/** Frames @p m[0..n) to the PMD's queue @p q. */
inline std::uint16_t tx_pmd(port *p, std::uint16_t q, bool locked, rte_mbuf **m, std::uint16_t n) noexcept
{
    if (locked)
        p->tx_lock.lock();
    tsan_handed(m, n);
    std::uint16_t k = rte_eth_tx_burst(p->id, q, m, n);
    if (locked)
        p->tx_lock.unlock();
    if (k)
        p->count(c_tx_frames, k);
    if (k < n)
        p->count(c_tx_busy);
    return k;
}

/** A frame's first segment, its ethertype and where its network header
 *  starts (frame_of). */
struct frame_view {
    const std::uint8_t *f;
    std::uint32_t seg, l3;
    std::uint16_t et;
};
bool frame_of(const rte_mbuf *m, frame_view &v) noexcept;
bool roce_for_us(const port *p, const std::uint8_t *f, std::uint32_t seg, std::uint32_t l3,
                 std::uint16_t et) noexcept;

/** Is @p m a RoCE frame to the port itself? */
bool to_self(const port *p, const rte_mbuf *m) noexcept
{
    frame_view v;
    return frame_of(m, v) && roce_for_us(p, v.f, v.seg, v.l3, v.et);
}

/** port_tx on a port that loops: runs of frames for the wire go to the
 *  PMD, runs for the port itself to its loop ring, in order; a run that
 *  does not fit ends the call (@return the frames taken, a prefix). */
SHUNT_COLD std::uint16_t tx_looping(port *p, std::uint16_t q, bool locked, rte_mbuf **m, std::uint16_t n) noexcept
{
    std::uint16_t done = 0;
    while (done < n) {
        const bool self = to_self(p, m[done]);
        std::uint16_t run = 1;
        while (done + run < n && to_self(p, m[done + run]) == self)
            run++;
        std::uint16_t k;
        if (self) {
            tsan_handed(m + done, run);
            k = static_cast<std::uint16_t>(
                rte_ring_mp_enqueue_burst(p->loop, reinterpret_cast<void *const *>(m + done), run, nullptr));
            if (k)
                p->count(c_tx_loopback, k);
            if (k < run)
                p->count(c_tx_busy);
        } else {
            k = tx_pmd(p, q, locked, m + done, run);
        }
        done = static_cast<std::uint16_t>(done + k);
        if (k < run)
            break;
    }
    return done;
}

} // namespace

std::uint16_t port_tx(port *p, std::uint16_t q, bool locked, rte_mbuf **m, std::uint16_t n) noexcept
{
    if (p->loop_on.load(std::memory_order_relaxed)) [[unlikely]]
        return tx_looping(p, q, locked, m, n);
    return tx_pmd(p, q, locked, m, n);
}

int port_loop_on(port *p)
{
    std::lock_guard<std::mutex> g(p->setup_lock);
    if (p->loop)
        return 0;
    char name[RTE_RING_NAMESIZE];
    std::snprintf(name, sizeof name, "shunt_lo%u", unsigned(p->id));
    // Many producers (every QP's transmit), one consumer (the shared
    // receive path, under rx_lock). As deep as a port's receive ring.
    p->loop = rte_ring_create(name, pow2_at_least(p->rxd), SOCKET_ID_ANY, RING_F_SC_DEQ);
    if (!p->loop) {
        SHUNT_LOG(eth_log, error, "%s: cannot create the loopback ring", p->name.c_str());
        return -FI_ENOMEM;
    }
    p->loop_on.store(true, std::memory_order_release);
    SHUNT_LOG(eth_log, info, "%s: a destination is the port itself; its frames loop back", p->name.c_str());
    return 0;
}

/* ---------------- Shared receive path ---------------- */

namespace {

/** Hand @p m to QP @p q's ring. */
inline void hand_over(port *p, eth_qp *q, rte_mbuf *m, std::uint16_t bth, std::uint16_t hlen,
                      std::uint32_t plen) noexcept
{
    std::uint32_t t = q->rx_tail.load(std::memory_order_relaxed);
    if (t - q->rx_head.load(std::memory_order_acquire) > q->rx_mask) {
        p->count(c_rx_qp_full);
        if (q->st)
            q->st->rx_ring_full.add(); // we hold the port's receive lock: the field's one writer
        rte_pktmbuf_free(m);
        return;
    }
    q->rx[t & q->rx_mask] = rxpkt{m, bth, hlen, plen};
    // Publish the slot to the QP's consumer: the entry before tail.
    q->rx_tail.store(t + 1, std::memory_order_release);
    q->busy.store(true, std::memory_order_relaxed);
}

/** A frame for the RAW_PACKET QPs on queue 0 (every one gets it). */
void to_raw(port *p, rte_mbuf *m) noexcept
{
    std::uint32_t n = p->nraw;
    if (n == 0) {
        p->count(c_rx_no_raw);
        rte_pktmbuf_free(m);
        return;
    }
    if (n > 1)
        rte_mbuf_refcnt_update(m, static_cast<std::int16_t>(n - 1));
    for (std::uint32_t i = 0; i < n; i++)
        hand_over(p, p->raw[i], m, 0, 0, m->pkt_len);
}

SHUNT_COLD void drop(port *p, rte_mbuf *m, counter c) noexcept
{
    p->count(c);
    rte_pktmbuf_free(m);
}

/** A RoCEv2 frame for us: validate every field, then hand it to its QP. */
SHUNT_ALWAYS_INLINE void roce_input(port *p, rte_mbuf *m, std::uint32_t l3) noexcept
{
    const std::uint8_t *f = rte_pktmbuf_mtod(m, const std::uint8_t *);
    const std::uint32_t seg = m->data_len, total = m->pkt_len;
    const std::uint8_t *ip = f + l3;
    // l3 + 20 + 8 <= seg was checked by the caller.
    std::uint32_t tot = wire::ld16(ip + 2);
    if (tot < wire::ip_len + wire::udp_len + wire::bth_len + wire::icrc_len || tot > total - l3)
        return drop(p, m, tot > total - l3 ? c_rx_short : c_rx_bad_len);
    if ((wire::ld16(ip + 6) & 0x3fff) != 0) // MF or a fragment offset
        return drop(p, m, c_rx_bad_ip);
    if (!(m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_GOOD) && !wire::ip_hdr_ok(ip))
        return drop(p, m, c_rx_bad_ip);
    const std::uint8_t *udp = ip + wire::ip_len;
    std::uint32_t ulen = wire::ld16(udp + 4);
    if (ulen != tot - wire::ip_len)
        return drop(p, m, c_rx_bad_len);
    std::uint32_t bth = l3 + wire::ip_len + wire::udp_len;
    if (bth + wire::bth_len > seg)
        return drop(p, m, c_rx_multiseg);
    const std::uint8_t *b = f + bth;
    const wire::op_desc &d = wire::ops.d[wire::bth_opcode(b)];
    if (d.kind == wire::k_invalid)
        return drop(p, m, c_rx_bad_opcode);
    if (wire::bth_tver(b) != 0 || (wire::bth_pkey(b) & 0x7fff) != 0x7fff)
        return drop(p, m, c_rx_bad_bth);
    if (bth + d.hlen > seg)
        return drop(p, m, c_rx_multiseg);
    std::uint32_t pad = wire::bth_pad(b);
    if (ulen < wire::udp_len + d.hlen + pad + wire::icrc_len)
        return drop(p, m, c_rx_bad_len);
    std::uint32_t plen = ulen - wire::udp_len - d.hlen - pad - wire::icrc_len;
    if (!icrc_ok(m, static_cast<std::uint16_t>(bth)))
        return drop(p, m, c_rx_bad_icrc);
    std::uint32_t qpn = wire::bth_dqpn(b);
    eth_qp *q = p->qps[qpn & (max_qp - 1)].load(std::memory_order_acquire);
    if (!q || q->qp_num != qpn)
        return drop(p, m, c_rx_no_qp);
    unsigned family = wire::bth_opcode(b) & 0xe0;
    bool fits = (q->type == vq::qp_type::rc && family == wire::op_rc) ||
                (q->type == vq::qp_type::uc && family == wire::op_uc) ||
                (q->type == vq::qp_type::ud && family == wire::op_ud);
    if (!fits)
        return drop(p, m, c_rx_bad_opcode);
    hand_over(p, q, m, static_cast<std::uint16_t>(bth), d.hlen, plen);
}

/** Is frame @p f (@p seg bytes in its first segment, ethertype @p et, the
 *  network header at @p l3) UDP to the RoCEv2 port at our MAC and IPv4? */
bool roce_for_us(const port *p, const std::uint8_t *f, std::uint32_t seg, std::uint32_t l3,
                        std::uint16_t et) noexcept
{
    if (et != wire::ethertype_ipv4 || seg < l3 + wire::ip_len + wire::udp_len)
        return false;
    const std::uint8_t *ip = f + l3;
    return ip[9] == 17 && wire::ld16(ip + wire::ip_len + 2) == wire::roce_udp_port &&
           std::memcmp(ip + 16, &p->ipv4, 4) == 0 && std::memcmp(f, p->mac.addr_bytes, 6) == 0;
}

/** The ethertype of frame @p f (@p seg >= 14 bytes in its first segment)
 *  past one VLAN tag; *@p l3: where its network header starts. */
inline std::uint16_t ethertype(const std::uint8_t *f, std::uint32_t seg, std::uint32_t *l3) noexcept
{
    std::uint16_t et = wire::ld16(f + 12);
    *l3 = wire::eth_len;
    if (et == wire::ethertype_vlan && seg >= 18) {
        et = wire::ld16(f + 16);
        *l3 = 18;
    }
    return et;
}

/** @p m's view: false when its first segment is shorter than an Ethernet
 *  header. */
bool frame_of(const rte_mbuf *m, frame_view &v) noexcept
{
    v.f = rte_pktmbuf_mtod(m, const std::uint8_t *);
    v.seg = m->data_len;
    if (v.seg < wire::eth_len)
        return false;
    v.et = ethertype(v.f, v.seg, &v.l3);
    return true;
}

SHUNT_ALWAYS_INLINE void classify(port *p, rte_mbuf *m) noexcept
{
    const std::uint8_t *f = rte_pktmbuf_mtod(m, const std::uint8_t *);
    const std::uint32_t seg = m->data_len;
    if (seg < wire::eth_len)
        return to_raw(p, m);
    std::uint32_t l3;
    const std::uint16_t et = ethertype(f, seg, &l3);
    if (et == wire::ethertype_arp) {
        arp_input(p, f + l3, seg - l3);
        return to_raw(p, m);
    }
    if (roce_for_us(p, f, seg, l3, et)) {
        if (f[l3] != 0x45)
            return drop(p, m, c_rx_bad_ip); // options or not version 4: no RoCEv2 frame has them
        return roce_input(p, m, l3);
    }
    to_raw(p, m);
}

/** Take a burst from queue @p rxq and classify it (rx_lock held). */
SHUNT_ALWAYS_INLINE unsigned poll_queue(port *p, std::uint16_t rxq) noexcept
{
    rte_mbuf *m[burst];
    std::uint16_t n = rte_eth_rx_burst(p->id, rxq, m, burst);
    tsan_taken(m, n);
    for (std::uint16_t i = 0; i < n; i++) {
        if (i + 1 < n)
            rte_prefetch0(rte_pktmbuf_mtod(m[i + 1], void *));
        classify(p, m[i]);
    }
    return n;
}

/** The queues beyond 0 that nobody owns (rx_lock held). */
SHUNT_COLD unsigned poll_unowned(port *p) noexcept
{
    unsigned n = 0;
    for (std::uint16_t i = 0; i < p->nunowned; i++)
        n += poll_queue(p, p->unowned[i]);
    return n;
}

/** port_poll on a port that loops: the frames it sent itself first (they
 *  are RoCE frames, classified like any other), then the PMD's queues as
 *  always. The loop ring is taken even when a RAW_PACKET QP owns queue 0. */
SHUNT_COLD unsigned poll_looping(port *p) noexcept
{
    if (!p->rx_lock.try_lock())
        return 0;
    rte_mbuf *m[burst];
    const unsigned k = rte_ring_sc_dequeue_burst(p->loop, reinterpret_cast<void **>(m), burst, nullptr);
    tsan_taken(m, static_cast<std::uint16_t>(k));
    for (unsigned i = 0; i < k; i++)
        classify(p, m[i]);
    unsigned n = 0;
    if (!p->q0_owned.load(std::memory_order_relaxed)) {
        n = poll_queue(p, 0);
        if (p->nunowned)
            n += poll_unowned(p);
    }
    p->rx_lock.unlock();
    if (n)
        p->count(c_rx_frames, n);
    return n + k;
}

} // namespace

unsigned port_poll(port *p) noexcept
{
    if (p->loop_on.load(std::memory_order_relaxed)) [[unlikely]]
        return poll_looping(p);
    if (p->q0_owned.load(std::memory_order_relaxed) || !p->rx_lock.try_lock())
        return 0;
    unsigned n = poll_queue(p, 0);
    if (p->nunowned) [[unlikely]]
        n += poll_unowned(p);
    p->rx_lock.unlock();
    if (n)
        p->count(c_rx_frames, n);
    return n;
}

void port_unowned_queues(port *p) noexcept
{
    p->rx_lock.lock();
    p->nunowned = 0;
    for (std::uint16_t i = 1; i < p->nq; i++)
        if (!p->queue_owned[i])
            p->unowned[p->nunowned++] = i;
    p->rx_lock.unlock();
}

bool port_divert(port *p, rte_mbuf *m) noexcept
{
    frame_view v;
    if (!frame_of(m, v))
        return false;
    const std::uint8_t *f = v.f;
    const std::uint32_t seg = v.seg, l3 = v.l3;
    const std::uint16_t et = v.et;
    if (et == wire::ethertype_arp) {
        arp_input(p, f + l3, seg - l3);
        return false;
    }
    if (!roce_for_us(p, f, seg, l3, et))
        return false;
    p->rx_lock.lock();
    if (f[l3] != 0x45)
        drop(p, m, c_rx_bad_ip);
    else
        roce_input(p, m, l3);
    p->rx_lock.unlock();
    return true;
}

bool icrc_ok(const rte_mbuf *m, std::uint16_t bth_off) noexcept
{
    const std::uint8_t *f = rte_pktmbuf_mtod(m, const std::uint8_t *);
    const std::uint8_t *ip = f + bth_off - wire::udp_len - wire::ip_len;
    std::uint32_t end = static_cast<std::uint32_t>(bth_off - wire::udp_len - wire::ip_len) + wire::ld16(ip + 2);
    std::uint32_t from = bth_off + wire::bth_len, left = end - wire::icrc_len - from;
    if (end <= m->data_len) // the whole packet in the first segment
        return icrc_matches(f + end - wire::icrc_len, icrc_packet(ip, left));
    std::uint32_t crc = icrc_headers(ip);
    // The rest of the packet up to the ICRC, over the segments.
    const rte_mbuf *s = m;
    std::uint32_t base = 0;
    while (s && left) {
        if (from < base + s->data_len) {
            std::uint32_t o = from - base, k = s->data_len - o < left ? s->data_len - o : left;
            crc = crc32_update(crc, rte_pktmbuf_mtod_offset(s, const std::uint8_t *, o), k);
            from += k;
            left -= k;
        }
        base += s->data_len;
        s = s->next;
    }
    if (left)
        return false;
    std::uint8_t tail[4];
    mbuf_read(m, end - wire::icrc_len, 4, tail);
    return icrc_matches(tail, crc);
}

void mbuf_read(const rte_mbuf *m, std::uint32_t from, std::uint32_t n, std::uint8_t *dst) noexcept
{
    std::uint32_t base = 0;
    for (const rte_mbuf *s = m; s && n; s = s->next) {
        if (from < base + s->data_len) {
            std::uint32_t o = from - base, k = s->data_len - o < n ? s->data_len - o : n;
            std::memcpy(dst, rte_pktmbuf_mtod_offset(s, const std::uint8_t *, o), k);
            dst += k;
            from += k;
            n -= k;
        }
        base += s->data_len;
    }
}

/* ---------------- ARP ---------------- */

namespace {

constexpr std::size_t arp_len = 28;

void arp_learn(port *p, std::uint32_t ip, const std::uint8_t *mac)
{
    std::lock_guard<std::mutex> g(p->arp_lock);
    for (auto &e : p->arp)
        if (e.ip == ip) {
            std::memcpy(e.mac.addr_bytes, mac, 6);
            return;
        }
    arp_entry &e = p->arp[p->arp_next++ % max_arp];
    e.ip = ip;
    std::memcpy(e.mac.addr_bytes, mac, 6);
}

bool arp_lookup(port *p, std::uint32_t ip, rte_ether_addr *out)
{
    std::lock_guard<std::mutex> g(p->arp_lock);
    for (auto &e : p->arp)
        if (e.ip == ip && ip) {
            *out = e.mac;
            return true;
        }
    return false;
}

/** Send an ARP request (op 1) or reply (op 2) on queue 0. */
void arp_send(port *p, std::uint16_t op, const std::uint8_t *dst_mac, std::uint32_t tip) noexcept
{
    rte_mbuf *m = mbuf_get(p);
    if (!m)
        return;
    std::uint8_t *f = reinterpret_cast<std::uint8_t *>(rte_pktmbuf_append(m, 60));
    if (!f) {
        rte_pktmbuf_free(m);
        return;
    }
    std::memset(f, 0, 60);
    static const std::uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    std::memcpy(f, op == 1 ? bcast : dst_mac, 6);
    std::memcpy(f + 6, p->mac.addr_bytes, 6);
    wire::st16(f + 12, wire::ethertype_arp);
    std::uint8_t *a = f + 14;
    wire::st16(a, 1);      // Ethernet
    wire::st16(a + 2, 0x0800);
    a[4] = 6;
    a[5] = 4;
    wire::st16(a + 6, op);
    std::memcpy(a + 8, p->mac.addr_bytes, 6);
    std::memcpy(a + 14, &p->ipv4, 4);
    if (op == 2)
        std::memcpy(a + 18, dst_mac, 6);
    std::memcpy(a + 24, &tip, 4);
    if (port_tx(p, 0, true, &m, 1) == 0)
        rte_pktmbuf_free(m);
}

} // namespace

void arp_input(port *p, const std::uint8_t *a, std::uint32_t len) noexcept
{
    if (len < arp_len || wire::ld16(a) != 1 || wire::ld16(a + 2) != 0x0800 || a[4] != 6 || a[5] != 4)
        return;
    std::uint16_t op = wire::ld16(a + 6);
    std::uint32_t sip, tip;
    std::memcpy(&sip, a + 14, 4);
    std::memcpy(&tip, a + 24, 4);
    if (tip != p->ipv4)
        return;
    // Setup-path work (a mutex): ARP frames are rare and never on the data path of a QP.
    if (sip)
        arp_learn(p, sip, a + 8);
    if (op == 1) {
        arp_send(p, 2, a + 8, sip);
        p->count(c_arp_replies);
    }
}

int arp_resolve(port *p, std::uint32_t ip, rte_ether_addr *out)
{
    if (arp_lookup(p, ip, out))
        return 0;
    auto start = std::chrono::steady_clock::now();
    auto end = start + std::chrono::milliseconds(lim().arp_ms);
    auto next = start;
    while (std::chrono::steady_clock::now() < end) {
        if (std::chrono::steady_clock::now() >= next) {
            arp_send(p, 1, nullptr, ip);
            next = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        }
        port_poll(p);
        if (arp_lookup(p, ip, out))
            return 0;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    SHUNT_LOG(eth_log, info, "%s: no ARP answer for %s within %u ms", p->name.c_str(), ip_str(ip).c_str(),
              lim().arp_ms);
    return -FI_EHOSTUNREACH;
}

int make_dest(port *p, const vq::dev_addr &a, dest_hdr *out)
{
    rte_ether_addr mac{};
    std::uint32_t ip;
    if (a.len == 10) {
        std::memcpy(mac.addr_bytes, a.raw, 6);
        std::memcpy(&ip, a.raw + 6, 4);
    } else if (a.len == 4) {
        std::memcpy(&ip, a.raw, 4);
    } else {
        return -FI_EINVAL;
    }
    if (ip == 0 || ip == 0xffffffffu)
        return -FI_EINVAL;
    if (ip == p->ipv4 && rte_is_zero_ether_addr(&mac))
        mac = p->mac; // ourselves: nobody answers our own ARP request
    if (rte_is_same_ether_addr(&mac, &p->mac) && ip == p->ipv4) {
        // The port itself (another QP of it): its frames loop back, as a
        // RoCE NIC's do. Another IPv4 at our MAC goes to the PMD as ever.
        if (int rc = port_loop_on(p))
            return rc;
    }
    if (rte_is_zero_ether_addr(&mac)) {
        port_wait_link(p);
        int rc = arp_resolve(p, ip, &mac);
        if (rc < 0)
            return rc;
    }
    if (!rte_is_unicast_ether_addr(&mac))
        return -FI_EINVAL;
    std::uint8_t *b = out->b;
    std::memcpy(b, mac.addr_bytes, 6);
    std::memcpy(b + 6, p->mac.addr_bytes, 6);
    wire::st16(b + 12, wire::ethertype_ipv4);
    std::uint8_t *ip4 = b + wire::ip_off;
    ip4[0] = 0x45;
    ip4[1] = 0; // DSCP 0, not ECN-capable
    wire::st16(ip4 + 2, 0);
    wire::st16(ip4 + 4, 0);
    wire::st16(ip4 + 6, 0x4000); // DF
    ip4[8] = 64;
    ip4[9] = 17;
    wire::st16(ip4 + 10, 0);
    std::memcpy(ip4 + 12, &p->ipv4, 4);
    std::memcpy(ip4 + 16, &ip, 4);
    std::uint8_t *u = b + wire::udp_off;
    wire::st16(u, 0);
    wire::st16(u + 2, wire::roce_udp_port);
    wire::st16(u + 4, 0);
    wire::st16(u + 6, 0); // no UDP checksum (allowed over IPv4; RoCEv2 NICs send 0)
    out->ip_sum = wire::ip_hdr_words(ip4);
    return 0;
}

/* ---------------- Extension API ---------------- */

bool is_ethdev(const vq::device *dev) noexcept
{
    return dev && port_of_device(dev) != nullptr;
}

int query_port(const vq::device *dev, port_info *out)
{
    port *p = dev ? port_of_device(dev) : nullptr;
    if (!p || !out)
        return -FI_EINVAL;
    std::lock_guard<std::mutex> g(p->setup_lock);
    port_info i{};
    i.name = p->name;
    i.driver = p->info.driver_name ? p->info.driver_name : "";
    std::memcpy(i.mac, p->mac.addr_bytes, 6);
    i.ipv4 = p->ipv4;
    i.mtu = p->mtu;
    i.path_mtu = p->path_mtu;
    i.rx_queues = i.tx_queues = p->nq;
    i.max_rx_queues = p->info.max_rx_queues;
    i.max_tx_queues = p->info.max_tx_queues;
    i.tx_offload_capa = p->info.tx_offload_capa;
    i.rx_offload_capa = p->info.rx_offload_capa;
    i.hw_tso = p->hw_tso;
    i.hw_csum = p->hw_csum;
    i.hw_rx_csum = p->hw_rx_csum;
    i.started = p->configured;
    *out = std::move(i);
    return 0;
}

int query_counters(const vq::device *dev, port_counters *out)
{
    port *p = dev ? port_of_device(dev) : nullptr;
    if (!p || !out)
        return -FI_EINVAL;
    port_counters c{};
    for (unsigned i = 0; i < num_counters; i++)
        c.drv[i] = p->cnt[i].load(std::memory_order_relaxed);
    rte_eth_stats s{};
    if (p->configured && rte_eth_stats_get(p->id, &s) == 0) {
        c.ipackets = s.ipackets;
        c.opackets = s.opackets;
        c.ibytes = s.ibytes;
        c.obytes = s.obytes;
        c.imissed = s.imissed;
        c.ierrors = s.ierrors;
        c.oerrors = s.oerrors;
        c.rx_nombuf = s.rx_nombuf;
    }
    *out = c;
    return 0;
}

int set_port_queues(const vq::device *dev, unsigned n)
{
    port *p = dev ? port_of_device(dev) : nullptr;
    if (!p || n == 0 || n > p->info.max_rx_queues || n > p->info.max_tx_queues)
        return -FI_EINVAL;
    std::lock_guard<std::mutex> g(p->setup_lock);
    if (p->configured)
        return -FI_EBUSY;
    p->nq = static_cast<std::uint16_t>(n);
    describe(p);
    return 0;
}

} // namespace shunt::drv::ethdev
