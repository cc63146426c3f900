// A parent's children: what a child that connects late is sent. Daemons start their ranks before their children
// are up, so the root may push stage answers down while a child is still starting; that child must get them, after
// its plan and before anything else, or a later reply saying "pushed" would name bytes it never had.
// Real loopback sockets: the child's end does the real handshake.
#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "child_link.hpp"
#include "proc/process.hpp"
#include "tree/children.hpp"
#include "tree/link.hpp"
#include "wire/messages.hpp"

namespace canopy {
namespace {

using namespace std::chrono_literals;

// A frame that says which it is: a push naming one path.
std::vector<std::uint8_t> push_naming(const std::string& path)
{
    wire::StageFetchPush push;
    push.answers.emplace_back().path = path;
    return wire::to_frame(push);
}

// What the child received, in order: "plan" for the plan, else the path a push named.
std::string what(const wire::Frame& frame)
{
    if (frame.type == static_cast<std::uint16_t>(wire::MessageType::shutdown))
        return "plan";
    auto push = wire::decode_frame<wire::StageFetchPush>(frame);
    return push && push->answers.size() == 1 ? push->answers[0].path : "something else";
}

TEST(ChildSet, AChildThatConnectsLateGetsWhatWasBroadcastToLateChildrenRightAfterItsPlan)
{
    asio::io_context io;
    ProcessReaper reaper(io);
    auto key = auth::generate_key();
    ChildSet* set = nullptr;
    ChildSet::Events events = child_events_ignored();
    events.connected = [&](long position) { set->send(position, wire::to_frame(wire::Shutdown{false})); };
    ChildSet children(io, reaper, key, events);
    set = &children;
    ASSERT_TRUE(children.listen("127.0.0.1"));

    std::string endpoint = launch_one_child(io, children, "late-child");
    ASSERT_FALSE(endpoint.empty());
    ASSERT_EQ(children.connected_count(), 0u);

    // Before the child is up: one frame for late children too, one only for those connected now.
    children.broadcast_to_late_children_too(push_naming("/held"));
    children.broadcast(push_naming("/missed"));

    std::vector<std::string> received;
    std::shared_ptr<Link> link;
    connect_child(io, endpoint, key, [&](wire::Frame frame) { received.push_back(what(frame)); }, link);

    auto run_until = [&](std::size_t count) {
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while (received.size() < count && std::chrono::steady_clock::now() < deadline) {
            io.run_for(10ms);
            io.restart();
        }
    };
    run_until(2);
    ASSERT_EQ(children.connected_count(), 1u);
    // Once up, both kinds of broadcast reach it as they are made.
    children.broadcast_to_late_children_too(push_naming("/after"));
    children.broadcast(push_naming("/after, plain"));
    run_until(4);
    EXPECT_EQ(received, (std::vector<std::string>{"plan", "/held", "/after", "/after, plain"}));

    link->close();
    children.kill_all(SIGKILL);
    io.run_for(50ms);
}

// A daemon that never connects back: the line says what its process was doing when the bound passed, so a user can
// tell a slow node (asleep, running) from one whose kernel holds it (waiting in the kernel, and where).
TEST(ChildSet, AChildThatNeverConnectsIsNamedWithWhatItsProcessWasDoing)
{
    asio::io_context io;
    ProcessReaper reaper(io);
    ChildSet::Events events = child_events_ignored();
    std::string failure;
    events.start_failed = [&](long, const std::string& message) { failure = message; };
    ChildSet children(io, reaper, auth::generate_key(), events);
    ASSERT_TRUE(children.listen("127.0.0.1"));
    children.launch({ChildLaunch{1, "silent-host", {"sleep", "30"}}}, 1, 0.3, 30, true);
    io.run_for(2s);
    EXPECT_NE(failure.find("did not connect back within 0.3 s; sleep (pid "), std::string::npos) << failure;
    EXPECT_NE(failure.find(") still runs: state S, asleep"), std::string::npos) << failure;
    children.kill_all(SIGKILL);
    io.restart();
    io.run_for(200ms);
}

} // namespace
} // namespace canopy
