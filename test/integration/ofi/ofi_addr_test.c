/* Addressing through fi_getinfo's node and service (fi_getinfo(3)), as
 * libfabric applications do it (C, libfabric 1.17 API), on the "shunt"
 * provider. One program, one role per run; addr_test.sh starts the roles
 * in separate processes:
 *
 *   server <rdm|msg|dgram> <service> [str] [svc-only]
 *       fi_getinfo(NULL, service, FI_SOURCE) (svc-only: flags 0) gives the
 *       source address; the endpoint (or passive endpoint) opened with it is
 *       where that service leads. Prints READY, answers one client.
 *   client <rdm|msg|dgram> <node> <service> [str]
 *       fi_getinfo(node, service, 0) gives the destination: inserted in an
 *       AV (RDM, DGRAM) or connected to (MSG); one exchange, data checked.
 *   hold <service>       binds the service, prints READY, sleeps (killed).
 *   busy <service>       the service is taken: fi_endpoint must fail with
 *                        -FI_EADDRINUSE.
 *   resolve <service>    node resolution in one process: names of this host
 *                        resolve, other names give -FI_ENODATA, FI_SOURCE
 *                        without node and service nothing, every answer
 *                        has a source address, a service nobody serves is
 *                        refused at AV insert and at connect.
 *
 * "str" asks for FI_ADDR_STR: addresses are "fi_shm://..." strings in the
 * info, from fi_getname, in fi_av_insert (an array of strings), from
 * fi_av_lookup and fi_av_straddr. Exit 0 pass, 1 fail. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define TIMEOUT_NS (20ULL * 1000 * 1000 * 1000)

#define REQUIRE(cond, ...)                                                                \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static enum fi_ep_type ep_type_of(const char *s)
{
    if (!strcmp(s, "rdm"))
        return FI_EP_RDM;
    if (!strcmp(s, "msg"))
        return FI_EP_MSG;
    if (!strcmp(s, "dgram"))
        return FI_EP_DGRAM;
    fprintf(stderr, "unknown endpoint type %s\n", s);
    exit(2);
}

static int use_str;

static struct fi_info *hints_for(enum fi_ep_type t)
{
    struct fi_info *h = fi_allocinfo();
    REQUIRE(h, "fi_allocinfo");
    h->ep_attr->type = t;
    h->caps = FI_MSG;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    h->fabric_attr->prov_name = strdup("shunt");
    if (use_str)
        h->addr_format = FI_ADDR_STR;
    return h;
}

static int getinfo(const char *node, const char *service, uint64_t flags, enum fi_ep_type t, struct fi_info **out)
{
    struct fi_info *h = hints_for(t);
    int rc = fi_getinfo(FI_VERSION(1, 17), node, service, flags, h, out);
    fi_freeinfo(h);
    return rc;
}

/* An address of the info's format: a "fi_shm://" string, or 64 bytes. */
static void check_addr(const struct fi_info *i, const void *a, size_t len, const char *service, const char *what)
{
    REQUIRE(a && len > 0, "%s address missing", what);
    if (i->addr_format == FI_ADDR_STR) {
        const char *s = a;
        REQUIRE(memchr(s, 0, len) && strlen(s) + 1 == len, "%s: not a string of %zu bytes", what, len);
        REQUIRE(!strncmp(s, "fi_shm://", 9), "%s address %s", what, s);
        if (service) {
            size_t n = strlen(s), m = strlen(service);
            REQUIRE(n > m && s[n - m - 1] == ':' && !strcmp(s + n - m, service), "%s address %s is not for %s",
                    what, s, service);
        }
    } else {
        REQUIRE(i->addr_format == FI_FORMAT_UNSPEC && len == 64, "%s address format %u, %zu bytes", what,
                i->addr_format, len);
    }
}

struct res {
    struct fi_info *fi;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_eq *eq;
    struct fid_pep *pep;
    unsigned early_send, early_recv; /* completions read while waiting for the other kind */
};

static void open_fabric(struct res *r)
{
    int rc = fi_fabric(r->fi->fabric_attr, &r->fabric, NULL);
    REQUIRE(rc == 0, "fi_fabric: %d %s", rc, fi_strerror(-rc));
}

static void open_ep(struct res *r, struct fi_info *i)
{
    int rc = fi_domain(r->fabric, i, &r->domain, NULL);
    REQUIRE(rc == 0, "fi_domain: %d %s", rc, fi_strerror(-rc));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .size = 64};
    rc = fi_cq_open(r->domain, &ca, &r->cq, NULL);
    REQUIRE(rc == 0, "fi_cq_open: %d", rc);
    rc = fi_endpoint(r->domain, i, &r->ep, NULL);
    REQUIRE(rc == 0, "fi_endpoint: %d %s", rc, fi_strerror(-rc));
    if (i->ep_attr->type == FI_EP_MSG) {
        if (!r->eq) {
            struct fi_eq_attr ea = {.size = 16};
            rc = fi_eq_open(r->fabric, &ea, &r->eq, NULL);
            REQUIRE(rc == 0, "fi_eq_open: %d", rc);
        }
        rc = fi_ep_bind(r->ep, &r->eq->fid, 0);
        REQUIRE(rc == 0, "bind eq: %d", rc);
    } else {
        struct fi_av_attr aa = {.type = FI_AV_TABLE};
        rc = fi_av_open(r->domain, &aa, &r->av, NULL);
        REQUIRE(rc == 0, "fi_av_open: %d", rc);
        rc = fi_ep_bind(r->ep, &r->av->fid, 0);
        REQUIRE(rc == 0, "bind av: %d", rc);
    }
    rc = fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV);
    REQUIRE(rc == 0, "bind cq: %d", rc);
    rc = fi_enable(r->ep);
    REQUIRE(rc == 0, "fi_enable: %d %s", rc, fi_strerror(-rc));
}

static void close_all(struct res *r)
{
    struct fid *f[] = {r->ep ? &r->ep->fid : NULL, r->pep ? &r->pep->fid : NULL, r->av ? &r->av->fid : NULL,
                       r->cq ? &r->cq->fid : NULL, r->eq ? &r->eq->fid : NULL, r->domain ? &r->domain->fid : NULL,
                       r->fabric ? &r->fabric->fid : NULL};
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
        if (f[k]) {
            int rc = fi_close(f[k]);
            REQUIRE(rc == 0, "fi_close (%zu): %d %s", k, rc, fi_strerror(-rc));
        }
    fi_freeinfo(r->fi);
}

/* Wait for one completion of kind @flag (FI_SEND or FI_RECV); one of the
 * other kind read meanwhile is kept for its own wait (a reply may complete
 * before the send that asked for it). @resend (DGRAM) is called every 100 ms. */
static void wait_cq(struct res *r, uint64_t flag, void (*resend)(struct res *))
{
    uint64_t end = now_ns() + TIMEOUT_NS, next = now_ns() + 100000000ULL;
    unsigned *mine = flag == FI_SEND ? &r->early_send : &r->early_recv;
    unsigned *other = flag == FI_SEND ? &r->early_recv : &r->early_send;
    if (*mine) {
        (*mine)--;
        return;
    }
    struct fi_cq_msg_entry e;
    for (;;) {
        ssize_t n = fi_cq_read(r->cq, &e, 1);
        if (n == 1) {
            uint64_t kind = e.flags & (FI_SEND | FI_RECV);
            REQUIRE(kind == FI_SEND || kind == FI_RECV, "completion flags %#" PRIx64, e.flags);
            if (kind == flag)
                return;
            (*other)++;
            continue;
        }
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(r->cq, &err, 0);
            REQUIRE(0, "error completion: %d %s", err.err, fi_strerror(err.err));
        }
        REQUIRE(n == -FI_EAGAIN, "fi_cq_read: %zd", n);
        REQUIRE(now_ns() < end, "timed out waiting for a completion");
        if (resend && now_ns() > next) {
            resend(r);
            next = now_ns() + 100000000ULL;
        }
        sched_yield();
    }
}

static ssize_t wait_eq(struct fid_eq *eq, uint32_t *event, void *buf, size_t len)
{
    uint64_t end = now_ns() + TIMEOUT_NS;
    for (;;) {
        ssize_t n = fi_eq_read(eq, event, buf, len, 0);
        if (n != -FI_EAGAIN)
            return n;
        REQUIRE(now_ns() < end, "timed out waiting for an EQ event");
        sched_yield();
    }
}

/* The message: the sender's name (as fi_getname gave it) and a pattern. */
struct hello {
    uint32_t namelen;
    uint32_t seq;
    char name[128];
    uint8_t data[200];
};

static struct hello rx_msg, tx_msg;
static fi_addr_t peer = FI_ADDR_UNSPEC;

static void fill(struct hello *m, uint32_t seq)
{
    m->seq = seq;
    for (size_t k = 0; k < sizeof m->data; k++)
        m->data[k] = (uint8_t)(k * 7 + seq);
}

static void check(const struct hello *m, uint32_t seq)
{
    REQUIRE(m->seq == seq, "seq %u, expected %u", m->seq, seq);
    for (size_t k = 0; k < sizeof m->data; k++)
        REQUIRE(m->data[k] == (uint8_t)(k * 7 + seq), "byte %zu corrupt", k);
}

static void post_recv(struct res *r)
{
    ssize_t rc = fi_recv(r->ep, &rx_msg, sizeof rx_msg, NULL, FI_ADDR_UNSPEC, NULL);
    REQUIRE(rc == 0, "fi_recv: %zd", rc);
}

static void send_msg(struct res *r)
{
    ssize_t rc;
    uint64_t end = now_ns() + TIMEOUT_NS;
    do {
        rc = fi_send(r->ep, &tx_msg, sizeof tx_msg, NULL, peer, NULL);
        if (rc == -FI_EAGAIN) {
            struct fi_cq_msg_entry e;
            (void)fi_cq_read(r->cq, &e, 0); /* progress */
        }
    } while (rc == -FI_EAGAIN && now_ns() < end);
    REQUIRE(rc == 0, "fi_send: %zd %s", rc, fi_strerror((int)-rc));
}

static void resend(struct res *r) { send_msg(r); }

static void my_name(struct res *r, struct hello *m)
{
    size_t len = sizeof m->name;
    int rc = fi_getname(&r->ep->fid, m->name, &len);
    REQUIRE(rc == 0, "fi_getname: %d", rc);
    check_addr(r->fi, m->name, len, NULL, "fi_getname");
    m->namelen = (uint32_t)len;
}

/* Insert the address a peer named itself with (AV endpoints). */
static void insert_peer(struct res *r, const char *name, size_t len)
{
    check_addr(r->fi, name, len, NULL, "peer's fi_getname");
    int rc = use_str ? fi_av_insert(r->av, &name, 1, &peer, 0, NULL) : fi_av_insert(r->av, name, 1, &peer, 0, NULL);
    REQUIRE(rc == 1, "fi_av_insert of the peer's name: %d", rc);
}

static int server(enum fi_ep_type t, const char *service, int svc_only)
{
    struct res r = {0};
    int rc = getinfo(NULL, service, svc_only ? 0 : FI_SOURCE, t, &r.fi);
    REQUIRE(rc == 0, "fi_getinfo(NULL, %s, %s): %d %s", service, svc_only ? "0" : "FI_SOURCE", rc, fi_strerror(-rc));
    check_addr(r.fi, r.fi->src_addr, r.fi->src_addrlen, service, "server source");
    REQUIRE(!r.fi->dest_addr, "a server's answer has a destination address");
    open_fabric(&r);
    if (t == FI_EP_MSG) {
        struct fi_eq_attr ea = {.size = 16};
        rc = fi_eq_open(r.fabric, &ea, &r.eq, NULL);
        REQUIRE(rc == 0, "fi_eq_open: %d", rc);
        rc = fi_passive_ep(r.fabric, r.fi, &r.pep, NULL);
        REQUIRE(rc == 0, "fi_passive_ep: %d %s", rc, fi_strerror(-rc));
        rc = fi_pep_bind(r.pep, &r.eq->fid, 0);
        REQUIRE(rc == 0, "fi_pep_bind: %d", rc);
        rc = fi_listen(r.pep);
        REQUIRE(rc == 0, "fi_listen: %d", rc);
        printf("READY\n");
        fflush(stdout);
        struct {
            struct fi_eq_cm_entry e;
            uint8_t data[128];
        } ev;
        uint32_t event = 0;
        ssize_t n = wait_eq(r.eq, &event, &ev, sizeof ev);
        REQUIRE(n >= (ssize_t)sizeof ev.e && event == FI_CONNREQ, "CONNREQ: %zd event %u", n, event);
        struct fi_info *req = ev.e.info; /* the application's to free */
        check_addr(req, req->dest_addr, req->dest_addrlen, NULL, "CONNREQ peer");
        open_ep(&r, req);
        post_recv(&r);
        rc = fi_accept(r.ep, NULL, 0);
        REQUIRE(rc == 0, "fi_accept: %d %s", rc, fi_strerror(-rc));
        n = wait_eq(r.eq, &event, &ev, sizeof ev);
        REQUIRE(n >= (ssize_t)sizeof ev.e && event == FI_CONNECTED, "CONNECTED: %zd event %u", n, event);
        fi_freeinfo(req);
        wait_cq(&r, FI_RECV, NULL);
        check(&rx_msg, 1);
    } else {
        open_ep(&r, r.fi);
        post_recv(&r);
        printf("READY\n");
        fflush(stdout);
        wait_cq(&r, FI_RECV, NULL);
        check(&rx_msg, 1);
        REQUIRE(rx_msg.namelen <= sizeof rx_msg.name, "name length %u", rx_msg.namelen);
        insert_peer(&r, rx_msg.name, rx_msg.namelen);
    }
    fill(&tx_msg, 2);
    send_msg(&r);
    wait_cq(&r, FI_SEND, NULL);
    close_all(&r);
    printf("server %s %s: ok\n", t == FI_EP_RDM ? "rdm" : t == FI_EP_MSG ? "msg" : "dgram", service);
    return 0;
}

static int client(enum fi_ep_type t, const char *node, const char *service)
{
    struct res r = {0};
    int rc = getinfo(node, service, 0, t, &r.fi);
    REQUIRE(rc == 0, "fi_getinfo(%s, %s, 0): %d %s", node, service, rc, fi_strerror(-rc));
    check_addr(r.fi, r.fi->dest_addr, r.fi->dest_addrlen, service, "client destination");
    check_addr(r.fi, r.fi->src_addr, r.fi->src_addrlen, NULL, "client source");
    open_fabric(&r);
    open_ep(&r, r.fi);
    post_recv(&r);
    fill(&tx_msg, 1);
    my_name(&r, &tx_msg);
    if (t == FI_EP_MSG) {
        rc = fi_connect(r.ep, r.fi->dest_addr, NULL, 0);
        REQUIRE(rc == 0, "fi_connect(dest_addr): %d %s", rc, fi_strerror(-rc));
        struct {
            struct fi_eq_cm_entry e;
            uint8_t data[128];
        } ev;
        uint32_t event = 0;
        ssize_t n = wait_eq(r.eq, &event, &ev, sizeof ev);
        REQUIRE(n >= (ssize_t)sizeof ev.e && event == FI_CONNECTED, "CONNECTED: %zd event %u", n, event);
        send_msg(&r);
        wait_cq(&r, FI_SEND, NULL);
        wait_cq(&r, FI_RECV, NULL);
    } else {
        const char *d = r.fi->dest_addr;
        rc = use_str ? fi_av_insert(r.av, &d, 1, &peer, 0, NULL) : fi_av_insert(r.av, d, 1, &peer, 0, NULL);
        REQUIRE(rc == 1, "fi_av_insert(dest_addr): %d", rc);
        /* The AV holds the endpoint the service leads to, not the service. */
        char looked[128];
        size_t llen = sizeof looked;
        rc = fi_av_lookup(r.av, peer, looked, &llen);
        REQUIRE(rc == 0 && llen <= sizeof looked, "fi_av_lookup: %d (%zu bytes)", rc, llen);
        check_addr(r.fi, looked, llen, NULL, "fi_av_lookup");
        if (use_str) {
            REQUIRE(strchr(looked + 9, '/') != NULL, "fi_av_lookup gave %s, not an endpoint address", looked);
            char text[128];
            size_t tlen = sizeof text;
            const char *s = fi_av_straddr(r.av, looked, text, &tlen);
            REQUIRE(s == text && !strcmp(text, looked) && tlen == strlen(looked) + 1, "fi_av_straddr: %s", text);
        } else {
            REQUIRE(((const uint32_t *)looked)[0] != 0, "fi_av_lookup gave a service address");
        }
        send_msg(&r);
        wait_cq(&r, FI_SEND, NULL);
        wait_cq(&r, FI_RECV, t == FI_EP_DGRAM ? resend : NULL);
    }
    check(&rx_msg, 2);
    close_all(&r);
    printf("client %s %s %s: ok\n", t == FI_EP_RDM ? "rdm" : t == FI_EP_MSG ? "msg" : "dgram", node, service);
    return 0;
}

static int hold(const char *service)
{
    struct res r = {0};
    int rc = getinfo(NULL, service, FI_SOURCE, FI_EP_RDM, &r.fi);
    REQUIRE(rc == 0, "fi_getinfo: %d", rc);
    open_fabric(&r);
    open_ep(&r, r.fi);
    printf("READY\n");
    fflush(stdout);
    sleep(60);
    return 1; /* should have been killed */
}

static int busy(const char *service)
{
    struct res r = {0};
    int rc = getinfo(NULL, service, FI_SOURCE, FI_EP_RDM, &r.fi);
    REQUIRE(rc == 0, "fi_getinfo: %d", rc);
    open_fabric(&r);
    rc = fi_domain(r.fabric, r.fi, &r.domain, NULL);
    REQUIRE(rc == 0, "fi_domain: %d", rc);
    rc = fi_endpoint(r.domain, r.fi, &r.ep, NULL);
    REQUIRE(rc == -FI_EADDRINUSE, "fi_endpoint on a service another server has: %d, expected -FI_EADDRINUSE", rc);
    r.ep = NULL;
    /* Another service on the same host is free. */
    char other[64];
    snprintf(other, sizeof other, "%s-other", service);
    struct fi_info *o = NULL;
    rc = getinfo(NULL, other, FI_SOURCE, FI_EP_RDM, &o);
    REQUIRE(rc == 0, "fi_getinfo other: %d", rc);
    rc = fi_endpoint(r.domain, o, &r.ep, NULL);
    REQUIRE(rc == 0, "fi_endpoint on a free service: %d", rc);
    fi_freeinfo(o);
    close_all(&r);
    printf("busy %s: ok\n", service);
    return 0;
}

static void expect_rc(const char *node, const char *service, uint64_t flags, int want)
{
    struct fi_info *i = NULL;
    int rc = getinfo(node, service, flags, FI_EP_RDM, &i);
    REQUIRE(rc == want, "fi_getinfo(%s, %s, %#" PRIx64 "): %d (%s), expected %d", node ? node : "NULL",
            service ? service : "NULL", flags, rc, fi_strerror(-rc), want);
    if (!rc) {
        for (struct fi_info *x = i; x; x = x->next) {
            check_addr(x, x->src_addr, x->src_addrlen, NULL, "source");
            if (node && !(flags & FI_SOURCE))
                check_addr(x, x->dest_addr, x->dest_addrlen, service, "destination");
        }
    }
    fi_freeinfo(i);
}

static int resolve(const char *service)
{
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    /* names of this host */
    expect_rc("localhost", service, 0, 0);
    expect_rc(host, service, 0, 0);
    expect_rc("127.0.0.1", service, 0, 0);
    expect_rc("127.0.0.1", service, FI_NUMERICHOST, 0);
    expect_rc("::1", service, FI_NUMERICHOST, 0);
    struct ifaddrs *ifs = NULL;
    int addrs = 0;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *a = ifs; a; a = a->ifa_next) {
            if (!a->ifa_addr || (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6))
                continue;
            char ip[INET6_ADDRSTRLEN];
            const void *raw = a->ifa_addr->sa_family == AF_INET
                                  ? (const void *)&((struct sockaddr_in *)a->ifa_addr)->sin_addr
                                  : (const void *)&((struct sockaddr_in6 *)a->ifa_addr)->sin6_addr;
            if (a->ifa_addr->sa_family == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)a->ifa_addr)->sin6_addr))
                continue; /* needs a scope id to be a name */
            inet_ntop(a->ifa_addr->sa_family, raw, ip, sizeof ip);
            expect_rc(ip, service, FI_NUMERICHOST, 0);
            addrs++;
        }
        freeifaddrs(ifs);
    }
    REQUIRE(addrs > 0, "no interface address to try");
    /* names of no host, or of another host */
    expect_rc("g00n13s", service, 0, -FI_ENODATA);
    expect_rc("203.0.113.77", service, FI_NUMERICHOST, -FI_ENODATA);
    expect_rc("localhost", service, FI_NUMERICHOST, -FI_ENODATA);
    /* FI_SOURCE needs a node or a service: Shunt says -FI_EINVAL, which
     * libfabric's fi_getinfo, asking every provider, reports as -FI_ENODATA */
    expect_rc(NULL, NULL, FI_SOURCE, -FI_ENODATA);
    /* a source address on every answer */
    expect_rc(NULL, NULL, 0, 0);
    expect_rc(NULL, service, FI_SOURCE, 0);
    expect_rc("localhost", service, FI_SOURCE, 0);

    /* a service nobody serves: refused at insert (FI_SYNC_ERR says why) and at connect */
    struct res r = {0};
    int rc = getinfo("localhost", service, 0, FI_EP_RDM, &r.fi);
    REQUIRE(rc == 0, "fi_getinfo: %d", rc);
    open_fabric(&r);
    open_ep(&r, r.fi);
    int err = 0;
    const void *d = r.fi->dest_addr;
    rc = use_str ? fi_av_insert(r.av, &d, 1, &peer, FI_SYNC_ERR, &err)
                 : fi_av_insert(r.av, d, 1, &peer, FI_SYNC_ERR, &err);
    REQUIRE(rc == 0 && peer == FI_ADDR_NOTAVAIL && err == FI_ECONNREFUSED,
            "insert of an unserved service: %d, fi_addr %#" PRIx64 ", error %d", rc, peer, err);
    close_all(&r);
    struct res m = {0};
    rc = getinfo("localhost", service, 0, FI_EP_MSG, &m.fi);
    REQUIRE(rc == 0, "fi_getinfo msg: %d", rc);
    open_fabric(&m);
    open_ep(&m, m.fi);
    rc = fi_connect(m.ep, m.fi->dest_addr, NULL, 0);
    REQUIRE(rc == -FI_ECONNREFUSED, "fi_connect to an unserved service: %d, expected -FI_ECONNREFUSED", rc);
    close_all(&m);
    printf("resolve: ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int k = 1; k < argc; k++)
        if (!strcmp(argv[k], "str"))
            use_str = 1;
    if (argc >= 4 && !strcmp(argv[1], "server"))
        return server(ep_type_of(argv[2]), argv[3], argc >= 5 && !strcmp(argv[argc - 1], "svc-only"));
    if (argc >= 5 && !strcmp(argv[1], "client"))
        return client(ep_type_of(argv[2]), argv[3], argv[4]);
    if (argc >= 3 && !strcmp(argv[1], "hold"))
        return hold(argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "busy"))
        return busy(argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "resolve"))
        return resolve(argv[2]);
    fprintf(stderr, "usage: %s server|client|hold|busy|resolve ...\n", argv[0]);
    return 2;
}
