// Fences and routed requests over the daemon tree, for one tree position (the launcher or a daemon).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collective/fence.hpp"
#include "collective/job_exchange.hpp"
#include "collective/routed_services.hpp"
#include "tree/topology.hpp"
#include "util/result.hpp"
#include "wire/codec.hpp"
#include "wire/messages.hpp"
#include "wire/routed.hpp"

namespace canopy {

using Bytes = std::vector<std::uint8_t>;
using KeyValues = wire::KeyValues;

// Every position runs one of these; it only ever talks to its parent and its children. A fence goes up as one
// message stream per child and comes down as one per child, so a daemon handles O(fanout) messages per fence
// whatever the job size. Blobs travel in chunks: the down-sweep forwards each chunk as soon as it arrives.
class TreeCollectives : public JobExchange {
public:
    using Done = std::function<void(Status, Bytes)>;

    struct Links {
        std::function<void(std::vector<std::uint8_t> frame)> to_parent;   // empty at the root
        std::function<void(long position, std::vector<std::uint8_t> frame)> to_child;
        // Large frames on their way down (a fence result or a reply of bulk_bytes or more): over the position's
        // bulk route, a fabric where there is one. Empty: to_child.
        std::function<void(const std::vector<long>& positions, std::vector<std::uint8_t> frame)> to_children_bulk;
    };

    static constexpr std::size_t chunk_bytes = 256 * 1024;
    // Smaller results and replies stay on the links: for them a fabric's per-message cost outweighs its bandwidth.
    static constexpr std::size_t bulk_bytes = 64 * 1024;

    // `where` names the position in errors ("the launcher", its host).
    TreeCollectives(Topology topology, std::vector<std::uint64_t> ranks_per_node, long position, Links links,
                    std::string where);

    // This node's part of a fence (participants: sorted ranks, or empty for the whole job). `done` gets every
    // participating node's blob concatenated, or an error if a participant failed: `local_failed` says one of
    // this node's did, and the fence then fails everywhere.
    void fence(std::vector<long> participants, Bytes local, Done done,
               wire::FenceDomain domain = wire::FenceDomain::pmix, bool local_failed = false) override;

    // At the root: `seen` gets the result of every fence in `domain` as it turns around (its status: 0, or a
    // participant failed), once it has gone down; `seen` may end the job. The root takes no part in fences: this is
    // how it reads one.
    void watch_results(wire::FenceDomain domain, std::function<void(std::int32_t status, const Bytes& result)> seen);

    // What this position serves: every component registers its own requests' handlers here.
    RoutedServices& services() { return services_; }

    // Sends a request (wire/routed.hpp) to the position `target`, or serves it here, and calls `reply` with the
    // answer or an error.
    template <typename Request>
    void request(long target, Request request, RoutedServices::Reply<Request> reply)
    {
        RoutedServices::call(std::move(request), std::move(reply), [this, target](wire::RoutedOp op, Bytes payload,
                                                                                 Done done) {
            send_request(target, op, std::move(payload), std::move(done));
        });
    }

    // The job's name service, kept at the root (PublishStore): PMIx_Publish, MPI_Publish_name and friends.
    // Keys are unique job-wide; a lookup gets the entries found, and none found is not an error. A lookup with
    // `wait_for` > 0 is answered once at least that many of its keys are published (PMIx's PMIX_WAIT).
    void publish(KeyValues entries, std::function<void(Status)> done) override;
    void lookup(std::vector<std::string> keys, std::function<void(Status, KeyValues)> done,
                std::size_t wait_for = 0) override;
    void unpublish(std::vector<std::string> keys, std::function<void(Status)> done) override;

    // Takes fence and routed frames from the parent (from = parent position) or a child; false if the frame is
    // not a collective, or is malformed (the caller logs it).
    bool handle(long from, const wire::Frame& frame);

    // Answers everything waiting here with an error: the job is ending.
    void fail_all(const std::string& why);

    // The job's ranks restart (--max-restarts) for attempt `attempt`, here as on every node, once no node has a rank
    // left: what waits for the old ranks is answered with `why`, and their fences are numbered afresh
    // (FenceTracker::forget_ranks_fences). Each node calls this as the restart barrier comes down, after every old
    // fence's result on the links.
    void forget_ranks_exchange(std::uint64_t attempt, const std::string& why);

    // The link to a child closed (it left, or was lost): requests sent into its subtree that are still
    // unanswered, and any later ones, fail with an error instead of waiting for ever.
    void child_lost(long child);

    // A namespace spawned into the job (PMIx_Spawn): its ranks become tree ranks from `first` on, at every position
    // in the same order.
    Status add_namespace(long first, std::vector<std::uint64_t> ranks_per_node)
    {
        return tracker_.add_namespace(first, std::move(ranks_per_node));
    }

    // The job's own ranks; tree ranks from here on belong to spawned namespaces.
    long job_size() const { return tracker_.job_size(); }

    // The tree position of the node hosting a tree rank, or -1 if there is no such rank.
    long position_of_rank(long rank) const
    {
        long node = tracker_.node_of_rank(rank);
        return node < 0 ? -1 : Topology::node_to_position(node);
    }

    std::size_t waiting() const { return fence_waiters_.size() + request_waiters_.size(); }
    // Collective frames this position received and sent: what a fence costs a daemon, for the timing report.
    std::uint64_t frames_received() const { return frames_received_; }
    std::uint64_t frames_sent() const { return frames_sent_; }

private:
    void send_request(long target, wire::RoutedOp op, Bytes payload, Done done);
    void subtree_complete(const FenceId& id, std::int32_t status, Bytes blob);
    void on_fence_down(const wire::FenceDown& chunk);
    void on_request(wire::RoutedRequest request);
    void on_reply(wire::RoutedReply reply);
    // Sends a frame to children, over the bulk route when `bulk`.
    void send_down(const std::vector<long>& children, std::vector<std::uint8_t> frame, bool bulk);
    // Sends toward a position one hop at a time; false when there is no way (a position outside the tree, or
    // behind a lost child). Returns the hop through `hop` when given.
    bool send_toward(long target, std::vector<std::uint8_t> frame, long* hop = nullptr);
    void reply_error(long to, std::uint64_t id, const std::string& why);
    // Answers `fences` (taken from the waiters) and every request waiting here with `why`.
    void fail_waiting(std::map<FenceId, Done> fences, const std::string& why);

    Topology topology_;
    FenceTracker tracker_;
    long position_;
    Links links_;
    RoutedServices services_;
    std::map<FenceId, std::int32_t> fence_status_;   // worst status seen so far for fences in progress
    std::map<FenceId, Done> fence_waiters_;          // fences this node takes part in locally
    std::map<FenceId, Bytes> fence_results_;         // down-sweep chunks gathered for a local waiter
    std::map<wire::FenceDomain, std::function<void(std::int32_t, const Bytes&)>> result_watchers_;   // at the root
    std::uint64_t next_request_id_ = 1;
    std::uint64_t frames_received_ = 0, frames_sent_ = 0;
    std::map<std::uint64_t, Done> request_waiters_;
    // Requests sent or passed down into a child's subtree and not answered yet, by (requester, id): what
    // child_lost answers.
    std::map<std::pair<long, std::uint64_t>, long> sent_down_;
    std::set<long> lost_children_;
};

} // namespace canopy
