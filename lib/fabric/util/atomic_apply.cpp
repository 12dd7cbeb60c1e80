// Target-side atomic operations on local (possibly shared) memory.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "env/errors.h"
#include "fabric/util/atomic_apply.h"

namespace shunt::fabric::util {

namespace {

template <class T>
bool supported(op o)
{
    switch (o) {
    case FI_MIN:
    case FI_MAX:
    case FI_SUM:
    case FI_PROD:
    case FI_ATOMIC_READ:
    case FI_ATOMIC_WRITE:
    case FI_CSWAP:
    case FI_CSWAP_NE:
    case FI_CSWAP_LE:
    case FI_CSWAP_LT:
    case FI_CSWAP_GE:
    case FI_CSWAP_GT:
        return true;
    case FI_LOR:
    case FI_LAND:
    case FI_LXOR:
    case FI_BOR:
    case FI_BAND:
    case FI_BXOR:
    case FI_MSWAP:
        return std::is_integral_v<T>;
    default:
        return false;
    }
}

// Compute the new value; @return false when a compare fails (no write).
template <class T>
bool compute(op o, T old, T opnd, T cmp, T &out)
{
    switch (o) {
    case FI_MIN: out = old < opnd ? old : opnd; return true;
    case FI_MAX: out = old > opnd ? old : opnd; return true;
    case FI_SUM: out = T(old + opnd); return true;
    case FI_PROD: out = T(old * opnd); return true;
    case FI_ATOMIC_WRITE: out = opnd; return true;
    case FI_ATOMIC_READ: out = old; return false;
    case FI_CSWAP: out = opnd; return cmp == old;
    case FI_CSWAP_NE: out = opnd; return cmp != old;
    case FI_CSWAP_LE: out = opnd; return cmp <= old;
    case FI_CSWAP_LT: out = opnd; return cmp < old;
    case FI_CSWAP_GE: out = opnd; return cmp >= old;
    case FI_CSWAP_GT: out = opnd; return cmp > old;
    default: break;
    }
    if constexpr (std::is_integral_v<T>) {
        switch (o) {
        case FI_LOR: out = T((old || opnd) ? 1 : 0); return true;
        case FI_LAND: out = T((old && opnd) ? 1 : 0); return true;
        case FI_LXOR: out = T(((old != 0) != (opnd != 0)) ? 1 : 0); return true;
        case FI_BOR: out = T(old | opnd); return true;
        case FI_BAND: out = T(old & opnd); return true;
        case FI_BXOR: out = T(old ^ opnd); return true;
        case FI_MSWAP: out = T((opnd & cmp) | (old & ~cmp)); return true; // cmp is the mask
        default: break;
        }
    }
    return false;
}

template <class T>
void apply(op o, void *target, const void *operand, const void *compare, void *result, std::size_t count)
{
    using U = std::conditional_t<sizeof(T) == 1, std::uint8_t,
              std::conditional_t<sizeof(T) == 2, std::uint16_t,
              std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
    auto *t = static_cast<U *>(target);
    for (std::size_t i = 0; i < count; i++) {
        T opnd{}, cmp{};
        if (operand)
            std::memcpy(&opnd, static_cast<const T *>(operand) + i, sizeof(T));
        if (compare)
            std::memcpy(&cmp, static_cast<const T *>(compare) + i, sizeof(T));
        U cur = __atomic_load_n(t + i, __ATOMIC_ACQUIRE);
        for (;;) {
            T old;
            std::memcpy(&old, &cur, sizeof(T));
            T nv{};
            if (!compute<T>(o, old, opnd, cmp, nv)) {
                if (result)
                    std::memcpy(static_cast<T *>(result) + i, &old, sizeof(T));
                break;
            }
            U nu;
            std::memcpy(&nu, &nv, sizeof(T));
            if (__atomic_compare_exchange_n(t + i, &cur, nu, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                if (result)
                    std::memcpy(static_cast<T *>(result) + i, &old, sizeof(T));
                break;
            }
        }
    }
}

template <class F>
int dispatch(datatype dt, F &&f)
{
    switch (dt) {
    case FI_INT8: return f(std::int8_t{});
    case FI_UINT8: return f(std::uint8_t{});
    case FI_INT16: return f(std::int16_t{});
    case FI_UINT16: return f(std::uint16_t{});
    case FI_INT32: return f(std::int32_t{});
    case FI_UINT32: return f(std::uint32_t{});
    case FI_INT64: return f(std::int64_t{});
    case FI_UINT64: return f(std::uint64_t{});
    case FI_FLOAT: return f(float{});
    case FI_DOUBLE: return f(double{});
    default: return -FI_EOPNOTSUPP;
    }
}

} // namespace

int atomic_query(datatype dt, op o, atomic_attr *attr, std::uint64_t flags, std::size_t max_bytes)
{
    bool is_cmp = o >= FI_CSWAP && o <= FI_MSWAP;
    if ((flags & FI_COMPARE_ATOMIC) ? !is_cmp : is_cmp)
        return -FI_EOPNOTSUPP;
    if (!(flags & (FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC)) && o == FI_ATOMIC_READ)
        return -FI_EOPNOTSUPP;
    return dispatch(dt, [&](auto v) {
        using T = decltype(v);
        if (!supported<T>(o))
            return -FI_EOPNOTSUPP;
        if (attr) {
            attr->size = sizeof(T);
            attr->count = max_bytes / sizeof(T);
        }
        return 0;
    });
}

int atomic_apply(datatype dt, op o, void *target, const void *operand, const void *compare, void *result,
                 std::size_t count) noexcept
{
    return dispatch(dt, [&](auto v) {
        using T = decltype(v);
        if (!supported<T>(o))
            return -FI_EOPNOTSUPP;
        apply<T>(o, target, operand, compare, result, count);
        return 0;
    });
}

} // namespace shunt::fabric::util
