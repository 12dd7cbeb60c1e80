/* A libfabric application (C, libfabric 1.17 API only) run against the
 * "shunt" provider through libshunt-fi.so: two RDM endpoints in one domain
 * exercise inject, selective completion with per-operation FI_COMPLETION,
 * counters, tagged receives (exact, wildcard and unexpected), remote CQ
 * data and cancel with its error entry.
 *
 * Exit 0 pass, 1 fail (with a message), 77 when libfabric finds no shunt
 * RDM provider AND the caller said Shunt has none (run_if_shunt.sh runs
 * shunt_probe first; an empty answer here is then a failure of the shim). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define TIMEOUT_NS (10ULL * 1000 * 1000 * 1000)

static int failures;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
            failures++;                                                                   \
        }                                                                                 \
    } while (0)

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

struct side {
    struct fid_ep *ep;
    struct fid_cq *txcq, *rxcq;
    struct fid_cntr *txcntr, *rxcntr;
    struct fid_cntr *remcntr; /* remote writes and reads into this endpoint's memory (FI_RMA_EVENT) */
    fi_addr_t addr; /* this endpoint's address in the shared AV */
};

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct side a, b;
static int need_mr;

/* Drive progress on both endpoints (manual progress: reading CQs). */
static void progress(void)
{
    struct fi_cq_tagged_entry e;
    /* A zero-count read makes progress without consuming entries. */
    (void)fi_cq_read(a.txcq, &e, 0);
    (void)fi_cq_read(a.rxcq, &e, 0);
    (void)fi_cq_read(b.txcq, &e, 0);
    (void)fi_cq_read(b.rxcq, &e, 0);
}

/* One completion from @cq within the timeout; returns 1, or 0 on timeout,
 * or the negative error. Other CQs are progressed while waiting. */
static ssize_t wait_cq(struct fid_cq *cq, struct fi_cq_tagged_entry *e)
{
    uint64_t end = now_ns() + TIMEOUT_NS;
    for (;;) {
        ssize_t n = fi_cq_read(cq, e, 1);
        if (n != -FI_EAGAIN)
            return n;
        if (now_ns() > end)
            return 0;
        progress();
        sched_yield();
    }
}

/* No completion at all shows up on @cq for a while (progressing everything). */
static int cq_stays_empty(struct fid_cq *cq, int spins)
{
    struct fi_cq_tagged_entry e;
    for (int i = 0; i < spins; i++) {
        ssize_t n = fi_cq_read(cq, &e, 1);
        if (n != -FI_EAGAIN)
            return 0;
        progress();
        sched_yield();
    }
    return 1;
}

/* Post with retry: -FI_EAGAIN means "progress and try again" (RDM peers
 * may still be connecting). Bounded by the timeout. */
#define POST(expr)                                                                        \
    ({                                                                                    \
        uint64_t end_ = now_ns() + TIMEOUT_NS;                                            \
        ssize_t r_;                                                                       \
        while ((r_ = (expr)) == -FI_EAGAIN && now_ns() < end_) {                          \
            progress();                                                                   \
            sched_yield();                                                                \
        }                                                                                 \
        r_;                                                                               \
    })

static int wait_cntr(struct fid_cntr *c, uint64_t value)
{
    uint64_t end = now_ns() + TIMEOUT_NS;
    while (fi_cntr_read(c) < value) {
        if (now_ns() > end)
            return 0;
        progress();
        sched_yield();
    }
    return 1;
}

static void open_side(struct side *s, uint64_t tx_bind)
{
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE, .size = 64};
    struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE};
    int rc;

    rc = fi_endpoint(domain, info, &s->ep, s);
    REQUIRE(rc == 0, "fi_endpoint: %d %s", rc, fi_strerror(-rc));
    rc = fi_cq_open(domain, &cq_attr, &s->txcq, NULL);
    REQUIRE(rc == 0, "fi_cq_open: %d", rc);
    rc = fi_cq_open(domain, &cq_attr, &s->rxcq, NULL);
    REQUIRE(rc == 0, "fi_cq_open: %d", rc);
    rc = fi_cntr_open(domain, &cntr_attr, &s->txcntr, NULL);
    REQUIRE(rc == 0, "fi_cntr_open: %d", rc);
    rc = fi_cntr_open(domain, &cntr_attr, &s->rxcntr, NULL);
    REQUIRE(rc == 0, "fi_cntr_open: %d", rc);

    /* Sending before enable is refused (the endpoint starts disabled). */
    char byte = 0;
    ssize_t sr = fi_inject(s->ep, &byte, 1, 0);
    CHECK(sr < 0 && sr != -FI_ENOSYS, "inject before enable returned %zd, expected an error", sr);

    rc = fi_ep_bind(s->ep, &av->fid, 0);
    REQUIRE(rc == 0, "bind av: %d", rc);
    rc = fi_ep_bind(s->ep, &s->txcq->fid, tx_bind);
    REQUIRE(rc == 0, "bind tx cq: %d", rc);
    rc = fi_ep_bind(s->ep, &s->rxcq->fid, FI_RECV);
    REQUIRE(rc == 0, "bind rx cq: %d", rc);
    rc = fi_ep_bind(s->ep, &s->txcntr->fid, FI_SEND);
    REQUIRE(rc == 0, "bind tx cntr: %d", rc);
    rc = fi_ep_bind(s->ep, &s->rxcntr->fid, FI_RECV);
    REQUIRE(rc == 0, "bind rx cntr: %d", rc);
    rc = fi_cntr_open(domain, &cntr_attr, &s->remcntr, NULL);
    REQUIRE(rc == 0, "fi_cntr_open: %d", rc);
    rc = fi_ep_bind(s->ep, &s->remcntr->fid, FI_REMOTE_WRITE | FI_REMOTE_READ);
    REQUIRE(rc == 0, "bind remote-access cntr (FI_RMA_EVENT): %d %s", rc, fi_strerror(-rc));
    rc = fi_enable(s->ep);
    REQUIRE(rc == 0, "fi_enable: %d %s", rc, fi_strerror(-rc));

    char name[256];
    size_t len = sizeof(name);
    rc = fi_getname(&s->ep->fid, name, &len);
    REQUIRE(rc == 0, "fi_getname: %d", rc);
    rc = fi_av_insert(av, name, 1, &s->addr, 0, NULL);
    REQUIRE(rc == 1, "fi_av_insert: %d", rc);
}

static void close_fid(struct fid *f, const char *what)
{
    if (!f)
        return;
    int rc = fi_close(f);
    CHECK(rc == 0, "fi_close(%s): %d", what, rc);
}

int main(void)
{
    struct fi_info *hints = fi_allocinfo();
    int rc;
    REQUIRE(hints, "fi_allocinfo");
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_RMA_EVENT;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    hints->fabric_attr->prov_name = strdup("shunt");

    rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
    fi_freeinfo(hints);
    /* run_if_shunt.sh asked Shunt first: it has an RDM provider, so the
     * shim must find it too. */
    REQUIRE(rc == 0, "fi_getinfo(prov shunt, RDM, MSG|TAGGED|RMA|ATOMIC): %d %s", rc, fi_strerror(-rc));
    REQUIRE(!strcmp(info->fabric_attr->prov_name, "shunt"), "prov_name %s", info->fabric_attr->prov_name);
    REQUIRE(info->ep_attr->type == FI_EP_RDM, "type %d", info->ep_attr->type);
    REQUIRE((info->caps & (FI_MSG | FI_TAGGED)) == (FI_MSG | FI_TAGGED), "caps %#" PRIx64, info->caps);
    REQUIRE(info->caps & FI_RMA_EVENT, "FI_RMA_EVENT asked for but not given: caps %#" PRIx64, info->caps);
    need_mr = (info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
    size_t inject_size = info->tx_attr->inject_size;
    REQUIRE(inject_size >= 8, "inject_size %zu too small for the test", inject_size);

    rc = fi_fabric(info->fabric_attr, &fabric, NULL);
    REQUIRE(rc == 0, "fi_fabric: %d %s", rc, fi_strerror(-rc));
    rc = fi_domain(fabric, info, &domain, NULL);
    REQUIRE(rc == 0, "fi_domain: %d %s", rc, fi_strerror(-rc));
    struct fi_av_attr av_attr = {.type = FI_AV_UNSPEC};
    rc = fi_av_open(domain, &av_attr, &av, NULL);
    REQUIRE(rc == 0, "fi_av_open: %d", rc);

    open_side(&a, FI_TRANSMIT | FI_SELECTIVE_COMPLETION);
    open_side(&b, FI_TRANSMIT);

    static char rbuf[8][256];
    static char sbuf[256];
    struct fid_mr *rmr = NULL, *smr = NULL;
    void *rdesc = NULL, *sdesc = NULL;
    if (need_mr) {
        rc = fi_mr_reg(domain, rbuf, sizeof(rbuf), FI_RECV, 0, 1, 0, &rmr, NULL);
        REQUIRE(rc == 0, "fi_mr_reg: %d", rc);
        rc = fi_mr_reg(domain, sbuf, sizeof(sbuf), FI_SEND | FI_READ | FI_WRITE, 0, 2, 0, &smr, NULL);
        REQUIRE(rc == 0, "fi_mr_reg: %d", rc);
        rdesc = fi_mr_desc(rmr);
        sdesc = fi_mr_desc(smr);
    }
    struct fi_context2 rctx[8], sctx[4];
    struct fi_cq_tagged_entry e;
    ssize_t n;

    /* 1. inject: the buffer is the caller's again at return; no completion. */
    n = fi_recv(b.ep, rbuf[0], sizeof(rbuf[0]), rdesc, FI_ADDR_UNSPEC, &rctx[0]);
    REQUIRE(n == 0, "fi_recv: %zd", n);
    memcpy(sbuf, "inject-payload", 15);
    n = POST(fi_inject(a.ep, sbuf, 15, b.addr));
    REQUIRE(n == 0, "fi_inject: %zd %s", n, fi_strerror((int)-n));
    memset(sbuf, 'X', 15); /* reuse at once: the message must not change */
    n = wait_cq(b.rxcq, &e);
    REQUIRE(n == 1, "receive of the injected message: %zd", n);
    CHECK(e.op_context == &rctx[0], "context %p, expected %p", e.op_context, (void *)&rctx[0]);
    CHECK(e.len == 15, "len %zu", e.len);
    CHECK((e.flags & (FI_RECV | FI_MSG)) == (FI_RECV | FI_MSG), "flags %#" PRIx64, e.flags);
    CHECK(!memcmp(rbuf[0], "inject-payload", 15), "payload '%.15s'", rbuf[0]);
    CHECK(cq_stays_empty(a.txcq, 200), "an inject produced a transmit completion");
    CHECK(wait_cntr(b.rxcntr, 1), "B's receive counter did not reach 1 (%" PRIu64 ")", fi_cntr_read(b.rxcntr));

    /* 2. selective completion: a send without FI_COMPLETION counts but
     *    writes no CQ entry; sendmsg with FI_COMPLETION writes exactly one. */
    n = fi_recv(b.ep, rbuf[1], sizeof(rbuf[1]), rdesc, FI_ADDR_UNSPEC, &rctx[1]);
    REQUIRE(n == 0, "fi_recv: %zd", n);
    n = fi_recv(b.ep, rbuf[2], sizeof(rbuf[2]), rdesc, FI_ADDR_UNSPEC, &rctx[2]);
    REQUIRE(n == 0, "fi_recv: %zd", n);
    uint64_t tx_before = fi_cntr_read(a.txcntr);
    memcpy(sbuf, "silent", 7);
    n = POST(fi_send(a.ep, sbuf, 7, sdesc, b.addr, &sctx[0]));
    REQUIRE(n == 0, "fi_send: %zd", n);
    CHECK(wait_cntr(a.txcntr, tx_before + 1), "A's send counter did not count the silent send");
    n = wait_cq(b.rxcq, &e);
    CHECK(n == 1 && e.op_context == &rctx[1] && e.len == 7 && !memcmp(rbuf[1], "silent", 7),
          "silent send not received (n=%zd)", n);
    CHECK(cq_stays_empty(a.txcq, 200), "a send without FI_COMPLETION wrote a CQ entry under selective completion");

    struct iovec iov = {.iov_base = sbuf, .iov_len = 6};
    struct fi_msg msg = {.msg_iov = &iov, .desc = &sdesc, .iov_count = 1, .addr = b.addr, .context = &sctx[1]};
    memcpy(sbuf, "loud!", 6);
    n = POST(fi_sendmsg(a.ep, &msg, FI_COMPLETION));
    REQUIRE(n == 0, "fi_sendmsg(FI_COMPLETION): %zd", n);
    n = wait_cq(a.txcq, &e);
    CHECK(n == 1, "no completion for a send with FI_COMPLETION (%zd)", n);
    if (n == 1) {
        CHECK(e.op_context == &sctx[1], "context %p, expected %p", e.op_context, (void *)&sctx[1]);
        CHECK(e.flags & FI_SEND, "flags %#" PRIx64, e.flags);
    }
    CHECK(cq_stays_empty(a.txcq, 100), "more than one transmit completion");
    n = wait_cq(b.rxcq, &e);
    CHECK(n == 1 && e.op_context == &rctx[2] && e.len == 6, "FI_COMPLETION message not received (n=%zd)", n);
    CHECK(fi_cntr_read(a.txcntr) == tx_before + 2, "A's send counter %" PRIu64 ", expected %" PRIu64,
          fi_cntr_read(a.txcntr), tx_before + 2);

    /* 3. counters are the application's too: set and add. */
    rc = fi_cntr_set(b.rxcntr, 100);
    CHECK(rc == 0, "fi_cntr_set: %d", rc);
    rc = fi_cntr_add(b.rxcntr, 5);
    CHECK(rc == 0, "fi_cntr_add: %d", rc);
    CHECK(fi_cntr_read(b.rxcntr) == 105, "counter %" PRIu64 " after set 100 + add 5", fi_cntr_read(b.rxcntr));
    CHECK(fi_cntr_readerr(b.rxcntr) == 0, "error counter %" PRIu64, fi_cntr_readerr(b.rxcntr));

    /* 4. tagged: an unexpected message first, then exact and wildcard matches. */
    memcpy(sbuf, "early", 6);
    n = POST(fi_tinject(a.ep, sbuf, 6, b.addr, 0x77));
    REQUIRE(n == 0, "fi_tinject: %zd", n);
    for (int i = 0; i < 50; i++) {
        progress();
        sched_yield();
    }
    n = fi_trecv(b.ep, rbuf[3], sizeof(rbuf[3]), rdesc, FI_ADDR_UNSPEC, 0x77, 0, &rctx[3]);
    REQUIRE(n == 0, "fi_trecv: %zd", n);
    n = wait_cq(b.rxcq, &e);
    CHECK(n == 1, "unexpected tagged message not delivered (%zd)", n);
    if (n == 1) {
        CHECK(e.op_context == &rctx[3] && e.tag == 0x77 && e.len == 6 && !memcmp(rbuf[3], "early", 6),
              "unexpected message: ctx %p tag %#" PRIx64 " len %zu", e.op_context, e.tag, e.len);
        CHECK((e.flags & (FI_TAGGED | FI_RECV)) == (FI_TAGGED | FI_RECV), "flags %#" PRIx64, e.flags);
    }

    n = fi_trecv(b.ep, rbuf[4], sizeof(rbuf[4]), rdesc, FI_ADDR_UNSPEC, 0x1234, 0, &rctx[4]);
    REQUIRE(n == 0, "fi_trecv exact: %zd", n);
    n = fi_trecv(b.ep, rbuf[5], sizeof(rbuf[5]), rdesc, FI_ADDR_UNSPEC, 0x5000, 0xff, &rctx[5]);
    REQUIRE(n == 0, "fi_trecv wildcard: %zd", n);
    memcpy(sbuf, "wild", 5);
    int with_data = info->domain_attr->cq_data_size >= 4;
    if (with_data)
        n = POST(fi_tsenddata(a.ep, sbuf, 5, sdesc, 0xdeadbeef, b.addr, 0x50ab, &sctx[2]));
    else
        n = POST(fi_tsend(a.ep, sbuf, 5, sdesc, b.addr, 0x50ab, &sctx[2]));
    REQUIRE(n == 0, "fi_tsend%s: %zd", with_data ? "data" : "", n);
    n = wait_cq(b.rxcq, &e);
    CHECK(n == 1, "wildcard receive did not complete (%zd)", n);
    if (n == 1) {
        CHECK(e.op_context == &rctx[5], "tag 0x50ab matched context %p, expected the wildcard receive %p",
              e.op_context, (void *)&rctx[5]);
        CHECK(e.tag == 0x50ab && e.len == 5 && !memcmp(rbuf[5], "wild", 5), "tag %#" PRIx64 " len %zu", e.tag,
              e.len);
        CHECK(!with_data || ((e.flags & FI_REMOTE_CQ_DATA) && e.data == 0xdeadbeef),
              "remote CQ data: flags %#" PRIx64 " data %#" PRIx64, e.flags, e.data);
    }
    memcpy(sbuf, "exact", 6);
    n = POST(fi_tinject(a.ep, sbuf, 6, b.addr, 0x1234));
    REQUIRE(n == 0, "fi_tinject: %zd", n);
    n = wait_cq(b.rxcq, &e);
    CHECK(n == 1 && e.op_context == &rctx[4] && e.tag == 0x1234 && !memcmp(rbuf[4], "exact", 6),
          "exact tagged receive (n=%zd ctx %p tag %#" PRIx64 ")", n, e.op_context, e.tag);
    /* tsenddata without FI_COMPLETION under selective completion: counted only. */
    CHECK(cq_stays_empty(a.txcq, 100), "tagged send wrote a CQ entry without FI_COMPLETION");

    /* 5. cancel: the pending receive completes with an FI_ECANCELED error entry. */
    n = fi_trecv(b.ep, rbuf[6], sizeof(rbuf[6]), rdesc, FI_ADDR_UNSPEC, 0x999, 0, &rctx[6]);
    REQUIRE(n == 0, "fi_trecv: %zd", n);
    n = fi_cancel(&b.ep->fid, &rctx[6]);
    CHECK(n == 0, "fi_cancel: %zd", n);
    n = wait_cq(b.rxcq, &e);
    CHECK(n == -FI_EAVAIL, "cancelled receive: cq_read returned %zd, expected -FI_EAVAIL", n);
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry err;
        memset(&err, 0, sizeof(err));
        n = fi_cq_readerr(b.rxcq, &err, 0);
        CHECK(n == 1, "fi_cq_readerr: %zd", n);
        CHECK(err.err == FI_ECANCELED && err.op_context == &rctx[6], "error entry: err %d ctx %p", err.err,
              err.op_context);
        const char *s = fi_cq_strerror(b.rxcq, err.prov_errno, err.err_data, NULL, 0);
        CHECK(s != NULL, "fi_cq_strerror returned null");
    }

    /* 6. RMA write and read through the shim (rma_iov layout, MR key/desc). */
    static uint64_t target[8];
    struct fid_mr *tmr = NULL;
    rc = fi_mr_reg(domain, target, sizeof(target), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 3, 0, &tmr, NULL);
    REQUIRE(rc == 0, "fi_mr_reg(target): %d", rc);
    uint64_t raddr = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)target : 0;
    uint64_t rkey = fi_mr_key(tmr);
    /* The region's own counter (fi_mr_bind FI_REMOTE_WRITE) through the shim. */
    struct fid_cntr *tmr_cntr = NULL;
    struct fi_cntr_attr tca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE};
    rc = fi_cntr_open(domain, &tca, &tmr_cntr, NULL);
    REQUIRE(rc == 0, "fi_cntr_open(region): %d", rc);
    rc = fi_mr_bind(tmr, &tmr_cntr->fid, FI_REMOTE_WRITE);
    CHECK(rc == 0, "fi_mr_bind(cntr, FI_REMOTE_WRITE): %d %s", rc, fi_strerror(-rc));
    {
        memcpy(sbuf, "rma-write-data!", 16);
        struct iovec liov = {.iov_base = sbuf, .iov_len = 16};
        struct fi_rma_iov riov = {.addr = raddr, .len = 16, .key = rkey};
        struct fi_msg_rma rm = {.msg_iov = &liov, .desc = &sdesc, .iov_count = 1, .addr = b.addr,
                                .rma_iov = &riov, .rma_iov_count = 1, .context = &sctx[3]};
        n = POST(fi_writemsg(a.ep, &rm, FI_COMPLETION | FI_DELIVERY_COMPLETE));
        CHECK(n == 0, "fi_writemsg: %zd %s", n, fi_strerror((int)-n));
        if (n == 0) {
            n = wait_cq(a.txcq, &e);
            CHECK(n == 1 && e.op_context == &sctx[3] && (e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE),
                  "RMA write completion: n=%zd flags %#" PRIx64, n, e.flags);
            CHECK(!memcmp(target, "rma-write-data!", 16), "target after RMA write: '%.16s'", (char *)target);
        }
        memset(sbuf, 0, 16);
        riov.len = 16;
        n = POST(fi_readmsg(a.ep, &rm, FI_COMPLETION));
        CHECK(n == 0, "fi_readmsg: %zd %s", n, fi_strerror((int)-n));
        if (n == 0) {
            n = wait_cq(a.txcq, &e);
            CHECK(n == 1 && (e.flags & (FI_RMA | FI_READ)) == (FI_RMA | FI_READ), "RMA read completion n=%zd", n);
            CHECK(!memcmp(sbuf, "rma-write-data!", 16), "RMA read brought '%.16s'", sbuf);
        }
        /* The target (b) counted one remote write and one remote read, its
         * region one write; the initiator (a) counted nothing. */
        CHECK(wait_cntr(b.remcntr, 2) && fi_cntr_read(b.remcntr) == 2, "b's remote-access counter: %" PRIu64,
              fi_cntr_read(b.remcntr));
        CHECK(fi_cntr_read(tmr_cntr) == 1, "region counter: %" PRIu64, fi_cntr_read(tmr_cntr));
        CHECK(fi_cntr_read(a.remcntr) == 0, "a's remote-access counter: %" PRIu64, fi_cntr_read(a.remcntr));
    }

    /* 7. atomics (fi_ioc layout, datatype/op pass-through), when the domain has FI_SUM on uint64. */
    struct fi_atomic_attr aattr;
    rc = fi_query_atomic(domain, FI_UINT64, FI_SUM, &aattr, FI_FETCH_ATOMIC);
    if (rc == 0) {
        target[4] = 40;
        uint64_t operand = 2, result = 0;
        struct fid_mr *omr = NULL;
        void *odesc = NULL, *resdesc = NULL;
        static uint64_t opbuf[2];
        opbuf[0] = operand;
        if (need_mr) {
            rc = fi_mr_reg(domain, opbuf, sizeof(opbuf), FI_WRITE | FI_READ | FI_SEND | FI_RECV, 0, 4, 0, &omr, NULL);
            REQUIRE(rc == 0, "fi_mr_reg(opbuf): %d", rc);
            odesc = resdesc = fi_mr_desc(omr);
        }
        struct fi_ioc ioc = {.addr = &opbuf[0], .count = 1};
        struct fi_ioc rioc = {.addr = &opbuf[1], .count = 1};
        struct fi_rma_ioc rmioc = {.addr = raddr + 4 * sizeof(uint64_t), .count = 1, .key = rkey};
        struct fi_msg_atomic am = {.msg_iov = &ioc, .desc = &odesc, .iov_count = 1, .addr = b.addr,
                                   .rma_iov = &rmioc, .rma_iov_count = 1, .datatype = FI_UINT64,
                                   .op = FI_SUM, .context = &sctx[3]};
        n = POST(fi_fetch_atomicmsg(a.ep, &am, &rioc, &resdesc, 1, FI_COMPLETION));
        CHECK(n == 0, "fi_fetch_atomicmsg: %zd %s", n, fi_strerror((int)-n));
        if (n == 0) {
            n = wait_cq(a.txcq, &e);
            CHECK(n == 1 && (e.flags & FI_ATOMIC), "atomic completion n=%zd flags %#" PRIx64, n, e.flags);
            result = opbuf[1];
            CHECK(result == 40 && target[4] == 42, "fetch-add: fetched %" PRIu64 " (40), target %" PRIu64 " (42)",
                  result, target[4]);
        }
        /* Zero elements change nothing and are refused; a fetch without a
         * result buffer is refused, not executed with its value dropped. */
        struct fi_ioc ioc0 = {.addr = &opbuf[0], .count = 0};
        struct fi_rma_ioc rmioc0 = {.addr = raddr + 4 * sizeof(uint64_t), .count = 0, .key = rkey};
        struct fi_msg_atomic am0 = am;
        am0.msg_iov = &ioc0;
        am0.rma_iov = &rmioc0;
        n = fi_atomic(a.ep, &opbuf[0], 0, odesc, b.addr, raddr + 4 * sizeof(uint64_t), rkey, FI_UINT64, FI_SUM,
                      &sctx[3]);
        CHECK(n == -FI_EINVAL, "fi_atomic with count 0: %zd, expected -FI_EINVAL", n);
        n = fi_atomicmsg(a.ep, &am0, FI_COMPLETION);
        CHECK(n == -FI_EINVAL, "fi_atomicmsg with count 0: %zd, expected -FI_EINVAL", n);
        n = fi_fetch_atomic(a.ep, &opbuf[0], 1, odesc, NULL, NULL, b.addr, raddr + 4 * sizeof(uint64_t), rkey,
                            FI_UINT64, FI_SUM, &sctx[3]);
        CHECK(n == -FI_EINVAL, "fi_fetch_atomic with a NULL result: %zd, expected -FI_EINVAL", n);
        struct fi_ioc rnull = {.addr = NULL, .count = 1};
        n = fi_fetch_atomicmsg(a.ep, &am, &rnull, &resdesc, 1, FI_COMPLETION);
        CHECK(n == -FI_EINVAL, "fi_fetch_atomicmsg with a NULL result: %zd, expected -FI_EINVAL", n);
        for (int i = 0; i < 50; i++)
            progress();
        CHECK(target[4] == 42, "refused atomics changed the target: %" PRIu64 " (42)", target[4]);
        CHECK(cq_stays_empty(a.txcq, 100), "a refused atomic produced a completion");
        size_t cnt = 0;
        rc = fi_fetch_atomicvalid(a.ep, FI_UINT64, FI_SUM, &cnt);
        CHECK(rc == 0 && cnt >= 1, "fi_fetch_atomicvalid: %d count %zu", rc, cnt);
        close_fid(omr ? &omr->fid : NULL, "mr opbuf");
    } else {
        printf("note: domain has no fetching FI_SUM on FI_UINT64 (%d): atomics not exercised\n", rc);
    }
    close_fid(&tmr->fid, "mr target");
    close_fid(&tmr_cntr->fid, "region cntr");

    /* 8. an alias with FI_COMPLETION as default transmit flag reports its
     *    sends on A's CQ despite selective completion. */
    struct fid_ep *alias = NULL;
    rc = fi_ep_alias(a.ep, &alias, FI_TRANSMIT | FI_COMPLETION);
    CHECK(rc == 0, "fi_ep_alias: %d", rc);
    if (rc == 0) {
        n = fi_recv(b.ep, rbuf[7], sizeof(rbuf[7]), rdesc, FI_ADDR_UNSPEC, &rctx[7]);
        REQUIRE(n == 0, "fi_recv: %zd", n);
        memcpy(sbuf, "alias", 6);
        n = POST(fi_send(alias, sbuf, 6, sdesc, b.addr, &sctx[3]));
        CHECK(n == 0, "fi_send on alias: %zd", n);
        n = wait_cq(a.txcq, &e);
        CHECK(n == 1 && e.op_context == &sctx[3], "alias send: no completion with FI_COMPLETION default (%zd)", n);
        n = wait_cq(b.rxcq, &e);
        CHECK(n == 1 && e.op_context == &rctx[7] && !memcmp(rbuf[7], "alias", 6), "alias message (n=%zd)", n);
        rc = fi_close(&a.ep->fid);
        CHECK(rc == -FI_EBUSY, "closing an endpoint with an open alias: %d, expected -FI_EBUSY", rc);
        close_fid(&alias->fid, "alias");
    }

    /* 9. EQ entries written by the application come back with the same fid. */
    struct fi_eq_attr eq_attr = {.size = 8, .flags = FI_WRITE, .wait_obj = FI_WAIT_NONE};
    struct fid_eq *eq = NULL;
    rc = fi_eq_open(fabric, &eq_attr, &eq, NULL);
    CHECK(rc == 0, "fi_eq_open: %d", rc);
    if (rc == 0) {
        struct fi_eq_entry in = {.fid = &a.ep->fid, .context = (void *)0x1234, .data = 42}, out;
        n = fi_eq_write(eq, FI_NOTIFY, &in, sizeof(in), 0);
        CHECK(n == (ssize_t)sizeof(in), "fi_eq_write: %zd", n);
        uint32_t event = 99;
        memset(&out, 0, sizeof(out));
        n = fi_eq_read(eq, &event, &out, sizeof(out), 0);
        CHECK(n == (ssize_t)sizeof(out) && event == FI_NOTIFY, "fi_eq_read: %zd event %u", n, event);
        CHECK(out.fid == &a.ep->fid && out.context == (void *)0x1234 && out.data == 42,
              "EQ entry came back as fid %p ctx %p data %" PRIu64, (void *)out.fid, out.context, out.data);
        n = fi_eq_read(eq, &event, &out, sizeof(out), 0);
        CHECK(n == -FI_EAGAIN, "empty EQ read: %zd", n);

        /* fi_eq(3): what the application writes is opaque. A fid that is no
         * object (garbage, a small integer) and a CM event with a garbage
         * info come back byte for byte, never looked into. */
        struct fi_eq_entry junk[2] = {
            {.fid = (fid_t)(uintptr_t)0xdeadbeefcafef00dULL, .context = (void *)7, .data = 1},
            {.fid = (fid_t)(uintptr_t)1, .context = NULL, .data = 2},
        };
        for (int k = 0; k < 2; k++) {
            n = fi_eq_write(eq, FI_NOTIFY, &junk[k], sizeof junk[k], 0);
            CHECK(n == (ssize_t)sizeof junk[k], "fi_eq_write(garbage fid %d): %zd", k, n);
        }
        struct fi_eq_cm_entry cmjunk = {.fid = (fid_t)(uintptr_t)0x10, .info = (struct fi_info *)(uintptr_t)0x20};
        n = fi_eq_write(eq, FI_CONNREQ, &cmjunk, sizeof cmjunk, 0);
        CHECK(n == (ssize_t)sizeof cmjunk, "fi_eq_write(CONNREQ with a garbage info): %zd", n);
        unsigned char odd[5] = {1, 2, 3, 4, 5};
        n = fi_eq_write(eq, 1234, odd, sizeof odd, 0);
        CHECK(n == (ssize_t)sizeof odd, "fi_eq_write(5 bytes): %zd", n);
        n = fi_eq_write(eq, FI_NOTIFY, &in, sizeof in, 1ULL << 63);
        CHECK(n == -FI_EBADFLAGS, "fi_eq_write with an unknown flag: %zd", n);
        for (int k = 0; k < 2; k++) {
            struct fi_eq_entry got;
            memset(&got, 0, sizeof got);
            n = fi_eq_read(eq, &event, &got, sizeof got, k == 0 ? FI_PEEK : 0);
            CHECK(n == (ssize_t)sizeof got && event == FI_NOTIFY && got.fid == junk[0].fid &&
                      got.context == junk[0].context && got.data == 1,
                  "garbage fid %s: %zd event %u fid %p", k ? "read" : "peeked", n, event, (void *)got.fid);
        }
        n = fi_eq_read(eq, &event, &out, 4, 0);
        CHECK(n == -FI_ETOOSMALL, "reading an entry into a small buffer: %zd", n);
        n = fi_eq_sread(eq, &event, &out, sizeof out, 10, 0);
        CHECK(n == -FI_ENOSYS, "fi_eq_sread on an EQ without a wait object: %zd", n);
        n = fi_eq_read(eq, &event, &out, sizeof out, 0);
        CHECK(n == (ssize_t)sizeof out && out.fid == junk[1].fid && out.data == 2,
              "the entry the small buffer did not take: %zd fid %p", n, (void *)out.fid);
        struct fi_eq_cm_entry cmgot;
        n = fi_eq_read(eq, &event, &cmgot, sizeof cmgot, 0);
        CHECK(n == (ssize_t)sizeof cmgot && event == FI_CONNREQ && cmgot.fid == cmjunk.fid &&
                  cmgot.info == cmjunk.info,
              "application CONNREQ entry: %zd info %p", n, (void *)cmgot.info);
        unsigned char oddgot[8] = {0};
        n = fi_eq_read(eq, &event, oddgot, sizeof oddgot, 0);
        CHECK(n == 5 && event == 1234 && !memcmp(oddgot, odd, 5), "5-byte entry: %zd event %u", n, event);
        close_fid(&eq->fid, "eq");
    }

    /* 10. options and size queries reach Shunt. */
    size_t minmr = 0, optlen = sizeof(minmr);
    rc = fi_getopt(&b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &minmr, &optlen);
    CHECK(rc == 0 && optlen == sizeof(size_t), "fi_getopt(FI_OPT_MIN_MULTI_RECV): %d len %zu", rc, optlen);
    rc = fi_setopt(&b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &minmr, sizeof(minmr));
    CHECK(rc == -FI_ENOPROTOOPT || rc == -FI_EOPBADSTATE, "setting read-only FI_OPT_CM_DATA_SIZE: %d", rc);

    /* 11. AV lookup and straddr: the address B registered, printable. */
    char raw[256], text[256];
    size_t rawlen = sizeof(raw), textlen = sizeof(text);
    rc = fi_av_lookup(av, b.addr, raw, &rawlen);
    CHECK(rc == 0 && rawlen > 0 && rawlen <= sizeof(raw), "fi_av_lookup: %d len %zu", rc, rawlen);
    char bname[256];
    size_t bnamelen = sizeof(bname);
    rc = fi_getname(&b.ep->fid, bname, &bnamelen);
    CHECK(rc == 0 && bnamelen == rawlen && !memcmp(bname, raw, rawlen), "looked-up address differs from B's name");
    const char *str = fi_av_straddr(av, raw, text, &textlen);
    CHECK(str != NULL && memchr(text, 0, sizeof(text)) != NULL && strlen(text) > 0, "fi_av_straddr: %p", (void *)str);
    n = fi_av_lookup(av, FI_ADDR_NOTAVAIL - 1, raw, &rawlen);
    CHECK(n < 0, "fi_av_lookup of an address never inserted: %zd", n);

    /* 12. blocking reads with a wait object time out instead of hanging. */
    {
        struct fi_cq_attr wattr = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_UNSPEC, .size = 8};
        struct fid_cq *wcq = NULL;
        rc = fi_cq_open(domain, &wattr, &wcq, NULL);
        CHECK(rc == 0, "fi_cq_open(FI_WAIT_UNSPEC): %d", rc);
        if (rc == 0) {
            struct fi_cq_entry ce;
            uint64_t t0 = now_ns();
            n = fi_cq_sread(wcq, &ce, 1, NULL, 20);
            CHECK(n == -FI_EAGAIN || n == -FI_ETIMEDOUT, "fi_cq_sread on an empty CQ: %zd", n);
            CHECK(now_ns() - t0 < TIMEOUT_NS, "fi_cq_sread(20 ms) did not return in time");
            rc = fi_cq_signal(wcq);
            CHECK(rc == 0, "fi_cq_signal: %d", rc);
            close_fid(&wcq->fid, "wait cq");
        }
        struct fi_cntr_attr wcattr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
        struct fid_cntr *wc = NULL;
        rc = fi_cntr_open(domain, &wcattr, &wc, NULL);
        CHECK(rc == 0, "fi_cntr_open(FI_WAIT_UNSPEC): %d", rc);
        if (rc == 0) {
            rc = fi_cntr_wait(wc, 1, 20);
            CHECK(rc == -FI_ETIMEDOUT || rc == -FI_EAGAIN, "fi_cntr_wait below the threshold: %d", rc);
            rc = fi_cntr_add(wc, 1);
            CHECK(rc == 0, "fi_cntr_add: %d", rc);
            rc = fi_cntr_wait(wc, 1, 1000);
            CHECK(rc == 0, "fi_cntr_wait at the threshold: %d", rc);
            close_fid(&wc->fid, "wait cntr");
        }
    }

    /* 13. bad input comes back as an error, not a crash. */
    n = POST(fi_inject(a.ep, sbuf, inject_size + 1, b.addr));
    CHECK(n < 0, "inject above inject_size (%zu) accepted", inject_size + 1);
    n = fi_inject(a.ep, NULL, 8, b.addr);
    CHECK(n == -FI_EINVAL, "fi_inject(NULL, 8): %zd, expected -FI_EINVAL", n);
    n = fi_tinject(a.ep, NULL, 8, b.addr, 1);
    CHECK(n == -FI_EINVAL, "fi_tinject(NULL, 8): %zd, expected -FI_EINVAL", n);
    n = fi_sendmsg(a.ep, NULL, 0);
    CHECK(n == -FI_EINVAL, "fi_sendmsg(NULL): %zd", n);
    n = fi_recvmsg(a.ep, NULL, 0);
    CHECK(n == -FI_EINVAL, "fi_recvmsg(NULL): %zd", n);
    n = fi_tsendmsg(a.ep, NULL, 0);
    CHECK(n == -FI_EINVAL, "fi_tsendmsg(NULL): %zd", n);
    n = fi_trecvmsg(a.ep, NULL, 0);
    CHECK(n == -FI_EINVAL, "fi_trecvmsg(NULL): %zd", n);
    n = fi_writemsg(a.ep, NULL, 0);
    CHECK(n == -FI_EINVAL, "fi_writemsg(NULL): %zd", n);
    n = fi_readmsg(a.ep, NULL, 0);
    CHECK(n == -FI_EINVAL, "fi_readmsg(NULL): %zd", n);
    n = fi_atomicmsg(a.ep, NULL, 0);
    CHECK(n == -FI_EINVAL, "fi_atomicmsg(NULL): %zd", n);
    {
        uint64_t r = 0;
        struct fi_ioc rioc = {.addr = &r, .count = 1};
        n = fi_fetch_atomicmsg(a.ep, NULL, &rioc, NULL, 1, 0);
        CHECK(n == -FI_EINVAL, "fi_fetch_atomicmsg(NULL): %zd", n);
        n = fi_compare_atomicmsg(a.ep, NULL, &rioc, NULL, 1, &rioc, NULL, 1, 0);
        CHECK(n == -FI_EINVAL, "fi_compare_atomicmsg(NULL): %zd", n);
    }
    rc = fi_ep_bind(a.ep, &av->fid, 0);
    CHECK(rc < 0, "binding an AV to an enabled endpoint again accepted");
    rc = fi_close(&domain->fid);
    CHECK(rc == -FI_EBUSY, "closing a domain with open endpoints: %d, expected -FI_EBUSY", rc);

    close_fid(&a.ep->fid, "ep a");
    close_fid(&b.ep->fid, "ep b");
    close_fid(rmr ? &rmr->fid : NULL, "mr");
    close_fid(smr ? &smr->fid : NULL, "mr");
    struct side *sides[2] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        close_fid(&sides[i]->txcq->fid, "tx cq");
        close_fid(&sides[i]->rxcq->fid, "rx cq");
        close_fid(&sides[i]->txcntr->fid, "tx cntr");
        close_fid(&sides[i]->rxcntr->fid, "rx cntr");
        close_fid(&sides[i]->remcntr->fid, "remote-access cntr");
    }
    close_fid(&av->fid, "av");
    close_fid(&domain->fid, "domain");
    close_fid(&fabric->fid, "fabric");
    fi_freeinfo(info);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok: inject, selective completion, counters, tagged (exact/wildcard/unexpected), cancel, RMA, atomics, alias, EQ, options\n");
    return 0;
}
