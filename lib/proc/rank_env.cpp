// The environment each rank starts with.
#include "proc/rank_env.hpp"

#include <map>
#include <set>
#include <string_view>

extern char** environ;

namespace canopy {

namespace {

// What describes another launcher's task or step rather than the allocation, with no canopy meaning to set it to:
// left in, it would point the rank at another PMI or PMIx server, or describe canopyd's own Slurm step.
bool belongs_to_an_outer_task(std::string_view name)
{
    // The node's PMI and PMIx servers set their own afresh; PMIx's MCA settings are the user's.
    static const std::set<std::string, std::less<>> simple_pmi = {
        "PMI_FD",      "PMI_PORT",       "PMI_ID",         "PMI_RANK",  "PMI_SIZE",
        "PMI_JOBID",   "PMI_SPAWNED",    "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE", "PMI_APPNUM"};
    static const std::set<std::string, std::less<>> slurm_task = {
        "SLURM_STEPID",         "SLURM_TASK_PID",       "SLURM_GTIDS",         "SLURM_LAUNCH_NODE_IPADDR",
        "SLURM_SRUN_COMM_HOST", "SLURM_SRUN_COMM_PORT", "SLURM_CPU_BIND",      "SLURM_CPU_BIND_LIST",
        "SLURM_CPU_BIND_TYPE",  "SLURM_CPU_BIND_VERBOSE"};
    return simple_pmi.contains(name) || slurm_task.contains(name) || name.starts_with("SLURM_STEP_") ||
           (name.starts_with("PMIX_") && !name.starts_with("PMIX_MCA_"));
}

} // namespace

std::vector<std::string> rank_environment(const std::vector<std::string>& base, const RankIdentity& who)
{
    std::map<std::string, std::string> set{
        {"RANK", std::to_string(who.rank)},
        {"WORLD_SIZE", std::to_string(who.world_size)},
        {"LOCAL_RANK", std::to_string(who.local_rank)},
        {"LOCAL_WORLD_SIZE", std::to_string(who.local_size)},
        {"NODE_RANK", std::to_string(who.node_rank)},
        {"GROUP_RANK", std::to_string(who.node_rank)},
        // torchrun's names, for code written against torch.distributed.elastic: one role, every node a group.
        {"GROUP_WORLD_SIZE", std::to_string(who.nodes)},
        {"ROLE_RANK", std::to_string(who.rank)},
        {"ROLE_WORLD_SIZE", std::to_string(who.world_size)},
        {"ROLE_NAME", "default"},
        {"TORCHELASTIC_RESTART_COUNT", std::to_string(who.restart_count)},
        {"TORCHELASTIC_MAX_RESTARTS", std::to_string(who.max_restarts)},
        {"MASTER_ADDR", who.master_addr},
        {"MASTER_PORT", std::to_string(who.master_port)},
        {"PALS_RANKID", std::to_string(who.rank)},
        {"PALS_LOCAL_RANKID", std::to_string(who.local_rank)},
        {"PALS_NODEID", std::to_string(who.node_rank)},
        {"CANOPY_RANK", std::to_string(who.rank)},
        {"CANOPY_SIZE", std::to_string(who.world_size)},
        {"CANOPY_LOCAL_RANK", std::to_string(who.local_rank)},
        {"CANOPY_LOCAL_SIZE", std::to_string(who.local_size)},
        {"CANOPY_NODE_RANK", std::to_string(who.node_rank)},
        {"CANOPY_NUM_NODES", std::to_string(who.nodes)},
        {"CANOPY_NODE", who.node_name},
        {"CANOPY_JOBID", who.job_id},
        {"CANOPY_NODE_TMPDIR", who.node_tmpdir},
        {"CANOPY_APPNUM", std::to_string(who.appnum)},
        {"CANOPY_RESTART_COUNT", std::to_string(who.restart_count)},
    };
    // Another launcher's per-task identity, inherited from the Slurm step, mpirun or outer job canopy runs in
    // (with the srun agent canopyd itself is a one-task step): where present it is made the rank's canopy identity,
    // so tools that read it (Lightning, JAX, submitit) agree with RANK. Allocation-level variables pass through.
    std::map<std::string, std::string> outer_identity{
        {"SLURM_PROCID", std::to_string(who.rank)},
        {"SLURM_LOCALID", std::to_string(who.local_rank)},
        {"SLURM_NODEID", std::to_string(who.node_rank)},
        {"SLURM_NTASKS", std::to_string(who.world_size)},
        {"SLURM_NPROCS", std::to_string(who.world_size)},
        {"OMPI_COMM_WORLD_RANK", std::to_string(who.rank)},
        {"OMPI_COMM_WORLD_SIZE", std::to_string(who.world_size)},
        {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(who.local_rank)},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(who.local_size)},
        {"OMPI_COMM_WORLD_NODE_RANK", std::to_string(who.local_rank)},
        {"OMPI_UNIVERSE_SIZE", std::to_string(who.world_size)},
        {"MPI_LOCALRANKID", std::to_string(who.local_rank)},   // Hydra's
        {"MPI_LOCALNRANKS", std::to_string(who.local_size)},
    };
    std::vector<std::string> env;
    env.reserve(base.size() + set.size());
    for (const auto& entry : base) {
        auto name = entry.substr(0, entry.find('='));
        if (set.contains(name) || belongs_to_an_outer_task(name))
            continue;
        if (auto identity = outer_identity.find(name); identity != outer_identity.end())
            env.push_back(name + "=" + identity->second);
        else
            env.push_back(entry);
    }
    for (const auto& [name, value] : set)
        env.push_back(name + "=" + value);
    return env;
}

std::string environment_value(const std::vector<std::string>& env, const std::string& name)
{
    for (const auto& entry : env)
        if (entry.size() > name.size() && entry[name.size()] == '=' && entry.compare(0, name.size(), name) == 0)
            return entry.substr(name.size() + 1);
    return {};
}

void add_environment_default(std::vector<std::string>& env, std::string setting)
{
    auto name = setting.substr(0, setting.find('=') + 1);
    for (const auto& existing : env)
        if (existing.starts_with(name))
            return;
    env.push_back(std::move(setting));
}

std::vector<std::string> own_environment()
{
    std::vector<std::string> env;
    for (char** entry = environ; entry && *entry; ++entry)
        env.emplace_back(*entry);
    return env;
}

void set_environment_value(std::vector<std::string>& env, const std::string& name, const std::string& value)
{
    std::erase_if(env, [&](const std::string& entry) {
        return entry.size() > name.size() && entry[name.size()] == '=' && entry.compare(0, name.size(), name) == 0;
    });
    env.push_back(name + "=" + value);
}

std::vector<std::string> environment_with(std::vector<std::string> base, const std::vector<std::string>& settings)
{
    for (const auto& setting : settings) {
        auto equals = setting.find('=');
        set_environment_value(base, setting.substr(0, equals), setting.substr(std::min(equals + 1, setting.size())));
    }
    return base;
}

} // namespace canopy
