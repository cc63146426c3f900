// Block placement of ranks onto hosts.
#include "hosts/placement.hpp"

#include <algorithm>

namespace canopy {

RankBlocks Placement::blocks() const
{
    std::vector<std::uint64_t> counts;
    counts.reserve(nodes.size());
    for (const NodeRanks& node : nodes)
        counts.push_back(static_cast<std::uint64_t>(node.count));
    return RankBlocks(std::move(counts));
}

namespace {

// Appends `count` ranks on `host` after those already placed.
void add_node(Placement& placement, const std::string& host, long count)
{
    placement.nodes.push_back(NodeRanks{host, placement.world_size, count});
    placement.world_size += count;
}

Result<Placement> place_per_node(long ppn, std::optional<long> ranks, const std::vector<HostEntry>& hosts)
{
    long host_count = static_cast<long>(hosts.size());
    long n = 0;
    if (ranks) {
        n = *ranks;
    } else if (__builtin_mul_overflow(ppn, host_count, &n)) {
        return make_error("--ppn {} with {} hosts is too many ranks; give -n", ppn, host_count);
    }
    long needed = n / ppn + (n % ppn != 0);
    if (needed > host_count)
        return make_error("-n {} with --ppn {} needs {} nodes but only {} hosts were given; give more "
                          "hosts or raise --ppn",
                          n, ppn, needed, host_count);
    Placement placement;
    for (long i = 0; i < needed; ++i)
        add_node(placement, hosts[i].name, std::min(ppn, n - placement.world_size));
    return placement;
}

Result<Placement> place_by_slots(std::optional<long> ranks, const std::vector<HostEntry>& hosts)
{
    long total = 0;
    for (const HostEntry& host : hosts)
        total += host.slots;
    long n = ranks.value_or(total);
    if (n > total)
        return make_error("-n {} is more than the {} slots the {} hosts provide; use --ppn to place more "
                          "ranks per node",
                          n, total, hosts.size());
    Placement placement;
    for (const HostEntry& host : hosts) {
        if (placement.world_size == n)
            break;
        add_node(placement, host.name, std::min<long>(host.slots, n - placement.world_size));
    }
    return placement;
}

Placement place_evenly(std::optional<long> ranks, const std::vector<HostEntry>& hosts)
{
    long host_count = static_cast<long>(hosts.size());
    long n = ranks.value_or(host_count);
    long used = std::min(n, host_count);
    long base = n / used;
    long extra = n % used;
    Placement placement;
    for (long i = 0; i < used; ++i)
        add_node(placement, hosts[i].name, base + (i < extra ? 1 : 0));
    return placement;
}

} // namespace

namespace {

Result<Placement> place_unchecked(const PlacementRequest& request)
{
    if (request.hosts.empty())
        return make_error("no hosts to place ranks on; give a hostfile or a host list");
    if (request.ranks && *request.ranks < 1)
        return make_error("-n {}: the number of ranks must be at least 1", *request.ranks);
    if (request.ppn && *request.ppn < 1)
        return make_error("--ppn {}: ranks per node must be at least 1", *request.ppn);
    try {
        if (request.ppn)
            return place_per_node(*request.ppn, request.ranks, request.hosts);
        bool all_slots = std::all_of(request.hosts.begin(), request.hosts.end(),
                                     [](const HostEntry& host) { return host.slots > 0; });
        if (all_slots)
            return place_by_slots(request.ranks, request.hosts);
        return place_evenly(request.ranks, request.hosts);
    } catch (const std::exception& e) {
        return make_error("placing ranks: {}", e.what());
    }
}

} // namespace

Result<Placement> place_ranks(const PlacementRequest& request)
{
    auto placement = place_unchecked(request);
    if (!placement)
        return placement;
    for (const auto& node : placement->nodes)
        if (node.count > max_ranks_per_node)
            return make_error("-n {} on {} hosts puts {} ranks on {}; a node runs at most {}", placement->world_size,
                              placement->nodes.size(), node.count, node.host, max_ranks_per_node);
    return placement;
}

} // namespace canopy
