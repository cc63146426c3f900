// The keys PMIx_Query_info gets answers for: a tool asking for the namespaces or spawn support gets them, and a key
// canopy does not know is reported as not found rather than left waiting.
#include <gtest/gtest.h>

#include <pmix_common.h>

#include "pmix/query_answers.hpp"

namespace canopy {
namespace {

QueryFacts facts() { return {{"canopy.job", "canopy.job.1"}, {PMIX_HOST, PMIX_WDIR}}; }

TEST(QueryAnswers, NamespacesAndSpawnSupportAreCommaLists)
{
    auto results = answer_queries({{PMIX_QUERY_NAMESPACES}, {PMIX_QUERY_SPAWN_SUPPORT}}, facts());
    EXPECT_EQ(results.outcome, QueryResults::Outcome::all);
    ASSERT_EQ(results.found.size(), 2u);
    EXPECT_EQ(results.found[0].first, PMIX_QUERY_NAMESPACES);
    EXPECT_EQ(std::get<std::string>(results.found[0].second), "canopy.job,canopy.job.1");
    EXPECT_EQ(std::get<std::string>(results.found[1].second), std::string(PMIX_HOST) + "," + PMIX_WDIR);
}

TEST(QueryAnswers, ProcessSetsAreNone)
{
    auto results = answer_queries({{PMIX_QUERY_NUM_PSETS, PMIX_QUERY_PSET_NAMES}}, facts());
    EXPECT_EQ(results.outcome, QueryResults::Outcome::all);
    ASSERT_EQ(results.found.size(), 2u);
    EXPECT_EQ(std::get<std::size_t>(results.found[0].second), 0u);
    EXPECT_EQ(std::get<std::string>(results.found[1].second), "");
}

TEST(QueryAnswers, UnknownKeysAreNotFoundAndKnownOnesStillAnswered)
{
    auto some = answer_queries({{PMIX_QUERY_NAMESPACES, "canopy.no.such.key"}}, facts());
    EXPECT_EQ(some.outcome, QueryResults::Outcome::some);
    EXPECT_EQ(some.asked, 2u);
    EXPECT_EQ(some.found.size(), 1u);
    auto none = answer_queries({{PMIX_QUERY_PROC_TABLE}}, facts());
    EXPECT_EQ(none.outcome, QueryResults::Outcome::none);
    EXPECT_TRUE(none.found.empty());
}

} // namespace
} // namespace canopy
