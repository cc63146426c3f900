#include "proc/rank_cgroup.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace canopy {
namespace {

// Where the cgroup v2 hierarchy is mounted ("" if nowhere): /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid
// system.
std::string cgroup2_mount()
{
    std::ifstream mounts("/proc/self/mountinfo");
    for (std::string line; std::getline(mounts, line);) {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
        auto dash = line.find(" - ");
        if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0)
            continue;
        std::istringstream fields(line.substr(0, dash));
        std::string id, parent, device, root, mount_point;
        fields >> id >> parent >> device >> root >> mount_point;
        if (root == "/")
            return mount_point;
    }
    return "";
}

// This process's cgroup in the v2 hierarchy: the "0::PATH" line of /proc/self/cgroup.
std::string own_cgroup()
{
    std::ifstream groups("/proc/self/cgroup");
    for (std::string line; std::getline(groups, line);)
        if (line.starts_with("0::"))
            return line.substr(3);
    return "";
}

bool write_text(const std::string& path, std::string_view text)
{
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    return fd && ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

} // namespace

Result<RankCgroup> RankCgroup::create(std::string_view prefix)
{
    std::string mount = cgroup2_mount();
    if (mount.empty())
        return make_error("no cgroup v2 hierarchy is mounted");
    std::string own = own_cgroup();
    if (own.empty() || own.find("..") != std::string::npos)
        return make_error("this process is in no cgroup v2 group");
    std::string base = mount + (own == "/" ? "" : own);
    std::string name = base + "/" + std::string(prefix) + "-XXXXXX";
    if (!::mkdtemp(name.data()))
        return make_error("cannot make a cgroup in {}: {}", base, std::strerror(errno));
    UniqueFd procs(::open((name + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    struct stat kill_file {};
    if (!procs || ::stat((name + "/cgroup.kill").c_str(), &kill_file) != 0) {
        int error = errno;
        ::rmdir(name.c_str());
        return make_error("the cgroup {} cannot be used: {}", name,
                          error == ENOENT ? "the kernel has no cgroup.kill (before Linux 5.14)" : std::strerror(error));
    }
    return RankCgroup(std::move(name), std::move(procs));
}

RankCgroup::~RankCgroup()
{
    if (!path_.empty())
        remove();
}

std::vector<pid_t> RankCgroup::pids() const
{
    std::vector<pid_t> found;
    std::ifstream procs(path_ + "/cgroup.procs");
    for (pid_t pid; procs >> pid;)
        found.push_back(pid);
    return found;
}

void RankCgroup::kill_all() const { write_text(path_ + "/cgroup.kill", "1"); }

void RankCgroup::remove()
{
    kill_all();
    procs_.reset();
    // A killed process leaves the cgroup once it has exited, a moment after the kill: rmdir says EBUSY until then.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (::rmdir(path_.c_str()) != 0 && errno == EBUSY && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    path_.clear();
}

} // namespace canopy
