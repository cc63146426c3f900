// The host's work on the daemon's io thread: PMIx's requests (posted by upcalls.cpp as C++ values) go to the
// tree and wait in the pending table until their answer goes back to PMIx; lost ranks fail what waits on them and
// end the job.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "pmix/job_info.hpp"
#include "pmix/pending_requests.hpp"
#include "pmix/pmix_answers.hpp"
#include "pmix/pmix_host.hpp"
#include "pmix/rank_tracker.hpp"
#include "util/live_link.hpp"

namespace canopy {

class RequestRouter;
using RouterLink = LiveLink<RequestRouter>;

// Ranks here are tree ranks (Namespaces translates PMIx's procs).

// A fence as PMIx asked for it.
struct FenceCall {
    std::vector<long> participants;
    bool whole_job = false;   // the job's namespace with PMIX_RANK_WILDCARD was among the procs
    bool collect = false;     // PMIX_COLLECT_DATA
    int local_status = 0;     // PMIX_LOCAL_COLLECTIVE_STATUS: an error when a local participant died
    int timeout_s = 0;        // PMIX_TIMEOUT; 0 waits for ever
    Bytes local;              // this node's blob
};

// A connect or disconnect as PMIx asked for it: the procs taking part, of the job and namespaces it spawned.
struct ConnectCall {
    std::vector<long> participants;
    bool whole_job = false;   // the job's namespace with PMIX_RANK_WILDCARD was among the procs
    int timeout_s = 0;        // PMIX_TIMEOUT; 0 waits for ever
    int local_status = 0;     // PMIX_LOCAL_COLLECTIVE_STATUS: an error when a local participant died
};

class RequestRouter : public std::enable_shared_from_this<RequestRouter> {
public:
    RequestRouter(boost::asio::io_context& io, PmixJob job, RankLayout layout, JobExchange& exchange,
                  PmixDaemonCalls calls);

    // Upcalls, on the io thread.
    void client_connected(long rank, const OpAnswer& answer);
    void client_finalized(long rank, const OpAnswer& answer);
    void abort(long rank, int status, const std::string& message, const OpAnswer& answer);
    void fence(FenceCall call, ModexAnswer answer);
    void direct_modex(long rank, int timeout_s, ModexAnswer answer);
    // PMIx_Spawn from `parent` (a tree rank).
    void spawn(wire::SpawnRequest request, SpawnAnswer answer);
    // A namespace spawned into the job, as this node registers it.
    Status add_namespace(PmixNamespace ns);
    // PMIx_Query_info: each query's keys.
    void query(std::vector<std::vector<std::string>> keys, InfoAnswer answer);
    // PMIx_Connect and PMIx_Disconnect (`what` says which, for the log).
    void connect(ConnectCall call, OpAnswer answer, const char* what);
    // PMIx_Publish and PMIx_Unpublish by `rank`, a tree rank.
    void publish(long rank, std::vector<std::pair<std::string, Bytes>> data, OpAnswer answer);
    // wait_for > 0: answer once that many of the keys are published (PMIX_WAIT), or at the timeout.
    void lookup(std::vector<std::string> keys, std::size_t wait_for, int timeout_s, LookupAnswer answer);
    void unpublish(long rank, std::vector<std::string> keys, OpAnswer answer);

    // Answers pending request `id`, if it still waits (PMIx's own answers: a rank's data for a direct modex).
    void complete(std::uint64_t id, int status, Bytes bytes) { pending_.complete(id, status, std::move(bytes)); }

    // The daemon's calls (PmixHost), on the io thread.
    void serve_direct_modex(long rank, std::function<void(Status, Bytes)> done);
    void rank_exited(long rank, int wait_status);
    // An error the job survives (a rank that PMIx would not register): one line for the user.
    void report_error(const std::string& message);

    // Answers what is still pending with PMIX_ERR_UNREACH; work that comes later finds the router closed.
    void close();
    // The job's ranks restart (--max-restarts) under the job namespace `nspace`: what the old ranks left pending is
    // answered with PMIX_ERR_UNREACH, their history is forgotten, and PMIx registers the new namespace (`registered`
    // hears how that went). The old namespace stays registered: PMIx 4.2.2 cannot forget one whose clients were
    // killed inside a fence, and nothing names it any more.
    Status next_attempt(const std::string& nspace, std::function<void(pmix_status_t)> registered);
    bool is_open() const { return !closed_; }

    // Thread-safe: the upcalls record connects, finalizes and aborts on PMIx's thread as they happen.
    RankTracker& ranks() { return ranks_; }
    // Thread-safe: the job's namespace as it is named now (a restart renames it).
    std::string nspace() const { return namespaces_.job_nspace(); }
    const std::string& node() const { return node_; }
    // Thread-safe: the upcalls translate procs to tree ranks on PMIx's thread.
    const Namespaces& namespaces() const { return namespaces_; }
    bool is_local(long rank) const { return namespaces_.is_local(rank); }
    const PmixDaemonCalls& calls() const { return calls_; }
    std::size_t pending_requests() const { return pending_.size(); }
    RouterLink link() { return RouterLink(io_, weak_from_this()); }

private:
    // The tree's answer for pending request `id`, whenever and however often it comes.
    std::function<void(Status, Bytes)> tree_reply(std::uint64_t id, const char* what);
    void report_lost(const RankTracker::Loss& loss);
    void report_abort(long rank, int status, const std::string& message);
    void release_held_contributions();
    void notify_local_peers(long rank, int code);
    // Sends this node's part of collective `id` through `send`, whose reply completes it; after a local
    // participant died (`local_status`), holds it back until the loss is reported and answers the ranks here.
    void contribute(std::uint64_t id, int local_status, const char* what,
                    std::function<void(std::function<void(Status, Bytes)>)> send);
    // The participants as the tree takes them: empty for the whole job, else sorted tree ranks.
    std::vector<long> tree_participants(std::vector<long> participants, bool whole_job) const;
    // Those of this node among `participants` (as tree_participants gives them).
    std::vector<long> local_participants(const std::vector<long>& participants) const;

    boost::asio::io_context& io_;
    PmixJob job_;   // its nspace as named now (next_attempt)
    const RankLayout layout_;
    JobExchange& exchange_;
    const PmixDaemonCalls calls_;
    const std::string node_;
    Namespaces namespaces_;
    RankTracker ranks_;
    bool closed_ = false;
    PendingRequests pending_;
    // Fence contributions held back after a local participant died, until its loss is reported.
    std::vector<std::function<void()>> held_contributions_;
};

} // namespace canopy
