// The DPDK PMD alone, without Shunt: a two-process ping-pong of one Ethernet
// frame each way over DPDK 22.11's ethdev API (rte_eth_tx_burst /
// rte_eth_rx_burst, mbufs from a pool, the echo returning the received
// mbuf). It gives the floor under the ethdev driver's figures on the same
// PMD: what a frame costs to cross it with no RoCE transport on top.
//
//   pmd-pingpong server|client [EAL ARGS ...] -- [SIZE] [ITERATIONS]
//
// Start the server first. Over net_memif, for example (server on CPU 0,
// client on CPU 1):
//
//   eal="--no-huge --no-pci -m 512 --vdev=net_memif0,id=0,socket=/run/pp.sock"
//   pmd-pingpong server -l 0 --file-prefix pps $eal,role=server -- 64 200000 &
//   pmd-pingpong client -l 1 --file-prefix ppc $eal,role=client -- 64 200000
//
// The client sends a frame of SIZE bytes (default 64, 60..1514), waits for
// the echo and times each round trip with the TSC after 1000 untimed ones;
// it prints one-way latency (half the round trip) percentiles in ns. Every
// wait is bounded (10 s without a frame is an error).
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr long warmup = 1000;

[[noreturn]] void die(const char *what)
{
    std::fprintf(stderr, "pmd-pingpong: %s\n", what);
    std::exit(1);
}

/** Wait for at least one frame on port 0; false after 10 s without one. */
bool receive(rte_mbuf **m, std::uint16_t &n)
{
    const std::uint64_t give_up = rte_get_tsc_cycles() + 10 * rte_get_tsc_hz();
    for (std::uint32_t spin = 0;; spin++) {
        n = rte_eth_rx_burst(0, 0, m, 32);
        if (n)
            return true;
        if ((spin & 0xffff) == 0 && rte_get_tsc_cycles() > give_up)
            return false;
    }
}

void send_all(rte_mbuf **m, std::uint16_t n)
{
    std::uint16_t sent = 0;
    const std::uint64_t give_up = rte_get_tsc_cycles() + 10 * rte_get_tsc_hz();
    while (sent < n) {
        sent = static_cast<std::uint16_t>(sent + rte_eth_tx_burst(0, 0, m + sent, static_cast<std::uint16_t>(n - sent)));
        if (sent < n && rte_get_tsc_cycles() > give_up)
            die("the port takes no frames");
    }
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 2 || (std::strcmp(argv[1], "server") && std::strcmp(argv[1], "client")))
        die("usage: pmd-pingpong server|client [EAL ARGS ...] -- [SIZE] [ITERATIONS]");
    const bool client = std::strcmp(argv[1], "client") == 0;
    argv[1] = argv[0]; // EAL parses from argv[1] onwards
    int used = rte_eal_init(argc - 1, argv + 1);
    if (used < 0)
        die("rte_eal_init failed");
    argc -= used + 1;
    argv += used + 1;
    const long size = argc > 1 ? std::atol(argv[1]) : 64;
    const long iters = argc > 2 ? std::atol(argv[2]) : 200000;
    if (size < 60 || size > 1514 || iters <= 0)
        die("SIZE must be 60..1514 and ITERATIONS positive");
    if (rte_eth_dev_count_avail() < 1)
        die("no port (give one with --vdev)");
    rte_mempool *mp = rte_pktmbuf_pool_create("pmd_pingpong", 4095, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                              static_cast<int>(rte_socket_id()));
    if (!mp)
        die("no mbuf pool");
    rte_eth_conf conf{};
    if (rte_eth_dev_configure(0, 1, 1, &conf) || rte_eth_rx_queue_setup(0, 0, 1024, rte_socket_id(), nullptr, mp) ||
        rte_eth_tx_queue_setup(0, 0, 1024, rte_socket_id(), nullptr) || rte_eth_dev_start(0))
        die("port set-up failed");
    rte_eth_link link{};
    const std::uint64_t give_up = rte_get_tsc_cycles() + 30 * rte_get_tsc_hz();
    do {
        if (rte_eth_link_get_nowait(0, &link) || rte_get_tsc_cycles() > give_up)
            die("the link did not come up");
    } while (!link.link_status);
    rte_mbuf *rx[32];
    std::uint16_t n = 0;
    if (!client) {
        for (long i = 0; i < warmup + iters; i++) {
            if (!receive(rx, n))
                die("no frame for 10 s");
            send_all(rx, n); // the echo: the PMD frees them once sent
        }
        rte_eth_dev_stop(0);
        return 0;
    }
    rte_delay_ms(200); // the server's port up and polling
    std::vector<std::uint64_t> cyc(static_cast<std::size_t>(iters));
    for (long i = 0; i < warmup + iters; i++) {
        const std::uint64_t t0 = rte_rdtsc();
        rte_mbuf *m = rte_pktmbuf_alloc(mp);
        char *d = m ? rte_pktmbuf_append(m, static_cast<std::uint16_t>(size)) : nullptr;
        if (!d)
            die("no mbuf");
        std::memset(d, 0x5a, 14); // destination and source MAC, EtherType: any bytes do on these PMDs
        send_all(&m, 1);
        if (!receive(rx, n))
            die("no echo for 10 s");
        rte_pktmbuf_free_bulk(rx, n);
        if (i >= warmup)
            cyc[static_cast<std::size_t>(i - warmup)] = rte_rdtsc() - t0;
    }
    std::sort(cyc.begin(), cyc.end());
    const double ns_per_cycle = 1e9 / static_cast<double>(rte_get_tsc_hz());
    auto pct = [&](double p) {
        return static_cast<double>(cyc[static_cast<std::size_t>(p / 100.0 * static_cast<double>(cyc.size() - 1))]) *
               ns_per_cycle / 2;
    };
    std::printf("pmd_pingpong size_bytes %ld iterations %ld\n", size, iters);
    std::printf("one_way_ns p50 %.0f p90 %.0f p99 %.0f p99.9 %.0f max %.0f\n", pct(50), pct(90), pct(99), pct(99.9),
                static_cast<double>(cyc.back()) * ns_per_cycle / 2);
    rte_eth_dev_stop(0);
    return 0;
}
