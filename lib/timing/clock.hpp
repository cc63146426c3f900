// Wall-clock stamps and NTP-style offset estimation, so times from different nodes share the root's clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace canopy::timing {

// CLOCK_REALTIME in ns since the Unix epoch (clocks of different nodes are aligned by offsets).
std::int64_t now_ns();

// "2024-05-01T12:00:00.123Z": ISO-8601 UTC with milliseconds, as in the timing report's started_at.
std::string format_utc(std::int64_t unix_ns);

// One ping: child sent (child clock), parent received, parent replied (parent clock), child received.
struct ClockSample {
    std::int64_t t0, t1, t2, t3;
};

// parent_clock = child_clock + offset_ns. The estimate is off by at most round_trip_ns / 2.
struct ClockOffset {
    std::int64_t offset_ns = 0;
    std::int64_t round_trip_ns = 0;
};

// Uses the sample with the smallest round trip (least queueing, so the least asymmetric delay).
// Samples with a negative round trip or parent processing time are ignored; with none left the
// result is {0, 0}.
ClockOffset estimate_offset(const std::vector<ClockSample>& samples);

} // namespace canopy::timing
