// One node's simple PMI server for MPICH-family MPIs: each rank speaks PMI-1 or PMI-2 over its own socketpair
// (PMI_FD), and barriers and kvs-fences run as fences over the daemon tree (docs/pmi.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "pmi/kvs_store.hpp"
#include "rank_service.hpp"
#include "util/result.hpp"

namespace canopy {

namespace pmi {
struct Command;
}

using Bytes = std::vector<std::uint8_t>;

struct PmiJob {
    std::string kvsname;                        // the job's name for PMI (PMI-1 kvsname, PMI-2 jobid)
    std::vector<std::uint64_t> ranks_per_node;  // block placement, node by node
    long node_index = 0;
    std::string node;                           // for messages
};

// What the server needs from its daemon and the tree.
struct PmiTree {
    // A whole-job fence in PMI's domain: `local` is this node's puts; `done` gets every node's concatenated.
    std::function<void(Bytes local, std::function<void(Status, Bytes)> done)> fence;
    // The job-wide name service at the root.
    std::function<void(std::string name, std::string port, std::function<void(Status)> done)> publish;
    std::function<void(std::string name, std::function<void(Status)> done)> unpublish;
    std::function<void(std::string name, std::function<void(Status, std::optional<std::string>)> done)> lookup;
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

class PmiServer : public RankService {
public:
    // What the server allows a rank, and what it tells MPICH's client in get_maxes.
    static constexpr std::size_t max_kvsname = 256, max_key = 64, max_value = 1024;
    static constexpr std::size_t max_pending_puts = 16 * 1024;   // per rank between two barriers
    // How long a rank whose PMI connection closed early has to exit and be reported by its exit status instead.
    static constexpr std::chrono::milliseconds exit_grace{500};

    PmiServer(boost::asio::io_context& io, PmiJob job, PmiTree tree);
    ~PmiServer();
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

    struct Connection;   // one rank's socket and protocol state (pmi_server.cpp)

private:
    using Handler = void (PmiServer::*)(Connection&, const pmi::Command&);
    static const std::map<std::string, Handler, std::less<>>& handlers(bool v2);

    void read_next(const std::shared_ptr<Connection>& connection);
    void on_command(Connection& connection, const pmi::Command& command);
    void reply(Connection& connection, const pmi::Command& response);
    void flush(const std::shared_ptr<Connection>& connection);
    // A reply to send when the tree answers; dropped if the rank or the server is gone by then.
    std::function<void(const pmi::Command&)> reply_later(long rank);
    // Answers a command that cannot be served with rc != 0, and says so once in the log, naming the rank.
    void refuse(Connection& connection, const pmi::Command& command, const std::string& why);
    // Whether the rank may keep `bytes` under `key` within the job's limit (PmiTree::keep); if not, refuses the
    // command.
    bool within_limit(Connection& connection, const pmi::Command& command, const std::string& key, std::uint64_t bytes);
    void on_closed(Connection& connection, const std::string& why);
    // The rank has said init (PMI-1) or fullinit (PMI-2): stamped as rank.pmi_init.
    void initialized(Connection& connection);
    // Fails the job if a barrier waits on a rank that can never join it.
    void check_barrier();
    void fail(long rank, std::string message, int exit_code = 1);
    std::string rank_name(long rank) const;
    std::optional<std::string> job_attribute(std::string_view key) const;

    // PMI-1 and PMI-2 commands; each answers in the connection's own protocol.
    void on_init(Connection&, const pmi::Command&);
    void on_fullinit(Connection&, const pmi::Command&);
    void on_get_maxes(Connection&, const pmi::Command&);
    void on_get_appnum(Connection&, const pmi::Command&);
    void on_get_kvsname(Connection&, const pmi::Command&);
    void on_get_universe_size(Connection&, const pmi::Command&);
    void on_job_getid(Connection&, const pmi::Command&);
    void on_put(Connection&, const pmi::Command&);
    void on_get(Connection&, const pmi::Command&);
    void on_barrier(Connection&, const pmi::Command&);
    void on_get_job_attr(Connection&, const pmi::Command&);
    void on_put_node_attr(Connection&, const pmi::Command&);
    void on_get_node_attr(Connection&, const pmi::Command&);
    void on_publish(Connection&, const pmi::Command&);
    void on_unpublish(Connection&, const pmi::Command&);
    void on_lookup(Connection&, const pmi::Command&);
    void on_abort(Connection&, const pmi::Command&);
    void on_finalize(Connection&, const pmi::Command&);
    void on_not_supported(Connection&, const pmi::Command&);

    void maybe_start_fence();
    void fence_done(Status status, Bytes result);

    boost::asio::io_context& io_;
    PmiJob job_;
    PmiTree tree_;
    long first_rank_ = 0, local_size_ = 0, world_size_ = 0;
    std::string process_mapping_;
    std::map<long, std::shared_ptr<Connection>> connections_;   // by rank
    KvsStore kvs_;                                              // every key the fences brought
    std::map<std::string, std::string, std::less<>> pending_puts_;          // this node's puts since the last fence
    std::map<std::string, std::string, std::less<>> node_attrs_;            // PMI-2 info-putnodeattr
    std::set<long> in_barrier_;                                 // ranks waiting for barrier_out
    std::multimap<std::string, long> node_attr_waiters_;        // info-getnodeattr wait=TRUE, by key
    bool fence_running_ = false;
    bool failed_ = false;
    bool closed_ = false;
    bool rank_left_in_mpi_ = false;   // a rank ended between PMI init and finalize: sweep its MPICH segments
    // Files MPICH makes on this node from now on may be its ranks' (abandoned_segments.hpp).
    std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace canopy
