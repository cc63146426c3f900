// The binding plan, read for the PMIx server's per-rank keys.
#include "pmix/rank_locality.hpp"

#include "affinity/binding_request.hpp"
#include "hosts/rank_blocks.hpp"

namespace canopy {

void add_rank_locality(PmixJob& job, const wire::BindingSpec& binding, const std::string& node)
{
    if (job.node_index < 0 || binding.cpu_bind == "none")   // no rank here, or none bound to CPUs
        return;
    RankBlocks blocks(job.ranks_per_node);
    auto bindings = plan_node_bindings(binding, blocks.local_size(job.node_index),
                                       BindingSite{node, blocks.first_rank(job.node_index)});
    if (!bindings)
        return;
    for (std::size_t local = 0; local < bindings->ranks.size(); ++local) {
        const RankBinding& rank = bindings->ranks[local];
        bool bound = bindings->applied[local] && !rank.cpus.empty();
        job.local_cpusets.push_back(bound ? "hwloc:" + compress_cpu_list(rank.cpus) : std::string());
        job.local_localities.push_back(bound ? rank.locality : std::string());
    }
}

} // namespace canopy
