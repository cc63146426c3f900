// Sweeping abandoned shared-memory files: candidates by name, owner and age; kept if any process has them open or mapped.
#include "proc/abandoned_segments.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <utility>

namespace canopy {

namespace {

using FileId = std::pair<dev_t, ino_t>;

std::vector<std::string> process_dirs()
{
    std::vector<std::string> found;
    DIR* proc = ::opendir("/proc");
    if (!proc)
        return found;
    while (auto* entry = ::readdir(proc))
        if (entry->d_name[0] >= '1' && entry->d_name[0] <= '9')
            found.push_back(std::string("/proc/") + entry->d_name);
    ::closedir(proc);
    return found;
}

// Drops from `candidates` every file that a process maps (its maps name device and inode) or holds open.
void drop_in_use(std::set<FileId>& candidates)
{
    for (const auto& dir : process_dirs()) {
        std::ifstream maps(dir + "/maps");
        std::string line;
        while (!candidates.empty() && std::getline(maps, line)) {
            unsigned major_id = 0, minor_id = 0;
            unsigned long inode = 0;
            if (std::sscanf(line.c_str(), "%*s %*s %*s %x:%x %lu", &major_id, &minor_id, &inode) == 3 && inode)
                candidates.erase({makedev(major_id, minor_id), static_cast<ino_t>(inode)});
        }
        DIR* fds = ::opendir((dir + "/fd").c_str());
        if (!fds)
            continue;
        while (auto* entry = ::readdir(fds)) {
            struct stat target {};
            if (entry->d_name[0] != '.' && ::stat((dir + "/fd/" + entry->d_name).c_str(), &target) == 0)
                candidates.erase({target.st_dev, target.st_ino});
        }
        ::closedir(fds);
        if (candidates.empty())
            return;
    }
}

} // namespace

std::vector<std::string> remove_abandoned_segments(const std::string& directory, std::string_view prefix,
                                                   std::chrono::system_clock::time_point since)
{
    std::vector<std::pair<std::string, FileId>> found;
    DIR* dir = ::opendir(directory.c_str());
    if (!dir)
        return {};
    auto since_s = std::chrono::system_clock::to_time_t(since);
    while (auto* entry = ::readdir(dir)) {
        if (std::string_view(entry->d_name).substr(0, prefix.size()) != prefix)
            continue;
        std::string path = directory + "/" + entry->d_name;
        struct stat info {};
        // ctime, not mtime: a rank's writes through the mapping need not update mtime, creation always sets ctime.
        if (::lstat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && info.st_uid == ::getuid() &&
            info.st_ctim.tv_sec >= since_s)
            found.emplace_back(std::move(path), FileId{info.st_dev, info.st_ino});
    }
    ::closedir(dir);
    if (found.empty())
        return {};
    std::set<FileId> unused;
    for (const auto& [path, id] : found)
        unused.insert(id);
    drop_in_use(unused);
    std::vector<std::string> removed;
    for (const auto& [path, id] : found)
        if (unused.count(id) && ::unlink(path.c_str()) == 0)
            removed.push_back(path);
    return removed;
}

} // namespace canopy
