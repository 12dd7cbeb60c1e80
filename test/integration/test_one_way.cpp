// One-way latency stamps (SHUNT_TELEMETRY_ONE_WAY) between two processes
// over the vq provider on shm: with both ends enabled, the receiver's
// vq.ep.<n>.one_way histogram counts exactly the messages it received (every
// protocol: inline, from the user's buffer, fragments, rendezvous), with
// plausible values; with one end disabled nothing is stamped or recorded.
// The bytes of every message are checked in every case.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "env/errors.h"
#include "env/stats.h"
#include "env/tsc.h"
#include "fabric/api.h"
#include "fabric/fab_common.h"

using namespace shunt;
namespace st = shunt::env::stats;
namespace fab = shunt::fabric;
namespace tf = shunt::test::fab; // the integration tests' helpers
using namespace shunt::fabric; // FI_* names

namespace {

constexpr int injects = 50;                                                    ///< 8 bytes each
constexpr std::size_t send_sizes[] = {100, 3000, 20000, 1u << 20, 5u << 20}; ///< eager .. rendezvous
constexpr int msgs = injects + int(sizeof send_sizes / sizeof send_sizes[0]);
constexpr auto deadline = std::chrono::seconds(20);

std::size_t size_of(int k) { return k < injects ? 8 : send_sizes[k - injects]; }
std::uint8_t pattern(int k, std::size_t i) { return std::uint8_t(k * 31 + int(i)); }

/** One side in its own process: opens an RDM endpoint, swaps addresses
 *  with the peer, sends (sender) or receives and checks (receiver) the
 *  messages, then one 8-byte reply the other way. @return "ok HAS COUNT
 *  CONNS MEAN MAX HZ" (its one-way block: present, histogram count,
 *  connections, mean and max in cycles) or "fail WHY", also written to
 *  @p res_fd before the endpoint closes, once @p hold_fd reaches its end
 *  (the parent has both results: the peer took the reply). */
std::string run_side(bool sender, int addr_out, int addr_in, int res_fd, int hold_fd)
{
    fab::info *h = tf::shm_hints(FI_EP_RDM, false);
    h->caps = FI_MSG;
    fab::info *fi = nullptr;
    int rc = fab::getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &fi);
    fab::freeinfo(h);
    if (rc)
        return "fail getinfo " + std::to_string(rc);
    fab::fid_fabric *fabric = nullptr;
    fab::fid_domain *dom = nullptr;
    fab::fid_ep *ep = nullptr;
    fab::fid_cq *cq = nullptr;
    fab::fid_av *av = nullptr;
    fab::cq_attr ca;
    ca.format = FI_CQ_FORMAT_MSG;
    fab::av_attr aa;
    if (fab::fabric_open(fi->fabric_attr, &fabric, nullptr) || fab::domain_open(fabric, fi, &dom, nullptr) ||
        fab::cq_open(dom, &ca, &cq, nullptr) || fab::av_open(dom, &aa, &av, nullptr) ||
        fab::endpoint(dom, fi, &ep, nullptr) || fab::ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) ||
        fab::ep_bind(ep, &av->fid, 0) || fab::enable(ep))
        return "fail endpoint set-up";
    std::uint8_t mine[64] = {}, peer_addr[64] = {};
    std::size_t len = sizeof mine;
    if (fab::getname(&ep->fid, mine, &len) || !tf::write_all(addr_out, mine, sizeof mine) ||
        !tf::read_all(addr_in, peer_addr, sizeof peer_addr, 20000))
        return "fail address exchange";
    fab::fi_addr_t peer = 0;
    if (fab::av_insert(av, peer_addr, 1, &peer, 0, nullptr) != 1)
        return "fail av_insert";

    const auto until = std::chrono::steady_clock::now() + deadline;
    auto late = [&] { return std::chrono::steady_clock::now() > until; };
    std::string err;
    // Completions: receives carry their message index in the context slot.
    int recvs_done = 0, sends_done = 0;
    std::vector<fab::context> ctx(msgs + 1);
    auto poll = [&] {
        fab::cq_msg_entry e[16];
        ssize_t n = fab::cq_read(cq, e, 16);
        if (n == -FI_EAGAIN)
            return;
        if (n < 0) {
            err = "cq_read " + std::to_string(n);
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (e[i].flags & FI_RECV)
                recvs_done++;
            else
                sends_done++;
        }
    };
    std::vector<std::vector<std::uint8_t>> bufs(msgs);
    std::uint8_t reply[8] = {1, 2, 3, 4, 5, 6, 7, 8}, reply_in[8] = {};
    if (sender) {
        if (fab::recv(ep, reply_in, sizeof reply_in, nullptr, peer, &ctx[msgs]))
            return "fail recv";
        int sent = 0;
        const int want_sends = msgs - injects; // injects have no completion
        for (int k = 0; k < msgs; k++) {
            bufs[k].resize(size_of(k));
            for (std::size_t i = 0; i < bufs[k].size(); i++)
                bufs[k][i] = pattern(k, i);
        }
        while ((sent < msgs || sends_done < want_sends || recvs_done < 1) && err.empty() && !late()) {
            if (sent < msgs) {
                ssize_t r = sent < injects ? fab::inject(ep, bufs[sent].data(), 8, peer)
                                           : fab::send(ep, bufs[sent].data(), bufs[sent].size(), nullptr, peer,
                                                       &ctx[sent]);
                if (r == 0)
                    sent++;
                else if (r != -FI_EAGAIN)
                    err = "send " + std::to_string(r);
            }
            poll();
        }
        if (err.empty() && (sent < msgs || sends_done < want_sends || recvs_done < 1))
            err = "timed out: sent " + std::to_string(sent) + ", completed " + std::to_string(sends_done) +
                  ", reply " + std::to_string(recvs_done);
        if (err.empty() && std::memcmp(reply, reply_in, sizeof reply) != 0)
            err = "the reply's bytes differ";
    } else {
        for (int k = 0; k < msgs; k++) {
            bufs[k].assign(size_of(k), 0);
            if (fab::recv(ep, bufs[k].data(), bufs[k].size(), nullptr, peer, &ctx[k]))
                return "fail recv";
        }
        while (recvs_done < msgs && err.empty() && !late())
            poll();
        for (int k = 0; k < msgs && err.empty(); k++)
            for (std::size_t i = 0; i < bufs[k].size(); i++)
                if (bufs[k][i] != pattern(k, i)) {
                    err = "message " + std::to_string(k) + " byte " + std::to_string(i) + " differs";
                    break;
                }
        if (err.empty() && recvs_done < msgs)
            err = "timed out: received " + std::to_string(recvs_done);
        if (err.empty()) {
            ssize_t r;
            while ((r = fab::inject(ep, reply, sizeof reply, peer)) == -FI_EAGAIN && !late())
                poll();
            if (r)
                err = "reply " + std::to_string(r);
        }
    }
    // This endpoint's one-way block, if it has one.
    std::string out = "fail " + err;
    if (err.empty()) {
        std::string name;
        for (const std::string &n : st::list())
            if (n.rfind("vq.ep.", 0) == 0 && n.size() > 8 && n.compare(n.size() - 8, 8, ".one_way") == 0)
                name = n;
        st::block_snapshot b;
        std::ostringstream o;
        if (name.empty()) {
            o << "ok 0 0 0 0 0 " << env::tsc::hz();
        } else if (st::read(name, b) != 0 || !b.find("one_way") || !b.find("connections")) {
            o << "fail cannot read " << name;
        } else {
            const auto &hs = b.find("one_way")->hist;
            o << "ok 1 " << hs.total << ' ' << b.find("connections")->value << ' ' << std::uint64_t(hs.mean()) << ' '
              << hs.max << ' ' << env::tsc::hz();
        }
        out = o.str();
    }
    const std::string line = out + '\n';
    (void)tf::write_all(res_fd, line.data(), line.size());
    pollfd pf{hold_fd, POLLIN, 0};
    (void)::poll(&pf, 1, 20000);
    (void)fab::close(&ep->fid);
    (void)fab::close(&av->fid);
    (void)fab::close(&cq->fid);
    (void)fab::close(&dom->fid);
    (void)fab::close(&fabric->fid);
    fab::freeinfo(fi);
    return out;
}

struct result {
    bool ok = false;
    std::string text;
    bool has = false;
    std::uint64_t count = 0, conns = 0, mean = 0, max = 0, hz = 0;
};

result parse(const std::string &s)
{
    result r;
    r.text = s;
    std::istringstream in(s);
    std::string w;
    in >> w;
    int has = 0;
    if (w == "ok" && (in >> has >> r.count >> r.conns >> r.mean >> r.max >> r.hz)) {
        r.ok = true;
        r.has = has != 0;
    }
    return r;
}

/** Run a sender and a receiver in two processes, stamps on as given. */
void run_pair(bool sender_on, bool receiver_on, result &snd, result &rcv)
{
    int a2b[2], b2a[2], res[2][2], hold[2];
    ASSERT_EQ(::pipe(a2b), 0);
    ASSERT_EQ(::pipe(b2a), 0);
    ASSERT_EQ(::pipe(res[0]), 0);
    ASSERT_EQ(::pipe(res[1]), 0);
    ASSERT_EQ(::pipe(hold), 0);
    pid_t pid[2];
    for (int side = 0; side < 2; side++) {
        pid[side] = ::fork();
        ASSERT_GE(pid[side], 0);
        if (pid[side] == 0) {
            const bool sender = side == 0;
            ::setenv("SHUNT_TELEMETRY_ONE_WAY", (sender ? sender_on : receiver_on) ? "1" : "0", 1);
            ::alarm(60); // a stuck child ends
            ::close(hold[1]);
            std::string r = run_side(sender, sender ? a2b[1] : b2a[1], sender ? b2a[0] : a2b[0], res[side][1], hold[0]);
            if (r.rfind("fail", 0) == 0) // set-up failed before the result was written
                (void)tf::write_all(res[side][1], (r + '\n').data(), r.size() + 1);
            ::_exit(0); // not exit(): DPDK's handler and the parent's gtest state stay out of it
        }
    }
    ::close(hold[0]);
    std::string out[2];
    for (int side = 0; side < 2; side++) {
        ::close(res[side][1]);
        char buf[256];
        for (;;) {
            pollfd pf{res[side][0], POLLIN, 0};
            if (::poll(&pf, 1, 40000) != 1)
                break;
            ssize_t n = ::read(res[side][0], buf, sizeof buf);
            if (n <= 0)
                break;
            out[side].append(buf, std::size_t(n));
            if (out[side].find('\n') != std::string::npos)
                break;
        }
        ::close(res[side][0]);
    }
    ::close(hold[1]); // both may exit now
    for (int side = 0; side < 2; side++) {
        int status = 0;
        bool done = false;
        for (int i = 0; i < 200 && !done; i++) {
            done = ::waitpid(pid[side], &status, WNOHANG) == pid[side];
            if (!done)
                ::usleep(50000);
        }
        if (!done) {
            ::kill(pid[side], SIGKILL);
            ::waitpid(pid[side], &status, 0);
        }
        EXPECT_TRUE(done && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << (side ? "receiver" : "sender") << " status " << status;
    }
    for (int fd : {a2b[0], a2b[1], b2a[0], b2a[1]})
        ::close(fd);
    snd = parse(out[0]);
    rcv = parse(out[1]);
    ASSERT_TRUE(snd.ok) << "sender: " << out[0];
    ASSERT_TRUE(rcv.ok) << "receiver: " << out[1];
}

/** Stamps need telemetry and one clock (an invariant TSC). */
std::string why_not()
{
    const char *t = std::getenv("SHUNT_TELEMETRY");
    if (t && std::string(t) == "0")
        return "SHUNT_TELEMETRY=0";
    std::string why;
    return env::tsc::clock_id(why).empty() ? why : "";
}

/** One end without the variable: it keeps no block, and the other end
 *  records nothing (no agreement, so neither the messages nor the reply
 *  are stamped). */
void expect_nothing_stamped(bool sender_on, bool receiver_on)
{
    if (std::string w = why_not(); !w.empty())
        GTEST_SKIP() << w;
    result snd, rcv;
    ASSERT_NO_FATAL_FAILURE(run_pair(sender_on, receiver_on, snd, rcv));
    const result &off = sender_on ? rcv : snd, &on = sender_on ? snd : rcv;
    EXPECT_FALSE(off.has) << "a disabled endpoint has no one-way block";
    ASSERT_TRUE(on.has);
    EXPECT_EQ(on.count, 0u) << "no agreement, no stamps";
    EXPECT_EQ(on.conns, 0u);
}

} // namespace

TEST(OneWay, BothEnabledCountsEveryMessageReceived)
{
    if (std::string w = why_not(); !w.empty())
        GTEST_SKIP() << w;
    result snd, rcv;
    ASSERT_NO_FATAL_FAILURE(run_pair(true, true, snd, rcv));
    std::printf("receiver: %llu values, %llu connection(s), mean %llu max %llu cycles\n",
                (unsigned long long)rcv.count, (unsigned long long)rcv.conns, (unsigned long long)rcv.mean,
                (unsigned long long)rcv.max);
    ASSERT_TRUE(rcv.has) << "the receiver has a one-way block";
    EXPECT_EQ(rcv.count, std::uint64_t(msgs)) << "one value per message received, every protocol";
    EXPECT_GE(rcv.conns, 1u);
    EXPECT_GT(rcv.mean, 0u);
    EXPECT_GT(rcv.max, 0u);
    EXPECT_LT(rcv.max, rcv.hz * 20) << "no stamp older than the test's 20 s bound";
    ASSERT_TRUE(snd.has);
    EXPECT_EQ(snd.count, 1u) << "the sender received one message: the reply, stamped too";
    EXPECT_GE(snd.conns, 1u);
}

TEST(OneWay, SenderDisabledRecordsNothing) { expect_nothing_stamped(false, true); }

TEST(OneWay, ReceiverDisabledRecordsNothing) { expect_nothing_stamped(true, false); }
