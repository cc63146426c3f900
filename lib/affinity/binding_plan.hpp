// What each local rank of one node is bound to: CPUs, memory, GPUs (or tiles) and the nearest NIC, planned from
// that node's topology. Pure: the daemon plans its own ranks, the launcher plans the same to refuse early and for
// --dry-run.
#pragma once

#include <string>
#include <vector>

#include "affinity/cpubind.hpp"
#include "affinity/device_bind.hpp"
#include "affinity/node_topology.hpp"
#include "util/result.hpp"

namespace canopy {

struct BindingRequest {
    std::string cpu_spec = "none";   // as given, for messages
    CpuBind cpu;
    std::string gpu_spec = "none";
    GpuBind gpu;
    bool gpus_optional = false;   // a site default, not the user's ask: a node without GPUs binds none
    std::string mem_spec = "none";
    MemBind mem;
    CpuList reserved;        // CPUs the site keeps for the system ([bind] reserved_cpus): never bound
    bool share_ok = false;   // --oversubscribe: ranks may share CPUs or GPUs
};

// Whether the request needs hwloc's view of the node rather than only the CPUs this process may use.
bool needs_topology(const BindingRequest& request);

struct RankBinding {
    CpuList cpus;                   // empty: not bound
    std::vector<int> numa;          // NUMA nodes its memory is bound to; empty: not bound
    std::vector<TopologyGpu> gpus;  // empty: none bound
    std::vector<TopologyNic> nics;  // the nearest, when the node has fabric NICs and the rank a place
    std::string locality;           // PMIX_LOCALITY_STRING of its CPUs; empty when not bound
};

// Where the ranks are, for messages: "--gpu-bind closest: 8 ranks on nid0003 need 8 GPUs ...".
struct BindingSite {
    std::string node;
    long first_rank = 0;
};

// One binding per local rank, or the one line that says why this node cannot honour the request.
Result<std::vector<RankBinding>> plan_bindings(const NodeTopology& topology, const BindingRequest& request,
                                               long local_size, const BindingSite& site);

// A topology of just these CPUs, each its own core, one NUMA domain and package: enough for depth and list
// bindings, which need no hwloc.
NodeTopology flat_topology(const CpuList& cpus);

} // namespace canopy
