#include "pmix/pmix_module.hpp"

#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "build_config.hpp"
#include "proc/process.hpp"
#include "util/log.hpp"

namespace canopy {
namespace {

const PmixModule* g_module = nullptr;
std::optional<Error> g_load_error;

std::string module_path()
{
    if (std::string exe = own_executable(); !exe.empty()) {
        auto beside = std::filesystem::path(exe).parent_path() / "pmix" / "canopyd-pmix.so";   // a build tree
        std::error_code error;
        if (std::filesystem::exists(beside, error))
            return beside.string();
    }
    return std::string(CANOPY_LIBDIR) + "/canopy/canopyd-pmix.so";
}

Result<const PmixModule*> load()
{
    std::string path = module_path();
    // RTLD_LOCAL: the module's copies of the C++ runtime and of canopy's helpers stay its own.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle)
        return make_error("cannot load the PMIx server module: {}", ::dlerror());
    auto entry = reinterpret_cast<PmixModuleEntry>(::dlsym(handle, pmix_module_entry));
    if (!entry)
        return make_error("{} has no {}: not a canopy PMIx module", path, pmix_module_entry);
    const PmixModule* module = entry(&area_logger("pmix"));
    if (!module || module->abi != pmix_module_abi || !module->canopy_version ||
        std::strcmp(module->canopy_version, CANOPY_VERSION) != 0 || !module->start || !module->server_abandoned)
        return make_error("{} is from another canopy build (canopyd is {}); reinstall canopy", path, CANOPY_VERSION);
    return module;   // never unloaded: PMIx's threads and asio services live in it until exit
}

} // namespace

Result<const PmixModule*> load_pmix_module()
{
    if (g_module)
        return g_module;
    if (g_load_error)
        return *g_load_error;
    auto loaded = load();
    if (!loaded) {
        g_load_error = loaded.error();
        return loaded.error();
    }
    g_module = *loaded;
    return g_module;
}

bool loaded_pmix_server_abandoned() { return g_module && g_module->server_abandoned(); }

} // namespace canopy
