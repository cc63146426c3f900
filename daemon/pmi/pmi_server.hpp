// One node's simple PMI server for MPICH-family MPIs: each rank speaks PMI-1 or PMI-2 over its own socketpair
// (PMI_FD), and barriers and kvs-fences run as fences over the daemon tree (docs/pmi.md). This is the socket layer;
// the protocol is PmiProtocolServer's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "collective/job_exchange.hpp"
#include "pmi/pmi_protocol_ops.hpp"
#include "pmi/pmi_protocol_server.hpp"
#include "rank_service.hpp"
#include "util/lifetime.hpp"
#include "util/result.hpp"

namespace canopy {

using Bytes = std::vector<std::uint8_t>;

// What the server needs from its node's daemon, besides the job's exchange (collective/job_exchange.hpp).
struct PmiNode {
    // The job must end: a rank called PMI_Abort, or broke off in a way that would leave its peers waiting in a
    // barrier for ever. `message` is the one line for the user, naming the rank and node.
    std::function<void(long rank, int exit_code, std::string message)> fail;
    // A rank reached a PMI milestone ("pmi_init", "pmi_finalize"), for the timing report.
    std::function<void(long rank, const std::string& what, std::int64_t time_ns)> mark;
    // Optional: the job's limit on what a rank stores (collective/store_limit.hpp). `keep`: `rank` now keeps `bytes`
    // under `key` (a put, a node attribute, a published name); false once that takes it past the limit, which has
    // ended the job: the data is refused. `drop`: it keeps nothing there any more.
    std::function<bool(long rank, const std::string& key, std::uint64_t bytes, std::string_view how)> keep;
    std::function<void(long rank, const std::string& key)> drop;
};

class PmiServer : public RankService, private PmiProtocolOps {
public:
    static constexpr std::size_t max_kvsname = PmiProtocolServer::max_kvsname;
    static constexpr std::size_t max_key = PmiProtocolServer::max_key, max_value = PmiProtocolServer::max_value;
    static constexpr std::size_t max_pending_puts = PmiProtocolServer::max_pending_puts;
    // How long a rank whose PMI connection closed early has to exit and be reported by its exit status instead.
    static constexpr std::chrono::milliseconds exit_grace{500};

    // Fences go through `exchange` in PMI's domain; service names share the job's name service with PMIx under a
    // prefix of their own.
    PmiServer(boost::asio::io_context& io, PmiJob job, JobExchange& exchange, PmiNode node);
    ~PmiServer() override;
    PmiServer(const PmiServer&) = delete;
    PmiServer& operator=(const PmiServer&) = delete;

    // Makes the rank's connection and adds PMI_FD, PMI_RANK, PMI_SIZE and the local rank variables to its
    // environment; the rank inherits its end, which the server keeps until ranks_started().
    Status prepare_rank(RankLaunch& launch) override;
    // The ranks have been started: the server's copies of their ends close, so a rank's exit reads as one.
    void ranks_started() override;
    void rank_exited(long rank, int wait_status) override;
    // The job is ending, its ranks gone: every connection closes and nothing more is answered, and MPICH segments
    // that ranks made here and left behind are removed (abandoned_segments.hpp).
    void stop() override;
    // The job's ranks restart: as after stop(), and then a fresh PMI state (an empty KVS) for the next ranks.
    Status next_attempt(long attempt) override;

    struct Connection;   // one rank's socket (pmi_server.cpp)

private:
    using Bytes = canopy::Bytes;   // RankService's and PmiProtocolOps' alike

    void read_next(const std::shared_ptr<Connection>& connection);
    void flush(const std::shared_ptr<Connection>& connection);
    void close(Connection& connection);
    void sweep_abandoned_segments() const;

    // PmiProtocolOps: the connections here, the rest through the tree, each callback dropped once the server is gone.
    void send(long rank, std::string answer) override;
    void hang_up(long rank, std::string last_words) override;
    void await_exit(long rank) override;
    void fence(Bytes local, std::function<void(Status, Bytes)> done) override;
    void publish(std::string name, std::string port, std::function<void(Status)> done) override;
    void unpublish(std::string name, std::function<void(Status)> done) override;
    void lookup(std::string name, std::function<void(Status, std::optional<std::string>)> done) override;
    void fail(long rank, int exit_code, std::string message) override;
    void mark(long rank, std::string_view what) override;
    bool keep(long rank, const std::string& key, std::uint64_t bytes, std::string_view how) override;
    void drop(long rank, const std::string& key) override;

    boost::asio::io_context& io_;
    std::string node_;   // for messages
    PmiJob job_;
    JobExchange& exchange_;
    PmiNode node_hooks_;
    std::optional<PmiProtocolServer> protocol_;   // one per attempt of the job's ranks
    std::map<long, std::shared_ptr<Connection>> connections_;   // by rank
    bool stopped_ = false;
    // Files MPICH makes on this node from now on may be its ranks' (abandoned_segments.hpp).
    std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
    Lifetime lifetime_;
};

} // namespace canopy
