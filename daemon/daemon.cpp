// canopyd's job on one node: join the tree under its parent, start its children and its ranks, roll results up.
#include "daemon.hpp"

#include <signal.h>
#include <unistd.h>

#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "error_files.hpp"
#include "fabric/fabric_plane.hpp"
#include "proc/node_temp_dir.hpp"
#include "rank_launches.hpp"
#include "timing/clock.hpp"
#include "tree/agent.hpp"
#include "tree/topology.hpp"
#include "util/log.hpp"

namespace canopy {
namespace {

spdlog::logger& tree_log() { return area_logger("tree"); }
spdlog::logger& spawn_log() { return area_logger("spawn"); }

// A partial line (a progress bar, a prompt) waits this long for the rest of its line, so that it reaches the
// user's terminal within about 100 ms while output that comes in pieces still goes up whole.
constexpr auto partial_line_wait = std::chrono::milliseconds(50);
// Failure teardown: ranks get this long after SIGTERM before SIGKILL, so the job ends within about a second.
constexpr double abort_grace_seconds = 0.5;

} // namespace

Daemon::Daemon(asio::io_context& io, ProcessReaper& reaper, DaemonArgs args, const auth::Key& key,
               std::optional<NodeGuard> guard, InProcessDaemon in_process)
    : io_(io), args_(std::move(args)), key_(key), reaper_(reaper), in_process_(std::move(in_process)),
      signals_(io, SIGTERM, SIGHUP), guard_(std::move(guard))
{
    node_ = args_.node_name.empty() ? fmt::format("position {}", args_.position) : args_.node_name;
}

Daemon::~Daemon() = default;

void Daemon::start()
{
    signals_.async_wait([this](const boost::system::error_code& error, int signo) {
        if (!error)
            // Parents SIGTERM children that have not joined yet when a job is torn down: routine, not alarming.
            abandon(fmt::format("received SIG{}", sigabbrev_np(signo) ? sigabbrev_np(signo) : "?"), spdlog::level::info);
    });
    asio::co_spawn(io_, join_parent(), [this](std::exception_ptr exception) {
        if (exception) {
            tree_log().error("internal error while joining the tree");
            exit_code_ = 1;
            stop_running();
        }
    });
}

asio::awaitable<void> Daemon::join_parent()
{
    boost::system::error_code error;
    auto parent_ip = asio::ip::make_address(args_.parent_host, error);
    tcp::endpoint endpoint;
    if (error) {
        tcp::resolver resolver(io_);
        auto results = co_await resolver.async_resolve(args_.parent_host, std::to_string(args_.parent_port),
                                                       asio::redirect_error(asio::use_awaitable, error));
        if (error || results.empty()) {
            tree_log().error("cannot resolve parent host {}: {}", args_.parent_host, error.message());
            exit_code_ = 1;
            stop_running();
            co_return;
        }
        endpoint = *results.begin();
    } else {
        endpoint = tcp::endpoint(parent_ip, args_.parent_port);
    }

    tcp::socket socket(io_);
    socket.open(endpoint.protocol());
    if (!args_.bind_address.empty()) {
        // A simulated node's traffic leaves from its own address, as a real node's would.
        socket.bind(tcp::endpoint(asio::ip::make_address(args_.bind_address), 0), error);
        if (error)
            tree_log().warn("cannot bind {}: {}", args_.bind_address, error.message());
    }
    co_await socket.async_connect(endpoint, asio::redirect_error(asio::use_awaitable, error));
    if (error) {
        tree_log().error("cannot connect to parent {}:{}: {}", args_.parent_host, args_.parent_port,
                         error.message());
        exit_code_ = 1;
        stop_running();
        co_return;
    }
    auto handshake = co_await connect_to_parent(socket, key_, static_cast<std::uint64_t>(args_.position),
                                                args_.join_timeout,
                                                args_.same_clock ? 0 : clock_rounds_between_hosts);
    if (!handshake) {
        tree_log().error("cannot join the tree at {}:{}: {}", args_.parent_host, args_.parent_port,
                         handshake.error().message);
        exit_code_ = 1;
        stop_running();
        co_return;
    }
    connected_ns_ = timing::now_ns();
    clock_offset_ns_ = handshake->offset.offset_ns;
    parent_ = std::make_shared<Link>(std::move(socket), "parent");
    output_flow_ = std::make_unique<UplinkOutputFlow>(parent_, [this](const OutputHold& hold) {
        if (ranks_)
            ranks_->hold_output(hold);
        if (position_)
            position_->children().broadcast(wire::to_frame(hold.to_wire()));
    });
    relay_pacing_ = std::make_unique<RelayPacing>(io_, parent_, [this] {
        return position_ ? position_->children().max_queued_bytes() : std::size_t{0};
    });
    parent_->start([this](wire::Frame frame) { on_parent_frame(std::move(frame)); },
                   [this](const std::string& reason) { on_parent_closed(reason); });
    // Until the plan names the job's heartbeat timeout, the parent has as long to send it as it had to answer.
    parent_->keep_alive(args_.join_timeout);
}

void Daemon::on_parent_frame(wire::Frame frame)
{
    if (position_) {
        if (!position_->from_parent(tree().parent(args_.position), frame))
            tree_log().warn("ignored an unexpected or malformed {} message from the parent",
                            wire::message_name(frame.type));
        relay_pacing_->frame_handled();
        return;
    }
    // Joining: the plan comes first, and makes this daemon a position of the tree.
    if (frame.type != static_cast<std::uint8_t>(wire::MessageType::launch_plan)) {
        abandon(fmt::format("the parent sent {} before the launch plan", wire::message_name(frame.type)));
        return;
    }
    auto plan = wire::decode_frame<wire::LaunchPlan>(frame);
    if (!plan) {
        tree_log().error("bad launch plan from parent: {}", plan.error().message);
        abandon("cannot use the launch plan");
        return;
    }
    on_plan(std::move(*plan));
}

void Daemon::register_parent_handlers()
{
    position_->on_parent(wire::MessageType::launch_plan, [](long, const wire::Frame&) {
        tree_log().warn("ignored a second launch plan");
        return true;
    });
    position_->on_parent(wire::MessageType::stdin_data, [this](long, const wire::Frame& frame) {
        auto data = wire::decode_frame<wire::StdinData>(frame);
        if (!data)
            return false;
        if (static_cast<long>(data->target_position) == args_.position) {
            if (!data->data.empty())
                ranks_->write_stdin(data->data);
            if (data->eof)
                ranks_->close_stdin();
        } else if (long hop = tree().next_hop(args_.position, static_cast<long>(data->target_position)); hop > 0) {
            position_->children().send(hop, wire::encode_frame(frame));
        }
        return true;
    });
    position_->on_parent(wire::MessageType::signal, [this](long, const wire::Frame& frame) {
        auto signal = wire::decode_frame<wire::Signal>(frame);
        if (!signal)
            return false;
        // Ctrl-Z on the launcher (launcher/job_suspension.hpp): the ranks get SIGSTOP, which none can ignore, and
        // the stopped launcher's silence is no loss until the job goes on.
        if (signal->signo == SIGTSTP || signal->signo == SIGCONT)
            parent_->hold_heartbeat_checks(signal->signo == SIGTSTP);
        ranks_->signal_all(signal->signo == SIGTSTP ? SIGSTOP : signal->signo);
        position_->children().broadcast(wire::encode_frame(frame));
        return true;
    });
    position_->on_parent(wire::MessageType::output_flow, [this](long, const wire::Frame& frame) {
        auto flow = wire::decode_frame<wire::OutputFlow>(frame);
        if (!flow)
            return false;
        output_flow_->parent_says(*flow);
        return true;
    });
    position_->on_parent(wire::MessageType::namespace_start, [this](long, const wire::Frame& frame) {
        auto start = wire::decode_frame<wire::NamespaceStart>(frame);
        if (!start)
            return false;
        position_->children().broadcast(wire::encode_frame(frame));   // the subtree learns it before any reply
        start_namespace(*start);
        return true;
    });
    position_->on_parent(wire::MessageType::shutdown, [this](long, const wire::Frame& frame) {
        auto message = wire::decode_frame<wire::Shutdown>(frame);
        if (!message)
            return false;
        position_->leave(message->abort);
        return true;
    });
}

void Daemon::on_parent_closed(const std::string& reason)
{
    if (position_ && position_->state() == TreePosition::State::left) {
        stop_running();   // we closed it, after our last frame
        return;
    }
    abandon(reason.empty() ? "the parent closed the connection" : "lost the parent: " + reason);
}

void Daemon::on_plan(wire::LaunchPlan plan)
{
    std::int64_t received_ns = timing::now_ns();
    long index = Topology::position_to_node(args_.position);
    if (index < 0 || index >= static_cast<long>(plan.hosts.size())) {
        tree_log().error("launch plan has no node for tree position {}", args_.position);
        abandon("bad launch plan");
        return;
    }
    clock_offset_ns_ += plan.root_offset_ns;
    plan_ = std::move(plan);
    phases_.set_top_k(plan_->job.timing_top);
    parent_->keep_alive(plan_->heartbeat_timeout);
    node_ = plan_->hosts[static_cast<std::size_t>(index)];
    init_logging(fmt::format("canopyd[{}]", node_), static_cast<int>(plan_->verbosity));

    node_phase("daemon.started", since_launch(args_.started_ns));
    node_phase("daemon.connected", since_launch(connected_ns_));
    node_phase("daemon.job_received", since_launch(received_ns));

    // Only the job's own directory: a [job] tmpdir that does not exist is the user's to fix, not ours to create
    // and then leave behind.
    auto base = node_temp_base(plan_->tmpdir);
    if (auto created = NodeTempDir::create(base.path, node_dir_prefix(plan_->job_id, node_), watch_for_guard());
        created)
        tmpdir_ = std::move(*created);
    else
        fail_setup(fmt::format("cannot create the node temp dir in {} on {}: {}{}", base.path, node_,
                               created.error().message, temp_base_problem(base)));

    // Children first: they are on the critical path of the whole tree, our ranks only of this node. A leaf
    // reports itself up before spawning, so tree_up measures the tree, not rank start-up.
    make_rank_spawner();
    join_tree_position();
    // Announced before this subtree reports up, so the parent knows where to send bulk data before it has any.
    if (fabric::uses_fabric(*plan_))
        send_up(wire::to_frame(fabric::start_fabric_plane(
            io_, key_, *plan_, args_.position, node_, *position_,
            {[this](const wire::Frame& frame) { position_->from_parent(tree().parent(args_.position), frame); },
             [this](const std::string& line) { report_error(node_, line); },
             [this](const std::string& path) {
                 if (guard_)
                     guard_->watch_path(path);
             }})));
    position_->advance();   // a leaf is up as soon as it has its plan
    store_limit_.emplace(plan_->job.rank_store_limit, node_,
                         [this](long rank, const std::string& line) { report_abort(rank, 1, line); });
    services_.emplace(io_, *plan_, args_.position, node_, tmpdir_, *position_, *store_limit_, phases_,
                      static_cast<NodeControl&>(*this));
    services_->start();
    if (!plan_->job.output_marks.empty())
        output_marks_.emplace(plan_->job.output_marks);
    start_ranks_when_ready();
    remove_abandoned_temp_dirs_later();
}

NodeTempDir::BeforeCreate Daemon::watch_for_guard()
{
    return [this](const std::string& path) {
        if (guard_)
            guard_->watch_path(path);
    };
}

void Daemon::fail_setup(const std::string& message)
{
    setup_failed_ = true;
    report_error(node_, message);
}

void Daemon::remove_abandoned_temp_dirs_later()
{
    // Simulated nodes share one disk: one of them sweeps it. After the start-up work, which is on the job's
    // critical path; this is not.
    if (tmpdir_.path().empty() || (plan_->simulated && args_.position != 1))
        return;
    asio::post(io_, [base = std::filesystem::path(tmpdir_.path()).parent_path().string()] {
        // A minute: far longer than a live daemon takes from creating its dir to locking it.
        if (int removed = remove_abandoned_temp_dirs(base, std::chrono::seconds(60)); removed > 0)
            spawn_log().debug("removed {} temp dir(s) in {} that ended jobs left behind", removed, base);
    });
}

void Daemon::join_tree_position()
{
    const auto& plan = *plan_;
    TreePosition::Hooks hooks;
    // The parent expects up, spawned and done in that order, whatever order they happen in here.
    hooks.local_ready = [this](TreePosition::State step) {
        using S = TreePosition::State;
        switch (step) {
        case S::spawned: return ranks_->all_started();
        case S::done: return ranks_drained();
        case S::left: return ranks_->all_finished();
        default: return true;
        }
    };
    hooks.entered = [this](TreePosition::State step) { on_entered(step); };
    hooks.child_failed = [this](long position, const std::string& line) {
        if (!position_->leaving())
            report_error(position_->children().host_of(position), line);
    };
    hooks.log_line = [this](long position, const std::string& line) {
        if (!position_->leaving())   // children cut off by a teardown complain; the root already knows why
            send_up(wire::to_frame(wire::DaemonLog{position_->children().host_of(position), line}));
    };
    position_ = std::make_unique<TreePosition>(io_, reaper_, key_, args_.position, plan,
                                               [this](std::vector<std::uint8_t> frame) { send_up(std::move(frame)); },
                                               std::move(hooks), phases_, trace_);
    register_parent_handlers();
    register_child_handlers();
    make_rank_restarts();

    long index = Topology::position_to_node(args_.position);
    std::string listen_address = plan.simulated               ? simulated_node_address(index)
                                 : !plan.bind_address.empty() ? plan.bind_address
                                                              : parent_->local_endpoint().address().to_string();
    bool same_binary = plan.simulated || plan.agent == "local" || plan.daemon_path.empty();
    std::string self = own_executable();
    std::string daemon_path = !same_binary ? plan.daemon_path : self.empty() ? std::string("canopyd") : self;
    if (auto started = position_->start_children(listen_address, daemon_path, clock_offset_ns_,
                                                 in_process_.start_child);
        !started)
        report_error(node_, started.error().message);
}

void Daemon::register_child_handlers()
{
    auto pass_up = [this](long, const wire::Frame& frame) {
        send_up(wire::encode_frame(frame));
        return true;
    };
    position_->on(wire::MessageType::output, [this](long, const wire::Frame& frame) {
        send_up(wire::encode_frame(frame));
        output_flow_->sent_up();
        return true;
    });
    position_->on(wire::MessageType::daemon_error, pass_up);
    position_->on(wire::MessageType::daemon_log, pass_up);
    // The launcher sends stdin only as it is taken: the news goes ahead of the output queued on the way up.
    position_->on(wire::MessageType::stdin_taken, [this](long, const wire::Frame& frame) {
        send_up(wire::encode_frame(frame), true);
        return true;
    });
    position_->on(wire::MessageType::rank_failed, [this](long, const wire::Frame& frame) {
        auto failed = wire::decode_frame<wire::RankFailed>(frame);
        if (failed)
            report_rank_failure(*failed);
        return failed.ok();
    });
}

void Daemon::make_rank_spawner()
{
    RankSpawner::Events events;
    events.output = [this](long rank, std::uint8_t stream, std::string data) {
        if (output_marks_)
            output_marks_->scan(rank, data, [&](const std::string& name) {
                double now = since_launch(timing::now_ns());
                phases_.add("app." + name, now, rank_label(rank));
                trace(rank, name, now);
            });
        send_up(wire::to_frame(wire::Output{static_cast<std::uint64_t>(rank), stream, std::move(data)}));
        output_flow_->sent_up();
    };
    events.stdin_taken = [this](std::size_t bytes, bool closed) {
        send_up(wire::to_frame(wire::StdinTaken{bytes, closed}), true);
    };
    events.spawned = [this](long rank, pid_t pid, std::int64_t time_ns) {
        if (guard_)
            guard_->watch_process_group(pid);
        for (auto& service : rank_services())
            service->rank_spawned(rank, pid);
        phases_.add(rank_phase(rank, "spawned"), since_launch(time_ns), rank_label(rank));
        rank_spawn_ns_[rank] = time_ns;
    };
    events.exited = [this](long rank, int status, std::int64_t time_ns) {
        // The services first: PMIx names a rank that left without PMIx_Finalize more precisely than its exit
        // status does; the simple PMI server leaves a failing exit to the line below.
        for (auto& service : rank_services())
            service->rank_exited(rank, status);
        phases_.add(rank_phase(rank, "exited"), since_launch(time_ns), rank_label(rank));
        phases_.add(rank_phase(rank, "runtime"), static_cast<double>(time_ns - rank_spawn_ns_[rank]) / 1e9,
                    rank_label(rank));
        trace(rank, "run", since_launch(time_ns), static_cast<double>(time_ns - rank_spawn_ns_[rank]) / 1e9);
        if (status != 0 && !position_->leaving() && !(restarts_ && restarts_->stopping())) {
            wire::RankFailed failed{static_cast<std::uint64_t>(rank), node_, 0, 0, {}, time_ns + clock_offset_ns_,
                                    wire::RankFailure::exited, {}, {}};
            if (WIFSIGNALED(status))
                failed.signal = WTERMSIG(status);
            else
                failed.exit_code = WEXITSTATUS(status);
            if (!tmpdir_.path().empty())
                if (auto recorded = read_error_file(error_file_for(tmpdir_.path(), rank))) {
                    failed.exception = std::move(recorded->summary);
                    failed.traceback = std::move(recorded->traceback);
                }
            report_rank_failure(failed);
        }
        if (late_ranks_.erase(rank))
            report_late_ranks(false, 1);
        position_->advance();
        if (restarts_)
            restarts_->rank_exited();
    };
    events.group_ended = [this](pid_t group) {
        if (guard_)
            guard_->forget_process_group(group);
    };
    events.cgroup_made = [this](const std::string& path) {
        if (guard_)
            guard_->watch_path(path);   // a SIGKILLed daemon's ranks' cgroup is killed and removed all the same
    };
    events.all_started = [this] {
        if (ranks_->total() > 0)
            node_phase("daemon.ranks_spawned", since_launch(timing::now_ns()));
        position_->advance();
    };
    events.failed_to_start = [this](long rank, const StartFailure& failure) {
        spawn_log().debug("rank {}: {}", rank, failure.message);
        report_rank_failure({static_cast<std::uint64_t>(rank), node_, failure.exit_code, 0, failure.message,
                             timing::now_ns() + clock_offset_ns_, wire::RankFailure::never_started, {}, {}});
        position_->advance();
        if (restarts_)
            restarts_->rank_exited();
    };
    ranks_ = std::make_unique<RankSpawner>(io_, reaper_, std::move(events));
    if (!wants_rank_cgroup(*plan_))
        ranks_->go_without_cgroup();
    ranks_->hold_output(output_flow_->hold());   // the way up may be blocked already, by the children's output
    if (!plan_->job.line_buffer)
        ranks_->set_partial_line_wait(partial_line_wait);
}

void Daemon::make_rank_restarts()
{
    if (plan_->job.max_restarts == 0)
        return;
    RankRestarts::Hooks hooks;
    hooks.stop_ranks = [this] {
        if (!ranks_->all_finished())
            ranks_->terminate(abort_grace_seconds);
    };
    hooks.ranks_gone = [this] { return ranks_->all_finished(); };
    hooks.start_attempt = [this](long attempt) {
        // Every node's old ranks are gone and their fences have come down: what still waits for them never will.
        position_->restart_ranks(static_cast<std::uint64_t>(attempt), "the job's ranks are restarting");
        store_limit_->forget_ranks();
        for (auto& service : rank_services())
            if (auto fresh = service->next_attempt(attempt); !fresh) {
                report_error(node_, fresh.error().message);   // the root ends the job
                return;
            }
        ranks_->next_attempt();
        if (output_marks_)   // each attempt's ranks mark their own first step
            output_marks_.emplace(plan_->job.output_marks);
        rank_spawn_ns_.clear();
        reported_failure_ = false;
        start_ranks_when_ready();
    };
    restarts_ = std::make_unique<RankRestarts>(*position_, std::move(hooks));
}

void Daemon::start_ranks_when_ready()
{
    if (position_->leaving())
        return;   // interrupted while a service got ready: the ranks would only be killed
    if (setup_failed_) {
        // Reported: the root ends the job. Ranks started here would run without what the node lacks.
        ranks_->start_none();
        return;
    }
    for (auto& service : rank_services())
        if (!service->ready_for_ranks([this] { start_ranks_when_ready(); }))
            return;
    start_ranks();
}

void Daemon::start_ranks()
{
    NodeSite site{node_, tmpdir_.path(), Topology::position_to_node(args_.position),
                  static_cast<long>(plan_->hosts.size()), plan_->simulated, plan_->job_id,
                  restarts_ ? restarts_->attempt() : 0};
    auto batch = plan_node_ranks(plan_->job, site, rank_services(),
                                 [this](const std::string& message) { report_error(node_, message); });
    if (batch.launches.empty() || !plan_->job.synthetic_ranks.empty()) {
        if (!batch.launches.empty())   // synthetic ranks run in this process: nothing to spawn
            for (auto& service : rank_services())
                service->ranks_started();
        ranks_->start_none();
        return;
    }
    spawn_batch(std::move(batch));
    for (auto& service : rank_services())
        service->ranks_started();
    // all_started carries on
}

void Daemon::start_namespace(const wire::NamespaceStart& start)
{
    if (auto added = position_->collectives().add_namespace(static_cast<long>(start.first), start.ranks_per_node);
        !added) {
        report_error(node_, fmt::format("spawned namespace {}: {}", start.nspace, added.error().message));
        return;
    }
    for (auto& service : rank_services())
        if (auto learned = service->namespace_started(start); !learned)
            report_error(node_, fmt::format("spawned namespace {}: {}", start.nspace, learned.error().message));
    long index = Topology::position_to_node(args_.position);
    if (index >= static_cast<long>(start.ranks_per_node.size()) || start.ranks_per_node[index] == 0)
        return;
    if (position_->leaving()) {   // the job is ending here: the spawner learns of it as the job ends
        spawn_log().info("not starting ranks of spawned namespace {}: the job is ending", start.nspace);
        return;
    }
    auto spawned = spawned_job(plan_->job, start, plan_->job_id);
    NodeSite site{node_, tmpdir_.path(), index, static_cast<long>(plan_->hosts.size()), plan_->simulated,
                  plan_->job_id};
    auto batch = plan_node_ranks(
        spawned, site, rank_services(), [this](const std::string& message) { report_error(node_, message); },
        static_cast<long>(start.first));
    spawn_log().info("starting {} ranks of spawned namespace {}", batch.launches.size(), start.nspace);
    // This node told its parent it was done already: the root learns of these ranks, and of their end, apart.
    if (position_->reached(TreePosition::State::done)) {
        for (const auto& launch : batch.launches)
            late_ranks_.insert(launch.rank);
        report_late_ranks(true, batch.launches.size());
    }
    spawn_batch(std::move(batch));
}

void Daemon::spawn_batch(RankBatch batch)
{
    if (!batch.refused.message.empty()) {
        ranks_->reject(std::move(batch.launches), batch.refused);
        return;
    }
    if (!batch.binding_report.empty())
        send_up(wire::to_frame(wire::DaemonLog{node_, std::move(batch.binding_report)}));
    ranks_->spawn(std::move(batch.launches));
}

void Daemon::report_late_ranks(bool started, std::size_t count)
{
    wire::LateRanks late{started, count, started ? timing::PhaseSet{} : phases_.take()};
    position_->collectives().request<wire::LateRanks>(0, std::move(late), [](auto) {});
}

bool Daemon::ranks_drained()
{
    if (!ranks_->all_finished())
        return false;
    bool drained = true;
    for (auto& service : rank_services())
        drained = service->drained([this] { position_->advance(); }) && drained;
    return drained;
}

void Daemon::on_entered(TreePosition::State step)
{
    using S = TreePosition::State;
    switch (step) {
    case S::planned:
        break;
    case S::up:
        send_up(wire::to_frame(wire::SubtreeUp{1 + position_->daemons_below()}));
        break;
    case S::spawned:
        send_up(wire::to_frame(wire::SubtreeSpawned{ranks_->total() + position_->spawned_below()}));
        break;
    case S::done: {
        for (auto& service : rank_services())
            service->record(phases_, node_);
        const auto& collectives = position_->collectives();
        if (collectives.frames_received() > 0)
            phases_.add("daemon.tree_messages",
                        static_cast<double>(collectives.frames_received() + collectives.frames_sent()), node_);
        // Sent off, not kept: what is recorded from now on is the late ranks', sent with their end.
        send_up(wire::to_frame(wire::SubtreeDone{ranks_->total() + position_->done_below(),
                                                 phases_.take(), std::move(trace_)}));
        // Nothing is left to do: leaving now, rather than on the root's shutdown, makes an orderly teardown one
        // sweep up the tree instead of a sweep down and one up. Unless the job may spawn ranks onto this node, or
        // restart them: then it stays until the root's shutdown.
        if (plan_->job.spawn_slots == 0 && plan_->job.max_restarts == 0)
            position_->leave(false);
        break;
    }
    case S::leaving:
        if (!ranks_->all_finished())
            ranks_->terminate(position_->aborted() ? abort_grace_seconds : plan_->kill_grace);
        break;
    case S::left:
        clean_up_node();
        parent_->close_after_flush(plan_->heartbeat_timeout);   // on_parent_closed then ends the io_context
        break;
    }
}

void Daemon::abandon(const std::string& why, spdlog::level::level_enum level)
{
    if (stopped_)
        return;
    tree_log().log(level, "{}; ending this node's ranks and leaving", why);
    exit_code_ = 1;
    if (position_) {
        position_->give_up();
        position_->children().kill_all(SIGTERM);
    }
    clean_up_node();
    stop_running();
}

void Daemon::stop_running()
{
    stopped_ = true;
    if (!in_process_.stop) {
        io_.stop();
        return;
    }
    // The process goes on: what would end with it ends here.
    signals_.cancel();
    if (parent_)
        parent_->close();
    in_process_.stop();
}

void Daemon::clean_up_node()
{
    if (position_)
        position_->collectives().fail_all(fmt::format("the job is ending on {}", node_));
    if (ranks_) {
        ranks_->kill_all();
        ranks_->wait_killed(std::chrono::milliseconds(500));
    }
    for (auto& service : rank_services())
        service->stop();   // before the temp dir goes: PMIx keeps its rendezvous files there
    tmpdir_.remove();
    if (guard_)
        guard_->finish();
}

void Daemon::fail(const std::string& why)
{
    if (node_.empty() || !parent_ || !parent_->is_open())
        return abandon(why);   // nobody above to tell: leave, and the parent names the lost node
    report_error(node_, fmt::format("{} on {}", why, node_));
}

void Daemon::report_error(const std::string& node, const std::string& message)
{
    // The launcher prints what reaches it, once; our own stderr says it only when nobody above will.
    tree_log().log(parent_ && parent_->is_open() ? spdlog::level::debug : spdlog::level::err, "{}", message);
    send_up(wire::to_frame(wire::DaemonError{node, message}));
}

void Daemon::report_rank_failure(const wire::RankFailed& failed)
{
    if (reported_failure_ || (restarts_ && restarts_->stopping()))
        return;
    reported_failure_ = true;
    send_up(wire::to_frame(failed));
}

void Daemon::report_abort(long rank, int exit_code, const std::string& message)
{
    if (position_->leaving())
        return;
    report_rank_failure({static_cast<std::uint64_t>(rank), node_, exit_code, 0, message,
                         timing::now_ns() + clock_offset_ns_, wire::RankFailure::aborted, {}, {}});
}

void Daemon::send_up(std::vector<std::uint8_t> frame, bool urgent)
{
    if (parent_)
        parent_->send(std::move(frame), urgent);
}

double Daemon::since_launch(std::int64_t local_ns) const
{
    return static_cast<double>(local_ns + clock_offset_ns_ - plan_->launcher_start_ns) / 1e9;
}

void Daemon::node_phase(const std::string& name, double seconds)
{
    phases_.add(name, seconds, node_);
    trace(-1, name.substr(name.find('.') + 1), seconds);
}

void Daemon::trace(std::int64_t rank, std::string name, double end, double duration)
{
    if (!plan_ || !plan_->job.trace)
        return;
    auto node = static_cast<std::uint32_t>(Topology::position_to_node(args_.position));
    trace_.push_back({node, rank, std::move(name), end, duration});
}

std::vector<std::unique_ptr<RankService>>& Daemon::rank_services()
{
    static std::vector<std::unique_ptr<RankService>> none;   // before the plan: never added to
    return services_ ? services_->all() : none;
}

Topology Daemon::tree() const
{
    return Topology(static_cast<long>(plan_->hosts.size()), static_cast<long>(plan_->fanout));
}

std::string Daemon::rank_label(long rank) const { return fmt::format("rank {} on {}", rank, node_); }

// Ranks PMIx_Spawn started (tree ranks after the job's) keep apart from the job's start-up in the report.
std::string Daemon::rank_phase(long rank, const char* what) const
{
    bool spawned = rank >= position_->collectives().job_size();
    return fmt::format("{}.{}", spawned ? "spawned_rank" : "rank", what);
}

} // namespace canopy
