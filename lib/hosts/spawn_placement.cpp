// Placement of a PMIx_Spawn's ranks within the job's spawn slots.
#include "hosts/spawn_placement.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <unordered_map>

#include "hosts/hostlist.hpp"

namespace canopy {
namespace {

enum class Mapping { spread, fill };

// "1 rank", "8 ranks".
std::string counted(std::uint64_t n, std::string_view noun)
{
    return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

Result<Mapping> parse_mapping(std::string_view map_by)
{
    std::string policy(map_by.substr(0, map_by.find(':')));   // "slot:PE=2" and the like: only the policy counts
    std::transform(policy.begin(), policy.end(), policy.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    if (policy.empty() || policy == "node")
        return Mapping::spread;
    if (policy == "slot" || policy == "core")
        return Mapping::fill;
    return make_error("PMIx_Spawn's PMIX_MAPBY '{}' is not supported; canopy maps by node (the default: spread over "
                      "the nodes) or by slot or core (fill each node in turn)",
                      map_by);
}

// The job's hosts for an error line: the hostlist when it is short, else only how many there are.
std::string describe_job_hosts(const std::vector<std::string>& hosts)
{
    constexpr std::size_t longest = 120;
    std::string list = compress_hostlist(hosts);
    if (list.size() <= longest)
        return fmt::format("the job's nodes: {}", list);
    return fmt::format("the job has {} nodes", hosts.size());
}

// Which nodes PMIX_HOST allows, by node index; all of them when it names none.
Result<std::vector<bool>> allowed_nodes(const std::vector<std::string>& job_hosts,
                                        const std::vector<std::string>& named)
{
    if (named.empty())
        return std::vector<bool>(job_hosts.size(), true);
    std::unordered_map<std::string_view, std::vector<std::size_t>> nodes_of;
    for (std::size_t node = 0; node < job_hosts.size(); ++node)
        nodes_of[job_hosts[node]].push_back(node);
    std::vector<bool> allowed(job_hosts.size(), false);
    for (const std::string& entry : named) {
        std::string_view name = std::string_view(entry).substr(0, entry.find(':'));   // "n1:4": slots are ours
        auto found = nodes_of.find(name);
        if (found == nodes_of.end())
            return make_error("PMIx_Spawn's PMIX_HOST names '{}', which is not one of the job's nodes ({}); a spawn "
                              "runs only on those",
                              name, describe_job_hosts(job_hosts));
        for (std::size_t node : found->second)
            allowed[node] = true;
    }
    return allowed;
}

Error does_not_fit(const SpawnNodes& nodes, const SpawnPlacementRequest& request, std::uint64_t allowed_count,
                   std::uint64_t allowed_free)
{
    std::uint64_t in_use = nodes.slots_per_node * allowed_count - allowed_free;
    std::string where = request.hosts.empty()
                            ? std::string("the job's nodes have")
                            : fmt::format("the {} nodes PMIX_HOST names have", allowed_count);
    std::string kept = in_use ? "; spawned ranks keep their slots until the job ends" : "";
    return make_error("PMIx_Spawn asks for {}, but {} {} (--spawn-slots {} on each of {}, {} in use{}); start "
                      "canopy with a larger --spawn-slots",
                      counted(request.count, "rank"), where, counted(allowed_free, "free spawn slot"),
                      nodes.slots_per_node, counted(allowed_count, "node"), in_use, kept);
}

// PMIX_PPR "N:node": N on each allowed node in node order, the last one taking what is left.
Result<std::vector<std::uint64_t>> place_per_node(const SpawnNodes& nodes, const SpawnPlacementRequest& request,
                                                  const std::vector<bool>& allowed, std::uint64_t allowed_count)
{
    std::vector<std::uint64_t> placed(nodes.hosts.size(), 0);
    std::uint64_t left = request.count;
    for (std::size_t node = 0; node < nodes.hosts.size() && left > 0; ++node) {
        if (!allowed[node])
            continue;
        std::uint64_t take = std::min(request.per_node, left);
        if (nodes.free_slots[node] < take)
            return make_error("PMIx_Spawn asks for {} on each node (PMIX_PPR {}:node), but node {} has {} "
                              "(--spawn-slots {}, {} in use); start canopy with a larger --spawn-slots",
                              counted(request.per_node, "rank"), request.per_node, nodes.hosts[node],
                              counted(nodes.free_slots[node], "free spawn slot"), nodes.slots_per_node,
                              nodes.slots_per_node - nodes.free_slots[node]);
        placed[node] = take;
        left -= take;
    }
    if (left > 0) {
        std::uint64_t needed = (request.count + request.per_node - 1) / request.per_node;
        return make_error("PMIx_Spawn asks for {} at {} per node (PMIX_PPR {}:node), which takes {} nodes, but "
                          "{} {}; ask for more per node or fewer ranks",
                          counted(request.count, "rank"), request.per_node, request.per_node, needed,
                          request.hosts.empty() ? "the job has" : "PMIX_HOST names", allowed_count);
    }
    return placed;
}

} // namespace

Result<std::vector<std::uint64_t>> place_spawn(const SpawnNodes& nodes, const SpawnPlacementRequest& request)
{
    if (request.count == 0)
        return make_error("PMIx_Spawn asks for 0 ranks; ask for at least 1");
    auto mapping = parse_mapping(request.map_by);
    if (!mapping)
        return mapping.error();
    auto allowed = allowed_nodes(nodes.hosts, request.hosts);
    if (!allowed)
        return allowed.error();
    if (nodes.slots_per_node == 0)
        return make_error("PMIx_Spawn asks for {}, but canopy was started without spawn slots; start it with "
                          "--spawn-slots N to let PMIx_Spawn and MPI_Comm_spawn start up to N ranks on each node",
                          counted(request.count, "rank"));
    std::uint64_t allowed_count = 0, allowed_free = 0;
    for (std::size_t node = 0; node < nodes.hosts.size(); ++node) {
        if ((*allowed)[node]) {
            ++allowed_count;
            allowed_free += nodes.free_slots[node];
        }
    }
    if (request.count > allowed_free)
        return does_not_fit(nodes, request, allowed_count, allowed_free);
    if (request.per_node > 0)
        return place_per_node(nodes, request, *allowed, allowed_count);

    std::vector<std::uint64_t> placed(nodes.hosts.size(), 0);
    std::uint64_t left = request.count;
    if (*mapping == Mapping::fill) {
        for (std::size_t node = 0; node < nodes.hosts.size() && left > 0; ++node) {
            if ((*allowed)[node]) {
                placed[node] = std::min(nodes.free_slots[node], left);
                left -= placed[node];
            }
        }
        return placed;
    }
    // Round-robin, one rank per node with room each round; it ends because the count fits the free slots.
    while (left > 0) {
        for (std::size_t node = 0; node < nodes.hosts.size() && left > 0; ++node) {
            if ((*allowed)[node] && placed[node] < nodes.free_slots[node]) {
                ++placed[node];
                --left;
            }
        }
    }
    return placed;
}

} // namespace canopy
