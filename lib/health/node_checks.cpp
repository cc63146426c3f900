// --health-check's built-in checks.
#include "health/node_checks.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "affinity/binding_request.hpp"
#include "affinity/hwloc_loader.hpp"
#include "util/byte_size.hpp"

namespace canopy {
namespace {

// A write the size of a page proves more than a create: a full disk often still takes an empty file.
std::optional<std::string> write_probe(const std::string& dir)
{
    std::string path = dir + "/health-probe";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return fmt::format("cannot write in the node temp dir {}: {}", dir, std::strerror(errno));
    char page[4096] = {};
    ssize_t written = ::write(fd, page, sizeof page);
    int write_error = errno;
    bool synced = written == static_cast<ssize_t>(sizeof page) && ::fdatasync(fd) == 0;
    int sync_error = errno;
    ::close(fd);
    ::unlink(path.c_str());
    if (written != static_cast<ssize_t>(sizeof page))
        return fmt::format("cannot write in the node temp dir {}: {}", dir,
                           written < 0 ? std::strerror(write_error) : "short write");
    if (!synced)
        return fmt::format("cannot write in the node temp dir {}: {}", dir, std::strerror(sync_error));
    return std::nullopt;
}

std::optional<std::uint64_t> mem_available()
{
    std::ifstream meminfo("/proc/meminfo");
    std::string line;
    while (std::getline(meminfo, line)) {
        if (line.rfind("MemAvailable:", 0) != 0)
            continue;
        std::istringstream fields(line.substr(13));
        std::uint64_t kib = 0;
        if (fields >> kib)
            return kib * 1024;
    }
    return std::nullopt;
}

} // namespace

NodeFacts measure_node(const wire::HealthCheckSpec& spec, const std::string& temp_dir, double clock_offset)
{
    NodeFacts facts;
    facts.temp_dir = temp_dir;
    facts.clock_offset = clock_offset;
    if (temp_dir.empty()) {
        facts.unmeasured.push_back("the node has no temp dir");
    } else {
        if (auto problem = write_probe(temp_dir))
            facts.unmeasured.push_back(std::move(*problem));
        struct statvfs disk {};
        if (::statvfs(temp_dir.c_str(), &disk) == 0)
            facts.free_disk = static_cast<std::uint64_t>(disk.f_bavail) * disk.f_frsize;
        else
            facts.unmeasured.push_back(fmt::format("cannot read the free space of {}: {}", temp_dir, std::strerror(errno)));
    }
    facts.available_memory = mem_available();
    if (!facts.available_memory)
        facts.unmeasured.push_back("cannot read MemAvailable in /proc/meminfo");
    if (spec.gpus > 0) {
        auto topology = load_node_topology("", true);
        if (!topology) {
            facts.unmeasured.push_back(fmt::format("cannot count the GPUs: {}", topology.error().message));
        } else {
            // What an allocation holds back (CUDA_VISIBLE_DEVICES in the daemon's environment) is not the job's.
            keep_visible_gpus(*topology, [](const char* name) { return std::getenv(name); });
            facts.gpus = static_cast<long>(topology->gpus.size());
        }
    }
    return facts;
}

std::string judge_node(const wire::HealthCheckSpec& spec, const NodeFacts& facts)
{
    std::vector<std::string> reasons = facts.unmeasured;
    if (facts.free_disk && *facts.free_disk < spec.min_free_disk)
        reasons.push_back(fmt::format("only {} free in {} (at least {} needed)", format_byte_size(*facts.free_disk),
                                      facts.temp_dir, format_byte_size(spec.min_free_disk)));
    if (facts.available_memory && *facts.available_memory < spec.min_free_memory)
        reasons.push_back(fmt::format("only {} of memory available (at least {} needed)",
                                      format_byte_size(*facts.available_memory), format_byte_size(spec.min_free_memory)));
    if (std::abs(facts.clock_offset) > spec.max_clock_offset)
        reasons.push_back(fmt::format("its clock is {:+.3f} s off its parent's (at most {:.3f} s allowed)",
                                      facts.clock_offset, spec.max_clock_offset));
    if (spec.gpus > 0 && facts.gpus && *facts.gpus < static_cast<long>(spec.gpus))
        reasons.push_back(fmt::format("{} GPU{} visible ({} expected)", *facts.gpus, *facts.gpus == 1 ? "" : "s",
                                      spec.gpus));
    std::string joined;
    for (const auto& reason : reasons)
        joined += (joined.empty() ? "" : "; ") + reason;
    return joined;
}

} // namespace canopy
