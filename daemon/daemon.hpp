// canopyd's job on one node: join the tree under its parent, start its children and its ranks, roll results up.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <spdlog/common.h>

#include "pmix/pmix_host.hpp"
#include "proc/node_guard.hpp"
#include "proc/process.hpp"
#include "rank_service.hpp"
#include "rank_spawner.hpp"
#include "stage_fetcher.hpp"
#include "stage_receiver.hpp"
#include "timing/sketch.hpp"
#include "tree/link.hpp"
#include "tree/tree_position.hpp"
#include "tree/topology.hpp"
#include "wire/auth.hpp"
#include "wire/messages.hpp"

namespace canopy {

struct DaemonArgs {
    std::string parent_host;
    std::uint16_t parent_port = 0;
    long position = 0;
    std::string bind_address;   // set for simulated nodes
    std::string node_name;      // for log lines until the plan arrives
    bool same_clock = false;    // the parent runs on this host: no clock offset to measure
    int verbosity = 0;
    std::int64_t started_ns = 0;
};

class Daemon {
public:
    // `guard` was started before anything it guards exists; without one, ranks may outlive a crashed daemon.
    Daemon(asio::io_context& io, DaemonArgs args, const auth::Key& key, std::optional<NodeGuard> guard);
    ~Daemon();

    // Connects to the parent; the io_context then runs until the daemon is done. Returns the exit code.
    void start();
    int exit_code() const { return exit_code_; }

private:
    asio::awaitable<void> join_parent();
    void on_parent_frame(wire::Frame frame);
    void on_parent_closed(const std::string& reason);
    void on_plan(wire::LaunchPlan plan);
    // This node's place in the tree: its children, their reports, the collectives and the frames they send.
    void join_tree_position();
    // The PMI servers this node's ranks connect to (simple PMI, and PMIx on demand or eager).
    void start_pmi_servers();
    PmixTree pmix_tree();
    // Simple PMI (PMI-1, PMI-2) for MPICH-family ranks, registered as a rank service.
    void start_simple_pmi_server();
    void make_rank_spawner();
    // The socket the ranks' libcanopy uses for phase marks and the job store, registered as a rank service.
    void start_rank_socket();
    void stamp_output_marks(long rank, const std::string& data);
    void start_ranks();
    // Stage index and contents from the parent: forwarded to the children, written to the node cache.
    void on_stage_frame(const wire::Frame& frame);

    // Whether every rank has finished and the services have read what they sent (some wait a moment for that).
    bool ranks_drained();
    // Tells the parent this node's subtree has entered `step`.
    void report_step(TreePosition::Readiness step);
    void maybe_exit();
    void shutdown(bool abort);
    // Lost the parent or told to stop by a signal: kill everything and leave.
    void abandon(const std::string& why, spdlog::level::level_enum level = spdlog::level::warn);
    // Kills what is left in the ranks' process groups and removes the node temp dir.
    void clean_up_node();
    void report_error(const std::string& node, const std::string& message);
    // The root needs a job's first failure, not every consequence of it: later ones are dropped here.
    void report_rank_failure(const wire::RankFailed& failed);
    void send_up(std::vector<std::uint8_t> frame);

    double since_launch(std::int64_t local_ns) const;
    std::string rank_label(long rank) const;
    // The job's tree, once the plan has arrived.
    Topology tree() const;
    // A daemon phase: into the sketches, and onto this node's --trace track.
    void node_phase(const std::string& name, double seconds);
    // One --trace event (rank -1: the node's track); nothing unless the job asked for a trace.
    void trace(std::int64_t rank, std::string name, double end, double duration = -1);

    asio::io_context& io_;
    DaemonArgs args_;
    auth::Key key_;
    ProcessReaper reaper_;
    asio::signal_set signals_;
    std::shared_ptr<Link> parent_;
    std::optional<wire::LaunchPlan> plan_;
    std::unique_ptr<TreePosition> position_;   // children, their reports and the collectives, once planned
    std::unique_ptr<RankSpawner> ranks_;
    std::vector<std::unique_ptr<RankService>> rank_services_;   // each adds to every rank's launch
    std::optional<StageReceiver> stage_;
    // On-demand staging: this node's fetch cache (misses go to the parent) and the ranks' socket to it.
    std::unique_ptr<StageFetchTree> stage_fetch_;
    std::unique_ptr<StageFetcher> stage_fetcher_;
    void start_stage_fetcher(const std::string& stage_dir);
    std::vector<std::pair<std::regex, std::string>> output_marks_;   // --mark-on-output
    std::map<long, std::vector<bool>> output_marks_hit_;              // by rank: which have fired
    bool stage_failed_ = false;
    std::optional<NodeGuard> guard_;
    std::string node_;
    std::string tmpdir_;
    std::int64_t clock_offset_ns_ = 0;   // our clock + this = root clock
    std::int64_t connected_ns_ = 0;
    timing::PhaseSet phases_;
    std::vector<wire::TraceEvent> trace_;

    std::map<long, std::int64_t> rank_spawn_ns_;
    bool ranks_started_ = false;
    bool reported_failure_ = false;
    bool shutting_down_ = false;
    bool exiting_ = false;
    int exit_code_ = 0;
};

} // namespace canopy
