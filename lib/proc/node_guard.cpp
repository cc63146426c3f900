// A forked helper that outlives canopyd (or the launcher) only to clean up after it.
#include "proc/node_guard.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace canopy {
namespace {

[[noreturn]] void guard_main(int pipe_fd, const std::vector<std::string>& dirs, const char* name)
{
    // Its own process group and deaf to the signals a teardown sends, so it is still there to clean up.
    ::setpgid(0, 0);
    ::signal(SIGTERM, SIG_IGN);
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    ::prctl(PR_SET_NAME, name);
    int null_fd = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd)
        ::dup2(null_fd, fd);
    // Hold nothing of the daemon's but the pipe: not its sockets, not its parent's stderr pipe.
    if (pipe_fd > 3)
        ::close_range(3, static_cast<unsigned>(pipe_fd) - 1, 0);
    ::close_range(static_cast<unsigned>(pipe_fd) + 1, ~0U, 0);

    std::vector<pid_t> groups;
    for (;;) {
        pid_t group;
        ssize_t got = ::read(pipe_fd, &group, sizeof group);
        if (got == static_cast<ssize_t>(sizeof group))
            groups.push_back(group);
        else if (got < 0 && errno == EINTR)
            continue;
        else
            break;   // the daemon is gone
    }
    for (pid_t group : groups)
        ::kill(-group, SIGKILL);
    std::error_code ignored;
    for (const auto& dir : dirs)
        if (!dir.empty())
            std::filesystem::remove_all(dir, ignored);
    ::_exit(0);
}

} // namespace

Result<NodeGuard> NodeGuard::start(std::vector<std::string> dirs, const char* name)
{
    int fds[2];
    if (::pipe(fds) != 0)
        return make_error("cannot create the node guard's pipe: {}", std::strerror(errno));
    pid_t pid = ::fork();
    if (pid < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        return make_error("cannot fork the node guard: {}", std::strerror(errno));
    }
    if (pid == 0) {
        ::close(fds[1]);
        guard_main(fds[0], dirs, name);
    }
    ::close(fds[0]);
    ::fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    return NodeGuard(UniqueFd(fds[1]), pid);
}

void NodeGuard::finish()
{
    pipe_.reset();
    if (pid_ > 0) {
        int status;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
    }
}

void NodeGuard::watch_process_group(pid_t group)
{
    // A 4-byte write to a pipe is atomic and never blocks while the guard keeps reading.
    [[maybe_unused]] auto written = ::write(pipe_.get(), &group, sizeof group);
}

} // namespace canopy
