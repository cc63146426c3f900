// The table --report-bindings prints for each node.
#include "affinity/binding_report.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace canopy {
namespace {

template <typename T, typename Name>
std::string names(const std::vector<T>& items, Name name)
{
    std::string out;
    for (const auto& item : items)
        out += (out.empty() ? "" : ",") + name(item);
    return out.empty() ? "-" : out;
}

} // namespace

std::string binding_table(const std::string& node, const NodeBindings& bindings, long first_rank, bool show_applied,
                          std::size_t max_rows)
{
    std::vector<std::vector<std::string>> rows{{"rank", "CPUs", "NUMA", "GPUs", "NICs"}};
    if (show_applied)
        rows.front().push_back("applied");
    std::size_t shown = std::min(bindings.ranks.size(), max_rows);
    for (std::size_t local = 0; local < shown; ++local) {
        const RankBinding& rank = bindings.ranks[local];
        rows.push_back({std::to_string(first_rank + static_cast<long>(local)),
                        rank.cpus.empty() ? "-" : compress_cpu_list(rank.cpus),
                        rank.numa.empty() ? "-" : compress_cpu_list(rank.numa),
                        names(rank.gpus, [](const TopologyGpu& gpu) { return gpu_name(gpu); }),
                        names(rank.nics, [](const TopologyNic& nic) { return nic.device; })});
        if (show_applied)
            rows.back().push_back(bindings.applied[local] ? "yes" : "no: not this machine's CPUs");
    }
    std::vector<std::size_t> width(rows.front().size(), 0);
    for (const auto& row : rows)
        for (std::size_t i = 0; i < row.size(); ++i)
            width[i] = std::max(width[i], row[i].size());
    std::string out = fmt::format("canopy: bindings on {} (topology: {}):", node, bindings.topology_source);
    for (const auto& row : rows) {
        out += "\n ";
        for (std::size_t i = 0; i < row.size(); ++i)
            out += fmt::format(" {:<{}}", row[i], i + 1 == row.size() ? 0 : width[i]);
    }
    if (shown < bindings.ranks.size())
        out += fmt::format("\n  ... and {} more ranks", bindings.ranks.size() - shown);
    return out;
}

} // namespace canopy
