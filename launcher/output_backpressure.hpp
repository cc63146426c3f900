// Holds the ranks' output back at the daemons while the launcher's own reader stalls (a paused pager, a full pipe),
// so that the launcher queues a bounded amount rather than all of the job's output: the ranks then wait in write(),
// as they would at a stalled terminal. The heartbeats are untouched: only the reading of rank pipes stops.
#pragma once

#include <cstddef>
#include <memory>

#include <boost/asio/io_context.hpp>

namespace canopy {

class ChildSet;
class OutputWriter;

class OutputBackpressure {
public:
    // The launcher's queue of rank output above which the daemons hold, and below which they go on.
    static constexpr std::size_t hold_above = 32u << 20;
    static constexpr std::size_t release_below = 8u << 20;

    OutputBackpressure(boost::asio::io_context& io, OutputWriter& writer) : io_(io), writer_(writer) {}
    ~OutputBackpressure() { *alive_ = false; }

    // Rank output was just queued: past hold_above, every daemon is told to hold until the queue drains.
    void queued(ChildSet& children);

private:
    boost::asio::io_context& io_;
    OutputWriter& writer_;
    bool held_ = false;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace canopy
