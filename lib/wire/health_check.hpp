// --health-check (docs/health-check.md): what every node checks before any rank starts, and how a node's verdict
// travels. Every node enters one whole-job fence in the health domain with its verdict: nothing when it is healthy,
// a NodeHealth when it is not. The fence's result is those verdicts end to end, so an empty result lets every node
// start its ranks, and the root names each bad node from the same bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "wire/fields.hpp"

namespace canopy::wire {

struct HealthCheckSpec {
    bool enabled = false;
    std::string command;                // run by /bin/sh on every node; empty: the built-in checks only
    double command_timeout = 60;        // seconds before the command is killed and the node is bad
    std::uint64_t min_free_disk = std::uint64_t{1} << 30;     // bytes free where the node temp dir is
    std::uint64_t min_free_memory = std::uint64_t{1} << 30;   // bytes the kernel says are available
    double max_clock_offset = 1.0;      // seconds a node's clock may differ from its parent's
    std::uint64_t gpus = 0;             // GPUs every node must show; 0: those the job binds, if it binds any

    CANOPY_WIRE_FIELDS(enabled, command, command_timeout, min_free_disk, min_free_memory, max_clock_offset, gpus)
};

// One bad node's verdict: its name and one line saying why.
struct NodeHealth {
    std::string node;
    std::string reason;

    CANOPY_WIRE_FIELDS(node, reason)
};

// The verdicts in a health fence's result (each encoded with encode_fields, end to end).
inline Result<std::vector<NodeHealth>> decode_health_verdicts(std::span<const std::uint8_t> result)
{
    std::vector<NodeHealth> bad;
    Reader reader(result);
    while (reader.ok() && !reader.at_end()) {
        Decoding decoding(reader, "a node's health verdict");
        decoding(bad.emplace_back());
        if (decoding.error())
            return *decoding.error();
    }
    if (!reader.ok())
        return make_error("malformed health-check result ({} bytes)", result.size());
    return bad;
}

} // namespace canopy::wire
