// Fences over the tree, as pure bookkeeping: who must contribute at this daemon, and when a fence is complete.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hosts/tree_ranks.hpp"
#include "tree/topology.hpp"
#include "wire/messages.hpp"

namespace canopy {

// A fence is named by its participants (empty = every rank of the job) and by how many fences over the same
// participants came before it: MPI issues fences back to back, and every rank calls them in the same order.
struct FenceId {
    std::vector<long> participants;   // sorted ranks, or empty for the whole job
    std::uint64_t sequence = 0;
    wire::FenceDomain domain = wire::FenceDomain::pmix;
    auto operator<=>(const FenceId&) const = default;
};

// Where a fence's contributions come from at one tree position.
struct FenceRoute {
    bool local = false;              // this position's node hosts participants
    std::vector<long> children;      // child positions whose subtrees host participants
};

// Appends a chunk of a blob whose whole size its sender announced (`total`, 0 if unknown): the first chunk
// reserves the whole, so a large result is never held twice while a doubling vector grows. An implausible total
// (smaller than the chunk, or over 4 GiB) reserves nothing.
void append_chunk(std::vector<std::uint8_t>& blob, const std::vector<std::uint8_t>& chunk, std::uint64_t total);

class FenceTracker {
public:
    // ranks_per_node: rank counts by node index, ranks placed in blocks starting at node 0.
    FenceTracker(Topology topology, std::vector<std::uint64_t> ranks_per_node, long position);

    FenceRoute route(const std::vector<long>& participants) const;

    // The next sequence number for a local fence over these participants.
    std::uint64_t next_local_sequence(const std::vector<long>& participants,
                                      wire::FenceDomain domain = wire::FenceDomain::pmix);

    // Records a contribution (source = this position for the local one, else the child's position), which may
    // arrive in chunks: `last` marks a source's final chunk. Returns every source's blob concatenated (each one
    // whole, sources never interleaved) once every expected source has finished; the fence is then forgotten.
    // `announced` is the source's whole blob as its chunks announce it (0: not known).
    std::optional<std::vector<std::uint8_t>> contribute(const FenceId& id, long source,
                                                        const std::vector<std::uint8_t>& chunk, bool last = true,
                                                        std::uint64_t announced = 0);

    // Fences still waiting, for failing them when a participant dies.
    std::vector<FenceId> pending() const;
    // Forgets a fence that failed.
    void drop(const FenceId& id);
    // The job's ranks restart (--max-restarts) for attempt `attempt`: every fence of theirs is forgotten, and the
    // next attempt's are numbered from attempt * 2^32 on, as on every node, so that no late part of an old fence (a
    // chunk on a fabric, which keeps no order with the links) can pass for a new one. The restart barriers keep their
    // own numbering.
    void forget_ranks_fences(std::uint64_t attempt);

    // The node index hosting a tree rank (hosts/tree_ranks.hpp), or -1.
    long node_of_rank(long rank) const { return ranks_.node_of(rank); }
    // The job's own ranks: tree ranks below this are the job's, the rest spawned.
    long job_size() const { return ranks_.job().world_size(); }
    // A namespace spawned into the job: its ranks become tree ranks from `first` on.
    Status add_namespace(long first, std::vector<std::uint64_t> ranks_per_node)
    {
        return ranks_.add(first, std::move(ranks_per_node));
    }

private:
    struct Pending {
        std::set<long> expected;
        std::set<long> finished;
        std::map<long, std::vector<std::uint8_t>> parts;   // by source, so chunks of two sources never mix
    };

    Topology topology_;
    TreeRanks ranks_;
    long position_;
    std::map<std::pair<wire::FenceDomain, std::vector<long>>, std::uint64_t> local_sequence_;
    std::uint64_t sequence_base_ = 0;   // the ranks' fences' first number in this attempt
    std::map<FenceId, Pending> pending_;
};

} // namespace canopy
