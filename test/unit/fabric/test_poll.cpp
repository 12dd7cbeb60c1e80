// Poll sets and wait sets (fabric/poll.h, fi_poll(3)) of the generic layer,
// through the loop provider: what poll() reports for CQs and counters, wait()
// over CQs, counters and EQs woken from another thread, trywait on a set,
// the set's file descriptor, and the open/close rules.
#include <poll.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "fixture.h"

using namespace shunt;
using namespace shunt::fabric;
using test::loop_ep;

namespace {

struct sets : ::testing::Test {
    test::loop_env env;
    loop_ep a, b;
    fi_addr_t to_b = 0;
    void SetUp() override
    {
        ASSERT_EQ(env.open(), 0);
        ASSERT_EQ(test::open_ep(env, a), 0);
        ASSERT_EQ(test::open_ep(env, b), 0);
        to_b = test::add_peer(a, b);
    }
    void TearDown() override
    {
        a.close_all();
        b.close_all();
    }
};

// A CQ of @p dom opened on wait set @p ws.
fid_cq *cq_on(fid_domain *dom, fid_wait *ws, void *ctx)
{
    cq_attr ca;
    ca.format = FI_CQ_FORMAT_TAGGED;
    ca.wait_obj = FI_WAIT_SET;
    ca.wait_set = ws;
    fid_cq *cq = nullptr;
    EXPECT_EQ(cq_open(dom, &ca, &cq, ctx), 0);
    return cq;
}

} // namespace

TEST_F(sets, PollReportsCqsWithEntriesAndCountersThatChanged)
{
    fid_poll *ps = nullptr;
    ASSERT_EQ(poll_open(env.domain, nullptr, &ps), 0);
    int cq_ctx = 0, cntr_ctx = 0;
    cq_attr ca;
    ca.format = FI_CQ_FORMAT_TAGGED;
    fid_cq *cq = nullptr;
    ASSERT_EQ(cq_open(env.domain, &ca, &cq, &cq_ctx), 0);
    fid_cntr *ctr = nullptr;
    ASSERT_EQ(cntr_open(env.domain, nullptr, &ctr, &cntr_ctx), 0);
    fid_ep *rx = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &rx, nullptr), 0);
    ASSERT_EQ(ep_bind(rx, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(rx, &ctr->fid, FI_RECV), 0);
    ASSERT_EQ(ep_bind(rx, &b.av->fid, 0), 0);
    ASSERT_EQ(enable(rx), 0);
    std::uint64_t rx_name = 0;
    std::size_t len = sizeof rx_name;
    ASSERT_EQ(getname(&rx->fid, &rx_name, &len), 0);
    fi_addr_t to_rx = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(a.av, &rx_name, 1, &to_rx, 0, nullptr), 1);

    ASSERT_EQ(poll_add(ps, &cq->fid, 0), 0);
    ASSERT_EQ(poll_add(ps, &cq->fid, 0), 0) << "adding again changes nothing";
    ASSERT_EQ(poll_add(ps, &ctr->fid, 0), 0);
    void *ctx[4] = {};
    EXPECT_EQ(poll(ps, ctx, 4), 0) << "nothing yet";

    char buf[8];
    ASSERT_EQ(recv(rx, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(send(a.ep, "hi", 3, nullptr, to_rx, nullptr), 0);
    int n = poll(ps, ctx, 4);
    ASSERT_EQ(n, 2) << "the receiver's CQ and its counter";
    EXPECT_TRUE((ctx[0] == &cq_ctx && ctx[1] == &cntr_ctx) || (ctx[1] == &cq_ctx && ctx[0] == &cntr_ctx))
        << "the contexts the objects were opened with";
    EXPECT_EQ(poll(ps, ctx, 4), 1) << "the CQ until it is read; the counter once per change";
    EXPECT_EQ(ctx[0], &cq_ctx);
    EXPECT_EQ(poll(ps, ctx, 0), 0) << "count 0 writes nothing";
    cq_tagged_entry e;
    ASSERT_EQ(cq_read(cq, &e, 1), 1);
    EXPECT_EQ(poll(ps, ctx, 4), 0);
    EXPECT_EQ(cntr_add(ctr, 5), 0);
    EXPECT_EQ(poll(ps, ctx, 4), 0) << "the application's own add is not an event";
    EXPECT_EQ(cntr_adderr(ctr, 1), 0);
    EXPECT_EQ(poll(ps, ctx, 4), 0);
    // two ready members and room for one: one context, the other next time
    ASSERT_EQ(recv(rx, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(send(a.ep, "ho", 3, nullptr, to_rx, nullptr), 0);
    EXPECT_EQ(poll(ps, ctx, 1), 1);
    ASSERT_EQ(cq_read(cq, &e, 1), 1);

    // rules
    EXPECT_EQ(poll_add(ps, &ctr->fid, 1), -FI_EBADFLAGS);
    EXPECT_EQ(poll_add(ps, &rx->fid, 0), -FI_EINVAL) << "CQs and counters only";
    EXPECT_EQ(poll_add(nullptr, &ctr->fid, 0), -FI_EINVAL);
    EXPECT_EQ(poll(ps, nullptr, 1), -FI_EINVAL);
    EXPECT_EQ(poll(ps, ctx, -1), -FI_EINVAL);
    test::loop_env other;
    ASSERT_EQ(other.open(), 0);
    fid_cq *foreign = nullptr;
    ASSERT_EQ(cq_open(other.domain, &ca, &foreign, nullptr), 0);
    EXPECT_EQ(poll_add(ps, &foreign->fid, 0), -FI_EINVAL) << "a CQ of another domain";
    EXPECT_EQ(close(&foreign->fid), 0);
    poll_attr bad;
    bad.flags = 1;
    fid_poll *ps2 = nullptr;
    EXPECT_EQ(poll_open(env.domain, &bad, &ps2), -FI_EINVAL);
    EXPECT_EQ(close(&rx->fid), 0);
    EXPECT_EQ(close(&ctr->fid), -FI_EBUSY) << "in a poll set";
    EXPECT_EQ(close(&cq->fid), -FI_EBUSY);
    EXPECT_EQ(poll_del(ps, &ctr->fid, 0), 0);
    EXPECT_EQ(poll_del(ps, &ctr->fid, 0), 0) << "not a member: no error, as in libfabric";
    EXPECT_EQ(close(&ctr->fid), 0);
    EXPECT_EQ(close(&ps->fid), 0) << "closing the set lets its members go";
    EXPECT_EQ(close(&cq->fid), 0);
}

TEST_F(sets, WaitBlocksUntilAMemberHasSomethingToRead)
{
    wait_attr wa;
    wa.wait_obj = FI_WAIT_FD;
    fid_wait *ws = nullptr;
    ASSERT_EQ(wait_open(env.fabric, &wa, &ws), 0);
    int fd = -1;
    ASSERT_EQ(control(&ws->fid, FI_GETWAIT, &fd), 0);
    EXPECT_GE(fd, 0);
    wait_obj kind = FI_WAIT_NONE;
    ASSERT_EQ(control(&ws->fid, FI_GETWAITOBJ, &kind), 0);
    EXPECT_EQ(kind, FI_WAIT_FD);

    int cq_ctx = 0, cntr_ctx = 0, eq_ctx = 0;
    fid_cq *cq = cq_on(env.domain, ws, &cq_ctx);
    ASSERT_NE(cq, nullptr);
    ASSERT_EQ(control(&cq->fid, FI_GETWAITOBJ, &kind), 0);
    EXPECT_EQ(kind, FI_WAIT_SET);
    cntr_attr cta;
    cta.wait_obj = FI_WAIT_SET;
    cta.wait_set = ws;
    fid_cntr *ctr = nullptr;
    ASSERT_EQ(cntr_open(env.domain, &cta, &ctr, &cntr_ctx), 0);
    eq_attr ea;
    ea.flags = FI_WRITE;
    ea.wait_obj = FI_WAIT_SET;
    ea.wait_set = ws;
    fid_eq *eq = nullptr;
    ASSERT_EQ(eq_open(env.fabric, &ea, &eq, &eq_ctx), 0);
    // an endpoint sending into the set's CQ
    fid_ep *rx = nullptr;
    ASSERT_EQ(endpoint(env.domain, env.info, &rx, nullptr), 0);
    ASSERT_EQ(ep_bind(rx, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(rx, &ctr->fid, FI_RECV), 0);
    ASSERT_EQ(ep_bind(rx, &b.av->fid, 0), 0);
    ASSERT_EQ(enable(rx), 0);
    std::uint64_t rx_name = 0;
    std::size_t len = sizeof rx_name;
    ASSERT_EQ(getname(&rx->fid, &rx_name, &len), 0);
    fi_addr_t to_rx = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(av_insert(a.av, &rx_name, 1, &to_rx, 0, nullptr), 1);

    EXPECT_EQ(wait(ws, 0), -FI_ETIMEDOUT) << "nothing to read";
    EXPECT_EQ(wait(ws, 20), -FI_ETIMEDOUT);
    fid *set_only[1] = {&ws->fid};
    EXPECT_EQ(trywait(env.fabric, set_only, 1), 0) << "safe to block on the fd";

    // Each kind of member wakes the waiter from another thread.
    char buf[8];
    ASSERT_EQ(recv(rx, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    for (int round = 0; round < 3; round++) {
        std::atomic<bool> done{false};
        std::thread t([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            if (round == 0) {
                EXPECT_EQ(send(a.ep, "x", 2, nullptr, to_rx, nullptr), 0); // CQ entry and counter
            } else if (round == 1) {
                eq_entry ev{nullptr, &eq_ctx, 7};
                EXPECT_EQ(eq_write(eq, FI_NOTIFY, &ev, sizeof ev, 0), ssize_t(sizeof ev));
            } else {
                EXPECT_EQ(cq_signal(cq), 0);
            }
            done = true;
        });
        auto t0 = std::chrono::steady_clock::now();
        int rc = wait(ws, 5000);
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
        t.join();
        EXPECT_EQ(rc, 0) << "round " << round;
        EXPECT_TRUE(done.load()) << "woke only after the event, round " << round;
        EXPECT_LT(ms.count(), 4000) << "woke by the event, not the timeout, round " << round;
        if (round == 0) {
            // the fd is readable for native waiters too: trywait says there
            // is something to read first
            EXPECT_EQ(trywait(env.fabric, set_only, 1), -FI_EAGAIN);
            cq_tagged_entry e;
            ASSERT_EQ(cq_read(cq, &e, 1), 1);
        } else if (round == 1) {
            eq_entry got;
            std::uint32_t ev = 0;
            ASSERT_EQ(eq_read(eq, &ev, &got, sizeof got, 0), ssize_t(sizeof got));
            EXPECT_EQ(got.data, 7u);
        } else {
            EXPECT_EQ(rc, 0) << "fi_cq_signal wakes the set's waiter";
            cq_tagged_entry e;
            EXPECT_EQ(cq_sread(cq, &e, 1, nullptr, 0), -FI_EAGAIN) << "and the CQ's own blocking read, once";
        }
    }
    EXPECT_EQ(wait(ws, 0), -FI_ETIMEDOUT) << "everything read";

    // After trywait returned 0, an event makes the set's fd readable.
    ASSERT_EQ(trywait(env.fabric, set_only, 1), 0);
    ASSERT_EQ(recv(rx, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        EXPECT_EQ(send(a.ep, "y", 2, nullptr, to_rx, nullptr), 0);
    });
    pollfd p{fd, POLLIN, 0};
    int pr = ::poll(&p, 1, 5000);
    t.join();
    EXPECT_EQ(pr, 1) << "native wait on the set's fd";
    cq_tagged_entry e;
    ASSERT_EQ(test::read_one(cq, e), 1);
    // A member's own blocking read works on the set's wait object.
    ASSERT_EQ(recv(rx, buf, sizeof buf, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    std::thread t2([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        EXPECT_EQ(send(a.ep, "z", 2, nullptr, to_rx, nullptr), 0);
    });
    EXPECT_EQ(cq_sread(cq, &e, 1, nullptr, 5000), 1);
    t2.join();

    EXPECT_EQ(close(&ws->fid), -FI_EBUSY) << "members are open";
    EXPECT_EQ(close(&rx->fid), 0);
    EXPECT_EQ(close(&cq->fid), 0);
    EXPECT_EQ(close(&ctr->fid), 0);
    EXPECT_EQ(close(&eq->fid), 0);
    EXPECT_EQ(close(&ws->fid), 0);
}

TEST_F(sets, WaitSetOpenRules)
{
    wait_attr wa;
    fid_wait *ws = nullptr;
    wa.flags = 1;
    EXPECT_EQ(wait_open(env.fabric, &wa, &ws), -FI_EINVAL);
    wa.flags = 0;
    wa.wait_obj = FI_WAIT_MUTEX_COND;
    EXPECT_EQ(wait_open(env.fabric, &wa, &ws), -FI_ENOSYS);
    wa.wait_obj = FI_WAIT_NONE;
    EXPECT_EQ(wait_open(env.fabric, &wa, &ws), -FI_EINVAL);
    EXPECT_EQ(wait_open(nullptr, &wa, &ws), -FI_EINVAL);
    EXPECT_EQ(wait(nullptr, 0), -FI_EINVAL);
    // FI_WAIT_YIELD: no wait object, wait() yields between checks
    wa.wait_obj = FI_WAIT_YIELD;
    ASSERT_EQ(wait_open(env.fabric, &wa, &ws), 0);
    int fd = 0;
    EXPECT_EQ(control(&ws->fid, FI_GETWAIT, &fd), -FI_ENODATA);
    fid_cq *cq = cq_on(env.domain, ws, nullptr);
    ASSERT_NE(cq, nullptr);
    EXPECT_EQ(wait(ws, 10), -FI_ETIMEDOUT);
    EXPECT_EQ(cq_signal(cq), 0);
    EXPECT_EQ(close(&cq->fid), 0);
    EXPECT_EQ(close(&ws->fid), 0);
    // a CQ on no set, a closed one, or a set of another fabric
    cq_attr ca;
    ca.wait_obj = FI_WAIT_SET;
    fid_cq *c = nullptr;
    EXPECT_EQ(cq_open(env.domain, &ca, &c, nullptr), -FI_EINVAL);
    test::loop_env other;
    ASSERT_EQ(other.open(), 0);
    wa.wait_obj = FI_WAIT_UNSPEC;
    ASSERT_EQ(wait_open(other.fabric, &wa, &ws), 0);
    ca.wait_set = ws;
    EXPECT_EQ(cq_open(env.domain, &ca, &c, nullptr), -FI_EINVAL) << "a set of another fabric";
    EXPECT_EQ(close(&ws->fid), 0);
}
