// Directory handles opened once each, relative to their parent's.
#include "stage/directory_handles.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace canopy::stage {

int DirectoryHandles::open(const std::string& dir)
{
    if (dir.empty() || dir[0] != '/') {
        errno = EINVAL;   // a relative name has no parent to open it through
        return -1;
    }
    if (auto it = handles_.find(dir); it != handles_.end()) {
        errno = it->second.error;
        return it->second.fd;
    }
    if (handles_.size() >= max_handles)
        close_all();   // the next walks reopen what they need
    Handle handle;
    if (dir == "/") {
        handle.fd = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    } else {
        auto slash = dir.rfind('/');
        int parent = open(slash == 0 ? std::string("/") : dir.substr(0, slash));
        handle.fd = parent < 0 ? -1 : ::openat(parent, dir.c_str() + slash + 1, O_PATH | O_DIRECTORY | O_CLOEXEC);
    }
    handle.error = handle.fd < 0 ? errno : 0;
    handles_[dir] = handle;
    errno = handle.error;
    return handle.fd;
}

int DirectoryHandles::open_file(const std::string& path, int flags)
{
    auto slash = path.rfind('/');
    if (slash == std::string::npos || slash + 1 == path.size()) {
        errno = EINVAL;
        return -1;
    }
    int dir = open(slash == 0 ? std::string("/") : path.substr(0, slash));
    return dir < 0 ? -1 : ::openat(dir, path.c_str() + slash + 1, flags | O_CLOEXEC);
}

void DirectoryHandles::close_all()
{
    for (auto& [dir, handle] : handles_)
        if (handle.fd >= 0)
            ::close(handle.fd);
    handles_.clear();
}

} // namespace canopy::stage
