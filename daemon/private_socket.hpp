// Unix sockets that only this user's processes on the node may use: the ranks' libcanopy and on-demand staging.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "util/accept_guard.hpp"
#include "util/lifetime.hpp"
#include "util/result.hpp"

namespace canopy {

// A 0600 socket at a path, handing on connections from this user's processes only (SO_PEERCRED: the socket may
// live outside the 0700 temp dir); others are refused with a log line. Running out of descriptors pauses it rather
// than ends it. Destroying it closes the socket and removes its file.
class PrivateListener {
public:
    using Take = std::function<void(boost::asio::local::stream_protocol::socket socket)>;
    PrivateListener(boost::asio::io_context& io, spdlog::logger& log, std::string path);
    ~PrivateListener();
    PrivateListener(const PrivateListener&) = delete;
    PrivateListener& operator=(const PrivateListener&) = delete;

    // Binds (replacing a stale socket) and listens; `purpose` names it in the error.
    Status listen(std::string_view purpose);
    // Hands every accepted connection to `take` from now on.
    void accept(Take take);
    const std::string& path() const { return path_; }

private:
    void accept_next();

    boost::asio::local::stream_protocol::acceptor acceptor_;
    AcceptGuard accept_guard_;
    std::string path_;
    Take take_;
    Lifetime lifetime_;
};

} // namespace canopy
