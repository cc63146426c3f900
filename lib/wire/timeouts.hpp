// The tree's timeouts that a launch plan carries, and the range the config and every daemon accept, in seconds.
#pragma once

namespace canopy::wire {

// How long a parent waits for a child daemon it started to join, and the child for its parent to let it in.
inline constexpr double default_connect_timeout = 30;
// The heartbeat timeout's range: the config refuses anything outside it, and so does a daemon's plan.
inline constexpr double min_heartbeat_timeout = 0.5;
inline constexpr double max_heartbeat_timeout = 86400;

} // namespace canopy::wire
