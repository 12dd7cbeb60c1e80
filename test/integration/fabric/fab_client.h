// Test side of the shm provider integration tests: spawn the peer process
// (a real process: posix_spawn of fab_peer) and drive it.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <signal.h>

#include <algorithm>
#include <array>
#include <string>
#include <thread>
#include <vector>

#include "env/stats.h"
#include "fab_common.h"

extern char **environ;

namespace shunt::test::fab {

/** Spawn @p path with @p args (args[0] the path, null-terminated) and
 *  environment @p envp, its fd 3 one end of a new socket pair.
 *  @return the other end, with @p pid; -1 and pid 0 (a test failure added)
 *  when it cannot be spawned. */
inline int spawn_on_fd3(const char *path, char *const args[], char *const envp[], pid_t &pid)
{
    pid = 0;
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        ADD_FAILURE() << "socketpair";
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    int rc = posix_spawn(&pid, path, &fa, nullptr, args, envp);
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    if (rc != 0) {
        ADD_FAILURE() << "cannot spawn " << path;
        pid = 0;
        ::close(sv[0]);
        return -1;
    }
    return sv[0];
}

class peer_proc {
public:
    /** @p memory: "private" (heap) or "shared" (shunt_mem) memory for the
     *  peer's RMA region and send buffers; @p env: NAME=VALUE entries added
     *  to the peer's environment (tunables). */
    explicit peer_proc(const char *type = "rdm", const char *progress = "manual", const char *memory = "private",
                       const std::vector<std::string> &env = {})
    {
        char *args[] = {const_cast<char *>(FAB_PEER_PATH), const_cast<char *>(type), const_cast<char *>(progress),
                        const_cast<char *>(memory), nullptr};
        std::vector<char *> envp;
        for (const std::string &e : env)
            envp.push_back(const_cast<char *>(e.c_str()));
        for (char **e = environ; *e; e++)
            envp.push_back(*e);
        envp.push_back(nullptr);
        if ((fd_ = spawn_on_fd3(FAB_PEER_PATH, args, envp.data(), pid_)) < 0)
            return;
        request r;
        r.op = hello;
        response s = call(r);
        std::memcpy(addr, s.addr, sizeof addr);
        mem = s.a;
        key = s.b;
    }
    /** SIGKILL the peer (no orderly close of anything) and reap it. */
    void kill()
    {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            int st = 0;
            ::waitpid(pid_, &st, 0);
            pid_ = 0;
        }
    }
    ~peer_proc()
    {
        if (pid_ > 0) {
            request r;
            r.op = quit;
            call(r);
            int st = 0;
            ::waitpid(pid_, &st, 0);
            EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "peer exit status " << st;
        }
        if (fd_ >= 0)
            ::close(fd_);
    }
    response call(const request &r)
    {
        response s;
        s.rc = -FI_EIO;
        if (!write_all(fd_, &r, sizeof r) || !read_all(fd_, &s, sizeof s)) {
            ADD_FAILURE() << "peer did not answer request " << r.op;
            s.rc = -FI_EIO;
        }
        return s;
    }
    int set_peer(const std::uint8_t *a)
    {
        request r;
        r.op = set_peer_op();
        std::memcpy(r.addr, a, sizeof r.addr);
        return call(r).rc;
    }
    std::uint64_t checksum(std::uint64_t off, std::uint64_t len)
    {
        request r;
        r.op = fab::checksum;
        r.a = off;
        r.b = len;
        return call(r).a;
    }
    void fill(std::uint64_t off, std::uint64_t len, std::uint64_t seed)
    {
        request r;
        r.op = fab::fill;
        r.a = off;
        r.b = len;
        r.c = seed;
        EXPECT_EQ(call(r).rc, 0);
    }
    response stats()
    {
        request r;
        r.op = fab::stats;
        return call(r);
    }
    std::uint8_t addr[64] = {};
    std::uint64_t mem = 0, key = 0;

private:
    static std::uint32_t set_peer_op() { return fab::set_peer; }
    pid_t pid_ = 0;
    int fd_ = -1;
};

/** Open @p n as an endpoint of @p type and make it and the peer know each
 *  other's address (@p to: the peer's). */
inline void connect_peer(node &n, peer_proc &p, ep_type type, fi_addr_t &to)
{
    ASSERT_EQ(n.open(type, false), 0);
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    ASSERT_EQ(p.set_peer(n.addr), 0);
}

/** Keep sending 16 bytes to @p to for up to 10 s until a send fails, as an
 *  error completion or an error code from the call (other than -FI_EAGAIN).
 *  @return whether it failed; *how: the call's code, 0 for a completion. */
inline bool sends_fail_soon(node &n, fi_addr_t to, ssize_t *how)
{
    *how = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::uint8_t out[16] = {2};
    while (std::chrono::steady_clock::now() < end) {
        ssize_t rc = send(n.ep, out, sizeof out, nullptr, to, nullptr);
        if (rc != 0 && rc != -FI_EAGAIN) {
            *how = rc;
            return true;
        }
        cq_tagged_entry e{};
        if (cq_read(n.cq, &e, 1) == -FI_EAVAIL) {
            cq_err_entry err{};
            EXPECT_EQ(cq_readerr(n.cq, &err, 0), 1);
            EXPECT_NE(err.err, 0);
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

/** Poll @p cq until one entry (or an error) arrives, yielding; bounded. */
inline ssize_t wait_cq(fid_cq *cq, cq_tagged_entry &e, fi_addr_t *src = nullptr, int ms = 10000)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        ssize_t n = src ? cq_readfrom(cq, &e, 1, src) : cq_read(cq, &e, 1);
        if (n != -FI_EAGAIN)
            return n;
        if (std::chrono::steady_clock::now() > end)
            return -FI_ETIMEDOUT;
        sched_yield();
    }
}

/** Retry a post while it says -FI_EAGAIN, driving progress; bounded. */
template <class F>
ssize_t retry(fid_cq *cq, F &&post, std::vector<cq_tagged_entry> *seen = nullptr, int ms = 10000)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        ssize_t rc = post();
        if (rc != -FI_EAGAIN)
            return rc;
        cq_tagged_entry e;
        ssize_t n = cq_read(cq, &e, 1);
        if (n == 1 && seen)
            seen->push_back(e);
        if (std::chrono::steady_clock::now() > end)
            return -FI_ETIMEDOUT;
        sched_yield();
    }
}

/** Receive the message of @p tag on @p n into a fresh buffer and check
 *  every byte (pattern @p seed) and nothing past it. */
inline void take_tagged(node &n, std::uint64_t tag, std::size_t len, std::uint64_t seed)
{
    std::vector<std::uint8_t> in(len + 64, 0xee), want(len);
    fill_pattern(want.data(), len, seed);
    context c;
    ASSERT_EQ(trecv(n.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, tag, 0, &c), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(n.cq, e), 1) << "tag " << std::hex << tag << std::dec << ", size " << len;
    ASSERT_EQ(e.op_context, &c);
    ASSERT_EQ(e.len, len);
    ASSERT_EQ(e.tag, tag);
    if (len) { // (want.data() of an empty vector may be null)
        ASSERT_EQ(std::memcmp(in.data(), want.data(), len), 0) << "size " << len;
    }
    EXPECT_EQ(in[len], 0xee) << "nothing written past the message";
}

/** The connection-management block (vq.ep.<n>.cm) of the one RDM endpoint
 *  opened since @p before was listed; "" when there is not exactly one. */
inline std::string cm_block(const std::vector<std::string> &before)
{
    namespace st = shunt::env::stats;
    std::string found;
    int n = 0;
    for (const std::string &b : st::list())
        if (b.rfind("vq.ep.", 0) == 0 && b.size() > 3 && b.compare(b.size() - 3, 3, ".cm") == 0 &&
            std::find(before.begin(), before.end(), b) == before.end()) {
            found = b;
            n++;
        }
    return n == 1 ? found : std::string();
}

/** Field @p f of stats block @p block (~0 when it cannot be read). */
inline std::uint64_t stat(const std::string &block, const char *f)
{
    namespace st = shunt::env::stats;
    st::block_snapshot b;
    if (st::read(block, b) != 0)
        return ~0ull;
    const st::field_value *v = b.find(f);
    return v ? v->value : ~0ull;
}

} // namespace shunt::test::fab
