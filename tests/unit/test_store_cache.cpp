// The daemon's store cache against a real JobStore as its root: known keys are read on the node, writes never are,
// and a write returns only after every node that cached its key has dropped it.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "collective/job_store.hpp"
#include "store_cache.hpp"
#include "store_requests.hpp"

namespace canopy {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Op = JobStore::Op;

using namespace store_requests;

// A root and some nodes wired as the tree wires them: each node's link to the root is one FIFO queue per
// direction, delivered one frame at a time by run(), so tests can interleave deliveries as the network could.
class Job {
public:
    explicit Job(int nodes)
    {
        store_.set_invalidator([this](long position, const std::string& key, std::function<void()> acked) {
            down_[position].push_back([this, position, key, acked]() mutable {
                if (dead_.contains(position)) {
                    acked();   // the node left: its parent answers for it
                    return;
                }
                cache(position).invalidate(key);
                up_[position].push_back(acked);
            });
        });
        for (long position = 1; position <= nodes; ++position)
            caches_.push_back(std::make_unique<StoreCache>(
                [this, position](wire::StoreRequest request, RoutedServices::Reply<wire::StoreRequest> done) {
                    up_[position].push_back([this, position, request = std::move(request), done]() mutable {
                        store_.serve(
                            request.operation, request.body,
                            [this, position, done](JobStore::Reply reply) {
                                wire::StoreReply answer{reply.answer, reply.payload};
                                // A large answer takes the bulk route (a fabric), where invalidations can overtake it.
                                (bulk_answers_to.contains(position) ? bulk_ : down_)[position].push_back(
                                    [done, answer]() { done(answer); });
                            },
                            0, position);
                    });
                }));
    }

    StoreCache& cache(long position) { return *caches_[static_cast<std::size_t>(position - 1)]; }
    JobStore& root() { return store_; }

    // A rank's request on a node; the reply lands in the returned slot when it comes.
    std::shared_ptr<std::optional<std::pair<std::uint8_t, Bytes>>> ask(long position, Op op, Bytes payload)
    {
        auto slot = std::make_shared<std::optional<std::pair<std::uint8_t, Bytes>>>();
        cache(position).request(static_cast<std::uint8_t>(op), std::move(payload),
                                [slot](std::uint8_t answer, Bytes body) { *slot = std::pair{answer, body}; });
        return slot;
    }

    // Delivers one frame from the node up to the root, or from the root down to the node; false if none.
    bool deliver_up(long position) { return deliver(up_[position]); }
    bool deliver_down(long position) { return deliver(down_[position]); }
    bool deliver_bulk(long position) { return deliver(bulk_[position]); }
    void run()
    {
        for (bool any = true; any;) {
            any = false;
            for (auto* queues : {&up_, &down_, &bulk_})
                for (auto& [position, queue] : *queues)
                    any = deliver(queue) || any;
        }
    }
    std::size_t root_reads() const
    {
        std::size_t total = 0;
        for (const auto& [position, counts] : store_.counts())
            total += counts.reads;
        return total;
    }

    std::set<long> dead_;
    std::set<long> bulk_answers_to;   // nodes whose answers take the bulk route

private:
    static bool deliver(std::deque<std::function<void()>>& queue)
    {
        if (queue.empty())
            return false;
        auto next = std::move(queue.front());
        queue.pop_front();
        next();
        return true;
    }

    JobStore store_;
    std::vector<std::unique_ptr<StoreCache>> caches_;
    std::map<long, std::deque<std::function<void()>>> up_, down_, bulk_;
};

std::string value_of(const std::shared_ptr<std::optional<std::pair<std::uint8_t, Bytes>>>& slot)
{
    if (!*slot)
        return "(no reply)";
    if ((*slot)->first != 0)
        return "(answer " + std::to_string((*slot)->first) + ")";
    return std::string((*slot)->second.begin(), (*slot)->second.end());
}

TEST(StoreCache, AKnownKeyIsReadOnTheNodeAfterTheFirstGet)
{
    Job job(2);
    job.ask(1, Op::set, set_request("k", "v1"));
    job.run();
    EXPECT_EQ(value_of(job.ask(2, Op::get, get_request("k"))), "(no reply)");   // first read goes to the root
    job.run();
    EXPECT_EQ(job.root_reads(), 1u);
    for (int i = 0; i < 50; ++i)
        EXPECT_EQ(value_of(job.ask(2, Op::get, get_request("k", 0))), "v1");   // answered at once, any timeout
    EXPECT_EQ(job.root_reads(), 1u);
    EXPECT_EQ(job.cache(2).counts().cached, 50u);
    EXPECT_EQ(job.root().holders("k"), std::set<long>{2});
}

TEST(StoreCache, WaitAndCheckOfKnownKeysAreAnsweredOnTheNode)
{
    Job job(1);
    job.ask(1, Op::set, set_request("a", "1"));
    job.ask(1, Op::set, set_request("b", "2"));
    job.run();
    auto waited = job.ask(1, Op::wait, wait_request({"a", "b"}));
    job.run();
    ASSERT_TRUE(*waited);
    EXPECT_EQ((*waited)->first, 0);
    std::size_t reads = job.root_reads();
    EXPECT_EQ(value_of(job.ask(1, Op::wait, wait_request({"b", "a"}, 0))), "");
    EXPECT_EQ(job.ask(1, Op::check, keys_request({"a"}))->value().second, Bytes{1});
    EXPECT_EQ(job.root_reads(), reads);
    // A wait shows a key exists, not its value: a get still asks the root, and then knows it.
    EXPECT_EQ(value_of(job.ask(1, Op::get, get_request("a"))), "(no reply)");
    job.run();
    EXPECT_EQ(value_of(job.ask(1, Op::get, get_request("a"))), "1");
    // A check naming an unknown key goes to the root; so does its "no".
    auto partly = job.ask(1, Op::check, keys_request({"a", "c"}));
    job.run();
    EXPECT_EQ(partly->value().second, Bytes{0});
    EXPECT_FALSE(job.cache(1).knows("c"));
}

TEST(StoreCache, WritesAndNumKeysAlwaysGoToTheRoot)
{
    Job job(1);
    job.ask(1, Op::set, set_request("n", "5"));
    job.run();
    job.ask(1, Op::get, get_request("n"));
    job.run();
    auto added = job.ask(1, Op::add, add_request("n", 1));
    auto keys = job.ask(1, Op::num_keys, {});
    EXPECT_FALSE(*added);
    EXPECT_FALSE(*keys);
    job.run();
    ASSERT_TRUE(*added && *keys);
    EXPECT_EQ(job.cache(1).counts().forwarded, 4u);   // set, get, add, num_keys
}

TEST(StoreCache, AWriteReturnsOnlyAfterEveryCachingNodeDroppedTheKey)
{
    Job job(3);
    job.ask(1, Op::set, set_request("k", "old"));
    job.run();
    job.ask(2, Op::get, get_request("k"));
    job.ask(3, Op::get, get_request("k"));
    job.run();
    ASSERT_EQ(job.root().holders("k"), (std::set<long>{2, 3}));

    auto written = job.ask(1, Op::set, set_request("k", "new"));
    job.deliver_up(1);   // the set reaches the root, which invalidates 2 and 3 before answering
    EXPECT_EQ(job.root().writes_held(), 1u);
    EXPECT_FALSE(*written);
    EXPECT_EQ(value_of(job.ask(2, Op::get, get_request("k"))), "old");   // the write has not returned yet
    job.deliver_down(2);   // 2 drops it
    job.deliver_up(2);     // and says so; 3 has not yet
    EXPECT_FALSE(*written);
    EXPECT_FALSE(job.cache(2).knows("k"));
    EXPECT_EQ(value_of(job.ask(3, Op::get, get_request("k"))), "old");
    job.deliver_down(3);
    job.deliver_up(3);
    EXPECT_EQ(job.root().writes_held(), 0u);   // the reply to 1 is on its way down now
    job.run();
    ASSERT_TRUE(*written);
    for (long node = 1; node <= 3; ++node) {
        auto read = job.ask(node, Op::get, get_request("k"));
        job.run();
        EXPECT_EQ(value_of(read), "new") << "node " << node;
    }
}

TEST(StoreCache, AGetAnsweredBeforeAWriteIsDroppedByTheWritesInvalidation)
{
    // The race: node 2's get reaches the root before node 1's set; the answer (old value) and then the
    // invalidation travel down the same link in that order, so 2 caches "old" and drops it before the set returns.
    Job job(2);
    job.ask(1, Op::set, set_request("k", "old"));
    job.run();
    auto read = job.ask(2, Op::get, get_request("k"));
    job.deliver_up(2);   // root answers "old" and notes that 2 holds k; the answer is still on its way
    auto written = job.ask(1, Op::set, set_request("k", "new"));
    job.deliver_up(1);   // root applies "new" and sends 2 an invalidation behind the answer
    EXPECT_FALSE(*written);
    job.deliver_down(2);   // the old answer arrives first
    EXPECT_EQ(value_of(read), "old");
    EXPECT_EQ(value_of(job.ask(2, Op::get, get_request("k"))), "old");   // cached, the set has not returned
    job.deliver_down(2);   // the invalidation
    EXPECT_FALSE(job.cache(2).knows("k"));
    job.run();
    ASSERT_TRUE(*written);
    auto after = job.ask(2, Op::get, get_request("k"));
    job.run();
    EXPECT_EQ(value_of(after), "new");
}

TEST(StoreCache, AnAnswerOvertakenByItsKeysInvalidationIsNotCachedNorShared)
{
    // The same race with the answer on the bulk route: the invalidation overtakes it. The ranks already waiting
    // get the old value (their read and the write overlapped); the node must neither cache it nor hand it to a read
    // that starts after the invalidation, since the write may have returned by then.
    Job job(2);
    job.ask(1, Op::set, set_request("k", "old"));
    job.run();
    job.ask(2, Op::get, get_request("k"));
    job.run();   // node 2 has read k once, so the root will invalidate it there
    job.cache(2).invalidate("k");   // as if an unrelated write had dropped it: the next get goes to the root
    job.bulk_answers_to = {2};
    auto early = job.ask(2, Op::get, get_request("k"));
    job.deliver_up(2);   // the root answers "old"; the answer is on the bulk route
    auto written = job.ask(1, Op::set, set_request("k", "new"));
    job.deliver_up(1);      // the root applies "new" and invalidates k at node 2
    job.deliver_down(2);    // the invalidation arrives first
    job.deliver_up(2);      // and is acknowledged: the set returns
    job.deliver_down(1);
    ASSERT_TRUE(*written);
    auto late = job.ask(2, Op::get, get_request("k"));   // after the set returned: must not share "old"
    job.deliver_bulk(2);   // the old answer
    EXPECT_EQ(value_of(early), "old");
    EXPECT_FALSE(*late);
    EXPECT_FALSE(job.cache(2).knows("k"));
    job.run();
    EXPECT_EQ(value_of(late), "new");
    EXPECT_EQ(value_of(job.ask(2, Op::get, get_request("k"))), "new");   // cached from the fresh answer
    EXPECT_EQ(job.cache(2).counts().merged, 0u);
}

TEST(StoreCache, AWriteWaitsForInvalidationsAnEarlierWriteOfTheKeyStillHasOut)
{
    // Node 1 deletes k (held by 2); before 2 acknowledges, node 3 sets k. The set must not return while 2 may
    // still read the value from before the delete.
    Job job(3);
    job.ask(1, Op::set, set_request("k", "v0"));
    job.run();
    job.ask(2, Op::get, get_request("k"));
    job.run();
    auto removed = job.ask(1, Op::delete_key, text("k"));
    job.deliver_up(1);
    auto written = job.ask(3, Op::set, set_request("k", "v1"));
    job.deliver_up(3);
    EXPECT_FALSE(*removed);
    EXPECT_FALSE(*written);
    EXPECT_EQ(job.root().writes_held(), 2u);
    job.run();
    ASSERT_TRUE(*removed && *written);
    EXPECT_EQ(job.root().writes_held(), 0u);
}

TEST(StoreCache, ANodeThatLeftDoesNotHoldAWriteBack)
{
    Job job(2);
    job.ask(1, Op::set, set_request("k", "v0"));
    job.run();
    job.ask(2, Op::get, get_request("k"));
    job.run();
    job.dead_.insert(2);
    auto written = job.ask(1, Op::set, set_request("k", "v1"));
    job.run();
    ASSERT_TRUE(*written);
    EXPECT_EQ((*written)->first, 0);
}

TEST(StoreCache, IdenticalReadsInFlightShareOneRequestAndFillTheCache)
{
    Job job(1);
    auto first = job.ask(1, Op::get, get_request("late"));
    auto second = job.ask(1, Op::get, get_request("late"));
    job.run();   // the root holds the get: "late" does not exist yet
    EXPECT_FALSE(*first);
    job.ask(1, Op::set, set_request("late", "here"));
    job.run();
    EXPECT_EQ(value_of(first), "here");
    EXPECT_EQ(value_of(second), "here");
    EXPECT_EQ(job.cache(1).counts().merged, 1u);
    EXPECT_EQ(job.root_reads(), 1u);
    EXPECT_EQ(value_of(job.ask(1, Op::get, get_request("late"))), "here");
}

TEST(StoreCache, FailedOrTimedOutReadsTeachNothing)
{
    Job job(1);
    auto missing = job.ask(1, Op::get, get_request("nothing", 0));
    job.run();
    EXPECT_EQ(value_of(missing), "(answer 1)");
    EXPECT_EQ(job.cache(1).size(), 0u);
    // A transport failure reaches the rank as an error answer with the message.
    StoreCache lonely([](wire::StoreRequest, RoutedServices::Reply<wire::StoreRequest> done) {
        done(Error{"lost the root"});
    });
    std::optional<std::pair<std::uint8_t, Bytes>> got;
    lonely.request(static_cast<std::uint8_t>(Op::get), get_request("k"),
                   [&](std::uint8_t answer, Bytes body) { got = std::pair{answer, body}; });
    ASSERT_TRUE(got);
    EXPECT_EQ(got->first, static_cast<std::uint8_t>(JobStore::Answer::error));
    EXPECT_EQ(got->second, text("lost the root"));
    EXPECT_EQ(lonely.size(), 0u);
}

std::int64_t number_of(const std::shared_ptr<std::optional<std::pair<std::uint8_t, Bytes>>>& slot)
{
    std::int64_t value = -1;
    if (*slot && (*slot)->first == 0 && (*slot)->second.size() == sizeof value)
        std::memcpy(&value, (*slot)->second.data(), sizeof value);
    return value;
}

TEST(StoreCache, AddOfZeroIsARead)
{
    // torch's store-based barrier polls add(key, 0): on a known integer the node answers it.
    Job job(2);
    job.ask(1, Op::add, add_request("count", 1));
    job.run();
    auto first = job.ask(2, Op::add, add_request("count", 0));
    job.run();
    EXPECT_EQ(number_of(first), 1);
    std::size_t reads = job.root_reads(), writes = job.root().counts().at(2).writes;
    for (int i = 0; i < 20; ++i)
        EXPECT_EQ(number_of(job.ask(2, Op::add, add_request("count", 0))), 1);
    EXPECT_EQ(job.root_reads(), reads);
    EXPECT_EQ(job.root().counts().at(2).writes, writes);   // no add of 0 reached the root as a write
    job.ask(1, Op::add, add_request("count", 1));   // invalidates node 2
    job.run();
    auto after = job.ask(2, Op::add, add_request("count", 0));
    job.run();
    EXPECT_EQ(number_of(after), 2);

    // A missing key is created as 0 by the root's add; a non-integer is the root's error.
    auto created = job.ask(2, Op::add, add_request("fresh", 0));
    job.run();
    EXPECT_EQ(number_of(created), 0);
    auto got = job.ask(1, Op::get, get_request("fresh", 0));
    job.run();
    EXPECT_EQ(value_of(got), "0");
    job.ask(1, Op::set, set_request("word", "abc"));
    job.run();
    auto word = job.ask(2, Op::add, add_request("word", 0));
    job.run();
    EXPECT_EQ(value_of(word).substr(0, 9), "(answer 2");
}

TEST(StoreCache, ARankCannotSendTheRootsInvalidation)
{
    Job job(1);
    job.cache(1).invalidate("never cached");   // a key the node never read: nothing to drop, nothing breaks
    // Invalidations are the root's routed requests (wire::StoreInvalidation); their old socket number from a rank
    // is an unknown operation, which the root refuses.
    auto forged = job.ask(1, static_cast<Op>(10), text("k"));
    job.run();
    EXPECT_EQ(value_of(forged), "(answer 2)");
}

} // namespace
} // namespace canopy
