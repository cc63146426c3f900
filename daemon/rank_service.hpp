// A service canopyd runs for its node's ranks (the simple PMI server, ...): the daemon keeps its services in one
// list and calls each in turn, so a new service is registered with the daemon rather than wired into it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collective/routed_services.hpp"
#include "rank_spawner.hpp"
#include "timing/sketch.hpp"
#include "util/result.hpp"
#include "wire/messages.hpp"
#include "wire/routed.hpp"

namespace canopy {

class RankService {
public:
    using Bytes = std::vector<std::uint8_t>;
    using Done = std::function<void(Status, Bytes)>;

    virtual ~RankService() = default;
    // Whether the node's ranks may start now; if not, the service calls `wake` once they may (the node cache
    // of a staged job is installed).
    virtual bool ready_for_ranks(std::function<void()> /*wake*/) { return true; }
    // A namespace spawned into the job (PMIx_Spawn), before any of its ranks start here; every node hears of it.
    virtual Status namespace_started(const wire::NamespaceStart& /*start*/) { return {}; }
    // Whether the service knows, without asking the filesystem, that `path` is a regular file this process may
    // execute (a staged job's index): the daemon then skips checking its ranks' program on a shared filesystem.
    virtual bool knows_executable(const std::string& /*path*/) const { return false; }
    // Adds what a rank about to start needs from the service (environment, inherited descriptors). Its rank is a
    // tree rank: the job's ranks, then those of spawned namespaces (hosts/tree_ranks.hpp).
    virtual Status prepare_rank(RankLaunch& launch) = 0;
    // A rank of the node has started, as process `pid`, the leader of a process group of its own.
    virtual void rank_spawned(long /*rank*/, pid_t /*pid*/) {}
    // Every rank of the node has been started (or failed to).
    virtual void ranks_started() {}
    virtual void rank_exited(long rank, int wait_status) = 0;
    // Registers the requests routed over the tree to this node that the service answers (wire/routed.hpp).
    virtual void serve_requests(RoutedServices& /*services*/) {}
    // Whether the service has taken in everything the node's ranks sent it, now that they have all exited;
    // if not, it calls `wake` once it has (or has waited long enough).
    virtual bool drained(std::function<void()> /*wake*/) { return true; }
    // Adds the service's counters to the node's timing report, as the node's subtree is done.
    virtual void record(timing::PhaseSet& /*phases*/, const std::string& /*node*/) {}
    // The job is ending on this node: stop serving, before the node's temp dir goes.
    virtual void stop() = 0;
    // The job's ranks restart (--max-restarts): every rank of every node has exited, and the ranks of attempt
    // `attempt` (1 for the first restart) are about to be prepared here. The service forgets the old ranks and
    // serves the new ones as fresh; an error (a state it cannot start over) ends the job instead.
    virtual Status next_attempt(long /*attempt*/) { return {}; }
};

} // namespace canopy
