// A parent's one child daemon, played by the test over a real loopback socket: ChildSet launches it with a start
// function that only records where to connect, and the test connects when it chooses, doing the real handshake.
#pragma once

#include <memory>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <gtest/gtest.h>

#include "tree/children.hpp"
#include "tree/link.hpp"

namespace canopy {

// Events for a parent whose test watches only its child's end: a child that fails to start fails the test.
inline ChildSet::Events child_events_ignored()
{
    ChildSet::Events events;
    events.frame = [](long, wire::Frame) {};
    events.closed = [](long, const std::string&) {};
    events.start_failed = [](long, const std::string& message) { ADD_FAILURE() << message; };
    events.log_line = [](long, const std::string&) {};
    events.all_finished = [] {};
    events.connected = [](long) {};
    return events;
}

// Launches position 1 (host `host`) of a 10-position tree under `children`; returns the endpoint it would connect
// to, once `io` has run the launch ("" if it did not).
inline std::string launch_one_child(asio::io_context& io, ChildSet& children, const std::string& host)
{
    std::string endpoint;
    children.launch({ChildLaunch{1, host, {}}}, 1, 10, 30, true,
                    [&](const ChildLaunch&, const std::string& parent, const auth::Key&) -> Status {
                        endpoint = parent;
                        return {};
                    });
    io.run_for(std::chrono::milliseconds(50));
    io.restart();
    return endpoint;
}

// Connects the child to `endpoint` as position 1 and sets `link` to its end once joined; each frame it receives
// goes to `on_frame`. Runs on `io`.
inline void connect_child(asio::io_context& io, const std::string& endpoint, const auth::Key& key,
                          std::function<void(wire::Frame)> on_frame, std::shared_ptr<Link>& link)
{
    asio::co_spawn(
        io,
        [&io, endpoint, key, on_frame = std::move(on_frame), &link]() -> asio::awaitable<void> {
            tcp::socket socket(io);
            auto colon = endpoint.rfind(':');
            auto port = static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1)));
            boost::system::error_code error;
            co_await socket.async_connect(tcp::endpoint(asio::ip::make_address(endpoint.substr(0, colon)), port),
                                          asio::redirect_error(asio::use_awaitable, error));
            EXPECT_FALSE(error) << error.message();
            auto joined = co_await connect_to_parent(socket, key, 1, 10, 0);
            EXPECT_TRUE(joined) << joined.error().message;
            link = std::make_shared<Link>(std::move(socket), "parent");
            link->start(on_frame, [](const std::string&) {});
        },
        asio::detached);
}

} // namespace canopy
