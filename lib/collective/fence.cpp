// Fences over the tree, as pure bookkeeping.
#include "collective/fence.hpp"

#include <algorithm>

namespace canopy {

FenceTracker::FenceTracker(Topology topology, std::vector<std::uint64_t> ranks_per_node, long position)
    : topology_(topology), ranks_(RankBlocks(std::move(ranks_per_node))), position_(position)
{
}

FenceRoute FenceTracker::route(const std::vector<long>& participants) const
{
    FenceRoute route;
    long my_node = Topology::position_to_node(position_);
    if (participants.empty()) {
        // Every node in the tree hosts ranks (placement leaves out nodes without any), so all take part.
        route.local = position_ > 0;
        route.children = topology_.children(position_);
        return route;
    }
    std::set<long> children;
    long last_node = -2;
    for (long rank : participants) {
        long node = node_of_rank(rank);
        if (node < 0 || node == last_node)
            continue;
        last_node = node;
        if (node == my_node) {
            route.local = true;
            continue;
        }
        long hop = topology_.next_hop(position_, Topology::node_to_position(node));
        if (hop > 0)
            children.insert(hop);
    }
    route.children.assign(children.begin(), children.end());
    return route;
}

std::uint64_t FenceTracker::next_local_sequence(const std::vector<long>& participants, wire::FenceDomain domain)
{
    return (domain == wire::FenceDomain::restart ? 0 : sequence_base_) + local_sequence_[{domain, participants}]++;
}

void append_chunk(std::vector<std::uint8_t>& blob, const std::vector<std::uint8_t>& chunk, std::uint64_t total)
{
    constexpr std::uint64_t most_reserved = std::uint64_t{4} << 30;
    if (blob.empty() && total > chunk.size() && total <= most_reserved)
        blob.reserve(static_cast<std::size_t>(total));
    blob.insert(blob.end(), chunk.begin(), chunk.end());
}

std::optional<std::vector<std::uint8_t>> FenceTracker::contribute(const FenceId& id, long source,
                                                                  const std::vector<std::uint8_t>& chunk, bool last,
                                                                  std::uint64_t announced)
{
    auto it = pending_.find(id);
    if (it == pending_.end()) {
        auto route = this->route(id.participants);
        Pending fresh;
        if (route.local)
            fresh.expected.insert(position_);
        fresh.expected.insert(route.children.begin(), route.children.end());
        it = pending_.emplace(id, std::move(fresh)).first;
    }
    Pending& fence = it->second;
    if (!fence.expected.contains(source) || fence.finished.contains(source))
        return std::nullopt;   // not a contributor, or a duplicate: ignore rather than corrupt the result
    append_chunk(fence.parts[source], chunk, announced);
    if (!last)
        return std::nullopt;
    fence.finished.insert(source);
    if (fence.finished.size() < fence.expected.size())
        return std::nullopt;
    std::size_t total = 0;
    for (const auto& [from, bytes] : fence.parts)
        total += bytes.size();
    std::vector<std::uint8_t> result;
    result.reserve(total);
    for (auto& [from, bytes] : fence.parts) {
        result.insert(result.end(), bytes.begin(), bytes.end());
        std::vector<std::uint8_t>().swap(bytes);   // freed as it is copied: the result and one part at most
    }
    pending_.erase(it);
    return result;
}

std::vector<FenceId> FenceTracker::pending() const
{
    std::vector<FenceId> ids;
    for (const auto& [id, fence] : pending_)
        ids.push_back(id);
    return ids;
}

void FenceTracker::drop(const FenceId& id) { pending_.erase(id); }

void FenceTracker::forget_ranks_fences(std::uint64_t attempt)
{
    sequence_base_ = attempt << 32;
    std::erase_if(pending_, [](const auto& entry) { return entry.first.domain != wire::FenceDomain::restart; });
    std::erase_if(local_sequence_,
                  [](const auto& entry) { return entry.first.first != wire::FenceDomain::restart; });
}

} // namespace canopy
