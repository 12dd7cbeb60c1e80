/* For provider writers: matching an offered info against getinfo hints.
 *
 * A provider describes each endpoint type it offers with an info holding its
 * defaults and limits, plus the choices it can make (info_limits). match()
 * applies the rules of getinfo() (see fabric/info.h) and builds the answer. */
#pragma once

#include <cstdint>

#include "fabric/info.h"

namespace shunt::fabric::util {

/** Choices a provider supports beyond the single values of its offer. */
struct info_limits {
    unsigned threading_mask = 0;  ///< bit (1u << FI_THREAD_*) per supported level
    unsigned progress_mask = 0;   ///< bit (1u << FI_PROGRESS_*) per supported data progress model
    unsigned av_type_mask = 0;    ///< bit (1u << FI_AV_*) per supported AV type
    int mr_mode_required = 0;     ///< FI_MR_* bits the application must accept
    int mr_mode_optional = 0;     ///< FI_MR_* bits the provider can honour when asked
    std::uint64_t op_flags = 0;   ///< operation flags it supports (FI_INJECT_COMPLETE ...)
    bool tag_formats = true;      ///< accepts FI_TAG_MPI and FI_TAG_CCL
    bool shared_ctx = false;      ///< FI_SHARED_CONTEXT supported
};

/** Match @p offer against @p hints.
 *  @param out the filled answer (caller frees), written on success only.
 *  @return 0 match; -FI_ENODATA no match (the reason is logged at debug
 *  level); -FI_EINVAL inconsistent hints; -FI_ENOMEM. */
[[nodiscard]] int match(std::uint32_t version, const info *offer, const info_limits &lim, const info *hints,
                        info **out);

/** Check hints for consistency (tx/rx caps subset of caps...).
 *  @return 0 or -FI_EINVAL. */
[[nodiscard]] int check_hints(const info *hints);

/** Map legacy FI_MR_BASIC / FI_MR_SCALABLE to v1.5 bits. */
int mr_mode_normalize(int mr_mode);

} // namespace shunt::fabric::util
