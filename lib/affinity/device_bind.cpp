// Parsing --gpu-bind and --mem-bind; every error quotes the option as given.
#include "affinity/device_bind.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "util/text.hpp"

namespace canopy {
namespace {

// "a:b:c" after the keyword's "list:", each entry split at commas; empty entries and items are errors.
Result<std::vector<std::vector<std::string>>> split_list(std::string_view option, std::string_view spec,
                                                         std::string_view example)
{
    std::vector<std::vector<std::string>> entries;
    std::string_view rest = spec.substr(5);
    for (std::size_t start = 0;;) {
        std::size_t colon = rest.find(':', start);
        std::string_view entry = rest.substr(start, colon == std::string_view::npos ? colon : colon - start);
        auto& items = entries.emplace_back();
        for (std::size_t from = 0;;) {
            std::size_t comma = entry.find(',', from);
            std::string_view item = entry.substr(from, comma == std::string_view::npos ? comma : comma - from);
            if (item.empty())
                return make_error("{} \"{}\": empty item; write list:{}", option, spec, example);
            items.emplace_back(item);
            if (comma == std::string_view::npos)
                break;
            from = comma + 1;
        }
        if (colon == std::string_view::npos)
            break;
        start = colon + 1;
    }
    return entries;
}

bool is_gpu_name(std::string_view name)
{
    std::size_t dot = name.find('.');
    auto number = [](std::string_view digits) { return parse_decimal(digits, 6).has_value(); };
    return dot == std::string_view::npos ? number(name) : number(name.substr(0, dot)) && number(name.substr(dot + 1));
}

} // namespace

Result<GpuBind> parse_gpu_bind(std::string_view spec, long gpus_per_rank, long tiles_per_rank)
{
    GpuBind bind;
    if (gpus_per_rank > 0 && tiles_per_rank > 0)
        return make_error("--gpus-per-rank {} and --gpu-tiles-per-rank {}: give one; a rank gets whole GPUs or "
                          "tiles, not both",
                          gpus_per_rank, tiles_per_rank);
    bind.per_rank = std::max(gpus_per_rank, tiles_per_rank);
    bind.tiles = tiles_per_rank > 0;
    if (spec == "none") {
        bind.kind = GpuBind::Kind::none;
    } else if (spec == "closest") {
        bind.kind = GpuBind::Kind::closest;
    } else if (spec.starts_with("list:")) {
        bind.kind = GpuBind::Kind::list;
        auto entries = split_list("--gpu-bind", spec, "0,1:2,3 or list:0.0:0.1");
        if (!entries)
            return entries.error();
        for (const auto& entry : *entries)
            for (const auto& name : entry)
                if (!is_gpu_name(name))
                    return make_error("--gpu-bind \"{}\": \"{}\" is not a GPU (3) or a GPU's tile (3.1)", spec,
                                      name);
        bind.lists = std::move(*entries);
        if (bind.per_rank > 0)
            return make_error("--gpu-bind \"{}\" names each rank's GPUs; leave out --gpus-per-rank and "
                              "--gpu-tiles-per-rank",
                              spec);
    } else {
        return make_error("--gpu-bind \"{}\": unknown binding; use none, closest or list:GPUS[:GPUS...] such as "
                          "list:0,1:2,3",
                          spec);
    }
    if (bind.kind == GpuBind::Kind::none && bind.per_rank > 0)
        return make_error("--{} {} without --gpu-bind: give --gpu-bind closest (or a list) to bind GPUs",
                          bind.tiles ? "gpu-tiles-per-rank" : "gpus-per-rank", bind.per_rank);
    return bind;
}

Result<MemBind> parse_mem_bind(std::string_view spec)
{
    MemBind bind;
    if (spec == "none")
        return bind;
    if (spec == "local") {
        bind.kind = MemBind::Kind::local;
        return bind;
    }
    if (!spec.starts_with("list:"))
        return make_error("--mem-bind \"{}\": unknown binding; use none, local or list:NUMA[:NUMA...] such as "
                          "list:0:0:1:1",
                          spec);
    auto entries = split_list("--mem-bind", spec, "0:0:1:1");
    if (!entries)
        return entries.error();
    bind.kind = MemBind::Kind::list;
    for (const auto& entry : *entries) {
        auto& nodes = bind.lists.emplace_back();
        for (const auto& item : entry) {
            auto node = parse_decimal(item, 4);
            if (!node)
                return make_error("--mem-bind \"{}\": \"{}\" is not a NUMA node number", spec, item);
            nodes.push_back(static_cast<int>(*node));
        }
        std::sort(nodes.begin(), nodes.end());
        nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    }
    return bind;
}

} // namespace canopy
