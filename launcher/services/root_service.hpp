// A service the root runs for the whole job (the job store, spawn, ...): the root keeps its services in one list,
// so a new one is registered with the root rather than wired into it.
#pragma once

#include <string>

#include "collective/routed_services.hpp"
#include "timing/sketch.hpp"

namespace canopy {

// What a root service may ask of the root: the few ways a service acts on the job as a whole.
class RootControl {
public:
    // A point on the job's timeline ("stage_sent").
    virtual void stamp(const std::string& name) = 0;
    // Ends the job with `exit_code`, after one line saying why (no "canopy: " prefix, no newline).
    virtual void fail(int exit_code, const std::string& line) = 0;
    // One of canopy's own lines on stderr, on a line of its own (with its "canopy: " and newline).
    virtual void print_line(std::string line) = 0;
    // The job's output cannot be written any more: the job ends with `exit_code`; one already ending keeps its own
    // failure's code, but a success does not stand.
    virtual void output_lost(int exit_code) = 0;
    // Removes `path` even if the launcher is killed (`what` names it in a line if that cannot be promised).
    virtual void watch_path(const std::string& path, const char* what) = 0;

protected:
    ~RootControl() = default;
};

class RootService {
public:
    virtual ~RootService() = default;
    // Registers the routed requests the service answers at the root (wire/routed.hpp).
    virtual void serve_requests(RoutedServices& /*services*/) {}
    // The children are starting: the service starts its own work (before any other thread runs, a service that
    // forks does so here).
    virtual void start() {}
    // Every daemon has joined the tree.
    virtual void tree_up() {}
    // canopy is about to print a line of its own on stderr: a status line the service keeps there (a progress bar)
    // clears itself first.
    virtual void before_own_line() {}
    // The job is ending: whatever waits is answered with `why`, and the service's timers stop.
    virtual void stop(const std::string& /*why*/) {}
    // The job's ranks restart (--max-restarts): every old rank is gone, and the next attempt's are about to start.
    // The service forgets what the old ranks left with it (the job store's keys, the published names).
    virtual void next_attempt() {}
    // The io loop has ended: the service joins its threads and leaves nothing behind.
    virtual void after_run() {}
    // Adds the service's counters to the job's timing report.
    virtual void record(timing::PhaseSet& /*phases*/) const {}
};

} // namespace canopy
