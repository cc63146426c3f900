// Callbacks guarded by their owner's Lifetime: they run while it lives, and are dropped once it has ended.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <gtest/gtest.h>

#include "util/lifetime.hpp"

using namespace canopy;

TEST(Lifetime, GuardedWorkRunsWhileTheOwnerLives)
{
    Lifetime lifetime;
    int runs = 0;
    auto work = lifetime.guard([&runs] { ++runs; });
    work();
    work();
    EXPECT_EQ(runs, 2);
    EXPECT_FALSE(lifetime.ended());
}

TEST(Lifetime, GuardedWorkIsDroppedAfterEnd)
{
    Lifetime lifetime;
    int runs = 0;
    auto work = lifetime.guard([&runs] { ++runs; });
    lifetime.end();
    lifetime.end();   // a stop and then the destructor: ending twice is ending once
    work();
    EXPECT_EQ(runs, 0);
    EXPECT_TRUE(lifetime.ended());
}

TEST(Lifetime, GuardedWorkIsDroppedOnceTheOwnerIsDestroyed)
{
    int runs = 0;
    auto lifetime = std::make_unique<Lifetime>();
    auto work = lifetime->guard([&runs] { ++runs; });
    lifetime.reset();
    work();
    EXPECT_EQ(runs, 0);
}

TEST(Lifetime, GuardedWorkGetsItsArguments)
{
    Lifetime lifetime;
    std::vector<std::string> got;
    auto moved = std::make_unique<int>(7);
    auto work = lifetime.guard([&got](const std::string& word, std::unique_ptr<int> number) {
        got.push_back(word + std::to_string(*number));
    });
    work(std::string("seven "), std::move(moved));   // a move-only argument is forwarded, not copied
    EXPECT_EQ(got, std::vector<std::string>{"seven 7"});
}

TEST(Lifetime, GuardsAnAsioTimerHandler)
{
    boost::asio::io_context io;
    boost::asio::steady_timer before_end(io, std::chrono::steady_clock::duration::zero());
    boost::asio::steady_timer after_end(io, std::chrono::steady_clock::duration::zero());
    auto lifetime = std::make_unique<Lifetime>();
    std::vector<boost::system::error_code> fired;
    before_end.async_wait(
        lifetime->guard([&fired](const boost::system::error_code& error) { fired.push_back(error); }));
    io.run();
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_FALSE(fired[0]);

    bool late_ran = false;
    after_end.async_wait(lifetime->guard([&late_ran](const boost::system::error_code&) { late_ran = true; }));
    lifetime.reset();   // the owner goes while its handler is queued
    io.restart();
    io.run();
    EXPECT_FALSE(late_ran);
}

TEST(Lifetime, AWatchSeesTheEnd)
{
    auto lifetime = std::make_unique<Lifetime>();
    Lifetime::Watch watch = lifetime->watch();
    Lifetime::Watch copy = watch;
    EXPECT_TRUE(watch.alive());
    lifetime.reset();   // as user code called from a callback may destroy the owner
    EXPECT_FALSE(watch.alive());
    EXPECT_FALSE(copy.alive());
}
