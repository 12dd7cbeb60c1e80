#include "env/errors.h"

#include <cstring>

namespace shunt {

const char *strerror(int code) noexcept
{
    if (code < 0)
        code = -code;
    switch (code) {
    case FI_SUCCESS: return "Success";
    case FI_EOTHER: return "Unspecified error";
    case FI_ETOOSMALL: return "Provided buffer is too small";
    case FI_EOPBADSTATE: return "Operation not permitted in current state";
    case FI_EAVAIL: return "Error available";
    case FI_EBADFLAGS: return "Flags not supported";
    case FI_ENOEQ: return "Missing or unavailable event queue";
    case FI_EDOMAIN: return "Invalid resource domain";
    case FI_ENOCQ: return "Missing or unavailable completion queue";
    case FI_ECRC: return "CRC error";
    case FI_ETRUNC: return "Truncation error";
    case FI_ENOKEY: return "Required key not available";
    case FI_ENOAV: return "Missing or unavailable address vector";
    case FI_EOVERRUN: return "Queue has been overrun";
    case FI_ENORX: return "Receiver not ready, no receive buffers available";
    default:
        if (code < FI_ERRNO_OFFSET)
            return ::strerrordesc_np(code) ? ::strerrordesc_np(code) : "Unknown error";
        return "Unknown error";
    }
}

} // namespace shunt
