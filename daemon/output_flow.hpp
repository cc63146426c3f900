// Rank output on its way up is held where it starts whenever the way ahead is blocked. The launcher says so when
// its own writer stalls (OutputFlow, launcher/output_backpressure.hpp). A daemon also holds back while more than a
// mark of output waits on its link to the parent: its own ranks' pipes go unread and its children are told to
// hold, until the link has drained below a lower mark. So a parent that reads slowly (a loaded launcher, a busy
// inner daemon) costs each daemon a few MiB, not the job's output.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "tree/link.hpp"

namespace canopy {

class UplinkOutputFlow {
public:
    static constexpr std::size_t backlog_bytes = 4u << 20;
    static constexpr std::size_t room_bytes = 1u << 20;

    // `hold_children` tells every child to hold its output (true) or go on (false); it is called on changes only.
    UplinkOutputFlow(std::shared_ptr<Link> parent, std::function<void(bool held)> hold_children)
        : parent_(std::move(parent)), hold_children_(std::move(hold_children))
    {
    }
    ~UplinkOutputFlow() { *alive_ = false; }
    UplinkOutputFlow(const UplinkOutputFlow&) = delete;
    UplinkOutputFlow& operator=(const UplinkOutputFlow&) = delete;

    // The parent said hold (its own reader, or the way above it, is blocked) or go on.
    void parent_says(bool held);
    // Output went up on the link (the ranks' or a child's): past backlog_bytes the children hold until it drains.
    void sent_up();
    // For RankSpawner::Events::output_backlogged: whether output waits past backlog_bytes; if so `room` runs once
    // fewer than room_bytes do.
    bool backlogged(std::function<void()> room);

private:
    void tell_children();

    std::shared_ptr<Link> parent_;
    std::function<void(bool)> hold_children_;
    bool parent_held_ = false;
    bool backlogged_ = false;      // the children hold for our link until it has room
    bool children_held_ = false;   // what they were last told
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace canopy
