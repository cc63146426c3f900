// The environment each rank starts with.
#include "proc/rank_env.hpp"

#include <map>
#include <set>

namespace canopy {

std::vector<std::string> rank_environment(const std::vector<std::string>& base, const RankIdentity& who)
{
    std::map<std::string, std::string> set{
        {"RANK", std::to_string(who.rank)},
        {"WORLD_SIZE", std::to_string(who.world_size)},
        {"LOCAL_RANK", std::to_string(who.local_rank)},
        {"LOCAL_WORLD_SIZE", std::to_string(who.local_size)},
        {"NODE_RANK", std::to_string(who.node_rank)},
        {"GROUP_RANK", std::to_string(who.node_rank)},
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
    };
    // A simple-PMI identity inherited from an outer launcher would point the rank at a server that is not its
    // own; the node's PMI server sets these afresh when canopy serves simple PMI, and otherwise none may reach it.
    static const std::set<std::string, std::less<>> outer_pmi = {
        "PMI_FD",      "PMI_PORT",       "PMI_ID",         "PMI_RANK",  "PMI_SIZE",
        "PMI_JOBID",   "PMI_SPAWNED",    "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE"};
    std::vector<std::string> env;
    env.reserve(base.size() + set.size());
    for (const auto& entry : base) {
        auto name = entry.substr(0, entry.find('='));
        if (!set.contains(name) && !outer_pmi.contains(name))
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

void set_environment_value(std::vector<std::string>& env, const std::string& name, const std::string& value)
{
    std::erase_if(env, [&](const std::string& entry) {
        return entry.size() > name.size() && entry[name.size()] == '=' && entry.compare(0, name.size(), name) == 0;
    });
    env.push_back(name + "=" + value);
}

} // namespace canopy
