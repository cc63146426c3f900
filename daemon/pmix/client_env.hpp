// What a rank needs to find its node's PMIx server, computed without libpmix: canopyd writes it before any server
// runs (PMIx on demand), and the server host uses the same pieces, so the two always agree.
#pragma once

#include <string>
#include <vector>

#include "pmix/job_info.hpp"

namespace canopy {

// The server's own PMIx identity ("<job nspace>.daemon"; its rank is the node index).
std::string pmix_server_nspace(const PmixJob& job);

// PMIx's rule for its system temp dir ($TMPDIR, $TEMP, $TMP, else /tmp), made explicit: the host passes it to
// PMIx_server_init, and on-demand environments write it before the server runs.
std::string pmix_system_tmpdir();

// A PMIx MCA setting from the daemon's environment, else canopy's choice (docs/pmix.md): gds=hash, psec=native.
std::string pmix_component(const char* variable, const char* fallback);

// The PMIx release canopyd was built against ("4.2.2rc2"), what PMIx_server_setup_fork puts in PMIX_VERSION.
std::string pmix_build_version();

// What canopy adds to a rank's PMIx environment beyond PMIx_server_setup_fork's (docs/pmix.md): gds=hash for the
// client too, and what makes Open MPI 4.1 use the PMIx server instead of running as a singleton.
std::vector<std::string> canopy_pmix_settings();

// The environment additions for a rank whose server will answer at `server_uri` ("tcp4://A:P") but need not run
// yet (a PmixRelay's address): what PmixHost::prepare_rank gives once it does, with that address.
// tests/integration/test_pmix.py holds the two to the same variables and values.
std::vector<std::string> pmix_rank_env(const PmixJob& job, long rank, const std::string& server_uri);
// The same for rank `rank` of a namespace spawned into the job (`nspace`), served by the job's server on this node.
std::vector<std::string> pmix_spawned_rank_env(const PmixJob& job, const std::string& nspace, long rank,
                                               const std::string& server_uri);

} // namespace canopy
