// The root's side of PMIx_Spawn: places each spawned namespace on the job's nodes within --spawn-slots, names it
// and numbers its tree ranks. No I/O: Root sends what it returns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hosts/rank_blocks.hpp"
#include "util/result.hpp"
#include "wire/messages.hpp"
#include "wire/routed.hpp"

namespace canopy {

class SpawnService {
public:
    explicit SpawnService(const wire::LaunchPlan& plan);

    // What one spawn sends: the namespace to every daemon, then the answer to the caller, in that order.
    struct Started {
        wire::NamespaceStart start;
        wire::SpawnReply reply;
    };

    // Places the request and books its slots and tree ranks; an error books nothing.
    Result<Started> start(const wire::SpawnRequest& request);

    // Tree ranks so far: the job's and every namespace started here.
    long tree_ranks() const { return tree_ranks_; }
    // For messages: "rank 3" for the job's ranks, "rank 1 of spawned canopy.<job>.2" for a spawned namespace's.
    std::string rank_name(long tree_rank) const;
    const std::vector<std::uint64_t>& used_slots() const { return used_; }

private:
    std::string job_id_;
    std::vector<std::string> app_wdirs_;   // each program's directory: a spawn's default is its spawner's
    RankBlocks app_blocks_;                 // the programs' ranks
    std::vector<std::string> hosts_;
    std::uint64_t slots_per_node_;
    // Slots are not given back when spawned ranks exit: the root is not told of those exits, so a node's count
    // holds every rank ever spawned there until the job ends.
    std::vector<std::uint64_t> used_;   // by node index
    long tree_ranks_;
    struct Namespace {
        std::uint64_t first = 0, size = 0;
        std::string nspace;
    };
    std::vector<Namespace> started_;   // in the order started: the k-th is canopy.<job>.k
};

} // namespace canopy
