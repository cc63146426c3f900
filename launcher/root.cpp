// The root of the tree: starts the top level of daemons, runs the root's services, decides the job's end.
#include "root.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "proc/rank_env.hpp"
#include "services/fabric_service.hpp"
#include "services/health_verdict.hpp"
#include "services/job_store_service.hpp"
#include "services/name_service.hpp"
#include "services/staging_service.hpp"
#include "timing/clock.hpp"
#include "tree/agent.hpp"
#include "tree/topology.hpp"
#include "util/io_loop.hpp"
#include "util/log.hpp"

namespace canopy {
namespace {

spdlog::logger& tree_log() { return area_logger("tree"); }

// After teardown starts, daemons get this long beyond the kill grace to leave before we SIGKILL their agents.
constexpr double teardown_slack_seconds = 5.0;

// A signal during start-up waits at most this many milliseconds for children's unread reports.
constexpr int unread_report_tries = 100;

std::chrono::milliseconds millis(double seconds) { return std::chrono::milliseconds(static_cast<long>(seconds * 1000)); }

} // namespace

Root::Root(asio::io_context& io, ProcessReaper& reaper, RootPlan plan, std::int64_t started_ns,
           std::int64_t hosts_resolved_ns, InProcessStarter in_process)
    : io_(io), plan_(std::move(plan)), key_(auth::generate_key()), reaper_(reaper), in_process_(std::move(in_process)),
      signals_(io, SIGINT, SIGTERM, SIGHUP), suspension_(io), timeout_timer_(io), grace_timer_(io),
      teardown_deadline_(io), started_ns_(started_ns)
{
    signals_.add(SIGUSR1);
    signals_.add(SIGUSR2);
    signals_.add(SIGTSTP);
    plan_.plan.launcher_start_ns = started_ns;
    phases_.set_top_k(plan_.plan.job.timing_top);
    timeline_.push_back({"start", 0.0});
    timeline_.push_back({"hosts_resolved", static_cast<double>(hosts_resolved_ns - started_ns) / 1e9});
}

Root::~Root()
{
    // Later services may use earlier ones (staging's progress bar writes through the output service).
    while (!services_.empty())
        services_.pop_back();
}

void Root::stamp(const std::string& name)
{
    timeline_.push_back({name, static_cast<double>(timing::now_ns() - started_ns_) / 1e9});
}

int Root::run()
{
    auto& plan = plan_.plan;
    TreePosition::Hooks hooks;
    // The root has no part of its own: each step is the whole tree's.
    hooks.local_ready = [](TreePosition::State) { return true; };
    hooks.entered = [this](TreePosition::State step) {
        using S = TreePosition::State;
        if (step == S::up) {
            stamp("tree_up");
            tree_log().info("{} daemons up", position_->daemons_below());
            start_stdin_forwarding();
            for (auto& service : services_)
                service->tree_up();
        } else if (step == S::spawned) {
            stamp("ranks_spawned");
            if (restarts_)
                restarts_->ranks_running(timeline_.back().seconds);
        } else if (step == S::done) {
            stamp("ranks_exited");
            if (restarts_ && restarts_->restarting())
                return;   // the next attempt's ranks start once every node's old ones are gone
            if (late_ranks_->running() == 0)
                end_job(false, exit_code_);   // else when the last of them ends (LateRankCount)
        } else if (step == S::left) {
            finish();
        }
    };
    hooks.child_failed = [this](long, const std::string& line) { fail(exit_infrastructure, line); };
    hooks.log_line = [this](long, const std::string& line) { print_daemon_line(line); };
    position_ = std::make_unique<TreePosition>(io_, reaper_, key_, 0, plan, nullptr, std::move(hooks), phases_,
                                               trace_);
    register_child_handlers();
    make_services();
    // Before anything that starts a thread or a process of its own, so that a failure returns cleanly. Nothing
    // the children send is read before io_.run().
    if (auto started = position_->start_children(plan_.listen_address, plan.daemon_path, 0, in_process_); !started) {
        fmt::print(stderr, "canopy: {}\n", started.error().message);   // no output is queued yet
        return exit_infrastructure;
    }

    signals_.async_wait([this](const boost::system::error_code& error, int signo) {
        if (!error)
            on_signal(signo);
    });
    if (plan_.timeout_seconds) {
        timeout_timer_.expires_after(millis(*plan_.timeout_seconds));
        timeout_timer_.async_wait([this](const boost::system::error_code& error) {
            if (error || position_->leaving())
                return;
            fail(exit_timeout, fmt::format("job exceeded --timeout {:g} s; tearing it down", *plan_.timeout_seconds));
        });
    }

    // Fabric and staging fork the launcher's guard when they have something for it, before any thread runs.
    for (auto& service : services_)
        service->start();
    run_io_loop(io_, [this](const std::string& why) { fail(exit_infrastructure, "the launcher " + why); });
    // A signal that comes as the job ends still counts (README: exit codes). From here on it stays pending rather
    // than killing us; what was caught but not yet handled is handled by the poll below.
    sigset_t ending;
    sigemptyset(&ending);
    for (int signo : {SIGINT, SIGTERM, SIGHUP})
        sigaddset(&ending, signo);
    ::pthread_sigmask(SIG_BLOCK, &ending, nullptr);
    for (auto& service : services_)
        service->after_run();
    if (guard_)
        guard_->finish();   // what it watched is gone already; this only reaps the guard
    io_.restart();
    io_.poll();
    sigset_t pending;
    if (::sigpending(&pending) == 0)
        for (int signo : {SIGINT, SIGTERM, SIGHUP})
            if (sigismember(&pending, signo))
                note_signal_at_end(signo);
    output_->finish();
    return exit_code_;
}

void Root::note_signal_at_end(int signo)
{
    // Every rank may have exited 0 already; the user still interrupted canopy before it exited, and gets the
    // status any interrupted command gives. A job that failed keeps its rank's code.
    if (!signalled_ && exit_code_ == 0)
        exit_code_ = 128 + signo;
    signalled_ = true;
}

void Root::make_services()
{
    // In the order they start: fabric and staging before the rest, as both may fork the launcher's guard.
    RootControl& control = *this;
    auto output = std::make_unique<RankOutput>(io_, *position_, plan_.label, control);
    output_ = output.get();
    services_.push_back(std::move(output));
    services_.push_back(std::make_unique<FabricService>(io_, key_, plan_.plan, *position_, control));
    if (plan_.stage)
        services_.push_back(std::make_unique<StagingService>(io_, plan_, *position_, output_->writer(), control));
    auto spawn = std::make_unique<SpawnRequests>(*position_, plan_.plan);
    spawn_ = spawn.get();
    auto late = std::make_unique<LateRankCount>(phases_, [this] {
        if (position_->state() == TreePosition::State::done)
            end_job(false, exit_code_);
    });
    late_ranks_ = late.get();
    services_.push_back(std::move(spawn));
    services_.push_back(std::move(late));
    services_.push_back(std::make_unique<JobStoreService>(io_, position_->collectives(), plan_.plan.hosts));
    services_.push_back(std::make_unique<NameService>());
    if (plan_.plan.job.max_restarts > 0) {
        auto restarts = std::make_unique<JobRestarts>(*position_, plan_.plan.job.max_restarts, control, [this] {
            position_->restart_ranks(restarts_->restarts().size(), "the job's ranks are restarting");
            for (auto& service : services_)
                service->next_attempt();
            failure_reported_ = false;
            failure_.reset();
        });
        restarts_ = restarts.get();
        services_.push_back(std::move(restarts));
    }
    if (plan_.plan.job.health_check.enabled)
        services_.push_back(std::make_unique<HealthVerdict>(position_->collectives(), plan_.plan.hosts.size(),
                                                            plan_.bad_nodes_file, control));
    for (auto& service : services_)
        service->serve_requests(position_->collectives().services());
}

void Root::watch_path(const std::string& path, const char* what)
{
    if (!guard_) {
        auto guard = NodeGuard::start(find_guard_program(plan_.plan.daemon_path), "canopy-guard");
        if (!guard) {
            tree_log().warn("{}; a killed launcher would leave its {} {} behind", guard.error().message, what, path);
            return;
        }
        guard_ = std::move(*guard);
    }
    guard_->watch_path(path);
}

void Root::register_child_handlers()
{
    position_->on(wire::MessageType::stdin_taken, [this](long, const wire::Frame& frame) {
        auto taken = wire::decode_frame<wire::StdinTaken>(frame);
        if (taken)
            stdin_.taken(*taken);
        return taken.ok();
    });
    position_->on(wire::MessageType::rank_failed, [this](long, const wire::Frame& frame) {
        auto failed = wire::decode_frame<wire::RankFailed>(frame);
        if (failed)
            on_rank_failed(*failed);
        return failed.ok();
    });
    position_->on(wire::MessageType::daemon_error, [this](long, const wire::Frame& frame) {
        auto error = wire::decode_frame<wire::DaemonError>(frame);
        if (!error)
            return false;
        if (position_->leaving())
            tree_log().info("during teardown: {}", error->message);
        else
            fail(exit_infrastructure, error->message);
        return true;
    });
    position_->on(wire::MessageType::daemon_log, [this](long, const wire::Frame& frame) {
        auto log = wire::decode_frame<wire::DaemonLog>(frame);
        if (log)
            print_daemon_line(log->line);
        return log.ok();
    });
}

void Root::on_rank_failed(const wire::RankFailed& failed)
{
    if (failure_reported_ || (position_->leaving() && !signalled_))
        return;
    failure_reported_ = true;
    std::string line;
    std::string who = spawn_->rank_name(static_cast<long>(failed.rank));
    int code;
    if (failed.kind == wire::RankFailure::aborted) {
        line = failed.message;
        code = failed.exit_code;
    } else if (!failed.message.empty()) {
        line = fmt::format("{} on {} could not start: {}", who, failed.node, failed.message);
        code = failed.exit_code;
    } else if (failed.signal) {
        int status = failed.signal;   // a wait status for a signal death is the signal number
        line = fmt::format("{} on {} {}", who, failed.node, describe_wait_status(status));
        code = 128 + failed.signal;
    } else {
        line = fmt::format("{} on {} exited with code {}", who, failed.node, failed.exit_code);
        code = failed.exit_code;
    }
    if (!failed.exception.empty())
        line += ": " + failed.exception;
    double failed_at = static_cast<double>((failed.time_ns > 0 ? failed.time_ns : timing::now_ns()) - started_ns_) / 1e9;
    if (!signalled_ && restarts_ && restarts_->restart_after(line, code, failed_at))
        return;
    failure_ = timing::JobTiming::Failure{line, failed.traceback};
    if (signalled_) {
        // The ranks are dying of the signal we forwarded; report it as the job's status, quietly.
        exit_code_ = code;
        return;
    }
    fail(code, line + "; tearing down the job");
}

void Root::fail(int exit_code, const std::string& line)
{
    if (position_->leaving())
        return;
    print_own_line(fmt::format("canopy: {}\n", line));
    if (!failure_)
        failure_ = timing::JobTiming::Failure{line, {}};
    end_job(true, exit_code);
}

void Root::on_signal(int signo)
{
    signals_.async_wait([this](const boost::system::error_code& error, int next) {
        if (!error)
            on_signal(next);
    });
    if (signo == SIGUSR1 || signo == SIGUSR2) {
        position_->children().broadcast(wire::to_frame(wire::Signal{signo}));
        return;
    }
    if (signo == SIGTSTP) {
        suspension_.suspend(position_->children());
        return;
    }
    if (signalled_ || position_->leaving()) {
        note_signal_at_end(signo);
        // A second interrupt means now.
        if (!position_->leaving())
            end_job(true, 128 + signo);
        else
            position_->children().kill_all(SIGKILL);
        return;
    }
    signalled_ = true;
    exit_code_ = 128 + signo;
    stop_or_forward(signo, unread_report_tries);
}

void Root::stop_or_forward(int signo, int tries_left)
{
    if (position_->leaving())
        return;
    if (position_->state() < TreePosition::State::spawned && tries_left > 0 &&
        position_->children().any_unread_bytes()) {
        // The children's "ranks spawned" reports may be waiting unread (a starved launcher): read them first, so
        // that running ranks get the kill grace, not start-up's short abort.
        grace_timer_.expires_after(std::chrono::milliseconds(1));
        grace_timer_.async_wait([this, signo, tries_left](const boost::system::error_code& error) {
            if (!error)
                stop_or_forward(signo, tries_left - 1);
        });
        return;
    }
    if (position_->state() < TreePosition::State::spawned) {
        // Ranks are still starting: stop that now rather than let them start only to be signalled, and end
        // without waiting out the kill grace for ranks that may not even have a handler yet.
        print_own_line(
            fmt::format("canopy: received SIG{} during start-up; stopping the job\n", sigabbrev_np(signo)));
        end_job(true, exit_code_);
        return;
    }
    print_own_line(fmt::format("canopy: received SIG{}; forwarding it to every rank\n", sigabbrev_np(signo)));
    position_->children().broadcast(wire::to_frame(wire::Signal{signo}));
    grace_timer_.expires_after(millis(plan_.plan.kill_grace));
    grace_timer_.async_wait([this](const boost::system::error_code& error) {
        if (!error && !position_->leaving())
            end_job(true, exit_code_);
    });
}

void Root::end_job(bool abort, int exit_code)
{
    if (position_->leaving())
        return;
    exit_code_ = exit_code;
    for (auto& service : services_)
        service->stop("the job is ending");
    timeout_timer_.cancel();
    grace_timer_.cancel();
    teardown_deadline_.expires_after(millis(plan_.plan.kill_grace + teardown_slack_seconds));
    teardown_deadline_.async_wait([this](const boost::system::error_code& error) {
        if (error || position_->state() == TreePosition::State::left)
            return;
        tree_log().warn("daemons did not leave in time; killing them");
        position_->children().kill_all(SIGKILL);
        position_->give_up();
        finish();
    });
    position_->leave(abort);   // left, and finish(), once every child has gone
}

void Root::finish()
{
    stamp("teardown_done");
    teardown_deadline_.cancel();
    io_.stop();
}

void Root::print_daemon_line(const std::string& line)
{
    // Once the job is being torn down, daemons cut off mid-start complain about it; the user already has the
    // line that says why the job ended.
    if (position_->leaving()) {
        tree_log().debug("{}", line);
        return;
    }
    print_own_line(line + "\n");
}

void Root::print_own_line(std::string line)
{
    for (auto& service : services_)
        service->before_own_line();
    output_->print_own_line(std::move(line));
}

void Root::output_lost(int exit_code)
{
    if (!position_->leaving()) {
        end_job(true, exit_code);
        return;
    }
    // The job was ending already: its own failure keeps its code, a success does not stand.
    if (exit_code_ == 0)
        exit_code_ = exit_code;
}

void Root::start_stdin_forwarding()
{
    // Rank 0 lives on node 0; its daemon is where stdin goes, through the tree.
    long target = Topology::node_to_position(0);
    Topology topology(static_cast<long>(plan_.plan.hosts.size()), static_cast<long>(plan_.plan.fanout));
    long hop = topology.next_hop(0, target);
    // A job started in the background of an interactive shell must not read the terminal: the kernel would stop
    // the whole launcher with SIGTTIN. Rank 0 then sees end-of-file, as under `< /dev/null`.
    if (::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) != ::getpgrp()) {
        position_->children().send(hop, wire::to_frame(wire::StdinData{static_cast<std::uint64_t>(target), {}, true}));
        return;
    }
    stdin_.start(static_cast<std::uint64_t>(target), [this, hop](std::vector<std::uint8_t> frame) {
        if (!position_->leaving())
            position_->children().send(hop, std::move(frame));
    });
}

timing::JobTiming Root::job_timing() const
{
    timing::JobTiming timing;
    const auto& plan = plan_.plan;
    timing.job_id = plan.job_id;
    timing.command = plan_.command_line;
    timing.started_at = timing::format_utc(started_ns_);
    timing.nodes = static_cast<long>(plan.hosts.size());
    timing.ranks = plan_.placement.world_size;
    timing.fanout = static_cast<long>(plan.fanout);
    timing.tree_depth = Topology(timing.nodes, timing.fanout).depth();
    timing.agent = plan.agent;
    timing.exit_code = exit_code_;
    timing.timeline = timeline_;
    // The job rides with the tree's launch plan; it was delivered when the last daemon received it.
    if (const auto* received = phases_.find("daemon.job_received"))
        timing.timeline.push_back({"job_delivered", received->max()});
    std::stable_sort(timing.timeline.begin(), timing.timeline.end(),
                     [](const auto& a, const auto& b) { return a.seconds < b.seconds; });
    timing.wall_seconds = timeline_.back().seconds;
    timing.phases = phases_;
    // What the fences and routed requests cost the root: O(fanout) frames a fence, as at every daemon.
    if (position_ && position_->collectives().frames_received() > 0)
        timing.phases.add("root.tree_messages", static_cast<double>(position_->collectives().frames_received() +
                                                                    position_->collectives().frames_sent()),
                          "launcher");
    timing.failure = failure_;
    if (restarts_)
        timing.restarts = restarts_->restarts();
    for (const auto& service : services_)
        service->record(timing.phases);
    return timing;
}

} // namespace canopy
