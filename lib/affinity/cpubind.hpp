// CPU binding of ranks: --cpu-bind none|core|depth|numa|socket|gpu|list:CPUS[:CPUS...] with --depth D. numa,
// socket, gpu and core need the node's topology (binding_plan.hpp); depth and list need only its CPUs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace canopy {

// Highest CPU number a list may name; keeps a typo like "list:0-99999999" from allocating gigabytes.
inline constexpr int max_cpu_id = 65535;

struct CpuBind {
    enum class Kind { none, core, depth, list, numa, socket, gpu };
    Kind kind = Kind::none;
    long depth = 1;
    std::vector<std::vector<int>> lists; // for list: one sorted CPU set per entry
};

// One CPU list such as "0-3,8", sorted; errors quote `option` and the whole `spec` it came from.
Result<std::vector<int>> parse_cpu_set(std::string_view entry, std::string_view option, std::string_view spec);

// Errors quote the option: `--cpu-bind "list:3-1": range 3-1 is reversed ...`. depth must be >= 1 when
// spec is "depth".
Result<CpuBind> parse_cpu_bind(std::string_view spec, long depth);

// Whether a binding needs hwloc's view of the node (cores, NUMA domains, packages, GPUs), not just its CPU list.
bool needs_topology(const CpuBind& bind);

// The CPUs (sorted) a local rank is bound to, given the CPUs this process may use (sched_getaffinity
// order). none -> empty (no binding). core -> {allowed[local_rank % n]}. depth -> the `depth` CPUs from
// allowed[(local_rank * depth) % n], wrapping. list -> entry local_rank % entries, as given (not
// intersected with allowed). Empty allowed or a negative local_rank -> empty; so are the kinds that need the
// topology. Pure function, no syscalls.
std::vector<int> cpus_for_local_rank(const CpuBind& bind, long local_rank, const std::vector<int>& allowed);

// Two local ranks that a binding gives a CPU in common: a wrapped core or depth binding (more ranks than CPUs), or
// lists that overlap. canopy refuses such a binding unless --oversubscribe allows it (binding_plan.cpp).
struct SharedCpu {
    long first_local_rank = 0;
    long second_local_rank = 0;
    int cpu = 0;
};
// The one-line refusal: `spec` as given, the node's first rank (for global rank numbers) and its allowed CPUs.
std::string shared_cpu_refusal(std::string_view spec, const SharedCpu& shared, long first_rank, long local_size,
                               const std::string& node, const std::vector<int>& allowed);

// sched_getaffinity(0) as a sorted list; empty if the call fails.
std::vector<int> allowed_cpus();
// "0-3,8" for {0,1,2,3,8}: how Linux prints CPU lists (Cpus_allowed_list).
std::string compress_cpu_list(const std::vector<int>& sorted_cpus);

} // namespace canopy
