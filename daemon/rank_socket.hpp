// The node's socket for its ranks' libcanopy (CANOPY_AGENT_SOCKET): phase marks into the node's timing, and store
// requests through the node's cache to the root's job store. A rank service of the daemon.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

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
        std::function<void(Bytes request, Done done)> to_root;
    };
    // How long the job's end waits for the ranks' last marks: a rank's orphaned child could hold its
    // connection open for ever.
    static constexpr std::chrono::milliseconds drain_limit{200};

    // Listens on `path` (in the node's 0700 temp dir). Null, after a warning naming the node, if it cannot.
    static std::unique_ptr<RankSocket> start(boost::asio::io_context& io, const std::string& path,
                                             const std::string& node, Hooks hooks);

    Status prepare_rank(RankLaunch& launch) override;
    void rank_exited(long, int) override {}
    // The root invalidating a key this node may cache.
    bool serve_request(long from, wire::RoutedOp op, Bytes payload, Done reply) override;
    bool drained(std::function<void()> wake) override;
    void record(timing::PhaseSet& phases, const std::string& node) override;
    void stop() override;

private:
    RankSocket(boost::asio::io_context& io, Hooks hooks);

    boost::asio::io_context& io_;
    Hooks hooks_;
    std::unique_ptr<StoreCache> store_cache_;
    std::unique_ptr<AppServer> server_;
    std::function<void()> wake_;   // the job's end, waiting until the connections close
    std::unique_ptr<boost::asio::steady_timer> drain_timer_;
    bool drain_expired_ = false;
};

} // namespace canopy
