#include "hosts/tree_ranks.hpp"

#include <algorithm>

namespace canopy {

TreeRanks::TreeRanks(RankBlocks job) { blocks_.push_back({0, std::move(job)}); }

Status TreeRanks::add(long first, std::vector<std::uint64_t> ranks_per_node)
{
    if (first != size())
        return make_error("a spawned namespace starts at tree rank {}, but the next free one is {}", first, size());
    if (ranks_per_node.size() != static_cast<std::size_t>(job().nodes()))
        return make_error("a spawned namespace lists {} nodes, the job has {}", ranks_per_node.size(), job().nodes());
    blocks_.push_back({first, RankBlocks(std::move(ranks_per_node))});
    return {};
}

long TreeRanks::node_of(long tree_rank) const
{
    // The last block starting at or before the rank.
    auto after = std::upper_bound(blocks_.begin(), blocks_.end(), tree_rank,
                                  [](long rank, const Block& block) { return rank < block.first; });
    if (after == blocks_.begin())
        return -1;
    const auto& block = *(after - 1);
    return block.ranks.node_of(tree_rank - block.first);
}

} // namespace canopy
