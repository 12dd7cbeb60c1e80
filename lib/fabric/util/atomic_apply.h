/* For provider writers: apply an atomic operation to local memory, atomically
 * with respect to other callers (the target side of fi_atomic(3)). Integer
 * types and float/double; complex and long double types are refused.
 * Each element is updated with a compare-and-swap loop (or a native
 * fetch-op), so concurrent atomics of other processes on shared memory are
 * safe. */
#pragma once

#include <cstddef>

#include "fabric/flags.h"
#include "fabric/domain.h"

namespace shunt::fabric::util {

/** Does atomic_apply support @p dt / @p o for the family in @p flags
 *  (0, FI_FETCH_ATOMIC, FI_COMPARE_ATOMIC)? Fills @p attr. @return 0 or
 *  -FI_EOPNOTSUPP. */
int atomic_query(datatype dt, op o, atomic_attr *attr, std::uint64_t flags, std::size_t max_bytes);

/** Apply @p o to @p count elements at @p target with operands @p operand
 *  (and @p compare for FI_CSWAP*, mask for FI_MSWAP), writing the previous
 *  values to @p result when not null.
 *  @return 0; -FI_EOPNOTSUPP unsupported pair. */
int atomic_apply(datatype dt, op o, void *target, const void *operand, const void *compare, void *result,
                 std::size_t count) noexcept;

} // namespace shunt::fabric::util
