// The PMIx server's pending-request table: each request answered exactly once, whichever comes first.
#include <chrono>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "pmix/pending_requests.hpp"

using namespace canopy;
using namespace std::chrono_literals;

namespace {

constexpr int timed_out = -7, lost = -11;

struct Answers {
    std::vector<std::pair<int, PendingRequests::Bytes>> got;
    PendingRequests::Answer answer()
    {
        return [this](int status, PendingRequests::Bytes bytes) { got.emplace_back(status, std::move(bytes)); };
    }
};

} // namespace

TEST(PendingRequests, ARequestIsAnsweredOnceAndLateAnswersAreDropped)
{
    boost::asio::io_context io;
    PendingRequests pending(io, timed_out);
    Answers answers;
    auto id = pending.add({}, answers.answer(), 0s, "lookup");
    EXPECT_EQ(pending.size(), 1u);
    pending.complete(id, 0, {1, 2});
    pending.complete(id, 3, {});   // a second tree reply
    ASSERT_EQ(answers.got.size(), 1u);
    EXPECT_EQ(answers.got[0].first, 0);
    EXPECT_EQ(answers.got[0].second, (PendingRequests::Bytes{1, 2}));
    EXPECT_EQ(pending.size(), 0u);
}

TEST(PendingRequests, ATimeoutAnswersWithTheTimeoutStatusAndTheLateReplyFindsNothing)
{
    boost::asio::io_context io;
    PendingRequests pending(io, timed_out);
    Answers answers;
    auto id = pending.add({true, {}}, answers.answer(), 1s, "fence");
    io.run_for(1500ms);
    ASSERT_EQ(answers.got.size(), 1u);
    EXPECT_EQ(answers.got[0].first, timed_out);
    pending.complete(id, 0, {9});
    EXPECT_EQ(answers.got.size(), 1u);
}

TEST(PendingRequests, AnsweredInTimeTheTimerDoesNothing)
{
    boost::asio::io_context io;
    PendingRequests pending(io, timed_out);
    Answers answers;
    auto id = pending.add({}, answers.answer(), 1s, "publish");
    pending.complete(id, 0, {});
    io.run_for(1200ms);
    ASSERT_EQ(answers.got.size(), 1u);
    EXPECT_EQ(answers.got[0].first, 0);
}

TEST(PendingRequests, ALostRankFailsExactlyTheRequestsThatWaitOnIt)
{
    boost::asio::io_context io;
    PendingRequests pending(io, timed_out);
    Answers whole_job, subset, other_subset, modex, publish;
    pending.add({true, {}}, whole_job.answer(), 0s, "fence");
    pending.add({false, {2, 3}}, subset.answer(), 0s, "fence");
    pending.add({false, {4, 5}}, other_subset.answer(), 0s, "fence");
    pending.add({false, {3}}, modex.answer(), 0s, "direct modex");
    pending.add({}, publish.answer(), 0s, "publish");
    pending.fail_waiting_on(3, lost);
    for (auto* failed : {&whole_job, &subset, &modex}) {
        ASSERT_EQ(failed->got.size(), 1u);
        EXPECT_EQ(failed->got[0].first, lost);
    }
    EXPECT_TRUE(other_subset.got.empty());
    EXPECT_TRUE(publish.got.empty());
    EXPECT_EQ(pending.size(), 2u);
    pending.fail_all(lost);
    EXPECT_EQ(other_subset.got.size(), 1u);
    EXPECT_EQ(publish.got.size(), 1u);
    EXPECT_EQ(pending.size(), 0u);
}

TEST(PendingRequests, AnAnswerMayAddAnotherRequest)
{
    boost::asio::io_context io;
    PendingRequests pending(io, timed_out);
    Answers second;
    std::uint64_t id = pending.add(
        {}, [&](int, PendingRequests::Bytes) { pending.add({}, second.answer(), 0s, "again"); }, 0s, "first");
    pending.complete(id, 0, {});
    EXPECT_EQ(pending.size(), 1u);
    pending.fail_all(lost);
    EXPECT_EQ(second.got.size(), 1u);
}

TEST(PendingRequests, DestroyedWithATimerRunningNothingFiresLater)
{
    boost::asio::io_context io;
    Answers answers;
    {
        PendingRequests pending(io, timed_out);
        pending.add({}, answers.answer(), 1s, "fence");
    }
    io.run_for(1200ms);
    EXPECT_TRUE(answers.got.empty());
}
