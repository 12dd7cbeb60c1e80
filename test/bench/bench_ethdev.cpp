// Google Benchmark: the ethdev driver's send cost, over a net_null port (the
// PMD frees what it is given, so only the sender's CPU is measured).
//  - UdTso64K against UdMssSends64K: 64 KiB of TCP payload as one UD TSO send
//    against the same bytes as MSS-sized UD sends (header + MSS each, with
//    WR_IP_CSUM so both put valid segments on the wire). Compare their CPU
//    time per iteration.
//  - RawSend/N: a RAW_PACKET frame of N bytes (up to the port's MTU).
//  - RawTso/N: a RAW_PACKET TSO send of N payload bytes; run it with
//    SHUNT_ETHDEV_ZCOPY_BYTES=0 (always copied) and =1 (always zero-copy)
//    to place the copy/zero-copy threshold (default 4096).
// Without EAL arguments of its own the program adds --vdev=net_null0.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "env/errors.h"
#include "vq/vq.h"

using namespace shunt;

namespace {

constexpr std::size_t buf_bytes = 1u << 20;
constexpr std::uint32_t payload = 64u << 10;
constexpr std::uint16_t hdr_len = 40; // IPv4 + TCP, no options

struct null_port {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::mr *mr = nullptr;
    vq::ah *ah = nullptr;
    std::uint8_t *buf = nullptr;
    std::uint32_t ud_mtu = 0;
    bool ok = false;

    null_port()
    {
        vq::device *d = vq::find_device("net_null0");
        if (!d) {
            std::fprintf(stderr, "bench-ethdev: no device net_null0 (SHUNT_EAL_ARGS must add --vdev=net_null0)\n");
            return;
        }
        vq::device_attr a;
        vq::cq_init_attr ca;
        ca.cqe = 4096;
        ca.single_threaded = true;
        if (vq::open_device(d, &ctx) || vq::query_device(ctx, &a) || vq::alloc_pd(ctx, &pd) ||
            vq::create_cq(ctx, &ca, &cq))
            return;
        ud_mtu = a.ud_mtu;
        buf = static_cast<std::uint8_t *>(std::aligned_alloc(4096, buf_bytes));
        std::memset(buf, 0x5a, buf_bytes);
        if (vq::reg_mr(pd, buf, buf_bytes, vq::ACCESS_LOCAL_WRITE, &mr))
            return;
        // A destination with its MAC given: no ARP (nobody answers on net_null).
        vq::ah_attr aa;
        const std::uint8_t dst[10] = {0x02, 0, 0, 0, 0, 2, 10, 0, 0, 2};
        aa.dest.len = sizeof dst;
        std::memcpy(aa.dest.raw, dst, sizeof dst);
        ok = vq::create_ah(pd, &aa, &ah) == 0;
    }
    ~null_port()
    {
        if (ah)
            (void)vq::destroy_ah(ah);
        if (mr)
            (void)vq::dereg_mr(mr);
        if (cq)
            (void)vq::destroy_cq(cq);
        if (pd)
            (void)vq::dealloc_pd(pd);
        if (ctx)
            (void)vq::close_device(ctx);
        std::free(buf);
    }
    vq::qp *qp(vq::qp_type t, std::uint64_t ops)
    {
        vq::qp_init_attr ia;
        ia.type = t;
        ia.send_cq = ia.recv_cq = cq;
        ia.send_ops_flags = ops;
        ia.cap = {1024, 16, 4, 1, 64};
        vq::qp *q = nullptr;
        if (vq::create_qp(pd, &ia, &q))
            return nullptr;
        vq::qp_attr at;
        at.qkey = 0x1111;
        at.state = vq::qp_state::init;
        if (vq::modify_qp(q, &at, vq::QP_ATTR_STATE | (t == vq::qp_type::ud ? vq::QP_ATTR_QKEY : 0)))
            return nullptr;
        for (vq::qp_state s : {vq::qp_state::rtr, vq::qp_state::rts}) {
            at.state = s;
            if (vq::modify_qp(q, &at, vq::QP_ATTR_STATE))
                return nullptr;
        }
        return q;
    }
    /** Poll until @p n completions arrived; false on an error completion. */
    bool reap(int n)
    {
        vq::wc w[32];
        while (n > 0) {
            int k = vq::poll_cq(cq, 32, w);
            if (k < 0)
                return false;
            for (int i = 0; i < k; i++)
                if (w[i].status != vq::wc_status::success)
                    return false;
            n -= k;
        }
        return true;
    }
};

null_port &port()
{
    static null_port p;
    return p;
}

/** Post the batch of @p q and wait for its one signaled completion. */
bool done(null_port &p, vq::qp *q, benchmark::State &st)
{
    if (vq::wr_complete(q) == 0 && p.reap(1))
        return true;
    st.SkipWithError("send failed");
    return false;
}

/** IPv4 + TCP header (checksums left to WR_IP_CSUM / the TSO fix-up). */
void tcp_ip_header(std::uint8_t *h, std::uint16_t ip_total, std::uint32_t seq, std::uint16_t id)
{
    std::memset(h, 0, hdr_len);
    h[0] = 0x45;
    h[2] = static_cast<std::uint8_t>(ip_total >> 8), h[3] = static_cast<std::uint8_t>(ip_total);
    h[4] = static_cast<std::uint8_t>(id >> 8), h[5] = static_cast<std::uint8_t>(id);
    h[6] = 0x40, h[8] = 64, h[9] = 6;
    h[12] = 10, h[15] = 1, h[16] = 10, h[19] = 2;
    std::uint8_t *t = h + 20;
    t[0] = 0x30, t[1] = 0x39, t[3] = 0x50;
    t[4] = static_cast<std::uint8_t>(seq >> 24), t[5] = static_cast<std::uint8_t>(seq >> 16);
    t[6] = static_cast<std::uint8_t>(seq >> 8), t[7] = static_cast<std::uint8_t>(seq);
    t[12] = 0x50, t[13] = 0x10, t[14] = 0xff, t[15] = 0xff;
}

void UdTso64K(benchmark::State &st)
{
    null_port &p = port();
    vq::qp *q = p.ok ? p.qp(vq::qp_type::ud, vq::OPS_SEND | vq::OPS_TSO) : nullptr;
    if (!q) {
        st.SkipWithError("no net_null0 UD QP with TSO");
        return;
    }
    const std::uint16_t mss = static_cast<std::uint16_t>(p.ud_mtu - hdr_len);
    std::uint8_t hdr[hdr_len];
    tcp_ip_header(hdr, hdr_len, 1, 1);
    for (auto _ : st) {
        vq::wr_start(q);
        q->wr_id = 1;
        q->wr_flags = vq::WR_SIGNALED | vq::WR_IP_CSUM;
        vq::wr_send_tso(q, hdr, hdr_len, mss);
        vq::wr_set_sge(q, p.mr->lkey, reinterpret_cast<std::uint64_t>(p.buf), payload);
        vq::wr_set_ud_addr(q, p.ah, 0x12, 0x1111);
        if (!done(p, q, st))
            break;
    }
    st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * payload);
    st.counters["segments"] = (payload + mss - 1) / mss;
    (void)vq::destroy_qp(q);
}

void UdMssSends64K(benchmark::State &st)
{
    null_port &p = port();
    vq::qp *q = p.ok ? p.qp(vq::qp_type::ud, vq::OPS_SEND) : nullptr;
    if (!q) {
        st.SkipWithError("no net_null0 UD QP");
        return;
    }
    const std::uint32_t mss = p.ud_mtu - hdr_len;
    const std::uint32_t nseg = (payload + mss - 1) / mss;
    // Headers after the payload in the registered buffer, one per segment.
    std::uint8_t *hdrs = p.buf + payload;
    std::uint32_t seq = 1;
    for (auto _ : st) {
        vq::wr_start(q);
        for (std::uint32_t i = 0; i < nseg; i++) {
            std::uint32_t part = i + 1 < nseg ? mss : payload - i * mss;
            std::uint8_t *h = hdrs + i * 64;
            tcp_ip_header(h, static_cast<std::uint16_t>(hdr_len + part), seq, static_cast<std::uint16_t>(seq));
            seq += part;
            const vq::sge sg[2] = {{reinterpret_cast<std::uint64_t>(h), hdr_len, p.mr->lkey},
                                   {reinterpret_cast<std::uint64_t>(p.buf + i * mss), part, p.mr->lkey}};
            q->wr_id = i;
            q->wr_flags = vq::WR_IP_CSUM | (i + 1 == nseg ? vq::WR_SIGNALED : 0);
            vq::wr_send(q);
            vq::wr_set_sge_list(q, 2, sg);
            vq::wr_set_ud_addr(q, p.ah, 0x12, 0x1111);
        }
        if (!done(p, q, st))
            break;
    }
    st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * payload);
    st.counters["segments"] = nseg;
    (void)vq::destroy_qp(q);
}

void RawSend(benchmark::State &st)
{
    null_port &p = port();
    vq::qp *q = p.ok ? p.qp(vq::qp_type::raw_packet, vq::OPS_SEND) : nullptr;
    if (!q) {
        st.SkipWithError("no net_null0 RAW_PACKET QP");
        return;
    }
    const auto len = static_cast<std::uint32_t>(st.range(0));
    for (auto _ : st) {
        vq::wr_start(q);
        q->wr_id = 1;
        q->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(q);
        vq::wr_set_sge(q, p.mr->lkey, reinterpret_cast<std::uint64_t>(p.buf), len);
        if (!done(p, q, st))
            break;
    }
    st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * len);
    (void)vq::destroy_qp(q);
}

/** RAW_PACKET TSO of N payload bytes (MSS 1448): copied below
 *  SHUNT_ETHDEV_ZCOPY_BYTES, zero-copy from it up. */
void RawTso(benchmark::State &st)
{
    null_port &p = port();
    vq::qp *q = p.ok ? p.qp(vq::qp_type::raw_packet, vq::OPS_SEND | vq::OPS_TSO) : nullptr;
    if (!q) {
        st.SkipWithError("no net_null0 RAW_PACKET QP with TSO");
        return;
    }
    const auto len = static_cast<std::uint32_t>(st.range(0));
    std::uint8_t hdr[14 + hdr_len] = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00};
    tcp_ip_header(hdr + 14, hdr_len, 1, 1);
    for (auto _ : st) {
        vq::wr_start(q);
        q->wr_id = 1;
        q->wr_flags = vq::WR_SIGNALED;
        vq::wr_send_tso(q, hdr, sizeof hdr, 1448);
        vq::wr_set_sge(q, p.mr->lkey, reinterpret_cast<std::uint64_t>(p.buf), len);
        if (!done(p, q, st))
            break;
    }
    st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * len);
    (void)vq::destroy_qp(q);
}

BENCHMARK(UdTso64K);
BENCHMARK(UdMssSends64K);
BENCHMARK(RawSend)->Arg(64)->Arg(512)->Arg(1514);
BENCHMARK(RawTso)->Arg(2048)->Arg(4096)->Arg(8192)->Arg(16384)->Arg(65536);

} // namespace

int main(int argc, char **argv)
{
    if (!std::getenv("SHUNT_EAL_ARGS"))
        setenv("SHUNT_EAL_ARGS", "--vdev=net_null0", 1);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv))
        return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
