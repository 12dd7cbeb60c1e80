// The model's trace, checked by a decoder written from the format in
// doc/guides/drivers/mlx5.md and the PRM layout alone: byte offsets, no
// driver or rdma-core structure. Also: the driver guide's feature matrix
// matches what the device claims.
#include <arpa/inet.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "md_table.h"
#include "vq_op_names.h"
#include "mlx5_fixture.h"

namespace shunt::test {
namespace {

/* ---------------- The independent decoder ---------------- */

std::uint32_t rd_be32(const std::uint8_t *p) { return std::uint32_t(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3]; }
std::uint16_t rd_be16(const std::uint8_t *p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }
std::uint32_t rd_le32(const std::uint8_t *p) { return std::uint32_t(p[3]) << 24 | p[2] << 16 | p[1] << 8 | p[0]; }
std::uint16_t rd_le16(const std::uint8_t *p) { return static_cast<std::uint16_t>(p[1] << 8 | p[0]); }

struct record {
    unsigned type;
    std::uint32_t queue, index, seq;
    std::vector<std::uint8_t> bytes;
};

/** Decode a trace file. Fails the test on any framing error. */
std::vector<record> decode(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    std::vector<std::uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<record> out;
    EXPECT_GE(b.size(), 16u);
    if (b.size() < 16)
        return out;
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(b.data()), 8), "MLX5TRC1");
    EXPECT_EQ(rd_le32(b.data() + 8), 1u) << "version";
    std::size_t off = 16;
    while (off < b.size()) {
        EXPECT_LE(off + 16, b.size()) << "truncated record header at " << off;
        if (off + 16 > b.size())
            break;
        record r;
        r.type = rd_le16(b.data() + off);
        std::size_t len = rd_le16(b.data() + off + 2);
        r.queue = rd_le32(b.data() + off + 4);
        r.index = rd_le32(b.data() + off + 8);
        r.seq = rd_le32(b.data() + off + 12);
        EXPECT_LE(off + 16 + len, b.size()) << "truncated record at " << off;
        if (off + 16 + len > b.size())
            break;
        r.bytes.assign(b.begin() + static_cast<std::ptrdiff_t>(off + 16),
                       b.begin() + static_cast<std::ptrdiff_t>(off + 16 + len));
        off += 16 + ((len + 7) & ~std::size_t{7});
        out.push_back(std::move(r));
    }
    return out;
}

/** PRM facts the checks use (ConnectX PRM, "Send WQE" and "CQE" formats). */
enum : std::uint8_t { OP_SEND = 0x0a, OP_WRITE = 0x08, OP_READ = 0x10, OP_FA = 0x12 };
enum : std::uint8_t { CQE_REQ = 0, CQE_RESP_SEND = 2, CQE_REQ_ERR = 13, CQE_RESP_ERR = 14 };

class Trace : public Mlx5Model {
protected:
    std::string dir;
    void configure(model::options &o) override
    {
        char tmpl[] = "/tmp/shunt-mlx5-trace-XXXXXX";
        dir = ::mkdtemp(tmpl);
        o.trace = dir + "/t";
    }
    void TearDown() override
    {
        Mlx5Model::TearDown();
        std::string cmd = "rm -rf '" + dir + "'";
        EXPECT_EQ(std::system(cmd.c_str()), 0);
    }
};

TEST_F(Trace, EveryWqeAndCqeIsRecordedAndDecodesPerThePrm)
{
    vq::cq *acq = A.cq(7); // 8 entries: the owner bit flips within the test
    vq::qp *q = A.qp(vq::qp_type::rc, vq::OPS_SEND | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ |
                                           vq::OPS_ATOMIC_FETCH_AND_ADD,
                     {0, 0, 1, 1, 64}, acq);
    vq::qp *p = B.qp(vq::qp_type::rc, vq::OPS_SEND);
    connect(q, p);
    connect(p, q);
    vq::mr *m = A.reg(8192), *pm = B.reg(8192);
    auto *mb = static_cast<std::uint8_t *>(m->addr);
    std::memcpy(mb, "ABCDEFGH", 8);
    const int rounds = 5;
    for (int i = 0; i < rounds; i++) {
        ASSERT_EQ(vq::post_recv(p, static_cast<std::uint64_t>(i), reinterpret_cast<std::uint64_t>(pm->addr), 64,
                                pm->lkey),
                  0);
        ASSERT_EQ(vq::post_send(q, 10, mb, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
        run(); // the device sees each doorbell alone: its BlueFlame copy is checkable
        ASSERT_EQ(vq::post_write(q, 11, mb, 100, m->lkey, pm->rkey,
                                 reinterpret_cast<std::uint64_t>(pm->addr) + 1000, vq::WR_SIGNALED),
                  0);
        run();
        vq::wr_start(q);
        q->wr_flags = vq::WR_SIGNALED;
        vq::wr_rdma_read(q, pm->rkey, reinterpret_cast<std::uint64_t>(pm->addr) + 1000);
        vq::wr_set_sge(q, m->lkey, reinterpret_cast<std::uint64_t>(mb) + 4096, 50);
        vq::wr_atomic_fetch_add(q, pm->rkey, reinterpret_cast<std::uint64_t>(pm->addr) + 2048, 1);
        vq::wr_set_sge(q, m->lkey, reinterpret_cast<std::uint64_t>(mb) + 5000, 8);
        ASSERT_EQ(vq::wr_complete(q), 0);
        for (int k = 0; k < 4; k++)
            ASSERT_EQ(one(acq).status, vq::wc_status::success);
        ASSERT_EQ(one(p->recv_cq).status, vq::wc_status::success);
    }
    std::string pa = model::trace_path(A.ctx), pb = model::trace_path(B.ctx);
    ASSERT_FALSE(pa.empty());
    auto ra = decode(pa), rb = decode(pb);
    ASSERT_FALSE(ra.empty());

    std::uint32_t seq = 0;
    std::map<std::uint32_t, std::vector<std::uint8_t>> wqe_at; // by BB index: the WQE consumed there
    unsigned nwqe = 0, ncqe = 0, ndb = 0, nbf = 0;
    std::map<std::uint8_t, unsigned> ops;
    for (const record &r : ra) {
        EXPECT_EQ(r.seq, seq++) << "records are numbered in order";
        switch (r.type) {
        case 4: { // doorbell: 8 bytes as stored + kind (0 8-byte, 1 BlueFlame)
            if (r.index == 0xffffffffu)
                break; // a CQ arm doorbell
            ASSERT_EQ(r.bytes.size(), 9u);
            EXPECT_EQ(r.queue, q->qp_num);
            EXPECT_EQ(rd_be32(r.bytes.data()) >> 8 & 0xffff, r.index) << "the doorbell names its WQE";
            EXPECT_EQ(rd_be32(r.bytes.data() + 4) >> 8, q->qp_num);
            ndb++;
            nbf += r.bytes[8];
            break;
        }
        case 1: { // a WQE the device consumed: ctrl segment first
            ASSERT_GE(r.bytes.size(), 16u);
            const std::uint8_t *c = r.bytes.data();
            std::uint32_t w0 = rd_be32(c), w1 = rd_be32(c + 4);
            EXPECT_EQ(w0 >> 8 & 0xffff, r.index & 0xffff) << "WQE index = the device's counter";
            EXPECT_EQ(w1 >> 8, r.queue) << "qpn_ds names the QP";
            std::uint32_t ds = w1 & 0x3f;
            EXPECT_EQ(r.bytes.size(), ds * 16u) << "the record holds ds octowords";
            std::uint8_t op = static_cast<std::uint8_t>(w0 & 0xff);
            ops[op]++;
            EXPECT_EQ(c[11] & 0x0c, 0x08) << "every request was signaled: CE = CQE always";
            if (op == OP_SEND) { // inline: byte count with bit 31, then the bytes
                ASSERT_EQ(ds, 2u);
                EXPECT_EQ(rd_be32(c + 16), 0x80000008u);
                EXPECT_EQ(std::memcmp(c + 20, "ABCDEFGH", 8), 0) << "inline payload";
            } else if (op == OP_WRITE || op == OP_READ) { // raddr, rkey, then a pointer segment
                EXPECT_EQ(rd_be32(c + 24), pm->rkey);
                EXPECT_EQ(rd_be32(c + 32), op == OP_WRITE ? 100u : 50u) << "data segment byte count";
                EXPECT_EQ(rd_be32(c + 36), m->lkey);
            } else if (op == OP_FA) { // raddr, atomic (add in swap_add), 8-byte result segment
                ASSERT_EQ(ds, 4u);
                EXPECT_EQ(rd_be32(c + 36), 1u) << "add value low word";
                EXPECT_EQ(rd_be32(c + 48), 8u);
            } else {
                ADD_FAILURE() << "unexpected opcode " << unsigned(op);
            }
            wqe_at[r.index & 0xffff] = r.bytes;
            nwqe++;
            break;
        }
        case 2: { // a CQE, 64 bytes as written
            ASSERT_EQ(r.bytes.size(), 64u);
            const std::uint8_t *c = r.bytes.data();
            std::uint8_t op_own = c[63];
            EXPECT_EQ(op_own & 1, (r.index / 8) & 1) << "owner bit = pass of producer index " << r.index;
            EXPECT_EQ(op_own >> 4, CQE_REQ) << "the requester saw no error";
            std::uint32_t sop = rd_be32(c + 56);
            EXPECT_EQ(sop & 0xffffff, q->qp_num);
            std::uint16_t ctr = rd_be16(c + 60);
            ASSERT_TRUE(wqe_at.count(ctr)) << "the CQE names a WQE the device consumed";
            EXPECT_EQ(sop >> 24, wqe_at[ctr][3]) << "the CQE carries the WQE's opcode";
            if (wqe_at[ctr][3] == OP_READ) {
                EXPECT_EQ(rd_be32(c + 44), 50u) << "read byte count";
            }
            ncqe++;
            break;
        }
        default:
            ADD_FAILURE() << "record type " << r.type << " in the requester's trace";
        }
    }
    EXPECT_EQ(nwqe, 4u * rounds);
    EXPECT_EQ(ncqe, 4u * rounds);
    EXPECT_EQ(ndb, 3u * rounds) << "one doorbell per batch";
    EXPECT_EQ(nbf, 1u * rounds) << "the single inline send went by BlueFlame";
    EXPECT_EQ(ops[OP_SEND], 1u * rounds);
    // The responder's trace: receive WQEs (terminated lists) and RESP_SEND CQEs.
    unsigned nr = 0, nrc = 0;
    for (const record &r : rb) {
        if (r.type == 3) {
            EXPECT_EQ(rd_be32(r.bytes.data()), 64u) << "receive byte count";
            EXPECT_EQ(rd_be32(r.bytes.data() + 4), pm->lkey);
            EXPECT_EQ(r.bytes.size(), 16u) << "one SGE per receive: a 16-byte WQE, no terminator needed";
            nr++;
        } else if (r.type == 2) {
            EXPECT_EQ(r.bytes[63] >> 4, CQE_RESP_SEND);
            EXPECT_EQ(rd_be32(r.bytes.data() + 44), 8u) << "bytes received";
            EXPECT_EQ(rd_be32(r.bytes.data() + 56) & 0xffffff, p->qp_num);
            nrc++;
        }
    }
    EXPECT_EQ(nr, unsigned(rounds));
    EXPECT_EQ(nrc, unsigned(rounds));
}

/* ---------------- The guide's feature matrix ---------------- */

TEST_F(Mlx5Model, TheDriverGuidesFeatureMatrixMatchesTheDeviceClaims)
{
    std::ifstream in(SHUNT_SOURCE_ROOT "/doc/guides/drivers/mlx5.md");
    ASSERT_TRUE(in) << "cannot read doc/guides/drivers/mlx5.md";
    const auto &ops = vq_ops_by_name();
    const vq::qp_type cols[] = {vq::qp_type::rc, vq::qp_type::uc, vq::qp_type::ud, vq::qp_type::raw_packet};
    vq::device_attr da;
    ASSERT_EQ(vq::query_device(A.ctx, &da), 0);
    std::string line;
    int rows = 0;
    while (std::getline(in, line)) {
        auto c = md_cells(line);
        if (c.size() < 5 || !ops.count(c[0]))
            continue;
        rows++;
        for (int k = 0; k < 4; k++)
            EXPECT_EQ(c[1 + k].rfind("✓", 0) == 0, (da.ops[static_cast<unsigned>(cols[k])] & ops.at(c[0])) != 0)
                << c[0] << " column " << k;
    }
    EXPECT_EQ(rows, 12) << "every operation has a row in the feature matrix";
}

TEST_F(Mlx5Model, AQpWithEveryLimitOfTheDeviceAtOnceCanBeCreated)
{
    vq::device_attr da;
    ASSERT_EQ(vq::query_device(A.ctx, &da), 0);
    const vq::qp_type types[] = {vq::qp_type::rc, vq::qp_type::uc, vq::qp_type::ud, vq::qp_type::raw_packet};
    for (vq::qp_type t : types) {
        SCOPED_TRACE(static_cast<int>(t));
        vq::qp_cap cap{da.max_qp_wr, da.max_qp_wr, da.max_sge, da.max_sge, da.max_inline_data};
        vq::qp *q = A.qp(t, da.ops[static_cast<unsigned>(t)], cap, A.cq(static_cast<int>(2 * da.max_qp_wr)));
        ASSERT_NE(q, nullptr);
        EXPECT_GE(q->cap.max_send_wr, da.max_qp_wr);
        EXPECT_GE(q->cap.max_recv_wr, da.max_qp_wr);
        EXPECT_GE(q->cap.max_send_sge, da.max_sge);
        EXPECT_GE(q->cap.max_inline_data, da.max_inline_data);
    }
    vq::srq_init_attr sa;
    sa.max_wr = da.max_srq_wr;
    sa.max_sge = da.max_sge;
    vq::srq *s = nullptr;
    ASSERT_EQ(vq::create_srq(A.pd, &sa, &s), 0);
    A.srqs.push_back(s);
}

} // namespace
} // namespace shunt::test
