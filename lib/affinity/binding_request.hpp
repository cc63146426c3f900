// From the job's binding options (wire::BindingSpec) to a BindingRequest, and from a rank's binding to the variables
// its software stacks read. The launcher and every daemon go through here, so both read the options alike.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "affinity/binding_plan.hpp"
#include "util/result.hpp"
#include "wire/messages.hpp"

namespace canopy {

Result<BindingRequest> binding_request(const wire::BindingSpec& spec);

// Plans a node's ranks from its own topology (or the --topology file), loading hwloc only when the request needs
// it; otherwise from the CPUs this process may use.
struct NodeBindings {
    std::vector<RankBinding> ranks;
    std::string topology_source;   // for --report-bindings
    bool foreign = false;          // planned from a file: CPUs this machine lacks are not applied
    // By local rank: whether its CPUs are bound here. A foreign topology plans for another node type, so only what
    // this machine can honour is bound, and its memory binding never is.
    std::vector<bool> applied;
};
Result<NodeBindings> plan_node_bindings(const wire::BindingSpec& spec, long local_size, const BindingSite& site);

// Keeps only the GPUs the allocation left this node's daemon: a batch system that gives a job some of a node's GPUs
// says which in CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES or ZE_AFFINITY_MASK (by the vendor's numbers, or "2.1"
// for a tile). A variable that names GPUs otherwise (UUIDs) leaves that vendor's list whole. `value_of` reads the
// daemon's environment.
void keep_visible_gpus(NodeTopology& topology, const std::function<const char*(const char*)>& value_of);

// CANOPY_CPUS, CANOPY_GPUS, CANOPY_NICS and each vendor's and fabric's own variables (docs/affinity.md).
void add_binding_environment(std::vector<std::string>& env, const RankBinding& binding);

} // namespace canopy
