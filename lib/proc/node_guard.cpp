// A forked helper that outlives canopyd (or the launcher) only to clean up after it.
#include "proc/node_guard.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "util/remove_tree.hpp"

namespace canopy {
namespace {

// A message on the guard's pipe: a kind byte, a 4-byte length, the payload. Each is one write of at most
// PIPE_BUF bytes, so it arrives whole.
constexpr char kind_group = 'g';
constexpr char kind_path = 'p';
constexpr std::size_t header_size = 1 + sizeof(std::uint32_t);
constexpr std::size_t max_payload = PIPE_BUF - header_size;

bool read_exactly(int fd, void* data, std::size_t size)
{
    auto* bytes = static_cast<char*>(data);
    while (size > 0) {
        ssize_t got = ::read(fd, bytes, size);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        bytes += got;
        size -= static_cast<std::size_t>(got);
    }
    return true;
}

[[noreturn]] void guard_main(int pipe_fd, const char* name)
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
    std::vector<std::string> paths;
    char header[header_size];
    char payload[max_payload];
    // Until the daemon is gone: its end of the pipe closes however it ends.
    while (read_exactly(pipe_fd, header, sizeof header)) {
        std::uint32_t size;
        std::memcpy(&size, header + 1, sizeof size);
        if (size > sizeof payload || !read_exactly(pipe_fd, payload, size))
            break;
        if (header[0] == kind_group && size == sizeof(pid_t)) {
            pid_t group;
            std::memcpy(&group, payload, sizeof group);
            groups.push_back(group);
        } else if (header[0] == kind_path) {
            paths.emplace_back(payload, size);
        }
    }
    for (pid_t group : groups)
        ::kill(-group, SIGKILL);
    for (const auto& path : paths)
        remove_tree(path);
    ::_exit(0);
}

} // namespace

Result<NodeGuard> NodeGuard::start(const char* name)
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
        guard_main(fds[0], name);
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

void NodeGuard::send(char kind, std::string_view payload)
{
    if (!pipe_ || payload.size() > max_payload)
        return;
    char message[PIPE_BUF];
    auto size = static_cast<std::uint32_t>(payload.size());
    message[0] = kind;
    std::memcpy(message + 1, &size, sizeof size);
    std::memcpy(message + header_size, payload.data(), payload.size());
    // One write of at most PIPE_BUF bytes is atomic, and never blocks for long while the guard keeps reading.
    [[maybe_unused]] auto written = ::write(pipe_.get(), message, header_size + payload.size());
}

void NodeGuard::watch_path(std::string_view path)
{
    if (!path.empty())
        send(kind_path, path);
}

void NodeGuard::watch_process_group(pid_t group)
{
    send(kind_group, std::string_view(reinterpret_cast<const char*>(&group), sizeof group));
}

} // namespace canopy
