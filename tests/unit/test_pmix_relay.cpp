// The PMIx relay on its own: a server that exists only once the first client connects, bytes both ways, half-close;
// and the gate on the server's own port, which only the relay's connections pass.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "pmix/pmix_relay.hpp"
#include "pmix/server_gate.hpp"

namespace canopy {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// The relay's io_context on its own thread, as canopyd runs it; the test talks to it with blocking sockets.
struct RelayFixture : ::testing::Test {
    asio::io_context io;
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{asio::make_work_guard(io)};
    std::thread runner;
    std::unique_ptr<PmixRelay> relay;

    void start(PmixRelay::StartServer start_server,
               std::chrono::milliseconds hello_deadline = PmixRelay::default_hello_deadline)
    {
        auto listening = PmixRelay::listen(io, "127.0.0.1", std::move(start_server), hello_deadline);
        ASSERT_TRUE(listening.ok()) << listening.error().message;
        relay = std::move(*listening);
        runner = std::thread([this] { io.run(); });
    }

    void TearDown() override
    {
        asio::post(io, [this] { relay.reset(); });
        work.reset();
        if (runner.joinable())
            runner.join();
    }

    // What the relay has relayed, read on its own thread.
    std::size_t relayed()
    {
        std::promise<std::size_t> count;
        asio::post(io, [&] { count.set_value(relay->relayed()); });
        return count.get_future().get();
    }

    tcp::socket connect_client(asio::io_context& client_io)
    {
        auto endpoint = parse_pmix_uri(relay->uri());
        EXPECT_TRUE(endpoint.ok());
        tcp::socket socket(client_io);
        socket.connect(*endpoint);
        return socket;
    }
};

// A PMIx 4 connect-ack as a client sends it: a 16-byte header whose size_t at offset 8 counts the body.
std::string hello(const std::string& body)
{
    std::string header(16, '\xff');
    std::size_t size = body.size();
    std::memcpy(header.data() + 8, &size, sizeof size);
    return header + body;
}

std::string read_to_end(tcp::socket& socket)
{
    std::string out;
    boost::system::error_code error;
    char buffer[256];
    for (;;) {
        std::size_t n = socket.read_some(asio::buffer(buffer), error);
        out.append(buffer, n);
        if (error)
            return out;
    }
}

TEST_F(RelayFixture, StartsTheServerOnTheFirstConnectionAndCarriesBothDirectionsThroughAHalfClose)
{
    // The "server" does not exist until the relay asks for it: the whole point of starting on demand.
    asio::io_context server_io;
    std::optional<tcp::acceptor> server;
    std::promise<std::string> received;
    std::thread server_thread;
    std::atomic<int> starts = 0;
    start([&]() -> Result<std::string> {
        ++starts;
        if (!server) {
            server.emplace(server_io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
            server_thread = std::thread([&] {
                tcp::socket peer = server->accept();
                std::string request = read_to_end(peer);   // ends at the client's half-close
                received.set_value(request);
                asio::write(peer, asio::buffer("pong:" + request));
            });
        }
        return "tcp4://127.0.0.1:" + std::to_string(server->local_endpoint().port());
    });
    EXPECT_EQ(starts, 0);

    asio::io_context client_io;
    tcp::socket client = connect_client(client_io);
    asio::write(client, asio::buffer(hello("rank 0") + "ping"));
    client.shutdown(tcp::socket::shutdown_send);
    auto request = received.get_future();
    ASSERT_EQ(request.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_EQ(request.get(), hello("rank 0") + "ping");
    EXPECT_EQ(read_to_end(client), "pong:" + hello("rank 0") + "ping");   // then EOF: the server's close came through
    server_thread.join();
    EXPECT_EQ(starts, 1);
    EXPECT_EQ(relayed(), 1u);
}

TEST_F(RelayFixture, AServerThatCannotStartClosesTheClientsConnection)
{
    std::atomic<int> starts = 0;
    start([&]() -> Result<std::string> {
        ++starts;
        return make_error("no PMIx here");
    });
    asio::io_context client_io;
    tcp::socket client = connect_client(client_io);
    asio::write(client, asio::buffer(hello("rank 0")));
    EXPECT_EQ(read_to_end(client), "");
    EXPECT_EQ(starts, 1);
    EXPECT_EQ(relayed(), 0u);
}

// PMIx 4.2.2 would wait on its progress thread for the rest of a connect-ack: the server must never see a partial
// one, nor be started for a client that has not sent one.
TEST_F(RelayFixture, ClientsWithoutAWholeConnectAckInTimeAreDroppedBeforeReachingTheServer)
{
    std::atomic<int> starts = 0;
    start(
        [&]() -> Result<std::string> {
            ++starts;
            return make_error("must not be asked");
        },
        std::chrono::milliseconds(300));
    asio::io_context client_io;
    tcp::socket silent = connect_client(client_io);
    tcp::socket halfway = connect_client(client_io);
    std::string partial = hello("rank 0");
    asio::write(halfway, asio::buffer(partial.substr(0, partial.size() - 2)));
    tcp::socket boastful = connect_client(client_io);
    std::string huge(16, '\0');
    std::size_t claimed = std::size_t{1} << 40;
    std::memcpy(huge.data() + 8, &claimed, sizeof claimed);
    asio::write(boastful, asio::buffer(huge));

    auto started = std::chrono::steady_clock::now();
    EXPECT_EQ(read_to_end(boastful), "");   // at once
    EXPECT_EQ(read_to_end(silent), "");     // at the deadline
    EXPECT_EQ(read_to_end(halfway), "");
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
    EXPECT_EQ(starts, 0);
    EXPECT_EQ(relayed(), 0u);
}

TEST(PmixUri, ParsesWhatPmixWritesAndRejectsTheRest)
{
    auto v4 = parse_pmix_uri("tcp4://127.0.0.1:4000");
    ASSERT_TRUE(v4.ok()) << v4.error().message;
    EXPECT_EQ(v4->address().to_string(), "127.0.0.1");
    EXPECT_EQ(v4->port(), 4000);
    auto v6 = parse_pmix_uri("tcp6://[::1]:4001");
    ASSERT_TRUE(v6.ok()) << v6.error().message;
    EXPECT_EQ(v6->address().to_string(), "::1");
    EXPECT_EQ(v6->port(), 4001);
    for (const char* bad : {"", "127.0.0.1:4000", "tcp4://127.0.0.1", "tcp4://127.0.0.1:70000", "tcp4://127.0.0.1:x",
                            "tcp4://host:4000", "tcp6://127.0.0.1:4000", "tcp4://127.0.0.1:0"})
        EXPECT_FALSE(parse_pmix_uri(bad).ok()) << bad;
}

// Whether a connection attempt from `source` to `server` completes within `limit` (a dropped SYN never does).
bool connects_within(const tcp::endpoint& source, const tcp::endpoint& server, int limit_ms)
{
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd, 0);
    int reuse = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse);
    sockaddr_in from{AF_INET, htons(source.port()), {htonl(source.address().to_v4().to_uint())}, {}};
    sockaddr_in to{AF_INET, htons(server.port()), {htonl(server.address().to_v4().to_uint())}, {}};
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0) << std::strerror(errno);
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to);
    bool connected = rc == 0;
    if (rc != 0 && errno == EINPROGRESS) {
        pollfd wait{fd, POLLOUT, 0};
        int error = 0;
        socklen_t size = sizeof error;
        connected = ::poll(&wait, 1, limit_ms) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 &&
                    error == 0;
    }
    ::close(fd);
    return connected;
}

TEST(ServerGate, LetsOnlyAdmittedPortsOfTheServersAddressThrough)
{
    asio::io_context io;
    tcp::acceptor server(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    auto loopback = asio::ip::make_address("127.0.0.1");
    auto gate = ServerGate::close(server.local_endpoint());
    ASSERT_TRUE(gate.ok()) << gate.error().message;

    EXPECT_FALSE(connects_within(tcp::endpoint(loopback, 0), server.local_endpoint(), 300)) << "a stranger got in";

    tcp::socket member(io);
    member.open(tcp::v4());
    member.bind(tcp::endpoint(loopback, 0));
    auto port = member.local_endpoint().port();
    ASSERT_TRUE((*gate)->admit(port).ok());
    // The admitted port from another loopback address is still a stranger.
    EXPECT_FALSE(connects_within(tcp::endpoint(asio::ip::make_address("127.0.0.2"), port), server.local_endpoint(),
                                 300));
    member.connect(server.local_endpoint());
    tcp::socket accepted = server.accept();

    // Revoking the port closes the gate behind the member, not the member's connection.
    (*gate)->revoke(port);
    asio::write(member, asio::buffer(std::string("ping")));
    std::array<char, 4> got{};
    asio::read(accepted, asio::buffer(got));
    EXPECT_EQ(std::string(got.data(), got.size()), "ping");
    EXPECT_FALSE(connects_within(tcp::endpoint(loopback, 0), server.local_endpoint(), 300));

    // Opened for good, it lets anyone in.
    (*gate)->open();
    EXPECT_TRUE(connects_within(tcp::endpoint(loopback, 0), server.local_endpoint(), 2000));
}

TEST(ServerGate, NeedsAnIpv4LoopbackServerOfThisProcess)
{
    asio::io_context io;
    tcp::acceptor other(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    auto port = other.local_endpoint().port();
    other.close();
    EXPECT_FALSE(ServerGate::close(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port)).ok());
    EXPECT_FALSE(ServerGate::close(tcp::endpoint(asio::ip::make_address("::1"), port)).ok());
}

TEST_F(RelayFixture, ConnectsToAGatedServerThroughItsGate)
{
    asio::io_context server_io;
    tcp::acceptor server(server_io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    auto server_uri = "tcp4://127.0.0.1:" + std::to_string(server.local_endpoint().port());
    start([&]() -> Result<std::string> { return server_uri; });

    asio::io_context client_io;
    tcp::socket client = connect_client(client_io);
    asio::write(client, asio::buffer(hello("rank 0")));
    tcp::socket peer = server.accept();   // the relay passed the gate it just closed
    std::string got(hello("rank 0").size(), '\0');
    asio::read(peer, asio::buffer(got));
    EXPECT_EQ(got, hello("rank 0"));
    EXPECT_FALSE(connects_within(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), server.local_endpoint(), 300));
}

// A simple client's connect-ack body as PMIx 4.2.2 sends it (read off a real client): the security module, a
// credential of 8 bytes, the type flag, then the namespace and rank.
std::string client_body(const std::string& nspace, std::uint32_t rank, char flag = 0)
{
    std::string body = std::string("native") + '\0';
    std::uint32_t credential = htonl(8);
    body.append(reinterpret_cast<const char*>(&credential), sizeof credential);
    body.append(8, '\0');
    body += flag;
    body += nspace + '\0';
    std::uint32_t wire_rank = htonl(rank);
    body.append(reinterpret_cast<const char*>(&wire_rank), sizeof wire_rank);
    return body + std::string("4.2.2rc2\0v41\0\x01hash\0\0", 20);
}

TEST(ConnectAck, NamesTheSimpleClientItIntroduces)
{
    auto body = client_body("canopy.188d6a45", 3);
    auto client = connect_ack::client_of(body);
    ASSERT_TRUE(client);
    EXPECT_EQ(client->nspace, "canopy.188d6a45");
    EXPECT_EQ(client->rank, 3);
    EXPECT_FALSE(connect_ack::client_of(client_body("canopy.1", 3, 3))) << "a tool names no rank";
    for (std::size_t cut : {0u, 5u, 7u, 11u, 19u, 20u, 25u, 35u, 38u})
        EXPECT_FALSE(connect_ack::client_of(std::string_view(body).substr(0, cut))) << "cut at " << cut;
    std::string boastful = body;
    boastful[10] = '\x7f';   // a credential far longer than the body
    EXPECT_FALSE(connect_ack::client_of(boastful));
}

// A PMIx message: a 16-byte header whose u32 at offset 8 (network order) counts the payload.
std::string message(const std::string& payload)
{
    std::string header(16, '\0');
    std::uint32_t size = htonl(static_cast<std::uint32_t>(payload.size()));
    std::memcpy(header.data() + 8, &size, sizeof size);
    return header + payload;
}

// What arrives on `socket` until its peer closes it, or until `limit_ms` pass (then one byte more than arrived,
// so that a connection left open never reads as closed).
std::string read_until_closed(tcp::socket& socket, int limit_ms)
{
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd wait{socket.native_handle(), POLLIN, 0};
        if (left.count() <= 0 || ::poll(&wait, 1, static_cast<int>(left.count())) != 1)
            return out + "!";
        char buffer[65536];
        ssize_t got = ::recv(socket.native_handle(), buffer, sizeof buffer, 0);
        if (got <= 0)
            return out;
        out.append(buffer, static_cast<std::size_t>(got));
    }
}

// The relay's part in the job's limit per rank: a message the size check refuses closes the rank's connection, and
// the server never receives it.
TEST_F(RelayFixture, AMessageTheSizeCheckRefusesNeverReachesTheServer)
{
    asio::io_context server_io;
    tcp::acceptor server(server_io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    auto server_uri = "tcp4://127.0.0.1:" + std::to_string(server.local_endpoint().port());
    start([&]() -> Result<std::string> { return server_uri; });
    std::vector<std::pair<std::string, std::size_t>> checked;
    std::promise<void> set;
    asio::post(io, [&] {
        relay->check_sizes({"\x02\x02", "\x02\x06"}, [&](const connect_ack::Client& client, std::size_t which,
                                                        std::size_t bytes) {
            checked.emplace_back(client.nspace + "." + std::to_string(client.rank) + "/" + std::to_string(which),
                                 bytes);
            return bytes <= 1000;
        });
        set.set_value();
    });
    set.get_future().wait();

    std::string connect = hello(client_body("canopy.job", 5));
    std::string small = message("\x02\x02" + std::string(998, 's'));
    std::string other = message("\x02\x03" + std::string(5000, 'o'));   // another command: not checked
    std::string big = message("\x02\x02" + std::string(1 << 20, 'b'));
    asio::io_context client_io;
    tcp::socket client = connect_client(client_io);
    asio::write(client, asio::buffer(connect + small + other));
    tcp::socket peer = server.accept();
    std::string got(connect.size() + small.size() + other.size(), '\0');
    asio::read(peer, asio::buffer(got));
    EXPECT_EQ(got, connect + small + other);
    boost::system::error_code ignored;
    asio::write(client, asio::buffer(big), ignored);   // the relay closes the connection while it comes
    EXPECT_LE(read_until_closed(peer, 10000).size(), 16u)
        << "no more of the refused message than its header reached the server";
    EXPECT_EQ(read_until_closed(client, 10000), "");
    std::promise<decltype(checked)> seen;
    asio::post(io, [&] { seen.set_value(checked); });
    EXPECT_EQ(seen.get_future().get(),
              (std::vector<std::pair<std::string, std::size_t>>{{"canopy.job.5/0", 1000},
                                                                {"canopy.job.5/0", (1 << 20) + 2}}));
}

} // namespace
} // namespace canopy
