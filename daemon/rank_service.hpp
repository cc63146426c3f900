// A service canopyd runs for its node's ranks (the simple PMI server, ...): the daemon keeps its services in one
// list and calls each in turn, so a new service is registered with the daemon rather than wired into it.
#pragma once

#include "rank_spawner.hpp"
#include "util/result.hpp"

namespace canopy {

class RankService {
public:
    virtual ~RankService() = default;
    // Adds what a rank about to start needs from the service (environment, inherited descriptors).
    virtual Status prepare_rank(RankLaunch& launch) = 0;
    // Every rank of the node has been started (or failed to).
    virtual void ranks_started() {}
    virtual void rank_exited(long rank, int wait_status) = 0;
    // The job is ending on this node: stop serving, before the node's temp dir goes.
    virtual void stop() = 0;
};

} // namespace canopy
