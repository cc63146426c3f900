// Loading libfabric at run time.
#include "fabric/fabric_api.hpp"

#include <dlfcn.h>

#include <string>

#include "util/library_symbols.hpp"

namespace canopy::fabric {
namespace {

Result<Api> load()
{
    void* library = ::dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char* why = ::dlerror();
        return make_error("libfabric is not installed on this node ({})", why ? why : "libfabric.so.1 not found");
    }
    Api api;
    LibrarySymbols symbols(library);
    symbols.find(api.getinfo, "fi_getinfo");
    symbols.find(api.freeinfo, "fi_freeinfo");
    symbols.find(api.dupinfo, "fi_dupinfo");
    symbols.find(api.open_fabric, "fi_fabric");
    symbols.find(api.strerror, "fi_strerror");
    symbols.find(api.version, "fi_version");
    // The library stays loaded: providers it started keep threads and handlers in it.
    if (symbols.missing())
        return make_error("libfabric.so.1 lacks {}, which canopy needs (too old?)", symbols.missing());
    if (api.version() < api_version)
        return make_error("libfabric {}.{} is older than the 1.9 canopy needs", FI_MAJOR(api.version()),
                          FI_MINOR(api.version()));
    return api;
}

} // namespace

Result<const Api*> load_api()
{
    static const Result<Api> loaded = load();
    if (!loaded)
        return loaded.error();
    return &*loaded;
}

SignalHandlersKept::SignalHandlersKept()
{
    // Faults are not held (held_): a fault while they are blocked would kill the process without a handler.
    for (std::size_t i = 0; i < std::size(kept); ++i)
        sigaction(kept[i], nullptr, &before_[i]);
}

SignalHandlersKept::~SignalHandlersKept()
{
    for (std::size_t i = 0; i < std::size(kept); ++i)
        sigaction(kept[i], &before_[i], nullptr);
}   // then held_ lets the held signals through

} // namespace canopy::fabric
