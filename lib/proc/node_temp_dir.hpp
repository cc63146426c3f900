// A node's temp dir for one job, and the sweep that removes ones a job left behind.
//
// canopyd removes its temp dir at the end of the job, and canopy-guard does if canopyd dies. Both can die at once:
// a Slurm step cancelled while canopyd is still starting is SIGKILLed whole, guard included. So the daemon holds a
// lock on a file in its dir for as long as it runs, and the next canopyd on the host removes the dirs whose lock
// nobody holds.
#pragma once

#include <chrono>
#include <string>

#include "proc/process.hpp"
#include "util/result.hpp"

namespace canopy {

class NodeTempDir {
public:
    // The lock file's name inside the dir; only dirs that have one are ever swept.
    static constexpr const char* lock_name = ".canopyd.lock";

    // Creates `path` (mode 0700; its parent must exist) and locks it as in use until this object goes.
    static Result<NodeTempDir> create(const std::string& path);

    NodeTempDir() = default;   // none: path() is empty

    const std::string& path() const { return path_; }
    // Removes the dir and everything in it; the object then holds nothing.
    void remove();

private:
    NodeTempDir(std::string path, UniqueFd lock) : path_(std::move(path)), lock_(std::move(lock)) {}

    std::string path_;
    UniqueFd lock_;
};

// Removes the dirs named canopy-* directly under `base` that are this user's, hold a lock file nobody holds, and
// have not changed for `min_age` (a dir younger than that may be between its creation and its lock). Returns how
// many it removed.
int remove_abandoned_temp_dirs(const std::string& base, std::chrono::seconds min_age);

} // namespace canopy
