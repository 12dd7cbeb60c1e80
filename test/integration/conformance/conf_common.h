// vq conformance suite: what the test binary and its peer program share.
//
// The test process spawns conf_peer (a separate executable) and drives it over
// a socketpair with a small request/reply protocol. The peer owns its own shm
// context, memory regions and QPs; the out-of-band exchange of (device
// address, QP number, rkeys, addresses) goes over the same socket. Work
// requests are described by wr_desc so that either side can post any builder
// with any data setter (conf_post_batch executes a list of them as one
// ibv_wr session).
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "env/errors.h"
#include "vq/vq.h"

namespace shunt::conf {

namespace vq = shunt::vq;

/** The device under test: SHUNT_CONF_DEVICE, default "shm0" (the peer inherits it). */
inline const char *conf_device()
{
    const char *d = std::getenv("SHUNT_CONF_DEVICE");
    return d && *d ? d : "shm0";
}

/* How the peer reaches the device under test (all optional; the defaults
 * are shm's: a spawned process on the same device):
 *   SHUNT_CONF_PEER_DEVICE    the peer's device (e.g. the other port of a link)
 *   SHUNT_CONF_PEER_THREAD=1  peers are threads of the test process (a
 *                             net_ring pair lives in one process)
 *   SHUNT_CONF_EAL_ARGS       the test process's SHUNT_EAL_ARGS, "%p" replaced
 *                             by its pid (a net_memif server socket per process)
 *   SHUNT_CONF_PEER_EAL_ARGS  a spawned peer's SHUNT_EAL_ARGS, "%P" replaced by
 *                             the pid of the process that spawned it
 *   SHUNT_CONF_MAX_PEERS      peers the link takes at once (net_memif: 1) */
inline const char *conf_peer_device()
{
    const char *d = std::getenv("SHUNT_CONF_PEER_DEVICE");
    return d && *d ? d : conf_device();
}
inline bool conf_peer_thread()
{
    const char *t = std::getenv("SHUNT_CONF_PEER_THREAD");
    return t && *t == '1';
}
inline unsigned conf_max_peers()
{
    const char *m = std::getenv("SHUNT_CONF_MAX_PEERS");
    return m && *m ? static_cast<unsigned>(std::strtoul(m, nullptr, 10)) : 1000;
}
/** Does the device share memory with its peers (shm), so that segments,
 *  users and dead processes are visible to it without traffic? */
inline bool conf_device_is_shm() { return std::strncmp(conf_device(), "shm", 3) == 0; }
/** @p tmpl with every "%" @p key replaced by @p pid. */
inline std::string conf_expand(const char *tmpl, char key, long pid)
{
    std::string s;
    for (const char *c = tmpl; *c; c++) {
        if (c[0] == '%' && c[1] == key) {
            s += std::to_string(pid);
            c++;
        } else {
            s += *c;
        }
    }
    return s;
}

/** Serve the peer protocol on @p fd with a context on @p device until
 *  CMD_QUIT or the socket closes (conf_peer.cpp; a thread in thread mode).
 *  @return 0, or a negative code when the set-up failed. */
int conf_peer_serve(int fd, const char *device);

/* ---------------- Deterministic data ---------------- */

inline std::uint64_t splitmix64(std::uint64_t &s) noexcept
{
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/** Fill @p n bytes with the pattern of @p seed (same bytes in every process). */
inline void fill_pattern(void *p, std::size_t n, std::uint64_t seed) noexcept
{
    auto *b = static_cast<std::uint8_t *>(p);
    std::uint64_t s = seed;
    std::size_t i = 0;
    while (i < n) {
        std::uint64_t v = splitmix64(s);
        for (int k = 0; k < 8 && i < n; k++, i++)
            b[i] = static_cast<std::uint8_t>(v >> (8 * k));
    }
}

/* ---------------- Work-request descriptions ---------------- */

enum : std::uint8_t {
    OP_SEND = 1, OP_SEND_IMM, OP_SEND_INV, OP_SEND_TSO, OP_WRITE, OP_WRITE_IMM, OP_READ,
    OP_CAS, OP_FAA, OP_BIND_MW, OP_LOCAL_INV, OP_FLUSH,
};
enum : std::uint8_t {
    DATA_NONE = 0, DATA_SGE, DATA_SGE_LIST, DATA_INLINE, DATA_INLINE_LIST,
};
inline constexpr unsigned max_desc_sge = 32;

/** A piece of a local region: (region index, offset, length). */
struct piece {
    std::uint32_t mr;
    std::uint32_t len;
    std::uint64_t off;
};

/** One work request, independent of the process that posts it. Data setters
 *  take their bytes from the poster's regions (inline ones too: the bytes are
 *  copied from there at the call). */
struct wr_desc {
    std::uint64_t wr_id = 0;
    std::uint8_t op = OP_SEND;
    std::uint8_t data = DATA_NONE;
    std::uint16_t npieces = 0;
    std::uint32_t flags = 0;
    std::uint32_t rkey = 0;
    std::uint32_t imm = 0;     ///< imm data; send_inv/local_inv: rkey; bind: mw index
    std::uint64_t raddr = 0;
    std::uint64_t a0 = 0;      ///< cas compare; faa add; bind: addr; flush: len; tso: header offset
    std::uint64_t a1 = 0;      ///< cas swap; bind: length; flush: type | level << 8; tso: hdr_sz | mss << 16
    std::uint32_t a2 = 0;      ///< bind: mr index; tso: header region index
    std::uint32_t a3 = 0;      ///< bind: access flags; bind rkey: used as new key when nonzero
    std::uint32_t ud_ah = ~0u; ///< UD: address-handle index (~0: no set_ud_addr call)
    std::uint32_t ud_qpn = 0, ud_qkey = 0;
    piece pieces[max_desc_sge] = {};
};

/** A registered region of one process. */
struct local_mr {
    vq::mr *mr = nullptr;
    std::uint8_t *base = nullptr;
    std::size_t size = 0;
    bool seg = false; ///< memory from alloc_buf
};

/** Objects a wr_desc may name by index. */
struct objects {
    std::vector<local_mr> mrs;
    std::vector<vq::mw *> mws;
    std::vector<vq::ah *> ahs;
};

/** Post @p n descriptions as one session. @return wr_complete's result, or
 *  -FI_EOVERFLOW when a description names an unknown object (test bug). */
inline int conf_post_batch(vq::qp *q, const wr_desc *d, std::size_t n, objects &o)
{
    for (std::size_t i = 0; i < n; i++) {
        for (unsigned k = 0; k < d[i].npieces; k++)
            if (d[i].pieces[k].mr >= o.mrs.size() ||
                d[i].pieces[k].off + d[i].pieces[k].len > o.mrs[d[i].pieces[k].mr].size)
                return -FI_EOVERFLOW;
        if (d[i].npieces > max_desc_sge)
            return -FI_EOVERFLOW;
    }
    vq::wr_start(q);
    for (std::size_t i = 0; i < n; i++) {
        const wr_desc &w = d[i];
        q->wr_id = w.wr_id;
        q->wr_flags = w.flags;
        switch (w.op) {
        case OP_SEND: vq::wr_send(q); break;
        case OP_SEND_IMM: vq::wr_send_imm(q, w.imm); break;
        case OP_SEND_INV: vq::wr_send_inv(q, w.imm); break;
        case OP_SEND_TSO: {
            const std::uint8_t *h = w.a2 < o.mrs.size() ? o.mrs[w.a2].base + w.a0 : nullptr;
            vq::wr_send_tso(q, h, static_cast<std::uint16_t>(w.a1 & 0xffff),
                            static_cast<std::uint16_t>(w.a1 >> 16));
            break;
        }
        case OP_WRITE: vq::wr_rdma_write(q, w.rkey, w.raddr); break;
        case OP_WRITE_IMM: vq::wr_rdma_write_imm(q, w.rkey, w.raddr, w.imm); break;
        case OP_READ: vq::wr_rdma_read(q, w.rkey, w.raddr); break;
        case OP_CAS: vq::wr_atomic_cmp_swp(q, w.rkey, w.raddr, w.a0, w.a1); break;
        case OP_FAA: vq::wr_atomic_fetch_add(q, w.rkey, w.raddr, w.a0); break;
        case OP_BIND_MW: {
            if (w.imm >= o.mws.size() || w.a2 >= o.mrs.size()) {
                vq::wr_abort(q);
                return -FI_EOVERFLOW;
            }
            vq::mw *m = o.mws[w.imm];
            vq::mw_bind_info bi{o.mrs[w.a2].mr, w.a0, w.a1, w.a3};
            std::uint32_t key = w.rkey ? w.rkey : vq::inc_rkey(m->rkey);
            vq::wr_bind_mw(q, m, key, &bi);
            break;
        }
        case OP_LOCAL_INV: vq::wr_local_inv(q, w.imm); break;
        case OP_FLUSH:
            vq::wr_flush(q, w.rkey, w.raddr, w.a0, static_cast<std::uint8_t>(w.a1 & 0xff),
                         static_cast<std::uint8_t>(w.a1 >> 8));
            break;
        default: vq::wr_abort(q); return -FI_EOVERFLOW;
        }
        switch (w.data) {
        case DATA_NONE: break;
        case DATA_SGE: {
            const piece &p = w.pieces[0];
            const local_mr &m = o.mrs[p.mr];
            vq::wr_set_sge(q, m.mr->lkey, reinterpret_cast<std::uint64_t>(m.base + p.off), p.len);
            break;
        }
        case DATA_SGE_LIST: {
            vq::sge s[max_desc_sge];
            for (unsigned k = 0; k < w.npieces; k++) {
                const local_mr &m = o.mrs[w.pieces[k].mr];
                s[k] = {reinterpret_cast<std::uint64_t>(m.base + w.pieces[k].off), w.pieces[k].len,
                        m.mr->lkey};
            }
            vq::wr_set_sge_list(q, w.npieces, s);
            break;
        }
        case DATA_INLINE: {
            const piece &p = w.pieces[0];
            vq::wr_set_inline_data(q, o.mrs[p.mr].base + p.off, p.len);
            break;
        }
        case DATA_INLINE_LIST: {
            vq::data_buf b[max_desc_sge];
            for (unsigned k = 0; k < w.npieces; k++)
                b[k] = {o.mrs[w.pieces[k].mr].base + w.pieces[k].off, w.pieces[k].len};
            vq::wr_set_inline_data_list(q, w.npieces, b);
            break;
        }
        default: vq::wr_abort(q); return -FI_EOVERFLOW;
        }
        if (w.ud_ah != ~0u) {
            if (w.ud_ah >= o.ahs.size()) {
                vq::wr_abort(q);
                return -FI_EOVERFLOW;
            }
            vq::wr_set_ud_addr(q, o.ahs[w.ud_ah], w.ud_qpn, w.ud_qkey);
        }
    }
    return vq::wr_complete(q);
}

/** Total data bytes of a description's pieces. */
inline std::uint64_t desc_len(const wr_desc &d)
{
    std::uint64_t n = 0;
    for (unsigned k = 0; k < d.npieces; k++)
        n += d.pieces[k].len;
    return n;
}

/* ---------------- Request / reply protocol ---------------- */

enum cmd : std::uint32_t {
    CMD_HELLO = 1,   ///< → hello_rep
    CMD_REG_MR,      ///< reg_req → reg_rep
    CMD_DEREG_MR,    ///< u32 index → -
    CMD_MEM_WRITE,   ///< mem_req + bytes → -
    CMD_MEM_READ,    ///< mem_req → bytes
    CMD_CREATE_QP,   ///< qp_req → qp_rep
    CMD_CONNECT,     ///< connect_req → -
    CMD_MODIFY,      ///< modify_req → -
    CMD_POST_RECV,   ///< recv_req + piece[n] → -  (rc: post_recv's result)
    CMD_WAIT_WCS,    ///< wait_req → vq::wc[k]  (k may be < n on timeout)
    CMD_POST,        ///< post_req + wr_desc[n] → -  (rc: wr_complete's result)
    CMD_ATOMIC_LOOP, ///< atomic_req → atomic_rep + u64 fetched[n] (fetch_add mode)
    CMD_CREATE_AH,   ///< vq::dev_addr → u32 index
    CMD_ALLOC_MW,    ///< - → mw_rep
    CMD_CREATE_SRQ,  ///< srq_req → u32 index
    CMD_DESTROY_QP,  ///< u32 index → -
    CMD_QUERY_MW,    ///< u32 index → mw_rep (current rkey)
    CMD_SEND_STREAM, ///< stream_req → -  (starts posting sends until told / killed)
    CMD_SLEEP,       ///< u32 ms → - (replies first, then stops polling for ms)
    CMD_POST_RECVS,  ///< recv_req{n = count} + piece (first) → -  (count receives, piece shifted by its length each)
    CMD_QUIT,        ///< → - then exit(0)
    CMD_RESET,       ///< → - after every object is destroyed and the device reopened (a peer reused by the next test)
};

struct msg_hdr {
    std::uint32_t cmd_or_rc; ///< request: cmd; reply: (int32) result
    std::uint32_t len;       ///< payload bytes
};

struct hello_rep {
    vq::dev_addr addr;
    std::int32_t pid;
    std::int32_t pad;
    vq::device_attr attr;
};
struct reg_req {
    std::uint64_t size;
    std::uint32_t access;
    std::uint8_t seg;      ///< from alloc_buf
    std::uint8_t pad[3];
    std::uint64_t fill_seed; ///< 0: zero-filled
};
struct reg_rep {
    std::uint32_t index;
    std::uint32_t lkey;
    std::uint32_t rkey;
    std::uint32_t pad;
    std::uint64_t addr;
};
struct mem_req {
    std::uint32_t index;
    std::uint32_t pad;
    std::uint64_t off;
    std::uint64_t len;
};
struct qp_req {
    vq::qp_type type;
    std::uint8_t sq_sig_all;
    std::uint8_t pad[2];
    std::int32_t srq;      ///< SRQ index or -1
    std::uint64_t ops;
    vq::qp_cap cap;
};
struct qp_rep {
    std::uint32_t index;
    std::uint32_t qpn;
    vq::qp_cap cap;
};
struct connect_req {
    std::uint32_t index;
    std::uint32_t qkey;      ///< UD
    std::uint32_t access;    ///< qp_access_flags; ~0u: leave the default
    std::uint32_t pad;
    vq::qp_addr remote;      ///< RC/UC
};
struct modify_req {
    std::uint32_t index;
    vq::qp_state state;
};
struct recv_req {
    std::uint32_t index;    ///< QP index, or SRQ index when srq
    std::uint8_t srq;
    std::uint8_t pad[3];
    std::uint64_t wr_id;
    std::uint32_t n;
    std::uint32_t pad2;
};
struct wait_req {
    std::uint32_t index;
    std::uint32_t n;
    std::uint32_t timeout_ms;
    std::uint32_t pad;
};
struct post_req {
    std::uint32_t index;
    std::uint32_t n;
};
enum : std::uint32_t { ATOM_FAA = 1, ATOM_CAS_COUNTER, ATOM_CAS_LOCK };
struct atomic_req {
    std::uint32_t index;   ///< QP
    std::uint32_t mode;    ///< ATOM_*
    std::uint32_t rkey;
    std::uint32_t iters;
    std::uint64_t raddr;   ///< the counter word
    std::uint64_t lock_addr; ///< ATOM_CAS_LOCK: the lock word (same region)
    std::uint64_t me;      ///< lock owner id (nonzero)
    std::uint32_t start_fd_wait; ///< nonzero: wait for one byte on the socket before starting
    std::uint32_t pad;
};
struct atomic_rep {
    std::uint64_t done;     ///< successful increments
    std::uint64_t retries;  ///< failed compare-swaps
    std::uint32_t bad_wcs;  ///< error completions
    std::uint32_t first_bad_status;
};
struct mw_rep {
    std::uint32_t index;
    std::uint32_t rkey;
};
struct srq_req {
    std::uint32_t max_wr;
    std::uint32_t max_sge;
};
struct stream_req {
    std::uint32_t index;   ///< QP
    std::uint32_t mr;      ///< source region
    std::uint32_t len;     ///< bytes per send
    std::uint32_t count;   ///< sends to post (0: until killed)
};

/* ---------------- Socket I/O with deadlines ---------------- */

/** Write all of @p n bytes. @return true on success. */
inline bool write_all(int fd, const void *p, std::size_t n)
{
    const auto *b = static_cast<const std::uint8_t *>(p);
    while (n) {
        ssize_t k = ::send(fd, b, n, MSG_NOSIGNAL); // no SIGPIPE when the other side died
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == EAGAIN) {
            pollfd pf{fd, POLLOUT, 0};
            ::poll(&pf, 1, 100);
            continue;
        }
        if (k <= 0)
            return false;
        b += k;
        n -= static_cast<std::size_t>(k);
    }
    return true;
}

/** Read exactly @p n bytes within @p timeout_ms. @return true on success. */
inline bool read_all(int fd, void *p, std::size_t n, int timeout_ms)
{
    auto *b = static_cast<std::uint8_t *>(p);
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (n) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
        if (left.count() <= 0)
            return false;
        pollfd pf{fd, POLLIN, 0};
        int r = ::poll(&pf, 1, static_cast<int>(left.count()));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        ssize_t k = ::read(fd, b, n);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return false;
        b += k;
        n -= static_cast<std::size_t>(k);
    }
    return true;
}

inline bool send_msg(int fd, std::uint32_t cmd_or_rc, const void *p, std::size_t n)
{
    msg_hdr h{cmd_or_rc, static_cast<std::uint32_t>(n)};
    return write_all(fd, &h, sizeof h) && (n == 0 || write_all(fd, p, n));
}

} // namespace shunt::conf
