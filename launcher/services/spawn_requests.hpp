// PMIx_Spawn at the root: places the namespace (SpawnService), tells every daemon, then answers the caller.
#pragma once

#include "root_service.hpp"
#include "spawn_service.hpp"
#include "position/tree_position.hpp"

namespace canopy {

class SpawnRequests : public RootService {
public:
    SpawnRequests(TreePosition& position, const wire::LaunchPlan& plan) : position_(position), placement_(plan) {}

    void serve_requests(RoutedServices& services) override;
    // Names tree ranks in the user's lines: "rank 3", "rank 1 of spawned canopy.<job>.2".
    std::string rank_name(long tree_rank) const { return placement_.rank_name(tree_rank); }

private:
    void spawn(const wire::SpawnRequest& request, RoutedServices::Reply<wire::SpawnRequest> reply);

    TreePosition& position_;
    SpawnService placement_;
};

} // namespace canopy
