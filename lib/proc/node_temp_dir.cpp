#include "proc/node_temp_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "util/private_dir.hpp"
#include "util/remove_tree.h"

namespace canopy {

Result<NodeTempDir> NodeTempDir::create(const std::string& base, std::string_view prefix,
                                        const BeforeCreate& before_create)
{
    auto path = make_private_dir(base, prefix, before_create);
    if (!path)
        return path.error();
    std::string lock_path = *path + "/" + lock_name;
    UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    // Shared: what holds it says the dir is in use; only a sweep asks for it alone.
    if (!lock || ::flock(lock.get(), LOCK_SH) != 0) {
        int error = errno;
        canopy_remove_tree(path->c_str());
        return make_error("cannot lock {}: {}", lock_path, std::strerror(error));
    }
    return NodeTempDir(std::move(*path), std::string(prefix), std::move(lock));
}

Result<std::string> NodeTempDir::socket_path(std::string_view name, const BeforeCreate& before_create)
{
    constexpr std::size_t max_path = sizeof(sockaddr_un::sun_path) - 1;
    std::string path = path_ + "/" + std::string(name);
    if (path.size() <= max_path)
        return path;
    if (socket_dir_.empty()) {
        // Named for the job and node where that fits, for whoever looks at /tmp.
        std::string prefix = prefix_;
        if (std::string("/tmp/").size() + prefix.size() + 1 + private_dir_suffix_length + 1 + name.size() > max_path)
            prefix = "canopy";
        auto made = make_private_dir("/tmp", prefix, before_create);
        if (!made)
            return make_error("{} is too long for a unix socket, and no dir for it could be made in /tmp: {}", path,
                              made.error().message);
        socket_dir_ = std::move(*made);
    }
    path = socket_dir_ + "/" + std::string(name);
    if (path.size() > max_path)
        return make_error("socket path {} is too long for a unix socket", path);
    return path;
}

void NodeTempDir::remove()
{
    if (!socket_dir_.empty())
        canopy_remove_tree(socket_dir_.c_str());
    socket_dir_.clear();
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

int remove_temp_dirs_made_with(const std::string& base, std::string_view prefix)
{
    UniqueFd base_fd(::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    DIR* listing = base_fd ? ::fdopendir(::dup(base_fd.get())) : nullptr;
    if (!listing)
        return 0;
    int removed = 0;
    while (const dirent* entry = ::readdir(listing)) {
        struct stat info {};
        if (!is_private_dir_name(entry->d_name, prefix) ||
            ::fstatat(base_fd.get(), entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(info.st_mode) ||
            info.st_uid != ::geteuid())
            continue;
        if (canopy_remove_tree((base + "/" + entry->d_name).c_str()) == 0)
            ++removed;
    }
    ::closedir(listing);
    return removed;
}

} // namespace canopy
