// The server host's logger: canopyd's when loaded as canopyd-pmix.so.
#include "pmix/module_log.hpp"

#include <fmt/format.h>
#include <pmix.h>
#include <spdlog/logger.h>

#include "pmix/pmix_host.hpp"
#include "util/log.hpp"

namespace canopy {
namespace {

spdlog::logger* g_log = nullptr;

} // namespace

spdlog::logger& pmix_log() { return g_log ? *g_log : area_logger("pmix"); }

void use_pmix_logger(spdlog::logger* log) { g_log = log; }

std::string pmix_error(int status) { return fmt::format("{} ({})", PMIx_Error_string(status), status); }

} // namespace canopy
