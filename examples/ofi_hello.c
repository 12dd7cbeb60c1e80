/* A plain libfabric program (C, <rdma/fabric.h>) running on Shunt through
 * libshunt-fi.so, libfabric's external provider "shunt".
 *
 *   FI_PROVIDER_PATH=<libdir>/libfabric ofi-hello
 *
 * (not needed when Shunt is installed in libfabric's own provider
 * directory). The parent opens an RDM endpoint of provider "shunt", posts a
 * receive and hands its address to a child it forks; the child sends one
 * message; the parent checks every byte. Exit 0 when it arrived intact. */
#define _POSIX_C_SOURCE 200809L
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG_SIZE 100

struct node {
    struct fi_info *fi;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
};

static void die(const char *what, long rc)
{
    fprintf(stderr, "ofi-hello: %s: %s\n", what, fi_strerror((int)-rc));
    exit(1);
}

static void open_node(struct node *n)
{
    struct fi_info *hints = fi_allocinfo();
    hints->caps = FI_MSG;
    hints->mode = FI_CONTEXT; /* every operation's context points at a struct fi_context */
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY; /* what the provider asks for */
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("shunt");
    int rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &n->fi);
    fi_freeinfo(hints);
    if (rc)
        die("fi_getinfo (is FI_PROVIDER_PATH set to Shunt's libfabric directory?)", rc);
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_CONTEXT};
    struct fi_av_attr aa = {.type = FI_AV_UNSPEC};
    if ((rc = fi_fabric(n->fi->fabric_attr, &n->fabric, NULL)) ||
        (rc = fi_domain(n->fabric, n->fi, &n->domain, NULL)) ||
        (rc = fi_cq_open(n->domain, &ca, &n->cq, NULL)) || (rc = fi_av_open(n->domain, &aa, &n->av, NULL)) ||
        (rc = fi_endpoint(n->domain, n->fi, &n->ep, NULL)) ||
        (rc = fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV)) ||
        (rc = fi_ep_bind(n->ep, &n->av->fid, 0)) || (rc = fi_enable(n->ep)))
        die("open", rc);
}

static void close_node(struct node *n)
{
    fi_close(&n->ep->fid);
    fi_close(&n->av->fid);
    fi_close(&n->cq->fid);
    fi_close(&n->domain->fid);
    fi_close(&n->fabric->fid);
    fi_freeinfo(n->fi);
}

/* One completion within 10 s. */
static void wait_cq(struct node *n)
{
    struct fi_cq_entry e;
    time_t end = time(NULL) + 10;
    for (;;) {
        ssize_t k = fi_cq_read(n->cq, &e, 1);
        if (k == 1)
            return;
        if (k != -FI_EAGAIN)
            die("fi_cq_read", k);
        if (time(NULL) > end)
            die("no completion within 10 s", -FI_ETIMEDOUT);
    }
}

static int sender(int fd)
{
    struct node n = {0};
    open_node(&n);
    char addr[64];
    if (read(fd, addr, sizeof addr) != (ssize_t)sizeof addr)
        die("read address", -FI_EIO);
    fi_addr_t peer;
    if (fi_av_insert(n.av, addr, 1, &peer, 0, NULL) != 1)
        die("fi_av_insert", -FI_EINVAL);
    unsigned char buf[MSG_SIZE];
    struct fi_context ctx;
    for (int i = 0; i < MSG_SIZE; i++)
        buf[i] = (unsigned char)(i * 7 + 1);
    ssize_t rc;
    while ((rc = fi_send(n.ep, buf, sizeof buf, NULL, peer, &ctx)) == -FI_EAGAIN)
        (void)fi_cq_read(n.cq, NULL, 0);
    if (rc)
        die("fi_send", rc);
    wait_cq(&n);
    char done;
    if (read(fd, &done, 1) != 1)
        die("read", -FI_EIO);
    close_node(&n);
    return 0;
}

static int receiver(int fd)
{
    struct node n = {0};
    open_node(&n);
    unsigned char buf[MSG_SIZE] = {0};
    struct fi_context ctx;
    ssize_t rc = fi_recv(n.ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, &ctx);
    if (rc)
        die("fi_recv", rc);
    char addr[64] = {0};
    size_t len = sizeof addr;
    if ((rc = fi_getname(&n.ep->fid, addr, &len)) || write(fd, addr, sizeof addr) != (ssize_t)sizeof addr)
        die("fi_getname", rc ? rc : -FI_EIO);
    wait_cq(&n);
    int bad = 0;
    for (int i = 0; i < MSG_SIZE; i++)
        bad += buf[i] != (unsigned char)(i * 7 + 1);
    if (write(fd, "x", 1) != 1)
        die("write", -FI_EIO);
    close_node(&n);
    if (bad) {
        fprintf(stderr, "ofi-hello: %d bad bytes\n", bad);
        return 1;
    }
    printf("ofi-hello: %d bytes through libfabric's provider \"shunt\", every byte checked\n", MSG_SIZE);
    return 0;
}

int main(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        die("socketpair", -FI_EIO);
    pid_t kid = fork();
    if (kid < 0)
        die("fork", -FI_EIO);
    if (kid == 0) {
        close(sv[0]);
        exit(sender(sv[1]));
    }
    close(sv[1]);
    int rc = receiver(sv[0]);
    int st = 0;
    if (waitpid(kid, &st, 0) != kid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "ofi-hello: the sender failed\n");
        return 1;
    }
    return rc;
}
