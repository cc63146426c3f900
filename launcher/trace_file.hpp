// --trace: the job's startup as Chrome trace events, one track per node and per rank (Perfetto, chrome://tracing).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "timing/report.hpp"
#include "wire/messages.hpp"

namespace canopy {

// The launcher's steps on its own track, then each node (a process) with its daemon's events and one thread per
// rank: its run from spawn to exit as a slice, its marks as points or slices.
nlohmann::json chrome_trace(const timing::JobTiming& timing, const std::vector<wire::TraceEvent>& events,
                            const std::vector<std::string>& hosts);

} // namespace canopy
