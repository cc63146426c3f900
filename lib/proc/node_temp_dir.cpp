#include "proc/node_temp_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "util/remove_tree.h"

namespace canopy {

Result<NodeTempDir> NodeTempDir::create(const std::string& path)
{
    if (::mkdir(path.c_str(), 0700) != 0)
        return make_error("{}", std::strerror(errno));
    std::string lock_path = path + "/" + lock_name;
    UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    // Shared: what holds it says the dir is in use; only a sweep asks for it alone.
    if (!lock || ::flock(lock.get(), LOCK_SH) != 0) {
        int error = errno;
        canopy_remove_tree(path.c_str());
        return make_error("cannot lock {}: {}", lock_path, std::strerror(error));
    }
    return NodeTempDir(path, std::move(lock));
}

void NodeTempDir::remove()
{
    if (path_.empty())
        return;
    canopy_remove_tree(path_.c_str());
    lock_.reset();
    path_.clear();
}

int remove_abandoned_temp_dirs(const std::string& base, std::chrono::seconds min_age)
{
    UniqueFd base_fd(::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    DIR* listing = base_fd ? ::fdopendir(::dup(base_fd.get())) : nullptr;
    if (!listing)
        return 0;
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    int removed = 0;
    while (const dirent* entry = ::readdir(listing)) {
        std::string_view name = entry->d_name;
        struct stat info {};
        if (!name.starts_with("canopy-") ||
            ::fstatat(base_fd.get(), entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(info.st_mode) ||
            info.st_uid != ::geteuid() || now.tv_sec - info.st_mtim.tv_sec < min_age.count())
            continue;
        UniqueFd dir(::openat(base_fd.get(), entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        UniqueFd lock(dir ? ::openat(dir.get(), NodeTempDir::lock_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1);
        // No lock file: not a node temp dir (the launcher's stage cache, another tool's). Held: in use.
        if (!lock || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0)
            continue;
        if (canopy_remove_tree((base + "/" + entry->d_name).c_str()) == 0)
            ++removed;
    }
    ::closedir(listing);
    return removed;
}

} // namespace canopy
