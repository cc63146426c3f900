// --synthetic-ranks: a node's ranks replaced by in-process ones that go through the node's real exchange paths, and
// what the exchange cost the node (its fence's times, its peak memory over what it held before).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "collective/job_exchange.hpp"
#include "rank_service.hpp"
#include "synthetic/synthetic_exchange.hpp"
#include "util/lifetime.hpp"

namespace canopy {

class SyntheticPmiRank;

using Bytes = std::vector<std::uint8_t>;

struct SyntheticNode {
    long first_rank = 0;
    long local_size = 0;
    long world_size = 0;
    std::string name;
};

// What the ranks' PMIx paths use of the daemon besides the job's exchange (their fences): the calls the PMIx host
// makes (node_services.cpp, pmix_daemon_calls).
struct SyntheticTree {
    // Asks the node hosting `rank` for its data (RoutedOp::direct_modex).
    std::function<void(long rank, std::function<void(Status, Bytes)> done)> direct_modex;
    // The job must end: a synthetic rank read a wrong value, or its exchange failed. `message` names the rank.
    std::function<void(long rank, std::string message)> fail;
    // Seconds since the launch, on the root's clock.
    std::function<double()> now;
};

class SyntheticRanks : public RankService {
public:
    SyntheticRanks(boost::asio::io_context& io, synthetic::Spec spec, SyntheticNode node, JobExchange& exchange,
                   SyntheticTree tree);
    ~SyntheticRanks() override;

    // The PMI path: takes a dup of the PMI_FD the node's PmiServer made for the rank (registered after it).
    Status prepare_rank(RankLaunch& launch) override;
    // No process was started: the exchange begins.
    void ranks_started() override;
    void rank_exited(long, int) override {}
    // Direct modex: answers for this node's ranks, as PMIx_server_dmodex_request would.
    void serve_requests(RoutedServices& services) override;
    // The node is done once every synthetic rank has read and checked its peers' values.
    bool drained(std::function<void()> wake) override;
    void record(timing::PhaseSet& phases, const std::string& node) override;
    void stop() override;

private:
    void start_pmi_ranks();
    void start_pmix_allgather();
    void start_direct_modex();
    // The node's ranks enter a whole-job PMIx fence with `local`; `then` gets the result unless the fence failed,
    // which ends every rank here.
    void pmix_fence(Bytes local, std::function<void(Bytes result)> then);
    // Reads `peer`'s value for every local rank waiting on it, once it is here.
    void fetched(long peer, Status status, Bytes value);
    void final_fence();
    // A fence of the whole job in PMIx's domain, as the PMIx host makes it.
    void whole_job_fence(Bytes local, std::function<void(Status, Bytes)> done);
    void check(long reader, long peer, std::string_view value);
    void entered_fence();
    void left_fence();
    void rank_finished(long rank, Status status);
    void finish();
    std::string local_value(long rank) const;

    boost::asio::io_context& io_;
    synthetic::Spec spec_;
    SyntheticNode node_;
    JobExchange& exchange_;
    SyntheticTree tree_;
    std::map<long, int> pmi_fds_;   // the PMI path: each rank's end of its connection, until it starts
    std::vector<std::shared_ptr<SyntheticPmiRank>> pmi_ranks_;
    std::optional<synthetic::ValueIndex> result_;   // the PMIx allgather's result, as the node keeps it
    std::map<long, std::string> fetched_;           // direct modex: values fetched so far, by rank
    std::map<long, std::vector<long>> readers_;      // direct modex: local ranks waiting for a rank's value
    std::uint64_t fetches_ = 0;
    std::uint64_t result_bytes_ = 0;
    long ranks_left_ = 0;
    long in_fence_ = 0;
    bool failed_ = false, finished_ = false, stopped_ = false;
    bool issuing_ = false;   // direct modex: requests still being sent, so an early answer does not finish
    std::function<void()> wake_;
    // What the exchange cost, for record().
    std::uint64_t baseline_bytes_ = 0, peak_over_baseline_bytes_ = 0;
    double started_ = 0, fence_entered_ = 0, fence_done_ = 0, done_ = 0;
    Lifetime lifetime_;
};

} // namespace canopy
