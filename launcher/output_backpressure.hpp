// Holds the ranks' output back at the daemons while the launcher's own reader stalls (a paused pager, a full pipe),
// so that the launcher queues a bounded amount rather than all of the job's output: the ranks then wait in write(),
// as they would at a stalled terminal. The heartbeats are untouched: only the reading of rank pipes stops. Also
// holds, on one stream, every rank but the one whose long line is open there (OutputLines::line_hold).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include <boost/asio/io_context.hpp>

#include "util/lifetime.hpp"

namespace canopy {

class ChildSet;
class OutputWriter;

class OutputBackpressure {
public:
    // The launcher's queue of rank output above which the daemons hold, and below which they go on.
    static constexpr std::size_t hold_above = 32u << 20;
    static constexpr std::size_t release_below = 8u << 20;

    OutputBackpressure(boost::asio::io_context& io, OutputWriter& writer) : io_(io), writer_(writer) {}

    // Rank output was just queued: past hold_above, every daemon is told to hold until the queue drains.
    void queued(ChildSet& children);
    // On each stream (stdout, stderr), the rank whose output alone may come, if any: the daemons are told on change.
    void hold_lines(ChildSet& children, std::optional<std::uint64_t> stdout_rank,
                    std::optional<std::uint64_t> stderr_rank);
    // Every rank's output is held, for the launcher's reader.
    bool holding_all() const { return held_; }

private:
    void tell(ChildSet& children);

    boost::asio::io_context& io_;
    OutputWriter& writer_;
    bool held_ = false;
    std::optional<std::uint64_t> line_ranks_[2];
    Lifetime lifetime_;
};

} // namespace canopy
