// The state machines of a node's rank spawner (daemon/rank_spawner.hpp): the spawner's own phase, each rank's
// lifecycle, and rank 0's stdin, with the moves each allows listed once.
#pragma once

#include <array>
#include <string_view>

#include "util/transitions.hpp"

namespace canopy {

// Whether every rank of this node is known to have started (exec'd, or failed to): all_started is reported once.
enum class SpawnerPhase {
    idle,          // nothing asked yet
    forking,       // spawn() or reject() is creating ranks: all_started must wait for the batch's end
    starting,      // every rank is forked; some exec reports have not come yet
    all_started,   // reported; ranks a later batch adds are not waited for again
};

inline constexpr std::array<Transition<SpawnerPhase>, 6> spawner_transitions{{
    {SpawnerPhase::idle, SpawnerPhase::forking},
    {SpawnerPhase::idle, SpawnerPhase::all_started},   // start_none: a node without ranks
    {SpawnerPhase::forking, SpawnerPhase::starting},
    {SpawnerPhase::starting, SpawnerPhase::forking},   // another batch before the first has all started
    {SpawnerPhase::starting, SpawnerPhase::all_started},
    {SpawnerPhase::all_started, SpawnerPhase::idle},   // next_attempt: the job's ranks restart (--max-restarts)
}};

// One rank, from its record's making to the report of its end.
enum class RankPhase {
    planned,       // no process yet
    forked,        // its exec report has not come yet
    start_known,   // exec'd, or failed to (its start_failure says which); not reaped
    reaped,        // exited; what is left in its pipes is still read
    finished,      // its exit or failure to start has been reported
};

inline constexpr std::array<Transition<RankPhase>, 6> rank_transitions{{
    {RankPhase::planned, RankPhase::forked},
    // Its pipes could not be made, it could not be forked, or it was rejected: there is no process.
    {RankPhase::planned, RankPhase::start_known},
    {RankPhase::forked, RankPhase::start_known},
    {RankPhase::start_known, RankPhase::reaped},
    {RankPhase::start_known, RankPhase::finished},   // no process: nothing to reap or drain
    {RankPhase::reaped, RankPhase::finished},        // and its pipes are closed
}};

// Rank 0's stdin, fed from the launcher's (launcher/stdin_forwarder.hpp).
enum class StdinState {
    open,          // what comes is queued and written
    ending,        // close_stdin: what is queued is written, then the pipe is closed
    ended,         // we closed the pipe
    rank_closed,   // the rank closed its end: what is queued and what comes is dropped, and said so
};

inline constexpr std::array<Transition<StdinState>, 4> stdin_transitions{{
    {StdinState::open, StdinState::ending},
    {StdinState::open, StdinState::rank_closed},
    {StdinState::ending, StdinState::ended},
    {StdinState::ending, StdinState::rank_closed},
}};

constexpr bool may_move(SpawnerPhase from, SpawnerPhase to) { return allows(spawner_transitions, from, to); }
constexpr bool may_move(RankPhase from, RankPhase to) { return allows(rank_transitions, from, to); }
constexpr bool may_move(StdinState from, StdinState to) { return allows(stdin_transitions, from, to); }

constexpr std::string_view state_name(SpawnerPhase phase)
{
    switch (phase) {
    case SpawnerPhase::idle: return "idle";
    case SpawnerPhase::forking: return "forking";
    case SpawnerPhase::starting: return "starting";
    case SpawnerPhase::all_started: return "all started";
    }
    return "unknown";
}

constexpr std::string_view state_name(RankPhase phase)
{
    switch (phase) {
    case RankPhase::planned: return "planned";
    case RankPhase::forked: return "forked";
    case RankPhase::start_known: return "start known";
    case RankPhase::reaped: return "reaped";
    case RankPhase::finished: return "finished";
    }
    return "unknown";
}

constexpr std::string_view state_name(StdinState state)
{
    switch (state) {
    case StdinState::open: return "open";
    case StdinState::ending: return "ending";
    case StdinState::ended: return "ended";
    case StdinState::rank_closed: return "closed by the rank";
    }
    return "unknown";
}

} // namespace canopy
