/* Connection management of FI_EP_MSG through the "shunt" provider (C,
 * libfabric 1.17 API only), client and server in one process: the EQ
 * events the shim translates (FI_CONNREQ with its info and handle,
 * FI_CONNECTED, FI_SHUTDOWN, the error entry of a rejected connection) name
 * the application's own handles, and a message crosses the connection.
 * Exit 0 pass, 1 fail. Run through run_if_shunt.sh (skip when Shunt has no MSG). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define TIMEOUT_NS (10ULL * 1000 * 1000 * 1000)

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

static struct fid_eq *seq, *ceq; /* server's and client's event queues */

/* One event from @eq, reading the other EQ's errors/events is not needed:
 * returns the fi_eq_read result (size, or -FI_EAVAIL) within the timeout. */
static ssize_t wait_eq(struct fid_eq *eq, uint32_t *event, void *buf, size_t len)
{
    uint64_t end = now_ns() + TIMEOUT_NS;
    for (;;) {
        ssize_t n = fi_eq_read(eq, event, buf, len, 0);
        if (n != -FI_EAGAIN)
            return n;
        if (now_ns() > end)
            return -FI_ETIMEDOUT;
        sched_yield();
    }
}

struct conn_entry {
    struct fi_eq_cm_entry e;
    uint8_t data[64];
};

static struct fid_ep *open_ep(struct fid_domain *d, struct fi_info *i, struct fid_eq *eq, struct fid_cq *cq)
{
    struct fid_ep *ep = NULL;
    int rc = fi_endpoint(d, i, &ep, NULL);
    REQUIRE(rc == 0, "fi_endpoint: %d %s", rc, fi_strerror(-rc));
    rc = fi_ep_bind(ep, &eq->fid, 0);
    REQUIRE(rc == 0, "bind eq: %d", rc);
    rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV);
    REQUIRE(rc == 0, "bind cq: %d", rc);
    rc = fi_enable(ep);
    REQUIRE(rc == 0, "fi_enable: %d %s", rc, fi_strerror(-rc));
    return ep;
}

int main(void)
{
    struct fi_info *hints = fi_allocinfo(), *info = NULL, *cinfo = NULL;
    int rc;
    ssize_t n;
    REQUIRE(hints, "fi_allocinfo");
    hints->ep_attr->type = FI_EP_MSG;
    hints->caps = FI_MSG;
    hints->mode = FI_CONTEXT;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup("shunt");
    rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
    REQUIRE(rc == 0, "fi_getinfo(MSG): %d %s", rc, fi_strerror(-rc));

    struct fid_fabric *fabric;
    rc = fi_fabric(info->fabric_attr, &fabric, NULL);
    REQUIRE(rc == 0, "fi_fabric: %d", rc);
    struct fi_eq_attr eq_attr = {.size = 16, .flags = FI_WRITE, .wait_obj = FI_WAIT_NONE};
    rc = fi_eq_open(fabric, &eq_attr, &seq, NULL);
    REQUIRE(rc == 0, "fi_eq_open: %d", rc);
    rc = fi_eq_open(fabric, &eq_attr, &ceq, NULL);
    REQUIRE(rc == 0, "fi_eq_open: %d", rc);

    /* Server: passive endpoint listening. */
    struct fid_pep *pep;
    rc = fi_passive_ep(fabric, info, &pep, (void *)0x5e);
    REQUIRE(rc == 0, "fi_passive_ep: %d %s", rc, fi_strerror(-rc));
    rc = fi_pep_bind(pep, &seq->fid, 0);
    REQUIRE(rc == 0, "fi_pep_bind: %d", rc);
    rc = fi_listen(pep);
    REQUIRE(rc == 0, "fi_listen: %d %s", rc, fi_strerror(-rc));
    char addr[256];
    size_t addrlen = sizeof(addr);
    rc = fi_getname(&pep->fid, addr, &addrlen);
    REQUIRE(rc == 0, "fi_getname(pep): %d", rc);
    size_t cm_data_size = 0, optlen = sizeof(cm_data_size);
    rc = fi_getopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cm_data_size, &optlen);
    REQUIRE(rc == 0, "fi_getopt(FI_OPT_CM_DATA_SIZE) on the pep: %d", rc);

    /* Client: an info for the server's address. */
    hints->dest_addr = malloc(addrlen);
    memcpy(hints->dest_addr, addr, addrlen);
    hints->dest_addrlen = addrlen;
    rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &cinfo);
    REQUIRE(rc == 0, "fi_getinfo(client, dest_addr): %d %s", rc, fi_strerror(-rc));
    struct fid_domain *cdom, *sdom = NULL;
    rc = fi_domain(fabric, cinfo, &cdom, NULL);
    REQUIRE(rc == 0, "fi_domain: %d", rc);
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_MSG, .size = 16};
    struct fid_cq *ccq, *scq = NULL;
    rc = fi_cq_open(cdom, &cq_attr, &ccq, NULL);
    REQUIRE(rc == 0, "fi_cq_open: %d", rc);

    const char hello[] = "hello";
    size_t hello_len = cm_data_size >= sizeof(hello) ? sizeof(hello) : 0;

    /* 1. A rejected connection: the client sees an error entry naming its endpoint.
     * Before it, the application writes a CM event of its own (garbage fid and
     * info) to the server's EQ: it comes back as written, and the provider's
     * FI_CONNREQ behind it is still translated. */
    struct fi_eq_cm_entry mine = {.fid = (fid_t)(uintptr_t)0xbad0, .info = (struct fi_info *)(uintptr_t)0xbad1};
    n = fi_eq_write(seq, FI_CONNECTED, &mine, sizeof mine, 0);
    REQUIRE(n == (ssize_t)sizeof mine, "fi_eq_write(FI_CONNECTED, garbage): %zd", n);
    struct fid_ep *cep = open_ep(cdom, cinfo, ceq, ccq);
    rc = fi_connect(cep, addr, hello_len ? hello : NULL, hello_len);
    REQUIRE(rc == 0, "fi_connect: %d %s", rc, fi_strerror(-rc));
    struct conn_entry ce;
    uint32_t event = 0;
    n = wait_eq(seq, &event, &ce, sizeof(ce));
    REQUIRE(n == (ssize_t)sizeof mine && event == FI_CONNECTED && ce.e.fid == mine.fid && ce.e.info == mine.info,
            "the application's own CM entry: %zd event %u fid %p info %p", n, event, (void *)ce.e.fid,
            (void *)ce.e.info);
    n = wait_eq(seq, &event, &ce, sizeof(ce));
    REQUIRE(n >= (ssize_t)sizeof(struct fi_eq_cm_entry) && event == FI_CONNREQ, "server EQ: %zd event %u", n, event);
    REQUIRE(ce.e.fid == &pep->fid, "FI_CONNREQ names fid %p, not the passive endpoint %p", (void *)ce.e.fid,
            (void *)&pep->fid);
    REQUIRE(ce.e.info && ce.e.info->handle, "FI_CONNREQ without info or handle");
    REQUIRE(ce.e.info->ep_attr->type == FI_EP_MSG, "CONNREQ info type %d", ce.e.info->ep_attr->type);
    REQUIRE(ce.e.info->fabric_attr->prov_name && !strcmp(ce.e.info->fabric_attr->prov_name, "shunt"),
            "CONNREQ info provider %s", ce.e.info->fabric_attr->prov_name);
    if (hello_len)
        REQUIRE(n >= (ssize_t)(sizeof(struct fi_eq_cm_entry) + hello_len) &&
                    !memcmp(ce.e.data, hello, hello_len), "CM data of FI_CONNREQ (n=%zd)", n);
    rc = fi_reject(pep, ce.e.info->handle, NULL, 0);
    REQUIRE(rc == 0, "fi_reject: %d %s", rc, fi_strerror(-rc));
    fi_freeinfo(ce.e.info);
    n = wait_eq(ceq, &event, &ce, sizeof(ce));
    REQUIRE(n == -FI_EAVAIL, "rejected client: fi_eq_read %zd (event %u), expected -FI_EAVAIL", n, event);
    struct fi_eq_err_entry err;
    memset(&err, 0, sizeof(err));
    n = fi_eq_readerr(ceq, &err, 0);
    REQUIRE(n == (ssize_t)sizeof(err), "fi_eq_readerr: %zd", n);
    REQUIRE(err.fid == &cep->fid, "error entry names fid %p, not the client endpoint %p", (void *)err.fid,
            (void *)&cep->fid);
    REQUIRE(err.err == FI_ECONNREFUSED, "rejection error %d (%s), expected FI_ECONNREFUSED", err.err,
            fi_strerror(err.err));
    rc = fi_close(&cep->fid);
    REQUIRE(rc == 0, "fi_close(rejected ep): %d", rc);

    /* 2. An accepted connection: both sides see FI_CONNECTED naming their endpoint. */
    cep = open_ep(cdom, cinfo, ceq, ccq);
    rc = fi_connect(cep, addr, NULL, 0);
    REQUIRE(rc == 0, "fi_connect: %d", rc);
    n = wait_eq(seq, &event, &ce, sizeof(ce));
    REQUIRE(n >= (ssize_t)sizeof(struct fi_eq_cm_entry) && event == FI_CONNREQ, "server EQ: %zd event %u", n, event);
    struct fi_info *sinfo = ce.e.info;
    rc = fi_domain(fabric, sinfo, &sdom, NULL);
    REQUIRE(rc == 0, "fi_domain(from FI_CONNREQ info): %d %s", rc, fi_strerror(-rc));
    rc = fi_cq_open(sdom, &cq_attr, &scq, NULL);
    REQUIRE(rc == 0, "fi_cq_open: %d", rc);
    struct fid_ep *sep = open_ep(sdom, sinfo, seq, scq);
    static char rbuf[64], sbuf[64];
    struct fid_mr *rmr = NULL, *smr = NULL;
    void *rdesc = NULL, *sdesc = NULL;
    if (sinfo->domain_attr->mr_mode & FI_MR_LOCAL) {
        rc = fi_mr_reg(sdom, rbuf, sizeof(rbuf), FI_RECV, 0, 0, 0, &rmr, NULL);
        REQUIRE(rc == 0, "fi_mr_reg: %d", rc);
        rdesc = fi_mr_desc(rmr);
    }
    if (cinfo->domain_attr->mr_mode & FI_MR_LOCAL) {
        rc = fi_mr_reg(cdom, sbuf, sizeof(sbuf), FI_SEND, 0, 0, 0, &smr, NULL);
        REQUIRE(rc == 0, "fi_mr_reg: %d", rc);
        sdesc = fi_mr_desc(smr);
    }
    struct fi_context rctx, sctx;
    n = fi_recv(sep, rbuf, sizeof(rbuf), rdesc, 0, &rctx);
    REQUIRE(n == 0, "fi_recv before accept: %zd", n);
    rc = fi_accept(sep, NULL, 0);
    REQUIRE(rc == 0, "fi_accept: %d %s", rc, fi_strerror(-rc));
    n = wait_eq(ceq, &event, &ce, sizeof(ce));
    REQUIRE(n >= (ssize_t)sizeof(struct fi_eq_cm_entry) && event == FI_CONNECTED, "client EQ: %zd event %u", n,
            event);
    REQUIRE(ce.e.fid == &cep->fid, "client FI_CONNECTED names %p, not %p", (void *)ce.e.fid, (void *)&cep->fid);
    n = wait_eq(seq, &event, &ce, sizeof(ce));
    REQUIRE(n >= (ssize_t)sizeof(struct fi_eq_cm_entry) && event == FI_CONNECTED, "server EQ: %zd event %u", n,
            event);
    REQUIRE(ce.e.fid == &sep->fid, "server FI_CONNECTED names %p, not %p", (void *)ce.e.fid, (void *)&sep->fid);

    memcpy(sbuf, "over the connection", 20);
    uint64_t end = now_ns() + TIMEOUT_NS;
    while ((n = fi_send(cep, sbuf, 20, sdesc, 0, &sctx)) == -FI_EAGAIN && now_ns() < end)
        sched_yield();
    REQUIRE(n == 0, "fi_send: %zd", n);
    struct fi_cq_msg_entry me;
    end = now_ns() + TIMEOUT_NS;
    while ((n = fi_cq_read(scq, &me, 1)) == -FI_EAGAIN && now_ns() < end) {
        struct fi_cq_msg_entry dummy;
        (void)fi_cq_read(ccq, &dummy, 0);
        sched_yield();
    }
    REQUIRE(n == 1 && me.op_context == &rctx && me.len == 20 && !memcmp(rbuf, "over the connection", 20),
            "message over the connection: n=%zd len %zu", n, me.len);
    end = now_ns() + TIMEOUT_NS;
    while ((n = fi_cq_read(ccq, &me, 1)) == -FI_EAGAIN && now_ns() < end)
        sched_yield();
    REQUIRE(n == 1 && me.op_context == &sctx, "send completion: %zd", n);

    /* 3. Shutdown: the peer sees FI_SHUTDOWN naming its endpoint. */
    rc = fi_shutdown(cep, 0);
    REQUIRE(rc == 0, "fi_shutdown: %d", rc);
    n = wait_eq(seq, &event, &ce, sizeof(ce));
    /* Connection events, FI_SHUTDOWN included, are struct fi_eq_cm_entry. */
    REQUIRE(n >= (ssize_t)sizeof(struct fi_eq_cm_entry) && event == FI_SHUTDOWN, "server EQ after shutdown: %zd event %u",
            n, event);
    REQUIRE(ce.e.fid == &sep->fid, "FI_SHUTDOWN names %p, not the server endpoint %p", (void *)ce.e.fid,
            (void *)&sep->fid);

    REQUIRE(fi_close(&cep->fid) == 0 && fi_close(&sep->fid) == 0, "closing the endpoints");
    if (rmr)
        REQUIRE(fi_close(&rmr->fid) == 0, "close mr");
    if (smr)
        REQUIRE(fi_close(&smr->fid) == 0, "close mr");
    REQUIRE(fi_close(&ccq->fid) == 0 && fi_close(&scq->fid) == 0, "closing the CQs");
    REQUIRE(fi_close(&pep->fid) == 0, "closing the pep");
    REQUIRE(fi_close(&cdom->fid) == 0 && fi_close(&sdom->fid) == 0, "closing the domains");
    REQUIRE(fi_close(&ceq->fid) == 0 && fi_close(&seq->fid) == 0, "closing the EQs");
    REQUIRE(fi_close(&fabric->fid) == 0, "closing the fabric");
    fi_freeinfo(sinfo);
    fi_freeinfo(cinfo);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    printf("ok: FI_CONNREQ (pep fid, info, handle, CM data), reject -> FI_ECONNREFUSED on the client's fid, "
           "accept -> FI_CONNECTED on both fids, data, FI_SHUTDOWN\n");
    return 0;
}
