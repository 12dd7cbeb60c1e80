/* drivers/shm: device, context, protection domains, regions, windows,
 * address handles, peers and the segment heap. */
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "env/log.h"
#include "env/tsc.h"
#include "env/tunable.h"
#include "shm.h"

namespace shunt::drv::shm {

SHUNT_LOG_COMPONENT(shm_log, "shm");

SHUNT_TUNABLE(t_segment_mb, "SHUNT_SHM_SEGMENT_MB", integer, "32",
              "shm driver: size of each context's shared segment (rings and alloc_buf memory), MiB",
              "shm");
SHUNT_TUNABLE(t_ring_slots, "SHUNT_SHM_RING_SLOTS", integer, "1024",
              "shm driver: 64-byte slots in each RC/UC receive ring (power of two, 64..65536)", "shm");
SHUNT_TUNABLE(t_ud_rings, "SHUNT_SHM_UD_RINGS", integer, "32",
              "shm driver: senders one UD QP can receive from (1..64)", "shm");
SHUNT_TUNABLE(t_rndv_bytes, "SHUNT_SHM_RNDV_BYTES", integer, "32768",
              "shm driver: RC/UC sends of at least this many bytes from registered memory are copied once, "
              "by the receiver, straight from the sender's buffer (0: never)",
              "shm");
SHUNT_TUNABLE(t_split_bytes, "SHUNT_SHM_SPLIT_BYTES", integer, "8192",
              "shm driver: RC RDMA reads of at least this many bytes are split: the initiator copies the first "
              "part while the target, if it polls meanwhile, copies the rest (0: never)",
              "shm");
SHUNT_TUNABLE(t_peer_check_ms, "SHUNT_SHM_PEER_CHECK_MS", integer, "100",
              "shm driver: how often an idle or blocked QP checks that its peer is alive, ms", "shm");
SHUNT_TUNABLE(t_cma, "SHUNT_SHM_CMA", boolean, "1",
              "shm driver: reach peers' memory outside their segments by cross-memory attach (process_vm_readv/"
              "writev) when this process may (0: never; RDMA to such memory then fails, large sends from it go "
              "through the ring)",
              "shm");

namespace {

/** CAP_SYS_PTRACE in this process's effective set (/proc/self/status). */
bool has_cap_sys_ptrace()
{
    FILE *f = std::fopen("/proc/self/status", "re");
    if (!f)
        return false;
    char line[256];
    unsigned long long eff = 0;
    bool found = false;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "CapEff: %llx", &eff) == 1) {
            found = true;
            break;
        }
    std::fclose(f);
    constexpr unsigned cap_sys_ptrace = 19;
    return found && (eff >> cap_sys_ptrace) & 1;
}

std::uint32_t tunable_u32(const env::tunable &t, std::int64_t lo, std::int64_t hi, std::int64_t def)
{
    std::int64_t v = def;
    if (t.as_int(v) < 0 || v < lo || v > hi) {
        SHUNT_LOG(shm_log, warning, "%s out of range [%lld, %lld]: using %lld", t.name,
                  static_cast<long long>(lo), static_cast<long long>(hi), static_cast<long long>(def));
        v = def;
    }
    return static_cast<std::uint32_t>(v);
}

/** May this process read and write its peers' memory by cross-memory
 *  attach? A seccomp filter (containers' default profiles without
 *  CAP_SYS_PTRACE) refuses the calls themselves, which a read of our own
 *  memory shows; Yama's ptrace_scope 2 asks for CAP_SYS_PTRACE, 3 forbids
 *  it (scope 1 is met by the PR_SET_PTRACER_ANY of every context). */
bool cma_allowed()
{
    std::uint64_t word = 1, copy = 0;
    iovec l{&copy, sizeof copy}, r{&word, sizeof word};
    if (process_vm_readv(::getpid(), &l, 1, &r, 1, 0) != ssize_t(sizeof copy) || copy != word) {
        SHUNT_LOG(shm_log, info, "cross-memory attach refused to this process (%s): peers' private memory is "
                  "reached through the ring only", std::strerror(errno));
        return false;
    }
    int scope = 0;
    if (FILE *f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "re")) {
        if (std::fscanf(f, "%d", &scope) != 1)
            scope = 0;
        std::fclose(f);
    }
    if (scope >= 3 || (scope == 2 && !has_cap_sys_ptrace())) {
        SHUNT_LOG(shm_log, info, "Yama ptrace_scope %d forbids cross-memory attach to this process: peers' "
                  "private memory is reached through the ring only", scope);
        return false;
    }
    return true;
}

limits make_limits()
{
    limits l{};
    l.segment_mb = tunable_u32(t_segment_mb, 2, 65536, 32);
    l.ring_slots = tunable_u32(t_ring_slots, 64, 65536, 1024);
    if (l.ring_slots & (l.ring_slots - 1))
        l.ring_slots = 1024;
    l.ud_rings = tunable_u32(t_ud_rings, 1, 64, 32);
    l.ud_ring_slots = 256;
    l.rndv_bytes = tunable_u32(t_rndv_bytes, 0, 1u << 30, 32768);
    l.split_bytes = tunable_u32(t_split_bytes, 0, 1u << 30, 8192);
    l.max_qp = 1024;
    l.max_mr = 4096;
    l.peer_check_ms = tunable_u32(t_peer_check_ms, 1, 60000, 100);
    bool cma = true;
    if (t_cma.as_bool(cma) < 0) {
        SHUNT_LOG(shm_log, warning, "SHUNT_SHM_CMA is not a boolean: using 1");
        cma = true;
    }
    l.cma = cma && cma_allowed();
    return l;
}

/** Start time of @p pid (0 if unknown); its state letter in *state when given. */
std::uint64_t read_start_time(int pid, char *state = nullptr);

/** A pidfd of @p pid if that process started at @p start_time (the
 *  header's word; a peer writes its own header, so a pid is only trusted
 *  with the start time /proc gives for it), else -1. Opened first and
 *  compared after: if the pid was reused in between, the times differ. */
int open_pidfd(int pid, std::uint64_t start_time)
{
    if (pid <= 0 || start_time == 0)
        return -1;
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0)
        return -1;
    if (read_start_time(pid) != start_time) {
        ::close(fd);
        return -1;
    }
    return fd;
}

std::uint64_t read_start_time(int pid, char *state)
{
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[1024];
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *p = std::strrchr(buf, ')');
    if (!p)
        return 0;
    if (state && p[1] == ' ')
        *state = p[2];
    // Fields after the command: state is field 3; starttime is field 22.
    int field = 2;
    for (; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return std::strtoull(p, nullptr, 10);
}

constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) & ~(a - 1); }

vq::device shm_device{"shm0", nullptr, "shared memory between processes on this host"};

int ctx_close(vq::context *vc);
int query_device(vq::context *, vq::device_attr *out);

/* ---- protection domains ---- */

int alloc_pd(vq::context *vc, vq::pd **out)
{
    auto *c = to_ctx(vc);
    auto *p = new (std::nothrow) shm_pd;
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
    auto *p = static_cast<shm_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    if (p->refs > 0)
        return -FI_EBUSY;
    c->npd--;
    delete p;
    return 0;
}

/* ---- region table ---- */

int table_alloc(shm_ctx *c, std::uint32_t *index, std::uint32_t *key)
{
    // Round robin over the table, and every key of an entry is used once
    // (the entry is retired after key_versions): a stale key never matches
    // a later region or window. Index 0 is never used: with it a window's
    // key could be 0 (the dead key) once its key byte wraps.
    auto n = static_cast<std::uint32_t>(c->mr_obj.size());
    for (std::uint32_t k = 0; k < n; k++) {
        std::uint32_t i = (c->mr_next + k) % n;
        if (i == 0 || c->mr_obj[i] || c->mw_obj[i] || c->mr_ver[i] >= key_versions)
            continue;
        std::uint32_t v = c->mr_ver[i]++;
        c->mr_next = (i + 1) % n;
        *index = i;
        *key = ((v / 255) << 20) | (i << 8) | (1 + v % 255);
        return 0;
    }
    return -FI_ENOSPC;
}

int reg_mr(vq::pd *vp, void *addr, std::size_t length, unsigned access, vq::mr **out)
{
    auto *p = static_cast<shm_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    if (length > (1ull << 40))
        return -FI_EMSGSIZE;
    auto *m = new (std::nothrow) shm_mr;
    if (!m)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    std::uint32_t idx, key;
    int rc = table_alloc(c, &idx, &key);
    if (rc < 0) {
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
    auto a = reinterpret_cast<std::uintptr_t>(addr);
    auto s = reinterpret_cast<std::uintptr_t>(c->seg.data());
    mr_entry &e = c->self.mrs()[idx];
    e.key.store(0, std::memory_order_relaxed);
    e.access = access;
    e.addr = a;
    e.length = length;
    e.seg_off = (a >= s && a + length <= s + c->seg.size() && a + length >= a) ? a - s : no_seg_off;
    e.key.store(key, std::memory_order_release); // publish the entry: fields above first
    c->mr_obj[idx] = m;
    c->nmr++;
    p->refs++;
    *out = m;
    return 0;
}

int dereg_mr(vq::mr *vm)
{
    auto *m = static_cast<shm_mr *>(vm);
    auto *c = to_ctx(m->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    if (m->windows > 0)
        return -FI_EBUSY;
    entry_invalidate(c, m->index); // no peer's access in flight after this (or retired)
    c->mr_obj[m->index] = nullptr;
    c->nmr--;
    static_cast<shm_pd *>(m->pd)->refs--;
    delete m;
    return 0;
}

int alloc_mw(vq::pd *vp, vq::mw_type type, vq::mw **out)
{
    auto *p = static_cast<shm_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    auto *w = new (std::nothrow) shm_mw;
    if (!w)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    std::uint32_t idx, key;
    int rc = table_alloc(c, &idx, &key);
    if (rc < 0) {
        delete w;
        return rc;
    }
    w->ctx = c;
    w->pd = p;
    w->type = type;
    w->rkey = key;
    w->index = idx;
    c->self.mrs()[idx].key.store(0, std::memory_order_release); // unbound
    c->mw_obj[idx] = w;
    c->nmw++;
    p->refs++;
    *out = w;
    return 0;
}

int dealloc_mw(vq::mw *vw)
{
    auto *w = static_cast<shm_mw *>(vw);
    auto *c = to_ctx(w->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    entry_invalidate(c, w->index);
    if (w->bound)
        w->bound->windows--;
    c->mw_obj[w->index] = nullptr;
    c->nmw--;
    static_cast<shm_pd *>(w->pd)->refs--;
    delete w;
    return 0;
}

/* ---- alloc_buf: memory in our segment ---- */

int alloc_buf(vq::context *vc, std::size_t size, void **out)
{
    auto *c = to_ctx(vc);
    std::lock_guard<std::mutex> g(c->lock);
    std::uint64_t sz = align_up(size, 64);
    std::uint64_t off = heap_alloc(c, sz);
    if (off == no_seg_off)
        return -FI_ENOMEM;
    try {
        c->used_bufs.push_back({off, sz});
    } catch (...) {
        heap_free(c, off, sz);
        return -FI_ENOMEM;
    }
    *out = c->self.base + off;
    return 0;
}

int free_buf(vq::context *vc, void *buf)
{
    auto *c = to_ctx(vc);
    std::lock_guard<std::mutex> g(c->lock);
    auto off = static_cast<std::uint64_t>(static_cast<char *>(buf) - c->self.base);
    for (std::size_t i = 0; i < c->used_bufs.size(); i++) {
        if (c->used_bufs[i].off == off) {
            heap_free(c, off, c->used_bufs[i].size);
            c->used_bufs.erase(c->used_bufs.begin() + static_cast<std::ptrdiff_t>(i));
            return 0;
        }
    }
    return -FI_EINVAL;
}

/* ---- thread domains, address handles ---- */

int alloc_td(vq::context *vc, vq::td **out)
{
    auto *c = to_ctx(vc);
    auto *t = new (std::nothrow) shm_td;
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
    for (shm_qp *q : c->qp_obj)
        if (q && q->td == t)
            return -FI_EBUSY; // a QP created with it still exists
    c->ntd--;
    delete static_cast<shm_td *>(t);
    return 0;
}

int create_ah(vq::pd *vp, const vq::ah_attr *attr, vq::ah **out)
{
    auto *c = to_ctx(vp->ctx);
    auto *a = new (std::nothrow) shm_ah;
    if (!a)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    int rc = peer_get(c, attr->dest, &a->p);
    if (rc < 0) {
        delete a;
        return rc;
    }
    a->ctx = c;
    a->pd = vp;
    a->dest = attr->dest;
    static_cast<shm_pd *>(vp)->refs++;
    c->nah++;
    *out = a;
    return 0;
}

int destroy_ah(vq::ah *va)
{
    auto *a = static_cast<shm_ah *>(va);
    auto *c = to_ctx(a->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    peer_put(c, a->p);
    static_cast<shm_pd *>(a->pd)->refs--;
    c->nah--;
    delete a;
    return 0;
}

const vq::context_ops shm_ops{
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
    .check_dest_qp = check_dest_qp,
    .qp_state_of = qp_state_of,
};

int query_device(vq::context *, vq::device_attr *out)
{
    const limits &l = lim();
    vq::device_attr a;
    a.max_qp = l.max_qp;
    a.max_qp_wr = max_wr;
    a.max_sge = max_sge;
    a.max_inline_data = max_inline;
    a.max_cq = max_cq;
    a.max_cqe = max_cqe;
    a.max_mr = l.max_mr - 1; // the table less index 0 (table_alloc)
    a.max_mr_size = 1ull << 40;
    a.max_mw = l.max_mr - 1;
    a.max_srq = max_srq;
    a.max_srq_wr = max_wr;
    a.max_msg_sz = max_msg;
    a.ud_mtu = ud_mtu;
    a.max_tso_hdr = max_tso_hdr;
    a.atomics_global = false;
    a.host_local = true;
    a.ops[static_cast<unsigned>(vq::qp_type::rc)] = vq::ops_allowed(vq::qp_type::rc);
    a.ops[static_cast<unsigned>(vq::qp_type::uc)] = vq::ops_allowed(vq::qp_type::uc);
    a.ops[static_cast<unsigned>(vq::qp_type::ud)] = vq::ops_allowed(vq::qp_type::ud);
    a.max_inline_slot = slot_payload;
    a.lend_qp_types = (1u << static_cast<unsigned>(vq::qp_type::rc)) | (1u << static_cast<unsigned>(vq::qp_type::uc)) |
                      (1u << static_cast<unsigned>(vq::qp_type::ud));
    a.max_lend_msg = max_chunk_bytes(l.ring_slots);
    a.rdma_private = l.cma;
    *out = a;
    return 0;
}

int shm_probe(std::vector<vq::device *> &out)
{
    out.push_back(&shm_device);
    return 0;
}

/* ---- host-wide context ids (the high bits of QP numbers) ----
 * A 1024-word table in the user's private directory,
 * /dev/shm/.shunt-<euid>/qpn (env::user_file; 0600; not a "shunt." segment,
 * so stale-segment cleanup leaves it alone). Word i is 0 when id i is free,
 * else low32(start time) << 32 | pid of the holding process: one CAS claims
 * a free id or takes over one whose process is gone. */
struct id_table_ref {
    std::atomic<std::uint64_t> *words = nullptr;
    int status = 0; ///< why there is none (logged once, with the path)
};

const id_table_ref &id_table() noexcept
{
    static const id_table_ref table = [] {
        id_table_ref t;
        char path[256];
        if ((t.status = env::user_file("qpn", path, sizeof path)) != 0)
            return t; // logged by user_file
        int fd = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        struct stat st;
        constexpr std::size_t bytes = max_ctx_ids * sizeof(std::uint64_t);
        void *m = MAP_FAILED;
        if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
            (st.st_mode & 077) == 0 && (static_cast<std::size_t>(st.st_size) >= bytes || ::ftruncate(fd, bytes) == 0))
            m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            SHUNT_LOG(shm_log, error, "cannot use the QP-number table %s (%s): remove it", path,
                      fd < 0 ? std::strerror(errno) : "not this user's private regular file");
            t.status = -FI_EACCES;
        } else {
            t.words = static_cast<std::atomic<std::uint64_t> *>(m);
        }
        if (fd >= 0)
            ::close(fd);
        return t;
    }();
    return table;
}

bool id_holder_gone(std::uint64_t w) noexcept
{
    auto pid = static_cast<int>(w & 0xffffffffu);
    if (pid <= 0 || (::kill(pid, 0) < 0 && errno == ESRCH))
        return true;
    return static_cast<std::uint32_t>(read_start_time(pid)) != static_cast<std::uint32_t>(w >> 32);
}

int ctx_id_alloc(std::uint32_t *out) noexcept
{
    std::atomic<std::uint64_t> *t = id_table().words;
    if (!t)
        return id_table().status;
    static const std::uint64_t me = (read_start_time(getpid()) << 32) | static_cast<std::uint32_t>(getpid());
    static std::atomic<std::uint32_t> next{static_cast<std::uint32_t>(getpid())};
    for (std::uint32_t k = 0; k < max_ctx_ids; k++) {
        std::uint32_t i = next.fetch_add(1) % max_ctx_ids;
        std::uint64_t w = t[i].load(std::memory_order_acquire);
        if (w != 0 && (w == me || !id_holder_gone(w)))
            continue;
        if (t[i].compare_exchange_strong(w, me, std::memory_order_acq_rel)) {
            *out = i;
            return 0;
        }
    }
    return -FI_ENOSPC;
}

void ctx_id_free(std::uint32_t id) noexcept
{
    if (std::atomic<std::uint64_t> *t = id_table().words)
        t[id].store(0, std::memory_order_release);
}

int shm_open(vq::device *dev, vq::context **out)
{
    const limits &l = lim();
    auto *c = new (std::nothrow) shm_ctx;
    if (!c)
        return -FI_ENOMEM;
    if (int rc = ctx_id_alloc(&c->ctx_id); rc < 0) {
        SHUNT_LOG(shm_log, error, "no host-wide context id for QP numbers: %s", shunt::strerror(rc));
        delete c;
        return rc;
    }
    static std::atomic<unsigned> counter{0};
    char name[48];
    std::uint64_t off = align_up(sizeof(ctx_hdr), 4096);
    std::uint64_t locks_off = off;
    off += num_lock_stripes * sizeof(lock_line);
    std::uint64_t mr_off = off;
    off = align_up(off + l.max_mr * sizeof(mr_entry), 4096);
    std::uint64_t qp_off = off;
    off = align_up(off + l.max_qp * sizeof(qp_desc), 4096);
    std::uint64_t total = static_cast<std::uint64_t>(l.segment_mb) << 20;
    if (off + (1u << 20) > total) {
        ctx_id_free(c->ctx_id);
        delete c;
        return -FI_EINVAL;
    }
    // Segments of this user's dead processes (killed before they could close
    // them) would otherwise stay until some process runs env::init.
    if (int removed = env::cleanup_stale_segments(); removed > 0)
        SHUNT_LOG(shm_log, notice, "removed %d shared segment(s) left by dead processes", removed);
    int rc;
    // A live segment of the same name can only be left over from an earlier
    // process with our pid (still held by a peer): take the next name.
    for (int attempt = 0;; attempt++) {
        std::snprintf(name, sizeof name, "shunt-shm-%d-%u", static_cast<int>(getpid()), counter.fetch_add(1));
        rc = c->seg.create(name, total);
        if (rc != -FI_EEXIST || attempt == 64)
            break;
    }
    if (rc < 0) {
        SHUNT_LOG(shm_log, error, "cannot create segment %s: %s", name, shunt::strerror(rc));
        ctx_id_free(c->ctx_id);
        delete c;
        return rc;
    }
    char *base = static_cast<char *>(c->seg.data());
    auto *h = new (base) ctx_hdr{};
    h->magic = ctx_magic;
    h->version = layout_version;
    h->uid = static_cast<std::uint32_t>(getuid());
    h->pid = static_cast<std::int32_t>(getpid());
    h->start_time = read_start_time(getpid());
    h->max_qp = l.max_qp;
    h->max_mr = l.max_mr;
    h->locks_off = locks_off;
    h->mr_off = mr_off;
    h->qp_off = qp_off;
    h->heap_off = off;
    h->heap_size = c->seg.size() - off;
    auto *d = reinterpret_cast<qp_desc *>(base + qp_off);
    for (std::uint32_t i = 0; i < l.max_qp; i++)
        d[i].state.store(desc_free, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    c->hdr = h;
    c->self.base = base;
    c->self.hdr = h;
    c->self.size = c->seg.size();
    c->self.locks_off = locks_off;
    c->self.mr_off = mr_off;
    c->self.qp_off = qp_off;
    c->self.heap_off = off;
    c->self.heap_size = h->heap_size;
    c->self.max_qp = l.max_qp;
    c->self.max_mr = l.max_mr;
    c->self.pid = h->pid;
    c->self.start_time = h->start_time;
    c->self.self = true;
    c->self.refs = 1;
    std::size_t n = std::strlen(name);
    c->addr.len = static_cast<std::uint8_t>(n);
    std::memcpy(c->addr.raw, name, n);
    c->self.addr = c->addr;
    try {
        c->mr_obj.assign(l.max_mr, nullptr);
        c->mw_obj.assign(l.max_mr, nullptr);
        c->mr_ver.assign(l.max_mr, 0);
        c->mr_stuck.assign(l.max_mr, 0);
        c->qp_obj.assign(l.max_qp, nullptr);
        c->qp_held.assign(l.max_qp, 0);
        c->free_blocks.push_back({off, h->heap_size});
    } catch (...) {
        ctx_id_free(c->ctx_id);
        delete c;
        return -FI_ENOMEM;
    }
    c->ops = &shm_ops;
    c->dev = dev;
    // RDMA and large sends into and out of memory outside segments use
    // process_vm_readv/writev from peers of the same user; under Yama's
    // ptrace_scope=1 that needs this process to allow it.
    (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    *out = c;
    return 0;
}

int ctx_close(vq::context *vc)
{
    auto *c = to_ctx(vc);
    {
        std::lock_guard<std::mutex> g(c->lock);
        if (c->npd || c->ncq || c->nqp || c->nsrq || c->nmr || c->nmw || c->nah || c->ntd)
            return -FI_EBUSY;
        c->hdr->closed.store(1, std::memory_order_release);
        for (peer *p : c->peers)
            delete p;
        c->peers.clear();
    }
    c->seg.close();
    ctx_id_free(c->ctx_id);
    delete c;
    return 0;
}

} // namespace

const limits &lim() noexcept
{
    static const limits l = make_limits();
    return l;
}

std::uint64_t heap_alloc(shm_ctx *c, std::uint64_t size)
{
    size = align_up(size, 64);
    for (auto &b : c->free_blocks) {
        if (b.size >= size) {
            std::uint64_t off = b.off;
            b.off += size;
            b.size -= size;
            return off;
        }
    }
    return no_seg_off;
}

bool rings_quiet(shm_ctx *c, std::uint64_t off, std::uint64_t bytes, std::uint32_t nrings,
                 std::uint32_t epoch) noexcept
{
    std::size_t stride = bytes / nrings;
    for (std::uint32_t i = 0; i < nrings; i++) {
        auto *r = reinterpret_cast<ring_ctrl *>(c->self.base + off + i * stride);
        // seq_cst: pairs with the claimer's owner CAS and its re-check of
        // the descriptor (see the driver guide, "Reuse").
        std::uint64_t o = r->owner.load(std::memory_order_seq_cst);
        if (o == 0 || r->sender_gone.load(std::memory_order_acquire) == epoch)
            continue;
        auto pid = static_cast<pid_t>(o >> 32);
        if (pid > 0 && pid != getpid() && ::kill(pid, 0) < 0 && errno == ESRCH)
            continue; // the sender's process is gone
        return false;
    }
    return true;
}

void reclaim_rings(shm_ctx *c) noexcept
{
    auto &z = c->zombies;
    for (std::size_t i = 0; i < z.size();) {
        shm_ctx::zombie &e = z[i];
        // A claimer that read the descriptor before it was freed is either
        // counted in entering or its claim is visible in the owner word.
        bool entering = c->self.qps()[e.index].entering.load(std::memory_order_seq_cst) != 0;
        if (entering || !rings_quiet(c, e.off, e.bytes, e.nrings, e.epoch)) {
            i++;
            continue;
        }
        heap_free(c, e.off, e.bytes);
        if (e.held)
            c->qp_held[e.index] = 0;
        z[i] = z.back();
        z.pop_back();
    }
}

void heap_free(shm_ctx *c, std::uint64_t off, std::uint64_t size)
{
    size = align_up(size, 64);
    std::memset(c->self.base + off, 0, size);
    auto &fb = c->free_blocks;
    std::size_t i = 0;
    while (i < fb.size() && fb[i].off < off)
        i++;
    try {
        fb.insert(fb.begin() + static_cast<std::ptrdiff_t>(i), {off, size});
    } catch (...) {
        return; // leaks the block; never happens in practice
    }
    // Merge with neighbours.
    if (i + 1 < fb.size() && fb[i].off + fb[i].size == fb[i + 1].off) {
        fb[i].size += fb[i + 1].size;
        fb.erase(fb.begin() + static_cast<std::ptrdiff_t>(i + 1));
    }
    if (i > 0 && fb[i - 1].off + fb[i - 1].size == fb[i].off) {
        fb[i - 1].size += fb[i].size;
        fb.erase(fb.begin() + static_cast<std::ptrdiff_t>(i));
    }
}

/** Read and check the geometry of the segment at p->base (@p size bytes of
 *  data area) into *p, once. Every table must lie inside the segment, in
 *  the order shm_open lays them out, and its counts within this driver's
 *  limits (key and QP numbers index at most 4096 / 1024 entries). */
bool take_geometry(peer *p, std::uint64_t size) noexcept
{
    if (size < sizeof(ctx_hdr))
        return false;
    const ctx_hdr *h = p->hdr;
    if (h->magic != ctx_magic || h->version != layout_version || h->pid <= 0)
        return false;
    const std::uint64_t locks_off = h->locks_off, mr_off = h->mr_off, qp_off = h->qp_off;
    const std::uint64_t heap_off = h->heap_off, heap_size = h->heap_size;
    const std::uint32_t max_qp = h->max_qp, max_mr = h->max_mr;
    if (max_qp == 0 || max_qp > (1u << qpn_index_bits) || max_mr == 0 || max_mr > 4096)
        return false;
    if (((locks_off | mr_off | qp_off | heap_off) & 63) != 0 || locks_off < sizeof(ctx_hdr) ||
        !range_ok(locks_off, num_lock_stripes * sizeof(lock_line), size) ||
        mr_off < locks_off + num_lock_stripes * sizeof(lock_line) ||
        !range_ok(mr_off, std::uint64_t{max_mr} * sizeof(mr_entry), size) ||
        qp_off < mr_off + std::uint64_t{max_mr} * sizeof(mr_entry) ||
        !range_ok(qp_off, std::uint64_t{max_qp} * sizeof(qp_desc), size) ||
        heap_off < qp_off + std::uint64_t{max_qp} * sizeof(qp_desc) || !range_ok(heap_off, heap_size, size))
        return false;
    p->size = size;
    p->locks_off = locks_off;
    p->mr_off = mr_off;
    p->qp_off = qp_off;
    p->heap_off = heap_off;
    p->heap_size = heap_size;
    p->max_qp = max_qp;
    p->max_mr = max_mr;
    return true;
}

int peer_get(shm_ctx *c, const vq::dev_addr &a, peer **out)
{
    if (a.len == c->addr.len && std::memcmp(a.raw, c->addr.raw, a.len) == 0) {
        c->self.refs++;
        *out = &c->self;
        return 0;
    }
    for (peer *p : c->peers) {
        if (p->addr.len == a.len && std::memcmp(p->addr.raw, a.raw, a.len) == 0) {
            p->refs++;
            *out = p;
            return 0;
        }
    }
    std::string name(reinterpret_cast<const char *>(a.raw), a.len);
    if (env::segment_name_valid(name) < 0)
        return -FI_EINVAL;
    auto *p = new (std::nothrow) peer;
    if (!p)
        return -FI_ENOMEM;
    int rc = p->seg.attach(name);
    if (rc < 0) {
        delete p;
        return rc;
    }
    auto *h = static_cast<ctx_hdr *>(p->seg.data());
    p->base = static_cast<char *>(p->seg.data());
    p->hdr = h;
    if (!take_geometry(p, p->seg.size())) {
        SHUNT_LOG(shm_log, warning, "peer %s: its segment header is not one this driver wrote: not attached",
                  name.c_str());
        delete p;
        return -FI_EINVAL;
    }
    p->addr = a;
    p->pid = h->pid;
    p->start_time = h->start_time;
    p->pidfd = open_pidfd(p->pid, p->start_time);
    p->refs = 1;
    try {
        c->peers.push_back(p);
    } catch (...) {
        delete p;
        return -FI_ENOMEM;
    }
    *out = p;
    return 0;
}

void peer_put(shm_ctx *c, peer *p)
{
    if (!p || p->self) {
        if (p)
            p->refs--;
        return;
    }
    if (--p->refs > 0)
        return;
    for (std::size_t i = 0; i < c->peers.size(); i++) {
        if (c->peers[i] == p) {
            c->peers.erase(c->peers.begin() + static_cast<std::ptrdiff_t>(i));
            break;
        }
    }
    delete p; // detaches: the segment goes away with its last holder
}

peer::~peer()
{
    if (pidfd >= 0)
        ::close(pidfd);
}

bool peer_dead(peer *p) noexcept
{
    if (p->self)
        return false;
    if (p->dead.load(std::memory_order_relaxed))
        return true;
    bool dead = p->hdr->closed.load(std::memory_order_acquire) != 0;
    if (!dead && p->pidfd >= 0) {
        // Readable once the process exited (a zombie not yet reaped
        // included); the pid cannot name another process meanwhile.
        pollfd f{p->pidfd, POLLIN, 0};
        dead = ::poll(&f, 1, 0) > 0;
    } else if (!dead && ::kill(p->pid, 0) < 0 && errno == ESRCH) {
        dead = true;
    }
    if (!dead && p->pidfd < 0) {
        // A killed process stays a zombie (kill() still finds it) until reaped.
        char state = 0;
        std::uint64_t t = read_start_time(p->pid, &state);
        if (state == 'Z' || state == 'X' || (p->start_time != 0 && t != p->start_time))
            dead = true;
    }
    if (dead)
        p->dead.store(true, std::memory_order_relaxed);
    return dead;
}

void entry_invalidate(shm_ctx *c, std::uint32_t idx) noexcept
{
    mr_entry &e = c->self.mrs()[idx];
    std::uint32_t &stuck = c->mr_stuck[idx];
    e.key.store(0, std::memory_order_seq_cst);
    if (e.users.load(std::memory_order_seq_cst) > stuck) {
        // An initiator is between its key check and the end of its copy (a
        // bounded memcpy / process_vm_*). A process that died there (SIGKILLed
        // during an RDMA read or write of ours, a rendezvous pull included)
        // stays counted: give up after SHUNT_SHM_PEER_CHECK_MS x 20 (it writes
        // nothing more), once per entry.
        std::uint64_t end = env::tsc::now() + peer_check_cycles() * 20;
        std::uint32_t n;
        while ((n = e.users.load(std::memory_order_seq_cst)) > stuck) {
            if (env::tsc::now() > end) {
                SHUNT_LOG(shm_log, warning, "region entry %u still in use by a peer after invalidation (a "
                          "peer that died inside an access to it); retired", idx);
                stuck = n;
                c->mr_ver[idx] = key_versions; // never handed out again once its owner is gone
                break;
            }
            sched_yield();
        }
    }
    c->key_gen.fetch_add(1, std::memory_order_release);
}

bool check_key(peer *p, std::uint32_t key, std::uint64_t addr, std::uint64_t len, unsigned need,
               region_ref *out, bool local) noexcept
{
    std::uint32_t idx = key_index(key);
    if (key == 0 || idx >= p->max_mr)
        return false;
    mr_entry &e = p->mrs()[idx];
    // Observe the entry: the key (acquire; seq_cst for pin_key's users
    // increment before it) orders the field loads after it; the re-check
    // catches an invalidation that raced with them.
    if (e.key.load(std::memory_order_seq_cst) != key)
        return false;
    unsigned access = e.access;
    std::uint64_t base = e.addr, length = e.length, soff = e.seg_off;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.key.load(std::memory_order_relaxed) != key)
        return false;
    if ((access & need) != need || (local && (access & entry_mw)))
        return false;
    if (addr < base || addr - base > length || len > length - (addr - base))
        return false;
    // The entry lives in a segment every peer can write: where it says the
    // memory is must lie inside the owner's segment (overflow-safe), ours too.
    if (soff != no_seg_off && (!range_ok(soff, addr - base, p->size) || !range_ok(soff + (addr - base), len, p->size)))
        return false;
    out->addr = addr;
    out->seg_off = soff == no_seg_off ? no_seg_off : soff + (addr - base);
    return true;
}

bool peer_write(peer *p, const region_ref &dst, const void *src, std::size_t len) noexcept
{
    if (len == 0)
        return true;
    if (dst.seg_off != no_seg_off) {
        std::memcpy(p->base + dst.seg_off, src, len);
        return true;
    }
    if (p->self) {
        std::memmove(reinterpret_cast<void *>(dst.addr), src, len);
        return true;
    }
    if (!lim().cma)
        return false;
    std::size_t done = 0;
    while (done < len) {
        iovec l{const_cast<char *>(static_cast<const char *>(src)) + done, len - done};
        iovec r{reinterpret_cast<void *>(dst.addr + done), len - done};
        ssize_t n = process_vm_writev(p->pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            return false;
        done += static_cast<std::size_t>(n);
    }
    return true;
}

bool peer_read(peer *p, const region_ref &src, void *dst, std::size_t len) noexcept
{
    if (len == 0)
        return true;
    if (src.seg_off != no_seg_off) {
        std::memcpy(dst, p->base + src.seg_off, len);
        return true;
    }
    if (p->self) {
        std::memmove(dst, reinterpret_cast<const void *>(src.addr), len);
        return true;
    }
    if (!lim().cma)
        return false;
    std::size_t done = 0;
    while (done < len) {
        iovec l{static_cast<char *>(dst) + done, len - done};
        iovec r{reinterpret_cast<void *>(src.addr + done), len - done};
        ssize_t n = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            return false;
        done += static_cast<std::size_t>(n);
    }
    return true;
}

} // namespace shunt::drv::shm

using shunt::drv::shm::shm_open;
using shunt::drv::shm::shm_probe;
SHUNT_VQ_DRIVER(shm, shm_probe, shm_open);
