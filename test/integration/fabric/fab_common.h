// Shared by the shm provider integration tests and their peer process:
// opening an shm endpoint, the control protocol over a socketpair, data
// patterns.
#pragma once

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

#include "env/errors.h"
#include "fabric/api.h"

namespace shunt::test::fab {

using namespace shunt::fabric;

enum op : std::uint32_t {
    hello = 1,   ///< → addr (endpoint or passive endpoint), a: memory address, b: memory key
    set_peer,    ///< addr: the test's endpoint → rc
    checksum,    ///< a: offset, b: length → a: FNV-1a of the peer's memory
    fill,        ///< a: offset, b: length, c: seed
    send_tagged, ///< n messages, tags a + i, b bytes each, pattern seed i; c: 1 FI_DELIVERY_COMPLETE
    stats,       ///< → a: messages echoed, b: remote CQ data events, c: errors, n: last data; d: shutdowns;
                 ///< err: the latest completion error
    counters,    ///< FAB_PEER_RMA_EVENT peer → a: remote-write counter, b: remote-read counter, c: the region's
                 ///< counter; n: 1 when the endpoint has its counters (FI_RMA_EVENT)
    reject_next, ///< MSG: reject the next connection request with data "no-room"
    pause_peer,  ///< stop polling for a ms (answers first)
    quit,
    close_ep,    ///< close the endpoint (the process lives on, answering requests)
};

struct request {
    std::uint32_t op = 0;
    std::uint32_t n = 0;
    std::uint64_t a = 0, b = 0, c = 0;
    std::uint8_t addr[64] = {};
};
struct response {
    std::int32_t rc = 0;
    std::uint32_t n = 0;
    std::uint64_t a = 0, b = 0, c = 0, d = 0;
    std::int32_t err = 0;
    std::uint8_t addr[64] = {};
};

inline bool write_all(int fd, const void *p, std::size_t n)
{
    auto *c = static_cast<const char *>(p);
    while (n) {
        ssize_t k = ::write(fd, c, n);
        if (k <= 0)
            return false;
        c += k;
        n -= std::size_t(k);
    }
    return true;
}
/** Read exactly @p n bytes; with @p timeout_ms >= 0 each wait for more is
 *  bounded by it. @return false on end of file, an error or a timeout. */
inline bool read_all(int fd, void *p, std::size_t n, int timeout_ms = -1)
{
    auto *c = static_cast<char *>(p);
    while (n) {
        pollfd pf{fd, POLLIN, 0};
        if (timeout_ms >= 0 && ::poll(&pf, 1, timeout_ms) != 1)
            return false;
        ssize_t k = ::read(fd, c, n);
        if (k <= 0)
            return false;
        c += k;
        n -= std::size_t(k);
    }
    return true;
}

inline std::uint8_t pattern(std::uint64_t seed, std::size_t i) { return std::uint8_t((seed * 131 + i * 7 + (i >> 8)) & 0xff); }
inline void fill_pattern(void *p, std::size_t n, std::uint64_t seed)
{
    auto *b = static_cast<std::uint8_t *>(p);
    for (std::size_t i = 0; i < n; i++)
        b[i] = pattern(seed, i);
}
inline std::uint64_t fnv(const void *p, std::size_t n)
{
    std::uint64_t h = 1469598103934665603ULL;
    auto *b = static_cast<const std::uint8_t *>(p);
    for (std::size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/** Hints for the vq provider ("shm" names it); @p domain: the vq device,
 *  empty for the provider's first (the shm driver's). */
inline info *shm_hints(ep_type type, bool auto_progress, threading thr = FI_THREAD_DOMAIN,
                       const std::string &domain = {})
{
    info *h = allocinfo();
    h->caps = FI_MSG | FI_TAGGED | FI_MULTI_RECV | FI_DIRECTED_RECV;
    if (type != FI_EP_DGRAM)
        h->caps |= FI_RMA | FI_ATOMIC;
    h->mode = FI_CONTEXT;
    h->ep_attr->type = type;
    h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
    h->domain_attr->threading = thr;
    h->domain_attr->data_progress = auto_progress ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
    h->fabric_attr->prov_name = ::strdup("shm");
    if (!domain.empty())
        h->domain_attr->name = ::strdup(domain.c_str());
    return h;
}

/** An opened fabric, domain, CQ (tagged format), AV, EQ and (RDM/DGRAM) endpoint. */
struct node {
    info *fi = nullptr;
    fid_fabric *fabric = nullptr;
    fid_domain *domain = nullptr;
    fid_ep *ep = nullptr;
    fid_cq *cq = nullptr;
    fid_av *av = nullptr;
    fid_eq *eq = nullptr;
    std::uint8_t addr[64] = {};
    /** Asked for by the caller before open: FI_RMA_EVENT opens rwrite and
     *  rread and binds them (FI_REMOTE_WRITE, FI_REMOTE_READ) to endpoints. */
    std::uint64_t extra_caps = 0;
    /** Asked for by the caller before open: the vq device (domain name),
     *  empty for the default. */
    std::string domain_name;
    fid_cntr *rwrite = nullptr, *rread = nullptr;
    /** Asked for by the caller before open: a counter bound with FI_WRITE. */
    bool write_counter = false;
    fid_cntr *wcount = nullptr;

    /** Bind the counters asked for (if any) to @p e. @return 0 or the error. */
    int bind_counters(fid_ep *e)
    {
        int rc = 0;
        if (write_counter && ((!wcount && (rc = cntr_open(domain, nullptr, &wcount, nullptr))) ||
                              (rc = ep_bind(e, &wcount->fid, FI_WRITE))))
            return rc;
        if (!(extra_caps & FI_RMA_EVENT))
            return 0;
        if (!rwrite && (rc = cntr_open(domain, nullptr, &rwrite, nullptr)))
            return rc;
        if (!rread && (rc = cntr_open(domain, nullptr, &rread, nullptr)))
            return rc;
        if ((rc = ep_bind(e, &rwrite->fid, FI_REMOTE_WRITE)))
            return rc;
        return ep_bind(e, &rread->fid, FI_REMOTE_READ);
    }

    /** @return 0 or the first failing call's code. */
    int open(ep_type type, bool auto_progress, std::uint64_t cq_flags = FI_TRANSMIT | FI_RECV,
             threading thr = FI_THREAD_DOMAIN)
    {
        info *h = shm_hints(type, auto_progress, thr, domain_name);
        h->caps |= extra_caps;
        int rc = getinfo(FI_API_VERSION, nullptr, nullptr, 0, h, &fi);
        freeinfo(h);
        if (rc)
            return rc;
        if ((rc = fabric_open(fi->fabric_attr, &fabric, nullptr)) || (rc = domain_open(fabric, fi, &domain, nullptr)))
            return rc;
        cq_attr ca;
        ca.format = FI_CQ_FORMAT_TAGGED;
        ca.wait_obj = FI_WAIT_UNSPEC;
        if ((rc = cq_open(domain, &ca, &cq, nullptr)))
            return rc;
        eq_attr ea;
        ea.wait_obj = FI_WAIT_UNSPEC;
        if ((rc = eq_open(fabric, &ea, &eq, nullptr)))
            return rc;
        if (type == FI_EP_MSG)
            return 0;
        av_attr aa;
        if ((rc = av_open(domain, &aa, &av, nullptr)) || (rc = endpoint(domain, fi, &ep, nullptr)) ||
            (rc = ep_bind(ep, &cq->fid, cq_flags)) || (rc = ep_bind(ep, &av->fid, 0)) ||
            (rc = ep_bind(ep, &eq->fid, 0)) || (rc = bind_counters(ep)) || (rc = enable(ep)))
            return rc;
        std::size_t len = sizeof addr;
        return getname(&ep->fid, addr, &len);
    }
    void close()
    {
        if (ep)
            (void)fabric::close(&ep->fid);
        if (av)
            (void)fabric::close(&av->fid);
        if (cq)
            (void)fabric::close(&cq->fid);
        if (eq)
            (void)fabric::close(&eq->fid);
        for (fid_cntr *n : {rwrite, rread, wcount})
            if (n)
                (void)fabric::close(&n->fid);
        rwrite = rread = wcount = nullptr;
        if (domain)
            (void)fabric::close(&domain->fid);
        if (fabric)
            (void)fabric::close(&fabric->fid);
        freeinfo(fi);
        ep = nullptr;
        av = nullptr;
        cq = nullptr;
        eq = nullptr;
        domain = nullptr;
        fabric = nullptr;
        fi = nullptr;
    }
};

} // namespace shunt::test::fab
