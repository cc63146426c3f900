// Ranks spawned onto nodes that had reported done: the root counts them (wire::LateRanks), and the job is done
// only once they have ended too.
#pragma once

#include <functional>

#include "root_service.hpp"

namespace canopy {

class LateRankCount : public RootService {
public:
    // `phases` takes the timing the nodes send with each end; `all_ended` is called when the count returns to 0.
    LateRankCount(timing::PhaseSet& phases, std::function<void()> all_ended)
        : phases_(phases), all_ended_(std::move(all_ended))
    {
    }

    void serve_requests(RoutedServices& services) override;
    // Spawned ranks running on nodes that had reported done.
    long running() const { return running_; }

private:
    timing::PhaseSet& phases_;
    std::function<void()> all_ended_;
    long running_ = 0;
};

} // namespace canopy
