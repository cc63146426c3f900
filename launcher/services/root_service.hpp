// A service the root runs for the whole job (the job store, spawn, ...): the root keeps its services in one list,
// so a new one is registered with the root rather than wired into it.
#pragma once

#include <string>

#include "collective/routed_services.hpp"
#include "timing/sketch.hpp"

namespace canopy {

class RootService {
public:
    virtual ~RootService() = default;
    // Registers the routed requests the service answers at the root (wire/routed.hpp).
    virtual void serve_requests(RoutedServices& services) = 0;
    // The job is ending: whatever waits is answered with `why`, and the service's timers stop.
    virtual void stop(const std::string& /*why*/) {}
    // Adds the service's counters to the job's timing report.
    virtual void record(timing::PhaseSet& /*phases*/) const {}
};

} // namespace canopy
