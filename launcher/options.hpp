// canopy's command line: a table-driven parser that accepts mpiexec (Hydra, Open MPI, PALS) spellings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "util/pmix_mode.hpp"
#include "util/result.hpp"

namespace canopy {

// One --env/-genv/-x request; without a value the variable is copied from the launcher's environment.
struct EnvAssignment {
    std::string name;
    std::optional<std::string> value;
};

// Which of the launcher's environment variables the ranks inherit.
enum class EnvMode { all, none, list };

// One program and what is given with it. An MPMD job has several: `canopy -n 1 ./a : -n 8 ./b`, or the lines of
// -configfile. Options before the first program that only concern a program (-n, -env, -x, --wdir) are the first
// program's; those after a ':' the next program's.
struct AppOptions {
    std::optional<long> ranks;
    std::vector<EnvAssignment> env;   // in command-line order, over the job's (-genv) settings
    std::optional<std::string> wdir;
    std::vector<std::string> command; // program and its arguments
};

struct Options {
    std::vector<AppOptions> apps{1};  // at least one
    std::optional<long> ppn;
    std::optional<std::string> hostfile, hosts;
    long sim_nodes = 0;
    std::optional<std::string> synthetic_ranks;   // --synthetic-ranks, canonical (synthetic/synthetic_exchange.hpp)
    std::optional<long> nnodes;   // torchrun's --nnodes: the first N hosts
    std::optional<std::string> exclude;   // --exclude HOSTS|FILE: hosts left out of the allocation
    bool standalone = false;      // torchrun's --standalone: this machine alone, whatever the allocation says
    std::vector<EnvAssignment> env; // -genv: every program's ranks, in command-line order
    EnvMode env_mode = EnvMode::all;
    std::vector<std::string> env_list;
    bool label = false, line_buffer = false;
    std::optional<std::string> cpu_bind;   // unset: the config's [bind] cpu_bind
    long depth = 1;
    std::optional<std::string> gpu_bind;   // unset: closest when a count per rank is given, else [bind] gpu_bind
    std::optional<long> gpus_per_rank, gpu_tiles_per_rank;
    std::optional<std::string> mem_bind;   // unset: the config's [bind] mem_bind
    std::optional<std::string> topology_file;   // --topology: plan bindings from this hwloc XML
    bool oversubscribe = false;     // a binding may put two ranks on one CPU
    bool report_bindings = false;
    std::optional<double> timeout_seconds;
    std::optional<PmixMode> pmix;   // --pmix on|eager|off; unset: the config's [job] pmix
    std::optional<PmiInterfaces> pmi;   // --pmi all|pmix|simple|none; unset: the config's [job] pmi
    long max_restarts = 0;  // --max-restarts: how often a failed rank restarts every rank in place
    long spawn_slots = 0;   // --spawn-slots: ranks PMIx_Spawn may start on each node beyond the job's own
    std::optional<std::uint64_t> rank_store_limit;   // --rank-store-limit; unset: the config's [job] rank_store_limit
    std::vector<std::string> stage_prefixes;   // --stage, comma-separated and repeatable
    std::optional<std::string> stage_manifest;
    std::optional<std::string> fabric;   // --fabric auto|off|PROVIDER; unset: the config's [fabric] provider
    std::optional<long> fanout, window;
    std::optional<std::string> agent;
    bool timing = false;
    std::vector<std::pair<std::string, std::string>> output_marks;   // --mark-on-output REGEX=NAME
    std::optional<std::string> timing_file;   // --timing=FILE: FILE.html a page, anything else JSON
    long timing_top = 10;                     // --timing-top K: the slowest daemons or ranks named per phase
    std::optional<std::string> trace_file;   // --trace=FILE.json: Chrome trace-event timeline
    std::optional<std::string> health_check;   // --health-check[=CMD]: "" for the built-in checks alone
    std::optional<std::string> bad_nodes_file; // --bad-nodes FILE
    std::optional<std::string> config_file, profile;
    int verbosity = 0;
    bool dry_run = false;   // print what would be started, start nothing
    bool help = false, version = false;

    // All programs' ranks, if every program gives -n.
    std::optional<long> total_ranks() const;
};

// Parses the arguments after argv[0]. Errors are one line without a "canopy:" prefix.
Result<Options> parse_options(const std::vector<std::string>& args);

// "A,B,C" of absolute directories (--stage); the error names `option`.
Result<std::vector<std::string>> parse_directory_list(std::string_view list, std::string_view option);

// The --help text, grouped by topic, with examples at the end.
std::string help_text();

} // namespace canopy
