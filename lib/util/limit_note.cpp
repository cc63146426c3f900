// Why a system call ran out of something: which limit of the user's or the node's it is at.
#include "util/limit_note.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace canopy {

std::string limit_note(int error)
{
    rlimit limit{};
    if (error == EMFILE && ::getrlimit(RLIMIT_NOFILE, &limit) == 0)
        return fmt::format(" (ulimit -n is {}: this process's open files, pipes and sockets are at that limit)",
                           static_cast<unsigned long long>(limit.rlim_cur));
    if (error == ENFILE)
        return " (the node's file table is full: fs.file-max)";
    if (error != EAGAIN)
        return "";
    if (::getrlimit(RLIMIT_NPROC, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
        return fmt::format(" (ulimit -u is {}: this user's processes and threads on the node, its ranks and "
                           "daemons among them, may be at that limit)",
                           static_cast<unsigned long long>(limit.rlim_cur));
    std::string pid_max = "?";
    if (FILE* file = std::fopen("/proc/sys/kernel/pid_max", "r")) {
        char text[32] = {};
        if (std::fgets(text, sizeof text, file))
            pid_max = std::string(text, strcspn(text, "\n"));
        std::fclose(file);
    }
    return fmt::format(" (the node's process table is full: kernel.pid_max is {}, or a cgroup's pids.max was reached)",
                       pid_max);
}

} // namespace canopy
