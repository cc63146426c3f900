// What a node offers a binding: its cores, NUMA domains, packages, GPUs (or their tiles) and NICs, each with the CPUs
// nearest to it. Plain data, filled from hwloc (hwloc_loader.hpp) or written by hand in tests.
#pragma once

#include <string>
#include <vector>

namespace canopy {

// CPU and NUMA numbers are the kernel's (hwloc's os_index), sorted.
using CpuList = std::vector<int>;

struct TopologyCore {
    CpuList cpus;   // its hardware threads that this process may use
    int numa = 0;   // index into NodeTopology::numa_domains
    int package = 0;
};

struct TopologyDomain {
    int os_index = 0;   // the kernel's NUMA node number (package number for packages)
    CpuList cpus;
};

enum class GpuVendor { nvidia, amd, intel };

// A GPU, or one tile (subdevice) of one.
struct TopologyGpu {
    GpuVendor vendor = GpuVendor::nvidia;
    int index = 0;         // the vendor's ordinal: what CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES or ZE name
    int tile = -1;         // the tile's number within the GPU; -1 for a whole GPU
    std::string pci_bus;   // "0000:c1:00.0"
    CpuList near_cpus;     // the CPUs of the nearest object that has CPUs
    std::vector<int> flat; // Intel: its devices' numbers in Level Zero's FLAT hierarchy, one a tile
};

struct TopologyNic {
    std::string device;      // the fabric's name: cxi0, mlx5_0, hfi1_0
    std::string interface;   // its network interface (hsn0, ib0), when the node shows one
    std::string pci_bus;
    CpuList near_cpus;
};

// Where one hardware thread sits: hwloc's logical index of each object above it, -1 where the node has none. What
// PMIx's locality string is made of.
struct PuPlace {
    int cpu = 0;   // the kernel's number
    int package = -1, l3 = -1, l2 = -1, l1 = -1, core = -1, pu = -1, numa = -1;
};

struct NodeTopology {
    std::string source;   // "this machine" or the XML file's path, for messages
    bool foreign = false; // planned from a file: the machine running the ranks may not be this node type
    std::vector<TopologyCore> cores;   // in the kernel's order of their first CPU
    std::vector<TopologyDomain> numa_domains;
    std::vector<TopologyDomain> packages;
    std::vector<TopologyGpu> gpus;     // whole GPUs, by vendor then ordinal
    std::vector<TopologyGpu> tiles;    // every GPU's tiles, when its GPUs have them
    std::vector<TopologyNic> nics;
    std::vector<PuPlace> places;       // sorted by CPU number; empty for a flat topology

    CpuList all_cpus() const;
};

// PMIX_LOCALITY_STRING for a process bound to `cpus`, as PMIx's server makes it ("SK0:L30:L20-1:L10-1:CR0-1:HT0-3:NM0":
// the logical indexes of the packages, caches, cores, threads and NUMA nodes it touches), so that Open MPI can tell
// which peers share what. Empty when the topology has no places.
std::string locality_string(const NodeTopology& topology, const CpuList& cpus);

const char* vendor_name(GpuVendor vendor);
// "3" for a whole GPU, "3.1" for its tile 1: how ZE_AFFINITY_MASK and CANOPY_GPUS name them.
std::string gpu_name(const TopologyGpu& gpu);

} // namespace canopy
