// Callbacks that outlive their owner: work reaches the owner only while it lives and is open.
#include <memory>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "util/live_link.hpp"

using namespace canopy;

namespace {

struct Owner : std::enable_shared_from_this<Owner> {
    bool open = true;
    std::vector<int> done;
    std::thread::id ran_on;
    bool is_open() const { return open; }
};

} // namespace

TEST(LiveLink, WorkReachesAnOpenOwner)
{
    boost::asio::io_context io;
    auto owner = std::make_shared<Owner>();
    LiveLink<Owner> link(io, owner);
    link.run([](Owner& o) { o.done.push_back(1); });
    link.post([](Owner& o) { o.done.push_back(2); });
    EXPECT_EQ(owner->done, std::vector<int>{1});   // posted work waits for the io thread
    io.run();
    EXPECT_EQ(owner->done, (std::vector<int>{1, 2}));
}

TEST(LiveLink, WorkForAClosedOwnerIsDropped)
{
    boost::asio::io_context io;
    auto owner = std::make_shared<Owner>();
    LiveLink<Owner> link(io, owner);
    link.post([](Owner& o) { o.done.push_back(1); });
    owner->open = false;   // closed after the post, before the io thread ran it
    link.run([](Owner& o) { o.done.push_back(2); });
    io.run();
    EXPECT_TRUE(owner->done.empty());
}

TEST(LiveLink, WorkForAnOwnerThatIsGoneIsDropped)
{
    boost::asio::io_context io;
    auto owner = std::make_shared<Owner>();
    LiveLink<Owner> link(io, owner);
    bool ran = false;
    link.post([&ran](Owner&) { ran = true; });
    owner.reset();
    io.run();
    link.run([&ran](Owner&) { ran = true; });
    EXPECT_FALSE(ran);
}

TEST(LiveLink, WorkPostedFromAnotherThreadRunsOnTheIoThread)
{
    boost::asio::io_context io;
    auto owner = std::make_shared<Owner>();
    LiveLink<Owner> link(io, owner);
    std::thread([link] { link.post([](Owner& o) { o.ran_on = std::this_thread::get_id(); }); }).join();
    io.run();
    EXPECT_EQ(owner->ran_on, std::this_thread::get_id());
}
