/* Driver registry and device list. */
#include <cstring>
#include <mutex>

#include <dlfcn.h>

#include "env/env.h"
#include "env/log.h"
#include "env/plugin.h"
#include "vq/driver.h"

namespace shunt::vq {

SHUNT_LOG_COMPONENT(vq_reg_log, "vq");

namespace {

struct registry {
    std::mutex lock;
    std::vector<const driver *> drivers;
    std::vector<bool> probed;
    std::vector<device *> devices;
};

// Function-local so that registrars running in other libraries' static
// constructors find it constructed.
registry &reg()
{
    static registry r;
    return r;
}

// An installed Shunt keeps its drivers in the plugin directory (env/plugin.h):
// each libshunt_drv_<name>.so defines shunt_vq_driver_<name>, the record the
// built-in list names. Called before the registry's lock is taken.
void load_installed_drivers()
{
    static std::once_flag once;
    std::call_once(once, [] {
        for (const env::plugin &p : env::open_plugins("shunt_drv_")) {
            const std::string sym = "shunt_vq_driver_" + p.name;
            auto *d = static_cast<const driver *>(::dlsym(p.handle, sym.c_str()));
            if (!d) {
                SHUNT_LOG(vq_reg_log, warning, "plugin %s defines no %s: not a driver", p.path.c_str(),
                          sym.c_str());
                continue;
            }
            register_driver(d);
        }
    });
}

} // namespace

void register_driver(const driver *d) noexcept
{
    if (!d || !d->name || d->size < sizeof(driver) || !d->probe || !d->open) {
        SHUNT_LOG(vq_reg_log, error, "refusing malformed driver registration");
        return;
    }
    if (d->abi_version != driver_abi_version) {
        SHUNT_LOG(vq_reg_log, error, "driver %s has ABI %u, expected %u: not registered", d->name,
                  d->abi_version, driver_abi_version);
        return;
    }
    registry &r = reg();
    std::lock_guard<std::mutex> g(r.lock);
    for (const driver *x : r.drivers) {
        if (x == d)
            return;
        if (std::strcmp(x->name, d->name) == 0) {
            SHUNT_LOG(vq_reg_log, error, "a second driver named %s: not registered", d->name);
            return;
        }
    }
    try {
        r.drivers.push_back(d);
        r.probed.push_back(false);
    } catch (...) {
        SHUNT_LOG(vq_reg_log, error, "out of memory registering driver %s", d->name);
    }
}

std::vector<const driver *> registered_drivers()
{
    load_installed_drivers();
    registry &r = reg();
    std::lock_guard<std::mutex> g(r.lock);
    return r.drivers;
}

int get_device_list(std::vector<device *> &out)
{
    // The first use of the layer initialises the environment (env.h); a bad
    // SHUNT_* value fails here, with the variable named in the log.
    if (int rc = env::ensure_init())
        return rc;
    load_installed_drivers();
    registry &r = reg();
    std::lock_guard<std::mutex> g(r.lock);
    for (std::size_t i = 0; i < r.drivers.size(); i++) {
        if (r.probed[i])
            continue;
        r.probed[i] = true;
        std::vector<device *> found;
        int rc = r.drivers[i]->probe(found);
        if (rc < 0) {
            SHUNT_LOG(vq_reg_log, warning, "driver %s: probe failed: %s", r.drivers[i]->name,
                      strerror(rc));
            continue;
        }
        for (device *d : found) {
            if (!d || !d->name)
                continue;
            d->drv = r.drivers[i];
            r.devices.push_back(d);
        }
    }
    out = r.devices;
    return static_cast<int>(out.size());
}

const char *device_driver_name(const device *dev)
{
    return dev && dev->drv && dev->drv->name ? dev->drv->name : "";
}

device *find_device(const char *name)
{
    if (!name)
        return nullptr;
    std::vector<device *> devs;
    get_device_list(devs);
    for (device *d : devs)
        if (std::strcmp(d->name, name) == 0)
            return d;
    return nullptr;
}

} // namespace shunt::vq
