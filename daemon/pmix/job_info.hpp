// The job as PMIx sees it: which rank runs on which node, and the job info canopyd registers with PMIx.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "hosts/host_names.hpp"
#include "hosts/rank_blocks.hpp"
#include "util/result.hpp"

namespace canopy {

struct PmixJob {
    std::string nspace;                         // e.g. "canopy.<jobid>"
    HostNames hosts;                            // node index -> node name
    std::vector<std::uint64_t> ranks_per_node;  // node index -> rank count (ranks in blocks, node 0 first)
    std::vector<std::uint64_t> ranks_per_app;   // an MPMD job's programs' rank counts, in rank order; empty: one
    long node_index = 0;                        // this daemon's node; -1: a spawned namespace with no rank here
    std::string tmpdir;                         // per job and node, 0700, exists
    std::uint64_t universe_size = 0;            // PMIX_UNIV_SIZE: the job and what it may spawn; 0: the job's size
    std::string parent_nspace;                  // a spawned namespace: who spawned it (PMIX_PARENT_ID)
    long parent_rank = -1;
    // By local rank, for ranks bound to CPUs here (lib/affinity): PMIX_CPUSET ("hwloc:0-7") and
    // PMIX_LOCALITY_STRING, which Open MPI compares to place shared memory and collectives. Empty: not bound, and
    // the keys are left out, since Open MPI takes a PMIX_CPUSET to mean the rank is bound.
    std::vector<std::string> local_cpusets;
    std::vector<std::string> local_localities;
};

// Where each rank lives; pure arithmetic on PmixJob, no PMIx calls, so it is unit-tested on its own.
class RankLayout {
public:
    // Checks the job: names set, one count per host, every node has at least one rank, node_index in range.
    static Result<RankLayout> make(const PmixJob& job);

    std::uint64_t job_size() const { return static_cast<std::uint64_t>(blocks_.world_size()); }
    std::size_t node_count() const { return static_cast<std::size_t>(blocks_.nodes()); }
    long node_of(long rank) const { return blocks_.node_of(rank); }   // -1 if the rank is not in the job
    long first_rank(long node) const { return blocks_.first_rank(node); }
    std::uint64_t local_size(long node) const { return static_cast<std::uint64_t>(blocks_.local_size(node)); }
    // The rank's index on its node (also its node rank); 0 for a rank outside the job.
    std::uint16_t local_rank(long rank) const { return static_cast<std::uint16_t>(std::max(0L, blocks_.local_rank(rank))); }
    bool is_local(long rank, long node) const { return node_of(rank) == node; }

    std::string node_list() const;                  // "a,b,c": input to PMIx_generate_regex
    std::string ppn_list() const;                   // "0,1;2,3;4": input to PMIx_generate_ppn
    std::string local_peers(long node) const;       // "4,5,6,7": PMIX_LOCAL_PEERS

private:
    std::vector<std::string> hosts_;
    RankBlocks blocks_;
};

// Owns a pmix_info_t array built for PMIx_server_register_nspace (kept opaque here so this header needs no PMIx).
class PmixInfoArray {
public:
    PmixInfoArray() = default;
    PmixInfoArray(void* info, std::size_t count) : info_(info), count_(count) {}
    PmixInfoArray(PmixInfoArray&& other) noexcept;
    PmixInfoArray& operator=(PmixInfoArray&& other) noexcept;
    PmixInfoArray(const PmixInfoArray&) = delete;
    PmixInfoArray& operator=(const PmixInfoArray&) = delete;
    ~PmixInfoArray();

    void* data() const { return info_; }   // pmix_info_t*
    std::size_t size() const { return count_; }

private:
    void* info_ = nullptr;
    std::size_t count_ = 0;
};

// Call after PMIx_server_init (the regex generators need it). The nspace registration info: node and proc maps as PMIX_REGEX, sizes, this node's peers, and per-rank data
// (RANK, LOCAL_RANK, NODE_RANK, HOSTNAME, NODEID) for this node's ranks.
Result<PmixInfoArray> make_job_info(const PmixJob& job, const RankLayout& layout);

} // namespace canopy
