// Google Benchmark: the endpoint fast paths of the shm provider in one
// process (two endpoints of one fabric: the same code as between processes,
// without the cache-line transfer). Each iteration is one message, posted
// and received; receives are reposted in batches.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "env/errors.h"
#include "fabric/api.h"

using namespace shunt;
using namespace shunt::fabric;

namespace {

struct side {
    fid_domain *domain = nullptr;
    fid_ep *ep = nullptr;
    fid_cq *cq = nullptr;
    fid_av *av = nullptr;
    std::uint8_t addr[64] = {};
};

struct pair {
    info *fi = nullptr;
    fid_fabric *fabric = nullptr;
    side a, b;
    fi_addr_t to_b = 0;
    std::vector<std::vector<std::uint8_t>> bufs;
    std::vector<context> ctx;
    bool ok = false;

    int open_side(side &s)
    {
        int rc;
        if ((rc = domain_open(fabric, fi, &s.domain, nullptr)) || (rc = endpoint(s.domain, fi, &s.ep, nullptr)))
            return rc;
        cq_attr ca;
        ca.format = FI_CQ_FORMAT_CONTEXT;
        ca.size = 4096;
        av_attr aa;
        if ((rc = cq_open(s.domain, &ca, &s.cq, nullptr)) || (rc = av_open(s.domain, &aa, &s.av, nullptr)) ||
            (rc = ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = ep_bind(s.ep, &s.av->fid, 0)) ||
            (rc = enable(s.ep)))
            return rc;
        std::size_t len = sizeof s.addr;
        return getname(&s.ep->fid, s.addr, &len);
    }
    pair()
    {
        info *h = allocinfo();
        h->caps = FI_MSG;
        h->mode = FI_CONTEXT;
        h->ep_attr->type = FI_EP_RDM;
        h->domain_attr->threading = FI_THREAD_DOMAIN;
        h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
        h->fabric_attr->prov_name = ::strdup("shm");
        int rc = getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &fi);
        freeinfo(h);
        if (rc || fabric_open(fi->fabric_attr, &fabric, nullptr) || open_side(a) || open_side(b))
            return;
        fi_addr_t dummy;
        if (av_insert(a.av, b.addr, 1, &to_b, 0, nullptr) != 1 || av_insert(b.av, a.addr, 1, &dummy, 0, nullptr) != 1)
            return;
        bufs.assign(256, std::vector<std::uint8_t>(8192));
        ctx.resize(256);
        for (std::size_t i = 0; i < 256; i++)
            if (recv(b.ep, bufs[i].data(), 8192, nullptr, FI_ADDR_UNSPEC, &ctx[i]))
                return;
        // Connect (hidden in RDM): the first send waits for it.
        char x = 0;
        for (int i = 0; i < 100000; i++) {
            ssize_t r = inject(a.ep, &x, 1, to_b);
            cq_entry e[16];
            (void)cq_read(b.cq, e, 16);
            (void)cq_read(a.cq, e, 16);
            if (r == 0) {
                drain(1);
                ok = true;
                return;
            }
        }
    }
    // Take @p n receive completions and repost their buffers.
    bool drain(int n)
    {
        cq_entry e[64];
        for (int spins = 0; n > 0 && spins < 1000000; spins++) {
            ssize_t k = cq_read(b.cq, e, n < 64 ? std::size_t(n) : 64);
            (void)cq_read(a.cq, e + 0, 0);
            for (ssize_t i = 0; i < k; i++) {
                auto *c = static_cast<context *>(e[i].op_context);
                std::size_t idx = std::size_t(c - ctx.data());
                if (recv(b.ep, bufs[idx].data(), 8192, nullptr, FI_ADDR_UNSPEC, c))
                    return false;
            }
            if (k > 0)
                n -= int(k);
        }
        return n == 0;
    }
    ~pair()
    {
        for (side *s : {&a, &b}) {
            if (s->ep)
                (void)fabric::close(&s->ep->fid);
            if (s->av)
                (void)fabric::close(&s->av->fid);
            if (s->cq)
                (void)fabric::close(&s->cq->fid);
            if (s->domain)
                (void)fabric::close(&s->domain->fid);
        }
        if (fabric)
            (void)fabric::close(&fabric->fid);
        freeinfo(fi);
    }
};

void BM_inject_recv(benchmark::State &st)
{
    pair p;
    if (!p.ok) {
        st.SkipWithError("shm provider not available");
        return;
    }
    std::vector<std::uint8_t> msg(std::size_t(st.range(0)), 0x5a);
    int batch = 0;
    for (auto _ : st) {
        ssize_t r = inject(p.a.ep, msg.data(), msg.size(), p.to_b);
        benchmark::DoNotOptimize(r);
        if (r != 0) {
            st.SkipWithError("inject failed");
            break;
        }
        if (++batch == 64) {
            if (!p.drain(64)) {
                st.SkipWithError("receive failed");
                break;
            }
            batch = 0;
        }
    }
    st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_inject_recv)->Arg(8)->Arg(64)->Arg(512);

void BM_send_recv_with_completion(benchmark::State &st)
{
    pair p;
    if (!p.ok) {
        st.SkipWithError("shm provider not available");
        return;
    }
    std::vector<std::uint8_t> msg(std::size_t(st.range(0)), 0x5a);
    context sctx;
    for (auto _ : st) {
        ssize_t r = send(p.a.ep, msg.data(), msg.size(), nullptr, p.to_b, &sctx);
        benchmark::DoNotOptimize(r);
        cq_entry e;
        ssize_t k;
        int spins = 0;
        while ((k = cq_read(p.a.cq, &e, 1)) == -FI_EAGAIN && ++spins < 1000000) {
        }
        if (r != 0 || k != 1 || !p.drain(1)) {
            st.SkipWithError("send failed");
            break;
        }
    }
    st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_send_recv_with_completion)->Arg(64)->Arg(4096);

} // namespace

BENCHMARK_MAIN();
