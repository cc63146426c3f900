// --max-restarts on one node: stop the ranks, wait at the restart barrier, start the next attempt.
#include "restart/rank_restarts.hpp"

#include "util/log.hpp"

namespace canopy {

RankRestarts::RankRestarts(TreePosition& position, Hooks hooks) : position_(position), hooks_(std::move(hooks))
{
    position_.on_parent(wire::MessageType::restart_ranks,
                        [this](long, const wire::Frame& frame) { return on_restart(frame); });
}

bool RankRestarts::on_restart(const wire::Frame& frame)
{
    auto restart = wire::decode_frame<wire::RestartRanks>(frame);
    // The root asks for one attempt after another, each once its barrier is down: anything else is not its.
    if (!restart || stopping_ || static_cast<long>(restart->attempt) != attempt_ + 1)
        return false;
    if (position_.leaving())
        return true;   // the job is ending here: nothing to restart
    position_.children().broadcast(wire::encode_frame(frame));
    attempt_ = static_cast<long>(restart->attempt);
    stopping_ = true;
    area_logger("spawn").info("stopping this node's ranks for attempt {}", attempt_ + 1);
    hooks_.stop_ranks();
    enter_barrier_once_ranks_gone();
    return true;
}

void RankRestarts::rank_exited() { enter_barrier_once_ranks_gone(); }

void RankRestarts::enter_barrier_once_ranks_gone()
{
    if (!stopping_ || in_barrier_ || !hooks_.ranks_gone())
        return;
    in_barrier_ = true;
    position_.collectives().fence(
        {}, {},
        [this](Status status, std::vector<std::uint8_t>) {
            in_barrier_ = false;
            if (!status)
                return;   // the job is ending: the collectives were failed on the way out
            stopping_ = false;
            hooks_.start_attempt(attempt_);
        },
        wire::FenceDomain::restart);
}

} // namespace canopy
