// What the libfabric shim (libshunt-fi.so) adds to a call: the same
// operations on the same Shunt provider, once through shunt::fabric
// directly and once through libfabric's API and the shim. The provider is
// lib/fabric's in-process "loop" test provider (linked in; SHUNT_PROVIDER=loop),
// so the difference is the shim's forwarding alone, not a transport.
//
// Run: build/test/bench/bench-ofi  (sets FI_PROVIDER_PATH to the build's lib/ofi)
#include "../unit/fabric/loop_prov.h"
#include "fabric/api.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sf = shunt::fabric;

namespace {

// ---- Shunt side (written before <rdma/...>: Shunt's constants are usable here) ----

struct shunt_pair {
    shunt::test::loop_env env;
    sf::fid_av *av = nullptr;
    sf::fid_ep *ep[2] = {};
    sf::fid_cq *cq[2] = {};
    sf::fi_addr_t addr[2] = {};
    bool ok = false;

    shunt_pair()
    {
        if (env.open(sf::FI_EP_RDM, sf::FI_MSG))
            return;
        sf::av_attr aa;
        if (sf::av_open(env.domain, &aa, &av, nullptr))
            return;
        for (int i = 0; i < 2; i++) {
            sf::cq_attr ca;
            ca.format = sf::FI_CQ_FORMAT_CONTEXT;
            ca.size = 1024;
            if (sf::cq_open(env.domain, &ca, &cq[i], nullptr) || sf::endpoint(env.domain, env.info, &ep[i], nullptr) ||
                sf::ep_bind(ep[i], &av->fid, 0) ||
                sf::ep_bind(ep[i], &cq[i]->fid, sf::FI_TRANSMIT | sf::FI_RECV) || sf::enable(ep[i]))
                return;
            char name[128];
            std::size_t len = sizeof name;
            if (sf::getname(&ep[i]->fid, name, &len) || sf::av_insert(av, name, 1, &addr[i], 0, nullptr) != 1)
                return;
        }
        ok = true;
    }
    ~shunt_pair()
    {
        for (int i = 0; i < 2; i++) {
            if (ep[i])
                (void)sf::close(&ep[i]->fid);
            if (cq[i])
                (void)sf::close(&cq[i]->fid);
        }
        if (av)
            (void)sf::close(&av->fid);
    }
};

void BM_shunt_cq_read_empty(benchmark::State &st)
{
    shunt_pair p;
    if (!p.ok) {
        st.SkipWithError("loop provider setup failed");
        return;
    }
    sf::cq_entry e;
    for (auto _ : st)
        benchmark::DoNotOptimize(sf::cq_read(p.cq[0], &e, 1));
}
BENCHMARK(BM_shunt_cq_read_empty);

void BM_shunt_inject_recv(benchmark::State &st)
{
    shunt_pair p;
    if (!p.ok) {
        st.SkipWithError("loop provider setup failed");
        return;
    }
    char sbuf[8] = "payload", rbuf[64];
    sf::cq_entry e;
    for (auto _ : st) {
        if (sf::recv(p.ep[1], rbuf, sizeof rbuf, nullptr, sf::FI_ADDR_UNSPEC, rbuf) ||
            sf::inject(p.ep[0], sbuf, sizeof sbuf, p.addr[1]) || sf::cq_read(p.cq[1], &e, 1) != 1) {
            st.SkipWithError("transfer failed");
            return;
        }
        benchmark::DoNotOptimize(e);
    }
}
BENCHMARK(BM_shunt_inject_recv);

} // namespace

// ---- libfabric side ----
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

namespace {

struct ofi_pair {
    fi_info *info = nullptr;
    fid_fabric *fabric = nullptr;
    fid_domain *domain = nullptr;
    fid_av *av = nullptr;
    fid_ep *ep[2] = {};
    fid_cq *cq[2] = {};
    fi_addr_t addr[2] = {};
    bool ok = false;

    ofi_pair()
    {
        fi_info *hints = fi_allocinfo();
        hints->ep_attr->type = FI_EP_RDM;
        hints->caps = FI_MSG;
        hints->mode = FI_CONTEXT | FI_CONTEXT2;
        hints->domain_attr->threading = FI_THREAD_DOMAIN; // as loop_env opens the Shunt side
        hints->fabric_attr->prov_name = ::strdup("shunt");
        int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
        fi_freeinfo(hints);
        if (rc || fi_fabric(info->fabric_attr, &fabric, nullptr) || fi_domain(fabric, info, &domain, nullptr))
            return;
        fi_av_attr aa{};
        if (fi_av_open(domain, &aa, &av, nullptr))
            return;
        for (int i = 0; i < 2; i++) {
            fi_cq_attr ca{};
            ca.format = FI_CQ_FORMAT_CONTEXT;
            ca.size = 1024;
            if (fi_cq_open(domain, &ca, &cq[i], nullptr) || fi_endpoint(domain, info, &ep[i], nullptr) ||
                fi_ep_bind(ep[i], &av->fid, 0) || fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV) ||
                fi_enable(ep[i]))
                return;
            char name[128];
            size_t len = sizeof name;
            if (fi_getname(&ep[i]->fid, name, &len) || fi_av_insert(av, name, 1, &addr[i], 0, nullptr) != 1)
                return;
        }
        ok = true;
    }
    ~ofi_pair()
    {
        for (int i = 0; i < 2; i++) {
            if (ep[i])
                fi_close(&ep[i]->fid);
            if (cq[i])
                fi_close(&cq[i]->fid);
        }
        if (av)
            fi_close(&av->fid);
        if (domain)
            fi_close(&domain->fid);
        if (fabric)
            fi_close(&fabric->fid);
        fi_freeinfo(info);
    }
};

void BM_ofi_cq_read_empty(benchmark::State &st)
{
    ofi_pair p;
    if (!p.ok) {
        st.SkipWithError("libfabric/shim setup failed (FI_PROVIDER_PATH?)");
        return;
    }
    fi_cq_entry e;
    for (auto _ : st)
        benchmark::DoNotOptimize(fi_cq_read(p.cq[0], &e, 1));
}
BENCHMARK(BM_ofi_cq_read_empty);

void BM_ofi_inject_recv(benchmark::State &st)
{
    ofi_pair p;
    if (!p.ok) {
        st.SkipWithError("libfabric/shim setup failed (FI_PROVIDER_PATH?)");
        return;
    }
    char sbuf[8] = "payload", rbuf[64];
    fi_cq_entry e;
    for (auto _ : st) {
        if (fi_recv(p.ep[1], rbuf, sizeof rbuf, nullptr, FI_ADDR_UNSPEC, rbuf) ||
            fi_inject(p.ep[0], sbuf, sizeof sbuf, p.addr[1]) || fi_cq_read(p.cq[1], &e, 1) != 1) {
            st.SkipWithError("transfer failed");
            return;
        }
        benchmark::DoNotOptimize(e);
    }
}
BENCHMARK(BM_ofi_inject_recv);

} // namespace

int main(int argc, char **argv)
{
    // The shim from this build, the loop provider linked in here.
    setenv("FI_PROVIDER_PATH", SHUNT_OFI_DIR, 0);
    setenv("SHUNT_PROVIDER", "loop", 0);
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
