// canopy's own exit codes: the endings that are not a rank's exit code (README, exit codes).
#pragma once

namespace canopy {

inline constexpr int exit_usage = 2;             // a bad option, file or input: nothing ran
inline constexpr int exit_timeout = 124;         // --timeout ended the job
inline constexpr int exit_infrastructure = 255;  // canopy itself failed: a daemon, a host, the launcher

} // namespace canopy
