/* Private header of the libfabric external provider (libshunt-fi.so).
 *
 * Two worlds meet here: Shunt's endpoint API (namespace shunt::fabric, whose
 * constants are C++ names such as shunt::fabric::FI_MSG) and libfabric 1.17's
 * C API (<rdma/...>, whose constants are macros of the same spelling and
 * value). The rule of every translation unit of lib/ofi: Shunt headers are
 * included FIRST (this header does it), then <rdma/...>; below this header
 * only libfabric's macros are written. Shunt names that are not macros in
 * libfabric (types, functions, enumerators such as FI_EP_RDM) are always
 * qualified with sf::. abi.cpp proves that the values and layouts the shim
 * relies on are equal in both worlds.
 *
 * Every libfabric object the provider hands out is a wrapper: the libfabric
 * struct first (so the wrapper's address is the libfabric handle), then the
 * Shunt object it forwards to. The Shunt object keeps the application's
 * context; a Shunt fid seen in an event maps back to its wrapper through the
 * table of live wrappers (reg_wrapper, to_lf). Data-path calls are one load
 * and a tail call into the Shunt ops table (fwd.h): no copies (structs of
 * the data path have the same layout and are passed through by pointer), no
 * allocation, no locks. */
#pragma once

#include "env/errors.h"
#include "env/log.h"
#include "fabric/api.h"
#include "fabric/provider.h"

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>

namespace shunt::ofi {

namespace sf = ::shunt::fabric;

inline constexpr std::size_t sf_name_max = 64;

extern ::shunt::env::log::component ofi_log;

/** Version of this provider as libfabric sees it (fi_provider::version). */
inline constexpr std::uint32_t k_prov_version = FI_VERSION(0, 1);
/** libfabric API this provider is written for: the headers it is built with. */
inline constexpr std::uint32_t k_fi_version = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
/** The API version the shim asks of Shunt (Shunt's FI_API_VERSION, 2.5). */
extern const std::uint32_t k_shunt_api_version;
/** Capability bits Shunt defines and libfabric 1.17 does not (masked out of
 *  every info handed to libfabric). */
extern const std::uint64_t k_shunt_only_caps;

// ---- wrappers: libfabric object first, then the Shunt object ----

struct fabric_w {
    ::fid_fabric lf;
    sf::fid_fabric *sh;
    char shunt_prov[sf_name_max]; ///< Shunt provider of this fabric ("shm")
};

struct domain_w {
    ::fid_domain lf;
    sf::fid_domain *sh;
    fabric_w *fab;
    std::uint32_t api_version; ///< the application's (fabric's) libfabric API version
};

/** Active endpoint, scalable endpoint, tx/rx context, shared rx context. */
struct ep_w {
    ::fid_ep lf;
    sf::fid_ep *sh;
    std::uint32_t api_version;
};

struct pep_w {
    ::fid_pep lf;
    sf::fid_pep *sh;
    std::uint32_t api_version;
};

struct stx_w {
    ::fid_stx lf;
    sf::fid_stx *sh;
};

struct cq_w {
    ::fid_cq lf;
    sf::fid_cq *sh;
    std::uint32_t api_version;
};

struct cntr_w {
    ::fid_cntr lf;
    sf::fid_cntr *sh;
};

struct av_w {
    ::fid_av lf;
    sf::fid_av *sh;
};

struct eq_w {
    ::fid_eq lf;
    sf::fid_eq *sh;
    std::uint32_t api_version;
    /** Reads look at the next entry before taking it (is it the
     *  application's own? fabric.cpp): one reader at a time. */
    std::mutex read_mu;
};

struct mr_w {
    ::fid_mr lf;
    sf::fid_mr *sh;
};

struct wait_w {
    ::fid_wait lf;
    sf::fid_wait *sh;
};

struct poll_w {
    ::fid_poll lf;
    sf::fid_poll *sh;
};

// ---- fid ops tables (identity of wrappers: a fid is ours iff its ops is one of these) ----
extern ::fi_ops g_fabric_fi_ops, g_domain_fi_ops, g_ep_fi_ops, g_pep_fi_ops, g_stx_fi_ops, g_cq_fi_ops,
    g_cntr_fi_ops, g_av_fi_ops, g_eq_fi_ops, g_mr_fi_ops, g_wait_fi_ops, g_poll_fi_ops;

/** The Shunt object behind libfabric handle @p f, or null when @p f is null
 *  or not an object of this provider. */
sf::fid *to_shunt(const ::fid *f) noexcept;

/** The libfabric handle of Shunt object @p f: its wrapper when the shim
 *  made one, else @p f itself (connection requests, which libfabric only
 *  carries around as info->handle). Null gives null. Setup/event path only
 *  (a lookup under a mutex). */
::fid *to_lf(sf::fid *f) noexcept;

/** Record / forget the wrapper of a Shunt object (for to_lf). Shunt objects
 *  keep the application's context, so contexts Shunt reports (EQ entries,
 *  CQ error entries) need no translation; only fids do.
 *  @return 0 or -FI_ENOMEM. */
int reg_wrapper(sf::fid *sh, ::fid *lf) noexcept;
void unreg_wrapper(sf::fid *sh) noexcept;

// ---- info conversion (info.cpp) ----

/** libfabric info (hints or an info from the application) to a Shunt info,
 *  allocated with sf::allocinfo (free with sf::freeinfo).
 *  @param api_version the application's libfabric API version (MR mode
 *    and FI_LOCAL_MR of versions before 1.5 are translated).
 *  @param for_hints drop fabric_attr->prov_name (libfabric's name "shunt"
 *    means every Shunt provider).
 *  @return 0, -FI_ENOMEM, or -FI_EINVAL (a handle that is not ours). */
int info_to_shunt(const ::fi_info *in, std::uint32_t api_version, bool for_hints, sf::info **out);
/** info_to_shunt() for an info used to open objects of fabric @p fab: the
 *  Shunt provider name of the fabric is set. */
int info_to_shunt_for(const fabric_w *fab, const ::fi_info *in, std::uint32_t api_version, sf::info **out);

/** One Shunt info to a libfabric info allocated by libfabric's fi_dupinfo
 *  (the application frees it with fi_freeinfo). fabric_attr->prov_name is
 *  left null: libfabric's core names the provider.
 *  @return the info or null (out of memory). */
::fi_info *info_to_lf(const sf::info *in, std::uint32_t api_version);
/** A whole Shunt list converted (order kept); null when out of memory. */
::fi_info *info_list_to_lf(const sf::info *in, std::uint32_t api_version);

/** libfabric rx/tx attribute conversions (tx_attr has the same layout;
 *  rx_attr lost total_buffered_recv in 2.x). */
void rx_attr_to_shunt(const ::fi_rx_attr *in, sf::rx_attr *out) noexcept;
void rx_attr_to_lf(const sf::rx_attr *in, ::fi_rx_attr *out) noexcept;
void tx_attr_to_shunt(const ::fi_tx_attr *in, sf::tx_attr *out) noexcept;
void tx_attr_to_lf(const sf::tx_attr *in, ::fi_tx_attr *out) noexcept;

// ---- object entry points used across files ----
int fabric_open(::fi_fabric_attr *attr, ::fid_fabric **fabric, void *context);
int provider_getinfo(std::uint32_t version, const char *node, const char *service, std::uint64_t flags,
                     const ::fi_info *hints, ::fi_info **info);

/** Make @p w the wrapper of Shunt endpoint-like object @p sh: the libfabric
 *  fid (class of @p sh, @p context) and every ops table. publish() it next. */
void ep_wrap(ep_w *w, sf::fid_ep *sh, void *context, std::uint32_t api_version) noexcept;
void pep_wrap(pep_w *w, sf::fid_pep *sh, void *context, std::uint32_t api_version) noexcept;

int domain_open(::fid_fabric *fabric, ::fi_info *info, ::fid_domain **dom, void *context);
int domain_open2(::fid_fabric *fabric, ::fi_info *info, ::fid_domain **dom, std::uint64_t flags, void *context);
int eq_open(::fid_fabric *fabric, ::fi_eq_attr *attr, ::fid_eq **eq, void *context);
int wait_open(::fid_fabric *fabric, ::fi_wait_attr *attr, ::fid_wait **waitset);
/** The Shunt wait set behind libfabric wait set @p w (null: none), for
 *  CQs, counters and EQs opened on it. @return 0; -FI_EINVAL not ours. */
int shunt_wait_set(::fid_wait *w, sf::fid_wait **out);
int passive_ep(::fid_fabric *fabric, ::fi_info *info, ::fid_pep **pep, void *context);

int cq_open(::fid_domain *domain, ::fi_cq_attr *attr, ::fid_cq **cq, void *context);
int cntr_open(::fid_domain *domain, ::fi_cntr_attr *attr, ::fid_cntr **cntr, void *context);
int av_open(::fid_domain *domain, ::fi_av_attr *attr, ::fid_av **av, void *context);
int endpoint(::fid_domain *domain, ::fi_info *info, ::fid_ep **ep, void *context);
int endpoint2(::fid_domain *domain, ::fi_info *info, ::fid_ep **ep, std::uint64_t flags, void *context);
int scalable_ep(::fid_domain *domain, ::fi_info *info, ::fid_ep **sep, void *context);
int stx_ctx(::fid_domain *domain, ::fi_tx_attr *attr, ::fid_stx **stx, void *context);
int srx_ctx(::fid_domain *domain, ::fi_rx_attr *attr, ::fid_ep **rx_ep, void *context);

/** The end of every open: record wrapper @p w of the Shunt object w->sh
 *  (for to_lf) and hand its libfabric handle out in @p out. When it cannot
 *  be recorded the Shunt object is closed, the wrapper freed and @p out left
 *  alone.
 *  @return 0 or -FI_ENOMEM. */
template <class W>
int publish(W *w, decltype(W::lf) **out)
{
    sf::fid *sh = &w->sh->fid;
    int rc = reg_wrapper(sh, &w->lf.fid);
    if (rc) {
        (void)sf::close(sh);
        delete w;
        return rc;
    }
    *out = &w->lf;
    return 0;
}

/** Open an object of a fixed class (fabric, EQ, CQ, counter, AV, STX):
 *  allocate its wrapper W, let @p open(w) open the Shunt object into w->sh
 *  (and set what else W holds), then fill the libfabric fid (@p fclass,
 *  @p context, the fid ops @p fi_ops, the class's ops table @p ops) and
 *  publish() it in @p out.
 *  @return 0, -FI_ENOMEM, or the error of @p open (the wrapper is freed). */
template <class W, class Ops, class Open>
int open_wrapped(decltype(W::lf) **out, void *context, std::size_t fclass, ::fi_ops *fi_ops, Ops *ops, Open open)
{
    auto *w = new (std::nothrow) W{};
    if (!w)
        return -FI_ENOMEM;
    int rc = open(w);
    if (rc) {
        delete w;
        return rc;
    }
    w->lf.fid.fclass = fclass;
    w->lf.fid.context = context;
    w->lf.fid.ops = fi_ops;
    w->lf.ops = ops;
    return publish(w, out);
}

/** Close helper: close the Shunt object, then free the wrapper.
 *  A Shunt refusal (-FI_EBUSY...) leaves the wrapper alive. */
template <class W>
int close_wrapper(::fid *f) noexcept
{
    W *w = reinterpret_cast<W *>(f);
    sf::fid *sh = &w->sh->fid;
    int rc = sf::close(sh);
    if (rc)
        return rc;
    unreg_wrapper(sh);
    w->lf.fid.ops = nullptr;
    delete w;
    return 0;
}

/** fi_ops::bind for every wrapper: sf::bind on the Shunt objects. */
int fid_bind(::fid *f, ::fid *bfid, std::uint64_t flags);
/** fi_ops::control for wrappers without special commands: forwarded. */
int fid_control(::fid *f, int command, void *arg);
/** fi_ops::tostr for every wrapper. */
int fid_tostr(const ::fid *f, char *buf, std::size_t len);
/** fi_ops::ops_set: not supported. */
int fid_ops_set(::fid *f, const char *name, std::uint64_t flags, void *ops, void *context);
/** fi_ops::ops_open: forwards to the Shunt object (its named extensions). */
int fid_ops_open(::fid *f, const char *name, std::uint64_t flags, void **ops, void *context);

} // namespace shunt::ofi
