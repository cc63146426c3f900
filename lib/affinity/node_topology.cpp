// The few things every user of a NodeTopology asks of it.
#include "affinity/node_topology.hpp"

#include <algorithm>

namespace canopy {

CpuList NodeTopology::all_cpus() const
{
    CpuList cpus;
    for (const auto& core : cores)
        cpus.insert(cpus.end(), core.cpus.begin(), core.cpus.end());
    std::sort(cpus.begin(), cpus.end());
    return cpus;
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
