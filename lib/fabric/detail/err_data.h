/* Internal: how readerr hands provider error data to the caller, shared by
 * CQs and EQs (fi_cq(3), fi_eq(3)): with API >= 1.5 the caller may lend a
 * buffer in err_data/err_data_size, which is filled (truncated to fit);
 * otherwise the object keeps a copy that stays valid until the next readerr. */
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace shunt::fabric::detail {

/** Fill @p buf's err_data/err_data_size from @p data. The caller's lent
 *  buffer (err_data, err_data_size as they were before *buf was overwritten)
 *  is passed in @p user / @p user_size; @p keep is the object's copy. */
template <class ErrEntry>
void lend_err_data(ErrEntry *buf, void *user, std::size_t user_size, const std::vector<std::uint8_t> &data,
                   std::vector<std::uint8_t> &keep)
{
    if (user && user_size) {
        std::size_t n = std::min(user_size, data.size());
        if (n)
            std::memcpy(user, data.data(), n);
        buf->err_data = user;
        buf->err_data_size = n;
    } else {
        keep = data;
        buf->err_data = keep.empty() ? nullptr : keep.data();
        buf->err_data_size = keep.size();
    }
}

} // namespace shunt::fabric::detail
