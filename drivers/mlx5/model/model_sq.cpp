/* drivers/mlx5/model: doorbells and the send queue. The device learns of
 * work only from a store to the QP's BlueFlame register pair (the 8-byte
 * doorbell or a BlueFlame copy of the whole WQE); it then fetches WQEs from
 * its WQE counter up to the one the doorbell names and parses each per the
 * PRM. What a ConnectX rejects becomes an error CQE with the syndrome it
 * writes; what it would silently misbehave on (a doorbell before its
 * record, a BlueFlame copy that is not the WQE) is counted as a violation. */
#include <cstring>

#include "model_impl.h"

namespace shunt::drv::mlx5::model {

namespace {

constexpr std::uint8_t poison = 0xa5;

inline std::uint16_t dist(std::uint16_t to, std::uint16_t from) noexcept
{
    return static_cast<std::uint16_t>(to - from);
}

/** Copy @p n bytes of the SQ starting at BB @p bb (wrapping) to @p out. */
void read_sq(const mqp &q, std::uint16_t bb, std::uint8_t *out, std::size_t n) noexcept
{
    std::size_t qbytes = static_cast<std::size_t>(q.sq_cnt) * wqe_bb;
    std::size_t off = static_cast<std::size_t>(bb & (q.sq_cnt - 1)) * wqe_bb;
    std::size_t first = n < qbytes - off ? n : qbytes - off;
    std::memcpy(out, q.sq + off, first);
    if (first < n)
        std::memcpy(out + first, q.sq, n - first);
}

/** A new value in BF half @p h: the doorbell for the WQEs up to the one it
 *  names. @p verifiable: nothing but this doorbell was written to the half
 *  since the model last poisoned it, so bytes past the first 8 that are not
 *  poison are a BlueFlame copy and must equal the WQE. */
void doorbell(mport &p, mqp &q, unsigned h, std::uint64_t v, bool verifiable)
{
    std::uint8_t *half = q.uar + uar_bf_offset + h * bf_buf_size;
    p.st.doorbells++;
    std::uint32_t w0, w1;
    std::memcpy(&w0, &v, 4);
    std::memcpy(&w1, reinterpret_cast<std::uint8_t *>(&v) + 4, 4);
    w0 = be32toh(w0);
    w1 = be32toh(w1);
    auto idx = static_cast<std::uint16_t>((w0 >> 8) & 0xffff);
    std::uint32_t ds = w1 & 0xff;
    // The device fetches at least the WQE the doorbell names (a bad ds is then its error).
    auto end = static_cast<std::uint16_t>(idx + (ds ? (ds + 3) / 4 : 1));
    std::uint8_t kind = 0;
    if (p.opt.strict) {
        std::uint8_t wqe_first[8];
        read_sq(q, idx, wqe_first, 8);
        if (std::memcmp(wqe_first, &v, 8) != 0)
            violation(p, "QP 0x%x: doorbell %016llx is not the first 8 bytes of the WQE at %u", q.qpn,
                      static_cast<unsigned long long>(v), idx);
        auto rec = static_cast<std::uint16_t>(be32toh(dbrec_load(&q.dbrec[MLX5_SND_DBR])) & 0xffff);
        if (dist(rec, q.sq_ci) < dist(end, q.sq_ci))
            violation(p, "QP 0x%x: doorbell for BBs up to %u before the doorbell record (%u)", q.qpn, end, rec);
        // A BlueFlame copy leaves more than 8 bytes in the half (the model
        // poisons what follows them after each doorbell).
        std::uint8_t second[8];
        reg_read(half + 8, second, 8);
        bool bf = false;
        for (unsigned i = 0; i < 8; i++)
            if (second[i] != poison)
                bf = true;
        if (bf && verifiable && !q.bf_unverified[h]) {
            kind = 1;
            p.st.bf_copies++;
            unsigned len = ((ds * octo) + 63) & ~63u;
            if (len > bf_buf_size) {
                violation(p, "QP 0x%x: BlueFlame copy of %u bytes exceeds the %u-byte register", q.qpn, len,
                          bf_buf_size);
                len = bf_buf_size;
            }
            std::uint8_t mem[bf_buf_size];
            read_sq(q, idx, mem, len);
            // The driver's copy may still be in flight: wait (bounded) for it to settle.
            std::uint64_t deadline = now_ns() + 200'000'000;
            bool same = false;
            std::uint8_t now[bf_buf_size];
            while (!(same = (reg_read(half, now, len), std::memcmp(mem, now, len) == 0)) && now_ns() < deadline)
                sched_yield();
            if (!same)
                violation(p, "QP 0x%x: BlueFlame copy of the WQE at %u differs from the WQE in memory", q.qpn,
                          idx);
        }
    }
    q.bf_unverified[h] = false;
    std::uint8_t rec[9];
    std::memcpy(rec, &v, 8);
    rec[8] = kind;
    trace(p, tr_doorbell, q.qpn, idx, rec, sizeof rec);
    if (dist(end, q.sq_ci) <= q.sq_cnt && (q.db_end == q.sq_ci || dist(end, q.sq_ci) > dist(q.db_end, q.sq_ci)))
        q.db_end = end;
    reg_fill(half + 8, poison, bf_buf_size - 8);
    if (load64(half) != v) // the driver wrote this half again meanwhile: its next copy is unverifiable
        q.bf_unverified[h] = true;
}

/** Parse a fetched WQE @p b (ds * 16 bytes) into @p w. @return 0 or a syndrome (w.vsynd set). */
std::uint8_t parse(mport &p, mqp &q, swqe &w, const std::uint8_t *b, std::uint32_t ds)
{
    const std::uint32_t bytes = ds * octo;
    auto bad = [&](std::uint8_t synd, std::uint8_t vs) {
        w.vsynd = vs;
        return synd;
    };
    std::uint32_t imm;
    std::memcpy(&imm, b + 12, 4);
    w.imm = imm;
    w.fm_ce_se = b[11];
    std::uint32_t off = octo;
    const vq::qp_type t = q.type;
    const bool rc = t == vq::qp_type::rc, uc = t == vq::qp_type::uc;
    bool want_scatter = false, no_inline = false, atomic = false;
    switch (w.opcode) {
    case MLX5_OPCODE_NOP:
        return 0;
    case MLX5_OPCODE_SEND:
    case MLX5_OPCODE_SEND_IMM:
        if (t == vq::qp_type::raw_packet && w.opcode == MLX5_OPCODE_SEND_IMM)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_opcode);
        if (t == vq::qp_type::ud) {
            if (bytes < off + 48)
                return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
            std::memcpy(w.av, b + off, 48);
            off += 48;
        }
        break;
    case MLX5_OPCODE_SEND_INVAL:
        if (!rc && !uc)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_opcode);
        break;
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_WRITE_IMM:
    case MLX5_OPCODE_RDMA_READ:
    case MLX5_OPCODE_ATOMIC_CS:
    case MLX5_OPCODE_ATOMIC_FA: {
        bool read_like = w.opcode == MLX5_OPCODE_RDMA_READ || w.opcode == MLX5_OPCODE_ATOMIC_CS ||
                         w.opcode == MLX5_OPCODE_ATOMIC_FA;
        if (!(rc || (uc && !read_like)))
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_opcode);
        if (bytes < off + 16)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
        mlx5_wqe_raddr_seg r;
        std::memcpy(&r, b + off, 16);
        w.raddr = be64toh(r.raddr);
        w.rkey = be32toh(r.rkey);
        off += 16;
        if (w.opcode == MLX5_OPCODE_ATOMIC_CS || w.opcode == MLX5_OPCODE_ATOMIC_FA) {
            if (bytes < off + 32)
                return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
            mlx5_wqe_atomic_seg a;
            std::memcpy(&a, b + off, 16);
            w.swap_add = be64toh(a.swap_add);
            w.compare = be64toh(a.compare);
            off += 16;
            atomic = true;
        }
        want_scatter = read_like;
        no_inline = read_like;
        break;
    }
    case MLX5_OPCODE_UMR: {
        if (!rc && !uc)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_opcode);
        if (bytes < off + 48 + 64)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
        mlx5_wqe_umr_ctrl_seg uc_;
        std::memcpy(&uc_, b + off, sizeof uc_);
        std::uint32_t need = octo + 48 + 64 + (be16toh(uc_.klm_octowords) ? 64u : 0u);
        if (bytes != need)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
        w.inl.assign(b + off, b + bytes); // executed in order, when it reaches the head
        return 0;
    }
    case MLX5_OPCODE_TSO:
        if (t != vq::qp_type::raw_packet)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_opcode);
        break;
    default:
        return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_opcode);
    }
    if (t == vq::qp_type::raw_packet) {
        if (bytes < off + 16)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
        mlx5_wqe_eth_seg e;
        std::memset(&e, 0, sizeof e);
        std::memcpy(&e, b + off, bytes - off < sizeof e ? bytes - off : sizeof e);
        std::uint32_t h = be16toh(e.inline_hdr_sz);
        w.mss = be16toh(e.mss);
        w.cs_flags = e.cs_flags;
        std::uint32_t esz = (14 + h + 15) & ~15u;
        if (off + esz > bytes)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
        if (h < q.eth_min_inline)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_eth);
        if (w.opcode == MLX5_OPCODE_TSO && (w.mss == 0 || h < eth_l2_min_header))
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_eth);
        if (w.opcode != MLX5_OPCODE_TSO && w.mss != 0)
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_eth);
        w.hdr.assign(b + off + 14, b + off + 14 + h);
        off += esz;
        w.total = h;
    }
    // Data: pointer segments and inline segments, exactly filling ds.
    unsigned nseg = 0;
    while (off < bytes) {
        std::uint32_t bc;
        std::memcpy(&bc, b + off, 4);
        bc = be32toh(bc);
        if (bc & MLX5_INLINE_SEG) {
            std::uint32_t len = bc & ~MLX5_INLINE_SEG;
            std::uint32_t n = (4 + len + 15) & ~15u;
            if (no_inline)
                return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
            if (off + n > bytes)
                return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
            if (len + w.inl.size() > q.max_inline)
                return bad(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, vs_inline_too_long);
            if (!w.sg.empty()) // inline data after pointers: keep the order by gathering now
                return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
            w.inl.insert(w.inl.end(), b + off + 4, b + off + 4 + len);
            w.total += len;
            off += n;
        } else {
            mlx5_wqe_data_seg d;
            std::memcpy(&d, b + off, 16);
            std::uint32_t len = be32toh(d.byte_count), lkey = be32toh(d.lkey);
            if (len == 0) // the PRM reads 0 as 2 GiB; no driver means that
                return bad(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, vs_msg_too_long);
            if (lkey == MLX5_INVALID_LKEY)
                return bad(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, vs_bad_lkey);
            w.sg.push_back({be64toh(d.addr), len, lkey});
            w.total += len;
            off += 16;
            if (++nseg > q.max_send_sge)
                return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_ds);
        }
    }
    if (atomic) {
        if (w.sg.size() != 1 || w.sg[0].len != 8 || (w.raddr & 7))
            return bad(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, vs_bad_atomic);
    }
    std::uint64_t limit = t == vq::qp_type::ud ? q.mtu : (1ull << 30);
    if (t == vq::qp_type::raw_packet && w.opcode != MLX5_OPCODE_TSO)
        limit = max_mtu + 64;
    if (w.total > limit)
        return bad(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, vs_msg_too_long);
    if (std::uint8_t v = check_sg(p, w.sg, q.pd, want_scatter))
        return bad(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, v);
    return 0;
}

} // namespace

int process_sq(mport &p, mqp &q)
{
    if (q.state != vq::qp_state::rts && q.state != vq::qp_state::err)
        return 0;
    int work = 0;
    std::uint64_t v[2];
    bool changed[2];
    for (unsigned h = 0; h < 2; h++) {
        v[h] = load64(q.uar + uar_bf_offset + h * bf_buf_size);
        changed[h] = v[h] != q.bf_last[h];
        if (changed[h])
            q.bf_last[h] = v[h];
    }
    // The driver alternates the halves. One new value on the half after the
    // last one seen: nothing else was written there since the model poisoned
    // it. Both new: the model was late, and the older half may hold what a
    // doorbell it never saw left; take them oldest (by WQE index) first.
    if (changed[0] && changed[1]) {
        auto idx_of = [](std::uint64_t x) {
            std::uint32_t w0;
            std::memcpy(&w0, &x, 4);
            return static_cast<std::uint16_t>((be32toh(w0) >> 8) & 0xffff);
        };
        unsigned first = dist(idx_of(v[0]), q.sq_ci) <= dist(idx_of(v[1]), q.sq_ci) ? 0 : 1;
        doorbell(p, q, first, v[first], false);
        doorbell(p, q, first ^ 1, v[first ^ 1], false);
        q.last_half = first ^ 1;
        work += 2;
    } else {
        for (unsigned h = 0; h < 2; h++)
            if (changed[h]) {
                doorbell(p, q, h, v[h], h != q.last_half);
                q.last_half = h;
                work++;
            }
    }
    if (!p.opt.strict) { // lenient: the doorbell record alone is enough
        auto rec = static_cast<std::uint16_t>(be32toh(dbrec_load(&q.dbrec[MLX5_SND_DBR])) & 0xffff);
        if (dist(rec, q.sq_ci) <= q.sq_cnt && dist(rec, q.sq_ci) > dist(q.db_end, q.sq_ci))
            q.db_end = rec;
    }
    std::uint8_t b[1024];
    while (q.sq_ci != q.db_end) {
        std::uint16_t ci = q.sq_ci;
        read_sq(q, ci, b, 16);
        std::uint32_t w0, w1;
        std::memcpy(&w0, b, 4);
        std::memcpy(&w1, b + 4, 4);
        w0 = be32toh(w0);
        w1 = be32toh(w1);
        swqe w;
        w.idx = ci;
        w.opcode = static_cast<std::uint8_t>(w0 & 0xff);
        std::uint32_t ds = w1 & 0xff;
        std::uint8_t synd = 0;
        if (((w0 >> 8) & 0xffff) != ci) {
            synd = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
            w.vsynd = vs_bad_index;
        } else if ((w1 >> 8) != q.qpn) {
            synd = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
            w.vsynd = vs_bad_qpn;
        } else if (ds == 0 || ds > max_wqe_ds || (ds + 3) / 4 > dist(q.db_end, ci)) {
            synd = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
            w.vsynd = vs_bad_ds;
        }
        w.bbs = synd ? 1 : (ds + 3) / 4;
        read_sq(q, ci, b, w.bbs * wqe_bb);
        trace(p, tr_wqe, q.qpn, ci, b, synd ? 16 : ds * octo);
        // Snapshot: the driver must not touch these bytes until their completion.
        for (std::uint32_t i = 0; i < w.bbs; i++)
            std::memcpy(q.snap.data() + static_cast<std::size_t>((ci + i) & (q.sq_cnt - 1)) * wqe_bb,
                        b + i * wqe_bb, wqe_bb);
        q.sq_ci = static_cast<std::uint16_t>(ci + w.bbs);
        p.st.wqes++;
        work++;
        if (q.state == vq::qp_state::err) {
            w.done = true;
            w.err = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
            w.vsynd = vs_flush;
        } else if (!synd) {
            synd = parse(p, q, w, b, ds);
        }
        if (synd) {
            w.done = true;
            w.err = synd;
        }
        q.out.push_back(std::move(w));
    }
    if (work)
        work += retire(p, q);
    return work;
}

} // namespace shunt::drv::mlx5::model
