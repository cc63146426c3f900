// Turns the command line, the config and the environment into the plan the root sends down the tree.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "hosts/placement.hpp"
#include "options.hpp"
#include "util/result.hpp"
#include "wire/messages.hpp"

namespace canopy {

// What the root stages for the job (docs/staging.md); the index itself is prepared while the tree starts.
struct StageSettings {
    std::vector<std::string> prefixes;   // may be empty when a manifest names them
    std::string manifest;                // empty: stage the prefixes' metadata only
};

struct RootPlan {
    wire::LaunchPlan plan;           // the template every child's plan is made from
    Placement placement;
    std::string listen_address;      // where the launcher waits for its children
    std::string host_source;         // "--sim-nodes", "--hostfile FILE", "PBS_NODEFILE", ...
    std::optional<double> timeout_seconds;
    bool label = false;
    bool timing = false;
    std::optional<std::string> timing_file;
    std::optional<std::string> trace_file;
    std::optional<std::string> bad_nodes_file;   // --bad-nodes: the nodes --health-check found bad
    std::string command_line;
    std::optional<StageSettings> stage;
};

// `environment` is the launcher's own (NAME=VALUE), `daemon_path` the local canopyd.
Result<RootPlan> make_root_plan(const Options& options, const Config& config,
                                const std::vector<std::string>& environment, const std::string& daemon_path);

// Where the local canopyd is: next to canopy when installed, or in the build tree's daemon/ folder.
Result<std::string> find_local_daemon(const std::string& launcher_path);

// Where libcanopy_interpose.so is: installed under libdir/canopy, or in the build tree's lib/interpose/.
Result<std::string> find_interposer(const std::string& launcher_path);

} // namespace canopy
