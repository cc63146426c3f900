// The ranks' socket protocol, described once (wire/rank_socket.hpp): every request round-trips, its bytes are the
// layout docs/libcanopy.md gives (built by hand in store_requests.hpp), and the root's JobStore reads them.
#include <gtest/gtest.h>

#include <cstring>

#include "collective/job_store.hpp"
#include "store_requests.hpp"
#include "wire/rank_socket.hpp"

namespace canopy {
namespace {

using Bytes = std::vector<std::uint8_t>;
using namespace store_requests;

template <typename Request>
Request round_trip(const Request& request)
{
    auto decoded = wire::decode_store_operation(static_cast<std::uint8_t>(Request::op), wire::encode_fields(request));
    EXPECT_TRUE(decoded) << (decoded ? "" : decoded.error().message);
    auto* typed = decoded ? std::get_if<Request>(&*decoded) : nullptr;
    EXPECT_NE(typed, nullptr) << Request::name << " decoded as another operation";
    return typed ? *typed : Request{};
}

TEST(RankSocketProtocol, EveryStoreRequestRoundTripsWithEveryFieldSet)
{
    auto set = round_trip(wire::StoreSet{"key", std::string("v\0lue", 5)});
    EXPECT_EQ(set.key, "key");
    EXPECT_EQ(set.value, std::string("v\0lue", 5));
    auto get = round_trip(wire::StoreGet{1500, "k"});
    EXPECT_EQ(get.timeout_ms, 1500u);
    EXPECT_EQ(get.key, "k");
    auto add = round_trip(wire::StoreAdd{-7, "counter"});
    EXPECT_EQ(add.delta, -7);
    EXPECT_EQ(add.key, "counter");
    auto swap = round_trip(wire::StoreCompareSet{"k", "old", "new"});
    EXPECT_EQ(swap.key, "k");
    EXPECT_EQ(swap.expected, "old");
    EXPECT_EQ(swap.desired, "new");
    EXPECT_EQ(round_trip(wire::StoreCheck{{"a", "", "c"}}).keys, (std::vector<std::string>{"a", "", "c"}));
    EXPECT_EQ(round_trip(wire::StoreDelete{"gone"}).key, "gone");
    round_trip(wire::StoreNumKeys{});
    auto wait = round_trip(wire::StoreWait{wire::store_wait_forever, {"x", "y"}});
    EXPECT_EQ(wait.timeout_ms, wire::store_wait_forever);
    EXPECT_EQ(wait.keys, (std::vector<std::string>{"x", "y"}));
}

TEST(RankSocketProtocol, RequestsHaveTheDocumentedByteLayout)
{
    EXPECT_EQ(wire::encode_fields(wire::StoreSet{"k", "one"}), set_request("k", "one"));
    EXPECT_EQ(wire::encode_fields(wire::StoreGet{250, "k"}), get_request("k", 250));
    EXPECT_EQ(wire::encode_fields(wire::StoreAdd{3, "count"}), add_request("count", 3));
    EXPECT_EQ(wire::encode_fields(wire::StoreCompareSet{"k", "old", "new"}), cat(cat(sized("k"), sized("old")), text("new")));
    EXPECT_EQ(wire::encode_fields(wire::StoreCheck{{"a", "b"}}), keys_request({"a", "b"}));
    EXPECT_EQ(wire::encode_fields(wire::StoreDelete{"k"}), text("k"));
    EXPECT_EQ(wire::encode_fields(wire::StoreWait{0, {"a"}}), wait_request({"a"}, 0));
    // Replies: a value as its bytes, a count as 8 bytes, a flag as one.
    EXPECT_EQ(wire::encode_fields(wire::StoreValue{"v"}), text("v"));
    Bytes three;
    put<std::int64_t>(three, 3);
    EXPECT_EQ(wire::encode_fields(wire::StoreCount{3}), three);
    EXPECT_EQ(wire::encode_fields(wire::StoreFlag{true}), Bytes{1});
}

TEST(RankSocketProtocol, MalformedAndUnknownRequestsAreErrorsNamingThem)
{
    auto unknown = wire::decode_store_operation(99, Bytes{});
    ASSERT_FALSE(unknown);
    EXPECT_NE(unknown.error().message.find("unknown store operation 99"), std::string::npos);
    // A key longer than the request, and a key count no request could hold, are refused before any allocation.
    auto long_key = wire::decode_store_operation(static_cast<std::uint8_t>(wire::RankSocketOp::set), Bytes{9, 0, 0, 0, 'k'});
    ASSERT_FALSE(long_key);
    EXPECT_NE(long_key.error().message.find("store set"), std::string::npos) << long_key.error().message;
    auto many = wire::decode_store_operation(static_cast<std::uint8_t>(wire::RankSocketOp::check),
                                             Bytes{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0});
    ASSERT_FALSE(many);
    EXPECT_NE(many.error().message.find("store check"), std::string::npos) << many.error().message;
    auto short_get = wire::decode_store_operation(static_cast<std::uint8_t>(wire::RankSocketOp::get), Bytes{1, 0});
    EXPECT_FALSE(short_get);
}

// What the daemon does with a request: strip the frame header and hand op and payload to the store.
template <typename Request>
JobStore::Reply through_store(JobStore& store, const Request& request)
{
    auto frame = wire::encode_rank_frame(static_cast<std::uint8_t>(Request::op), 7, wire::encode_fields(request));
    wire::RankFrame read;
    auto used = wire::next_rank_frame(frame, read);
    EXPECT_TRUE(used && *used && **used == frame.size());
    EXPECT_EQ(read.id, 7u);
    JobStore::Reply reply;
    bool answered = false;
    store.serve(read.code, read.body, [&](JobStore::Reply r) {
        reply = std::move(r);
        answered = true;
    }, 0);
    EXPECT_TRUE(answered);
    return reply;
}

template <typename Reply>
Reply as_client(const JobStore::Reply& reply)
{
    EXPECT_EQ(reply.answer, JobStore::Answer::ok);
    auto decoded = wire::decode_fields<Reply>(reply.payload, Reply::name);
    EXPECT_TRUE(decoded) << (decoded ? "" : decoded.error().message);
    return decoded ? *decoded : Reply{};
}

TEST(RankSocketProtocol, ClientRequestsMeanTheSameToTheRootStore)
{
    JobStore store;
    EXPECT_EQ(through_store(store, wire::StoreSet{"addr", "10.0.0.1:29500"}).answer, JobStore::Answer::ok);
    EXPECT_EQ(as_client<wire::StoreValue>(through_store(store, wire::StoreGet{0, "addr"})).value, "10.0.0.1:29500");
    EXPECT_EQ(as_client<wire::StoreCount>(through_store(store, wire::StoreAdd{3, "count"})).value, 3);
    EXPECT_EQ(as_client<wire::StoreValue>(through_store(store, wire::StoreCompareSet{"addr", "10.0.0.1:29500", "x"})).value,
              "x");
    EXPECT_TRUE(as_client<wire::StoreFlag>(through_store(store, wire::StoreCheck{{"addr", "count"}})).value);
    EXPECT_EQ(through_store(store, wire::StoreWait{0, {"addr", "missing"}}).answer, JobStore::Answer::timeout);
    EXPECT_EQ(as_client<wire::StoreCount>(through_store(store, wire::StoreNumKeys{})).value, 2);
    EXPECT_TRUE(as_client<wire::StoreFlag>(through_store(store, wire::StoreDelete{"addr"})).value);
    auto refused = through_store(store, wire::StoreAdd{1, "missing-then-text"});
    EXPECT_EQ(refused.answer, JobStore::Answer::ok);
    through_store(store, wire::StoreSet{"text", "abc"});
    auto not_a_number = through_store(store, wire::StoreAdd{1, "text"});
    ASSERT_EQ(not_a_number.answer, JobStore::Answer::error);
    auto why = wire::decode_fields<wire::StoreFailure>(not_a_number.payload, wire::StoreFailure::name);
    ASSERT_TRUE(why);
    EXPECT_NE(why->message.find("'text' holds 'abc', not a decimal integer"), std::string::npos) << why->message;
}

TEST(RankSocketProtocol, FramesParseOnlyWhenWhole)
{
    // u32 len | u8 status | u64 id | payload, as the daemon's AppServer writes it.
    auto frame = wire::encode_rank_frame(1, 42, text("ok"));
    ASSERT_EQ(frame.size(), 4u + 9u + 2u);
    std::uint32_t length = 0;
    std::memcpy(&length, frame.data(), 4);
    EXPECT_EQ(length, 11u);
    wire::RankFrame reply;
    auto partial = wire::next_rank_frame(std::span(frame).first(10), reply);
    ASSERT_TRUE(partial);
    EXPECT_FALSE(partial.value().has_value());
    auto stream = cat(frame, text("next"));
    auto whole = wire::next_rank_frame(stream, reply);
    ASSERT_TRUE(whole);
    ASSERT_TRUE(whole.value().has_value());
    EXPECT_EQ(*whole.value(), frame.size());
    EXPECT_EQ(reply.code, 1);
    EXPECT_EQ(reply.id, 42u);
    EXPECT_EQ(reply.body, text("ok"));
    // A length shorter than a header, or past the limit, is an error, not a wait for more.
    EXPECT_FALSE(wire::next_rank_frame(Bytes{3, 0, 0, 0, 0, 0, 0}, reply));
    EXPECT_FALSE(wire::next_rank_frame(Bytes{0xff, 0xff, 0xff, 0x7f}, reply));
}

TEST(RankSocketProtocol, MarkFramesCarryRankTimeDurationAndName)
{
    auto frame = wire::encode_rank_frame(static_cast<std::uint8_t>(wire::MarkRequest::op), 0,
                                         wire::encode_fields(wire::MarkRequest{5, 1'000'000'123, 250, "first_step"}));
    ASSERT_EQ(frame.size(), 4u + 9u + 20u + 10u);
    EXPECT_EQ(frame[4], 1);   // MARK
    std::uint32_t rank = 0;
    std::int64_t time_ns = 0, duration_ns = 0;
    std::memcpy(&rank, frame.data() + 13, 4);
    std::memcpy(&time_ns, frame.data() + 17, 8);
    std::memcpy(&duration_ns, frame.data() + 25, 8);
    EXPECT_EQ(rank, 5u);
    EXPECT_EQ(time_ns, 1'000'000'123);
    EXPECT_EQ(duration_ns, 250);
    EXPECT_EQ(std::string(frame.begin() + 33, frame.end()), "first_step");
}

} // namespace
} // namespace canopy
