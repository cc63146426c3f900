// Where a PMIx_Spawn's ranks go: onto the job's own nodes, within the spawn slots each node has left.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/result.hpp"

namespace canopy {

// The job's nodes as a spawn finds them.
struct SpawnNodes {
    std::vector<std::string> hosts;          // by node index
    std::vector<std::uint64_t> free_slots;   // by node index: --spawn-slots minus what earlier spawns placed there
    std::uint64_t slots_per_node = 0;        // --spawn-slots, which the errors quote
};

// What the spawn asks for, as the caller's PMIx directives say it.
struct SpawnPlacementRequest {
    std::uint64_t count = 0;
    std::vector<std::string> hosts;   // PMIX_HOST: "name" or "name:N" (N is ignored); empty: any node
    std::string map_by;               // PMIX_MAPBY: "" or "node" spread, "slot" or "core" fill; ":..." is ignored
    std::uint64_t per_node = 0;       // PMIX_PPR "N:node": N on each node used, node by node; 0: no such rule
};

// The spawned ranks per node index (zeros for nodes not used), in blocks node by node. Nothing is ever
// oversubscribed: a count that does not fit is an error naming the limit, as is an unknown host or mapping.
Result<std::vector<std::uint64_t>> place_spawn(const SpawnNodes& nodes, const SpawnPlacementRequest& request);

} // namespace canopy
