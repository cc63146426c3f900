// A relay's reading from its parent, paced on how fast its children take what it forwards.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace canopy {

class Link;

// A fence's result comes down in chunks, and a relay forwards each one as it arrives. Children that read slower
// than the parent sends (a busy node, or 1,000 simulated nodes on two cores) would leave the whole result queued
// here beside the relay's own copy: twice the result. So, while the slowest child has more than `high` bytes
// waiting, the relay stops reading its parent, and the rest waits in the parent's queue and the kernel's socket
// buffers; the parent, a relay too, paces itself the same way, up to the root. A pause ends when every child is
// under `low`, or after `longest`: a hung child must not hold back what the parent says (an abort) for longer
// than that; its heartbeat names it within the heartbeat bound.
class RelayPacing {
public:
    struct Marks {
        std::size_t high = 1024 * 1024;   // four 256 KiB chunks of a fence's result
        std::size_t low = 256 * 1024;
        std::chrono::milliseconds longest{500};
    };

    // `children_queued`: the most bytes waiting to be written on any child's link.
    RelayPacing(boost::asio::io_context& io, std::shared_ptr<Link> parent, std::function<std::size_t()> children_queued,
                Marks marks);
    RelayPacing(boost::asio::io_context& io, std::shared_ptr<Link> parent, std::function<std::size_t()> children_queued)
        : RelayPacing(io, std::move(parent), std::move(children_queued), Marks{})
    {
    }
    ~RelayPacing();
    RelayPacing(const RelayPacing&) = delete;
    RelayPacing& operator=(const RelayPacing&) = delete;

    // After the relay handled a frame from its parent (and forwarded what it had to).
    void frame_handled();
    // Pauses so far, for the timing report: how often the children were behind.
    std::uint64_t pauses() const { return pauses_; }

private:
    void check_soon();
    void resume();

    std::shared_ptr<Link> parent_;
    std::function<std::size_t()> children_queued_;
    Marks marks_;
    boost::asio::steady_timer timer_;
    std::chrono::steady_clock::time_point paused_at_;
    bool paused_ = false;
    std::uint64_t pauses_ = 0;
};

} // namespace canopy
