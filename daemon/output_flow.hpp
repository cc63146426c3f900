// Rank output on its way up is held where it starts whenever the way ahead is blocked. The launcher says so when
// its own writer stalls (OutputFlow, launcher/output_backpressure.hpp). A daemon also holds back while more than a
// mark of output waits on its link to the parent, until the link has drained below a lower mark. Held, its own
// ranks' pipes go unread and its children are told to hold. So a parent that reads slowly (a loaded launcher, a
// busy inner daemon) costs each daemon a few MiB, not the job's output.
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

    // `hold` holds this node's output (true: its ranks' and its children's) or lets it go on (false); it is called
    // on changes only.
    UplinkOutputFlow(std::shared_ptr<Link> parent, std::function<void(bool held)> hold)
        : parent_(std::move(parent)), hold_(std::move(hold))
    {
    }
    ~UplinkOutputFlow() { *alive_ = false; }
    UplinkOutputFlow(const UplinkOutputFlow&) = delete;
    UplinkOutputFlow& operator=(const UplinkOutputFlow&) = delete;

    // The parent said hold (its own reader, or the way above it, is blocked) or go on.
    void parent_says(bool held);
    // Output went up on the link (the ranks' or a child's): past backlog_bytes the node holds until it drains.
    void sent_up();
    bool held() const { return held_; }

private:
    void update();

    std::shared_ptr<Link> parent_;
    std::function<void(bool)> hold_;
    bool parent_held_ = false;
    bool backlogged_ = false;   // waiting for our link to have room
    bool held_ = false;         // what `hold_` was last told
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace canopy
