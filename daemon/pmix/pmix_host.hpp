// canopyd as a PMIx server host: registers the job and its local ranks, and answers PMIx's requests through the tree.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <spdlog/fwd.h>

#include "collective/job_exchange.hpp"
#include "pmix/cleanup_registrations.hpp"
#include "pmix/client_env.hpp"
#include "pmix/job_info.hpp"
#include "pmix/namespaces.hpp"
#include "util/result.hpp"
#include "wire/messages.hpp"
#include "wire/routed.hpp"

namespace canopy {

using Bytes = std::vector<std::uint8_t>;

// What the daemon provides besides the job's exchange (collective/job_exchange.hpp, which carries PMIx's fences,
// connects and name service). Each function is called on the io_context thread and must call `done` exactly once,
// later (it may be called from inside the function, but never on PMIx's thread).
struct PmixDaemonCalls {
    // The blob for one rank, fetched from the daemon that hosts it (it calls PmixHost::serve_direct_modex there).
    std::function<void(long rank, std::function<void(Status, Bytes)> done)> direct_modex;
    // A rank asked to end the job (PMIx_Abort), or a rank that had connected to PMIx exited without
    // PMIx_Finalize (status is then its exit code, or 128+signal). `message` is one line for the user that names
    // the rank and its node. The daemon must tear the job down: PMIx 4.2.2
    // would otherwise keep the surviving local ranks waiting in any fence the lost rank never joined.
    std::function<void(long rank, int status, std::string message)> abort;
    // Optional: PMIx_Spawn. The root places and starts the namespace; every node learns it (the daemon calls
    // PmixHost::add_namespace) before `done` gets the root's answer here. When empty, spawn is not supported.
    std::function<void(wire::SpawnRequest request, std::function<void(Status, wire::SpawnReply)> done)> spawn;
    // Optional: PMIx_Log's PMIX_LOG_STDOUT or PMIX_LOG_STDERR text from a rank, printed as its output (whole
    // lines). When empty, PMIx_Log to those channels answers "not supported".
    std::function<void(long rank, bool to_stderr, std::string text)> rank_output;
    // Optional: an error the job survives, one line for the user that names the node (a rank PMIx would not
    // register: it fails by itself if it uses PMIx). When empty, the host logs it.
    std::function<void(const std::string& message)> report_error;
    // Optional: the job's limit on what a rank stores (collective/store_limit.hpp). `keep`: `rank` now keeps `bytes`
    // under `key` (its last commit, a published value); false once that takes it past the limit, which has ended
    // the job: the data is refused. `drop`: it keeps nothing there any more. `within_limit`: whether `ranks` of this
    // node may send `bytes` at once through `how` (the node's blob for a fence, one rank's publish request), at most
    // the limit for each; false has ended the job too.
    std::function<bool(long rank, const std::string& key, std::uint64_t bytes, std::string_view how)> keep;
    std::function<void(long rank, const std::string& key)> drop;
    std::function<bool(const std::vector<long>& ranks, std::uint64_t bytes, std::string_view how)> within_limit;
};

// One node's PMIx server. The implementation lives in canopyd-pmix.so (see pmix_module.hpp), which alone links
// libpmix, so canopyd calls it only through this interface.
class PmixHost {
public:
    // Answers what is still pending with an error, deregisters the nspace and calls PMIx_server_finalize (bounded
    // to 20 s). After an abnormal end (an abort, or ranks that never finalized) it skips the PMIx teardown, which
    // crashes in PMIx 4.2.2 once clients were killed inside a fence: the process must exit soon after.
    virtual ~PmixHost() = default;

    // Ranks are tree ranks (hosts/tree_ranks.hpp): the job's, then those of namespaces spawned into it.

    // A namespace spawned into the job: registers it with this node's server (with its ranks here, if any), so
    // connects, fences and direct modex across namespaces work here. Call before preparing its ranks.
    virtual Status add_namespace(PmixNamespace ns) = 0;

    // Register a local rank and return the environment additions ("NAME=value") for its exec: what
    // PMIx_server_setup_fork produces plus the settings in docs/pmix.md (Open MPI joins the job, gds=hash).
    // Registration does not wait for PMIx (server_lifecycle.hpp says why the rank is known in time); a failure
    // PMIx reports later goes to calls.report_error.
    virtual Result<std::vector<std::string>> prepare_rank(long rank, uid_t uid, gid_t gid) = 0;
    // Register a local rank that runs already (the server started on demand), in the same way.
    virtual Status register_rank(long rank, uid_t uid, gid_t gid) = 0;

    // The server's own address, "tcp4://A:P", where the relay connects.
    virtual const std::string& server_uri() const = 0;

    // On the daemon hosting `rank`: this node's PMIx blob for that rank, once the rank has committed it.
    virtual void serve_direct_modex(long rank, std::function<void(Status, Bytes)> done) = 0;

    // The daemon reaped a local rank. A rank that connected and did not finalize is lost: pending fences that
    // include it fail, the other local ranks get a PMIX_ERR_PROC_TERM_WO_SYNC event, and calls.abort is called.
    virtual void rank_exited(long rank, int wait_status) = 0;

    // The job's ranks restart (--max-restarts): every old rank has exited, and the next attempt's ranks are the job's
    // under the namespace `nspace` (hosts/namespace_names.hpp's attempt_nspace), registered with PMIx now. What the
    // old ranks left pending is answered; nothing of theirs is found under the new name.
    virtual Status restart_job(const std::string& nspace) = 0;

    // Fences, lookups and other requests waiting on the tree right now (for tests and status lines).
    virtual std::size_t pending_requests() const = 0;

    // How a job-control request starts, and the cleanups a relayed one registers (cleanup_registrations.hpp): both
    // need libpmix's packing.
    virtual std::string job_control_prefix() const = 0;
    // How a PMIx_Commit and a PMIx_Publish request start: the relay checks each against the job's limit
    // (pmix_commands.hpp).
    virtual std::string commit_prefix() const = 0;
    virtual std::string publish_prefix() const = 0;
    virtual std::vector<CleanupRegistration> registered_cleanups(std::string_view message) const = 0;
};

// PMIx_server_init + PMIx_server_register_nspace. Only one host may exist per process (PMIx's server state is
// global); a second start fails. Sets SIGPIPE to ignored if it was at its default: libpmix writes to client
// sockets that may have just closed.
// `exchange` must outlive the host.
Result<std::unique_ptr<PmixHost>> start_pmix_host(boost::asio::io_context& io, PmixJob job, JobExchange& exchange,
                                                  PmixDaemonCalls calls);

// True once a host skipped PMIx_server_finalize after an abnormal end. PMIx's progress thread then still runs:
// leave with std::_Exit after flushing, rather than running static destructors under it.
bool pmix_server_abandoned();

// Logs through `log` instead of this copy's own "pmix" area logger (canopyd-pmix.so gets canopyd's).
void use_pmix_logger(spdlog::logger* log);

} // namespace canopy
