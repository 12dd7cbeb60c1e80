// Generic counters, AVs, EQs and MRs through the public API.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "fabric/api.h"
#include "fabric/util/eq.h"
#include "fabric/util/mr.h"
#include "loop_prov.h"

using namespace shunt;
using namespace shunt::fabric;

namespace {
struct obj_test : ::testing::Test {
    test::loop_env env;
    void SetUp() override { ASSERT_EQ(env.open(), 0); }
};
} // namespace

// ---- counters ----

TEST_F(obj_test, CounterReadAddSetAndErrors)
{
    fid_cntr *c = nullptr;
    ASSERT_EQ(cntr_open(env.domain, nullptr, &c, nullptr), 0);
    EXPECT_EQ(cntr_read(c), 0u);
    EXPECT_EQ(cntr_add(c, 5), 0);
    EXPECT_EQ(cntr_add(c, 2), 0);
    EXPECT_EQ(cntr_read(c), 7u);
    EXPECT_EQ(cntr_set(c, 100), 0);
    EXPECT_EQ(cntr_read(c), 100u);
    EXPECT_EQ(cntr_readerr(c), 0u);
    EXPECT_EQ(cntr_adderr(c, 3), 0);
    EXPECT_EQ(cntr_readerr(c), 3u);
    EXPECT_EQ(cntr_seterr(c, 1), 0);
    EXPECT_EQ(cntr_readerr(c), 1u);
    EXPECT_EQ(cntr_read(c), 100u) << "error count is separate";
    EXPECT_EQ(cntr_wait(c, 1, 0), -FI_ENOSYS) << "FI_WAIT_NONE counters cannot be waited on";
    EXPECT_EQ(cntr_add(nullptr, 1), -FI_EINVAL);
    EXPECT_EQ(close(&c->fid), 0);
    cntr_attr bad;
    bad.events = static_cast<cntr_events>(7);
    EXPECT_EQ(cntr_open(env.domain, &bad, &c, nullptr), -FI_EINVAL);
}

TEST_F(obj_test, CounterWaitReachesThresholdTimesOutAndReportsErrors)
{
    cntr_attr a;
    a.wait_obj = FI_WAIT_UNSPEC;
    fid_cntr *c = nullptr;
    ASSERT_EQ(cntr_open(env.domain, &a, &c, nullptr), 0);
    std::thread t([&] {
        for (int i = 0; i < 3; i++) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            EXPECT_EQ(cntr_add(c, 1), 0);
        }
    });
    EXPECT_EQ(cntr_wait(c, 3, 5000), 0);
    t.join();
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(cntr_wait(c, 10, 30), -FI_ETIMEDOUT);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(25));
    std::thread e([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        EXPECT_EQ(cntr_adderr(c, 1), 0);
    });
    EXPECT_EQ(cntr_wait(c, 10, 5000), -FI_EAVAIL);
    e.join();
    int fd = -1;
    EXPECT_EQ(control(&c->fid, FI_GETWAIT, &fd), 0);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(close(&c->fid), 0);
}

// ---- address vectors ----

TEST_F(obj_test, AvTableInsertLookupRemove)
{
    av_attr a;
    a.type = FI_AV_TABLE;
    fid_av *av = nullptr;
    ASSERT_EQ(av_open(env.domain, &a, &av, nullptr), 0);
    std::uint64_t addrs[3] = {11, 22, 33};
    fi_addr_t fa[3];
    ASSERT_EQ(av_insert(av, addrs, 3, fa, 0, nullptr), 3);
    EXPECT_EQ(fa[0], 0u);
    EXPECT_EQ(fa[1], 1u);
    EXPECT_EQ(fa[2], 2u);
    std::uint64_t got = 0;
    std::size_t len = sizeof got;
    ASSERT_EQ(av_lookup(av, fa[1], &got, &len), 0);
    EXPECT_EQ(got, 22u);
    EXPECT_EQ(len, 8u);
    // a too small buffer gets a truncated copy and the real size
    std::uint32_t small = 0;
    len = sizeof small;
    ASSERT_EQ(av_lookup(av, fa[2], &small, &len), 0);
    EXPECT_EQ(len, 8u);
    ASSERT_EQ(av_remove(av, &fa[1], 1, 0), 0);
    len = sizeof got;
    EXPECT_EQ(av_lookup(av, fa[1], &got, &len), -FI_EINVAL) << "removed";
    EXPECT_EQ(av_remove(av, &fa[1], 1, 0), -FI_EINVAL) << "already removed";
    EXPECT_EQ(av_lookup(av, FI_ADDR_NOTAVAIL, &got, &len), -FI_EINVAL);
    EXPECT_EQ(av_lookup(av, 99, &got, &len), -FI_EINVAL);
    std::uint64_t more = 44;
    fi_addr_t f4;
    ASSERT_EQ(av_insert(av, &more, 1, &f4, 0, nullptr), 1);
    EXPECT_EQ(f4, 3u) << "removed table slots are not reused";
    EXPECT_EQ(close(&av->fid), 0);
}

TEST_F(obj_test, AvInvalidAddressesGiveNotavail)
{
    av_attr a;
    a.type = FI_AV_MAP;
    fid_av *av = nullptr;
    ASSERT_EQ(av_open(env.domain, &a, &av, nullptr), 0);
    std::uint64_t addrs[3] = {5, 0 /* invalid for loop */, 6};
    fi_addr_t fa[3];
    int errs[3] = {-1, -1, -1};
    ASSERT_EQ(av_insert(av, addrs, 3, fa, FI_SYNC_ERR, errs), 2);
    EXPECT_NE(fa[0], FI_ADDR_NOTAVAIL);
    EXPECT_EQ(fa[1], FI_ADDR_NOTAVAIL);
    EXPECT_NE(fa[2], FI_ADDR_NOTAVAIL);
    EXPECT_EQ(errs[0], 0);
    EXPECT_EQ(errs[1], FI_EINVAL);
    EXPECT_NE(fa[0], 0u) << "map addresses are never 0";
    EXPECT_EQ(av_insert(av, addrs, 1, nullptr, 0, nullptr), -FI_EINVAL) << "map needs fi_addr output";
    EXPECT_EQ(av_insert(av, addrs, 1, fa, 1ULL << 33, nullptr), -FI_EBADFLAGS);
    EXPECT_EQ(av_insert(nullptr, addrs, 1, fa, 0, nullptr), -FI_EINVAL);
    EXPECT_EQ(close(&av->fid), 0);
}

TEST_F(obj_test, AvInsertsvcInsertsymAndStraddr)
{
    av_attr a;
    fid_av *av = nullptr;
    ASSERT_EQ(av_open(env.domain, &a, &av, nullptr), 0);
    fi_addr_t f;
    ASSERT_EQ(av_insertsvc(av, "host", "77", &f, 0, nullptr), 1);
    std::uint64_t got = 0;
    std::size_t len = sizeof got;
    ASSERT_EQ(av_lookup(av, f, &got, &len), 0);
    EXPECT_EQ(got, 77u);
    EXPECT_EQ(av_insertsvc(av, "host", "notanumber", &f, 0, nullptr), -FI_EINVAL);
    fi_addr_t fs[6];
    ASSERT_EQ(av_insertsym(av, "node01", 2, "100", 3, fs, 0, nullptr), 6);
    len = sizeof got;
    ASSERT_EQ(av_lookup(av, fs[4], &got, &len), 0);
    EXPECT_EQ(got, 101u) << "second node, second service";
    char buf[64];
    len = sizeof buf;
    std::uint64_t x = 0xab;
    ASSERT_NE(av_straddr(av, &x, buf, &len), nullptr);
    EXPECT_STREQ(buf, "loop://171") << "the provider's text form";
    EXPECT_EQ(len, 11u);
    len = 5;
    ASSERT_NE(av_straddr(av, &x, buf, &len), nullptr);
    EXPECT_STREQ(buf, "loop") << "truncated";
    EXPECT_EQ(len, 11u) << "the size the whole text needs";
    EXPECT_EQ(close(&av->fid), 0);
    av_attr named;
    named.name = "shared";
    EXPECT_EQ(av_open(env.domain, &named, &av, nullptr), -FI_ENOSYS);
}

// fi_av(3): in a domain of format FI_ADDR_STR, AV inserts take an array of
// strings, lookups and straddr give text.
TEST(obj_str, AvOfAnAddrStrDomainTakesAndGivesStrings)
{
    info *h = test::loop_hints(FI_EP_RDM, FI_MSG);
    h->addr_format = FI_ADDR_STR;
    info *fi = nullptr;
    ASSERT_EQ(getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &fi), 0);
    freeinfo(h);
    EXPECT_EQ(fi->addr_format, FI_ADDR_STR);
    fid_fabric *fab = nullptr;
    fid_domain *dom = nullptr;
    ASSERT_EQ(fabric_open(fi->fabric_attr, &fab, nullptr), 0);
    ASSERT_EQ(domain_open(fab, fi, &dom, nullptr), 0);
    av_attr a;
    fid_av *av = nullptr;
    ASSERT_EQ(av_open(dom, &a, &av, nullptr), 0);
    const char *addrs[3] = {"loop://5", "nonsense", "loop://9"};
    fi_addr_t fa[3];
    int errs[3] = {};
    EXPECT_EQ(av_insert(av, addrs, 3, fa, FI_SYNC_ERR, errs), 2);
    EXPECT_EQ(errs[1], FI_EINVAL);
    EXPECT_EQ(fa[1], FI_ADDR_NOTAVAIL);
    char got[32];
    std::size_t len = sizeof got;
    ASSERT_EQ(av_lookup(av, fa[2], got, &len), 0);
    EXPECT_STREQ(got, "loop://9");
    EXPECT_EQ(len, 9u);
    len = 4;
    ASSERT_EQ(av_lookup(av, fa[0], got, &len), 0);
    EXPECT_STREQ(got, "loo") << "truncated, NUL terminated";
    EXPECT_EQ(len, 9u);
    char text[32];
    len = sizeof text;
    ASSERT_EQ(av_straddr(av, "loop://77", text, &len), text) << "straddr takes the AV's format: a string";
    EXPECT_STREQ(text, "loop://77");
    EXPECT_EQ(len, 10u);
    fi_addr_t b;
    ASSERT_EQ(av_insertsvc(av, "host", "12", &b, 0, nullptr), 1);
    len = sizeof got;
    ASSERT_EQ(av_lookup(av, b, got, &len), 0);
    EXPECT_STREQ(got, "loop://12");
    EXPECT_EQ(close(&av->fid), 0);
    EXPECT_EQ(close(&dom->fid), 0);
    EXPECT_EQ(close(&fab->fid), 0);
    freeinfo(fi);
}

// ---- event queues ----

TEST_F(obj_test, EqWriteReadPeekErrAndSread)
{
    eq_attr a;
    a.flags = FI_WRITE;
    a.wait_obj = FI_WAIT_UNSPEC;
    fid_eq *eq = nullptr;
    ASSERT_EQ(eq_open(env.fabric, &a, &eq, nullptr), 0);
    std::uint32_t ev = 0;
    eq_entry in{nullptr, this, 42}, out{};
    EXPECT_EQ(eq_read(eq, &ev, &out, sizeof out, 0), -FI_EAGAIN);
    ASSERT_EQ(eq_write(eq, FI_NOTIFY, &in, sizeof in, 0), ssize_t(sizeof in));
    ASSERT_EQ(eq_read(eq, &ev, &out, sizeof out, FI_PEEK), ssize_t(sizeof out));
    ASSERT_EQ(eq_read(eq, &ev, &out, 4, 0), -FI_ETOOSMALL);
    ASSERT_EQ(eq_read(eq, &ev, &out, sizeof out, 0), ssize_t(sizeof out));
    EXPECT_EQ(ev, FI_NOTIFY);
    EXPECT_EQ(out.data, 42u);
    eq_err_entry err{};
    err.err = FI_ECONNREFUSED;
    err.context = this;
    ASSERT_GT(eq_write(eq, 0, &err, sizeof err, FI_EQ_ERROR_FLAG), 0);
    EXPECT_EQ(eq_read(eq, &ev, &out, sizeof out, 0), -FI_EAVAIL);
    eq_err_entry got{};
    ASSERT_EQ(eq_readerr(eq, &got, 0), ssize_t(sizeof got));
    EXPECT_EQ(got.err, FI_ECONNREFUSED);
    EXPECT_EQ(got.context, this);
    // Provider error data: kept by the EQ when no buffer is lent, copied
    // (truncated to fit) into a lent buffer otherwise.
    char data[] = "peer said no";
    err.err_data = data;
    err.err_data_size = sizeof data;
    ASSERT_GT(eq_write(eq, 0, &err, sizeof err, FI_EQ_ERROR_FLAG), 0);
    ASSERT_GT(eq_write(eq, 0, &err, sizeof err, FI_EQ_ERROR_FLAG), 0);
    eq_err_entry kept{};
    ASSERT_EQ(eq_readerr(eq, &kept, 0), ssize_t(sizeof kept));
    ASSERT_EQ(kept.err_data_size, sizeof data);
    EXPECT_NE(kept.err_data, static_cast<void *>(data)) << "the EQ keeps its own copy";
    EXPECT_STREQ(static_cast<const char *>(kept.err_data), data);
    char mine[4] = {};
    eq_err_entry lent{};
    lent.err_data = mine;
    lent.err_data_size = sizeof mine;
    ASSERT_EQ(eq_readerr(eq, &lent, 0), ssize_t(sizeof lent));
    EXPECT_EQ(lent.err_data, static_cast<void *>(mine));
    EXPECT_EQ(lent.err_data_size, sizeof mine);
    EXPECT_EQ(std::memcmp(mine, "peer", 4), 0);
    EXPECT_EQ(eq_sread(eq, &ev, &out, sizeof out, 20, 0), -FI_EAGAIN);
    std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        EXPECT_GT(eq_write(eq, FI_NOTIFY, &in, sizeof in, 0), 0);
    });
    EXPECT_EQ(eq_sread(eq, &ev, &out, sizeof out, 5000, 0), ssize_t(sizeof out));
    t.join();
    EXPECT_EQ(close(&eq->fid), 0);
    eq_attr ro;
    ASSERT_EQ(eq_open(env.fabric, &ro, &eq, nullptr), 0);
    EXPECT_EQ(eq_write(eq, FI_NOTIFY, &in, sizeof in, 0), -FI_EINVAL) << "no FI_WRITE";
    EXPECT_EQ(eq_sread(eq, &ev, &out, sizeof out, 1, 0), -FI_ENOSYS) << "no wait object";
    EXPECT_EQ(close(&eq->fid), 0);
}

TEST_F(obj_test, EqCmEventsCarryInfoAndData)
{
    eq_attr a;
    fid_eq *eq = nullptr;
    ASSERT_EQ(eq_open(env.fabric, &a, &eq, nullptr), 0);
    util::eq_obj *e = util::to_eq(eq);
    struct {
        eq_cm_entry cm;
        char data[16];
    } buf{};
    info *i = allocinfo();
    buf.cm.info = i;
    std::strcpy(buf.data, "hello");
    ASSERT_EQ(util::eq_post(e, FI_CONNREQ, &buf, sizeof buf, i), 0);
    info *j = allocinfo();
    struct {
        eq_cm_entry cm;
        char data[16];
    } b2{};
    b2.cm.info = j;
    ASSERT_EQ(util::eq_post(e, FI_CONNREQ, &b2, sizeof b2, j), 0);
    std::uint32_t ev;
    decltype(buf) out{};
    ASSERT_EQ(eq_read(eq, &ev, &out, sizeof out, 0), ssize_t(sizeof out));
    EXPECT_EQ(ev, FI_CONNREQ);
    EXPECT_EQ(out.cm.info, i);
    EXPECT_STREQ(out.data, "hello");
    freeinfo(out.cm.info); // the reader owns it
    // the unread one (j) is freed by close (checked by the sanitizer build)
    EXPECT_EQ(close(&eq->fid), 0);
}

// ---- memory regions ----

TEST_F(obj_test, MrRegDescKeyAndAccessChecks)
{
    char buf[256] = {};
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(env.domain, buf, sizeof buf, FI_REMOTE_READ, 0, 0x1234, 0, &mr, nullptr), 0);
    EXPECT_EQ(mr_key(mr), 0x1234u);
    EXPECT_NE(mr_desc(mr), nullptr);
    fid_mr *dup = nullptr;
    EXPECT_EQ(mr_reg(env.domain, buf, sizeof buf, FI_REMOTE_READ, 0, 0x1234, 0, &dup, nullptr), -FI_ENOKEY);
    EXPECT_EQ(mr_reg(env.domain, buf, sizeof buf, 1ULL << 40, 0, 1, 0, &dup, nullptr), -FI_EINVAL);
    EXPECT_EQ(mr_reg(env.domain, nullptr, 5, FI_REMOTE_READ, 0, 2, 0, &dup, nullptr), -FI_EINVAL);
    EXPECT_EQ(mr_reg(env.domain, buf, 5, FI_REMOTE_READ, 0, 2, 1ULL << 2, &dup, nullptr), -FI_EBADFLAGS);
    util::domain_obj *d = util::to_domain(env.domain);
    void *p = nullptr;
    EXPECT_EQ(util::mr_verify(d, 0x1234, 16, 8, FI_REMOTE_READ, &p), 0) << "offset addressing";
    EXPECT_EQ(p, buf + 16);
    EXPECT_EQ(util::mr_verify(d, 0x1234, 16, 8, FI_REMOTE_WRITE, &p), -FI_EACCES);
    EXPECT_EQ(util::mr_verify(d, 0x1234, 250, 8, FI_REMOTE_READ, &p), -FI_EINVAL) << "past the end";
    EXPECT_EQ(util::mr_verify(d, 0x9999, 0, 8, FI_REMOTE_READ, &p), -FI_EKEYREJECTED);
    iovec iov[2] = {{buf, 100}, {buf + 128, 100}};
    fid_mr *mv = nullptr;
    ASSERT_EQ(mr_regv(env.domain, iov, 2, 0, 1000, 7, 0, &mv, nullptr), 0);
    EXPECT_EQ(util::mr_verify(d, 7, 1000 + 120, 4, FI_REMOTE_WRITE, &p), 0) << "second segment, offset base 1000";
    EXPECT_EQ(p, buf + 128 + 20);
    mr_attr at;
    at.mr_iov = iov;
    at.iov_count = 1;
    at.iface = FI_HMEM_CUDA;
    EXPECT_EQ(mr_regattr(env.domain, &at, 0, &dup), -FI_EOPNOTSUPP);
    EXPECT_EQ(close(&mv->fid), 0);
    EXPECT_EQ(close(&mr->fid), 0);
    EXPECT_EQ(mr_key(mr), FI_KEY_NOTAVAIL) << "closed";
    EXPECT_EQ(util::mr_verify(d, 0x1234, 16, 8, FI_REMOTE_READ, &p), -FI_EKEYREJECTED);
}

TEST(FabricMr, ProvKeyVirtAddrAndEndpointModes)
{
    test::loop_env env;
    ASSERT_EQ(env.open(FI_EP_RDM, 0, FI_THREAD_DOMAIN, FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ENDPOINT), 0);
    ASSERT_EQ(env.info->domain_attr->mr_mode, FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ENDPOINT);
    char buf[64];
    fid_mr *a = nullptr, *b = nullptr;
    ASSERT_EQ(mr_reg(env.domain, buf, sizeof buf, 0, 0, 5, 0, &a, nullptr), 0);
    ASSERT_EQ(mr_reg(env.domain, buf, sizeof buf, 0, 0, 5, 0, &b, nullptr), 0) << "requested key ignored";
    EXPECT_EQ(mr_key(a), FI_KEY_NOTAVAIL) << "FI_MR_ENDPOINT: not usable before bind+enable";
    EXPECT_EQ(mr_enable(a), -FI_EOPBADSTATE) << "not bound to an endpoint";
    fid_ep *ep = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &ep, nullptr), 0);
    ASSERT_EQ(mr_bind(a, &ep->fid, 0), 0);
    ASSERT_EQ(mr_enable(a), 0);
    ASSERT_EQ(mr_bind(b, &ep->fid, 0), 0);
    ASSERT_EQ(mr_enable(b), 0);
    EXPECT_NE(mr_key(a), FI_KEY_NOTAVAIL);
    EXPECT_NE(mr_key(a), mr_key(b)) << "provider keys are unique";
    EXPECT_EQ(mr_bind(a, &ep->fid, 0), -FI_EOPBADSTATE) << "already enabled";
    void *p = nullptr;
    auto va = reinterpret_cast<std::uint64_t>(buf);
    EXPECT_EQ(util::mr_verify(util::to_domain(env.domain), mr_key(a), va + 8, 8, FI_REMOTE_WRITE, &p), 0);
    EXPECT_EQ(p, buf + 8);
    EXPECT_EQ(close(&ep->fid), 0);
    EXPECT_EQ(mr_key(a), FI_KEY_NOTAVAIL) << "closing the endpoint disables its regions";
    EXPECT_EQ(close(&a->fid), 0);
    EXPECT_EQ(close(&b->fid), 0);
}

TEST_F(obj_test, DomainAndFabricCloseRefuseWhileChildrenAreOpen)
{
    fid_cq *cq = nullptr;
    cq_attr a;
    ASSERT_EQ(cq_open(env.domain, &a, &cq, nullptr), 0);
    EXPECT_EQ(close(&env.domain->fid), -FI_EBUSY);
    EXPECT_EQ(close(&env.fabric->fid), -FI_EBUSY);
    EXPECT_EQ(close(&cq->fid), 0);
}
