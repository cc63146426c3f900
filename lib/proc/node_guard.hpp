// A helper process (canopy-guard) that outlives canopyd only to clean up: if the daemon dies, even by SIGKILL, it
// kills every rank's process group (grandchildren included) and removes the node's temp dirs (the job's, the stage
// cache). The launcher keeps one too, for its on-demand stage cache.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "proc/process.hpp"
#include "util/result.hpp"

namespace canopy {

// canopy-guard for `executable` (canopyd's path, or the launcher's canopyd): in libexecdir as seen from where
// `executable` is installed, else beside it (the build tree), else the configured libexecdir's, which a failed
// start then names.
std::string find_guard_program(const std::string& executable);

class NodeGuard {
public:
    // Starts `program` (canopy-guard) as the guard. It waits for the daemon's end of a pipe to close, which happens
    // however the daemon ends. `name` is what ps shows for it.
    static Result<NodeGuard> start(const std::string& program, const char* name = "canopyd-guard");

    NodeGuard(NodeGuard&& other) noexcept;
    NodeGuard& operator=(NodeGuard&& other) noexcept;

    // Tells the guard about a directory or file to remove. Tell it before creating the path, so no moment is
    // left in which a SIGKILL would leave the path behind. False if the guard's table of paths is full (64 KiB)
    // or the path is empty or too long: the guard will not remove it.
    bool watch_path(std::string_view path);
    // Tells the guard about a rank's process group.
    void watch_process_group(pid_t group);
    // Tells the guard the group has no process left: its id may be reused, so the guard must not signal it.
    void forget_process_group(pid_t group);
    // On an orderly exit: lets the guard clean up now and reaps it, so it leaves no zombie behind.
    void finish();

private:
    NodeGuard(UniqueFd pipe, pid_t pid) : pipe_(std::move(pipe)), pid_(pid) {}
    void send(char kind, std::string_view payload);

    UniqueFd pipe_;
    pid_t pid_ = -1;
    std::size_t path_space_used_ = 0;   // of the guard's table of paths
};

} // namespace canopy
