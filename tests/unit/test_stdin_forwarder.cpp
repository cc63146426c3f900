// The window that keeps the launcher's stdin from running ahead of rank 0: the reader waits for room, rank 0's
// reports make it, and a closed window wakes the reader and sends nothing more.
#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "stdin_forwarder.hpp"

namespace canopy {
namespace {

using namespace std::chrono_literals;

TEST(StdinWindow, TheReaderWaitsUntilRankZeroHasTakenEnough)
{
    StdinWindow window(100);
    int sends = 0;
    ASSERT_TRUE(window.wait_for_room(60));
    EXPECT_TRUE(window.send(60, [&] { ++sends; }));
    EXPECT_EQ(window.on_the_way(), 60u);
    auto reader = std::async(std::launch::async, [&] { return window.wait_for_room(60); });
    EXPECT_EQ(reader.wait_for(100ms), std::future_status::timeout) << "room for 120 bytes in a window of 100";
    window.taken(20);   // 40 on the way: 60 more fit
    ASSERT_EQ(reader.wait_for(5s), std::future_status::ready);
    EXPECT_TRUE(reader.get());
    EXPECT_EQ(window.on_the_way(), 40u);
    EXPECT_EQ(sends, 1);
}

TEST(StdinWindow, ClosingWakesAWaitingReaderAndNothingIsSentAfter)
{
    StdinWindow window(10);
    ASSERT_TRUE(window.send(10, [] {}));
    auto reader = std::async(std::launch::async, [&] { return window.wait_for_room(1); });
    EXPECT_EQ(reader.wait_for(50ms), std::future_status::timeout);
    window.close();   // rank 0 closed its stdin, or the job is over
    ASSERT_EQ(reader.wait_for(5s), std::future_status::ready);
    EXPECT_FALSE(reader.get());
    bool sent = false;
    EXPECT_FALSE(window.send(1, [&] { sent = true; }));
    EXPECT_FALSE(sent);
    EXPECT_FALSE(window.wait_for_room(1));
}

TEST(StdinWindow, MoreReportedTakenThanSentLeavesNothingOnTheWay)
{
    StdinWindow window(10);
    ASSERT_TRUE(window.send(4, [] {}));
    window.taken(9);   // a dropped piece is counted by its daemon, never twice by us; still, never below zero
    EXPECT_EQ(window.on_the_way(), 0u);
}

} // namespace
} // namespace canopy
