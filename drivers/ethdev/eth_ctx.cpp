/* drivers/ethdev: contexts, protection domains, the key table (regions and
 * windows), address handles, thread domains, device attributes, and the
 * driver's registration. */
#include <unistd.h>

#include <algorithm>
#include <new>

#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_memory.h>

#include "env/log.h"
#include "env/mempool.h"
#include "env/tsc.h"
#include "eth.h"

namespace shunt::drv::ethdev {

SHUNT_LOG_COMPONENT(ctx_log, "ethdev");

int probe_ports(std::vector<vq::device *> &out);

namespace {

/* ---- keys ---- */

int key_alloc(eth_ctx *c, std::uint32_t *index, std::uint32_t *key)
{
    // Round robin, and every key of an entry is used once (255 tags x 4096
    // generations): a stale key never names a later region or window.
    // Index 0 is never used: with it a window's key could be 0 (the dead
    // key) once its key byte wraps.
    for (std::uint32_t k = 0; k < max_mr; k++) {
        std::uint32_t i = (c->key_next + k) % max_mr;
        key_entry &e = c->keys[i];
        if (i == 0 || e.mr || e.mw || c->key_ver[i] >= 255u * 4096u)
            continue;
        std::uint32_t v = c->key_ver[i]++;
        c->key_next = (i + 1) % max_mr;
        *index = i;
        *key = ((v / 255) << 20) | (i << 8) | (1 + v % 255);
        return 0;
    }
    return -FI_ENOSPC;
}

/** Stop accesses through @p e: key to 0, then wait for pinned users (they
 *  are bounded copies by other threads of this process). The context's
 *  key_epoch moves first: no cached check of any key holds after this. */
void key_kill(eth_ctx *c, key_entry &e) noexcept
{
    c->key_epoch.fetch_add(1, std::memory_order_seq_cst);
    e.key.store(0, std::memory_order_seq_cst);
    while (e.users.load(std::memory_order_seq_cst) != 0)
        _mm_pause();
}

int alloc_pd(vq::context *vc, vq::pd **out)
{
    auto *c = to_ctx(vc);
    auto *p = new (std::nothrow) eth_pd;
    if (!p)
        return -FI_ENOMEM;
    p->ctx = c;
    std::lock_guard<std::mutex> g(c->lock);
    c->npd++;
    *out = p;
    return 0;
}

int dealloc_pd(vq::pd *vp)
{
    auto *p = static_cast<eth_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    if (p->refs)
        return -FI_EBUSY;
    c->npd--;
    delete p;
    return 0;
}

namespace {

/** A port whose PMD DMAs (a PCI NIC) reads zero-copy sends by IOVA: make
 *  @p m readable to it. In IOVA-as-VA mode, DPDK's own memory is mapped
 *  already; other memory is registered as external memory and mapped for
 *  the device. In physical-address mode nothing is mapped here (IOVAs of
 *  arbitrary pages would need the page map on every send): the port's
 *  sends from @p m are copied. Setup path. */
void dma_map(port *p, eth_mr *m)
{
    if (p->dma_virtual || !p->device || rte_eal_iova_mode() != RTE_IOVA_VA || m->length == 0)
        return;
    auto *last = static_cast<std::uint8_t *>(m->addr) + (m->length - 1);
    if (const rte_memseg_list *msl = rte_mem_virt2memseg_list(m->addr)) {
        // DPDK's own memory is mapped for the device already when the whole
        // region lies in one memseg list. External memory someone else
        // registered (another region's pages) may be unmapped under us:
        // sends from it are copied.
        m->dma = !msl->external && rte_mem_virt2memseg_list(last) == msl;
        return;
    }
    const std::size_t pg = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    auto a = reinterpret_cast<std::uintptr_t>(m->addr);
    std::uintptr_t lo = a & ~(pg - 1), hi = (a + m->length + pg - 1) & ~(pg - 1);
    void *va = reinterpret_cast<void *>(lo);
    if (rte_extmem_register(va, hi - lo, nullptr, 0, pg) != 0) {
        // EEXIST: another region covers some of these pages; copies then.
        SHUNT_LOG(ctx_log, debug, "%s: rte_extmem_register: %s (sends from this region are copied)",
                  p->name.c_str(), rte_strerror(rte_errno));
        return;
    }
    if (rte_dev_dma_map(p->device, va, lo, hi - lo) != 0) {
        SHUNT_LOG(ctx_log, debug, "%s: rte_dev_dma_map: %s (sends from this region are copied)", p->name.c_str(),
                  rte_strerror(rte_errno));
        rte_extmem_unregister(va, hi - lo);
        return;
    }
    m->dma = m->dma_mapped = true;
    m->map_va = va;
    m->map_len = hi - lo;
}

void dma_unmap(port *p, eth_mr *m)
{
    if (!m->dma_mapped)
        return;
    if (rte_dev_dma_unmap(p->device, m->map_va, reinterpret_cast<std::uintptr_t>(m->map_va), m->map_len) != 0 ||
        rte_extmem_unregister(m->map_va, m->map_len) != 0)
        SHUNT_LOG(ctx_log, warning, "%s: unmapping a region for DMA: %s", p->name.c_str(), rte_strerror(rte_errno));
    m->dma = m->dma_mapped = false;
}

} // namespace

int reg_mr(vq::pd *vp, void *addr, std::size_t length, unsigned access, vq::mr **out)
{
    auto *p = static_cast<eth_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    if (length > (1ull << 40))
        return -FI_EMSGSIZE;
    auto a = reinterpret_cast<std::uintptr_t>(addr);
    if (a + length < a)
        return -FI_EINVAL;
    auto *m = new (std::nothrow) eth_mr;
    if (!m)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    std::uint32_t idx, key;
    if (int rc = key_alloc(c, &idx, &key); rc < 0) {
        delete m;
        return rc;
    }
    m->ctx = c;
    m->pd = p;
    m->addr = addr;
    m->length = length;
    m->access = access;
    m->index = idx;
    m->lkey = m->rkey = key;
    dma_map(c->p, m);
    key_entry &e = c->keys[idx];
    e.access = access;
    e.addr = a;
    e.length = length;
    e.mr = m;
    e.mw = nullptr;
    e.pd = p;
    e.key.store(key, std::memory_order_release); // publish: the fields first
    c->nmr++;
    p->refs++;
    *out = m;
    return 0;
}

int dereg_mr(vq::mr *vm)
{
    auto *m = static_cast<eth_mr *>(vm);
    auto *c = to_ctx(m->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    if (m->windows)
        return -FI_EBUSY;
    key_entry &e = c->keys[m->index];
    key_kill(c, e);
    e.mr = nullptr;
    dma_unmap(c->p, m); // after key_kill: no send starts from it any more
    c->nmr--;
    static_cast<eth_pd *>(m->pd)->refs--;
    delete m;
    return 0;
}

int alloc_mw(vq::pd *vp, vq::mw_type type, vq::mw **out)
{
    auto *p = static_cast<eth_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    auto *w = new (std::nothrow) eth_mw;
    if (!w)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    std::uint32_t idx, key;
    if (int rc = key_alloc(c, &idx, &key); rc < 0) {
        delete w;
        return rc;
    }
    w->ctx = c;
    w->pd = p;
    w->type = type;
    w->rkey = key;
    w->index = idx;
    key_entry &e = c->keys[idx];
    e.key.store(0, std::memory_order_release); // unbound
    e.mw = w;
    e.mr = nullptr;
    e.pd = p;
    c->nmw++;
    p->refs++;
    *out = w;
    return 0;
}

int dealloc_mw(vq::mw *vw)
{
    auto *w = static_cast<eth_mw *>(vw);
    auto *c = to_ctx(w->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    key_entry &e = c->keys[w->index];
    key_kill(c, e);
    if (w->bound)
        w->bound->windows--;
    e.mw = nullptr;
    e.mr = nullptr;
    c->nmw--;
    static_cast<eth_pd *>(w->pd)->refs--;
    delete w;
    return 0;
}

/* ---- alloc_buf: EAL memory (hugepages when reserved; IOVA-registered) ---- */

int alloc_buf(vq::context *vc, std::size_t size, void **out)
{
    auto *c = to_ctx(vc);
    void *b = env::heap_alloc((size + 63) & ~std::size_t{63}, 64);
    if (!b)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    try {
        c->bufs.push_back(b);
    } catch (...) {
        env::heap_free(b);
        return -FI_ENOMEM;
    }
    *out = b;
    return 0;
}

int free_buf(vq::context *vc, void *buf)
{
    auto *c = to_ctx(vc);
    std::lock_guard<std::mutex> g(c->lock);
    for (std::size_t i = 0; i < c->bufs.size(); i++)
        if (c->bufs[i] == buf) {
            env::heap_free(buf);
            c->bufs.erase(c->bufs.begin() + static_cast<std::ptrdiff_t>(i));
            return 0;
        }
    return -FI_EINVAL;
}

/* ---- thread domains, address handles ---- */

int alloc_td(vq::context *vc, vq::td **out)
{
    auto *c = to_ctx(vc);
    auto *t = new (std::nothrow) eth_td;
    if (!t)
        return -FI_ENOMEM;
    t->ctx = c;
    std::lock_guard<std::mutex> g(c->lock);
    c->ntd++;
    *out = t;
    return 0;
}

int dealloc_td(vq::td *t)
{
    auto *c = to_ctx(t->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    for (eth_qp *q : c->qps)
        if (q->tdom == t)
            return -FI_EBUSY;
    c->ntd--;
    delete static_cast<eth_td *>(t);
    return 0;
}

int create_ah(vq::pd *vp, const vq::ah_attr *attr, vq::ah **out)
{
    auto *c = to_ctx(vp->ctx);
    auto *a = new (std::nothrow) eth_ah;
    if (!a)
        return -FI_ENOMEM;
    int rc = make_dest(c->p, attr->dest, &a->hdr);
    if (rc < 0) {
        delete a;
        return rc;
    }
    a->ctx = c;
    a->pd = vp;
    a->dest = attr->dest;
    std::lock_guard<std::mutex> g(c->lock);
    static_cast<eth_pd *>(vp)->refs++;
    c->nah++;
    *out = a;
    return 0;
}

int destroy_ah(vq::ah *va)
{
    auto *a = static_cast<eth_ah *>(va);
    auto *c = to_ctx(a->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    static_cast<eth_pd *>(a->pd)->refs--;
    c->nah--;
    delete a;
    return 0;
}

int query_device(vq::context *vc, vq::device_attr *out)
{
    port *p = to_ctx(vc)->p;
    vq::device_attr a;
    a.max_qp = max_qp - 1;
    a.max_qp_wr = max_wr;
    a.max_sge = max_sge;
    a.max_inline_data = max_inline;
    a.max_cq = 1024;
    a.max_cqe = max_cqe;
    a.max_mr = max_mr - 1; // the key table less index 0 (key_alloc)
    a.max_mr_size = 1ull << 40;
    a.max_mw = max_mr - 1;
    a.max_srq = 1024;
    a.max_srq_wr = max_wr;
    a.max_msg_sz = max_msg;
    a.ud_mtu = p->path_mtu;
    // wr_send_tso: the header is copied per segment and each UD segment
    // (header + mss) is one datagram of at most ud_mtu.
    a.max_tso_hdr = std::min<std::uint32_t>(max_tso_hdr, p->path_mtu - 1);
    a.host_local = false; // peers are wherever the port's link reaches
    a.atomics_global = true; // the responder's CPU executes them with locked instructions
    a.ud_grh = true;         // the IPv4 header in the last 20 bytes, as RoCE NICs
    // Lent receives on RC (a larger send is refused with an invalid-request
    // NAK, which the sender sees) and UD; not on UC, whose sender could not
    // learn that a message was too large.
    a.lend_qp_types = (1u << static_cast<unsigned>(vq::qp_type::rc)) | (1u << static_cast<unsigned>(vq::qp_type::ud));
    a.max_lend_msg = max_lend_msg;
    a.ops[static_cast<unsigned>(vq::qp_type::rc)] = vq::ops_allowed(vq::qp_type::rc);
    // UC has no send-with-invalidate on the wire (IBTA reserves its opcodes).
    a.ops[static_cast<unsigned>(vq::qp_type::uc)] = vq::ops_allowed(vq::qp_type::uc) & ~vq::OPS_SEND_WITH_INV;
    a.ops[static_cast<unsigned>(vq::qp_type::ud)] = vq::ops_allowed(vq::qp_type::ud);
    a.ops[static_cast<unsigned>(vq::qp_type::raw_packet)] = vq::ops_allowed(vq::qp_type::raw_packet);
    *out = a;
    return 0;
}

int ctx_close(vq::context *vc)
{
    auto *c = to_ctx(vc);
    {
        std::lock_guard<std::mutex> g(c->lock);
        if (c->npd || c->ncq || c->nqp || c->nsrq || c->nmr || c->nmw || c->nah || c->ntd)
            return -FI_EBUSY;
        for (void *b : c->bufs)
            env::heap_free(b);
        c->bufs.clear();
    }
    {
        std::lock_guard<std::mutex> g(c->p->setup_lock);
        c->p->contexts--;
    }
    delete[] c->keys;
    delete c;
    return 0;
}

const vq::context_ops eth_ops{
    .close = ctx_close,
    .query_device = query_device,
    .alloc_pd = alloc_pd,
    .dealloc_pd = dealloc_pd,
    .reg_mr = reg_mr,
    .dereg_mr = dereg_mr,
    .alloc_mw = alloc_mw,
    .dealloc_mw = dealloc_mw,
    .alloc_buf = alloc_buf,
    .free_buf = free_buf,
    .alloc_td = alloc_td,
    .dealloc_td = dealloc_td,
    .create_ah = create_ah,
    .destroy_ah = destroy_ah,
    .create_cq = create_cq,
    .destroy_cq = destroy_cq,
    .create_srq = create_srq,
    .destroy_srq = destroy_srq,
    .create_qp = create_qp,
    .destroy_qp = destroy_qp,
    .modify_qp = modify_qp,
    .query_qp = query_qp,
    .qp_state_of = qp_state_of,
};

int eth_probe(std::vector<vq::device *> &out)
{
    return probe_ports(out);
}

int eth_open(vq::device *dev, vq::context **out)
{
    port *p = port_of_device(dev);
    if (!p)
        return -FI_EINVAL;
    auto *c = new (std::nothrow) eth_ctx;
    if (!c)
        return -FI_ENOMEM;
    c->keys = new (std::nothrow) key_entry[max_mr];
    if (!c->keys) {
        delete c;
        return -FI_ENOMEM;
    }
    try {
        c->key_ver.assign(max_mr, 0);
    } catch (...) {
        delete[] c->keys;
        delete c;
        return -FI_ENOMEM;
    }
    {
        std::lock_guard<std::mutex> g(p->setup_lock);
        if (int rc = port_start(p); rc < 0) {
            delete[] c->keys;
            delete c;
            return rc;
        }
        p->contexts++;
    }
    c->p = p;
    c->ops = &eth_ops;
    c->dev = dev;
    c->addr.len = 10;
    std::memcpy(c->addr.raw, p->mac.addr_bytes, 6);
    std::memcpy(c->addr.raw + 6, &p->ipv4, 4);
    (void)env::tsc::hz(); // calibrate now, not when the first retransmit timer is armed
    *out = c;
    return 0;
}

} // namespace

bool key_pin(eth_ctx *c, std::uint32_t key, std::uint64_t addr, std::uint64_t len, unsigned need, bool local,
             key_ref *out) noexcept
{
    if (key == 0)
        return false;
    key_entry &e = c->keys[key_index(key)];
    e.users.fetch_add(1, std::memory_order_seq_cst);
    // Observe the entry: the key (seq_cst, after our users increment, so an
    // invalidation either sees us or we see its 0) orders the field reads.
    if (e.key.load(std::memory_order_seq_cst) != key) {
        e.users.fetch_sub(1, std::memory_order_release);
        return false;
    }
    const unsigned access = e.access;
    const std::uint64_t base = e.addr, length = e.length;
    bool ok = (access & need) == need && !(local && (access & key_mw)) && addr >= base && addr - base <= length &&
              len <= length - (addr - base);
    if (!ok) {
        e.users.fetch_sub(1, std::memory_order_release);
        return false;
    }
    out->e = &e;
    out->at = reinterpret_cast<std::uint8_t *>(addr);
    return true;
}

bool key_check(eth_ctx *c, std::uint32_t key, std::uint64_t addr, std::uint64_t len, unsigned need) noexcept
{
    key_ref r;
    if (!key_pin(c, key, addr, len, need, true, &r))
        return false;
    key_unpin(r);
    return true;
}

bool key_invalidate(eth_ctx *c, std::uint32_t k) noexcept
{
    std::lock_guard<std::mutex> g(c->lock);
    if (k == 0)
        return false;
    key_entry &e = c->keys[key_index(k)];
    if (e.mw && !e.mw->bound && e.mw->rkey == k)
        return true; // a free window named by its key: nothing to take away (as rxe and the device do)
    if (e.key.load(std::memory_order_relaxed) != k || (!e.mr && !e.mw))
        return false;
    key_kill(c, e);
    if (e.mw) {
        if (e.mw->bound)
            e.mw->bound->windows--;
        e.mw->bound = nullptr;
        e.mr = nullptr;
    }
    return true;
}

vq::wc_status key_bind(eth_ctx *c, eth_mw *mw, eth_mr *mr, std::uint32_t rkey, std::uint64_t addr,
                       std::uint64_t len, unsigned access) noexcept
{
    std::lock_guard<std::mutex> g(c->lock);
    key_entry &e = c->keys[mw->index];
    // Any key byte, 0 included (inc_rkey wraps to it). The index bits are
    // the window's (b_bind checked them), never 0 (key_alloc skips index 0),
    // so the key is not 0.
    if (e.mw != mw)
        return vq::wc_status::mw_bind_err;
    if (len == 0) { // unbind
        key_kill(c, e);
        if (mw->bound)
            mw->bound->windows--;
        mw->bound = nullptr;
        e.mr = nullptr;
        mw->rkey = rkey;
        return vq::wc_status::success;
    }
    auto base = reinterpret_cast<std::uint64_t>(mr->addr);
    if (c->keys[mr->index].mr != mr || !(mr->access & vq::ACCESS_MW_BIND) || mr->pd != mw->pd || addr < base ||
        addr - base > mr->length || len > mr->length - (addr - base) ||
        ((access & (vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_ATOMIC)) && !(mr->access & vq::ACCESS_LOCAL_WRITE)))
        return vq::wc_status::mw_bind_err;
    key_kill(c, e); // accesses through the old binding are over
    e.access = (access & ~vq::ACCESS_LOCAL_WRITE) | key_mw;
    e.addr = addr;
    e.length = len;
    e.mr = mr;
    e.key.store(rkey, std::memory_order_release); // publish the window
    if (mw->bound != mr) {
        if (mw->bound)
            mw->bound->windows--;
        mr->windows++;
        mw->bound = mr;
    }
    mw->rkey = rkey;
    return vq::wc_status::success;
}

} // namespace shunt::drv::ethdev

using shunt::drv::ethdev::eth_open;
using shunt::drv::ethdev::eth_probe;
SHUNT_VQ_DRIVER(ethdev, eth_probe, eth_open);
