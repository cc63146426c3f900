// Unix sockets that only this user's processes on the node may use.
#include "private_socket.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace canopy {

std::string node_socket_path(const std::string& tmpdir, const std::string& job_id, const std::string& node,
                             std::string_view name)
{
    std::string path = fmt::format("{}/{}", tmpdir, name);
    if (path.size() >= sizeof(sockaddr_un::sun_path))
        path = fmt::format("/tmp/canopy-{}-{}-{}", job_id, node, name);
    return path;
}

Status listen_private(boost::asio::local::stream_protocol::acceptor& acceptor, const std::string& path,
                     std::string_view purpose)
{
    if (path.size() >= sizeof(sockaddr_un::sun_path))
        return make_error("socket path {} is too long for a unix socket", path);
    boost::system::error_code error;
    ::unlink(path.c_str());
    acceptor.open(boost::asio::local::stream_protocol(), error);
    if (!error)
        acceptor.bind(boost::asio::local::stream_protocol::endpoint(path), error);
    if (!error && ::chmod(path.c_str(), 0600) != 0)
        error = boost::system::error_code(errno, boost::system::system_category());
    if (!error)
        acceptor.listen(boost::asio::socket_base::max_listen_connections, error);
    if (error)
        return make_error("cannot listen on {} for {}: {}", path, purpose, error.message());
    return Status{};
}

bool peer_is_this_user(boost::asio::local::stream_protocol::socket& socket, unsigned& uid)
{
    ucred peer{};
    socklen_t size = sizeof peer;
    bool known = ::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0;
    uid = peer.uid;
    return known && peer.uid == ::getuid();
}

} // namespace canopy
