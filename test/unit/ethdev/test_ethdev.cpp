// drivers/ethdev over cross-wired net_ring port pairs in one process: the
// wire format (CRC-32, ICRC against a captured ConnectX-4 frame), devices,
// UD, RC and UC transports (including loss, duplication, reordering and
// corruption through an impairing forwarder, and a cut link), RAW_PACKET
// (copy and zero-copy completion order, software checksums and TSO checked
// with this file's own decoder), ARP, and malformed frames.
#include <arpa/inet.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "common/csum.h"
#include "eth_fixture.h"
#include "ethdev/crc32.h"
#include "ethdev/wire.h"

namespace shunt::test {
namespace {

using vq::qp_type;
using vq::wc_status;

constexpr std::uint64_t rc_ops = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM | vq::OPS_RDMA_WRITE |
                                 vq::OPS_RDMA_WRITE_WITH_IMM | vq::OPS_RDMA_READ | vq::OPS_ATOMIC_FETCH_AND_ADD |
                                 vq::OPS_ATOMIC_CMP_AND_SWP;

/* ---------------- Wire format ---------------- */

TEST(Crc, FoldedAndTableFormsAgreeAndMatchTheStandardCheckValue)
{
    const char *s = "123456789";
    EXPECT_EQ(~eth::crc32_update(~0u, s, 9), 0xcbf43926u);
    std::mt19937 r(7);
    std::vector<std::uint8_t> b(9000);
    for (auto &x : b)
        x = static_cast<std::uint8_t>(r());
    for (int i = 0; i < 3000; i++) {
        std::size_t off = r() % 64, n = r() % (b.size() - 64);
        std::uint32_t seed = r();
        ASSERT_EQ(eth::crc32_update(seed, b.data() + off, n), eth::crc32_update_table(seed, b.data() + off, n))
            << "length " << n << " offset " << off;
    }
    std::uint8_t ones[8];
    std::memset(ones, 0xff, 8);
    EXPECT_EQ(eth::crc32_update(~0u, ones, 8), eth::icrc_seed);
}

TEST(Crc, OnePassIcrcOfAWholePacketEqualsHeadersThenRest)
{
    // icrc_packet masks the variant header fields in registers and folds
    // headers and payload in one pass: the same state as icrc_headers (a
    // masked copy) continued over the rest, for every length either path
    // takes and any bytes in the masked fields.
    std::mt19937 r(11);
    std::vector<std::uint8_t> b(2100);
    for (int i = 0; i < 4000; i++) {
        for (auto &x : b)
            x = static_cast<std::uint8_t>(r());
        std::size_t off = r() % 64, n = i < 200 ? static_cast<std::size_t>(i) : r() % (b.size() - 64 - 40);
        const std::uint8_t *ip = b.data() + off;
        ASSERT_EQ(eth::icrc_packet(ip, n), eth::crc32_update(eth::icrc_headers(ip), ip + 40, n))
            << "length " << n << " offset " << off;
    }
}

TEST(Wire, Ipv4ChecksumFromTheTemplateSumEqualsTheByteByByteSum)
{
    // A frame's IPv4 checksum comes from its template's word sum (32-bit
    // host-order words) and the two fields patched per frame (total length,
    // identification), not from the header read back; the reference adds
    // the finished header's 16-bit big-endian words one by one (RFC 791).
    // The first two headers are all zero and all ones. ip_hdr_ok, the
    // receive check, accepts each header and refuses it with a bit flipped.
    std::mt19937 r(5);
    for (int i = 0; i < 20000; i++) {
        std::uint8_t ip[20];
        for (auto &x : ip)
            x = i < 2 ? static_cast<std::uint8_t>(i ? 0xff : 0) : static_cast<std::uint8_t>(r());
        ip[2] = ip[3] = ip[4] = ip[5] = ip[10] = ip[11] = 0;
        const std::uint64_t sum = eth::wire::ip_hdr_words(ip);
        const auto tot = static_cast<std::uint16_t>(i < 2 ? (i ? 0xffff : 0) : r());
        const auto id = static_cast<std::uint16_t>(i < 2 ? (i ? 0xffff : 0) : r());
        eth::wire::st16(ip + 2, tot);
        eth::wire::st16(ip + 4, id);
        const std::uint16_t c = eth::wire::ip_csum_of(sum, tot, id);
        std::memcpy(ip + 10, &c, 2);
        std::uint32_t ref = 0;
        for (int k = 0; k < 20; k += 2)
            ref += k == 10 ? 0u : static_cast<std::uint32_t>(ip[k] << 8 | ip[k + 1]);
        ref = (ref & 0xffff) + (ref >> 16);
        ref = (ref & 0xffff) + (ref >> 16);
        ASSERT_EQ(static_cast<std::uint32_t>(ip[10] << 8 | ip[11]), (~ref) & 0xffffu) << "header " << i;
        ASSERT_TRUE(eth::wire::ip_hdr_ok(ip)) << "header " << i;
        std::size_t at = r() % 20;
        std::uint8_t flip = static_cast<std::uint8_t>(1u << (r() % 8));
        ip[at] ^= flip;
        ASSERT_FALSE(eth::wire::ip_hdr_ok(ip)) << "header " << i << " with byte " << at << " changed";
    }
}

TEST(Csum, TcpAndUdpChecksumsEqualTheByteByByteSum)
{
    // drivers/common adds the words as 32-bit host-order loads; the
    // reference adds 16-bit big-endian words one by one (RFC 1071), an odd
    // last byte as the high half of a word. Lengths 0-1600 at every
    // alignment, TCP and UDP, bare IPv4 and behind Ethernet.
    auto ref_sum = [](const std::uint8_t *p, std::size_t n, std::uint32_t s) {
        for (std::size_t k = 0; k + 1 < n; k += 2)
            s += static_cast<std::uint32_t>(p[k] << 8 | p[k + 1]);
        if (n & 1)
            s += static_cast<std::uint32_t>(p[n - 1] << 8);
        while (s >> 16)
            s = (s & 0xffff) + (s >> 16);
        return static_cast<std::uint16_t>(~s & 0xffff);
    };
    std::mt19937 r(17);
    std::vector<std::uint8_t> b(1700);
    for (int i = 0; i < 6000; i++) {
        for (auto &x : b)
            x = static_cast<std::uint8_t>(r());
        const bool tcp = i & 1, ether = i & 2;
        const std::size_t l4min = tcp ? 20 : 8, off = r() % 16, eh = ether ? 14 : 0;
        const std::size_t l4len = l4min + (i < 400 ? static_cast<std::size_t>(i) : r() % 1600);
        std::uint8_t *m = b.data() + off, *ip = m + eh, *l4 = ip + 20;
        if (ether) {
            m[12] = 0x08;
            m[13] = 0x00;
        }
        ip[0] = 0x45;
        ip[2] = static_cast<std::uint8_t>((20 + l4len) >> 8);
        ip[3] = static_cast<std::uint8_t>(20 + l4len);
        ip[9] = tcp ? 6 : 17;
        drv::common::ip_checksums(m, eh + 20 + l4len);
        const std::size_t at = tcp ? 16 : 6;
        std::uint8_t saved[2] = {l4[at], l4[at + 1]};
        l4[at] = l4[at + 1] = 0;
        std::uint32_t pseudo = static_cast<std::uint32_t>(ip[9] + l4len);
        for (int k = 12; k < 20; k += 2)
            pseudo += static_cast<std::uint32_t>(ip[k] << 8 | ip[k + 1]);
        std::uint16_t want = ref_sum(l4, l4len, pseudo);
        if (!tcp && want == 0)
            want = 0xffff;
        ASSERT_EQ(static_cast<std::uint16_t>(saved[0] << 8 | saved[1]), want) << "message " << i << " length " << l4len;
        std::memcpy(l4 + at, saved, 2);
        ASSERT_TRUE(drv::common::ip_checksums_valid(m, eh + 20 + l4len)) << "message " << i;
        const std::size_t flip = 20 + r() % l4len;
        ip[flip] ^= static_cast<std::uint8_t>(1u << (r() % 8));
        ASSERT_FALSE(drv::common::ip_checksums_valid(m, eh + 20 + l4len)) << "message " << i << " byte " << flip;
    }
}

TEST(Crc, IcrcOfACnpCapturedFromAConnectX4LxMatches)
{
    // A RoCEv2 CNP captured on a ConnectX-4 Lx (published with scapy's RoCE
    // tests): Ethernet, IPv4 (TOS 0xc2), UDP checksum 0, BTH with BECN set,
    // 16 bytes of padding, ICRC 82 fd 00 2a.
    const std::uint8_t f[] = {
        0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08, 0x00, 0x45, 0xc2, 0x00, 0x3c,
        0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00, 0x12, 0x01, 0x00, 0x00,
        0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, 0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x82, 0xfd,
        0x00, 0x2a,
    };
    std::uint32_t crc = eth::icrc_headers(f + 14);
    crc = eth::crc32_update(crc, f + 14 + 40, sizeof f - 14 - 40 - 4);
    EXPECT_TRUE(eth::icrc_matches(f + sizeof f - 4, crc));
    std::uint8_t out[4];
    eth::icrc_store(out, crc);
    EXPECT_EQ(std::memcmp(out, f + sizeof f - 4, 4), 0);
    // The wire tests' own decoder (bit by bit, test/common/frame_check.h) agrees.
    roce_frame r = decode_roce(f, sizeof f);
    EXPECT_TRUE(r.ok && r.icrc_ok && r.ip_csum_ok);
    EXPECT_EQ(r.opcode, 0x81);
    EXPECT_EQ(r.hdrs_len, 16u);
}

/* ---------------- Devices ---------------- */

TEST(Devices, EachPortIsADeviceNamedAfterItWithHonestLimits)
{
    for (const char *n : {dev0a, dev0b, dev1a, dev1b}) {
        vq::device *d = device(n);
        ASSERT_NE(d, nullptr) << n;
        EXPECT_TRUE(eth::is_ethdev(d));
        EXPECT_NE(std::string(d->description).find("MAC "), std::string::npos);
        EXPECT_NE(std::string(d->description).find("MTU "), std::string::npos);
        EXPECT_NE(std::string(d->description).find("tx offloads"), std::string::npos);
    }
    ep e(dev0a);
    ASSERT_TRUE(e.ok());
    eth::port_info pi;
    ASSERT_EQ(eth::query_port(device(dev0a), &pi), 0);
    EXPECT_EQ(pi.name, dev0a);
    EXPECT_EQ(pi.driver, "net_ring");
    EXPECT_TRUE(pi.started);
    EXPECT_EQ(std::memcmp(e.ctx->addr.raw, pi.mac, 6), 0) << "the context address carries the MAC";
    EXPECT_EQ(std::memcmp(e.ctx->addr.raw + 6, &pi.ipv4, 4), 0) << "and the IPv4 address (GID 0)";
    vq::device_attr a;
    ASSERT_EQ(vq::query_device(e.ctx, &a), 0);
    EXPECT_EQ(a.ud_mtu, pi.path_mtu);
    EXPECT_TRUE(a.ud_mtu == 256 || a.ud_mtu == 512 || a.ud_mtu == 1024 || a.ud_mtu == 2048 || a.ud_mtu == 4096);
    EXPECT_LE(a.ud_mtu + 20 + 8 + 12 + 28 + 4, pi.mtu) << "a packet of path MTU fits the port's MTU";
    EXPECT_EQ(a.ops[static_cast<unsigned>(qp_type::rc)], vq::ops_allowed(qp_type::rc));
    EXPECT_EQ(a.ops[static_cast<unsigned>(qp_type::raw_packet)], vq::ops_allowed(qp_type::raw_packet));
    EXPECT_EQ(a.ops[static_cast<unsigned>(qp_type::uc)] & vq::OPS_SEND_WITH_INV, 0u)
        << "UC has no send-with-invalidate opcode on the wire";
    EXPECT_GT(a.max_inline_data, 0u);
    EXPECT_GT(a.max_sge, 1u);
    EXPECT_TRUE(a.atomics_global);
    EXPECT_EQ(eth::set_port_queues(device(dev0a), 1), -FI_EBUSY) << "queues are fixed once a port started";
    EXPECT_EQ(eth::set_port_queues(nullptr, 2), -FI_EINVAL);
}

/* ---------------- UD ---------------- */

TEST(Ud, SendWithImmediateArrivesBehindAGrhWithTheSourceQp)
{
    ud_pair u;
    ASSERT_TRUE(u.ok());
    ASSERT_EQ(u.b.recv(u.qb, 7, 0, 4096), 0);
    fill(u.a.buf, 700, 3);
    vq::wr_start(u.qa);
    u.qa->wr_id = 1;
    u.qa->wr_flags = vq::WR_SIGNALED | vq::WR_SOLICITED;
    vq::wr_send_imm(u.qa, htonl(0xabcd0123));
    vq::wr_set_sge(u.qa, u.a.mr->lkey, u.a.at(0), 700);
    vq::wr_set_ud_addr(u.qa, u.ah, u.qb->qp_num, 0x1111);
    ASSERT_EQ(vq::wr_complete(u.qa), 0);
    auto s = wait_wcs(u.a, 1, {&u.b});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, wc_status::success);
    auto r = wait_wcs(u.b, 1, {&u.a});
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, wc_status::success);
    EXPECT_EQ(r[0].byte_len, 40u + 700u);
    EXPECT_EQ(r[0].wc_flags & (vq::WC_GRH | vq::WC_WITH_IMM | vq::WC_SOLICITED),
              vq::WC_GRH | vq::WC_WITH_IMM | vq::WC_SOLICITED);
    EXPECT_EQ(r[0].imm_data, htonl(0xabcd0123));
    EXPECT_EQ(r[0].src_qp, u.qa->qp_num);
    EXPECT_EQ(std::memcmp(u.b.buf + 40, u.a.buf, 700), 0);
    // The GRH area's last 20 bytes are the IPv4 header, source = the sender's GID.
    EXPECT_EQ(u.b.buf[20], 0x45);
    EXPECT_EQ(std::memcmp(u.b.buf + 20 + 12, u.a.ctx->addr.raw + 6, 4), 0);
}

TEST(Ud, AWrongQkeyIsDroppedAndCounted)
{
    ud_pair u;
    ASSERT_TRUE(u.ok());
    ASSERT_EQ(u.b.recv(u.qb, 7, 0, 4096), 0);
    std::uint64_t before = counter(dev0b, eth::c_rx_qkey);
    vq::wr_start(u.qa);
    u.qa->wr_id = 1;
    u.qa->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(u.qa);
    vq::wr_set_sge(u.qa, u.a.mr->lkey, u.a.at(0), 64);
    vq::wr_set_ud_addr(u.qa, u.ah, u.qb->qp_num, 0x2222);
    ASSERT_EQ(vq::wr_complete(u.qa), 0);
    EXPECT_EQ(wait_wcs(u.a, 1, {&u.b}).size(), 1u);
    EXPECT_TRUE(drain(u.b, {&u.a}).empty()) << "delivered despite the wrong Q_Key";
    EXPECT_EQ(counter(dev0b, eth::c_rx_qkey), before + 1);
}

TEST(Ud, TsoCutsThePayloadIntoDatagramsEachWithAFixedUpHeader)
{
    ud_pair u;
    ASSERT_TRUE(u.ok());
    const std::uint16_t mss = 400;
    const std::uint32_t total = 5000;
    const std::uint32_t nseg = (total + mss - 1) / mss;
    auto hdr = tcp_header(1000, 77);
    std::vector<std::uint8_t> ip_tcp(hdr.begin() + 14, hdr.end()); // UD: the payload starts at IPv4
    for (std::uint32_t i = 0; i < nseg; i++)
        ASSERT_EQ(u.b.recv(u.qb, i, i * 1024, 1024), 0);
    fill(u.a.buf, total, 9);
    vq::wr_start(u.qa);
    u.qa->wr_id = 5;
    u.qa->wr_flags = vq::WR_SIGNALED | vq::WR_IP_CSUM;
    vq::wr_send_tso(u.qa, ip_tcp.data(), static_cast<std::uint16_t>(ip_tcp.size()), mss);
    vq::wr_set_sge(u.qa, u.a.mr->lkey, u.a.at(0), total);
    vq::wr_set_ud_addr(u.qa, u.ah, u.qb->qp_num, 0x1111);
    ASSERT_EQ(vq::wr_complete(u.qa), 0);
    auto s = wait_wcs(u.a, 1, {&u.b});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].opcode, vq::wc_opcode::tso);
    auto r = wait_wcs(u.b, nseg, {&u.a});
    ASSERT_EQ(r.size(), nseg);
    for (std::uint32_t i = 0; i < nseg; i++) {
        SCOPED_TRACE(i);
        std::uint32_t part = std::min<std::uint32_t>(mss, total - i * mss);
        ASSERT_EQ(r[i].byte_len, 40 + 40 + part);
        // Give the decoder an Ethernet header in front of the datagram's IPv4.
        std::vector<std::uint8_t> fr(14 + 40 + part);
        std::memcpy(fr.data(), hdr.data(), 14);
        std::memcpy(fr.data() + 14, u.b.buf + r[i].wr_id * 1024 + 40, 40 + part);
        tcp_frame t = decode(fr.data(), fr.size());
        ASSERT_TRUE(t.ok);
        EXPECT_EQ(t.ip_len, 40 + part);
        EXPECT_EQ(t.ip_id, 77 + i);
        EXPECT_EQ(t.seq, 1000 + i * mss);
        EXPECT_TRUE(t.ip_csum_ok);
        EXPECT_TRUE(t.l4_csum_ok);
        EXPECT_EQ(t.flags & 0x08, i + 1 == nseg ? 0x08 : 0) << "PSH only on the last segment";
        EXPECT_EQ(std::memcmp(t.payload, u.a.buf + i * mss, part), 0);
    }
}

/* ---------------- RC ---------------- */

struct rc_pair {
    ep a, b;
    vq::qp *qa, *qb;
    explicit rc_pair(const char *da = dev0a, const char *db = dev0b, qp_type t = qp_type::rc, vq::qp_attr extra = {},
                     unsigned mask = 0)
        : a(da), b(db)
    {
        std::uint64_t ops = t == qp_type::rc ? rc_ops : (vq::OPS_SEND | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_WRITE_WITH_IMM);
        qa = a.qp(t, ops, {1024, 1024, 4, 4, 256});
        qb = b.qp(t, ops, {1024, 1024, 4, 4, 256});
        if (!qa || !qb)
            return; // reported: the test checks ok()
        rc_up(qa, qb, extra, mask);
        rc_up(qb, qa, extra, mask);
    }
    bool ok() const { return a.ok() && b.ok() && qa && qb; }
};

TEST(Rc, SendsWritesReadsAndAtomicsSpanningManyPacketsLandExactly)
{
    rc_pair p;
    ASSERT_TRUE(p.ok());
    const std::uint32_t big = 300000; // ~300 packets of path MTU
    fill(p.a.buf, big, 1);
    ASSERT_EQ(p.b.recv(p.qb, 1, 0, big), 0);
    ASSERT_EQ(vq::post_send(p.qa, 10, p.a.buf, big, p.a.mr->lkey, vq::WR_SIGNALED), 0);
    auto r = wait_wcs(p.b, 1, {&p.a});
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, wc_status::success);
    EXPECT_EQ(r[0].byte_len, big);
    EXPECT_EQ(std::memcmp(p.a.buf, p.b.buf, big), 0);
    EXPECT_EQ(wait_wcs(p.a, 1, {&p.b})[0].status, wc_status::success);
    // Write then read back into another place.
    fill(p.a.buf + 1000000, 70000, 2);
    ASSERT_EQ(vq::post_write(p.qa, 11, p.a.buf + 1000000, 70000, p.a.mr->lkey, p.b.mr->rkey, p.b.at(2000000),
                             vq::WR_SIGNALED),
              0);
    vq::wr_start(p.qa);
    p.qa->wr_id = 12;
    p.qa->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_read(p.qa, p.b.mr->rkey, p.b.at(2000000));
    vq::wr_set_sge(p.qa, p.a.mr->lkey, p.a.at(3000000), 70000);
    ASSERT_EQ(vq::wr_complete(p.qa), 0);
    auto w = wait_wcs(p.a, 2, {&p.b});
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w[0].wr_id, 11u);
    EXPECT_EQ(w[1].wr_id, 12u);
    EXPECT_EQ(w[1].byte_len, 70000u);
    EXPECT_EQ(std::memcmp(p.a.buf + 1000000, p.b.buf + 2000000, 70000), 0);
    EXPECT_EQ(std::memcmp(p.a.buf + 1000000, p.a.buf + 3000000, 70000), 0);
    // Atomics return the original value.
    std::uint64_t *word = reinterpret_cast<std::uint64_t *>(p.b.buf + 4000000);
    *word = 5;
    vq::wr_start(p.qa);
    p.qa->wr_id = 13;
    p.qa->wr_flags = vq::WR_SIGNALED;
    vq::wr_atomic_fetch_add(p.qa, p.b.mr->rkey, p.b.at(4000000), 10);
    vq::wr_set_sge(p.qa, p.a.mr->lkey, p.a.at(4000000), 8);
    p.qa->wr_id = 14;
    vq::wr_atomic_cmp_swp(p.qa, p.b.mr->rkey, p.b.at(4000000), 15, 99);
    vq::wr_set_sge(p.qa, p.a.mr->lkey, p.a.at(4000008), 8);
    ASSERT_EQ(vq::wr_complete(p.qa), 0);
    w = wait_wcs(p.a, 2, {&p.b});
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(*reinterpret_cast<std::uint64_t *>(p.a.buf + 4000000), 5u);
    EXPECT_EQ(*reinterpret_cast<std::uint64_t *>(p.a.buf + 4000008), 15u);
    EXPECT_EQ(*word, 99u);
}

/** Sends of @p n messages of random sizes through the impairing forwarder:
 *  every one arrives exactly once, in order, bytes intact; @p n atomics on
 *  one word each execute exactly once. */
void exactly_once(double drop, double dup, double reorder, double corrupt, std::uint32_t seed)
{
    impair_fwd f;
    f.drop = drop;
    f.dup = dup;
    f.reorder = reorder;
    f.corrupt = corrupt;
    f.seed = seed;
    f.start();
    ASSERT_TRUE(f.ok());
    vq::qp_attr x;
    x.timeout = 12; // 16.8 ms x 8 tries: robust to a loaded machine; gaps are repaired by NAKs at once
    x.retry_cnt = 7;
    rc_pair p(dev0a, dev1b, qp_type::rc, x, vq::QP_ATTR_TIMEOUT | vq::QP_ATTR_RETRY_CNT);
    ASSERT_TRUE(p.ok());
    std::mt19937 rng(seed);
    constexpr std::uint32_t n = 300, slot = 8192;
    std::vector<std::uint32_t> len(n);
    for (std::uint32_t i = 0; i < n; i++) {
        len[i] = 1 + rng() % (slot - 8);
        ASSERT_EQ(p.b.recv(p.qb, i, i * slot, slot), 0);
    }
    fill(p.a.buf, n * slot, seed);
    for (std::uint32_t i = 0; i < n; i++) {
        std::memcpy(p.a.buf + i * slot, &i, 4); // sequence number in the first bytes
        int rc;
        while ((rc = vq::post_send(p.qa, i, p.a.buf + i * slot, len[i], p.a.mr->lkey, vq::WR_SIGNALED)) == -FI_EAGAIN)
            p.a.pump(), p.b.pump();
        ASSERT_EQ(rc, 0);
    }
    auto r = wait_wcs(p.b, n, {&p.a}, 60000);
    ASSERT_EQ(r.size(), n);
    for (std::uint32_t i = 0; i < n; i++) {
        ASSERT_EQ(r[i].status, wc_status::success) << i;
        ASSERT_EQ(r[i].wr_id, i) << "receives complete in order";
        ASSERT_EQ(r[i].byte_len, len[i]);
        ASSERT_EQ(std::memcmp(p.b.buf + i * slot, p.a.buf + i * slot, len[i]), 0) << "message " << i;
    }
    auto s = wait_wcs(p.a, n, {&p.b}, 60000);
    ASSERT_EQ(s.size(), n);
    for (std::uint32_t i = 0; i < n; i++)
        ASSERT_EQ(s[i].wr_id, i);
    EXPECT_TRUE(drain(p.b, {&p.a}, 50).empty()) << "a duplicate was delivered";
    // Atomics: exactly once each, however often they are retransmitted.
    std::uint64_t *word = reinterpret_cast<std::uint64_t *>(p.b.buf + n * slot);
    *word = 0;
    constexpr std::uint32_t na = 100;
    for (std::uint32_t i = 0; i < na; i++) {
        vq::wr_start(p.qa);
        p.qa->wr_id = 1000 + i;
        p.qa->wr_flags = vq::WR_SIGNALED;
        vq::wr_atomic_fetch_add(p.qa, p.b.mr->rkey, p.b.at(n * slot), 1);
        vq::wr_set_sge(p.qa, p.a.mr->lkey, p.a.at(n * slot + 8 * i), 8);
        ASSERT_EQ(vq::wr_complete(p.qa), 0);
    }
    auto aw = wait_wcs(p.a, na, {&p.b}, 60000);
    ASSERT_EQ(aw.size(), na);
    std::set<std::uint64_t> seen;
    for (std::uint32_t i = 0; i < na; i++) {
        ASSERT_EQ(aw[i].status, wc_status::success) << "atomic " << i << ": " << vq::wc_status_str(aw[i].status);
        seen.insert(*reinterpret_cast<std::uint64_t *>(p.a.buf + n * slot + 8 * i));
    }
    EXPECT_EQ(*word, na) << "an atomic executed twice or not at all";
    EXPECT_EQ(seen.size(), na) << "two atomics returned the same original value";
    std::printf("forwarded %llu frames, dropped %llu; retransmissions %llu, bad ICRC %llu\n",
                static_cast<unsigned long long>(f.forwarded.load()), static_cast<unsigned long long>(f.dropped.load()),
                static_cast<unsigned long long>(counter(dev0a, eth::c_tx_retransmit) +
                                                counter(dev1b, eth::c_tx_retransmit)),
                static_cast<unsigned long long>(counter(dev0a, eth::c_rx_bad_icrc) + counter(dev1b, eth::c_rx_bad_icrc)));
}

TEST(RcImpaired, NoImpairmentThroughTheForwarder) { exactly_once(0, 0, 0, 0, 1); }
TEST(RcImpaired, RandomDropDeliversEveryMessageOnceInOrder) { exactly_once(0.05, 0, 0, 0, 2); }
TEST(RcImpaired, DuplicatesAreDeliveredOnce) { exactly_once(0, 0.1, 0, 0, 3); }
TEST(RcImpaired, ReorderingIsRepaired) { exactly_once(0, 0, 0.1, 0, 4); }
TEST(RcImpaired, CorruptedFramesFailTheIcrcAndAreResent)
{
    std::uint64_t before = counter(dev0a, eth::c_rx_bad_icrc) + counter(dev1b, eth::c_rx_bad_icrc);
    exactly_once(0, 0, 0, 0.05, 5);
    EXPECT_GT(counter(dev0a, eth::c_rx_bad_icrc) + counter(dev1b, eth::c_rx_bad_icrc), before);
}
TEST(RcImpaired, AllImpairmentsTogether) { exactly_once(0.03, 0.03, 0.03, 0.03, 6); }

/* A read of 2 MiB (2048 responses) through the forwarder is asked for in
 * parts of 64 packets (one read request each, at most 256 packets of
 * responses outstanding, so they cannot outrun a receiving port's ring),
 * and lands exactly, with nothing out of sequence or resent. */
TEST(Rc, ALongReadIsAskedForInPartsAndLandsExactly)
{
    impair_fwd f;
    f.start();
    ASSERT_TRUE(f.ok());
    rc_pair p(dev0a, dev1b);
    ASSERT_TRUE(p.ok());
    constexpr std::uint32_t len = 2u << 20;
    fill(p.b.buf, len, 7);
    std::memset(p.a.buf, 0, len);
    const std::uint64_t seq0 = counter(dev0a, eth::c_rx_seq) + counter(dev1b, eth::c_rx_seq);
    const std::uint64_t re0 = counter(dev0a, eth::c_tx_retransmit) + counter(dev1b, eth::c_tx_retransmit);
    const std::uint64_t fwd0 = f.forwarded.load();
    vq::wr_start(p.qa);
    p.qa->wr_id = 1;
    p.qa->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_read(p.qa, p.b.mr->rkey, p.b.at(0));
    vq::wr_set_sge(p.qa, p.a.mr->lkey, p.a.at(0), len);
    ASSERT_EQ(vq::wr_complete(p.qa), 0);
    auto w = wait_wcs(p.a, 1, {&p.b}, 60000);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, wc_status::success) << vq::wc_status_str(w[0].status);
    EXPECT_EQ(w[0].byte_len, len);
    EXPECT_EQ(std::memcmp(p.a.buf, p.b.buf, len), 0);
    const std::uint32_t parts = len / 1024 / 64; // path MTU 1024 (MTU 1500), parts of 64 packets
    EXPECT_GE(f.forwarded.load() - fwd0, len / 1024 + parts) << "every response and every part's request";
    EXPECT_EQ(counter(dev0a, eth::c_rx_seq) + counter(dev1b, eth::c_rx_seq), seq0) << "responses arrived out of sequence";
    EXPECT_EQ(counter(dev0a, eth::c_tx_retransmit) + counter(dev1b, eth::c_tx_retransmit), re0);
}

TEST(Rc, ACutLinkRunsOutOfRetriesIntoErrorCompletionsWithinTheConfiguredTime)
{
    impair_fwd f;
    f.start();
    ASSERT_TRUE(f.ok());
    vq::qp_attr x;
    x.timeout = 10;  // 4.2 ms
    x.retry_cnt = 3; // 4 transmissions: about 17 ms
    rc_pair p(dev0a, dev1b, qp_type::rc, x, vq::QP_ATTR_TIMEOUT | vq::QP_ATTR_RETRY_CNT);
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(p.b.recv(p.qb, 1, 0, 4096), 0);
    ASSERT_EQ(vq::post_send(p.qa, 1, p.a.buf, 100, p.a.mr->lkey, vq::WR_SIGNALED), 0);
    ASSERT_EQ(wait_wcs(p.a, 1, {&p.b}).size(), 1u) << "the link works before the cut";
    f.cut = true;
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(vq::post_send(p.qa, 2, p.a.buf, 100, p.a.mr->lkey, vq::WR_SIGNALED), 0);
    ASSERT_EQ(vq::post_send(p.qa, 3, p.a.buf, 100, p.a.mr->lkey, vq::WR_SIGNALED), 0);
    auto w = wait_wcs(p.a, 2, {&p.b}, 5000);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w[0].wr_id, 2u);
    EXPECT_EQ(w[0].status, wc_status::retry_exc_err);
    EXPECT_EQ(w[1].wr_id, 3u);
    EXPECT_EQ(w[1].status, wc_status::wr_flush_err);
    EXPECT_EQ(vq::get_qp_state(p.qa), vq::qp_state::err);
    // 4 transmissions of 4.2 ms; the wait is bounded well above it (a loaded machine).
    EXPECT_GE(ms, 4 * 4.0) << "gave up before retry_cnt retransmissions";
    EXPECT_LT(ms, 5000);
}

TEST(Rc, RnrNakWaitsForAReceiveAndRnrRetryZeroFails)
{
    {
        rc_pair p;
        ASSERT_TRUE(p.ok());
        ASSERT_EQ(vq::post_send(p.qa, 1, p.a.buf, 100, p.a.mr->lkey, vq::WR_SIGNALED), 0);
        EXPECT_TRUE(drain(p.a, {&p.b}, 30).empty()) << "completed without a receive at the peer";
        ASSERT_EQ(p.b.recv(p.qb, 9, 0, 4096), 0);
        auto w = wait_wcs(p.a, 1, {&p.b});
        ASSERT_EQ(w.size(), 1u);
        EXPECT_EQ(w[0].status, wc_status::success);
        EXPECT_EQ(wait_wcs(p.b, 1, {&p.a}).size(), 1u);
    }
    {
        vq::qp_attr x;
        x.rnr_retry = 0;
        rc_pair p(dev0a, dev0b, qp_type::rc, x, vq::QP_ATTR_RNR_RETRY);
        ASSERT_TRUE(p.ok());
        ASSERT_EQ(vq::post_send(p.qa, 1, p.a.buf, 100, p.a.mr->lkey, vq::WR_SIGNALED), 0);
        auto w = wait_wcs(p.a, 1, {&p.b});
        ASSERT_EQ(w.size(), 1u);
        EXPECT_EQ(w[0].status, wc_status::rnr_retry_exc_err);
    }
}

TEST(Rc, AReceiveWithAKeyDeregisteredSinceItsLastUseFailsWithAProtectionError)
{
    // The responder remembers the receive key it last checked; a
    // deregistration in between must not leave that answer standing.
    rc_pair p;
    ASSERT_TRUE(p.ok());
    std::vector<std::uint8_t> mem(8192, 0);
    vq::mr *m = nullptr;
    ASSERT_EQ(vq::reg_mr(p.b.pd, mem.data(), mem.size(), vq::ACCESS_LOCAL_WRITE, &m), 0);
    const std::uint32_t lkey = m->lkey;
    std::memset(p.a.buf, 0x42, 64);
    // Two receives through the key: the second is checked from memory.
    for (std::uint64_t id : {1, 2}) {
        ASSERT_EQ(vq::post_recv(p.qb, id, reinterpret_cast<std::uint64_t>(mem.data() + 64 * id), 64, lkey), 0);
        ASSERT_EQ(vq::post_send(p.qa, id, p.a.buf, 64, p.a.mr->lkey, vq::WR_SIGNALED), 0);
        auto w = wait_wcs(p.b, 1, {&p.a});
        ASSERT_EQ(w.size(), 1u);
        EXPECT_EQ(w[0].status, wc_status::success);
        EXPECT_EQ(mem[64 * id], 0x42);
        EXPECT_EQ(wait_wcs(p.a, 1, {&p.b}).size(), 1u);
    }
    // The same key after its region went away, and a new region registered
    // (which may take the same key entry).
    ASSERT_EQ(vq::dereg_mr(m), 0);
    std::vector<std::uint8_t> other(8192, 0);
    vq::mr *m2 = nullptr;
    ASSERT_EQ(vq::reg_mr(p.b.pd, other.data(), other.size(), vq::ACCESS_LOCAL_WRITE, &m2), 0);
    EXPECT_NE(m2->lkey, lkey);
    std::memset(mem.data(), 0, mem.size());
    ASSERT_EQ(vq::post_recv(p.qb, 3, reinterpret_cast<std::uint64_t>(mem.data() + 192), 64, lkey), 0);
    ASSERT_EQ(vq::post_send(p.qa, 3, p.a.buf, 64, p.a.mr->lkey, vq::WR_SIGNALED), 0);
    auto w = wait_wcs(p.b, 1, {&p.a});
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, wc_status::loc_prot_err);
    EXPECT_EQ(mem[192], 0) << "written through a deregistered key";
    (void)drain(p.a, {&p.b}, 50);
    EXPECT_EQ(vq::dereg_mr(m2), 0);
}

TEST(Rc, QueryQpReadsBackWhatModifyQpSetAndTheDefaultsInEffect)
{
    // Everything set on the way to RTS, with PSNs just below the 24-bit wrap
    // on both sides (each side's send PSN is the other's expected one).
    vq::qp_attr x;
    x.path_mtu = 2; // 512 bytes
    x.timeout = 18;
    x.retry_cnt = 5;
    x.rnr_retry = 3;
    x.min_rnr_timer = 12;
    x.sq_psn = x.rq_psn = 0xfffffe;
    x.max_rd_atomic = x.max_dest_rd_atomic = 4;
    const unsigned mask = vq::QP_ATTR_PATH_MTU | vq::QP_ATTR_TIMEOUT | vq::QP_ATTR_RETRY_CNT | vq::QP_ATTR_RNR_RETRY |
                          vq::QP_ATTR_MIN_RNR_TIMER | vq::QP_ATTR_SQ_PSN | vq::QP_ATTR_RQ_PSN |
                          vq::QP_ATTR_MAX_QP_RD_ATOMIC | vq::QP_ATTR_MAX_DEST_RD_ATOMIC;
    {
        rc_pair p(dev0a, dev0b, qp_type::rc, x, mask);
        ASSERT_TRUE(p.ok());
        vq::qp_attr got;
        ASSERT_EQ(vq::query_qp(p.qa, &got), 0);
        EXPECT_EQ(got.state, vq::qp_state::rts);
        EXPECT_EQ(got.dest_qp_num, p.qb->qp_num);
        EXPECT_EQ(got.dest.len, p.b.ctx->addr.len);
        EXPECT_EQ(std::memcmp(got.dest.raw, p.b.ctx->addr.raw, got.dest.len), 0);
        EXPECT_EQ(got.qp_access_flags, vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC);
        EXPECT_EQ(got.path_mtu, 2);
        EXPECT_EQ(got.timeout, 18);
        EXPECT_EQ(got.retry_cnt, 5);
        EXPECT_EQ(got.rnr_retry, 3);
        EXPECT_EQ(got.min_rnr_timer, 12);
        EXPECT_EQ(got.sq_psn, 0xfffffeu);
        EXPECT_EQ(got.rq_psn, 0xfffffeu);
        EXPECT_EQ(got.max_rd_atomic, 4);
        EXPECT_EQ(got.max_dest_rd_atomic, 4);
        // The PSNs and path MTU are in use: a 1500-byte message is three
        // 512-byte packets across the wrap, and a few single-packet ones follow.
        fill(p.a.buf, 1500, 9);
        const std::uint64_t seq_before = counter(dev0b, eth::c_rx_seq);
        for (std::uint64_t i = 0; i < 4; i++) {
            ASSERT_EQ(p.b.recv(p.qb, i, 8192, 4096), 0);
            ASSERT_EQ(vq::post_send(p.qa, i, p.a.buf, i ? 64 : 1500, p.a.mr->lkey, vq::WR_SIGNALED), 0);
            auto w = wait_wcs(p.b, 1, {&p.a});
            ASSERT_EQ(w.size(), 1u);
            EXPECT_EQ(w[0].status, wc_status::success) << "message " << i;
            EXPECT_EQ(w[0].byte_len, i ? 64u : 1500u);
            EXPECT_EQ(std::memcmp(p.b.buf + 8192, p.a.buf, i ? 64 : 1500), 0) << "message " << i;
            auto s = wait_wcs(p.a, 1, {&p.b});
            ASSERT_EQ(s.size(), 1u);
            EXPECT_EQ(s[0].status, wc_status::success);
        }
        EXPECT_EQ(counter(dev0b, eth::c_rx_seq), seq_before) << "packets outside the expected PSN";
    }
    {
        // Nothing but what RTR needs: the defaults the QP runs with.
        rc_pair p;
        ASSERT_TRUE(p.ok());
        vq::qp_attr got;
        ASSERT_EQ(vq::query_qp(p.qa, &got), 0);
        EXPECT_EQ(got.state, vq::qp_state::rts);
        EXPECT_EQ(got.timeout, 16);
        EXPECT_EQ(got.retry_cnt, 7);
        EXPECT_EQ(got.rnr_retry, 7);
        // Back to RESET: nothing of it is left.
        vq::qp_attr r;
        r.state = vq::qp_state::reset;
        ASSERT_EQ(vq::modify_qp(p.qa, &r, vq::QP_ATTR_STATE), 0);
        ASSERT_EQ(vq::query_qp(p.qa, &got), 0);
        EXPECT_EQ(got.state, vq::qp_state::reset);
        EXPECT_EQ(got.dest_qp_num, 0u);
        EXPECT_EQ(got.timeout, 0);
        EXPECT_EQ(got.qp_access_flags, 0u);
    }
}

TEST(Uc, SendsAndWritesNeedNoAcknowledgement)
{
    rc_pair p(dev0a, dev0b, qp_type::uc);
    ASSERT_TRUE(p.ok());
    fill(p.a.buf, 20000, 4);
    ASSERT_EQ(p.b.recv(p.qb, 1, 0, 20000), 0);
    ASSERT_EQ(vq::post_send(p.qa, 1, p.a.buf, 20000, p.a.mr->lkey, vq::WR_SIGNALED), 0);
    ASSERT_EQ(vq::post_write(p.qa, 2, p.a.buf, 5000, p.a.mr->lkey, p.b.mr->rkey, p.b.at(100000), vq::WR_SIGNALED), 0);
    auto w = wait_wcs(p.a, 2, {&p.b});
    ASSERT_EQ(w.size(), 2u);
    auto r = wait_wcs(p.b, 1, {&p.a});
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].byte_len, 20000u);
    EXPECT_EQ(std::memcmp(p.a.buf, p.b.buf, 20000), 0);
    wait_wcs(p.b, 0, {&p.a}, 50);
    EXPECT_TRUE(test::drain(p.b, {&p.a}, 50).empty());
    EXPECT_EQ(std::memcmp(p.a.buf, p.b.buf + 100000, 5000), 0);
}

TEST(Uc, ALostPacketLosesOnlyItsMessage)
{
    impair_fwd f;
    f.drop = 0.05;
    f.seed = 11;
    f.start();
    ASSERT_TRUE(f.ok());
    rc_pair p(dev0a, dev1b, qp_type::uc);
    ASSERT_TRUE(p.ok());
    constexpr std::uint32_t n = 200, slot = 4096;
    for (std::uint32_t i = 0; i < n; i++)
        ASSERT_EQ(p.b.recv(p.qb, i, i * slot, slot), 0);
    fill(p.a.buf, n * slot, 8);
    for (std::uint32_t i = 0; i < n; i++) {
        std::memcpy(p.a.buf + i * slot, &i, 4);
        int rc;
        while ((rc = vq::post_send(p.qa, i, p.a.buf + i * slot, 3000, p.a.mr->lkey, 0)) == -FI_EAGAIN)
            p.a.pump(), p.b.pump();
        ASSERT_EQ(rc, 0);
    }
    auto r = drain(p.b, {&p.a}, 500);
    EXPECT_LT(r.size(), n) << "nothing was lost: the test did not test";
    EXPECT_GT(r.size(), n / 2);
    // Every delivered message is whole and one of those sent, in increasing order.
    std::int64_t prev = -1;
    for (std::size_t k = 0; k < r.size(); k++) {
        ASSERT_EQ(r[k].status, wc_status::success);
        ASSERT_EQ(r[k].byte_len, 3000u);
        std::uint32_t id;
        const std::uint8_t *got = p.b.buf + r[k].wr_id * slot;
        std::memcpy(&id, got, 4);
        ASSERT_LT(id, n);
        EXPECT_GT(static_cast<std::int64_t>(id), prev);
        prev = id;
        EXPECT_EQ(std::memcmp(got, p.a.buf + id * slot, 3000), 0);
    }
}

/* ---------------- RAW_PACKET ---------------- */

struct raw_pair {
    ep a{dev0a}, b{dev0b};
    vq::qp *qa = a.qp(qp_type::raw_packet, vq::OPS_SEND | vq::OPS_TSO, {256, 1024, 4, 1, 256});
    vq::qp *qb = b.qp(qp_type::raw_packet, vq::OPS_SEND, {256, 1024, 1, 1, 0});
    raw_pair()
    {
        if (!ok())
            return; // reported: the test checks ok()
        ud_up(qa);
        ud_up(qb);
    }
    bool ok() const { return a.ok() && b.ok() && qa && qb; }
};

TEST(Raw, ZeroCopySendsCompleteWhenThePeerReleasesTheBufferAndInOrder)
{
    raw_pair p;
    ASSERT_TRUE(p.ok());
    constexpr std::uint32_t total = 20000, mss = 1000, nseg = total / mss;
    for (std::uint32_t i = 0; i < nseg + 1; i++)
        ASSERT_EQ(p.b.recv(p.qb, i, i * 2048, 2048), 0);
    fill(p.a.buf, 100000, 5);
    auto h = tcp_header(1, 1);
    // A TSO send of 20000 bytes: above SHUNT_ETHDEV_ZCOPY_BYTES, so its
    // segments point into the buffer (external buffers); then a copied send.
    vq::wr_start(p.qa);
    p.qa->wr_id = 1;
    p.qa->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_tso(p.qa, h.data(), 54, mss);
    vq::wr_set_sge(p.qa, p.a.mr->lkey, p.a.at(0), total);
    p.qa->wr_id = 2;
    vq::wr_send(p.qa);
    vq::wr_set_sge(p.qa, p.a.mr->lkey, p.a.at(50000), 100);
    ASSERT_EQ(vq::wr_complete(p.qa), 0);
    // net_ring hands the mbufs themselves to the other port: until it has
    // received (and freed) them, the zero-copy send is not done, and the
    // copied one behind it waits too.
    EXPECT_TRUE(drain(p.a, {}, 50).empty()) << "a zero-copy send completed while its buffer was in flight";
    auto r = wait_wcs(p.b, nseg + 1);
    ASSERT_EQ(r.size(), nseg + 1);
    for (std::uint32_t i = 0; i < nseg; i++) {
        tcp_frame t = decode(p.b.buf + r[i].wr_id * 2048, r[i].byte_len);
        ASSERT_TRUE(t.ok);
        EXPECT_EQ(std::memcmp(t.payload, p.a.buf + i * mss, mss), 0) << i;
    }
    EXPECT_EQ(r[nseg].byte_len, 100u);
    EXPECT_EQ(std::memcmp(p.b.buf + r[nseg].wr_id * 2048, p.a.buf + 50000, 100), 0);
    auto s = wait_wcs(p.a, 2);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0].wr_id, 1u);
    EXPECT_EQ(s[0].opcode, vq::wc_opcode::tso);
    EXPECT_EQ(s[1].wr_id, 2u);
}

TEST(Raw, AQpWithAThreadDomainOwnsTheQueueReceivesEveryFrameAndKeepsOthersOff)
{
    // The port's only queue pair goes to the RAW_PACKET QP with a thread
    // domain: what arrives is its alone (the shared receive path must not
    // take it), and QPs that need the shared queue are refused meanwhile.
    ep a(dev1a), b(dev1b, 4u << 20, true);
    ASSERT_TRUE(a.ok() && b.ok());
    vq::td *td = nullptr;
    ASSERT_EQ(vq::alloc_td(b.ctx, &td), 0);
    vq::qp *qb = b.qp(qp_type::raw_packet, vq::OPS_SEND, {64, 256, 1, 1, 0}, td);
    vq::qp *qa = a.qp(qp_type::raw_packet, vq::OPS_SEND, {256, 64, 1, 1, 0});
    ASSERT_TRUE(qa && qb);
    ud_up(qa);
    ud_up(qb);
    vq::qp_init_attr ia;
    ia.type = qp_type::ud;
    ia.send_cq = ia.recv_cq = b.cq;
    ia.send_ops_flags = vq::OPS_SEND;
    ia.cap = {16, 16, 1, 1, 0};
    vq::qp *ud = nullptr;
    EXPECT_EQ(vq::create_qp(b.pd, &ia, &ud), -FI_EBUSY) << "the shared queue is owned";
    constexpr unsigned n = 100;
    for (unsigned i = 0; i < n; i++)
        ASSERT_EQ(b.recv(qb, i, i * 2048, 2048), 0);
    fill(a.buf, n * 64, 8);
    for (unsigned i = 0; i < n; i++) {
        std::memset(a.buf + i * 64, 0xff, 6); // broadcast, any source
        int rc;
        while ((rc = vq::post_send(qa, i, a.buf + i * 64, 64, a.mr->lkey, 0)) == -FI_EAGAIN)
            a.pump();
        ASSERT_EQ(rc, 0);
    }
    auto r = wait_wcs(b, n, {&a});
    ASSERT_EQ(r.size(), n);
    for (unsigned i = 0; i < n; i++) {
        EXPECT_EQ(r[i].wr_id, i);
        EXPECT_EQ(r[i].byte_len, 64u);
        EXPECT_EQ(std::memcmp(b.buf + i * 2048, a.buf + i * 64, 64), 0) << i;
    }
    EXPECT_EQ(counter(dev1b, eth::c_rx_no_raw), 0u) << "frames went to the shared path";
    ASSERT_EQ(vq::destroy_qp(qb), 0);
    b.qps.clear();
    EXPECT_EQ(vq::create_qp(b.pd, &ia, &ud), 0) << "released with the QP";
    if (ud) {
        EXPECT_EQ(vq::destroy_qp(ud), 0);
    }
    EXPECT_EQ(vq::dealloc_td(td), 0);
}

TEST(Raw, IpCsumInSoftwareFillsBothChecksumsAndTheReceiverSeesThemValid)
{
    raw_pair p;
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(p.b.recv(p.qb, 1, 0, 4096), 0);
    auto h = tcp_header(5, 6);
    std::memcpy(p.a.buf, h.data(), h.size());
    fill(p.a.buf + h.size(), 900, 6);
    p.a.buf[14 + 2] = static_cast<std::uint8_t>((20 + 20 + 900) >> 8);
    p.a.buf[14 + 3] = static_cast<std::uint8_t>(20 + 20 + 900);
    ASSERT_EQ(vq::post_send(p.qa, 1, p.a.buf, 54 + 900, p.a.mr->lkey, vq::WR_SIGNALED | vq::WR_IP_CSUM), 0);
    auto r = wait_wcs(p.b, 1, {&p.a});
    ASSERT_EQ(r.size(), 1u);
    tcp_frame t = decode(p.b.buf, r[0].byte_len);
    ASSERT_TRUE(t.ok);
    EXPECT_TRUE(t.ip_csum_ok);
    EXPECT_TRUE(t.l4_csum_ok);
    EXPECT_TRUE(r[0].wc_flags & vq::WC_IP_CSUM_OK);
    // A frame with a wrong checksum is delivered without the flag.
    ASSERT_EQ(p.b.recv(p.qb, 2, 0, 4096), 0);
    ASSERT_EQ(vq::post_send(p.qa, 2, p.a.buf, 54 + 900, p.a.mr->lkey, vq::WR_SIGNALED), 0);
    r = wait_wcs(p.b, 1, {&p.a});
    ASSERT_EQ(r.size(), 1u);
    EXPECT_FALSE(r[0].wc_flags & vq::WC_IP_CSUM_OK);
}

TEST(Raw, SoftwareTsoPutsSegmentsWithRightSizesSequenceNumbersAndChecksumsOnTheWire)
{
    raw_pair p;
    ASSERT_TRUE(p.ok());
    const std::uint32_t total = 65536;
    const std::uint16_t mss = 1448;
    const std::uint32_t nseg = (total + mss - 1) / mss;
    for (std::uint32_t i = 0; i < nseg; i++)
        ASSERT_EQ(p.b.recv(p.qb, i, i * 2048, 2048), 0);
    auto h = tcp_header(0x7ffffff0u, 1000); // the sequence number wraps
    fill(p.a.buf + 100000, total, 12);
    vq::wr_start(p.qa);
    p.qa->wr_id = 3;
    p.qa->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_tso(p.qa, h.data(), 54, mss);
    vq::wr_set_sge(p.qa, p.a.mr->lkey, p.a.at(100000), total);
    ASSERT_EQ(vq::wr_complete(p.qa), 0);
    auto r = wait_wcs(p.b, nseg, {&p.a});
    ASSERT_EQ(r.size(), nseg);
    auto s = wait_wcs(p.a, 1, {&p.b});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, wc_status::success);
    std::uint32_t bytes = 0;
    for (std::uint32_t i = 0; i < nseg; i++) {
        SCOPED_TRACE(i);
        std::uint32_t part = std::min<std::uint32_t>(mss, total - i * mss);
        tcp_frame t = decode(p.b.buf + r[i].wr_id * 2048, r[i].byte_len);
        ASSERT_TRUE(t.ok);
        EXPECT_EQ(r[i].byte_len, 54 + part);
        EXPECT_EQ(t.ip_len, 40 + part);
        EXPECT_EQ(t.seq, 0x7ffffff0u + i * mss);
        EXPECT_TRUE(t.ip_csum_ok);
        EXPECT_TRUE(t.l4_csum_ok);
        EXPECT_EQ(t.flags & 0x09, i + 1 == nseg ? (h[14 + 20 + 13] & 0x09) : 0);
        EXPECT_EQ(std::memcmp(t.payload, p.a.buf + 100000 + i * mss, part), 0);
        bytes += part;
    }
    EXPECT_EQ(bytes, total);
}

/* ---------------- ARP ---------------- */

TEST(Arp, TheResponderAnswersAndAnAddressHandleWithOnlyAnIpv4AddressIsResolved)
{
    ep a(dev0a), b(dev0b);
    ASSERT_TRUE(a.ok() && b.ok());
    vq::qp *qb = b.qp(qp_type::ud, vq::OPS_SEND);
    ud_up(qb);
    vq::ah_attr aa;
    aa.dest.len = 4;
    std::memcpy(aa.dest.raw, b.ctx->addr.raw + 6, 4);
    std::uint64_t replies = counter(dev0b, eth::c_arp_replies);
    // The resolver asks on a, b's responder answers (b polls in a thread).
    std::atomic<bool> stop{false};
    std::thread t([&] {
        while (!stop)
            b.pump();
    });
    vq::ah *ah = nullptr;
    EXPECT_EQ(vq::create_ah(a.pd, &aa, &ah), 0);
    stop = true;
    t.join();
    if (ah)
        a.ahs.push_back(ah);
    EXPECT_GT(counter(dev0b, eth::c_arp_replies), replies);
    // An address nobody has: no answer within SHUNT_ETHDEV_ARP_MS.
    aa.dest.raw[3] ^= 0x55;
    vq::ah *none = nullptr;
    EXPECT_EQ(vq::create_ah(a.pd, &aa, &none), -FI_EHOSTUNREACH);
}

/* ---------------- Malformed frames ---------------- */

/** A valid UD frame for QP @p qpn of pair0b, captured as pair0b would see it. */
std::vector<std::uint8_t> valid_ud_frame(ep &a, ep &b, std::uint32_t qpn)
{
    // Send it to a fake IPv4 address at b's MAC: b's RAW QP receives it as a
    // plain frame; then make it b's and fix the checksums.
    vq::qp *raw = b.qp(qp_type::raw_packet, vq::OPS_SEND, {16, 64, 1, 1, 0});
    ud_up(raw);
    for (int i = 0; i < 64; i++)
        EXPECT_EQ(b.recv(raw, i, i * 4096, 4096), 0);
    drain(b, {&a}, 20); // whatever earlier tests left in the rings
    vq::qp *ud = a.qp(qp_type::ud, vq::OPS_SEND);
    ud_up(ud);
    vq::ah_attr aa;
    aa.dest = b.ctx->addr;
    aa.dest.raw[9] ^= 1;
    vq::ah *ah = nullptr;
    EXPECT_EQ(vq::create_ah(a.pd, &aa, &ah), 0);
    a.ahs.push_back(ah);
    fill(a.buf, 256, 77);
    vq::wr_start(ud);
    ud->wr_id = 1;
    ud->wr_flags = 0;
    vq::wr_send(ud);
    vq::wr_set_sge(ud, a.mr->lkey, a.at(0), 256);
    vq::wr_set_ud_addr(ud, ah, qpn, 0x1111);
    EXPECT_EQ(vq::wr_complete(ud), 0);
    std::vector<std::uint8_t> f;
    for (const vq::wc &w : drain(b, {&a}, 50)) {
        const std::uint8_t *x = b.buf + w.wr_id * 4096;
        if (w.byte_len > 60 && be16(x + 12) == 0x0800 && x[14 + 9] == 17 && be16(x + 14 + 20 + 2) == 4791)
            f.assign(x, x + w.byte_len);
    }
    EXPECT_EQ(vq::destroy_qp(raw), 0);
    b.qps.erase(std::find(b.qps.begin(), b.qps.end(), raw));
    if (f.size() < 60)
        return f;
    std::memcpy(f.data() + 14 + 16, b.ctx->addr.raw + 6, 4);
    return f;
}

/** Send frame @p f as it is from RAW_PACKET QP @p inj of @p a (waits for room). */
void send_frame(ep &a, vq::qp *inj, const std::vector<std::uint8_t> &f)
{
    std::memcpy(a.buf + 1000000, f.data(), f.size());
    int rc;
    while ((rc = vq::post_send(inj, 0, a.buf + 1000000, static_cast<std::uint32_t>(f.size()), a.mr->lkey, 0)) ==
           -FI_EAGAIN)
        a.pump();
    ASSERT_EQ(rc, 0);
}

/** Recompute the IPv4 checksum and the ICRC of RoCE frame @p f. */
void refresh(std::vector<std::uint8_t> &f)
{
    std::uint8_t *ip = f.data() + 14;
    ip[10] = ip[11] = 0;
    std::uint16_t c = static_cast<std::uint16_t>(~ones_sum(ip, 20));
    ip[10] = static_cast<std::uint8_t>(c >> 8);
    ip[11] = static_cast<std::uint8_t>(c);
    std::size_t end = 14 + be16(ip + 2);
    if (end > f.size() || end < 14 + 20 + 8 + 12 + 4)
        return;
    std::uint32_t crc = eth::icrc_headers(ip);
    crc = eth::crc32_update(crc, f.data() + 14 + 40, end - 4 - 14 - 40);
    eth::icrc_store(f.data() + end - 4, crc);
}

TEST(Malformed, BadFramesAreDroppedAndCountedAndTheQpKeepsWorking)
{
    ep a(dev0a), b(dev0b);
    ASSERT_TRUE(a.ok() && b.ok());
    vq::qp *target = b.qp(qp_type::ud, vq::OPS_SEND, {64, 1024, 1, 1, 0});
    ud_up(target);
    for (int i = 0; i < 64; i++)
        ASSERT_EQ(b.recv(target, 100 + i, 8192 + i * 4096, 4096), 0);
    auto good = valid_ud_frame(a, b, target->qp_num);
    ASSERT_GE(good.size(), 14u + 20 + 8 + 12 + 8 + 256 + 4);
    refresh(good);
    vq::qp *inj = a.qp(qp_type::raw_packet, vq::OPS_SEND, {256, 16, 1, 1, 0});
    ud_up(inj);
    auto inject = [&](const std::vector<std::uint8_t> &f) {
        send_frame(a, inj, f);
        a.pump();
        b.pump();
    };
    // The baseline is accepted.
    inject(good);
    auto r = wait_wcs(b, 1, {&a});
    ASSERT_EQ(r.size(), 1u) << "the reference frame was not accepted";
    EXPECT_EQ(r[0].byte_len, 40u + 256u);
    struct kase {
        const char *name;
        unsigned counter;
        std::function<void(std::vector<std::uint8_t> &)> mut;
        bool fix = true;
    };
    std::vector<kase> cases = {
        {"IPv4 total length beyond the frame", eth::c_rx_short, [](auto &f) { f[14 + 2] = 0x7f; }},
        {"IPv4 total length too small", eth::c_rx_bad_len, [](auto &f) { f[14 + 2] = 0; f[14 + 3] = 30; }},
        {"UDP length inconsistent", eth::c_rx_bad_len, [](auto &f) { f[14 + 20 + 5] ^= 4; }},
        {"IPv4 fragment", eth::c_rx_bad_ip, [](auto &f) { f[14 + 6] |= 0x20; }},
        {"IPv4 header checksum", eth::c_rx_bad_ip, [](auto &f) { f[14 + 10] ^= 1; }, false},
        {"ICRC", eth::c_rx_bad_icrc, [](auto &f) { f[f.size() - 1] ^= 0x80; }, false},
        {"payload bit flip", eth::c_rx_bad_icrc, [](auto &f) { f[100] ^= 1; }, false},
        {"unknown opcode", eth::c_rx_bad_opcode, [](auto &f) { f[42] = 0x1f; }},
        {"RC opcode to a UD QP", eth::c_rx_bad_opcode, [](auto &f) { f[42] = 0x04; }},
        {"BTH version", eth::c_rx_bad_bth, [](auto &f) { f[43] |= 0x3; }},
        {"P_Key", eth::c_rx_bad_bth, [](auto &f) { f[44] = 0x12; }},
        {"no such QP", eth::c_rx_no_qp, [](auto &f) { f[47] ^= 0x5; f[48] ^= 0x3; }},
        {"pad beyond the payload", eth::c_rx_bad_len,
         [](auto &f) {
             // Shrink the datagram to its headers and claim padding.
             std::size_t keep = 14 + 20 + 8 + 12 + 8 + 4;
             f.resize(keep);
             f[14 + 2] = 0, f[14 + 3] = static_cast<std::uint8_t>(keep - 14);
             f[14 + 20 + 4] = 0, f[14 + 20 + 5] = static_cast<std::uint8_t>(keep - 14 - 20);
             f[43] |= 0x30;
         }},
    };
    for (auto &k : cases) {
        SCOPED_TRACE(k.name);
        auto f = good;
        k.mut(f);
        if (k.fix)
            refresh(f);
        std::uint64_t before = counter(dev0b, k.counter);
        inject(f);
        EXPECT_TRUE(drain(b, {&a}, 20).empty()) << "a malformed frame was delivered";
        EXPECT_EQ(counter(dev0b, k.counter), before + 1);
    }
    // Short frames of every length, and random corruption of the good one:
    // none may crash the driver or be delivered unless it is still valid.
    std::mt19937 rng(99);
    for (std::size_t n = 14; n < 80; n++)
        inject(std::vector<std::uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
    int delivered = 0;
    for (int i = 0; i < 2000; i++) {
        auto f = good;
        int flips = 1 + static_cast<int>(rng() % 4);
        for (int j = 0; j < flips; j++)
            f[14 + rng() % (f.size() - 14)] ^= static_cast<std::uint8_t>(1 + rng() % 255);
        if (rng() % 2)
            refresh(f); // valid checksums over broken fields
        inject(f);
        delivered += static_cast<int>(drain(b, {&a}, 0).size());
        if (delivered > 60)
            break; // receives run out (each accepted one used a valid QP number and Q_Key)
    }
    // The QP still works.
    b.wcs.clear();
    ASSERT_EQ(b.recv(target, 7, 0, 4096), 0);
    inject(good);
    r = drain(b, {&a}, 100);
    EXPECT_FALSE(r.empty()) << "the QP stopped receiving after malformed frames";
}

/* ---------------- Ports with several queue pairs ---------------- */

/** An ARP request from @p a for @p b's IPv4 address. */
std::vector<std::uint8_t> arp_request(const ep &a, const ep &b)
{
    std::vector<std::uint8_t> f(60, 0); // padded to the minimum frame
    std::memset(f.data(), 0xff, 6);
    std::memcpy(f.data() + 6, a.ctx->addr.raw, 6);
    f[12] = 0x08, f[13] = 0x06;
    const std::uint8_t arp[8] = {0, 1, 8, 0, 6, 4, 0, 1}; // Ethernet, IPv4, request
    std::memcpy(f.data() + 14, arp, 8);
    std::memcpy(f.data() + 22, a.ctx->addr.raw, 10); // sender MAC and IPv4
    std::memcpy(f.data() + 38, b.ctx->addr.raw + 6, 4);
    return f;
}

TEST(MultiQueue, RoceAndArpFramesReachTheirQpsOnWhicheverQueueTheyArrive)
{
    // Two queue pairs on pair2a and pair2b. On net_ring a frame sent on
    // queue 1 arrives on the peer's queue 1, as a port that spreads frames
    // over its queues (RSS, net_af_packet's fanout) puts some there: RoCE
    // frames and ARP must reach the shared receive path from every queue,
    // whether a RAW_PACKET QP owns it or nobody does.
    ASSERT_EQ(eth::set_port_queues(device(dev2a), 2), 0);
    ASSERT_EQ(eth::set_port_queues(device(dev2b), 2), 0);
    ep a(dev2a), b(dev2b);
    ASSERT_TRUE(a.ok() && b.ok());
    vq::qp *target = b.qp(qp_type::ud, vq::OPS_SEND, {64, 64, 1, 1, 0});
    ud_up(target);
    auto good = valid_ud_frame(a, b, target->qp_num); // leaves a UD QP on a's shared queue 0
    ASSERT_GE(good.size(), 14u + 20 + 8 + 12 + 8 + 256 + 4);
    refresh(good);
    auto plain = good; // not RoCE: UDP port 4792
    plain[14 + 20 + 3] = 0xb8;
    vq::td *ta = nullptr, *tb = nullptr;
    ASSERT_EQ(vq::alloc_td(a.ctx, &ta), 0);
    ASSERT_EQ(vq::alloc_td(b.ctx, &tb), 0);
    vq::qp *inj = a.qp(qp_type::raw_packet, vq::OPS_SEND, {64, 16, 1, 1, 0}, ta); // owns a's queue 1
    ASSERT_NE(inj, nullptr);
    ud_up(inj);
    auto inject = [&](const std::vector<std::uint8_t> &f) { send_frame(a, inj, f); };
    auto ud_recvs = [&](const std::vector<vq::wc> &r) {
        return std::count_if(r.begin(), r.end(), [](const vq::wc &w) { return w.wr_id >= 100 && w.wr_id < 200; });
    };

    // b's queue 1 belongs to nobody: the shared path must poll it.
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(b.recv(target, 100 + i, 8192 + i * 4096, 4096), 0);
    inject(good);
    auto r = wait_wcs(b, 1, {&a}, 3000);
    ASSERT_EQ(r.size(), 1u) << "a RoCE frame on a queue nobody owns was lost";
    EXPECT_EQ(r[0].wr_id, 100u);
    EXPECT_EQ(r[0].status, vq::wc_status::success);
    EXPECT_EQ(r[0].byte_len, 40u + 256) << "the GRH area and the payload";
    EXPECT_EQ(std::memcmp(b.buf + 8192 + 40, a.buf, 256), 0);
    // Poll both until @p done (at most 5 s), then 50 ms more for anything extra.
    auto poll_until = [&](const std::function<bool(const std::vector<vq::wc> &)> &done) {
        std::vector<vq::wc> got;
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!done(got) && std::chrono::steady_clock::now() < end) {
            auto more = drain(b, {&a}, 1);
            got.insert(got.end(), more.begin(), more.end());
        }
        auto more = drain(b, {&a}, 50);
        got.insert(got.end(), more.begin(), more.end());
        return got;
    };
    std::uint64_t replies = counter(dev2b, eth::c_arp_replies);
    inject(arp_request(a, b));
    poll_until([&](const std::vector<vq::wc> &) { return counter(dev2b, eth::c_arp_replies) > replies; });
    EXPECT_EQ(counter(dev2b, eth::c_arp_replies), replies + 1) << "an ARP request on a queue nobody owns";

    // A RAW_PACKET QP with a thread domain takes b's queue 1: it gets the
    // frames that are not RoCE for b's QPs (ARP included, as on the shared
    // queue), and the UD QP still gets its own.
    vq::qp *own = b.qp(qp_type::raw_packet, vq::OPS_SEND, {16, 64, 1, 1, 0}, tb);
    ASSERT_NE(own, nullptr);
    ud_up(own);
    for (int i = 0; i < 32; i++)
        ASSERT_EQ(b.recv(own, 300 + i, 200000 + i * 2048, 2048), 0);
    inject(plain);
    inject(good);
    inject(arp_request(a, b));
    inject(good);
    auto owner_wcs = [](const std::vector<vq::wc> &all) {
        std::vector<vq::wc> o;
        std::copy_if(all.begin(), all.end(), std::back_inserter(o), [](const vq::wc &w) { return w.wr_id >= 300; });
        return o;
    };
    r = poll_until([&](const std::vector<vq::wc> &got) {
        return ud_recvs(got) >= 2 && owner_wcs(got).size() >= 2 &&
               counter(dev2b, eth::c_arp_replies) >= replies + 2;
    });
    std::vector<vq::wc> raw = owner_wcs(r);
    EXPECT_EQ(ud_recvs(r), 2) << "RoCE frames on an owned queue went astray";
    ASSERT_EQ(raw.size(), 2u) << "the owner receives the plain frame and the ARP request, nothing else";
    EXPECT_EQ(raw[0].byte_len, plain.size());
    EXPECT_EQ(std::memcmp(b.buf + 200000, plain.data(), plain.size()), 0);
    EXPECT_EQ(raw[1].byte_len, 60u);
    EXPECT_EQ(be16(b.buf + 200000 + 2048 + 12), 0x0806);
    EXPECT_EQ(counter(dev2b, eth::c_arp_replies), replies + 2) << "an ARP request on an owned queue";

    // Its queue back with the QP: the shared path polls it again.
    ASSERT_EQ(vq::destroy_qp(own), 0);
    b.qps.erase(std::find(b.qps.begin(), b.qps.end(), own));
    inject(good);
    r = wait_wcs(b, 1, {&a}, 3000);
    ASSERT_EQ(r.size(), 1u) << "a RoCE frame on a queue given back";
    EXPECT_EQ(r[0].wr_id, 103u);
    EXPECT_EQ(vq::destroy_qp(inj), 0); // before its thread domain
    a.qps.erase(std::find(a.qps.begin(), a.qps.end(), inj));
    EXPECT_EQ(vq::dealloc_td(ta), 0);
    EXPECT_EQ(vq::dealloc_td(tb), 0);
}

} // namespace
} // namespace shunt::test
