// shm provider, connection management against a hostile process: a real
// second process (cm_hostile) sends malformed CM datagrams through the
// transport the CM uses (UD, the provider's Q_Key) to a live RDM endpoint, a
// MSG passive endpoint and a connecting MSG endpoint: every truncation of the
// header, lengths that disagree with the datagram, sender addresses of 0 and
// 255 bytes, CM data announced but missing, unknown operations, oversized
// datagrams, replies to nothing and a replayed REP, floods. Each case checks
// that nothing is made of it (no completion, no EQ event, no connection) and
// that a well-formed message sent after it by the same process (datagrams of
// one sender arrive in order) is still handled, so the garbage was read and
// ignored; afterwards the same endpoints connect to a good peer (fab_peer)
// and exchange checked bytes. Also a requester that finishes its connection
// and then asks without taking the answers, or for transfers without taking
// what it is sent (their queues stay bounded).
// Waits are bounded.
#include <poll.h>

#include <algorithm>
#include <functional>

#include "cm_hostile_proto.h"
#include "cm_wire.h"
#include "wire.h"
#include "env/log.h"
#include "env/stats.h"
#include "fab_client.h"

using namespace shunt;
using namespace shunt::fabric;
using namespace shunt::test::fab;
namespace hp = shunt::test::cm_hostile;
using shunt::prov::vqprov::cm_msg;
using shunt::prov::vqprov::ep_addr;
namespace cmw = shunt::prov::vqprov;

namespace {

constexpr std::size_t hdr = offsetof(cm_msg, data);

using datagram = std::vector<std::uint8_t>;

/** The hostile process (spawned: posix_spawn of cm_hostile). */
class hostile {
public:
    hostile()
    {
        char *args[] = {const_cast<char *>(CM_HOSTILE_PATH), nullptr};
        if ((fd_ = spawn_on_fd3(CM_HOSTILE_PATH, args, environ, pid_)) < 0)
            return;
        hp::request r;
        r.op = hp::hello;
        hp::response s = call(r, {}, nullptr, [] {});
        qp = s.addr;
        addr.qpn = qp.qpn;
        addr.len = qp.dev.len;
        std::memcpy(addr.name, qp.dev.raw, addr.len);
    }
    ~hostile()
    {
        if (pid_ > 0) {
            hp::request r;
            r.op = hp::quit;
            call(r, {}, nullptr, [] {});
            int st = 0;
            ::waitpid(pid_, &st, 0);
            EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "hostile exit status " << st;
        }
        if (fd_ >= 0)
            ::close(fd_);
    }
    /** Request @p r with payload @p bytes; @p progress runs while the answer
     *  is not there (the victim's progress: its endpoints are manual).
     *  Bounded: 30 s. */
    hp::response call(hp::request r, const datagram &bytes, datagram *out, const std::function<void()> &progress)
    {
        hp::response s;
        s.rc = -FI_EIO;
        r.len = std::uint32_t(bytes.size());
        if (!write_all(fd_, &r, sizeof r) || (!bytes.empty() && !write_all(fd_, bytes.data(), bytes.size()))) {
            ADD_FAILURE() << "hostile did not take request " << r.op;
            return s;
        }
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        for (;;) {
            pollfd pf{fd_, POLLIN, 0};
            if (::poll(&pf, 1, 0) > 0)
                break;
            if (std::chrono::steady_clock::now() > end) {
                ADD_FAILURE() << "hostile did not answer request " << r.op << " within 30 s";
                return s;
            }
            progress();
        }
        std::vector<std::uint8_t> tail;
        if (!read_all(fd_, &s, sizeof s)) {
            ADD_FAILURE() << "hostile did not answer request " << r.op;
            s.rc = -FI_EIO;
            return s;
        }
        tail.resize(r.op == hp::forget ? 0 : s.len);
        if (!tail.empty() && !read_all(fd_, tail.data(), tail.size())) {
            ADD_FAILURE() << "short answer to request " << r.op;
            s.rc = -FI_EIO;
        }
        if (out)
            *out = std::move(tail);
        return s;
    }
    /** Send each of @p list, @p times over, to @p to; driving @p progress. */
    int send(const ep_addr &to, const std::vector<datagram> &list, const std::function<void()> &progress,
             std::uint32_t times = 1, std::size_t vary_at = ~std::size_t(0))
    {
        const datagram all = listed(list);
        hp::request r;
        r.op = hp::send;
        r.n = times;
        r.to = qp_of(to);
        if (vary_at != ~std::size_t(0)) {
            r.a = hp::vary_byte;
            r.b = vary_at;
        }
        return call(r, all, nullptr, progress).rc;
    }
    /** Send @p d @p n times, byte @p at differing in each copy. */
    int flood(const ep_addr &to, const datagram &d, std::uint32_t n, std::size_t at,
              const std::function<void()> &progress)
    {
        return send(to, {d}, progress, n, at);
    }
    /** The next datagram it received (waiting up to @p ms). */
    int recv(datagram &out, const std::function<void()> &progress, int ms = 10000)
    {
        hp::request r;
        r.op = hp::recv;
        r.a = std::uint64_t(ms);
        return call(r, {}, &out, progress).rc;
    }
    /** Drop what it received so far. */
    int forget()
    {
        hp::request r;
        r.op = hp::forget;
        return call(r, {}, nullptr, [] {}).rc;
    }
    /** A new RC QP of its own, in INIT (its ring is free to claim). */
    std::uint32_t rc_qp()
    {
        hp::request r;
        r.op = hp::rc;
        hp::response s = call(r, {}, nullptr, [] {});
        EXPECT_EQ(s.rc, 0);
        return s.qpn;
    }
    /** Another address of the process (a UD QP on the CM Q_Key): an
     *  endpoint takes it for another peer; what it receives `recv` takes. */
    ep_addr another_address()
    {
        hp::request r;
        r.op = hp::ud;
        hp::response s = call(r, {}, nullptr, [] {});
        EXPECT_EQ(s.rc, 0);
        ep_addr a{};
        a.qpn = s.addr.qpn;
        a.len = s.addr.dev.len;
        std::memcpy(a.name, s.addr.dev.raw, a.len);
        return a;
    }
    /** Its RC QP @p qpn (from rc_qp) to RTS, connected to @p to. */
    int rc_connect(std::uint32_t qpn, const vq::qp_addr &to)
    {
        hp::request r;
        r.op = hp::rc_connect;
        r.a = qpn;
        r.to = to;
        return call(r, {}, nullptr, [] {}).rc;
    }
    /** @p n sends with immediate @p imm_wire on its RC QP @p qpn, each
     *  carrying @p payload; it takes none of what comes back on that QP. */
    int rc_send(std::uint32_t qpn, std::uint32_t imm_wire, const datagram &payload, std::uint32_t n,
                const std::function<void()> &progress)
    {
        return rc_send_list(qpn, imm_wire, {payload}, progress, n);
    }
    /** Sends with immediate @p imm_wire on its RC QP @p qpn: each of
     *  @p list, @p times over, in order; it takes none of what comes back. */
    int rc_send_list(std::uint32_t qpn, std::uint32_t imm_wire, const std::vector<datagram> &list,
                     const std::function<void()> &progress, std::uint32_t times = 1)
    {
        hp::request r;
        r.op = hp::rc_send;
        r.a = qpn;
        r.b = imm_wire;
        r.n = times;
        return call(r, listed(list), nullptr, progress).rc;
    }
    /** @p len bytes of its own memory, registered for remote read and
     *  write, byte i hp::region_byte(i): its rkey, and its address in
     *  @p where. */
    std::uint32_t region(std::uint64_t len, std::uint64_t &where)
    {
        hp::request r;
        r.op = hp::region;
        r.a = len;
        datagram out;
        hp::response s = call(r, {}, &out, [] {});
        EXPECT_EQ(s.rc, 0);
        EXPECT_EQ(out.size(), 8u);
        where = 0;
        if (out.size() == 8)
            std::memcpy(&where, out.data(), 8);
        return s.qpn;
    }
    /** Take @p n messages received on its RC QP @p qpn, waiting up to
     *  @p ms; what it took, oldest first, into @p got. */
    int rc_take(std::uint32_t qpn, std::uint32_t n, int ms, std::vector<hp::taken> &got,
                const std::function<void()> &progress)
    {
        hp::request r;
        r.op = hp::rc_take;
        r.a = qpn;
        r.n = n;
        r.b = std::uint64_t(ms);
        datagram out;
        hp::response s = call(r, {}, &out, progress);
        got.resize(out.size() / sizeof(hp::taken));
        if (!got.empty())
            std::memcpy(got.data(), out.data(), got.size() * sizeof(hp::taken));
        return s.rc;
    }
    /** @p list as the requests carry it: [u32 length][bytes] each. */
    static datagram listed(const std::vector<datagram> &list)
    {
        datagram all;
        for (const datagram &d : list) {
            std::uint32_t len = std::uint32_t(d.size());
            all.insert(all.end(), reinterpret_cast<const std::uint8_t *>(&len),
                       reinterpret_cast<const std::uint8_t *>(&len) + 4);
            all.insert(all.end(), d.begin(), d.end());
        }
        return all;
    }
    static vq::qp_addr qp_of(const ep_addr &a)
    {
        vq::qp_addr q{};
        q.qpn = a.qpn;
        q.dev.len = a.len;
        std::memcpy(q.dev.raw, a.name, a.len);
        return q;
    }
    vq::qp_addr qp{};
    ep_addr addr{}; ///< its UD QP as an endpoint address
private:
    pid_t pid_ = 0;
    int fd_ = -1;
};

ep_addr ep_of(const std::uint8_t *a)
{
    ep_addr e;
    std::memcpy(&e, a, sizeof e);
    return e;
}

cm_msg cm(std::uint8_t op, std::uint8_t ep_type, const ep_addr &from, std::uint32_t req_qpn,
           std::uint32_t rep_qpn = 0)
{
    cm_msg m{};
    m.op = op;
    m.ep_type = ep_type;
    m.req_qpn = req_qpn;
    m.rep_qpn = rep_qpn;
    m.from = from;
    return m;
}

datagram bytes(const cm_msg &m, std::size_t len)
{
    datagram d(len, 0);
    if (len) // (data() of an empty vector may be null)
        std::memcpy(d.data(), &m, std::min(len, sizeof m));
    return d;
}
datagram whole(const cm_msg &m) { return bytes(m, hdr + m.datalen); }

/** Malformed variants of @p m (a well-formed message of any operation):
 *  every truncation of its header, CM data lengths that disagree with the
 *  datagram or exceed cm_data_max, sender addresses of 0, 60 and 255 bytes,
 *  an rc_at longer than its field, unknown operations. */
std::vector<datagram> malformed(const cm_msg &m)
{
    std::vector<datagram> out;
    for (std::size_t len = 0; len < hdr; len++)
        out.push_back(bytes(m, len));
    cm_msg x = m;
    x.datalen = 10; // announced, missing
    out.push_back(bytes(x, hdr));
    out.push_back(bytes(x, hdr + 9));
    x.datalen = cmw::cm_data_max + 1; // more than a CM message carries, all of it there
    out.push_back(bytes(x, hdr + x.datalen));
    x.datalen = 0xffff;
    out.push_back(bytes(x, hdr + cmw::cm_data_max));
    for (std::uint8_t flen : {0, 60, 255}) {
        x = m;
        x.from.len = flen;
        out.push_back(whole(x));
    }
    for (std::uint8_t rlen : {60, 255}) {
        x = m;
        x.rc_at.len = rlen;
        out.push_back(whole(x));
    }
    for (std::uint8_t op : {0, 5, 0x80, 0xff}) {
        x = m;
        x.op = op;
        out.push_back(whole(x));
    }
    return out;
}

/** The malformed() variants of a message of each of @p ops, of endpoint
 *  type @p type, from the hostile process @p h naming a new RC QP of its
 *  own and @p rep_qpn. */
std::vector<datagram> malformed_of(hostile &h, std::initializer_list<std::uint8_t> ops, std::uint8_t type,
                                   std::uint32_t rep_qpn)
{
    std::vector<datagram> out;
    for (std::uint8_t op : ops) {
        auto v = malformed(cm(op, type, h.addr, h.rc_qp(), rep_qpn));
        out.insert(out.end(), v.begin(), v.end());
    }
    return out;
}

/** A passive endpoint of @p n listening, its EQ @p n's, and its address. */
void listening(node &n, fid_pep *&pep, std::uint8_t (&addr)[64])
{
    ASSERT_EQ(passive_ep(n.fabric, n.fi, &pep, nullptr), 0);
    ASSERT_EQ(pep_bind(pep, &n.eq->fid, 0), 0);
    ASSERT_EQ(listen(pep), 0);
    std::size_t alen = sizeof addr;
    ASSERT_EQ(getname(&pep->fid, addr, &alen), 0);
    ASSERT_EQ(alen, sizeof(ep_addr));
}

/** What a victim saw: completions and EQ events (there must be none). */
struct seen {
    int cq = 0, cq_err = 0, eq = 0, eq_err = 0;
    std::vector<std::uint32_t> events;
};

/** Drive the victim's progress (its CQ and EQ are read: manual progress),
 *  counting anything that appears. */
std::function<void()> progress_of(fid_cq *cq, fid_eq *eq, seen &s)
{
    return [cq, eq, &s] {
        cq_tagged_entry e{};
        ssize_t n = cq_read(cq, &e, 1);
        if (n == 1)
            s.cq++;
        else if (n == -FI_EAVAIL) {
            cq_err_entry err{};
            (void)cq_readerr(cq, &err, 0);
            s.cq_err++;
        }
        std::uint32_t ev = 0;
        std::uint8_t buf[512];
        ssize_t r = eq_read(eq, &ev, buf, sizeof buf, 0);
        if (r >= 0) {
            s.eq++;
            s.events.push_back(ev);
            if (ev == FI_CONNREQ)
                freeinfo(reinterpret_cast<eq_cm_entry *>(buf)->info);
        } else if (r == -FI_EAVAIL) {
            eq_err_entry err{};
            (void)eq_readerr(eq, &err, 0);
            s.eq_err++;
        }
    };
}

void expect_nothing(const seen &s, const char *what)
{
    EXPECT_EQ(s.cq, 0) << what << ": a completion from garbage";
    EXPECT_EQ(s.cq_err, 0) << what << ": an error completion from garbage";
    EXPECT_EQ(s.eq, 0) << what << ": an EQ event from garbage";
    EXPECT_EQ(s.eq_err, 0) << what << ": an EQ error from garbage";
}

/** Poll @p eq for one event or error, bounded; nothing else is read. */
ssize_t next_event(fid_eq *eq, fid_cq *cq, std::uint32_t &ev, void *buf, std::size_t len, int ms = 10000)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        ssize_t r = eq_read(eq, &ev, buf, len, 0);
        if (r != -FI_EAGAIN)
            return r;
        if (cq) {
            cq_tagged_entry e;
            (void)cq_read(cq, &e, 1);
        }
        if (std::chrono::steady_clock::now() > end)
            return -FI_ETIMEDOUT;
        sched_yield();
    }
}

/** The probe of an RDM endpoint at @p to: the hostile process @p h sends
 *  it a well-formed RDM REQ naming a new RC QP of its own, and gets a REP
 *  for that QP from @p to's UD QP, into @p rep. @p what names the case in
 *  failures; @p progress runs while @p h waits. */
void probe_answered(hostile &h, const ep_addr &to, datagram &rep, const char *what,
                    const std::function<void()> &progress)
{
    const std::uint32_t probe = h.rc_qp();
    ASSERT_EQ(h.send(to, {whole(cm(cmw::cm_req, FI_EP_RDM, h.addr, probe))}, progress), 0);
    ASSERT_EQ(h.recv(rep, progress), 0) << what << ": no answer to a good REQ";
    cm_msg r;
    ASSERT_TRUE(cmw::cm_parse(rep.data(), rep.size(), r));
    EXPECT_EQ(r.op, cmw::cm_rep) << what;
    EXPECT_EQ(r.req_qpn, probe) << what;
    EXPECT_EQ(r.from.qpn, to.qpn) << what;
}

/** The probe of a passive endpoint @p pep of @p n: the hostile process
 *  @p h sends @p before, then a well-formed MSG REQ carrying CM data
 *  "probe" (naming a new RC QP of its own), to @p to_pep. That REQ, and
 *  nothing before it, is an FI_CONNREQ with that data; rejecting it with
 *  @p rej_data (@p rej_len bytes) sends @p h a REJ for its QP, and no
 *  other reply or event follows. @p what names the case in failures;
 *  @p progress runs while @p h waits. */
void probe_rejected(hostile &h, node &n, fid_pep *pep, const ep_addr &to_pep, std::vector<datagram> before,
                    const char *what, const void *rej_data, std::size_t rej_len,
                    const std::function<void()> &progress)
{
    cm_msg q = cm(cmw::cm_req, FI_EP_MSG, h.addr, h.rc_qp());
    q.datalen = 6;
    std::memcpy(q.data, "probe", 6);
    before.push_back(whole(q));
    ASSERT_EQ(h.send(to_pep, before, [] {}), 0);
    std::uint32_t ev = 0;
    std::uint8_t buf[512];
    ssize_t rc = next_event(n.eq, nullptr, ev, buf, sizeof buf);
    ASSERT_EQ(rc, ssize_t(sizeof(eq_cm_entry) + 6)) << what << ": not one FI_CONNREQ for the probe";
    ASSERT_EQ(ev, FI_CONNREQ);
    auto *ce = reinterpret_cast<eq_cm_entry *>(buf);
    EXPECT_STREQ(reinterpret_cast<char *>(eq_cm_data(ce)), "probe");
    ASSERT_EQ(fabric::reject(pep, ce->info->handle, rej_data, rej_len), 0);
    freeinfo(ce->info);
    datagram d;
    ASSERT_EQ(h.recv(d, progress), 0) << what << ": no REJ";
    cm_msg j;
    ASSERT_TRUE(cmw::cm_parse(d.data(), d.size(), j));
    EXPECT_EQ(j.op, cmw::cm_rej);
    EXPECT_EQ(j.req_qpn, q.req_qpn) << what << ": a reply to another REQ";
    EXPECT_EQ(h.recv(d, progress, 50), -FI_ETIMEDOUT) << what << ": a reply to garbage";
    EXPECT_EQ(next_event(n.eq, nullptr, ev, buf, sizeof buf, 50), -FI_ETIMEDOUT) << what << ": another event";
}

/** Echo @p len checked bytes through the peer over endpoint @p ep. */
void echo_checked(fid_ep *ep, fid_cq *cq, fi_addr_t to, std::size_t len, std::uint64_t seed)
{
    std::vector<std::uint8_t> out(len), in(len, 0);
    fill_pattern(out.data(), out.size(), seed);
    context rctx, sctx;
    ASSERT_EQ(recv(ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    std::vector<cq_tagged_entry> got;
    ASSERT_EQ(retry(cq, [&] { return send(ep, out.data(), out.size(), nullptr, to, &sctx); }, &got), 0);
    while (got.size() < 2) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(cq, e), 1);
        got.push_back(e);
    }
    EXPECT_EQ(in, out) << "echoed bytes differ";
}

/** One hostile process for the whole suite (each test makes its own RC QPs
 *  and reads what was sent to it). */
struct cm_hostile : ::testing::Test {
    static void SetUpTestSuite() { hp_ = new hostile; }
    static void TearDownTestSuite()
    {
        delete hp_;
        hp_ = nullptr;
    }
    void SetUp() override { ASSERT_EQ(h.forget(), 0); }
    static hostile *hp_;
    hostile &h = *hp_;
};
hostile *cm_hostile::hp_ = nullptr;

/** An RDM endpoint under attack (manual progress): its node, its vq.cm
 *  statistics block, its address, and a progress function that counts what
 *  it sees into s. */
struct victim {
    node n;
    std::string cmb;
    ep_addr me{};
    seen s;
    std::function<void()> prog;
};

/** Open @p v's endpoint and find its statistics block. */
void open_victim(victim &v)
{
    const std::vector<std::string> before = shunt::env::stats::list();
    ASSERT_EQ(v.n.open(FI_EP_RDM, false), 0);
    v.cmb = cm_block(before);
    ASSERT_NE(v.cmb, "") << "no vq.ep.<n>.cm block for the endpoint";
    v.me = ep_of(v.n.addr);
    v.prog = progress_of(v.n.cq, v.n.eq, v.s);
}

/** A good peer (fab_peer, a real process) exchanges checked bytes with
 *  @p n's RDM endpoint: an eager and a rendezvous echo, patterns from
 *  @p seed and @p seed + 1. */
void good_peer_echoes(node &n, std::uint64_t seed)
{
    peer_proc p{"rdm"};
    fi_addr_t to = FI_ADDR_UNSPEC;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    ASSERT_EQ(p.set_peer(n.addr), 0);
    echo_checked(n.ep, n.cq, to, 3000, seed);
    echo_checked(n.ep, n.cq, to, 100000, seed + 1);
}

} // namespace

// RDM: garbage to the endpoint's UD QP makes no connection and no
// completion; a well-formed REQ after it is answered (so the garbage was
// consumed); the endpoint then exchanges checked bytes with a good peer.
TEST_F(cm_hostile, RdmEndpointIgnoresMalformedCmDatagrams)
{
    const std::vector<std::string> before = shunt::env::stats::list();
    node n;
    ASSERT_EQ(n.open(FI_EP_RDM, false), 0);
    const std::string cmb = cm_block(before);
    ASSERT_NE(cmb, "") << "no vq.ep.<n>.cm block for the endpoint";
    ASSERT_EQ(stat(cmb, "peers"), 0u);
    // fi_enable made the spare: one RC QP, in INIT, for the first connection.
    EXPECT_EQ(stat(cmb, "qps_created"), 1u) << "the spare QP";
    EXPECT_EQ(stat(cmb, "qps"), 1u) << "the spare QP";
    std::size_t alen = sizeof n.addr;
    ASSERT_EQ(getname(&n.ep->fid, n.addr, &alen), 0);
    ASSERT_EQ(alen, sizeof(ep_addr));
    const ep_addr me = ep_of(n.addr);
    seen s;
    auto prog = progress_of(n.cq, n.eq, s);
    std::vector<datagram> bad = malformed_of(h, {cmw::cm_req, cmw::cm_rep, cmw::cm_rej, cmw::cm_rtu}, FI_EP_RDM, 77);
    // Well-formed but meaningless: replies and rejects to nothing; a REQ
    // naming a QP the sender does not have; one from a segment that does not
    // exist; oversized datagrams (more than the UD receive buffers hold),
    // 80 of them: more than the endpoint has receive buffers (64 on shm).
    bad.push_back(whole(cm(cmw::cm_rep, FI_EP_RDM, h.addr, 12345, 678)));
    bad.push_back(whole(cm(cmw::cm_rej, FI_EP_RDM, h.addr, 12345)));
    bad.push_back(whole(cm(cmw::cm_req, FI_EP_RDM, h.addr, 0x7ffffff0)));
    ep_addr nowhere = h.addr;
    std::memcpy(nowhere.name, "no-such-segment", 15);
    nowhere.len = 15;
    bad.push_back(whole(cm(cmw::cm_req, FI_EP_RDM, nowhere, 99)));
    // What the endpoint logs of it, at the provider's default level.
    ASSERT_EQ(shunt::env::log::set_levels("fabric:warning"), 0);
    testing::internal::CaptureStderr();
    ASSERT_EQ(h.send(me, bad, prog), 0);
    cm_msg big = cm(cmw::cm_req, FI_EP_RDM, h.addr, 0x7ffffff1);
    ASSERT_EQ(h.send(me, {bytes(big, 600), bytes(big, 4096)}, prog, 40), 0);
    // A flood: a thousand malformed ones (a byte of the sender's address
    // differing in each) and 500 well-formed REQs from as many segments that
    // do not exist.
    cm_msg f = cm(cmw::cm_req, FI_EP_RDM, h.addr, 5);
    f.from.len = 0;
    ASSERT_EQ(h.flood(me, whole(f), 1000, offsetof(cm_msg, from.name) + 1, prog), 0);
    ASSERT_EQ(h.flood(me, whole(cm(cmw::cm_req, FI_EP_RDM, nowhere, 6)), 500, offsetof(cm_msg, from.name) + 3,
                      prog),
              0);
    // And 500 from the hostile process's own address, each naming another
    // QP it does not have.
    ASSERT_EQ(h.flood(me, whole(cm(cmw::cm_req, FI_EP_RDM, h.addr, 0x7fff0000)), 500, offsetof(cm_msg, req_qpn),
                      prog),
              0);
    for (int i = 0; i < 2000; i++)
        prog();
    // None of the well-formed REQs above could be accepted (the QP or the
    // segment they name does not exist): each was refused before the
    // endpoint created a QP for it or took the spare, and left no connection
    // record behind.
    EXPECT_EQ(stat(cmb, "peers"), 0u) << "records of connections that were never made";
    EXPECT_GE(stat(cmb, "refused"), 1002u);
    EXPECT_EQ(stat(cmb, "qps_created"), 1u) << "RC QPs created for requests that were refused";
    EXPECT_EQ(stat(cmb, "qps"), 1u);
    // Refusals are logged at the first, second, fourth ... one: a flood of
    // requests is not a flood of log lines.
    const std::string log = testing::internal::GetCapturedStderr();
    std::size_t lines = 0;
    for (std::size_t at = 0; (at = log.find("cannot accept a connection", at)) != std::string::npos; at++)
        lines++;
    EXPECT_GE(lines, 1u) << "a refused request is not logged at all";
    EXPECT_LE(lines, 12u) << "one log line per refused request";
    // The probe: a REQ for a QP the hostile process does have is answered.
    datagram rep;
    probe_answered(h, me, rep, "after the garbage", prog);
    if (HasFatalFailure())
        return;
    EXPECT_EQ(stat(cmb, "peers"), 1u) << "the accepted REQ: one record";
    EXPECT_EQ(stat(cmb, "qps_created"), 1u) << "the accepted REQ did not take the spare";
    EXPECT_EQ(stat(cmb, "qps"), 1u);
    // Nothing else came back: no REP for garbage.
    datagram more;
    EXPECT_EQ(h.recv(more, prog, 50), -FI_ETIMEDOUT) << "a reply to garbage";
    // A replayed REP, to the endpoint that is now connected to the hostile
    // process (it accepted the probe), changes nothing.
    ASSERT_EQ(h.send(me, {whole(cm(cmw::cm_rep, FI_EP_RDM, h.addr, 0, h.rc_qp())), rep}, prog, 20), 0);
    for (int i = 0; i < 2000; i++)
        prog();
    expect_nothing(s, "RDM endpoint");
    // Afterwards: a good peer, checked bytes both ways.
    good_peer_echoes(n, 21);
    n.close();
}

// RDM: a REQ of another endpoint type (an MSG endpoint connecting, or a
// type the provider has no connections for) is refused with a REJ, even
// when the QP it names could be connected to, and leaves no connection
// record; an RDM REQ after them is answered.
TEST_F(cm_hostile, RdmEndpointRefusesRequestsOfAnotherType)
{
    victim v;
    open_victim(v);
    if (HasFatalFailure())
        return;
    auto &[n, cmb, me, s, prog] = v;
    for (std::uint8_t type : {std::uint8_t(FI_EP_MSG), std::uint8_t(FI_EP_DGRAM), std::uint8_t(0)}) {
        const std::uint32_t q = h.rc_qp();
        ASSERT_EQ(h.send(me, {whole(cm(cmw::cm_req, type, h.addr, q))}, prog), 0);
        datagram d;
        ASSERT_EQ(h.recv(d, prog), 0) << "no answer to a REQ of type " << int(type);
        cm_msg r;
        ASSERT_TRUE(cmw::cm_parse(d.data(), d.size(), r));
        EXPECT_EQ(r.op, cmw::cm_rej) << "a REQ of type " << int(type) << " was not refused";
        EXPECT_EQ(r.req_qpn, q);
        EXPECT_EQ(stat(cmb, "peers"), 0u) << "a REQ of type " << int(type) << " made a connection record";
    }
    datagram rep;
    probe_answered(h, me, rep, "after REQs of another type", prog);
    EXPECT_EQ(stat(cmb, "peers"), 1u);
    for (int i = 0; i < 200; i++)
        prog();
    expect_nothing(s, "RDM endpoint");
    n.close();
}

// RDM: a process that asks for connections and never finishes them (REQs
// naming free RC QPs of its own that it never connects or sends on, from
// 12 addresses of its own: a second REQ from one address would be taken as
// that peer restarting, and replace its first) gets at most
// cm_half_open_max of the endpoint's RC QPs, not all of them: a good
// peer still connects and exchanges checked bytes meanwhile, and the
// unfinished connections are given up after SHUNT_VQ_CONNECT_TIMEOUT_MS,
// their QPs freed. Waits are bounded.
TEST_F(cm_hostile, RdmEndpointFreesConnectionsNeverFinished)
{
    ASSERT_EQ(::setenv("SHUNT_VQ_CONNECT_TIMEOUT_MS", "1500", 1), 0);
    const std::vector<std::string> before = shunt::env::stats::list();
    node n;
    const int opened = n.open(FI_EP_RDM, false);
    ::unsetenv("SHUNT_VQ_CONNECT_TIMEOUT_MS");
    ASSERT_EQ(opened, 0);
    const std::string cmb = cm_block(before);
    ASSERT_NE(cmb, "");
    std::size_t alen = sizeof n.addr;
    ASSERT_EQ(getname(&n.ep->fid, n.addr, &alen), 0);
    const ep_addr me = ep_of(n.addr);
    seen s;
    auto prog = progress_of(n.cq, n.eq, s);
    // More REQs than the endpoint has RC QPs (63 on shm), each for another
    // free QP of the hostile process, from its addresses in turn.
    std::vector<ep_addr> from;
    for (int i = 0; i < 12; i++)
        from.push_back(h.another_address());
    std::vector<datagram> reqs;
    for (int i = 0; i < 70; i++)
        reqs.push_back(whole(cm(cmw::cm_req, FI_EP_RDM, from[std::size_t(i) % from.size()], h.rc_qp())));
    ASSERT_EQ(h.send(me, reqs, prog), 0);
    for (int i = 0; i < 2000; i++)
        prog();
    EXPECT_EQ(stat(cmb, "half_open"), cmw::cm_half_open_max) << "unfinished connections of one process";
    EXPECT_EQ(stat(cmb, "qps"), cmw::cm_half_open_max) << "RC QPs held for connections never finished";
    EXPECT_GE(stat(cmb, "refused"), 70u - cmw::cm_half_open_max);
    // Meanwhile a good peer connects, and bytes flow both ways.
    peer_proc p{"rdm"};
    fi_addr_t to = FI_ADDR_UNSPEC;
    ASSERT_EQ(av_insert(n.av, p.addr, 1, &to, 0, nullptr), 1);
    ASSERT_EQ(p.set_peer(n.addr), 0);
    echo_checked(n.ep, n.cq, to, 3000, 61);
    if (HasFatalFailure())
        return;
    // The unfinished ones are given up after the timeout (1.5 s here;
    // waited for up to 10 s), and only the good peer's QP is left.
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         (stat(cmb, "half_open") != 0 || stat(cmb, "qps") != 1) && std::chrono::steady_clock::now() < end;)
        prog();
    EXPECT_EQ(stat(cmb, "half_open"), 0u) << "unfinished connections not given up";
    EXPECT_EQ(stat(cmb, "expired"), cmw::cm_half_open_max);
    EXPECT_EQ(stat(cmb, "qps"), 1u) << "QPs of unfinished connections not freed";
    expect_nothing(s, "RDM endpoint");
    // The good peer's connection was finished, so it stays.
    echo_checked(n.ep, n.cq, to, 100000, 62);
    n.close();
}

/** The hostile process @p h connects to the RDM endpoint at @p me as a
 *  requester does, from its address @p from: a REQ naming a new RC QP of
 *  its own (into @p mine), the
 *  endpoint's REP, that QP to RTS towards the one the REP named, and its
 *  first message (w_hello), which finishes the connection (the half_open
 *  gauge of the endpoint's vq.cm block @p cmb is back to 0). REQs of the
 *  endpoint's own (when it is connecting to @p h too) are passed over. */
void connect_as_requester(hostile &h, const ep_addr &from, const ep_addr &me, const std::string &cmb,
                          const std::function<void()> &prog, std::uint32_t &mine)
{
    mine = h.rc_qp();
    ASSERT_EQ(h.send(me, {whole(cm(cmw::cm_req, FI_EP_RDM, from, mine))}, prog), 0);
    cm_msg rep{};
    for (int i = 0; i < 16 && rep.op != cmw::cm_rep; i++) {
        datagram d;
        ASSERT_EQ(h.recv(d, prog), 0) << "no answer to a good REQ";
        ASSERT_TRUE(cmw::cm_parse(d.data(), d.size(), rep));
        ASSERT_TRUE(rep.op == cmw::cm_rep || rep.op == cmw::cm_req) << "not a REP: op " << int(rep.op);
    }
    ASSERT_EQ(rep.op, cmw::cm_rep);
    ASSERT_EQ(rep.req_qpn, mine);
    vq::qp_addr theirs = hostile::qp_of(rep.from);
    theirs.qpn = rep.rep_qpn;
    ASSERT_EQ(h.rc_connect(mine, theirs), 0);
    ASSERT_EQ(h.rc_send(mine, cmw::imm_wire(cmw::w_hello, 0, 0), {}, 1, prog), 0);
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         stat(cmb, "half_open") != 0 && std::chrono::steady_clock::now() < end;)
        prog();
    ASSERT_EQ(stat(cmb, "half_open"), 0u) << "the hostile process's w_hello did not finish its connection";
}

// RDM: a request marked as asked by fi_av_insert (cm_f_eager) is accepted
// only while at least half of the endpoint's QP slots are free, so that the
// peers that insert it cannot take the slots its own traffic needs; a
// request without the mark (what the peer's first operation sends) is
// accepted then. The hostile process takes slots by finishing connections
// as a requester does, each from another address of its own (a second
// from one address replaces the first: that peer restarted).
TEST_F(cm_hostile, RdmEndpointAcceptsInsertsRequestsOnlyWithHalfItsSlotsFree)
{
    victim v;
    open_victim(v);
    if (HasFatalFailure())
        return;
    auto &[n, cmb, me, s, prog] = v;
    const std::uint32_t half = 63 / 2 + 1; // slots taken where an eager request is refused (63 on shm)
    for (std::uint32_t i = 0; i < half; i++) {
        std::uint32_t mine = 0;
        connect_as_requester(h, h.another_address(), me, cmb, prog, mine); // a finished connection keeps its slot
        if (HasFatalFailure())
            return;
    }
    ASSERT_EQ(h.forget(), 0);
    const std::uint64_t refused = stat(cmb, "refused");
    cm_msg q = cm(cmw::cm_req, FI_EP_RDM, h.addr, h.rc_qp());
    q.flags = cmw::cm_f_eager;
    ASSERT_EQ(h.send(me, {whole(q)}, prog), 0);
    datagram d;
    EXPECT_NE(h.recv(d, prog, 500), 0) << "an eager REQ accepted with half the slots taken";
    EXPECT_EQ(stat(cmb, "refused"), refused + 1);
    datagram rep;
    probe_answered(h, me, rep, "an unmarked REQ with half the slots taken", prog);
    expect_nothing(s, "RDM endpoint");
    n.close();
}

// RDM: a peer that asks without taking what it gets back. The hostile
// process connects to the endpoint as a requester does (REQ naming an RC QP
// of its own, the REP's QP, then its w_hello), then sends 80000 small RMA
// reads naming a region that does not exist and never takes a receive on its
// QP. Each read is answered (an error fin); the answers fill the endpoint's
// send queue and wait, up to the bound of twice max_ctx x the send-queue
// depth (2 x 16 x 1024 on shm, doc/guides/fabric.md); the rest are dropped
// and counted. Meanwhile and afterwards a good peer exchanges checked bytes
// with the endpoint. Waits are bounded.
TEST_F(cm_hostile, RdmEndpointBoundsAnswersToAPeerThatTakesNone)
{
    victim v;
    open_victim(v);
    if (HasFatalFailure())
        return;
    auto &[n, cmb, me, s, prog] = v;
    std::uint32_t mine = 0;
    connect_as_requester(h, h.addr, me, cmb, prog, mine);
    if (HasFatalFailure())
        return;
    cmw::rma_hdr rd{};
    rd.addr = 0x10000;
    rd.key = 0xbad0bad0;
    rd.len = 8;
    rd.id = 1;
    datagram req(sizeof rd);
    std::memcpy(req.data(), &rd, sizeof rd);
    constexpr std::uint32_t reads = 80000, bound = 2 * 16 * 1024;
    ASSERT_EQ(h.rc_send(mine, cmw::imm_wire(cmw::w_read_req, 0, 0), req, reads, prog), 0)
        << "the endpoint stopped taking requests";
    for (int i = 0; i < 1000; i++)
        prog();
    const std::uint64_t waiting = stat(cmb, "ctl_waiting"), dropped = stat(cmb, "ctl_dropped");
    EXPECT_GT(waiting, 0u) << "no answer waits for send-queue room: the test did not fill the queue";
    EXPECT_EQ(waiting, bound) << "answers queued beyond the bound, or fewer than it";
    // Before answers queue, the endpoint's send queue (1024 on shm) and the
    // hostile QP's receive ring (1024 slots) take some.
    EXPECT_GE(dropped, reads - bound - 2 * 1024) << "fewer answers dropped than sent beyond the bound and the queues";
    EXPECT_LE(dropped, std::uint64_t(reads)) << "more answers dropped than reads sent";
    // A good peer is served meanwhile.
    good_peer_echoes(n, 63);
    expect_nothing(s, "RDM endpoint");
    n.close();
}

// RDM endpoint: a requester that asks for transfers and takes nothing it is
// sent. The hostile process connects as a requester does, fills the
// endpoint's send queue towards it with answers it does not take (small
// reads of a region that does not exist), then asks for RMA writes into the
// endpoint's memory, each the description of a piece of a region of its own
// that the endpoint is to pull (w_write_rts: a move). The pulls wait for
// send-queue room, up to the bound of max_ctx x the send-queue depth (16 x
// 1024 on shm); the requests beyond it are refused (FI_EAGAIN), counted.
// Then the hostile process takes everything sent to it: every waiting pull
// is made once, its bytes where its request said, no refused one is; every
// request is answered exactly once; nothing is left waiting; and a good
// peer exchanges checked bytes with the endpoint. Waits are bounded.
TEST_F(cm_hostile, RdmEndpointBoundsTransfersForAPeerThatTakesNone)
{
    victim v;
    open_victim(v);
    if (HasFatalFailure())
        return;
    auto &[n, cmb, me, s, prog] = v;
    std::uint32_t mine = 0;
    connect_as_requester(h, h.addr, me, cmb, prog, mine);
    if (HasFatalFailure())
        return;
    constexpr std::uint32_t bound = 16 * 1024, refused = 1000, writes = bound + refused, piece = 64;
    std::vector<std::uint8_t> target(std::size_t(writes) * piece, 0);
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(n.domain, target.data(), target.size(), FI_REMOTE_WRITE, 0, 0, 0, &mr, nullptr), 0);
    std::uint64_t src = 0;
    const std::uint32_t rkey = h.region(target.size(), src);
    ASSERT_NE(src, 0u);

    // Answers the hostile process does not take: they fill the endpoint's
    // send queue towards it (1024 on shm) and its ring (1024 slots), the
    // rest wait.
    constexpr std::uint32_t fill = 4096;
    constexpr std::uint64_t read_id = 1, write_id = 1000000;
    cmw::rma_hdr rd{};
    rd.addr = 0x10000;
    rd.key = 0xbad0bad0;
    rd.len = 8;
    rd.id = read_id;
    datagram req(sizeof rd);
    std::memcpy(req.data(), &rd, sizeof rd);
    ASSERT_EQ(h.rc_send(mine, cmw::imm_wire(cmw::w_read_req, 0, 0), req, fill, prog), 0);
    for (int i = 0; i < 1000; i++)
        prog();
    ASSERT_GT(stat(cmb, "ctl_waiting"), 0u) << "the send queue towards the peer is not full: the test did not fill it";

    // The writes, piece i of the region to piece i of the target.
    std::vector<datagram> list;
    for (std::uint32_t i = 0; i < writes; i++) {
        cmw::rma_hdr w{};
        w.addr = reinterpret_cast<std::uint64_t>(target.data()) + std::uint64_t(i) * piece;
        w.key = mr_key(mr);
        w.len = piece;
        w.id = write_id + i;
        cmw::rndv_desc d{};
        d.total = piece;
        d.niov = 1;
        d.iov[0].addr = src + std::uint64_t(i) * piece;
        d.iov[0].len = piece;
        d.iov[0].rkey = rkey;
        datagram b(sizeof w + cmw::rndv_desc_len(1));
        std::memcpy(b.data(), &w, sizeof w);
        std::memcpy(b.data() + sizeof w, &d, cmw::rndv_desc_len(1));
        list.push_back(std::move(b));
    }
    ASSERT_EQ(h.rc_send_list(mine, cmw::imm_wire(cmw::w_write_rts, 0, 0), list, prog), 0)
        << "the endpoint stopped taking requests";
    for (int i = 0; i < 1000; i++)
        prog();
    EXPECT_EQ(stat(cmb, "moves_waiting"), bound) << "pulls queued beyond the bound, or fewer than it";
    EXPECT_EQ(stat(cmb, "moves_refused"), refused) << "not exactly the requests beyond the bound refused";
    EXPECT_EQ(std::count(target.begin(), target.end(), 0), std::ptrdiff_t(target.size()))
        << "a pull made while the send queue was full";

    // The hostile process takes everything: the answers to the reads, the
    // refusals, and the fins of the pulls as they are made.
    std::vector<hp::taken> got;
    const int rc = h.rc_take(mine, fill + writes, 30000, got, prog);
    EXPECT_EQ(rc, 0) << "took " << got.size() << " of " << fill + writes << " answers";
    std::uint32_t read_answers = 0, other = 0;
    std::vector<int> answered(writes, 0), err(writes, -1);
    for (const hp::taken &t : got) {
        cmw::fin_body f{};
        if (t.imm != cmw::imm_wire(cmw::w_fin, 0, 0) || t.len != sizeof f) {
            other++;
            continue;
        }
        std::memcpy(&f, t.head, sizeof f);
        if (f.id == read_id && f.err != 0) {
            read_answers++;
        } else if (f.id >= write_id && f.id < write_id + writes) {
            answered[f.id - write_id]++;
            err[f.id - write_id] = f.err;
        } else {
            other++;
        }
    }
    EXPECT_EQ(read_answers, fill) << "not every bad read answered once, with an error";
    EXPECT_EQ(other, 0u) << "messages that answer nothing the peer asked";
    std::uint32_t once = 0, made = 0, refusals = 0, bad_bytes = 0;
    for (std::uint32_t i = 0; i < writes; i++) {
        once += answered[i] == 1;
        const bool in_bound = i < bound;
        if (in_bound && err[i] == 0)
            made++;
        if (!in_bound && err[i] == FI_EAGAIN)
            refusals++;
        for (std::uint32_t k = 0; k < piece; k++) {
            const std::uint8_t want = in_bound ? hp::region_byte(std::uint64_t(i) * piece + k) : 0;
            bad_bytes += target[std::size_t(i) * piece + k] != want;
        }
    }
    EXPECT_EQ(once, writes) << "a write answered more than once, or not at all";
    EXPECT_EQ(made, bound) << "not every write within the bound made";
    EXPECT_EQ(refusals, refused) << "not every write beyond the bound refused with FI_EAGAIN";
    EXPECT_EQ(bad_bytes, 0u) << "bytes of the target not what the writes (and refusals) leave";
    EXPECT_EQ(stat(cmb, "moves_waiting"), 0u);
    EXPECT_EQ(stat(cmb, "ctl_waiting"), 0u);
    EXPECT_EQ(stat(cmb, "ctl_dropped"), 0u) << "answers dropped below their bound";

    // A good peer is served.
    good_peer_echoes(n, 65);
    expect_nothing(s, "RDM endpoint");
    EXPECT_EQ(close(&mr->fid), 0);
    n.close();
}

// RDM: a crossing connection. The endpoint connects to the hostile process
// (a send to it: its REQ is never answered), and meanwhile accepts the
// hostile process's own connection. Until its own QP is up, what it owes
// the peer goes over the QP it accepted: here a rendezvous the hostile
// process announces over its QP, whose pull (an RDMA read of the hostile
// process's memory) and fin (to the hostile process) travel on the
// accepted QP. The receive completes with the bytes, and the fin arrives
// once, with success.
TEST_F(cm_hostile, RdmEndpointServesAPeerOverTheQpItAcceptedWhileItsOwnConnects)
{
    victim v;
    open_victim(v);
    if (HasFatalFailure())
        return;
    auto &[n, cmb, me, s, prog] = v;
    // Completions are looked at here, not counted as garbage.
    std::vector<cq_tagged_entry> done;
    auto drive = [&, &n = n] {
        cq_tagged_entry e{};
        if (cq_read(n.cq, &e, 1) == 1)
            done.push_back(e);
    };
    fi_addr_t to = FI_ADDR_UNSPEC;
    ASSERT_EQ(av_insert(n.av, &h.addr, 1, &to, 0, nullptr), 1);
    std::uint8_t hi[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    context sctx{};
    ASSERT_EQ(send(n.ep, hi, sizeof hi, nullptr, to, &sctx), 0) << "queued while the endpoint connects";
    datagram d;
    ASSERT_EQ(h.recv(d, drive), 0) << "the endpoint sent no REQ";
    cm_msg req;
    ASSERT_TRUE(cmw::cm_parse(d.data(), d.size(), req));
    ASSERT_EQ(req.op, cmw::cm_req);
    std::uint32_t mine = 0;
    connect_as_requester(h, h.addr, me, cmb, drive, mine);
    if (HasFatalFailure())
        return;

    constexpr std::size_t len = 20000;
    std::uint64_t src = 0;
    const std::uint32_t rkey = h.region(len, src);
    std::vector<std::uint8_t> in(len + 100, 0);
    context rctx{};
    ASSERT_EQ(recv(n.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    constexpr std::uint64_t ack = 0xac4;
    cmw::rndv_desc rd{};
    rd.total = len;
    rd.niov = 1;
    rd.iov[0].addr = src;
    rd.iov[0].len = len;
    rd.iov[0].rkey = rkey;
    datagram rts(8 + cmw::rndv_desc_len(1));
    std::memcpy(rts.data(), &ack, 8);
    std::memcpy(rts.data() + 8, &rd, cmw::rndv_desc_len(1));
    ASSERT_EQ(h.rc_send(mine, cmw::imm_wire(cmw::w_rts, cmw::wf_ack, 0), rts, 1, drive), 0);
    std::vector<hp::taken> got;
    EXPECT_EQ(h.rc_take(mine, 1, 10000, got, drive), 0) << "no fin on the QP the endpoint accepted";
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].imm, cmw::imm_wire(cmw::w_fin, 0, 0));
    cmw::fin_body f{};
    ASSERT_EQ(got[0].len, sizeof f);
    std::memcpy(&f, got[0].head, sizeof f);
    EXPECT_EQ(f.id, ack);
    EXPECT_EQ(f.err, 0) << "the pull failed at the endpoint";
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         done.empty() && std::chrono::steady_clock::now() < end;)
        drive();
    ASSERT_EQ(done.size(), 1u) << "the receive did not complete (or something else did)";
    EXPECT_EQ(done[0].op_context, &rctx);
    EXPECT_EQ(done[0].len, len);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < len; i++)
        bad += in[i] != hp::region_byte(i);
    EXPECT_EQ(bad, 0u) << "bytes pulled not the hostile process's";
    // Its own connection is still not up: the hostile process never answered.
    EXPECT_EQ(h.recv(d, drive, 300), 0) << "the endpoint stopped asking (it repeats its REQ)";
    cm_msg again;
    ASSERT_TRUE(cmw::cm_parse(d.data(), d.size(), again));
    EXPECT_EQ(again.op, cmw::cm_req);
    EXPECT_EQ(again.req_qpn, req.req_qpn) << "the endpoint's attempt changed";
    n.close();
}

// MSG passive endpoint: a REQ of another endpoint type (an RDM endpoint's
// hidden connection set-up) is no FI_CONNREQ and gets no reply; an MSG REQ
// sent after it is one.
TEST_F(cm_hostile, PassiveEndpointIgnoresRequestsOfAnotherType)
{
    node n;
    ASSERT_EQ(n.open(FI_EP_MSG, false), 0);
    fid_pep *pep = nullptr;
    std::uint8_t pa[64];
    listening(n, pep, pa);
    if (HasFatalFailure())
        return;
    const ep_addr to_pep = ep_of(pa);
    std::vector<datagram> other;
    for (std::uint8_t type : {std::uint8_t(FI_EP_RDM), std::uint8_t(FI_EP_DGRAM), std::uint8_t(0)})
        other.push_back(whole(cm(cmw::cm_req, type, h.addr, h.rc_qp())));
    probe_rejected(h, n, pep, to_pep, other, "REQs of another type", nullptr, 0, [] {});
    EXPECT_EQ(close(&pep->fid), 0);
    n.close();
}

// MSG passive endpoint: garbage makes no FI_CONNREQ; a well-formed REQ sent
// after it does, and is rejected (the hostile process gets the REJ); the
// passive endpoint then accepts a real connection and bytes flow.
TEST_F(cm_hostile, PassiveEndpointIgnoresMalformedCmDatagrams)
{
    node n;
    ASSERT_EQ(n.open(FI_EP_MSG, false), 0);
    fid_pep *pep = nullptr;
    std::uint8_t pa[64];
    listening(n, pep, pa);
    if (HasFatalFailure())
        return;
    const ep_addr to_pep = ep_of(pa);
    seen s;
    auto prog = progress_of(n.cq, n.eq, s);
    std::vector<datagram> bad = malformed_of(h, {cmw::cm_req, cmw::cm_rep, cmw::cm_rej, cmw::cm_rtu}, FI_EP_MSG, 5);
    // REP, REJ and RTU are not for a passive endpoint.
    for (std::uint8_t op : {cmw::cm_rep, cmw::cm_rej, cmw::cm_rtu})
        bad.push_back(whole(cm(op, FI_EP_MSG, h.addr, 1, 2)));
    ASSERT_EQ(h.send(to_pep, bad, prog), 0);
    cm_msg big = cm(cmw::cm_req, FI_EP_MSG, h.addr, 0x7ffffff1);
    ASSERT_EQ(h.send(to_pep, {bytes(big, 600), bytes(big, 4096)}, prog, 40), 0);
    cm_msg f = cm(cmw::cm_req, FI_EP_MSG, h.addr, 5);
    f.datalen = 200;
    ASSERT_EQ(h.flood(to_pep, bytes(f, hdr + 128), 1000, offsetof(cm_msg, data) + 7, prog), 0);
    for (int i = 0; i < 2000; i++)
        prog();
    expect_nothing(s, "passive endpoint");
    probe_rejected(h, n, pep, to_pep, {}, "the good REQ after the garbage", "go", 3, prog);
    if (HasFatalFailure())
        return;

    // A well-formed REQ naming a QP its sender does not have is a request
    // like any other, but accepting it makes no connection: accept fails
    // with FI_ECONNABORTED, no FI_CONNECTED follows, and the request is
    // gone (a second accept or a reject of it: -FI_EINVAL).
    std::uint32_t ev = 0;
    std::uint8_t buf[512];
    auto *ce = reinterpret_cast<eq_cm_entry *>(buf);
    datagram rej;
    cm_msg lie = cm(cmw::cm_req, FI_EP_MSG, h.addr, 0x7ffffff0);
    ASSERT_EQ(h.send(to_pep, {whole(lie)}, [] {}), 0);
    ASSERT_EQ(next_event(n.eq, nullptr, ev, buf, sizeof buf), ssize_t(sizeof(eq_cm_entry)));
    ASSERT_EQ(ev, FI_CONNREQ);
    {
        fid_ep *a = nullptr;
        fid_cq *acq = nullptr;
        cq_attr aca;
        aca.format = FI_CQ_FORMAT_TAGGED;
        ASSERT_EQ(cq_open(n.domain, &aca, &acq, nullptr), 0);
        ASSERT_EQ(endpoint(n.domain, ce->info, &a, nullptr), 0);
        fid_t handle = ce->info->handle;
        freeinfo(ce->info);
        ASSERT_EQ(ep_bind(a, &acq->fid, FI_TRANSMIT | FI_RECV), 0);
        ASSERT_EQ(ep_bind(a, &n.eq->fid, 0), 0);
        EXPECT_EQ(accept(a, nullptr, 0), -FI_ECONNABORTED);
        EXPECT_EQ(accept(a, nullptr, 0), -FI_EINVAL) << "accepted a request that is gone";
        EXPECT_EQ(fabric::reject(pep, handle, nullptr, 0), -FI_EINVAL);
        EXPECT_EQ(next_event(n.eq, acq, ev, buf, sizeof buf, 50), -FI_ETIMEDOUT) << "an event for it";
        std::size_t plen = sizeof pa;
        std::uint8_t peer[64];
        EXPECT_EQ(getpeer(a, peer, &plen), -FI_ENOTCONN);
        EXPECT_EQ(close(&a->fid), 0);
        EXPECT_EQ(close(&acq->fid), 0);
    }
    EXPECT_EQ(h.recv(rej, prog, 50), -FI_ETIMEDOUT) << "a reply to a request that was not accepted";

    // Afterwards a real connection through the same passive endpoint: an
    // endpoint of this process connects, the accepted one echoes.
    fid_ep *cl = nullptr, *sv = nullptr;
    fid_cq *scq = nullptr;
    cq_attr ca;
    ca.format = FI_CQ_FORMAT_TAGGED;
    ASSERT_EQ(cq_open(n.domain, &ca, &scq, nullptr), 0);
    ASSERT_EQ(endpoint(n.domain, n.fi, &cl, nullptr), 0);
    ASSERT_EQ(ep_bind(cl, &n.cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(cl, &n.eq->fid, 0), 0);
    ASSERT_EQ(connect(cl, pa, "real", 5), 0);
    ssize_t rc = next_event(n.eq, n.cq, ev, buf, sizeof buf);
    ASSERT_EQ(rc, ssize_t(sizeof(eq_cm_entry) + 5));
    ASSERT_EQ(ev, FI_CONNREQ);
    ASSERT_EQ(endpoint(n.domain, ce->info, &sv, nullptr), 0);
    freeinfo(ce->info);
    ASSERT_EQ(ep_bind(sv, &scq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(sv, &n.eq->fid, 0), 0);
    ASSERT_EQ(accept(sv, nullptr, 0), 0);
    int connected = 0;
    for (int i = 0; i < 2; i++) {
        rc = next_event(n.eq, n.cq, ev, buf, sizeof buf);
        ASSERT_GT(rc, 0) << shunt::strerror(int(rc));
        ASSERT_EQ(ev, FI_CONNECTED);
        connected++;
    }
    EXPECT_EQ(connected, 2);
    std::vector<std::uint8_t> out(2000), in(2000, 0), back(2000, 0);
    fill_pattern(out.data(), out.size(), 31);
    context c1, c2, c3, c4;
    ASSERT_EQ(recv(sv, in.data(), in.size(), nullptr, 0, &c1), 0);
    ASSERT_EQ(recv(cl, back.data(), back.size(), nullptr, 0, &c2), 0);
    ASSERT_EQ(retry(n.cq, [&] { return send(cl, out.data(), out.size(), nullptr, 0, &c3); }), 0);
    cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(scq, e), 1);
    ASSERT_EQ(in, out);
    ASSERT_EQ(retry(scq, [&] { return send(sv, in.data(), in.size(), nullptr, 0, &c4); }), 0);
    int got = 0;
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         got < 2 && std::chrono::steady_clock::now() < end;) {
        if (cq_read(n.cq, &e, 1) == 1)
            got++;
        (void)cq_read(scq, &e, 1);
    }
    EXPECT_EQ(got, 2);
    EXPECT_EQ(back, out);
    (void)close(&cl->fid);
    (void)close(&sv->fid);
    (void)close(&scq->fid);
    EXPECT_EQ(close(&pep->fid), 0);
    n.close();
}

namespace {

/** A MSG endpoint of @p n connecting to the hostile process: its REQ. */
void connecting(node &n, hostile &h, fid_ep *&ep, cm_msg &req, const std::function<void()> &prog)
{
    ASSERT_EQ(endpoint(n.domain, n.fi, &ep, nullptr), 0);
    ASSERT_EQ(ep_bind(ep, &n.cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(ep, &n.eq->fid, 0), 0);
    ASSERT_EQ(connect(ep, &h.addr, "hi", 3), 0);
    datagram d;
    ASSERT_EQ(h.recv(d, prog), 0) << "the REQ of connect";
    ASSERT_TRUE(cmw::cm_parse(d.data(), d.size(), req));
    ASSERT_EQ(req.op, cmw::cm_req);
    ASSERT_EQ(req.datalen, 3);
}

} // namespace

// A connecting MSG endpoint: malformed replies, replies to another connect
// and operations that are not replies change nothing (a REJ after them is
// what fails the connect, with its data); a well-formed REP naming a QP the
// endpoint cannot connect to fails it with FI_ECONNABORTED; a replayed REP
// once connected changes nothing. Then a new endpoint of the same domain
// connects to a good peer and echoes checked bytes.
TEST_F(cm_hostile, ConnectingMsgEndpointIgnoresMalformedReplies)
{
    node n;
    ASSERT_EQ(n.open(FI_EP_MSG, false), 0);
    seen s;
    auto prog = progress_of(n.cq, n.eq, s);
    fid_ep *ep = nullptr;
    cm_msg req;
    connecting(n, h, ep, req, prog);
    const ep_addr victim = req.from;
    std::vector<datagram> bad;
    for (std::uint8_t op : {cmw::cm_rep, cmw::cm_rej}) {
        cm_msg m = cm(op, 0, h.addr, req.req_qpn, h.rc_qp());
        auto v = malformed(m);
        bad.insert(bad.end(), v.begin(), v.end());
        for (std::uint32_t other : {0u, req.req_qpn + 1, ~0u}) {
            m.req_qpn = other;
            bad.push_back(whole(m));
        }
    }
    bad.push_back(whole(cm(cmw::cm_req, FI_EP_MSG, h.addr, req.req_qpn)));
    bad.push_back(whole(cm(cmw::cm_rtu, 0, h.addr, req.req_qpn)));
    ASSERT_EQ(h.send(victim, bad, prog), 0);
    cm_msg big = cm(cmw::cm_rep, 0, h.addr, req.req_qpn, h.rc_qp());
    ASSERT_EQ(h.send(victim, {bytes(big, 600), bytes(big, 4096)}, prog, 40), 0);
    cm_msg f = cm(cmw::cm_rep, 0, h.addr, req.req_qpn, 1);
    f.from.len = 255;
    ASSERT_EQ(h.flood(victim, whole(f), 1000, offsetof(cm_msg, rep_qpn), prog), 0);
    for (int i = 0; i < 2000; i++)
        prog();
    expect_nothing(s, "connecting endpoint");
    std::uint8_t pa[64];
    std::size_t alen = sizeof pa;
    EXPECT_EQ(getpeer(ep, pa, &alen), -FI_ENOTCONN) << "garbage connected it";
    cm_msg j = cm(cmw::cm_rej, 0, h.addr, req.req_qpn);
    j.datalen = 6;
    std::memcpy(j.data, "probe", 6);
    ASSERT_EQ(h.send(victim, {whole(j)}, [] {}), 0);
    std::uint32_t ev = 0;
    std::uint8_t buf[512];
    ASSERT_EQ(next_event(n.eq, n.cq, ev, buf, sizeof buf), -FI_EAVAIL) << "the REJ after the garbage";
    eq_err_entry err{};
    ASSERT_GT(eq_readerr(n.eq, &err, 0), 0);
    EXPECT_EQ(err.err, FI_ECONNREFUSED);
    ASSERT_EQ(err.err_data_size, 6u);
    EXPECT_STREQ(static_cast<char *>(err.err_data), "probe");
    EXPECT_EQ(next_event(n.eq, n.cq, ev, buf, sizeof buf, 50), -FI_ETIMEDOUT);
    (void)close(&ep->fid);

    // Well-formed REPs naming a QP that cannot be connected to: none, the
    // sender's UD QP (not RC), a segment that does not exist.
    ep_addr nowhere = h.addr;
    std::memcpy(nowhere.name, "no-such-segment", 15);
    nowhere.len = 15;
    for (int k = 0; k < 3; k++) {
        connecting(n, h, ep, req, prog);
        cm_msg m = k == 0   ? cm(cmw::cm_rep, 0, h.addr, req.req_qpn, 0x7ffffff0)
                   : k == 1 ? cm(cmw::cm_rep, 0, h.addr, req.req_qpn, h.addr.qpn)
                            : cm(cmw::cm_rep, 0, nowhere, req.req_qpn, h.rc_qp());
        ASSERT_EQ(h.send(req.from, {whole(m)}, [] {}), 0);
        ASSERT_EQ(next_event(n.eq, n.cq, ev, buf, sizeof buf), -FI_EAVAIL) << "case " << k;
        err = {};
        ASSERT_GT(eq_readerr(n.eq, &err, 0), 0);
        EXPECT_EQ(err.err, FI_ECONNABORTED) << "case " << k;
        EXPECT_EQ(next_event(n.eq, n.cq, ev, buf, sizeof buf, 50), -FI_ETIMEDOUT) << "case " << k;
        alen = sizeof pa;
        EXPECT_EQ(getpeer(ep, pa, &alen), -FI_ENOTCONN) << "case " << k;
        (void)close(&ep->fid);
    }

    // A REP the endpoint can connect to (a free RC QP of the hostile
    // process): connected, with the REP's data; replaying it, or another
    // REP or a REJ for the same request, changes nothing.
    connecting(n, h, ep, req, prog);
    cm_msg ok = cm(cmw::cm_rep, 0, h.addr, req.req_qpn, h.rc_qp());
    ok.datalen = 4;
    std::memcpy(ok.data, "yes", 4);
    ASSERT_EQ(h.send(req.from, {whole(ok)}, [] {}), 0);
    ssize_t rc = next_event(n.eq, n.cq, ev, buf, sizeof buf);
    ASSERT_EQ(rc, ssize_t(sizeof(eq_cm_entry) + 4)) << shunt::strerror(int(rc));
    ASSERT_EQ(ev, FI_CONNECTED);
    alen = sizeof pa;
    ASSERT_EQ(getpeer(ep, pa, &alen), 0);
    cm_msg other = ok;
    other.rep_qpn = h.rc_qp();
    s = {};
    ASSERT_EQ(h.send(req.from, {whole(ok), whole(other), whole(cm(cmw::cm_rej, 0, h.addr, req.req_qpn))}, prog, 50),
              0);
    for (int i = 0; i < 2000; i++)
        prog();
    expect_nothing(s, "connected endpoint");
    std::uint8_t pb[64];
    std::size_t blen = sizeof pb;
    ASSERT_EQ(getpeer(ep, pb, &blen), 0);
    EXPECT_EQ(std::memcmp(pa, pb, alen), 0) << "a replayed REP changed the peer";
    (void)close(&ep->fid);

    // Afterwards: a good peer, checked bytes.
    peer_proc p{"msg"};
    ASSERT_EQ(endpoint(n.domain, n.fi, &ep, nullptr), 0);
    ASSERT_EQ(ep_bind(ep, &n.cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(ep_bind(ep, &n.eq->fid, 0), 0);
    ASSERT_EQ(connect(ep, p.addr, nullptr, 0), 0);
    rc = next_event(n.eq, n.cq, ev, buf, sizeof buf);
    ASSERT_GT(rc, 0) << shunt::strerror(int(rc));
    ASSERT_EQ(ev, FI_CONNECTED);
    echo_checked(ep, n.cq, 0, 3000, 41);
    echo_checked(ep, n.cq, 0, 100000, 42);
    (void)close(&ep->fid);
    n.close();
}
