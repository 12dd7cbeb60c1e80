// getinfo's node / service / flags on the vq provider over shm, through
// Shunt's own API in one process (the two-process cases, through libfabric,
// are test/integration/ofi/addr_test.sh): source and destination
// addresses, service bindings of endpoints and passive endpoints, AV
// insertion by name, FI_ADDR_STR.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <unistd.h>

#include "fabric/api.h"
#include "fab_common.h"

using namespace shunt;
using namespace shunt::fabric;

namespace {

// A service name no other run on this host uses.
std::string svc(const char *what) { return "fabaddr-" + std::to_string(::getpid()) + "-" + what; }

info *rdm_hints(std::uint32_t fmt = FI_FORMAT_UNSPEC, ep_type t = FI_EP_RDM)
{
    info *h = test::fab::shm_hints(t, false);
    h->addr_format = fmt;
    return h;
}

int ask(const char *node, const char *service, std::uint64_t flags, info **out, std::uint32_t fmt = FI_FORMAT_UNSPEC,
        ep_type t = FI_EP_RDM)
{
    info *h = rdm_hints(fmt, t);
    int rc = getinfo(FI_API_VERSION, node, service, flags, h, out);
    freeinfo(h);
    return rc;
}

// The 64-byte binary address: qpn first (0 for a service address).
std::uint32_t qpn_of(const void *a)
{
    std::uint32_t q;
    std::memcpy(&q, a, sizeof q);
    return q;
}

// fabric + domain + AV + CQ + one endpoint opened from @p fi (not owned).
struct side {
    fid_fabric *fabric = nullptr;
    fid_domain *domain = nullptr;
    fid_av *av = nullptr;
    fid_cq *cq = nullptr;
    fid_ep *ep = nullptr;
    int open(info *fi)
    {
        int rc;
        if ((rc = fabric_open(fi->fabric_attr, &fabric, nullptr)) || (rc = domain_open(fabric, fi, &domain, nullptr)))
            return rc;
        av_attr aa;
        cq_attr ca;
        if ((rc = av_open(domain, &aa, &av, nullptr)) || (rc = cq_open(domain, &ca, &cq, nullptr)))
            return rc;
        if ((rc = endpoint(domain, fi, &ep, nullptr)))
            return rc;
        if ((rc = ep_bind(ep, &av->fid, 0)) || (rc = ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)))
            return rc;
        return enable(ep);
    }
    ~side()
    {
        for (fid *f : {ep ? &ep->fid : nullptr, av ? &av->fid : nullptr, cq ? &cq->fid : nullptr,
                       domain ? &domain->fid : nullptr, fabric ? &fabric->fid : nullptr}) {
            if (f) {
                EXPECT_EQ(fabric::close(f), 0);
            }
        }
    }
};

} // namespace

TEST(ShmAddr, EveryAnswerHasASourceAddressAndNamesResolveOrNot)
{
    info *out = nullptr;
    ASSERT_EQ(ask(nullptr, nullptr, 0, &out), 0);
    for (info *i = out; i; i = i->next) {
        ASSERT_NE(i->src_addr, nullptr);
        EXPECT_EQ(i->src_addrlen, 64u);
        EXPECT_EQ(qpn_of(i->src_addr), 0u) << "the host's wildcard: no endpoint in particular";
        EXPECT_EQ(i->dest_addr, nullptr);
    }
    freeinfo(out);
    EXPECT_EQ(ask(nullptr, nullptr, FI_SOURCE, &out), -FI_EINVAL) << "FI_SOURCE needs a node or a service";
    EXPECT_EQ(ask(nullptr, "no/slash", 0, &out), -FI_EINVAL);
    EXPECT_EQ(ask(nullptr, std::string(60, 'x').c_str(), 0, &out), -FI_EINVAL) << "service too long";
    EXPECT_EQ(ask("g00n13s", "1", 0, &out), -FI_ENODATA);
    EXPECT_EQ(ask("203.0.113.77", "1", FI_NUMERICHOST, &out), -FI_ENODATA) << "another host";
    EXPECT_EQ(ask("localhost", "1", FI_NUMERICHOST, &out), -FI_ENODATA) << "not numeric";
    ASSERT_EQ(ask("localhost", nullptr, 0, &out), 0) << "a node alone";
    ASSERT_NE(out->dest_addr, nullptr);
    EXPECT_EQ(qpn_of(out->dest_addr), 0u);
    freeinfo(out);
    // hint addresses that are not the provider's are refused
    info *h = rdm_hints();
    h->dest_addr = std::malloc(8);
    std::memset(h->dest_addr, 1, 8);
    h->dest_addrlen = 8;
    EXPECT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), -FI_EINVAL);
    freeinfo(h);
}

// A server endpoint opened with getinfo(NULL, S, FI_SOURCE) is where S
// leads: a client's getinfo(host, S) destination inserts as its address.
TEST(ShmAddr, ServiceLeadsToTheEndpointBoundToIt)
{
    const std::string s = svc("rdm");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    info *si = nullptr, *ci = nullptr;
    ASSERT_EQ(ask(nullptr, s.c_str(), FI_SOURCE, &si), 0);
    ASSERT_EQ(ask(host, s.c_str(), 0, &ci), 0);
    ASSERT_NE(ci->dest_addr, nullptr);
    EXPECT_EQ(qpn_of(si->src_addr), 0u);
    std::uint8_t name[64];
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    {
        side srv;
        ASSERT_EQ(srv.open(si), 0);
        std::size_t len = sizeof name;
        ASSERT_EQ(getname(&srv.ep->fid, name, &len), 0);
        EXPECT_NE(qpn_of(name), 0u) << "getname gives the endpoint's own address";
        {
            side other; // the service is taken
            EXPECT_EQ(other.open(si), -FI_EADDRINUSE);
        }
        side cli;
        ASSERT_EQ(cli.open(ci), 0);
        ASSERT_EQ(av_insert(cli.av, ci->dest_addr, 1, &a, 0, nullptr), 1);
        std::uint8_t got[64];
        len = sizeof got;
        ASSERT_EQ(av_lookup(cli.av, a, got, &len), 0);
        EXPECT_EQ(std::memcmp(got, name, 64), 0) << "the AV holds the server's endpoint address";
        fi_addr_t b = FI_ADDR_NOTAVAIL;
        ASSERT_EQ(av_insertsvc(cli.av, "localhost", s.c_str(), &b, 0, nullptr), 1);
        len = sizeof got;
        ASSERT_EQ(av_lookup(cli.av, b, got, &len), 0);
        EXPECT_EQ(std::memcmp(got, name, 64), 0);
        EXPECT_EQ(av_insertsvc(cli.av, "g00n13s", s.c_str(), &b, 0, nullptr), 0);
        EXPECT_EQ(b, FI_ADDR_NOTAVAIL);
        // a service address prints as fi_shm://<host>:<service> and inserts back
        char text[128];
        std::size_t tlen = sizeof text;
        ASSERT_NE(av_straddr(cli.av, ci->dest_addr, text, &tlen), nullptr);
        EXPECT_EQ(std::string(text), std::string("fi_shm://") + host + ":" + s);
        ASSERT_EQ(av_insertsvc(cli.av, text, nullptr, &b, 0, nullptr), 1) << text;
    }
    // the server is gone: the service leads nowhere, and is free again
    {
        side cli;
        ASSERT_EQ(cli.open(ci), 0);
        int err = 0;
        EXPECT_EQ(av_insert(cli.av, ci->dest_addr, 1, &a, FI_SYNC_ERR, &err), 0);
        EXPECT_EQ(err, FI_ECONNREFUSED);
        side again;
        EXPECT_EQ(again.open(si), 0);
    }
    // a service alone (no FI_SOURCE) is a server's source too
    info *so = nullptr;
    ASSERT_EQ(ask(nullptr, s.c_str(), 0, &so), 0);
    EXPECT_EQ(std::memcmp(so->src_addr, si->src_addr, 64), 0);
    EXPECT_EQ(so->dest_addr, nullptr);
    freeinfo(so);
    freeinfo(si);
    freeinfo(ci);
}

// A passive endpoint binds its service; an active endpoint that takes over
// the passive endpoint's address takes the binding along.
TEST(ShmAddr, PassiveEndpointsBindAndAdoptionMovesTheBinding)
{
    const std::string s = svc("pep");
    info *pi = nullptr;
    ASSERT_EQ(ask(nullptr, s.c_str(), FI_SOURCE, &pi, FI_FORMAT_UNSPEC, FI_EP_MSG), 0);
    fid_fabric *fab = nullptr;
    ASSERT_EQ(fabric_open(pi->fabric_attr, &fab, nullptr), 0);
    fid_pep *p1 = nullptr, *p2 = nullptr;
    ASSERT_EQ(passive_ep(fab, pi, &p1, nullptr), 0);
    EXPECT_EQ(passive_ep(fab, pi, &p2, nullptr), -FI_EADDRINUSE);
    fid_domain *dom = nullptr;
    ASSERT_EQ(domain_open(fab, pi, &dom, nullptr), 0);
    info *ai = dupinfo(pi);
    ai->handle = &p1->fid;
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(dom, ai, &ep, nullptr), 0) << "takes over the passive endpoint's address";
    EXPECT_EQ(fabric::close(&p1->fid), 0);
    EXPECT_EQ(passive_ep(fab, pi, &p2, nullptr), -FI_EADDRINUSE) << "the binding moved to the endpoint";
    EXPECT_EQ(fabric::close(&ep->fid), 0);
    ASSERT_EQ(passive_ep(fab, pi, &p2, nullptr), 0) << "free once the endpoint is closed";
    EXPECT_EQ(fabric::close(&p2->fid), 0);
    EXPECT_EQ(fabric::close(&dom->fid), 0);
    EXPECT_EQ(fabric::close(&fab->fid), 0);
    freeinfo(ai);
    freeinfo(pi);
}

// FI_ADDR_STR: every address is its text; AVs take arrays of strings.
TEST(ShmAddr, AddrStrIsTextEverywhere)
{
    const std::string s = svc("str");
    info *si = nullptr, *ci = nullptr;
    ASSERT_EQ(ask(nullptr, s.c_str(), FI_SOURCE, &si, FI_ADDR_STR), 0);
    EXPECT_EQ(si->addr_format, FI_ADDR_STR);
    ASSERT_NE(si->src_addr, nullptr);
    std::string src = static_cast<const char *>(si->src_addr);
    EXPECT_EQ(si->src_addrlen, src.size() + 1);
    EXPECT_EQ(src.rfind("fi_shm://", 0), 0u) << src;
    EXPECT_EQ(src.substr(src.size() - s.size() - 1), ":" + s) << src;
    ASSERT_EQ(ask("127.0.0.1", s.c_str(), 0, &ci, FI_ADDR_STR), 0);
    side srv, cli;
    ASSERT_EQ(srv.open(si), 0);
    ASSERT_EQ(cli.open(ci), 0);
    char name[128];
    std::size_t len = 8;
    EXPECT_EQ(getname(&srv.ep->fid, name, &len), -FI_ETOOSMALL);
    EXPECT_GT(len, 8u);
    len = sizeof name;
    ASSERT_EQ(getname(&srv.ep->fid, name, &len), 0);
    EXPECT_EQ(len, std::strlen(name) + 1);
    EXPECT_EQ(std::string(name).rfind("fi_shm://", 0), 0u) << name;
    const char *addrs[2] = {static_cast<const char *>(ci->dest_addr), name};
    fi_addr_t fa[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
    ASSERT_EQ(av_insert(cli.av, addrs, 2, fa, 0, nullptr), 2);
    char got[128];
    for (fi_addr_t x : fa) {
        std::size_t glen = sizeof got;
        ASSERT_EQ(av_lookup(cli.av, x, got, &glen), 0);
        EXPECT_STREQ(got, name) << "both are the server's endpoint";
        EXPECT_EQ(glen, std::strlen(name) + 1);
    }
    char text[128];
    std::size_t tlen = sizeof text;
    ASSERT_EQ(av_straddr(cli.av, name, text, &tlen), text);
    EXPECT_STREQ(text, name);
    const char *bad[1] = {"fi_sockaddr_in://10.0.0.1:7"};
    fi_addr_t b = 0;
    EXPECT_EQ(av_insert(cli.av, bad, 1, &b, 0, nullptr), 0) << "another provider's format";
    // an FI_ADDR_STR address as getinfo's node
    info *di = nullptr;
    ASSERT_EQ(ask(name, nullptr, 0, &di, FI_ADDR_STR), 0);
    EXPECT_STREQ(static_cast<const char *>(di->dest_addr), name);
    freeinfo(di);
    freeinfo(si);
    freeinfo(ci);
}
