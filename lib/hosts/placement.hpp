// Placement: which ranks run on which node, from -n, --ppn and the host list.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "hosts/hostfile.hpp"
#include "hosts/rank_blocks.hpp"
#include "util/result.hpp"

namespace canopy {

// PMIx numbers a node's ranks with 16 bits; no node runs more.
constexpr long max_ranks_per_node = 65535;

struct PlacementRequest {
    std::optional<long> ranks; // -n; may be omitted
    std::optional<long> ppn;   // --ppn
    std::vector<HostEntry> hosts;
};

struct NodeRanks {
    std::string host;
    long first_rank = 0;
    long count = 0;
};

struct Placement {
    long world_size = 0;
    std::vector<NodeRanks> nodes; // only nodes that get at least one rank, in host order

    // The rank counts by node, for the arithmetic on them (which node runs a rank, its local rank).
    RankBlocks blocks() const;
};

// With ppn: blocks of ppn ranks per host in order (the last node may get fewer); -n omitted means
// ppn * hosts. Without ppn, when every host has slots: fill hosts by slots in order, -n omitted means
// the sum of slots. Otherwise spread evenly (the first n % hosts hosts get one more), -n omitted means one
// per host. Fewer ranks than hosts use only the first n hosts.
Result<Placement> place_ranks(const PlacementRequest& request);

} // namespace canopy
