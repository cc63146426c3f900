// The environment each rank starts with: the job's base environment plus who the rank is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace canopy {

struct RankIdentity {
    long rank = 0, world_size = 1;
    long local_rank = 0, local_size = 1;
    long node_rank = 0, nodes = 1;
    long appnum = 0;   // which program of an MPMD job (0 for a job of one program)
    std::string node_name;
    std::string master_addr;
    std::uint32_t master_port = 0;
    std::string job_id;
    std::string node_tmpdir;
    long restart_count = 0, max_restarts = 0;   // --max-restarts: this attempt (0 first), and the most allowed
};

// Sets the variables training frameworks and MPI-era tools read (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// PALS_RANKID, CANOPY_*) over `base`, replacing any stale values it carries. Another launcher's per-task identity
// inherited in `base` never contradicts them: SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS,
// OMPI_COMM_WORLD_* and Hydra's MPI_LOCALRANKID are set to the rank's values where present; a Slurm step's own
// variables (SLURM_STEP_*, ...), simple PMI's (PMI_FD, PMI_RANK, ...) and PMIx's (PMIX_*, but not the PMIX_MCA_*
// settings) are dropped, for the node's own servers to set. Allocation-level variables (SLURM_JOB_ID) pass.
std::vector<std::string> rank_environment(const std::vector<std::string>& base, const RankIdentity& who);

// This process's own environment, as NAME=VALUE entries.
std::vector<std::string> own_environment();

// The value of NAME in a NAME=VALUE list, or empty.
std::string environment_value(const std::vector<std::string>& env, const std::string& name);

// Adds NAME=value unless NAME is set already: the user's settings win over canopy's defaults.
void add_environment_default(std::vector<std::string>& env, std::string setting);

// Sets NAME to VALUE, dropping every value the list carried for NAME (inherited from a launcher's own
// environment, for instance).
void set_environment_value(std::vector<std::string>& env, const std::string& name, const std::string& value);

// `base` with each NAME=VALUE of `settings` set over it: a program's environment (JobSpec's env, then the
// AppSpec's).
std::vector<std::string> environment_with(std::vector<std::string> base, const std::vector<std::string>& settings);

} // namespace canopy
