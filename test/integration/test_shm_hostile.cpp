// A hostile (or broken) peer: a real second process attaches a live segment
// and scribbles the words peers are able to write — slot headers, the
// rendezvous descriptor, QP descriptors, region entries, the context header —
// while this process receives, sends, connects and does RDMA. Each case
// checks: no crash, no hang (a watchdog fails a case that does not finish),
// nothing written outside the receive buffer, the error the driver guide
// names, and a second QP on the same CQ that keeps working.
#include <signal.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "env/segment.h"
#include "shm.h" // the shared layout (drivers/shm): where the peer-written words are
#include "shm_peer_client.h"

namespace shunt::test {
namespace {

namespace shm = shunt::drv::shm;

/** Fail, rather than hang, when a case does not finish in time. */
struct watchdog {
    explicit watchdog(unsigned seconds)
    {
        signal(SIGALRM, [](int) {
            static const char msg[] = "hostile-peer case did not finish within its bound: a hang\n";
            (void)!::write(2, msg, sizeof msg - 1);
            _exit(3);
        });
        alarm(seconds);
    }
    ~watchdog() { alarm(0); }
};

/** Our own view of a context's segment (attached by name, as any process of
 *  the user may): to find the offsets of the words the peer scribbles. */
struct seg_view {
    env::segment seg;
    char *base = nullptr;
    explicit seg_view(const vq::dev_addr &a)
    {
        EXPECT_EQ(seg.attach(std::string(reinterpret_cast<const char *>(a.raw), a.len)), 0);
        base = static_cast<char *>(seg.data());
    }
    const shm::ctx_hdr &hdr() const { return *reinterpret_cast<const shm::ctx_hdr *>(base); }
    std::uint64_t desc_off(std::uint32_t qpn) const
    {
        return hdr().qp_off + std::uint64_t{shm::qpn_index(qpn)} * sizeof(shm::qp_desc);
    }
    const shm::qp_desc &desc(std::uint32_t qpn) const
    {
        return *reinterpret_cast<const shm::qp_desc *>(base + desc_off(qpn));
    }
    std::uint64_t mr_off(std::uint32_t key) const
    {
        return hdr().mr_off + std::uint64_t{shm::key_index(key)} * sizeof(shm::mr_entry);
    }
    /** Offset of slot @p pos of the RC/UC ring of QP @p qpn. */
    std::uint64_t slot_off(std::uint32_t qpn, std::uint32_t pos) const
    {
        const shm::qp_desc &d = desc(qpn);
        return d.ring_off + sizeof(shm::ring_ctrl) + std::uint64_t{pos & (d.ring_slots - 1)} * sizeof(shm::slot);
    }
};

/** Have @p who write @p n bytes at @p off of the segment of context @p a. */
template <class T>
void scribble(shm_peer &who, const vq::dev_addr &a, std::uint64_t off, const T &v)
{
    pp::request r{};
    r.op = pp::scribble;
    r.addr.dev = a;
    r.a = off;
    r.b = sizeof v;
    ASSERT_EQ(who.call(r, nullptr, &v, sizeof v).rc, 0) << "the peer could not scribble";
}

constexpr std::size_t guard = 4096, rx_len = 8192;
constexpr std::uint8_t guard_byte = 0x5a;

/** The victim: one context, one CQ, QP a (the one attacked) and QP b (left
 *  alone), each connected to its own peer process. The receive buffers sit
 *  between guard bytes. */
struct victim {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::qp *a = nullptr, *b = nullptr;
    std::vector<std::uint8_t> buf;
    vq::mr *mr = nullptr;

    explicit victim(vq::qp_type t = vq::qp_type::rc) : buf(2 * rx_len + 3 * guard, guard_byte)
    {
        EXPECT_EQ(vq::open_device(vq::find_device("shm0"), &ctx), 0);
        EXPECT_EQ(vq::alloc_pd(ctx, &pd), 0);
        vq::cq_init_attr ca;
        ca.cqe = 256;
        EXPECT_EQ(vq::create_cq(ctx, &ca, &cq), 0);
        for (vq::qp **q : {&a, &b}) {
            vq::qp_init_attr ia;
            ia.type = t;
            ia.send_cq = ia.recv_cq = cq;
            ia.send_ops_flags = vq::ops_allowed(t);
            ia.cap.max_inline_data = 64;
            EXPECT_EQ(vq::create_qp(pd, &ia, q), 0);
        }
        EXPECT_EQ(vq::reg_mr(pd, buf.data(), buf.size(), vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE, &mr), 0);
    }
    ~victim()
    {
        EXPECT_EQ(vq::dereg_mr(mr), 0);
        EXPECT_EQ(vq::destroy_qp(a), 0);
        EXPECT_EQ(vq::destroy_qp(b), 0);
        EXPECT_EQ(vq::destroy_cq(cq), 0);
        EXPECT_EQ(vq::dealloc_pd(pd), 0);
        EXPECT_EQ(vq::close_device(ctx), 0);
    }
    static int connect(vq::qp *q, const vq::qp_addr &peer)
    {
        vq::qp_attr at;
        at.state = vq::qp_state::init;
        at.qkey = 0x1234;
        at.qp_access_flags = vq::ACCESS_REMOTE_WRITE;
        int rc = vq::modify_qp(q, &at, vq::QP_ATTR_STATE | vq::QP_ATTR_QKEY | vq::QP_ATTR_ACCESS_FLAGS);
        at.state = vq::qp_state::rtr;
        at.dest = peer.dev;
        at.dest_qp_num = peer.qpn;
        unsigned m = vq::QP_ATTR_STATE;
        if (q->type != vq::qp_type::ud)
            m |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
        if (!rc)
            rc = vq::modify_qp(q, &at, m);
        at.state = vq::qp_state::rts;
        if (!rc)
            rc = vq::modify_qp(q, &at, vq::QP_ATTR_STATE);
        return rc;
    }
    std::uint8_t *rx(int which) { return buf.data() + guard + static_cast<std::size_t>(which) * (rx_len + guard); }
    int post(vq::qp *q, int which, std::uint64_t wr_id)
    {
        return vq::post_recv(q, wr_id, reinterpret_cast<std::uint64_t>(rx(which)), rx_len, mr->lkey);
    }
    /** Poll until @p n completions arrived or @p ms passed. */
    std::vector<vq::wc> poll(std::size_t n, int ms = 3000)
    {
        std::vector<vq::wc> got;
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        vq::wc w[16];
        while (got.size() < n && std::chrono::steady_clock::now() < end) {
            int k = vq::poll_cq(cq, 16, w);
            EXPECT_GE(k, 0);
            for (int i = 0; i < k; i++)
                got.push_back(w[i]);
            if (k <= 0)
                std::this_thread::yield();
        }
        return got;
    }
    /** Every byte outside the two receive buffers still holds the guard. */
    bool guards_intact() const
    {
        for (std::size_t i = 0; i < buf.size(); i++) {
            std::size_t r = i < guard ? 0 : (i - guard) % (rx_len + guard);
            bool inside = i >= guard && i < buf.size() - guard && r < rx_len;
            if (!inside && buf[i] != guard_byte)
                return false;
        }
        return true;
    }
};

/** QP b and its peer still carry a message both ways, on the shared CQ. */
void second_qp_works(victim &v, shm_peer &pb)
{
    ASSERT_EQ(v.post(v.b, 1, 0xb1), 0);
    pb.write(0, std::vector<std::uint8_t>(40, 0xc3));
    ASSERT_EQ(pb.send(0, 40, true), 0);
    auto w = v.poll(1);
    ASSERT_EQ(w.size(), 1u) << "the untouched QP received nothing";
    EXPECT_EQ(w[0].status, vq::wc_status::success);
    EXPECT_EQ(w[0].qp_num, v.b->qp_num);
    EXPECT_EQ(w[0].byte_len, 40u);
    EXPECT_EQ(v.rx(1)[39], 0xc3);
    EXPECT_EQ(vq::get_qp_state(v.b), vq::qp_state::rts);
    ASSERT_EQ(pb.post_recv(1, 64), 0);
    std::uint8_t msg[16] = {1, 2, 3};
    ASSERT_EQ(vq::post_send(v.b, 0xb2, msg, sizeof msg, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
    auto s = v.poll(1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, vq::wc_status::success);
    auto pw = pb.poll(1);
    ASSERT_EQ(pw.size(), 1u) << "the untouched QP's peer received nothing";
    EXPECT_EQ(pw[0].status, vq::wc_status::success);
}

/** The victim with QP a connected to peer process pa (the one attacked) and
 *  QP b to pb (the one that must stay untouched), under a watchdog. */
struct rc_setup {
    watchdog wd{30}; // per case: a slow build (sanitizers) is not a hang
    victim v;
    shm_peer pa{"rc"}, pb{"rc"};

    /** Connect both pairs (call it with ASSERT_NO_FATAL_FAILURE). */
    void connect()
    {
        ASSERT_EQ(victim::connect(v.a, pa.addr), 0);
        ASSERT_EQ(pa.connect(vq::get_qp_addr(v.a)), 0);
        ASSERT_EQ(victim::connect(v.b, pb.addr), 0);
        ASSERT_EQ(pb.connect(vq::get_qp_addr(v.b)), 0);
    }
};

/** Receive buffer @p which of @p v holds only @p byte: nothing was written into it. */
bool rx_untouched(victim &v, int which, std::uint8_t byte)
{
    return std::all_of(v.rx(which), v.rx(which) + rx_len, [byte](std::uint8_t x) { return x == byte; });
}

/** A slot header as a peer might write it at position @p pos. */
shm::slot make_slot(std::uint32_t pos, std::uint8_t op, std::uint8_t flags, std::uint16_t nslots, std::uint32_t len)
{
    shm::slot s{};
    s.seq = pos + 1;
    s.op = op;
    s.flags = flags;
    s.nslots = nslots;
    s.len = len;
    std::memset(s.data, 0xee, sizeof s.data);
    return s;
}

struct slot_case {
    const char *name;
    std::uint8_t op, flags;
    std::uint16_t nslots;
    std::uint32_t len;
    vq::wc_status want;
};

constexpr std::uint8_t fl = shm::sf_first | shm::sf_last;
const slot_case slot_cases[] = {
    // The ring loop that never advanced (nslots 0, no last flag, len 0).
    {"nslots0_nolast", shm::msg_send, 0, 0, 0, vq::wc_status::bad_resp_err},
    // A slot of nothing delivered once per posted receive.
    {"nslots0_whole", shm::msg_send, fl, 0, 0, vq::wc_status::bad_resp_err},
    // One slot claiming more payload than a slot holds: stale bytes, or far past the segment.
    {"len_beyond_slot", shm::msg_send, fl, 1, 4000, vq::wc_status::bad_resp_err},
    {"len_60MiB", shm::msg_send, fl, 1, 60u << 20, vq::wc_status::bad_resp_err},
    {"len_max", shm::msg_send_imm, fl, 1, 0xffffffffu, vq::wc_status::bad_resp_err},
    {"len_off_by_one", shm::msg_send, fl, 1, shm::slot_payload + 1, vq::wc_status::bad_resp_err},
    {"nslots_off_by_one", shm::msg_send, fl, 3, 48 + 64, vq::wc_status::bad_resp_err},
    {"nslots_max", shm::msg_send, fl, 0xffff, 100, vq::wc_status::bad_resp_err},
    {"unknown_op", 0x77, fl, 1, 8, vq::wc_status::bad_resp_err},
    {"op_zero", 0, fl, 1, 8, vq::wc_status::bad_resp_err},
    {"unknown_flags", shm::msg_send, 0xf0 | fl, 1, 8, vq::wc_status::bad_resp_err},
    {"continuation_first", shm::msg_send, shm::sf_last, 1, 8, vq::wc_status::bad_resp_err},
    {"write_imm_nslots", shm::msg_write_imm, fl, 2, 100, vq::wc_status::bad_resp_err},
    {"rndv_short", shm::msg_rndv, fl, 1, 4, vq::wc_status::bad_resp_err},
    {"split_len", shm::msg_split, fl, 1, 8, vq::wc_status::bad_resp_err},
    {"split_nslots", shm::msg_split, fl, 2, sizeof(shm::split_req), vq::wc_status::bad_resp_err},
    {"split_first_only", shm::msg_split, shm::sf_first, 1, sizeof(shm::split_req), vq::wc_status::bad_resp_err},
};

class HostileSlot : public ::testing::TestWithParam<slot_case> {};

// The peer sends one good message, then publishes a bad header in the next
// slot of the attacked QP's ring, as its sender would.
TEST_P(HostileSlot, FailsOnlyTheQpItArrivedOn)
{
    const slot_case &c = GetParam();
    rc_setup setup;
    ASSERT_NO_FATAL_FAILURE(setup.connect());
    victim &v = setup.v;
    shm_peer &pa = setup.pa, &pb = setup.pb;
    seg_view mine(v.ctx->addr);

    ASSERT_EQ(v.post(v.a, 0, 0xa0), 0);
    pa.write(0, std::vector<std::uint8_t>(16, 0x11));
    ASSERT_EQ(pa.send(0, 16, true), 0);
    auto first = v.poll(1);
    ASSERT_EQ(first.size(), 1u);
    ASSERT_EQ(first[0].status, vq::wc_status::success);

    std::memset(v.rx(0), guard_byte, rx_len);
    ASSERT_EQ(v.post(v.a, 0, 0xa1), 0);
    ASSERT_EQ(v.post(v.a, 0, 0xa2), 0);
    scribble(pa, v.ctx->addr, mine.slot_off(v.a->qp_num, 1), make_slot(1, c.op, c.flags, c.nslots, c.len));
    auto w = v.poll(2);
    ASSERT_EQ(w.size(), 2u) << "the posted receives were not completed";
    EXPECT_EQ(w[0].wr_id, 0xa1u);
    EXPECT_EQ(w[0].qp_num, v.a->qp_num);
    EXPECT_EQ(w[0].status, c.want) << vq::wc_status_str(w[0].status);
    EXPECT_EQ(w[1].wr_id, 0xa2u);
    EXPECT_EQ(w[1].status, vq::wc_status::wr_flush_err) << "one error completion, then flushes";
    EXPECT_EQ(vq::get_qp_state(v.a), vq::qp_state::err);
    EXPECT_TRUE(v.guards_intact()) << "bytes written outside the receive buffers";
    EXPECT_TRUE(rx_untouched(v, 0, guard_byte)) << "a refused message wrote into the receive buffer";
    second_qp_works(v, pb);
}

INSTANTIATE_TEST_SUITE_P(Shm, HostileSlot, ::testing::ValuesIn(slot_cases),
                         [](const auto &i) { return std::string(i.param.name); });

/** A rendezvous message whose piece lies outside the sender's segment. */
struct rndv_case {
    const char *name;
    std::uint64_t where;
    std::uint32_t len;
    std::uint32_t nsge;
};
const rndv_case rndv_cases[] = {
    {"wraps", ~0ull - 100, 4096, 1},        // from + len wraps around 2^64
    {"past_end", 1ull << 40, 4096, 1},
    {"at_end", ~0ull, 1, 1},
    {"too_many_pieces", 0, 16, 1000},
};

class HostileRndv : public ::testing::TestWithParam<rndv_case> {};

TEST_P(HostileRndv, RefusedWithoutTouchingMemory)
{
    const rndv_case &c = GetParam();
    rc_setup setup;
    ASSERT_NO_FATAL_FAILURE(setup.connect());
    victim &v = setup.v;
    shm_peer &pa = setup.pa, &pb = setup.pb;
    seg_view mine(v.ctx->addr);
    ASSERT_EQ(v.post(v.a, 0, 0xa1), 0);
    shm::slot s = make_slot(0, shm::msg_rndv, fl, 1, sizeof(shm::rndv_hdr) + sizeof(shm::rndv_piece));
    shm::rndv_hdr h{};
    h.op = shm::msg_send;
    h.total = c.len;
    h.nsge = c.nsge;
    shm::rndv_piece p{c.where, c.len, 1};
    std::memcpy(s.data, &h, sizeof h);
    std::memcpy(s.data + sizeof h, &p, sizeof p);
    scribble(pa, v.ctx->addr, mine.slot_off(v.a->qp_num, 0), s);
    auto w = v.poll(1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].wr_id, 0xa1u);
    EXPECT_NE(w[0].status, vq::wc_status::success);
    EXPECT_NE(w[0].status, vq::wc_status::wr_flush_err);
    EXPECT_EQ(vq::get_qp_state(v.a), vq::qp_state::err);
    EXPECT_TRUE(v.guards_intact());
    EXPECT_TRUE(rx_untouched(v, 0, guard_byte));
    second_qp_works(v, pb);
}

INSTANTIATE_TEST_SUITE_P(Shm, HostileRndv, ::testing::ValuesIn(rndv_cases),
                         [](const auto &i) { return std::string(i.param.name); });

// Our own context header and descriptors are in the segment too: a peer
// overwriting the geometry in them changes nothing for us (it is kept in
// private memory), so ordinary receives on both QPs go on.
struct geometry_case {
    const char *name;
    bool header;          ///< field of the context header, else of QP a's descriptor
    std::size_t offset;   ///< offsetof the field
    std::size_t size;     ///< 4 or 8
    std::uint64_t value;
};
const geometry_case geometry_cases[] = {
    {"hdr_mr_off", true, offsetof(shm::ctx_hdr, mr_off), 8, 1ull << 50},
    {"hdr_mr_off_wrap", true, offsetof(shm::ctx_hdr, mr_off), 8, ~0ull - 63},
    {"hdr_max_mr", true, offsetof(shm::ctx_hdr, max_mr), 4, 0xffffffffu},
    {"hdr_qp_off", true, offsetof(shm::ctx_hdr, qp_off), 8, 1ull << 45},
    {"hdr_max_qp", true, offsetof(shm::ctx_hdr, max_qp), 4, 0},
    {"hdr_locks_off", true, offsetof(shm::ctx_hdr, locks_off), 8, ~0ull},
    {"desc_ring_off", false, offsetof(shm::qp_desc, ring_off), 8, 1ull << 44},
    {"desc_ring_slots", false, offsetof(shm::qp_desc, ring_slots), 4, 0},
};

class HostileGeometry : public ::testing::TestWithParam<geometry_case> {};

TEST_P(HostileGeometry, OwnGeometryIsPrivate)
{
    const geometry_case &c = GetParam();
    rc_setup setup;
    ASSERT_NO_FATAL_FAILURE(setup.connect());
    victim &v = setup.v;
    shm_peer &pa = setup.pa, &pb = setup.pb;
    seg_view mine(v.ctx->addr);
    std::uint64_t off = (c.header ? 0 : mine.desc_off(v.a->qp_num)) + c.offset;
    if (c.size == 8)
        scribble(pa, v.ctx->addr, off, c.value);
    else
        scribble(pa, v.ctx->addr, off, static_cast<std::uint32_t>(c.value));
    ASSERT_EQ(v.post(v.a, 0, 0xa1), 0);
    pa.write(0, std::vector<std::uint8_t>(30, 0x22));
    ASSERT_EQ(pa.send(0, 30, true), 0);
    auto w = v.poll(1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, vq::wc_status::success);
    EXPECT_EQ(v.rx(0)[29], 0x22);
    EXPECT_TRUE(v.guards_intact());
    second_qp_works(v, pb);
}

INSTANTIATE_TEST_SUITE_P(Shm, HostileGeometry, ::testing::ValuesIn(geometry_cases),
                         [](const auto &i) { return std::string(i.param.name); });

// UD: the ring pool's geometry and the active bits are in our descriptor;
// senders write the bits. Scribbled, the receiver still scans only its own
// rings, where its own geometry says they are.
TEST(HostileUd, PoolGeometryIsPrivate)
{
    for (int k = 0; k < 4; k++) {
        SCOPED_TRACE(k);
        watchdog wd(30); // per case: a slow build (sanitizers) is not a hang
        victim v(vq::qp_type::ud);
        ASSERT_EQ(victim::connect(v.a, {}), 0);
        ASSERT_EQ(victim::connect(v.b, {}), 0);
        shm_peer pa("ud");
        ASSERT_EQ(pa.connect(vq::get_qp_addr(v.a)), 0);
        seg_view mine(v.ctx->addr);
        // One datagram first: the sender claims its ring.
        ASSERT_EQ(v.post(v.a, 0, 0xa0), 0);
        pp::request r{};
        r.op = pp::ud_send;
        r.n = 1;
        r.a = 32;
        r.b = 0x1234;
        r.addr = vq::get_qp_addr(v.a);
        ASSERT_EQ(pa.call(r).rc, 0);
        auto w0 = v.poll(1);
        ASSERT_EQ(w0.size(), 1u);
        ASSERT_EQ(w0[0].status, vq::wc_status::success);
        std::uint64_t d = mine.desc_off(v.a->qp_num);
        switch (k) {
        case 0: // the ring count beyond the 64 bits, with every bit set
            scribble(pa, v.ctx->addr, d + offsetof(shm::qp_desc, ud_nrings), std::uint32_t{200});
            scribble(pa, v.ctx->addr, d + offsetof(shm::qp_desc, ud_active), ~0ull);
            break;
        case 1: // a ring size that puts ring 1 past the segment
            scribble(pa, v.ctx->addr, d + offsetof(shm::qp_desc, ud_ring_slots), std::uint32_t{1u << 30});
            scribble(pa, v.ctx->addr, d + offsetof(shm::qp_desc, ud_active), ~0ull);
            break;
        case 2: // a ring size of 0 (a mask of all ones)
            scribble(pa, v.ctx->addr, d + offsetof(shm::qp_desc, ud_active), ~0ull);
            scribble(pa, v.ctx->addr, d + offsetof(shm::qp_desc, ud_ring_slots), std::uint32_t{0});
            break;
        default:
            scribble(pa, v.ctx->addr, d + offsetof(shm::qp_desc, ud_nrings), std::uint32_t{0xffffffffu});
        }
        ASSERT_EQ(v.post(v.a, 0, 0xa1), 0);
        ASSERT_EQ(pa.call(r).rc, 0);
        auto w = v.poll(1);
        ASSERT_EQ(w.size(), 1u) << "the UD receiver stopped receiving";
        EXPECT_EQ(w[0].status, vq::wc_status::success);
        EXPECT_TRUE(v.guards_intact());
        // The other UD QP of the context receives too.
        ASSERT_EQ(v.post(v.b, 1, 0xb1), 0);
        r.addr = vq::get_qp_addr(v.b);
        ASSERT_EQ(pa.call(r).rc, 0);
        auto wb = v.poll(1);
        ASSERT_EQ(wb.size(), 1u);
        EXPECT_EQ(wb[0].status, vq::wc_status::success);
        EXPECT_EQ(wb[0].qp_num, v.b->qp_num);
    }
}

// RDMA: the initiator checks the target's region entry, which the target
// (or anyone) can write. A bad one is a remote access error, nothing copied.
TEST(HostileRdma, TargetRegionEntry)
{
    struct field_case {
        std::size_t offset;
        std::uint64_t value;
    };
    const field_case cases[] = {
        {offsetof(shm::mr_entry, seg_off), ~0ull - 4095}, // seg_off + len wraps to 0
        {offsetof(shm::mr_entry, seg_off), ~0ull - 1},
        {offsetof(shm::mr_entry, seg_off), 1ull << 62},
        {offsetof(shm::mr_entry, length), ~0ull}, // a region as large as the address space
    };
    for (const auto &fc : cases) {
        for (int read = 0; read < 2; read++) {
            SCOPED_TRACE(std::to_string(fc.offset) + (read ? " read" : " write"));
            rc_setup setup;
            ASSERT_NO_FATAL_FAILURE(setup.connect());
            victim &v = setup.v;
            shm_peer &pa = setup.pa, &pb = setup.pb;
            seg_view theirs(pa.addr.dev);
            std::uint64_t e = theirs.mr_off(pa.seg_rkey);
            scribble(pa, pa.addr.dev, e + fc.offset, fc.value);
            std::uint64_t raddr = pa.seg_addr;
            if (fc.offset == offsetof(shm::mr_entry, length))
                raddr += 1ull << 40; // far past the real region, inside the claimed length and the segment offset
            std::memset(v.rx(0), 0x33, rx_len);
            vq::wr_start(v.a);
            v.a->wr_id = 0xa7;
            v.a->wr_flags = vq::WR_SIGNALED;
            if (read)
                vq::wr_rdma_read(v.a, pa.seg_rkey, raddr);
            else
                vq::wr_rdma_write(v.a, pa.seg_rkey, raddr);
            vq::wr_set_sge(v.a, v.mr->lkey, reinterpret_cast<std::uint64_t>(v.rx(0)), 4096);
            ASSERT_EQ(vq::wr_complete(v.a), 0);
            auto w = v.poll(1);
            ASSERT_EQ(w.size(), 1u);
            EXPECT_EQ(w[0].wr_id, 0xa7u);
            EXPECT_EQ(w[0].status, vq::wc_status::rem_access_err) << vq::wc_status_str(w[0].status);
            EXPECT_TRUE(v.guards_intact());
            EXPECT_TRUE(rx_untouched(v, 0, 0x33));
            second_qp_works(v, pb);
        }
    }
}

// A peer that dies inside an RDMA access of ours leaves our region entry's
// user count raised (SIGKILL in an endpoint kill loop): the peer here writes
// that count. dereg_mr gives up waiting after its bound and retires the
// entry, so a full round of the table never hands it out again (each reuse
// would wait the bound again).
TEST(HostileRdma, StuckUserCountRetiresTheEntry)
{
    watchdog wd{60};
    victim v;
    shm_peer pa{"rc"};
    const vq::dev_addr mine = vq::get_qp_addr(v.a).dev;
    seg_view view(mine);
    std::vector<std::uint8_t> mem(4096);
    vq::mr *m = nullptr;
    ASSERT_EQ(vq::reg_mr(v.pd, mem.data(), mem.size(), vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_READ, &m), 0);
    const std::uint32_t stuck = shm::key_index(m->rkey);
    scribble(pa, mine, view.mr_off(m->rkey) + offsetof(shm::mr_entry, users), std::uint32_t{1});
    ASSERT_EQ(vq::dereg_mr(m), 0) << "the wait for a dead peer is bounded";
    const std::uint32_t rounds = view.hdr().max_mr + 8;
    for (std::uint32_t i = 0; i < rounds; i++) {
        ASSERT_EQ(vq::reg_mr(v.pd, mem.data(), mem.size(), vq::ACCESS_LOCAL_WRITE, &m), 0);
        const std::uint32_t idx = shm::key_index(m->lkey);
        ASSERT_EQ(vq::dereg_mr(m), 0);
        ASSERT_NE(idx, stuck) << "registration " << i << " reused the entry a dead peer left counted";
    }
}

/** Count the lines containing @p what that fd 2 receives while @p body runs. */
template <class F>
int stderr_lines_with(const char *what, F &&body)
{
    std::fflush(stderr);
    std::FILE *tmp = std::tmpfile();
    EXPECT_NE(tmp, nullptr);
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    body();
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::rewind(tmp);
    int n = 0;
    char line[512];
    while (std::fgets(line, sizeof line, tmp))
        n += std::strstr(line, what) != nullptr;
    std::fclose(tmp);
    return n;
}

// The same for a window: the invalidation that gives up (local_inv here)
// retires the entry and remembers the count the dead peer left. Rebinding
// and invalidating the window again, and deallocating it, do not wait the
// bound (nor warn) again, and the entry is never handed out again.
TEST(HostileRdma, StuckWindowEntryIsRetiredByItsInvalidation)
{
    rc_setup setup;
    watchdog wd{60}; // replaces the set-up's: four give-ups of 2 s each without the retirement
    ASSERT_NO_FATAL_FAILURE(setup.connect());
    victim &v = setup.v;
    const vq::dev_addr mine = vq::get_qp_addr(v.a).dev;
    seg_view view(mine);
    std::vector<std::uint8_t> mem(4096);
    vq::mr *m = nullptr;
    ASSERT_EQ(vq::reg_mr(v.pd, mem.data(), mem.size(), vq::ACCESS_LOCAL_WRITE | vq::ACCESS_MW_BIND, &m), 0);
    vq::mw *w = nullptr;
    ASSERT_EQ(vq::alloc_mw(v.pd, vq::mw_type::type2, &w), 0);
    const std::uint32_t stuck = shm::key_index(w->rkey);
    auto one = [&](auto &&build) {
        vq::wr_start(v.a);
        v.a->wr_id = 0xa9;
        v.a->wr_flags = vq::WR_SIGNALED;
        build();
        ASSERT_EQ(vq::wr_complete(v.a), 0);
        auto c = v.poll(1, 20000); // a give-up waits 20 x SHUNT_SHM_PEER_CHECK_MS
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, vq::wc_status::success) << vq::wc_status_str(c[0].status);
    };
    vq::mw_bind_info bi{m, reinterpret_cast<std::uint64_t>(mem.data()), 1024, vq::ACCESS_REMOTE_READ};
    one([&] { vq::wr_bind_mw(v.a, w, vq::inc_rkey(w->rkey), &bi); });
    scribble(setup.pa, mine, view.mr_off(w->rkey) + offsetof(shm::mr_entry, users), std::uint32_t{1});
    int warnings = stderr_lines_with("still in use by a peer", [&] {
        one([&] { vq::wr_local_inv(v.a, w->rkey); });
        one([&] { vq::wr_bind_mw(v.a, w, vq::inc_rkey(w->rkey), &bi); });
        one([&] { vq::wr_local_inv(v.a, w->rkey); });
        EXPECT_EQ(vq::dealloc_mw(w), 0);
    });
    EXPECT_EQ(warnings, 1) << "each invalidation after the first waited for the dead peer again";
    ASSERT_EQ(vq::dereg_mr(m), 0);
    const std::uint32_t rounds = view.hdr().max_mr + 8;
    for (std::uint32_t i = 0; i < rounds; i++) {
        ASSERT_EQ(vq::reg_mr(v.pd, mem.data(), mem.size(), vq::ACCESS_LOCAL_WRITE, &m), 0);
        const std::uint32_t idx = shm::key_index(m->lkey);
        ASSERT_EQ(vq::dereg_mr(m), 0);
        ASSERT_NE(idx, stuck) << "registration " << i << " reused the entry a dead peer left counted";
    }
}

// Split reads: a msg_split message asks us to copy a part of the peer's
// read of our memory into its process. Its fields are the peer's: we copy
// only for an offer its descriptor still holds, from a region of ours that
// allows remote reads, inside that region (the checks of the read itself),
// to an address the kernel checks in the peer's process; anything else
// copies nothing. The QP carries on either way and nothing of ours changes.
TEST(HostileSplit, OffersCopyOnlyWhatTheReadMayRead)
{
    watchdog wd(30);
    shm_peer pa("rc");
    local_end me(vq::qp_type::rc, 1 << 20);
    ASSERT_EQ(me.connect(pa.addr), 0);
    ASSERT_EQ(pa.connect(vq::get_qp_addr(me.qp)), 0);
    for (std::size_t i = 0; i < me.buf.size(); i++)
        me.buf[i] = static_cast<std::uint8_t>(i * 3 + 1);
    const std::vector<std::uint8_t> mine_before = me.buf;
    const std::vector<std::uint8_t> fill(8192, 0x77);
    pa.write(0, fill);
    seg_view mine(me.ctx->addr), theirs(pa.addr.dev);
    const std::uint64_t claim_off = theirs.desc_off(pa.addr.qpn) + offsetof(shm::qp_desc, split_claim);
    auto claim = [&] {
        return std::atomic_ref<const std::uint64_t>(
                   *reinterpret_cast<const std::uint64_t *>(theirs.base + claim_off))
            .load();
    };
    std::uint32_t pos = 0;
    // Publish one split message in our ring, as the peer's QP would, and let
    // our receive side take it.
    auto offer = [&](std::uint32_t ticket, std::uint32_t rkey, std::uint64_t raddr, std::uint64_t dst,
                     std::uint32_t len, std::uint32_t flags = 0) {
        shm::slot sl = make_slot(pos, shm::msg_split, fl, 1, sizeof(shm::split_req));
        shm::split_req m{ticket, rkey, raddr, dst, len, flags};
        std::memcpy(sl.data, &m, sizeof m);
        scribble(pa, me.ctx->addr, mine.slot_off(me.qp->qp_num, pos), sl);
        pos++;
        EXPECT_TRUE(drain(me.cq, 20).empty()) << "a split message made a completion";
    };
    const std::uint64_t base = me.addr();
    const std::uint32_t rkey = me.mr->rkey;
    struct bad {
        const char *what;
        std::uint32_t rkey;
        std::uint64_t raddr;
        std::uint32_t len;
    };
    const bad bads[] = {
        {"a key of nobody's", rkey ^ 0x100, base, 4096},
        {"past the region's end", rkey, base + (1 << 20) - 100, 4096},
        {"an address that wraps", rkey, ~0ull - 10, 4096},
        {"a length that reaches past it", rkey, base + 4096, 0xffffffffu},
    };

    // Not offered (the peer's descriptor holds no offer of that ticket).
    offer(5, rkey, base, pa.priv_addr, 4096);
    EXPECT_EQ(claim(), shm::split_word(0, shm::split_taken_back)) << "a part that was never offered was claimed";
    // Offered, but the read itself would fail.
    scribble(pa, pa.addr.dev, claim_off, shm::split_word(7, shm::split_offered));
    for (const bad &b : bads) {
        SCOPED_TRACE(b.what);
        offer(7, b.rkey, b.raddr, pa.priv_addr, b.len);
        EXPECT_EQ(claim(), shm::split_word(7, shm::split_offered)) << "claimed a part the read may not read";
    }
    EXPECT_EQ(pa.read(0, fill.size()), fill) << "a refused offer wrote into the peer";
    // Offered and readable, to an address the peer's process does not map:
    // the copy fails and says so (the initiator then copies the part itself).
    offer(7, rkey, base, 0x1000, 4096);
    EXPECT_EQ(claim(), shm::split_word(7, shm::split_failed));
    // Or an offset outside its segment (overflow-safe: one that wraps too).
    for (std::uint64_t off : {std::uint64_t{1} << 40, ~std::uint64_t{0} - 100, theirs.seg.size() - 100}) {
        SCOPED_TRACE(off);
        scribble(pa, pa.addr.dev, claim_off, shm::split_word(9, shm::split_offered));
        offer(9, rkey, base, off, 4096, shm::split_dst_seg);
        EXPECT_EQ(claim(), shm::split_word(9, shm::split_failed));
    }
    // Good offers: the part lands in the peer, as a read of it would, at an
    // address of its or an offset in its segment.
    scribble(pa, pa.addr.dev, claim_off, shm::split_word(8, shm::split_offered));
    offer(8, rkey, base + 100, pa.priv_addr, 4096);
    EXPECT_EQ(claim(), shm::split_word(8, shm::split_done));
    auto got = pa.read(0, 4096);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), mine_before.begin() + 100)) << "the good part is not what was read";
    scribble(pa, pa.addr.dev, claim_off, shm::split_word(10, shm::split_offered));
    const auto &seg_entry = *reinterpret_cast<const shm::mr_entry *>(theirs.base + theirs.mr_off(pa.seg_rkey));
    offer(10, rkey, base + 200, seg_entry.seg_off, 4096, shm::split_dst_seg); // the peer's segment buffer
    EXPECT_EQ(claim(), shm::split_word(10, shm::split_done));
    got = pa.read(0, 4096, true);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), mine_before.begin() + 200))
        << "the good part is not what was read (into the peer's segment)";
    EXPECT_EQ(qp_stat(me.qp, ".split", "copied"), 2u);

    // The QP goes on: the next message in the ring is received.
    ASSERT_EQ(vq::post_recv(me.qp, 9, me.addr(), 64, me.mr->lkey), 0);
    shm::slot msg = make_slot(pos, shm::msg_send, fl, 1, 16);
    scribble(pa, me.ctx->addr, mine.slot_off(me.qp->qp_num, pos), msg);
    auto w = me.poll(1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, vq::wc_status::success);
    EXPECT_EQ(w[0].byte_len, 16u);
    EXPECT_EQ(vq::get_qp_state(me.qp), vq::qp_state::rts);
    EXPECT_TRUE(std::equal(me.buf.begin() + 16, me.buf.end(), mine_before.begin() + 16))
        << "our memory changed beyond the one receive";
}

// Sending: the receiver's consumed index (its line of the ring control) is
// peer-written. A wild value can only make our messages overwrite each
// other inside that ring: sends never write outside it, never hang.
TEST(HostileSend, ConsumedIndexOfTheReceiver)
{
    for (std::uint32_t consumed : {0x80000000u, 0xffffffffu, 1024u * 1024u, 7u}) {
        SCOPED_TRACE(consumed);
        rc_setup setup;
        ASSERT_NO_FATAL_FAILURE(setup.connect());
        victim &v = setup.v;
        shm_peer &pa = setup.pa, &pb = setup.pb;
        seg_view theirs(pa.addr.dev);
        std::uint64_t ctrl = theirs.desc(pa.addr.qpn).ring_off;
        scribble(pa, pa.addr.dev, ctrl + offsetof(shm::ring_ctrl, consumed), consumed);
        std::uint8_t msg[48] = {};
        int sent = 0;
        for (int i = 0; i < 3000; i++) {
            int rc = vq::post_send(v.a, 0, msg, sizeof msg, 0, vq::WR_INLINE);
            EXPECT_TRUE(rc == 0 || rc == -FI_EAGAIN) << rc;
            sent += rc == 0;
            if (rc == -FI_EAGAIN)
                (void)v.poll(1, 1);
        }
        EXPECT_GT(sent, 0);
        EXPECT_TRUE(v.guards_intact());
        second_qp_works(v, pb);
    }
}

// Connecting reads the peer's header and QP descriptor: a bad one makes the
// setup call fail, and the QP stays in INIT, usable for another connect.
TEST(HostileConnect, BadPeerDescriptorIsAnError)
{
    struct field_case {
        bool header;
        std::size_t offset, size;
        std::uint64_t value;
    };
    const field_case cases[] = {
        {false, offsetof(shm::qp_desc, ring_slots), 4, 0},
        {false, offsetof(shm::qp_desc, ring_slots), 4, 3},
        {false, offsetof(shm::qp_desc, ring_slots), 4, 1u << 31},
        {false, offsetof(shm::qp_desc, ring_off), 8, 1ull << 40},
        {false, offsetof(shm::qp_desc, ring_off), 8, ~0ull - 127},
        {false, offsetof(shm::qp_desc, ring_off), 8, 8}, // inside the header, not the heap
        {true, offsetof(shm::ctx_hdr, max_qp), 4, 0xffffffffu},
        {true, offsetof(shm::ctx_hdr, qp_off), 8, 1ull << 50},
        {true, offsetof(shm::ctx_hdr, heap_size), 8, ~0ull},
        {true, offsetof(shm::ctx_hdr, version), 4, shm::layout_version + 1},
    };
    for (const auto &fc : cases) {
        SCOPED_TRACE(std::to_string(fc.header) + "/" + std::to_string(fc.offset) + "=" + std::to_string(fc.value));
        watchdog wd(30); // per case: a slow build (sanitizers) is not a hang
        victim v;
        shm_peer pa("rc"), pb("rc");
        seg_view theirs(pa.addr.dev);
        std::uint64_t off = (fc.header ? 0 : theirs.desc_off(pa.addr.qpn)) + fc.offset;
        if (fc.size == 8)
            scribble(pa, pa.addr.dev, off, fc.value);
        else
            scribble(pa, pa.addr.dev, off, static_cast<std::uint32_t>(fc.value));
        EXPECT_EQ(victim::connect(v.a, pa.addr), -FI_EINVAL);
        EXPECT_EQ(vq::get_qp_state(v.a), vq::qp_state::init);
        ASSERT_EQ(victim::connect(v.b, pb.addr), 0);
        ASSERT_EQ(pb.connect(vq::get_qp_addr(v.b)), 0);
        second_qp_works(v, pb);
    }
}

// UD: a sender reads the destination's descriptor to claim a ring there. A
// bad one drops the datagram (success, as on a wire); nothing is written.
TEST(HostileConnect, BadUdDestinationIsDropped)
{
    struct field_case {
        std::size_t offset, size;
        std::uint64_t value;
    };
    const field_case cases[] = {
        {offsetof(shm::qp_desc, ud_ring_slots), 4, 0},
        {offsetof(shm::qp_desc, ud_ring_slots), 4, 1u << 31},
        {offsetof(shm::qp_desc, ud_nrings), 4, 0xffffffffu},
        {offsetof(shm::qp_desc, ud_rings_off), 8, ~0ull - 63},
    };
    for (const auto &fc : cases) {
        SCOPED_TRACE(fc.offset);
        watchdog wd(30); // per case: a slow build (sanitizers) is not a hang
        victim v(vq::qp_type::ud);
        ASSERT_EQ(victim::connect(v.a, {}), 0);
        shm_peer pa("ud");
        seg_view theirs(pa.addr.dev);
        std::uint64_t off = theirs.desc_off(pa.addr.qpn) + fc.offset;
        if (fc.size == 8)
            scribble(pa, pa.addr.dev, off, fc.value);
        else
            scribble(pa, pa.addr.dev, off, static_cast<std::uint32_t>(fc.value));
        vq::ah_attr aa;
        aa.dest = pa.addr.dev;
        vq::ah *ah = nullptr;
        ASSERT_EQ(vq::create_ah(v.pd, &aa, &ah), 0);
        std::uint8_t msg[32] = {};
        vq::wr_start(v.a);
        v.a->wr_id = 0xa9;
        v.a->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(v.a);
        vq::wr_set_inline_data(v.a, msg, sizeof msg);
        vq::wr_set_ud_addr(v.a, ah, pa.addr.qpn, 0x1234);
        EXPECT_EQ(vq::wr_complete(v.a), 0);
        auto w = v.poll(1);
        ASSERT_EQ(w.size(), 1u);
        EXPECT_EQ(w[0].status, vq::wc_status::success);
        EXPECT_EQ(vq::destroy_ah(ah), 0);
    }
}

} // namespace
} // namespace shunt::test
