// The node's socket for its ranks' libcanopy (CANOPY_AGENT_SOCKET): phase marks into the node's timing, and store
// requests through the node's cache to the root's job store. A rank service of the daemon.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "app_server.hpp"
#include "rank_service.hpp"
#include "store_cache.hpp"

namespace canopy {

class RankSocket : public RankService {
public:
    struct Hooks {
        std::function<void(AppServer::Mark mark)> mark;
        // A store request for the root's job store; `done` gets its reply.
        std::function<void(wire::StoreRequest request, RoutedServices::Reply<wire::StoreRequest> done)> to_root;
        // The job's limit on what a rank stores (collective/store_limit.hpp), counting each rank's writes: `keep` is
        // false once one takes the rank past it, which has ended the job, and the write is refused. Unset: no limit.
        std::uint64_t store_limit = 0;
        std::function<bool(long rank, const std::string& key, std::uint64_t bytes, std::string_view how)> keep;
        std::function<void(long rank, const std::string& key)> drop;
    };
    // How long the job's end waits for the ranks' last marks: a rank's orphaned child could hold its
    // connection open for ever.
    static constexpr std::chrono::milliseconds drain_limit{200};

    // Listens on `path` (in the node's 0700 temp dir). Null, after a warning naming the node, if it cannot.
    static std::unique_ptr<RankSocket> start(boost::asio::io_context& io, const std::string& path,
                                             const std::string& node, Hooks hooks);

    Status prepare_rank(RankLaunch& launch) override;
    void rank_spawned(long rank, pid_t pid) override { rank_pids_[pid] = rank; }
    void rank_exited(long rank, int) override;
    // The root invalidating a key this node may cache.
    void serve_requests(RoutedServices& services) override;
    bool drained(std::function<void()> wake) override;
    void record(timing::PhaseSet& phases, const std::string& node) override;
    void stop() override;
    // The job's ranks restart: an empty store cache (the root's store is empty again) and no old rank known.
    Status next_attempt(long attempt) override;

    // The node's rank that process `pid` belongs to: the rank's own, one it started however deep (until it is
    // orphaned), or one still in its process group.
    std::optional<long> rank_of(pid_t pid) const;

private:
    RankSocket(boost::asio::io_context& io, Hooks hooks, std::string node);
    void make_store_cache();
    // A rank's store request: a write is counted against the limit of the rank it comes from, then it goes on.
    void store_request(pid_t peer, std::uint8_t op, Bytes payload, StoreCache::Reply reply);
    // A request too long to read: past the limit of the rank sending it, or else malformed.
    void oversized_request(pid_t peer, std::uint32_t length);

    boost::asio::io_context& io_;
    Hooks hooks_;
    std::string node_;
    std::map<pid_t, long> rank_pids_;   // the ranks started here that have not exited, by process
    std::unique_ptr<StoreCache> store_cache_;
    std::unique_ptr<AppServer> server_;
    std::function<void()> wake_;   // the job's end, waiting until the connections close
    std::unique_ptr<boost::asio::steady_timer> drain_timer_;
    bool drain_expired_ = false;
};

} // namespace canopy
