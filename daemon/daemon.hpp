// canopyd's job on one node: join the tree under its parent, start its children and its ranks, roll results up.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <spdlog/common.h>

#include "collective/store_limit.hpp"
#include "output_flow.hpp"
#include "output_marks.hpp"
#include "pmix/pmix_host.hpp"
#include "proc/node_guard.hpp"
#include "proc/node_temp_dir.hpp"
#include "proc/process.hpp"
#include "node_services.hpp"
#include "rank_service.hpp"
#include "rank_spawner.hpp"
#include "restart/rank_restarts.hpp"
#include "timing/sketch.hpp"
#include "tree/link.hpp"
#include "tree/relay_pacing.hpp"
#include "position/tree_position.hpp"
#include "tree/topology.hpp"
#include "wire/auth.hpp"
#include "wire/messages.hpp"

namespace canopy {

struct RankBatch;

struct DaemonArgs {
    std::string parent_host;
    std::uint16_t parent_port = 0;
    long position = 0;
    std::string bind_address;   // set for simulated nodes
    std::string node_name;      // for log lines until the plan arrives
    bool same_clock = false;    // the parent runs on this host: no clock offset to measure
    double join_timeout = wire::default_connect_timeout;   // the parent's [tree] connect_timeout
    int verbosity = 0;
    std::int64_t started_ns = 0;
};

// A daemon inside a test's process, beside the root and other daemons on one io_context.
struct InProcessDaemon {
    InProcessStarter start_child;   // how it starts its children
    std::function<void()> stop;     // it is done: instead of stopping the io_context, which the others share
};

class Daemon : private NodeControl {
public:
    // `reaper` is the process's one reaper. `guard` was started before anything it guards exists; without one,
    // ranks may outlive a crashed daemon.
    Daemon(asio::io_context& io, ProcessReaper& reaper, DaemonArgs args, const auth::Key& key,
           std::optional<NodeGuard> guard, InProcessDaemon in_process = {});
    ~Daemon();

    // Connects to the parent; the io_context then runs until the daemon is done. Returns the exit code.
    void start();
    int exit_code() const { return exit_code_; }
    // A failure no handler reported itself (a thread the event loop could not start): the job ends as after any
    // failure of this node, which the launcher names.
    void fail(const std::string& why);

private:
    asio::awaitable<void> join_parent();
    void on_parent_frame(wire::Frame frame);
    void on_parent_closed(const std::string& reason);
    void on_plan(wire::LaunchPlan plan);
    // This node's place in the tree: its children, their reports, the collectives and the frames they send.
    void join_tree_position();
    // What the parent sends that the tree position leaves to the daemon: stdin, signals, shutdown.
    void register_parent_handlers();
    // A namespace spawned into the job (the root's namespace-start): the collectives and the rank services learn
    // it, and this node starts its ranks of it.
    void start_namespace(const wire::NamespaceStart& start);
    // Spawned ranks started after this node reported done (what 1) or one of them ended (what 2).
    void report_late_ranks(bool started, std::size_t count);
    // What children send that is not a report of their subtree or a collective: passed up, or a failure noted.
    void register_child_handlers();
    void make_rank_spawner();
    // --max-restarts: the node's part of a restart (restart/rank_restarts.hpp), once planned.
    void make_rank_restarts();
    // The node's services for its ranks, once planned (none before).
    std::vector<std::unique_ptr<RankService>>& rank_services();
    // Starts the ranks once every service lets them (a staged job's wait for the node cache).
    void start_ranks_when_ready();
    void start_ranks();
    // Starts planned ranks (the job's, or a spawned namespace's), or refuses them all with the batch's reason.
    void spawn_batch(RankBatch batch);

    // Whether every rank has finished and the services have read what they sent (some wait a moment for that).
    bool ranks_drained();
    // This node's subtree has entered `step`: tell the parent, or act on leaving and left.
    void on_entered(TreePosition::State step);
    // Lost the parent or told to stop by a signal: kill everything and leave.
    void abandon(const std::string& why, spdlog::level::level_enum level = spdlog::level::warn);
    // The daemon is done: the io_context stops (or, in a test's process, the test is told).
    void stop_running();
    // Kills what is left in the ranks' process groups and removes the node temp dir.
    void clean_up_node();
    // Sweeps the temp dirs that jobs killed outright left on this host (proc/node_temp_dir.hpp).
    void remove_abandoned_temp_dirs_later();
    // Tells the guard about a dir about to be made, so that it goes however the daemon ends.
    NodeTempDir::BeforeCreate watch_for_guard() override;
    bool watch_path(const std::string& path) override { return guard_ && guard_->watch_path(path); }
    ProcessReaper& reaper() override { return reaper_; }
    // Our clock + clock_offset_ns_ = the root's, and the parent's + root_offset_ns = the root's.
    double parent_clock_offset() const override
    {
        return static_cast<double>(plan_->root_offset_ns - clock_offset_ns_) / 1e9;
    }
    // The node cannot run ranks (its temp dir or stage cache could not be made): `message` goes to the root, which
    // ends the job, and this node starts none.
    void fail_setup(const std::string& message) override;
    bool setup_failed() const override { return setup_failed_; }
    void report_error(const std::string& node, const std::string& message) override;
    // The root needs a job's first failure, not every consequence of it: later ones are dropped here.
    void report_rank_failure(const wire::RankFailed& failed);
    // A rank asked to end the job (a PMI abort), or broke off from its PMI server: `message` names it.
    void report_abort(long rank, int exit_code, const std::string& message) override;
    // `urgent`: ahead of the output queued on the link (Link::send), for a small frame the root waits on.
    void send_up(std::vector<std::uint8_t> frame, bool urgent = false) override;

    double since_launch(std::int64_t local_ns) const override;
    std::string rank_label(long rank) const override;
    std::string rank_phase(long rank, const char* what) const;
    // The job's tree, once the plan has arrived.
    Topology tree() const;
    // A daemon phase: into the sketches, and onto this node's --trace track.
    void node_phase(const std::string& name, double seconds) override;
    // One --trace event (rank -1: the node's track); nothing unless the job asked for a trace.
    void trace(std::int64_t rank, std::string name, double end, double duration = -1) override;

    asio::io_context& io_;
    DaemonArgs args_;
    auth::Key key_;
    ProcessReaper& reaper_;
    InProcessDaemon in_process_;
    asio::signal_set signals_;
    std::shared_ptr<Link> parent_;
    std::unique_ptr<UplinkOutputFlow> output_flow_;   // with parent_
    std::unique_ptr<RelayPacing> relay_pacing_;       // with parent_
    std::optional<wire::LaunchPlan> plan_;
    std::unique_ptr<TreePosition> position_;   // children, their reports and the collectives, once planned
    std::unique_ptr<RankSpawner> ranks_;
    std::unique_ptr<RankRestarts> restarts_;   // --max-restarts, once planned
    std::optional<StoreLimit> store_limit_;   // what each rank keeps in the job's stores, once planned
    std::optional<NodeServices> services_;   // each adds to every rank's launch, once planned
    std::optional<OutputMarks> output_marks_;                    // --mark-on-output
    std::optional<NodeGuard> guard_;
    std::string node_;
    NodeTempDir tmpdir_;
    std::int64_t clock_offset_ns_ = 0;   // our clock + this = root clock
    std::int64_t connected_ns_ = 0;
    timing::PhaseSet phases_;
    std::vector<wire::TraceEvent> trace_;

    std::map<long, std::int64_t> rank_spawn_ns_;
    std::set<long> late_ranks_;   // spawned here after this node reported done, still running
    bool setup_failed_ = false;   // fail_setup(): no rank starts here
    bool reported_failure_ = false;
    bool stopped_ = false;
    int exit_code_ = 0;
};

} // namespace canopy
