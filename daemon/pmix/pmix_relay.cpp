// The PMIx relay: each accepted rank connection gets a twin connection to the real server, and bytes are copied
// both ways until both ends have closed. PMIx's wire protocol passes through untouched.
#include "pmix/pmix_relay.hpp"

#include <array>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/logger.h>

#include "pmix/connect_ack.hpp"
#include "pmix/server_gate.hpp"
#include "util/log.hpp"

namespace canopy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

spdlog::logger& relay_log() { return area_logger("pmix"); }

// PMIx messages are a header and a payload, sent separately; Nagle would hold the payload back for an ACK.
void set_no_delay(tcp::socket& socket)
{
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
}

} // namespace

Result<tcp::endpoint> parse_pmix_uri(const std::string& uri)
{
    std::string_view text = uri;
    bool v6 = text.starts_with("tcp6://");
    if (!v6 && !text.starts_with("tcp4://"))
        return make_error("PMIx server address '{}' is not tcp4://ADDRESS:PORT or tcp6://[ADDRESS]:PORT", uri);
    text.remove_prefix(7);
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos)
        return make_error("PMIx server address '{}' has no port", uri);
    std::string_view host = text.substr(0, colon);
    if (v6 && host.size() >= 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    unsigned port = 0;
    for (char c : text.substr(colon + 1)) {
        if (c < '0' || c > '9' || (port = port * 10 + static_cast<unsigned>(c - '0')) > 65535)
            return make_error("PMIx server address '{}' has a bad port", uri);
    }
    boost::system::error_code error;
    auto address = asio::ip::make_address(std::string(host), error);
    if (error || port == 0 || address.is_v6() != v6)
        return make_error("PMIx server address '{}' is not usable", uri);
    return tcp::endpoint(address, static_cast<unsigned short>(port));
}

struct PmixRelay::Pipe : std::enable_shared_from_this<Pipe> {
    Pipe(tcp::socket rank_socket, PmixRelay& relay)
        : relay(&relay), rank(std::move(rank_socket)), server(relay.io_), deadline(relay.io_)
    {
    }

    // PMIx 4.2.2 reads a connect-ack with blocking recvs on its progress thread, so a client that stops halfway
    // would stall the server. The relay collects the whole connect-ack first, within the deadline, and only then
    // starts the server (if need be), connects and hands it over in one piece.
    void await_hello(std::chrono::milliseconds limit)
    {
        deadline.expires_after(limit);
        deadline.async_wait([self = shared_from_this()](boost::system::error_code error) {
            if (!error && !self->closed) {
                relay_log().info("pmix relay: dropping a connection that sent no PMIx connect-ack in time");
                self->close();
            }
        });
        hello.resize(connect_ack::header_size);
        asio::async_read(rank, asio::buffer(hello), [self = shared_from_this()](boost::system::error_code error,
                                                                                 std::size_t) {
            if (error || self->closed)
                return self->close();
            auto body = connect_ack::body_size(std::span<const char, connect_ack::header_size>(self->hello.data(),
                                                                                              connect_ack::header_size));
            if (!body) {
                relay_log().info("pmix relay: dropping a connection: {}", body.error().message);
                return self->close();
            }
            self->hello.resize(connect_ack::header_size + *body);
            asio::async_read(self->rank, asio::buffer(self->hello.data() + connect_ack::header_size, *body),
                             [self](boost::system::error_code error, std::size_t) {
                                 if (error || self->closed)
                                     return self->close();
                                 self->deadline.cancel();
                                 self->pending.release();
                                 self->hello_received();
                             });
        });
    }

    void hello_received()
    {
        auto endpoint = relay->start_server();
        if (!endpoint)
            return close();   // reported already; the closed socket makes the rank's PMIx_Init fail
        ++relay->relayed_;
        gate = relay->gate_;
        if (gate)
            pass_gate(*endpoint);
        server.async_connect(*endpoint, [self = shared_from_this()](boost::system::error_code error) {
            if (self->closed)
                return;
            if (error) {
                relay_log().warn("pmix relay: cannot reach the PMIx server: {}", error.message());
                return self->close();
            }
            set_no_delay(self->server);
            asio::async_write(self->server, asio::buffer(self->hello),
                              [self](boost::system::error_code error, std::size_t) {
                                  if (error || self->closed)
                                      return self->close();
                                  self->start_tap();
                                  self->pump(self->rank, self->server, self->to_server);
                                  self->pump(self->server, self->rank, self->to_rank);
                              });
        });
    }

    // Reads along what the rank sends, for the relay's tap and size check, from the first message after the
    // connect-ack on.
    void start_tap()
    {
        auto client = connect_ack::client_of(std::span<const char>(hello).subspan(connect_ack::header_size));
        hello = {};
        bool sizes = relay->size_check_ && client;
        if (!relay->tap_handler_ && !sizes)
            return;
        tap.emplace(relay->tap_prefix_, relay->tap_handler_);
        if (sizes)
            tap->check_sizes(relay->size_prefixes_, [check = relay->size_check_, client = *client](std::size_t which,
                                                                                               std::size_t bytes) {
                return check(client, which, bytes);
            });
    }

    // Copies `from` to `to` until `from` ends; a clean end is passed on as a half-close, so a reply still in
    // flight the other way is delivered.
    void pump(tcp::socket& from, tcp::socket& to, std::array<char, 65536>& buffer)
    {
        from.async_read_some(asio::buffer(buffer), [self = shared_from_this(), &from, &to,
                                                    &buffer](boost::system::error_code error, std::size_t size) {
            if (error == asio::error::eof) {
                boost::system::error_code ignored;
                to.shutdown(tcp::socket::shutdown_send, ignored);
                if (--self->open_directions == 0)
                    self->close();
                return;
            }
            if (error) {
                self->close();
                return;
            }
            if (self->tap && &from == &self->rank && !self->tap->feed(buffer.data(), size)) {
                relay_log().debug("pmix relay: closing a rank's connection: it sent more than the job's limit");
                self->close();
                return;
            }
            asio::async_write(to, asio::buffer(buffer.data(), size),
                              [self, &from, &to, &buffer](boost::system::error_code error, std::size_t) {
                                  if (error) {
                                      self->close();
                                      return;
                                  }
                                  self->pump(from, to, buffer);
                              });
        });
    }

    // Binds the connection to the server to a port of its own and has the gate admit that port.
    void pass_gate(const tcp::endpoint& endpoint)
    {
        boost::system::error_code error;
        server.open(endpoint.protocol(), error);
        if (!error)
            server.bind(tcp::endpoint(endpoint.address(), 0), error);
        if (!error)
            admitted_port = server.local_endpoint(error).port();
        Status admitted = error ? Status(make_error("{}", error.message())) : gate->admit(admitted_port);
        if (!admitted) {
            relay_log().debug("pmix relay: PMIx's own port is open to this user's processes from now: {}",
                              admitted.error().message);
            gate->open();
        }
    }

    // Also called when the relay goes: handlers that run later see `closed` and touch nothing else.
    void close()
    {
        closed = true;
        boost::system::error_code ignored;
        pending.release();
        rank.close(ignored);
        server.close(ignored);
        deadline.cancel();
        if (gate && admitted_port)
            gate->revoke(std::exchange(admitted_port, 0));
    }

    PmixRelay* relay;
    AcceptGuard::Pending pending;   // counted against the relay's cap until the connect-ack is in
    tcp::socket rank;
    tcp::socket server;
    asio::steady_timer deadline;
    std::vector<char> hello;
    bool closed = false;
    std::shared_ptr<ServerGate> gate;   // null when the server's port could not be gated
    std::uint16_t admitted_port = 0;
    std::optional<PmixMessageTap> tap;   // reads along what the rank sends
    std::array<char, 65536> to_server{};
    std::array<char, 65536> to_rank{};
    int open_directions = 2;
};

PmixRelay::PmixRelay(asio::io_context& io, StartServer start_server, std::chrono::milliseconds hello_deadline)
    : io_(io), acceptor_(io), accept_guard_(io, relay_log(), {.max_pending = 1024}),
      start_server_(std::move(start_server)), hello_deadline_(hello_deadline)
{
}

Result<std::unique_ptr<PmixRelay>> PmixRelay::listen(asio::io_context& io, const std::string& address,
                                                     StartServer start_server,
                                                     std::chrono::milliseconds hello_deadline)
{
    std::unique_ptr<PmixRelay> relay(new PmixRelay(io, std::move(start_server), hello_deadline));
    boost::system::error_code error;
    auto ip = asio::ip::make_address(address, error);
    tcp::endpoint endpoint(ip, 0);
    if (!error)
        relay->acceptor_.open(endpoint.protocol(), error);
    if (!error)
        relay->acceptor_.bind(endpoint, error);
    if (!error)
        relay->acceptor_.listen(asio::socket_base::max_listen_connections, error);
    if (error)
        return make_error("cannot listen for PMIx clients on {}: {}", address, error.message());
    relay->accept_next();
    return relay;
}

std::string PmixRelay::uri() const
{
    boost::system::error_code error;
    auto endpoint = acceptor_.local_endpoint(error);
    if (endpoint.address().is_v6())
        return fmt::format("tcp6://[{}]:{}", endpoint.address().to_string(), endpoint.port());
    return fmt::format("tcp4://{}:{}", endpoint.address().to_string(), endpoint.port());
}

void PmixRelay::accept_next()
{
    acceptor_.async_accept([this](boost::system::error_code error, tcp::socket rank) {
        if (!error)
            relay(std::move(rank));
        accept_guard_.after_accept(error, [this] { accept_next(); });
    });
}

Result<tcp::endpoint> PmixRelay::start_server()
{
    auto server_uri = start_server_();
    if (!server_uri)
        return server_uri.error();
    auto endpoint = parse_pmix_uri(*server_uri);
    if (!endpoint) {
        relay_log().error("pmix relay: {}", endpoint.error().message);
        return endpoint;
    }
    if (!gate_tried_) {
        gate_tried_ = true;
        auto gate = ServerGate::close(*endpoint);
        if (gate)
            gate_ = std::move(*gate);
        else   // other users are refused at accept all the same (daemon/own_user_accept.cpp)
            relay_log().debug("pmix relay: PMIx's own port stays open to this user's processes: {}",
                              gate.error().message);
    }
    return endpoint;
}

void PmixRelay::relay(tcp::socket rank)
{
    set_no_delay(rank);
    auto pipe = std::make_shared<Pipe>(std::move(rank), *this);
    pipe->pending = accept_guard_.admit([weak = std::weak_ptr<Pipe>(pipe)] {
        if (auto dropped = weak.lock())
            dropped->close();
    });
    std::erase_if(pipes_, [](const std::weak_ptr<Pipe>& p) { return p.expired(); });
    pipes_.push_back(pipe);
    pipe->await_hello(hello_deadline_);
}

PmixRelay::~PmixRelay()
{
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    for (auto& weak : pipes_)
        if (auto pipe = weak.lock())
            pipe->close();
}

} // namespace canopy
