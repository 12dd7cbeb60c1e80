/* Internal: the table of live objects, so that setup calls can reject
 * closed or foreign handles instead of crashing. */
#pragma once

#include "fabric/fid.h"

namespace shunt::fabric::detail {

void live_add(fid *f);
void live_remove(fid *f);
/** Live and of one of the classes given (0 terminates; none given: any). */
bool live_is(const fid *f, std::size_t c1 = 0, std::size_t c2 = 0, std::size_t c3 = 0, std::size_t c4 = 0);

} // namespace shunt::fabric::detail
