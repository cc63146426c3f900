// Directory handles opened once each, relative to their parent's: the root's cheap way to reach many paths.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace canopy::stage {

// Checking or reading N paths through these costs about one lookup per path instead of a walk of every
// leading component per path, which a loaded metadata server pays for. open_file may be called from many threads
// at once (the root's readers share one set, so each directory is looked up once per job, not once per thread).
class DirectoryHandles {
public:
    static constexpr std::size_t default_max_handles = 256;   // well inside the descriptor limit

    explicit DirectoryHandles(std::size_t max_handles = default_max_handles) : max_handles_(max_handles) {}
    DirectoryHandles(const DirectoryHandles&) = delete;
    DirectoryHandles& operator=(const DirectoryHandles&) = delete;

    // An O_PATH descriptor for `dir` (absolute, normalised, no "." or ".."), or -1 with errno set (EINVAL for a
    // relative or empty name). For one thread: the descriptor stays valid until its next call.
    int open(const std::string& dir);

    // Opens `path` (absolute, normalised) for reading through its directory's handle; -1 with errno set.
    int open_file(const std::string& path, int flags);

private:
    // An open directory, closed when the set drops it and no caller holds it any more.
    struct Opened {
        Opened(int fd, int error) : fd(fd), error(error) {}
        ~Opened();
        Opened(const Opened&) = delete;
        Opened& operator=(const Opened&) = delete;
        int fd;
        int error;
    };
    std::shared_ptr<const Opened> handle(const std::string& dir);

    std::size_t max_handles_;
    std::mutex mutex_;
    std::condition_variable opened_;   // a directory in opening_ was opened
    std::set<std::string> opening_;    // being looked up by a thread
    std::map<std::string, std::shared_ptr<const Opened>> handles_;
};

} // namespace canopy::stage
