// One position of the daemon tree, the launcher's (0) or a daemon's: its children and their links, what their
// subtrees have reported, the fences and requests over the tree, and a table of handlers for the other frames
// children send. Root and Daemon supply only what differs (docs/architecture.md, "One tree position").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "collective/tree_collectives.hpp"
#include "proc/process.hpp"
#include "timing/sketch.hpp"
#include "tree/bulk_route.hpp"
#include "tree/children.hpp"
#include "position/subtree_progress.hpp"
#include "tree/topology.hpp"
#include "wire/auth.hpp"
#include "wire/messages.hpp"

namespace canopy {

class TreePosition {
public:
    // The states every position goes through, each once (spawned and done once per attempt, with --max-restarts). The readiness steps, planned to done, come in this
    // order: a step is entered when this position's own part of it is complete and every child's subtree has
    // reported it (a daemon then reports it to its parent, the root stamps it). `leave` enters leaving from any
    // state, orderly after done or as the abort edge before it; left follows once the position's own part and
    // every child have finished. (A daemon is joining, connecting to its parent, before it has a position.)
    enum class State { planned = 0, up = 1, spawned = 2, done = 3, leaving = 4, left = 5 };

    struct Hooks {
        // Whether this position's own part of `step` is complete: for a daemon, its ranks started (spawned), all
        // finished and read (done), all gone (left).
        std::function<bool(State step)> local_ready;
        // The position has just entered `step`.
        std::function<void(State step)> entered;
        // A child could not be started, or its link closed before its subtree was done. `line` names its host.
        std::function<void(long position, const std::string& line)> child_failed;
        // A line a child daemon (or its agent) wrote to stderr after it connected.
        std::function<void(long position, const std::string& line)> log_line;
    };
    // Handles one frame from a child; false if it was malformed (the position logs that, naming the child).
    using Handler = std::function<bool(long from, const wire::Frame& frame)>;

    // `plan` is the job's plan as this position holds it; it must outlive the position. Children get a copy with
    // their own position and `root_offset_ns` (their parent's clock offset to the root). `phases` and `trace`
    // receive what the children's subtrees report when done. `to_parent` is empty at the root.
    TreePosition(boost::asio::io_context& io, ProcessReaper& reaper, const auth::Key& key, long position,
                 const wire::LaunchPlan& plan, std::function<void(std::vector<std::uint8_t>)> to_parent,
                 Hooks hooks, timing::PhaseSet& phases,
                 std::vector<wire::TraceEvent>& trace);

    // Registers the handler for one type of frame from children (fences and routed requests never get here).
    void on(wire::MessageType type, Handler handler);
    // Registers the handler for one type of frame from the parent.
    void on_parent(wire::MessageType type, Handler handler);
    // A frame from the parent: a collective's, or one for a registered handler. False if nobody took it or it was
    // malformed (the caller logs that).
    bool from_parent(long parent, const wire::Frame& frame);

    // Listens on `listen_address` and starts this position's children through the plan's agent, running
    // `daemon_path` there, or through `in_process` if set. Nothing to do at a leaf.
    Status start_children(const std::string& listen_address, const std::string& daemon_path,
                          std::int64_t root_offset_ns, InProcessStarter in_process = {});

    // Enters every state whose conditions now hold, in order. The position calls it when a child reports or
    // leaves; the owner calls it when its own part may have changed.
    void advance();
    // Enters leaving: the children are told to shut down (and, on an abort, those not yet connected are
    // stopped); then left follows as soon as everything has finished. Nothing if already leaving.
    void leave(bool abort);
    // The job's ranks restart in place (--max-restarts) for attempt `attempt`, here as at every position, as the
    // restart barrier comes down: the old ranks' exchange is forgotten (what waits for it is answered with `why`), and the position goes
    // back to up, its subtrees to be spawned and done again. Nothing once leaving.
    void restart_ranks(std::uint64_t attempt, const std::string& why);
    // Enters left at once, without waiting for anything (the owner has killed what was left, or is leaving
    // with the process). The entered hook is not called.
    void give_up();
    State state() const { return state_; }
    bool leaving() const { return state_ >= State::leaving; }
    bool aborted() const { return aborted_; }
    // Whether the readiness sequence got as far as `step` (up, spawned or done), whatever the state is now.
    bool reached(State step) const { return reached_ >= step; }

    // Sends a frame to the parent; nothing at the root.
    void send_to_parent(std::vector<std::uint8_t> frame);
    ChildSet& children() { return *children_; }
    // Where staged files go to the children: their links, unless a fabric plane took over (use_bulk_route). A
    // child's fabric-hello goes to the route in use.
    BulkRoute& bulk() { return *bulk_; }
    void use_bulk_route(std::unique_ptr<BulkRoute> route);
    TreeCollectives& collectives() { return *collectives_; }
    // What the children's subtrees reported: daemons up, ranks started, ranks done (this position not counted).
    std::uint64_t daemons_below() const { return daemons_below_; }
    std::uint64_t spawned_below() const { return spawned_below_; }
    std::uint64_t done_below() const { return done_below_; }

private:
    void on_child_frame(long position, wire::Frame frame);
    void on_child_closed(long position, const std::string& reason);
    bool on_subtree_report(long position, const wire::Frame& frame);
    bool on_fabric_hello(long position, const wire::Frame& frame);

    const wire::LaunchPlan& plan_;
    long position_;
    Topology topology_;
    Hooks hooks_;
    std::function<void(std::vector<std::uint8_t>)> to_parent_;
    timing::PhaseSet& phases_;
    std::vector<wire::TraceEvent>& trace_;
    std::int64_t root_offset_ns_ = 0;
    std::optional<wire::ChildPlanFrames> child_plans_;   // made when the first child connects
    std::unique_ptr<ChildSet> children_;
    std::unique_ptr<TreeCollectives> collectives_;
    std::unique_ptr<BulkRoute> bulk_;
    SubtreeProgress progress_;
    std::map<wire::MessageType, Handler> handlers_;
    std::map<wire::MessageType, Handler> parent_handlers_;
    std::uint64_t daemons_below_ = 0, spawned_below_ = 0, done_below_ = 0;
    State state_ = State::planned;
    State reached_ = State::planned;   // the last readiness step entered
    bool aborted_ = false;
    bool advancing_ = false;
};

} // namespace canopy
