// The report's derived views: phase order, the start-up window with its unattributed gaps, the phase that changed.
#include "timing/analysis.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace canopy::timing {
namespace {

// Gaps below this are rounding, not time anyone could win back.
constexpr double smallest_gap = 1e-6;

// The launcher's steps after the ranks started are the job's run and teardown, not start-up.
bool after_startup(std::string_view step)
{
    return step == "ranks_exited" || step == "teardown_done";
}

double end_of(const JobTiming& timing, std::string& name)
{
    if (const Sketch* first_step = timing.phases.find(first_step_phase); first_step && first_step->count() > 0) {
        name = first_step_phase;
        return first_step->mean();
    }
    for (const auto& stamp : timing.timeline)
        if (stamp.name == "ranks_spawned") {
            name = stamp.name;
            return stamp.seconds;
        }
    name = "wall";
    return timing.wall_seconds;
}

std::vector<Span> launcher_steps(const JobTiming& timing)
{
    std::vector<Stamp> stamps = timing.timeline;
    std::stable_sort(stamps.begin(), stamps.end(), [](const Stamp& a, const Stamp& b) { return a.seconds < b.seconds; });
    std::vector<Span> steps;
    double previous = 0;
    for (const auto& stamp : stamps) {
        if (after_startup(stamp.name))
            break;
        steps.push_back({stamp.name, previous, stamp.seconds});
        previous = stamp.seconds;
        if (stamp.name == "ranks_spawned")
            break;
    }
    return steps;
}

std::vector<Span> application_phases(const PhaseSet& phases)
{
    constexpr std::string_view suffix = ".duration";
    std::vector<Span> spans;
    for (const auto& [name, duration] : phases.phases()) {
        if (!name.starts_with("app.") || !name.ends_with(suffix) || duration.count() == 0)
            continue;
        const std::string mark = name.substr(0, name.size() - suffix.size());
        const Sketch* ended = phases.find(mark);
        if (ended == nullptr || ended->count() == 0)
            continue;
        spans.push_back({mark, ended->mean() - duration.mean(), ended->mean()});
    }
    return spans;
}

} // namespace

PhaseKind phase_kind(std::string_view name)
{
    if (name.ends_with("_messages") || name.ends_with("_kib") || name.ends_with("_percent"))
        return PhaseKind::count;
    if (name.ends_with(".duration") || name.ends_with(".runtime"))
        return PhaseKind::duration;
    return PhaseKind::point;
}

std::vector<const NamedSketch*> ordered_phases(const PhaseSet& phases)
{
    // Each key computed once, not once per comparison: a report may hold 10^5 phases.
    struct Key {
        PhaseKind kind;
        double median;
        const NamedSketch* phase;
    };
    std::vector<Key> keys;
    keys.reserve(phases.phases().size());
    for (const auto& phase : phases.phases())
        keys.push_back({phase_kind(phase.first), phase.second.median(), &phase});
    std::stable_sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
        if (a.kind != b.kind)
            return a.kind < b.kind;
        return a.kind == PhaseKind::point ? a.median < b.median : a.phase->first < b.phase->first;
    });
    std::vector<const NamedSketch*> ordered;
    ordered.reserve(keys.size());
    for (const auto& key : keys)
        ordered.push_back(key.phase);
    return ordered;
}

StartupWindow startup_window(const JobTiming& timing)
{
    StartupWindow window;
    window.end = std::max(0.0, end_of(timing, window.end_name));
    std::vector<Span> spans = launcher_steps(timing);
    for (auto& span : application_phases(timing.phases))
        spans.push_back(std::move(span));
    for (auto& span : spans) {
        span.begin = std::clamp(span.begin, 0.0, window.end);
        span.end = std::clamp(span.end, 0.0, window.end);
        if (span.end > span.begin)
            window.covered.push_back(std::move(span));
    }
    std::stable_sort(window.covered.begin(), window.covered.end(),
                     [](const Span& a, const Span& b) { return a.begin < b.begin; });

    // One sweep: `reached` is how far the covered spans seen so far reach, `last` the one that reaches there.
    double reached = 0;
    std::string last = "start";
    auto gap_until = [&](double until, const std::string& next) {
        if (until - reached > smallest_gap) {
            window.gaps.push_back({reached, until, last, next});
            window.unattributed += until - reached;
        }
    };
    for (const auto& span : window.covered) {
        gap_until(span.begin, span.name);
        if (span.end > reached) {
            reached = span.end;
            last = span.name;
        }
    }
    gap_until(window.end, window.end_name);
    return window;
}

std::string describe_end(const StartupWindow& window)
{
    if (window.first_step_marked())
        return fmt::format("{} (mean over ranks)", first_step_phase);
    if (window.end_name == "ranks_spawned")
        return fmt::format("ranks_spawned (no {} mark: the last rank's start)", first_step_phase);
    return fmt::format("the end of the job (no {} mark, no ranks_spawned step)", first_step_phase);
}

std::optional<PhaseChange> changed_most(const PhaseSet& before, const PhaseSet& after)
{
    std::optional<PhaseChange> most;
    for (const auto& [name, sketch] : before.phases()) {
        const Sketch* other = after.find(name);
        if (other == nullptr || sketch.count() == 0 || other->count() == 0 || phase_kind(name) == PhaseKind::count)
            continue;
        PhaseChange change{name, sketch.median(), other->median()};
        if (!most || std::fabs(change.after - change.before) > std::fabs(most->after - most->before))
            most = std::move(change);
    }
    return most;
}

} // namespace canopy::timing
