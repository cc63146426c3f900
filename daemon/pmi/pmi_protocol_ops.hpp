// What the simple PMI protocol server asks of the world around it: its ranks' connections, the daemon and the tree.
// The socket layer (PmiServer) implements it over socketpairs; a unit test implements it in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace canopy {

class PmiProtocolOps {
public:
    using Bytes = std::vector<std::uint8_t>;

    virtual ~PmiProtocolOps() = default;

    // One encoded answer (a PMI-1 line or a PMI-2 command) for the rank, sent after those before it.
    virtual void send(long rank, std::string answer) = 0;
    // The rank's stream cannot be read on: send `last_words` if that needs no wait, then close its connection.
    virtual void hang_up(long rank, std::string last_words) = 0;
    // The rank broke off between init and finalize, but may just be dying: give its exit a moment to be reported
    // (PmiProtocolServer::rank_exited), then call PmiProtocolServer::exit_overdue.
    virtual void await_exit(long rank) = 0;

    // A whole-job fence in PMI's domain: `local` is this node's puts (pmi/node_puts.hpp); `done` gets every node's
    // concatenated.
    virtual void fence(Bytes local, std::function<void(Status, Bytes)> done) = 0;
    // The job-wide name service at the root.
    virtual void publish(std::string name, std::string port, std::function<void(Status)> done) = 0;
    virtual void unpublish(std::string name, std::function<void(Status)> done) = 0;
    virtual void lookup(std::string name, std::function<void(Status, std::optional<std::string>)> done) = 0;
    // The job must end; `message` is the one line for the user, naming the rank and node. Asked once at most.
    virtual void fail(long rank, int exit_code, std::string message) = 0;
    // A rank reached a PMI milestone ("pmi_init", "pmi_finalize"), for the timing report.
    virtual void mark(long rank, std::string_view what) = 0;
    // The job's limit on what a rank stores: whether `rank` may now keep `bytes` under `key` (false has ended the
    // job), and that it keeps nothing there any more.
    virtual bool keep(long rank, const std::string& key, std::uint64_t bytes, std::string_view how) = 0;
    virtual void drop(long rank, const std::string& key) = 0;
};

} // namespace canopy
