// Two ends of one loopback TCP connection, for tests that drive a Link from its far side.
#pragma once

#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace canopy {

// The connecting end first, the accepted end second.
inline std::pair<boost::asio::ip::tcp::socket, boost::asio::ip::tcp::socket> loopback_sockets(
    boost::asio::io_context& io)
{
    using boost::asio::ip::tcp;
    tcp::acceptor acceptor(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    tcp::socket near_socket(io);
    near_socket.connect(acceptor.local_endpoint());
    tcp::socket far_socket = acceptor.accept();
    return {std::move(near_socket), std::move(far_socket)};
}

} // namespace canopy
