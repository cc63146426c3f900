// The PMIx server's life apart from what it serves: PMIx_server_init with canopy's settings, the job's and the
// ranks' registration, and the bounded teardown. PMIx keeps one server per process, so these are free functions.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include <pmix_server.h>

#include "pmix/job_info.hpp"
#include "util/result.hpp"

namespace canopy {

// Called on PMIx's progress thread with PMIx's status once a registration is done.
using Registered = std::function<void(pmix_status_t status)>;

// Registrations never wait. PMIx runs each on its progress thread, in the order they were made, and reads a new
// client's handshake on that same thread only once the connection was accepted, which is after the rank's exec
// (or, on demand, after the relay was given the address), which is after its registration was made: so PMIx knows
// the job and the rank before their first message, and the daemon's io thread never waits on PMIx. A
// registration that fails later reaches `done`.

// Sets PMIx's settings in the daemon's environment and SIGPIPE to ignored (libpmix writes to client sockets that
// may have just closed), calls PMIx_server_init with `upcalls` and registers the job. Returns the server's own
// address ("tcp4://A:P"); on failure PMIx is finalized again.
Result<std::string> start_server(const PmixJob& job, const RankLayout& layout, pmix_server_module_t* upcalls,
                                 Registered job_registered);

// PMIx_server_register_nspace for the job or a namespace spawned into it (node_index -1: no rank here).
Status register_namespace(const PmixJob& job, const RankLayout& layout, Registered done);

// PMIx_server_register_client.
Status register_rank(const PmixJob& job, long rank, uid_t uid, gid_t gid, Registered done);

// The environment additions for `rank`'s exec: PMIx_server_setup_fork's, then canopy's (docs/pmix.md).
// PMIx_server_setup_fork is synchronous but waits for nothing: it only reads PMIx's settings.
Result<std::vector<std::string>> rank_environment(const PmixJob& job, long rank);

// Deregisters `nspaces` (the job's, then those spawned into it), which runs the cleanups their ranks registered,
// and calls PMIx_server_finalize, waiting at most 20 s. After an abnormal end it skips the finalize: PMIx 4.2.2
// crashes in it once clients were killed inside a fence, and the process exits soon after anyway. Either way a
// skipped finalize marks the server abandoned.
void finalize_server(const std::vector<std::string>& nspaces, bool ended_abnormally);

} // namespace canopy
