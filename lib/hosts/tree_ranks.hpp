// Every rank the tree carries: the job's ranks 0..N-1, then each namespace spawned later (PMIx_Spawn) as a block
// of tree ranks after them. Fences, connects and routed requests name ranks this way, so one number says which
// node hosts a process of any namespace.
#pragma once

#include <cstdint>
#include <vector>

#include "hosts/rank_blocks.hpp"
#include "util/result.hpp"

namespace canopy {

class TreeRanks {
public:
    explicit TreeRanks(RankBlocks job);

    // Adds a spawned namespace's ranks (counts by node index, the job's nodes) starting at tree rank `first`,
    // which must be size(): every position adds the same namespaces in the same order.
    Status add(long first, std::vector<std::uint64_t> ranks_per_node);

    const RankBlocks& job() const { return blocks_.front().ranks; }
    // Tree ranks so far: the job's and every spawned namespace's.
    long size() const { return blocks_.back().first + blocks_.back().ranks.world_size(); }
    // The node index hosting a tree rank, or -1 if there is no such rank.
    long node_of(long tree_rank) const;

private:
    struct Block {
        long first = 0;
        RankBlocks ranks;
    };
    std::vector<Block> blocks_;   // the job's first
};

} // namespace canopy
