// canopy.toml: launch, tree and job settings, layered from built-in defaults up to an explicit --config file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collective/store_limit.hpp"
#include "util/pmix_mode.hpp"
#include "util/result.hpp"
#include "wire/health_check.hpp"

namespace canopy {

struct Config {
    std::string agent = "ssh"; // ssh | rsh | local | exec:CMD-with-%h
    std::string ssh_command = "ssh";
    std::vector<std::string> ssh_args = {"-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-x"};
    std::string rsh_command = "rsh";
    long fanout = 32;
    long window = 32;
    double connect_timeout = 30.0;        // seconds for a child to connect back
    double heartbeat_timeout = 30.0;      // seconds a tree link may stay silent before its peer is lost
    std::string daemon_path;              // canopyd on remote nodes; empty = same path as the local one
    std::string bind_address;             // address daemons listen on; empty = the one facing the parent
    double kill_grace = 3.0;              // SIGTERM -> SIGKILL grace, seconds
    std::string tmpdir;                   // base of per-job temp dirs; empty = $TMPDIR, /dev/shm or /tmp
    PmiInterfaces pmi = PmiInterfaces::all;  // [job] pmi: what every node serves its ranks
    PmixMode pmix = PmixMode::on_demand;  // [job] pmix: a PMIx server on every node for MPI and PMIx programs
    // [job] rank_store_limit: bytes one rank may keep in the job's key-value stores; 0 for no limit
    std::uint64_t rank_store_limit = default_rank_store_limit;
    // [bind]: how ranks are bound when the command line does not say (site profiles turn on what their job
    // scripts do by hand), and the CPUs the site keeps for the system, out of every binding.
    std::string cpu_bind = "none";
    std::string gpu_bind = "none";
    std::string mem_bind = "none";
    std::string reserved_cpus;            // a CPU list such as "0,52,104,156"
    std::vector<std::string> stage_prefixes;   // [stage] prefixes: absolute paths the ranks read from
    std::string stage_manifest;           // [stage] manifest: from `canopy stage record`; empty = none
    std::string stage_cache_dir = "/dev/shm";   // [stage] cache_dir: node-local base of the stage cache
    std::string stage_interposer;         // [stage] interposer: libcanopy_interpose.so; empty = next to canopy
    std::string fabric = "auto";          // [fabric] provider: how bulk data moves (docs/fabric.md)
    // [health]: --health-check's settings, and whether every job checks its nodes (docs/health-check.md).
    wire::HealthCheckSpec health;
    std::vector<std::string> loaded_from; // files that were read, in order, for --verbose
};

// Where system-wide files live; both are parameters so tests can point them anywhere.
struct ConfigSources {
    std::string system_dir; // installed sysconfdir/canopy; may be empty
    std::string source_dir; // the source tree's config/, for running from a build dir; may be empty
};

// Layers, later wins: built-in defaults < system_dir/canopy.toml (if present) < profile
// (system_dir/profiles/NAME.toml, else source_dir/profiles/NAME.toml) < user file
// ($XDG_CONFIG_HOME, else ~/.config, /canopy/canopy.toml, if present) < $CANOPY_CONFIG < explicit_file.
// A named profile, $CANOPY_CONFIG or explicit file that does not exist is an error.
Result<Config> load_config(const ConfigSources& dirs, const std::optional<std::string>& explicit_file,
                           const std::optional<std::string>& profile);

// Applies one TOML document over `base` and appends source_name to loaded_from. Errors are one line,
// "config FILE:LINE:COL: what is wrong", and unknown tables or keys come with a suggestion.
Result<Config> apply_config(std::string_view toml_text, std::string_view source_name, Config base);

} // namespace canopy
