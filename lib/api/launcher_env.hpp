// Which launcher other than canopy started this process, told from that launcher's environment variables alone:
// torchrun, Open MPI's mpirun, MPICH's Hydra, PALS or Slurm's srun. No I/O: unit-tested with made-up environments.
#pragma once

#include <functional>
#include <optional>

#include "api/api_error.hpp"
#include "api/rank_info.hpp"

namespace canopy::api {

// The value of an environment variable; null when it is unset or empty.
using EnvLookup = std::function<const char*(const char*)>;

struct ForeignLaunch {
    int mode = CANOPY_MODE_NONE;  // CANOPY_MODE_TORCHRUN, ...
    // node_rank and num_nodes are -1 where the launcher does not say; node_name is left empty.
    RankInfo info;
    // The PMIx server in the environment belongs to this launcher's job, so exchange may go through it.
    bool own_pmix = false;
};

// The launcher whose variables are set, the innermost first (torchrun may run under srun, not the other way);
// nothing if none is. A Error when its variables contradict each other.
Result<std::optional<ForeignLaunch>> find_foreign_launcher(const EnvLookup& env);

// For a process no launcher claims: a Error when a world size larger than one is set all the same, since
// such a process must not call itself a singleton.
Status check_no_world(const EnvLookup& env);

// A CANOPY_MODE_*'s name ("torchrun", "open-mpi", ...); null past the last.
const char* mode_name(int mode);

} // namespace canopy::api
