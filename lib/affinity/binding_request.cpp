// Reading the binding options, and the variables each stack reads to find its devices.
#include "affinity/binding_request.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "affinity/hwloc_loader.hpp"
#include "proc/rank_env.hpp"

namespace canopy {
namespace {

std::string joined(const std::vector<std::string>& items)
{
    std::string out;
    for (const auto& item : items)
        out += (out.empty() ? "" : ",") + item;
    return out;
}

// The GPUs of one vendor, by the numbers its runtime uses: "0,1" (whole GPUs), "0.0,0.1" (tiles, for Level Zero).
std::string vendor_devices(const std::vector<TopologyGpu>& gpus, GpuVendor vendor, bool with_tiles)
{
    std::vector<std::string> names;
    for (const auto& gpu : gpus)
        if (gpu.vendor == vendor) {
            std::string name = with_tiles ? gpu_name(gpu) : std::to_string(gpu.index);
            if (std::find(names.begin(), names.end(), name) == names.end())
                names.push_back(std::move(name));
        }
    return joined(names);
}

// ZE_AFFINITY_MASK in the hierarchy the rank's Level Zero will use: card.tile under COMPOSITE, else (FLAT, the
// default) the tiles' flat numbers.
std::string level_zero_mask(const std::vector<TopologyGpu>& gpus, const std::vector<std::string>& env)
{
    if (environment_value(env, "ZE_FLAT_DEVICE_HIERARCHY") == "COMPOSITE")
        return vendor_devices(gpus, GpuVendor::intel, true);
    std::vector<std::string> flat;
    for (const auto& gpu : gpus)
        if (gpu.vendor == GpuVendor::intel)
            for (int device : gpu.flat.empty() ? std::vector<int>{gpu.index} : gpu.flat)
                flat.push_back(std::to_string(device));
    return joined(flat);
}

} // namespace

Result<BindingRequest> binding_request(const wire::BindingSpec& spec)
{
    BindingRequest request;
    auto cpu = parse_cpu_bind(spec.cpu_bind, static_cast<long>(spec.depth));
    if (!cpu)
        return cpu.error();
    auto gpu = parse_gpu_bind(spec.gpu_bind, static_cast<long>(spec.gpus_per_rank),
                              static_cast<long>(spec.gpu_tiles_per_rank));
    if (!gpu)
        return gpu.error();
    auto mem = parse_mem_bind(spec.mem_bind);
    if (!mem)
        return mem.error();
    if (!spec.reserved_cpus.empty()) {
        auto reserved = parse_cpu_set(spec.reserved_cpus, "[bind] reserved_cpus", spec.reserved_cpus);
        if (!reserved)
            return reserved.error();
        request.reserved = std::move(*reserved);
    }
    if (cpu->kind == CpuBind::Kind::gpu && gpu->kind == GpuBind::Kind::none)
        return make_error("--cpu-bind gpu binds each rank to the cores nearest its GPUs; give --gpu-bind closest "
                          "or a list");
    request.cpu_spec = spec.cpu_bind;
    request.cpu = std::move(*cpu);
    request.gpu_spec = spec.gpu_bind;
    request.gpu = std::move(*gpu);
    request.gpus_optional = spec.gpus_optional;
    request.mem_spec = spec.mem_bind;
    request.mem = std::move(*mem);
    request.share_ok = spec.cpus_shared_ok;
    return request;
}

Result<NodeBindings> plan_node_bindings(const wire::BindingSpec& spec, long local_size, const BindingSite& site)
{
    auto request = binding_request(spec);
    if (!request)
        return request.error();
    NodeBindings result;
    Result<NodeTopology> topology = NodeTopology{};
    // GPUs and NICs only when GPUs are bound, or a file describes the node (reading one costs nothing more).
    bool with_devices = request->gpu.kind != GpuBind::Kind::none || !spec.topology_file.empty();
    if (needs_topology(*request) || !spec.topology_file.empty())
        topology = load_node_topology(spec.topology_file, with_devices);
    else
        topology = flat_topology(allowed_cpus());
    if (!topology)
        return make_error("cannot bind the ranks of {}: {}", site.node, topology.error().message);
    if (!topology->foreign)
        keep_visible_gpus(*topology, [](const char* name) { return std::getenv(name); });
    auto ranks = plan_bindings(*topology, *request, local_size, site);
    if (!ranks)
        return ranks.error();
    result.ranks = std::move(*ranks);
    result.topology_source = topology->source;
    result.foreign = topology->foreign;
    CpuList here = result.foreign ? allowed_cpus() : CpuList{};
    for (auto& rank : result.ranks) {
        bool honoured = !result.foreign || std::ranges::all_of(rank.cpus, [&](int cpu) {
            return std::binary_search(here.begin(), here.end(), cpu);
        });
        result.applied.push_back(honoured);
        if (result.foreign)
            rank.locality.clear();   // PMIx would describe another node type's objects
    }
    return result;
}

void keep_visible_gpus(NodeTopology& topology, const std::function<const char*(const char*)>& value_of)
{
    static constexpr std::pair<GpuVendor, const char*> variables[] = {
        {GpuVendor::nvidia, "CUDA_VISIBLE_DEVICES"}, {GpuVendor::amd, "ROCR_VISIBLE_DEVICES"},
        {GpuVendor::intel, "ZE_AFFINITY_MASK"}};
    for (const auto& entry : variables) {
        GpuVendor vendor = entry.first;
        const char* variable = entry.second;
        const char* value = value_of(variable);
        if (value == nullptr)
            continue;
        std::vector<std::string> names;   // "2" for a GPU, "2.1" for a tile
        bool numbers = true;
        for (std::string_view rest = value; !rest.empty();) {
            std::size_t comma = rest.find(',');
            std::string name(rest.substr(0, comma));
            numbers = numbers && !name.empty() && name.find_first_not_of("0123456789.") == std::string::npos;
            names.push_back(std::move(name));
            rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        }
        if (!numbers)
            continue;
        auto visible = [&](const TopologyGpu& gpu) {
            if (gpu.vendor != vendor)
                return true;
            std::string whole = std::to_string(gpu.index);
            return std::find(names.begin(), names.end(), whole) != names.end() ||
                   std::find(names.begin(), names.end(), gpu_name(gpu)) != names.end();
        };
        // A GPU stays when it, or any tile of it, is visible; a tile when it or its GPU is.
        std::erase_if(topology.tiles, [&](const TopologyGpu& tile) { return !visible(tile); });
        std::erase_if(topology.gpus, [&](const TopologyGpu& gpu) {
            return !visible(gpu) && std::none_of(topology.tiles.begin(), topology.tiles.end(), [&](const auto& tile) {
                return tile.vendor == gpu.vendor && tile.index == gpu.index;
            });
        });
    }
}

void add_binding_environment(std::vector<std::string>& env, const RankBinding& binding)
{
    if (!binding.cpus.empty())
        set_environment_value(env, "CANOPY_CPUS", compress_cpu_list(binding.cpus));
    if (!binding.gpus.empty()) {
        std::vector<std::string> names;
        for (const auto& gpu : binding.gpus)
            names.push_back(gpu_name(gpu));
        set_environment_value(env, "CANOPY_GPUS", joined(names));
        std::set<GpuVendor> vendors;
        for (const auto& gpu : binding.gpus)
            vendors.insert(gpu.vendor);
        for (GpuVendor vendor : vendors) {
            switch (vendor) {
            case GpuVendor::nvidia:
                set_environment_value(env, "CUDA_VISIBLE_DEVICES", vendor_devices(binding.gpus, vendor, false));
                // NVML and nvidia-smi number GPUs in PCI order, CUDA fastest first unless told otherwise.
                add_environment_default(env, "CUDA_DEVICE_ORDER=PCI_BUS_ID");
                break;
            case GpuVendor::amd: {
                std::string devices = vendor_devices(binding.gpus, vendor, false);
                set_environment_value(env, "ROCR_VISIBLE_DEVICES", devices);
                // HIP numbers only what ROCr left visible: 0..n-1, never the physical numbers again.
                std::string visible;
                for (long i = 0, n = std::count(devices.begin(), devices.end(), ',') + 1; i < n; ++i)
                    visible += (i == 0 ? "" : ",") + std::to_string(i);
                set_environment_value(env, "HIP_VISIBLE_DEVICES", visible);
                break;
            }
            case GpuVendor::intel:
                set_environment_value(env, "ZE_AFFINITY_MASK", level_zero_mask(binding.gpus, env));
                add_environment_default(env, "ZE_ENABLE_PCI_ID_DEVICE_ORDER=1");
                break;
            }
        }
    }
    if (!binding.nics.empty()) {
        std::vector<std::string> devices;
        for (const auto& nic : binding.nics)
            devices.push_back(nic.device);
        set_environment_value(env, "CANOPY_NICS", joined(devices));
        // Defaults only: a site's or user's own choice wins. NCCL picks per GPU itself, and must see the same
        // NCCL_IB_HCA on every rank of a node, so it gets nothing (docs/affinity.md).
        const std::string& nearest = binding.nics.front().device;
        if (nearest.starts_with("mlx5_"))
            add_environment_default(env, "UCX_NET_DEVICES=" + nearest + ":1");
    }
}

} // namespace canopy
