// Parsing of --cpu-bind and the CPU set each local rank gets.
#include "affinity/cpubind.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include <fmt/format.h>

#include "util/text.hpp"

namespace canopy {
namespace {

std::optional<int> parse_cpu(std::string_view text)
{
    auto value = parse_decimal(text, 9);
    if (!value || *value > max_cpu_id)
        return std::nullopt;
    return static_cast<int>(*value);
}

} // namespace

Result<std::vector<int>> parse_cpu_set(std::string_view entry, std::string_view option, std::string_view spec)
{
    auto fail = [&](std::string_view why) { return make_error("{} \"{}\": {}", option, spec, why); };
    if (entry.empty())
        return fail("empty CPU list; write list:CPUS[:CPUS...] such as list:0-3,8:4-7");
    std::vector<int> cpus;
    std::size_t start = 0;
    while (true) {
        std::size_t comma = entry.find(',', start);
        std::string_view item = entry.substr(start, comma == std::string_view::npos ? comma : comma - start);
        if (item.empty())
            return fail(fmt::format("empty item in \"{}\"", entry));
        std::size_t dash = item.find('-');
        std::string_view low_text = item.substr(0, dash);
        std::string_view high_text = dash == std::string_view::npos ? low_text : item.substr(dash + 1);
        auto low = parse_cpu(low_text);
        auto high = parse_cpu(high_text);
        if (!low || !high)
            return fail(fmt::format("\"{}\" is not a CPU number or range (CPUs are 0-{})", item, max_cpu_id));
        if (*high < *low)
            return fail(fmt::format("range {} is reversed; write {}-{}", item, high_text, low_text));
        for (int cpu = *low; cpu <= *high; ++cpu)
            cpus.push_back(cpu);
        if (comma == std::string_view::npos)
            break;
        start = comma + 1;
    }
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    return cpus;
}

Result<CpuBind> parse_cpu_bind(std::string_view spec, long depth)
{
    try {
        CpuBind bind;
        bind.depth = depth;
        if (spec == "none") {
            bind.kind = CpuBind::Kind::none;
        } else if (spec == "core") {
            bind.kind = CpuBind::Kind::core;
        } else if (spec == "numa") {
            bind.kind = CpuBind::Kind::numa;
        } else if (spec == "socket") {
            bind.kind = CpuBind::Kind::socket;
        } else if (spec == "gpu") {
            bind.kind = CpuBind::Kind::gpu;
        } else if (spec == "depth") {
            if (depth < 1)
                return make_error("--cpu-bind \"depth\" with --depth {}: depth must be at least 1", depth);
            bind.kind = CpuBind::Kind::depth;
        } else if (spec.starts_with("list:")) {
            bind.kind = CpuBind::Kind::list;
            std::string_view rest = spec.substr(5);
            std::size_t start = 0;
            while (true) {
                std::size_t colon = rest.find(':', start);
                auto cpus = parse_cpu_set(
                    rest.substr(start, colon == std::string_view::npos ? colon : colon - start), "--cpu-bind", spec);
                if (!cpus)
                    return cpus.error();
                bind.lists.push_back(std::move(cpus.value()));
                if (colon == std::string_view::npos)
                    break;
                start = colon + 1;
            }
        } else {
            return make_error("--cpu-bind \"{}\": unknown binding; use none, core, depth, numa, socket, "
                              "gpu or list:CPUS[:CPUS...]",
                              spec);
        }
        return bind;
    } catch (const std::exception& e) {
        return make_error("--cpu-bind \"{}\": {}", spec, e.what());
    }
}

std::vector<int> cpus_for_local_rank(const CpuBind& bind, long local_rank, const std::vector<int>& allowed)
{
    std::vector<int> cpus;
    if (local_rank < 0)
        return cpus;
    long n = static_cast<long>(allowed.size());
    switch (bind.kind) {
    case CpuBind::Kind::none:
    case CpuBind::Kind::numa:
    case CpuBind::Kind::socket:
    case CpuBind::Kind::gpu:
        break;
    case CpuBind::Kind::core:
        if (n > 0)
            cpus.push_back(allowed[static_cast<std::size_t>(local_rank % n)]);
        break;
    case CpuBind::Kind::depth: {
        if (n == 0 || bind.depth < 1)
            break;
        // More depth than CPUs would wrap onto the same CPUs again; n CPUs is all there is.
        long count = std::min(bind.depth, n);
        long first = (local_rank % n) * (bind.depth % n) % n;
        for (long i = 0; i < count; ++i)
            cpus.push_back(allowed[static_cast<std::size_t>((first + i) % n)]);
        std::sort(cpus.begin(), cpus.end());
        break;
    }
    case CpuBind::Kind::list:
        if (!bind.lists.empty())
            cpus = bind.lists[static_cast<std::size_t>(local_rank % static_cast<long>(bind.lists.size()))];
        break;
    }
    return cpus;
}

bool needs_topology(const CpuBind& bind)
{
    switch (bind.kind) {
    case CpuBind::Kind::none:
    case CpuBind::Kind::depth:
    case CpuBind::Kind::list:
        return false;
    case CpuBind::Kind::core:
    case CpuBind::Kind::numa:
    case CpuBind::Kind::socket:
    case CpuBind::Kind::gpu:
        return true;
    }
    return true;
}

std::string shared_cpu_refusal(std::string_view spec, const SharedCpu& shared, long first_rank, long local_size,
                               const std::string& node, const std::vector<int>& allowed)
{
    return fmt::format("--cpu-bind {} puts ranks {} and {} on CPU {} of {} ({} ranks there, CPUs {}); bind fewer "
                       "ranks per node, or let them share with --oversubscribe",
                       spec, first_rank + shared.first_local_rank, first_rank + shared.second_local_rank, shared.cpu,
                       node, local_size, compress_cpu_list(allowed));
}

std::vector<int> allowed_cpus()
{
    std::vector<int> cpus;
    // Start at the usual 1024 CPUs and grow while the kernel says the set is too small.
    for (int size = CPU_SETSIZE; size <= (1 << 22); size *= 2) {
        cpu_set_t* set = CPU_ALLOC(size);
        if (set == nullptr)
            return cpus;
        std::size_t bytes = CPU_ALLOC_SIZE(size);
        CPU_ZERO_S(bytes, set);
        if (sched_getaffinity(0, bytes, set) == 0) {
            for (int cpu = 0; cpu < size; ++cpu)
                if (CPU_ISSET_S(cpu, bytes, set))
                    cpus.push_back(cpu);
            CPU_FREE(set);
            return cpus;
        }
        int error = errno;
        CPU_FREE(set);
        if (error != EINVAL)
            return cpus;
    }
    return cpus;
}

std::string compress_cpu_list(const std::vector<int>& sorted_cpus)
{
    std::string out;
    for (std::size_t i = 0; i < sorted_cpus.size();) {
        std::size_t j = i;
        while (j + 1 < sorted_cpus.size() && sorted_cpus[j + 1] == sorted_cpus[j] + 1)
            ++j;
        if (!out.empty())
            out += ',';
        out += std::to_string(sorted_cpus[i]);
        if (j > i)
            out += '-' + std::to_string(sorted_cpus[j]);
        i = j + 1;
    }
    return out;
}

} // namespace canopy
