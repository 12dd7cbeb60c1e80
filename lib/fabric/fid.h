/* The base of every object of the endpoint API (libfabric's struct fid) and
 * the calls every object answers: close, bind, control, open_ops.
 *
 * Every object (fabric, domain, endpoint, CQ, ...) starts with a fid. Its ops
 * table starts with its size and is complete: slots a provider does not fill
 * point at the stubs of detail:: below (-FI_ENOSYS, libfabric's fi_no_*
 * functions), so no caller ever tests a slot for null. Tables only grow at their end; a caller that needs a
 * slot newer than the table it holds checks `size` first (ops_has()). */
#pragma once

#include <cstddef>
#include <cstdint>

#include "env/errors.h"
#include "fabric/flags.h"

namespace shunt::fabric {

struct fid;
using fid_t = fid *;

/** Defaults of ops-table slots a provider leaves unfilled (complete by
 *  construction, as vq's context_ops): `= detail::nosys<ssize_t>` gives a
 *  slot of any signature returning that type. */
namespace detail {
/** -FI_ENOSYS: the operation is not implemented (libfabric's fi_no_*). */
template <class R, class... A>
R nosys(A...) noexcept
{
    return R(-FI_ENOSYS);
}
/** -FI_EOPNOTSUPP: the query answers "not supported" (atomic valid calls). */
template <class R, class... A>
R opnotsupp(A...) noexcept
{
    return R(-FI_EOPNOTSUPP);
}
/** A zero value (counter reads: 0; straddr: no string). */
template <class R, class... A>
R zero(A...) noexcept
{
    return R{};
}
/** The strerror slots of CQs and EQs. */
template <class... A>
const char *unknown_error(A...) noexcept
{
    return "unknown error";
}
} // namespace detail

/** Operations every object answers (libfabric struct fi_ops). */
struct ops_fid {
    std::size_t size = sizeof(ops_fid);
    int (*close)(fid *f) = detail::nosys<int>;
    int (*bind)(fid *f, fid *bfid, std::uint64_t flags) = detail::nosys<int>;
    int (*control)(fid *f, int command, void *arg) = detail::nosys<int>;
    int (*ops_open)(fid *f, const char *name, std::uint64_t flags, void **ops, void *context) = detail::nosys<int>;
};

/** Base of every object (libfabric struct fid). */
struct fid {
    std::size_t fclass = FI_CLASS_UNSPEC; ///< one of fid_class
    void *context = nullptr;               ///< the user's context given at open
    const ops_fid *ops = nullptr;          ///< never null for a live object
};

/** True if ops table @p table (of type @p Type, starting with its size)
 *  holds slot @p member: for callers that need a slot added after the
 *  table's first version. */
#define SHUNT_OPS_HAS(table, Type, member) \
    ((table)->size >= offsetof(Type, member) + sizeof(((Type *)nullptr)->member))

/** Operation context the application lends when FI_CONTEXT mode is set. */
struct context {
    void *internal[4];
};
/** Operation context the application lends when FI_CONTEXT2 mode is set. */
struct context2 {
    void *internal[8];
};

/** Close an object and free its resources (fi_close).
 *  @param f object to close.
 *  @return 0; -FI_EINVAL @p f null or not a live object; -FI_EBUSY other
 *  objects still depend on it (endpoints bound to a CQ, open contexts of a
 *  scalable endpoint, open aliases of an endpoint, domains of a fabric...).
 *  Outstanding operations of a closed endpoint are discarded without
 *  completions. */
[[nodiscard]] int close(fid *f);

/** Bind @p bfid to @p f (the generic form of ep_bind, pep_bind, ...).
 *  @param f object to bind to; @param bfid object bound; @param flags bind flags.
 *  @return 0 or as the specific bind call. */
[[nodiscard]] int bind(fid *f, fid *bfid, std::uint64_t flags);

/** Control an object (fi_control).
 *  @param f object; @param command one of control_cmd; @param arg its argument.
 *  @return 0; -FI_EINVAL null or not live object, or bad arg; -FI_ENOSYS the
 *  object does not implement @p command. */
[[nodiscard]] int control(fid *f, int command, void *arg);

/** Open a named extension of an object (fi_open_ops), e.g. the TSO extension
 *  (see fabric/ext_tso.h).
 *  @param f object; @param name extension name; @param flags 0;
 *  @param ops out: the extension's ops table, written on success only;
 *  @param context passed to the provider.
 *  @return 0; -FI_EINVAL null argument; -FI_ENOSYS unknown extension. */
[[nodiscard]] int open_ops(fid *f, const char *name, std::uint64_t flags, void **ops, void *context);

/** True if @p f is an object that is open right now (a lookup in the table
 *  of live objects; setup calls use it to reject closed handles). */
bool fid_live(const fid *f) noexcept;

} // namespace shunt::fabric
