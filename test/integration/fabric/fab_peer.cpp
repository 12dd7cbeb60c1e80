// The peer process of the shm provider integration tests: an echo server.
// argv[1]: rdm | msg | dgram; argv[2]: manual | auto; argv[3] (optional):
// private (default) | shared. Control requests come on fd 3 (fab_common.h).
// Every message received is sent back (tagged ones with tag + 1, remote CQ
// data + 1); a 1 MiB region is open to RMA/atomics. With FAB_PEER_RMA_EVENT=1
// in its environment the endpoint is opened with FI_RMA_EVENT, remote-write
// and remote-read counters are bound to it and a counter to the region
// (mr_bind FI_REMOTE_WRITE): the counters request reads them. With "shared" that
// region and the buffers echoes and send_tagged messages are sent from come
// from the provider's shareable memory (shunt_mem), else from the heap.
// FAB_PEER_DOMAIN names the vq device to open (e.g. mlx5_model0).
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <vector>

#include "fab_common.h"
#include "fabric/ext_mem.h"

using namespace shunt;
using namespace shunt::fabric;
using namespace shunt::test::fab;

namespace {

constexpr std::size_t mem_size = 1 << 20;
constexpr std::size_t buf_size = 256 * 1024;
constexpr int nbufs = 8;

struct peer {
    node n;
    ep_type type = FI_EP_RDM;
    fid_pep *pep = nullptr;
    std::vector<std::uint8_t> heap = std::vector<std::uint8_t>(mem_size);
    std::uint8_t *mem = heap.data();     ///< the RMA region: heap, or shunt_mem memory
    const ops_mem *shm_mem = nullptr;    ///< "shared": where send buffers come from
    std::map<std::uintptr_t, void *> inflight_shared; ///< "shared": the send buffer of each echo in flight
    fid_mr *mr = nullptr;
    fid_cntr *mr_cntr = nullptr;         ///< FAB_PEER_RMA_EVENT: bound to mr
    std::vector<std::vector<std::uint8_t>> bufs;
    context ctx[2 * nbufs];
    fi_addr_t test_addr = FI_ADDR_UNSPEC;
    bool have_peer = false;
    std::deque<std::vector<std::uint8_t>> outq; // echo payloads waiting for a free send
    struct pending {
        std::vector<std::uint8_t> data;
        bool tagged;
        std::uint64_t tag;
        bool has_data;
        std::uint64_t cq_data;
        bool delivery = false; ///< sent FI_DELIVERY_COMPLETE
    };
    std::deque<pending> todo;
    /** Echo buffers until their send completes, by the send's context (sends
     *  complete out of order: a rendezvous when the receiver pulls it). */
    std::map<std::uintptr_t, std::vector<std::uint8_t>> inflight;
    std::uintptr_t next_send = 1;
    response st;
    bool reject = false;
    bool connected = false;
};

void post_all(peer &p)
{
    p.bufs.assign(2 * nbufs, std::vector<std::uint8_t>(buf_size));
    for (int i = 0; i < nbufs; i++) {
        (void)recv(p.n.ep, p.bufs[i].data(), buf_size, nullptr, FI_ADDR_UNSPEC, &p.ctx[i]);
        if (p.type != FI_EP_DGRAM || true)
            (void)trecv(p.n.ep, p.bufs[nbufs + i].data(), buf_size, nullptr, FI_ADDR_UNSPEC, 0, ~0ULL,
                        &p.ctx[nbufs + i]);
    }
}

void repost(peer &p, int i)
{
    if (i < nbufs)
        (void)recv(p.n.ep, p.bufs[i].data(), buf_size, nullptr, FI_ADDR_UNSPEC, &p.ctx[i]);
    else
        (void)trecv(p.n.ep, p.bufs[i].data(), buf_size, nullptr, FI_ADDR_UNSPEC, 0, ~0ULL, &p.ctx[i]);
}

void flush_todo(peer &p)
{
    while (!p.todo.empty() && (p.have_peer || p.type == FI_EP_MSG)) {
        auto &t = p.todo.front();
        fi_addr_t to = p.type == FI_EP_MSG ? 0 : p.test_addr;
        // "shared": the message goes from a buffer of shareable memory (a
        // rendezvous the receiver copies with memcpy), else from the heap.
        void *src = t.data.data();
        void *block = nullptr;
        if (p.shm_mem) {
            if (p.shm_mem->alloc(p.n.domain, t.data.size() ? t.data.size() : 1, &block)) {
                std::fprintf(stderr, "fab_peer: no shareable memory for an echo of %zu bytes\n", t.data.size());
                p.st.c++;
                p.todo.pop_front();
                continue;
            }
            if (!t.data.empty()) // (data() of an empty vector may be null)
                std::memcpy(block, t.data.data(), t.data.size());
            src = block;
        }
        ssize_t rc;
        const std::uintptr_t id = p.next_send;
        void *ctx = reinterpret_cast<void *>(id);
        if (t.delivery) {
            iovec v{src, t.data.size()};
            msg_tagged m;
            m.msg_iov = &v;
            m.iov_count = 1;
            m.addr = to;
            m.tag = t.tag + 1;
            m.context = ctx;
            rc = tsendmsg(p.n.ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION);
        } else if (t.tagged)
            rc = t.has_data ? tsenddata(p.n.ep, src, t.data.size(), nullptr, t.cq_data + 1, to, t.tag + 1, ctx)
                            : tsend(p.n.ep, src, t.data.size(), nullptr, to, t.tag + 1, ctx);
        else
            rc = t.has_data ? senddata(p.n.ep, src, t.data.size(), nullptr, t.cq_data + 1, to, ctx)
                            : send(p.n.ep, src, t.data.size(), nullptr, to, ctx);
        if (rc == -FI_EAGAIN) {
            if (block)
                (void)p.shm_mem->free(p.n.domain, block);
            return;
        }
        if (rc) {
            std::fprintf(stderr, "fab_peer: echo send failed: %s\n", shunt::strerror(int(rc)));
            p.st.c++;
        }
        if (rc == 0) {
            p.next_send++;
            if (p.shm_mem)
                p.inflight_shared[id] = block;
            p.inflight[id] = std::move(t.data);
        } else if (block) {
            (void)p.shm_mem->free(p.n.domain, block);
        }
        p.todo.pop_front();
        p.st.a++;
    }
}

void drain_cq(peer &p)
{
    cq_tagged_entry e[8];
    ssize_t n = cq_read(p.n.cq, e, 8);
    if (n == -FI_EAVAIL) {
        cq_err_entry err{};
        (void)cq_readerr(p.n.cq, &err, 0);
        std::fprintf(stderr, "fab_peer: completion error %d (%s)\n", err.err, shunt::strerror(err.err));
        p.st.c++;
        p.st.err = err.err;
        return;
    }
    for (ssize_t k = 0; k < n; k++) {
        if (e[k].flags & FI_SEND) {
            const auto id = reinterpret_cast<std::uintptr_t>(e[k].op_context);
            p.inflight.erase(id);
            if (auto it = p.inflight_shared.find(id); it != p.inflight_shared.end()) {
                (void)p.shm_mem->free(p.n.domain, it->second);
                p.inflight_shared.erase(it);
            }
            continue;
        }
        if ((e[k].flags & FI_RMA) && (e[k].flags & FI_REMOTE_CQ_DATA)) {
            p.st.b++;
            p.st.n = std::uint32_t(e[k].data);
            continue;
        }
        if (!(e[k].flags & FI_RECV))
            continue;
        int i = int(static_cast<context *>(e[k].op_context) - p.ctx);
        if (i < 0 || i >= 2 * nbufs)
            continue;
        peer::pending t;
        t.data.assign(p.bufs[i].data(), p.bufs[i].data() + e[k].len);
        t.tagged = e[k].flags & FI_TAGGED;
        t.tag = e[k].tag;
        t.has_data = e[k].flags & FI_REMOTE_CQ_DATA;
        t.cq_data = e[k].data;
        p.todo.push_back(std::move(t));
        repost(p, i);
    }
}

void msg_events(peer &p)
{
    std::uint8_t buf[256];
    std::uint32_t ev;
    ssize_t rc = eq_read(p.n.eq, &ev, buf, sizeof buf, 0);
    if (rc < 0)
        return;
    auto *cm = reinterpret_cast<eq_cm_entry *>(buf);
    if (ev == FI_CONNREQ) {
        if (p.reject) {
            p.reject = false;
            (void)fabric::reject(p.pep, cm->info->handle, "no-room", 8);
            freeinfo(cm->info);
            return;
        }
        if (p.n.ep) {
            (void)fabric::close(&p.n.ep->fid);
            p.n.ep = nullptr;
        }
        int r = endpoint(p.n.domain, cm->info, &p.n.ep, nullptr);
        if (!r)
            r = ep_bind(p.n.ep, &p.n.cq->fid, FI_TRANSMIT | FI_RECV);
        if (!r)
            r = ep_bind(p.n.ep, &p.n.eq->fid, 0);
        if (!r)
            r = p.n.bind_counters(p.n.ep);
        if (!r)
            r = enable(p.n.ep);
        if (!r)
            post_all(p);
        if (!r)
            r = accept(p.n.ep, "welcome", 8);
        if (r) {
            std::fprintf(stderr, "fab_peer: accept failed: %s\n", shunt::strerror(r));
            p.st.c++;
        }
        freeinfo(cm->info);
    } else if (ev == FI_CONNECTED) {
        p.connected = true;
    } else if (ev == FI_SHUTDOWN) {
        p.st.d++;
        p.connected = false;
    }
}

int control(peer &p, int fd)
{
    request r;
    if (!read_all(fd, &r, sizeof r))
        return -1;
    response s{};
    switch (r.op) {
    case hello:
        if (p.type == FI_EP_MSG) {
            std::size_t len = sizeof s.addr;
            s.rc = getname(&p.pep->fid, s.addr, &len);
        } else {
            std::memcpy(s.addr, p.n.addr, sizeof s.addr);
        }
        s.a = reinterpret_cast<std::uint64_t>(p.mem);
        s.b = p.mr ? mr_key(p.mr) : 0;
        break;
    case set_peer:
        s.rc = av_insert(p.n.av, r.addr, 1, &p.test_addr, 0, nullptr) == 1 ? 0 : -FI_EINVAL;
        p.have_peer = s.rc == 0;
        break;
    case checksum:
        s.a = r.a + r.b <= mem_size ? fnv(p.mem + r.a, r.b) : 0;
        break;
    case fill:
        if (r.a + r.b <= mem_size)
            fill_pattern(p.mem + r.a, r.b, r.c);
        break;
    case send_tagged:
        for (std::uint32_t i = 0; i < r.n; i++) {
            peer::pending t;
            t.data.resize(r.b);
            fill_pattern(t.data.data(), r.b, i);
            t.tagged = true;
            t.tag = r.a + i - 1; // echo logic adds 1
            t.has_data = false;
            t.cq_data = 0;
            t.delivery = r.c == 1;
            p.todo.push_back(std::move(t));
            p.st.a--; // not an echo
        }
        break;
    case stats:
        s = p.st;
        s.rc = 0;
        break;
    case counters:
        if (!p.mr_cntr) {
            s.rc = -FI_ENOENT;
            break;
        }
        s.a = cntr_read(p.n.rwrite); // 0 for a null counter
        s.b = cntr_read(p.n.rread);
        s.c = cntr_read(p.mr_cntr);
        s.n = p.n.rwrite ? 1 : 0;
        break;
    case reject_next:
        p.reject = true;
        break;
    case pause_peer:
        write_all(fd, &s, sizeof s);
        ::usleep(useconds_t(r.a * 1000));
        return 0;
    case quit:
        write_all(fd, &s, sizeof s);
        return 1;
    case close_ep:
        if (p.n.ep) {
            s.rc = fabric::close(&p.n.ep->fid);
            p.n.ep = nullptr;
            p.have_peer = false;
            p.todo.clear();
        }
        break;
    default:
        s.rc = -FI_EINVAL;
    }
    return write_all(fd, &s, sizeof s) ? 0 : -1;
}

} // namespace

int main(int argc, char **argv)
{
    const int fd = 3;
    peer p;
    std::string t = argc > 1 ? argv[1] : "rdm";
    bool autop = argc > 2 && std::string(argv[2]) == "auto";
    const bool shared = argc > 3 && std::string(argv[3]) == "shared";
    p.type = t == "msg" ? FI_EP_MSG : t == "dgram" ? FI_EP_DGRAM : FI_EP_RDM;
    // FAB_PEER_RMA_EVENT=1: FI_RMA_EVENT endpoint, its counters and the
    // region's; =region: only the region's counter (an endpoint without
    // FI_RMA_EVENT, which counts nothing).
    const char *ev_env = std::getenv("FAB_PEER_RMA_EVENT");
    const std::string ev = ev_env ? ev_env : "";
    if (ev == "1")
        p.n.extra_caps = FI_RMA_EVENT;
    // FAB_PEER_DOMAIN: the vq device to open (default: the provider's first).
    if (const char *dom = std::getenv("FAB_PEER_DOMAIN"))
        p.n.domain_name = dom;
    int rc = p.n.open(p.type, autop);
    if (rc) {
        std::fprintf(stderr, "fab_peer: open failed: %s\n", shunt::strerror(rc));
        return 2;
    }
    if (shared) {
        void *ops = nullptr, *m = nullptr;
        if ((rc = open_ops(&p.n.domain->fid, FI_SHUNT_MEM_OPS_1, 0, &ops, nullptr)) ||
            (rc = static_cast<const ops_mem *>(ops)->alloc(p.n.domain, mem_size, &m))) {
            std::fprintf(stderr, "fab_peer: no shareable memory: %s\n", shunt::strerror(rc));
            return 2;
        }
        p.shm_mem = static_cast<const ops_mem *>(ops);
        p.mem = static_cast<std::uint8_t *>(m);
        std::memset(p.mem, 0, mem_size);
    }
    if (p.type != FI_EP_DGRAM &&
        (rc = mr_reg(p.n.domain, p.mem, mem_size, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0,
                     (p.n.extra_caps & FI_RMA_EVENT) ? FI_RMA_EVENT : 0, &p.mr, nullptr)))
        return 3;
    if (p.mr && (ev == "1" || ev == "region") &&
        ((rc = cntr_open(p.n.domain, nullptr, &p.mr_cntr, nullptr)) || (rc = mr_bind(p.mr, &p.mr_cntr->fid, FI_REMOTE_WRITE)))) {
        std::fprintf(stderr, "fab_peer: region counter: %s\n", shunt::strerror(rc));
        return 3;
    }
    if (p.type == FI_EP_MSG) {
        if ((rc = passive_ep(p.n.fabric, p.n.fi, &p.pep, nullptr)) || (rc = pep_bind(p.pep, &p.n.eq->fid, 0)) ||
            (rc = listen(p.pep)))
            return 4;
    } else {
        post_all(p);
    }
    for (;;) {
        bool idle = true;
        if (p.n.ep) {
            drain_cq(p);
            flush_todo(p);
        }
        if (p.type == FI_EP_MSG)
            msg_events(p);
        pollfd pf{fd, POLLIN, 0};
        if (::poll(&pf, 1, 0) > 0) {
            idle = false;
            int c = control(p, fd);
            if (c)
                break;
        }
        if (idle)
            sched_yield();
    }
    if (p.pep)
        (void)fabric::close(&p.pep->fid);
    if (p.mr)
        (void)fabric::close(&p.mr->fid);
    if (p.mr_cntr)
        (void)fabric::close(&p.mr_cntr->fid);
    if (p.n.ep) {
        (void)fabric::close(&p.n.ep->fid); // before its send buffers go
        p.n.ep = nullptr;
    }
    for (auto &[id, b] : p.inflight_shared)
        (void)p.shm_mem->free(p.n.domain, b);
    if (p.shm_mem)
        (void)p.shm_mem->free(p.n.domain, p.mem);
    p.n.close();
    return 0;
}
