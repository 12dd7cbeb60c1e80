#include "transport.h"

#include <algorithm>

namespace shunt::perf {

std::vector<const transport_ops *> transports()
{
    static const std::vector<const transport_ops *> all = [] {
        std::vector<const transport_ops *> v;
        // Preference order: the real Shunt layers first, the floor last.
        register_fabric(v);
        register_vq(v);
        register_line(v);
        return v;
    }();
    return all;
}

const transport_ops *find_transport(const test_config &c)
{
    for (const transport_ops *t : transports())
        if (t->vq == c.vq && c.provider == t->name)
            return t;
    return nullptr;
}

bool is_pending_name(const std::string &name, bool vq)
{
    static const char *const providers[] = {"vq", "shm"};
    static const char *const drivers[] = {"shm", "mlx5", "ethdev"};
    if (vq)
        return std::find(std::begin(drivers), std::end(drivers), name) != std::end(drivers);
    return std::find(std::begin(providers), std::end(providers), name) != std::end(providers);
}

} // namespace shunt::perf
