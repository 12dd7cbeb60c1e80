// Helpers for the fabric unit tests: a loop domain with endpoints, CQs and an AV.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fabric/api.h"
#include "fabric/util/ep.h"
#include "loop_prov.h"

namespace shunt::test {

using namespace shunt::fabric;

/** One endpoint with its CQ (both directions) and AV. */
struct loop_ep {
    fid_ep *ep = nullptr;
    fid_cq *cq = nullptr;
    fid_av *av = nullptr;
    std::uint64_t name = 0;
    ~loop_ep() { close_all(); }
    void close_all()
    {
        if (ep) {
            EXPECT_EQ(close(&ep->fid), 0);
        }
        if (cq) {
            EXPECT_EQ(close(&cq->fid), 0);
        }
        if (av) {
            EXPECT_EQ(close(&av->fid), 0);
        }
        ep = nullptr;
        cq = nullptr;
        av = nullptr;
    }
};

/** Open an endpoint of @p env's info with a CQ (format tagged) bound with
 *  @p cq_flags, and an AV; enable it when @p do_enable. */
inline int open_ep(loop_env &env, loop_ep &e, std::uint64_t cq_flags = FI_TRANSMIT | FI_RECV, bool do_enable = true,
                   info *in = nullptr)
{
    int rc = endpoint(env.domain, in ? in : env.info, &e.ep, &e);
    if (rc)
        return rc;
    cq_attr ca;
    ca.format = FI_CQ_FORMAT_TAGGED;
    ca.wait_obj = FI_WAIT_UNSPEC;
    if ((rc = cq_open(env.domain, &ca, &e.cq, nullptr)))
        return rc;
    if ((rc = ep_bind(e.ep, &e.cq->fid, cq_flags)))
        return rc;
    av_attr aa;
    aa.type = FI_AV_TABLE;
    if ((rc = av_open(env.domain, &aa, &e.av, nullptr)))
        return rc;
    if ((rc = ep_bind(e.ep, &e.av->fid, 0)))
        return rc;
    std::size_t len = sizeof e.name;
    if ((rc = getname(&e.ep->fid, &e.name, &len)))
        return rc;
    return do_enable ? enable(e.ep) : 0;
}

/** Insert @p peer's name into @p e's AV. @return the fi_addr_t. */
inline fi_addr_t add_peer(loop_ep &e, const loop_ep &peer)
{
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    EXPECT_EQ(av_insert(e.av, &peer.name, 1, &a, 0, nullptr), 1);
    return a;
}

/** Read one completion (tagged format) or fail after a bounded number of tries. */
inline ssize_t read_one(fid_cq *cq, cq_tagged_entry &out, int tries = 1000)
{
    ssize_t rc = -FI_EAGAIN;
    for (int i = 0; i < tries && rc == -FI_EAGAIN; i++)
        rc = cq_read(cq, &out, 1);
    return rc;
}

} // namespace shunt::test
