// canopy's command line: the parser that walks the arguments (programs, ':' and -configfile) through the option
// table (option_table.cpp), then checks the options against each other.
#include "options.hpp"
#include "option_table.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <utility>

#include "synthetic/synthetic_exchange.hpp"
#include "util/read_file.hpp"
#include "util/suggest.hpp"
#include "util/text.hpp"

namespace canopy {
namespace {

using namespace option_parsing;

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
