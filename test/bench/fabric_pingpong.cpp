// Native Shunt counterpart of `fi_pingpong -p shunt -e rdm -S <size>`: the
// same loop (post a receive, inject below inject_size else send, wait for
// the completion) written against shunt::fabric directly, so that the cost
// of going through libfabric + libshunt-fi.so can be measured end to end in
// the same run. Prints fi_pingpong's "usec/xfer" (one-way latency).
//
//   fabric-pingpong server <dir> [size] [iterations] &
//   fabric-pingpong client <dir> [size] [iterations]
// The two exchange their addresses through files in <dir>. Pin them to
// different cores (taskset -c 0 / -c 1).
#include "fabric/api.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace sf = shunt::fabric;

namespace {

bool write_file(const std::string &path, const void *p, std::size_t n)
{
    std::string tmp = path + ".tmp";
    std::FILE *f = std::fopen(tmp.c_str(), "wb");
    if (!f)
        return false;
    bool ok = std::fwrite(p, 1, n, f) == n;
    ok = std::fclose(f) == 0 && ok;
    return ok && std::rename(tmp.c_str(), path.c_str()) == 0;
}

std::vector<char> wait_file(const std::string &path)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < end) {
        std::ifstream in(path, std::ios::binary);
        if (in)
            return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return {};
}

int die(const char *what, long rc)
{
    std::fprintf(stderr, "fabric-pingpong: %s: %ld\n", what, rc);
    return 1;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 3 || (std::strcmp(argv[1], "server") && std::strcmp(argv[1], "client"))) {
        std::fprintf(stderr, "usage: %s server|client <dir> [size] [iterations]\n", argv[0]);
        return 2;
    }
    const bool client = !std::strcmp(argv[1], "client");
    const std::string dir = argv[2];
    const std::size_t size = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 8;
    const long iters = argc > 4 ? std::strtol(argv[4], nullptr, 10) : 100000;

    // What fi_pingpong asks for (through the shim): RDM, FI_MSG, FI_CONTEXT,
    // local MR and the basic MR modes, no threading level.
    sf::info *hints = sf::allocinfo(), *info = nullptr;
    hints->ep_attr->type = sf::FI_EP_RDM;
    hints->caps = sf::FI_MSG;
    hints->mode = sf::FI_CONTEXT;
    hints->domain_attr->mr_mode = sf::FI_MR_LOCAL | sf::FI_MR_VIRT_ADDR | sf::FI_MR_ALLOCATED | sf::FI_MR_PROV_KEY;
    int rc = sf::getinfo(sf::FI_API_VERSION, nullptr, nullptr, 0, hints, &info);
    sf::freeinfo(hints);
    if (rc)
        return die("getinfo", rc);
    sf::fid_fabric *fabric;
    sf::fid_domain *domain;
    sf::fid_av *av;
    sf::fid_cq *txcq, *rxcq;
    sf::fid_ep *ep;
    sf::av_attr aa;
    sf::cq_attr ca;
    ca.format = sf::FI_CQ_FORMAT_CONTEXT;
    ca.size = info->tx_attr->size;
    if ((rc = sf::fabric_open(info->fabric_attr, &fabric, nullptr)) ||
        (rc = sf::domain_open(fabric, info, &domain, nullptr)) || (rc = sf::av_open(domain, &aa, &av, nullptr)) ||
        (rc = sf::cq_open(domain, &ca, &txcq, nullptr)) || (rc = sf::cq_open(domain, &ca, &rxcq, nullptr)) ||
        (rc = sf::endpoint(domain, info, &ep, nullptr)) || (rc = sf::ep_bind(ep, &av->fid, 0)) ||
        (rc = sf::ep_bind(ep, &txcq->fid, sf::FI_TRANSMIT)) || (rc = sf::ep_bind(ep, &rxcq->fid, sf::FI_RECV)) ||
        (rc = sf::enable(ep)))
        return die("setup", rc);

    std::vector<char> buf(2 * (size + 64) + 4096);
    char *rx = buf.data(), *tx = buf.data() + size + 64;
    sf::fid_mr *mr = nullptr;
    void *desc = nullptr;
    if (info->domain_attr->mr_mode & sf::FI_MR_LOCAL) {
        if ((rc = sf::mr_reg(domain, buf.data(), buf.size(), sf::FI_SEND | sf::FI_RECV, 0, 0, 0, &mr, nullptr)))
            return die("mr_reg", rc);
        desc = sf::mr_desc(mr);
    }

    char name[256];
    std::size_t len = sizeof name;
    if ((rc = sf::getname(&ep->fid, name, &len)))
        return die("getname", rc);
    const std::string mine = dir + (client ? "/client.addr" : "/server.addr");
    const std::string theirs = dir + (client ? "/server.addr" : "/client.addr");
    if (!write_file(mine, name, len))
        return die("write address file", 0);
    std::vector<char> peer = wait_file(theirs);
    if (peer.empty())
        return die("no peer address", 0);
    sf::fi_addr_t dest;
    if (sf::av_insert(av, peer.data(), 1, &dest, 0, nullptr) != 1)
        return die("av_insert", 0);

    sf::context rctx, tctx;
    sf::cq_entry e;
    auto post_rx = [&] {
        ssize_t r;
        while ((r = sf::recv(ep, rx, size + 64, desc, sf::FI_ADDR_UNSPEC, &rctx)) == -shunt::FI_EAGAIN)
            (void)sf::cq_read(rxcq, &e, 0);
        return r;
    };
    auto tx_one = [&]() -> ssize_t {
        ssize_t r;
        if (size < info->tx_attr->inject_size) {
            while ((r = sf::inject(ep, tx, size, dest)) == -shunt::FI_EAGAIN)
                (void)sf::cq_read(txcq, &e, 0);
            return r;
        }
        while ((r = sf::send(ep, tx, size, desc, dest, &tctx)) == -shunt::FI_EAGAIN)
            (void)sf::cq_read(txcq, &e, 0);
        if (r)
            return r;
        while ((r = sf::cq_read(txcq, &e, 1)) == -shunt::FI_EAGAIN) {
        }
        return r == 1 ? 0 : r;
    };
    auto rx_one = [&]() -> ssize_t {
        ssize_t r;
        while ((r = sf::cq_read(rxcq, &e, 1)) == -shunt::FI_EAGAIN) {
        }
        if (r != 1)
            return r;
        return post_rx();
    };
    if ((rc = int(post_rx())))
        return die("recv", rc);
    // Warm-up round trips (connections), then the timed loop.
    long total = iters + 100;
    std::chrono::steady_clock::time_point start;
    for (long i = 0; i < total; i++) {
        if (i == 100)
            start = std::chrono::steady_clock::now();
        ssize_t r = client ? tx_one() : rx_one();
        if (!r)
            r = client ? rx_one() : tx_one();
        if (r)
            return die("transfer", r);
    }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (client)
        std::printf("bytes %zu iterations %ld usec/xfer %.3f\n", size, iters, us / double(iters) / 2.0);
    std::remove(mine.c_str());
    if (mr)
        (void)sf::close(&mr->fid);
    (void)sf::close(&ep->fid);
    (void)sf::close(&txcq->fid);
    (void)sf::close(&rxcq->fid);
    (void)sf::close(&av->fid);
    (void)sf::close(&domain->fid);
    (void)sf::close(&fabric->fid);
    sf::freeinfo(info);
    return 0;
}
