// The per-phase startup timing report: a table for the terminal and a JSON document for tools.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "timing/sketch.hpp"
#include "util/result.hpp"

namespace canopy::timing {

inline constexpr const char* timing_schema = "canopy.timing/1";

// A launcher timeline entry, in seconds since the launcher started.
struct Stamp {
    std::string name;
    double seconds = 0;
};

struct JobTiming {
    std::string job_id, command, started_at; // started_at: ISO-8601 UTC with milliseconds
    long nodes = 0, ranks = 0, fanout = 0, tree_depth = 0;
    std::string agent;
    double wall_seconds = 0;
    int exit_code = 0;
    std::vector<Stamp> timeline; // e.g. start, hosts_resolved, tree_up, job_delivered,
                                 // ranks_spawned, ranks_exited, teardown_done
    PhaseSet phases;             // e.g. daemon.started, daemon.connected, daemon.job_received,
                                 // rank.spawned, rank.exited (seconds since launcher start)
                                 // and rank.runtime (a duration)
    struct Failure {
        std::string line;        // the job's failure line, as canopy printed it
        std::string traceback;   // the failed rank's Python traceback, when torch's @record wrote one
    };
    std::optional<Failure> failure;
    // --max-restarts: each attempt that a rank's failure ended and the job restarted, in order (seconds since the
    // launcher started). Empty when the job never restarted.
    struct Restart {
        std::string ended_by;            // the failure line that ended the attempt
        int exit_code = 0;               // what that failure would have made the job's exit code
        double attempt_running_at = 0;   // every rank of the attempt had started
        double failed_at = 0;            // the rank failed
        double running_again_at = -1;    // every rank of the next attempt had started; -1: they never all did

        // From the failure to every rank running again: what a restart costs.
        double restart_seconds() const { return running_again_at < 0 ? -1 : running_again_at - failed_at; }
        // The attempt's run, redone by the next one unless the job checkpoints, and the restart after it.
        double lost_seconds() const { return running_again_at < 0 ? -1 : running_again_at - attempt_running_at; }
    };
    std::vector<Restart> restarts;
    // Whether the phases carry their top-k lists (phases.top_k() of each): a file from a canopy before them has none.
    bool top_recorded = true;
};

// "12.3 ms", "0.045 ms", "9876 ms", "12.3 s": milliseconds below 10 s, seconds above.
std::string format_seconds(double seconds);

// Plain-text table for a terminal, at most 100 columns, ending in a newline.
std::string format_report(const JobTiming& timing);

// Two runs side by side: every launcher step, and each phase's median, p99 and max of `before` and `after`, with
// the change; the phase whose median moved most is flagged.
std::string format_comparison(const JobTiming& before, const JobTiming& after, std::string_view before_name,
                              std::string_view after_name);

// {"schema": "canopy.timing/1", ...}; see docs/timing-json.md. Also carries what the report derives (the start-up
// window), which a reader ignores.
nlohmann::json to_json(const JobTiming& timing);
// For `canopy report FILE`; an error names the offending key, e.g. "phases[2].sketch.buckets".
Result<JobTiming> from_json(const nlohmann::json& document);
// A saved report's text: JSON, then from_json. Errors start with `origin` (the file's name).
Result<JobTiming> parse_timing_json(std::string_view text, std::string_view origin);

} // namespace canopy::timing
