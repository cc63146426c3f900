// Planning one node's bindings: CPUs first (or from the GPUs, for --cpu-bind gpu), then GPUs nearest those CPUs,
// then memory, then the NIC nearest each rank's GPUs or CPUs.
#include "affinity/binding_plan.hpp"

#include <algorithm>
#include <climits>
#include <map>

#include <fmt/format.h>

namespace canopy {
namespace {

bool holds(const CpuList& sorted, int id)
{
    return std::binary_search(sorted.begin(), sorted.end(), id);
}

long overlap(const CpuList& a, const CpuList& b)
{
    long common = 0;
    for (int cpu : a)
        common += holds(b, cpu) ? 1 : 0;
    return common;
}

CpuList without(CpuList cpus, const CpuList& removed)
{
    std::erase_if(cpus, [&](int cpu) { return holds(removed, cpu); });
    return cpus;
}

CpuList united(CpuList a, const CpuList& b)
{
    a.insert(a.end(), b.begin(), b.end());
    std::sort(a.begin(), a.end());
    a.erase(std::unique(a.begin(), a.end()), a.end());
    return a;
}

std::string gpu_names(const std::vector<TopologyGpu>& gpus)
{
    std::string names;
    for (const auto& gpu : gpus)
        names += (names.empty() ? "" : ",") + gpu_name(gpu);
    return names;
}

std::string numa_names(const std::vector<TopologyDomain>& domains)
{
    std::vector<int> ids;
    for (const auto& domain : domains)
        ids.push_back(domain.os_index);
    std::sort(ids.begin(), ids.end());
    return compress_cpu_list(ids);
}

class Planner {
public:
    Planner(const NodeTopology& topology, const BindingRequest& request, long local_size, const BindingSite& site)
        : topology_(topology), request_(request), local_size_(local_size), site_(site),
          ranks_(static_cast<std::size_t>(local_size))
    {
        for (const auto& core : topology.cores) {
            TopologyCore usable = core;
            usable.cpus = without(core.cpus, request.reserved);
            if (!usable.cpus.empty())
                cores_.push_back(std::move(usable));
        }
        for (const auto& core : cores_)
            usable_cpus_ = united(std::move(usable_cpus_), core.cpus);
    }

    Result<std::vector<RankBinding>> plan()
    {
        if (local_size_ == 0)
            return std::move(ranks_);
        if (usable_cpus_.empty())
            return make_error("{} has no CPUs to bind once the reserved ones ({}) are left out", site_.node,
                              compress_cpu_list(request_.reserved));
        using Step = Status (Planner::*)();
        for (Step step : {&Planner::plan_cpus, &Planner::plan_gpus, &Planner::plan_cpus_near_gpus,
                          &Planner::check_shared_cpus, &Planner::plan_memory})
            if (Status done = (this->*step)(); !done)
                return done.error();
        plan_nics();
        for (auto& rank : ranks_)
            rank.locality = locality_string(topology_, rank.cpus);
        return std::move(ranks_);
    }

private:
    RankBinding& rank(long local) { return ranks_[static_cast<std::size_t>(local)]; }

    // A share of `count` things for local rank `local` of `of`, spread evenly: where its part starts.
    static long spread(long local, long of, long count) { return local * count / std::max(of, 1L); }

    Status plan_cpus()
    {
        const CpuBind& bind = request_.cpu;
        switch (bind.kind) {
        case CpuBind::Kind::none:
        case CpuBind::Kind::gpu:
            return {};
        case CpuBind::Kind::core:
            for (long local = 0; local < local_size_; ++local)
                rank(local).cpus = cores_[static_cast<std::size_t>(local) % cores_.size()].cpus;
            return {};
        case CpuBind::Kind::depth:
            for (long local = 0; local < local_size_; ++local)
                rank(local).cpus = cpus_for_local_rank(bind, local, usable_cpus_);
            return {};
        case CpuBind::Kind::list:
            return plan_cpu_lists();
        case CpuBind::Kind::numa:
            return plan_domains(topology_.numa_domains);
        case CpuBind::Kind::socket:
            return plan_domains(topology_.packages);
        }
        return {};
    }

    Status plan_cpu_lists()
    {
        CpuList offered = topology_.all_cpus();
        for (long local = 0; local < local_size_; ++local) {
            CpuList cpus = cpus_for_local_rank(request_.cpu, local, usable_cpus_);
            for (int cpu : cpus) {
                if (holds(request_.reserved, cpu) && holds(offered, cpu))
                    return make_error("--cpu-bind {} names CPU {}, which {} keeps for the system (reserved: {})",
                                      request_.cpu_spec, cpu, site_.node, compress_cpu_list(request_.reserved));
                if (!holds(offered, cpu))
                    return make_error("--cpu-bind asks for CPU {}, which {} does not offer (allowed: {})", cpu,
                                      site_.node, compress_cpu_list(offered));
            }
            rank(local).cpus = std::move(cpus);
        }
        return {};
    }

    // numa and socket: ranks in blocks over the domains, a whole domain each; ranks of one domain share it by design.
    Status plan_domains(const std::vector<TopologyDomain>& domains)
    {
        std::vector<CpuList> usable;
        for (const auto& domain : domains)
            if (CpuList cpus = without(domain.cpus, request_.reserved); !cpus.empty())
                usable.push_back(std::move(cpus));
        if (usable.empty())
            usable.push_back(usable_cpus_);
        long count = static_cast<long>(usable.size());
        for (long local = 0; local < local_size_; ++local)
            rank(local).cpus = usable[static_cast<std::size_t>(spread(local, local_size_, count))];
        return {};
    }

    const std::vector<TopologyGpu>& gpu_units(bool& tiles) const
    {
        tiles = !topology_.tiles.empty() && (request_.gpu.tiles || request_.gpu.per_rank == 0);
        if (request_.gpu.kind == GpuBind::Kind::list) {   // the names say which: "3" a GPU, "3.1" a tile
            tiles = std::any_of(request_.gpu.lists.begin(), request_.gpu.lists.end(), [](const auto& entry) {
                return std::any_of(entry.begin(), entry.end(),
                                   [](const std::string& name) { return name.find('.') != std::string::npos; });
            });
        }
        return tiles ? topology_.tiles : topology_.gpus;
    }

    Status plan_gpus()
    {
        const GpuBind& bind = request_.gpu;
        if (bind.kind == GpuBind::Kind::none)
            return {};
        if (topology_.gpus.empty() && request_.gpus_optional)
            return {};   // a CPU node under a GPU site's profile; --cpu-bind gpu then shares out all the cores
        if (topology_.gpus.empty())
            return make_error("--gpu-bind {}: {} has no GPUs (topology: {})", request_.gpu_spec, site_.node,
                              topology_.source);
        if (bind.tiles && topology_.tiles.empty())
            return make_error("--gpu-tiles-per-rank {}: the GPUs of {} have no tiles (GPUs {}; topology: {})",
                              bind.per_rank, site_.node, gpu_names(topology_.gpus), topology_.source);
        bool tiles = false;
        const auto& units = gpu_units(tiles);
        if (bind.kind == GpuBind::Kind::list)
            return plan_gpu_lists(units);
        long per_rank = std::max(bind.per_rank, 1L);
        long have = static_cast<long>(units.size());
        long demand = per_rank * local_size_;
        if (demand > have && !request_.share_ok)
            return make_error("--gpu-bind {}: {} rank{} on {} need {} {}, it has {} ({}); give fewer ranks per node "
                              "or fewer per rank, or let ranks share them with --oversubscribe",
                              request_.gpu_spec, local_size_, local_size_ == 1 ? "" : "s", site_.node, demand,
                              tiles ? "GPU tiles" : "GPUs", have, gpu_names(units));
        bool ranks_have_cpus = std::any_of(ranks_.begin(), ranks_.end(), [](const auto& r) { return !r.cpus.empty(); });
        if (ranks_have_cpus)
            nearest_gpus(units, per_rank);
        else
            spread_gpus(units, per_rank);
        return {};
    }

    // Each rank in turn takes the free GPUs sharing most CPUs with its own; ties go to the least used, then the
    // lowest number. When all are taken (--oversubscribe), the least used nearest.
    void nearest_gpus(const std::vector<TopologyGpu>& units, long per_rank)
    {
        std::vector<long> users(units.size(), 0);
        for (long local = 0; local < local_size_; ++local) {
            for (long taken = 0; taken < per_rank; ++taken) {
                std::size_t best = 0;
                auto better = [&](std::size_t a, std::size_t b) {   // is a better than b
                    long near_a = overlap(units[a].near_cpus, rank(local).cpus);
                    long near_b = overlap(units[b].near_cpus, rank(local).cpus);
                    if (users[a] != users[b])
                        return users[a] < users[b];
                    return near_a > near_b;
                };
                for (std::size_t i = 1; i < units.size(); ++i)
                    if (better(i, best))
                        best = i;
                ++users[best];
                rank(local).gpus.push_back(units[best]);
            }
        }
    }

    // No CPUs to be near: the GPUs in the order of the CPUs they sit next to (not their numbers), ranks spread
    // evenly over them, so two ranks on a two-package node get one package each.
    void spread_gpus(std::vector<TopologyGpu> units, long per_rank)
    {
        auto first_cpu = [](const TopologyGpu& gpu) { return gpu.near_cpus.empty() ? INT_MAX : gpu.near_cpus.front(); };
        std::stable_sort(units.begin(), units.end(),
                         [&](const auto& a, const auto& b) { return first_cpu(a) < first_cpu(b); });
        long have = static_cast<long>(units.size());
        long demand = per_rank * local_size_;
        for (long local = 0; local < local_size_; ++local) {
            long start = demand <= have ? spread(local, local_size_, have) : local * per_rank;
            for (long i = 0; i < per_rank; ++i)
                rank(local).gpus.push_back(units[static_cast<std::size_t>((start + i) % have)]);
        }
    }

    Status plan_gpu_lists(const std::vector<TopologyGpu>& units)
    {
        std::map<std::string, long> owner;   // GPU name -> the first local rank given it
        const auto& lists = request_.gpu.lists;
        for (long local = 0; local < local_size_; ++local) {
            for (const auto& name : lists[static_cast<std::size_t>(local) % lists.size()]) {
                auto unit = std::find_if(units.begin(), units.end(),
                                         [&](const TopologyGpu& gpu) { return gpu_name(gpu) == name; });
                if (unit == units.end())
                    return make_error("--gpu-bind {}: {} has no GPU {} (it has {}; topology: {})", request_.gpu_spec,
                                      site_.node, name, gpu_names(units), topology_.source);
                auto [first, added] = owner.try_emplace(name, local);
                if (!added && first->second != local && !request_.share_ok)
                    return make_error("--gpu-bind {} gives GPU {} of {} to ranks {} and {}; name one for each, or let "
                                      "ranks share with --oversubscribe",
                                      request_.gpu_spec, name, site_.node, site_.first_rank + first->second,
                                      site_.first_rank + local);
                rank(local).gpus.push_back(*unit);
            }
        }
        return {};
    }

    // --cpu-bind gpu: the cores next to a rank's GPUs, split evenly among the ranks whose GPUs sit at the same place.
    Status plan_cpus_near_gpus()
    {
        // binding_request refuses --cpu-bind gpu without GPU binding; ranks without GPUs (a site profile on a CPU
        // node) share out all the node's cores.
        if (request_.cpu.kind != CpuBind::Kind::gpu)
            return {};
        std::map<CpuList, std::vector<long>> sharing;   // near CPUs -> local ranks, in order
        for (long local = 0; local < local_size_; ++local) {
            CpuList near;
            for (const auto& gpu : rank(local).gpus)
                near = united(std::move(near), gpu.near_cpus);
            sharing[without(near, request_.reserved)].push_back(local);
        }
        for (const auto& entry : sharing) {
            const CpuList& near = entry.first;
            const std::vector<long>& locals = entry.second;
            std::vector<const TopologyCore*> here;
            for (const auto& core : cores_)
                if (std::any_of(core.cpus.begin(), core.cpus.end(), [&](int cpu) { return holds(near, cpu); }))
                    here.push_back(&core);
            if (here.empty())   // GPUs with no locality known: any core
                for (const auto& core : cores_)
                    here.push_back(&core);
            long count = static_cast<long>(here.size());
            long sharers = static_cast<long>(locals.size());
            for (long j = 0; j < sharers; ++j) {
                long begin = spread(j, sharers, count);
                long end = std::max(spread(j + 1, sharers, count), begin + 1);
                CpuList cpus;
                for (long c = begin; c < end && c < count; ++c)
                    cpus = united(std::move(cpus), here[static_cast<std::size_t>(c)]->cpus);
                rank(locals[static_cast<std::size_t>(j)]).cpus = std::move(cpus);
            }
        }
        return {};
    }

    // Two ranks on one CPU: refused unless --oversubscribe, for the kinds that give each rank its own CPUs.
    Status check_shared_cpus()
    {
        auto kind = request_.cpu.kind;
        if (request_.share_ok || kind == CpuBind::Kind::none || kind == CpuBind::Kind::numa ||
            kind == CpuBind::Kind::socket)
            return {};
        std::map<int, long> owner;
        for (long local = 0; local < local_size_; ++local)
            for (int cpu : rank(local).cpus)
                if (auto [first, added] = owner.try_emplace(cpu, local); !added && first->second != local)
                    return make_error("{}", shared_cpu_refusal(request_.cpu_spec, SharedCpu{first->second, local, cpu},
                                                               site_.first_rank, local_size_, site_.node, usable_cpus_));
        return {};
    }

    Status plan_memory()
    {
        const MemBind& bind = request_.mem;
        if (bind.kind == MemBind::Kind::none)
            return {};
        if (bind.kind == MemBind::Kind::local) {
            for (long local = 0; local < local_size_; ++local) {
                if (rank(local).cpus.empty())
                    return make_error("--mem-bind local binds memory to the NUMA domains of a rank's CPUs; bind "
                                      "them with --cpu-bind, or name NUMA nodes with --mem-bind list:...");
                for (const auto& domain : topology_.numa_domains)
                    if (overlap(domain.cpus, rank(local).cpus) > 0)
                        rank(local).numa.push_back(domain.os_index);
            }
            return {};
        }
        for (long local = 0; local < local_size_; ++local) {
            const auto& nodes = bind.lists[static_cast<std::size_t>(local) % bind.lists.size()];
            for (int node : nodes)
                if (std::none_of(topology_.numa_domains.begin(), topology_.numa_domains.end(),
                                 [&](const TopologyDomain& domain) { return domain.os_index == node; }))
                    return make_error("--mem-bind {}: {} has no NUMA node {} (it has {}; topology: {})",
                                      request_.mem_spec, site_.node, node, numa_names(topology_.numa_domains),
                                      topology_.source);
            rank(local).numa = nodes;
        }
        return {};
    }

    // The NICs sharing most CPUs with `place`, widened to its NUMA domains and then its packages while none shares
    // any: a NIC under another L3 of the same NUMA domain is still nearer than one across the node.
    std::vector<std::size_t> nearest_nics(const CpuList& place) const
    {
        std::vector<CpuList> widening{place};
        for (const auto* domains : {&topology_.numa_domains, &topology_.packages}) {
            CpuList wider = widening.back();
            for (const auto& domain : *domains)
                if (overlap(domain.cpus, place) > 0)
                    wider = united(std::move(wider), domain.cpus);
            widening.push_back(std::move(wider));
        }
        std::vector<std::size_t> nearest;
        for (const auto& around : widening) {
            long best = 0;
            nearest.clear();
            for (std::size_t i = 0; i < topology_.nics.size(); ++i) {
                long near = overlap(topology_.nics[i].near_cpus, around);
                if (near > best)
                    nearest.clear(), best = near;
                if (near == best && near > 0)
                    nearest.push_back(i);
            }
            if (!nearest.empty())
                return nearest;
        }
        for (std::size_t i = 0; i < topology_.nics.size(); ++i)   // no NIC has a place: all are as near
            nearest.push_back(i);
        return nearest;
    }

    // The NIC nearest the rank's GPUs (else its CPUs); ranks tied between NICs take them in turn.
    void plan_nics()
    {
        if (topology_.nics.empty())
            return;
        std::map<std::vector<std::size_t>, long> turns;   // a set of equally near NICs -> ranks given one so far
        for (long local = 0; local < local_size_; ++local) {
            CpuList place;
            for (const auto& gpu : rank(local).gpus)
                place = united(std::move(place), gpu.near_cpus);
            if (place.empty())
                place = rank(local).cpus;
            if (place.empty())
                continue;
            auto nearest = nearest_nics(place);
            long turn = turns[nearest]++;
            rank(local).nics.push_back(topology_.nics[nearest[static_cast<std::size_t>(turn) % nearest.size()]]);
        }
    }

    const NodeTopology& topology_;
    const BindingRequest& request_;
    long local_size_;
    const BindingSite& site_;
    std::vector<RankBinding> ranks_;
    std::vector<TopologyCore> cores_;   // without the reserved CPUs
    CpuList usable_cpus_;
};

} // namespace

bool needs_topology(const BindingRequest& request)
{
    return needs_topology(request.cpu) || request.gpu.kind != GpuBind::Kind::none ||
           request.mem.kind != MemBind::Kind::none;
}

Result<std::vector<RankBinding>> plan_bindings(const NodeTopology& topology, const BindingRequest& request,
                                               long local_size, const BindingSite& site)
{
    return Planner(topology, request, local_size, site).plan();
}

NodeTopology flat_topology(const CpuList& cpus)
{
    NodeTopology topology;
    topology.source = "this machine's CPUs";
    for (int cpu : cpus)
        topology.cores.push_back({{cpu}, 0, 0});
    topology.numa_domains.push_back({0, cpus});
    topology.packages.push_back({0, cpus});
    return topology;
}

} // namespace canopy
