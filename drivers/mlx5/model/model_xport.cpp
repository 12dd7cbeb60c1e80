/* drivers/mlx5/model: execution between ports. The requester segments
 * messages into MTU-sized packets with PSNs; the responder checks PSN, keys,
 * bounds, access and receive WQEs and answers as an IB responder does
 * (ACK, NAK sequence / invalid request / remote access / remote operational,
 * RNR NAK); the requester retransmits on NAK or timeout (go-back-N) up to
 * retry_cnt / rnr_retry. UC drops what it cannot take; UD delivers with a
 * GRH; RAW_PACKET sends Ethernet frames (TSO cut and checksums here).
 * Packets travel in lanes of the destination port's shared segment; each
 * port touches only its own process's memory. */
#include <unistd.h>

#include <cstring>

#include "model_impl.h"

namespace shunt::drv::mlx5::model {

namespace {

constexpr std::uint32_t psn_mask = 0xffffff;
inline std::uint32_t psn_add(std::uint32_t a, std::uint32_t n) noexcept { return (a + n) & psn_mask; }
/** a <= b in the 24-bit PSN space (within half the space). */
inline bool psn_le(std::uint32_t a, std::uint32_t b) noexcept { return ((b - a) & psn_mask) < 0x800000; }
inline bool psn_lt(std::uint32_t a, std::uint32_t b) noexcept { return a != b && psn_le(a, b); }

/** The RNR timer codes of IBA table 45, in microseconds. */
constexpr std::uint32_t rnr_us[32] = {655360, 10,    20,    30,    40,    60,    80,     120,
                                      160,    240,   320,   480,   640,   960,   1280,   1920,
                                      2560,   3840,  5120,  7680,  10240, 15360, 20480,  30720,
                                      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};

constexpr std::uint32_t window = 48; // packets in flight per QP (below a lane's 64 slots)

std::uint32_t crc32c(const std::uint8_t *p, std::size_t n, std::uint32_t c = ~0u) noexcept
{
    for (std::size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return c;
}

std::uint32_t pkt_crc(const wire_pkt &h, const std::uint8_t *payload) noexcept
{
    const auto *b = reinterpret_cast<const std::uint8_t *>(&h);
    std::uint32_t c = crc32c(b + 4, offsetof(wire_pkt, icrc) - 4);
    return ~crc32c(payload, h.len, c);
}

/* ---------------- Memory access through keys ---------------- */

void gather(const swqe &w, std::uint64_t off, std::uint32_t n, std::uint8_t *out) noexcept
{
    std::uint64_t pos = 0;
    if (!w.hdr.empty()) { // RAW: the inlined header comes first
        if (off < w.hdr.size()) {
            std::size_t k = std::min<std::size_t>(w.hdr.size() - off, n);
            std::memcpy(out, w.hdr.data() + off, k);
            out += k;
            off += k;
            n -= static_cast<std::uint32_t>(k);
        }
        pos = w.hdr.size();
    }
    if (!w.inl.empty()) {
        if (off < pos + w.inl.size() && n) {
            std::size_t s = off - pos, k = std::min<std::size_t>(w.inl.size() - s, n);
            std::memcpy(out, w.inl.data() + s, k);
            out += k;
            off += k;
            n -= static_cast<std::uint32_t>(k);
        }
        pos += w.inl.size();
    }
    for (const mseg &s : w.sg) {
        if (!n)
            break;
        if (off < pos + s.len) {
            std::uint64_t in = off - pos;
            std::uint32_t k = static_cast<std::uint32_t>(std::min<std::uint64_t>(s.len - in, n));
            std::memcpy(out, reinterpret_cast<const void *>(s.addr + in), k);
            out += k;
            off += k;
            n -= k;
        }
        pos += s.len;
    }
}

void scatter(const std::vector<mseg> &sg, std::uint64_t off, const std::uint8_t *src, std::uint32_t n) noexcept
{
    std::uint64_t pos = 0;
    for (const mseg &s : sg) {
        if (!n)
            break;
        if (off < pos + s.len) {
            std::uint64_t in = off - pos;
            std::uint32_t k = static_cast<std::uint32_t>(std::min<std::uint64_t>(s.len - in, n));
            std::memcpy(reinterpret_cast<void *>(s.addr + in), src, k);
            src += k;
            off += k;
            n -= k;
        }
        pos += s.len;
    }
}

std::uint64_t sg_len(const std::vector<mseg> &sg) noexcept
{
    std::uint64_t n = 0;
    for (const mseg &s : sg)
        n += s.len;
    return n;
}

/** Remote access check of [addr, addr+len) through @p rkey. @return true
 *  when allowed. A zero-byte access needs the QP's access flag only: the
 *  responder checks no R_Key or address for it (IBTA C9-88). */
bool remote_ok(mport &p, mqp &q, std::uint32_t rkey, std::uint64_t addr, std::uint64_t len, unsigned need)
{
    if (!(q.access & need))
        return false;
    if (len == 0)
        return true;
    mr_obj *m = find_key(p, rkey);
    if (!m || m->pd != q.pd || !(m->access & need))
        return false;
    if (m->window && (!m->bound || (m->bound_qpn && m->bound_qpn != q.qpn)))
        return false;
    return addr >= m->addr && len <= m->len && addr - m->addr <= m->len - len;
}

/* ---------------- CQEs ---------------- */

void cqe_req(mport &p, mqp &q, const swqe &w)
{
    std::uint8_t b[64] = {};
    auto *c = reinterpret_cast<mlx5_cqe64 *>(b);
    if (w.opcode == MLX5_OPCODE_RDMA_READ)
        c->byte_cnt = be32(static_cast<std::uint32_t>(w.total));
    else if (w.opcode == MLX5_OPCODE_ATOMIC_CS || w.opcode == MLX5_OPCODE_ATOMIC_FA)
        c->byte_cnt = be32(8);
    c->sop_drop_qpn = be32(static_cast<std::uint32_t>(w.opcode) << 24 | q.qpn);
    c->wqe_counter = be16(w.idx);
    c->op_own = MLX5_CQE_REQ << 4;
    write_cqe(p, *q.scq, b);
}

void cqe_err(mport &p, mqp &q, mcq &cq, bool req, std::uint8_t opcode, std::uint16_t counter, std::uint8_t synd,
             std::uint8_t vsynd)
{
    std::uint8_t b[64] = {};
    auto *e = reinterpret_cast<mlx5_err_cqe *>(b);
    e->syndrome = synd;
    e->vendor_err_synd = vsynd;
    e->s_wqe_opcode_qpn = be32(static_cast<std::uint32_t>(opcode) << 24 | q.qpn);
    e->wqe_counter = be16(counter);
    e->op_own = static_cast<std::uint8_t>((req ? MLX5_CQE_REQ_ERR : MLX5_CQE_RESP_ERR) << 4);
    if (!req && q.srq)
        e->srqn = be32(q.srq->srqn);
    write_cqe(p, cq, b);
}

/* ---------------- Packets out ---------------- */

bool fault_hit(mport &p, const wire_pkt &h, bool *corrupt)
{
    p.pkt_counter++;
    for (auto it = p.faults.begin(); it != p.faults.end(); ++it) {
        if (p.pkt_counter <= it->skip || (it->only_opcode != 0xff && it->only_opcode != h.opcode))
            continue;
        fault_kind k = it->kind;
        std::uint32_t ms = it->stall_ms;
        if (--it->count == 0)
            p.faults.erase(it);
        if (k == fault_kind::drop)
            return true;
        if (k == fault_kind::corrupt)
            *corrupt = true;
        if (k == fault_kind::stall)
            p.stalled_until = now_ns() + static_cast<std::uint64_t>(ms) * 1000000;
        return false;
    }
    return false;
}

/** Put a packet on the wire to port @p dport. @return false when the lane
 *  is full (try again later); true when sent, dropped or undeliverable.
 *  *pos: the lane position the receiver reaches once it took the packet
 *  (0 when there is nothing to wait for). */
bool send_pkt(mport &p, std::uint64_t dport, wire_pkt &h, const std::uint8_t *payload, std::uint32_t *pos = nullptr)
{
    if (pos)
        *pos = 0;
    peer *pe = get_peer(p, dport);
    if (!pe)
        return true; // nobody there: lost, as on a wire
    char *base = pe->base;
    auto *lanes = reinterpret_cast<lane_ctrl *>(base + pe->hdr->lanes_off);
    if (pe->lane < 0) {
        for (std::uint32_t l = 0; l < num_lanes; l++) {
            std::uint64_t cur = lanes[l].owner.load(std::memory_order_acquire);
            if (cur == p.port_id ||
                (cur == 0 && lanes[l].owner.compare_exchange_strong(cur, p.port_id, std::memory_order_acq_rel))) {
                pe->lane = static_cast<int>(l);
                pe->produced = lanes[l].produced.load(std::memory_order_acquire);
                break;
            }
        }
        if (pe->lane < 0)
            return false; // every lane of that port is busy
    }
    lane_ctrl &lc = lanes[pe->lane];
    if (lc.owner.load(std::memory_order_acquire) != p.port_id) { // reclaimed while we were away
        pe->lane = -1;
        return false;
    }
    if (pe->produced - lc.consumed.load(std::memory_order_acquire) >= lane_slots)
        return false;
    bool corrupt = false;
    if (fault_hit(p, h, &corrupt)) {
        p.st.pkts_dropped++;
        return true;
    }
    auto *slot = reinterpret_cast<wire_pkt *>(base + pe->hdr->slots_off +
                                              (static_cast<std::size_t>(pe->lane) * lane_slots +
                                               pe->produced % lane_slots) *
                                                  slot_bytes);
    h.src_port = p.port_id;
    h.icrc = pkt_crc(h, payload);
    std::memcpy(reinterpret_cast<std::uint8_t *>(slot) + 4, reinterpret_cast<std::uint8_t *>(&h) + 4,
                sizeof h - 4);
    std::uint8_t *pl = reinterpret_cast<std::uint8_t *>(slot + 1);
    if (h.len)
        std::memcpy(pl, payload, h.len);
    if (corrupt && h.len)
        pl[h.len / 2] ^= 0x10;
    else if (corrupt)
        slot->psn ^= 1;
    pe->produced++;
    if (pos)
        *pos = pe->produced;
    lc.produced.store(pe->produced, std::memory_order_relaxed);
    // Header and payload before the sequence word that publishes them.
    slot->seq.store(pe->produced, std::memory_order_release);
    p.st.pkts_sent++;
    return true;
}

/** An RC response (ACK/NAK) from the responder side of @p q. */
bool send_ack(mport &p, mqp &q, std::uint32_t psn, std::uint8_t synd)
{
    wire_pkt h{};
    h.opcode = rc_ack;
    h.dqpn = q.dqpn;
    h.sqpn = q.qpn;
    h.psn = psn;
    h.aeth = static_cast<std::uint32_t>(synd) << 24 | (q.msn & 0xffffff);
    if (synd != aeth_ack)
        p.st.naks_sent++;
    if ((synd & 0xe0) == aeth_rnr)
        p.st.rnr_naks++;
    return send_pkt(p, q.dport, h, nullptr);
}

/* ---------------- Requester ---------------- */

bool is_local(std::uint8_t op) noexcept { return op == MLX5_OPCODE_UMR || op == MLX5_OPCODE_NOP; }
bool is_read_like(std::uint8_t op) noexcept
{
    return op == MLX5_OPCODE_RDMA_READ || op == MLX5_OPCODE_ATOMIC_CS || op == MLX5_OPCODE_ATOMIC_FA;
}

std::uint32_t npkts(const mqp &q, const swqe &w) noexcept
{
    if (w.opcode == MLX5_OPCODE_ATOMIC_CS || w.opcode == MLX5_OPCODE_ATOMIC_FA)
        return 1;
    std::uint64_t n = (w.total + q.mtu - 1) / q.mtu;
    return n ? static_cast<std::uint32_t>(n) : 1;
}

/** Execute a UMR (bind_mw / local_inv) at the head of the queue. @return 0 or a syndrome. */
std::uint8_t run_umr(mport &p, mqp &q, swqe &w)
{
    mlx5_wqe_umr_ctrl_seg uc;
    mlx5_wqe_mkey_context_seg mk;
    std::memcpy(&uc, w.inl.data(), sizeof uc);
    std::memcpy(&mk, w.inl.data() + sizeof uc, sizeof mk);
    std::uint32_t orig = be32toh(w.imm);
    auto bad = [&] {
        w.vsynd = vs_bad_umr;
        return static_cast<std::uint8_t>(MLX5_CQE_SYNDROME_MW_BIND_ERR);
    };
    mr_obj *win = find_key(p, orig);
    if (!win || !win->window || win->pd != q.pd)
        return bad();
    std::uint32_t newkey = (orig & 0xffffff00u) | (be32toh(mk.qpn_mkey) & 0xff);
    if (mk.free & MLX5_WQE_MKEY_CONTEXT_FREE) { // invalidate (or unbind)
        if (win->bound)
            if (mr_obj *r = find_key(p, win->parent))
                r->windows--;
        win->bound = false;
        if (newkey & 0xff)
            win->key = newkey;
        return 0;
    }
    if (!uc.klm_octowords || w.inl.size() < sizeof uc + sizeof mk + sizeof(mlx5_wqe_umr_klm_seg))
        return bad();
    mlx5_wqe_umr_klm_seg k;
    std::memcpy(&k, w.inl.data() + sizeof uc + sizeof mk, sizeof k);
    mr_obj *mr = find_key(p, be32toh(k.mkey));
    std::uint64_t start = be64toh(mk.start_addr), len = be64toh(mk.len);
    unsigned acc = 0;
    if (mk.access_flags & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE)
        acc |= vq::ACCESS_REMOTE_WRITE;
    if (mk.access_flags & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ)
        acc |= vq::ACCESS_REMOTE_READ;
    if (mk.access_flags & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC)
        acc |= vq::ACCESS_REMOTE_ATOMIC;
    if (mk.access_flags & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE)
        acc |= vq::ACCESS_LOCAL_WRITE;
    if (!mr || mr->window || mr->pd != q.pd || !(mr->access & vq::ACCESS_MW_BIND) ||
        be64toh(k.address) != start || be32toh(k.byte_count) != len || start < mr->addr || len > mr->len ||
        start - mr->addr > mr->len - len ||
        ((acc & (vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_ATOMIC)) && !(mr->access & vq::ACCESS_LOCAL_WRITE)))
        return bad();
    if (win->bound)
        if (mr_obj *r = find_key(p, win->parent))
            r->windows--;
    win->key = newkey;
    win->addr = start;
    win->len = len;
    win->access = acc | vq::ACCESS_LOCAL_WRITE;
    win->bound = true;
    win->bound_qpn = be32toh(mk.qpn_mkey) >> 8;
    win->parent = mr->key;
    mr->windows++;
    return 0;
}

/** Build and send packet @p k of @p w. @return false when the wire is full. */
bool send_packet(mport &p, mqp &q, swqe &w, std::uint32_t k)
{
    static thread_local std::uint8_t buf[max_mtu + 64];
    wire_pkt h{};
    h.dqpn = q.type == vq::qp_type::ud ? (be32toh(reinterpret_cast<const mlx5_wqe_av *>(w.av)->dqp_dct) & 0xffffff)
                                       : q.dqpn;
    h.sqpn = q.qpn;
    h.psn = psn_add(w.first_psn, k);
    const bool last = k + 1 == w.npkts, first = k == 0;
    std::uint64_t off = static_cast<std::uint64_t>(k) * q.mtu;
    std::uint32_t len = static_cast<std::uint32_t>(std::min<std::uint64_t>(q.mtu, w.total > off ? w.total - off : 0));
    std::uint8_t base_op = 0;
    bool imm = false, inv = false;
    switch (w.opcode) {
    case MLX5_OPCODE_SEND: base_op = 0; break;
    case MLX5_OPCODE_SEND_IMM: base_op = 0; imm = true; break;
    case MLX5_OPCODE_SEND_INVAL: base_op = 0; inv = true; break;
    case MLX5_OPCODE_RDMA_WRITE: base_op = 6; break;
    case MLX5_OPCODE_RDMA_WRITE_IMM: base_op = 6; imm = true; break;
    default: break;
    }
    std::uint64_t dport = q.dport;
    if (q.type == vq::qp_type::ud) {
        const auto *av = reinterpret_cast<const mlx5_wqe_av *>(w.av);
        if (!parse_address(av->rgid, 16, &dport))
            return true; // an address no port has: lost
        h.opcode = imm ? ud_send_only_imm : ud_send_only;
        h.qkey = be32toh(av->key.qkey.qkey);
        h.imm = w.imm;
    } else if (w.opcode == MLX5_OPCODE_RDMA_READ) {
        h.opcode = rc_read_req;
        h.raddr = w.raddr;
        h.rkey = w.rkey;
        h.dmalen = static_cast<std::uint32_t>(w.total);
        len = 0;
    } else if (w.opcode == MLX5_OPCODE_ATOMIC_CS || w.opcode == MLX5_OPCODE_ATOMIC_FA) {
        h.opcode = w.opcode == MLX5_OPCODE_ATOMIC_CS ? rc_cas : rc_faa;
        h.raddr = w.raddr;
        h.rkey = w.rkey;
        h.swap_add = w.swap_add;
        h.compare = w.compare;
        len = 0;
    } else {
        // first/middle/last/only within the send or write family (IBA table 38).
        std::uint8_t op;
        if (w.npkts == 1)
            op = static_cast<std::uint8_t>(base_op + 4); // send_only 0x04, write_only 0x0a
        else if (first)
            op = base_op;            // send_first 0x00, write_first 0x06
        else if (!last)
            op = static_cast<std::uint8_t>(base_op + 1);
        else
            op = static_cast<std::uint8_t>(base_op + 2);
        if (last && imm)
            op++; // *_last_imm / *_only_imm
        if (last && inv)
            op = w.npkts == 1 ? rc_send_only_inv : rc_send_last_inv;
        h.opcode = op;
        if (imm || inv)
            h.imm = w.imm; // ImmDt as stored; IETH: the rkey in network order
        if (base_op == 6 && first) {
            h.raddr = w.raddr;
            h.rkey = w.rkey;
            h.dmalen = static_cast<std::uint32_t>(w.total);
        }
        if (q.type == vq::qp_type::uc)
            h.opcode |= uc_base;
    }
    if (last && (w.fm_ce_se & se_bit))
        h.flags |= pf_solicited;
    if (last)
        h.flags |= pf_ackreq;
    h.len = static_cast<std::uint16_t>(len);
    if (len)
        gather(w, off, len, buf);
    std::uint32_t pos = 0;
    if (!send_pkt(p, dport, h, buf, &pos))
        return false;
    // A UC write completes when the peer port has placed it: nothing else
    // tells the peer's application the data is there, and a read of that
    // memory right after our completion must see it. UD and UC sends complete
    // once on the wire (the receiver's CQE orders what it reads).
    if (last && q.type == vq::qp_type::uc && base_op == 6) {
        w.wire_port = pos ? dport : 0;
        w.wire_pos = pos;
    }
    return true;
}

/* ---- RAW_PACKET: frames, TSO and checksums ---- */

std::uint16_t csum_fold(std::uint32_t s) noexcept
{
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return static_cast<std::uint16_t>(~s);
}
std::uint32_t csum_add(const std::uint8_t *p, std::size_t n, std::uint32_t s = 0) noexcept
{
    for (std::size_t i = 0; i + 1 < n; i += 2)
        s += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
    if (n & 1)
        s += static_cast<std::uint32_t>(p[n - 1] << 8);
    return s;
}

/** Fill IPv4 header and TCP/UDP checksums of an Ethernet frame (cs_flags L3/L4). */
void fix_checksums(std::uint8_t *f, std::size_t n) noexcept
{
    std::size_t l2 = 14;
    if (n < l2 + 20)
        return;
    std::uint16_t et = static_cast<std::uint16_t>(f[12] << 8 | f[13]);
    if (et == 0x8100 && n >= 18 + 20) {
        l2 = 18;
        et = static_cast<std::uint16_t>(f[16] << 8 | f[17]);
    }
    if (et != 0x0800)
        return;
    std::uint8_t *ip = f + l2;
    std::size_t ihl = (ip[0] & 0xf) * 4u;
    if ((ip[0] >> 4) != 4 || ihl < 20 || l2 + ihl > n)
        return;
    ip[10] = ip[11] = 0;
    std::uint16_t c = csum_fold(csum_add(ip, ihl));
    ip[10] = static_cast<std::uint8_t>(c >> 8);
    ip[11] = static_cast<std::uint8_t>(c);
    std::size_t tot = static_cast<std::size_t>(ip[2] << 8 | ip[3]);
    if (tot < ihl || l2 + tot > n)
        return;
    std::uint8_t proto = ip[9];
    std::uint8_t *l4 = ip + ihl;
    std::size_t l4len = tot - ihl;
    std::size_t coff = proto == 6 ? 16 : proto == 17 ? 6 : 0;
    if (!coff || l4len < coff + 2)
        return;
    l4[coff] = l4[coff + 1] = 0;
    std::uint32_t s = csum_add(ip + 12, 8);
    s += proto;
    s += static_cast<std::uint32_t>(l4len);
    std::uint16_t c4 = csum_fold(csum_add(l4, l4len, s));
    if (proto == 17 && c4 == 0)
        c4 = 0xffff;
    l4[coff] = static_cast<std::uint8_t>(c4 >> 8);
    l4[coff + 1] = static_cast<std::uint8_t>(c4);
}

/** IPv4 / L4 checksums of a received frame valid? (CQE L3_OK / L4_OK bits). */
void rx_csum(const std::uint8_t *f, std::size_t n, bool *ipv4, bool *l3ok, bool *l4ok) noexcept
{
    *ipv4 = *l3ok = *l4ok = false;
    if (n < 34 || f[12] != 0x08 || f[13] != 0x00)
        return;
    const std::uint8_t *ip = f + 14;
    std::size_t ihl = (ip[0] & 0xf) * 4u;
    if ((ip[0] >> 4) != 4 || ihl < 20 || 14 + ihl > n)
        return;
    *ipv4 = true;
    *l3ok = csum_fold(csum_add(ip, ihl)) == 0;
    std::size_t tot = static_cast<std::size_t>(ip[2] << 8 | ip[3]);
    if (tot < ihl || 14 + tot > n)
        return;
    std::uint8_t proto = ip[9];
    if (proto != 6 && proto != 17)
        return;
    std::uint32_t s = csum_add(ip + 12, 8) + proto + static_cast<std::uint32_t>(tot - ihl);
    *l4ok = csum_fold(csum_add(ip + ihl, tot - ihl, s)) == 0;
}

/** The destination port of a frame: the model's MACs are 02:<port id>. */
bool frame_port(const std::uint8_t *f, std::uint64_t *port) noexcept
{
    if (f[0] != 0x02)
        return false;
    std::uint64_t id = 0;
    for (int i = 1; i < 6; i++)
        id = id << 8 | f[i];
    *port = id;
    return true;
}

/** Send a RAW_PACKET WQE: one frame, or TSO segments. @return false when the wire is full. */
bool send_raw(mport &p, mqp &q, swqe &w)
{
    static thread_local std::vector<std::uint8_t> msg, fr;
    msg.resize(w.total);
    gather(w, 0, static_cast<std::uint32_t>(w.total), msg.data());
    std::uint64_t dport;
    if (msg.size() < 14 || !frame_port(msg.data(), &dport))
        return true; // no such station: the frame leaves the port and is lost
    auto emit = [&](std::vector<std::uint8_t> &f) {
        if (w.cs_flags & (MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM))
            fix_checksums(f.data(), f.size());
        wire_pkt h{};
        h.opcode = raw_frame;
        h.sqpn = q.qpn;
        h.len = static_cast<std::uint16_t>(f.size());
        return send_pkt(p, dport, h, f.data());
    };
    if (w.opcode != MLX5_OPCODE_TSO) {
        if (w.sent)
            return true;
        if (!emit(msg))
            return false;
        w.sent = 1;
        return true;
    }
    std::size_t hs = w.hdr.size();
    std::size_t payload = msg.size() - hs;
    std::size_t nseg = payload ? (payload + w.mss - 1) / w.mss : 1;
    std::size_t l2 = 14, ihl = hs > 14 ? (msg[14] & 0xf) * 4u : 0;
    for (std::size_t s = w.sent; s < nseg; s++) {
        std::size_t off = s * w.mss, n = std::min<std::size_t>(w.mss, payload - off);
        fr.assign(msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(hs));
        fr.insert(fr.end(), msg.begin() + static_cast<std::ptrdiff_t>(hs + off),
                  msg.begin() + static_cast<std::ptrdiff_t>(hs + off + n));
        if (hs >= l2 + 20 && fr[12] == 0x08 && fr[13] == 0x00) {
            std::uint8_t *ip = fr.data() + l2;
            std::size_t tot = hs - l2 + n;
            ip[2] = static_cast<std::uint8_t>(tot >> 8);
            ip[3] = static_cast<std::uint8_t>(tot);
            std::uint16_t id = static_cast<std::uint16_t>((ip[4] << 8 | ip[5]) + s);
            ip[4] = static_cast<std::uint8_t>(id >> 8);
            ip[5] = static_cast<std::uint8_t>(id);
            if (ip[9] == 6 && hs >= l2 + ihl + 20) {
                std::uint8_t *tcp = ip + ihl;
                std::uint32_t seq = static_cast<std::uint32_t>(tcp[4] << 24 | tcp[5] << 16 | tcp[6] << 8 | tcp[7]);
                seq += static_cast<std::uint32_t>(off);
                tcp[4] = static_cast<std::uint8_t>(seq >> 24);
                tcp[5] = static_cast<std::uint8_t>(seq >> 16);
                tcp[6] = static_cast<std::uint8_t>(seq >> 8);
                tcp[7] = static_cast<std::uint8_t>(seq);
                if (s + 1 < nseg)
                    tcp[13] &= static_cast<std::uint8_t>(~0x09); // FIN and PSH only on the last segment
            }
        }
        if (!emit(fr))
            return false;
        w.sent = static_cast<std::uint32_t>(s + 1);
    }
    return true;
}

/** Rewind RC sending to @p psn (go-back-N): packets from @p psn on go again. */
void rewind(mqp &q, std::uint32_t psn)
{
    for (swqe &w : q.out) {
        if (w.done || !w.npkts)
            continue;
        std::uint32_t last = psn_add(w.first_psn, w.npkts - 1);
        if (psn_lt(last, psn))
            continue; // wholly before
        if (is_read_like(w.opcode) || psn_le(psn, w.first_psn)) {
            w.sent = 0; // a read is asked for again whole
            w.acked = 0;
        } else {
            w.sent = std::min(w.sent, (psn - w.first_psn) & psn_mask);
        }
    }
}

/** Complete the RC WQEs wholly acknowledged by PSN @p psn. */
void ack_upto(mport &p, mqp &q, std::uint32_t psn)
{
    bool progress = false;
    for (swqe &w : q.out) {
        if (w.done)
            continue;
        if (!w.npkts || w.sent < w.npkts)
            break;
        if (is_read_like(w.opcode) || is_local(w.opcode))
            break; // reads end with their responses; an ACK beyond them means those were lost
        if (!psn_le(psn_add(w.first_psn, w.npkts - 1), psn))
            break;
        w.done = true;
        progress = true;
    }
    if (progress) {
        q.last_progress = now_ns();
        q.retries = q.retry_cnt;
        q.rnr_tries = q.rnr_retry;
    }
    (void)p;
}

swqe *wqe_of_psn(mqp &q, std::uint32_t psn)
{
    for (swqe &w : q.out)
        if (!w.done && w.npkts && psn_le(w.first_psn, psn) && psn_lt(psn, psn_add(w.first_psn, w.npkts)))
            return &w;
    return nullptr;
}

void on_response(mport &p, mqp &q, const wire_pkt &h, const std::uint8_t *pl)
{
    if (q.type != vq::qp_type::rc || q.state != vq::qp_state::rts)
        return;
    if (h.opcode == rc_ack) {
        std::uint8_t synd = static_cast<std::uint8_t>(h.aeth >> 24);
        if (synd == aeth_ack) {
            ack_upto(p, q, h.psn);
            return;
        }
        // A NAK names the PSN it refers to: everything before it is acknowledged.
        ack_upto(p, q, psn_add(h.psn, psn_mask));
        swqe *w = wqe_of_psn(q, h.psn);
        if ((synd & 0xe0) == aeth_rnr) {
            if (!w)
                return;
            if (q.rnr_retry != 7) {
                if (q.rnr_tries == 0) {
                    fail_wqe(p, q, *w, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR, vs_rnr);
                    return;
                }
                q.rnr_tries--;
            }
            q.rnr_until = now_ns() + static_cast<std::uint64_t>(rnr_us[synd & 0x1f]) * 1000;
            q.last_progress = q.rnr_until;
            rewind(q, h.psn);
            p.st.retransmits++;
            return;
        }
        if (synd == aeth_nak_seq) {
            rewind(q, h.psn);
            p.st.retransmits++;
            q.last_progress = now_ns();
            return;
        }
        if (!w)
            return;
        if (synd == aeth_nak_inv)
            fail_wqe(p, q, *w, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, vs_remote_inval);
        else if (synd == aeth_nak_access)
            fail_wqe(p, q, *w, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, vs_remote_access);
        else
            fail_wqe(p, q, *w, MLX5_CQE_SYNDROME_REMOTE_OP_ERR, vs_remote_op);
        return;
    }
    swqe *w = wqe_of_psn(q, h.psn);
    if (!w || !is_read_like(w->opcode))
        return;
    // A response implicitly acknowledges everything before its request.
    ack_upto(p, q, psn_add(w->first_psn, psn_mask));
    if (h.opcode == rc_atomic_ack) {
        std::uint64_t orig = h.swap_add;
        scatter(w->sg, 0, reinterpret_cast<const std::uint8_t *>(&orig), 8);
        w->done = true;
    } else {
        std::uint32_t k = (h.psn - w->first_psn) & psn_mask;
        if (k != w->acked)
            return; // a duplicate, or a gap (the timeout resends the request)
        scatter(w->sg, static_cast<std::uint64_t>(k) * q.mtu, pl, h.len);
        w->acked++;
        if (w->acked == w->npkts)
            w->done = true;
    }
    q.last_progress = now_ns();
    q.retries = q.retry_cnt;
}

/* ---------------- Responder ---------------- */

/** The receive WQE's buffers at device index @p i (QP RQ or SRQ). */
void rq_sges(const mqp &q, const std::uint8_t *wqe, std::uint32_t max, std::vector<mseg> &out)
{
    out.clear();
    for (std::uint32_t i = 0; i < max; i++) {
        mlx5_wqe_data_seg d;
        std::memcpy(&d, wqe + i * 16, 16);
        if (be32toh(d.lkey) == MLX5_INVALID_LKEY)
            break;
        out.push_back({be64toh(d.addr), be32toh(d.byte_count), be32toh(d.lkey)});
    }
    (void)q;
}

/** Take the next receive WQE of @p q. @return false when none is posted. */
bool take_rwqe(mport &p, mqp &q, std::vector<mseg> &sg, std::uint32_t *idx)
{
    if (msrq *s = q.srq) {
        auto posted = static_cast<std::uint16_t>(be32toh(dbrec_load(&s->dbrec[0])) & 0xffff);
        if (posted == s->consumed)
            return false;
        std::uint32_t i = s->pos & (s->cnt - 1);
        const std::uint8_t *w = s->buf + static_cast<std::size_t>(i) * s->stride;
        mlx5_wqe_srq_next_seg nx;
        std::memcpy(&nx, w, sizeof nx);
        rq_sges(q, w + 16, s->max_sge, sg);
        trace(p, tr_rwqe, s->srqn, i, w, s->stride);
        s->pos = be16toh(nx.next_wqe_index);
        s->consumed++;
        *idx = i;
        return true;
    }
    auto posted = static_cast<std::uint16_t>(be32toh(dbrec_load(&q.dbrec[MLX5_RCV_DBR])) & 0xffff);
    if (posted == q.rq_ci || !q.rq_cnt)
        return false;
    std::uint32_t i = q.rq_ci & (q.rq_cnt - 1);
    const std::uint8_t *w = q.rq + static_cast<std::size_t>(i) * q.rq_stride;
    rq_sges(q, w, q.rq_stride / 16, sg);
    trace(p, tr_rwqe, q.qpn, q.rq_ci, w, q.rq_stride);
    *idx = q.rq_ci;
    q.rq_ci++;
    return true;
}

/** Responder CQE for a completed receive. */
void cqe_resp(mport &p, mqp &q, std::uint8_t op, std::uint32_t idx, std::uint32_t bytes, std::uint32_t imm,
              const wire_pkt &h, bool grh, const std::uint8_t *scat, std::uint8_t csum_bits, bool ipv4)
{
    std::uint8_t b[64] = {};
    auto *c = reinterpret_cast<mlx5_cqe64 *>(b);
    std::uint8_t own = static_cast<std::uint8_t>(op << 4);
    if (scat) {
        std::memcpy(b, scat, bytes); // the data is the CQE's first 32 bytes
        own |= MLX5_INLINE_SCATTER_32;
    } else {
        c->flags_rqpn = be32((grh ? 1u << 28 : 0u) | (h.sqpn & 0xffffff));
        c->hds_ip_ext = csum_bits;
        c->l4_hdr_type_etc = static_cast<std::uint8_t>(ipv4 ? MLX5_CQE_L3_HDR_TYPE_IPV4 << 2 : 0);
    }
    if (h.flags & pf_solicited)
        own |= 2;
    c->imm_inval_pkey = imm;
    c->byte_cnt = be32(bytes);
    c->sop_drop_qpn = be32(q.qpn);
    c->wqe_counter = be16(static_cast<std::uint16_t>(idx));
    if (q.srq)
        c->srqn_uidx = be32(q.srq->srqn);
    c->op_own = own;
    write_cqe(p, *q.rcq, b);
}

void resp_error(mport &p, mqp &q, std::uint32_t idx, std::uint8_t synd, std::uint8_t vs)
{
    cqe_err(p, q, *q.rcq, false, 0, static_cast<std::uint16_t>(idx), synd, vs);
    enter_error(p, q);
}

/** Place a send's payload; on the last packet complete the receive. */
void rx_send(mport &p, mqp &q, const wire_pkt &h, const std::uint8_t *pl, bool first, bool last)
{
    const bool rc = q.type == vq::qp_type::rc;
    if (first) {
        q.rx = rx_msg{};
        if (!take_rwqe(p, q, q.rx.sg, &q.rx.rq_idx)) {
            if (rc)
                send_ack(p, q, h.psn, static_cast<std::uint8_t>(aeth_rnr | (q.min_rnr_timer & 0x1f)));
            return; // RC: RNR NAK (the PSN is not consumed); UC: the message is dropped
        }
        q.rx.active = true;
        q.rx.have_wqe = true;
    }
    if (!q.rx.active)
        return;
    if (q.rx.offset + h.len > sg_len(q.rx.sg)) {
        q.rx.active = false;
        if (rc)
            send_ack(p, q, h.psn, aeth_nak_inv);
        resp_error(p, q, q.rx.rq_idx, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, vs_recv_too_short);
        return;
    }
    if (check_sg(p, q.rx.sg, q.pd, true)) {
        q.rx.active = false;
        if (rc)
            send_ack(p, q, h.psn, aeth_nak_op);
        resp_error(p, q, q.rx.rq_idx, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, vs_recv_bad_lkey);
        return;
    }
    std::uint64_t total = q.rx.offset + h.len;
    bool small = first && last && total <= scatter_cqe_max && q.type != vq::qp_type::ud && q.rcq->size == 64;
    if (!small) {
        [[maybe_unused]] receive_dma_scope dma;
        scatter(q.rx.sg, q.rx.offset, pl, h.len);
    }
    q.rx.offset = total;
    if (rc)
        q.epsn = psn_add(h.psn, 1);
    if (!last)
        return;
    std::uint8_t op = MLX5_CQE_RESP_SEND;
    std::uint32_t imm = 0;
    std::uint8_t o = h.opcode & 0x1f;
    if (o == rc_send_last_imm || o == rc_send_only_imm) {
        op = MLX5_CQE_RESP_SEND_IMM;
        imm = h.imm;
    } else if (o == rc_send_last_inv || o == rc_send_only_inv) {
        std::uint32_t key = be32toh(h.imm);
        mr_obj *m = find_key(p, key);
        if (!m || !m->window || !m->bound || m->pd != q.pd) {
            q.rx.active = false;
            if (rc)
                send_ack(p, q, h.psn, aeth_nak_inv);
            resp_error(p, q, q.rx.rq_idx, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, vs_recv_inval);
            return;
        }
        if (mr_obj *r = find_key(p, m->parent))
            r->windows--;
        m->bound = false;
        op = MLX5_CQE_RESP_SEND_INV;
        imm = be32(key);
    }
    q.rx.active = false;
    q.msn++;
    if (rc)
        send_ack(p, q, h.psn, aeth_ack);
    cqe_resp(p, q, op, q.rx.rq_idx, static_cast<std::uint32_t>(total), imm, h, false, small ? pl : nullptr, 0,
             false);
}

void rx_write(mport &p, mqp &q, const wire_pkt &h, const std::uint8_t *pl, bool first, bool last)
{
    const bool rc = q.type == vq::qp_type::rc;
    if (first) {
        q.rx = rx_msg{};
        if (!remote_ok(p, q, h.rkey, h.raddr, h.dmalen, vq::ACCESS_REMOTE_WRITE)) {
            if (rc) {
                send_ack(p, q, h.psn, aeth_nak_access);
                enter_error(p, q); // a class C responder error: this QP goes to ERR too
            }
            return;
        }
        q.rx.active = true;
        q.rx.is_write = true;
        q.rx.raddr = h.raddr;
        q.rx.wlen = h.dmalen;
        q.rx.total = h.dmalen;
    }
    if (!q.rx.active || !q.rx.is_write)
        return;
    if (h.len > q.rx.wlen) {
        q.rx.active = false;
        if (rc) {
            send_ack(p, q, h.psn, aeth_nak_inv);
            enter_error(p, q);
        }
        return;
    }
    std::uint8_t o = h.opcode & 0x1f;
    bool imm = o == rc_write_last_imm || o == rc_write_only_imm;
    std::uint32_t idx = 0;
    std::vector<mseg> sg;
    if (last && imm && !take_rwqe(p, q, sg, &idx)) {
        if (rc)
            send_ack(p, q, h.psn, static_cast<std::uint8_t>(aeth_rnr | (q.min_rnr_timer & 0x1f)));
        return; // nothing written: the retransmission writes it
    }
    if (h.len) {
        [[maybe_unused]] remote_dma_scope dma;
        std::memcpy(reinterpret_cast<void *>(q.rx.raddr), pl, h.len);
    }
    q.rx.raddr += h.len;
    q.rx.wlen -= h.len;
    if (rc)
        q.epsn = psn_add(h.psn, 1);
    if (!last)
        return;
    q.rx.active = false;
    q.msn++;
    if (rc)
        send_ack(p, q, h.psn, aeth_ack);
    if (imm) // byte_cnt: the bytes the write placed
        cqe_resp(p, q, MLX5_CQE_RESP_WR_IMM, idx, static_cast<std::uint32_t>(q.rx.total), h.imm, h, false,
                 nullptr, 0, false);
}

void rx_read(mport &p, mqp &q, const wire_pkt &h)
{
    if (!remote_ok(p, q, h.rkey, h.raddr, h.dmalen, vq::ACCESS_REMOTE_READ)) {
        send_ack(p, q, h.psn, aeth_nak_access);
        enter_error(p, q);
        return;
    }
    std::uint32_t n = h.dmalen ? (h.dmalen + q.mtu - 1) / q.mtu : 1;
    for (std::uint32_t k = 0; k < n; k++) {
        wire_pkt r{};
        r.dqpn = q.dqpn;
        r.sqpn = q.qpn;
        r.psn = psn_add(h.psn, k);
        r.opcode = n == 1 ? rc_read_resp_only : k == 0 ? rc_read_resp_first : k + 1 == n ? rc_read_resp_last
                                                                                       : rc_read_resp_middle;
        std::uint64_t off = static_cast<std::uint64_t>(k) * q.mtu;
        r.len = static_cast<std::uint16_t>(std::min<std::uint64_t>(q.mtu, h.dmalen - off));
        if (h.dmalen == 0)
            r.len = 0;
        r.aeth = q.msn & 0xffffff;
        // A full wire loses the rest of the responses; the requester's
        // timeout asks again (a duplicate read request is answered anew).
        bool sent;
        {
            [[maybe_unused]] remote_dma_scope dma;
            sent = send_pkt(p, q.dport, r, reinterpret_cast<const std::uint8_t *>(h.raddr + off));
        }
        if (!sent)
            break;
    }
    q.epsn = psn_add(h.psn, n);
    q.msn++;
}

void rx_atomic(mport &p, mqp &q, const wire_pkt &h, bool dup)
{
    std::uint64_t orig = 0;
    if (dup) {
        bool found = false;
        for (auto &a : q.atomics)
            if (a.psn == h.psn) {
                orig = a.orig;
                found = true;
            }
        if (!found)
            return;
    } else {
        if ((h.raddr & 7) || !remote_ok(p, q, h.rkey, h.raddr, 8, vq::ACCESS_REMOTE_ATOMIC)) {
            send_ack(p, q, h.psn, (h.raddr & 7) ? aeth_nak_inv : aeth_nak_access);
            enter_error(p, q);
            return;
        }
        auto *word = reinterpret_cast<std::uint64_t *>(h.raddr);
        if ([[maybe_unused]] remote_dma_scope dma; h.opcode == rc_cas) {
            std::uint64_t expect = h.compare;
            __atomic_compare_exchange_n(word, &expect, h.swap_add, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            orig = expect;
        } else {
            orig = __atomic_fetch_add(word, h.swap_add, __ATOMIC_SEQ_CST);
        }
        q.atomics.push_back({h.psn, orig});
        if (q.atomics.size() > 16)
            q.atomics.pop_front();
        q.epsn = psn_add(h.psn, 1);
        q.msn++;
    }
    wire_pkt r{};
    r.opcode = rc_atomic_ack;
    r.dqpn = q.dqpn;
    r.sqpn = q.qpn;
    r.psn = h.psn;
    r.aeth = q.msn & 0xffffff;
    r.swap_add = orig;
    send_pkt(p, q.dport, r, nullptr);
}

void rx_ud(mport &p, mqp &q, const wire_pkt &h, const std::uint8_t *pl)
{
    if (h.qkey != q.qkey)
        return; // Q_Key mismatch: silently dropped
    std::vector<mseg> sg;
    std::uint32_t idx;
    if (!take_rwqe(p, q, sg, &idx))
        return; // no receive: dropped
    std::uint32_t total = 40u + h.len;
    if (total > sg_len(sg)) {
        cqe_err(p, q, *q.rcq, false, 0, static_cast<std::uint16_t>(idx), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
                vs_recv_too_short);
        return; // the UD QP stays up
    }
    if (check_sg(p, sg, q.pd, true)) {
        cqe_err(p, q, *q.rcq, false, 0, static_cast<std::uint16_t>(idx), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
                vs_recv_bad_lkey);
        return;
    }
    // The 40-byte GRH (IBA 8.3): version 6, payload length, next header 0x1b, hop limit, SGID, DGID.
    std::uint8_t grh[40] = {};
    grh[0] = 0x60;
    std::uint16_t plen = be16(static_cast<std::uint16_t>(h.len + 12 + 8 + 4));
    std::memcpy(grh + 4, &plen, 2);
    grh[6] = 0x1b;
    grh[7] = 64;
    std::uint8_t a[20];
    port_address(h.src_port, a);
    std::memcpy(grh + 8, a, 16);
    port_address(p.port_id, a);
    std::memcpy(grh + 24, a, 16);
    {
        [[maybe_unused]] receive_dma_scope dma;
        scatter(sg, 0, grh, 40);
        scatter(sg, 40, pl, h.len);
    }
    bool imm = h.opcode == ud_send_only_imm;
    cqe_resp(p, q, imm ? MLX5_CQE_RESP_SEND_IMM : MLX5_CQE_RESP_SEND, idx, total, imm ? h.imm : 0, h, true,
             nullptr, 0, false);
}

void rx_raw(mport &p, const wire_pkt &h, const std::uint8_t *pl)
{
    for (auto &kv : p.qps) {
        mqp &q = *kv.second;
        if (q.type != vq::qp_type::raw_packet ||
            (q.state != vq::qp_state::rtr && q.state != vq::qp_state::rts))
            continue;
        std::vector<mseg> sg;
        std::uint32_t idx;
        if (!take_rwqe(p, q, sg, &idx))
            continue;
        if (h.len > sg_len(sg)) {
            cqe_err(p, q, *q.rcq, false, 0, static_cast<std::uint16_t>(idx), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
                    vs_recv_too_short);
            continue;
        }
        if (check_sg(p, sg, q.pd, true)) {
            cqe_err(p, q, *q.rcq, false, 0, static_cast<std::uint16_t>(idx), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
                    vs_recv_bad_lkey);
            continue;
        }
        {
            [[maybe_unused]] receive_dma_scope dma;
            scatter(sg, 0, pl, h.len);
        }
        bool v4, l3, l4;
        rx_csum(pl, h.len, &v4, &l3, &l4);
        std::uint8_t bits = static_cast<std::uint8_t>((l3 ? MLX5_CQE_L3_OK : 0) | (l4 ? MLX5_CQE_L4_OK : 0));
        cqe_resp(p, q, MLX5_CQE_RESP_SEND, idx, h.len, 0, h, false, nullptr, bits, v4);
    }
}

/** An RC/UC request packet for responder QP @p q. */
void rx_request(mport &p, mqp &q, const wire_pkt &h, const std::uint8_t *pl)
{
    const bool rc = q.type == vq::qp_type::rc;
    if (q.state != vq::qp_state::rtr && q.state != vq::qp_state::rts)
        return;
    if (h.sqpn != q.dqpn || h.src_port != q.dport)
        return; // not from the connected peer
    std::uint8_t o = h.opcode & 0x1f;
    bool first = o == rc_send_first || o == rc_send_only || o == rc_send_only_imm || o == rc_send_only_inv ||
                 o == rc_write_first || o == rc_write_only || o == rc_write_only_imm;
    bool last = o == rc_send_last || o == rc_send_last_imm || o == rc_send_only || o == rc_send_only_imm ||
                o == rc_send_last_inv || o == rc_send_only_inv || o == rc_write_last || o == rc_write_last_imm ||
                o == rc_write_only || o == rc_write_only_imm;
    if (rc) {
        if (h.psn != q.epsn) {
            if (psn_lt(h.psn, q.epsn)) { // duplicate: answer again, execute nothing
                if (h.opcode == rc_read_req) {
                    std::uint32_t save = q.epsn, msn = q.msn;
                    rx_read(p, q, h);
                    q.epsn = save;
                    q.msn = msn;
                } else if (h.opcode == rc_cas || h.opcode == rc_faa) {
                    rx_atomic(p, q, h, true);
                } else {
                    send_ack(p, q, psn_add(q.epsn, psn_mask), aeth_ack);
                }
            } else if (!q.nak_sent) { // a gap: ask for the missing PSN once
                send_ack(p, q, q.epsn, aeth_nak_seq);
                q.nak_sent = true;
            }
            return;
        }
        q.nak_sent = false;
    } else if (h.psn != q.epsn) {
        // UC: a gap loses the message in progress; a new first packet starts over.
        q.rx.active = false;
        if (!first)
            return;
    }
    if (!rc)
        q.epsn = psn_add(h.psn, 1);
    if (o <= rc_send_only_imm || o == rc_send_last_inv || o == rc_send_only_inv)
        rx_send(p, q, h, pl, first, last);
    else if (o >= rc_write_first && o <= rc_write_only_imm)
        rx_write(p, q, h, pl, first, last);
    else if (rc && h.opcode == rc_read_req)
        rx_read(p, q, h);
    else if (rc && (h.opcode == rc_cas || h.opcode == rc_faa))
        rx_atomic(p, q, h, false);
    else if (rc) {
        send_ack(p, q, h.psn, aeth_nak_inv);
        enter_error(p, q);
    }
}

void dispatch(mport &p, const wire_pkt &h, const std::uint8_t *pl)
{
    p.st.pkts_recv++;
    if (h.opcode == raw_frame) {
        rx_raw(p, h, pl);
        return;
    }
    auto it = p.qps.find(h.dqpn);
    if (it == p.qps.end())
        return; // no such QP: dropped (an RC requester times out)
    mqp &q = *it->second;
    if (h.opcode == rc_ack || h.opcode == rc_atomic_ack ||
        (h.opcode >= rc_read_resp_first && h.opcode <= rc_read_resp_only)) {
        if (h.sqpn == q.dqpn && h.src_port == q.dport)
            on_response(p, q, h, pl);
        return;
    }
    if (h.opcode == ud_send_only || h.opcode == ud_send_only_imm) {
        if (q.type == vq::qp_type::ud && (q.state == vq::qp_state::rtr || q.state == vq::qp_state::rts))
            rx_ud(p, q, h, pl);
        return;
    }
    std::uint8_t uo = static_cast<std::uint8_t>(h.opcode - uc_base);
    if ((q.type == vq::qp_type::rc && h.opcode < uc_base) ||
        (q.type == vq::qp_type::uc && h.opcode >= uc_base &&
         (uo < 0x0c || uo == rc_send_last_inv || uo == rc_send_only_inv)))
        rx_request(p, q, h, pl);
}

} // namespace

/* ---------------- Entry points ---------------- */

void write_cqe(mport &p, mcq &c, const std::uint8_t cqe[64])
{
    if (c.overrun)
        return;
    std::uint32_t ci = be32toh(dbrec_load(&c.dbrec[cq_set_ci])) & 0xffffff;
    if (((c.pi - ci) & 0xffffff) >= c.cnt) {
        c.overrun = true; // the device stops the CQ: a driver that never lets this happen is correct
        violation(p, "CQ %u overrun: producer %u, consumer %u, %u entries", c.cqn, c.pi, ci, c.cnt);
        return;
    }
    std::uint8_t *dst = c.buf + static_cast<std::size_t>(c.pi & (c.cnt - 1)) * c.size + (c.size - 64);
    std::memcpy(dst, cqe, 63);
    std::uint8_t own = static_cast<std::uint8_t>((cqe[63] & ~MLX5_CQE_OWNER_MASK) | ((c.pi >> c.log) & 1));
    // The trace's copy is made before the owner byte is stored: from then on
    // the slot is software's, which marks it invalid once consumed.
    std::uint8_t rec[64];
    std::memcpy(rec, dst, 63);
    rec[63] = own;
    // Every other byte of the CQE before the owner byte that hands it to software.
    __atomic_store_n(dst + 63, own, __ATOMIC_RELEASE);
    trace(p, tr_cqe, c.cqn, c.pi, rec, 64);
    c.pi++;
    p.st.cqes++;
}

void fail_wqe(mport &p, mqp &q, swqe &w, std::uint8_t synd, std::uint8_t vsynd)
{
    (void)p;
    (void)q;
    w.done = true;
    w.err = synd;
    w.vsynd = vsynd;
}

void enter_error(mport &p, mqp &q)
{
    q.state = vq::qp_state::err;
    q.rx.active = false;
    for (swqe &w : q.out)
        if (!w.done) { // what already executed keeps its own completion
            w.done = true;
            w.err = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
            w.vsynd = vs_flush;
        }
    (void)p;
}

int flush_rq(mport &p, mqp &q)
{
    if (q.srq || !q.rq_cnt)
        return 0;
    int n = 0;
    auto posted = static_cast<std::uint16_t>(be32toh(dbrec_load(&q.dbrec[MLX5_RCV_DBR])) & 0xffff);
    while (q.rq_ci != posted) {
        cqe_err(p, q, *q.rcq, false, 0, q.rq_ci, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, vs_flush);
        q.rq_ci++;
        n++;
    }
    return n;
}

int retire(mport &p, mqp &q)
{
    int n = 0;
    while (!q.out.empty() && q.out.front().done) {
        swqe w = std::move(q.out.front());
        q.out.pop_front();
        if (p.opt.strict) { // nothing of a WQE may change between its doorbell and its completion
            for (std::uint32_t i = 0; i < w.bbs; i++) {
                std::size_t off = static_cast<std::size_t>((w.idx + i) & (q.sq_cnt - 1)) * wqe_bb;
                if (std::memcmp(q.snap.data() + off, q.sq + off, wqe_bb) != 0) {
                    violation(p, "QP 0x%x: WQE at %u modified before its completion", q.qpn, w.idx);
                    break;
                }
            }
        }
        if (w.err) {
            cqe_err(p, q, *q.scq, true, w.opcode, w.idx, w.err, w.vsynd);
            if (w.err != MLX5_CQE_SYNDROME_WR_FLUSH_ERR && q.state != vq::qp_state::err)
                enter_error(p, q);
        } else if ((w.fm_ce_se & 0x0c) == ce_always || (w.fm_ce_se & 0x0c) == 0x0c) {
            cqe_req(p, q, w);
        }
        n++;
    }
    return n;
}

/** UC/UD/RAW: a WQE is complete when the port it went to has taken its last
 *  packet (the data is then in the destination's memory), or after a second
 *  when that port does not read its wire. */
void wire_done(mport &p, swqe &w, std::uint64_t now)
{
    if (!w.wire_port) {
        w.done = true;
        return;
    }
    if (!w.wire_deadline)
        w.wire_deadline = now + 1'000'000'000;
    peer *pe = get_peer(p, w.wire_port);
    if (!pe || pe->lane < 0 || now > w.wire_deadline) {
        w.done = true;
        return;
    }
    char *base = pe->base;
    auto *lc = reinterpret_cast<lane_ctrl *>(base + pe->hdr->lanes_off) + pe->lane;
    if (static_cast<std::int32_t>(lc->consumed.load(std::memory_order_acquire) - w.wire_pos) >= 0)
        w.done = true;
}

int progress_requester(mport &p, mqp &q)
{
    int work = retire(p, q);
    if (q.state != vq::qp_state::rts || q.out.empty())
        return work;
    std::uint64_t now = now_ns();
    const bool rc = q.type == vq::qp_type::rc;
    if (rc && now < q.rnr_until)
        return work;
    std::uint32_t inflight = 0;
    bool head = true;
    for (swqe &w : q.out) {
        if (w.done) {
            continue;
        }
        if (w.err)
            break;
        if (is_local(w.opcode) || (w.fm_ce_se & fence_bits)) {
            if (!head)
                break; // a fence (and a UMR) waits for everything before it
            if (is_local(w.opcode)) {
                if (w.opcode == MLX5_OPCODE_UMR)
                    if (std::uint8_t e = run_umr(p, q, w)) {
                        fail_wqe(p, q, w, e, w.vsynd);
                        break;
                    }
                w.done = true;
                work++;
                continue;
            }
        }
        head = false;
        if (q.type == vq::qp_type::raw_packet) {
            if (!w.npkts) { // npkts marks "every frame sent" (w.sent counts TSO segments)
                if (!send_raw(p, q, w))
                    break;
                w.npkts = 1;
                work++;
            }
            wire_done(p, w, now);
            continue;
        }
        if (!w.npkts) {
            w.npkts = npkts(q, w);
            w.first_psn = q.next_psn;
            q.next_psn = psn_add(q.next_psn, w.npkts);
            if (rc && q.out.front().idx == w.idx)
                q.last_progress = now;
        }
        bool full = false;
        while (w.sent < w.npkts && (!rc || inflight < window)) {
            if (!send_packet(p, q, w, is_read_like(w.opcode) ? 0 : w.sent)) {
                full = true; // the wire is full: try again later (the timeout still runs)
                break;
            }
            w.sent = is_read_like(w.opcode) ? w.npkts : w.sent + 1;
            inflight++;
            work++;
        }
        if (full || w.sent < w.npkts)
            break;
        inflight += w.npkts;
        if (!rc)
            wire_done(p, w, now);
        if (rc && inflight >= window)
            break;
    }
    if (rc && q.timeout_ns && !q.out.empty() && now > q.last_progress + q.timeout_ns) {
        swqe *oldest = nullptr;
        for (swqe &w : q.out)
            if (!w.done && w.npkts) {
                oldest = &w;
                break;
            }
        if (oldest) {
            if (q.retries == 0) {
                fail_wqe(p, q, *oldest, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, vs_retry);
            } else {
                q.retries--;
                rewind(q, oldest->first_psn);
                p.st.retransmits++;
            }
            q.last_progress = now;
            work++;
        }
    }
    return work + retire(p, q);
}

int receive_packets(mport &p)
{
    static thread_local std::uint8_t pl[max_mtu + 64];
    int n = 0;
    lane_ctrl *lanes = p.lanes();
    for (std::uint32_t l = 0; l < num_lanes; l++) {
        lane_ctrl &lc = lanes[l];
        if (!lc.owner.load(std::memory_order_acquire))
            continue;
        std::uint32_t c = lc.consumed.load(std::memory_order_relaxed);
        for (int k = 0; k < 32; k++) {
            wire_pkt *s = p.slot(l, c);
            if (s->seq.load(std::memory_order_acquire) != c + 1)
                break;
            wire_pkt h;
            std::memcpy(static_cast<void *>(&h), s, sizeof h);
            std::uint32_t len = h.len <= max_mtu + 64 ? h.len : 0; // peer-written: bounded
            h.len = static_cast<std::uint16_t>(len);
            std::memcpy(pl, s + 1, len);
            c++;
            n++;
            if (pkt_crc(h, pl) != h.icrc)
                p.st.pkts_dropped++; // bad ICRC: dropped, as the hardware does
            else
                dispatch(p, h, pl);
            // The packet is copied out and placed: the sender may reuse the
            // slot, and a UC/UD sender may complete the request.
            lc.consumed.store(c, std::memory_order_release);
        }
    }
    return n;
}

void reset_qp(mport &p, mqp &q)
{
    q.out.clear();
    q.sq_ci = q.db_end = 0;
    q.rq_ci = 0;
    q.next_psn = q.epsn = q.msn = 0;
    q.rx = rx_msg{};
    q.atomics.clear();
    q.nak_sent = false;
    q.rnr_until = 0;
    for (unsigned h = 0; h < 2; h++) {
        std::uint8_t *half = q.uar + uar_bf_offset + h * bf_buf_size;
        reg_fill(half, 0, 8);
        reg_fill(half + 8, 0xa5, bf_buf_size - 8);
        q.bf_last[h] = 0;
        q.bf_unverified[h] = false;
    }
    q.last_half = 1;
    (void)p;
}

peer *get_peer(mport &p, std::uint64_t port_id, int *err)
{
    if (err)
        *err = -FI_ENOENT;
    auto it = p.peers.find(port_id);
    if (it != p.peers.end()) {
        peer *pe = it->second.get();
        if (pe->hdr && pe->hdr->closed.load(std::memory_order_acquire))
            return nullptr;
        return pe->hdr ? pe : nullptr;
    }
    auto pe = std::make_unique<peer>();
    pe->port_id = port_id;
    if (port_id == p.port_id) {
        pe->self = true;
        pe->hdr = p.hdr;
        pe->base = static_cast<char *>(p.seg.data());
    } else if (int rc = pe->seg.attach(port_segment_name(port_id)); rc < 0) {
        if (err && rc == -FI_EACCES)
            *err = rc;
    } else {
        auto *h = static_cast<port_hdr *>(pe->seg.data());
        // Peer-written geometry: accept only our own layout, inside the segment.
        std::size_t need = h->qpt_off + (max_qps + 1) * sizeof(qp_pub);
        if (pe->seg.size() >= sizeof(port_hdr) && h->magic == port_magic && h->version == port_version &&
            h->port_id == port_id && h->nlanes == num_lanes && h->lane_slots == lane_slots &&
            h->slot_bytes == slot_bytes && h->lanes_off == p.hdr->lanes_off && h->slots_off == p.hdr->slots_off &&
            h->qpt_off == p.hdr->qpt_off && need <= pe->seg.size()) {
            pe->hdr = h;
            pe->base = static_cast<char *>(pe->seg.data());
        }
        else
            pe->seg.close();
    }
    peer *r = pe.get();
    p.peers[port_id] = std::move(pe);
    if (!r->hdr) {
        p.peers.erase(port_id); // not there (now): look again next time
        return nullptr;
    }
    return r;
}

} // namespace shunt::drv::mlx5::model
