// Named spdlog loggers, one per area (tree, spawn, io, ...); binaries choose the sink, the library never does.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/logger.h>

namespace canopy {

// Called once by each binary's main: every area logger writes to stderr as "PREFIX AREA LEVEL: message".
// verbosity 0 shows warnings and errors, 1 adds info, 2 and more add debug.
void init_logging(std::string_view prefix, int verbosity);

// The logger for one area; before init_logging it discards everything.
spdlog::logger& area_logger(const std::string& area);

} // namespace canopy
