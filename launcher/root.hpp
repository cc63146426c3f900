// The root of the tree: starts the top level of daemons, prints the ranks' output, decides the job's end.
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
#include "output_backpressure.hpp"
#include "output_lines.hpp"
#include "output_writer.hpp"
#include "services/late_ranks.hpp"
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

    // Runs the job to the end and returns canopy's exit code.
    int run();
    timing::JobTiming job_timing() const;
    // Every node's and rank's events, when the job was run with --trace.
    const std::vector<wire::TraceEvent>& trace_events() const { return trace_; }
    std::vector<std::string> hosts() const { return plan_.plan.hosts.expand(); }

private:
    // What children send that the tree position leaves to the root: output, failures, log lines, stage fetches.
    void register_child_handlers();
    void on_rank_failed(const wire::RankFailed& failed);
    void on_signal(int signo);
    // A job's first SIGINT, SIGTERM or SIGHUP: stops a job still starting, else forwards it to the ranks.
    void stop_or_forward(int signo, int tries_left);
    void note_signal_at_end(int signo);
    void start_stdin_forwarding();
    void print_output(const wire::Output& output);
    // A write to the launcher's stdout or stderr failed (OutputWriter::on_failed): one line, and the job ends.
    void output_failed(int fd, int error);
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

    // Makes the root's services (fabric, staging, job store, name service, spawn, late ranks), each answering its
    // own requests.
    void make_services();

    asio::io_context& io_;
    RootPlan plan_;
    auth::Key key_;
    ProcessReaper& reaper_;
    InProcessStarter in_process_;
    std::unique_ptr<TreePosition> position_;   // the root turns fences around and keeps the stores
    std::vector<std::unique_ptr<RootService>> services_;
    SpawnRequests* spawn_ = nullptr;        // in services_: names spawned ranks in the user's lines
    LateRankCount* late_ranks_ = nullptr;   // in services_: spawned ranks that keep the job from ending
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
    OutputWriter output_;   // the ranks' output and our own lines, never written on the io thread
    OutputLines lines_;     // whose line is open on each stream, and what waits behind it
    asio::steady_timer output_wait_timer_;   // lets output through that waited its time behind an open line
    void arm_output_wait_timer();
    // Tells the daemons whose long open line alone may go on, on each stream (OutputLines::line_hold).
    void hold_lines();
    OutputBackpressure backpressure_{io_, output_};   // after output_, which it watches
    StdinForwarder stdin_{io_};   // rank 0's stdin, no faster than rank 0 takes it

    bool signalled_ = false;
    bool failure_reported_ = false;
    bool output_failure_reported_[2] = {false, false};   // stdout, stderr
    std::optional<timing::JobTiming::Failure> failure_;   // the rank failure that ended the job, for the report
    int exit_code_ = 0;
};

} // namespace canopy
