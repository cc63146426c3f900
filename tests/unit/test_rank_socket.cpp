// The node's socket for libcanopy, with a JobStore standing in for the root: each rank's writes to the store count
// against the job's limit per rank, and what goes past it is refused before it leaves the node.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include "collective/job_store.hpp"
#include "collective/store_limit.hpp"
#include "rank_socket.hpp"
#include "store_requests.hpp"
#include "temp_dir.hpp"
#include "wire/codec.hpp"

namespace canopy {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Op = JobStore::Op;
using namespace store_requests;

// One node's socket on its own io thread, as canopyd runs it, where this test process is rank 0 and a rank may
// store 4 KiB; the test speaks the socket's protocol with blocking reads and writes.
class NodeSocket : public ::testing::Test {
protected:
    void SetUp() override
    {
        RankSocket::Hooks hooks;
        hooks.mark = [](AppServer::Mark) {};
        hooks.to_root = [this](wire::StoreRequest request, RoutedServices::Reply<wire::StoreRequest> done) {
            auto answer = [done](JobStore::Reply reply) { done(wire::StoreReply{reply.answer, reply.payload}); };
            root_.serve(request.operation, request.body, answer, 0);
        };
        hooks.store_limit = 4096;
        hooks.keep = [this](long rank, const std::string& key, std::uint64_t bytes, std::string_view how) {
            return limit_.keep(rank, key, bytes, how);
        };
        hooks.drop = [this](long rank, const std::string& key) { limit_.drop(rank, key); };
        path_ = dir_.path() + "/app.sock";
        socket_ = RankSocket::start(io_, path_, "n0", std::move(hooks));
        ASSERT_TRUE(socket_);
        socket_->rank_spawned(0, ::getpid());
        runner_ = std::thread([this] { io_.run(); });
    }

    void TearDown() override
    {
        if (client_ >= 0)
            ::close(client_);   // first: the server reads its connections until they close
        boost::asio::post(io_, [this] { socket_->stop(); });
        work_.reset();
        runner_.join();
    }

    int connect_client()
    {
        int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::strncpy(address.sun_path, path_.c_str(), sizeof address.sun_path - 1);
        EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << std::strerror(errno);
        timeval limit{10, 0};   // a reply that never comes fails the test rather than hang it
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        return fd;
    }

    // Sends one request and reads its reply: (status, payload), or nothing if the connection closed.
    std::optional<std::pair<std::uint8_t, std::string>> ask(Op op, const Bytes& payload)
    {
        if (client_ < 0)
            client_ = connect_client();
        wire::Writer frame;
        frame.u32(static_cast<std::uint32_t>(9 + payload.size()));
        frame.u8(static_cast<std::uint8_t>(op));
        frame.u64(++id_);
        frame.raw(payload);
        Bytes bytes = frame.take();
        if (::send(client_, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))
            return std::nullopt;
        return reply();
    }

    std::optional<std::pair<std::uint8_t, std::string>> reply()
    {
        std::uint8_t header[13];
        if (!read_all(header, sizeof header))
            return std::nullopt;
        std::uint32_t length;
        std::memcpy(&length, header, 4);
        std::string body(length - 9, '\0');
        if (!read_all(body.data(), body.size()))
            return std::nullopt;
        return std::pair{header[4], body};
    }

    bool read_all(void* into, std::size_t size)
    {
        auto* at = static_cast<char*>(into);
        while (size > 0) {
            ssize_t got = ::read(client_, at, size);
            if (got <= 0)
                return false;
            at += got;
            size -= static_cast<std::size_t>(got);
        }
        return true;
    }

    std::vector<std::pair<long, std::string>> over()
    {
        std::lock_guard lock(mutex_);
        return over_;
    }

    static constexpr std::uint8_t ok = static_cast<std::uint8_t>(JobStore::Answer::ok);
    static constexpr std::uint8_t error = static_cast<std::uint8_t>(JobStore::Answer::error);

    TempDir dir_{"canopy-test-rank-socket"};
    std::string path_;
    boost::asio::io_context io_;
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{
        boost::asio::make_work_guard(io_)};
    JobStore root_;   // used on the io thread only
    std::mutex mutex_;
    std::vector<std::pair<long, std::string>> over_;
    StoreLimit limit_{4096, "n0", [this](long rank, const std::string& line) {
                          std::lock_guard lock(mutex_);
                          over_.emplace_back(rank, line);
                      }};
    std::unique_ptr<RankSocket> socket_;
    std::thread runner_;
    int client_ = -1;
    std::uint64_t id_ = 0;
};

TEST_F(NodeSocket, WritesPastTheRanksLimitAreRefusedAndEndTheJobNamingIt)
{
    std::string value(1000, 'v');
    for (int i = 0; i < 4; ++i) {
        auto set = ask(Op::set, set_request("k" + std::to_string(i), value));
        ASSERT_TRUE(set);
        ASSERT_EQ(set->first, ok) << "set " << i << ": " << set->second;
    }
    auto refused = ask(Op::set, set_request("k4", value));
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->first, error);
    EXPECT_EQ(refused->second, "the write takes rank 0 on n0 past the job's limit on what a rank may store");
    auto got = ask(Op::get, get_request("k4", 0));
    ASSERT_TRUE(got);
    EXPECT_NE(got->first, ok) << "the refused value never reached the root";
    ASSERT_EQ(over().size(), 1u);
    EXPECT_EQ(over()[0].first, 0);
    EXPECT_EQ(over()[0].second, "rank 0 on n0 would store 4.9 KiB with a write to the canopy store, over the limit "
                                "of 4 KiB a rank (raise it with --rank-store-limit or [job] rank_store_limit)");
}

TEST_F(NodeSocket, AKeyWrittenAgainOrDeletedCountsOnlyOnce)
{
    for (int i = 0; i < 20; ++i) {
        auto set = ask(Op::set, set_request("same", std::string(3000, 'a' + i % 26)));
        ASSERT_TRUE(set);
        ASSERT_EQ(set->first, ok) << "set " << i;
        auto counter = ask(Op::add, add_request("counter", 1));
        ASSERT_TRUE(counter);
        ASSERT_EQ(counter->first, ok) << "add " << i;
    }
    ASSERT_TRUE(ask(Op::delete_key, text("same")));
    auto other = ask(Op::set, set_request("other", std::string(3000, 'o')));
    ASSERT_TRUE(other);
    EXPECT_EQ(other->first, ok) << "a deleted key no longer counts";
    EXPECT_TRUE(over().empty());
}

TEST_F(NodeSocket, ARequestLongerThanTheLimitIsRefusedUnread)
{
    client_ = connect_client();
    wire::Writer frame;
    frame.u32(64u << 20);   // claims 64 MiB: the daemon must not read, let alone keep, it
    frame.u8(static_cast<std::uint8_t>(Op::set));
    Bytes bytes = frame.take();
    ASSERT_EQ(::send(client_, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
    EXPECT_FALSE(reply()) << "the connection closes";
    ASSERT_EQ(over().size(), 1u);
    EXPECT_EQ(over()[0].second.find("rank 0 on n0 would store 64 MiB with a request to the canopy store"), 0u)
        << over()[0].second;
}

TEST_F(NodeSocket, ARanksChildWritesUnderItsRankAndAStrangersWritesAreRefused)
{
    // The rank is this process; a child it started writes as the rank.
    int done[2];
    ASSERT_EQ(::pipe(done), 0);
    pid_t child = ::fork();
    if (child == 0) {
        ::close(done[0]);
        client_ = connect_client();
        auto set = ask(Op::set, set_request("from-child", std::string(4000, 'c')));
        char verdict = set && set->first == ok ? 'y' : 'n';
        (void)::write(done[1], &verdict, 1);
        ::_exit(0);
    }
    ::close(done[1]);
    char verdict = 0;
    ASSERT_EQ(::read(done[0], &verdict, 1), 1);
    ::close(done[0]);
    ::waitpid(child, nullptr, 0);
    EXPECT_EQ(verdict, 'y');
    auto mine = ask(Op::set, set_request("from-rank", std::string(200, 'r')));
    ASSERT_TRUE(mine);
    EXPECT_EQ(mine->first, error) << "the child's write counted against the rank";

    // A process that is no rank's (here: once the rank has exited, as far as the socket knows) cannot write.
    std::promise<void> exited;
    boost::asio::post(io_, [&] {
        socket_->rank_exited(0, 0);
        exited.set_value();
    });
    exited.get_future().wait();
    auto stranger = ask(Op::set, set_request("k", "v"));
    ASSERT_TRUE(stranger);
    EXPECT_EQ(stranger->first, error);
    EXPECT_NE(stranger->second.find("is not one of the job's ranks"), std::string::npos) << stranger->second;
    auto read = ask(Op::get, get_request("from-child", 0));
    ASSERT_TRUE(read);
    EXPECT_EQ(read->first, ok) << "reads are not counted";
}

} // namespace
} // namespace canopy
