// The per-phase startup timing report as a terminal table: the launcher timeline, the phases and the slowest.
#include "timing/report.hpp"

#include "timing/analysis.hpp"
#include "timing/report_lines.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace canopy::timing {
namespace {

struct Description {
    std::string_view name, text;
};

constexpr Description stamp_descriptions[] = {
    {"start", "launcher started"},
    {"hosts_resolved", "host list expanded and ranks placed"},
    {"tree_up", "every daemon connected and authenticated"},
    {"job_delivered", "every daemon received the job"},
    {"health_checked", "every node's health check passed (--health-check)"},
    {"stage_indexed", "stage index built (manifest validated, or prefixes walked)"},
    {"stage_sent", "launcher sent the last staged byte down the tree"},
    {"ranks_spawned", "every rank started"},
    {"ranks_exited", "every rank exited"},
    {"ranks_restarting", "a rank failed: every node told to stop its ranks (--max-restarts)"},
    {"ranks_stopped", "every node's ranks gone; the next attempt's start"},
    {"teardown_done", "daemons shut down"},
};

constexpr Description phase_descriptions[] = {
    {"daemon.started", "canopyd began running on its node"},
    {"daemon.connected", "daemon connected to its parent"},
    {"daemon.job_received", "daemon received the job description"},
    {"daemon.health_check", "daemon finished its node's health check (its ranks wait for every node's)"},
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

namespace {

// Whole, on as many lines as it takes, each after `lead` or as many spaces: a line that says why a job failed is not
// to be cut short.
void append_wrapped(std::string& out, std::string_view lead, std::string_view text)
{
    const std::string indent(lead.size(), ' ');
    std::string_view rest = text;
    for (std::string_view at = lead; !rest.empty(); at = indent) {
        std::size_t room = max_columns - at.size();
        std::size_t cut = rest.size() <= room ? rest.size() : rest.rfind(' ', room);
        if (cut == std::string_view::npos || cut == 0)
            cut = std::min(room, rest.size());
        append_line(out, fmt::format("{}{}", at, rest.substr(0, cut)));
        rest.remove_prefix(cut);
        while (!rest.empty() && rest.front() == ' ')
            rest.remove_prefix(1);
    }
}

// --max-restarts: one line for the attempts together, then what ended each and how soon every rank ran again.
void format_restarts(std::string& out, const std::vector<JobTiming::Restart>& restarts)
{
    if (restarts.empty())
        return;
    double lost = 0;
    for (const auto& restart : restarts)
        lost += std::max(0.0, restart.lost_seconds());
    append_line(out, fmt::format("  attempts: {} ({} restart{}), time lost to failures {}", restarts.size() + 1,
                                 restarts.size(), restarts.size() == 1 ? "" : "s", format_seconds(lost)));
    for (std::size_t i = 0; i < restarts.size(); ++i) {
        const auto& restart = restarts[i];
        std::string again = restart.running_again_at < 0
                                ? std::string("its ranks never all ran again")
                                : fmt::format("all ranks running again {} later", format_seconds(restart.restart_seconds()));
        append_wrapped(out, fmt::format("  attempt {} ended at {}: ", i + 1, format_seconds(restart.failed_at)),
                       fmt::format("{}; {}", restart.ended_by, again));
    }
}

} // namespace

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
    if (timing.failure)
        append_wrapped(out, "  failed: ", timing.failure->line);
    format_restarts(out, timing.restarts);
    out += '\n';
    format_timeline(out, timing.timeline);
    format_startup(out, timing);
    out += '\n';
    const auto ordered = ordered_phases(timing.phases);
    format_phases(out, ordered);
    format_slowest(out, timing, ordered);
    return out;
}

} // namespace canopy::timing
