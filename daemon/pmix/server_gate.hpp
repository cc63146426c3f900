// Keeps strangers off the PMIx server's own port while the relay stands in front of it. PMIx 4.2.2 waits on its
// progress thread for a new connection's handshake, so one silent connection stalls every rank of the node
// (docs/pmix.md, "Known bugs"). On demand, only the relay has any business on that port: a socket filter on the
// server's listening socket drops every connection attempt but those from ports the relay holds.
#pragma once

#include <cstdint>
#include <memory>
#include <set>

#include <boost/asio/ip/tcp.hpp>

#include "util/result.hpp"

namespace canopy {

class ServerGate {
public:
    // Finds the server's listening socket among this process's descriptors (PMIx owns it; the gate only filters
    // it) and closes it to everyone. Only an IPv4 loopback server can be gated: the filter checks that address.
    static Result<std::shared_ptr<ServerGate>> close(const boost::asio::ip::tcp::endpoint& server);

    // Lets connections from `port` on the server's address through until revoke(port). The relay binds the port
    // first, so no one else can use it meanwhile. Established connections keep the filter they were accepted
    // under: revoking never cuts one off.
    Status admit(std::uint16_t port);
    void revoke(std::uint16_t port);
    // Removes the filter for good, when it cannot admit a port: a stalled server beats refusing the ranks.
    void open();

private:
    ServerGate(int fd, const boost::asio::ip::tcp::endpoint& server) : fd_(fd), server_(server) {}
    // Attaches the filter for the ports admitted now, after checking the descriptor is still the server's.
    Status apply();

    int fd_;
    boost::asio::ip::tcp::endpoint server_;
    std::set<std::uint16_t> admitted_;
    bool opened_ = false;
};

} // namespace canopy
