// What the filesystem says about a path or a directory now, for building and validating the stage index.
#include "stage/filesystem_probe.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

namespace canopy::stage {

std::string read_link(const std::string& path)
{
    std::string target(PATH_MAX, '\0');
    ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
    if (n < 0)
        return {};
    target.resize(static_cast<std::size_t>(n));
    return target;
}

std::string real_path(const std::string& path)
{
    char* resolved = ::realpath(path.c_str(), nullptr);
    if (!resolved)
        return {};
    std::string out(resolved);
    std::free(resolved);
    return out;
}

KnownPath probe(const std::string& path)
{
    KnownPath p;
    struct stat s {};
    if (::lstat(path.c_str(), &s) != 0) {
        p.facts.lstat_errno = p.facts.stat_errno = errno;
        return p;
    }
    p.facts.lstat = to_stage_stat(s);
    if (S_ISLNK(s.st_mode)) {
        p.link = read_link(path);
        struct stat t {};
        if (::stat(path.c_str(), &t) != 0)
            p.facts.stat_errno = errno;
        else
            p.facts.stat = to_stage_stat(t);
    } else {
        p.facts.stat = p.facts.lstat;
    }
    if (p.facts.stat_errno == 0)
        p.mirror = real_path(path);
    return p;
}

KnownPath probe_cheaply(DirectoryHandles& handles, const std::string& path)
{
    auto slash = path.rfind('/');
    bool plain = path.size() > 1 && slash != std::string::npos && path.find("/./") == std::string::npos &&
                 path.find("/../") == std::string::npos && !path.ends_with("/..") && !path.ends_with("/.");
    if (!plain)
        return probe(path);
    int dir = handles.open(slash == 0 ? std::string("/") : path.substr(0, slash));
    KnownPath p;
    if (dir < 0) {
        p.facts.lstat_errno = p.facts.stat_errno = errno;
        return p;
    }
    const char* name = path.c_str() + slash + 1;
    struct stat s {};
    if (::fstatat(dir, name, &s, AT_SYMLINK_NOFOLLOW) != 0) {
        p.facts.lstat_errno = p.facts.stat_errno = errno;
        return p;
    }
    p.facts.lstat = to_stage_stat(s);
    if (!S_ISLNK(s.st_mode)) {
        p.facts.stat = p.facts.lstat;
        return p;
    }
    std::string target(PATH_MAX, '\0');
    ssize_t n = ::readlinkat(dir, name, target.data(), target.size());
    target.resize(n < 0 ? 0 : static_cast<std::size_t>(n));
    p.link = std::move(target);
    struct stat t {};
    if (::fstatat(dir, name, &t, 0) != 0)
        p.facts.stat_errno = errno;
    else
        p.facts.stat = to_stage_stat(t);
    return p;
}

std::vector<std::string> list_names(DirectoryHandles& handles, const std::string& dir, bool& ok)
{
    std::vector<std::string> names;
    ok = false;
    int at = handles.open(dir);
    if (at < 0)
        return names;
    int fd = ::openat(at, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            ::close(fd);
        return names;
    }
    while (struct dirent* ent = ::readdir(d)) {
        std::string_view name = ent->d_name;
        if (name != "." && name != "..")
            names.emplace_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    ok = true;
    return names;
}

std::vector<Listed> list_directory(const std::string& dir, bool& ok)
{
    std::vector<Listed> names;
    ok = false;
    DIR* d = ::opendir(dir.c_str());
    if (!d)
        return names;
    while (struct dirent* ent = ::readdir(d)) {
        std::string name = ent->d_name;
        if (name == "." || name == "..")
            continue;
        Listed l{name, ent->d_type, ent->d_ino, {}};
        const std::string child = dir == "/" ? "/" + name : dir + "/" + name;
        if (l.type == DT_UNKNOWN || l.type == DT_LNK) {
            struct stat s {};
            if (::lstat(child.c_str(), &s) == 0) {
                l.type = S_ISDIR(s.st_mode)   ? DT_DIR
                         : S_ISLNK(s.st_mode) ? DT_LNK
                         : S_ISREG(s.st_mode) ? DT_REG
                         : S_ISFIFO(s.st_mode) ? DT_FIFO
                         : S_ISSOCK(s.st_mode) ? DT_SOCK
                         : S_ISCHR(s.st_mode)  ? DT_CHR
                         : S_ISBLK(s.st_mode)  ? DT_BLK
                                               : DT_UNKNOWN;
            }
            if (l.type == DT_LNK)
                l.link_target = read_link(child);
        }
        names.push_back(std::move(l));
    }
    ::closedir(d);
    std::sort(names.begin(), names.end(), [](const Listed& a, const Listed& b) { return a.name < b.name; });
    ok = true;
    return names;
}

} // namespace canopy::stage
