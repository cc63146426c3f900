// canopyd-pmix.so: the PMIx server host, the only part of canopyd that links libpmix. canopyd loads it when a
// node's server must start, so a daemon whose ranks never use PMIx never maps libpmix, libevent and hwloc: that
// dynamic loading was a fifth of a daemon's start-up CPU.
#pragma once

#include <cstdint>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <spdlog/fwd.h>

#include "pmix/pmix_host.hpp"
#include "util/result.hpp"

namespace canopy {

// What the module hands canopyd. Both sides come from one build (the module sits next to canopyd), so C++ types
// cross; `abi` and `canopy_version` catch a module from another build. The module has its own copies of asio's
// code, but asio finds an io_context's services by type name, so its timers and posts use canopyd's reactor.
struct PmixModule {
    std::uint32_t abi = 0;
    const char* canopy_version = nullptr;
    Result<std::unique_ptr<PmixHost>> (*start)(boost::asio::io_context& io, PmixJob job, JobExchange& exchange,
                                               PmixDaemonCalls calls) = nullptr;
    bool (*server_abandoned)() = nullptr;
};

inline constexpr std::uint32_t pmix_module_abi = 3;
inline constexpr const char* pmix_module_entry = "canopy_pmix_module";
using PmixModuleEntry = const PmixModule* (*)(spdlog::logger* log);

// Loads canopyd-pmix.so once: from beside this executable's build (daemon/pmix/), else from the install's
// libdir/canopy. Later calls return the same module, or the same error.
Result<const PmixModule*> load_pmix_module();

// Whether a loaded module's server skipped its finalize (see pmix_server_abandoned); false if none was loaded.
bool loaded_pmix_server_abandoned();

} // namespace canopy
