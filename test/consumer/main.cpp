// Links the installed Shunt and calls it: parses an lcore list, reads the
// TSC rate and initialises the environment without hugepages.
#include <env/env.h>
#include <env/errors.h>
#include <env/tsc.h>
#include <shunt_config.h>

#include <cstdio>
#include <vector>

int main()
{
    std::vector<unsigned> cpus;
    if (shunt::env::parse_cpu_list("0", cpus) != 0 || cpus.size() != 1)
        return 2;
    shunt::env::options o;
    o.hugepages = shunt::env::hugepage_policy::off;
    o.hugepages_set = true;
    o.memory_mb = 32;
    int rc = shunt::env::init(o);
    if (rc != 0) {
        std::fprintf(stderr, "init: %s\n", shunt::strerror(rc));
        return 3;
    }
    std::printf("consumer linked shunt %s, tsc %llu Hz\n", SHUNT_VERSION,
                static_cast<unsigned long long>(shunt::env::tsc::hz()));
    shunt::env::fini();
    return 0;
}
