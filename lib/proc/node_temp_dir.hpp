// A node's temp dir for one job, and the sweep that removes ones a job left behind.
//
// canopyd removes its temp dir at the end of the job, and canopy-guard does if canopyd dies. Both can die at once:
// a Slurm step cancelled while canopyd is still starting is SIGKILLed whole, guard included. So the daemon holds a
// lock on a file in its dir for as long as it runs, and the next canopyd on the host removes the dirs whose lock
// nobody holds.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "proc/process.hpp"
#include "util/result.hpp"

namespace canopy {

class NodeTempDir {
public:
    // The lock file's name inside the dir; only dirs that have one are ever swept.
    static constexpr const char* lock_name = ".canopyd.lock";

    using BeforeCreate = std::function<void(const std::string& path)>;

    // Makes a fresh dir BASE/PREFIX-XXXXXX (util/private_dir.hpp: mode 0700, a name nobody could create first;
    // BASE must exist) and locks it as in use until this object goes. `before_create` hears the name first.
    static Result<NodeTempDir> create(const std::string& base, std::string_view prefix,
                                      const BeforeCreate& before_create = {});

    NodeTempDir() = default;   // none: path() is empty

    const std::string& path() const { return path_; }
    // Where the unix socket `name` goes: in the dir, or, where that path is too long for a socket (a deep TMPDIR),
    // in a second dir made as this one was, under /tmp, and removed with it. `before_create` as for create().
    Result<std::string> socket_path(std::string_view name, const BeforeCreate& before_create = {});
    // Removes the dir and everything in it; the object then holds nothing.
    void remove();

private:
    NodeTempDir(std::string path, std::string prefix, UniqueFd lock)
        : path_(std::move(path)), prefix_(std::move(prefix)), lock_(std::move(lock))
    {
    }

    std::string path_;
    std::string prefix_;
    std::string socket_dir_;   // the second dir, once a socket needed it
    UniqueFd lock_;
};

// Removes the dirs named canopy-* directly under `base` that are this user's, hold a lock file nobody holds, and
// have not changed for `min_age` (a dir younger than that may be between its creation and its lock). Returns how
// many it removed.
int remove_abandoned_temp_dirs(const std::string& base, std::chrono::seconds min_age);

// Removes the dirs directly under `base` that NodeTempDir::create made with `prefix` (named PREFIX-XXXXXX) and
// that are this user's, never following a symlink: what a node that died left, found without knowing its name.
int remove_temp_dirs_made_with(const std::string& base, std::string_view prefix);

} // namespace canopy
