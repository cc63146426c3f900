// Holding rank output at the daemons while the launcher's reader stalls.
#include "output_backpressure.hpp"

#include <boost/asio/post.hpp>

#include "output_writer.hpp"
#include "tree/children.hpp"
#include "wire/messages.hpp"

namespace canopy {

void OutputBackpressure::queued(ChildSet& children)
{
    if (held_ || writer_.queued_bytes() <= hold_above)
        return;
    held_ = true;
    tell(children);
    // The writer's thread calls this; the io thread tells the tree.
    auto release = lifetime_.guard([this, &children] {
        held_ = false;
        tell(children);
    });
    writer_.when_below(release_below, [this, release]() mutable { boost::asio::post(io_, release); });
}

void OutputBackpressure::hold_lines(ChildSet& children, std::optional<std::uint64_t> stdout_rank,
                                    std::optional<std::uint64_t> stderr_rank)
{
    if (line_ranks_[0] == stdout_rank && line_ranks_[1] == stderr_rank)
        return;
    line_ranks_[0] = stdout_rank;
    line_ranks_[1] = stderr_rank;
    tell(children);
}

void OutputBackpressure::tell(ChildSet& children)
{
    auto wire_rank = [](std::optional<std::uint64_t> rank) { return rank ? static_cast<std::int64_t>(*rank) : -1; };
    children.broadcast(wire::to_frame(wire::OutputFlow{held_, wire_rank(line_ranks_[0]), wire_rank(line_ranks_[1])}));
}

} // namespace canopy
