// Holding rank output where it starts while the way up is blocked.
#include "output_flow.hpp"

namespace canopy {

void UplinkOutputFlow::parent_says(bool held)
{
    parent_held_ = held;
    update();
}

void UplinkOutputFlow::sent_up()
{
    if (backlogged_ || parent_->queued_bytes() < backlog_bytes)
        return;
    backlogged_ = true;
    update();
    parent_->when_queued_below(room_bytes, [this, alive = alive_] {
        if (!*alive)
            return;
        backlogged_ = false;
        update();
    });
}

void UplinkOutputFlow::update()
{
    bool held = parent_held_ || backlogged_;
    if (held == held_)
        return;
    held_ = held;
    hold_(held);
}

} // namespace canopy
