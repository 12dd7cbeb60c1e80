/* Installed plugins: the driver and provider libraries of an installed Shunt.
 *
 * An installed Shunt puts its drivers (libshunt_drv_<name>.so) and fabric
 * providers (libshunt_prov_<name>.so) in a plugin directory, `shunt/` beside
 * libshunt_env.so (or SHUNT_PLUGIN_DIR), as rdma-core and libfabric keep
 * theirs: a consumer links only the layer libraries, and lib/vq and
 * lib/fabric open the plugins on first use. Programs built inside the tree
 * link the drivers and providers directly and find no plugin directory. */
#pragma once

#include <string>
#include <vector>

namespace shunt::env {

/** A plugin library that was opened. */
struct plugin {
    void *handle = nullptr; ///< dlopen() handle, never closed
    std::string name;       ///< the file name between the prefix and ".so", e.g. "shm"
    std::string path;       ///< the file opened
};

/** The plugin directory: SHUNT_PLUGIN_DIR if set, else `shunt` in the
 *  directory libshunt_env.so was loaded from. */
std::string plugin_dir();

/** Open every `lib<prefix><name>.so` in plugin_dir(), once per prefix per
 *  process (later calls return the same list). A file that fails to open is
 *  logged (component env, warning) and left out. Thread-safe.
 *  @param prefix e.g. "shunt_drv_" or "shunt_prov_".
 *  @return the plugins opened, sorted by name; empty without a directory. */
std::vector<plugin> open_plugins(const std::string &prefix);

} // namespace shunt::env
