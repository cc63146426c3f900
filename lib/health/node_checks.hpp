// --health-check's built-in checks (docs/health-check.md): what a node is measured on, read from the kernel, and
// the judgement, kept apart so that the rules are tested on any numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wire/health_check.hpp"

namespace canopy {

struct NodeFacts {
    std::string temp_dir;                             // the node temp dir, where the free space is measured
    std::optional<std::uint64_t> free_disk;           // bytes an unprivileged user may still write there
    std::optional<std::uint64_t> available_memory;    // MemAvailable
    double clock_offset = 0;                          // seconds between this node's clock and its parent's
    std::optional<long> gpus;                         // counted only when the spec expects some
    std::vector<std::string> unmeasured;              // what could not be measured, and why: each makes the node bad
};

// Measures what `spec` asks about: writes and removes a small file in `temp_dir` (a full or read-only disk fails
// there), reads its free space and the node's available memory, and counts the GPUs when `spec.gpus` is set.
NodeFacts measure_node(const wire::HealthCheckSpec& spec, const std::string& temp_dir, double clock_offset);

// Why the node is bad, every reason joined by "; " ("only 0.3 GiB free in /tmp/canopy-... (at least 1.0 GiB
// needed)"), or "" when it is healthy.
std::string judge_node(const wire::HealthCheckSpec& spec, const NodeFacts& facts);

} // namespace canopy
