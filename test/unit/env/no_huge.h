// The options the env tests initialise with: no hugepages, 64 MB, so they
// run on a machine with none reserved.
#pragma once

#include "env/env.h"

namespace shunt::test {

inline env::options no_huge()
{
    env::options o;
    o.hugepages = env::hugepage_policy::off;
    o.hugepages_set = true;
    o.memory_mb = 64;
    return o;
}

} // namespace shunt::test
