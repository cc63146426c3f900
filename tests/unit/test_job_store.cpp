// The job-wide store behaves like torch's HashStore: set/get/add/compare_set/check/delete, blocking gets and waits.
#include <gtest/gtest.h>

#include <cstring>

#include "collective/job_store.hpp"

namespace canopy {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Op = JobStore::Op;
using Answer = JobStore::Answer;

Bytes text(std::string_view s) { return Bytes(s.begin(), s.end()); }

template <typename T>
void put(Bytes& out, T value)
{
    std::size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &value, sizeof(T));
}

Bytes sized(std::string_view s)
{
    Bytes out;
    put<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
    return out;
}

Bytes cat(Bytes a, const Bytes& b)
{
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// Runs one request and returns its reply, or nothing if it is still waiting.
std::optional<JobStore::Reply> ask(JobStore& store, Op op, const Bytes& payload, std::int64_t now = 0)
{
    std::optional<JobStore::Reply> reply;
    store.serve(static_cast<std::uint8_t>(op), payload, [&](JobStore::Reply r) { reply = std::move(r); }, now);
    return reply;
}

Bytes get_request(std::string_view key, std::uint32_t timeout_ms)
{
    Bytes out;
    put(out, timeout_ms);
    return cat(out, text(key));
}

TEST(JobStore, SetThenGetReturnsTheValueAndSetOverwrites)
{
    JobStore store;
    ASSERT_EQ(ask(store, Op::set, cat(sized("k"), text("one")))->answer, Answer::ok);
    EXPECT_EQ(ask(store, Op::get, get_request("k", 0))->payload, text("one"));
    ask(store, Op::set, cat(sized("k"), text("two")));
    EXPECT_EQ(ask(store, Op::get, get_request("k", 0))->payload, text("two"));
}

TEST(JobStore, GetOfAMissingKeyWaitsUntilItIsSetOrTimesOut)
{
    JobStore store;
    EXPECT_EQ(ask(store, Op::get, get_request("late", 0))->answer, Answer::not_found);
    std::optional<JobStore::Reply> waiting;
    store.serve(static_cast<std::uint8_t>(Op::get), get_request("late", 1000),
                [&](JobStore::Reply r) { waiting = std::move(r); }, 0);
    EXPECT_FALSE(waiting);
    ask(store, Op::set, cat(sized("late"), text("here")), 10);
    ASSERT_TRUE(waiting);
    EXPECT_EQ(waiting->payload, text("here"));

    std::optional<JobStore::Reply> expires;
    store.serve(static_cast<std::uint8_t>(Op::get), get_request("never", 100),
                [&](JobStore::Reply r) { expires = std::move(r); }, 0);
    EXPECT_EQ(store.expire(50), std::optional<std::int64_t>(100));
    EXPECT_FALSE(expires);
    store.expire(100);
    ASSERT_TRUE(expires);
    EXPECT_EQ(expires->answer, Answer::timeout);
    EXPECT_EQ(store.waiting(), 0u);
}

TEST(JobStore, AddCountsInDecimalTextLikeTorch)
{
    JobStore store;
    Bytes add;
    put<std::int64_t>(add, 5);
    auto first = ask(store, Op::add, cat(add, text("n")));
    std::int64_t value = 0;
    std::memcpy(&value, first->payload.data(), sizeof value);
    EXPECT_EQ(value, 5);
    Bytes minus;
    put<std::int64_t>(minus, -2);
    ask(store, Op::add, cat(minus, text("n")));
    EXPECT_EQ(ask(store, Op::get, get_request("n", 0))->payload, text("3"));
    ask(store, Op::set, cat(sized("word"), text("abc")));
    EXPECT_EQ(ask(store, Op::add, cat(add, text("word")))->answer, Answer::error);
}

TEST(JobStore, CompareSetFollowsHashStore)
{
    JobStore store;
    // Missing key, non-empty expected: nothing set, expected returned.
    auto r = ask(store, Op::compare_set, cat(cat(sized("c"), sized("x")), text("new")));
    EXPECT_EQ(r->payload, text("x"));
    EXPECT_EQ(ask(store, Op::get, get_request("c", 0))->answer, Answer::not_found);
    // Missing key, empty expected: set.
    r = ask(store, Op::compare_set, cat(cat(sized("c"), sized("")), text("first")));
    EXPECT_EQ(r->payload, text("first"));
    // Existing key, wrong expected: unchanged, current returned.
    r = ask(store, Op::compare_set, cat(cat(sized("c"), sized("nope")), text("second")));
    EXPECT_EQ(r->payload, text("first"));
    // Existing key, right expected: replaced.
    r = ask(store, Op::compare_set, cat(cat(sized("c"), sized("first")), text("second")));
    EXPECT_EQ(r->payload, text("second"));
}

TEST(JobStore, CheckDeleteNumKeysAndWait)
{
    JobStore store;
    Bytes two_keys;
    put<std::uint32_t>(two_keys, 2);
    two_keys = cat(cat(two_keys, sized("a")), sized("b"));
    EXPECT_EQ(ask(store, Op::check, two_keys)->payload, Bytes{0});
    Bytes no_wait;
    put<std::uint32_t>(no_wait, 0);   // do not wait: times out at once
    EXPECT_EQ(ask(store, Op::wait, cat(no_wait, two_keys))->answer, Answer::timeout);
    Bytes wait;
    put<std::uint32_t>(wait, JobStore::wait_forever);
    wait = cat(wait, two_keys);
    std::optional<JobStore::Reply> woken;
    store.serve(static_cast<std::uint8_t>(Op::wait), wait, [&](JobStore::Reply r) { woken = std::move(r); }, 0);
    ask(store, Op::set, cat(sized("a"), text("1")));
    EXPECT_FALSE(woken);   // b is still missing
    EXPECT_EQ(store.expire(1'000'000'000), std::nullopt);   // for ever: no deadline
    ask(store, Op::set, cat(sized("b"), text("2")));
    ASSERT_TRUE(woken);
    EXPECT_EQ(woken->answer, Answer::ok);
    EXPECT_EQ(ask(store, Op::check, two_keys)->payload, Bytes{1});
    std::int64_t keys = 0;
    std::memcpy(&keys, ask(store, Op::num_keys, {})->payload.data(), sizeof keys);
    EXPECT_EQ(keys, 2);
    EXPECT_EQ(ask(store, Op::remove, text("a"))->payload, Bytes{1});
    EXPECT_EQ(ask(store, Op::remove, text("a"))->payload, Bytes{0});
}

TEST(JobStore, MalformedOrUnknownRequestsAreErrors)
{
    JobStore store;
    EXPECT_EQ(ask(store, Op::set, Bytes{9, 0})->answer, Answer::error);
    EXPECT_EQ(ask(store, static_cast<Op>(77), {})->answer, Answer::error);
}

} // namespace
} // namespace canopy
