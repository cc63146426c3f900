// How the root sends a staged job down the tree: the index at once and ahead of what the links have queued, as
// every node waits for it before its ranks start; the files only while the children keep up.
#include "stage_source.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.hpp"
#include "wire/codec.hpp"

namespace canopy {
namespace {

// The children's side of the route: what was broadcast, in order, and how full the links say they are.
class RecordingRoute : public BulkRoute {
public:
    struct Sent {
        std::uint8_t type;
        bool urgent;
    };
    void broadcast(std::vector<std::uint8_t> frame, bool urgent) override
    {
        auto view = wire::view_frame(frame);
        ASSERT_TRUE(view.ok());
        sent.push_back({view->type, urgent});
    }
    void send(const std::vector<long>&, std::vector<std::uint8_t>) override { ADD_FAILURE() << "sent to some"; }
    void relay(const wire::Frame&, bool) override { ADD_FAILURE() << "relayed"; }
    std::size_t max_queued_bytes() const override { return queued; }
    void child_announced(long, const wire::FabricHello&) override {}

    std::size_t count(wire::MessageType type) const
    {
        return static_cast<std::size_t>(std::count_if(sent.begin(), sent.end(), [type](const Sent& s) {
            return s.type == static_cast<std::uint8_t>(type);
        }));
    }

    std::vector<Sent> sent;
    std::size_t queued = 0;
};

TEST(StageSender, TheIndexGoesAtOnceAheadOfQueuedReadAheadAndTheFilesWaitForRoomOnTheLinks)
{
    TempDir temp("canopy-test-stage-sender");
    const std::string file = temp.path() + "/lib.so";
    std::ofstream(file, std::ios::binary) << std::string(3 * StageSender::chunk_bytes, 'x');
    auto index = stage::build_index({{file, true}}, stage::BuildOptions{{temp.path()}});
    ASSERT_TRUE(index.ok()) << index.error().message;

    boost::asio::io_context io;
    RecordingRoute route;
    route.queued = 64 * StageSender::chunk_bytes;   // the links full of a first job's read-ahead
    StageSender sender(io, route, *index);
    std::optional<Status> done;
    sender.start([&](Status status) { done = std::move(status); });
    io.run_for(std::chrono::milliseconds(50));

    ASSERT_EQ(route.count(wire::MessageType::stage_index), route.sent.size());
    ASSERT_GE(route.sent.size(), 1u);
    for (const auto& sent : route.sent)
        EXPECT_TRUE(sent.urgent);
    EXPECT_FALSE(done) << "finished while the links had no room for the file";

    route.queued = 0;   // the children caught up
    io.restart();
    for (int i = 0; i < 100 && !done; ++i)
        io.run_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(done);
    EXPECT_TRUE(done->ok()) << done->error().message;
    EXPECT_EQ(route.count(wire::MessageType::stage_content), 3u);
    for (const auto& sent : route.sent) {
        if (sent.type == static_cast<std::uint8_t>(wire::MessageType::stage_content)) {
            EXPECT_FALSE(sent.urgent) << "a file chunk overtook the read-ahead a node waits on";
        }
    }
}

} // namespace
} // namespace canopy
