// What a node's rank services ask of the whole job: its fences and its name service. TreeCollectives answers it at
// every tree position; a service's unit test answers it with a fake of a few nodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/result.hpp"
#include "wire/messages.hpp"
#include "wire/routed.hpp"

namespace canopy {

class JobExchange {
public:
    using Bytes = std::vector<std::uint8_t>;

    // This node's part of a fence in `domain` (participants: sorted ranks, or empty for the whole job). `done` gets
    // every participating node's bytes concatenated, or an error; `local_failed`: one of this node's participants
    // failed, so the fence fails everywhere.
    virtual void fence(std::vector<long> participants, Bytes local, std::function<void(Status, Bytes)> done,
                       wire::FenceDomain domain, bool local_failed) = 0;

    // The job's name service (PMIx_Publish, MPI_Publish_name): keys are unique job-wide; a lookup gets the entries
    // found (none is not an error), once at least `wait_for` of its keys are published when that is above 0.
    virtual void publish(wire::KeyValues entries, std::function<void(Status)> done) = 0;
    virtual void lookup(std::vector<std::string> keys, std::function<void(Status, wire::KeyValues)> done,
                        std::size_t wait_for) = 0;
    virtual void unpublish(std::vector<std::string> keys, std::function<void(Status)> done) = 0;

protected:
    ~JobExchange() = default;
};

} // namespace canopy
