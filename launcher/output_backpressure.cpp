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
    children.broadcast(wire::to_frame(wire::OutputFlow{true}));
    // The writer's thread calls this; the io thread tells the tree.
    writer_.when_below(release_below, [this, &children, alive = alive_] {
        boost::asio::post(io_, [this, &children, alive] {
            if (!*alive)
                return;
            held_ = false;
            children.broadcast(wire::to_frame(wire::OutputFlow{false}));
        });
    });
}

} // namespace canopy
