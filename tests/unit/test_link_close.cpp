// How a tree link orders and ends what it sends: an urgent frame overtakes the bulk queued before it, a sender
// waiting for room hears once the queue is under its mark, and what a daemon sent before leaving reaches its parent
// whole, even when the parent reads slowly and keeps speaking
// (heartbeats) while the daemon leaves. And how a relay paces what it reads from its parent on its children
// (RelayPacing). A real loopback connection: the Link on one end, a plain blocking socket as the peer on the other.
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include "tree/link.hpp"
#include "tree/relay_pacing.hpp"
#include "wire/messages.hpp"

namespace canopy {
namespace {

using namespace std::chrono_literals;

// The peer's end, read with plain system calls so that the test sets its pace.
struct SlowPeer {
    int fd;

    // Reads everything up to EOF, a chunk at a time, writing a heartbeat after each chunk as a busy parent's
    // heartbeats would cross the child's last frames. Returns the bytes read, or the error that stopped it.
    std::pair<std::size_t, std::string> read_all_speaking_between_reads()
    {
        auto beat = wire::to_frame(wire::Heartbeat{1});
        std::vector<std::uint8_t> chunk(16 * 1024);
        std::size_t total = 0;
        for (;;) {
            ssize_t got = ::recv(fd, chunk.data(), chunk.size(), 0);
            if (got == 0)
                return {total, ""};
            if (got < 0)
                return {total, std::strerror(errno)};
            total += static_cast<std::size_t>(got);
            std::this_thread::sleep_for(1ms);
            ::send(fd, beat.data(), beat.size(), MSG_NOSIGNAL);   // may fail once the link is gone: that is seen above
        }
    }
};

// A Link to the parent over loopback, and the parent's end as a plain socket.
struct LinkToPeer {
    std::shared_ptr<Link> link;
    tcp::socket far;
};

LinkToPeer connect_link(asio::io_context& io, int peer_receive_buffer = 0)
{
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    if (peer_receive_buffer > 0)
        acceptor.set_option(asio::socket_base::receive_buffer_size(peer_receive_buffer));
    tcp::socket near_socket(io);
    near_socket.connect(acceptor.local_endpoint());
    tcp::socket far = acceptor.accept();
    return {std::make_shared<Link>(std::move(near_socket), "parent"), std::move(far)};
}

// Reads `count` bytes from the peer's end, or what came before an error (a failure is added, not asserted: the
// caller's io thread must be joined first).
std::vector<std::uint8_t> receive(int fd, std::size_t count)
{
    std::vector<std::uint8_t> received;
    std::vector<std::uint8_t> chunk(64 * 1024);
    while (received.size() < count) {
        ssize_t got = ::recv(fd, chunk.data(), std::min(chunk.size(), count - received.size()), 0);
        if (got <= 0) {
            ADD_FAILURE() << "after " << received.size() << " bytes: " << std::strerror(errno);
            break;
        }
        received.insert(received.end(), chunk.begin(), chunk.begin() + got);
    }
    return received;
}

TEST(LinkClose, EverythingSentBeforeLeavingReachesAPeerThatReadsSlowlyAndSpeaksMeanwhile)
{
    asio::io_context io;
    // A small receive window on the peer's side: most of what the link sends waits in its own kernel buffer when
    // it leaves, which is where a reset would drop it.
    auto [link, far] = connect_link(io, 64 * 1024);
    timeval deadline{10, 0};   // a hang fails the test instead of blocking it
    ASSERT_EQ(::setsockopt(far.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &deadline, sizeof deadline), 0);

    std::promise<std::string> closed;
    link->start([](wire::Frame) {}, [&closed](const std::string& reason) { closed.set_value(reason); });
    std::vector<std::uint8_t> last_words(4 * 1024 * 1024, 0x5a);
    auto frame = wire::encode_frame(static_cast<std::uint8_t>(wire::MessageType::output), last_words);
    std::size_t sent = frame.size();
    link->send(std::move(frame));
    link->close_after_flush(5.0);
    std::thread loop([&io] { io.run(); });

    auto [received, error] = SlowPeer{far.native_handle()}.read_all_speaking_between_reads();
    EXPECT_EQ(error, "") << "after " << received << " of " << sent << " bytes";
    EXPECT_EQ(received, sent);
    far.close();   // the parent, having read the child's end, closes its own
    auto ended = closed.get_future();
    ASSERT_EQ(ended.wait_for(5s), std::future_status::ready) << "the link still lingers after the peer closed";
    EXPECT_EQ(ended.get(), "");   // an orderly end
    loop.join();
}

TEST(LinkOrder, AnUrgentFrameGoesRightAfterTheFrameBeingWrittenAndBeforeTheQueuedBulk)
{
    asio::io_context io;
    auto [link, far] = connect_link(io);
    link->start([](wire::Frame) {}, [](const std::string&) {});
    timeval deadline{10, 0};   // a hang fails the test instead of blocking it
    ASSERT_EQ(::setsockopt(far.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &deadline, sizeof deadline), 0);

    constexpr std::size_t bulk_bytes = 1 << 20;
    constexpr int bulk_frames = 6;
    // The first send starts writing frame 0 at once; the others queue behind it until the loop runs.
    for (int i = 0; i < bulk_frames; ++i)
        link->send(std::vector<std::uint8_t>(bulk_bytes, static_cast<std::uint8_t>('0' + i)));
    link->send(std::vector<std::uint8_t>(100, 'u'), true);
    link->send(std::vector<std::uint8_t>(100, 'v'), true);
    EXPECT_EQ(link->queued_bytes(), bulk_frames * bulk_bytes + 200);
    std::thread loop([&io] { io.run_for(20s); });

    auto received = receive(far.native_handle(), bulk_frames * bulk_bytes + 200);
    // The peer has every byte; the io thread may not yet have seen the last write complete.
    std::promise<void> drained;
    asio::post(io, [sender = link, &drained] { sender->when_queued_below(1, [&drained] { drained.set_value(); }); });
    drained.get_future().wait_for(10s);
    io.stop();
    loop.join();
    ASSERT_EQ(received.size(), bulk_frames * bulk_bytes + 200);
    // Frame 0 went out whole first (a frame is never cut), then the urgent ones in their order, then the bulk.
    auto first_u = std::find(received.begin(), received.end(), 'u') - received.begin();
    auto first_v = std::find(received.begin(), received.end(), 'v') - received.begin();
    EXPECT_EQ(first_u, static_cast<std::ptrdiff_t>(bulk_bytes));
    EXPECT_EQ(first_v, static_cast<std::ptrdiff_t>(bulk_bytes + 100));
    EXPECT_EQ(received[bulk_bytes + 200], '1');
    EXPECT_EQ(received.back(), '0' + bulk_frames - 1);
    EXPECT_EQ(link->queued_bytes(), 0u);
}

TEST(LinkRoom, ASenderWaitingForRoomHearsOnceWhenTheQueueGoesUnderItsMarkAndNeverAfterAClose)
{
    asio::io_context io;
    auto connected = connect_link(io, 64 * 1024);   // not a structured binding: the lambdas below capture it
    auto& link = connected.link;
    auto& far = connected.far;
    link->start([](wire::Frame) {}, [](const std::string&) {});
    timeval deadline{10, 0};   // a hang fails the test instead of blocking it
    ASSERT_EQ(::setsockopt(far.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &deadline, sizeof deadline), 0);

    constexpr std::size_t frame_bytes = 1 << 20;
    constexpr int frames = 8;
    for (int i = 0; i < frames; ++i)
        link->send(std::vector<std::uint8_t>(frame_bytes, 'x'));
    bool room_now = false;
    link->when_queued_below(frames * frame_bytes + 1, [&] { room_now = true; });
    EXPECT_TRUE(room_now) << "a mark above the queue is room at once";
    std::vector<std::size_t> queued_when_told;
    link->when_queued_below(2 * frame_bytes, [&] { queued_when_told.push_back(link->queued_bytes()); });
    EXPECT_TRUE(queued_when_told.empty());

    std::thread loop([&io] { io.run_for(20s); });
    receive(far.native_handle(), frames * frame_bytes);
    std::promise<void> checked;
    asio::post(io, [&] {
        ASSERT_EQ(queued_when_told.size(), 1u);
        EXPECT_LT(queued_when_told.front(), 2 * frame_bytes);
        // Waiting on a link that closes: never told, as nothing will go out any more.
        link->send(std::vector<std::uint8_t>(4 * frame_bytes, 'y'));
        link->when_queued_below(frame_bytes, [&] { queued_when_told.push_back(0); });
        link->close("test");
        checked.set_value();
    });
    checked.get_future().wait_for(10s);
    io.stop();
    loop.join();
    EXPECT_EQ(queued_when_told.size(), 1u);
}

TEST(LinkClose, APeerThatNeverClosesIsLeftAfterTheLinger)
{
    asio::io_context io;
    auto [link, far] = connect_link(io);
    std::optional<std::string> closed;
    link->start([](wire::Frame) {}, [&closed](const std::string& reason) { closed = reason; });
    auto started = std::chrono::steady_clock::now();
    link->close_after_flush(0.3);
    io.run_for(5s);
    auto took = std::chrono::steady_clock::now() - started;
    ASSERT_TRUE(closed) << "the link still waits for a peer that will never close";
    EXPECT_EQ(*closed, "");
    EXPECT_GE(took, 300ms);
    EXPECT_LT(took, 3s);
}


// The parent's frames as a relay sees them, on an io thread of their own: each frame's arrival time.
struct PacedParent {
    asio::io_context io;
    LinkToPeer ends = connect_link(io);
    std::atomic<std::size_t> children_queued{0};
    RelayPacing pacing;
    std::mutex lock;
    std::vector<std::chrono::steady_clock::time_point> arrivals;
    std::thread loop;

    explicit PacedParent(RelayPacing::Marks marks)
        : pacing(io, ends.link, [this] { return children_queued.load(); }, marks)
    {
        ends.link->start(
            [this](wire::Frame) {
                {
                    std::lock_guard<std::mutex> hold(lock);
                    arrivals.push_back(std::chrono::steady_clock::now());
                }
                pacing.frame_handled();
            },
            [](const std::string&) {});
        loop = std::thread([this] { io.run_for(20s); });
    }
    ~PacedParent()
    {
        io.stop();
        loop.join();
    }
    void parent_sends_a_chunk()
    {
        auto frame = wire::encode_frame(static_cast<std::uint8_t>(wire::MessageType::fence_down),
                                        std::vector<std::uint8_t>(1000, 'c'));
        ASSERT_EQ(::send(ends.far.native_handle(), frame.data(), frame.size(), MSG_NOSIGNAL),
                  static_cast<ssize_t>(frame.size()));
    }
    // Waits up to `wait` for `count` frames to have arrived; returns how many had.
    std::size_t arrived_within(std::size_t count, std::chrono::milliseconds wait)
    {
        auto give_up = std::chrono::steady_clock::now() + wait;
        for (;;) {
            {
                std::lock_guard<std::mutex> hold(lock);
                if (arrivals.size() >= count || std::chrono::steady_clock::now() >= give_up)
                    return arrivals.size();
            }
            std::this_thread::sleep_for(1ms);
        }
    }
};

TEST(RelayPacing, ARelayStopsReadingItsParentWhileItsChildrenAreBehindAndGoesOnOnceTheyCatchUp)
{
    PacedParent relay({/*high=*/1 << 20, /*low=*/256 << 10, /*longest=*/10s});
    relay.children_queued = 2 << 20;   // the chunks forwarded so far still wait for a slow child
    relay.parent_sends_a_chunk();
    ASSERT_EQ(relay.arrived_within(1, 5s), 1u);
    relay.parent_sends_a_chunk();
    EXPECT_EQ(relay.arrived_within(2, 300ms), 1u) << "the relay read on although its children were 2 MiB behind";
    relay.children_queued = 512 << 10;   // under the high mark, over the low one: still paused
    EXPECT_EQ(relay.arrived_within(2, 100ms), 1u) << "the relay went on before its children were under the low mark";
    relay.children_queued = 0;
    EXPECT_EQ(relay.arrived_within(2, 5s), 2u) << "the relay did not read on once its children had caught up";
    EXPECT_EQ(relay.pacing.pauses(), 1u);
}

TEST(RelayPacing, AChildThatNeverCatchesUpHoldsTheParentBackNoLongerThanThePausesBound)
{
    PacedParent relay({/*high=*/1 << 20, /*low=*/256 << 10, /*longest=*/200ms});
    relay.children_queued = 8 << 20;   // a hung child: its queue never drains
    relay.parent_sends_a_chunk();
    ASSERT_EQ(relay.arrived_within(1, 5s), 1u);
    auto paused = std::chrono::steady_clock::now();
    relay.parent_sends_a_chunk();   // what a parent says next (an abort) must still get through
    ASSERT_EQ(relay.arrived_within(2, 5s), 2u) << "a child that never drains held the parent back for good";
    std::chrono::steady_clock::duration waited;
    {
        std::lock_guard<std::mutex> hold(relay.lock);
        waited = relay.arrivals[1] - paused;
    }
    EXPECT_GE(waited, 150ms);
    EXPECT_LT(waited, 2s);
}

} // namespace
} // namespace canopy
