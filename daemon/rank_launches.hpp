// One node's launches of a job's ranks: each rank's identity and environment, its CPUs, and what the node's
// rank services add. The daemon hands the result to its RankSpawner.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rank_service.hpp"
#include "rank_spawner.hpp"
#include "wire/messages.hpp"

namespace canopy {

// Where the ranks start.
struct NodeSite {
    std::string node;      // the node's name, for messages and RankIdentity
    std::string tmpdir;    // the node's temp dir
    long index = 0;        // node index in the job
    long nodes = 0;        // nodes in the job
    bool simulated = false;
    std::string job_id;
    long restart_count = 0;   // which attempt of the job's ranks (--max-restarts): 0 for the first
};

struct RankBatch {
    std::vector<RankLaunch> launches;  // empty: no ranks on this node; each with its program found on this node
    StartFailure refused;              // a message: none of them can start, and why (names the node)
    std::string binding_report;        // --report-bindings: this node's table
};

// `report_error` gets a service's failure to prepare a rank (the rank still starts). `first_tree_rank` is where
// the ranks' namespace starts among tree ranks: 0 for the job, later for a namespace spawned into it.
RankBatch plan_node_ranks(const wire::JobSpec& job, const NodeSite& site,
                          const std::vector<std::unique_ptr<RankService>>& services,
                          const std::function<void(const std::string&)>& report_error, long first_tree_rank = 0);

// The job a namespace spawned into it (PMIx_Spawn) runs as on this node: the spawner's program, directory and
// environment (less its own PMI and canopy identity), unbound, over the job's nodes as `start` places them.
wire::JobSpec spawned_job(const wire::JobSpec& job, const wire::NamespaceStart& start, const std::string& job_id);

// Whether the node puts each rank in a cgroup of its own (proc/rank_cgroup.hpp): always on a real node, and on
// simulated nodes only for small jobs.
bool wants_rank_cgroup(const wire::LaunchPlan& plan);

} // namespace canopy
