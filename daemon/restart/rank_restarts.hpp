// --max-restarts on one node (docs/restarts.md). The root's restart-ranks message stops this node's ranks, keeping
// the daemon, its children and its caches; once they are gone the node enters the restart barrier, a whole-job
// fence of its own domain. As that comes down, every node's old ranks are gone and every fence of theirs has come
// down before it, so the node may forget their exchange and start the next attempt.
#pragma once

#include <functional>

#include "position/tree_position.hpp"
#include "wire/messages.hpp"

namespace canopy {

class RankRestarts {
public:
    struct Hooks {
        // Ends every rank of this node now: a short grace, then SIGKILL.
        std::function<void()> stop_ranks;
        // Whether every rank of this node has exited.
        std::function<bool()> ranks_gone;
        // Every node's ranks are gone: the node starts attempt `attempt` (1 for the first restart).
        std::function<void(long attempt)> start_attempt;
    };

    // Registers for the parent's restart-ranks; `position` must outlive this.
    RankRestarts(TreePosition& position, Hooks hooks);

    // Whether this node is between a restart's request and its next attempt: its ranks' exits and failures are then
    // the restart's doing, not news for the root.
    bool stopping() const { return stopping_; }
    // The attempt this node runs or is about to start (0 for the first).
    long attempt() const { return attempt_; }
    // A rank of this node has exited: the barrier may be entered now.
    void rank_exited();

private:
    bool on_restart(const wire::Frame& frame);
    void enter_barrier_once_ranks_gone();

    TreePosition& position_;
    Hooks hooks_;
    long attempt_ = 0;
    bool stopping_ = false;
    bool in_barrier_ = false;
};

} // namespace canopy
