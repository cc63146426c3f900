// Starts this node's ranks, forwards their output (whole lines, and a partial line once it has waited a moment), feeds rank 0's stdin, and reports their exits.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "output_flow.hpp"
#include "proc/process.hpp"
#include "proc/rank_cgroup.hpp"
#include "spawn_phases.hpp"
#include "util/lifetime.hpp"

namespace canopy {

namespace asio = boost::asio;

struct RankLaunch {
    long rank = 0;
    long appnum = 0;                // its program's index in an MPMD job
    std::vector<std::string> argv;  // argv[0]: the program's path
    std::string wdir;
    std::vector<std::string> env;   // the rank's complete environment
    std::vector<int> cpus;          // empty: not bound
    std::vector<int> numa_nodes;    // its memory's NUMA nodes; empty: not bound
    bool takes_stdin = false;       // rank 0 reads the launcher's stdin
    std::vector<int> inherit_fds;   // descriptors the rank keeps (its PMI_FD); their owner closes its copies
};

class RankSpawner {
public:
    struct Events {
        // Whole lines as they come; a partial line (a progress bar, a prompt) once it has waited
        // partial_line_wait, or at end of stream.
        std::function<void(long rank, std::uint8_t stream, std::string data)> output;
        // The rank has exec'd its program.
        std::function<void(long rank, pid_t pid, std::int64_t time_ns)> spawned;
        // Every rank of this node has exec'd or failed to start.
        std::function<void()> all_started;
        // The rank has exited and all its output has been forwarded.
        std::function<void(long rank, int wait_status, std::int64_t time_ns)> exited;
        // The rank could not be started; it counts as finished.
        std::function<void(long rank, const StartFailure& failure)> failed_to_start;
        // The rank's process group has no process left: nothing of it remains to signal, and its id may be reused
        // by an unrelated process from now on, so whoever was told of the group (the node guard) must forget it.
        std::function<void(pid_t group)> group_ended;
        // The ranks' cgroup was made at `path` (proc/rank_cgroup.hpp): whoever cleans up after a killed daemon
        // (the node guard) must kill and remove it.
        std::function<void(const std::string& path)> cgroup_made;
        // Bytes of stdin now in rank 0's pipe, or dropped as it closed its stdin (`closed`, then for every later
        // write too): the launcher sends more only as stdin is taken (launcher/stdin_forwarder.hpp).
        std::function<void(std::size_t bytes, bool closed)> stdin_taken;
    };

    RankSpawner(asio::io_context& io, ProcessReaper& reaper, Events events);
    ~RankSpawner();

    void spawn(std::vector<RankLaunch> ranks);

    // Counts ranks that cannot start (e.g. the program is missing on this node) as finished, reporting each.
    void reject(std::vector<RankLaunch> ranks, const StartFailure& failure);
    // A node without ranks: all (none) have started.
    void start_none() { check_all_started(); }

    // How long a partial line may wait for the rest of its line before it is forwarded as it is; nullopt: it waits
    // for its newline (--line-buffer), for 64 KiB, or for the end of the stream.
    void set_partial_line_wait(std::optional<std::chrono::milliseconds> wait) { partial_line_wait_ = wait; }
    // Without a cgroup of their own, the ranks' process groups, the subreaper and kill_adopted still end what they
    // leave behind (daemon.cpp's wants_rank_cgroup says when).
    void go_without_cgroup() { cgroup_tried_ = true; }

    void write_stdin(const std::string& data);
    void close_stdin();
    void signal_all(int signo);
    // The pipes `hold` names are not read, so ranks that write to them block as at a stalled terminal (the way up
    // is blocked, or another rank's line goes first: daemon/output_flow.hpp). Nothing is dropped; released, reading
    // goes on.
    void hold_output(const OutputHold& hold);
    // SIGTERM every rank's process group now and SIGKILL whatever is left after the grace period.
    void terminate(double grace_seconds);
    // SIGKILL to every rank's process group, including what exited ranks left running in theirs. A group whose
    // leader has been reaped and that has no member left is never signalled: its id may belong to another process.
    // Also what ranks left in sessions of their own (setsid) once it has come to us as orphans (docs/architecture.md).
    void kill_all();
    // Waits up to `bound` until every rank kill_all signalled has exited (a zombie holds no files or mappings), so
    // that what is cleaned after the ranks is not still in their hands.
    void wait_killed(std::chrono::milliseconds bound) const;

    // Every rank has finished, and the job's ranks restart (--max-restarts): the spawner starts over, as before its
    // first batch, keeping its cgroup and what old ranks left running in groups of their own (kill_all ends those).
    void next_attempt();

    std::size_t total() const { return ranks_.size(); }
    std::size_t finished() const { return finished_; }
    bool all_finished() const { return finished_ == ranks_.size(); }
    // spawn() or reject() has been called and every rank is known to have started or failed to.
    bool all_started() const { return phase_ == SpawnerPhase::all_started; }

private:
    struct Stream {
        std::unique_ptr<asio::posix::stream_descriptor> pipe;
        std::string pending;
        std::array<char, 16 * 1024> buffer;
        bool parked = false;             // not read while output is held
        std::unique_ptr<asio::steady_timer> partial_timer;   // armed while a partial line waits
        std::chrono::steady_clock::time_point partial_since;  // when the partial line in `pending` began
        bool bulk = false;               // the last read was big: a stdio buffer's flush, which cuts lines anywhere
    };
    struct Rank {
        long rank = 0;
        pid_t pid = -1;
        RankPhase phase = RankPhase::planned;
        // Apart from phase: a fact about its process group, learned just before the reap and acted on at it.
        bool group_ended = false;        // when reaped: no process was left in its group
        int wait_status = 0;
        std::int64_t exit_ns = 0;
        StartFailure start_failure;      // why the program could not start: a message
        std::unique_ptr<asio::posix::stream_descriptor> exec_report;
        std::array<std::uint8_t, exec_report_size> report_record;
        SpawnRequest request;            // kept to describe a failed exec
        Stream out, err;
        std::unique_ptr<asio::steady_timer> drain_timer;
        bool drain_due = false;          // the drain grace ended while its output was held

        // A process that may still run: signalling its group reaches it, not a stranger that took its id.
        bool unreaped() const { return pid > 0 && (phase == RankPhase::forked || phase == RankPhase::start_known); }
    };

    void read(Rank& rank, Stream& stream, std::uint8_t id);
    // Arms the stream's timer for the partial line in `pending`, which forwards it once it has waited
    // partial_line_wait_ since it began: a progress bar or a prompt, written on its own. A partial line that ends a
    // big write is where a stdio buffer happened to end in the middle of a flood of output; it waits up to
    // bulk_partial_line_wait for the rest, so that a rank descheduled mid-line does not have its line cut in two.
    void forward_partial_line_later(long rank_id, Stream& stream, std::uint8_t id);
    void start_drain_timer(Rank& rank);
    void await_exec(Rank& rank);
    void start_known(Rank& rank, StartFailure failure);
    void fail_without_process(Rank& rank, const StartFailure& failure);
    void begin_batch();
    // A rank of this batch, tracked from here until it is reported.
    Rank& add_rank(long number);
    void end_batch();
    void check_all_started();
    void maybe_finish(Rank& rank);
    // The only places the states change: a move their table (spawn_phases.hpp) does not list is refused and logged.
    // A rank's move keeps started_known_ and finished_ counting the ranks that entered those phases.
    bool move_to(Rank& rank, RankPhase next);
    void move_to(SpawnerPhase next);
    void move_to(StdinState next);
    void write_next_stdin();
    void before_reap(pid_t pid);
    void end_group(pid_t group);
    void kill_adopted();
    // Whether `pid` is in the process group of one of this node's ranks (a live leader's, or an exited one's).
    bool in_a_ranks_group(pid_t pid) const;
    // Makes the ranks' cgroup, named after the job and node that `env` (a rank's environment) names.
    void make_cgroup(const std::vector<std::string>& env);

    asio::io_context& io_;
    ProcessReaper& reaper_;
    Events events_;
    std::map<long, std::unique_ptr<Rank>> ranks_;
    std::size_t finished_ = 0;
    std::size_t started_known_ = 0;
    SpawnerPhase phase_ = SpawnerPhase::idle;
    OutputHold output_hold_;
    std::optional<std::chrono::milliseconds> partial_line_wait_;
    // Rank 0's stdin moves on its own, as the launcher's stdin comes and ends, whatever the spawner's phase.
    StdinState stdin_ = StdinState::open;
    std::unique_ptr<asio::posix::stream_descriptor> stdin_pipe_;
    std::deque<std::string> stdin_queue_;
    // Apart from stdin_: a write is in flight in open and ending alike (ending ends when none is, the queue empty).
    bool stdin_writing_ = false;
    std::unique_ptr<asio::steady_timer> kill_timer_;
    long attempt_ = 0;   // next_attempt() counts them
    // Ranks' groups whose leader has exited while other processes of the rank stay in them (its background
    // children, which we inherit as a subreaper): signalled by kill_all until the last of them exits.
    std::set<pid_t> leaderless_groups_;
    std::map<pid_t, long> rank_of_leader_;   // pid of a rank not yet reaped -> its rank
    std::vector<std::string> job_variables_;   // CANOPY_JOBID=, CANOPY_NODE=: what every rank's process starts with
    // The ranks' cgroup, where the kernel lets this user make one (proc/rank_cgroup.hpp); tried at the first spawn.
    std::optional<RankCgroup> cgroup_;
    // Apart from phase_: made once, at the first batch that forks, or given up on before any (go_without_cgroup).
    bool cgroup_tried_ = false;
    int before_reap_hook_ = -1;
    Lifetime lifetime_;
};

} // namespace canopy
