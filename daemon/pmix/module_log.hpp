// The "pmix" logger of the server host's parts, and PMIx statuses as text for its lines.
#pragma once

#include <string>

#include <spdlog/fwd.h>

namespace canopy {

// canopyd's own "pmix" logger once use_pmix_logger (pmix_host.hpp) was called: canopyd-pmix.so's own copy of the
// logging setup is never configured.
spdlog::logger& pmix_log();

// "PMIX_ERR_TIMEOUT (-24)"
std::string pmix_error(int status);

} // namespace canopy
