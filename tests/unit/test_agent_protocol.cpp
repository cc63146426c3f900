// libcanopy's side of the daemon socket protocol agrees with the root's JobStore, and replies parse as framed.
#include <gtest/gtest.h>

#include <cstring>

#include "api/agent_protocol.hpp"
#include "collective/job_store.hpp"

namespace canopy {
namespace {

namespace agent = api::agent;
using Bytes = std::vector<std::uint8_t>;

// What the daemon does with a request: strip the frame header and hand op and payload to the store.
JobStore::Reply through_store(JobStore& store, agent::Op op, const std::string& payload)
{
    std::string frame = agent::encode_request(op, 7, payload);
    std::uint32_t length = 0;
    std::memcpy(&length, frame.data(), 4);
    EXPECT_EQ(length, frame.size() - 4);
    EXPECT_EQ(static_cast<std::uint8_t>(frame[4]), static_cast<std::uint8_t>(op));
    Bytes body(frame.begin() + 13, frame.end());
    JobStore::Reply reply;
    bool answered = false;
    store.serve(static_cast<std::uint8_t>(op), body, [&](JobStore::Reply r) {
        reply = std::move(r);
        answered = true;
    }, 0);
    EXPECT_TRUE(answered);
    return reply;
}

std::string text(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

TEST(AgentProtocol, ClientRequestsMeanTheSameToTheRootStore)
{
    JobStore store;
    EXPECT_EQ(through_store(store, agent::Op::set, agent::set_payload("addr", "10.0.0.1:29500")).answer,
              JobStore::Answer::ok);
    EXPECT_EQ(text(through_store(store, agent::Op::get, agent::get_payload(0, "addr")).payload), "10.0.0.1:29500");
    auto added = through_store(store, agent::Op::add, agent::add_payload(3, "count"));
    agent::Reply as_client{0, 7, text(added.payload)};
    auto value = agent::reply_i64(as_client);
    ASSERT_TRUE(value);
    EXPECT_EQ(value.value(), 3);
    EXPECT_EQ(text(through_store(store, agent::Op::compare_set, agent::compare_set_payload("addr", "10.0.0.1:29500", "x"))
                       .payload),
              "x");
    auto checked = through_store(store, agent::Op::check, agent::check_payload({"addr", "count"}));
    auto flag = agent::reply_flag(agent::Reply{0, 7, text(checked.payload)});
    ASSERT_TRUE(flag);
    EXPECT_TRUE(flag.value());
    EXPECT_EQ(through_store(store, agent::Op::wait, agent::wait_payload(0, {"addr", "missing"})).answer,
              JobStore::Answer::timeout);
}

TEST(AgentProtocol, RepliesParseOnlyWhenWhole)
{
    // u32 len | u8 status | u64 id | payload, as the daemon's AppServer writes it.
    std::string frame(4 + 9 + 2, '\0');
    std::uint32_t length = 9 + 2;
    std::memcpy(frame.data(), &length, 4);
    frame[4] = 1;
    std::uint64_t id = 42;
    std::memcpy(frame.data() + 5, &id, 8);
    frame[13] = 'o';
    frame[14] = 'k';
    agent::Reply reply;
    auto partial = agent::parse_reply(std::string_view(frame).substr(0, 10), reply);
    ASSERT_TRUE(partial);
    EXPECT_FALSE(partial.value().has_value());
    auto whole = agent::parse_reply(frame + "next", reply);
    ASSERT_TRUE(whole);
    ASSERT_TRUE(whole.value().has_value());
    EXPECT_EQ(*whole.value(), frame.size());
    EXPECT_EQ(reply.status, 1);
    EXPECT_EQ(reply.id, 42u);
    EXPECT_EQ(reply.payload, "ok");
}

TEST(AgentProtocol, MarkFramesCarryRankTimeDurationAndName)
{
    std::string frame = agent::encode_mark(5, 1'000'000'123, 250, "first_step");
    ASSERT_EQ(frame.size(), 4u + 9u + 20u + 10u);
    EXPECT_EQ(static_cast<std::uint8_t>(frame[4]), 1);   // MARK
    std::uint32_t rank = 0;
    std::int64_t time_ns = 0, duration_ns = 0;
    std::memcpy(&rank, frame.data() + 13, 4);
    std::memcpy(&time_ns, frame.data() + 17, 8);
    std::memcpy(&duration_ns, frame.data() + 25, 8);
    EXPECT_EQ(rank, 5u);
    EXPECT_EQ(time_ns, 1'000'000'123);
    EXPECT_EQ(duration_ns, 250);
    EXPECT_EQ(frame.substr(33), "first_step");
}

} // namespace
} // namespace canopy
