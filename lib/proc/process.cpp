// Starting and reaping child processes.
#include "proc/process.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <linux/close_range.h>
#include <linux/mempolicy.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/limit_note.hpp"

extern char** environ;

namespace canopy {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept
{
    if (this != &other)
        reset(other.release());
    return *this;
}

int UniqueFd::release()
{
    int fd = fd_;
    fd_ = -1;
    return fd;
}

void UniqueFd::reset(int fd)
{
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = fd;
}

Result<Pipe> make_pipe()
{
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        int error = errno;
        return make_error("cannot create a pipe: {}{}", std::strerror(error), limit_note(error));
    }
    return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

namespace {

// What the child writes back when it fails before exec (it may run on our borrowed stack: see spawn_process).
struct ChildFailure {
    int stage;   // 0 chdir, 1 exec, 2 affinity, 3 stdio, 4 cgroup, 5 memory binding
    int error;
};
static_assert(sizeof(ChildFailure) == exec_report_size);

std::vector<char*> c_strings(const std::vector<std::string>& strings)
{
    std::vector<char*> out;
    out.reserve(strings.size() + 1);
    for (const auto& s : strings)
        out.push_back(const_cast<char*>(s.c_str()));
    out.push_back(nullptr);
    return out;
}

[[noreturn]] void fail_in_child(int report_fd, int stage)
{
    ChildFailure failure{stage, errno};
    ::signal(SIGPIPE, SIG_IGN);   // nobody may be listening: exit 127 rather than die of SIGPIPE
    [[maybe_unused]] auto written = ::write(report_fd, &failure, sizeof failure);
    ::_exit(127);
}

// The children spawn_process started that no reaper has reaped yet (started_here).
std::mutex started_mutex;
std::set<pid_t> started_pids;

void forget_started(pid_t pid)
{
    std::lock_guard lock(started_mutex);
    started_pids.erase(pid);
}

// The descriptor limit to give children, set by raise_descriptor_limit.
struct rlimit children_descriptor_limit{};
bool restore_descriptor_limit = false;

} // namespace

void raise_descriptor_limit()
{
    struct rlimit limit;
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max)
        return;
    struct rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0)
        return;
    children_descriptor_limit = limit;
    restore_descriptor_limit = true;
}

void occupy_standard_descriptors(bool writable_output)
{
    for (int fd = 0; fd <= 2; ++fd) {
        if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF)
            continue;
        // open() takes the lowest free descriptor: this one, as those below it are open.
        int opened = ::open("/dev/null", fd == 0 || !writable_output ? O_RDONLY : O_WRONLY);
        if (opened != fd && opened >= 0)
            ::close(opened);
    }
}

void keep_freed_memory_for_reuse()
{
    // Allocations below this come from the heap; up to this much free memory stays on top of it.
    constexpr int kept_bytes = 32 << 20;
    ::mallopt(M_MMAP_THRESHOLD, kept_bytes);
    ::mallopt(M_TRIM_THRESHOLD, kept_bytes);
}

Result<pid_t> spawn_process(const SpawnRequest& request)
{
    if (request.argv.empty())
        return make_error("nothing to execute");
    auto report = make_pipe();
    if (!report)
        return report.error();

    // Everything the child touches is prepared here: after vfork only async-signal-safe calls are allowed.
    auto argv = c_strings(request.argv);
    auto envp = request.env ? c_strings(*request.env) : std::vector<char*>{};
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    for (int cpu : request.cpus)
        CPU_SET(cpu, &cpus);
    // set_mempolicy's node mask, for the NUMA nodes Linux numbers (at most max_numa_node).
    constexpr std::size_t mask_bits = 8 * sizeof(unsigned long);
    std::array<unsigned long, (max_numa_node + 1) / mask_bits> numa_mask{};
    for (int node : request.numa_nodes)
        if (node >= 0 && node <= max_numa_node)
            numa_mask[static_cast<std::size_t>(node) / mask_bits] |= 1UL << (static_cast<std::size_t>(node) % mask_bits);
    int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0) {
        int error = errno;
        return make_error("cannot open /dev/null: {}{}", std::strerror(error), limit_note(error));
    }
    UniqueFd null_guard(null_fd);
    int std_fds[3] = {request.stdin_fd, request.stdout_fd, request.stderr_fd};
    for (int& fd : std_fds)
        if (fd < 0)
            fd = null_fd;
    int report_fd = report->write_end.get();

    // vfork, as posix_spawn does: the child borrows our memory until it execs, so a start copies no page tables
    // and leaves no copy-on-write faults behind in a daemon that starts thousands of processes per job. We are
    // suspended only for the kernel's part of the exec. Every signal stays blocked until the child has reset its
    // handlers: one of ours must never run on the borrowed stack.
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = ::vfork();
    if (pid == 0) {
        // First, so that whatever the child does from here on, its processes stay in the cgroup.
        if (request.cgroup_procs_fd >= 0 && ::write(request.cgroup_procs_fd, "0", 1) != 1)
            fail_in_child(report_fd, 4);
        if (request.parent_death_signal)
            ::prctl(PR_SET_PDEATHSIG, request.parent_death_signal);
        if (request.own_process_group)
            ::setpgid(0, 0);
        if (restore_descriptor_limit)
            ::setrlimit(RLIMIT_NOFILE, &children_descriptor_limit);
        // Ignored signals stay ignored across exec, and a shell cannot even trap a signal ignored at its start:
        // give the program the defaults it would have from a login shell.
        for (int signo = 1; signo < NSIG; ++signo)
            if (signo != SIGKILL && signo != SIGSTOP)
                ::signal(signo, SIG_DFL);
        if (!request.keep_signals_blocked) {
            sigset_t none;
            sigemptyset(&none);
            ::sigprocmask(SIG_SETMASK, &none, nullptr);
        }
        if (!request.cpus.empty() && ::sched_setaffinity(0, sizeof cpus, &cpus) != 0)
            fail_in_child(report_fd, 2);
        if (!request.numa_nodes.empty() &&
            ::syscall(SYS_set_mempolicy, MPOL_BIND, numa_mask.data(), numa_mask.size() * mask_bits + 1) != 0)
            fail_in_child(report_fd, 5);
        for (int target = 0; target < 3; ++target)
            if (::dup2(std_fds[target], target) < 0)
                fail_in_child(report_fd, 3);
        // Asio's sockets are not close-on-exec: without this a rank would inherit the tree's authenticated
        // links (and keep a dead daemon's link open).
        ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
        for (int fd : request.inherit_fds)
            if (::fcntl(fd, F_SETFD, 0) != 0)
                fail_in_child(report_fd, 3);
        if (!request.wdir.empty() && ::chdir(request.wdir.c_str()) != 0)
            fail_in_child(report_fd, 0);
        ::execve(argv[0], argv.data(), request.env ? envp.data() : environ);
        fail_in_child(report_fd, 1);
    }
    int vfork_error = errno;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0)
        return make_error("cannot start a process: {}{}", std::strerror(vfork_error),
                          limit_note(vfork_error));
    {
        std::lock_guard lock(started_mutex);
        started_pids.insert(pid);
    }

    // Both sides set the group (the classic race fix): a signal to the group right after we return must not
    // miss a child that has not run yet.
    if (request.own_process_group)
        ::setpgid(pid, pid);
    report->write_end.reset();
    if (!request.wait_for_exec) {
        if (request.exec_report)
            *request.exec_report = std::move(report->read_end);
        return pid;
    }
    std::array<std::uint8_t, exec_report_size> record;
    ssize_t got;
    do {
        got = ::read(report->read_end.get(), record.data(), record.size());
    } while (got < 0 && errno == EINTR);
    if (got == static_cast<ssize_t>(record.size())) {
        int status;
        ::waitpid(pid, &status, 0);
        forget_started(pid);
        return Error{describe_exec_failure(record, request).message};
    }
    return pid;
}

bool started_here(pid_t pid)
{
    std::lock_guard lock(started_mutex);
    return started_pids.count(pid) != 0;
}

StartFailure describe_exec_failure(std::span<const std::uint8_t> record, const SpawnRequest& request)
{
    ChildFailure failure{};
    std::memcpy(&failure, record.data(), std::min(record.size(), sizeof failure));
    const char* reason = std::strerror(failure.error);
    switch (failure.stage) {
    case 0: return {exit_cannot_run, fmt::format("cannot change to directory {}: {}", request.wdir, reason)};
    case 1:
        return {failure.error == ENOENT ? exit_not_found : exit_cannot_run,
                fmt::format("cannot execute {}: {}", request.argv[0], reason)};
    case 2: return {exit_cannot_run, fmt::format("cannot bind to the requested CPUs: {}", reason)};
    case 4: return {exit_cannot_run, fmt::format("cannot join the node's cgroup for ranks: {}", reason)};
    case 5: return {exit_cannot_run, fmt::format("cannot bind memory to NUMA nodes {}: {}",
                                                 fmt::join(request.numa_nodes, ","), reason)};
    default: return {exit_cannot_run, fmt::format("cannot set up standard streams: {}", reason)};
    }
}

std::string own_executable()
{
    std::error_code error;
    auto path = std::filesystem::read_symlink("/proc/self/exe", error);
    return error ? std::string() : path.string();
}

std::string executable_of(pid_t pid)
{
    std::error_code error;
    auto path = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", error);
    return error ? std::string() : path.string();
}

std::string from_working_dir(const std::string& path, const std::string& working_dir)
{
    return path.front() == '/' || working_dir.empty() ? path : working_dir + "/" + path;
}

std::string describe_what_process_does(pid_t pid)
{
    std::string proc = "/proc/" + std::to_string(pid);
    std::ifstream stat_file(proc + "/stat");
    std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
    auto comm_end = stat.rfind(')');
    if (comm_end == std::string::npos || comm_end + 2 >= stat.size())
        return {};
    char state = stat[comm_end + 2];
    if (state == 'Z' || state == 'X')
        return {};
    std::ifstream wchan_file(proc + "/wchan");
    std::string wchan;
    std::getline(wchan_file, wchan);
    const char* what = state == 'R' ? "running" : state == 'D' ? "waiting in the kernel" : state == 'T' ? "stopped"
                                                                                                       : "asleep";
    return wchan.empty() || wchan == "0" ? fmt::format("state {}, {}", state, what)
                                         : fmt::format("state {}, {}, in {}", state, what, wchan);
}

Result<std::string> find_program(const std::string& name, const std::string& path_variable, int* exit_code,
                                 const KnownExecutable& known, const std::string& working_dir)
{
    auto fail = [exit_code](int code, Error error) {
        if (exit_code)
            *exit_code = code;
        return error;
    };
    if (name.empty())
        return fail(exit_not_found, make_error("empty program name"));
    auto executable = [&known](const std::string& path) {
        if (known && known(path))
            return true;
        struct stat info;
        return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(path.c_str(), X_OK) == 0;
    };
    if (name.find('/') != std::string::npos) {
        std::string path = from_working_dir(name, working_dir);
        std::string where = path == name ? "" : fmt::format(" in {}", working_dir);
        if (executable(path))
            return path;
        if (::access(path.c_str(), F_OK) == 0)
            return fail(exit_cannot_run, make_error("program '{}'{} is not executable", name, where));
        return fail(exit_not_found, make_error("program '{}' not found{}", name, where));
    }
    std::stringstream dirs(path_variable.empty() ? std::string("/usr/local/bin:/usr/bin:/bin") : path_variable);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        std::string candidate = from_working_dir((dir.empty() ? std::string(".") : dir) + "/" + name, working_dir);
        if (executable(candidate))
            return candidate;
    }
    return fail(exit_not_found, make_error("program '{}' not found in PATH", name));
}

ProcessReaper::ProcessReaper(boost::asio::io_context& io) : signals_(io, SIGCHLD)
{
    wait_for_signal();
}

void ProcessReaper::watch(pid_t pid, ExitHandler handler) { handlers_[pid] = std::move(handler); }

int ProcessReaper::add_before_reap(BeforeReap hook)
{
    before_reap_.emplace(next_hook_id_, std::move(hook));
    return next_hook_id_++;
}

void ProcessReaper::remove_before_reap(int id) { before_reap_.erase(id); }

void ProcessReaper::reap()
{
    for (;;) {
        // Look first, reap after the hooks: they may still ask about the zombie (its process group).
        siginfo_t info{};
        if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid <= 0)
            return;
        pid_t exited = info.si_pid;
        for (auto& [id, hook] : before_reap_)
            hook(exited);
        int status = 0;
        pid_t pid = ::waitpid(exited, &status, WNOHANG);
        if (pid <= 0)
            return;
        forget_started(pid);
        auto it = handlers_.find(pid);
        if (it == handlers_.end())
            continue;
        auto handler = std::move(it->second);
        handlers_.erase(it);
        handler(status);
    }
}

void ProcessReaper::wait_for_signal()
{
    signals_.async_wait([this](const boost::system::error_code& error, int) {
        if (error)
            return;   // operation_aborted: the reaper is going away
        reap();
        wait_for_signal();
    });
}

std::vector<pid_t> own_children()
{
    std::vector<pid_t> children;
    std::error_code error;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
        std::ifstream list(task.path() / "children");
        pid_t pid;
        while (list >> pid)
            children.push_back(pid);
    }
    return children;
}

bool child_in_process_group(pid_t group, pid_t except)
{
    for (pid_t child : own_children())
        if (child != except && ::getpgid(child) == group)
            return true;
    return false;
}

bool started_with_environment(pid_t pid, std::string_view entry)
{
    std::ifstream environ_file(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    for (std::string variable; std::getline(environ_file, variable, '\0');)
        if (variable == entry)
            return true;
    return false;
}

std::string describe_wait_status(int wait_status)
{
    if (WIFSIGNALED(wait_status)) {
        int signo = WTERMSIG(wait_status);
        const char* name = sigabbrev_np(signo);
        return fmt::format("was killed by signal {} (SIG{})", signo, name ? name : "?");
    }
    return fmt::format("exited with code {}", WEXITSTATUS(wait_status));
}

int exit_code_of(int wait_status)
{
    if (WIFSIGNALED(wait_status))
        return 128 + WTERMSIG(wait_status);
    return WEXITSTATUS(wait_status);
}

} // namespace canopy
