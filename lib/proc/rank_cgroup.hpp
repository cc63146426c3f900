// A cgroup (v2) holding a node's ranks, where the kernel lets this user make one: what a rank starts stays in it
// whatever it does to leave the job (setsid, a double fork, a cleared environment), and one write ends all of it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/types.h>

#include "proc/process.hpp"
#include "util/result.hpp"

namespace canopy {

class RankCgroup {
public:
    // Makes a fresh cgroup PREFIX-XXXXXX below this process's own (as Slurm and Flux make one per job step). An
    // error says why none can be made here: no cgroup v2 hierarchy, one this user may not write to (not delegated),
    // or a kernel without cgroup.kill (before 5.14).
    static Result<RankCgroup> create(std::string_view prefix);

    RankCgroup(RankCgroup&& other) noexcept : path_(std::exchange(other.path_, {})), procs_(std::move(other.procs_)) {}
    RankCgroup& operator=(RankCgroup&&) = delete;
    // Kills what is left and removes the cgroup.
    ~RankCgroup();

    const std::string& path() const { return path_; }
    // Open on its cgroup.procs: a child that writes "0" to it joins (SpawnRequest::cgroup_procs_fd).
    int procs_fd() const { return procs_.get(); }
    // The processes in it now.
    std::vector<pid_t> pids() const;
    // SIGKILL to every process in it, those it forks meanwhile included (cgroup.kill).
    void kill_all() const;

private:
    RankCgroup(std::string path, UniqueFd procs) : path_(std::move(path)), procs_(std::move(procs)) {}
    void remove();

    std::string path_;
    UniqueFd procs_;
};

} // namespace canopy
