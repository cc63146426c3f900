// Ranks placed in blocks node by node: the one place that turns rank counts per node into each node's first
// rank, a rank's node and its local rank.
#pragma once

#include <cstdint>
#include <vector>

namespace canopy {

class RankBlocks {
public:
    // ranks_per_node: rank counts by node index; node 0 holds ranks 0..count-1, node 1 the next block, ...
    explicit RankBlocks(std::vector<std::uint64_t> ranks_per_node);
    RankBlocks() : RankBlocks(std::vector<std::uint64_t>{}) {}

    long world_size() const { return static_cast<long>(first_rank_.back()); }
    long nodes() const { return static_cast<long>(counts_.size()); }
    const std::vector<std::uint64_t>& counts() const { return counts_; }

    // For a node index in 0..nodes()-1.
    long first_rank(long node) const { return static_cast<long>(first_rank_[static_cast<std::size_t>(node)]); }
    long local_size(long node) const { return static_cast<long>(counts_[static_cast<std::size_t>(node)]); }

    // The node index hosting a rank, or -1 if the job has no such rank.
    long node_of(long rank) const;
    // The rank's index among its node's ranks, or -1 if the job has no such rank.
    long local_rank(long rank) const;

private:
    std::vector<std::uint64_t> counts_;
    std::vector<std::uint64_t> first_rank_;   // prefix sums: each node's first rank, then the world size
};

} // namespace canopy
