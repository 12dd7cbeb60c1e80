// vq provider: RMA and atomics.
//
// Two ways, chosen per target region by the key_direct bit of its key (set
// by the target at registration):
// - direct regions (memory peers reach without a system call: shunt_mem
//   buffers on a host-local device, every region on a device with RDMA in
//   hardware) are vq RDMA and atomics: one-sided, no work for the target;
// - regions over private memory of a host-local device would cost the
//   initiator a system call per operation (cross-memory attach), so the
//   operation is a message executed by the target's progress instead: small
//   writes carry their data, small reads come back in the response, large
//   ones are moved by the target with one vq RDMA request between the
//   region and the initiator's buffer (one copy), atomics run on the
//   target's CPU. Every request to a region goes this way, so requests to
//   it stay in order.
//
// Remote-access counters (FI_RMA_EVENT): the target counts what its own
// progress executes once the access is done; a direct access, which the
// target never sees, is followed by a note (w_rma_note) the initiator posts
// on the same QP right after the request, so it arrives after the request's
// data is in place (the QP executes in order), and the target's progress
// turns it into the count. Notes go only to peers that said in their
// connection request or reply that they count (cm_f_rma_event).
#include <atomic>
#include <cstring>

#include "env/errors.h"
#include "fabric/util/cntr.h"
#include "prov.h"

namespace shunt::prov::vqprov {

namespace {

void fail_now(util::ep_core *core, const util::tx_req &r, std::uint64_t cqf, int err)
{
    util::tx_fail(core, r.context, cqf, err, r.len);
}

/** The local vq region of buffer @p i: its descriptor's when it has the
 *  access, else one from the registration cache held by @p t. */
int local_region(prov_ep *e, tx_entry *t, void **desc, std::size_t i, const iovec &v, unsigned need, vq::mr **out)
{
    if (desc && desc[i]) {
        auto *vm = static_cast<vq::mr *>(static_cast<util::mr_obj *>(desc[i])->prov);
        if (vm && (vm->access & need) == need) {
            *out = vm;
            return 0;
        }
    }
    if (int rc = mr_get(e->dom, v.iov_base, v.iov_len, t->mrs[t->nmrs]))
        return rc;
    *out = t->mrs[t->nmrs++].mr;
    return 0;
}

bool completes_at_post(std::uint64_t flags)
{
    return (flags & (FI_INJECT | FI_INJECT_COMPLETE)) && !(flags & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE));
}

util::ep_core *rma_target(prov_ep *e) { return e->scalable ? rx_target(e, 0) : e->core; }

/** Does @p e count remote accesses (opened with FI_RMA_EVENT)? */
inline bool counts_access(const prov_ep *e) { return e->core->caps & FI_RMA_EVENT; }

/** FI_RMA_EVENT: one remote access of kind @p kind (ra_*) to region @p m is
 *  done: the endpoint's remote-write or remote-read counter, and for accesses
 *  that write the region's counter (mr_bind FI_REMOTE_WRITE). */
[[gnu::cold]] void count_region(prov_ep *e, util::mr_obj *m, std::uint32_t kind)
{
    util::ep_core *t = rma_target(e);
    if (!t)
        t = e->core;
    if (kind == ra_write || kind == ra_atomic)
        t->inc_rwrite(t->c_rwrite);
    else
        t->inc_rread(t->c_rread);
    if (m && m->cntr && (kind == ra_write || kind == ra_atomic || kind == ra_fetch))
        util::cntr_inc_for(m->cntr)(m->cntr);
}

/** The same for an access named by a peer (a note) or finished later (a
 *  large target-executed RMA): counted only when the region still covers
 *  the range, so a malformed note counts nothing. */
[[gnu::cold]] void count_access(prov_ep *e, std::uint64_t key, std::uint64_t addr, std::uint64_t len,
                                std::uint32_t kind)
{
    if (!counts_access(e) || kind < ra_write || kind > ra_atomic_read)
        return;
    void *ptr = nullptr;
    util::mr_obj *m = nullptr;
    if (util::mr_verify(e->dom, key, addr, len, 0, &ptr, &m) == 0)
        count_region(e, m, kind);
}

/** Initiator: a direct access to a peer that counts them was posted: tell it. */
[[gnu::cold]] void note_access(prov_ep *e, conn *c, const util::tx_req &r, std::uint64_t len, std::uint32_t kind)
{
    rma_note n{r.rma[0].addr, r.rma[0].key, len, kind, 0};
    ctl_send_own(e, c, imm_wire(w_rma_note, 0, 0), &n, sizeof n);
}

/** vq RDMA into a direct region: the driver copies (memcpy within shared
 *  segments, the device elsewhere); completes on the vq completion. */
ssize_t rma_direct(prov_ep *e, util::ep_core *core, const util::tx_req &r, conn *c, std::uint64_t cqf)
{
    const bool write = r.kind == util::tx_req::write;
    tx_entry *t = new_tx(e, core, r, c, cqf);
    if (!t)
        return -FI_EAGAIN;
    const bool inl = write && r.len <= ((r.flags & FI_INJECT) ? e->dom->lim.rc_inline : e->dom->lim.inline_max);
    vq::sge sg[iov_max];
    std::size_t ns = 0;
    if (!inl) {
        for (std::size_t i = 0; i < r.count; i++) {
            vq::mr *m = nullptr;
            if (int rc = local_region(e, t, r.desc, i, r.iov[i], write ? 0 : vq::ACCESS_LOCAL_WRITE, &m)) {
                tx_put(e, t);
                return rc;
            }
            sg[ns++] = {reinterpret_cast<std::uint64_t>(r.iov[i].iov_base), std::uint32_t(r.iov[i].iov_len), m->lkey};
        }
    }
    const bool at_post = inl && completes_at_post(r.flags);
    vq::qp *q = e->slots[c->slot].qp;
    vq::wr_start(q);
    q->wr_id = at_post ? posted_id(posted_write, origin_of(core)) : tx_id(e, t);
    q->wr_flags = at_post ? 0 : vq::WR_SIGNALED;
    const std::uint32_t rkey = std::uint32_t(r.rma[0].key);
    if (!write)
        vq::wr_rdma_read(q, rkey, r.rma[0].addr);
    else if (r.flags & FI_REMOTE_CQ_DATA)
        vq::wr_rdma_write_imm(q, rkey, r.rma[0].addr, htonl(std::uint32_t(r.data)));
    else
        vq::wr_rdma_write(q, rkey, r.rma[0].addr);
    if (inl) {
        vq::data_buf bufs[iov_max];
        std::size_t nb = 0;
        for (std::size_t i = 0; i < r.count; i++)
            if (r.iov[i].iov_len)
                bufs[nb++] = {r.iov[i].iov_base, r.iov[i].iov_len};
        vq::wr_set_inline_data_list(q, nb, bufs);
    } else if (ns) {
        vq::wr_set_sge_list(q, ns, sg);
    }
    int rc = wr_finish(e, q);
    if (rc) {
        tx_put(e, t);
        return rc;
    }
    if (c->notify) [[unlikely]]
        note_access(e, c, r, r.len, write ? ra_write : ra_read);
    if (at_post) {
        util::tx_done(core, r.flags, r.context, cqf, r.len);
        tx_put(e, t);
    } else {
        e->scq_pending++;
    }
    return 0;
}

/** A description of the initiator's buffers for the target's vq RDMA. */
int describe(prov_ep *e, tx_entry *t, const util::tx_req &r, unsigned need, rndv_desc &d)
{
    d = rndv_desc{};
    d.total = r.len;
    for (std::size_t i = 0; i < r.count; i++) {
        if (!r.iov[i].iov_len)
            continue;
        vq::mr *m = nullptr;
        if (int rc = local_region(e, t, r.desc, i, r.iov[i], need, &m))
            return rc;
        d.iov[d.niov++] = {reinterpret_cast<std::uint64_t>(r.iov[i].iov_base), r.iov[i].iov_len, m->rkey, 0};
    }
    return 0;
}

/** An RMA executed by the target's progress (private target memory). */
ssize_t rma_by_target(prov_ep *e, util::ep_core *core, const util::tx_req &r, conn *c, std::uint64_t cqf)
{
    const bool write = r.kind == util::tx_req::write;
    const dev_limits &l = e->dom->lim;
    const bool small = r.len <= (write ? l.rma_inline : l.small_max);
    const bool at_post = write && small && completes_at_post(r.flags);
    tx_entry *t = nullptr;
    if (!at_post) {
        if (!(t = new_tx(e, core, r, c, cqf)))
            return -FI_EAGAIN;
        t->waits = write || !small ? tx_entry::on_fin : tx_entry::on_resp;
    }
    const std::uint64_t origin = origin_of(core);
    rma_hdr h{r.rma[0].addr, r.rma[0].key, r.len, t ? tx_id(e, t) : late_id(origin), std::uint32_t(r.data), 0};
    std::uint8_t flags = (write && (r.flags & FI_REMOTE_CQ_DATA)) ? wf_data : 0;
    vq::data_buf b[2 + iov_max];
    std::size_t nb = 1;
    b[0] = {&h, sizeof h};
    rndv_desc d;
    std::uint8_t op;
    if (small && write) {
        op = w_write;
        for (std::size_t i = 0; i < r.count; i++)
            if (r.iov[i].iov_len)
                b[nb++] = {r.iov[i].iov_base, r.iov[i].iov_len};
    } else if (small) {
        op = w_read_req;
        t->iov_count = r.count;
        for (std::size_t i = 0; i < r.count; i++)
            t->iov[i] = r.iov[i];
    } else {
        op = write ? w_write_rts : w_read_req;
        if (int rc = describe(e, t, r, write ? vq::ACCESS_REMOTE_READ : vq::ACCESS_REMOTE_WRITE, d)) {
            tx_put(e, t);
            return rc;
        }
        b[nb++] = {&d, rndv_desc_len(d.niov)};
    }
    int rc = post_imm(e, c, imm_wire(op, flags, 0), b, nb, false, at_post ? posted_id(posted_write, origin) : ~0ULL);
    if (rc) {
        if (t)
            tx_put(e, t);
        return rc;
    }
    if (at_post)
        util::tx_done(core, r.flags, r.context, cqf, r.len);
    return 0;
}

/** Key check shared by every target-executed request. @return 0 or a
 *  positive error code. */
int verify(prov_ep *e, std::uint64_t key, std::uint64_t addr, std::uint64_t len, std::uint64_t access, void **ptr,
           util::mr_obj **m)
{
    int rc = util::mr_verify(e->dom, key, addr, len, access, ptr, m);
    return rc == -FI_EKEYREJECTED || rc == -FI_EINVAL ? FI_EACCES : -rc;
}

/** The answer to a request that carried id @p id (a late_id: none wanted,
 *  so only a failure is reported, to the initiator's endpoint or context
 *  the id names). */
void answer(prov_ep *e, conn *c, std::uint64_t id, int err)
{
    if (is_late_id(id) && !err)
        return;
    fin_body fb{id, err, 0};
    ctl_send(e, c, imm_wire(w_fin, 0, 0), &fb, sizeof fb);
}

void exec_write(prov_ep *e, conn *c, std::uint8_t flags, const std::uint8_t *p, std::size_t len)
{
    rma_hdr h;
    std::memcpy(&h, p, sizeof h);
    void *ptr = nullptr;
    util::mr_obj *m = nullptr;
    int err = h.len > len - sizeof h ? FI_EINVAL : verify(e, h.key, h.addr, h.len, FI_REMOTE_WRITE, &ptr, &m);
    if (!err) {
        if (h.len)
            std::memcpy(ptr, p + sizeof h, h.len);
        if (counts_access(e)) [[unlikely]]
            count_region(e, m, ra_write);
        if (flags & wf_data)
            if (util::ep_core *t = rma_target(e))
                util::rx_remote_data(t, h.data, FI_RMA | FI_REMOTE_WRITE, h.len);
    }
    answer(e, c, h.id, err);
}

/** Large write (pull the initiator's buffer) or read (push into it): one
 *  vq RDMA request between the region and the initiator's buffer. */
void exec_move(prov_ep *e, conn *c, bool write, std::uint8_t flags, const std::uint8_t *p, std::size_t len)
{
    rma_hdr h;
    std::memcpy(&h, p, sizeof h);
    rndv_desc d;
    void *ptr = nullptr;
    util::mr_obj *m = nullptr;
    int err = !parse_desc(p + sizeof h, len - sizeof h, d) || d.total != h.len
                  ? FI_EINVAL
                  : verify(e, h.key, h.addr, h.len, write ? FI_REMOTE_WRITE : FI_REMOTE_READ, &ptr, &m);
    if (!err && !m->prov)
        err = FI_EACCES;
    rx_op *o = err ? nullptr : rx_op_get(e);
    if (!err && !o)
        err = FI_ENOMEM;
    if (err) {
        answer(e, c, h.id, err);
        return;
    }
    o->kind = write ? rx_op::rma_write : rx_op::rma_read;
    o->c = c;
    o->peer_id = h.id;
    o->len = h.len;
    o->has_data = flags & wf_data;
    o->data = h.data;
    o->key = h.key;
    o->addr = h.addr;
    o->d = d;
    o->v = iovec{ptr, h.len};
    o->vdesc = m;
    int rc = move_start(e, o);
    if (rc) {
        rx_op_put(e, o);
        answer(e, c, h.id, -rc);
    }
}

void exec_read_small(prov_ep *e, conn *c, const std::uint8_t *p, std::size_t len)
{
    rma_hdr h;
    std::memcpy(&h, p, sizeof h);
    void *ptr = nullptr;
    util::mr_obj *m = nullptr;
    int err = len != sizeof h || h.len > e->dom->lim.small_max ? FI_EINVAL
                                                                : verify(e, h.key, h.addr, h.len, FI_REMOTE_READ, &ptr, &m);
    if (err) {
        answer(e, c, h.id, err);
        return;
    }
    std::uint8_t resp[8 + send_inline_max];
    std::memcpy(resp, &h.id, 8);
    std::memcpy(resp + 8, ptr, h.len);
    if (counts_access(e)) [[unlikely]]
        count_region(e, m, ra_read);
    ctl_send(e, c, imm_wire(w_read_resp, 0, 0), resp, 8 + h.len);
}

void exec_atomic(prov_ep *e, conn *c, const std::uint8_t *p, std::size_t len)
{
    atomic_hdr a;
    if (len < sizeof a)
        return;
    std::memcpy(&a, p, sizeof a);
    void *ptr = nullptr;
    util::mr_obj *m = nullptr;
    std::uint64_t need = a.aop == FI_ATOMIC_READ ? FI_REMOTE_READ : (a.fetch ? FI_REMOTE_READ : 0) | FI_REMOTE_WRITE;
    int err = (a.addr & 7) ? FI_EINVAL : verify(e, a.key, a.addr, 8, need, &ptr, &m);
    std::uint64_t old = 0;
    if (!err) {
        // The target's own CPU: atomic also against its other CPU atomics.
        std::atomic_ref<std::uint64_t> w(*static_cast<std::uint64_t *>(ptr));
        switch (a.aop) {
        case FI_SUM: old = w.fetch_add(a.operand, std::memory_order_seq_cst); break;
        case FI_ATOMIC_READ: old = w.load(std::memory_order_seq_cst); break;
        case FI_CSWAP:
            old = a.compare;
            w.compare_exchange_strong(old, a.operand, std::memory_order_seq_cst);
            break;
        default: err = FI_EOPNOTSUPP; break;
        }
        if (!err && counts_access(e)) [[unlikely]]
            count_region(e, m, a.aop == FI_ATOMIC_READ ? ra_atomic_read : a.fetch ? ra_fetch : ra_atomic);
    }
    if (is_late_id(a.id) && !err)
        return;
    std::uint8_t resp[sizeof(fin_body) + 8];
    fin_body fb{a.id, err, 0};
    std::memcpy(resp, &fb, sizeof fb);
    std::memcpy(resp + sizeof fb, &old, 8);
    ctl_send(e, c, imm_wire(w_atomic_resp, 0, 0), resp, sizeof resp);
}

/** Initiator: a response came (read data or an atomic's old value). */
void response(prov_ep *e, std::uint8_t op, const std::uint8_t *p, std::size_t len)
{
    if (op == w_read_resp) {
        std::uint64_t id;
        if (len < 8)
            return;
        std::memcpy(&id, p, 8);
        tx_entry *t = tx_from_id(e, id);
        if (!t || t->waits != tx_entry::on_resp)
            return;
        std::size_t n = len - 8, off = 0;
        for (std::size_t i = 0; i < t->iov_count && off < n; i++) {
            std::size_t k = std::min(n - off, t->iov[i].iov_len);
            std::memcpy(t->iov[i].iov_base, p + 8 + off, k);
            off += k;
        }
        tx_fin(e, id, n == t->len ? 0 : FI_EIO);
        return;
    }
    fin_body fb;
    if (len < sizeof fb + 8)
        return;
    std::memcpy(&fb, p, sizeof fb);
    if (is_late_id(fb.id)) {
        if (fb.err) // an atomic completed when posted (inject) failed at the target
            util::tx_fail_after_done(origin_core(e, fb.id & 0xff), FI_ATOMIC | FI_WRITE, fb.err);
        return;
    }
    tx_entry *t = tx_from_id(e, fb.id);
    if (!t || t->waits != tx_entry::on_resp)
        return;
    if (!fb.err && t->result)
        std::memcpy(t->result, p + sizeof fb, 8);
    tx_fin(e, fb.id, fb.err < 0 ? FI_EIO : fb.err);
}

} // namespace

ssize_t rma(prov_ep *e, util::ep_core *core, const util::tx_req &r)
{
    conn *c = conn_of(e, r);
    if (int rc = conn_ready(e, c, core, r); rc)
        return rc > 0 ? 0 : rc; // queued until the connection is up, or the error
    const bool write = r.kind == util::tx_req::write;
    const std::uint64_t cqf = FI_RMA | (write ? FI_WRITE : FI_READ);
    const std::uint64_t key = r.rma[0].key;
    if (key & key_local_only) {
        // A local-only region's key: no peer can accept it.
        fail_now(core, r, cqf, FI_EKEYREJECTED);
        return 0;
    }
    if ((key & key_direct) || !e->dom->lim.host_local)
        return rma_direct(e, core, r, c, cqf);
    return rma_by_target(e, core, r, c, cqf);
}

ssize_t atomic_op(prov_ep *e, util::ep_core *core, const util::tx_req &r)
{
    const bool fetch = r.kind != util::tx_req::atomic;
    const std::uint64_t cqf = FI_ATOMIC | (fetch ? FI_READ : FI_WRITE);
    if (r.count < 1 || !r.iov || (r.aop != FI_ATOMIC_READ && !r.iov[0].iov_base) ||
        (r.kind == util::tx_req::compare_atomic && (r.compare_count < 1 || !r.compare || !r.compare[0].iov_base)) ||
        (fetch && (r.result_count < 1 || !r.result || !r.result[0].iov_base)))
        return -FI_EINVAL;
    conn *c = conn_of(e, r);
    if (int rc = conn_ready(e, c, core, r); rc)
        return rc > 0 ? 0 : rc; // queued until the connection is up, or the error
    std::uint64_t operand = 0, compare = 0;
    if (r.aop != FI_ATOMIC_READ)
        std::memcpy(&operand, r.iov[0].iov_base, 8);
    if (r.kind == util::tx_req::compare_atomic)
        std::memcpy(&compare, r.compare[0].iov_base, 8);
    const std::uint64_t key = r.rma[0].key;
    if (key & key_local_only) {
        fail_now(core, r, cqf, FI_EKEYREJECTED);
        return 0;
    }
    if (!(key & key_direct) && e->dom->lim.host_local) {
        // Executed by the target's CPU (private memory).
        const bool at_post = !fetch && completes_at_post(r.flags);
        tx_entry *t = nullptr;
        if (!at_post) {
            if (!(t = new_tx(e, core, r, c, cqf)))
                return -FI_EAGAIN;
            t->len = 8;
            t->waits = tx_entry::on_resp;
            t->result = fetch ? r.result[0].iov_base : nullptr;
        }
        const std::uint64_t origin = origin_of(core);
        atomic_hdr a{r.rma[0].addr, key, t ? tx_id(e, t) : late_id(origin), operand, compare, std::uint32_t(r.aop),
                     fetch ? 1u : 0u};
        vq::data_buf b{&a, sizeof a};
        if (int rc = post_imm(e, c, imm_wire(w_atomic_req, 0, 0), &b, 1, false,
                              at_post ? posted_id(posted_atomic, origin) : ~0ULL)) {
            if (t)
                tx_put(e, t);
            return rc;
        }
        if (at_post)
            util::tx_done(core, r.flags, r.context, cqf, 8);
        return 0;
    }
    tx_entry *t = new_tx(e, core, r, c, cqf);
    if (!t)
        return -FI_EAGAIN;
    t->len = 8;
    t->result = fetch ? r.result[0].iov_base : nullptr;
    std::uint64_t *scratch = scratch_of(e, t);
    vq::qp *q = e->slots[c->slot].qp;
    vq::wr_start(q);
    q->wr_id = tx_id(e, t);
    q->wr_flags = vq::WR_SIGNALED;
    const std::uint32_t rkey = std::uint32_t(key);
    if (r.aop == FI_CSWAP)
        vq::wr_atomic_cmp_swp(q, rkey, r.rma[0].addr, compare, operand);
    else
        vq::wr_atomic_fetch_add(q, rkey, r.rma[0].addr, r.aop == FI_ATOMIC_READ ? 0 : operand);
    vq::wr_set_sge(q, e->scratch_mr->lkey, reinterpret_cast<std::uint64_t>(scratch), 8);
    int rc = wr_finish(e, q);
    if (rc) {
        tx_put(e, t);
        return rc;
    }
    if (c->notify) [[unlikely]]
        note_access(e, c, r, 8, r.aop == FI_ATOMIC_READ ? ra_atomic_read : fetch ? ra_fetch : ra_atomic);
    e->scq_pending++;
    return 0;
}

void rma_request(prov_ep *e, conn *c, hdr_word h, const std::uint8_t *p, std::size_t len)
{
    if (!c)
        return;
    switch (h.op) {
    case w_write:
        if (len >= sizeof(rma_hdr))
            exec_write(e, c, h.flags, p, len);
        return;
    case w_write_rts:
        if (len >= sizeof(rma_hdr))
            exec_move(e, c, true, h.flags, p, len);
        return;
    case w_read_req:
        if (len > sizeof(rma_hdr))
            exec_move(e, c, false, h.flags, p, len);
        else if (len == sizeof(rma_hdr))
            exec_read_small(e, c, p, len);
        return;
    case w_atomic_req:
        exec_atomic(e, c, p, len);
        return;
    case w_read_resp:
    case w_atomic_resp:
        response(e, h.op, p, len);
        return;
    case w_rma_note:
        if (len == sizeof(rma_note)) {
            rma_note n;
            std::memcpy(&n, p, sizeof n);
            count_access(e, n.key, n.addr, n.len, n.kind);
        }
        return;
    default:
        return;
    }
}

void rma_op_done(prov_ep *e, rx_op *o, int err)
{
    if (!err && counts_access(e)) [[unlikely]]
        count_access(e, o->key, o->addr, o->len, o->kind == rx_op::rma_write ? ra_write : ra_read);
    if (!err && o->kind == rx_op::rma_write && o->has_data)
        if (util::ep_core *t = rma_target(e))
            util::rx_remote_data(t, o->data, FI_RMA | FI_REMOTE_WRITE, o->len);
    answer(e, o->c, o->peer_id, err);
    rx_op_put(e, o);
}

} // namespace shunt::prov::vqprov
