// One node's simple PMI server with no I/O: PMI-1 and PMI-2 commands in as bytes from each rank, answers and
// requests out through PmiProtocolOps (in the manner of Flux-core's libpmi simple_server).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "pmi/kvs_store.hpp"
#include "pmi/pmi_protocol_ops.hpp"
#include "pmi/wire.hpp"

namespace canopy {

struct PmiJob {
    std::string kvsname;                        // the job's name for PMI (PMI-1 kvsname, PMI-2 jobid)
    std::vector<std::uint64_t> ranks_per_node;  // block placement, node by node
    long node_index = 0;
    std::string node;                           // for messages
};

class PmiProtocolServer {
public:
    // What the server allows a rank, and what it tells MPICH's client in get_maxes.
    static constexpr std::size_t max_kvsname = 256, max_key = 64, max_value = 1024;
    static constexpr std::size_t max_pending_puts = 16 * 1024;   // per rank between two barriers

    PmiProtocolServer(PmiJob job, PmiProtocolOps& ops);
    PmiProtocolServer(const PmiProtocolServer&) = delete;
    PmiProtocolServer& operator=(const PmiProtocolServer&) = delete;

    long world_size() const { return world_size_; }
    long first_rank() const { return first_rank_; }   // this node's ranks are a block from here
    long local_size() const { return local_size_; }

    // The rank has a connection and may speak PMI from now on; `appnum` is its program's in an MPMD job.
    void add_rank(long rank, long appnum);
    // Bytes the rank sent. Whole commands are answered; a stream that cannot be read on is hung up.
    void receive(long rank, std::string_view bytes);
    // Whether the rank's connection is still to be read.
    bool open(long rank) const;
    // The rank's connection closed: at its end of file (`why` empty) or on an error.
    void connection_closed(long rank, const std::string& why);
    void rank_exited(long rank, int wait_status);
    // The rank broke off (PmiProtocolOps::await_exit) and its exit has not come in time: the job ends.
    void exit_overdue(long rank);
    // The job is ending: nothing more is answered or asked.
    void stop();
    // Whether a rank ended between PMI init and finalize, and may have left MPICH segments behind.
    bool rank_left_in_mpi() const { return rank_left_in_mpi_; }

private:
    using Bytes = PmiProtocolOps::Bytes;

    struct Rank {
        enum class State { connected, initialized, finalized, closed };

        pmi::Wire wire() const { return decoder.wire(); }

        long rank = 0;
        long appnum = 0;
        pmi::Decoder decoder;
        State state = State::connected;
        bool exited = false;
        int wait_status = 0;
        bool broke_off = false;     // closed between init and finalize, before its exit was known
        bool complained = false;    // one log line per rank for refused commands
        std::size_t pending_puts = 0;
    };
    using Handler = void (PmiProtocolServer::*)(Rank&, const pmi::Command&);
    static const std::map<std::string, Handler, std::less<>>& handlers(pmi::Wire wire);

    void on_command(Rank& rank, const pmi::Command& command);
    void reply(Rank& rank, const pmi::Command& response);
    // A reply to send when the tree answers; dropped if the rank is gone by then.
    std::function<void(const pmi::Command&)> reply_later(long rank);
    // Answers a command that cannot be served with rc != 0, and says so once in the log, naming the rank.
    void refuse(Rank& rank, const pmi::Command& command, const std::string& why);
    // Whether the rank may keep `bytes` under `key` within the job's limit; if not, refuses the command.
    bool within_limit(Rank& rank, const pmi::Command& command, const std::string& key, std::uint64_t bytes);
    // The rank's stream broke the protocol: it gets one last error and its connection closes.
    void unreadable(Rank& rank, const std::string& why);
    // The rank has said init (PMI-1) or fullinit (PMI-2).
    void initialized(Rank& rank);
    // Fails the job if a barrier waits on a rank that can never join it.
    void check_barrier();
    // Why `rank` can never join the barrier, or nullopt while it may.
    std::optional<std::string> never_joins(const Rank& rank) const;
    void fail(long rank, std::string message, int exit_code = 1);
    std::string rank_name(long rank) const;
    std::optional<std::string> job_attribute(std::string_view key) const;

    // PMI-1 and PMI-2 commands; each answers in the rank's own wire.
    void on_init(Rank&, const pmi::Command&);
    void on_fullinit(Rank&, const pmi::Command&);
    void on_get_maxes(Rank&, const pmi::Command&);
    void on_get_appnum(Rank&, const pmi::Command&);
    void on_get_kvsname(Rank&, const pmi::Command&);
    void on_get_universe_size(Rank&, const pmi::Command&);
    void on_job_getid(Rank&, const pmi::Command&);
    void on_put(Rank&, const pmi::Command&);
    void on_get(Rank&, const pmi::Command&);
    void on_barrier(Rank&, const pmi::Command&);
    void on_get_job_attr(Rank&, const pmi::Command&);
    void on_put_node_attr(Rank&, const pmi::Command&);
    void on_get_node_attr(Rank&, const pmi::Command&);
    void on_publish(Rank&, const pmi::Command&);
    void on_unpublish(Rank&, const pmi::Command&);
    void on_lookup(Rank&, const pmi::Command&);
    void on_abort(Rank&, const pmi::Command&);
    void on_finalize(Rank&, const pmi::Command&);
    void on_not_supported(Rank&, const pmi::Command&);

    void maybe_start_fence();
    void fence_done(Status status, Bytes result);

    PmiJob job_;
    PmiProtocolOps& ops_;
    long first_rank_ = 0, local_size_ = 0, world_size_ = 0;
    std::string process_mapping_;
    std::map<long, Rank> ranks_;
    KvsStore kvs_;                                                   // every key the fences brought
    std::map<std::string, std::string, std::less<>> pending_puts_;   // this node's puts since the last fence
    std::map<std::string, std::string, std::less<>> node_attrs_;     // PMI-2 info-putnodeattr
    std::set<long> in_barrier_;                                      // ranks waiting for barrier_out
    std::multimap<std::string, long> node_attr_waiters_;             // info-getnodeattr wait=TRUE, by key
    bool fence_running_ = false;
    bool failed_ = false;
    bool stopped_ = false;
    bool rank_left_in_mpi_ = false;
};

} // namespace canopy
