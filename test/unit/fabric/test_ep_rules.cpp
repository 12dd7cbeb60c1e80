// The provider-independent rules of fi_endpoint(3), one test per rule,
// through the loop provider (the shared endpoint base enforces them).
#include "fixture.h"

using namespace shunt;
using namespace shunt::fabric;
using test::loop_ep;

namespace {
struct ep_rules : ::testing::Test {
    test::loop_env env;
    void SetUp() override { ASSERT_EQ(env.open(), 0); }
    fid_cq *cq(wait_obj w = FI_WAIT_NONE)
    {
        cq_attr a;
        a.wait_obj = w;
        fid_cq *c = nullptr;
        EXPECT_EQ(cq_open(env.domain, &a, &c, nullptr), 0);
        return c;
    }
    fid_av *av()
    {
        av_attr a;
        fid_av *v = nullptr;
        EXPECT_EQ(av_open(env.domain, &a, &v, nullptr), 0);
        return v;
    }
};
} // namespace

TEST_F(ep_rules, EndpointsAreCreatedDisabled_PostingBeforeEnableIsOpBadState)
{
    loop_ep e;
    ASSERT_EQ(test::open_ep(env, e, FI_TRANSMIT | FI_RECV, false), 0);
    char buf[8] = {};
    EXPECT_EQ(recv(e.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EOPBADSTATE);
    EXPECT_EQ(trecv(e.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, 0, 0, nullptr), -FI_EOPBADSTATE);
    EXPECT_EQ(send(e.ep, buf, sizeof buf, nullptr, 0, nullptr), -FI_EOPBADSTATE);
    EXPECT_EQ(inject(e.ep, buf, sizeof buf, 0), -FI_EOPBADSTATE);
    EXPECT_EQ(write(e.ep, buf, sizeof buf, nullptr, 0, 0, 1, nullptr), -FI_EOPBADSTATE);
    EXPECT_EQ(atomic(e.ep, buf, 1, nullptr, 0, 0, 1, FI_UINT64, FI_SUM, nullptr), -FI_EOPBADSTATE);
    ASSERT_EQ(enable(e.ep), 0);
    EXPECT_EQ(recv(e.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    EXPECT_EQ(enable(e.ep), 0) << "enabling twice is harmless";
}

TEST_F(ep_rules, EnableWithoutTransmitCqIsNoCq)
{
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &ep, nullptr), 0);
    fid_cq *c = cq();
    fid_av *v = av();
    ASSERT_EQ(ep_bind(ep, &v->fid, 0), 0);
    ASSERT_EQ(ep_bind(ep, &c->fid, FI_RECV), 0);
    EXPECT_EQ(enable(ep), -FI_ENOCQ);
    EXPECT_EQ(close(&ep->fid), 0);
    EXPECT_EQ(close(&c->fid), 0);
    EXPECT_EQ(close(&v->fid), 0);
}

TEST_F(ep_rules, EnableWithoutReceiveCqIsNoCqEvenWithSelectiveCompletion)
{
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &ep, nullptr), 0);
    fid_cq *c = cq();
    fid_av *v = av();
    fid_cntr *n = nullptr;
    ASSERT_EQ(cntr_open(env.domain, nullptr, &n, nullptr), 0);
    ASSERT_EQ(ep_bind(ep, &v->fid, 0), 0);
    ASSERT_EQ(ep_bind(ep, &c->fid, FI_TRANSMIT | FI_SELECTIVE_COMPLETION), 0);
    ASSERT_EQ(ep_bind(ep, &n->fid, FI_RECV), 0) << "a counter does not replace the CQ";
    EXPECT_EQ(enable(ep), -FI_ENOCQ);
    EXPECT_EQ(close(&ep->fid), 0);
    EXPECT_EQ(close(&n->fid), 0);
    EXPECT_EQ(close(&c->fid), 0);
    EXPECT_EQ(close(&v->fid), 0);
}

TEST_F(ep_rules, SendOnlyEndpointNeedsOnlyATransmitCq)
{
    info *i = dupinfo(env.info);
    i->caps = FI_MSG | FI_SEND;
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(env.domain, i, &ep, nullptr), 0);
    fid_cq *c = cq();
    fid_av *v = av();
    ASSERT_EQ(ep_bind(ep, &v->fid, 0), 0);
    ASSERT_EQ(ep_bind(ep, &c->fid, FI_TRANSMIT), 0);
    EXPECT_EQ(enable(ep), 0);
    char b[4];
    EXPECT_EQ(recv(ep, b, 4, nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EOPNOTSUPP) << "no FI_RECV capability";
    context ctx{};
    msg_tagged m;
    m.addr = FI_ADDR_UNSPEC;
    m.context = &ctx;
    EXPECT_EQ(trecvmsg(ep, &m, FI_PEEK), -FI_EOPNOTSUPP) << "no FI_TAGGED and FI_RECV";
    EXPECT_EQ(trecvmsg(ep, &m, FI_PEEK | FI_CLAIM), -FI_EOPNOTSUPP);
    cq_tagged_entry e{};
    EXPECT_EQ(cq_read(c, &e, 1), -FI_EAGAIN) << "and nothing reported";
    EXPECT_EQ(close(&ep->fid), 0);
    EXPECT_EQ(close(&c->fid), 0);
    EXPECT_EQ(close(&v->fid), 0);
    freeinfo(i);
}

TEST_F(ep_rules, ConnectionlessEndpointNeedsExactlyOneAv)
{
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &ep, nullptr), 0);
    fid_cq *c = cq();
    ASSERT_EQ(ep_bind(ep, &c->fid, FI_TRANSMIT | FI_RECV), 0);
    EXPECT_EQ(enable(ep), -FI_ENOAV);
    fid_av *v1 = av(), *v2 = av();
    ASSERT_EQ(ep_bind(ep, &v1->fid, 0), 0);
    EXPECT_EQ(ep_bind(ep, &v2->fid, 0), -FI_EBUSY) << "a second AV";
    EXPECT_EQ(ep_bind(ep, &v2->fid, FI_SEND), -FI_EBADFLAGS);
    EXPECT_EQ(enable(ep), 0);
    EXPECT_EQ(close(&v1->fid), -FI_EBUSY) << "bound AV cannot be closed";
    EXPECT_EQ(close(&ep->fid), 0);
    EXPECT_EQ(close(&c->fid), 0);
    EXPECT_EQ(close(&v1->fid), 0);
    EXPECT_EQ(close(&v2->fid), 0);
}

TEST_F(ep_rules, MsgEndpointNeedsAnEqAndTakesNoAv)
{
    test::loop_env menv;
    ASSERT_EQ(menv.open(FI_EP_MSG), 0);
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(menv.domain, menv.info, &ep, nullptr), 0);
    cq_attr ca;
    fid_cq *c = nullptr;
    ASSERT_EQ(cq_open(menv.domain, &ca, &c, nullptr), 0);
    ASSERT_EQ(ep_bind(ep, &c->fid, FI_TRANSMIT | FI_RECV), 0);
    av_attr aa;
    fid_av *v = nullptr;
    ASSERT_EQ(av_open(menv.domain, &aa, &v, nullptr), 0);
    EXPECT_EQ(ep_bind(ep, &v->fid, 0), -FI_EINVAL);
    EXPECT_EQ(enable(ep), -FI_ENOEQ);
    eq_attr ea;
    fid_eq *eq = nullptr;
    ASSERT_EQ(eq_open(menv.fabric, &ea, &eq, nullptr), 0);
    ASSERT_EQ(ep_bind(ep, &eq->fid, 0), 0);
    EXPECT_EQ(enable(ep), 0);
    EXPECT_EQ(close(&ep->fid), 0);
    EXPECT_EQ(close(&eq->fid), 0);
    EXPECT_EQ(close(&v->fid), 0);
    EXPECT_EQ(close(&c->fid), 0);
}

TEST_F(ep_rules, CqCounterAvAndSharedContextsMustBeBoundBeforeEnable)
{
    loop_ep e;
    ASSERT_EQ(test::open_ep(env, e), 0);
    fid_cq *c = cq();
    fid_cntr *n = nullptr;
    ASSERT_EQ(cntr_open(env.domain, nullptr, &n, nullptr), 0);
    fid_av *v = av();
    EXPECT_EQ(ep_bind(e.ep, &c->fid, FI_TRANSMIT), -FI_EOPBADSTATE);
    EXPECT_EQ(ep_bind(e.ep, &n->fid, FI_SEND), -FI_EOPBADSTATE);
    EXPECT_EQ(ep_bind(e.ep, &v->fid, 0), -FI_EOPBADSTATE);
    fid_stx *stx = nullptr;
    ASSERT_EQ(stx_context(env.domain, nullptr, &stx, nullptr), 0);
    EXPECT_EQ(ep_bind(e.ep, &stx->fid, 0), -FI_EOPBADSTATE);
    EXPECT_EQ(close(&stx->fid), 0);
    EXPECT_EQ(close(&v->fid), 0);
    EXPECT_EQ(close(&n->fid), 0);
    EXPECT_EQ(close(&c->fid), 0);
}

TEST_F(ep_rules, OneCqPerDirectionAndOneCounterPerEvent)
{
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &ep, nullptr), 0);
    fid_cq *a = cq(), *b = cq();
    ASSERT_EQ(ep_bind(ep, &a->fid, FI_TRANSMIT), 0);
    EXPECT_EQ(ep_bind(ep, &b->fid, FI_TRANSMIT), -FI_EBUSY);
    EXPECT_EQ(ep_bind(ep, &b->fid, FI_RECV), 0);
    fid_cntr *n1 = nullptr, *n2 = nullptr;
    ASSERT_EQ(cntr_open(env.domain, nullptr, &n1, nullptr), 0);
    ASSERT_EQ(cntr_open(env.domain, nullptr, &n2, nullptr), 0);
    ASSERT_EQ(ep_bind(ep, &n1->fid, FI_WRITE), 0);
    EXPECT_EQ(ep_bind(ep, &n2->fid, FI_WRITE), -FI_EBUSY);
    EXPECT_EQ(ep_bind(ep, &n2->fid, FI_READ | FI_SEND), 0);
    EXPECT_EQ(close(&a->fid), -FI_EBUSY) << "bound CQ";
    EXPECT_EQ(close(&ep->fid), 0);
    for (fid *f : {&a->fid, &b->fid, &n1->fid, &n2->fid})
        EXPECT_EQ(close(f), 0);
}

TEST_F(ep_rules, BindFlagsAreChecked)
{
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &ep, nullptr), 0);
    fid_cq *c = cq();
    EXPECT_EQ(ep_bind(ep, &c->fid, FI_SELECTIVE_COMPLETION), -FI_EINVAL)
        << "FI_SELECTIVE_COMPLETION must be OR-ed with a direction";
    EXPECT_EQ(ep_bind(ep, &c->fid, 0), -FI_EINVAL);
    EXPECT_EQ(ep_bind(ep, &c->fid, FI_TRANSMIT | (1ULL << 40)), -FI_EBADFLAGS);
    fid_cntr *n = nullptr;
    ASSERT_EQ(cntr_open(env.domain, nullptr, &n, nullptr), 0);
    EXPECT_EQ(ep_bind(ep, &n->fid, 0), -FI_EBADFLAGS);
    info *i = dupinfo(env.info);
    i->caps &= ~FI_RMA_EVENT;
    fid_ep *ep2 = nullptr;
    ASSERT_EQ(endpoint(env.domain, i, &ep2, nullptr), 0);
    EXPECT_EQ(ep_bind(ep2, &n->fid, FI_REMOTE_WRITE), -FI_EOPNOTSUPP) << "needs FI_RMA_EVENT";
    EXPECT_EQ(ep_bind(ep, &n->fid, FI_REMOTE_WRITE), 0);
    EXPECT_EQ(ep_bind(nullptr, &n->fid, FI_SEND), -FI_EINVAL);
    EXPECT_EQ(ep_bind(ep, nullptr, FI_SEND), -FI_EINVAL);
    // objects of another domain
    test::loop_env other;
    ASSERT_EQ(other.open(), 0);
    cq_attr ca;
    fid_cq *oc = nullptr;
    ASSERT_EQ(cq_open(other.domain, &ca, &oc, nullptr), 0);
    EXPECT_EQ(ep_bind(ep, &oc->fid, FI_TRANSMIT), -FI_EDOMAIN);
    EXPECT_EQ(close(&oc->fid), 0);
    EXPECT_EQ(close(&ep2->fid), 0);
    EXPECT_EQ(close(&ep->fid), 0);
    EXPECT_EQ(close(&n->fid), 0);
    EXPECT_EQ(close(&c->fid), 0);
    freeinfo(i);
}

TEST_F(ep_rules, SetoptIsRefusedAfterEnableExceptMinMultiRecv)
{
    loop_ep e;
    ASSERT_EQ(test::open_ep(env, e, FI_TRANSMIT | FI_RECV, false), 0);
    std::size_t v = 32;
    EXPECT_EQ(setopt(&e.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_MSG_SIZE, &v, sizeof v), 0);
    ASSERT_EQ(enable(e.ep), 0);
    EXPECT_EQ(setopt(&e.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_MSG_SIZE, &v, sizeof v), -FI_EOPBADSTATE);
    EXPECT_EQ(setopt(&e.ep->fid, FI_OPT_ENDPOINT, FI_OPT_INJECT_MSG_SIZE, &v, sizeof v), -FI_EOPBADSTATE);
    EXPECT_EQ(setopt(&e.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, sizeof v), 0);
    std::size_t got = 0, len = sizeof got;
    ASSERT_EQ(getopt(&e.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &len), 0);
    EXPECT_EQ(got, 32u);
}

TEST_F(ep_rules, EveryOptionOfTheSpecWithItsBounds)
{
    loop_ep e;
    ASSERT_EQ(test::open_ep(env, e, FI_TRANSMIT | FI_RECV, false), 0);
    fid *f = &e.ep->fid;
    std::size_t v = 0, len = sizeof v;
    ASSERT_EQ(getopt(f, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &v, &len), 0);
    EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &v, sizeof v), -FI_ENOPROTOOPT) << "read only";
    for (int o : {FI_OPT_MAX_MSG_SIZE, FI_OPT_MAX_TAGGED_SIZE, FI_OPT_MAX_RMA_SIZE, FI_OPT_MAX_ATOMIC_SIZE}) {
        len = sizeof v;
        ASSERT_EQ(getopt(f, FI_OPT_ENDPOINT, o, &v, &len), 0) << o;
        EXPECT_EQ(v, env.info->ep_attr->max_msg_size) << o;
        std::size_t big = env.info->ep_attr->max_msg_size + 1;
        EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, o, &big, sizeof big), -FI_EINVAL) << "above ep_attr::max_msg_size";
        std::size_t ok = 100;
        EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, o, &ok, sizeof ok), 0);
        EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, o, &ok, 4), -FI_EINVAL) << "optlen";
        len = sizeof v;
        ASSERT_EQ(getopt(f, FI_OPT_ENDPOINT, o, &v, &len), 0);
        EXPECT_EQ(v, 100u);
    }
    for (int o : {FI_OPT_INJECT_MSG_SIZE, FI_OPT_INJECT_TAGGED_SIZE, FI_OPT_INJECT_RMA_SIZE,
                  FI_OPT_INJECT_ATOMIC_SIZE}) {
        len = sizeof v;
        ASSERT_EQ(getopt(f, FI_OPT_ENDPOINT, o, &v, &len), 0);
        EXPECT_EQ(v, env.info->tx_attr->inject_size);
        std::size_t big = env.info->tx_attr->inject_size + 1;
        EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, o, &big, sizeof big), -FI_EINVAL) << "above tx_attr::inject_size";
        std::size_t ok = 8;
        EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, o, &ok, sizeof ok), 0);
    }
    int p2p = FI_HMEM_P2P_DISABLED;
    EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, FI_OPT_FI_HMEM_P2P, &p2p, sizeof p2p), 0);
    p2p = FI_HMEM_P2P_REQUIRED;
    EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, FI_OPT_FI_HMEM_P2P, &p2p, sizeof p2p), -FI_EOPNOTSUPP);
    p2p = 77;
    EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, FI_OPT_FI_HMEM_P2P, &p2p, sizeof p2p), -FI_EINVAL);
    int got = -1;
    len = sizeof got;
    ASSERT_EQ(getopt(f, FI_OPT_ENDPOINT, FI_OPT_FI_HMEM_P2P, &got, &len), 0);
    EXPECT_EQ(got, FI_HMEM_P2P_DISABLED);
    bool no = false;
    EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, FI_OPT_CUDA_API_PERMITTED, &no, sizeof no), -FI_ENOPROTOOPT)
        << "only FI_HMEM endpoints implement it";
    EXPECT_EQ(setopt(f, FI_OPT_ENDPOINT, FI_OPT_SHARED_MEMORY_PERMITTED, &no, sizeof no), 0);
    len = sizeof no;
    EXPECT_EQ(getopt(f, FI_OPT_ENDPOINT, FI_OPT_SHARED_MEMORY_PERMITTED, &no, &len), -FI_ENOPROTOOPT)
        << "set only";
    EXPECT_EQ(getopt(f, 5, FI_OPT_MIN_MULTI_RECV, &v, &len), -FI_ENOPROTOOPT) << "unknown level";
    EXPECT_EQ(getopt(f, FI_OPT_ENDPOINT, 999, &v, &len), -FI_ENOPROTOOPT);
    char tiny[2];
    len = sizeof tiny;
    EXPECT_EQ(getopt(f, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, tiny, &len), -FI_ETOOSMALL);
    EXPECT_EQ(len, sizeof(std::size_t));
    EXPECT_EQ(getopt(f, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, nullptr, &len), -FI_EINVAL);
}

TEST_F(ep_rules, ControlGetsAndSetsOperationFlagsPerDirection)
{
    loop_ep e;
    ASSERT_EQ(test::open_ep(env, e), 0);
    std::uint64_t f = FI_TRANSMIT | FI_RECV;
    EXPECT_EQ(control(&e.ep->fid, FI_GETOPSFLAG, &f), -FI_EINVAL) << "not both";
    f = 0;
    EXPECT_EQ(control(&e.ep->fid, FI_GETOPSFLAG, &f), -FI_EINVAL) << "not neither";
    f = FI_TRANSMIT | FI_INJECT_COMPLETE;
    ASSERT_EQ(control(&e.ep->fid, FI_SETOPSFLAG, &f), 0);
    f = FI_TRANSMIT;
    ASSERT_EQ(control(&e.ep->fid, FI_GETOPSFLAG, &f), 0);
    EXPECT_EQ(f, FI_INJECT_COMPLETE);
    f = FI_TRANSMIT | FI_COMMIT_COMPLETE;
    EXPECT_EQ(control(&e.ep->fid, FI_SETOPSFLAG, &f), -FI_EOPNOTSUPP) << "FI_COMMIT_COMPLETE unsupported";
    f = FI_RECV | FI_INJECT;
    EXPECT_EQ(control(&e.ep->fid, FI_SETOPSFLAG, &f), -FI_EBADFLAGS) << "not a receive flag";
    EXPECT_EQ(control(&e.ep->fid, FI_GETWAIT, &f), -FI_ENOSYS) << "only socket endpoints";
    EXPECT_EQ(control(&e.ep->fid, FI_BACKLOG, &f), -FI_ENOSYS) << "only passive endpoints";
    EXPECT_EQ(control(&e.ep->fid, FI_GETOPSFLAG, nullptr), -FI_EINVAL);
}

TEST_F(ep_rules, CommitCompleteIsNotSupported)
{
    loop_ep a, b;
    ASSERT_EQ(test::open_ep(env, a), 0);
    ASSERT_EQ(test::open_ep(env, b), 0);
    fi_addr_t to = test::add_peer(a, b);
    char buf[8] = {};
    iovec v{buf, sizeof buf};
    msg m;
    m.msg_iov = &v;
    m.iov_count = 1;
    m.addr = to;
    EXPECT_EQ(sendmsg(a.ep, &m, FI_COMMIT_COMPLETE), -FI_EOPNOTSUPP);
    EXPECT_EQ(sendmsg(a.ep, &m, 1ULL << 44), -FI_EBADFLAGS);
    EXPECT_EQ(ep_alias(a.ep, nullptr, FI_TRANSMIT), -FI_EINVAL);
    fid_ep *al = nullptr;
    EXPECT_EQ(ep_alias(a.ep, &al, FI_TRANSMIT | FI_COMMIT_COMPLETE), -FI_EOPNOTSUPP);
    EXPECT_EQ(sendmsg(a.ep, &m, FI_DELIVERY_COMPLETE), 0) << "the endpoint is still usable";
}

TEST_F(ep_rules, AliasesOverrideFlagsAndMustBeClosedBeforeTheParent)
{
    loop_ep e;
    ASSERT_EQ(test::open_ep(env, e), 0);
    fid_ep *al = nullptr;
    EXPECT_EQ(ep_alias(e.ep, &al, FI_TRANSMIT | FI_RECV), -FI_EINVAL) << "not both";
    EXPECT_EQ(ep_alias(e.ep, &al, FI_COMPLETION), -FI_EINVAL) << "a direction is required";
    ASSERT_EQ(ep_alias(e.ep, &al, FI_TRANSMIT | FI_INJECT), 0);
    std::uint64_t f = FI_TRANSMIT;
    ASSERT_EQ(control(&al->fid, FI_GETOPSFLAG, &f), 0);
    EXPECT_EQ(f, FI_INJECT);
    f = FI_TRANSMIT;
    ASSERT_EQ(control(&e.ep->fid, FI_GETOPSFLAG, &f), 0);
    EXPECT_EQ(f, 0u) << "the parent keeps its flags";
    fid_ep *al2 = nullptr;
    ASSERT_EQ(ep_alias(al, &al2, FI_RECV | FI_COMPLETION), 0) << "alias of an alias";
    EXPECT_EQ(close(&e.ep->fid), -FI_EBUSY);
    EXPECT_EQ(close(&al->fid), 0);
    EXPECT_EQ(close(&e.ep->fid), -FI_EBUSY) << "every alias must be closed";
    EXPECT_EQ(close(&al2->fid), 0);
    EXPECT_EQ(close(&e.ep->fid), 0);
    e.ep = nullptr;
}

TEST_F(ep_rules, ScalableEndpointCloseWithOpenContextsIsBusy)
{
    info *i = dupinfo(env.info);
    i->ep_attr->tx_ctx_cnt = 2;
    i->ep_attr->rx_ctx_cnt = 2;
    fid_ep *sep = nullptr;
    ASSERT_EQ(scalable_ep(env.domain, i, &sep, nullptr), 0);
    fid_av *v = av();
    ASSERT_EQ(scalable_ep_bind(sep, &v->fid, 0), 0);
    fid_ep *tx0 = nullptr, *rx1 = nullptr, *dup = nullptr;
    tx_attr ta;
    ASSERT_EQ(tx_context(sep, 0, &ta, &tx0, nullptr), 0);
    EXPECT_EQ(ta.inject_size, env.info->tx_attr->inject_size) << "actual attributes returned";
    EXPECT_EQ(tx_context(sep, 0, nullptr, &dup, nullptr), -FI_EBUSY);
    EXPECT_EQ(tx_context(sep, 2, nullptr, &dup, nullptr), -FI_EINVAL);
    EXPECT_EQ(tx_context(sep, -1, nullptr, &dup, nullptr), -FI_EINVAL);
    ASSERT_EQ(rx_context(sep, 1, nullptr, &rx1, nullptr), 0);
    fid_cq *c = cq();
    EXPECT_EQ(ep_bind(tx0, &c->fid, FI_RECV), -FI_EINVAL) << "a tx context has no receive side";
    ASSERT_EQ(ep_bind(tx0, &c->fid, FI_TRANSMIT), 0);
    ASSERT_EQ(ep_bind(rx1, &c->fid, FI_RECV), 0);
    EXPECT_EQ(enable(tx0), 0) << "the context inherits the scalable endpoint's AV";
    EXPECT_EQ(enable(rx1), 0);
    EXPECT_EQ(close(&sep->fid), -FI_EBUSY);
    EXPECT_EQ(close(&tx0->fid), 0);
    EXPECT_EQ(close(&sep->fid), -FI_EBUSY);
    EXPECT_EQ(close(&rx1->fid), 0);
    EXPECT_EQ(close(&sep->fid), 0);
    EXPECT_EQ(close(&c->fid), 0);
    EXPECT_EQ(close(&v->fid), 0);
    freeinfo(i);
}

// fi_endpoint(3): a context inherits its scalable endpoint's properties,
// among them the completion levels the provider honours (Open MPI's OFI BTL
// opens its transmit contexts with op_flags FI_DELIVERY_COMPLETE).
TEST_F(ep_rules, ScalableContextsHonourTheEndpointsCompletionLevels)
{
    info *i = dupinfo(env.info);
    i->ep_attr->tx_ctx_cnt = 1;
    i->ep_attr->rx_ctx_cnt = 1;
    fid_ep *sep = nullptr;
    ASSERT_EQ(scalable_ep(env.domain, i, &sep, nullptr), 0);
    fid_ep *tx = nullptr;
    tx_attr ta{};
    ta.op_flags = FI_DELIVERY_COMPLETE;
    ASSERT_EQ(tx_context(sep, 0, &ta, &tx, nullptr), 0);
    EXPECT_EQ(ta.op_flags, FI_DELIVERY_COMPLETE) << "actual attributes returned";
    std::uint64_t f = FI_TRANSMIT;
    ASSERT_EQ(control(&tx->fid, FI_GETOPSFLAG, &f), 0);
    EXPECT_EQ(f, FI_DELIVERY_COMPLETE);
    f = FI_TRANSMIT | FI_TRANSMIT_COMPLETE;
    EXPECT_EQ(control(&tx->fid, FI_SETOPSFLAG, &f), 0) << "the endpoint's completion levels hold for its context";
    f = FI_TRANSMIT | FI_COMMIT_COMPLETE;
    EXPECT_EQ(control(&tx->fid, FI_SETOPSFLAG, &f), -FI_EOPNOTSUPP);
    EXPECT_EQ(close(&tx->fid), 0);
    EXPECT_EQ(close(&sep->fid), 0);
    freeinfo(i);
}

TEST_F(ep_rules, SharedContextsBindOnlyToEndpointsConfiguredForThem)
{
    fid_stx *stx = nullptr;
    fid_ep *srx = nullptr;
    ASSERT_EQ(stx_context(env.domain, nullptr, &stx, nullptr), 0);
    ASSERT_EQ(srx_context(env.domain, nullptr, &srx, nullptr), 0);
    fid_ep *plain = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &plain, nullptr), 0);
    EXPECT_EQ(ep_bind(plain, &stx->fid, 0), -FI_EINVAL) << "tx_ctx_cnt is not FI_SHARED_CONTEXT";
    EXPECT_EQ(ep_bind(plain, &srx->fid, 0), -FI_EINVAL);
    info *i = dupinfo(env.info);
    i->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
    i->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(env.domain, i, &ep, nullptr), 0);
    fid_cq *c = cq();
    fid_av *v = av();
    ASSERT_EQ(ep_bind(ep, &c->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(ep, &v->fid, 0), 0);
    EXPECT_EQ(enable(ep), -FI_EINVAL) << "shared contexts not bound yet";
    ASSERT_EQ(ep_bind(ep, &stx->fid, 0), 0);
    ASSERT_EQ(ep_bind(ep, &srx->fid, 0), 0);
    EXPECT_EQ(ep_bind(ep, &srx->fid, 0), -FI_EBUSY) << "one receive context";
    EXPECT_EQ(enable(ep), 0);
    EXPECT_EQ(close(&srx->fid), -FI_EBUSY);
    EXPECT_EQ(close(&stx->fid), -FI_EBUSY);
    EXPECT_EQ(close(&ep->fid), 0);
    EXPECT_EQ(close(&plain->fid), 0);
    EXPECT_EQ(close(&srx->fid), 0);
    EXPECT_EQ(close(&stx->fid), 0);
    EXPECT_EQ(close(&c->fid), 0);
    EXPECT_EQ(close(&v->fid), 0);
    freeinfo(i);
}

TEST_F(ep_rules, BadInputGivesClearCodesAndTheEndpointStaysUsable)
{
    loop_ep a, b;
    ASSERT_EQ(test::open_ep(env, a), 0);
    ASSERT_EQ(test::open_ep(env, b), 0);
    fi_addr_t to = test::add_peer(a, b);
    char buf[128] = {};
    EXPECT_EQ(send(nullptr, buf, 1, nullptr, to, nullptr), -FI_EINVAL);
    EXPECT_EQ(send(a.ep, nullptr, 10, nullptr, to, nullptr), -FI_EINVAL);
    EXPECT_EQ(send(a.ep, buf, 1, nullptr, 12345, nullptr), -FI_EINVAL) << "address not in the AV";
    EXPECT_EQ(send(a.ep, buf, 1, nullptr, FI_ADDR_NOTAVAIL, nullptr), -FI_EINVAL);
    EXPECT_EQ(inject(a.ep, buf, 65, to), -FI_EMSGSIZE) << "over inject_size";
    std::vector<char> big((1 << 20) + 1);
    EXPECT_EQ(send(a.ep, big.data(), big.size(), nullptr, to, nullptr), -FI_EMSGSIZE);
    iovec iov[5] = {{buf, 1}, {buf, 1}, {buf, 1}, {buf, 1}, {buf, 1}};
    EXPECT_EQ(sendv(a.ep, iov, nullptr, 5, to, nullptr), -FI_EINVAL) << "over iov_limit";
    EXPECT_EQ(recvv(a.ep, iov, nullptr, 5, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
    EXPECT_EQ(sendmsg(a.ep, nullptr, 0), -FI_EINVAL);
    EXPECT_EQ(atomic(a.ep, buf, 1, nullptr, to, 0, 1, static_cast<datatype>(99), FI_SUM, nullptr), -FI_EINVAL);
    EXPECT_EQ(atomic(a.ep, buf, 1, nullptr, to, 0, 1, FI_UINT64, FI_CSWAP, nullptr), -FI_EOPNOTSUPP)
        << "compare op through atomic()";
    EXPECT_EQ(atomic(a.ep, buf, 1, nullptr, to, 0, 1, FI_LONG_DOUBLE_COMPLEX, FI_SUM, nullptr), -FI_EOPNOTSUPP);
    EXPECT_EQ(enable(nullptr), -FI_EINVAL);
    EXPECT_EQ(endpoint(env.domain, nullptr, &a.ep, nullptr), -FI_EINVAL);
    EXPECT_EQ(endpoint(nullptr, env.info, &a.ep, nullptr), -FI_EINVAL);
    EXPECT_EQ(cancel(nullptr, nullptr), -FI_EINVAL);
    // still usable
    ASSERT_EQ(recv(b.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(send(a.ep, "hi", 3, nullptr, to, nullptr), 0);
    cq_tagged_entry e{};
    EXPECT_EQ(test::read_one(b.cq, e), 1);
    EXPECT_STREQ(buf, "hi");
}

TEST_F(ep_rules, ClosedEndpointHandlesAreRejectedBySetupCalls)
{
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &ep, nullptr), 0);
    ASSERT_EQ(close(&ep->fid), 0);
    EXPECT_EQ(enable(ep), -FI_EINVAL);
    fid_cq *c = cq();
    EXPECT_EQ(ep_bind(ep, &c->fid, FI_TRANSMIT), -FI_EINVAL);
    std::size_t v = 0, len = sizeof v;
    EXPECT_EQ(getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &len), -FI_EINVAL);
    EXPECT_EQ(close(&c->fid), 0);
}

TEST_F(ep_rules, CriticalErrorDisablesReportsOnEqAndEnableMayReEnable)
{
    loop_ep e;
    ASSERT_EQ(test::open_ep(env, e, FI_TRANSMIT | FI_RECV, false), 0);
    eq_attr ea;
    fid_eq *eq = nullptr;
    ASSERT_EQ(eq_open(env.fabric, &ea, &eq, nullptr), 0);
    ASSERT_EQ(ep_bind(e.ep, &eq->fid, 0), 0);
    ASSERT_EQ(enable(e.ep), 0);
    char buf[8];
    ASSERT_EQ(recv(e.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, this), 0);
    util::ep_fail(util::core_of(e.ep), FI_EIO);
    EXPECT_EQ(recv(e.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EOPBADSTATE);
    std::uint32_t ev;
    eq_entry out;
    EXPECT_EQ(eq_read(eq, &ev, &out, sizeof out, 0), -FI_EAVAIL);
    eq_err_entry err{};
    ASSERT_GT(eq_readerr(eq, &err, 0), 0);
    EXPECT_EQ(err.err, FI_EIO);
    EXPECT_EQ(err.fid, &e.ep->fid);
    cq_tagged_entry ce;
    EXPECT_EQ(cq_read(e.cq, &ce, 1), -FI_EAGAIN) << "pending operations were discarded without completions";
    // this provider allows re-enabling (the spec leaves it to the provider)
    ASSERT_EQ(enable(e.ep), 0);
    EXPECT_EQ(recv(e.ep, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    e.close_all();
    EXPECT_EQ(close(&eq->fid), 0);
}

TEST_F(ep_rules, Endpoint2UnknownFlagsAreBadFlags)
{
    fid_ep *ep = nullptr;
    EXPECT_EQ(endpoint2(env.domain, env.info, &ep, FI_PEER_TRANSFER, nullptr), -FI_EBADFLAGS)
        << "no provider here implements peer transfers";
    EXPECT_EQ(ep, nullptr);
    ASSERT_EQ(endpoint2(env.domain, env.info, &ep, 0, nullptr), 0);
    EXPECT_EQ(close(&ep->fid), 0);
}

TEST_F(ep_rules, TcDscpConvertsBothWays)
{
    for (std::uint8_t d : {std::uint8_t(0), std::uint8_t(10), std::uint8_t(46), std::uint8_t(63)}) {
        std::uint32_t tc = tc_dscp_set(d);
        EXPECT_TRUE(tc & FI_TC_DSCP);
        EXPECT_EQ(tc_dscp_get(tc), d);
    }
    EXPECT_EQ(tc_dscp_get(FI_TC_LOW_LATENCY), 0) << "a label is not a DSCP value";
}

TEST_F(ep_rules, MaxMsgSizeOptionIsEnforcedOnSends)
{
    loop_ep a, b;
    ASSERT_EQ(test::open_ep(env, a, FI_TRANSMIT | FI_RECV, false), 0);
    ASSERT_EQ(test::open_ep(env, b), 0);
    std::size_t v = 100;
    ASSERT_EQ(setopt(&a.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_MSG_SIZE, &v, sizeof v), 0);
    ASSERT_EQ(enable(a.ep), 0);
    fi_addr_t to = test::add_peer(a, b);
    std::vector<char> buf(101);
    EXPECT_EQ(send(a.ep, buf.data(), 101, nullptr, to, nullptr), -FI_EMSGSIZE);
    EXPECT_EQ(tsend(a.ep, buf.data(), 101, nullptr, to, 1, nullptr), 0) << "the tagged limit is separate";
    EXPECT_EQ(send(a.ep, buf.data(), 100, nullptr, to, nullptr), 0);
}

TEST_F(ep_rules, SharedReceiveContextFeedsEveryBoundEndpoint)
{
    fid_ep *srx = nullptr;
    ASSERT_EQ(srx_context(env.domain, nullptr, &srx, nullptr), 0);
    info *i = dupinfo(env.info);
    i->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
    loop_ep r1, r2, s;
    for (loop_ep *e : {&r1, &r2}) {
        ASSERT_EQ(endpoint(env.domain, i, &e->ep, nullptr), 0);
        cq_attr ca;
        ca.format = FI_CQ_FORMAT_TAGGED;
        ASSERT_EQ(cq_open(env.domain, &ca, &e->cq, nullptr), 0);
        av_attr aa;
        ASSERT_EQ(av_open(env.domain, &aa, &e->av, nullptr), 0);
        ASSERT_EQ(ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(ep_bind(e->ep, &e->av->fid, 0), 0);
        ASSERT_EQ(ep_bind(e->ep, &srx->fid, 0), 0);
        ASSERT_EQ(enable(e->ep), 0);
        std::size_t len = 8;
        ASSERT_EQ(getname(&e->ep->fid, &e->name, &len), 0);
    }
    ASSERT_EQ(test::open_ep(env, s), 0);
    char b1[8] = {}, b2[8] = {};
    int c1, c2;
    ASSERT_EQ(recv(srx, b1, sizeof b1, nullptr, FI_ADDR_UNSPEC, &c1), 0);
    ASSERT_EQ(recv(srx, b2, sizeof b2, nullptr, FI_ADDR_UNSPEC, &c2), 0);
    ASSERT_EQ(send(s.ep, "one", 4, nullptr, test::add_peer(s, r2), nullptr), 0);
    ASSERT_EQ(send(s.ep, "two", 4, nullptr, test::add_peer(s, r1), nullptr), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(test::read_one(r2.cq, e), 1) << "completion on the receiving endpoint's CQ";
    EXPECT_EQ(e.op_context, &c1);
    EXPECT_STREQ(b1, "one");
    ASSERT_EQ(test::read_one(r1.cq, e), 1);
    EXPECT_EQ(e.op_context, &c2);
    EXPECT_STREQ(b2, "two");
    r1.close_all();
    r2.close_all();
    EXPECT_EQ(close(&srx->fid), 0);
    freeinfo(i);
}

// A message that reaches a shared receive context before any receive is
// posted waits there; the receive posted later (on the shared context, which
// has no CQ) is reported on the CQ of the endpoint the message arrived on.
// Closing that endpoint discards what it received and nobody took.
TEST_F(ep_rules, SharedReceiveContextUnexpectedMessagesReportOnTheReceivingEndpoint)
{
    fid_ep *srx = nullptr;
    ASSERT_EQ(srx_context(env.domain, nullptr, &srx, nullptr), 0);
    info *i = dupinfo(env.info);
    i->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
    loop_ep r1, r2, s;
    for (loop_ep *e : {&r1, &r2}) {
        ASSERT_EQ(endpoint(env.domain, i, &e->ep, nullptr), 0);
        cq_attr ca;
        ca.format = FI_CQ_FORMAT_TAGGED;
        ASSERT_EQ(cq_open(env.domain, &ca, &e->cq, nullptr), 0);
        av_attr aa;
        ASSERT_EQ(av_open(env.domain, &aa, &e->av, nullptr), 0);
        ASSERT_EQ(ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(ep_bind(e->ep, &e->av->fid, 0), 0);
        ASSERT_EQ(ep_bind(e->ep, &srx->fid, 0), 0);
        ASSERT_EQ(enable(e->ep), 0);
        std::size_t len = 8;
        ASSERT_EQ(getname(&e->ep->fid, &e->name, &len), 0);
    }
    ASSERT_EQ(test::open_ep(env, s), 0);
    ASSERT_EQ(send(s.ep, "early", 6, nullptr, test::add_peer(s, r2), nullptr), 0);
    ASSERT_EQ(send(s.ep, "gone", 5, nullptr, test::add_peer(s, r1), nullptr), 0);
    cq_tagged_entry e{};
    EXPECT_EQ(cq_read(r1.cq, &e, 1), -FI_EAGAIN);
    EXPECT_EQ(cq_read(r2.cq, &e, 1), -FI_EAGAIN);
    // r1 leaves with its unexpected message: it is discarded with it.
    r1.close_all();
    char b[8] = {};
    int c1;
    ASSERT_EQ(recv(srx, b, sizeof b, nullptr, FI_ADDR_UNSPEC, &c1), 0);
    ASSERT_EQ(test::read_one(r2.cq, e), 1) << "the unexpected message completes on the endpoint it arrived on";
    EXPECT_EQ(e.op_context, &c1);
    EXPECT_EQ(e.len, 6u);
    EXPECT_STREQ(b, "early");
    char b2[8] = {};
    int c2;
    ASSERT_EQ(recv(srx, b2, sizeof b2, nullptr, FI_ADDR_UNSPEC, &c2), 0);
    EXPECT_EQ(cq_read(r2.cq, &e, 1), -FI_EAGAIN) << "the closed endpoint's message was discarded";
    r2.close_all();
    EXPECT_EQ(close(&srx->fid), 0);
    freeinfo(i);
}

TEST_F(ep_rules, ErrorsWithoutOperationContextReportTheEndpointContext)
{
    loop_ep a, b;
    ASSERT_EQ(test::open_ep(env, a), 0);
    ASSERT_EQ(test::open_ep(env, b), 0);
    fi_addr_t to = test::add_peer(a, b);
    b.close_all();
    ASSERT_EQ(inject(a.ep, "x", 1, to), 0);
    cq_tagged_entry e;
    ASSERT_EQ(cq_read(a.cq, &e, 1), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(a.cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, &a) << "inject has no context: the endpoint's is used";
}
