// Inject and receive with selective completion and a counter, between two
// processes over Shunt's endpoint API (RDM endpoints, the shm provider).
//
//   fabric-inject [COUNT]          (default 16 messages)
//
// The parent is the receiver: it opens an endpoint, posts COUNT receives and
// hands its address to a child it forks. The child, the sender, binds its
// CQ with FI_SELECTIVE_COMPLETION and a counter for FI_SEND, injects COUNT-1
// messages (no completion entries, the counter counts them) and sends the
// last with FI_COMPLETION (the one entry its CQ gets). The receiver checks
// every byte of every message. Exit 0 when everything arrived intact.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <env/errors.h>
#include <fabric/api.h>

using namespace shunt;
using namespace shunt::fabric;

namespace {

constexpr std::size_t msg_size = 64;

[[noreturn]] void die(const char *what, long rc)
{
    std::fprintf(stderr, "fabric-inject: %s: %s\n", what, shunt::strerror(static_cast<int>(rc)));
    std::exit(1);
}

std::uint8_t byte_of(unsigned msg, std::size_t i) { return static_cast<std::uint8_t>(msg * 31 + i); }

struct node {
    info *fi = nullptr;
    fid_fabric *fabric = nullptr;
    fid_domain *domain = nullptr;
    fid_cq *cq = nullptr;
    fid_av *av = nullptr;
    fid_cntr *cntr = nullptr;
    fid_ep *ep = nullptr;

    void open(bool sender)
    {
        info *hints = allocinfo();
        hints->caps = FI_MSG;
        hints->mode = FI_CONTEXT; // every operation's context points at a struct context
        hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY; // what the provider asks for
        hints->ep_attr->type = FI_EP_RDM;
        hints->fabric_attr->prov_name = ::strdup("shm");
        int rc = getinfo(FI_API_VERSION, nullptr, nullptr, 0, hints, &fi);
        freeinfo(hints);
        if (rc)
            die("getinfo (is a driver installed? shunt-info -l)", rc);
        if ((rc = fabric_open(fi->fabric_attr, &fabric, nullptr)) || (rc = domain_open(fabric, fi, &domain, nullptr)))
            die("fabric/domain", rc);
        cq_attr ca;
        ca.format = FI_CQ_FORMAT_CONTEXT;
        ca.wait_obj = FI_WAIT_UNSPEC; // cq_sread
        av_attr aa;
        if ((rc = cq_open(domain, &ca, &cq, nullptr)) || (rc = av_open(domain, &aa, &av, nullptr)) ||
            (rc = endpoint(domain, fi, &ep, nullptr)))
            die("cq/av/endpoint", rc);
        if (sender) {
            // Only operations that ask for it (FI_COMPLETION) write a CQ entry;
            // the counter counts every send, injected or not.
            cntr_attr ta;
            ta.wait_obj = FI_WAIT_UNSPEC; // cntr_wait
            if ((rc = cntr_open(domain, &ta, &cntr, nullptr)) ||
                (rc = ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_SELECTIVE_COMPLETION)) ||
                (rc = ep_bind(ep, &cq->fid, FI_RECV)) ||
                (rc = ep_bind(ep, &cntr->fid, FI_SEND)))
                die("bind", rc);
        } else if ((rc = ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV))) {
            die("bind", rc);
        }
        if ((rc = ep_bind(ep, &av->fid, 0)) || (rc = enable(ep)))
            die("enable", rc);
    }
    void close()
    {
        for (fid *f : {ep ? &ep->fid : nullptr, av ? &av->fid : nullptr, cntr ? &cntr->fid : nullptr,
                       cq ? &cq->fid : nullptr, domain ? &domain->fid : nullptr, fabric ? &fabric->fid : nullptr})
            if (f)
                (void)fabric::close(f);
        freeinfo(fi);
    }
};

int run_sender(int fd, unsigned count)
{
    node n;
    n.open(true);
    std::uint8_t addr[64];
    if (::read(fd, addr, sizeof addr) != static_cast<ssize_t>(sizeof addr))
        die("read address", -FI_EIO);
    fi_addr_t peer;
    if (av_insert(n.av, addr, 1, &peer, 0, nullptr) != 1)
        die("av_insert", -FI_EINVAL);
    std::uint8_t buf[msg_size];
    for (unsigned m = 0; m + 1 < count; m++) {
        for (std::size_t i = 0; i < msg_size; i++)
            buf[i] = byte_of(m, i);
        ssize_t rc;
        while ((rc = inject(n.ep, buf, msg_size, peer)) == -FI_EAGAIN)
            (void)cq_read(n.cq, nullptr, 0); // progress
        if (rc)
            die("inject", rc);
    }
    for (std::size_t i = 0; i < msg_size; i++)
        buf[i] = byte_of(count - 1, i);
    iovec iov{buf, msg_size};
    msg m;
    m.msg_iov = &iov;
    m.iov_count = 1;
    m.addr = peer;
    context last_ctx;
    m.context = &last_ctx;
    ssize_t rc;
    while ((rc = sendmsg(n.ep, &m, FI_COMPLETION)) == -FI_EAGAIN)
        (void)cq_read(n.cq, nullptr, 0);
    if (rc)
        die("sendmsg", rc);
    cq_entry e;
    while ((rc = cq_read(n.cq, &e, 1)) == -FI_EAGAIN) {
    }
    if (rc != 1 || e.op_context != &last_ctx)
        die("send completion", rc < 0 ? rc : -FI_EOTHER);
    if ((rc = cntr_wait(n.cntr, count, 10000)))
        die("cntr_wait", rc);
    std::printf("sender: %llu sends counted, 1 completion entry (selective completion)\n",
                static_cast<unsigned long long>(cntr_read(n.cntr)));
    char done;
    if (::read(fd, &done, 1) != 1) // the receiver has everything: close
        die("read", -FI_EIO);
    n.close();
    return 0;
}

int run_receiver(int fd, unsigned count)
{
    node n;
    n.open(false);
    std::vector<std::uint8_t> bufs(count * msg_size);
    std::vector<context> ctx(count);
    for (unsigned m = 0; m < count; m++) {
        ssize_t rc = recv(n.ep, &bufs[m * msg_size], msg_size, nullptr, FI_ADDR_UNSPEC, &ctx[m]);
        if (rc)
            die("recv", rc);
    }
    std::uint8_t addr[64] = {};
    std::size_t len = sizeof addr;
    int rc = getname(&n.ep->fid, addr, &len);
    if (rc || ::write(fd, addr, sizeof addr) != static_cast<ssize_t>(sizeof addr))
        die("getname/write", rc ? rc : -FI_EIO);
    unsigned got = 0;
    for (int spins = 0; got < count;) {
        cq_entry e;
        ssize_t k = cq_sread(n.cq, &e, 1, nullptr, 1000);
        if (k == -FI_EAGAIN) {
            if (++spins > 10)
                die("no message within 10 s", k);
            continue;
        }
        if (k != 1)
            die("cq_read", k);
        got++;
    }
    unsigned bad = 0;
    for (unsigned m = 0; m < count; m++)
        for (std::size_t i = 0; i < msg_size; i++)
            bad += bufs[m * msg_size + i] != byte_of(m, i);
    (void)!::write(fd, "x", 1);
    n.close();
    if (bad) {
        std::fprintf(stderr, "receiver: %u bad bytes\n", bad);
        return 1;
    }
    std::printf("receiver: %u messages of %zu bytes, every byte checked\n", count, msg_size);
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    unsigned count = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 16;
    if (count < 1 || count > 4096) {
        std::fprintf(stderr, "usage: fabric-inject [COUNT 1..4096]\n");
        return 2;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        die("socketpair", -errno);
    pid_t kid = fork();
    if (kid < 0)
        die("fork", -errno);
    if (kid == 0) {
        ::close(sv[0]);
        std::exit(run_sender(sv[1], count));
    }
    ::close(sv[1]);
    int rc = run_receiver(sv[0], count);
    int st = 0;
    if (waitpid(kid, &st, 0) != kid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        std::fprintf(stderr, "fabric-inject: the sender failed\n");
        return 1;
    }
    return rc;
}
