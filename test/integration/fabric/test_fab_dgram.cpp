// shm provider, FI_EP_DGRAM, two real processes: datagrams and the TSO
// extension (header + payload cut into MSS-sized datagrams).
#include "fab_client.h"

#include "fabric/ext_tso.h"

using namespace shunt;
using namespace shunt::fabric;
using namespace shunt::test::fab;

namespace {
struct dgram : ::testing::Test {
    peer_proc p{"dgram"};
    node n;
    fi_addr_t to = FI_ADDR_NOTAVAIL;
    void SetUp() override { connect_peer(n, p, FI_EP_DGRAM, to); }
    void TearDown() override { n.close(); }
};
} // namespace

TEST_F(dgram, DatagramEchoByteForByte)
{
    for (std::size_t len : {std::size_t(1), std::size_t(100), std::size_t(n.fi->ep_attr->max_msg_size)}) {
        std::vector<std::uint8_t> out(len), in(len);
        fill_pattern(out.data(), len, len);
        context rctx;
        ASSERT_EQ(recv(n.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
        ASSERT_EQ(retry(n.cq, [&] { return send(n.ep, out.data(), len, nullptr, to, nullptr); }), 0);
        cq_tagged_entry e{};
        fi_addr_t src;
        do
            ASSERT_EQ(wait_cq(n.cq, e, &src), 1);
        while (e.op_context != &rctx);
        EXPECT_EQ(e.len, len);
        EXPECT_EQ(src, to);
        EXPECT_EQ(in, out);
    }
    std::vector<std::uint8_t> big(n.fi->ep_attr->max_msg_size + 1);
    EXPECT_EQ(send(n.ep, big.data(), big.size(), nullptr, to, nullptr), -FI_EMSGSIZE);
}

// max_msg_size is the UD MTU minus the provider's datagram header (4096 - 88
// on shm): 1 KiB datagrams and every size up to it go, from plain and from
// registered buffers, tagged with remote CQ data too; one more byte is
// -FI_EMSGSIZE. inject_size stays what one inline send carries.
TEST_F(dgram, DatagramsUpToTheUdMtu)
{
    const std::size_t max = n.fi->ep_attr->max_msg_size;
    EXPECT_EQ(max, 4096u - 88u) << "shm's UD MTU minus the datagram header";
    EXPECT_GE(max, 1024u);
    EXPECT_LT(n.fi->tx_attr->inject_size, max);
    std::vector<std::uint8_t> reg(max);
    fid_mr *mr = nullptr;
    ASSERT_EQ(mr_reg(n.domain, reg.data(), reg.size(), FI_SEND, 0, 0, 0, &mr, nullptr), 0);
    void *desc = mr_desc(mr);
    std::uint64_t seed = 1;
    for (std::size_t len : {std::size_t(1024), n.fi->tx_attr->inject_size, n.fi->tx_attr->inject_size + 1,
                            std::size_t(2000), max - 16, max}) {
        for (int how = 0; how < 3; how++) { // plain send, registered buffer, tagged with remote CQ data
            std::vector<std::uint8_t> out(len), in(len + 8, 0xee);
            fill_pattern(out.data(), len, seed);
            std::uint8_t *src = out.data();
            if (how == 1) {
                std::memcpy(reg.data(), out.data(), len);
                src = reg.data();
            }
            context rctx, sctx;
            if (how == 2)
                ASSERT_EQ(trecv(n.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, 0, ~0ULL, &rctx), 0);
            else
                ASSERT_EQ(recv(n.ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
            ASSERT_EQ(retry(n.cq, [&] {
                          return how == 2 ? tsenddata(n.ep, src, len, nullptr, 9, to, 3, &sctx)
                                          : send(n.ep, src, len, how == 1 ? desc : nullptr, to, &sctx);
                      }),
                      0)
                << len;
            bool sent = false, got = false;
            while (!(sent && got)) {
                cq_tagged_entry e{};
                ASSERT_EQ(wait_cq(n.cq, e), 1) << len << " bytes, case " << how;
                if (e.op_context == &sctx) {
                    sent = true;
                    continue;
                }
                ASSERT_EQ(e.op_context, &rctx);
                got = true;
                EXPECT_EQ(e.len, len);
                if (how == 2) {
                    EXPECT_EQ(e.tag, 4u);
                    EXPECT_EQ(e.data, 10u);
                }
            }
            for (std::size_t i = 0; i < len; i++)
                ASSERT_EQ(in[i], out[i]) << "byte " << i << " of " << len;
            EXPECT_EQ(in[len], 0xee);
            seed++;
        }
    }
    std::vector<std::uint8_t> big(max + 1);
    EXPECT_EQ(send(n.ep, big.data(), big.size(), nullptr, to, nullptr), -FI_EMSGSIZE);
    EXPECT_EQ(tsend(n.ep, big.data(), big.size(), nullptr, to, 1, nullptr), -FI_EMSGSIZE);
    EXPECT_EQ(inject(n.ep, big.data(), n.fi->tx_attr->inject_size + 1, to), -FI_EMSGSIZE);
    EXPECT_EQ(close(&mr->fid), 0);
}

TEST_F(dgram, TsoExtensionSegmentsHeaderAndPayload)
{
    ops_tso *tso = nullptr;
    ASSERT_EQ(open_ops(&n.ep->fid, FI_SHUNT_TSO_OPS_1, 0, reinterpret_cast<void **>(&tso), nullptr), 0);
    ASSERT_NE(tso, nullptr);
    tso_attr at;
    ASSERT_EQ(tso->query(n.ep, &at), 0);
    EXPECT_GT(at.max_mss, 0u);
    const char hdr[20] = "HEADER-0123456789AB";
    std::vector<std::uint8_t> payload(900);
    fill_pattern(payload.data(), payload.size(), 4);
    std::vector<std::vector<std::uint8_t>> in(3, std::vector<std::uint8_t>(512));
    context rctx[3];
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(recv(n.ep, in[std::size_t(i)].data(), 512, nullptr, FI_ADDR_UNSPEC, &rctx[i]), 0);
    iovec v{payload.data(), payload.size()};
    context sctx;
    ASSERT_EQ(tso->send_tso(n.ep, hdr, sizeof hdr, &v, nullptr, 1, 300, to, FI_COMPLETION, &sctx), 0);
    EXPECT_EQ(tso->send_tso(n.ep, hdr, sizeof hdr, &v, nullptr, 1, 0, to, 0, nullptr), -FI_EINVAL) << "mss 0";
    EXPECT_EQ(tso->send_tso(n.ep, hdr, sizeof hdr, nullptr, nullptr, 1, 64, to, 0, nullptr), -FI_EINVAL)
        << "null payload with count > 0 is refused, not dereferenced";
    int got = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got < 3 && std::chrono::steady_clock::now() < end) {
        cq_tagged_entry e{};
        ASSERT_EQ(wait_cq(n.cq, e), 1);
        if (e.op_context == &sctx)
            continue;
        int i = int(static_cast<context *>(e.op_context) - rctx);
        ASSERT_TRUE(i >= 0 && i < 3);
        ASSERT_EQ(e.len, sizeof hdr + 300) << "each datagram: the header and one MSS of payload";
        EXPECT_EQ(std::memcmp(in[std::size_t(i)].data(), hdr, sizeof hdr), 0);
        EXPECT_EQ(std::memcmp(in[std::size_t(i)].data() + sizeof hdr, payload.data() + 300 * std::size_t(i), 300), 0)
            << "segment " << i << " in order";
        got++;
    }
    EXPECT_EQ(got, 3);
    // TSO is a DGRAM extension only
    node r;
    ASSERT_EQ(r.open(FI_EP_RDM, false), 0);
    void *ops = nullptr;
    EXPECT_EQ(open_ops(&r.ep->fid, FI_SHUNT_TSO_OPS_1, 0, &ops, nullptr), -FI_ENOSYS);
    r.close();
}

TEST_F(dgram, TaggedDatagramsAndCancel)
{
    std::uint8_t out[64], in[64] = {};
    fill_pattern(out, sizeof out, 12);
    context rc, stale;
    ASSERT_EQ(trecv(n.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, 0x41, 0, &rc), 0);
    ASSERT_EQ(trecv(n.ep, in, sizeof in, nullptr, FI_ADDR_UNSPEC, 0x9999, 0, &stale), 0);
    ASSERT_EQ(retry(n.cq, [&] { return tsend(n.ep, out, sizeof out, nullptr, to, 0x40, nullptr); }), 0);
    cq_tagged_entry e{};
    do
        ASSERT_EQ(wait_cq(n.cq, e), 1);
    while (e.op_context != &rc);
    EXPECT_EQ(e.tag, 0x41u);
    EXPECT_EQ(std::memcmp(in, out, sizeof out), 0);
    ASSERT_EQ(cancel(n.ep, &stale), 0);
    ASSERT_EQ(wait_cq(n.cq, e), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(n.cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, &stale);
    EXPECT_EQ(err.err, FI_ECANCELED);
}
