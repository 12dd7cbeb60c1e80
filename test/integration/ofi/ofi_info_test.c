/* fi_getinfo through the "shunt" provider, as applications of different
 * libfabric API versions see it (C, libfabric 1.17 API only):
 *  - API >= 1.5: mr_mode is a bit set, a subset of what the hints accept;
 *  - API 1.4 (fi_pingpong asks for it): mr_mode is FI_MR_BASIC or
 *    FI_MR_SCALABLE and local registration is the FI_LOCAL_MR mode bit;
 *  - answers name the provider "shunt" (never "shm;shunt"), carry no
 *    capability bit libfabric 1.17 does not define, a 1.17 tag format, and
 *    open a fabric and a domain;
 *  - hints the provider cannot meet give -FI_ENODATA.
 * Exit 0 pass, 1 fail. Run through run_if_shunt.sh (skip when Shunt has no RDM). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

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

/* Capability bits libfabric 1.17 defines (fabric.h). */
static const uint64_t known_caps = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_MULTICAST | FI_COLLECTIVE |
    FI_READ | FI_WRITE | FI_RECV | FI_SEND | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_MULTI_RECV |
    FI_REMOTE_CQ_DATA | FI_MORE | FI_PEEK | FI_TRIGGER | FI_FENCE | FI_PRIORITY | FI_COMPLETION | FI_INJECT |
    FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_AFFINITY | FI_COMMIT_COMPLETE |
    FI_MATCH_COMPLETE | FI_PEER_TRANSFER | FI_AV_USER_ID | FI_PEER | FI_XPU_TRIGGER | FI_HMEM_HOST_ALLOC |
    FI_HMEM_DEVICE_ONLY | FI_HMEM | FI_VARIABLE_MSG | FI_RMA_PMEM | FI_SOURCE_ERR | FI_LOCAL_COMM |
    FI_REMOTE_COMM | FI_SHARED_AV | FI_RMA_EVENT | FI_SOURCE | FI_NAMED_RX_CTX | FI_DIRECTED_RECV;

static struct fi_info *rdm_hints(void)
{
    struct fi_info *h = fi_allocinfo();
    if (!h)
        exit(1);
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_MSG;
    h->fabric_attr->prov_name = strdup("shunt");
    return h;
}

static void check_common(const struct fi_info *i)
{
    CHECK(i->fabric_attr->prov_name && !strcmp(i->fabric_attr->prov_name, "shunt"), "prov_name %s",
          i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "(null)");
    CHECK((i->caps & ~known_caps) == 0, "caps %#" PRIx64 " has bits libfabric 1.17 does not define",
          i->caps & ~known_caps);
    CHECK((i->tx_attr->caps & ~known_caps) == 0 && (i->rx_attr->caps & ~known_caps) == 0,
          "tx/rx caps with unknown bits");
    CHECK(i->ep_attr->type == FI_EP_RDM, "type %d", i->ep_attr->type);
    CHECK(i->ep_attr->mem_tag_format > 0xffff, "mem_tag_format %#" PRIx64 " is not a 1.17 bit format",
          i->ep_attr->mem_tag_format);
    CHECK(i->fabric_attr->name && i->domain_attr->name, "fabric/domain without a name");
    CHECK(i->ep_attr->max_msg_size > 0, "max_msg_size 0");
}

static void open_and_close(struct fi_info *i)
{
    struct fid_fabric *fabric = NULL;
    struct fid_domain *domain = NULL;
    int rc = fi_fabric(i->fabric_attr, &fabric, NULL);
    CHECK(rc == 0, "fi_fabric(%s): %d %s", i->fabric_attr->name, rc, fi_strerror(-rc));
    if (rc)
        return;
    rc = fi_domain(fabric, i, &domain, NULL);
    CHECK(rc == 0, "fi_domain: %d %s", rc, fi_strerror(-rc));
    if (!rc) {
        rc = fi_close(&fabric->fid);
        CHECK(rc == -FI_EBUSY, "closing a fabric with an open domain: %d, expected -FI_EBUSY", rc);
        rc = fi_close(&domain->fid);
        CHECK(rc == 0, "fi_close(domain): %d", rc);
    }
    rc = fi_close(&fabric->fid);
    CHECK(rc == 0, "fi_close(fabric): %d", rc);
}

int main(void)
{
    struct fi_info *h, *info = NULL;
    int rc;

    /* API 1.17: mr_mode bits, a subset of what the hints accept. */
    h = rdm_hints();
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
    CHECK(rc == 0, "fi_getinfo 1.17: %d %s", rc, fi_strerror(-rc));
    for (struct fi_info *i = info; i; i = i->next) {
        check_common(i);
        CHECK((i->domain_attr->mr_mode & ~h->domain_attr->mr_mode) == 0,
              "mr_mode %#x asks for bits the hints (%#x) did not accept", i->domain_attr->mr_mode,
              h->domain_attr->mr_mode);
    }
    if (info)
        open_and_close(info);
    fi_freeinfo(info);
    info = NULL;
    fi_freeinfo(h);

    /* API 1.4: mr_mode is an enumeration, FI_LOCAL_MR a mode bit. */
    h = rdm_hints();
    h->mode = FI_CONTEXT | FI_LOCAL_MR;
    h->domain_attr->mr_mode = FI_MR_UNSPEC;
    rc = fi_getinfo(FI_VERSION(1, 4), NULL, NULL, 0, h, &info);
    CHECK(rc == 0, "fi_getinfo 1.4: %d %s", rc, fi_strerror(-rc));
    for (struct fi_info *i = info; i; i = i->next) {
        check_common(i);
        CHECK(i->domain_attr->mr_mode == FI_MR_BASIC || i->domain_attr->mr_mode == FI_MR_SCALABLE,
              "API 1.4 answer with mr_mode %#x (must be FI_MR_BASIC or FI_MR_SCALABLE)", i->domain_attr->mr_mode);
        CHECK(strcmp(i->fabric_attr->name, "loop") == 0 || i->domain_attr->mr_mode == FI_MR_BASIC,
              "API 1.4 FI_MR_UNSPEC: Shunt's vq provider answers FI_MR_BASIC, not %#x", i->domain_attr->mr_mode);
        CHECK((i->mode & ~(FI_CONTEXT | FI_LOCAL_MR)) == 0, "mode %#" PRIx64 " beyond the hints'", i->mode);
    }
    if (info)
        open_and_close(info);
    fi_freeinfo(info);
    info = NULL;
    fi_freeinfo(h);

    /* API 1.4 with FI_MR_SCALABLE and no FI_LOCAL_MR: only answers that need
     * neither may come back, and they say FI_MR_SCALABLE. */
    h = rdm_hints();
    h->domain_attr->mr_mode = FI_MR_SCALABLE;
    rc = fi_getinfo(FI_VERSION(1, 4), NULL, NULL, 0, h, &info);
    CHECK(rc == 0 || rc == -FI_ENODATA, "fi_getinfo 1.4 scalable: %d", rc);
    for (struct fi_info *i = info; i; i = i->next) {
        CHECK(i->domain_attr->mr_mode == FI_MR_SCALABLE, "mr_mode %#x for FI_MR_SCALABLE hints",
              i->domain_attr->mr_mode);
        CHECK(!(i->mode & FI_LOCAL_MR), "FI_LOCAL_MR required though the hints refused it");
    }
    fi_freeinfo(info);
    info = NULL;
    fi_freeinfo(h);

    /* API 1.17 with the legacy FI_MR_BASIC: accepted and echoed. */
    h = rdm_hints();
    h->caps = FI_MSG | FI_RMA;
    h->mode = FI_CONTEXT;
    h->domain_attr->mr_mode = FI_MR_BASIC;
    rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
    CHECK(rc == 0, "fi_getinfo 1.17 FI_MR_BASIC: %d %s", rc, fi_strerror(-rc));
    for (struct fi_info *i = info; i; i = i->next) {
        CHECK(i->domain_attr->mr_mode == FI_MR_BASIC, "mr_mode %#x for FI_MR_BASIC hints", i->domain_attr->mr_mode);
        CHECK((i->caps & (FI_REMOTE_READ | FI_REMOTE_WRITE)) == (FI_REMOTE_READ | FI_REMOTE_WRITE),
              "FI_MR_BASIC lets the endpoint be an RMA target: caps %#" PRIx64, i->caps);
    }
    if (info)
        open_and_close(info);
    fi_freeinfo(info);
    info = NULL;
    fi_freeinfo(h);

    /* API 1.5, tagged messages and mr_mode 0 (Open MPI's OFI MTL): no MR
     * mode bit is demanded for what does not use it. */
    h = rdm_hints();
    h->caps = FI_TAGGED | FI_DIRECTED_RECV;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->domain_attr->mr_mode = 0;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->domain_attr->av_type = FI_AV_MAP;
    h->domain_attr->resource_mgmt = FI_RM_ENABLED;
    h->domain_attr->cq_data_size = 4;
    h->tx_attr->msg_order = h->rx_attr->msg_order = FI_ORDER_SAS;
    h->tx_attr->op_flags = h->rx_attr->op_flags = FI_COMPLETION;
    rc = fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, h, &info);
    CHECK(rc == 0, "fi_getinfo 1.5 tagged, mr_mode 0: %d %s", rc, fi_strerror(-rc));
    for (struct fi_info *i = info; i; i = i->next) {
        CHECK(i->domain_attr->mr_mode == 0, "mr_mode %#x demanded of a tagged-only application",
              i->domain_attr->mr_mode);
        CHECK((i->caps & (FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV)) ==
                  (FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV),
              "caps %#" PRIx64, i->caps);
        CHECK(!(i->caps & (FI_MSG | FI_RMA)), "primary caps not asked for: %#" PRIx64, i->caps);
        CHECK(i->domain_attr->caps & FI_LOCAL_COMM, "domain caps %#" PRIx64 " without FI_LOCAL_COMM",
              i->domain_attr->caps);
        CHECK(i->domain_attr->max_ep_tx_ctx <= 1 || i->domain_attr->tx_ctx_cnt >= i->domain_attr->max_ep_tx_ctx,
              "scalable endpoints offered but domain tx_ctx_cnt %zu", i->domain_attr->tx_ctx_cnt);
    }
    if (info)
        open_and_close(info);
    fi_freeinfo(info);
    info = NULL;
    fi_freeinfo(h);

    /* Modifier groups: RMA write modifiers do not take away send/receive. */
    h = rdm_hints();
    h->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
    rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
    CHECK(rc == 0, "fi_getinfo modifiers: %d %s", rc, fi_strerror(-rc));
    for (struct fi_info *i = info; i; i = i->next) {
        CHECK((i->caps & (FI_SEND | FI_RECV)) == (FI_SEND | FI_RECV), "caps %#" PRIx64 " without FI_SEND|FI_RECV",
              i->caps);
        CHECK((i->caps & (FI_READ | FI_REMOTE_READ)) == 0, "caps %#" PRIx64 " with read modifiers not asked for",
              i->caps);
    }
    fi_freeinfo(info);
    info = NULL;
    /* the domain capability asked for is echoed */
    h->domain_attr->caps = FI_LOCAL_COMM;
    rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
    CHECK(rc == 0 && info && (info->domain_attr->caps & FI_LOCAL_COMM), "domain caps FI_LOCAL_COMM: %d", rc);
    fi_freeinfo(info);
    info = NULL;
    fi_freeinfo(h);

    /* DGRAM has no RMA: FI_MR_SCALABLE is fine there, at 1.4 and 1.17. */
    for (int v = 0; v < 2; v++) {
        h = rdm_hints();
        h->ep_attr->type = FI_EP_DGRAM;
        h->domain_attr->mr_mode = FI_MR_SCALABLE;
        rc = fi_getinfo(v ? FI_VERSION(1, 17) : FI_VERSION(1, 4), NULL, NULL, 0, h, &info);
        CHECK(rc == 0 || rc == -FI_ENODATA, "fi_getinfo DGRAM scalable: %d", rc);
        for (struct fi_info *i = info; i; i = i->next)
            CHECK(i->domain_attr->mr_mode == FI_MR_SCALABLE, "DGRAM mr_mode %#x", i->domain_attr->mr_mode);
        fi_freeinfo(info);
        info = NULL;
        fi_freeinfo(h);
    }

    /* Hints nobody can meet: a fabric name that does not exist. */
    h = rdm_hints();
    h->fabric_attr->name = strdup("no-such-fabric");
    rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
    CHECK(rc == -FI_ENODATA, "unknown fabric name: %d, expected -FI_ENODATA", rc);
    fi_freeinfo(info);
    info = NULL;
    fi_freeinfo(h);

    /* fi_fabric on a name Shunt does not know. */
    struct fi_fabric_attr fa = {.name = "no-such-fabric", .prov_name = "shunt"};
    struct fid_fabric *fabric = NULL;
    rc = fi_fabric(&fa, &fabric, NULL);
    CHECK(rc != 0 && fabric == NULL, "fi_fabric(no-such-fabric): %d", rc);

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok: getinfo for API 1.17, 1.5 and 1.4 (MR modes, legacy modes echoed), modifier groups, domain caps, "
           "provider name, caps, tag format, fabric/domain open\n");
    return 0;
}
