// Two timing reports side by side: each launcher step and each phase's median and tails, with the change.
#include "timing/report.hpp"

#include "timing/analysis.hpp"
#include "timing/report_lines.hpp"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace canopy::timing {

std::string format_comparison(const JobTiming& before, const JobTiming& after, std::string_view before_name,
                              std::string_view after_name)
{
    std::string out;
    // Not cut to the terminal: a shortened file name would not say which run is which.
    out += fmt::format("A: {}  job {}: {} nodes, {} ranks, wall {}\n", before_name, before.job_id, before.nodes,
                       before.ranks, format_seconds(before.wall_seconds));
    out += fmt::format("B: {}  job {}: {} nodes, {} ranks, wall {}\n", after_name, after.job_id, after.nodes,
                       after.ranks, format_seconds(after.wall_seconds));
    const auto most = changed_most(before.phases, after.phases);
    if (most)
        append_line(out, fmt::format("changed most: {}, median {} -> {}", most->name, format_seconds(most->before),
                                     format_seconds(most->after)));
    // Rows: launcher steps, then each phase's median and tails, each under the name it has in either run.
    struct Row {
        std::string name;
        std::optional<double> a, b;
        std::string phase;   // empty for a launcher step
    };
    std::vector<Row> rows;
    std::unordered_map<std::string, std::size_t> row_of;   // name -> index in rows
    auto row_for = [&rows, &row_of](const std::string& name, const std::string& phase) -> Row& {
        auto [at, added] = row_of.try_emplace(name, rows.size());
        if (added)
            rows.push_back({name, {}, {}, phase});
        return rows[at->second];
    };
    for (const auto& stamp : before.timeline)
        row_for(stamp.name, {}).a = stamp.seconds;
    for (const auto& stamp : after.timeline)
        row_for(stamp.name, {}).b = stamp.seconds;
    const std::size_t steps = rows.size();
    constexpr std::pair<const char*, double> statistics[] = {{"median", 0.5}, {"p99", 0.99}, {"max", 1.0}};
    // A phase with one value in both runs has no tail: its p99 and max would repeat the median.
    auto has_tail = [&before, &after](const std::string& name) {
        for (const auto* run : {&before, &after})
            if (const Sketch* sketch = run->phases.find(name); sketch && sketch->count() > 1)
                return true;
        return false;
    };
    for (const auto& [run, field] : {std::pair{&before, &Row::a}, std::pair{&after, &Row::b}})
        for (const auto& [name, sketch] : run->phases.phases()) {
            const bool tail = has_tail(name);
            for (const auto& [statistic, q] : statistics)
                if (tail || q == 0.5)
                    row_for(fmt::format("{} ({})", name, statistic), name).*field = sketch.quantile(q);
        }
    const std::string flagged = most ? fmt::format("{} (median)", most->name) : std::string();

    std::size_t longest = 4;
    for (const auto& row : rows)
        longest = std::max(longest, row.name.size());
    const std::size_t width = name_width(longest, 5);
    auto value = [](const Row& row, const std::optional<double>& v) {
        return v ? format_value(row.phase, *v) : std::string("-");
    };
    append_line(out, "");
    append_line(out, fmt::format("  {:<{}}  {:>10}  {:>10}  {:>8}", "step", width, "A", "B", "B/A"));
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& row = rows[i];
        if (i == steps)
            append_line(out, fmt::format("  {:<{}}", "phases:", width));
        std::string ratio = row.a && row.b && *row.a > 0 ? fmt::format("{:.2f}x", *row.b / *row.a) : "";
        append_line(out, fmt::format("  {:<{}}  {:>10}  {:>10}  {:>8}{}", fit(row.name, width), width,
                                     value(row, row.a), value(row, row.b), ratio,
                                     row.name == flagged ? "  <- changed most" : ""));
    }
    return out;
}

} // namespace canopy::timing
