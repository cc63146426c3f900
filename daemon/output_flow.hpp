// Rank output on its way up is held where it starts whenever the way ahead is blocked. The launcher says so when
// its own writer stalls (OutputFlow, launcher/output_backpressure.hpp). A daemon also holds back while more than a
// mark of output waits on its link to the parent, until the link has drained below a lower mark. Held, its own
// ranks' pipes go unread and its children are told to hold. So a parent that reads slowly (a loaded launcher, a
// busy inner daemon) costs each daemon a few MiB, not the job's output. The launcher may also hold one stream of
// every rank but one: that rank's line is open there, with much of the others' output waiting behind it, and goes
// on alone until it ends (launcher/output_lines.hpp), so a line of any length comes whole in bounded memory.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>

#include "tree/link.hpp"
#include "util/lifetime.hpp"
#include "wire/messages.hpp"

namespace canopy {

// What of this node's rank output is held.
struct OutputHold {
    bool all = false;
    std::optional<long> line_rank[2];   // stdout, stderr: only this rank's output goes on

    static OutputHold from_wire(const wire::OutputFlow& flow);
    wire::OutputFlow to_wire() const;
    bool holds(long rank, std::uint8_t stream) const
    {
        const auto& only = line_rank[stream == 2 ? 1 : 0];
        return all || (only && *only != rank);
    }
    bool operator==(const OutputHold&) const = default;
};

class UplinkOutputFlow {
public:
    static constexpr std::size_t backlog_bytes = 4u << 20;
    static constexpr std::size_t room_bytes = 1u << 20;

    // `hold` holds this node's output (its ranks' and its children's) as it says; it is called on changes only.
    UplinkOutputFlow(std::shared_ptr<Link> parent, std::function<void(const OutputHold& hold)> hold)
        : parent_(std::move(parent)), hold_(std::move(hold))
    {
    }
    UplinkOutputFlow(const UplinkOutputFlow&) = delete;
    UplinkOutputFlow& operator=(const UplinkOutputFlow&) = delete;

    // The parent said what to hold (its own reader, or the way above it, is blocked; a line is open at the launcher).
    void parent_says(const wire::OutputFlow& flow);
    // Output went up on the link (the ranks' or a child's): past backlog_bytes the node holds until it drains.
    void sent_up();
    const OutputHold& hold() const { return hold_now_; }

private:
    void update();

    std::shared_ptr<Link> parent_;
    std::function<void(const OutputHold&)> hold_;
    OutputHold parent_hold_;
    bool backlogged_ = false;   // waiting for our link to have room
    OutputHold hold_now_;       // what `hold_` was last told
    Lifetime lifetime_;
};

} // namespace canopy
