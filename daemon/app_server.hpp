// The node's socket for the ranks' libcanopy: phase marks go into the job's timing, store requests up the tree.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "private_socket.hpp"
#include "util/result.hpp"

namespace canopy {

// Protocol: docs/libcanopy.md ("Daemon socket protocol"). One connection per rank process, requests pipelined;
// a malformed request closes that connection only, with a log line.
class AppServer {
public:
    struct Mark {
        long rank = 0;
        std::int64_t time_ns = 0;        // the rank's CLOCK_REALTIME, the node's clock
        std::int64_t duration_ns = -1;   // -1: a point, not a phase
        std::string name;
    };
    struct Handlers {
        std::function<void(Mark)> mark;
        // A store request from process `peer` (as the kernel names the connection's other end);
        // `reply(answer, payload)` must be called exactly once.
        std::function<void(pid_t peer, std::uint8_t op, std::vector<std::uint8_t> payload,
                           std::function<void(std::uint8_t answer, std::vector<std::uint8_t> payload)> reply)>
            store;
        // A request longer than this closes its connection unread; `oversized`, if set, hears of it first.
        std::uint32_t max_request = 64u << 20;
        std::function<void(pid_t peer, std::uint32_t length)> oversized;
        // Every rank's connection has closed (posted, never called from inside the server).
        std::function<void()> all_closed;
    };

    // Listens on `path` (in the node's 0700 temp dir).
    static Result<std::unique_ptr<AppServer>> start(boost::asio::io_context& io, const std::string& path,
                                                    Handlers handlers);
    const std::string& path() const { return listener_.path(); }
    // Ranks' connections still open. A rank's last marks are read before its connection's end is seen.
    std::size_t open_connections() const { return *open_; }
    ~AppServer();

    struct Connection;   // one rank process's connection (app_server.cpp)

private:
    AppServer(boost::asio::io_context& io, std::string path, Handlers handlers);
    PrivateListener listener_;
    std::shared_ptr<Handlers> handlers_;
    std::shared_ptr<std::size_t> open_ = std::make_shared<std::size_t>(0);
};

} // namespace canopy
