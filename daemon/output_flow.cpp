// Holding rank output where it starts while the way up is blocked.
#include "output_flow.hpp"

namespace canopy {

OutputHold OutputHold::from_wire(const wire::OutputFlow& flow)
{
    OutputHold hold;
    hold.all = flow.held;
    if (flow.stdout_line_rank >= 0)
        hold.line_rank[0] = static_cast<long>(flow.stdout_line_rank);
    if (flow.stderr_line_rank >= 0)
        hold.line_rank[1] = static_cast<long>(flow.stderr_line_rank);
    return hold;
}

wire::OutputFlow OutputHold::to_wire() const
{
    return {all, line_rank[0] ? *line_rank[0] : -1, line_rank[1] ? *line_rank[1] : -1};
}

void UplinkOutputFlow::parent_says(const wire::OutputFlow& flow)
{
    parent_hold_ = OutputHold::from_wire(flow);
    update();
}

void UplinkOutputFlow::sent_up()
{
    if (backlogged_ || parent_->queued_bytes() < backlog_bytes)
        return;
    backlogged_ = true;
    update();
    parent_->when_queued_below(room_bytes, lifetime_.guard([this] {
        backlogged_ = false;
        update();
    }));
}

void UplinkOutputFlow::update()
{
    OutputHold hold = parent_hold_;
    hold.all = hold.all || backlogged_;
    if (hold == hold_now_)
        return;
    hold_now_ = hold;
    hold_(hold);
}

} // namespace canopy
