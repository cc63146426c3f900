// Unix sockets that only this user's processes on the node may use: the ranks' libcanopy and on-demand staging.
#pragma once

#include <string>
#include <string_view>

#include <boost/asio/local/stream_protocol.hpp>

#include "util/result.hpp"

namespace canopy {

// NAME in the node's temp dir, or /tmp/canopy-JOB-NODE-NAME when that path is too long for a unix socket.
std::string node_socket_path(const std::string& tmpdir, const std::string& job_id, const std::string& node,
                             std::string_view name);

// Binds a 0600 socket at `path` (replacing a stale one) and listens; `purpose` names it in the error.
Status listen_private(boost::asio::local::stream_protocol::acceptor& acceptor, const std::string& path,
                     std::string_view purpose);

// Whether the peer runs as this user (SO_PEERCRED): the socket may live outside the 0700 temp dir. `uid`
// receives the peer's uid for the refusal message.
bool peer_is_this_user(boost::asio::local::stream_protocol::socket& socket, unsigned& uid);

} // namespace canopy
