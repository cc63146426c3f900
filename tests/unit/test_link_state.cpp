// A tree link's lifecycle: the moves its table allows and refuses, and the states a real link goes through as it
// ends in order, over loopback.
#include <array>
#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <gtest/gtest.h>

#include "tree/link.hpp"
#include "tree/link_state.hpp"
#include "wire/messages.hpp"
#include "loopback_sockets.hpp"

namespace canopy {
namespace {

using namespace std::chrono_literals;

constexpr LinkState all_states[] = {LinkState::open, LinkState::flushing, LinkState::our_side_ended,
                                    LinkState::closed, LinkState::peer_silent};

TEST(LinkStateTable, AnOrderlyEndGoesOpenFlushingOurSideEndedClosed)
{
    EXPECT_TRUE(link_may_move(LinkState::open, LinkState::flushing));
    EXPECT_TRUE(link_may_move(LinkState::flushing, LinkState::our_side_ended));
    EXPECT_TRUE(link_may_move(LinkState::our_side_ended, LinkState::closed));
}

TEST(LinkStateTable, AnEndedLinkMovesNowhere)
{
    for (LinkState from : {LinkState::closed, LinkState::peer_silent})
        for (LinkState to : all_states)
            EXPECT_FALSE(link_may_move(from, to)) << link_state_name(from) << " -> " << link_state_name(to);
}

TEST(LinkStateTable, NothingGoesBackNorStaysPut)
{
    for (LinkState state : all_states) {
        EXPECT_FALSE(link_may_move(state, LinkState::open)) << link_state_name(state);
        EXPECT_FALSE(link_may_move(state, state)) << link_state_name(state);
    }
    EXPECT_FALSE(link_may_move(LinkState::our_side_ended, LinkState::flushing));
}

TEST(LinkStateTable, OnlyALinkThatStillBeatsCanFindItsPeerSilent)
{
    EXPECT_TRUE(link_may_move(LinkState::open, LinkState::peer_silent));
    EXPECT_TRUE(link_may_move(LinkState::flushing, LinkState::peer_silent));
    EXPECT_FALSE(link_may_move(LinkState::our_side_ended, LinkState::peer_silent));   // its heartbeat has stopped
}

// A Link on one end of a loopback connection, the peer a plain socket on the other.
class LinkEnds : public ::testing::Test {
protected:
    void SetUp() override
    {
        auto [near_socket, far_socket] = loopback_sockets(io_);
        far_ = std::make_unique<tcp::socket>(std::move(far_socket));
        link_ = std::make_shared<Link>(std::move(near_socket), "peer");
        link_->start([](wire::Frame) {}, [this](const std::string& reason) { closed_ = reason; });
    }

    asio::io_context io_;
    std::shared_ptr<Link> link_;
    std::unique_ptr<tcp::socket> far_;
    std::optional<std::string> closed_;
};

TEST_F(LinkEnds, AnOrderlyEndSendsOurFinThenClosesWhenThePeerDoes)
{
    EXPECT_EQ(link_->state(), LinkState::open);
    link_->send(wire::to_frame(wire::Heartbeat{1}));
    link_->close_after_flush(5.0);
    EXPECT_EQ(link_->state(), LinkState::flushing);   // the frame is still being written
    link_->send(wire::to_frame(wire::Heartbeat{2}));   // refused: nothing more is taken
    io_.run_for(200ms);
    io_.restart();
    EXPECT_EQ(link_->state(), LinkState::our_side_ended);
    EXPECT_TRUE(link_->is_open());   // it still reads, waiting for the peer's FIN
    EXPECT_FALSE(closed_);

    std::array<std::uint8_t, 64> received;
    boost::system::error_code error;
    std::size_t got = asio::read(*far_, asio::buffer(received), error);
    EXPECT_EQ(error, asio::error::eof);   // our FIN came after exactly one frame
    EXPECT_EQ(got, wire::to_frame(wire::Heartbeat{1}).size());
    far_->close();
    io_.run_for(200ms);
    EXPECT_EQ(link_->state(), LinkState::closed);
    EXPECT_EQ(closed_, "");
    EXPECT_FALSE(link_->peer_silent());
}

TEST_F(LinkEnds, ACloseWhileFlushingDropsTheQueueAndEndsTheLinkOnce)
{
    link_->send(wire::to_frame(wire::Heartbeat{1}));
    link_->close_after_flush(5.0);
    link_->close("the owner gave up");
    EXPECT_EQ(link_->state(), LinkState::closed);
    EXPECT_EQ(closed_, "the owner gave up");
    link_->close("again");   // an ended link stays as it ended
    link_->close_after_flush(1.0);
    EXPECT_EQ(link_->state(), LinkState::closed);
    EXPECT_EQ(closed_, "the owner gave up");
}

} // namespace
} // namespace canopy
