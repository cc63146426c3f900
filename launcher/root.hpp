// The root of the tree: starts the top level of daemons, runs the root's services (the ranks' output among them),
// decides the job's end.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "exit_codes.hpp"
#include "launch_plan.hpp"
#include "job_suspension.hpp"
#include "services/job_restarts.hpp"
#include "services/late_ranks.hpp"
#include "services/rank_output.hpp"
#include "services/root_service.hpp"
#include "services/spawn_requests.hpp"
#include "stdin_forwarder.hpp"
#include "proc/node_guard.hpp"
#include "proc/process.hpp"
#include "timing/report.hpp"
#include "timing/sketch.hpp"
#include "position/tree_position.hpp"
#include "wire/auth.hpp"

namespace canopy {

class Root : private RootControl {
public:
    // `reaper` is the process's one reaper. `in_process`, if set, starts the top daemons instead of the agent
    // (a tree inside one process, in tests).
    Root(asio::io_context& io, ProcessReaper& reaper, RootPlan plan, std::int64_t started_ns,
         std::int64_t hosts_resolved_ns, InProcessStarter in_process = {});
    ~Root();

    // Runs the job to the end and returns canopy's exit code.
    int run();
    timing::JobTiming job_timing() const;
    // Every node's and rank's events, when the job was run with --trace.
    const std::vector<wire::TraceEvent>& trace_events() const { return trace_; }
    std::vector<std::string> hosts() const { return plan_.plan.hosts.expand(); }

private:
    // What children send that the tree position leaves to the root: failures, log lines, stdin taken.
    void register_child_handlers();
    void on_rank_failed(const wire::RankFailed& failed);
    void on_signal(int signo);
    // A job's first SIGINT, SIGTERM or SIGHUP: stops a job still starting, else forwards it to the ranks.
    void stop_or_forward(int signo, int tries_left);
    void note_signal_at_end(int signo);
    void start_stdin_forwarding();
    void print_daemon_line(const std::string& line);
    // One of canopy's own lines on stderr, on a line of its own even when a rank's partial line is open there.
    void print_own_line(std::string line);
    void print_line(std::string line) override { print_own_line(std::move(line)); }
    // Ends the job: orderly (all ranks done) or abort (failure, signal, timeout). The tree position leaves.
    void end_job(bool abort, int exit_code);
    // Every daemon has left (or was killed for not leaving in time).
    void finish();
    void stamp(const std::string& name) override;
    void fail(int exit_code, const std::string& line) override;
    void output_lost(int exit_code) override;

    // Makes the root's services (output, fabric, staging, job store, name service, spawn, late ranks), each
    // answering its own requests.
    void make_services();

    asio::io_context& io_;
    RootPlan plan_;
    auth::Key key_;
    ProcessReaper& reaper_;
    InProcessStarter in_process_;
    std::unique_ptr<TreePosition> position_;   // the root turns fences around and keeps the stores
    std::vector<std::unique_ptr<RootService>> services_;   // ended in the reverse of the order they were made
    RankOutput* output_ = nullptr;          // in services_: the ranks' output and canopy's own lines
    SpawnRequests* spawn_ = nullptr;        // in services_: names spawned ranks in the user's lines
    LateRankCount* late_ranks_ = nullptr;   // in services_: spawned ranks that keep the job from ending
    JobRestarts* restarts_ = nullptr;       // in services_ with --max-restarts: a failed rank restarts every rank
    std::vector<wire::TraceEvent> trace_;
    // Removes the launcher's stage cache and its fabric endpoint's file even if the launcher is killed.
    std::optional<NodeGuard> guard_;
    // Has the guard remove `path` (what it is, for a line if there can be no guard), starting the guard if need be.
    void watch_path(const std::string& path, const char* what) override;
    asio::signal_set signals_;
    JobSuspension suspension_;   // Ctrl-Z
    asio::steady_timer timeout_timer_;
    asio::steady_timer grace_timer_;
    asio::steady_timer teardown_deadline_;
    std::int64_t started_ns_;
    std::vector<timing::Stamp> timeline_;
    timing::PhaseSet phases_;
    StdinForwarder stdin_{io_};   // rank 0's stdin, no faster than rank 0 takes it

    bool signalled_ = false;
    bool failure_reported_ = false;
    std::optional<timing::JobTiming::Failure> failure_;   // the rank failure that ended the job, for the report
    int exit_code_ = 0;
};

} // namespace canopy
