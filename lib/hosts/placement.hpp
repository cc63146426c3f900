// Placement: which ranks run on which node, from -n, --ppn and the host list.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "hosts/hostfile.hpp"
#include "util/result.hpp"

namespace canopy {

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

    // Index into nodes of the node running `rank` (binary search); nodes.size() if rank is out of range.
    std::size_t node_of_rank(long rank) const;
    // The rank's index among the ranks of its node; -1 if rank is out of range.
    long local_rank(long rank) const;
};

// With ppn: blocks of ppn ranks per host in order (the last node may get fewer); -n omitted means
// ppn * hosts. Without ppn, when every host has slots: fill hosts by slots in order, -n omitted means
// the sum of slots. Otherwise spread evenly (the first n % hosts hosts get one more), -n omitted means one
// per host. Fewer ranks than hosts use only the first n hosts.
Result<Placement> place_ranks(const PlacementRequest& request);

} // namespace canopy
