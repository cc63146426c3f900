#include "pmix/namespaces.hpp"

#include <fmt/format.h>

namespace canopy {

Namespaces::Namespaces(PmixJob job) : job_nspace_(job.nspace)
{
    RankBlocks blocks(job.ranks_per_node);
    all_.push_back({std::move(job), 0, std::move(blocks)});
}

PmixNamespace Namespaces::spawned(const wire::NamespaceStart& start, const HostNames& job_hosts,
                                  long job_node_index, const std::string& tmpdir)
{
    PmixNamespace ns;
    ns.first = static_cast<long>(start.first);
    ns.job.nspace = start.nspace;
    ns.job.tmpdir = tmpdir;
    ns.job.node_index = -1;
    std::vector<std::string> hosts;
    for (std::size_t i = 0; i < start.ranks_per_node.size() && i < job_hosts.size(); ++i) {
        if (start.ranks_per_node[i] == 0)
            continue;
        if (static_cast<long>(i) == job_node_index)
            ns.job.node_index = static_cast<long>(hosts.size());
        hosts.push_back(job_hosts[i]);
        ns.job.ranks_per_node.push_back(start.ranks_per_node[i]);
    }
    ns.job.hosts = HostNames(hosts);
    ns.blocks = RankBlocks(ns.job.ranks_per_node);
    return ns;
}

Status Namespaces::add(PmixNamespace ns)
{
    std::lock_guard lock(mutex_);
    if (find_locked(ns.job.nspace))
        return make_error("namespace {} is known already", ns.job.nspace);
    const auto& last = all_.back();
    if (ns.first != last.first + last.size())
        return make_error("namespace {} starts at tree rank {}, expected {}", ns.job.nspace, ns.first,
                          last.first + last.size());
    all_.push_back(std::move(ns));
    return {};
}

const PmixNamespace* Namespaces::find_locked(std::string_view nspace) const
{
    for (const auto& ns : all_)
        if (ns.job.nspace == nspace)
            return &ns;
    return nullptr;
}

const PmixNamespace* Namespaces::holding_locked(long tree_rank) const
{
    for (const auto& ns : all_)
        if (tree_rank >= ns.first && tree_rank < ns.first + ns.size())
            return &ns;
    return nullptr;
}

std::optional<PmixNamespace> Namespaces::find(std::string_view nspace) const
{
    std::lock_guard lock(mutex_);
    if (auto* ns = find_locked(nspace))
        return *ns;
    return std::nullopt;
}

std::optional<long> Namespaces::tree_rank(std::string_view nspace, long rank) const
{
    std::lock_guard lock(mutex_);
    auto* ns = find_locked(nspace);
    if (!ns || rank < 0 || rank >= ns->size())
        return std::nullopt;
    return ns->first + rank;
}

std::optional<std::vector<long>> Namespaces::tree_ranks(std::string_view nspace) const
{
    std::lock_guard lock(mutex_);
    auto* ns = find_locked(nspace);
    if (!ns)
        return std::nullopt;
    std::vector<long> ranks;
    ranks.reserve(static_cast<std::size_t>(ns->size()));
    for (long r = 0; r < ns->size(); ++r)
        ranks.push_back(ns->first + r);
    return ranks;
}

std::optional<PmixProc> Namespaces::proc_of(long tree_rank) const
{
    std::lock_guard lock(mutex_);
    auto* ns = holding_locked(tree_rank);
    if (!ns)
        return std::nullopt;
    return PmixProc{ns->job.nspace, tree_rank - ns->first};
}

bool Namespaces::is_local(long tree_rank) const
{
    std::lock_guard lock(mutex_);
    auto* ns = holding_locked(tree_rank);
    return ns && ns->job.node_index >= 0 && ns->blocks.node_of(tree_rank - ns->first) == ns->job.node_index;
}

std::string Namespaces::job_nspace() const
{
    std::lock_guard lock(mutex_);
    return job_nspace_;
}

void Namespaces::rename_job(const std::string& nspace)
{
    std::lock_guard lock(mutex_);
    job_nspace_ = nspace;
    all_.front().job.nspace = nspace;
}

std::string Namespaces::rank_name(long tree_rank) const
{
    auto who = proc_of(tree_rank);
    if (!who || who->nspace == job_nspace())
        return fmt::format("rank {}", tree_rank);
    return fmt::format("rank {} of spawned {}", who->rank, who->nspace);
}

std::vector<PmixNamespace> Namespaces::spawned_so_far() const
{
    std::lock_guard lock(mutex_);
    return {all_.begin() + 1, all_.end()};
}

} // namespace canopy
