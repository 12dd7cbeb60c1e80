/* drivers/mlx5/model: the port (device memory, objects, the device thread)
 * and the back end the driver's setup calls reach. */
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <new>

#include "env/log.h"
#include "env/tunable.h"
#include "model_impl.h"

namespace shunt::drv::mlx5::model {

SHUNT_LOG_COMPONENT(model_log, "mlx5-model");

SHUNT_TUNABLE(t_strict, "SHUNT_MLX5_MODEL_STRICT", boolean, "1",
              "mlx5 model: fetch WQEs only up to a doorbell (a forgotten doorbell hangs, as on hardware) "
              "and count driver violations; 0: also run on the doorbell record alone",
              "mlx5");
SHUNT_TUNABLE(t_trace, "SHUNT_MLX5_MODEL_TRACE", string, "",
              "mlx5 model: record every WQE and CQE to <value>.<pid>.<port> (format in "
              "doc/guides/drivers/mlx5.md)",
              "mlx5");
SHUNT_TUNABLE(t_eth_inline, "SHUNT_MLX5_MODEL_ETH_MIN_INLINE", integer, "0",
              "mlx5 model: Ethernet header bytes RAW_PACKET WQEs must inline (0 or 18)", "mlx5");

std::uint64_t now_ns() noexcept
{
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
}

void violation(mport &p, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    p.st.violations++;
    p.last_violation = buf;
    SHUNT_LOG(model_log, error, "driver violation: %s", buf);
    trace(p, tr_violation, 0, 0, buf, std::strlen(buf));
}

mr_obj *find_key(mport &p, std::uint32_t key) noexcept
{
    auto it = p.mrs.find(key >> 8);
    if (it == p.mrs.end() || it->second.key != key)
        return nullptr;
    return &it->second;
}

std::uint8_t check_sg(mport &p, const std::vector<mseg> &sg, void *pd, bool write) noexcept
{
    for (const mseg &s : sg) {
        mr_obj *m = find_key(p, s.lkey);
        if (!m || m->window || m->pd != pd)
            return vs_bad_lkey;
        if (s.addr < m->addr || s.len > m->len || s.addr - m->addr > m->len - s.len)
            return vs_bad_lkey;
        if (write && !(m->access & vq::ACCESS_LOCAL_WRITE))
            return vs_no_local_write;
    }
    return 0;
}

void port_address(std::uint64_t port_id, std::uint8_t out[20]) noexcept
{
    std::memset(out, 0, 20);
    out[0] = 0xfe;
    out[1] = 0x80;
    out[8] = 'M';
    out[9] = '5';
    std::uint32_t pid = be32(static_cast<std::uint32_t>(port_id >> 16));
    std::uint16_t tag = be16(static_cast<std::uint16_t>(port_id & 0xffff));
    std::memcpy(out + 10, &pid, 4);
    std::memcpy(out + 14, &tag, 2);
    std::memcpy(out + 16, &tag, 2); // the LID
    out[18] = 1;                    // port number
}

bool parse_address(const std::uint8_t *raw, std::size_t len, std::uint64_t *port_id) noexcept
{
    if (len < 16 || raw[0] != 0xfe || raw[1] != 0x80 || raw[8] != 'M' || raw[9] != '5')
        return false;
    std::uint32_t pid;
    std::uint16_t tag;
    std::memcpy(&pid, raw + 10, 4);
    std::memcpy(&tag, raw + 14, 2);
    pid = be32toh(pid);
    tag = be16toh(tag);
    if (pid == 0 || tag == 0 || tag > 4095)
        return false;
    *port_id = static_cast<std::uint64_t>(pid) << 16 | tag;
    return true;
}

std::string port_segment_name(std::uint64_t port_id)
{
    return "shunt-mlx5m-" + std::to_string(port_id >> 16) + "-" + std::to_string(port_id & 0xffff);
}

namespace {

std::mutex g_opt_lock;
bool g_opt_set = false;
options g_opt;

options current_options()
{
    std::lock_guard<std::mutex> g(g_opt_lock);
    if (g_opt_set)
        return g_opt;
    options o;
    bool b = true;
    if (t_strict.as_bool(b) == 0)
        o.strict = b;
    o.trace = t_trace.value();
    std::int64_t e = 0;
    if (t_eth_inline.as_int(e) == 0 && (e == 0 || e == 18))
        o.eth_min_inline = static_cast<unsigned>(e);
    return o;
}

void *dev_alloc(std::size_t n, std::size_t align = 4096)
{
    n = (n + align - 1) & ~(align - 1);
    void *p = std::aligned_alloc(align, n ? n : align);
    if (p)
        std::memset(p, 0, n ? n : align);
    return p;
}

bool pid_alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

/** Claim a host-unique port tag in the shared tag table, the first free one
 *  from @p first. */
int claim_tag(mport &p, std::uint32_t first = 1)
{
    // Per user: another user's ports are unreachable anyway (their segments are 0600).
    const std::string name = "shunt-mlx5m-tags-" + std::to_string(getuid());
    for (int attempt = 0; attempt < 200 && !p.tags.is_open(); attempt++) {
        int rc = p.tags.attach(name);
        if (rc == 0)
            break;
        rc = p.tags.create(name, sizeof(tag_table), env::segment_backing::shm);
        if (rc == 0) {
            auto *t = static_cast<tag_table *>(p.tags.data());
            t->magic = port_magic;
            break;
        }
        usleep(1000);
    }
    if (!p.tags.is_open())
        return -FI_ENOMEM;
    auto *t = static_cast<tag_table *>(p.tags.data());
    int me = static_cast<int>(getpid());
    for (std::uint32_t i = first; i < 4096; i++) {
        std::int32_t cur = t->owner[i].load(std::memory_order_acquire);
        if (cur != 0 && pid_alive(cur))
            continue;
        if (t->owner[i].compare_exchange_strong(cur, me, std::memory_order_acq_rel)) {
            p.tag = i;
            return 0;
        }
    }
    return -FI_ENOSPC;
}

int step_locked(mport &p)
{
    std::uint64_t now = now_ns();
    if (now < p.stalled_until)
        return 0;
    int work = 0;
    for (auto &kv : p.qps) {
        mqp &q = *kv.second;
        if (q.state == vq::qp_state::reset)
            continue;
        work += process_sq(p, q);
        work += progress_requester(p, q);
        if (q.state == vq::qp_state::err)
            work += flush_rq(p, q);
    }
    work += receive_packets(p);
    for (auto &kv : p.cqs) { // arm doorbells (recorded; the model raises no events)
        mcq &c = *kv.second;
        std::uint64_t v = load64(c.uar + MLX5_CQ_DOORBELL);
        if (v != c.last_arm) {
            c.last_arm = v;
            c.arms++;
            p.st.cq_arms++;
            trace(p, tr_doorbell, c.cqn, 0xffffffffu, &v, 8);
        }
    }
    if (now >= p.next_housekeeping) {
        p.next_housekeeping = now + 100'000'000;
        // Lanes whose sender died are freed for other senders.
        for (std::uint32_t l = 0; l < num_lanes; l++) {
            lane_ctrl &lc = p.lanes()[l];
            std::uint64_t o = lc.owner.load(std::memory_order_acquire);
            if (o && o != p.port_id && !pid_alive(static_cast<int>(o >> 16)))
                lc.owner.store(0, std::memory_order_release);
        }
    }
    return work;
}

void device_thread(mport *p)
{
    // A device is not the application's core: the thread runs on any CPU,
    // whatever the opening thread was pinned to.
    cpu_set_t all;
    CPU_ZERO(&all);
    for (long c = 0, n = sysconf(_SC_NPROCESSORS_CONF); c < n && c < CPU_SETSIZE; c++)
        CPU_SET(static_cast<int>(c), &all);
    (void)sched_setaffinity(0, sizeof all, &all); // best effort: a restricted cpuset keeps its own
    unsigned idle = 0;
    while (!p->stop.load(std::memory_order_acquire)) {
        int w;
        {
            std::lock_guard<std::mutex> g(p->lock);
            w = step_locked(*p);
        }
        if (w) {
            idle = 0;
            continue;
        }
        // Poll hard for a while after work, then back off: the 2-core
        // machines this runs on are shared with the driver's own threads.
        if (++idle < 64)
            _mm_pause();
        else if (idle < 256)
            sched_yield();
        else
            usleep(idle < 4096 ? 20 : 200);
    }
}

/* ---------------- The back end ---------------- */

class model_backend final : public backend {
public:
    std::unique_ptr<mport> port;

    ~model_backend() override
    {
        if (!port)
            return;
        port->stop.store(true, std::memory_order_release);
        if (port->th.joinable())
            port->th.join();
        for (void *a : port->allocs)
            std::free(a);
        trace_close(*port);
        if (port->hdr)
            port->hdr->closed.store(1, std::memory_order_release);
        if (port->tags.is_open())
            static_cast<tag_table *>(port->tags.data())->owner[port->tag].store(0, std::memory_order_release);
    }
    const char *name() const noexcept override { return "model"; }

    void query(vq::device_attr *out) override
    {
        vq::device_attr a;
        a.max_qp = max_qps;
        // Any QP within these limits fits the largest send queue (2^16 BBs):
        // the largest WQE they allow is 13 BBs (RAW TSO, 256-byte header, 30
        // SGEs or 512 inline bytes), and 4096 of them round up to 2^16.
        a.max_qp_wr = 4096;
        a.max_sge = 30;
        a.max_inline_data = 512; // a 1 KiB WQE (ds 63) holds it with any transport segment
        a.max_cq = 65536;
        a.max_cqe = (1u << 22) - 1;
        a.max_mr = 1u << 16;
        a.max_mr_size = 1ull << 40;
        a.max_mw = 1u << 16;
        a.max_srq = 4096;
        a.max_srq_wr = 32767;
        a.max_msg_sz = 1u << 30;
        a.ud_mtu = max_mtu;
        a.ud_grh = true;          // every UD receive starts with the 40-byte GRH area, as on the hardware
        a.max_tso_hdr = 256;      // the header a TSO WQE inlines (as the driver on hardware)
        a.host_local = false;     // ports on other hosts are reachable in principle (the wire is a lane)
        a.atomics_global = false; // ConnectX atomics are atomic among HCA accesses (IBV_ATOMIC_HCA)
        a.ops[static_cast<unsigned>(vq::qp_type::rc)] = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM |
            vq::OPS_SEND_WITH_INV | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_WRITE_WITH_IMM | vq::OPS_RDMA_READ |
            vq::OPS_ATOMIC_CMP_AND_SWP | vq::OPS_ATOMIC_FETCH_AND_ADD | vq::OPS_BIND_MW | vq::OPS_LOCAL_INV;
        a.ops[static_cast<unsigned>(vq::qp_type::uc)] = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM |
            vq::OPS_SEND_WITH_INV | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_WRITE_WITH_IMM | vq::OPS_BIND_MW |
            vq::OPS_LOCAL_INV;
        a.ops[static_cast<unsigned>(vq::qp_type::ud)] = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM;
        a.ops[static_cast<unsigned>(vq::qp_type::raw_packet)] = vq::OPS_SEND | vq::OPS_TSO;
        *out = a;
    }

    void address(vq::dev_addr *out) override
    {
        vq::dev_addr a{};
        port_address(port->port_id, a.raw);
        a.len = 20;
        *out = a;
    }

    int alloc_pd(void **h) override
    {
        *h = new (std::nothrow) int(0);
        return *h ? 0 : -FI_ENOMEM;
    }
    int dealloc_pd(void *h) override
    {
        delete static_cast<int *>(h);
        return 0;
    }

    int new_key(std::uint32_t *key)
    {
        mport &p = *port;
        for (std::uint32_t n = 0; n < (1u << 16); n++) {
            std::uint32_t i = p.next_key;
            p.next_key = p.next_key % 65535 + 1;
            if (i == 1)
                continue; // key index 1 variant 0 is MLX5_INVALID_LKEY (0x100): keep the index free
            if (p.mrs.count(i))
                continue;
            if (p.key_ver.size() <= i)
                p.key_ver.resize(i + 1, 0);
            std::uint32_t v = p.key_ver[i] % 255 + 1; // variants 1..255, never repeating back to back
            p.key_ver[i] = v;
            *key = i << 8 | v;
            return 0;
        }
        return -FI_ENOSPC;
    }

    int reg_mr(void *pd, void *addr, std::size_t len, unsigned access, std::uint32_t *lkey, std::uint32_t *rkey,
               void **h) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        std::uint32_t key;
        int rc = new_key(&key);
        if (rc < 0)
            return rc;
        mr_obj m;
        m.key = key;
        m.pd = pd;
        m.addr = reinterpret_cast<std::uint64_t>(addr);
        m.len = len;
        m.access = access;
        port->mrs[key >> 8] = m;
        *lkey = *rkey = key;
        *h = reinterpret_cast<void *>(static_cast<std::uintptr_t>(key >> 8));
        return 0;
    }
    int dereg_mr(void *h) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        auto it = port->mrs.find(static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(h)));
        if (it == port->mrs.end())
            return -FI_EINVAL;
        if (it->second.windows > 0)
            return -FI_EBUSY;
        port->mrs.erase(it);
        return 0;
    }
    int alloc_mw(void *pd, std::uint32_t *rkey, void **h) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        std::uint32_t key;
        int rc = new_key(&key);
        if (rc < 0)
            return rc;
        mr_obj m;
        m.key = key;
        m.pd = pd;
        m.window = true;
        port->mrs[key >> 8] = m;
        *rkey = key;
        *h = reinterpret_cast<void *>(static_cast<std::uintptr_t>(key >> 8));
        return 0;
    }
    int dealloc_mw(void *h) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        auto it = port->mrs.find(static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(h)));
        if (it == port->mrs.end())
            return -FI_EINVAL;
        if (it->second.bound)
            if (mr_obj *r = find_key(*port, it->second.parent))
                r->windows--;
        port->mrs.erase(it);
        return 0;
    }

    int create_cq(std::uint32_t cqe, cq_view *out, void **h) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        auto c = std::make_unique<mcq>();
        c->cnt = cqe;
        c->size = 64;
        while ((1u << c->log) < cqe)
            c->log++;
        c->buf = static_cast<std::uint8_t *>(dev_alloc(static_cast<std::size_t>(cqe) * 64));
        auto *db = static_cast<std::uint32_t *>(dev_alloc(64, 64));
        c->uar = static_cast<std::uint8_t *>(dev_alloc(uar_page));
        if (!c->buf || !db || !c->uar) {
            std::free(c->buf);
            std::free(db);
            std::free(c->uar);
            return -FI_ENOMEM;
        }
        c->dbrec = db;
        for (std::uint32_t i = 0; i < cqe; i++) // every CQE starts invalid (rdma-core mlx5_alloc_cq_buf)
            c->buf[i * 64 + 63] = MLX5_CQE_INVALID << 4;
        c->cqn = port->next_cqn++;
        out->buf = c->buf;
        out->cqe_cnt = cqe;
        out->cqe_size = 64;
        out->dbrec = c->dbrec;
        out->uar = c->uar;
        out->cqn = c->cqn;
        *h = c.get();
        port->cqs[c->cqn] = std::move(c);
        return 0;
    }
    int destroy_cq(void *h) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        auto *c = static_cast<mcq *>(h);
        std::free(c->buf);
        std::free(const_cast<std::uint32_t *>(c->dbrec));
        std::free(c->uar);
        port->cqs.erase(c->cqn);
        return 0;
    }

    int create_srq(void *pd, std::uint32_t wqe_cnt, std::uint32_t max_sge, rq_view *out, std::uint32_t *srqn,
                   void **h) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        auto s = std::make_unique<msrq>();
        std::uint32_t stride = 32;
        while (stride < 16 + 16 * max_sge)
            stride <<= 1;
        s->cnt = wqe_cnt;
        s->stride = stride;
        s->max_sge = (stride - 16) / 16;
        s->buf = static_cast<std::uint8_t *>(dev_alloc(static_cast<std::size_t>(wqe_cnt) * stride));
        auto *db = static_cast<std::uint32_t *>(dev_alloc(64, 64));
        if (!s->buf || !db) {
            std::free(s->buf);
            std::free(db);
            return -FI_ENOMEM;
        }
        s->dbrec = db;
        s->pd = pd;
        s->srqn = port->next_srqn++;
        out->buf = s->buf;
        out->wqe_cnt = wqe_cnt;
        out->stride = stride;
        out->dbrec = s->dbrec;
        *srqn = s->srqn;
        *h = s.get();
        port->srqs[s->srqn] = std::move(s);
        return 0;
    }
    int destroy_srq(void *h) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        auto *s = static_cast<msrq *>(h);
        std::free(s->buf);
        std::free(const_cast<std::uint32_t *>(s->dbrec));
        port->srqs.erase(s->srqn);
        return 0;
    }

    int create_qp(const qp_request &r, qp_created *out, void **h) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        mport &p = *port;
        std::uint32_t idx = 0;
        for (std::uint32_t i = 1; i <= max_qps; i++)
            if (p.qpt()[i].qpn.load(std::memory_order_relaxed) == 0 && !p.qps.count(p.tag << 12 | i)) {
                idx = i;
                break;
            }
        if (!idx)
            return -FI_ENOSPC;
        auto q = std::make_unique<mqp>();
        q->qpn = p.tag << 12 | idx;
        q->type = r.type;
        q->pd = r.pd;
        q->scq = static_cast<mcq *>(r.send_cq);
        q->rcq = static_cast<mcq *>(r.recv_cq);
        q->srq = static_cast<msrq *>(r.srq);
        q->sig_all = r.sig_all;
        q->sq_cnt = r.sq_wqe_cnt;
        q->rq_cnt = r.rq_wqe_cnt;
        q->rq_stride = r.rq_stride;
        q->max_inline = r.max_inline;
        q->max_send_sge = r.max_send_sge;
        q->eth_min_inline = r.type == vq::qp_type::raw_packet ? p.opt.eth_min_inline : 0;
        q->sq = static_cast<std::uint8_t *>(dev_alloc(static_cast<std::size_t>(r.sq_wqe_cnt) * wqe_bb));
        q->rq = r.rq_wqe_cnt ? static_cast<std::uint8_t *>(
                                   dev_alloc(static_cast<std::size_t>(r.rq_wqe_cnt) * r.rq_stride))
                             : nullptr;
        auto *db = static_cast<std::uint32_t *>(dev_alloc(64, 64));
        q->uar = static_cast<std::uint8_t *>(dev_alloc(uar_page));
        if (!q->sq || (r.rq_wqe_cnt && !q->rq) || !db || !q->uar) {
            std::free(q->sq);
            std::free(q->rq);
            std::free(db);
            std::free(q->uar);
            return -FI_ENOMEM;
        }
        q->dbrec = db;
        q->snap.assign(static_cast<std::size_t>(r.sq_wqe_cnt) * wqe_bb, 0);
        q->mtu = max_mtu;
        // IB timeout 16 (268 ms) when not set: a peer device thread descheduled
        // on a loaded machine is not a lost packet. retry_cnt 7: ~1.9 s to declare a peer gone.
        q->timeout_ns = 4096ull << 16;
        reset_qp(p, *q);
        out->sq.buf = q->sq;
        out->sq.wqe_cnt = r.sq_wqe_cnt;
        out->sq.dbrec = q->dbrec;
        out->sq.bf_reg = q->uar + uar_bf_offset;
        out->sq.bf_size = bf_buf_size;
        out->rq.buf = q->rq;
        out->rq.wqe_cnt = r.rq_wqe_cnt;
        out->rq.stride = r.rq_stride;
        out->rq.dbrec = q->dbrec;
        out->qpn = q->qpn;
        out->max_inline = r.max_inline;
        out->eth_min_inline = q->eth_min_inline;
        out->bf_wc = false;
        p.qpt()[idx].type = static_cast<std::uint32_t>(r.type);
        p.qpt()[idx].qpn.store(q->qpn, std::memory_order_release); // type first, then the number
        *h = q.get();
        p.qps[q->qpn] = std::move(q);
        return 0;
    }
    int destroy_qp(void *h) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        auto *q = static_cast<mqp *>(h);
        port->qpt()[q->qpn & 0xfff].qpn.store(0, std::memory_order_release);
        std::free(q->sq);
        std::free(q->rq);
        std::free(const_cast<std::uint32_t *>(q->dbrec));
        std::free(q->uar);
        port->qps.erase(q->qpn);
        return 0;
    }

    int modify_qp(void *h, const vq::qp_attr &a, unsigned mask, vq::qp_state cur) override
    {
        std::lock_guard<std::mutex> g(port->lock);
        mport &p = *port;
        auto *q = static_cast<mqp *>(h);
        vq::qp_state to = (mask & vq::QP_ATTR_STATE) ? a.state : cur;
        bool conn = q->type == vq::qp_type::rc || q->type == vq::qp_type::uc;
        if (to == vq::qp_state::rtr && cur == vq::qp_state::init && conn) {
            std::uint64_t pid;
            if (!parse_address(a.dest.raw, a.dest.len, &pid))
                return -FI_ENOENT; // no port answers to that address
            int err = -FI_ENOENT;
            peer *pe = get_peer(p, pid, &err);
            if (!pe)
                return err;
            std::uint32_t i = a.dest_qp_num & 0xfff;
            if ((a.dest_qp_num >> 12) != (pid & 0xffff) || i == 0 || i > max_qps)
                return -FI_ENOENT;
            auto *pub = reinterpret_cast<qp_pub *>(pe->base + pe->hdr->qpt_off) + i;
            if (pub->qpn.load(std::memory_order_acquire) != a.dest_qp_num)
                return -FI_ENOENT;
            if (pub->type != static_cast<std::uint32_t>(q->type))
                return -FI_EINVAL;
        }
        if (mask & vq::QP_ATTR_ACCESS_FLAGS)
            q->access = a.qp_access_flags;
        if (mask & vq::QP_ATTR_QKEY)
            q->qkey = a.qkey;
        if ((mask & vq::QP_ATTR_AV) && conn) {
            std::uint64_t pid = 0;
            if (parse_address(a.dest.raw, a.dest.len, &pid))
                q->dport = pid;
        }
        if (mask & vq::QP_ATTR_DEST_QPN)
            q->dqpn = a.dest_qp_num;
        if ((mask & vq::QP_ATTR_PATH_MTU) && a.path_mtu >= 1 && a.path_mtu <= 5)
            q->mtu = 128u << a.path_mtu;
        if (mask & vq::QP_ATTR_TIMEOUT)
            q->timeout_ns = a.timeout ? (4096ull << (a.timeout < 31 ? a.timeout : 31)) : 0;
        if (mask & vq::QP_ATTR_RETRY_CNT)
            q->retry_cnt = a.retry_cnt & 7;
        if (mask & vq::QP_ATTR_RNR_RETRY)
            q->rnr_retry = a.rnr_retry & 7;
        if (mask & vq::QP_ATTR_MIN_RNR_TIMER)
            q->min_rnr_timer = a.min_rnr_timer & 31;
        if (mask & vq::QP_ATTR_RQ_PSN)
            q->rq_psn = a.rq_psn & 0xffffff;
        if (mask & vq::QP_ATTR_SQ_PSN)
            q->sq_psn = a.sq_psn & 0xffffff;
        if (to == vq::qp_state::rtr && cur == vq::qp_state::init)
            q->epsn = q->rq_psn;
        if (to == vq::qp_state::rts && cur == vq::qp_state::rtr) {
            q->next_psn = q->sq_psn;
            q->retries = q->retry_cnt;
            q->rnr_tries = q->rnr_retry;
            q->last_progress = now_ns();
        }
        if (to == vq::qp_state::reset) {
            reset_qp(p, *q);
        } else if (to == vq::qp_state::err && q->state != vq::qp_state::err) {
            q->state = vq::qp_state::err;
            enter_error(p, *q);
        }
        q->state = to;
        return 0;
    }

    int create_ah(void *, const vq::dev_addr &dest, mlx5_wqe_av *av, void **h) override
    {
        std::uint64_t pid;
        if (!parse_address(dest.raw, dest.len, &pid))
            return -FI_EINVAL;
        // What mlx5dv_ah.av holds for a RoCE/IB destination with a GRH
        // (mlx5dv_set_dgram_seg's fields); the key and QPN are set per WQE.
        std::memset(av, 0, sizeof *av);
        std::uint16_t lid;
        std::memcpy(&lid, dest.raw + 16, 2);
        av->rlid = lid;
        av->rmac[0] = 0x02;
        av->rmac[1] = static_cast<std::uint8_t>(pid >> 32);
        av->rmac[2] = static_cast<std::uint8_t>(pid >> 24);
        av->rmac[3] = static_cast<std::uint8_t>(pid >> 16);
        av->rmac[4] = static_cast<std::uint8_t>(pid >> 8);
        av->rmac[5] = static_cast<std::uint8_t>(pid);
        av->hop_limit = 64;
        av->grh_gid_fl = be32(1u << 30); // GRH present, source GID index 0
        std::memcpy(av->rgid, dest.raw, 16);
        *h = nullptr;
        return 0;
    }
    int destroy_ah(void *) override { return 0; }
};

model_backend *backend_of(vq::context *ctx)
{
    if (!ctx)
        return nullptr;
    return dynamic_cast<model_backend *>(to_ctx(ctx)->be.get());
}

} // namespace

int make_backend(int, std::unique_ptr<backend> *out)
{
    env::cleanup_stale_segments(); // ports of processes that died
    auto b = std::make_unique<model_backend>();
    b->port = std::make_unique<mport>();
    mport &p = *b->port;
    p.opt = current_options();
    std::size_t lanes_off = sizeof(port_hdr);
    std::size_t slots_off = (lanes_off + num_lanes * sizeof(lane_ctrl) + 63) & ~std::size_t{63};
    std::size_t qpt_off = slots_off + static_cast<std::size_t>(num_lanes) * lane_slots * slot_bytes;
    std::size_t size = qpt_off + (max_qps + 1) * sizeof(qp_pub);
    // A port this process closed keeps its segment while peers still hold it
    // (the name is pid and tag): its tag is free again but the name is not, so
    // a context reopened before they let go takes the next tag.
    int rc = -FI_EEXIST;
    for (std::uint32_t first = 1; rc == -FI_EEXIST;) {
        rc = claim_tag(p, first);
        if (rc < 0) {
            SHUNT_LOG(model_log, error, "no port tag: %d", rc);
            b->port.reset();
            return rc;
        }
        p.port_id = static_cast<std::uint64_t>(getpid()) << 16 | p.tag;
        rc = p.seg.create(port_segment_name(p.port_id), size, env::segment_backing::shm);
        if (rc < 0)
            static_cast<tag_table *>(p.tags.data())->owner[p.tag].store(0, std::memory_order_release);
        first = p.tag + 1;
    }
    if (rc < 0) {
        SHUNT_LOG(model_log, error, "port segment: %d", rc);
        b->port.reset();
        return rc;
    }
    p.hdr = static_cast<port_hdr *>(p.seg.data());
    p.hdr->magic = port_magic;
    p.hdr->version = port_version;
    p.hdr->pid = static_cast<std::int32_t>(getpid());
    p.hdr->port_id = p.port_id;
    p.hdr->nlanes = num_lanes;
    p.hdr->lane_slots = lane_slots;
    p.hdr->slot_bytes = static_cast<std::uint32_t>(slot_bytes);
    p.hdr->max_qp = max_qps;
    p.hdr->lanes_off = lanes_off;
    p.hdr->slots_off = slots_off;
    p.hdr->qpt_off = qpt_off;
    trace_open(p);
    if (p.opt.threaded)
        p.th = std::thread(device_thread, &p);
    *out = std::move(b);
    return 0;
}

/* ---------------- Test interface ---------------- */

void set_options(const options &o)
{
    std::lock_guard<std::mutex> g(g_opt_lock);
    g_opt = o;
    g_opt_set = true;
}

void reset_options()
{
    std::lock_guard<std::mutex> g(g_opt_lock);
    g_opt_set = false;
}

int step(vq::context *ctx)
{
    model_backend *b = backend_of(ctx);
    if (!b)
        return -FI_EINVAL;
    int total = 0;
    for (int i = 0; i < 100000; i++) {
        int w;
        {
            std::lock_guard<std::mutex> g(b->port->lock);
            w = step_locked(*b->port);
        }
        if (!w)
            break;
        total += w;
    }
    return total;
}

int inject(vq::context *ctx, const fault &f)
{
    model_backend *b = backend_of(ctx);
    if (!b)
        return -FI_EINVAL;
    std::lock_guard<std::mutex> g(b->port->lock);
    if (f.kind == fault_kind::stall && f.skip == 0) {
        b->port->stalled_until = now_ns() + static_cast<std::uint64_t>(f.stall_ms) * 1000000;
        return 0;
    }
    fault x = f;
    x.skip += static_cast<std::uint32_t>(b->port->pkt_counter);
    b->port->faults.push_back(x);
    return 0;
}

int get_stats(vq::context *ctx, stats *out)
{
    model_backend *b = backend_of(ctx);
    if (!b || !out)
        return -FI_EINVAL;
    std::lock_guard<std::mutex> g(b->port->lock);
    *out = b->port->st;
    return 0;
}

std::string last_violation(vq::context *ctx)
{
    model_backend *b = backend_of(ctx);
    if (!b)
        return {};
    std::lock_guard<std::mutex> g(b->port->lock);
    return b->port->last_violation;
}

std::string trace_path(vq::context *ctx)
{
    model_backend *b = backend_of(ctx);
    if (!b)
        return {};
    std::lock_guard<std::mutex> g(b->port->lock);
    if (b->port->trace)
        std::fflush(b->port->trace);
    return b->port->trace_file;
}

} // namespace shunt::drv::mlx5::model
