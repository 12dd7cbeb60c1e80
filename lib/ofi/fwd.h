/* Data-path slots of the libfabric external provider (libshunt-fi.so).
 *
 * Every slot of a libfabric data-path ops table (msg, tagged, RMA, atomics,
 * CQ and counter reads) is one instantiation of fwd<Table, Op>: load the
 * Shunt object behind the wrapper and tail-call slot Op of its ops table
 * Table with the same arguments. Pointers to data-path structs and the
 * atomic enumerations are only retyped (pass()); abi.cpp proves that their
 * layouts and values are the same in libfabric 1.17 and Shunt. On x86-64 a
 * slot is three instructions, e.g. fi_inject:
 *     mov 0x50(%rdi),%rdi; mov 0x28(%rdi),%rax; jmp *0x38(%rax) */
#pragma once

#include "ofi/shim.h"

#include <type_traits>

namespace shunt::ofi {

/** The Shunt object behind a libfabric handle on the data path. No check:
 *  libfabric calls a wrapper's ops only with that wrapper. */
inline sf::fid_ep *shunt_of(::fid_ep *f) { return reinterpret_cast<ep_w *>(f)->sh; }
inline sf::fid_cq *shunt_of(::fid_cq *f) { return reinterpret_cast<cq_w *>(f)->sh; }
inline sf::fid_cntr *shunt_of(::fid_cntr *f) { return reinterpret_cast<cntr_w *>(f)->sh; }

/** A libfabric argument as Shunt's slot takes it: the same value, retyped
 *  where the two worlds spell the type differently (layouts and values in
 *  abi.cpp). Every other argument (buffers, iovecs, descriptors, addresses,
 *  sizes, keys, flags) has the same type in both and passes as it is. */
template <class T>
inline T pass(T v)
{
    return v;
}
inline const sf::msg *pass(const ::fi_msg *m) { return reinterpret_cast<const sf::msg *>(m); }
inline const sf::msg_tagged *pass(const ::fi_msg_tagged *m) { return reinterpret_cast<const sf::msg_tagged *>(m); }
inline const sf::msg_rma *pass(const ::fi_msg_rma *m) { return reinterpret_cast<const sf::msg_rma *>(m); }
inline const sf::msg_atomic *pass(const ::fi_msg_atomic *m) { return reinterpret_cast<const sf::msg_atomic *>(m); }
inline const sf::ioc *pass(const ::fi_ioc *i) { return reinterpret_cast<const sf::ioc *>(i); }
inline sf::ioc *pass(::fi_ioc *i) { return reinterpret_cast<sf::ioc *>(i); }
inline sf::datatype pass(::fi_datatype dt) { return static_cast<sf::datatype>(dt); }
inline sf::op pass(::fi_op op) { return static_cast<sf::op>(op); }

namespace detail {
/** The function type of a slot of a Shunt ops table (a pointer to member). */
template <class M>
struct slot;
template <class Ops, class R, class... P>
struct slot<R (*Ops::*)(P...)> {
    using fn = R (*)(P...);
};
} // namespace detail

/** The libfabric slot that forwards to slot @p Op of the Shunt ops table
 *  @p Table (a member of the Shunt object). R, L and A are deduced from the
 *  libfabric slot it initialises:
 *      .read = fwd<&sf::fid_ep::rma, &sf::ops_rma::read>,
 *  The static_assert makes "the same arguments" a compile-time fact: after
 *  pass(), every argument and the result have exactly the Shunt slot's type,
 *  so no conversion hides in the call. */
template <auto Table, auto Op, class R, class L, class... A>
R fwd(L *lf, A... a)
{
    auto *s = shunt_of(lf);
    static_assert(std::is_same_v<typename detail::slot<decltype(Op)>::fn, R (*)(decltype(s), decltype(pass(a))...)>,
                  "the libfabric slot and the Shunt slot differ beyond what pass() retypes");
    return (s->*Table->*Op)(s, pass(a)...);
}

} // namespace shunt::ofi
