// Wire protocol between the shm integration tests and their peer process
// (shm_peer.cpp), over a socketpair inherited by the peer (fd 3).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "vq/types.h"

namespace shunt::test::peer_proto {

enum op : std::uint32_t {
    hello = 1,       ///< → addr: peer QP; a/b: private buffer addr/rkey; c/d: segment buffer addr/rkey
    connect,         ///< addr: the test's QP → rc
    post_recv,       ///< n receives of a bytes each at buffer offset b (+ i*a), SGEs split in c pieces
    poll,            ///< wait up to a ms for n completions → wcs
    read_mem,        ///< which (c: 0 private, 1 segment), offset a, length b → bytes
    write_mem,       ///< which c, offset a, then b bytes follow
    send,            ///< send b bytes from private offset a; n: 1 inline; d: wr flags; imm in c
    atomic_loop,     ///< n fetch_add(+a) on rkey c, remote addr d; waits for all completions
    echo,            ///< n round trips: receive b bytes, send them back (inline if b small)
    state,           ///< → a: QP state
    rdma,            ///< one signaled op n (0 write, 1 read, 2 cas, 3 faa) of a bytes / compare a,
                     ///< swap-or-add b, on rkey c at d, with the private buffer at 0; → a: status, b: old value
    ud_send,         ///< n UD sends of a bytes (byte 0: c, bytes 1..4: index) to addr with Q_Key b
    quit,
    scribble,        ///< write b bytes (following) at offset a of the data area of the segment named
                     ///< addr.dev (any context's, ours included): a hostile or broken peer

};

struct request {
    std::uint32_t op;
    std::uint32_t n;
    std::uint64_t a, b, c, d;
    vq::qp_addr addr;
};

struct response {
    std::int32_t rc;
    std::uint32_t n;        ///< completions following (poll) or bytes following (read_mem)
    std::uint64_t a, b, c, d;
    vq::qp_addr addr;
};

inline bool write_all(int fd, const void *p, std::size_t n)
{
    auto *c = static_cast<const char *>(p);
    while (n) {
        ssize_t k = ::write(fd, c, n);
        if (k <= 0)
            return false;
        c += k;
        n -= static_cast<std::size_t>(k);
    }
    return true;
}

inline bool read_all(int fd, void *p, std::size_t n)
{
    auto *c = static_cast<char *>(p);
    while (n) {
        ssize_t k = ::read(fd, c, n);
        if (k <= 0)
            return false;
        c += k;
        n -= static_cast<std::size_t>(k);
    }
    return true;
}

} // namespace shunt::test::peer_proto
