// The one symbol canopyd-pmix.so exports (pmix_module.version).
#include "build_config.hpp"
#include "pmix/pmix_module.hpp"

extern "C" __attribute__((visibility("default"))) const canopy::PmixModule* canopy_pmix_module(spdlog::logger* log)
{
    static const canopy::PmixModule module{canopy::pmix_module_abi, CANOPY_VERSION, canopy::start_pmix_host,
                                           canopy::pmix_server_abandoned};
    canopy::use_pmix_logger(log);
    return &module;
}
