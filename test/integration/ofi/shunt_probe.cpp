// Asks Shunt itself (below the libfabric shim) whether a provider offers an
// endpoint type, so that the libfabric tests skip ONLY when Shunt genuinely
// has no such provider, never because the shim failed.
//
//   shunt_probe <rdm|msg|dgram>            exit 0: offered; 77: not offered
//   shunt_probe <rdm|msg|dgram> --attrs    also print, one per line, the
//       "key: value" lines fi_info -v must show for the first answer (the
//       attributes the shim passes through unchanged)
#include "fabric/api.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace sf = shunt::fabric;

namespace {

const char *threading_name(sf::threading t)
{
    switch (t) {
    case sf::FI_THREAD_SAFE: return "FI_THREAD_SAFE";
    case sf::FI_THREAD_FID: return "FI_THREAD_FID";
    case sf::FI_THREAD_DOMAIN: return "FI_THREAD_DOMAIN";
    case sf::FI_THREAD_COMPLETION: return "FI_THREAD_COMPLETION";
    case sf::FI_THREAD_ENDPOINT: return "FI_THREAD_ENDPOINT";
    default: return "FI_THREAD_UNSPEC";
    }
}

const char *progress_name(sf::progress p)
{
    switch (p) {
    case sf::FI_PROGRESS_AUTO: return "FI_PROGRESS_AUTO";
    case sf::FI_PROGRESS_MANUAL: return "FI_PROGRESS_MANUAL";
    default: return nullptr; // UNSPEC / CONTROL_UNIFIED: not checked
    }
}

const char *av_name(sf::av_type t)
{
    switch (t) {
    case sf::FI_AV_MAP: return "FI_AV_MAP";
    case sf::FI_AV_TABLE: return "FI_AV_TABLE";
    default: return "FI_AV_UNSPEC";
    }
}

const char *ep_name(sf::ep_type t)
{
    switch (t) {
    case sf::FI_EP_MSG: return "FI_EP_MSG";
    case sf::FI_EP_DGRAM: return "FI_EP_DGRAM";
    case sf::FI_EP_RDM: return "FI_EP_RDM";
    default: return "FI_EP_UNSPEC";
    }
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s <rdm|msg|dgram> [--attrs]\n", argv[0]);
        return 2;
    }
    sf::ep_type type;
    if (!std::strcmp(argv[1], "rdm"))
        type = sf::FI_EP_RDM;
    else if (!std::strcmp(argv[1], "msg"))
        type = sf::FI_EP_MSG;
    else if (!std::strcmp(argv[1], "dgram"))
        type = sf::FI_EP_DGRAM;
    else {
        std::fprintf(stderr, "unknown endpoint type %s\n", argv[1]);
        return 2;
    }
    bool attrs = argc > 2 && !std::strcmp(argv[2], "--attrs");

    sf::info *hints = sf::allocinfo();
    if (!hints)
        return 1;
    hints->ep_attr->type = type;
    // What fi_info asks for: every mode, every MR mode bit of 1.5+.
    hints->mode = ~0ULL;
    hints->domain_attr->mode = ~0ULL;
    hints->domain_attr->mr_mode = ~(sf::FI_MR_BASIC | sf::FI_MR_SCALABLE);
    sf::info *res = nullptr;
    int rc = sf::getinfo(sf::FI_API_VERSION, nullptr, nullptr, 0, hints, &res);
    sf::freeinfo(hints);
    if (rc == -shunt::FI_ENODATA || (rc == 0 && !res)) {
        std::printf("SKIP: Shunt has no provider offering %s (getinfo: %d)\n", ep_name(type), rc);
        return 77;
    }
    if (rc) {
        std::fprintf(stderr, "shunt::fabric::getinfo failed: %d\n", rc);
        return 1;
    }
    if (attrs) {
        const sf::info *i = res;
        std::printf("type: %s\n", ep_name(i->ep_attr->type));
        if (i->fabric_attr->name)
            std::printf("name: %s\n", i->fabric_attr->name);
        if (i->domain_attr->name)
            std::printf("name: %s\n", i->domain_attr->name);
        std::printf("max_msg_size: %zu\n", i->ep_attr->max_msg_size);
        std::printf("inject_size: %zu\n", i->tx_attr->inject_size);
        std::printf("size: %zu\n", i->tx_attr->size);
        std::printf("size: %zu\n", i->rx_attr->size);
        std::printf("iov_limit: %zu\n", i->tx_attr->iov_limit);
        std::printf("iov_limit: %zu\n", i->rx_attr->iov_limit);
        std::printf("rma_iov_limit: %zu\n", i->tx_attr->rma_iov_limit);
        std::printf("threading: %s\n", threading_name(i->domain_attr->threading));
        if (const char *p = progress_name(i->domain_attr->data_progress))
            std::printf("data_progress: %s\n", p);
        std::printf("av_type: %s\n", av_name(i->domain_attr->av_type));
        std::printf("mr_key_size: %zu\n", i->domain_attr->mr_key_size);
        std::printf("cq_data_size: %zu\n", i->domain_attr->cq_data_size);
        std::printf("cq_cnt: %zu\n", i->domain_attr->cq_cnt);
        std::printf("ep_cnt: %zu\n", i->domain_attr->ep_cnt);
        std::printf("cntr_cnt: %zu\n", i->domain_attr->cntr_cnt);
        std::printf("src_addrlen: %zu\n", i->src_addr ? i->src_addrlen : 0);
        // Capabilities libfabric 1.17 can name, in fi_tostr's spelling.
        struct {
            std::uint64_t bit;
            const char *name;
        } caps[] = {{sf::FI_MSG, "FI_MSG"},       {sf::FI_RMA, "FI_RMA"},     {sf::FI_TAGGED, "FI_TAGGED"},
                    {sf::FI_ATOMIC, "FI_ATOMIC"}, {sf::FI_READ, "FI_READ"},   {sf::FI_WRITE, "FI_WRITE"},
                    {sf::FI_RECV, "FI_RECV"},     {sf::FI_SEND, "FI_SEND"},   {sf::FI_MULTI_RECV, "FI_MULTI_RECV"},
                    {sf::FI_REMOTE_READ, "FI_REMOTE_READ"}, {sf::FI_REMOTE_WRITE, "FI_REMOTE_WRITE"}};
        for (const auto &c : caps)
            if (i->caps & c.bit)
                std::printf("cap: %s\n", c.name);
    }
    sf::freeinfo(res);
    return 0;
}
