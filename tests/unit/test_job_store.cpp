// The job-wide store behaves like torch's HashStore: set/get/add/compare_set/check/delete, blocking gets and waits.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <set>

#include "collective/job_store.hpp"
#include "store_requests.hpp"

namespace canopy {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Op = JobStore::Op;
using Answer = JobStore::Answer;

using namespace store_requests;

// Runs one request and returns its reply, or nothing if it is still waiting.
std::optional<JobStore::Reply> ask(JobStore& store, Op op, const Bytes& payload, std::int64_t now = 0)
{
    std::optional<JobStore::Reply> reply;
    store.serve(static_cast<std::uint8_t>(op), payload, [&](JobStore::Reply r) { reply = std::move(r); }, now);
    return reply;
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
    EXPECT_EQ(ask(store, Op::delete_key, text("a"))->payload, Bytes{1});
    EXPECT_EQ(ask(store, Op::delete_key, text("a"))->payload, Bytes{0});
}

TEST(JobStore, MalformedOrUnknownRequestsAreErrors)
{
    JobStore store;
    EXPECT_EQ(ask(store, Op::set, Bytes{9, 0})->answer, Answer::error);
    EXPECT_EQ(ask(store, static_cast<Op>(77), {})->answer, Answer::error);
}

// With an invalidator, the store tracks who read what and holds writes back until their invalidations are done.
struct Tracked {
    JobStore store;
    std::vector<std::pair<long, std::string>> sent;   // invalidations, in order
    std::vector<std::function<void()>> acks;

    Tracked()
    {
        store.set_invalidator([this](long position, const std::string& key, std::function<void()> acked) {
            sent.emplace_back(position, key);
            acks.push_back(std::move(acked));
        });
    }
    std::optional<JobStore::Reply> ask(Op op, const Bytes& payload, long from)
    {
        // A held write answers later, when its invalidations are acknowledged: the reply must outlive this call.
        auto reply = std::make_shared<std::optional<JobStore::Reply>>();
        store.serve(static_cast<std::uint8_t>(op), payload, [reply](JobStore::Reply r) { *reply = std::move(r); }, 0,
                    from);
        return *reply;
    }
    void ack_all()
    {
        auto pending = std::move(acks);
        acks.clear();
        for (auto& ack : pending)
            ack();
    }
};

TEST(JobStore, ReadsRegisterTheirReaderAndWritesInvalidateThemBeforeReturning)
{
    Tracked t;
    t.ask(Op::set, cat(sized("k"), text("v1")), 1);
    EXPECT_TRUE(t.store.holders("k").empty());   // a writer is not a reader
    t.ask(Op::get, get_request("k", 0), 2);
    Bytes one_key;
    put<std::uint32_t>(one_key, 1);
    one_key = cat(one_key, sized("k"));
    t.ask(Op::check, one_key, 3);
    t.ask(Op::get, get_request("k", 0), JobStore::no_cache);
    EXPECT_EQ(t.store.holders("k"), (std::set<long>{2, 3}));

    auto written = t.ask(Op::set, cat(sized("k"), text("v2")), 1);
    EXPECT_FALSE(written);   // held until 2 and 3 acknowledge
    EXPECT_EQ(t.sent, (std::vector<std::pair<long, std::string>>{{2, "k"}, {3, "k"}}));
    EXPECT_TRUE(t.store.holders("k").empty());
    // A read meanwhile gets the new value and registers its reader again.
    EXPECT_EQ(t.ask(Op::get, get_request("k", 0), 4)->payload, text("v2"));
    EXPECT_EQ(t.store.holders("k"), std::set<long>{4});
    t.acks[0]();
    EXPECT_EQ(t.store.writes_held(), 1u);
    t.acks[1]();
    t.acks[1]();   // a second call of the same acknowledgement counts once
    EXPECT_EQ(t.store.writes_held(), 0u);
    EXPECT_EQ(t.store.counts().at(1).writes, 2u);
    EXPECT_EQ(t.store.counts().at(2).invalidations, 1u);
    EXPECT_EQ(t.store.counts().at(4).reads, 1u);
}

TEST(JobStore, AReaderWokenByAWriteHoldsTheNewValue)
{
    Tracked t;
    std::optional<JobStore::Reply> woken;
    t.store.serve(static_cast<std::uint8_t>(Op::get), get_request("late", 1000),
                  [&](JobStore::Reply r) { woken = std::move(r); }, 0, 5);
    EXPECT_TRUE(t.store.holders("late").empty());   // waiting is not holding
    ASSERT_TRUE(t.ask(Op::set, cat(sized("late"), text("x")), 1));   // nobody to invalidate: answered at once
    ASSERT_TRUE(woken);
    EXPECT_EQ(t.store.holders("late"), std::set<long>{5});
    EXPECT_TRUE(t.sent.empty());
}

TEST(JobStore, OnlyWritesThatChangeAKeyInvalidateButAllWaitForThoseOut)
{
    Tracked t;
    t.ask(Op::set, cat(sized("c"), text("v")), 1);
    t.ask(Op::get, get_request("c", 0), 2);
    // compare_set that does not match changes nothing: no invalidation, answered at once.
    EXPECT_EQ(t.ask(Op::compare_set, cat(cat(sized("c"), sized("nope")), text("z")), 1)->payload, text("v"));
    EXPECT_TRUE(t.sent.empty());
    // A delete of a missing key changes nothing either.
    EXPECT_EQ(t.ask(Op::delete_key, text("other"), 1)->payload, Bytes{0});
    // A delete that removes a cached key invalidates; a set of the same key behind it waits for that too.
    EXPECT_FALSE(t.ask(Op::delete_key, text("c"), 1));
    EXPECT_FALSE(t.ask(Op::set, cat(sized("c"), text("w")), 3));
    EXPECT_FALSE(t.ask(Op::compare_set, cat(cat(sized("c"), sized("nope")), text("z")), 1));
    EXPECT_EQ(t.store.writes_held(), 3u);
    // Other keys are not held back.
    EXPECT_TRUE(t.ask(Op::set, cat(sized("d"), text("1")), 1));
    t.ack_all();
    EXPECT_EQ(t.store.writes_held(), 0u);
    // An add of the non-integer "w" fails and changes nothing: answered at once though 2 holds the key again.
    t.ask(Op::get, get_request("c", 0), 2);
    Bytes add;
    put<std::int64_t>(add, 1);
    EXPECT_EQ(t.ask(Op::add, cat(add, text("c")), 1)->answer, Answer::error);
    EXPECT_EQ(t.sent.size(), 1u);
}

TEST(JobStore, AWriteDoesNotWaitForInvalidationsSentAfterIt)
{
    Tracked t;
    t.ask(Op::set, cat(sized("k"), text("0")), 1);
    t.ask(Op::get, get_request("k", 0), 2);
    std::optional<JobStore::Reply> first;
    t.store.serve(static_cast<std::uint8_t>(Op::set), cat(sized("k"), text("1")),
                  [&](JobStore::Reply r) { first = std::move(r); }, 0, 1);   // invalidation #1 to 2
    t.ask(Op::get, get_request("k", 0), 3);
    EXPECT_FALSE(t.ask(Op::set, cat(sized("k"), text("2")), 1));   // invalidation #2 to 3
    t.acks[0]();
    EXPECT_TRUE(first);   // #2 is still out, but the first set did not wait for it
    EXPECT_EQ(t.store.writes_held(), 1u);
}

TEST(JobStore, AnInvalidationAnsweredAtOnceStillLetsTheWriteReturn)
{
    // A position that has left is acknowledged before the invalidator even returns.
    JobStore store;
    store.set_invalidator([](long, const std::string&, std::function<void()> acked) { acked(); });
    std::optional<JobStore::Reply> reply;
    auto serve = [&](Op op, const Bytes& payload, long from) {
        reply.reset();
        store.serve(static_cast<std::uint8_t>(op), payload, [&](JobStore::Reply r) { reply = std::move(r); }, 0,
                    from);
    };
    serve(Op::set, cat(sized("k"), text("a")), 1);
    serve(Op::get, get_request("k", 0), 2);
    serve(Op::set, cat(sized("k"), text("b")), 1);
    EXPECT_TRUE(reply);
    EXPECT_EQ(store.writes_held(), 0u);
}

} // namespace
} // namespace canopy

namespace canopy {
namespace {

TEST(StoreWrite, SaysWhatEachWriteKeepsForTheLimitPerRank)
{
    auto set = store_write(wire::StoreSet{"key", std::string(1000, 'v')});
    ASSERT_TRUE(set);
    EXPECT_EQ(set->key, "key");
    EXPECT_EQ(set->bytes, 1003u);
    EXPECT_FALSE(set->deletes);
    auto add = store_write(wire::StoreAdd{5, "counter"});
    ASSERT_TRUE(add);
    EXPECT_EQ(add->key, "counter");
    EXPECT_EQ(add->bytes, 7u + 20u) << "a counter grows to at most 20 digits";
    auto swap = store_write(wire::StoreCompareSet{"k", "old", "desired"});
    ASSERT_TRUE(swap);
    EXPECT_EQ(swap->key, "k");
    EXPECT_EQ(swap->bytes, 1u + 7u);
    auto gone = store_write(wire::StoreDelete{"k"});
    ASSERT_TRUE(gone);
    EXPECT_TRUE(gone->deletes);
    EXPECT_EQ(gone->key, "k");
    EXPECT_FALSE(store_write(wire::StoreGet{0, "k"})) << "reads keep nothing";
}

} // namespace
} // namespace canopy
