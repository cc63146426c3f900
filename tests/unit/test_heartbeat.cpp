// Liveness of tree links: the heartbeat schedule on its own (simulated time), then LinkHeartbeat on real loopback
// sockets in one process: quiet links stay alive, busy links send no heartbeats, a silent peer is lost in time.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/write.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <gtest/gtest.h>

#include "tree/heartbeat.hpp"
#include "tree/link.hpp"
#include "wire/messages.hpp"
#include "loopback_sockets.hpp"

namespace canopy {
namespace {

using Clock = HeartbeatSchedule::Clock;
using namespace std::chrono_literals;

const Clock::time_point t0 = Clock::time_point() + 1000h;

TEST(HeartbeatSchedule, BeatsFourTimesPerTimeout)
{
    HeartbeatSchedule schedule(2.0);
    EXPECT_EQ(schedule.timeout(), 2s);
    EXPECT_EQ(schedule.interval(), 500ms);
}

TEST(HeartbeatSchedule, AQuietSideBeatsOnceItHasSentNothingForAnInterval)
{
    HeartbeatSchedule schedule(2.0);
    auto early = schedule.check(t0 + 499ms, t0, t0, false);
    EXPECT_FALSE(early.send);
    EXPECT_FALSE(early.lost);
    EXPECT_EQ(early.next, t0 + 500ms);
    auto due = schedule.check(t0 + 500ms, t0, t0, false);
    EXPECT_TRUE(due.send);
    EXPECT_FALSE(due.lost);
    EXPECT_EQ(due.next, t0 + 1000ms);   // the next beat, an interval after this one
}

TEST(HeartbeatSchedule, AnythingSentRecentlyIsBeatEnough)
{
    HeartbeatSchedule schedule(2.0);
    auto verdict = schedule.check(t0 + 900ms, t0 + 800ms, t0 + 600ms, false);
    EXPECT_FALSE(verdict.send);
    EXPECT_EQ(verdict.next, t0 + 1100ms);
}

TEST(HeartbeatSchedule, NoBeatQueuesBehindAWriteUnderWay)
{
    HeartbeatSchedule schedule(2.0);
    auto verdict = schedule.check(t0 + 1500ms, t0 + 1400ms, t0, true);
    EXPECT_FALSE(verdict.send);
    EXPECT_FALSE(verdict.lost);
    EXPECT_EQ(verdict.next, t0 + 2000ms);   // look again in an interval, not at once
}

TEST(HeartbeatSchedule, ThePeerIsLostAfterTheTimeoutOfSilenceAndNotBefore)
{
    HeartbeatSchedule schedule(2.0);
    auto almost = schedule.check(t0 + 1999ms, t0, t0 + 1900ms, false);
    EXPECT_FALSE(almost.lost);
    EXPECT_EQ(almost.next, t0 + 2000ms);   // the loss deadline comes before the next beat
    EXPECT_TRUE(schedule.check(t0 + 2000ms, t0, t0 + 1900ms, false).lost);
    // What we sent ourselves proves nothing about the peer.
    EXPECT_TRUE(schedule.check(t0 + 5s, t0, t0 + 5s, false).lost);
}

TEST(HeartbeatSchedule, TheNextLookIsNeverInThePastNorPastTheLossDeadline)
{
    HeartbeatSchedule schedule(1.0);
    for (auto received : {0ms, 100ms, 900ms})
        for (auto sent : {0ms, 100ms, 250ms, 900ms})
            for (bool pending : {false, true}) {
                auto now = t0 + 950ms;
                auto verdict = schedule.check(now, t0 + received, t0 + sent, pending);
                ASSERT_FALSE(verdict.lost);
                EXPECT_GT(verdict.next, now);
                EXPECT_LE(verdict.next, t0 + received + 1s);
            }
}

// Two sides of a quiet link in simulated time, each acting only when its schedule says to look, as LinkHeartbeat
// does. `peer_stops_at`: side B stops acting then (SIGSTOP), so A must declare it lost.
struct SimulatedLink {
    struct Side {
        Clock::time_point last_received, last_sent, next;
        std::optional<Clock::time_point> lost_at;
        long beats = 0;
    };

    explicit SimulatedLink(double timeout) : schedule(timeout) { a = b = Side{t0, t0, t0, std::nullopt, 0}; }

    void run_until(Clock::time_point end, std::optional<Clock::time_point> peer_stops_at = std::nullopt)
    {
        for (;;) {
            bool b_runs = !peer_stops_at || b.next < *peer_stops_at;
            Side& side = (!b_runs || a.next <= b.next) ? a : b;
            Side& other = &side == &a ? b : a;
            if (side.next > end || a.lost_at || b.lost_at)
                return;
            Clock::time_point now = side.next;
            auto verdict = schedule.check(now, side.last_received, side.last_sent, false);
            if (verdict.lost) {
                side.lost_at = now;
                return;
            }
            if (verdict.send) {
                side.last_sent = now;
                other.last_received = now + 1ms;   // a millisecond on the wire
                ++side.beats;
            }
            side.next = verdict.next;
        }
    }

    HeartbeatSchedule schedule;
    Side a, b;
};

TEST(HeartbeatSchedule, AQuietLinkOfHoursIsNeverLost)
{
    SimulatedLink link(1.0);
    link.run_until(t0 + 5h);
    EXPECT_FALSE(link.a.lost_at);
    EXPECT_FALSE(link.b.lost_at);
    // About four beats per timeout each way, not a flood: 5 h at 1 s is 18,000 timeouts.
    EXPECT_GT(link.a.beats, 18000 * 3);
    EXPECT_LE(link.a.beats, 18000 * 4 + 1);
}

TEST(HeartbeatSchedule, APeerThatStopsIsLostWithinTheTimeoutAndAnInterval)
{
    SimulatedLink link(2.0);
    auto stop = t0 + 10min + 123ms;
    link.run_until(t0 + 1h, stop);
    ASSERT_TRUE(link.a.lost_at);
    EXPECT_GE(*link.a.lost_at - stop, 2s - link.schedule.interval());
    EXPECT_LE(*link.a.lost_at - stop, 2s);
}

// Two ends of a loopback TCP connection: `near` as a Link, `far` as a raw socket the test drives.
class LinkPair : public ::testing::Test {
protected:
    void SetUp() override
    {
        auto [near_socket, far_socket] = loopback_sockets(io_);
        far_ = std::make_unique<tcp::socket>(std::move(far_socket));
        near_ = std::make_shared<Link>(std::move(near_socket), "peer");
        near_->start([this](wire::Frame frame) { frames_.push_back(frame.type); },
                     [this](const std::string& reason) { closed_ = reason; });
    }

    // Runs the io_context for `duration` of real time.
    void run_for(Clock::duration duration)
    {
        asio::steady_timer stop(io_, duration);
        stop.async_wait([this](const boost::system::error_code&) { io_.stop(); });
        io_.restart();
        io_.run();
    }

    asio::io_context io_;
    std::shared_ptr<Link> near_;
    std::unique_ptr<tcp::socket> far_;
    std::vector<std::uint8_t> frames_;
    std::optional<std::string> closed_;
};

TEST_F(LinkPair, ASilentPeerIsLostAfterTheTimeoutWithAReasonThatSaysSo)
{
    std::optional<std::string> lost;
    auto started = Clock::now();
    LinkHeartbeat heartbeat(io_.get_executor(), near_, 0.4, [&](const std::string& reason) {
        lost = reason;
        near_->close(reason);
        io_.stop();
    });
    run_for(5s);
    auto took = Clock::now() - started;
    ASSERT_TRUE(lost);
    EXPECT_GE(took, 400ms);
    EXPECT_LT(took, 1500ms);
    EXPECT_NE(lost->find("no heartbeat for 0."), std::string::npos) << *lost;
    EXPECT_NE(lost->find("heartbeat_timeout is 0.4 s"), std::string::npos) << *lost;
    EXPECT_EQ(closed_, lost);   // the link's owner hears it as the link's end
    EXPECT_GE(heartbeat.beats_sent(), 1u);   // and we did speak while we waited
}

TEST_F(LinkPair, HeartbeatsKeepAQuietLinkAliveAndNeverReachTheOwner)
{
    // The far end answers every heartbeat with one of its own, as a LinkHeartbeat there would on a quiet link.
    auto far_link = std::make_shared<Link>(std::move(*far_), "near");
    std::vector<std::uint8_t> far_frames;
    far_link->start([&](wire::Frame frame) { far_frames.push_back(frame.type); }, [](const std::string&) {});
    bool lost = false;
    LinkHeartbeat near_beat(io_.get_executor(), near_, 0.5, [&](const std::string&) { lost = true; });
    LinkHeartbeat far_beat(io_.get_executor(), far_link, 0.5, [&](const std::string&) { lost = true; });
    run_for(2500ms);   // five timeouts with nothing but heartbeats
    EXPECT_FALSE(lost);
    EXPECT_FALSE(closed_);
    EXPECT_GE(near_beat.beats_sent(), 12u);
    EXPECT_LE(near_beat.beats_sent(), 22u);
    EXPECT_TRUE(frames_.empty());
    EXPECT_TRUE(far_frames.empty());
}

TEST_F(LinkPair, ABusyLinkCarriesNoHeartbeats)
{
    auto far_link = std::make_shared<Link>(std::move(*far_), "near");
    far_link->start([](wire::Frame) {}, [](const std::string&) {});
    LinkHeartbeat near_beat(io_.get_executor(), near_, 0.5,
                            [](const std::string&) { FAIL() << "a busy peer was declared lost"; });
    // Both ends send real messages every 50 ms, well within a heartbeat interval.
    asio::steady_timer tick(io_);
    std::function<void()> chatter = [&] {
        near_->send(wire::to_frame(wire::Signal{10}));
        far_link->send(wire::to_frame(wire::Signal{12}));
        tick.expires_after(50ms);
        tick.async_wait([&](const boost::system::error_code& error) {
            if (!error)
                chatter();
        });
    };
    chatter();
    run_for(2s);
    EXPECT_EQ(near_beat.beats_sent(), 0u);
    EXPECT_GE(frames_.size(), 20u);
}

TEST_F(LinkPair, AStallOfOurOwnIsNotThePeersSilence)
{
    // The peer spoke while our thread was busy: its bytes wait unread, so the peer is not lost.
    bool lost = false;
    LinkHeartbeat heartbeat(io_.get_executor(), near_, 0.5, [&](const std::string&) { lost = true; });
    auto frame = wire::to_frame(wire::Signal{10});
    asio::write(*far_, asio::buffer(frame));
    std::this_thread::sleep_for(700ms);   // past the timeout before the io thread runs at all
    run_for(300ms);
    EXPECT_FALSE(lost);
    EXPECT_EQ(frames_, std::vector<std::uint8_t>{static_cast<std::uint8_t>(wire::MessageType::signal)});
}

TEST_F(LinkPair, ALongerTimeoutTakesEffectAtOnce)
{
    bool lost = false;
    LinkHeartbeat heartbeat(io_.get_executor(), near_, 0.3, [&](const std::string&) { lost = true; });
    heartbeat.set_timeout(30);
    run_for(1s);
    EXPECT_FALSE(lost);
}

TEST_F(LinkPair, AHeldPeersSilenceIsNoLossAndCountsOnlyFromTheRelease)
{
    // The launcher suspended with Ctrl-Z: its daemons hold their checks of it, and still beat.
    std::optional<Clock::time_point> lost_at;
    LinkHeartbeat heartbeat(io_.get_executor(), near_, 0.4, [&](const std::string&) { lost_at = Clock::now(); });
    heartbeat.hold(true);
    run_for(1500ms);
    EXPECT_FALSE(lost_at) << "lost while held";
    EXPECT_GE(heartbeat.beats_sent(), 3u);
    auto released = Clock::now();
    heartbeat.hold(false);
    run_for(2s);
    ASSERT_TRUE(lost_at) << "a peer silent after the release must still be lost";
    EXPECT_GE(*lost_at - released, 400ms);
    EXPECT_LT(*lost_at - released, 1500ms);
}

TEST_F(LinkPair, AKeptAliveLinkWhosePeerFallsSilentClosesSayingSo)
{
    near_->keep_alive(0.4);
    run_for(2s);
    ASSERT_TRUE(closed_);
    EXPECT_NE(closed_->find("no heartbeat for 0."), std::string::npos) << *closed_;
    EXPECT_TRUE(near_->peer_silent());   // its owner kills the peer's process at once rather than wait for it
    EXPECT_FALSE(near_->is_open());
}

TEST_F(LinkPair, AClosedLinkLeavesNoHeartbeatTimerBehind)
{
    near_->keep_alive(30);
    near_->close();
    auto started = Clock::now();
    io_.restart();
    io_.run();   // returns once nothing is left to wait for
    EXPECT_LT(Clock::now() - started, 1s);
    EXPECT_EQ(closed_, "");
    EXPECT_FALSE(near_->peer_silent());
}

TEST(HeartbeatMessage, IsAFewBytesOnTheWire)
{
    EXPECT_LE(wire::to_frame(wire::Heartbeat{1000}).size(), wire::header_size + 2);
    EXPECT_STREQ(wire::message_name(static_cast<std::uint8_t>(wire::MessageType::heartbeat)), "heartbeat");
}

} // namespace
} // namespace canopy
