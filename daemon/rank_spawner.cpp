// Starts this node's ranks, forwards their output line by line, feeds rank 0's stdin, and reports their exits.
#include "rank_spawner.hpp"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>
#include <utility>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "proc/node_guard.hpp"
#include "timing/clock.hpp"
#include "util/log.hpp"

namespace canopy {
namespace {

// A line longer than this is forwarded in pieces rather than buffered without bound.
constexpr std::size_t max_pending_output = 64 * 1024;
// A read this big is a buffer's flush, not a partial line written on purpose (tqdm's bar is a few hundred bytes).
constexpr std::size_t bulk_read = 2048;
constexpr auto bulk_partial_line_wait = std::chrono::seconds(1);
// After a rank exits, a background process it left may still hold its pipes; stop waiting after this.
constexpr auto drain_grace = std::chrono::seconds(1);

spdlog::logger& spawn_log() { return area_logger("spawn"); }

// Moves `state` to `next` where its table allows; otherwise leaves it and logs the bug.
template <typename State>
bool move_state(State& state, State next, const std::string& what)
{
    if (!may_move(state, next)) {
        spawn_log().error("{}: refused to move from {} to {} (a bug in canopy)", what, state_name(state),
                          state_name(next));
        return false;
    }
    state = next;
    return true;
}

} // namespace

RankSpawner::RankSpawner(asio::io_context& io, ProcessReaper& reaper, Events events)
    : io_(io), reaper_(reaper), events_(std::move(events))
{
    before_reap_hook_ = reaper_.add_before_reap([this](pid_t pid) { before_reap(pid); });
}

RankSpawner::~RankSpawner()
{
    lifetime_.end();
    reaper_.remove_before_reap(before_reap_hook_);
}

// While the exited process is a zombie its pid, and so its group's id, cannot be reused: this is the moment to
// decide whether the group still has members, and so is still ours to signal.
void RankSpawner::before_reap(pid_t pid)
{
    if (auto leader = rank_of_leader_.find(pid); leader != rank_of_leader_.end()) {
        Rank& rank = *ranks_.at(leader->second);
        rank_of_leader_.erase(leader);
        if (child_in_process_group(pid, pid))
            leaderless_groups_.insert(pid);
        else
            rank.group_ended = true;   // reported once the rank's exit is handled, after its start
        return;
    }
    if (leaderless_groups_.empty())
        return;
    pid_t group = ::getpgid(pid);
    if (leaderless_groups_.count(group) && !child_in_process_group(group, pid)) {
        leaderless_groups_.erase(group);
        end_group(group);
    }
}

void RankSpawner::end_group(pid_t group)
{
    if (events_.group_ended)
        events_.group_ended(group);
}

bool RankSpawner::move_to(Rank& rank, RankPhase next)
{
    if (!move_state(rank.phase, next, fmt::format("rank {}", rank.rank)))
        return false;
    if (next == RankPhase::start_known)
        ++started_known_;
    else if (next == RankPhase::finished)
        ++finished_;
    return true;
}

void RankSpawner::move_to(SpawnerPhase next) { move_state(phase_, next, "the rank spawner"); }

void RankSpawner::move_to(StdinState next) { move_state(stdin_, next, "rank 0's stdin"); }

// all_started waits until a batch's every rank has been forked (or rejected); once reported, it is not again.
void RankSpawner::begin_batch()
{
    if (phase_ != SpawnerPhase::all_started)
        move_to(SpawnerPhase::forking);
}

void RankSpawner::end_batch()
{
    if (phase_ == SpawnerPhase::forking)
        move_to(SpawnerPhase::starting);
    check_all_started();
}

void RankSpawner::next_attempt()
{
    if (!all_finished() || phase_ != SpawnerPhase::all_started) {
        spawn_log().error("cannot restart ranks that have not all finished");
        return;
    }
    ranks_.clear();
    finished_ = started_known_ = 0;
    kill_timer_.reset();
    ++attempt_;
    move_to(SpawnerPhase::idle);
}

RankSpawner::Rank& RankSpawner::add_rank(long number)
{
    auto rank = std::make_unique<Rank>();
    rank->rank = number;
    Rank& added = *rank;
    ranks_.emplace(number, std::move(rank));
    return added;
}

void RankSpawner::spawn(std::vector<RankLaunch> ranks)
{
    begin_batch();
    for (auto& launch : ranks) {
        Rank& r = add_rank(launch.rank);

        auto out = make_pipe();
        auto err = make_pipe();
        std::optional<Pipe> in;
        if (launch.takes_stdin) {
            auto pipe = make_pipe();
            if (pipe)
                in = std::move(*pipe);
        }
        if (!out || !err) {
            // Counted as started (it failed to), so that the node still reports all started and the job ends.
            fail_without_process(r, {exit_cannot_run, (out ? err.error() : out.error()).message});
            continue;
        }
        UniqueFd report;
        SpawnRequest request;
        request.argv = std::move(launch.argv);
        if (job_variables_.empty())
            for (const auto& variable : launch.env)
                if (variable.starts_with("CANOPY_JOBID=") || variable.starts_with("CANOPY_NODE="))
                    job_variables_.push_back(variable);
        if (!cgroup_tried_)
            make_cgroup(launch.env);
        request.cgroup_procs_fd = cgroup_ ? cgroup_->procs_fd() : -1;
        request.env = std::move(launch.env);
        request.wdir = std::move(launch.wdir);
        request.stdout_fd = out->write_end.get();
        request.stderr_fd = err->write_end.get();
        request.stdin_fd = in ? in->read_end.get() : -1;
        request.cpus = std::move(launch.cpus);
        request.numa_nodes = std::move(launch.numa_nodes);
        request.inherit_fds = std::move(launch.inherit_fds);
        request.parent_death_signal = SIGKILL;
        // Fork them all without waiting for each exec; the report pipes tell how each start went.
        request.wait_for_exec = false;
        request.exec_report = &report;
        auto pid = spawn_process(request);
        if (!pid) {
            fail_without_process(r, {exit_cannot_run, pid.error().message});
            continue;
        }
        r.pid = *pid;
        move_to(r, RankPhase::forked);
        rank_of_leader_.emplace(r.pid, r.rank);
        request.env.reset();   // only argv and wdir are needed to describe a failed exec
        r.request = std::move(request);
        r.exec_report = std::make_unique<asio::posix::stream_descriptor>(io_, report.release());
        await_exec(r);
        r.out.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, out->read_end.release());
        r.err.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, err->read_end.release());
        if (in) {
            stdin_pipe_ = std::make_unique<asio::posix::stream_descriptor>(io_, in->write_end.release());
            write_next_stdin();
        }
        read(r, r.out, 1);
        read(r, r.err, 2);
        long id = r.rank;
        reaper_.watch(r.pid, lifetime_.guard([this, id](int status) {
            Rank& rank = *ranks_.at(id);
            if (rank.phase == RankPhase::forked) {
                // The exit can overtake the exec report: read what the child left in the pipe now.
                ssize_t got = ::read(rank.exec_report->native_handle(), rank.report_record.data(),
                                     rank.report_record.size());
                start_known(rank, got == static_cast<ssize_t>(rank.report_record.size())
                                      ? describe_exec_failure(rank.report_record, rank.request)
                                      : StartFailure{});
            }
            move_to(rank, RankPhase::reaped);
            if (rank.group_ended)
                end_group(rank.pid);
            rank.wait_status = status;
            rank.exit_ns = timing::now_ns();
            start_drain_timer(rank);
            maybe_finish(rank);
        }));
    }
    end_batch();
}

void RankSpawner::await_exec(Rank& rank)
{
    long id = rank.rank;
    asio::async_read(*rank.exec_report, asio::buffer(rank.report_record),
        lifetime_.guard([this, id](const boost::system::error_code& error, std::size_t size) {
            Rank& rank = *ranks_.at(id);
            if (rank.phase != RankPhase::forked)
                return;
            bool failed = !error && size == rank.report_record.size();
            start_known(rank, failed ? describe_exec_failure(rank.report_record, rank.request) : StartFailure{});
        }));
}

void RankSpawner::start_known(Rank& rank, StartFailure failure)
{
    if (!move_to(rank, RankPhase::start_known))
        return;
    rank.start_failure = std::move(failure);
    rank.exec_report.reset();
    if (rank.start_failure.message.empty())
        events_.spawned(rank.rank, rank.pid, timing::now_ns());
    check_all_started();
}

// A rank that has no process (it could not be forked, or was rejected) is finished as soon as its start is known.
void RankSpawner::fail_without_process(Rank& rank, const StartFailure& failure)
{
    start_known(rank, failure);
    if (move_to(rank, RankPhase::finished))
        events_.failed_to_start(rank.rank, failure);
}

void RankSpawner::check_all_started()
{
    bool waiting = phase_ == SpawnerPhase::idle || phase_ == SpawnerPhase::starting;
    if (!waiting || started_known_ < ranks_.size())
        return;
    move_to(SpawnerPhase::all_started);
    if (events_.all_started)
        events_.all_started();
}

void RankSpawner::reject(std::vector<RankLaunch> ranks, const StartFailure& failure)
{
    begin_batch();
    for (auto& launch : ranks) {
        Rank& r = add_rank(launch.rank);
        fail_without_process(r, failure);
    }
    end_batch();
}

// A rank has exited: what is left in its pipes is read for drain_grace, then they close, so a background process
// that keeps them open does not hold the job. While output is held the grace waits for the release.
void RankSpawner::start_drain_timer(Rank& rank)
{
    rank.drain_timer = std::make_unique<asio::steady_timer>(io_, drain_grace);
    rank.drain_timer->async_wait(lifetime_.guard([this, id = rank.rank](const boost::system::error_code& error) {
        if (error)
            return;
        Rank& rank = *ranks_.at(id);
        if (output_hold_.holds(id, 1) || output_hold_.holds(id, 2)) {
            rank.drain_due = true;
            return;
        }
        if (rank.out.pipe)
            rank.out.pipe->close();
        if (rank.err.pipe)
            rank.err.pipe->close();
    }));
}

void RankSpawner::hold_output(const OutputHold& hold)
{
    if (hold == output_hold_)
        return;
    output_hold_ = hold;
    for (auto& [id, rank] : ranks_) {
        for (std::uint8_t stream_id : {1, 2}) {
            Stream& stream = stream_id == 1 ? rank->out : rank->err;
            if (!stream.parked || hold.holds(id, stream_id))
                continue;
            stream.parked = false;
            if (stream.pipe)
                read(*rank, stream, stream_id);
        }
        if (rank->drain_due && !hold.holds(id, 1) && !hold.holds(id, 2)) {
            rank->drain_due = false;
            start_drain_timer(*rank);
        }
    }
}

void RankSpawner::read(Rank& rank, Stream& stream, std::uint8_t id)
{
    long rank_id = rank.rank;
    stream.pipe->async_read_some(asio::buffer(stream.buffer),
        lifetime_.guard([this, rank_id, id](const boost::system::error_code& error, std::size_t size) {
            Rank& rank = *ranks_.at(rank_id);
            Stream& stream = id == 1 ? rank.out : rank.err;
            bool continues_partial = !stream.pending.empty();
            stream.pending.append(stream.buffer.data(), size);
            stream.bulk = size >= bulk_read;
            std::size_t last_newline = stream.pending.rfind('\n');
            if (error) {
                if (!stream.pending.empty())
                    events_.output(rank_id, id, std::move(stream.pending));
                stream.pending.clear();
                stream.pipe.reset();
                maybe_finish(rank);
                return;
            }
            if (last_newline != std::string::npos) {
                events_.output(rank_id, id, stream.pending.substr(0, last_newline + 1));
                stream.pending.erase(0, last_newline + 1);
            } else if (stream.pending.size() >= max_pending_output) {
                events_.output(rank_id, id, std::move(stream.pending));
                stream.pending.clear();
            }
            if (!stream.pending.empty() && partial_line_wait_) {
                if (!continues_partial || last_newline != std::string::npos)
                    stream.partial_since = std::chrono::steady_clock::now();
                forward_partial_line_later(rank_id, stream, id);
            }
            if (output_hold_.holds(rank_id, id))
                stream.parked = true;
            else
                read(rank, stream, id);
        }));
}

void RankSpawner::forward_partial_line_later(long rank_id, Stream& stream, std::uint8_t id)
{
    if (stream.partial_timer)
        return;
    auto due = [this, &stream] {
        return stream.partial_since + (stream.bulk ? std::chrono::milliseconds(bulk_partial_line_wait)
                                                   : *partial_line_wait_);
    };
    // While output is held the line would only queue behind the rest: it is looked at again a wait later.
    bool held = output_hold_.holds(rank_id, id);
    auto when = held ? std::chrono::steady_clock::now() + *partial_line_wait_ : due();
    stream.partial_timer = std::make_unique<asio::steady_timer>(io_, when);
    stream.partial_timer->async_wait(lifetime_.guard([this, rank_id, id, due](const boost::system::error_code& error) {
        if (error)
            return;
        Stream& stream = id == 1 ? ranks_.at(rank_id)->out : ranks_.at(rank_id)->err;
        stream.partial_timer.reset();
        if (stream.pending.empty())
            return;
        if (output_hold_.holds(rank_id, id) || std::chrono::steady_clock::now() < due()) {
            forward_partial_line_later(rank_id, stream, id);   // held, or a newer partial line: it waits its turn
            return;
        }
        events_.output(rank_id, id, std::move(stream.pending));
        stream.pending.clear();
    }));
}

void RankSpawner::maybe_finish(Rank& rank)
{
    if (rank.phase != RankPhase::reaped || rank.out.pipe || rank.err.pipe)
        return;
    move_to(rank, RankPhase::finished);
    if (rank.drain_timer)
        rank.drain_timer->cancel();
    if (!rank.start_failure.message.empty())
        events_.failed_to_start(rank.rank, rank.start_failure);
    else
        events_.exited(rank.rank, rank.wait_status, rank.exit_ns);
}

void RankSpawner::write_stdin(const std::string& data)
{
    if (stdin_ == StdinState::rank_closed) {
        if (events_.stdin_taken)
            events_.stdin_taken(data.size(), true);
        return;
    }
    stdin_queue_.push_back(data);
    write_next_stdin();
}

void RankSpawner::close_stdin()
{
    if (stdin_ == StdinState::open)
        move_to(StdinState::ending);
    write_next_stdin();
}

void RankSpawner::write_next_stdin()
{
    if (!stdin_pipe_ || stdin_writing_)
        return;
    if (stdin_queue_.empty()) {
        if (stdin_ == StdinState::ending) {
            stdin_pipe_.reset();
            move_to(StdinState::ended);
        }
        return;
    }
    stdin_writing_ = true;
    asio::async_write(*stdin_pipe_, asio::buffer(stdin_queue_.front()),
        lifetime_.guard([this](const boost::system::error_code& error, std::size_t) {
            stdin_writing_ = false;
            if (error) {
                // The rank closed its stdin; what is left has nowhere to go.
                std::size_t dropped = 0;
                for (const auto& data : stdin_queue_)
                    dropped += data.size();
                stdin_queue_.clear();
                stdin_pipe_.reset();
                move_to(StdinState::rank_closed);
                if (events_.stdin_taken)
                    events_.stdin_taken(dropped, true);
                return;
            }
            std::size_t written = stdin_queue_.front().size();
            stdin_queue_.pop_front();
            if (events_.stdin_taken)
                events_.stdin_taken(written, false);
            write_next_stdin();
        }));
}

void RankSpawner::signal_all(int signo)
{
    for (auto& [id, rank] : ranks_)
        if (rank->unreaped())
            ::kill(-rank->pid, signo);
}

void RankSpawner::terminate(double grace_seconds)
{
    signal_all(SIGTERM);
    // What left the ranks' groups gets the job's end too, and its grace; what is still in them has had its one
    // SIGTERM. Only the end: a signal forwarded while the job runs (SIGUSR1, Ctrl-Z) reaches the ranks' groups, as
    // before, not a helper that chose to leave them.
    if (cgroup_)
        for (pid_t pid : cgroup_->pids())
            if (!in_a_ranks_group(pid))
                ::kill(pid, SIGTERM);
    kill_timer_ = std::make_unique<asio::steady_timer>(io_);
    kill_timer_->expires_after(std::chrono::milliseconds(static_cast<long>(grace_seconds * 1000)));
    // An expiry already queued when the ranks restart must not reach the next attempt's ranks.
    kill_timer_->async_wait(lifetime_.guard([this, attempt = attempt_](const boost::system::error_code& error) {
        if (!error && attempt == attempt_)
            kill_all();
    }));
}

bool RankSpawner::in_a_ranks_group(pid_t pid) const
{
    pid_t group = ::getpgid(pid);
    return leaderless_groups_.count(group) != 0 || rank_of_leader_.count(group) != 0;
}

void RankSpawner::kill_all()
{
    for (auto& [id, rank] : ranks_)
        if (rank->unreaped())
            ::kill(-rank->pid, SIGKILL);
    // Exited ranks' groups too while processes remain in them: background processes must not outlive the job.
    for (pid_t group : leaderless_groups_)
        ::kill(-group, SIGKILL);
    if (cgroup_)
        cgroup_->kill_all();
    kill_adopted();
}

void RankSpawner::make_cgroup(const std::vector<std::string>& env)
{
    cgroup_tried_ = true;
    std::string job = "job", node = "node";
    for (const auto& variable : env) {
        if (variable.starts_with("CANOPY_JOBID="))
            job = variable.substr(13);
        else if (variable.starts_with("CANOPY_NODE="))
            node = variable.substr(12);
    }
    auto made = RankCgroup::create(fmt::format("canopy-{}-{}", job, node));
    if (made) {
        cgroup_.emplace(std::move(*made));
        if (events_.cgroup_made)
            events_.cgroup_made(cgroup_->path());
    } else   // most clusters delegate no cgroup to their users: the process groups and the subreaper still serve
        spawn_log().debug("ranks run without a cgroup of their own: {}", made.error().message);
}

namespace {

// True once `pid` has exited: a zombie, or gone.
bool has_exited(pid_t pid)
{
    std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(stat_file, stat))
        return true;
    auto end_of_name = stat.rfind(')');
    return end_of_name == std::string::npos || end_of_name + 2 >= stat.size() || stat[end_of_name + 2] == 'Z' ||
           stat[end_of_name + 2] == 'X';
}

} // namespace

void RankSpawner::wait_killed(std::chrono::milliseconds bound) const
{
    auto deadline = std::chrono::steady_clock::now() + bound;
    for (const auto& [id, rank] : ranks_)
        while (rank->unreaped() && !has_exited(rank->pid) && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

void RankSpawner::kill_adopted()
{
    // A rank's process that left its group (setsid) is out of reach of the group kills; once its parent has exited
    // it is our child (we are a subreaper). We started our other children ourselves (the guard, child daemons), so a
    // child we did not start is the job's, whatever it did to its environment (setproctitle clears it); one we did
    // start is a rank's only if its environment names this job and node (daemons run in one process in tests). A
    // node guard whose daemon died comes to us too, and is left to finish its cleanup. The ranks' cgroup, where
    // there is one, has taken all of these already.
    if (job_variables_.size() != 2)
        return;
    static const std::string guard = find_guard_program(own_executable());
    for (pid_t child : own_children()) {
        if (rank_of_leader_.count(child))
            continue;
        bool marked = started_with_environment(child, job_variables_[0]) &&
                      started_with_environment(child, job_variables_[1]);
        if (!marked && (started_here(child) || executable_of(child) == guard))
            continue;
        // Not yet reaped, so neither its pid nor its group's id can belong to another process. Never our own group,
        // which a rank may have joined.
        pid_t group = ::getpgid(child);
        if (group > 1 && group != ::getpgrp())
            ::kill(-group, SIGKILL);
        ::kill(child, SIGKILL);
    }
}

} // namespace canopy
