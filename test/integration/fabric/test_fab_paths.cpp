// vq provider, FI_EP_RDM, two real processes: every path a message or an
// RMA takes by its size and by where its memory lies, bytes checked.
//
// The peer's memory is private (heap) or shareable (shunt_mem); with
// SHUNT_VQ_RNDV_BYTES=0 in its environment the peer sends from private
// memory through the ring at every size (in fragments beyond 16 KiB), with
// SHUNT_VQ_RNDV_BYTES=16384 by rendezvous (the receiver pulls with cross-
// memory attach) from the size where it would otherwise fragment. So each
// size class of the
// unexpected store, eager / fragmented / rendezvous sends and RMA of every
// size run against private and shareable memory on both sides; and a peer
// killed while a rendezvous is outstanding fails the operation with an
// error completion within a bounded time.
#include "fab_client.h"
#include "fabric/ext_mem.h"

using namespace shunt;
using namespace shunt::fabric;
using namespace shunt::test::fab;

namespace {

struct peer_mode {
    const char *name;
    const char *mem;                 ///< the peer's memory: "private" or "shared"
    std::vector<std::string> env;    ///< tunables in the peer's environment
    bool rndv;                       ///< its messages of 16 KiB and more go by rendezvous
};
void PrintTo(const peer_mode &m, std::ostream *os) { *os << m.name; }
const peer_mode modes[] = {
    {"PrivateFragments", "private", {"SHUNT_VQ_RNDV_BYTES=0"}, false},
    {"Shared", "shared", {}, true},
    {"PrivateRendezvous", "private", {"SHUNT_VQ_RNDV_BYTES=16384"}, true},
};

/** A buffer of the test process: heap, or shareable memory of its domain. */
struct buffer {
    std::uint8_t *p = nullptr;
    std::size_t len = 0;
    const ops_mem *mem = nullptr;
    fid_domain *dom = nullptr;
    std::vector<std::uint8_t> heap;

    int open(fid_domain *d, std::size_t n, bool shared)
    {
        len = n;
        if (!shared) {
            heap.assign(n, 0);
            p = heap.data();
            return 0;
        }
        void *ops = nullptr, *b = nullptr;
        if (int rc = open_ops(&d->fid, FI_SHUNT_MEM_OPS_1, 0, &ops, nullptr))
            return rc;
        mem = static_cast<const ops_mem *>(ops);
        dom = d;
        if (int rc = mem->alloc(d, n, &b))
            return rc;
        p = static_cast<std::uint8_t *>(b);
        std::memset(p, 0, n);
        return 0;
    }
    ~buffer()
    {
        if (mem && p) {
            EXPECT_EQ(mem->free(dom, p), 0);
        }
    }
};

struct paths : ::testing::TestWithParam<peer_mode> {
    peer_proc p{"rdm", "manual", GetParam().mem, GetParam().env};
    node n;
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    void SetUp() override { connect_peer(n, p, FI_EP_RDM, to); }
    void TearDown() override { n.close(); }

    /** Wait (bounded) until a message with @p tag sits unexpected here. */
    void wait_unexpected(std::uint64_t tag, std::size_t want_len)
    {
        context pctx;
        msg_tagged pk;
        pk.tag = tag;
        pk.context = &pctx;
        pk.addr = FI_ADDR_UNSPEC;
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (std::chrono::steady_clock::now() < end) {
            ASSERT_EQ(trecvmsg(n.ep, &pk, FI_PEEK), 0);
            cq_tagged_entry e{};
            ssize_t rc = wait_cq(n.cq, e);
            if (rc == 1) {
                EXPECT_EQ(e.len, want_len);
                EXPECT_EQ(e.tag, tag);
                return;
            }
            ASSERT_EQ(rc, -FI_EAVAIL);
            cq_err_entry err{};
            ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
            ASSERT_EQ(err.err, FI_ENOMSG);
            sched_yield();
        }
        FAIL() << "the message of tag " << std::hex << tag << " never arrived";
    }

    template <class Post>
    void while_the_peers_send_queue_is_full(std::uint64_t tag, const std::vector<std::uint64_t> &flags, Post &&post);
    void reads_while_the_peers_send_queue_is_full(std::size_t len, std::uint64_t tag);

    /** Send @p len bytes from @p out (pattern @p seed) and check the echo. */
    void echo(buffer &out, std::size_t len, std::uint64_t seed)
    {
        fill_pattern(out.p, len, seed);
        std::vector<std::uint8_t> in(len + 16, 0xee);
        context rctx, sctx;
        ASSERT_EQ(recv(n.ep, in.data(), in.size(), nullptr, to, &rctx), 0);
        ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, out.p, len, nullptr, to, &sctx); }), 0) << len;
        bool sent = false, got = false;
        for (int i = 0; i < 2 && !(sent && got); i++) {
            cq_tagged_entry e{};
            ASSERT_EQ(wait_cq(n.cq, e), 1) << "length " << len;
            if (e.op_context == &sctx) {
                sent = true;
            } else {
                ASSERT_EQ(e.op_context, &rctx);
                EXPECT_EQ(e.len, len);
                got = true;
            }
        }
        ASSERT_TRUE(sent && got);
        std::vector<std::uint8_t> want(len);
        fill_pattern(want.data(), len, seed);
        ASSERT_EQ(std::memcmp(in.data(), want.data(), len), 0) << "size " << len;
        EXPECT_EQ(in[len], 0xee) << "nothing written past the message";
    }
};

} // namespace

// Every storage of the unexpected store (inside the entry up to 64 bytes,
// the four size classes 512 / 4 KiB / 32 KiB / 128 KiB, beyond them a
// buffer of its own) on each side of its bounds, and every way the message
// came: one slot, one lent receive, fragments (private, over 16 KiB), a
// rendezvous description (shared, or private with the lowered threshold).
// Two per size, taken in the opposite order of arrival.
TEST_P(paths, UnexpectedMessagesOfEverySizeClass)
{
    std::uint64_t tag = 0x10000;
    for (std::size_t len : {std::size_t(0), std::size_t(1), std::size_t(64), std::size_t(65), std::size_t(512),
                            std::size_t(513), std::size_t(4096), std::size_t(4097), std::size_t(16384),
                            std::size_t(16385), std::size_t(32768), std::size_t(32769), std::size_t(131072),
                            std::size_t(131073), std::size_t(1) << 20}) {
        request r;
        r.op = send_tagged;
        r.n = 2;
        r.a = tag;
        r.b = len;
        ASSERT_EQ(p.call(r).rc, 0);
        ASSERT_NO_FATAL_FAILURE(wait_unexpected(tag + 1, len));
        ASSERT_NO_FATAL_FAILURE(take_tagged(n, tag + 1, len, 1));
        ASSERT_NO_FATAL_FAILURE(take_tagged(n, tag, len, 0));
        tag += 0x10;
    }
    EXPECT_EQ(p.stats().c, 0u) << "the peer saw no error";
}

// Messages from the test's private and shareable memory across the eager,
// fragment and rendezvous bounds; the peer echoes them from its own kind of
// memory, so both directions take the path of their memory.
TEST_P(paths, LargeMessagesFromPrivateAndShareableMemory)
{
    std::uint64_t seed = 1;
    for (bool shared : {false, true}) {
        buffer out;
        ASSERT_EQ(out.open(n.domain, 256 * 1024, shared), 0);
        for (std::size_t len : {4096, 16383, 16384, 16385, 65536, 200000, 256 * 1024})
            ASSERT_NO_FATAL_FAILURE(echo(out, len, seed++)) << (shared ? "shareable" : "private") << " " << len;
    }
    EXPECT_EQ(p.stats().c, 0u);
}

// RMA writes and reads of every size (the inline bound of 1 KiB, one
// message, one RDMA request by the target, the whole region) from private
// and shareable local buffers into the peer's region, and atomics on it;
// the peer's memory checked by the peer.
TEST_P(paths, RmaOfEverySize)
{
    constexpr std::size_t region = 1 << 20;
    for (bool shared : {false, true}) {
        buffer b;
        ASSERT_EQ(b.open(n.domain, region, shared), 0);
        std::uint64_t seed = shared ? 100 : 1;
        for (std::size_t len : {std::size_t(1), std::size_t(8), std::size_t(63), std::size_t(1000), std::size_t(1024),
                                std::size_t(1025), std::size_t(4096), std::size_t(16384), std::size_t(16385),
                                std::size_t(65536), std::size_t(300000), region}) {
            const std::size_t off = len + 3 <= region ? 3 : 0;
            context c;
            cq_tagged_entry e{};
            fill_pattern(b.p, len, seed);
            ASSERT_EQ(retry(n.cq, [&] { return write(n.ep, b.p, len, nullptr, to, p.mem + off, p.key, &c); }), 0);
            ASSERT_EQ(wait_cq(n.cq, e), 1) << "write " << len;
            EXPECT_EQ(e.op_context, &c);
            EXPECT_EQ(e.flags, FI_RMA | FI_WRITE);
            ASSERT_EQ(p.checksum(off, len), fnv(b.p, len)) << "write of " << len << " at the peer";
            p.fill(off, len, seed + 1);
            std::memset(b.p, 0, len);
            ASSERT_EQ(retry(n.cq, [&] { return read(n.ep, b.p, len, nullptr, to, p.mem + off, p.key, &c); }), 0);
            ASSERT_EQ(wait_cq(n.cq, e), 1) << "read " << len;
            EXPECT_EQ(e.flags, FI_RMA | FI_READ);
            std::vector<std::uint8_t> want(len);
            fill_pattern(want.data(), len, seed + 1);
            ASSERT_EQ(std::memcmp(b.p, want.data(), len), 0) << "read of " << len;
            seed += 2;
        }
        // Atomics on the peer's region, operand and result in this buffer.
        p.fill(0, 64, 0);
        auto *w = reinterpret_cast<std::uint64_t *>(b.p);
        w[0] = 0;
        context c;
        cq_tagged_entry e{};
        ASSERT_EQ(retry(n.cq, [&] { return write(n.ep, w, 8, nullptr, to, p.mem + 64, p.key, &c); }), 0);
        ASSERT_EQ(wait_cq(n.cq, e), 1);
        for (std::uint64_t i = 0; i < 4; i++) {
            w[0] = 7;
            w[1] = ~0ULL;
            ASSERT_EQ(retry(n.cq, [&] {
                          return fetch_atomic(n.ep, &w[0], 1, nullptr, &w[1], nullptr, to, p.mem + 64, p.key,
                                              FI_UINT64, FI_SUM, &c);
                      }),
                      0);
            ASSERT_EQ(wait_cq(n.cq, e), 1);
            EXPECT_EQ(w[1], 7 * i) << (shared ? "shareable" : "private");
        }
        std::uint64_t want = 28;
        EXPECT_EQ(p.checksum(64, 8), fnv(&want, 8));
        // A write with remote CQ data: the target sees exactly one event
        // with the data (into shareable memory it is a vq RDMA write with
        // immediate, which arrives as a lent completion without data).
        const std::uint64_t before = p.stats().b;
        w[0] = 0x1122334455667788ULL;
        ASSERT_EQ(retry(n.cq, [&] { return writedata(n.ep, w, 8, nullptr, 0xabc0 + shared, to, p.mem + 128, p.key, &c); }),
                  0);
        ASSERT_EQ(wait_cq(n.cq, e), 1);
        EXPECT_EQ(p.checksum(128, 8), fnv(w, 8));
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        response s;
        do
            s = p.stats();
        while (s.b == before && std::chrono::steady_clock::now() < end);
        EXPECT_EQ(s.b, before + 1) << "one remote CQ data event at the target";
        EXPECT_EQ(s.n, 0xabc0u + shared);
    }
    EXPECT_EQ(p.stats().c, 0u);
}

// With the peer's send queue full: the peer sends eight messages of 1 MiB
// that this process does not take yet (fragments from private memory, 1024
// work requests); then @p post(i, context) posts operation i of
// flags.size(), whose answer the peer cannot post and keeps until there is
// room; then this process takes the messages. Every completion is checked
// for its kind (flags[i] for operation i), every message byte by byte.
template <class Post>
void paths::while_the_peers_send_queue_is_full(std::uint64_t tag, const std::vector<std::uint64_t> &flags, Post &&post)
{
    constexpr std::size_t msgs = 8, msg_len = 1 << 20;
    const std::size_t count = flags.size();
    request r;
    r.op = send_tagged;
    r.n = msgs;
    r.a = tag;
    r.b = msg_len;
    ASSERT_EQ(p.call(r).rc, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100)); // the peer fills its send queue
    std::vector<context> ctx(count + msgs);
    std::vector<cq_tagged_entry> seen;
    for (std::size_t i = 0; i < count; i++)
        ASSERT_EQ(retry(n.cq, [&] { return post(i, &ctx[i]); }, &seen), 0) << "operation " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(200)); // the peer queues its answers
    std::vector<std::vector<std::uint8_t>> got(msgs, std::vector<std::uint8_t>(msg_len));
    for (std::size_t i = 0; i < msgs; i++)
        ASSERT_EQ(trecv(n.ep, got[i].data(), msg_len, nullptr, FI_ADDR_UNSPEC, tag + i, 0, &ctx[count + i]), 0);
    while (seen.size() < count + msgs) {
        cq_tagged_entry e{};
        ssize_t rc = wait_cq(n.cq, e);
        cq_err_entry err{};
        if (rc == -FI_EAVAIL && cq_readerr(n.cq, &err, 0) == 1)
            FAIL() << "error " << err.err << " (" << shunt::strerror(int(err.err)) << ") after " << seen.size()
                   << " completions, on " << (static_cast<context *>(err.op_context) - ctx.data());
        ASSERT_EQ(rc, 1) << "after " << seen.size() << " of " << count << " operations and " << msgs << " messages";
        seen.push_back(e);
    }
    for (const cq_tagged_entry &e : seen) {
        const auto k = std::size_t(static_cast<context *>(e.op_context) - ctx.data());
        ASSERT_LT(k, ctx.size());
        EXPECT_EQ(e.flags, k < count ? flags[k] : FI_RECV | FI_TAGGED) << k;
    }
    std::vector<std::uint8_t> want(msg_len);
    for (std::size_t i = 0; i < msgs; i++) {
        fill_pattern(want.data(), msg_len, i);
        ASSERT_EQ(std::memcmp(got[i].data(), want.data(), msg_len), 0) << "message " << i;
    }
    EXPECT_EQ(p.stats().c, 0u) << "the peer saw no error";
}

// 64 reads of @p len bytes of the peer's memory while its send queue is
// full, every byte checked.
void paths::reads_while_the_peers_send_queue_is_full(std::size_t len, std::uint64_t tag)
{
    constexpr std::size_t count = 64;
    for (std::size_t i = 0; i < count; i++)
        p.fill(i * len, len, 500 + i);
    std::vector<std::uint8_t> in(count * len, 0xee);
    ASSERT_NO_FATAL_FAILURE(while_the_peers_send_queue_is_full(
        tag, std::vector<std::uint64_t>(count, FI_RMA | FI_READ),
        [&](std::size_t i, context *c) { return read(n.ep, &in[i * len], len, nullptr, to, p.mem + i * len, p.key, c); }));
    for (std::size_t i = 0; i < count; i++) {
        std::vector<std::uint8_t> want(len);
        fill_pattern(want.data(), len, 500 + i);
        ASSERT_EQ(std::memcmp(&in[i * len], want.data(), len), 0) << "read " << i;
    }
}

// Answers of up to 984 bytes (a small read's: its id and the bytes) wait
// in the peer's queue of control messages.
TEST_P(paths, SmallReadAnswersWaitWhileThePeersSendQueueIsFull)
{
    reads_while_the_peers_send_queue_is_full(984, 0x70000);
}

// Larger reads are one RDMA write by the peer, which waits for room in its
// send queue.
TEST_P(paths, LargeReadsWaitWhileThePeersSendQueueIsFull)
{
    reads_while_the_peers_send_queue_is_full(2000, 0x80000);
}

// Rendezvous sends from this process's private memory: the peer's pulls
// (RDMA reads) wait for room in its send queue. 64 small reads go first, so
// that their answers take what room the send queue still had. The peer
// echoes every message, and each echo is one of the messages sent, byte by
// byte.
TEST_P(paths, RendezvousPullsWaitWhileThePeersSendQueueIsFull)
{
    constexpr std::size_t len = 8192, count = 8, reads = 64, read_len = 984;
    for (std::size_t i = 0; i < reads; i++)
        p.fill(i * read_len, read_len, 500 + i);
    std::vector<std::uint8_t> back(reads * read_len);
    std::vector<std::vector<std::uint8_t>> out(count, std::vector<std::uint8_t>(len)),
        in(count, std::vector<std::uint8_t>(len + 16, 0xee));
    for (std::size_t i = 0; i < count; i++)
        fill_pattern(out[i].data(), len, 1000 + i);
    std::vector<std::uint64_t> flags(reads, FI_RMA | FI_READ);
    flags.resize(reads + count, FI_RECV | FI_MSG);
    flags.resize(reads + 2 * count, FI_SEND | FI_MSG);
    ASSERT_NO_FATAL_FAILURE(while_the_peers_send_queue_is_full(0x90000, flags, [&](std::size_t i, context *c) {
        if (i < reads)
            return read(n.ep, &back[i * read_len], read_len, nullptr, to, p.mem + i * read_len, p.key, c);
        i -= reads;
        return i < count ? recv(n.ep, in[i].data(), in[i].size(), nullptr, to, c)
                         : send(n.ep, out[i - count].data(), len, nullptr, to, c);
    }));
    std::vector<bool> echoed(count, false);
    for (std::size_t j = 0; j < count; j++) {
        std::size_t i = 0;
        while (i < count && (echoed[i] || std::memcmp(in[j].data(), out[i].data(), len) != 0))
            i++;
        ASSERT_LT(i, count) << "echo " << j << " is none of the messages sent";
        echoed[i] = true;
        EXPECT_EQ(in[j][len], 0xee) << "nothing written past the message";
    }
    for (std::size_t i = 0; i < reads; i++) {
        std::vector<std::uint8_t> want(read_len);
        fill_pattern(want.data(), read_len, 500 + i);
        ASSERT_EQ(std::memcmp(&back[i * read_len], want.data(), read_len), 0) << "read " << i;
    }
}

// The peer is killed while the test's rendezvous send waits for the peer
// to pull the data and answer: the send fails with an error completion
// within a bounded time (no hang, no success reported).
TEST_P(paths, PeerKilledWhileARendezvousSendIsOutstanding)
{
    buffer out;
    ASSERT_EQ(out.open(n.domain, 200000, true), 0); // shareable: a rendezvous from 16 KiB
    ASSERT_NO_FATAL_FAILURE(echo(out, 8, 1));       // connected
    fill_pattern(out.p, out.len, 9);
    request r;
    r.op = pause_peer;
    r.a = 5000; // the peer stops polling: the description waits in its ring
    ASSERT_EQ(p.call(r).rc, 0);
    context sctx;
    ASSERT_EQ(send(n.ep, out.p, out.len, nullptr, to, &sctx), 0);
    for (int i = 0; i < 100; i++) { // the description is on its way
        cq_tagged_entry e{};
        ASSERT_EQ(cq_read(n.cq, &e, 1), -FI_EAGAIN) << "the send cannot complete while the peer sleeps";
    }
    p.kill();
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool failed = false;
    while (!failed && std::chrono::steady_clock::now() < end) {
        cq_tagged_entry e{};
        ssize_t k = cq_read(n.cq, &e, 1);
        ASSERT_NE(k, 1) << "a send to a peer killed before it took the data cannot succeed";
        if (k == -FI_EAVAIL) {
            cq_err_entry err{};
            ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
            EXPECT_EQ(err.op_context, &sctx);
            EXPECT_NE(err.err, 0);
            failed = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(failed) << "no error completion within 20 s for the send to the killed peer";
}

// The peer is killed after its two large messages arrived here as
// unexpected but before receives matched them. A message already held whole
// (eager, fragments: the first) is delivered intact, the second only when
// its last fragment came before the kill; a rendezvous pulled from private
// memory fails with an error completion (the memory is gone); from
// shareable memory it is delivered intact (the mapping stays) or fails.
// Both receives are posted at once, so the second pull is usually posted
// before the first one's failure is seen and is flushed from the failed
// QP: it fails as its connection did, never as if it had been cancelled.
// Never wrong bytes, never a hang.
TEST_P(paths, PeerKilledBeforeItsUnexpectedMessagesAreTaken)
{
    constexpr std::size_t len = 200000;
    constexpr int msgs = 2;
    // Once the second is seen, the whole of the first has arrived
    // (messages of one QP are taken in order), or for a rendezvous its
    // description.
    request r;
    r.op = send_tagged;
    r.n = msgs;
    r.a = 0x7000;
    r.b = len;
    ASSERT_EQ(p.call(r).rc, 0);
    ASSERT_NO_FATAL_FAILURE(wait_unexpected(0x7000 + msgs - 1, len));
    const bool rndv = GetParam().rndv;
    p.kill();
    std::vector<std::uint8_t> in[msgs], want(len);
    context c[msgs];
    for (int i = 0; i < msgs; i++) {
        in[i].assign(len, 0xee);
        ASSERT_EQ(trecv(n.ep, in[i].data(), len, nullptr, FI_ADDR_UNSPEC, 0x7000 + i, 0, &c[i]), 0);
    }
    bool done[msgs] = {};
    for (int k = 0; k < msgs; k++) {
        cq_tagged_entry e{};
        ssize_t rc = wait_cq(n.cq, e, nullptr, 20000);
        ASSERT_NE(rc, -FI_ETIMEDOUT) << "a receive neither completed nor failed within 20 s";
        cq_err_entry err{};
        if (rc != 1) {
            ASSERT_EQ(rc, -FI_EAVAIL);
            ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
        }
        void *ctx = rc == 1 ? e.op_context : err.op_context;
        const int i = ctx == &c[0] ? 0 : ctx == &c[1] ? 1 : -1;
        ASSERT_GE(i, 0) << "a completion of neither receive";
        ASSERT_FALSE(done[i]) << "receive " << i << " completed twice";
        done[i] = true;
        if (rc == 1) {
            EXPECT_TRUE(!rndv || std::string(GetParam().mem) == "shared")
                << "a pull from a dead process's private memory cannot succeed";
            EXPECT_EQ(e.len, len);
            fill_pattern(want.data(), len, std::uint64_t(i));
            EXPECT_EQ(std::memcmp(in[i].data(), want.data(), len), 0) << "delivered, so every byte must be right";
            continue;
        }
        EXPECT_TRUE(rndv || i == msgs - 1) << "a message held whole must be delivered";
        // Its sender is gone (FI_EHOSTUNREACH), the kernel refused the read
        // of its memory (FI_EACCES), or its connection failed while the
        // pull was queued on it or before its last fragment came
        // (FI_ECONNRESET).
        EXPECT_TRUE(err.err == FI_EHOSTUNREACH || err.err == FI_EACCES || err.err == FI_ECONNRESET)
            << "receive " << i << " of a killed sender's message failed with " << shunt::strerror(err.err);
    }
}

INSTANTIATE_TEST_SUITE_P(Memory, paths, ::testing::ValuesIn(modes),
                         [](const ::testing::TestParamInfo<peer_mode> &i) { return std::string(i.param.name); });
