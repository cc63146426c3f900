// Shared-memory files an MPI makes and unlinks itself, which a rank killed in between leaves, registered nowhere:
// - MPICH's segments (/dev/shm/mpich_shar_tmp*): MPI_Init creates them and unlinks them once every rank of the node
//   has attached. The PMI server sweeps them when the node's ranks are gone.
// - Open MPI's probe of POSIX shared memory (/dev/shm/open_mpi.NNNN): MPI_Init's shmem component makes one and
//   unlinks it at once (its segments proper are registered with PMIx for cleanup). The PMIx service sweeps them
//   after ranks that used PMIx ended abnormally.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace canopy {

// Where MPICH's MPL makes its segments: /dev/shm, or /tmp when that fails (mkstemp templates fixed in MPL).
inline constexpr std::string_view mpich_segment_prefix = "mpich_shar_tmp";
inline const std::vector<std::string> mpich_segment_directories = {"/dev/shm", "/tmp"};
inline constexpr std::string_view open_mpi_probe_prefix = "open_mpi.";
inline constexpr std::string_view open_mpi_probe_directory = "/dev/shm";

// Removes the files in `directory` whose names start with `prefix`, that belong to this user, were made at or
// after `since`, and that no process has open or mapped (read from /proc). Returns the paths removed. A file
// still in use belongs to a job that is alive, possibly another node's on a shared machine: it stays.
std::vector<std::string> remove_abandoned_segments(const std::string& directory, std::string_view prefix,
                                                   std::chrono::system_clock::time_point since);

} // namespace canopy
