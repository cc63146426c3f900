// Stands at the address a node's ranks are given for its PMIx server, so the server need not run until a rank
// first connects: most jobs that never call PMIx_Init then never pay for one (docs/pmix.md, "On demand").
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "pmix/connect_ack.hpp"
#include "pmix/message_tap.hpp"
#include "util/accept_guard.hpp"
#include "util/result.hpp"

namespace canopy {

class ServerGate;

class PmixRelay {
public:
    static constexpr std::chrono::milliseconds default_hello_deadline{10000};

    // Called for every connection once it has sent its connect-ack, before it is relayed, and by start_server():
    // starts the server if it is not running yet and returns its own address ("tcp4://A:P" or "tcp6://[A]:P"), or
    // why it cannot run.
    using StartServer = std::function<Result<std::string>()>;

    // Listens on `address` (an IPv4 or IPv6 literal) on a port the kernel picks. A connection is relayed once it
    // has sent its whole PMIx connect-ack; one that has not within `hello_deadline` is closed.
    static Result<std::unique_ptr<PmixRelay>> listen(boost::asio::io_context& io, const std::string& address,
                                                     StartServer start_server,
                                                     std::chrono::milliseconds hello_deadline = default_hello_deadline);

    // Starts the server if it is not running yet, and returns its address. The first time, it also closes the
    // server's own port to everyone but the relay (server_gate.hpp).
    Result<boost::asio::ip::tcp::endpoint> start_server();

    // From now on, what every relayed connection sends that starts with `prefix` (a PMIx command, such as
    // PMIx_Job_control's) is also handed to `handler`, whole, as it passes.
    void tap_messages(std::string prefix, PmixMessageTap::Handler handler)
    {
        tap_prefix_ = std::move(prefix);
        tap_handler_ = std::move(handler);
    }

    // From now on, each message a relayed rank sends that starts with one of `prefixes` (commands, such as
    // PMIx_Commit's) is first shown to `check`, with which prefix, its size and the client the connection's
    // connect-ack named; false closes that rank's connection instead of passing the message on (the check has
    // reported why). A connection whose connect-ack names no simple client is not checked.
    using SizeCheck = std::function<bool(const connect_ack::Client& client, std::size_t which, std::size_t bytes)>;
    void check_sizes(std::vector<std::string> prefixes, SizeCheck check)
    {
        size_prefixes_ = std::move(prefixes);
        size_check_ = std::move(check);
    }

    // The relay's address in PMIx's URI form, for the ranks' PMIX_SERVER_URI* variables.
    std::string uri() const;
    // Connections that sent their connect-ack and were connected through to the server so far.
    std::size_t relayed() const { return relayed_; }

    // Closes the listener and every relayed connection.
    ~PmixRelay();
    PmixRelay(const PmixRelay&) = delete;
    PmixRelay& operator=(const PmixRelay&) = delete;

    struct Pipe;   // one rank's connection and its twin to the server (pmix_relay.cpp)

private:
    PmixRelay(boost::asio::io_context& io, StartServer start_server, std::chrono::milliseconds hello_deadline);
    void accept_next();
    void relay(boost::asio::ip::tcp::socket rank);

    boost::asio::io_context& io_;
    boost::asio::ip::tcp::acceptor acceptor_;
    // A node's ranks all connect at once in PMIx_Init, so the cap on connections yet to say hello is well above a
    // node's rank count; it still bounds what strangers' silent connections cost in descriptors.
    AcceptGuard accept_guard_;
    StartServer start_server_;
    std::chrono::milliseconds hello_deadline_;
    std::shared_ptr<ServerGate> gate_;
    bool gate_tried_ = false;
    std::vector<std::weak_ptr<Pipe>> pipes_;
    std::size_t relayed_ = 0;
    std::string tap_prefix_;
    PmixMessageTap::Handler tap_handler_;
    std::vector<std::string> size_prefixes_;
    SizeCheck size_check_;
};

// "tcp4://127.0.0.1:4000" or "tcp6://[::1]:4000" to an endpoint; an error names the text.
Result<boost::asio::ip::tcp::endpoint> parse_pmix_uri(const std::string& uri);

} // namespace canopy
