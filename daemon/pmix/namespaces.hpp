// The PMIx namespaces a node knows: the job's, then each one spawned into it (PMIx_Spawn), with the tree ranks
// their ranks have (hosts/tree_ranks.hpp). Pure and thread-safe: PMIx's thread translates procs in its upcalls while
// the io thread adds namespaces.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pmix/job_info.hpp"
#include "wire/messages.hpp"

namespace canopy {

struct PmixNamespace {
    PmixJob job;         // a spawned one lists only the nodes it uses; node_index -1 when this node hosts none
    long first = 0;      // its first tree rank
    RankBlocks blocks;   // job.ranks_per_node, for the arithmetic on them

    long size() const { return blocks.world_size(); }
};

// A process by namespace and rank within it.
struct PmixProc {
    std::string nspace;
    long rank = 0;
};

class Namespaces {
public:
    explicit Namespaces(PmixJob job);

    // The namespace the root started (NamespaceStart), as this node sees it: `job_hosts` and `job_node_index` are
    // the job's node names and this node's index among them.
    static PmixNamespace spawned(const wire::NamespaceStart& start, const HostNames& job_hosts,
                                 long job_node_index, const std::string& tmpdir);
    Status add(PmixNamespace ns);

    // The job's namespace as it is named now.
    std::string job_nspace() const;
    // The job's ranks restart under a new namespace name (--max-restarts): the old name is forgotten, so a proc
    // that names it (an old rank's) is no rank of the job any more.
    void rename_job(const std::string& nspace);
    // A namespace by name (a copy: the table may grow meanwhile).
    std::optional<PmixNamespace> find(std::string_view nspace) const;
    // The tree rank of `rank` of `nspace`, if both exist.
    std::optional<long> tree_rank(std::string_view nspace, long rank) const;
    // Every tree rank of a namespace (a PMIX_RANK_WILDCARD proc), if it exists.
    std::optional<std::vector<long>> tree_ranks(std::string_view nspace) const;
    // The namespace and rank of a tree rank, and whether it runs on this node.
    std::optional<PmixProc> proc_of(long tree_rank) const;
    bool is_local(long tree_rank) const;
    // For messages: "rank 3" for the job's ranks, "rank 1 of spawned canopy.<job>.2" for a spawned one's.
    std::string rank_name(long tree_rank) const;
    std::vector<PmixNamespace> spawned_so_far() const;

private:
    const PmixNamespace* find_locked(std::string_view nspace) const;
    const PmixNamespace* holding_locked(long tree_rank) const;

    std::string job_nspace_;   // all_.front()'s name, under mutex_ like it
    mutable std::mutex mutex_;
    std::vector<PmixNamespace> all_;   // the job's first
};

} // namespace canopy
