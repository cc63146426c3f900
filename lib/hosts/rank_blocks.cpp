// Block placement arithmetic.
#include "hosts/rank_blocks.hpp"

#include <algorithm>

namespace canopy {

RankBlocks::RankBlocks(std::vector<std::uint64_t> ranks_per_node) : counts_(std::move(ranks_per_node))
{
    first_rank_.reserve(counts_.size() + 1);
    std::uint64_t total = 0;
    for (auto count : counts_) {
        first_rank_.push_back(total);
        total += count;
    }
    first_rank_.push_back(total);
}

long RankBlocks::node_of(long rank) const
{
    if (rank < 0 || static_cast<std::uint64_t>(rank) >= first_rank_.back())
        return -1;
    // The last node whose first rank is at most `rank`; empty nodes share their first rank with the next.
    auto after = std::upper_bound(first_rank_.begin(), first_rank_.end() - 1, static_cast<std::uint64_t>(rank));
    return static_cast<long>(after - first_rank_.begin()) - 1;
}

long RankBlocks::local_rank(long rank) const
{
    long node = node_of(rank);
    return node < 0 ? -1 : rank - first_rank(node);
}

} // namespace canopy
