// --max-restarts at the root (docs/restarts.md). A rank's failure restarts every rank in place, up to K times,
// keeping the daemons and their caches: once every rank of the attempt has started, the root sends restart-ranks
// down the tree; each node stops its ranks and enters the restart barrier (restart/rank_restarts.hpp in canopyd);
// as the barrier turns around at the root, the root's services forget the old ranks, and every node starts the next
// attempt. Each restart goes in the timing report: what ended the attempt, and when every rank ran again.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "position/tree_position.hpp"
#include "root_service.hpp"
#include "timing/report.hpp"

namespace canopy {

class JobRestarts : public RootService {
public:
    // `barrier_down`: every node's old ranks are gone; the root forgets them before any node starts the next attempt.
    JobRestarts(TreePosition& position, std::uint64_t max_restarts, RootControl& control,
                std::function<void()> barrier_down);

    void start() override;
    // The job is ending for another reason: no restart is asked for any more.
    void stop(const std::string&) override { stopped_ = true; }

    // A rank failed at `failed_at` (seconds since the launcher started): `line` says how, `exit_code` is what it
    // would make the job's. True if the job restarts, after one line saying so; false once the restarts are used up.
    bool restart_after(const std::string& line, int exit_code, double failed_at);
    // From a failure that restarts the job until every node's old ranks are gone: the job is not done when its
    // ranks have all exited, and later failures of the old ranks are the restart's doing.
    bool restarting() const { return restarting_; }
    // Every rank of the current attempt has started (the root entered spawned) at `now`.
    void ranks_running(double now);

    const std::vector<timing::JobTiming::Restart>& restarts() const { return restarts_; }

private:
    // Asks every node to stop its ranks for the next attempt.
    void ask();

    TreePosition& position_;
    std::uint64_t max_restarts_;
    RootControl& control_;
    std::function<void()> barrier_down_;
    std::vector<timing::JobTiming::Restart> restarts_;
    double attempt_running_at_ = -1;   // when every rank of the current attempt had started; -1: not yet
    bool restarting_ = false;
    bool asked_ = false;               // restart-ranks sent for the restart under way
    bool awaiting_running_ = false;    // the restart barrier is down; the next attempt's ranks are starting
    bool stopped_ = false;
};

} // namespace canopy
