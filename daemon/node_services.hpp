// The services a node runs for its ranks (daemon/rank_service.hpp): which the job asks for, each made with what it
// needs from the tree and the daemon, its routed requests registered, kept in one list.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "collective/store_limit.hpp"
#include "pmix/pmix_host.hpp"
#include "position/tree_position.hpp"
#include "proc/node_temp_dir.hpp"
#include "rank_service.hpp"
#include "timing/sketch.hpp"
#include "wire/messages.hpp"

namespace canopy {

// What the node's services need from their daemon: its reports up the tree, its timing and its guard.
class NodeControl {
public:
    virtual void report_error(const std::string& node, const std::string& message) = 0;
    // A rank asked to end the job, or broke off from its PMI server: `message` names it.
    virtual void report_abort(long rank, int exit_code, const std::string& message) = 0;
    // The node cannot run ranks: the root ends the job, and this node starts none.
    virtual void fail_setup(const std::string& message) = 0;
    virtual bool setup_failed() const = 0;
    virtual void send_up(std::vector<std::uint8_t> frame, bool urgent = false) = 0;
    // A daemon phase, and one --trace event (rank -1: the node's track).
    virtual void node_phase(const std::string& name, double seconds) = 0;
    virtual void trace(std::int64_t rank, std::string name, double end, double duration) = 0;
    virtual double since_launch(std::int64_t local_ns) const = 0;
    virtual std::string rank_label(long rank) const = 0;
    // Has the node's guard remove what is about to be made, however the daemon ends.
    virtual NodeTempDir::BeforeCreate watch_for_guard() = 0;
    virtual bool watch_path(const std::string& path) = 0;
    // The daemon's one reaper, for a service that starts a process of its own.
    virtual ProcessReaper& reaper() = 0;
    // Seconds this node's clock is ahead of its parent's (0 when they share a clock).
    virtual double parent_clock_offset() const = 0;

protected:
    ~NodeControl() = default;
};

class NodeServices {
public:
    NodeServices(boost::asio::io_context& io, const wire::LaunchPlan& plan, long position, std::string node,
                 NodeTempDir& tmpdir, TreePosition& tree, StoreLimit& store_limit, timing::PhaseSet& phases,
                 NodeControl& control);

    // Starts what the job asks for, in order: the health check, the stage node, simple PMI, PMIx, synthetic ranks,
    // the rank socket.
    void start();
    std::vector<std::unique_ptr<RankService>>& all() { return services_; }

private:
    // Keeps a service, with the routed requests it answers registered.
    void add_rank_service(std::unique_ptr<RankService> service);
    // --health-check: the node's checks, and the ranks held until every node's verdict is in.
    void start_health_check();
    void start_stage_node();
    // The simple PMI server (PMI-1, PMI-2) and the PMIx server, as the job asks.
    void start_pmi_servers();
    void start_simple_pmi_server();
    // --synthetic-ranks: the node's ranks driven in-process through the exchange.
    void start_synthetic_ranks();
    // The ranks' socket for libcanopy: marks, and the store through the node's cache.
    void start_rank_socket();
    // What the PMIx server asks of the daemon besides the job's exchange: direct modex, spawn, aborts, output, limits.
    PmixDaemonCalls pmix_daemon_calls();
    // A rank's PMIx blob, fetched from the node hosting it (RoutedOp::direct_modex).
    void fetch_direct_modex(long rank, std::function<void(Status, Bytes)> done);
    // The job's limit on what a rank stores, as the services count against it; empty functions when there is none.
    std::function<bool(long rank, const std::string& key, std::uint64_t bytes, std::string_view how)> keep_in_limit();
    std::function<void(long rank, const std::string& key)> drop_from_limit();

    boost::asio::io_context& io_;
    const wire::LaunchPlan& plan_;
    long position_number_;
    std::string node_;
    NodeTempDir& tmpdir_;
    TreePosition& position_;
    StoreLimit& store_limit_;
    timing::PhaseSet& phases_;
    NodeControl& control_;
    std::vector<std::unique_ptr<RankService>> services_;
};

} // namespace canopy
