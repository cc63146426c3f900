// Directory handles opened once each, relative to their parent's: the root's cheap way to reach many paths.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace canopy::stage {

// Checking or reading N paths through these costs about one lookup per path instead of a walk of every
// leading component per path, which a loaded metadata server pays for. Not thread-safe: one per thread.
class DirectoryHandles {
public:
    DirectoryHandles() = default;
    DirectoryHandles(const DirectoryHandles&) = delete;
    DirectoryHandles& operator=(const DirectoryHandles&) = delete;
    ~DirectoryHandles() { close_all(); }

    // An O_PATH descriptor for `dir` (absolute, normalised, no "." or ".."), or -1 with errno set (EINVAL for a
    // relative or empty name).
    int open(const std::string& dir);

    // Opens `path` (absolute, normalised) for reading through its directory's handle; -1 with errno set.
    int open_file(const std::string& path, int flags);

private:
    static constexpr std::size_t max_handles = 256;   // well inside the descriptor limit
    struct Handle {
        int fd = -1;
        int error = 0;
    };
    void close_all();
    std::map<std::string, Handle> handles_;
};

} // namespace canopy::stage
