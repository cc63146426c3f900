// Where a node's bound ranks sit, for its PMIx server: PMIX_CPUSET and PMIX_LOCALITY_STRING per local rank.
#pragma once

#include <string>

#include "pmix/job_info.hpp"
#include "wire/messages.hpp"

namespace canopy {

// Fills job.local_cpusets and job.local_localities from the job's binding as this node plans it (the topology is
// read once per daemon, for this and for starting the ranks). A node that cannot bind leaves them empty: its ranks
// are refused with the reason when they start.
void add_rank_locality(PmixJob& job, const wire::BindingSpec& binding, const std::string& node);

} // namespace canopy
