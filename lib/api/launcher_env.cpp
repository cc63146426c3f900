// Reading another launcher's rank variables: one table row per launcher, checked against each other.
#include "api/launcher_env.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <iterator>
#include <string>
#include <string_view>

namespace canopy::api {

namespace {

constexpr const char* mode_names[] = {"none",     "canopy",   "pmix",  "singleton", "torchrun",
                                      "open-mpi", "hydra",    "slurm", "pals"};
static_assert(std::size(mode_names) == CANOPY_MODE_PALS + 1, "a mode without a name, or a gap");

// The variables that may carry one field, the first one set winning (a Slurm step's own count before its
// allocation's); all null: the launcher does not give the field.
using Names = std::array<const char*, 2>;

struct LauncherVariables {
    int mode;
    const char* marker;  // set by this launcher alone
    Names rank, size, local_rank, local_size, node_rank, num_nodes;
    bool local_size_per_node;  // Slurm: a count per node ("2(x3),1"), indexed by the node
    bool pmix;                 // a PMIx server in its ranks' environment is its own (mpirun, srun --mpi=pmix)
};

// The innermost launcher first: torchrun runs under srun or mpirun, and Hydra's proxies under srun, never the
// other way round, and each leaves its parent's variables in place.
constexpr LauncherVariables launchers[] = {
    {CANOPY_MODE_TORCHRUN, "TORCHELASTIC_RUN_ID", {"RANK"}, {"WORLD_SIZE"}, {"LOCAL_RANK"}, {"LOCAL_WORLD_SIZE"},
     {"GROUP_RANK"}, {"GROUP_WORLD_SIZE"}, false, false},
    // OMPI_COMM_WORLD_NODE_RANK is the rank's index among the node's processes, not the node's index.
    {CANOPY_MODE_OPEN_MPI, "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_RANK"}, {"OMPI_COMM_WORLD_SIZE"},
     {"OMPI_COMM_WORLD_LOCAL_RANK"}, {"OMPI_COMM_WORLD_LOCAL_SIZE"}, {}, {"OMPI_MCA_orte_num_nodes"}, false, true},
    {CANOPY_MODE_HYDRA, "MPI_LOCALRANKID", {"PMI_RANK"}, {"PMI_SIZE"}, {"MPI_LOCALRANKID"}, {"MPI_LOCALNRANKS"}, {},
     {}, false, false},
    // PALS names the rank, its index on the node and the node; the sizes come from Cray PMI's variables.
    {CANOPY_MODE_PALS, "PALS_RANKID", {"PALS_RANKID"}, {"PMI_SIZE"}, {"PALS_LOCAL_RANKID"}, {"PMI_LOCAL_SIZE"},
     {"PALS_NODEID"}, {}, false, false},
    {CANOPY_MODE_SLURM, "SLURM_PROCID", {"SLURM_PROCID"}, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, {"SLURM_LOCALID"},
     {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, {"SLURM_NODEID"},
     {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"}, true, true},
};

// World sizes that mean "one of several ranks" even when no launcher above claims the process.
constexpr const char* world_sizes[] = {"WORLD_SIZE", "PMI_SIZE"};

struct Field {
    const char* name = nullptr;  // the variable it came from; null: not given
    int value = -1;
};

Result<int> parse_count(const char* name, std::string_view text, const char* launcher)
{
    int value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value < 0)
        return fail(CANOPY_ERR_INVALID, "{}='{}' is not a rank count or index (set by {} or changed after launch)",
                    name, text, launcher);
    return value;
}

Result<Field> read(const EnvLookup& env, const Names& names, const char* launcher)
{
    for (const char* name : names) {
        const char* text = name ? env(name) : nullptr;
        if (!text)
            continue;
        auto value = parse_count(name, text, launcher);
        if (!value)
            return value.error();
        return Field{name, *value};
    }
    return Field{};
}

// The count for node `node` in Slurm's "2(x3),1" (2, 2, 2, 1).
Result<int> count_of_node(const char* name, std::string_view list, int node)
{
    auto malformed = [&] {
        return fail(CANOPY_ERR_INVALID, "{}='{}' is not a task count per node like '2(x3),1'", name, list);
    };
    long first = 0;  // the first node the current item covers
    for (std::string_view rest = list; !rest.empty();) {
        std::string_view item = rest.substr(0, rest.find(','));
        rest.remove_prefix(std::min(rest.size(), item.size() + 1));
        int count = 0, repeat = 1;
        auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), count);
        if (error != std::errc() || count < 1)
            return malformed();
        std::string_view times = item.substr(static_cast<std::size_t>(end - item.data()));
        if (!times.empty()) {
            if (!times.starts_with("(x") || !times.ends_with(")"))
                return malformed();
            times = times.substr(2, times.size() - 3);
            auto [times_end, times_error] = std::from_chars(times.data(), times.data() + times.size(), repeat);
            if (times_error != std::errc() || times_end != times.data() + times.size() || repeat < 1)
                return malformed();
        }
        if (node < first + repeat)
            return count;
        first += repeat;
    }
    return fail(CANOPY_ERR_INVALID, "{}='{}' lists {} nodes, but this is node {}", name, list, first, node);
}

// Rank information from one launcher's variables, every field checked against the others.
Result<ForeignLaunch> read_launch(const EnvLookup& env, const LauncherVariables& vars)
{
    const char* launcher = mode_names[vars.mode];
    Field fields[6];
    const Names* names[] = {&vars.rank, &vars.size, &vars.local_rank, &vars.local_size, &vars.node_rank,
                            &vars.num_nodes};
    for (int i = 0; i < 6; ++i) {
        if (vars.local_size_per_node && names[i] == &vars.local_size)
            continue;  // read once the node is known
        auto field = read(env, *names[i], launcher);
        if (!field)
            return field.error();
        fields[i] = *field;
    }
    auto& [rank, size, local_rank, local_size, node_rank, num_nodes] = fields;
    if (!rank.name || !size.name)
        return fail(CANOPY_ERR_INVALID, "{} is set, so {} started this process, but {} is not: libcanopy cannot "
                    "tell this rank's place in the job", vars.marker, launcher, rank.name ? vars.size[0]
                                                                                         : vars.rank[0]);
    if (vars.local_size_per_node && node_rank.name) {
        for (const char* name : vars.local_size) {
            if (const char* list = env(name)) {
                auto count = count_of_node(name, list, node_rank.value);
                if (!count)
                    return count.error();
                local_size = Field{name, *count};
                break;
            }
        }
    }
    auto contradiction = [&](const Field& index, const Field& count) {
        return fail(CANOPY_ERR_INVALID, "{}={} is not below {}={}: the {} variables contradict each other (was the "
                    "environment changed after launch?)", index.name, index.value, count.name, count.value,
                    launcher);
    };
    if (size.value < 1 || rank.value >= size.value)
        return contradiction(rank, size);
    if (local_rank.name && local_size.name && local_rank.value >= local_size.value)
        return contradiction(local_rank, local_size);
    if (local_size.name && local_size.value > size.value)
        return fail(CANOPY_ERR_INVALID, "{}={} is more than {}={}: the {} variables contradict each other",
                    local_size.name, local_size.value, size.name, size.value, launcher);
    if (node_rank.name && num_nodes.name && node_rank.value >= num_nodes.value)
        return contradiction(node_rank, num_nodes);

    ForeignLaunch found;
    found.mode = vars.mode;
    found.own_pmix = vars.pmix;
    RankInfo& info = found.info;
    info.rank = rank.value;
    info.size = size.value;
    // A world of one is all on this node, whatever the launcher left out.
    info.local_rank = size.value == 1 ? 0 : local_rank.value;
    info.local_size = size.value == 1 ? 1 : local_size.value;
    bool one_node = info.local_size == info.size;  // what a launcher without node variables still tells
    info.node_rank = node_rank.name || !one_node ? node_rank.value : 0;
    info.num_nodes = num_nodes.name || !one_node ? num_nodes.value : 1;
    return found;
}

} // namespace

const char* mode_name(int mode)
{
    return mode >= 0 && mode < static_cast<int>(std::size(mode_names)) ? mode_names[mode] : nullptr;
}

Result<std::optional<ForeignLaunch>> find_foreign_launcher(const EnvLookup& env)
{
    for (const auto& vars : launchers) {
        if (!env(vars.marker))
            continue;
        // A PMIx server that numbers this process differently proves the Slurm variables an outer step's (prterun
        // started by srun): PMIx knows better.
        const char* pmix_rank = env("PMIX_RANK");
        if (vars.mode == CANOPY_MODE_SLURM && pmix_rank && std::string_view(pmix_rank) != env(vars.marker))
            continue;
        auto found = read_launch(env, vars);
        if (!found)
            return found.error();
        return std::optional<ForeignLaunch>(std::move(*found));
    }
    return std::optional<ForeignLaunch>();
}

Status check_no_world(const EnvLookup& env)
{
    for (const char* name : world_sizes) {
        const char* text = env(name);
        if (!text)
            continue;
        auto size = parse_count(name, text, "an unknown launcher");
        if (!size)
            return size.error();
        if (*size > 1)
            return fail(CANOPY_ERR_INVALID, "{}={} says this process is one of {} ranks, but no launcher libcanopy "
                        "knows started it (canopy, torchrun, mpirun, mpiexec.hydra, srun, PALS or PMIx): start it "
                        "with one of them, or unset {} to run it alone", name, *size, *size, name);
    }
    return done();
}

} // namespace canopy::api
