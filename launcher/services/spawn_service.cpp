// The root's side of PMIx_Spawn: placement within the spawn slots, the namespace's name and its tree ranks.
#include "spawn_service.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "hosts/namespace_names.hpp"
#include "hosts/rank_blocks.hpp"
#include "hosts/spawn_placement.hpp"

namespace canopy {

SpawnService::SpawnService(const wire::LaunchPlan& plan)
    : job_id_(plan.job_id), hosts_(plan.hosts.expand()), slots_per_node_(plan.job.spawn_slots),
      used_(plan.hosts.size(), 0), tree_ranks_(RankBlocks(plan.job.ranks_per_node).world_size())
{
    std::vector<std::uint64_t> ranks_per_app;
    for (const auto& app : plan.job.apps) {
        app_wdirs_.push_back(app.wdir);
        ranks_per_app.push_back(app.ranks);
    }
    app_blocks_ = RankBlocks(std::move(ranks_per_app));
}

Result<SpawnService::Started> SpawnService::start(const wire::SpawnRequest& request)
{
    if (request.argv.empty())
        return make_error("PMIx_Spawn names no program to start");
    SpawnNodes nodes{hosts_, {}, slots_per_node_};
    for (std::uint64_t used : used_)
        nodes.free_slots.push_back(slots_per_node_ - used);
    auto placed = place_spawn(nodes, {request.count, request.hosts, request.map_by, request.per_node});
    if (!placed)
        return placed.error();

    Started started;
    auto& start = started.start;
    start.nspace = spawned_nspace(job_id_, static_cast<long>(started_.size()) + 1);
    start.first = static_cast<std::uint64_t>(tree_ranks_);
    start.ranks_per_node = std::move(*placed);
    start.parent_rank = request.parent_rank;
    start.argv = request.argv;
    start.env = request.env;
    // A spawner from a spawned namespace is in no program of the job's: it gets the first program's directory.
    auto spawner_app = std::max(0L, app_blocks_.node_of(static_cast<long>(request.parent_rank)));
    start.wdir = !request.wdir.empty()      ? request.wdir
                 : app_wdirs_.empty()       ? std::string()
                                            : app_wdirs_[static_cast<std::size_t>(spawner_app)];
    started.reply = {start.nspace, start.first, request.count};

    for (std::size_t node = 0; node < used_.size(); ++node)
        used_[node] += start.ranks_per_node[node];
    started_.push_back({start.first, request.count, start.nspace});
    tree_ranks_ += static_cast<long>(request.count);
    return started;
}

std::string SpawnService::rank_name(long tree_rank) const
{
    for (const auto& ns : started_)
        if (tree_rank >= static_cast<long>(ns.first) && tree_rank < static_cast<long>(ns.first + ns.size))
            return fmt::format("rank {} of spawned {}", tree_rank - static_cast<long>(ns.first), ns.nspace);
    return fmt::format("rank {}", tree_rank);
}

} // namespace canopy
