#include "util/remove_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace canopy {
namespace {

// Empties the directory open as `dir_fd` (closing it), depth first.
void remove_contents(int dir_fd)
{
    DIR* dir = ::fdopendir(dir_fd);
    if (!dir) {
        ::close(dir_fd);
        return;
    }
    int fd = ::dirfd(dir);
    std::vector<std::string> subdirs;
    while (dirent* entry = ::readdir(dir)) {
        std::string name = entry->d_name;
        if (name == "." || name == "..")
            continue;
        bool is_dir = entry->d_type == DT_DIR;
        if (entry->d_type == DT_UNKNOWN) {
            struct stat info;
            is_dir = ::fstatat(fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(info.st_mode);
        }
        if (is_dir)
            subdirs.push_back(std::move(name));
        else
            ::unlinkat(fd, name.c_str(), 0);
    }
    for (const auto& name : subdirs) {
        int sub = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0)
            remove_contents(sub);
        ::unlinkat(fd, name.c_str(), AT_REMOVEDIR);
    }
    ::closedir(dir);
}

} // namespace

void remove_tree(const std::string& path)
{
    if (path.empty())
        return;
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOTDIR || errno == ELOOP)
            ::unlink(path.c_str());   // a file or a symlink: removed itself, never what it points to
        return;
    }
    remove_contents(fd);
    ::rmdir(path.c_str());
}

} // namespace canopy
