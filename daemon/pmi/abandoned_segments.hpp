// MPICH's shared-memory files (/dev/shm/mpich_shar_tmp*): MPI_Init creates them and unlinks them once every rank
// of the node has attached. Ranks that die in between leave them, and MPICH registers them nowhere (unlike Open
// MPI's PMIx cleanup registrations), so the PMI server sweeps them when the node's ranks are gone.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace canopy {

// Where MPICH's MPL makes its segments: /dev/shm, or /tmp when that fails (mkstemp templates fixed in MPL).
inline constexpr std::string_view mpich_segment_prefix = "mpich_shar_tmp";
inline const std::vector<std::string> mpich_segment_directories = {"/dev/shm", "/tmp"};

// Removes the files in `directory` whose names start with `prefix`, that belong to this user, were made at or
// after `since`, and that no process has open or mapped (read from /proc). Returns the paths removed. A file
// still in use belongs to a job that is alive, possibly another node's on a shared machine: it stays.
std::vector<std::string> remove_abandoned_segments(const std::string& directory, std::string_view prefix,
                                                   std::chrono::system_clock::time_point since);

} // namespace canopy
