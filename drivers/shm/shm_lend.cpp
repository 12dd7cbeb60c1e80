/* drivers/shm: poll_lent (vq/qp_fp.h) — the lent receives of one RC/UC QP
 * read in place from its ring, without the CQ's walk over its QPs, its
 * direct-output set-up or a vq::wc per message.
 *
 * It takes only what the ring lends in place: a whole send or send_imm in
 * one chunk that does not wrap around the ring's end. At anything else (a
 * chunk of another kind, a malformed header, a message that wraps, the QP
 * out of RTR/RTS, completions the CQ holds already) it stops and leaves the
 * ring where it is; the CQ's receive progress (rx_ring in shm_rx.cpp) goes
 * on from that same position, so one QP's messages keep their order
 * whichever call consumes them. Both share the consumer state (rx_head,
 * rx_published) under the receive CQ's lock, and both return a ring's
 * credits only for slots before rx_head, in quarter-ring batches, when a
 * new poll begins: the consumer has had every message lent before it. */
#include "shm.h"

namespace shunt::drv::shm {

namespace {

/** Is the chunk at @p s (its header already loaded) a whole send this form
 *  lends in place at ring index @p i? Every field is peer-written: the
 *  slot count must be the one its length needs, and the chunk must fit
 *  the QP's largest message and end before the ring does. */
inline bool lendable(const shm_qp *q, std::uint8_t op, std::uint8_t flags, std::uint32_t len, std::uint32_t nslots,
                     std::uint32_t i, std::uint32_t mask) noexcept
{
    if ((op != msg_send && op != msg_send_imm) || (flags & ~sf_solicited) != (sf_first | sf_last))
        return false;
    if (nslots == 1) [[likely]]
        return len <= slot_payload;
    return len <= q->max_lend && nslots == slots_for(len) && nslots <= mask + 1 - i;
}

template <bool Locked>
int poll_lent(vq::qp *vqp, int num, vq::lent_msg *out) noexcept
{
    shm_qp *q = to_qp(vqp);
    if (num <= 0 || !out) [[unlikely]]
        return num < 0 || (num > 0 && !out) ? -FI_EINVAL : 0;
    shm_cq *c = q->rcq;
    if constexpr (Locked)
        c->lock.lock();
    int got = 0;
    const std::uint32_t st = q->state.load(std::memory_order_relaxed);
    // What the CQ holds is older than anything in the ring; ERR (the flush
    // completion, a drain) and RESET/INIT are the CQ's to report.
    if (c->tail == c->head && (st == static_cast<std::uint32_t>(vq::qp_state::rts) ||
                               st == static_cast<std::uint32_t>(vq::qp_state::rtr))) [[likely]] {
        slot *slots = q->rx_slots;
        const std::uint32_t mask = q->rx_mask;
        std::uint32_t head = q->rx_head;
        // Take back what earlier polls lent: the slots before head were read
        // (published with release: our reads of them come first).
        if (head - q->rx_published >= (mask + 1) / 4) {
            q->rx_ctrl->consumed.store(head, std::memory_order_release);
            q->rx_published = head;
        }
        while (got < num) {
            slot *s = &slots[head & mask];
            // Observe a published chunk: the sequence word (acquire) orders
            // the reads of its header and payload after it.
            if (std::atomic_ref<std::uint32_t>(s->seq).load(std::memory_order_acquire) != head + 1)
                break;
            const std::uint8_t op = s->op, flags = s->flags;
            const std::uint32_t len = s->len, nslots = s->nslots;
            if (!lendable(q, op, flags, len, nslots, head & mask, mask)) [[unlikely]]
                break; // the CQ's progress takes it (and reports a bad header)
            vq::lent_msg &m = out[got++];
            m.data = s->data;
            m.byte_len = len;
            m.imm_data = op == msg_send_imm ? s->imm : 0;
            m.wc_flags = (op == msg_send_imm ? vq::WC_WITH_IMM : 0u) | ((flags & sf_solicited) ? vq::WC_SOLICITED : 0u);
            m.reserved = 0;
            env::stats::on_rx(q->io, len);
            head += nslots;
        }
        q->rx_head = head;
    }
    if constexpr (Locked)
        c->lock.unlock();
    return got;
}

} // namespace

void install_poll_lent(shm_qp *q) noexcept
{
    // UD QPs read several rings (one per sender): their messages come
    // through the CQ only.
    if (!q->lend || q->type == vq::qp_type::ud)
        return;
    q->poll_lent_fn = q->rcq->single_threaded ? poll_lent<false> : poll_lent<true>;
}

} // namespace shunt::drv::shm
