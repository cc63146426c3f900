// The daemon's end of canopy-guard (guard_main.c): it starts the guard and tells it what to clean up.
#include "proc/node_guard.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "build_config.hpp"
#include "proc/guard_protocol.h"

namespace canopy {
namespace {

constexpr char kind_group = CANOPY_GUARD_KIND_GROUP;
constexpr char kind_path = CANOPY_GUARD_KIND_PATH;
constexpr char kind_forget_group = CANOPY_GUARD_KIND_FORGET_GROUP;
constexpr std::size_t header_size = CANOPY_GUARD_HEADER_SIZE;
static_assert(header_size == 1 + sizeof(std::uint32_t));
constexpr std::size_t max_payload = PIPE_BUF - header_size;

} // namespace

std::string find_guard_program(const std::string& executable)
{
    namespace fs = std::filesystem;
    const fs::path name = "canopy-guard";
    fs::path dir = fs::path(executable).parent_path();
    if (dir.is_absolute()) {
        // Relative to bindir, so an install that was moved (or staged under DESTDIR) finds its own guard.
        fs::path relocated = dir / fs::path(CANOPY_LIBEXECDIR).lexically_relative(CANOPY_BINDIR) / name;
        for (const auto& candidate : {relocated.lexically_normal(), dir / name})
            if (::access(candidate.c_str(), X_OK) == 0)
                return candidate.string();
    }
    return (fs::path(CANOPY_LIBEXECDIR) / name).string();
}

Result<NodeGuard> NodeGuard::start(const std::string& program, const char* name)
{
    auto pipe = make_pipe();
    if (!pipe)
        return make_error("cannot start the node guard: {}", pipe.error().message);
    SpawnRequest request;
    request.argv = {program, name};
    request.env = std::vector<std::string>{};
    request.stdin_fd = pipe->read_end.get();   // its copy becomes fd 0; ours stays close-on-exec
    request.own_process_group = true;
    // Born with every signal blocked: a teardown signals the daemon's process groups, and the guard must outlive
    // them all to clean up.
    request.keep_signals_blocked = true;
    auto pid = spawn_process(request);
    if (!pid)
        return make_error("cannot start the node guard {}: {}", program, pid.error().message);
    return NodeGuard(std::move(pipe->write_end), *pid);
}

NodeGuard::NodeGuard(NodeGuard&& other) noexcept
    : pipe_(std::move(other.pipe_)), pid_(std::exchange(other.pid_, -1)),
      path_space_used_(std::exchange(other.path_space_used_, 0))
{
}

NodeGuard& NodeGuard::operator=(NodeGuard&& other) noexcept
{
    if (this != &other) {
        finish();
        pipe_ = std::move(other.pipe_);
        pid_ = std::exchange(other.pid_, -1);
        path_space_used_ = std::exchange(other.path_space_used_, 0);
    }
    return *this;
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

bool NodeGuard::watch_path(std::string_view path)
{
    if (path.empty() || path.size() > max_payload || path_space_used_ + path.size() + 1 > CANOPY_GUARD_PATH_SPACE)
        return false;
    path_space_used_ += path.size() + 1;
    send(kind_path, path);
    return true;
}

void NodeGuard::watch_process_group(pid_t group)
{
    send(kind_group, std::string_view(reinterpret_cast<const char*>(&group), sizeof group));
}

void NodeGuard::forget_process_group(pid_t group)
{
    send(kind_forget_group, std::string_view(reinterpret_cast<const char*>(&group), sizeof group));
}

} // namespace canopy
