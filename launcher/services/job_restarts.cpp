// --max-restarts at the root.
#include "services/job_restarts.hpp"

#include <fmt/format.h>

#include "wire/messages.hpp"

namespace canopy {

JobRestarts::JobRestarts(TreePosition& position, std::uint64_t max_restarts, RootControl& control,
                         std::function<void()> barrier_down)
    : position_(position), max_restarts_(max_restarts), control_(control), barrier_down_(std::move(barrier_down))
{
}

void JobRestarts::start()
{
    position_.collectives().watch_results(wire::FenceDomain::restart, [this](std::int32_t status, const auto&) {
        if (status != 0 || stopped_ || !restarting_)
            return;   // the job is ending already, with its own line
        control_.stamp("ranks_stopped");
        restarting_ = false;
        awaiting_running_ = true;
        attempt_running_at_ = -1;
        barrier_down_();
    });
}

bool JobRestarts::restart_after(const std::string& line, int exit_code, double failed_at)
{
    if (stopped_ || restarting_ || restarts_.size() >= max_restarts_)
        return false;
    restarting_ = true;
    asked_ = false;
    awaiting_running_ = false;   // the last restart's ranks never all ran: its running_again_at stays -1
    // A rank that fails before every rank of its attempt has started: the attempt ran for no time.
    restarts_.push_back({line, exit_code, attempt_running_at_ < 0 ? failed_at : attempt_running_at_, failed_at, -1});
    control_.print_line(fmt::format("canopy: {}; restarting every rank (restart {} of {})\n", line, restarts_.size(),
                                    max_restarts_));
    // A node whose ranks are still starting has nothing to stop yet: the request waits until every rank has started
    // (or failed to), which the failed rank's own node has told the root already.
    if (position_.reached(TreePosition::State::spawned))
        ask();
    return true;
}

void JobRestarts::ask()
{
    asked_ = true;
    control_.stamp("ranks_restarting");
    position_.children().broadcast(wire::to_frame(wire::RestartRanks{restarts_.size()}));
}

void JobRestarts::ranks_running(double now)
{
    if (restarting_ && !asked_) {   // the failure came before every rank of its attempt had started
        ask();
        return;
    }
    if (awaiting_running_) {
        restarts_.back().running_again_at = now;
        awaiting_running_ = false;
    }
    attempt_running_at_ = now;
}

} // namespace canopy
