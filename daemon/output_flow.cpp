// Holding rank output where it starts while the way up is blocked.
#include "output_flow.hpp"

namespace canopy {

void UplinkOutputFlow::parent_says(bool held)
{
    parent_held_ = held;
    tell_children();
}

void UplinkOutputFlow::sent_up()
{
    if (backlogged_ || parent_->queued_bytes() < backlog_bytes)
        return;
    backlogged_ = true;
    tell_children();
    parent_->when_queued_below(room_bytes, [this, alive = alive_] {
        if (!*alive)
            return;
        backlogged_ = false;
        tell_children();
    });
}

bool UplinkOutputFlow::backlogged(std::function<void()> room)
{
    if (parent_->queued_bytes() < backlog_bytes)
        return false;
    parent_->when_queued_below(room_bytes, std::move(room));
    return true;
}

void UplinkOutputFlow::tell_children()
{
    bool held = parent_held_ || backlogged_;
    if (held == children_held_)
        return;
    children_held_ = held;
    hold_children_(held);
}

} // namespace canopy
