// canopy's options: one table maps every mpiexec-style spelling to a handler and to its --help line, and the handlers
// that check and store each value.
#include "option_table.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <regex>
#include <string_view>
#include <system_error>
#include <utility>

#include "hosts/placement.hpp"
#include "synthetic/synthetic_exchange.hpp"
#include "timing/mark_name.hpp"
#include "timing/sketch.hpp"
#include "tree/agent.hpp"
#include "util/byte_size.hpp"

namespace canopy::option_parsing {
namespace {

constexpr double max_seconds = 365.0 * 24 * 3600;

// True when `arg` is itself an option, so it cannot be the value of the option before it.
bool looks_like_option(std::string_view arg)
{
    if (arg.size() < 2 || arg[0] != '-') {
        return false;
    }
    if (arg.starts_with("--")) {
        arg = arg.substr(0, arg.find('='));
    }
    return find_option(arg) != nullptr;
}

Result<std::string> take_value(ArgCursor& cursor)
{
    if (cursor.inline_value) {
        std::string value = std::move(*cursor.inline_value);
        cursor.inline_value.reset();
        if (value.empty()) {
            return make_error("option {} needs a value", cursor.spelling);
        }
        return value;
    }
    if (cursor.next >= cursor.args.size() || looks_like_option(cursor.args[cursor.next])) {
        return make_error("option {} needs a value", cursor.spelling);
    }
    return cursor.args[cursor.next++];
}

// An integer of at least `minimum`; the error names the option as typed.
Result<long> parse_count(std::string_view spelling, std::string_view text, long minimum = 1,
                         long maximum = std::numeric_limits<long>::max())
{
    long number = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, number);
    if (ec == std::errc::result_out_of_range) {
        return make_error("{} value '{}' is too large", spelling, text);
    }
    if (ec != std::errc{} || ptr != end) {
        return make_error("{} expects an integer, got '{}'", spelling, text);
    }
    if (number < minimum) {
        return make_error("{} must be at least {}, got {}", spelling, minimum, number);
    }
    if (number > maximum) {
        return make_error("{} must be at most {}, got {}", spelling, maximum, number);
    }
    return number;
}

Result<double> parse_seconds(std::string_view spelling, std::string_view text)
{
    double seconds = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, seconds);
    if (ec != std::errc{} || ptr != end || !std::isfinite(seconds)) {
        return make_error("{} expects a number of seconds, got '{}'", spelling, text);
    }
    if (seconds <= 0) {
        return make_error("{} must be greater than 0 seconds, got {}", spelling, text);
    }
    if (seconds > max_seconds) {   // beyond it the timers' nanosecond clock would overflow long before
        return make_error("{} must be at most {:.0f} seconds (a year), got {}", spelling, max_seconds, text);
    }
    return seconds;
}

// A binding spec, with Slurm's map_gpu:0,1,2 or map_mem:0,1 (one per task, in order) stored as canopy's list:0:1:2.
Status store_binding(std::optional<std::string>& field, ArgCursor& cursor, std::string_view slurm_prefix)
{
    auto spec = take_value(cursor);
    if (!spec)
        return spec.error();
    if (spec->starts_with(slurm_prefix)) {
        std::string list = "list:" + spec->substr(slurm_prefix.size());
        std::replace(list.begin() + 5, list.end(), ',', ':');
        field = std::move(list);
    } else {
        field = std::move(*spec);
    }
    return {};
}

Status store_count(std::optional<long>& field, ArgCursor& cursor, long minimum = 1,
                   long maximum = std::numeric_limits<long>::max())
{
    auto text = take_value(cursor);
    if (!text) {
        return text.error();
    }
    auto number = parse_count(cursor.spelling, *text, minimum, maximum);
    if (!number) {
        return number.error();
    }
    field = *number;
    return {};
}

Status store_count(long& field, ArgCursor& cursor, long minimum = 1, long maximum = std::numeric_limits<long>::max())
{
    std::optional<long> parsed;
    Status status = store_count(parsed, cursor, minimum, maximum);
    if (status) {
        field = *parsed;
    }
    return status;
}

// One of a fixed set of words, read by `parse`; anything else is an error listing the choices.
template <typename T>
Status store_choice(std::optional<T>& field, ArgCursor& cursor, std::optional<T> (*parse)(std::string_view),
                    const char* choices)
{
    auto value = take_value(cursor);
    if (!value)
        return value.error();
    auto parsed = parse(*value);
    if (!parsed)
        return make_error("{} takes {}, got '{}'", cursor.spelling, choices, *value);
    field = *parsed;
    return {};
}

Status store_string(std::optional<std::string>& field, ArgCursor& cursor)
{
    auto text = take_value(cursor);
    if (!text) {
        return text.error();
    }
    field = std::move(*text);
    return {};
}

Status check_env_name(std::string_view spelling, std::string_view name, std::string_view arg)
{
    if (name.empty()) {
        return make_error("option {} needs NAME=VALUE, got '{}'", spelling, arg);
    }
    return {};
}

// --env/-env/-genv: "K=V" in one argument, or Hydra's "K V" in two.
Status add_env_pair(std::vector<EnvAssignment>& env, ArgCursor& cursor)
{
    auto first = take_value(cursor);
    if (!first) {
        return first.error();
    }
    auto eq = first->find('=');
    if (eq != std::string::npos) {
        std::string name = first->substr(0, eq);
        if (Status status = check_env_name(cursor.spelling, name, *first); !status) {
            return status;
        }
        env.push_back({std::move(name), first->substr(eq + 1)});
        return {};
    }
    if (cursor.next >= cursor.args.size()) {
        return make_error("option {} needs a value for {}; use {} {}=VALUE or {} {} VALUE", cursor.spelling, *first,
                          cursor.spelling, *first, cursor.spelling, *first);
    }
    env.push_back({*first, cursor.args[cursor.next++]});
    return {};
}

// Open MPI's -x: "K=V" sets a value, a bare "K" copies it from the launcher's environment.
Status add_env_export(ParseState& state, ArgCursor& cursor)
{
    auto arg = take_value(cursor);
    if (!arg) {
        return arg.error();
    }
    auto eq = arg->find('=');
    std::string name = arg->substr(0, eq);
    if (Status status = check_env_name(cursor.spelling, name, *arg); !status) {
        return status;
    }
    if (eq == std::string::npos) {
        state.program().env.push_back({std::move(name), std::nullopt});
    } else {
        state.program().env.push_back({std::move(name), arg->substr(eq + 1)});
    }
    return {};
}

Status set_env_list(ParseState& state, ArgCursor& cursor)
{
    auto arg = take_value(cursor);
    if (!arg) {
        return arg.error();
    }
    std::vector<std::string> names;
    std::string_view rest = *arg;
    while (!rest.empty()) {
        auto comma = rest.find(',');
        std::string_view name = rest.substr(0, comma);
        if (!name.empty()) {
            names.emplace_back(name);
        }
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
    if (names.empty()) {
        return make_error("option {} needs a comma-separated list of variable names, got '{}'", cursor.spelling,
                          *arg);
    }
    state.options.env_mode = EnvMode::list;
    state.options.env_list = std::move(names);
    return {};
}

Status set_timeout(ParseState& state, ArgCursor& cursor)
{
    auto text = take_value(cursor);
    if (!text) {
        return text.error();
    }
    auto seconds = parse_seconds(cursor.spelling, *text);
    if (!seconds) {
        return seconds.error();
    }
    state.options.timeout_seconds = *seconds;
    return {};
}

// "--health-check" alone runs the built-in checks (and [health] command, if set); "--health-check=CMD" runs CMD too.
Status set_health_check(ParseState& state, ArgCursor& cursor)
{
    state.options.health_check = std::string();
    if (cursor.inline_value) {
        if (cursor.inline_value->empty())
            return make_error("option {}= needs a command, e.g. {}=/opt/site/nhc", cursor.spelling, cursor.spelling);
        state.options.health_check = std::move(*cursor.inline_value);
        cursor.inline_value.reset();
    }
    return {};
}

// "--timing" alone turns timing on; "--timing=FILE" also names the report file.
Status set_timing(ParseState& state, ArgCursor& cursor)
{
    state.options.timing = true;
    if (cursor.inline_value) {
        if (cursor.inline_value->empty()) {
            return make_error("option {}= needs a file name, e.g. {}=timing.json", cursor.spelling, cursor.spelling);
        }
        state.options.timing_file = std::move(*cursor.inline_value);
        cursor.inline_value.reset();
    }
    return {};
}

// torchrun's --nnodes: N, or MIN:MAX with MIN == MAX; an elastic range is refused.
Status set_nnodes(ParseState& state, ArgCursor& cursor)
{
    auto text = take_value(cursor);
    if (!text)
        return text.error();
    std::string_view value = *text;
    if (auto colon = value.find(':'); colon != std::string_view::npos) {
        if (value.substr(0, colon) != value.substr(colon + 1))
            return make_error("{} {}: canopy runs a fixed set of nodes and does not resize a job; give one number",
                              cursor.spelling, value);
        value = value.substr(0, colon);
    }
    auto count = parse_count(cursor.spelling, value);
    if (!count)
        return count.error();
    state.options.nnodes = *count;
    return {};
}


} // namespace

const OptionSpec* find_option(std::string_view spelling)
{
    for (const auto& spec : option_table()) {
        if (std::find(spec.spellings.begin(), spec.spellings.end(), spelling) != spec.spellings.end()) {
            return &spec;
        }
    }
    return nullptr;
}

const std::vector<OptionSpec>& option_table()
{
    // clang-format off
    static const std::vector<OptionSpec> table = {
        // Ranks and hosts
        {{"-n", "-np", "--np", "--n"}, Takes::value, "N", "Ranks and hosts",
         "number of ranks to start (with several programs, each program's own)",
         [](ParseState& s, ArgCursor& c) { return store_count(s.program().ranks, c); }, true},
        {{"-ppn", "--ppn", "-N", "--npernode", "-npernode"}, Takes::value, "N", "Ranks and hosts",
         "ranks per node",
         [](ParseState& s, ArgCursor& c) { return store_count(s.options.ppn, c, 1, max_ranks_per_node); }},
        {{"--hostfile", "-hostfile", "-f", "-machinefile", "--machinefile"}, Takes::value, "FILE", "Ranks and hosts",
         "read hosts from FILE, one per line (e.g. $PBS_NODEFILE)",
         [](ParseState& s, ArgCursor& c) {
             s.hostfile_spelling = c.spelling;
             return store_string(s.options.hostfile, c);
         }},
        {{"--hosts", "-hosts", "--host", "-host"}, Takes::value, "LIST", "Ranks and hosts",
         "comma-separated hosts, e.g. n1,n2 or nid[001-004]; n1:2 gives n1 two slots",
         [](ParseState& s, ArgCursor& c) {
             s.hosts_spelling = c.spelling;
             return store_string(s.options.hosts, c);
         }},
        {{"--nproc-per-node", "--nproc_per_node"}, Takes::value, "N", "Ranks and hosts",
         "torchrun's name for --ppn",
         [](ParseState& s, ArgCursor& c) {
             std::string_view word = c.inline_value ? std::string_view(*c.inline_value)
                                     : c.next < c.args.size() ? std::string_view(c.args[c.next])
                                                              : std::string_view();
             if (word == "auto" || word == "gpu" || word == "cpu" || word == "xpu")
                 return Status{make_error("{} {}: canopy needs the number of ranks per node, e.g. {} 4", c.spelling,
                                          word, c.spelling)};
             return store_count(s.options.ppn, c, 1, max_ranks_per_node);
         }},
        {{"--nnodes"}, Takes::value, "N", "Ranks and hosts",
         "run on the first N hosts of the allocation (torchrun's N or N:N; canopy does not resize a job)",
         set_nnodes},
        {{"--exclude"}, Takes::value, "HOSTS|FILE", "Ranks and hosts",
         "leave these hosts out of the allocation: a hostlist (n[1-4],n9) or a file of one host a line, such as "
         "--bad-nodes writes (Slurm's --exclude)",
         [](ParseState& s, ArgCursor& c) { return store_string(s.options.exclude, c); }},
        {{"--standalone"}, Takes::nothing, "", "Ranks and hosts",
         "run on this machine alone, whatever PBS or Slurm allocated (torchrun)",
         [](ParseState& s, ArgCursor& c) {
             s.options.standalone = true;
             s.standalone_spelling = c.spelling;
             return Status{};
         }},
        {{"--sim-nodes"}, Takes::value, "N", "Ranks and hosts",
         "simulate N nodes on this machine (to try a tree without a cluster)",
         [](ParseState& s, ArgCursor& c) {
             s.sim_nodes_spelling = c.spelling;
             return store_count(s.options.sim_nodes, c, 1, max_simulated_nodes);
         }},
        {{"--synthetic-ranks"}, Takes::value, "R[:BYTES]", "Ranks and hosts",
         "test the exchange at scale: each node drives R in-process ranks through PMI (or :pmix, :dmodex) and starts "
         "no program (docs/scale.md)",
         [](ParseState& s, ArgCursor& c) {
             auto text = take_value(c);
             if (!text)
                 return Status{text.error()};
             auto spec = synthetic::parse_spec(*text);
             if (!spec)
                 return Status{make_error("{} {}", c.spelling, spec.error().message)};
             s.options.synthetic_ranks = synthetic::to_string(*spec);
             return Status{};
         }},

        {{"-m"}, Takes::value, "MODULE", "Job",
         "run python3 -m MODULE with the arguments that follow, as torchrun -m does; ends canopy's options",
         [](ParseState& s, ArgCursor& c) {
             auto module = take_value(c);
             if (!module)
                 return Status{module.error()};
             auto& command = s.program().command;
             command = {"python3", "-m", *module};
             auto end = std::find(c.args.begin() + static_cast<std::ptrdiff_t>(c.next), c.args.end(), ":");
             command.insert(command.end(), c.args.begin() + static_cast<std::ptrdiff_t>(c.next), end);
             c.next = static_cast<std::size_t>(end - c.args.begin());
             return Status{};
         }, true},
        {{"-configfile", "--configfile"}, Takes::value, "FILE", "Job",
         "run the programs FILE lists, one per line as after a ':' (-n N [-env K V] [--wdir DIR] PROGRAM ARGS), "
         "as Hydra does; '#' starts a comment line",
         [](ParseState& s, ArgCursor& c) { return store_string(s.configfile, c); }},

        // Environment
        {{"--env", "-env"}, Takes::env_pair, "K=V | K V", "Rank environment",
         "set K to V in the ranks' environment (with several programs, the ranks of the program it is given with)",
         [](ParseState& s, ArgCursor& c) { return add_env_pair(s.program().env, c); }, true},
        {{"-genv", "--genv"}, Takes::env_pair, "K=V | K V", "Rank environment",
         "set K to V in every rank's environment, whichever program it runs",
         [](ParseState& s, ArgCursor& c) { return add_env_pair(s.options.env, c); }},
        {{"-x"}, Takes::value, "K[=V]", "Rank environment",
         "set K (Open MPI style); without =V copy K from this environment; which ranks: as --env",
         add_env_export, true},
        {{"--envall", "-envall", "-genvall"}, Takes::nothing, "", "Rank environment",
         "ranks inherit this whole environment (default)",
         [](ParseState& s, ArgCursor&) {
             s.options.env_mode = EnvMode::all;
             s.options.env_list.clear();
             return Status{};
         }},
        {{"--envnone", "-envnone", "-genvnone"}, Takes::nothing, "", "Rank environment",
         "ranks inherit nothing but what --env/-x set",
         [](ParseState& s, ArgCursor&) {
             s.options.env_mode = EnvMode::none;
             s.options.env_list.clear();
             return Status{};
         }},
        {{"--envlist", "-envlist", "-genvlist"}, Takes::value, "A,B,C", "Rank environment",
         "ranks inherit only the named variables",
         set_env_list},

        // Output
        {{"-l", "--label", "--tag-output", "-prepend-rank", "--prepend-rank"}, Takes::nothing, "", "Output",
         "prefix each output line with its rank, as '[3] text'; '[3+] ' labels the rest of a line canopy had to "
         "end (a prompt or progress bar that held other ranks' output back 1 s, or 10 s in all)",
         [](ParseState& s, ArgCursor&) { s.options.label = true; return Status{}; }},
        {{"--line-buffer", "--line-buffered"}, Takes::nothing, "", "Output",
         "print whole lines only: a partial line waits for its newline (default: output as it comes, a partial "
         "line such as a progress bar or a prompt within 100 ms). Either way a line of any length comes whole: "
         "other ranks' output waits behind it, held in their pipes",
         [](ParseState& s, ArgCursor&) { s.options.line_buffer = true; return Status{}; }},

        // Binding
        {{"--cpu-bind", "-cpu-bind"}, Takes::value, "SPEC", "Binding",
         "bind ranks to CPUs: none (default), core (a core each), depth (--depth CPUs each), numa or socket (a "
         "whole domain each, ranks in blocks), gpu (the cores nearest the rank's GPUs, shared out), or "
         "list:0-3:4-7 (a list per local rank). Each node binds from its own topology (hwloc)",
         [](ParseState& s, ArgCursor& c) { return store_string(s.options.cpu_bind, c); }},
        {{"--gpu-bind", "-gpu-bind"}, Takes::value, "SPEC", "Binding",
         "bind ranks to GPUs: none (default), closest (those nearest the rank's CPUs, else spread over the node's "
         "packages and NUMA domains by where they sit), or list:0,1:2,3 (tiles as 0.1); sets CUDA_VISIBLE_DEVICES, "
         "ROCR_VISIBLE_DEVICES or ZE_AFFINITY_MASK, and CANOPY_GPUS. Slurm's spellings work: map_gpu:0,1 is "
         "list:0:1, per_task:2 is closest with 2 GPUs a rank, and verbose, in front adds --report-bindings",
         [](ParseState& s, ArgCursor& c) {
             Status stored = store_binding(s.options.gpu_bind, c, "map_gpu:");
             if (stored && s.options.gpu_bind->starts_with("verbose,")) {
                 s.options.gpu_bind->erase(0, 8);
                 s.options.report_bindings = true;
             }
             if (stored && s.options.gpu_bind->starts_with("per_task:")) {
                 auto count = parse_count("--gpu-bind per_task", s.options.gpu_bind->substr(9), 1, 4096);
                 if (!count)
                     return Status{count.error()};
                 s.options.gpus_per_rank = *count;
                 s.options.gpu_bind = "closest";
             }
             return stored;
         }},
        {{"--gpus-per-rank", "-gpus-per-proc", "--gpus-per-task"}, Takes::value, "N", "Binding",
         "whole GPUs per rank (default 1 when binding GPUs); implies --gpu-bind closest when that is not given",
         [](ParseState& s, ArgCursor& c) { return store_count(s.options.gpus_per_rank, c); }},
        {{"--gpu-tiles-per-rank", "-gpu-subdevs-per-proc"}, Takes::value, "N", "Binding",
         "GPU tiles per rank, on nodes whose GPUs have tiles (their default: one tile each); implies --gpu-bind "
         "closest when that is not given",
         [](ParseState& s, ArgCursor& c) { return store_count(s.options.gpu_tiles_per_rank, c); }},
        {{"--mem-bind", "-mem-bind"}, Takes::value, "SPEC", "Binding",
         "bind ranks' memory: none (default), local (the NUMA domains of the rank's CPUs) or list:0:0:1:1 (NUMA "
         "nodes per local rank); Slurm's map_mem:0,1 is list:0:1",
         [](ParseState& s, ArgCursor& c) { return store_binding(s.options.mem_bind, c, "map_mem:"); }},
        {{"--topology", "-topology"}, Takes::value, "FILE", "Binding",
         "plan every node's bindings from this hwloc XML file (lstopo --of xml), as HWLOC_XMLFILE does for hwloc's "
         "tools: for a node type this machine is not. Every variable is set; CPUs this machine lacks are not bound",
         [](ParseState& s, ArgCursor& c) { return store_string(s.options.topology_file, c); }},
        {{"--depth", "-d", "-depth"}, Takes::value, "D", "Binding",
         "CPUs per rank, used by --cpu-bind depth (default 1)",
         [](ParseState& s, ArgCursor& c) { return store_count(s.options.depth, c); }},
        {{"--oversubscribe", "-oversubscribe"}, Takes::nothing, "", "Binding",
         "let a binding put more than one rank on a CPU or GPU (refused otherwise: a wrapped core or depth binding, "
         "overlapping lists, more ranks than GPUs)",
         [](ParseState& s, ArgCursor&) { s.options.oversubscribe = true; return Status{}; }},
        {{"--bind-to", "-bind-to"}, Takes::value, "WHAT", "Binding",
         "Open MPI's and Hydra's spelling of --cpu-bind: none, core, numa or socket (package)",
         [](ParseState& s, ArgCursor& c) {
             auto what = take_value(c);
             if (!what)
                 return Status{what.error()};
             if (*what == "package")
                 *what = "socket";
             if (*what != "none" && *what != "core" && *what != "numa" && *what != "socket")
                 return Status{make_error("{} {}: canopy binds to none, core, numa or socket (package); for other "
                                          "shapes use --cpu-bind depth or list:...",
                                          c.spelling, *what)};
             s.options.cpu_bind = std::move(*what);
             return Status{};
         }},
        {{"--report-bindings", "-report-bindings"}, Takes::nothing, "", "Binding",
         "print a table per node as it starts its ranks: each rank's CPUs, NUMA nodes, GPUs and NICs",
         [](ParseState& s, ArgCursor&) { s.options.report_bindings = true; return Status{}; }},

        // Job
        {{"--wdir", "-wdir", "--wd", "-wd", "--cwd"}, Takes::value, "DIR", "Job",
         "run ranks in DIR, where a relative PROGRAM (bin/app) is found too (default: the current directory; with "
         "several programs, each program's own)",
         [](ParseState& s, ArgCursor& c) { return store_string(s.program().wdir, c); }, true},
        {{"--timeout", "-timeout"}, Takes::value, "SECONDS", "Job",
         "stop the job after SECONDS (fractions allowed)",
         set_timeout},
        {{"--pmi", "-pmi"}, Takes::value, "all|pmix|simple|none", "Job",
         "what each node serves its ranks: all (default) serves PMIx for Open MPI and simple PMI (PMI-1, PMI-2 over "
         "PMI_FD) for MPICH, Intel MPI and MVAPICH; a rank sees variables only for what is served",
         [](ParseState& s, ArgCursor& c) {
             return store_choice(s.options.pmi, c, parse_pmi_interfaces, "all, pmix, simple or none");
         }},
        {{"--pmix"}, Takes::value, "on|eager|off", "Job",
         "PMIx server for MPI and PMIx programs: on (default) starts it when a rank first connects, eager before "
         "the ranks, off never",
         [](ParseState& s, ArgCursor& c) { return store_choice(s.options.pmix, c, parse_pmix_mode, "on, eager or off"); }},
        {{"--spawn-slots"}, Takes::value, "N", "Job",
         "ranks that PMIx_Spawn / MPI_Comm_spawn may start on each node, beyond the job's own; default 0: a spawn "
         "fails and says so",
         [](ParseState& s, ArgCursor& c) { return store_count(s.options.spawn_slots, c, 0); }},
        {{"--rank-store-limit"}, Takes::value, "SIZE", "Job",
         "what one rank may keep in the job's key-value stores (PMI and PMIx puts and publishes, the canopy store), "
         "such as 64MiB, or 0 for no limit (config default 16MiB); a rank going past it ends the job",
         [](ParseState& s, ArgCursor& c) {
             auto text = take_value(c);
             if (!text)
                 return Status{text.error()};
             auto size = parse_byte_size(*text);
             if (!size)
                 return Status{make_error("{}: {}", c.spelling, size.error().message)};
             s.options.rank_store_limit = *size;
             return Status{};
         }},

        // Tree and launch agent
        {{"--fanout"}, Takes::value, "K", "Tree and launch agent",
         "children per daemon in the launch tree (config default 32)",
         [](ParseState& s, ArgCursor& c) { return store_count(s.options.fanout, c); }},
        {{"--window"}, Takes::value, "W", "Tree and launch agent",
         "children each daemon starts at once (config default 32)",
         [](ParseState& s, ArgCursor& c) { return store_count(s.options.window, c); }},
        {{"--agent", "--launcher", "-launcher", "--rsh-agent"}, Takes::value, "SPEC", "Tree and launch agent",
         "how daemons start: ssh, rsh, local, or exec:CMD (%h: the host, else first)",
         [](ParseState& s, ArgCursor& c) { return store_string(s.options.agent, c); }},
        {{"-launcher-exec", "--launcher-exec"}, Takes::value, "CMD", "Tree and launch agent",
         "start daemons as CMD HOST canopyd ..., as Hydra does (--agent exec:CMD)",
         [](ParseState& s, ArgCursor& c) {
             auto command = take_value(c);
             if (!command) {
                 return Status{command.error()};
             }
             s.options.agent = "exec:" + *command;
             return Status{};
         }},

        // Staging
        {{"--stage"}, Takes::value, "DIR[,DIR...]", "File staging",
         "serve the ranks' file lookups under these prefixes from node caches",
         [](ParseState& s, ArgCursor& c) {
             auto list = take_value(c);
             if (!list)
                 return Status{list.error()};
             auto dirs = parse_directory_list(*list, c.spelling);
             if (!dirs)
                 return Status{dirs.error()};
             s.options.stage_prefixes.insert(s.options.stage_prefixes.end(), dirs->begin(), dirs->end());
             return Status{};
         }},
        {{"--stage-manifest"}, Takes::value, "FILE", "File staging",
         "stage ahead what FILE lists (a missing FILE: on demand, then written)",
         [](ParseState& s, ArgCursor& c) { return store_string(s.options.stage_manifest, c); }},
        {{"--fabric"}, Takes::value, "auto|off|PROVIDER", "File staging",
         "how bulk data (staged files, fence results and store values of 64 KiB or more) moves down the tree: "
         "auto (default) the best libfabric provider where nodes have fabric "
         "hardware (cxi, verbs;ofi_rxm, efa...) else the tree's TCP links, off those links always, or a provider "
         "by name such as shm (fails if absent)",
         [](ParseState& s, ArgCursor& c) { return store_string(s.options.fabric, c); }},

        // Timing
        {{"--timing"}, Takes::optional_inline, "[=FILE.json|FILE.html]", "Timing",
         "report startup timing; with =FILE also write it: FILE.html a self-contained page with charts, else JSON",
         set_timing},
        {{"--timing-top"}, Takes::value, "K", "Timing",
         "name the K slowest daemons or ranks of each phase in the timing report (default 10, at most 1000)",
         [](ParseState& s, ArgCursor& c) {
             return store_count(s.options.timing_top, c, 1, static_cast<long>(timing::max_top_k));
         }},

        {{"--trace"}, Takes::value, "FILE.json", "Timing",
         "write a Chrome trace (a track per node and rank) for Perfetto",
         [](ParseState& s, ArgCursor& c) { return store_string(s.options.trace_file, c); }},
        {{"--mark-on-output"}, Takes::value, "REGEX=NAME", "Timing",
         "stamp app.NAME at a rank's first matching line: 'step=0=first_step'",
         [](ParseState& s, ArgCursor& c) {
             auto value = take_value(c);
             if (!value)
                 return Status{value.error()};
             auto equals = value->rfind('=');
             std::string name = equals == std::string::npos ? std::string() : value->substr(equals + 1);
             std::string pattern = equals == std::string::npos ? std::string() : value->substr(0, equals);
             if (pattern.empty() || !timing::valid_mark_name(name))
                 return Status{make_error("{} needs REGEX=NAME (NAME: letters, digits, _ . : -), got '{}'",
                                          c.spelling, *value)};
             try {
                 std::regex check(pattern);
             } catch (const std::regex_error& error) {
                 return Status{make_error("{}: '{}' is not a valid regular expression: {}", c.spelling, pattern,
                                          error.what())};
             }
             s.options.output_marks.emplace_back(std::move(pattern), std::move(name));
             return Status{};
         }},

        {{"--health-check"}, Takes::optional_inline, "[=CMD]", "Job",
         "before any rank starts, check every node (temp dir writable with free space, free memory, clock, the GPUs "
         "the job binds) and run CMD there with CANOPY_NODE set; a bad node ends the job, named with its reason",
         set_health_check},
        {{"--max-restarts", "--max_restarts"}, Takes::value, "K", "Job",
         "restart every rank in place, up to K times in all (not per node), when a rank fails; the daemons and their "
         "staged files stay, each attempt gets fresh PMI state and CANOPY_RESTART_COUNT (default 0: a failed rank "
         "ends the job)",
         [](ParseState& s, ArgCursor& c) { return store_count(s.options.max_restarts, c, 0); }},
        {{"--bad-nodes"}, Takes::value, "FILE", "Job",
         "write the nodes --health-check found bad to FILE, one 'HOST  # reason' a line (empty when none)",
         [](ParseState& s, ArgCursor& c) { return store_string(s.options.bad_nodes_file, c); }},

        {{"--dry-run"}, Takes::nothing, "", "Job",
         "print the placement, bindings, tree and agent commands, and start nothing",
         [](ParseState& s, ArgCursor&) { s.options.dry_run = true; return Status{}; }},

        // Config
        {{"--config"}, Takes::value, "FILE", "Config",
         "read settings from FILE last, over all other config files",
         [](ParseState& s, ArgCursor& c) { return store_string(s.options.config_file, c); }},
        {{"--profile"}, Takes::value, "NAME", "Config",
         "use a site profile: aurora, perlmutter, polaris, ...",
         [](ParseState& s, ArgCursor& c) { return store_string(s.options.profile, c); }},

        // General
        {{"-v", "--verbose"}, Takes::nothing, "", "General",
         "say more (repeat for more detail, e.g. -vv)",
         [](ParseState& s, ArgCursor&) { ++s.options.verbosity; return Status{}; }},
        {{"-h", "--help"}, Takes::nothing, "", "General",
         "show this help",
         [](ParseState& s, ArgCursor&) { s.options.help = true; return Status{}; }},
        {{"--version"}, Takes::nothing, "", "General",
         "show the canopy version",
         [](ParseState& s, ArgCursor&) { s.options.version = true; return Status{}; }},
    };
    // clang-format on
    return table;
}

} // namespace canopy::option_parsing
