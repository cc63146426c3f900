// A node's PMIx service for its ranks: the relay that holds their address until a server is needed (on demand),
// the module that hosts the server, and the exits seen before it ran. Registered with the daemon as a rank
// service, so the daemon holds none of its state.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "pmix/job_info.hpp"
#include "pmix/namespaces.hpp"
#include "pmix/pmix_host.hpp"
#include "pmix/pmix_relay.hpp"
#include "rank_service.hpp"
#include "util/pmix_mode.hpp"

namespace canopy {

class PmixNode : public RankService {
public:
    struct Hooks {
        // One line naming the node, for the launcher (the job goes on: ranks that need PMIx fail by themselves).
        std::function<void(const std::string& message)> report_error;
        // The server is up: daemon.pmix_ready in the timing report.
        std::function<void()> ready;
        // The job is ending here: no server starts any more.
        std::function<bool()> ending;
        // A path a rank registered for cleanup, for the node guard to remove should canopyd die; false if the
        // guard cannot take it.
        std::function<bool(const std::string& path)> watch_cleanup;
    };

    // Eager: starts the server now. On demand: listens on `relay_address` and starts it when a rank connects.
    // Null after reporting why neither could be done.
    static std::unique_ptr<PmixNode> start(boost::asio::io_context& io, PmixMode mode, PmixJob job,
                                           JobExchange& exchange, PmixDaemonCalls calls,
                                           const std::string& relay_address, Hooks hooks);
    ~PmixNode() override;

    // The rank's PMIx environment (PMIX_SERVER_URI*, PMIX_NAMESPACE, ...), as defaults under the user's settings.
    Status prepare_rank(RankLaunch& launch) override;
    void rank_exited(long rank, int wait_status) override;
    // Another node asks for one of this node's ranks' data: the server starts for it if need be.
    void serve_requests(RoutedServices& services) override;
    void stop() override;
    // The job's ranks restart under a namespace of the attempt's own, in the running server too.
    Status next_attempt(long attempt) override;

    // A namespace spawned into the job (the root's namespace-start): the server learns it now, or when it starts.
    Status namespace_started(const wire::NamespaceStart& start) override;

private:
    PmixNode(boost::asio::io_context& io, PmixJob job, JobExchange& exchange, PmixDaemonCalls calls, Hooks hooks);
    bool start_server();
    // On demand: the running server's own address, starting it (and registering the running ranks) first.
    Result<std::string> server_uri();
    std::string node() const;
    // A rank's job-control request passed the relay: the guard learns the paths it registers for cleanup.
    void cleanups_registered(std::string_view message);
    // A rank's PMIx_Commit (or else PMIx_Publish) of `bytes` is about to pass the relay: whether it is within the
    // job's limit.
    bool within_limit(const connect_ack::Client& client, bool commit, std::size_t bytes);
    // Removes the POSIX shared-memory probes of Open MPI ranks killed in MPI_Init (proc/abandoned_segments.hpp).
    void sweep_abandoned_probes() const;

    boost::asio::io_context& io_;
    PmixJob job_;
    const std::string first_nspace_;   // the job's namespace in its first attempt (job_'s then)
    Namespaces namespaces_;   // the job's and those spawned into it, for the ranks' environment
    JobExchange& exchange_;
    PmixDaemonCalls calls_;
    Hooks hooks_;
    std::unique_ptr<PmixHost> host_;
    std::unique_ptr<PmixRelay> relay_;   // on demand: the ranks' PMIx address until a server runs
    std::string server_uri_;             // set once the on-demand server runs
    bool start_failed_ = false;          // one attempt, one error line
    bool guard_full_reported_ = false;
    std::map<long, int> exits_before_server_;   // rank -> wait status, reaped before the server started
    // Files Open MPI makes on this node from now on may be its ranks' (proc/abandoned_segments.hpp).
    std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
};

} // namespace canopy
