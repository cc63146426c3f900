// Directory handles opened once each, relative to their parent's.
#include "stage/directory_handles.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace canopy::stage {

DirectoryHandles::Opened::~Opened()
{
    if (fd >= 0)
        ::close(fd);
}

std::shared_ptr<const DirectoryHandles::Opened> DirectoryHandles::handle(const std::string& dir)
{
    {
        std::unique_lock lock(mutex_);
        // Another thread looking this directory up: its handle, not a second lookup (the server counts both).
        opened_.wait(lock, [&] { return opening_.count(dir) == 0; });
        if (auto it = handles_.find(dir); it != handles_.end())
            return it->second;
        opening_.insert(dir);
    }
    // Opened without the lock: a lookup can take a metadata server's round trip, and other threads' cached
    // lookups must not wait for it. A thread waits only for a directory being opened, never for one of its own
    // descendants, so the waits cannot form a cycle.
    int fd = -1;
    if (dir == "/") {
        fd = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    } else {
        auto slash = dir.rfind('/');
        auto parent = handle(slash == 0 ? std::string("/") : dir.substr(0, slash));
        if (parent->fd < 0)
            errno = parent->error;
        else
            fd = ::openat(parent->fd, dir.c_str() + slash + 1, O_PATH | O_DIRECTORY | O_CLOEXEC);
    }
    auto opened = std::make_shared<const Opened>(fd, fd < 0 ? errno : 0);
    std::lock_guard lock(mutex_);
    opening_.erase(dir);
    opened_.notify_all();
    if (handles_.size() >= max_handles_)
        handles_.clear();   // the next walks reopen what they need; handles in use stay open until released
    return handles_.emplace(dir, opened).first->second;
}

int DirectoryHandles::open(const std::string& dir)
{
    if (dir.empty() || dir[0] != '/') {
        errno = EINVAL;   // a relative name has no parent to open it through
        return -1;
    }
    auto opened = handle(dir);   // the set holds it until its next call
    errno = opened->error;
    return opened->fd;
}

int DirectoryHandles::open_file(const std::string& path, int flags)
{
    auto slash = path.rfind('/');
    if (path.empty() || path[0] != '/' || slash + 1 == path.size()) {
        errno = EINVAL;
        return -1;
    }
    auto dir = handle(slash == 0 ? std::string("/") : path.substr(0, slash));
    if (dir->fd < 0) {
        errno = dir->error;
        return -1;
    }
    return ::openat(dir->fd, path.c_str() + slash + 1, flags | O_CLOEXEC);
}

} // namespace canopy::stage
