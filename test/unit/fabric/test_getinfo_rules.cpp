// getinfo's capability and attribute rules, case by case (fi_getinfo(3),
// fi_domain(3), and libfabric's reference checks in util_attr.c):
// modifier groups, secondary and domain capabilities, context counts, and
// every MR mode at every API version. Through the loop provider (getinfo)
// and util::match with the limits of the vq provider's kind.
#include <gtest/gtest.h>

#include <cstring>

#include "fabric/api.h"
#include "fabric/util/info.h"
#include "loop_prov.h"

using namespace shunt;
using namespace shunt::fabric;

namespace {

// The one RDM answer of the loop provider for @p h, or null (rc in *rc).
info *loop_rdm(info *h, int *rc_out = nullptr, std::uint32_t version = FI_API_VERSION)
{
    info *out = nullptr;
    int rc = getinfo(version, nullptr, nullptr, 0, h, &out);
    if (rc_out)
        *rc_out = rc;
    return rc ? nullptr : out;
}

// An offer shaped like the vq provider's RDM offer.
info *rdm_offer()
{
    info *o = test::loop_hints(FI_EP_RDM, 0);
    o->mode = 0;
    o->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
              FI_REMOTE_WRITE | FI_MULTI_RECV | FI_DIRECTED_RECV | FI_SOURCE | FI_LOCAL_COMM;
    o->domain_attr->caps = FI_LOCAL_COMM;
    o->domain_attr->max_ep_tx_ctx = 16;
    o->domain_attr->max_ep_rx_ctx = 16;
    o->domain_attr->tx_ctx_cnt = 256 * 16;
    o->domain_attr->rx_ctx_cnt = 256 * 16;
    o->domain_attr->ep_cnt = 256;
    o->ep_attr->max_msg_size = 1 << 20;
    o->ep_attr->tx_ctx_cnt = 1;
    o->ep_attr->rx_ctx_cnt = 1;
    o->tx_attr->size = 64;
    o->rx_attr->size = 64;
    o->tx_attr->msg_order = o->rx_attr->msg_order = FI_ORDER_SAS;
    o->domain_attr->resource_mgmt = FI_RM_ENABLED;
    return o;
}

util::info_limits vq_like()
{
    util::info_limits l;
    l.threading_mask = 1u << FI_THREAD_SAFE;
    l.progress_mask = 1u << FI_PROGRESS_MANUAL;
    l.av_type_mask = 1u << FI_AV_TABLE;
    l.mr_mode_required = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
    l.mr_mode_legacy = FI_MR_BASIC;
    return l;
}

// Hints: caps and mr_mode, everything else open.
info *hints(std::uint64_t caps, int mr_mode)
{
    info *h = allocinfo();
    h->caps = caps;
    h->domain_attr->mr_mode = mr_mode;
    return h;
}

constexpr std::uint64_t rma_all = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

} // namespace

// fi_getinfo(3): "If no modifiers are specified for an applicable
// capability, all relevant modifiers are assumed" -- per group: FI_SEND /
// FI_RECV for messages, the four memory modifiers for RMA and atomics.
TEST(GetinfoRules, ModifierGroupsAreIndependent)
{
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE);
    info *out = loop_rdm(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->caps & (FI_SEND | FI_RECV), FI_SEND | FI_RECV) << "no message modifier given: both assumed";
    EXPECT_EQ(out->caps & rma_all, FI_WRITE | FI_REMOTE_WRITE) << "the RMA modifiers asked for, and only those";
    EXPECT_EQ(out->tx_attr->caps & (FI_MSG | FI_RMA | FI_SEND | FI_WRITE | FI_READ),
              FI_MSG | FI_RMA | FI_SEND | FI_WRITE);
    EXPECT_EQ(out->rx_attr->caps & (FI_MSG | FI_RMA | FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ),
              FI_MSG | FI_RMA | FI_RECV | FI_REMOTE_WRITE);
    freeinfo(out);
    freeinfo(h);

    h = test::loop_hints(FI_EP_RDM, FI_MSG | FI_SEND | FI_RMA);
    out = loop_rdm(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->caps & (FI_SEND | FI_RECV), FI_SEND) << "send-only stays send-only";
    EXPECT_EQ(out->caps & rma_all, rma_all) << "RMA without modifiers: all four";
    EXPECT_FALSE(out->rx_attr->caps & FI_RECV);
    freeinfo(out);
    freeinfo(h);

    h = test::loop_hints(FI_EP_RDM, FI_TAGGED);
    out = loop_rdm(h);
    ASSERT_NE(out, nullptr);
    EXPECT_FALSE(out->caps & (FI_MSG | FI_RMA | FI_ATOMIC)) << "primary capabilities only when asked";
    EXPECT_EQ(out->caps & (FI_SEND | FI_RECV), FI_SEND | FI_RECV);
    EXPECT_FALSE(out->caps & rma_all);
    freeinfo(out);
    freeinfo(h);
}

TEST(GetinfoRules, ContextCapsMayNameTheModifiersTheirCapabilityImplies)
{
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
    h->tx_attr->caps = FI_MSG | FI_SEND;
    h->rx_attr->caps = FI_MSG | FI_RECV;
    info *out = loop_rdm(h);
    ASSERT_NE(out, nullptr) << "FI_SEND / FI_RECV are implied by FI_MSG";
    EXPECT_EQ(out->tx_attr->caps & (FI_MSG | FI_SEND | FI_RECV), FI_MSG | FI_SEND);
    EXPECT_EQ(out->rx_attr->caps & (FI_MSG | FI_SEND | FI_RECV), FI_MSG | FI_RECV);
    freeinfo(out);
    // receive-side bits in tx caps are ignored, as libfabric does
    h->tx_attr->caps = FI_MSG | FI_SEND | FI_RECV | FI_MULTI_RECV;
    out = loop_rdm(h);
    ASSERT_NE(out, nullptr);
    EXPECT_FALSE(out->tx_attr->caps & (FI_RECV | FI_MULTI_RECV));
    freeinfo(out);
    // a primary capability the info does not ask for is inconsistent
    h->tx_attr->caps = FI_RMA;
    int rc = 0;
    EXPECT_EQ(loop_rdm(h, &rc), nullptr);
    EXPECT_EQ(rc, -FI_EINVAL);
    // a modifier of a group the info does not ask for, too
    h->tx_attr->caps = FI_MSG | FI_WRITE;
    EXPECT_EQ(loop_rdm(h, &rc), nullptr);
    EXPECT_EQ(rc, -FI_EINVAL);
    freeinfo(h);
}

TEST(GetinfoRules, SecondaryCapsAreReportedAndCostlyOnesOnlyWhenAsked)
{
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
    info *out = loop_rdm(h);
    ASSERT_NE(out, nullptr);
    EXPECT_TRUE(out->caps & FI_MULTI_RECV) << "a secondary capability the provider has";
    EXPECT_TRUE(out->caps & FI_LOCAL_COMM);
    EXPECT_FALSE(out->caps & FI_SOURCE) << "FI_SOURCE costs a lookup per receive: only when asked";
    EXPECT_FALSE(out->caps & FI_RMA_EVENT) << "FI_RMA_EVENT only when asked";
    freeinfo(out);
    h->caps |= FI_SOURCE | FI_RMA_EVENT;
    out = loop_rdm(h);
    ASSERT_NE(out, nullptr);
    EXPECT_TRUE(out->caps & FI_SOURCE);
    EXPECT_TRUE(out->caps & FI_RMA_EVENT);
    EXPECT_TRUE(out->rx_attr->caps & FI_SOURCE);
    freeinfo(out);
    h->caps = FI_MSG | FI_REMOTE_COMM; // loop is host local
    int rc = 0;
    EXPECT_EQ(loop_rdm(h, &rc), nullptr);
    EXPECT_EQ(rc, -FI_ENODATA);
    freeinfo(h);
    // no hints at all: everything the provider has
    out = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, nullptr, &out), 0);
    for (info *i = out; i; i = i->next) {
        if (!std::strcmp(i->fabric_attr->prov_name, "loop")) {
            EXPECT_TRUE(i->caps & FI_SOURCE);
        }
    }
    freeinfo(out);
}

// fi_domain(3): domain_attr->caps holds the domain capabilities
// (FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SHARED_AV...); hints asking for one
// the domain lacks get -FI_ENODATA (API 1.5 and later).
TEST(GetinfoRules, DomainCapsAreReportedCheckedAndEchoed)
{
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
    info *out = loop_rdm(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->domain_attr->caps, FI_LOCAL_COMM);
    freeinfo(out);
    h->domain_attr->caps = FI_LOCAL_COMM;
    out = loop_rdm(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->domain_attr->caps & FI_LOCAL_COMM, FI_LOCAL_COMM) << "asked for, echoed";
    freeinfo(out);
    for (std::uint64_t c : {FI_REMOTE_COMM, FI_SHARED_AV, FI_AV_USER_ID}) {
        h->domain_attr->caps = c;
        int rc = 0;
        EXPECT_EQ(loop_rdm(h, &rc), nullptr) << std::hex << c;
        EXPECT_EQ(rc, -FI_ENODATA) << std::hex << c;
    }
    // before API 1.5 the domain caps are not checked (libfabric)
    h->domain_attr->caps = FI_REMOTE_COMM;
    h->domain_attr->mr_mode = FI_MR_BASIC;
    out = loop_rdm(h, nullptr, FI_VERSION(1, 4));
    EXPECT_NE(out, nullptr);
    freeinfo(out);
    freeinfo(h);
}

TEST(GetinfoRules, ContextCountsAreReportedAndBounded)
{
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
    info *out = loop_rdm(h);
    ASSERT_NE(out, nullptr);
    EXPECT_GE(out->domain_attr->tx_ctx_cnt, out->domain_attr->max_ep_tx_ctx);
    EXPECT_GE(out->domain_attr->rx_ctx_cnt, out->domain_attr->max_ep_rx_ctx);
    EXPECT_GT(out->domain_attr->max_ep_tx_ctx, 1u);
    std::size_t max_tx = out->domain_attr->max_ep_tx_ctx, dom_tx = out->domain_attr->tx_ctx_cnt;
    freeinfo(out);
    h->ep_attr->tx_ctx_cnt = max_tx;
    h->ep_attr->rx_ctx_cnt = 2;
    out = loop_rdm(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->ep_attr->tx_ctx_cnt, max_tx);
    EXPECT_EQ(out->ep_attr->rx_ctx_cnt, 2u);
    freeinfo(out);
    int rc = 0;
    h->ep_attr->tx_ctx_cnt = max_tx + 1;
    EXPECT_EQ(loop_rdm(h, &rc), nullptr);
    EXPECT_EQ(rc, -FI_ENODATA);
    h->ep_attr->tx_ctx_cnt = 0;
    h->domain_attr->tx_ctx_cnt = dom_tx + 1;
    EXPECT_EQ(loop_rdm(h, &rc), nullptr);
    EXPECT_EQ(rc, -FI_ENODATA);
    h->domain_attr->tx_ctx_cnt = dom_tx;
    out = loop_rdm(h);
    EXPECT_NE(out, nullptr);
    freeinfo(out);
    freeinfo(h);

    // shared contexts: only where the provider has them and an endpoint can
    // bind one (max_ep_stx_ctx / max_ep_srx_ctx)
    info *o = rdm_offer();
    util::info_limits lim = vq_like();
    h = hints(FI_MSG, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY);
    h->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
    EXPECT_EQ(util::match(FI_API_VERSION, o, lim, h, &out), -FI_ENODATA) << "no shared contexts";
    lim.shared_ctx = true;
    EXPECT_EQ(util::match(FI_API_VERSION, o, lim, h, &out), -FI_ENODATA) << "max_ep_stx_ctx 0";
    o->domain_attr->max_ep_stx_ctx = 1;
    ASSERT_EQ(util::match(FI_API_VERSION, o, lim, h, &out), 0);
    EXPECT_EQ(out->ep_attr->tx_ctx_cnt, FI_SHARED_CONTEXT);
    freeinfo(out);
    freeinfo(h);
    freeinfo(o);
}

// Every MR mode at every API version against a provider that needs
// FI_MR_VIRT_ADDR | FI_MR_PROV_KEY for RMA targets and follows FI_MR_BASIC
// (the vq provider), exactly as libfabric's ofi_check_mr_mode and
// fi_alter_domain_attr decide.
TEST(GetinfoRules, MrModesOfEveryApiVersion)
{
    struct row {
        std::uint32_t version;
        std::uint64_t caps;
        int mr_mode;
        int rc;          ///< expected result
        int answer;      ///< expected answer mr_mode
        bool rma_target; ///< the answer keeps FI_REMOTE_READ/WRITE
    };
    const std::uint64_t rma = FI_RMA;
    const std::uint64_t rma_init = FI_RMA | FI_READ | FI_WRITE;
    const int vp = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
    const row rows[] = {
        // 1.5 and later (1.5, 1.17 as libfabric applications, 2.5 Shunt's own)
        {FI_VERSION(1, 5), FI_TAGGED, FI_MR_UNSPEC, 0, 0, false},
        {FI_VERSION(1, 17), FI_TAGGED, FI_MR_UNSPEC, 0, 0, false},
        {FI_API_VERSION, FI_TAGGED, FI_MR_UNSPEC, 0, 0, false},
        {FI_API_VERSION, FI_TAGGED, FI_MR_LOCAL, 0, 0, false}, // RMA-only bits are not demanded
        {FI_API_VERSION, FI_TAGGED, vp, 0, vp, false},
        {FI_API_VERSION, FI_TAGGED, FI_MR_BASIC, 0, FI_MR_BASIC, false},
        {FI_VERSION(1, 5), FI_TAGGED, FI_MR_BASIC, 0, FI_MR_BASIC, false},
        {FI_API_VERSION, FI_TAGGED, FI_MR_SCALABLE, -FI_ENODATA, 0, false},
        {FI_API_VERSION, FI_TAGGED, FI_MR_BASIC | FI_MR_LOCAL, -FI_ENODATA, 0, false},
        {FI_API_VERSION, rma, vp, 0, vp, true},
        {FI_API_VERSION, rma, vp | FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_ENDPOINT, 0, vp, true},
        {FI_VERSION(1, 17), rma, FI_MR_BASIC, 0, FI_MR_BASIC, true},
        {FI_VERSION(1, 17), rma, FI_MR_SCALABLE, -FI_ENODATA, 0, false},
        {FI_API_VERSION, rma, FI_MR_LOCAL, -FI_ENODATA, 0, false},
        {FI_API_VERSION, rma, FI_MR_VIRT_ADDR, -FI_ENODATA, 0, false},
        {FI_API_VERSION, rma, FI_MR_UNSPEC, 0, 0, false},          // RMA as initiator only
        {FI_API_VERSION, rma_init, FI_MR_LOCAL, 0, 0, false},      // initiators need no target bits
        {FI_VERSION(1, 5), FI_ATOMIC, FI_MR_UNSPEC, 0, 0, false},
        // before 1.5: an enumeration
        {FI_VERSION(1, 4), FI_TAGGED, FI_MR_UNSPEC, 0, FI_MR_BASIC, false},
        {FI_VERSION(1, 4), rma, FI_MR_UNSPEC, 0, FI_MR_BASIC, true},
        {FI_VERSION(1, 4), rma, FI_MR_BASIC, 0, FI_MR_BASIC, true},
        {FI_VERSION(1, 0), rma, FI_MR_BASIC, 0, FI_MR_BASIC, true},
        {FI_VERSION(1, 4), rma, FI_MR_SCALABLE, -FI_ENODATA, 0, false},
        {FI_VERSION(1, 4), FI_TAGGED, FI_MR_SCALABLE, -FI_ENODATA, 0, false},
        {FI_VERSION(1, 4), rma, vp, -FI_ENODATA, 0, false}, // bits mean nothing before 1.5
    };
    info *o = rdm_offer();
    for (const row &r : rows) {
        info *h = hints(r.caps, r.mr_mode);
        info *out = nullptr;
        int rc = util::match(r.version, o, vq_like(), h, &out);
        SCOPED_TRACE(testing::Message() << "version " << FI_MAJOR(r.version) << "." << FI_MINOR(r.version)
                                        << " caps 0x" << std::hex << r.caps << " mr_mode 0x" << r.mr_mode);
        EXPECT_EQ(rc, r.rc);
        if (rc == 0) {
            EXPECT_EQ(out->domain_attr->mr_mode, r.answer);
            if (r.caps & (FI_RMA | FI_ATOMIC)) {
                EXPECT_EQ((out->caps & (FI_REMOTE_READ | FI_REMOTE_WRITE)) != 0, r.rma_target);
            }
            freeinfo(out);
        }
        freeinfo(h);
    }
    freeinfo(o);
}

// A provider whose regions follow both legacy modes (the generic MR code:
// keys requested or chosen, offsets or virtual addresses).
TEST(GetinfoRules, LegacyModesAreEchoedAndOpenDomainsThatFollowThem)
{
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG | FI_RMA);
    for (int m : {FI_MR_BASIC, FI_MR_SCALABLE}) {
        for (std::uint32_t v : {FI_VERSION(1, 4), FI_VERSION(1, 5), FI_VERSION(1, 17), FI_API_VERSION}) {
            h->domain_attr->mr_mode = m;
            info *out = loop_rdm(h, nullptr, v);
            ASSERT_NE(out, nullptr) << m << " at " << std::hex << v;
            EXPECT_EQ(out->domain_attr->mr_mode, m);
            freeinfo(out);
        }
    }
    // 1.4 with FI_MR_UNSPEC: FI_MR_BASIC when the provider has both
    h->domain_attr->mr_mode = FI_MR_UNSPEC;
    info *out = loop_rdm(h, nullptr, FI_VERSION(1, 4));
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->domain_attr->mr_mode, FI_MR_BASIC);
    freeinfo(out);

    // A domain opened with FI_MR_SCALABLE uses the keys the application
    // requests; one opened with FI_MR_BASIC chooses them.
    for (int m : {FI_MR_SCALABLE, FI_MR_BASIC}) {
        h->domain_attr->mr_mode = m;
        out = loop_rdm(h);
        ASSERT_NE(out, nullptr);
        fid_fabric *fab = nullptr;
        fid_domain *dom = nullptr;
        ASSERT_EQ(fabric_open(out->fabric_attr, &fab, nullptr), 0);
        ASSERT_EQ(domain_open(fab, out, &dom, nullptr), 0);
        static char buf[64];
        fid_mr *mr = nullptr;
        int rc = mr_reg(dom, buf, sizeof buf, FI_REMOTE_WRITE, 0, 4242, 0, &mr, nullptr);
        ASSERT_EQ(rc, 0) << m;
        if (m == FI_MR_SCALABLE) {
            EXPECT_EQ(mr_key(mr), 4242u);
        }
        EXPECT_EQ(fabric::close(&mr->fid), 0);
        if (m == FI_MR_SCALABLE) {
            EXPECT_EQ(mr_reg(dom, buf, sizeof buf, FI_REMOTE_WRITE, 0, FI_KEY_NOTAVAIL, 0, &mr, nullptr), -FI_ENOKEY)
                << "FI_MR_SCALABLE: the application names the key";
        } else {
            ASSERT_EQ(mr_reg(dom, buf, sizeof buf, FI_REMOTE_WRITE, 0, FI_KEY_NOTAVAIL, 0, &mr, nullptr), 0);
            EXPECT_NE(mr_key(mr), FI_KEY_NOTAVAIL);
            EXPECT_EQ(fabric::close(&mr->fid), 0);
        }
        EXPECT_EQ(fabric::close(&dom->fid), 0);
        EXPECT_EQ(fabric::close(&fab->fid), 0);
        freeinfo(out);
    }
    freeinfo(h);
}

// A provider that needs local registration (FI_MR_LOCAL): applications
// accept it in mr_mode or, where mr_mode cannot say it, with the
// FI_LOCAL_MR mode bit, which the answer then keeps.
TEST(GetinfoRules, LocalRegistrationThroughModeOrMrMode)
{
    info *o = rdm_offer();
    util::info_limits lim = vq_like();
    lim.mr_mode_required = FI_MR_LOCAL;
    info *h = hints(FI_MSG, FI_MR_UNSPEC);
    info *out = nullptr;
    EXPECT_EQ(util::match(FI_API_VERSION, o, lim, h, &out), -FI_ENODATA);
    h->domain_attr->mr_mode = FI_MR_LOCAL;
    ASSERT_EQ(util::match(FI_API_VERSION, o, lim, h, &out), 0);
    EXPECT_EQ(out->domain_attr->mr_mode, FI_MR_LOCAL);
    EXPECT_FALSE(out->mode & FI_LOCAL_MR);
    freeinfo(out);
    h->domain_attr->mr_mode = FI_MR_UNSPEC;
    h->mode = FI_LOCAL_MR;
    ASSERT_EQ(util::match(FI_API_VERSION, o, lim, h, &out), 0);
    EXPECT_TRUE(out->mode & FI_LOCAL_MR);
    freeinfo(out);
    // before 1.5: FI_LOCAL_MR is the only way, with a legacy mode
    ASSERT_EQ(util::match(FI_VERSION(1, 4), o, lim, h, &out), 0);
    EXPECT_TRUE(out->mode & FI_LOCAL_MR);
    EXPECT_EQ(out->domain_attr->mr_mode, FI_MR_BASIC);
    freeinfo(out);
    h->mode = 0;
    EXPECT_EQ(util::match(FI_VERSION(1, 4), o, lim, h, &out), -FI_ENODATA);
    freeinfo(h);
    freeinfo(o);
}

TEST(GetinfoRules, AttributesOfTheAnswerFollowTheHints)
{
    info *o = rdm_offer();
    util::info_limits lim = vq_like();
    lim.addr_formats = 1ULL << FI_ADDR_STR;
    info *h = hints(FI_TAGGED, FI_MR_UNSPEC);
    h->addr_format = FI_ADDR_STR;
    h->domain_attr->resource_mgmt = FI_RM_DISABLED;
    h->rx_attr->op_flags = FI_COMPLETION;
    h->tx_attr->op_flags = FI_COMPLETION;
    h->rx_attr->msg_order = FI_ORDER_SAS;
    info *out = nullptr;
    ASSERT_EQ(util::match(FI_API_VERSION, o, lim, h, &out), 0);
    EXPECT_EQ(out->addr_format, FI_ADDR_STR) << "a format the provider can give";
    EXPECT_EQ(out->domain_attr->resource_mgmt, o->domain_attr->resource_mgmt)
        << "resource management is what the provider does";
    EXPECT_EQ(out->rx_attr->op_flags, FI_COMPLETION);
    freeinfo(out);
    h->addr_format = FI_SOCKADDR_IN;
    EXPECT_EQ(util::match(FI_API_VERSION, o, lim, h, &out), -FI_ENODATA);
    h->addr_format = FI_FORMAT_UNSPEC;
    h->tx_attr->comp_order = FI_ORDER_SAS; // deprecated; the provider gives none
    EXPECT_EQ(util::match(FI_API_VERSION, o, lim, h, &out), -FI_ENODATA);
    freeinfo(h);
    freeinfo(o);
}
