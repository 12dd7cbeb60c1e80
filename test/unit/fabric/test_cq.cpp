// Generic CQ: formats, read/readfrom/readerr, sread with timeout and
// threshold, signal, wait objects, trywait, overflow.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <poll.h>
#include <thread>
#include <vector>

#include "fabric/api.h"
#include "fabric/util/cq.h"
#include "loop_prov.h"

using namespace shunt;
using namespace shunt::fabric;

namespace {

struct cq_test : ::testing::Test {
    test::loop_env env;
    void SetUp() override { ASSERT_EQ(env.open(), 0); }
    fid_cq *open_cq(cq_format f, wait_obj w = FI_WAIT_NONE, std::size_t size = 0,
                    cq_wait_cond cond = FI_CQ_COND_NONE)
    {
        cq_attr a;
        a.format = f;
        a.wait_obj = w;
        a.size = size;
        a.wait_cond = cond;
        fid_cq *cq = nullptr;
        EXPECT_EQ(cq_open(env.domain, &a, &cq, this), 0);
        return cq;
    }
    static void put(fid_cq *cq, void *ctx, std::uint64_t flags, std::size_t len, std::uint64_t data,
                    std::uint64_t tag, fi_addr_t src = 7)
    {
        util::cq_write(util::to_cq(cq), ctx, flags, len, reinterpret_cast<void *>(0x1000), data, tag, src);
    }
    /** @p e holds what put() wrote with these values, as far as format
     *  @p f has fields (flags FI_RECV | FI_TAGGED, buf 0x1000). */
    static void expect_entry(cq_format f, const cq_tagged_entry &e, void *ctx, std::size_t len, std::uint64_t data,
                             std::uint64_t tag)
    {
        EXPECT_EQ(e.op_context, ctx);
        if (f >= FI_CQ_FORMAT_MSG) {
            EXPECT_EQ(e.flags, FI_RECV | FI_TAGGED);
            EXPECT_EQ(e.len, len);
        }
        if (f >= FI_CQ_FORMAT_DATA) {
            EXPECT_EQ(e.buf, reinterpret_cast<void *>(0x1000));
            EXPECT_EQ(e.data, data);
        }
        if (f == FI_CQ_FORMAT_TAGGED) {
            EXPECT_EQ(e.tag, tag);
        }
    }
};

} // namespace

TEST_F(cq_test, OpenRejectsBadAttributes)
{
    fid_cq *cq = nullptr;
    cq_attr a;
    EXPECT_EQ(cq_open(env.domain, nullptr, &cq, nullptr), -FI_EINVAL);
    EXPECT_EQ(cq_open(nullptr, &a, &cq, nullptr), -FI_EINVAL);
    a.format = static_cast<cq_format>(99);
    EXPECT_EQ(cq_open(env.domain, &a, &cq, nullptr), -FI_EINVAL);
    a.format = FI_CQ_FORMAT_CONTEXT;
    a.wait_obj = FI_WAIT_SET; // without a wait set
    EXPECT_EQ(cq_open(env.domain, &a, &cq, nullptr), -FI_EINVAL);
    a.wait_obj = FI_WAIT_NONE;
    a.wait_cond = FI_CQ_COND_THRESHOLD;
    EXPECT_EQ(cq_open(env.domain, &a, &cq, nullptr), -FI_EINVAL);
    EXPECT_EQ(cq, nullptr);
}

TEST_F(cq_test, EveryFormatReturnsItsFields)
{
    int ctx;
    for (cq_format f : {FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED}) {
        fid_cq *cq = open_cq(f);
        put(cq, &ctx, FI_RECV | FI_TAGGED, 33, 0xda7a, 0x7a6);
        cq_tagged_entry e{};
        ASSERT_EQ(cq_read(cq, &e, 1), 1) << f;
        expect_entry(f, e, &ctx, 33, 0xda7a, 0x7a6);
        if (f == FI_CQ_FORMAT_CONTEXT) {
            EXPECT_EQ(e.flags, 0u) << "context format writes only op_context";
        }
        EXPECT_EQ(cq_read(cq, &e, 1), -FI_EAGAIN);
        EXPECT_EQ(close(&cq->fid), 0);
    }
    EXPECT_EQ(cq_entry_size(FI_CQ_FORMAT_TAGGED), sizeof(cq_tagged_entry));
}

TEST_F(cq_test, ReadReturnsEntriesInOrderAndReadfromGivesSources)
{
    fid_cq *cq = open_cq(FI_CQ_FORMAT_MSG);
    int ctx[5];
    for (int i = 0; i < 5; i++)
        put(cq, &ctx[i], FI_SEND, std::size_t(i), 0, 0, fi_addr_t(100 + i));
    cq_msg_entry e[3];
    fi_addr_t src[3];
    ASSERT_EQ(cq_readfrom(cq, e, 3, src), 3);
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ(e[i].op_context, &ctx[i]);
        EXPECT_EQ(src[i], fi_addr_t(100 + i));
    }
    ASSERT_EQ(cq_read(cq, e, 3), 2);
    EXPECT_EQ(e[0].op_context, &ctx[3]);
    EXPECT_EQ(e[1].op_context, &ctx[4]);
    EXPECT_EQ(cq_read(cq, nullptr, 1), -FI_EINVAL);
    EXPECT_EQ(close(&cq->fid), 0);
}

TEST_F(cq_test, ErrorsAreReportedByReadAvailAndReaderr)
{
    fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT);
    int ctx;
    put(cq, &ctx, FI_SEND, 0, 0, 0);
    cq_err_entry e{};
    e.op_context = &ctx;
    e.err = FI_ETRUNC;
    e.olen = 5;
    e.flags = FI_RECV;
    const char data[] = "provider detail";
    util::cq_write_err(util::to_cq(cq), e, data, sizeof data);
    cq_entry ce;
    ASSERT_EQ(cq_read(cq, &ce, 1), 1) << "the completion written before the error comes first";
    EXPECT_EQ(ce.op_context, &ctx);
    EXPECT_EQ(cq_read(cq, &ce, 1), -FI_EAVAIL);
    cq_err_entry got{};
    ASSERT_EQ(cq_readerr(cq, &got, FI_PEEK), 1);
    EXPECT_EQ(got.err, FI_ETRUNC);
    ASSERT_EQ(cq_readerr(cq, &got, 0), 1);
    EXPECT_EQ(got.op_context, &ctx);
    EXPECT_EQ(got.olen, 5u);
    ASSERT_EQ(got.err_data_size, sizeof data);
    EXPECT_STREQ(static_cast<const char *>(got.err_data), data);
    // a caller-provided err_data buffer is filled instead
    util::cq_write_err(util::to_cq(cq), e, data, sizeof data);
    char mine[4];
    cq_err_entry g2{};
    g2.err_data = mine;
    g2.err_data_size = sizeof mine;
    ASSERT_EQ(cq_readerr(cq, &g2, 0), 1);
    EXPECT_EQ(g2.err_data, mine);
    EXPECT_EQ(g2.err_data_size, sizeof mine);
    EXPECT_EQ(std::memcmp(mine, data, sizeof mine), 0);
    EXPECT_EQ(cq_readerr(cq, &got, 0), -FI_EAGAIN);
    EXPECT_EQ(cq_readerr(cq, &got, 1ULL << 40), -FI_EBADFLAGS);
    EXPECT_EQ(cq_read(cq, &ce, 1), -FI_EAGAIN);
    EXPECT_NE(cq_strerror(cq, FI_ETRUNC, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(close(&cq->fid), 0);
}

// Successful and error completions are read in the order they were written
// (fi_cq(3): -FI_EAVAIL when the next entry is an error): a read returns
// what came before the oldest error, then -FI_EAVAIL until it is read. So an
// application that reposts a multi-receive buffer on the entry carrying
// FI_MULTI_RECV (an error entry when its last message was truncated) has
// seen every earlier completion of that buffer. Through the ring, through
// spilled entries, through direct output and through sread.
TEST_F(cq_test, ErrorsAreReadInTheOrderTheyWereWritten)
{
    int ctx[12];
    auto err = [&](fid_cq *cq, int i) {
        cq_err_entry e{};
        e.op_context = &ctx[i];
        e.err = FI_ETRUNC;
        util::cq_write_err(util::to_cq(cq), e, nullptr, 0);
    };
    // Reads `want` successes (contexts in order), then the error of ctx[err_i].
    auto expect = [&](fid_cq *cq, std::vector<int> want, int err_i) {
        cq_entry ce[8];
        std::size_t got = 0;
        for (int tries = 0; tries < 20 && got < want.size(); tries++) {
            ssize_t n = cq_read(cq, ce, 8);
            ASSERT_GT(n, 0) << "after " << got << " of " << want.size() << " completions";
            for (ssize_t k = 0; k < n; k++, got++) {
                ASSERT_LT(got, want.size()) << "a completion written after the error came before it";
                EXPECT_EQ(ce[k].op_context, &ctx[want[got]]);
            }
        }
        ASSERT_EQ(got, want.size());
        if (err_i < 0) {
            EXPECT_EQ(cq_read(cq, ce, 8), -FI_EAGAIN);
            return;
        }
        ASSERT_EQ(cq_read(cq, ce, 8), -FI_EAVAIL);
        cq_err_entry e{};
        ASSERT_EQ(cq_readerr(cq, &e, 0), 1);
        EXPECT_EQ(e.op_context, &ctx[err_i]);
    };
    {
        SCOPED_TRACE("ring");
        fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT);
        put(cq, &ctx[0], FI_SEND, 0, 0, 0);
        err(cq, 1);
        put(cq, &ctx[2], FI_SEND, 0, 0, 0);
        put(cq, &ctx[3], FI_SEND, 0, 0, 0);
        err(cq, 4);
        expect(cq, {0}, 1);
        expect(cq, {2, 3}, 4);
        expect(cq, {}, -1);
        EXPECT_EQ(close(&cq->fid), 0);
    }
    {
        SCOPED_TRACE("spilled");
        fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 4);
        for (int i = 0; i < 6; i++)
            put(cq, &ctx[i], FI_SEND, 0, 0, 0);
        err(cq, 6);
        put(cq, &ctx[7], FI_SEND, 0, 0, 0);
        err(cq, 8);
        put(cq, &ctx[9], FI_SEND, 0, 0, 0);
        expect(cq, {0, 1, 2, 3, 4, 5}, 6);
        expect(cq, {7}, 8);
        expect(cq, {9}, -1);
        EXPECT_EQ(close(&cq->fid), 0);
    }
    {
        SCOPED_TRACE("direct output");
        fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT);
        ASSERT_TRUE(util::to_cq(cq)->direct_ok);
        struct hook_state {
            fid_cq *cq;
            int *ctx;
            std::function<void(fid_cq *, int)> err;
            bool done = false;
        } h{cq, ctx, err};
        auto fn = [](void *arg) {
            auto *st = static_cast<hook_state *>(arg);
            if (st->done)
                return;
            st->done = true;
            put(st->cq, &st->ctx[0], FI_SEND, 0, 0, 0);
            st->err(st->cq, 1);
            put(st->cq, &st->ctx[2], FI_SEND, 0, 0, 0);
        };
        util::cq_add_progress(util::to_cq(cq), util::progress_hook{fn, &h});
        expect(cq, {0}, 1);
        expect(cq, {2}, -1);
        util::cq_remove_progress(util::to_cq(cq), &h);
        EXPECT_EQ(close(&cq->fid), 0);
    }
    {
        SCOPED_TRACE("sread");
        fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC);
        put(cq, &ctx[0], FI_SEND, 0, 0, 0);
        err(cq, 1);
        cq_entry ce[4];
        ASSERT_EQ(cq_sread(cq, ce, 4, nullptr, 100), 1);
        EXPECT_EQ(ce[0].op_context, &ctx[0]);
        EXPECT_EQ(cq_sread(cq, ce, 4, nullptr, 100), -FI_EAVAIL);
        EXPECT_EQ(close(&cq->fid), 0);
    }
}

TEST_F(cq_test, SreadTimesOutWithoutEntriesAndNeedsAWaitObject)
{
    fid_cq *nowait = open_cq(FI_CQ_FORMAT_CONTEXT);
    cq_entry e;
    EXPECT_EQ(cq_sread(nowait, &e, 1, nullptr, 10), -FI_ENOSYS);
    EXPECT_EQ(close(&nowait->fid), 0);
    fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(cq_sread(cq, &e, 1, nullptr, 30), -FI_EAGAIN);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(25));
    EXPECT_EQ(close(&cq->fid), 0);
}

TEST_F(cq_test, SreadWakesOnAnotherThreadsCompletionAndOnSignal)
{
    fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD);
    int ctx;
    std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        put(cq, &ctx, FI_SEND, 0, 0, 0);
    });
    cq_entry e{};
    EXPECT_EQ(cq_sread(cq, &e, 1, nullptr, 5000), 1);
    EXPECT_EQ(e.op_context, &ctx);
    t.join();
    std::thread s([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT_EQ(cq_signal(cq), 0);
    });
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(cq_sread(cq, &e, 1, nullptr, 5000), -FI_EAGAIN);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
    s.join();
    EXPECT_EQ(close(&cq->fid), 0);
}

TEST_F(cq_test, SreadThresholdWaitsForCondEntries)
{
    fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC, 0, FI_CQ_COND_THRESHOLD);
    int ctx;
    put(cq, &ctx, FI_SEND, 0, 0, 0);
    std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        put(cq, &ctx, FI_SEND, 0, 0, 0);
    });
    cq_entry e[4];
    EXPECT_EQ(cq_sread(cq, e, 4, reinterpret_cast<const void *>(std::uintptr_t(2)), 5000), 2);
    t.join();
    EXPECT_EQ(close(&cq->fid), 0);
}

TEST_F(cq_test, WaitFdAndTrywait)
{
    fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD);
    int fd = -1;
    ASSERT_EQ(control(&cq->fid, FI_GETWAIT, &fd), 0);
    ASSERT_GE(fd, 0);
    fid *f = &cq->fid;
    EXPECT_EQ(trywait(env.fabric, &f, 1), 0);
    int ctx;
    put(cq, &ctx, FI_SEND, 0, 0, 0);
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 2000), 1) << "the fd must be readable after a completion";
    EXPECT_EQ(trywait(env.fabric, &f, 1), -FI_EAGAIN);
    cq_entry e;
    EXPECT_EQ(cq_read(cq, &e, 1), 1);
    EXPECT_EQ(trywait(env.fabric, &f, 0), -FI_EINVAL);
    fid_cq *nowait = open_cq(FI_CQ_FORMAT_CONTEXT);
    fid *g = &nowait->fid;
    EXPECT_EQ(trywait(env.fabric, &g, 1), -FI_EINVAL);
    EXPECT_EQ(control(&nowait->fid, FI_GETWAIT, &fd), -FI_ENODATA);
    EXPECT_EQ(close(&nowait->fid), 0);
    EXPECT_EQ(close(&cq->fid), 0);
}

TEST_F(cq_test, FullRingSpillsWithoutLosingOrReordering)
{
    fid_cq *cq = open_cq(FI_CQ_FORMAT_MSG, FI_WAIT_NONE, 4);
    for (int i = 0; i < 20; i++)
        put(cq, nullptr, FI_SEND, std::size_t(i), 0, 0);
    cq_msg_entry e[7];
    std::size_t next = 0;
    for (int tries = 0; tries < 10 && next < 20; tries++) {
        ssize_t n = cq_read(cq, e, 7);
        if (n < 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            EXPECT_EQ(e[i].len, next++);
    }
    EXPECT_EQ(next, 20u);
    EXPECT_EQ(close(&cq->fid), 0);
}

TEST_F(cq_test, ClosedOrForeignHandlesAreRejected)
{
    fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT);
    EXPECT_EQ(close(&cq->fid), 0);
    EXPECT_EQ(close(&cq->fid), -FI_EINVAL) << "double close";
    EXPECT_EQ(close(nullptr), -FI_EINVAL);
    fid bogus;
    EXPECT_EQ(close(&bogus), -FI_EINVAL);
    EXPECT_FALSE(fid_live(&bogus));
}

namespace {

// The waiter's Dekker pair without a fence on the writer's side (see
// waiter::signal): a writer publishes and signals, a waiter arms, re-checks
// and sleeps. A lost wake-up would leave the waiter asleep until its 5 s
// timeout; every round must instead end with the waiter seeing its value.
void no_wake_up_is_lost(util::waiter &w)
{
    std::atomic<int> published{0};
    std::atomic<int> waiting{0}; ///< round the waiter has armed for
    constexpr int rounds = 2000;
    std::thread writer([&] {
        for (int i = 1; i <= rounds; i++) {
            // Publish right while the waiter re-checks and goes to sleep:
            // after its arm, with a varying delay.
            while (waiting.load(std::memory_order_acquire) < i) {
            }
            for (int spin = 0; spin < (i * 7919) % 3000; spin++)
                __builtin_ia32_pause();
            published.store(i, std::memory_order_release);
            w.signal();
        }
    });
    auto start = std::chrono::steady_clock::now();
    int timeouts = 0;
    for (int i = 1; i <= rounds; i++) {
        bool armed_once = false;
        while (published.load(std::memory_order_acquire) < i) {
            w.arm();
            if (!armed_once) {
                waiting.store(i, std::memory_order_release);
                armed_once = true;
            }
            if (published.load(std::memory_order_acquire) < i && w.wait(5000) != 0)
                timeouts++;
            w.disarm();
        }
        if (!armed_once)
            waiting.store(i, std::memory_order_release);
    }
    writer.join();
    EXPECT_EQ(timeouts, 0) << "a waiter slept through a published value";
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(waiter_test, NoWakeUpIsLostBetweenAFenceFreeWriterAndAnArmingWaiter)
{
    util::waiter w;
    ASSERT_EQ(w.open(FI_WAIT_UNSPEC), 0);
    no_wake_up_is_lost(w);
}

// A member of a wait set (a CQ or counter opened with FI_WAIT_SET) signals
// the set's eventfd in the set's ordering mode: with membarrier its writers
// do not fence either, and still no wake-up is lost.
TEST(waiter_test, AWaitSetMemberTakesTheSetsModeAndLosesNoWakeUp)
{
    util::waiter set;
    ASSERT_EQ(set.open(FI_WAIT_FD), 0);
    util::waiter member;
    member.attach(set);
    EXPECT_EQ(member.kind(), FI_WAIT_SET);
    EXPECT_EQ(member.fd(), set.fd());
    EXPECT_EQ(member.heavy(), set.heavy());
    no_wake_up_is_lost(member);
}

// A read drains the wait fd only after a wake-up was sent, and then the fd
// is no longer readable.
TEST_F(cq_test, ReadDrainsTheWaitFdAfterAWakeUp)
{
    fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD);
    ASSERT_NE(cq, nullptr);
    int fd = -1;
    ASSERT_EQ(control(&cq->fid, FI_GETWAIT, &fd), 0);
    util::cq_obj *o = util::to_cq(cq);
    o->wait.arm(); // as trywait leaves it
    put(cq, this, FI_SEND, 0, 0, 0);
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 1000), 1) << "an armed wait object is kicked by a write";
    o->wait.disarm();
    cq_entry e;
    EXPECT_EQ(cq_read(cq, &e, 1), 1);
    p.revents = 0;
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "the read consumed the wake-up";
    put(cq, this, FI_SEND, 0, 0, 0); // not armed: no wake-up, nothing to drain
    EXPECT_EQ(::poll(&p, 1, 0), 0);
    EXPECT_EQ(cq_read(cq, &e, 1), 1);
    EXPECT_EQ(close(&cq->fid), 0);
}

// Completions written by the progress that cq_read itself runs (manual
// progress, FI_THREAD_DOMAIN: direct output) go straight into the reader's
// array in the CQ's format, no byte past each entry's size touched, with
// their sources for readfrom; what does not fit the array is kept, in order.
// A read that finds as many entries waiting as it asks for returns them
// without driving progress (which would only add to the backlog); one that
// finds fewer drives it first, then returns the oldest.
TEST_F(cq_test, ReadDrivesProgressOnlyWhenFewerEntriesWaitThanItAsksFor)
{
    struct hook_state {
        fid_cq *cq = nullptr;
        int calls = 0;
        int ctx = 0;
    };
    fid_cq *cq = open_cq(FI_CQ_FORMAT_CONTEXT);
    ASSERT_NE(cq, nullptr);
    hook_state h;
    h.cq = cq;
    auto fn = [](void *arg) {
        auto *st = static_cast<hook_state *>(arg);
        st->calls++;
        put(st->cq, &st->ctx, FI_RECV, 1, 0, 0); // one completion per progress call
    };
    util::cq_add_progress(util::to_cq(cq), util::progress_hook{fn, &h});
    int waiting[3];
    for (int &w : waiting)
        put(cq, &w, FI_RECV, 8, 0, 0);
    cq_entry e[4];
    ASSERT_EQ(cq_read(cq, e, 2), 2);
    EXPECT_EQ(h.calls, 0) << "progress ran with two entries waiting for a read of two";
    EXPECT_EQ(e[0].op_context, &waiting[0]);
    EXPECT_EQ(e[1].op_context, &waiting[1]);
    ASSERT_EQ(cq_read(cq, e, 2), 2) << "one waiting, one made by the progress the read drove";
    EXPECT_EQ(h.calls, 1);
    EXPECT_EQ(e[0].op_context, &waiting[2]);
    EXPECT_EQ(e[1].op_context, &h.ctx);
    ASSERT_EQ(cq_read(cq, e, 4), 1) << "nothing waiting: progress writes straight into the array";
    EXPECT_EQ(h.calls, 2);
    // A read of none drives progress whatever waits (the way to progress
    // without reading).
    EXPECT_EQ(cq_read(cq, nullptr, 0), -FI_EAGAIN);
    EXPECT_EQ(h.calls, 3);
    EXPECT_EQ(cq_read(cq, nullptr, 0), -FI_EAGAIN);
    EXPECT_EQ(h.calls, 4) << "one entry waiting";
    ASSERT_EQ(cq_read(cq, e, 4), 3) << "two waiting, fewer than asked for: one more from progress";
    EXPECT_EQ(h.calls, 5);
    util::cq_remove_progress(util::to_cq(cq), &h);
    EXPECT_EQ(close(&cq->fid), 0);
}

TEST_F(cq_test, DirectOutputWritesEveryFormatAndKeepsWhatDoesNotFit)
{
    struct hook_state {
        fid_cq *cq = nullptr;
        int left = 0; // completions the next progress call writes
        int ctx[3] = {};
    };
    for (cq_format f : {FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED}) {
        SCOPED_TRACE(f);
        fid_cq *cq = open_cq(f);
        ASSERT_NE(cq, nullptr);
        ASSERT_TRUE(util::to_cq(cq)->direct_ok) << "the loop domain is manual progress at FI_THREAD_DOMAIN";
        hook_state h;
        h.cq = cq;
        auto fn = [](void *arg) {
            auto *st = static_cast<hook_state *>(arg);
            for (int i = 0; st->left > 0; i++, st->left--)
                put(st->cq, &st->ctx[i], FI_RECV | FI_TAGGED, 40 + std::size_t(i), 0xda7a + std::uint64_t(i),
                    0x7a6 + std::uint64_t(i), 7 + fi_addr_t(i));
        };
        util::cq_add_progress(util::to_cq(cq), util::progress_hook{fn, &h});
        const std::size_t esz = cq_entry_size(f);
        // Two completions, room for one entry in the array: the first comes
        // back from this read, the second is kept for the next.
        unsigned char raw[2 * sizeof(cq_tagged_entry)];
        std::memset(raw, 0xa5, sizeof raw);
        fi_addr_t src[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
        h.left = 2;
        ASSERT_EQ(cq_readfrom(cq, raw, 1, src), 1);
        EXPECT_EQ(h.left, 0) << "the read ran the progress";
        cq_tagged_entry e{};
        std::memcpy(&e, raw, esz);
        expect_entry(f, e, &h.ctx[0], 40, 0xda7a, 0x7a6);
        EXPECT_EQ(src[0], 7u);
        EXPECT_EQ(src[1], FI_ADDR_NOTAVAIL) << "one entry asked for, one source written";
        for (std::size_t i = esz; i < sizeof raw; i++)
            ASSERT_EQ(raw[i], 0xa5) << "byte " << i << " past the entry written";
        // The second, from the ring, in the same format.
        std::memset(raw, 0xa5, sizeof raw);
        ASSERT_EQ(cq_readfrom(cq, raw, 2, src), 1);
        std::memcpy(&e, raw, esz);
        expect_entry(f, e, &h.ctx[1], 41, 0xda7b, 0x7a7);
        EXPECT_EQ(src[0], 8u);
        for (std::size_t i = esz; i < sizeof raw; i++)
            ASSERT_EQ(raw[i], 0xa5) << "byte " << i << " past the entry written";
        EXPECT_EQ(cq_read(cq, raw, 2), -FI_EAGAIN);
        util::cq_remove_progress(util::to_cq(cq), &h);
        EXPECT_EQ(close(&cq->fid), 0);
    }
}

} // namespace
