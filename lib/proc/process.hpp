// Starting and reaping child processes: file descriptors, vfork/exec with binding, and SIGCHLD dispatch.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "util/result.hpp"

namespace canopy {

// Owns one file descriptor and closes it.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
    UniqueFd& operator=(UniqueFd&& other) noexcept;
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd() { reset(); }

    int get() const { return fd_; }
    int release();
    void reset(int fd = -1);
    explicit operator bool() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};

struct Pipe {
    UniqueFd read_end;
    UniqueFd write_end;
};

// Both ends close-on-exec; spawn_process dup2s the ends a child needs.
Result<Pipe> make_pipe();

// The highest NUMA node number a memory binding may name (Linux's MAX_NUMNODES on the largest configs).
inline constexpr int max_numa_node = 1023;

struct SpawnRequest {
    std::vector<std::string> argv;                 // argv[0] is the path to execute
    std::optional<std::vector<std::string>> env;   // NAME=VALUE; nullopt inherits ours
    std::string wdir;                              // empty: inherit
    int stdin_fd = -1;                             // -1: /dev/null
    int stdout_fd = -1;
    int stderr_fd = -1;
    std::vector<int> inherit_fds;    // kept open, at the same numbers, across exec (a rank's PMI_FD)
    bool own_process_group = true;   // so a whole rank (and what it forks) can be signalled at once
    std::vector<int> cpus;           // sched_setaffinity set; empty: unchanged
    std::vector<int> numa_nodes;     // set_mempolicy(MPOL_BIND) to these NUMA nodes; empty: unchanged
    int parent_death_signal = 0;     // PR_SET_PDEATHSIG, 0 for none
    bool keep_signals_blocked = false;   // start the program with every signal blocked (a node guard)
    int cgroup_procs_fd = -1;            // a cgroup's cgroup.procs, open for writing: the child joins it first
    // Wait until the child has exec'd, to report why it could not. Without waiting, many children start in
    // parallel, and a child that cannot exec exits with code 127.
    bool wait_for_exec = true;
    // Without waiting: receives the read end of the exec report pipe. It reaches end-of-file once the child has
    // exec'd, or first carries an exec_report_size record saying why it could not (describe_exec_failure).
    UniqueFd* exec_report = nullptr;
};

// Exit codes for a program that did not start, as shells use them: 127 only when it does not exist; 126 when it
// exists but could not be run (not executable, or its directory, CPU binding or standard streams failed).
inline constexpr int exit_not_found = 127;
inline constexpr int exit_cannot_run = 126;

// Why a program could not start, and which of the exit codes above stands for it.
struct StartFailure {
    int exit_code = exit_cannot_run;
    std::string message;
};

inline constexpr std::size_t exec_report_size = 2 * sizeof(int);
StartFailure describe_exec_failure(std::span<const std::uint8_t> record, const SpawnRequest& request);

// Raises this process's soft limit on open descriptors to its hard limit, so the job's own needs (rank pipes, PMIx,
// dlopen) are not the first thing to fail when peers hold many connections. spawn_process gives every child the
// soft limit we started with: a program that uses select() must not see descriptors past FD_SETSIZE.
void raise_descriptor_limit();

// Keeps freed heap memory in this process for reuse instead of giving it back at once. Bulk data moves in chunks of
// about 1 MiB: by default each was mmapped and unmapped, or trimmed off the heap, so every chunk's pages were
// faulted in and zeroed again. Broadcasting torch's files to 8 simulated nodes took about a quarter less CPU. The
// ranks do not inherit it.
void keep_freed_memory_for_reuse();

// Opens /dev/null on each of descriptors 0, 1 and 2 that this process was started without (`cmd >&-`), so that
// the next descriptor it opens (asio's eventfd, a socket) does not become its standard output. Called first thing
// in main. `writable_output` false: 1 and 2 refuse writes (EBADF), so the launcher's writes of the job's output fail
// and say so, as they would to the closed descriptor; true: they take and drop them (the daemon's log lines).
void occupy_standard_descriptors(bool writable_output);


// vfork/exec; returns the pid, or the reason the child could not start (bad wdir, exec error) when waiting.
Result<pid_t> spawn_process(const SpawnRequest& request);

// Whether `pid`, a child of this process, was started by spawn_process here, rather than adopted: an orphan that
// came to this process as its subreaper when its own parent died. Forgotten once reaped.
bool started_here(pid_t pid);

// Whether something other than the filesystem can vouch that `path` is a regular file we may execute (a staged
// job's index): a "yes" spares the shared filesystem a stat and an access per node; "no" means "ask it".
using KnownExecutable = std::function<bool(const std::string& path)>;

// `path` as a process started in `working_dir` finds it: joined to it unless absolute (or no directory given).
std::string from_working_dir(const std::string& path, const std::string& working_dir);

// PATH search the way execvp does it, but against the ranks' PATH rather than ours, and from the ranks' working
// directory: a relative `name` with a '/' (bin/app) or a relative PATH entry is found there, as the rank's own
// exec would after its chdir (mpiexec -wdir does the same), and returned joined to it. On failure `exit_code`, if
// given, gets exit_not_found or exit_cannot_run.
Result<std::string> find_program(const std::string& name, const std::string& path_variable, int* exit_code = nullptr,
                                 const KnownExecutable& known = nullptr, const std::string& working_dir = {});

// This process's executable (/proc/self/exe), or "" when it cannot be read.
std::string own_executable();
// The program `pid` runs (/proc/PID/exe), "" if it cannot be read.
std::string executable_of(pid_t pid);
// What a live child is doing, from /proc: "state D, waiting in the kernel, in do_rmdir"; empty once it is gone or
// unreadable. For a message about a late child: is it stuck in the kernel, asleep, stopped or running?
std::string describe_what_process_does(pid_t pid);

// This process's children (of every thread), zombies included: with PR_SET_CHILD_SUBREAPER, also the orphans of
// its descendants.
std::vector<pid_t> own_children();
// Whether one of our children other than `except` is in process group `group`. As a subreaper we inherit what a
// rank leaves running, so after a rank's leader has exited this says whether its group still has members.
bool child_in_process_group(pid_t group, pid_t except);
// Whether process `pid` was started with `entry` ("NAME=value") in its environment; false when it cannot be read.
bool started_with_environment(pid_t pid, std::string_view entry);

// Turns SIGCHLD into callbacks on the io_context, one per watched pid.
class ProcessReaper {
public:
    using ExitHandler = std::function<void(int wait_status)>;
    // Sees every child that has exited, watched or not, while it is still a zombie: until it is reaped neither its
    // pid nor its process group's id can be reused.
    using BeforeReap = std::function<void(pid_t pid)>;

    explicit ProcessReaper(boost::asio::io_context& io);
    void watch(pid_t pid, ExitHandler handler);
    std::size_t watched() const { return handlers_.size(); }
    // Returns an id for remove_before_reap.
    int add_before_reap(BeforeReap hook);
    void remove_before_reap(int id);
    // Reap what has exited now (also runs on every SIGCHLD).
    void reap();

private:
    void wait_for_signal();

    boost::asio::signal_set signals_;
    std::map<pid_t, ExitHandler> handlers_;
    std::map<int, BeforeReap> before_reap_;
    int next_hook_id_ = 0;
};

// "exited with code 3" / "was killed by signal 9 (SIGKILL)".
std::string describe_wait_status(int wait_status);
// Shell exit-code convention: code, or 128 + signal.
int exit_code_of(int wait_status);

} // namespace canopy
