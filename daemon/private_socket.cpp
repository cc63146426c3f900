// Unix sockets that only this user's processes on the node may use.
#include "private_socket.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace canopy {

namespace {

bool peer_is_this_user(boost::asio::local::stream_protocol::socket& socket, unsigned& uid)
{
    ucred peer{};
    socklen_t size = sizeof peer;
    bool known = ::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0;
    uid = peer.uid;
    return known && peer.uid == ::getuid();
}

} // namespace

PrivateListener::PrivateListener(boost::asio::io_context& io, spdlog::logger& log, std::string path)
    : acceptor_(io), accept_guard_(io, log), path_(std::move(path))
{
}

PrivateListener::~PrivateListener()
{
    lifetime_.end();
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    ::unlink(path_.c_str());
}

Status PrivateListener::listen(std::string_view purpose)
{
    if (path_.size() >= sizeof(sockaddr_un::sun_path))
        return make_error("socket path {} is too long for a unix socket", path_);
    boost::system::error_code error;
    ::unlink(path_.c_str());
    acceptor_.open(boost::asio::local::stream_protocol(), error);
    if (!error)
        acceptor_.bind(boost::asio::local::stream_protocol::endpoint(path_), error);
    if (!error && ::chmod(path_.c_str(), 0600) != 0)
        error = boost::system::error_code(errno, boost::system::system_category());
    if (!error)
        acceptor_.listen(boost::asio::socket_base::max_listen_connections, error);
    if (error)
        return make_error("cannot listen on {} for {}: {}", path_, purpose, error.message());
    return Status{};
}

void PrivateListener::accept(Take take)
{
    take_ = std::move(take);
    accept_next();
}

void PrivateListener::accept_next()
{
    acceptor_.async_accept(lifetime_.guard([this](const boost::system::error_code& error,
                                                  boost::asio::local::stream_protocol::socket socket) {
        if (error == boost::asio::error::operation_aborted)
            return;   // closed: the daemon is leaving
        if (error) {
            accept_guard_.after_accept(error, [this] { accept_next(); });
            return;
        }
        unsigned uid = 0;
        if (!peer_is_this_user(socket, uid)) {
            accept_guard_.refused(fmt::format("refused a connection to {} from uid {}", path_, uid));
            accept_next();
            return;
        }
        take_(std::move(socket));
        accept_next();
    }));
}

} // namespace canopy
