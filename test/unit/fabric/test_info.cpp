// getinfo hint matching, attribute fill, dup/free, provider filter syntax.
#include <gtest/gtest.h>

#include <cstring>

#include "fabric/api.h"
#include "fabric/provider.h"
#include "fabric/util/info.h"
#include "loop_prov.h"

using namespace shunt;
using namespace shunt::fabric;

TEST(FabricInfo, DupinfoIsADeepCopy)
{
    info *a = allocinfo();
    ASSERT_NE(a, nullptr);
    a->fabric_attr->name = ::strdup("fab");
    a->domain_attr->name = ::strdup("dom");
    a->caps = FI_MSG;
    int addr = 42;
    a->src_addr = std::malloc(sizeof addr);
    std::memcpy(a->src_addr, &addr, sizeof addr);
    a->src_addrlen = sizeof addr;
    info *b = dupinfo(a);
    ASSERT_NE(b, nullptr);
    EXPECT_NE(b->fabric_attr, a->fabric_attr);
    EXPECT_NE(b->fabric_attr->name, a->fabric_attr->name);
    EXPECT_STREQ(b->fabric_attr->name, "fab");
    EXPECT_STREQ(b->domain_attr->name, "dom");
    EXPECT_NE(b->src_addr, a->src_addr);
    EXPECT_EQ(std::memcmp(b->src_addr, &addr, sizeof addr), 0);
    EXPECT_EQ(b->caps, FI_MSG);
    b->caps = FI_RMA;
    EXPECT_EQ(a->caps, FI_MSG);
    freeinfo(a);
    freeinfo(b);
    freeinfo(nullptr);
    info *z = dupinfo(nullptr);
    ASSERT_NE(z, nullptr);
    EXPECT_NE(z->ep_attr, nullptr);
    freeinfo(z);
}

TEST(FabricInfo, GetinfoRejectsBadArguments)
{
    info *out = nullptr;
    EXPECT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, nullptr, nullptr), -FI_EINVAL);
    EXPECT_EQ(getinfo(FI_VERSION(9, 0), nullptr, nullptr, 0, nullptr, &out), -FI_ENOSYS);
    EXPECT_EQ(out, nullptr);
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
    h->tx_attr->caps = FI_RMA; // not a subset of caps
    EXPECT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), -FI_EINVAL);
    freeinfo(h);
}

TEST(FabricInfo, GetinfoFillsAttributesForMatchingHints)
{
    info *h = test::loop_hints(FI_EP_RDM, FI_TAGGED);
    info *out = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->next, nullptr); // only RDM asked
    EXPECT_EQ(out->ep_attr->type, FI_EP_RDM);
    EXPECT_TRUE(out->caps & FI_TAGGED);
    EXPECT_FALSE(out->caps & FI_RMA); // only what was asked (plus secondary caps)
    EXPECT_STREQ(out->fabric_attr->prov_name, "loop");
    EXPECT_EQ(out->fabric_attr->prov_version, FI_VERSION(1, 0));
    EXPECT_EQ(out->tx_attr->inject_size, 64u);
    EXPECT_EQ(out->ep_attr->max_msg_size, std::size_t(1) << 20);
    EXPECT_EQ(out->tx_attr->iov_limit, 4u);
    EXPECT_EQ(out->tx_attr->msg_order, FI_ORDER_SAS);
    EXPECT_EQ(out->ep_attr->tx_ctx_cnt, 1u);
    EXPECT_EQ(out->ep_attr->mem_tag_format, ~0ULL);
    EXPECT_TRUE(out->tx_attr->caps & FI_TAGGED);
    EXPECT_FALSE(out->tx_attr->caps & FI_RECV);
    EXPECT_TRUE(out->rx_attr->caps & FI_RECV);
    freeinfo(out);
    freeinfo(h);
}

TEST(FabricInfo, GetinfoWithoutHintsListsEveryEndpointType)
{
    info *out = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, nullptr, &out), 0);
    int rdm = 0, msg = 0, dgram = 0;
    for (info *i = out; i; i = i->next)
        if (std::strcmp(i->fabric_attr->prov_name, "loop") == 0) {
            rdm += i->ep_attr->type == FI_EP_RDM;
            msg += i->ep_attr->type == FI_EP_MSG;
            dgram += i->ep_attr->type == FI_EP_DGRAM;
        }
    EXPECT_EQ(rdm, 1);
    EXPECT_EQ(msg, 1);
    EXPECT_EQ(dgram, 1);
    freeinfo(out);
}

TEST(FabricInfo, GetinfoRefusesWhatTheProviderCannotGive)
{
    struct {
        const char *why;
        void (*tweak)(info *);
    } cases[] = {
        {"capability", [](info *h) { h->caps = FI_COLLECTIVE; }},
        {"inject size", [](info *h) { h->tx_attr->inject_size = 65; }},
        {"max msg size", [](info *h) { h->ep_attr->max_msg_size = (std::size_t(1) << 20) + 1; }},
        {"iov limit", [](info *h) { h->tx_attr->iov_limit = 5; }},
        {"order", [](info *h) { h->tx_attr->msg_order = FI_ORDER_RAW; }},
        {"progress", [](info *h) { h->domain_attr->data_progress = FI_PROGRESS_AUTO; }},
        {"protocol", [](info *h) { h->ep_attr->protocol = FI_PROTO_UDP; }},
        {"address format", [](info *h) { h->addr_format = FI_SOCKADDR_IN; }},
        {"domain name", [](info *h) { h->domain_attr->name = ::strdup("other"); }},
        {"commit complete", [](info *h) { h->tx_attr->op_flags = FI_COMMIT_COMPLETE; }},
        {"provider name", [](info *h) {
             std::free(h->fabric_attr->prov_name);
             h->fabric_attr->prov_name = ::strdup("nosuch");
         }},
    };
    for (auto &c : cases) {
        info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
        c.tweak(h);
        info *out = nullptr;
        EXPECT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), -FI_ENODATA) << c.why;
        EXPECT_EQ(out, nullptr) << c.why;
        freeinfo(h);
    }
}

TEST(FabricInfo, GetinfoNarrowsChoicesToTheHints)
{
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->domain_attr->av_type = FI_AV_MAP;
    h->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_RAW;
    h->ep_attr->mem_tag_format = FI_TAG_MPI;
    h->tx_attr->size = 16;
    info *out = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    EXPECT_EQ(out->domain_attr->threading, FI_THREAD_DOMAIN);
    EXPECT_EQ(out->domain_attr->av_type, FI_AV_MAP);
    EXPECT_EQ(out->domain_attr->mr_mode, 0) << "loop requires no MR mode: accepted bits are not echoed";
    EXPECT_EQ(out->ep_attr->mem_tag_format, FI_TAG_MPI);
    EXPECT_EQ(out->tx_attr->size, 16u);
    freeinfo(out);
    freeinfo(h);
}

TEST(FabricInfo, MatchRequiresModeAndMrModeBitsToBeAccepted)
{
    info *offer = test::loop_hints(FI_EP_RDM, FI_MSG);
    offer->caps = FI_MSG | FI_SEND | FI_RECV;
    offer->mode = FI_CONTEXT;
    offer->ep_attr->max_msg_size = 100;
    util::info_limits lim;
    lim.threading_mask = 1u << FI_THREAD_SAFE;
    lim.progress_mask = 1u << FI_PROGRESS_MANUAL;
    lim.av_type_mask = 1u << FI_AV_TABLE;
    lim.mr_mode_required = FI_MR_LOCAL;
    info *h = allocinfo();
    h->caps = FI_MSG;
    info *out = nullptr;
    EXPECT_EQ(util::match(FI_API_VERSION, offer, lim, h, &out), -FI_ENODATA) << "mode 0 accepts no mode bit";
    h->mode = FI_CONTEXT;
    EXPECT_EQ(util::match(FI_API_VERSION, offer, lim, h, &out), -FI_ENODATA) << "FI_MR_LOCAL not accepted";
    h->domain_attr->mr_mode = FI_MR_LOCAL;
    ASSERT_EQ(util::match(FI_API_VERSION, offer, lim, h, &out), 0);
    EXPECT_EQ(out->domain_attr->mr_mode, FI_MR_LOCAL);
    EXPECT_EQ(out->mode, FI_CONTEXT);
    freeinfo(out);
    // FI_MR_BASIC is read as VIRT_ADDR | ALLOCATED | PROV_KEY: no LOCAL
    h->domain_attr->mr_mode = FI_MR_BASIC;
    EXPECT_EQ(util::match(FI_API_VERSION, offer, lim, h, &out), -FI_ENODATA);
    EXPECT_EQ(util::mr_mode_normalize(FI_MR_BASIC), FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
    EXPECT_EQ(util::mr_mode_normalize(FI_MR_SCALABLE), 0);
    // no hints at all: the offer as is
    ASSERT_EQ(util::match(FI_API_VERSION, offer, lim, nullptr, &out), 0);
    EXPECT_EQ(out->ep_attr->max_msg_size, 100u);
    freeinfo(out);
    freeinfo(h);
    freeinfo(offer);
}

// fi_domain(3) mr_mode: on input the modes the application supports, on
// output the modes the provider requires -- never more.
TEST(FabricInfo, GetinfoReportsOnlyTheMrModesTheProviderRequires)
{
    info *offer = test::loop_hints(FI_EP_RDM, FI_MSG);
    offer->caps = FI_MSG | FI_SEND | FI_RECV;
    util::info_limits lim;
    lim.threading_mask = 1u << FI_THREAD_SAFE;
    lim.progress_mask = 1u << FI_PROGRESS_MANUAL;
    lim.av_type_mask = 1u << FI_AV_TABLE;
    lim.mr_mode_required = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
    info *h = allocinfo();
    h->caps = FI_MSG;
    h->mode = offer->mode;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_ENDPOINT | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY |
                              FI_MR_RAW | FI_MR_HMEM;
    info *out = nullptr;
    ASSERT_EQ(util::match(FI_API_VERSION, offer, lim, h, &out), 0);
    EXPECT_EQ(out->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY)
        << "bits the application merely accepts must not come back as requirements";
    freeinfo(out);
    out = nullptr;
    // legacy FI_MR_BASIC: refused unless the provider follows its rules
    // (test_getinfo_rules.cpp has the legacy modes)
    h->domain_attr->mr_mode = FI_MR_BASIC;
    EXPECT_EQ(util::match(FI_API_VERSION, offer, lim, h, &out), -FI_ENODATA);
    freeinfo(h);
    freeinfo(offer);
}

TEST(FabricInfo, ProviderFilterFollowsFiProviderSyntax)
{
    EXPECT_TRUE(provider_filter_match("", "shm"));
    EXPECT_TRUE(provider_filter_match(nullptr, "shm"));
    EXPECT_TRUE(provider_filter_match("shm", "shm"));
    EXPECT_TRUE(provider_filter_match("SHM", "shm"));
    EXPECT_TRUE(provider_filter_match("loop,shm", "shm"));
    EXPECT_FALSE(provider_filter_match("loop", "shm"));
    EXPECT_FALSE(provider_filter_match("^shm", "shm"));
    EXPECT_TRUE(provider_filter_match("^shm", "loop"));
    EXPECT_FALSE(provider_filter_match("^loop,shm", "shm"));
    EXPECT_TRUE(provider_filter_match("shm;rxm", "shm;rxm"));
    EXPECT_TRUE(provider_filter_match("rxm", "shm;rxm"));
    EXPECT_FALSE(provider_filter_match("shm", "shm;rxm"));
    EXPECT_FALSE(provider_filter_match("^rxm", "mlx5;rxm"));
}

TEST(FabricInfo, InfoTostrNamesTheProvider)
{
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
    info *out = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &out), 0);
    char buf[2048];
    std::size_t n = info_tostr(out, buf, sizeof buf);
    EXPECT_GT(n, 0u);
    EXPECT_NE(std::strstr(buf, "provider: loop"), nullptr);
    EXPECT_NE(std::strstr(buf, "FI_EP_RDM"), nullptr);
    char small[8];
    EXPECT_EQ(info_tostr(out, small, sizeof small), n); // full length reported
    EXPECT_EQ(std::strlen(small), 7u);
    freeinfo(out);
    freeinfo(h);
}
