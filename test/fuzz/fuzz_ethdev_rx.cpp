// libFuzzer: the ethdev driver's receive path (frame validation, ARP, the
// UD, UC and RC transports: responder and requester, RETH/AETH/AtomicETH,
// read responses, lent receives) against arbitrary frames from the wire.
// The frames go through a cross-wired net_ring pair in this process: a
// RAW_PACKET QP on one port sends them, as a hostile peer on the link would,
// and the driver receives them on the other, whose QPs are the target.
//
// Input: byte 0 the mode (bits below), then frames, each a 2-byte length
// (little-endian, low 11 bits) and its bytes. With m_template the bytes are
// a RoCE packet from its BTH on, given Ethernet, IPv4 and UDP headers from
// the sender's port to the target's; otherwise they are the whole frame.
// The other bits fix up what a blind mutation would rarely get right, so
// the fuzzer gets past the checks into the transports.
//
// Every input starts from the same state: the target's QPs are reset,
// connected again (PSNs 0) and given fresh receives. ASan/UBSan and
// libFuzzer's -timeout catch a bad access or a hang; the checks below catch
// a completion for a receive never posted or longer than it, and a write
// outside the target's registered memory.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "env/errors.h"
#include "ethdev/crc32.h"
#include "ethdev/wire.h"
#include "vq/vq.h"

namespace {

namespace vq = shunt::vq;
namespace eth = shunt::drv::ethdev;
namespace wire = shunt::drv::ethdev::wire;

enum : std::uint8_t {
    m_template = 1,   ///< frames are RoCE packets from the BTH on
    m_icrc = 2,       ///< append the right ICRC (else the last 4 bytes are the ICRC)
    m_map_qpn = 4,    ///< the destination QP: one of the target's, chosen by the BTH's last QPN byte
    m_keys = 8,       ///< RETH/AtomicETH R_Key the target's, VA into its region; UD Q_Key the target's
    m_psn_seq = 16,   ///< the i-th frame's PSN is i
    m_busy = 32,      ///< the target's RC QP has a read, a write, an atomic and a send outstanding
    m_lend = 64,      ///< the target's RC QP takes lent receives
};

constexpr const char *dev_tx = "net_ring_pair0a", *dev_rx = "net_ring_pair0b";
constexpr std::uint32_t qkey = 0x1111;
constexpr std::size_t guard = 4096, region = 256 * 1024, slot = 2048, nslots = 16;
constexpr std::size_t work_off = 4 * nslots * slot; ///< the target's own requests' buffers
constexpr std::uint8_t guard_byte = 0xa5;
constexpr int max_frames = 64;

void check(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "fuzz_ethdev_rx: %s\n", what);
        std::abort();
    }
}

struct side {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::mr *mr = nullptr;
    std::uint8_t *mem = nullptr; ///< guard | region | guard
    std::uint8_t *buf = nullptr; ///< the registered region

    explicit side(const char *name)
    {
        vq::device *d = vq::find_device(name);
        check(d != nullptr, "no net_ring device (SHUNT_ETHDEV_RING_PAIRS)");
        check(vq::open_device(d, &ctx) == 0, "open_device");
        check(vq::alloc_pd(ctx, &pd) == 0, "alloc_pd");
        vq::cq_init_attr ca;
        ca.cqe = 1024;
        check(vq::create_cq(ctx, &ca, &cq) == 0, "create_cq");
        mem = static_cast<std::uint8_t *>(std::aligned_alloc(4096, region + 2 * guard));
        check(mem != nullptr, "no memory");
        std::memset(mem, guard_byte, region + 2 * guard);
        buf = mem + guard;
        check(vq::reg_mr(pd, buf, region,
                         vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ |
                             vq::ACCESS_REMOTE_ATOMIC,
                         &mr) == 0,
              "reg_mr");
    }
    vq::qp *make(vq::qp_type t, bool lend = false)
    {
        vq::qp_init_attr ia;
        ia.type = t;
        ia.send_cq = ia.recv_cq = cq;
        ia.send_ops_flags = t == vq::qp_type::rc ? vq::OPS_SEND | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ |
                                                       vq::OPS_ATOMIC_FETCH_AND_ADD
                                                 : vq::OPS_SEND;
        ia.cap.max_send_wr = 256;
        ia.cap.max_recv_wr = nslots;
        ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
        ia.lend_recv = lend;
        vq::qp *q = nullptr;
        check(vq::create_qp(pd, &ia, &q) == 0, "create_qp");
        return q;
    }
    std::uint64_t at(std::size_t off) const { return reinterpret_cast<std::uint64_t>(buf + off); }
    /** The port's MAC and IPv4 address (the context address: MAC, then IPv4). */
    void mac_ip(std::uint8_t *mac, std::uint8_t *ip) const
    {
        std::memcpy(mac, ctx->addr.raw, 6);
        std::memcpy(ip, ctx->addr.raw + 6, 4);
    }
};

int to(vq::qp *q, vq::qp_state s, vq::qp *peer = nullptr)
{
    vq::qp_attr a;
    a.state = s;
    unsigned m = vq::QP_ATTR_STATE;
    if (s == vq::qp_state::init) {
        if (q->type == vq::qp_type::ud) {
            a.qkey = qkey;
            m |= vq::QP_ATTR_QKEY;
        } else if (q->type != vq::qp_type::raw_packet) {
            a.qp_access_flags = vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC;
            m |= vq::QP_ATTR_ACCESS_FLAGS;
        }
    }
    if (s == vq::qp_state::rtr && peer) {
        a.dest = peer->ctx->addr;
        a.dest_qp_num = peer->qp_num;
        a.rq_psn = 0;
        m |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN | vq::QP_ATTR_RQ_PSN;
    }
    if (s == vq::qp_state::rts && peer) {
        a.sq_psn = 0;
        a.retry_cnt = 1;
        a.timeout = 10;
        m |= vq::QP_ATTR_SQ_PSN | vq::QP_ATTR_RETRY_CNT | vq::QP_ATTR_TIMEOUT;
    }
    return vq::modify_qp(q, &a, m);
}

void up(vq::qp *q, vq::qp *peer = nullptr)
{
    check(to(q, vq::qp_state::reset) == 0 && to(q, vq::qp_state::init) == 0 &&
              to(q, vq::qp_state::rtr, peer) == 0 && to(q, vq::qp_state::rts, peer) == 0,
          "bringing a QP up");
}

/** The sender (a RAW_PACKET injector and the target's connected peers) and
 *  the target: RC (posted or lent receives), UC, UD and RAW_PACKET QPs. */
struct rig {
    side tx{dev_tx}, rx{dev_rx};
    vq::qp *inj = tx.make(vq::qp_type::raw_packet);
    vq::qp *peer_rc = tx.make(vq::qp_type::rc), *peer_uc = tx.make(vq::qp_type::uc);
    enum { i_rc, i_uc, i_ud, i_raw, nq };
    vq::qp *q[nq] = {rx.make(vq::qp_type::rc), rx.make(vq::qp_type::uc), rx.make(vq::qp_type::ud),
                     rx.make(vq::qp_type::raw_packet)};
    vq::qp *lend_rc = rx.make(vq::qp_type::rc, true);
    bool posted[nq][nslots] = {};
    /** Inputs so far: the high 32 bits of this input's wr_ids, so that a
     *  completion left from an earlier input is told apart. */
    std::uint64_t gen = 0;
    static constexpr std::uint64_t recv_bit = 1u << 31; ///< wr_id of one of the rig's receives
    std::uint8_t tx_mac[6], tx_ip[4], rx_mac[6], rx_ip[4];

    rig()
    {
        tx.mac_ip(tx_mac, tx_ip);
        rx.mac_ip(rx_mac, rx_ip);
        up(inj);
    }
    vq::qp *rc(bool lend) const { return lend ? lend_rc : q[i_rc]; }
    void drain()
    {
        vq::wc w[64];
        for (int i = 0; i < 4; i++) {
            while (vq::poll_cq(rx.cq, 64, w) > 0) {
            }
            while (vq::poll_cq(tx.cq, 64, w) > 0) {
            }
        }
    }
    /** Every target QP reset and up again, with fresh receives. */
    void restart(bool lend)
    {
        gen++;
        for (vq::qp *x : {q[i_rc], lend_rc, q[i_uc], peer_rc, peer_uc})
            check(to(x, vq::qp_state::reset) == 0, "reset");
        up(q[i_ud]);
        up(q[i_raw]);
        up(rc(lend), peer_rc);
        up(peer_rc, rc(lend));
        up(q[i_uc], peer_uc);
        up(peer_uc, q[i_uc]);
        drain();
        std::memset(posted, 0, sizeof posted);
        for (int k = 0; k < nq; k++) {
            if (k == i_rc && lend)
                continue;
            for (std::size_t s = 0; s < nslots; s++) {
                std::size_t off = (static_cast<std::size_t>(k) * nslots + s) * slot;
                const std::uint64_t id = gen << 32 | recv_bit | static_cast<std::uint64_t>(k) << 8 | s;
                check(vq::post_recv(q[k], id, rx.at(off), slot, rx.mr->lkey) == 0, "post_recv");
                posted[k][s] = true;
            }
        }
        std::memset(rx.mem, guard_byte, region + 2 * guard);
    }
    /** The target's RC QP starts a read, a write, an atomic and a send (the
     *  peer posts a receive for the send). */
    void busy(bool lend)
    {
        vq::qp *r = rc(lend);
        check(vq::post_recv(peer_rc, 1, tx.at(0), slot, tx.mr->lkey) == 0, "peer post_recv");
        vq::wr_start(r);
        r->wr_id = gen << 32 | 1u << 20;
        r->wr_flags = vq::WR_SIGNALED;
        vq::wr_rdma_read(r, tx.mr->rkey, tx.at(8192));
        vq::wr_set_sge(r, rx.mr->lkey, rx.at(work_off), 3000);
        r->wr_id = gen << 32 | 2u << 20;
        vq::wr_rdma_write(r, tx.mr->rkey, tx.at(16384));
        vq::wr_set_sge(r, rx.mr->lkey, rx.at(work_off + 4096), 2500);
        r->wr_id = gen << 32 | 3u << 20;
        vq::wr_atomic_fetch_add(r, tx.mr->rkey, tx.at(24576), 5);
        vq::wr_set_sge(r, rx.mr->lkey, rx.at(work_off + 8192), 8);
        r->wr_id = gen << 32 | 4u << 20;
        vq::wr_send(r);
        vq::wr_set_sge(r, rx.mr->lkey, rx.at(work_off + 12288), 1500);
        check(vq::wr_complete(r) == 0, "the target's requests");
    }
    /** Send frame @p f of @p n bytes from the injector (from send buffer @p k
     *  mod 32: a frame below SHUNT_ETHDEV_ZCOPY_BYTES is copied when posted). */
    void inject(const std::uint8_t *f, std::size_t n, int k)
    {
        std::size_t off = 32768 + static_cast<std::size_t>(k % 32) * 4096;
        std::memcpy(tx.buf + off, f, n);
        for (int tries = 0; tries < 1000; tries++) {
            int rc = vq::post_send(inj, 0, tx.buf + off, static_cast<std::uint32_t>(n), tx.mr->lkey, 0);
            if (rc != -shunt::FI_EAGAIN)
                return; // sent, or refused (a frame the port cannot carry): either is fine
            pump(1);
        }
        check(false, "the injector's queue stayed full");
    }
    /** Poll both sides @p rounds times, checking the target's completions. */
    void pump(int rounds)
    {
        vq::wc w[64];
        for (int r = 0; r < rounds; r++) {
            int k = vq::poll_cq(rx.cq, 64, w);
            check(k >= 0, "poll_cq failed");
            for (int i = 0; i < k; i++)
                on_wc(w[i]);
            check(vq::poll_cq(tx.cq, 64, w) >= 0, "the sender's poll_cq failed");
        }
    }
    void on_wc(const vq::wc &w)
    {
        // Told apart by QP and wr_id: an error completion's opcode is not defined.
        if (w.qp_num == lend_rc->qp_num) { // lent receives carry wr_id 0
            if (w.status == vq::wc_status::success && w.opcode == vq::wc_opcode::recv && w.byte_len) {
                check(w.data != nullptr, "a lent completion without data");
                volatile std::uint8_t sum = 0;
                for (std::uint32_t b = 0; b < w.byte_len; b++)
                    sum = static_cast<std::uint8_t>(sum + w.data[b]);
            }
            return;
        }
        if (w.wr_id >> 32 != gen || !(w.wr_id & recv_bit))
            return; // from an earlier input (flushed by its reset), or the target's own requests (m_busy)
        const unsigned k = static_cast<unsigned>((w.wr_id >> 8) & 0xff), s = static_cast<unsigned>(w.wr_id & 0xff);
        check(k < nq && s < nslots && posted[k][s], "a completion for a receive never posted");
        check(w.qp_num == q[k]->qp_num, "a receive completed on another QP");
        posted[k][s] = false;
        // (recv_rdma_with_imm reports the write's length, not bytes received.)
        check(w.status != vq::wc_status::success || w.opcode == vq::wc_opcode::recv_rdma_with_imm ||
                  w.byte_len <= slot,
              "a completion longer than its receive");
    }
    void check_guards() const
    {
        for (std::size_t i = 0; i < guard; i++)
            check(rx.mem[i] == guard_byte && rx.mem[guard + region + i] == guard_byte,
                  "a write outside the registered region");
    }
};

rig &the_rig()
{
    static rig *r = [] {
        setenv("SHUNT_ETHDEV_RING_PAIRS", "1", 0);
        setenv("SHUNT_LOG_LEVEL", "error", 0);
        return new rig; // lives for the whole run: contexts are not torn down per input
    }();
    return *r;
}

/** Does the opcode carry a RETH or an AtomicETH right after the BTH? */
bool keyed(std::uint8_t op)
{
    if ((op & 0xe0) != wire::op_rc && (op & 0xe0) != wire::op_uc)
        return false;
    switch (op & 0x1f) {
    case wire::op_write_first: case wire::op_write_only: case wire::op_write_only_imm:
    case wire::op_read_req: case wire::op_cmp_swap: case wire::op_fetch_add:
        return true;
    default:
        return false;
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    if (size < 1)
        return 0;
    rig &r = the_rig();
    const std::uint8_t mode = data[0];
    const bool lend = mode & m_lend;
    data++;
    size--;
    r.restart(lend);
    if (mode & m_busy)
        r.busy(lend);
    std::uint8_t f[4096];
    for (int i = 0; i < max_frames && size >= 2; i++) {
        std::size_t n = (data[0] | (data[1] & 0x07) << 8);
        data += 2;
        size -= 2;
        if (n > size)
            n = size;
        const std::uint8_t *body = data;
        data += n;
        size -= n;
        std::size_t len = n;
        if (!(mode & m_template)) {
            std::memcpy(f, body, n);
        } else {
            std::uint8_t *ip = f + wire::ip_off, *udp = f + wire::udp_off, *b = f + wire::bth_off;
            std::memcpy(f, r.rx_mac, 6);
            std::memcpy(f + 6, r.tx_mac, 6);
            wire::st16(f + 12, wire::ethertype_ipv4);
            std::memcpy(b, body, n);
            if ((mode & m_map_qpn) && n >= 8) {
                vq::qp *t = r.q[b[7] % rig::nq];
                if (t == r.q[rig::i_rc])
                    t = r.rc(lend);
                wire::st24(b + 5, t->qp_num);
            }
            if ((mode & m_psn_seq) && n >= 12)
                wire::st24(b + 9, static_cast<std::uint32_t>(i));
            if ((mode & m_keys) && n >= 12 + 16 && keyed(b[0])) {
                std::uint64_t va = wire::ld64(b + 12) % (region + 64);
                wire::st64(b + 12, r.rx.at(0) + va);
                wire::st32(b + 20, r.rx.mr->rkey);
            }
            if ((mode & m_keys) && n >= 12 + 8 && (b[0] & 0xe0) == wire::op_ud)
                wire::st32(b + 12, qkey);
            std::size_t roce = n + ((mode & m_icrc) ? wire::icrc_len : 0);
            len = wire::bth_off + roce;
            ip[0] = 0x45;
            ip[1] = 0;
            wire::st16(ip + 2, static_cast<std::uint16_t>(wire::ip_len + wire::udp_len + roce));
            wire::st16(ip + 4, static_cast<std::uint16_t>(i));
            wire::st16(ip + 6, 0x4000);
            ip[8] = 64;
            ip[9] = 17;
            ip[10] = ip[11] = 0;
            std::memcpy(ip + 12, r.tx_ip, 4);
            std::memcpy(ip + 16, r.rx_ip, 4);
            const std::uint16_t c = static_cast<std::uint16_t>(~wire::ip_hdr_sum(ip));
            std::memcpy(ip + 10, &c, 2);
            wire::st16(udp, 0xc000);
            wire::st16(udp + 2, wire::roce_udp_port);
            wire::st16(udp + 4, static_cast<std::uint16_t>(wire::udp_len + roce));
            wire::st16(udp + 6, 0);
            if ((mode & m_icrc) && n >= wire::bth_len) { // (the ICRC covers the BTH)
                std::uint32_t crc = eth::icrc_headers(ip);
                crc = eth::crc32_update(crc, f + wire::ip_off + 40, len - wire::icrc_len - wire::ip_off - 40);
                eth::icrc_store(f + len - wire::icrc_len, crc);
            }
        }
        r.inject(f, len, i);
        r.pump(2);
    }
    r.pump(16);
    r.check_guards();
    return 0;
}
