// What the reports derive from a job's timing: the order phases are shown in, the start-up window and the time in it
// that no step or phase accounts for, and the phase that changed most between two runs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "timing/report.hpp"

namespace canopy::timing {

// The application's documented mark for its first step (libcanopy `canopy_mark("first_step")`,
// `canopy.phase("first_step")`, or `--mark-on-output REGEX=first_step`): where start-up ends.
inline constexpr std::string_view first_step_phase = "app.first_step";

// A phase is a point in time since the launcher started (daemon.connected, app.NAME), a duration (rank.runtime,
// app.NAME.duration) or a count (..._messages; sizes ..._kib and ratios ..._percent read the same way).
enum class PhaseKind { point, duration, count };
PhaseKind phase_kind(std::string_view name);

using NamedSketch = std::pair<std::string, Sketch>;

// Points in time first, in the order they happened (by median), so a report reads as the job's start-up story
// from daemons to the application's own marks; then durations and counts, each by name.
std::vector<const NamedSketch*> ordered_phases(const PhaseSet& phases);

// A stretch of the start-up, in seconds since the launcher started.
struct Span {
    std::string name;
    double begin = 0, end = 0;
};

// A stretch no launcher step or application phase covers, between the two it falls between.
struct Gap {
    double begin = 0, end = 0;
    std::string after, before;   // "start" and the end's name at the edges
};

// From the launcher's start to the application's first step (the mean over ranks of app.first_step), or when the
// application marks none, to the last rank's start (ranks_spawned), or failing that the end of the job. Covered:
// the launcher's steps up to ranks_spawned, and every application phase that has a duration, from its mean start
// (mean end minus mean duration: means are exact, so this is exactly the average rank's phase) to its mean end.
struct StartupWindow {
    std::string end_name;            // "app.first_step", "ranks_spawned" or "wall"
    double end = 0;
    std::vector<Span> covered;       // clipped to [0, end], in time order
    std::vector<Gap> gaps;           // in time order
    double unattributed = 0;         // seconds: the gaps' total
    double share() const { return end > 0 ? unattributed / end : 0.0; }
    bool first_step_marked() const { return end_name == first_step_phase; }
};
StartupWindow startup_window(const JobTiming& timing);

// What the start-up's end is, for a reader: "app.first_step (mean over ranks)", "ranks_spawned (no app.first_step
// mark: the last rank's start)".
std::string describe_end(const StartupWindow& window);

// The phase whose median moved most between two runs, among the times (not counts) both runs have.
struct PhaseChange {
    std::string name;
    double before = 0, after = 0;   // medians
};
std::optional<PhaseChange> changed_most(const PhaseSet& before, const PhaseSet& after);

} // namespace canopy::timing
