// The per-phase startup timing report: terminal table, JSON writer and JSON reader.
#include "timing/report.hpp"

#include "timing/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace canopy::timing {
namespace {

using nlohmann::json;

constexpr std::size_t max_columns = 100;

struct Description {
    std::string_view name, text;
};

constexpr Description stamp_descriptions[] = {
    {"start", "launcher started"},
    {"hosts_resolved", "host list expanded and ranks placed"},
    {"tree_up", "every daemon connected and authenticated"},
    {"job_delivered", "every daemon received the job"},
    {"stage_indexed", "stage index built (manifest validated, or prefixes walked)"},
    {"stage_sent", "launcher sent the last staged byte down the tree"},
    {"ranks_spawned", "every rank started"},
    {"ranks_exited", "every rank exited"},
    {"teardown_done", "daemons shut down"},
};

constexpr Description phase_descriptions[] = {
    {"daemon.started", "canopyd began running on its node"},
    {"daemon.connected", "daemon connected to its parent"},
    {"daemon.job_received", "daemon received the job description"},
    {"daemon.pmix_ready", "daemon's PMIx server ready for its ranks"},
    {"daemon.stage_ready", "daemon installed its node's stage cache (its ranks start after this)"},
    {"daemon.ranks_spawned", "daemon started the last of its ranks"},
    {"daemon.tree_messages", "fence and request messages a daemon received and sent (a count, not a time)"},
    {"root.tree_messages", "fence and request messages the launcher received and sent (a count, not a time)"},
    {"daemon.store_local_messages", "store requests a daemon answered itself (cached, or a shared read)"},
    {"root.store_read_messages", "store reads the root served for a node"},
    {"root.store_write_messages", "store writes the root served for a node"},
    {"root.store_invalidate_messages", "cached store keys the root invalidated on a node before a write"},
    {"daemon.stage_local_messages", "on-demand stage lookups a daemon answered itself"},
    {"daemon.stage_up_messages", "on-demand stage lookups a daemon asked its parent"},
    {"root.stage_local_messages", "on-demand stage lookups the root answered from its cache"},
    {"root.stage_read_messages", "paths the root read from the file system for on-demand staging"},
    {"root.stage_read_ahead_messages", "paths the root read ahead of any request and pushed down the tree"},
    {"daemon.stage_pushed_messages", "read-ahead answers a daemon received and kept"},
    {"daemon.stage_fetched_ahead_messages", "libraries a daemon fetched before its ranks asked (a push named them)"},
    {"synthetic.fence_entered", "--synthetic-ranks: the node's last synthetic rank entered the fence"},
    {"synthetic.fence_done", "--synthetic-ranks: the fence returned to the node's synthetic ranks"},
    {"synthetic.exchange_done", "--synthetic-ranks: the node's synthetic ranks had read and checked their peers' values"},
    {"synthetic.fence.duration", "--synthetic-ranks: the node's fence, its ranks in to out (a duration)"},
    {"synthetic.baseline_kib", "--synthetic-ranks: the daemon's resident KiB before the exchange (not a time)"},
    {"synthetic.peak_over_baseline_kib", "--synthetic-ranks: the daemon's peak KiB over that baseline (not a time)"},
    {"synthetic.result_kib", "--synthetic-ranks: KiB of values the node holds after the exchange (not a time)"},
    {"synthetic.peak_ratio_percent", "--synthetic-ranks: peak over baseline, in % of the result held (target 150)"},
    {"synthetic.fetch_messages", "--synthetic-ranks dmodex: values the node fetched from other nodes (a count)"},
    {"rank.spawned", "rank process started"},
    {"rank.exited", "rank process exited"},
    {"rank.runtime", "rank run time, spawn to exit (a duration, not since start)"},
    {"spawned_rank.spawned", "rank that PMIx_Spawn asked for started (tree rank: after the job's)"},
    {"spawned_rank.exited", "rank that PMIx_Spawn asked for exited"},
    {"spawned_rank.runtime", "spawned rank's run time, start to exit (a duration, not since start)"},
};

template <std::size_t N>
std::string_view describe(const Description (&table)[N], std::string_view name)
{
    for (const auto& entry : table)
        if (entry.name == name)
            return entry.text;
    return {};
}

// Cuts text to width, marking the cut, so no line exceeds the terminal budget.
std::string fit(std::string text, std::size_t width)
{
    if (text.size() <= width)
        return text;
    if (width <= 3)
        return text.substr(0, width);
    text.resize(width - 3);
    return text + "...";
}

// Counts ("..._messages") are shown as numbers, everything else as times.
std::string format_value(std::string_view phase, double value)
{
    return phase_kind(phase) == PhaseKind::count ? fmt::format("{:.0f}", value) : format_seconds(value);
}

std::size_t name_width(std::size_t longest, std::size_t header)
{
    return std::clamp(longest, header, std::size_t{30});
}

void append_line(std::string& out, std::string line)
{
    while (!line.empty() && line.back() == ' ')
        line.pop_back();
    out += fit(std::move(line), max_columns);
    out += '\n';
}

void format_timeline(std::string& out, const std::vector<Stamp>& timeline)
{
    if (timeline.empty()) {
        append_line(out, "launcher timeline: none recorded");
        return;
    }
    std::size_t longest = 0;
    for (const auto& stamp : timeline)
        longest = std::max(longest, stamp.name.size());
    const std::size_t width = name_width(longest, 13);

    // The step that took longest is marked, since that is usually what the user is looking for.
    std::size_t slowest = 0;
    double slowest_delta = 0;
    for (std::size_t i = 1; i < timeline.size(); ++i) {
        const double delta = timeline[i].seconds - timeline[i - 1].seconds;
        if (delta > slowest_delta) {
            slowest_delta = delta;
            slowest = i;
        }
    }

    append_line(out, fmt::format("  {:<{}}  {:>10}  {:>10}  {}", "launcher step", width, "since start",
                                 "delta", "meaning"));
    for (std::size_t i = 0; i < timeline.size(); ++i) {
        const auto& stamp = timeline[i];
        std::string delta;
        if (i > 0) {
            const double d = stamp.seconds - timeline[i - 1].seconds;
            delta = (d >= 0 ? "+" : "") + format_seconds(d);
        }
        std::string meaning(describe(stamp_descriptions, stamp.name));
        if (i == slowest && i > 0)
            meaning += meaning.empty() ? "<- longest step" : "  <- longest step";
        append_line(out, fmt::format("  {:<{}}  {:>10}  {:>10}  {}", fit(stamp.name, width), width,
                                     format_seconds(stamp.seconds), delta, meaning));
    }
}

void format_phases(std::string& out, const std::vector<const NamedSketch*>& ordered)
{
    if (ordered.empty()) {
        append_line(out, "phases: none recorded");
        return;
    }
    std::size_t longest = 0;
    for (const auto* phase : ordered)
        longest = std::max(longest, phase->first.size());
    const std::size_t width = name_width(longest, 5);
    const std::string header = fmt::format("  {:<{}}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  ", "phase", width,
                                           "count", "min", "median", "p99", "max");
    const std::size_t who_width = max_columns > header.size() ? max_columns - header.size() : 0;

    append_line(out, "phases, over all daemons/ranks (seconds since launcher start unless noted):");
    append_line(out, header + "slowest");
    for (const auto* phase : ordered) {
        const auto& [name, sketch] = *phase;
        append_line(out, fmt::format("  {:<{}}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  {}", fit(name, width), width,
                                     sketch.count(), format_value(name, sketch.min()),
                                     format_value(name, sketch.median()), format_value(name, sketch.quantile(0.99)),
                                     format_value(name, sketch.max()), fit(sketch.max_who(), who_width)));
    }

    bool legend = false;
    for (const auto* phase : ordered) {
        const auto& name = phase->first;
        const std::string_view text = describe(phase_descriptions, name);
        if (text.empty())
            continue;
        if (!legend)
            append_line(out, "where:");
        legend = true;
        append_line(out, fmt::format("  {:<{}}  {}", fit(name, width), width, text));
    }
}

// The top k of each phase that has more than one value, packed on as many lines as they take.
void format_slowest(std::string& out, const JobTiming& timing, const std::vector<const NamedSketch*>& ordered)
{
    if (!timing.top_recorded) {
        out += '\n';
        append_line(out, "slowest: not in this file (it was written by a canopy from before the top-k lists)");
        return;
    }
    std::vector<const NamedSketch*> shown;
    std::size_t longest = 0;
    for (const auto* phase : ordered)
        if (phase->second.count() > 1 && !phase->second.top().empty()) {
            shown.push_back(phase);
            longest = std::max(longest, phase->first.size());
        }
    if (shown.empty())
        return;
    const std::size_t width = name_width(longest, 5);
    const std::string indent(2 + width + 2, ' ');
    out += '\n';
    append_line(out, fmt::format("slowest daemons/ranks, the top {} of each phase (latest, longest or most):",
                                 timing.phases.top_k()));
    for (const auto* phase : shown) {
        const auto& [name, sketch] = *phase;
        std::string line = fmt::format("  {:<{}}  ", fit(name, width), width);
        bool empty = true;
        for (std::size_t i = 0; i < sketch.top().size(); ++i) {
            const auto& entry = sketch.top()[i];
            std::string piece = fmt::format("{} {}{}", format_value(name, entry.value), entry.who,
                                            i + 1 < sketch.top().size() ? "," : "");
            if (!empty && line.size() + 1 + piece.size() > max_columns) {
                append_line(out, std::move(line));
                line = indent;
                empty = true;
            }
            line += (empty ? "" : " ") + piece;
            empty = false;
        }
        append_line(out, std::move(line));
    }
}

void format_startup(std::string& out, const JobTiming& timing)
{
    const StartupWindow window = startup_window(timing);
    append_line(out, fmt::format("start-up: {}, launcher start to {}", format_seconds(window.end),
                                 describe_end(window)));
    std::string line = fmt::format("  unattributed: {} ({:.1f}%), covered by no launcher step or application phase",
                                   format_seconds(window.unattributed), 100.0 * window.share());
    if (!window.gaps.empty()) {
        const auto largest = std::max_element(window.gaps.begin(), window.gaps.end(), [](const Gap& a, const Gap& b) {
            return a.end - a.begin < b.end - b.begin;
        });
        line = fmt::format("  unattributed: {} ({:.1f}%); largest gap {} after {}, before {}",
                           format_seconds(window.unattributed), 100.0 * window.share(),
                           format_seconds(largest->end - largest->begin), largest->after, largest->before);
    }
    append_line(out, std::move(line));
}

} // namespace

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

namespace {

// ---- JSON reading: each helper names the full key path in its error. ----

std::string key_path(std::string_view parent, std::string_view key)
{
    return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

Error missing(const std::string& path)
{
    return make_error("timing JSON: key '{}' is missing; the file is incomplete or was not written by canopy",
                      path);
}

Error wrong_type(const std::string& path, std::string_view expected, const json& found)
{
    return make_error("timing JSON: key '{}' must be {} but is {}; the file was not written by this canopy "
                      "version or was edited",
                      path, expected, found.type_name());
}

Result<const json*> member(const json& object, std::string_view parent, std::string_view key)
{
    const auto it = object.find(key);
    if (it == object.end())
        return missing(key_path(parent, key));
    return &*it;
}

Status read_string(const json& object, std::string_view parent, std::string_view key, std::string& out)
{
    auto value = member(object, parent, key);
    if (!value)
        return value.error();
    if (!(*value)->is_string())
        return wrong_type(key_path(parent, key), "a string", **value);
    out = (*value)->get<std::string>();
    return {};
}

Status read_number(const json& object, std::string_view parent, std::string_view key, double& out)
{
    auto value = member(object, parent, key);
    if (!value)
        return value.error();
    if (!(*value)->is_number())
        return wrong_type(key_path(parent, key), "a number", **value);
    out = (*value)->get<double>();
    return {};
}

template <typename Integer>
Status read_integer(const json& object, std::string_view parent, std::string_view key, Integer& out)
{
    auto value = member(object, parent, key);
    if (!value)
        return value.error();
    const json& v = **value;
    const std::string path = key_path(parent, key);
    if (!v.is_number_integer())
        return wrong_type(path, "an integer", v);
    bool fits = false;
    if (v.is_number_unsigned()) {
        const auto u = v.get<std::uint64_t>();
        fits = u <= static_cast<std::uint64_t>(std::numeric_limits<Integer>::max());
    } else {
        const auto s = v.get<std::int64_t>();
        fits = std::cmp_greater_equal(s, std::numeric_limits<Integer>::min()) &&
               std::cmp_less_equal(s, std::numeric_limits<Integer>::max());
    }
    if (!fits)
        return make_error("timing JSON: key '{}' is {}, outside the allowed range {}..{}", path, v.dump(),
                          std::numeric_limits<Integer>::min(), std::numeric_limits<Integer>::max());
    out = v.get<Integer>();
    return {};
}

Result<const json*> read_array(const json& object, std::string_view parent, std::string_view key)
{
    auto value = member(object, parent, key);
    if (!value)
        return value.error();
    if (!(*value)->is_array())
        return wrong_type(key_path(parent, key), "an array", **value);
    return *value;
}

// A phase's "slowest" list: at most top_k entries, in the order canopy writes them (largest first, ties by who).
Status read_slowest(const json& object, const std::string& path, std::uint64_t top_k, SketchData& data)
{
    auto slowest = read_array(object, path, "slowest");
    if (!slowest)
        return slowest.error();
    const std::string list_path = key_path(path, "slowest");
    if ((*slowest)->size() > top_k)
        return make_error("timing JSON: key '{}' has {} entries but top_k is {}", list_path, (*slowest)->size(),
                          top_k);
    for (std::size_t i = 0; i < (*slowest)->size(); ++i) {
        const json& item = (**slowest)[i];
        const std::string entry_path = fmt::format("{}[{}]", list_path, i);
        if (!item.is_object())
            return wrong_type(entry_path, "an object", item);
        TopEntry entry;
        if (auto s = read_number(item, entry_path, "value", entry.value); !s)
            return s.error();
        if (auto s = read_string(item, entry_path, "who", entry.who); !s)
            return s.error();
        if (!data.top.empty() && ranks_before(entry, data.top.back()))
            return make_error("timing JSON: key '{}' is out of order: the list goes from the largest value down",
                              entry_path);
        data.top.push_back(std::move(entry));
    }
    data.top_k = top_k;
    return {};
}

Result<Sketch> read_phase(const json& object, const std::string& path, std::optional<std::uint64_t> top_k,
                          std::string& name)
{
    SketchData data;
    if (!object.is_object())
        return wrong_type(path, "an object", object);
    if (auto s = read_string(object, path, "name", name); !s)
        return s.error();
    if (auto s = read_integer(object, path, "count", data.count); !s)
        return s.error();
    if (auto s = read_number(object, path, "sum", data.sum); !s)
        return s.error();
    if (auto s = read_number(object, path, "min", data.min); !s)
        return s.error();
    if (auto s = read_string(object, path, "min_who", data.min_who); !s)
        return s.error();
    if (auto s = read_number(object, path, "max", data.max); !s)
        return s.error();
    if (auto s = read_string(object, path, "max_who", data.max_who); !s)
        return s.error();
    if (top_k)
        if (auto s = read_slowest(object, path, *top_k, data); !s)
            return s.error();

    auto sketch = member(object, path, "sketch");
    if (!sketch)
        return sketch.error();
    const json& state = **sketch;
    const std::string state_path = key_path(path, "sketch");
    if (!state.is_object())
        return wrong_type(state_path, "an object", state);
    double accuracy = 0;
    if (auto s = read_number(state, state_path, "relative_accuracy", accuracy); !s)
        return s.error();
    // Bucket keys only mean something for the accuracy they were computed with.
    if (std::fabs(accuracy - sketch_relative_accuracy) > 1e-12)
        return make_error("timing JSON: key '{}' is {} but this canopy reads only {}; use the canopy version "
                          "that wrote the file",
                          key_path(state_path, "relative_accuracy"), accuracy, sketch_relative_accuracy);
    if (auto s = read_integer(state, state_path, "zero_count", data.zero_count); !s)
        return s.error();
    auto buckets = read_array(state, state_path, "buckets");
    if (!buckets)
        return buckets.error();
    std::uint64_t total = data.zero_count;
    std::int32_t previous = 0;
    for (std::size_t i = 0; i < (*buckets)->size(); ++i) {
        const json& pair = (**buckets)[i];
        const std::string bucket_path = fmt::format("{}.buckets[{}]", state_path, i);
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() ||
            !pair[1].is_number_unsigned())
            return make_error("timing JSON: key '{}' must be a [key, count] pair of integers with count >= 0",
                              bucket_path);
        const auto key = pair[0].get<std::int64_t>();
        if (key < std::numeric_limits<std::int32_t>::min() || key > std::numeric_limits<std::int32_t>::max())
            return make_error("timing JSON: key '{}' has bucket key {}, outside the 32-bit range", bucket_path,
                              key);
        if (i > 0 && key <= previous)
            return make_error("timing JSON: key '{}' is not sorted by bucket key", bucket_path);
        previous = static_cast<std::int32_t>(key);
        const auto n = pair[1].get<std::uint64_t>();
        data.buckets.emplace_back(previous, n);
        total += n;
    }
    if (total != data.count)
        return make_error("timing JSON: key '{}' is {} but the sketch holds {} values; the file was edited "
                          "or corrupted",
                          key_path(path, "count"), data.count, total);
    return Sketch::from_data(std::move(data));
}

} // namespace

std::string format_seconds(double seconds)
{
    if (!std::isfinite(seconds))
        return "-";
    if (seconds == 0.0)
        return "0 ms";
    const double magnitude = std::fabs(seconds);
    if (magnitude >= 10.0)
        return fmt::format("{:.1f} s", seconds);
    const double ms = seconds * 1000.0;
    const double ms_magnitude = magnitude * 1000.0;
    if (ms_magnitude >= 100.0)
        return fmt::format("{:.0f} ms", ms);
    if (ms_magnitude >= 10.0)
        return fmt::format("{:.1f} ms", ms);
    if (ms_magnitude >= 1.0)
        return fmt::format("{:.2f} ms", ms);
    return fmt::format("{:.3f} ms", ms);
}

std::string format_report(const JobTiming& timing)
{
    std::string out;
    append_line(out, fmt::format("canopy job {}: {} nodes, {} ranks, fanout {}, depth {}, agent {}, wall {}, "
                                 "exit {}",
                                 timing.job_id, timing.nodes, timing.ranks, timing.fanout, timing.tree_depth,
                                 timing.agent.empty() ? "-" : timing.agent, format_seconds(timing.wall_seconds),
                                 timing.exit_code));
    append_line(out, fmt::format("  started {}  command: {}", timing.started_at.empty() ? "-" : timing.started_at,
                                 timing.command));
    // Whole, on as many lines as it takes: the line that says why the job failed is not to be cut short.
    if (timing.failure) {
        std::string_view rest = timing.failure->line;
        for (std::string_view lead = "  failed: "; !rest.empty(); lead = "          ") {
            std::size_t room = max_columns - lead.size();
            std::size_t cut = rest.size() <= room ? rest.size() : rest.rfind(' ', room);
            if (cut == std::string_view::npos || cut == 0)
                cut = std::min(room, rest.size());
            append_line(out, fmt::format("{}{}", lead, rest.substr(0, cut)));
            rest.remove_prefix(cut);
            while (!rest.empty() && rest.front() == ' ')
                rest.remove_prefix(1);
        }
    }
    out += '\n';
    format_timeline(out, timing.timeline);
    format_startup(out, timing);
    out += '\n';
    const auto ordered = ordered_phases(timing.phases);
    format_phases(out, ordered);
    format_slowest(out, timing, ordered);
    return out;
}

namespace {

json startup_json(const StartupWindow& window)
{
    json gaps = json::array();
    for (const auto& gap : window.gaps)
        gaps.push_back({{"begin", gap.begin}, {"end", gap.end}, {"after", gap.after}, {"before", gap.before}});
    return {{"end", window.end_name},
            {"end_seconds", window.end},
            {"unattributed_seconds", window.unattributed},
            {"unattributed_share", window.share()},
            {"gaps", std::move(gaps)}};
}

} // namespace

json to_json(const JobTiming& timing)
{
    json timeline = json::array();
    for (const auto& stamp : timing.timeline)
        timeline.push_back({{"name", stamp.name}, {"seconds", stamp.seconds}});

    json phases = json::array();
    for (const auto& [name, sketch] : timing.phases.phases()) {
        json buckets = json::array();
        const SketchData data = sketch.data();
        for (const auto& [key, n] : data.buckets)
            buckets.push_back({key, n});
        json slowest = json::array();
        for (const auto& entry : data.top)
            slowest.push_back({{"value", entry.value}, {"who", entry.who}});
        phases.push_back({
            {"name", name},
            {"count", sketch.count()},
            {"sum", sketch.sum()},
            {"mean", sketch.mean()},
            {"min", sketch.min()},
            {"min_who", sketch.min_who()},
            {"median", sketch.median()},
            {"p90", sketch.quantile(0.9)},
            {"p99", sketch.quantile(0.99)},
            {"max", sketch.max()},
            {"max_who", sketch.max_who()},
            {"slowest", std::move(slowest)},
            {"sketch",
             {{"relative_accuracy", sketch_relative_accuracy},
              {"zero_threshold", sketch_zero_threshold},
              {"zero_count", data.zero_count},
              {"buckets", std::move(buckets)}}},
        });
    }

    json document{
        {"schema", timing_schema},
        {"job_id", timing.job_id},
        {"command", timing.command},
        {"started_at", timing.started_at},
        {"nodes", timing.nodes},
        {"ranks", timing.ranks},
        {"fanout", timing.fanout},
        {"tree_depth", timing.tree_depth},
        {"agent", timing.agent},
        {"wall_seconds", timing.wall_seconds},
        {"exit_code", timing.exit_code},
        {"timeline", std::move(timeline)},
        {"phases", std::move(phases)},
        {"top_k", timing.phases.top_k()},
        {"startup", startup_json(startup_window(timing))},
    };
    if (!timing.top_recorded) {
        document.erase("top_k");
        for (auto& phase : document["phases"])
            phase.erase("slowest");
    }
    if (timing.failure)
        document["failure"] = {{"line", timing.failure->line}, {"traceback", timing.failure->traceback}};
    return document;
}

Result<JobTiming> from_json(const json& document)
{
    try {
        if (!document.is_object())
            return wrong_type("(top level)", "an object", document);
        std::string schema;
        if (auto s = read_string(document, "", "schema", schema); !s)
            return s.error();
        if (schema != timing_schema)
            return make_error("timing JSON: key 'schema' is '{}' but this canopy reads '{}'; use the canopy "
                              "version that wrote the file",
                              fit(schema, 40), timing_schema);

        JobTiming timing;
        for (auto [key, field] : {std::pair{"job_id", &timing.job_id}, std::pair{"command", &timing.command},
                                  std::pair{"started_at", &timing.started_at}, std::pair{"agent", &timing.agent}})
            if (auto s = read_string(document, "", key, *field); !s)
                return s.error();
        for (auto [key, field] : {std::pair{"nodes", &timing.nodes}, std::pair{"ranks", &timing.ranks},
                                  std::pair{"fanout", &timing.fanout}, std::pair{"tree_depth", &timing.tree_depth}})
            if (auto s = read_integer(document, "", key, *field); !s)
                return s.error();
        if (auto s = read_number(document, "", "wall_seconds", timing.wall_seconds); !s)
            return s.error();
        if (auto s = read_integer(document, "", "exit_code", timing.exit_code); !s)
            return s.error();

        // Only a failed job has one, and files from before it have none.
        if (document.contains("failure")) {
            const json& recorded = document.at("failure");
            if (!recorded.is_object())
                return wrong_type("failure", "an object", recorded);
            JobTiming::Failure failure;
            if (auto s = read_string(recorded, "failure", "line", failure.line); !s)
                return s.error();
            if (auto s = read_string(recorded, "failure", "traceback", failure.traceback); !s)
                return s.error();
            timing.failure = std::move(failure);
        }

        auto timeline = read_array(document, "", "timeline");
        if (!timeline)
            return timeline.error();
        for (std::size_t i = 0; i < (*timeline)->size(); ++i) {
            const json& entry = (**timeline)[i];
            const std::string path = fmt::format("timeline[{}]", i);
            if (!entry.is_object())
                return wrong_type(path, "an object", entry);
            Stamp stamp;
            if (auto s = read_string(entry, path, "name", stamp.name); !s)
                return s.error();
            if (auto s = read_number(entry, path, "seconds", stamp.seconds); !s)
                return s.error();
            timing.timeline.push_back(std::move(stamp));
        }

        // Files from before the top-k lists have neither top_k nor the phases' slowest lists.
        std::optional<std::uint64_t> top_k;
        if (document.contains("top_k")) {
            top_k.emplace();
            if (auto s = read_integer(document, "", "top_k", *top_k); !s)
                return s.error();
            if (*top_k > max_top_k)
                return make_error("timing JSON: key 'top_k' is {}, more than the {} canopy keeps", *top_k,
                                  max_top_k);
            timing.phases.set_top_k(*top_k);
        }
        timing.top_recorded = top_k.has_value();

        auto phases = read_array(document, "", "phases");
        if (!phases)
            return phases.error();
        for (std::size_t i = 0; i < (*phases)->size(); ++i) {
            const std::string path = fmt::format("phases[{}]", i);
            std::string name;
            auto sketch = read_phase((**phases)[i], path, top_k, name);
            if (!sketch)
                return sketch.error();
            if (timing.phases.find(name) != nullptr)
                return make_error("timing JSON: key '{}.name' repeats phase '{}'; each phase may appear once",
                                  path, fit(name, 40));
            timing.phases.merge_phase(name, *sketch);
        }
        return timing;
    } catch (const std::exception& e) {
        return make_error("timing JSON: cannot read the document: {}", e.what());
    }
}

Result<JobTiming> parse_timing_json(std::string_view text, std::string_view origin)
{
    auto document = json::parse(text, nullptr, false);
    if (document.is_discarded())
        return make_error("{} is not JSON; expected a file written by canopy --timing=FILE.json", origin);
    auto timing = from_json(document);
    if (!timing)
        return make_error("{}: {}", origin, timing.error().message);
    return timing;
}

} // namespace canopy::timing
