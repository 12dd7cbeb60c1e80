// vq provider: the receive side of messages sent through the ring in
// fragments (a message from private memory larger than one lent receive
// and smaller than the rendezvous threshold).
//
// Each fragment is copied once, from where the QP lends it, into the
// matched receive at its offset — the sender's copy into the ring and this
// one are the message's two copies, and the two cores make them at the same
// time, fragment after fragment. A message no receive matches yet is copied
// into a staging buffer (free lists by size class: nothing is allocated per
// message once the high-water mark is reached) and from there into the
// receive that matches it later; the kit keeps its place among the
// unexpected messages (rx_deliver_fetch), so matching order is that of
// arrival.
#include <bit>
#include <cstring>

#include "env/errors.h"
#include "prov.h"

namespace shunt::prov::vqprov {

namespace {

constexpr unsigned stash_min_log = 15; ///< smallest staging buffer: 32 KiB
constexpr std::size_t frag_chunk = 16;  ///< frag_msg entries allocated at a time

unsigned stash_class(std::size_t n)
{
    unsigned lg = n <= (std::size_t(1) << stash_min_log) ? stash_min_log : unsigned(std::bit_width(n - 1));
    return lg - stash_min_log;
}

// Free staging buffers are linked through their first word.
std::uint8_t *stash_get(prov_ep *e, std::size_t n)
{
    unsigned k = stash_class(n);
    if (k >= std::size(e->stash_free))
        return nullptr;
    if (void *p = e->stash_free[k]) [[likely]] {
        e->stash_free[k] = *static_cast<void **>(p);
        return static_cast<std::uint8_t *>(p);
    }
    // First time this many of this class are held: one more, kept afterwards.
    return static_cast<std::uint8_t *>(std::malloc(std::size_t(1) << (k + stash_min_log)));
}

/** Bytes of the staging buffer of a message of @p n bytes. */
std::size_t stash_bytes(std::size_t n) { return std::size_t(1) << (stash_class(n) + stash_min_log); }

void stash_put(prov_ep *e, std::uint8_t *p, std::size_t n)
{
    if (!p)
        return;
    unsigned k = stash_class(n);
    *reinterpret_cast<void **>(p) = e->stash_free[k];
    e->stash_free[k] = p;
}

frag_msg *frag_get(prov_ep *e)
{
    if (!e->frag_free) [[unlikely]] {
        std::unique_ptr<frag_msg[]> v(new (std::nothrow) frag_msg[frag_chunk]);
        if (!v)
            return nullptr;
        try {
            e->frag_chunks.push_back(std::move(v));
        } catch (...) {
            return nullptr;
        }
        frag_msg *base = e->frag_chunks.back().get();
        for (std::size_t i = 0; i < frag_chunk; i++) {
            base[i].next = e->frag_free;
            e->frag_free = &base[i];
        }
    }
    frag_msg *m = e->frag_free;
    e->frag_free = m->next;
    *m = frag_msg{};
    return m;
}

void frag_put(prov_ep *e, frag_msg *m)
{
    stash_put(e, m->buf, m->total);
    m->buf = nullptr;
    m->c = nullptr;
    m->slot = -1;
    m->next = e->frag_free;
    e->frag_free = m;
}

/** Copy @p n bytes to offset @p off of an iov list (clipped at its end). */
void copy_to_iov(const iovec *iov, std::size_t count, std::size_t off, const std::uint8_t *src, std::size_t n)
{
    for (std::size_t i = 0; i < count && n; i++) {
        if (off >= iov[i].iov_len) {
            off -= iov[i].iov_len;
            continue;
        }
        std::size_t k = std::min(n, iov[i].iov_len - off);
        std::memcpy(static_cast<std::uint8_t *>(iov[i].iov_base) + off, src, k);
        src += k;
        n -= k;
        off = 0;
    }
}

/** Bytes [from, from + n) of the message go into the matched receive
 *  (only what fits the bytes it reserved, r.n). */
void to_receive(frag_msg *m, std::size_t from, const std::uint8_t *p, std::size_t n)
{
    if (from >= m->r.n)
        return;
    std::size_t k = std::min(n, m->r.n - from);
    copy_to_iov(m->e->iov, m->e->iov_count, m->r.offset + from, p, k);
}

/** Every fragment arrived. */
void frag_end(prov_ep *e, frag_msg *m)
{
    if (m->slot >= 0 && e->slots[std::size_t(m->slot)].rx_frag == m)
        e->slots[std::size_t(m->slot)].rx_frag = nullptr;
    m->slot = -1;
    if (m->want_ack && m->c) {
        // FI_DELIVERY_COMPLETE: the sender's send fails with the message.
        fin_body fb{m->ack_id, m->err, 0};
        ctl_send(e, m->c, imm_wire(w_fin, 0, 0), &fb, sizeof fb);
        m->want_ack = false;
    }
    if (m->e) {
        util::rx_fetch_done(m->e, m->r, m->err);
        frag_put(e, m);
    } else if (m->discarded) {
        frag_put(e, m);
    } else {
        m->done = true; // waits for a receive (kept by the kit as unexpected)
    }
}

void frag_data(prov_ep *e, frag_msg *m, const std::uint8_t *p, std::size_t n)
{
    if (n > m->total - m->got) [[unlikely]] {
        n = m->total - m->got; // a peer that overran its own length
        m->err = FI_EIO;
    }
    if (m->e)
        to_receive(m, m->got, p, n);
    else if (m->buf)
        std::memcpy(m->buf + m->got, p, n);
    m->got += n;
    if (m->got == m->total)
        frag_end(e, m);
}

} // namespace

void frag_rx(prov_ep *e, int s, hdr_word h, const std::uint8_t *p, std::size_t len)
{
    rc_slot &sl = e->slots[std::size_t(s)];
    if (h.op == w_frag) {
        if (frag_msg *m = sl.rx_frag) [[likely]]
            frag_data(e, m, p, len);
        return; // a fragment of nothing: a message that already failed
    }
    // w_frag_first
    if (sl.rx_frag) [[unlikely]]
        frag_fail(e, s, FI_EIO); // the last one never finished: the peer broke the protocol
    msg_fields f;
    std::size_t n = parse_fields(h.flags, p, len, f);
    std::uint64_t total = 0;
    if ((n == 0 && fields_len(h.flags)) || len < n + 8 || !sl.c)
        return;
    std::memcpy(&total, p + n, 8);
    n += 8;
    if (total > max_msg || total < len - n)
        return;
    frag_msg *m = frag_get(e);
    if (!m) {
        SHUNT_LOG(prov_log, error, "vq: out of memory for a fragmented message; it is dropped");
        return;
    }
    m->c = sl.c;
    m->slot = s;
    m->total = total;
    m->want_ack = h.flags & wf_ack;
    m->ack_id = f.ack;
    sl.rx_frag = m;
    util::ep_core *t = e->scalable ? rx_target(e, h.rx) : e->core;
    env::stats::on_rx(e->io, total);
    fetch_blob b{sl.c, 0, m, {}};
    // Kept unexpected, its staging buffer counts against the store's bound.
    const int rc = !t ? -FI_ENORX
                      : util::rx_deliver_fetch(t, h.flags & wf_tagged,
                                               e->msg_type ? FI_ADDR_NOTAVAIL : conn_src(e, sl.c), f.tag, f.data,
                                               (h.flags & wf_data) ? FI_REMOTE_CQ_DATA : 0, total, &b,
                                               offsetof(fetch_blob, d), stash_bytes(total));
    if (rc != 0) {
        m->discarded = true; // no receive context, or no room to keep it: dropped
        m->err = -rc;        // what its delivery-complete acknowledgement says (frag_end)
        env::stats::on_drop(e->io);
    } else if (!m->e && !(m->buf = stash_get(e, total)))
        m->err = FI_ENOMEM; // kept, but its receive will fail
    frag_data(e, m, p + n, len - n);
}

int frag_match(prov_ep *e, util::rx_entry *en, const util::rx_fetch_req &r, frag_msg *m)
{
    if (m->err && m->done) {
        int err = m->err;
        frag_put(e, m);
        return -err;
    }
    m->e = en;
    m->r = r;
    if (m->buf) {
        // What arrived while it was unexpected.
        to_receive(m, 0, m->buf, m->got);
        stash_put(e, m->buf, m->total);
        m->buf = nullptr;
    }
    if (m->done) {
        frag_put(e, m);
        return 1; // in place: the kit completes it now
    }
    return 0; // the rest goes straight into the receive as it arrives
}

void frag_discard(prov_ep *e, frag_msg *m)
{
    if (m->done)
        frag_put(e, m);
    else
        m->discarded = true;
}

void frag_fail(prov_ep *e, int s, int err)
{
    frag_msg *m = e->slots[std::size_t(s)].rx_frag;
    if (!m)
        return;
    e->slots[std::size_t(s)].rx_frag = nullptr;
    m->slot = -1;
    m->want_ack = false;
    m->err = err;
    if (m->e) {
        util::rx_fetch_done(m->e, m->r, err);
        frag_put(e, m);
    } else if (m->discarded) {
        frag_put(e, m);
    } else {
        m->done = true;
    }
}

void frag_destroy(prov_ep *e)
{
    for (void *&head : e->stash_free)
        while (head) {
            void *next = *static_cast<void **>(head);
            std::free(head);
            head = next;
        }
    // Messages still held (unexpected, or in progress) own their buffers.
    for (auto &ch : e->frag_chunks)
        for (std::size_t i = 0; i < frag_chunk; i++)
            std::free(ch[i].buf);
    e->frag_chunks.clear();
    e->frag_free = nullptr;
}

} // namespace shunt::prov::vqprov
