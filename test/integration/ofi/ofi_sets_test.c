/* Poll sets and wait sets (fi_poll(3)) through the "shunt" provider, with a
 * second process sending (C, libfabric 1.17 API).
 *
 * The receiver opens two RDM endpoints whose CQs and a receive counter are
 * opened on one wait set (FI_WAIT_FD) and added to one poll set, then starts
 * a sender process (this program, role "sender") that sends to the two
 * endpoints with pauses in between. The receiver blocks in fi_wait until
 * each message arrives, fi_poll names the CQ (by its context) and the
 * counter that have something, the data is checked.
 *
 * Role "auto" (FI_PROGRESS_AUTO): once the receiver blocks natively on the
 * set's file descriptor after fi_trywait says it may. Default (manual
 * progress, where only polling moves data from a peer's queue into the CQs):
 * fi_trywait on the set must say -FI_EAGAIN, since a native block could
 * hang. Exit 0 pass, 1 fail. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define REQUIRE(cond, ...)                                                                \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

enum { MSGS = 6, MSG_BYTES = 256 };

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct fi_info *rdm_info(enum fi_progress data_progress)
{
    struct fi_info *h = fi_allocinfo(), *info = NULL;
    REQUIRE(h, "fi_allocinfo");
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_MSG;
    h->mode = FI_CONTEXT;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    h->fabric_attr->prov_name = strdup("shunt");
    h->domain_attr->data_progress = data_progress;
    int rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
    REQUIRE(rc == 0, "fi_getinfo: %d %s", rc, fi_strerror(-rc));
    fi_freeinfo(h);
    return info;
}

static void fill(uint8_t *b, int seq)
{
    for (int k = 0; k < MSG_BYTES; k++)
        b[k] = (uint8_t)(seq * 31 + k);
}

/* ---- sender: argv = sender <hex name 1> <hex name 2> ---- */

static void unhex(const char *s, uint8_t *out, size_t *len)
{
    size_t n = strlen(s) / 2;
    for (size_t k = 0; k < n; k++) {
        unsigned v;
        sscanf(s + 2 * k, "%2x", &v);
        out[k] = (uint8_t)v;
    }
    *len = n;
}

static int sender(const char *n1, const char *n2)
{
    struct fi_info *info = rdm_info(FI_PROGRESS_MANUAL);
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    REQUIRE(fi_fabric(info->fabric_attr, &fabric, NULL) == 0, "fi_fabric");
    REQUIRE(fi_domain(fabric, info, &domain, NULL) == 0, "fi_domain");
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_CONTEXT, .size = 64};
    REQUIRE(fi_cq_open(domain, &ca, &cq, NULL) == 0, "fi_cq_open");
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    REQUIRE(fi_av_open(domain, &aa, &av, NULL) == 0, "fi_av_open");
    REQUIRE(fi_endpoint(domain, info, &ep, NULL) == 0, "fi_endpoint");
    REQUIRE(fi_ep_bind(ep, &av->fid, 0) == 0 && fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) == 0, "bind");
    REQUIRE(fi_enable(ep) == 0, "fi_enable");
    uint8_t raw[2][128];
    size_t len[2];
    unhex(n1, raw[0], &len[0]);
    unhex(n2, raw[1], &len[1]);
    fi_addr_t to[2];
    for (int k = 0; k < 2; k++)
        REQUIRE(fi_av_insert(av, raw[k], 1, &to[k], 0, NULL) == 1, "fi_av_insert %d", k);
    static uint8_t buf[MSGS][MSG_BYTES];
    for (int m = 0; m < MSGS; m++) {
        usleep(60 * 1000); /* the receiver is blocked in fi_wait meanwhile */
        fill(buf[m], m);
        ssize_t rc;
        uint64_t end = now_ms() + 20000;
        do {
            rc = fi_send(ep, buf[m], MSG_BYTES, NULL, to[m % 2], NULL);
            if (rc == -FI_EAGAIN) {
                struct fi_cq_entry e;
                (void)fi_cq_read(cq, &e, 1);
            }
        } while (rc == -FI_EAGAIN && now_ms() < end);
        REQUIRE(rc == 0, "fi_send %d: %zd", m, rc);
        struct fi_cq_entry e;
        end = now_ms() + 20000;
        while ((rc = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN && now_ms() < end)
            sched_yield();
        REQUIRE(rc == 1, "send completion %d: %zd", m, rc);
    }
    fi_close(&ep->fid);
    fi_close(&av->fid);
    fi_close(&cq->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    return 0;
}

/* ---- receiver ---- */

struct rx_ep {
    struct fid_ep *ep;
    struct fid_cq *cq;
    int ctx; /* the CQ's context: fi_poll returns &ctx */
    uint8_t buf[MSGS][MSG_BYTES];
    int posted;
};

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t k = 0; k < n; k++)
        sprintf(out + 2 * k, "%02x", b[k]);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "sender"))
        return sender(argv[2], argv[3]);

    int auto_progress = argc == 2 && !strcmp(argv[1], "auto");
    REQUIRE(argc == 1 || auto_progress, "usage: %s [auto]", argv[0]);
    struct fi_info *info = rdm_info(auto_progress ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL);
    REQUIRE(info->domain_attr->data_progress == (auto_progress ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL),
            "data progress %d", info->domain_attr->data_progress);
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    REQUIRE(fi_fabric(info->fabric_attr, &fabric, NULL) == 0, "fi_fabric");
    REQUIRE(fi_domain(fabric, info, &domain, NULL) == 0, "fi_domain");
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    REQUIRE(fi_av_open(domain, &aa, &av, NULL) == 0, "fi_av_open");

    struct fi_wait_attr wa = {.wait_obj = FI_WAIT_FD};
    struct fid_wait *ws = NULL;
    int rc = fi_wait_open(fabric, &wa, &ws);
    REQUIRE(rc == 0, "fi_wait_open: %d %s", rc, fi_strerror(-rc));
    int fd = -1;
    rc = fi_control(&ws->fid, FI_GETWAIT, &fd);
    REQUIRE(rc == 0 && fd >= 0, "FI_GETWAIT on the wait set: %d fd %d", rc, fd);
    struct fid_poll *ps = NULL;
    struct fi_poll_attr pa = {0};
    rc = fi_poll_open(domain, &pa, &ps);
    REQUIRE(rc == 0, "fi_poll_open: %d %s", rc, fi_strerror(-rc));

    int cntr_ctx = 0;
    struct fi_cntr_attr ta = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_SET, .wait_set = ws};
    struct fid_cntr *cntr = NULL;
    rc = fi_cntr_open(domain, &ta, &cntr, &cntr_ctx);
    REQUIRE(rc == 0, "fi_cntr_open on the wait set: %d %s", rc, fi_strerror(-rc));
    REQUIRE(fi_poll_add(ps, &cntr->fid, 0) == 0, "fi_poll_add(counter)");

    static struct rx_ep rx[2];
    char names[2][260];
    for (int k = 0; k < 2; k++) {
        struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .size = 64, .wait_obj = FI_WAIT_SET, .wait_set = ws};
        rc = fi_cq_open(domain, &ca, &rx[k].cq, &rx[k].ctx);
        REQUIRE(rc == 0, "fi_cq_open on the wait set: %d %s", rc, fi_strerror(-rc));
        REQUIRE(fi_poll_add(ps, &rx[k].cq->fid, 0) == 0, "fi_poll_add(cq %d)", k);
        REQUIRE(fi_endpoint(domain, info, &rx[k].ep, NULL) == 0, "fi_endpoint");
        REQUIRE(fi_ep_bind(rx[k].ep, &av->fid, 0) == 0, "bind av");
        REQUIRE(fi_ep_bind(rx[k].ep, &rx[k].cq->fid, FI_TRANSMIT | FI_RECV) == 0, "bind cq");
        REQUIRE(fi_ep_bind(rx[k].ep, &cntr->fid, FI_RECV) == 0, "bind cntr");
        REQUIRE(fi_enable(rx[k].ep) == 0, "fi_enable");
        for (int m = k; m < MSGS; m += 2)
            REQUIRE(fi_recv(rx[k].ep, rx[k].buf[m], MSG_BYTES, NULL, FI_ADDR_UNSPEC, NULL) == 0, "fi_recv");
        uint8_t raw[128];
        size_t len = sizeof raw;
        REQUIRE(fi_getname(&rx[k].ep->fid, raw, &len) == 0, "fi_getname");
        hex(raw, len, names[k]);
    }
    rc = fi_close(&ws->fid);
    REQUIRE(rc == -FI_EBUSY, "closing a wait set with members: %d", rc);
    rc = fi_wait(ws, 0);
    REQUIRE(rc == -FI_ETIMEDOUT, "fi_wait with nothing to read: %d", rc);

    pid_t child = fork();
    REQUIRE(child >= 0, "fork");
    if (child == 0) {
        execl(argv[0], argv[0], "sender", names[0], names[1], (char *)NULL);
        _exit(127);
    }

    int got = 0, native = 0, refused = 0;
    uint64_t last_cntr = 0;
    uint64_t end = now_ms() + 60000;
    while (got < MSGS) {
        REQUIRE(now_ms() < end, "only %d of %d messages", got, MSGS);
        if (got == 3 && !native && !refused) {
            /* once: block natively on the set's fd (after fi_trywait) */
            struct fid *f[1] = {&ws->fid};
            rc = fi_trywait(fabric, f, 1);
            if (!auto_progress) {
                REQUIRE(rc == -FI_EAGAIN, "fi_trywait with manual progress: %d", rc);
                refused = 1;
            } else if (rc == 0) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int pr = poll(&p, 1, 20000);
                REQUIRE(pr == 1, "poll(2) on the wait set's fd: %d", pr);
                native = 1;
            } else {
                REQUIRE(rc == -FI_EAGAIN, "fi_trywait: %d", rc);
            }
        } else {
            rc = fi_wait(ws, 20000);
            REQUIRE(rc == 0, "fi_wait: %d %s", rc, fi_strerror(-rc));
        }
        void *ctx[4] = {0};
        int n = fi_poll(ps, ctx, 4);
        REQUIRE(n >= 0 && n <= 3, "fi_poll: %d", n);
        for (int i = 0; i < n; i++) {
            if (ctx[i] == &cntr_ctx) {
                uint64_t v = fi_cntr_read(cntr);
                /* with auto progress the count may have moved on since an
                   earlier read, past what this report saw */
                REQUIRE(auto_progress ? v >= last_cntr && v > 0 : v > last_cntr,
                        "counter reported but unchanged: %" PRIu64, v);
                last_cntr = v;
                continue;
            }
            int k = ctx[i] == &rx[0].ctx ? 0 : ctx[i] == &rx[1].ctx ? 1 : -1;
            REQUIRE(k >= 0, "fi_poll gave an unknown context %p", ctx[i]);
            struct fi_cq_msg_entry e;
            ssize_t r;
            while ((r = fi_cq_read(rx[k].cq, &e, 1)) == 1) {
                REQUIRE(e.flags & FI_RECV, "flags %#" PRIx64, e.flags);
                REQUIRE(e.len == MSG_BYTES, "len %zu", e.len);
                got++;
            }
            REQUIRE(r == -FI_EAGAIN, "fi_cq_read: %zd", r);
        }
    }
    /* every message in order, each in the endpoint it was sent to */
    for (int m = 0; m < MSGS; m++) {
        uint8_t want[MSG_BYTES];
        fill(want, m);
        REQUIRE(!memcmp(rx[m % 2].buf[m], want, MSG_BYTES), "message %d corrupt", m);
    }
    /* the progress thread (auto) may count a receive just after its CQ entry */
    end = now_ms() + 10000;
    while (fi_cntr_read(cntr) != MSGS && auto_progress && now_ms() < end)
        usleep(1000);
    REQUIRE(fi_cntr_read(cntr) == MSGS, "counter %" PRIu64, fi_cntr_read(cntr));
    {
        void *ctx[4];
        int n = fi_poll(ps, ctx, 4); /* takes a last count change not reported yet */
        REQUIRE(n >= 0 && n <= 1 && (n == 0 || ctx[0] == &cntr_ctx), "fi_poll after everything was read: %d", n);
    }
    REQUIRE(native || !auto_progress, "never blocked natively on the fd");
    REQUIRE(refused || auto_progress, "fi_trywait never asked with manual progress");
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "sender exited %d", status);
    rc = fi_wait(ws, 0);
    REQUIRE(rc == -FI_ETIMEDOUT, "fi_wait after everything was read: %d", rc);

    for (int k = 0; k < 2; k++) {
        REQUIRE(fi_close(&rx[k].ep->fid) == 0, "close ep");
        REQUIRE(fi_poll_del(ps, &rx[k].cq->fid, 0) == 0, "fi_poll_del");
        REQUIRE(fi_close(&rx[k].cq->fid) == 0, "close cq");
    }
    REQUIRE(fi_close(&ps->fid) == 0, "close poll set");
    REQUIRE(fi_close(&cntr->fid) == 0, "close cntr");
    REQUIRE(fi_close(&ws->fid) == 0, "close wait set");
    REQUIRE(fi_close(&av->fid) == 0 && fi_close(&domain->fid) == 0 && fi_close(&fabric->fid) == 0, "close");
    fi_freeinfo(info);
    printf("ok: %d messages from another process through fi_wait / fi_poll, %s\n", MSGS,
           auto_progress ? "once natively on the set's fd" : "fi_trywait -FI_EAGAIN with manual progress");
    return 0;
}
