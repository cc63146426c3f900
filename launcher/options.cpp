// canopy's command line: one table maps every mpiexec-style spelling to a handler and to its --help line.
#include "options.hpp"

#include <algorithm>
#include <cctype>
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
#include "util/read_file.hpp"
#include "util/suggest.hpp"
#include "util/text.hpp"

namespace canopy {
namespace {

constexpr double max_seconds = 365.0 * 24 * 3600;

// Where parsing is: the arguments, the next unread one, and the option being handled.
struct ArgCursor {
    const std::vector<std::string>& args;
    std::size_t next;                        // index of the next unread argument
    std::string spelling;                    // as the user typed it, without "=value"
    std::optional<std::string> inline_value; // from "--opt=value"
};

// Options plus the spellings used for options that can conflict, so errors name what the user typed.
struct ParseState {
    Options options;
    std::size_t app = 0;   // the program whose options are being read
    std::string hosts_spelling, hostfile_spelling, sim_nodes_spelling, standalone_spelling;
    std::optional<std::string> configfile;   // -configfile: the programs, one per line
    std::string program_option;               // a program option given on the command line, e.g. "-n"

    AppOptions& program() { return options.apps[app]; }
};

using Handler = Status (*)(ParseState&, ArgCursor&);

enum class Takes {
    nothing,        // a flag
    value,          // "-o V" or "--opt=V"
    env_pair,       // "K=V", or Hydra's two arguments "K V"
    optional_inline // only "--opt=V"; never consumes the next argument
};

struct OptionSpec {
    std::vector<std::string_view> spellings; // the first is the one --help shows first
    Takes takes;
    std::string_view metavar;
    std::string_view group;
    std::string_view help;
    Handler handler;
    bool per_program = false;   // also allowed after a ':' and on -configfile's lines
};

const std::vector<OptionSpec>& option_table();

const OptionSpec* find_option(std::string_view spelling)
{
    for (const auto& spec : option_table()) {
        if (std::find(spec.spellings.begin(), spec.spellings.end(), spelling) != spec.spellings.end()) {
            return &spec;
        }
    }
    return nullptr;
}

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

Error unknown_option(std::string_view name)
{
    // "-np=4": Hydra-style options take their value as the next argument.
    if (!name.starts_with("--")) {
        auto eq = name.find('=');
        if (eq != std::string_view::npos && find_option(name.substr(0, eq))) {
            return make_error("unknown option '{}'; give the value as the next argument: {} {}", name,
                              name.substr(0, eq), name.substr(eq + 1));
        }
        // "-n4": a value glued to its option.
        auto digits = name.find_first_of("0123456789");
        if (digits != std::string_view::npos &&
            name.find_first_not_of("0123456789", digits) == std::string_view::npos &&
            find_option(name.substr(0, digits))) {
            return make_error("unknown option '{}'; did you mean '{} {}'?", name, name.substr(0, digits),
                              name.substr(digits));
        }
    }
    // Slurm's and Open MPI's names for what canopy spells otherwise: name the equivalent instead of a near miss.
    static constexpr std::pair<std::string_view, std::string_view> other_launchers[] = {
        {"--ntasks", "-n N"},
        {"--nprocs", "-n N"},
        {"--ntasks-per-node", "--ppn N"},
        {"--nodelist", "--hosts LIST"},
        {"--chdir", "--wdir DIR"},
        {"--time", "--timeout SECONDS"},
        {"--export", "--env K=V, --envlist K1,K2 or --envall"},
        // torchrun's, where canopy's tree does the work (torchrun also spells each with underscores).
        {"--rdzv-backend", "none: canopy's tree is the rendezvous, so leave it out"},
        {"--rdzv-endpoint", "none: canopy's tree is the rendezvous, so leave it out"},
        {"--rdzv-id", "none: canopy's tree is the rendezvous, so leave it out"},
        {"--node-rank", "none: one canopy command starts every node, so leave it out"},
        {"--master-addr", "--env MASTER_ADDR=HOST (default: rank 0's node)"},
        {"--master-port", "--env MASTER_PORT=PORT (default: one derived from the job id)"},
        {"--max-restarts", "none: canopy does not restart ranks; a failed rank ends the job"},
        {"--no-python", "none: canopy runs the program as given (python3 train.py, or -m MODULE)"},
    };
    std::string dashed(name);   // --rdzv_backend as --rdzv-backend
    std::replace(dashed.begin() + std::min<std::size_t>(2, dashed.size()), dashed.end(), '_', '-');
    for (auto [theirs, ours] : other_launchers) {
        if (dashed != theirs)
            continue;
        if (ours.starts_with("none: "))
            return make_error("unknown option '{}'; {}", name, ours.substr(6));
        return make_error("unknown option '{}'; canopy's equivalent is {}", name, ours);
    }
    std::string lowered(name);
    std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    std::vector<std::string_view> spellings;
    for (const auto& spec : option_table())
        spellings.insert(spellings.end(), spec.spellings.begin(), spec.spellings.end());
    // Only suggest a near miss; a far-off guess confuses more than it helps.
    if (auto best = closest_match(lowered, spellings, std::max<std::size_t>(1, name.size() / 4)))
        return make_error("unknown option '{}'; did you mean '{}'?", name, *best);
    return make_error("unknown option '{}'; see canopy --help", name);
}

// "-vv", "-vvv": the common shorthand for repeating -v.
int repeated_verbose(std::string_view arg)
{
    if (arg.size() < 3 || arg[0] != '-' || arg.find_first_not_of('v', 1) != std::string_view::npos) {
        return 0;
    }
    return static_cast<int>(arg.size() - 1);
}

// --synthetic-ranks R places R ranks on each node, and needs no program: the ranks run inside the daemons.
Status apply_synthetic_ranks(Options& options)
{
    if (!options.synthetic_ranks)
        return {};
    auto spec = synthetic::parse_spec(*options.synthetic_ranks);
    if (options.ppn && *options.ppn != spec->ranks_per_node)
        return make_error("--synthetic-ranks {} and --ppn {} disagree; give one of them", spec->ranks_per_node,
                          *options.ppn);
    if (options.apps.size() > 1 || options.apps[0].ranks)
        return make_error("--synthetic-ranks places its own ranks: give it without -n or several programs");
    options.ppn = spec->ranks_per_node;
    if (options.apps[0].command.empty())
        options.apps[0].command = {"true"};   // never started; the plan needs a program to name
    return {};
}

Status check_conflicts(const ParseState& state)
{
    const Options& options = state.options;
    if (options.hosts && options.hostfile) {
        return make_error("{} and {} cannot be used together; give the hosts one way", state.hosts_spelling,
                          state.hostfile_spelling);
    }
    if (options.standalone && (options.hosts || options.hostfile || options.sim_nodes > 0)) {
        const std::string& other = options.hosts      ? state.hosts_spelling
                                    : options.hostfile ? state.hostfile_spelling
                                                       : state.sim_nodes_spelling;
        return make_error("{} and {} cannot be used together; {} runs on this machine alone",
                          state.standalone_spelling, other, state.standalone_spelling);
    }
    if (options.standalone && options.nnodes && *options.nnodes != 1)
        return make_error("{} runs on this machine alone, so --nnodes must be 1, got {}", state.standalone_spelling,
                          *options.nnodes);
    if (options.sim_nodes > 0 && options.nnodes && *options.nnodes != options.sim_nodes)
        return make_error("--nnodes {} and {} {} disagree; give one of them", *options.nnodes,
                          state.sim_nodes_spelling, options.sim_nodes);
    if (options.sim_nodes > 0 && (options.hosts || options.hostfile)) {
        const std::string& other = options.hosts ? state.hosts_spelling : state.hostfile_spelling;
        return make_error("{} and {} cannot be used together; {} runs every node on this machine",
                          state.sim_nodes_spelling, other, state.sim_nodes_spelling);
    }
    return {};
}

} // namespace

namespace {

// Reads options from args[i] on and returns where the program starts (args.size(): nowhere). Only a program's own
// options are taken when `whole_job` is false: after a ':' and on -configfile's lines.
Result<std::size_t> parse_until_program(ParseState& state, const std::vector<std::string>& args, std::size_t i,
                                        bool whole_job)
{
    while (i < args.size()) {
        const std::string& arg = args[i];
        // The first non-option is the program; "--" ends the options too.
        if (arg == "--" || arg.size() < 2 || arg[0] != '-')
            return i;
        ArgCursor cursor{args, i + 1, arg, std::nullopt};
        if (arg.starts_with("--")) {
            if (auto eq = arg.find('='); eq != std::string::npos) {
                cursor.spelling = arg.substr(0, eq);
                cursor.inline_value = arg.substr(eq + 1);
            }
        }
        const OptionSpec* spec = find_option(cursor.spelling);
        if (spec == nullptr) {
            if (int count = repeated_verbose(arg); count > 0) {
                state.options.verbosity += count;
                ++i;
                continue;
            }
            return unknown_option(cursor.spelling);
        }
        if (!whole_job && !spec->per_program)
            return make_error("option {} is for the whole job; give it before the first program", cursor.spelling);
        if (whole_job && spec->per_program)
            state.program_option = cursor.spelling;
        if (spec->takes == Takes::nothing && cursor.inline_value) {
            return make_error("option {} does not take a value, got '{}'", cursor.spelling, arg);
        }
        if (Status status = spec->handler(state, cursor); !status) {
            return status.error();
        }
        i = cursor.next;
        if (!state.program().command.empty())   // -m MODULE named it
            return i;
    }
    return i;
}

// Reads the current program's options and command from args[i] on, up to a ':' (passed) or the end; returns where
// the next program starts, or args.size(). A ':' after "--" is the program's.
Result<std::size_t> parse_program(ParseState& state, const std::vector<std::string>& args, std::size_t i,
                                  bool whole_job)
{
    auto start = parse_until_program(state, args, i, whole_job);
    if (!start)
        return start.error();
    i = *start;
    auto& command = state.program().command;
    if (command.empty() && i < args.size()) {
        if (args[i] == "--") {
            command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
            return args.size();
        }
        auto colon = std::find(args.begin() + static_cast<std::ptrdiff_t>(i), args.end(), ":");
        command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), colon);
        i = static_cast<std::size_t>(colon - args.begin());
    }
    if (i == args.size())
        return i;
    if (command.empty())   // args[i] is a ':'
        return make_error("':' separates programs and needs one before it, as in: canopy -n 1 ./a : -n 8 ./b");
    if (++i == args.size())
        return make_error("':' separates programs and needs one after it, as in: canopy -n 1 ./a : -n 8 ./b");
    return i;
}

// The programs of `args`, from the first of state.app on: each ':' starts the next.
Status parse_programs(ParseState& state, const std::vector<std::string>& args, bool whole_job)
{
    auto next = parse_program(state, args, 0, whole_job);
    while (next && *next < args.size()) {
        state.options.apps.emplace_back();
        ++state.app;
        next = parse_program(state, args, *next, false);
    }
    if (!next)
        return next.error();
    return {};
}

// Hydra's -configfile: a program per line, as it would follow a ':'; blank lines and '#' comments are skipped.
Status read_configfile(ParseState& state, const std::string& path)
{
    if (!state.program().command.empty())
        return make_error("-configfile {} lists the programs; give none on the command line (got {})", path,
                          state.program().command[0]);
    if (!state.program_option.empty())
        return make_error("{} and -configfile: give {} on a program's line in {}", state.program_option,
                          state.program_option, path);
    auto text = read_file(path, 1 << 20, "-configfile");
    if (!text)
        return text.error();
    bool first = true;
    std::size_t line_number = 0;
    std::string_view rest = *text;
    while (!rest.empty()) {
        auto newline = rest.find('\n');
        std::string_view line = trim(rest.substr(0, newline));
        rest = newline == std::string_view::npos ? std::string_view{} : rest.substr(newline + 1);
        ++line_number;
        if (line.empty() || line.front() == '#')
            continue;
        auto words = split_shell_words(line);
        if (!words)
            return make_error("{}:{}: {}", path, line_number, words.error().message);
        if (!first) {
            state.options.apps.emplace_back();
            ++state.app;
        }
        first = false;
        if (Status status = parse_programs(state, *words, false); !status)
            return make_error("{}:{}: {}", path, line_number, status.error().message);
        if (state.program().command.empty())
            return make_error("{}:{}: no program on the line", path, line_number);
    }
    if (first)
        return make_error("-configfile {} lists no programs", path);
    return {};
}

} // namespace

std::optional<long> Options::total_ranks() const
{
    long total = 0;
    for (const auto& app : apps) {
        if (!app.ranks)
            return std::nullopt;
        total += *app.ranks;
    }
    return total;
}

Result<Options> parse_options(const std::vector<std::string>& args)
{
    ParseState state;
    if (Status status = parse_programs(state, args, true); !status)
        return status.error();
    if (state.configfile)
        if (Status status = read_configfile(state, *state.configfile); !status)
            return status.error();
    if (Status status = check_conflicts(state); !status) {
        return status.error();
    }
    if (Status status = apply_synthetic_ranks(state.options); !status)
        return status.error();
    const auto& apps = state.options.apps;
    if (apps[0].command.empty() && !state.options.help && !state.options.version) {
        return make_error("no program given; usage: canopy [options] PROGRAM [ARGS...]");
    }
    if (apps.size() > 1)
        for (std::size_t k = 0; k < apps.size(); ++k)
            if (!apps[k].ranks)
                return make_error("program {} of {} ({}) needs -n N: with several programs, each gives its number "
                                  "of ranks",
                                  k + 1, apps.size(), apps[k].command[0]);
    return std::move(state.options);
}

Result<std::vector<std::string>> parse_directory_list(std::string_view list, std::string_view option)
{
    std::vector<std::string> dirs;
    std::string_view rest = list;
    do {
        auto comma = rest.find(',');
        auto dir = rest.substr(0, comma);
        if (dir.empty() || dir.front() != '/')
            return make_error("{} needs absolute directories, got '{}'", option, dir);
        dirs.emplace_back(dir);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    } while (!rest.empty());
    return dirs;
}

std::string help_text()
{
    static constexpr std::string_view group_order[] = {
        "Ranks and hosts",       "Rank environment", "Output", "Binding", "Job",
        "Tree and launch agent", "File staging", "Timing", "Config", "General",
    };
    constexpr std::size_t description_column = 32;

    // "Usage:", "or:" and no group named plain "Environment": help2man makes the man page from this text.
    std::string text =
        "Usage: canopy [options] PROGRAM [ARGS...]\n"
        "  or:  canopy [options] -n N PROGRAM [ARGS...] : -n N PROGRAM [ARGS...] ...\n"
        "  or:  canopy stage record --stage DIR[,DIR...] [-o MANIFEST] -- PROGRAM [ARGS...]\n"
        "  or:  canopy report [--html OUT.html] TIMING.json [OTHER.json]\n"
        "\n"
        "Start PROGRAM as a parallel job across nodes through a tree of canopyd daemons.\n"
        "Options end at PROGRAM or at '--'; everything after is passed to PROGRAM unchanged, but for a ':',\n"
        "which starts another program of the same job (MPMD): its ranks follow the previous program's, it may\n"
        "give its own -n, --env, -x and --wdir, and its ranks' app number (MPI_APPNUM) is one more. After '--',\n"
        "a ':' is an argument like any other.\n"
        "Long options also accept --option=value.\n"
        "canopy report prints a saved --timing report, or compares two; --html OUT.html writes a page with charts.\n";
    for (std::string_view group : group_order) {
        text += "\n";
        text += group;
        text += ":\n";
        for (const auto& spec : option_table()) {
            if (spec.group != group) {
                continue;
            }
            std::string left = "  ";
            for (std::size_t k = 0; k < spec.spellings.size(); ++k) {
                left += (k == 0 ? "" : ", ");
                left += spec.spellings[k];
            }
            if (!spec.metavar.empty()) {
                // "--timing[=FILE.json|FILE.html]" attaches; others take a separate argument.
                left += spec.metavar.starts_with('[') ? "" : " ";
                left += spec.metavar;
            }
            if (left.size() + 2 <= description_column) {
                left.resize(description_column, ' ');
            } else {
                left += "\n";
                left += std::string(description_column, ' ');
            }
            text += left;
            text += spec.help;
            text += "\n";
        }
    }
    text +=
        "\n"
        "Examples:\n"
        "  canopy -n 8 ./hello                          8 ranks on this machine\n"
        "  canopy -f $PBS_NODEFILE -ppn 4 -n 64 ./app   64 ranks, 4 per node, hosts from PBS\n"
        "  canopy --hosts n1,n2 -genv OMP_NUM_THREADS 4 -n 2 ./app\n"
        "                                               2 ranks, one per host, with OMP_NUM_THREADS=4\n"
        "  canopy --sim-nodes 4 -ppn 2 -l ./hello       try a 4-node tree on one machine, labelled output\n"
        "  canopy --profile polaris --timing=start.json -n 128 ./app\n"
        "                                               use the Polaris settings and save startup timing\n"
        "  canopy -n 2 -- ./app -n 5                    '--' ends canopy's options; ./app gets -n 5\n"
        "  canopy --ppn 4 -n 1 ./server : -n 7 ./worker\n"
        "                                               one world: rank 0 runs ./server, ranks 1-7 ./worker\n"
        "  canopy --stage /soft/venv --stage-manifest torch.manifest -n 4096 --ppn 4 python3 train.py\n"
        "                                               the first job writes torch.manifest; later jobs stage\n"
        "                                               it up front and every node imports from its cache\n";
    return text;
}

} // namespace canopy
