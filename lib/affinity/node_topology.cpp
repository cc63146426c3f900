// The few things every user of a NodeTopology asks of it.
#include "affinity/node_topology.hpp"

#include <algorithm>

#include "affinity/cpubind.hpp"

namespace canopy {

CpuList NodeTopology::all_cpus() const
{
    CpuList cpus;
    for (const auto& core : cores)
        cpus.insert(cpus.end(), core.cpus.begin(), core.cpus.end());
    std::sort(cpus.begin(), cpus.end());
    return cpus;
}

std::string locality_string(const NodeTopology& topology, const CpuList& cpus)
{
    if (topology.places.empty() || cpus.empty())
        return {};
    struct Level {
        const char* prefix;
        int PuPlace::*index;
    };
    static constexpr Level levels[] = {{"SK", &PuPlace::package}, {"L3", &PuPlace::l3}, {"L2", &PuPlace::l2},
                                       {"L1", &PuPlace::l1},      {"CR", &PuPlace::core}, {"HT", &PuPlace::pu},
                                       {"NM", &PuPlace::numa}};
    std::vector<const PuPlace*> touched;   // places are sorted by CPU
    for (int cpu : cpus) {
        auto place = std::lower_bound(topology.places.begin(), topology.places.end(), cpu,
                                      [](const PuPlace& p, int wanted) { return p.cpu < wanted; });
        if (place != topology.places.end() && place->cpu == cpu)
            touched.push_back(&*place);
    }
    std::string out;
    for (const auto& level : levels) {
        std::vector<int> indexes;
        for (const PuPlace* place : touched)
            if (place->*level.index >= 0)
                indexes.push_back(place->*level.index);
        if (indexes.empty())
            continue;
        std::sort(indexes.begin(), indexes.end());
        indexes.erase(std::unique(indexes.begin(), indexes.end()), indexes.end());
        out += (out.empty() ? "" : ":") + std::string(level.prefix) + compress_cpu_list(indexes);
    }
    return out;
}

const char* vendor_name(GpuVendor vendor)
{
    switch (vendor) {
    case GpuVendor::nvidia:
        return "nvidia";
    case GpuVendor::amd:
        return "amd";
    case GpuVendor::intel:
        return "intel";
    }
    return "unknown";
}

std::string gpu_name(const TopologyGpu& gpu)
{
    return gpu.tile < 0 ? std::to_string(gpu.index) : std::to_string(gpu.index) + "." + std::to_string(gpu.tile);
}

} // namespace canopy
