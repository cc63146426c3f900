// The local ranks' PMIx lifecycle and the losses it decides.
#include "pmix/rank_tracker.hpp"

#include <sys/wait.h>

#include <utility>

#include <fmt/format.h>

namespace canopy {
namespace {

std::string describe_exit(int wait_status)
{
    if (WIFSIGNALED(wait_status))
        return fmt::format("killed by signal {}", WTERMSIG(wait_status));
    return fmt::format("exit code {}", exit_status_code(wait_status));
}

} // namespace

int exit_status_code(int wait_status)
{
    if (WIFEXITED(wait_status))
        return WEXITSTATUS(wait_status);
    if (WIFSIGNALED(wait_status))
        return 128 + WTERMSIG(wait_status);
    return 1;
}

RankTracker::RankTracker(std::string node, std::function<std::string(long)> rank_name)
    : node_(std::move(node)), rank_name_(std::move(rank_name))
{
}

void RankTracker::connected(long rank)
{
    std::lock_guard lock(mutex_);
    ranks_[rank].connected = true;
}

void RankTracker::finalized(long rank)
{
    std::lock_guard lock(mutex_);
    ranks_[rank].finalized = true;
}

void RankTracker::aborted(long rank)
{
    std::lock_guard lock(mutex_);
    ranks_[rank].reported = true;
}

std::optional<RankTracker::Loss> RankTracker::exited(long rank, int wait_status)
{
    std::lock_guard lock(mutex_);
    Rank& r = ranks_[rank];
    if (r.reported || (r.connected && r.finalized))
        return std::nullopt;
    int code = exit_status_code(wait_status);
    if (code == 0)
        code = 1;   // the job still failed
    if (r.connected) {
        r.reported = true;
        return Loss{rank, code,
                    fmt::format("{} exited without calling PMIx_Finalize ({})", label(rank), describe_exit(wait_status))};
    }
    bool anyone_connected = false;
    for (const auto& [other, state] : ranks_)
        anyone_connected = anyone_connected || state.connected;
    if (!anyone_connected) {
        exited_unconnected_.insert(rank);
        return std::nullopt;
    }
    r.reported = true;
    return Loss{rank, code,
                fmt::format("{} exited without connecting to PMIx while other ranks use it ({})", label(rank),
                            describe_exit(wait_status))};
}

std::optional<RankTracker::Loss> RankTracker::loss_found_by_connect()
{
    std::lock_guard lock(mutex_);
    if (exited_unconnected_.empty())
        return std::nullopt;
    long gone = *exited_unconnected_.begin();   // one loss is enough to end the job
    exited_unconnected_.clear();
    return Loss{gone, 1, fmt::format("{} exited without connecting to PMIx while other ranks use it", label(gone))};
}

bool RankTracker::claim_abort()
{
    std::lock_guard lock(mutex_);
    return !std::exchange(abort_claimed_, true);
}

bool RankTracker::abort_claimed() const
{
    std::lock_guard lock(mutex_);
    return abort_claimed_;
}

bool RankTracker::ended_abnormally() const
{
    std::lock_guard lock(mutex_);
    bool unclean = abort_claimed_ || earlier_attempt_abnormal_;
    for (const auto& [rank, state] : ranks_)
        unclean = unclean || (state.connected && !state.finalized);
    return unclean;
}

void RankTracker::next_attempt()
{
    bool unclean = ended_abnormally();
    std::lock_guard lock(mutex_);
    earlier_attempt_abnormal_ = unclean;
    ranks_.clear();
    exited_unconnected_.clear();
    abort_claimed_ = false;
}

std::string RankTracker::label(long rank) const
{
    return fmt::format("{} on {}", rank_name_ ? rank_name_(rank) : fmt::format("rank {}", rank), node_);
}

} // namespace canopy
