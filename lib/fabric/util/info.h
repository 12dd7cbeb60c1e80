/* For provider writers: matching an offered info against getinfo hints.
 *
 * A provider describes each endpoint type it offers with an info holding its
 * defaults and limits, plus the choices it can make (info_limits). match()
 * applies the rules of getinfo() (see fabric/info.h) and builds the answer:
 * the checks and the shaping of the answer are those of libfabric's own
 * reference (ofi_check_info and ofi_alter_info in prov/util/src/util_attr.c),
 * with Shunt's sets of supported threading / progress / AV models in place
 * of single values.
 *
 * What the offer must hold:
 *  - caps: every capability, modifier and secondary capability the endpoint
 *    type supports, including the domain-level FI_LOCAL_COMM / FI_REMOTE_COMM;
 *  - tx_attr->caps / rx_attr->caps: the transmit / receive side of them
 *    (0: derived from caps);
 *  - domain_attr->caps: the domain capabilities (FI_LOCAL_COMM ...);
 *  - domain_attr->mr_mode: ignored; the MR modes are info_limits'. */
#pragma once

#include <cstdint>

#include "fabric/info.h"

namespace shunt::fabric::util {

/** Choices a provider supports beyond the single values of its offer. */
struct info_limits {
    unsigned threading_mask = 0;  ///< bit (1u << FI_THREAD_*) per supported level
    unsigned progress_mask = 0;   ///< bit (1u << FI_PROGRESS_*) per supported data progress model
    unsigned av_type_mask = 0;    ///< bit (1u << FI_AV_*) per supported AV type
    /** FI_MR_* bits the application must accept when it uses what they are
     *  about (the only ones getinfo reports). Bits that only concern RMA
     *  targets (FI_MR_VIRT_ADDR, FI_MR_PROV_KEY, FI_MR_RAW, FI_MR_RMA_EVENT)
     *  are not required of an application that asks for neither FI_RMA nor
     *  FI_ATOMIC as a target. */
    int mr_mode_required = 0;
    /** The legacy registration modes (FI_MR_BASIC, FI_MR_SCALABLE) whose
     *  rules the provider's memory regions can follow: hints naming one of
     *  them are accepted and the answer echoes it. */
    int mr_mode_legacy = 0;
    std::uint64_t op_flags = 0;   ///< operation flags it supports (FI_INJECT_COMPLETE ...)
    /** Address formats it can give besides the offer's, bit (1ull << FI_*)
     *  each (FI_ADDR_STR). The answer carries the format the hints ask for. */
    std::uint64_t addr_formats = 0;
    bool tag_formats = true;      ///< accepts FI_TAG_MPI and FI_TAG_CCL
    bool shared_ctx = false;      ///< FI_SHARED_CONTEXT supported
};

/** Match @p offer against @p hints.
 *  @param version the API version the caller is written for: below 1.5
 *    mr_mode is libfabric's old enumeration (FI_MR_UNSPEC / FI_MR_BASIC /
 *    FI_MR_SCALABLE) and FI_LOCAL_MR a mode bit, and the domain checks of
 *    1.5 (counter, MR and error-data limits, domain caps and mode) are not
 *    applied, as in libfabric.
 *  @param out the filled answer (caller frees), written on success only.
 *  @return 0 match; -FI_ENODATA no match (the reason is logged at debug
 *  level); -FI_EINVAL inconsistent hints; -FI_ENOMEM. */
[[nodiscard]] int match(std::uint32_t version, const info *offer, const info_limits &lim, const info *hints,
                        info **out);

/** Check hints for consistency: tx/rx capabilities within the primary
 *  capabilities (and the modifiers they imply), known enumeration values.
 *  @return 0 or -FI_EINVAL. */
[[nodiscard]] int check_hints(const info *hints);

/** The capabilities of an answer (libfabric's ofi_get_caps): the primary
 *  capabilities asked for (@p hint_caps; 0: every primary one in both
 *  @p info_caps and @p offer_caps), the offer's secondary ones, and for a
 *  capability group asked for without a modifier, the offer's modifiers of
 *  that group. FI_SOURCE (it costs a lookup per receive) only when asked. */
std::uint64_t answer_caps(std::uint64_t info_caps, std::uint64_t hint_caps, std::uint64_t offer_caps);

/** Map legacy FI_MR_BASIC / FI_MR_SCALABLE to v1.5 bits (what an object
 *  opened with such an info does): FI_MR_BASIC is FI_MR_VIRT_ADDR |
 *  FI_MR_ALLOCATED | FI_MR_PROV_KEY, FI_MR_SCALABLE none of them. */
int mr_mode_normalize(int mr_mode);

} // namespace shunt::fabric::util
