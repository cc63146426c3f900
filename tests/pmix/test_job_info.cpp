// Unit tests for RankLayout: where each rank lives and the strings PMIx's map generators get.
#include "pmix/job_info.hpp"

#include <gtest/gtest.h>

namespace canopy {
namespace {

PmixJob job_of(std::vector<std::uint64_t> counts, long node = 0)
{
    PmixJob job;
    job.nspace = "canopy.1";
    std::vector<std::string> hosts;
    for (std::size_t i = 0; i < counts.size(); ++i)
        hosts.push_back("n" + std::to_string(i));
    job.hosts = HostNames(hosts);
    job.ranks_per_node = std::move(counts);
    job.node_index = node;
    job.tmpdir = "/tmp";
    return job;
}

TEST(RankLayout, PlacesRanksInBlocksNodeZeroFirst)
{
    auto layout = RankLayout::make(job_of({3, 2, 1}));
    ASSERT_TRUE(layout.ok()) << layout.error().message;
    EXPECT_EQ(layout->job_size(), 6u);
    EXPECT_EQ(layout->node_of(0), 0);
    EXPECT_EQ(layout->node_of(2), 0);
    EXPECT_EQ(layout->node_of(3), 1);
    EXPECT_EQ(layout->node_of(5), 2);
    EXPECT_EQ(layout->node_of(6), -1);
    EXPECT_EQ(layout->node_of(-1), -1);
    EXPECT_EQ(layout->local_rank(4), 1);
    EXPECT_EQ(layout->first_rank(2), 5);
}

TEST(RankLayout, GivesPmixMapInputsWithEveryRankSpelledOut)
{
    auto layout = RankLayout::make(job_of({3, 2, 1}, 1));
    ASSERT_TRUE(layout.ok());
    EXPECT_EQ(layout->node_list(), "n0,n1,n2");
    // Ranges like "0-2" would be read back by PMIx 4.2.2 as a single local peer.
    EXPECT_EQ(layout->ppn_list(), "0,1,2;3,4;5");
    EXPECT_EQ(layout->local_peers(1), "3,4");
}

TEST(RankLayout, RejectsANodeWithoutRanksNamingIt)
{
    auto layout = RankLayout::make(job_of({2, 0}));
    ASSERT_FALSE(layout.ok());
    EXPECT_NE(layout.error().message.find("node 1 (n1) has no ranks"), std::string::npos) << layout.error().message;
}

TEST(RankLayout, RejectsMismatchedCountsAndBadNodeIndex)
{
    auto job = job_of({1, 1});
    job.ranks_per_node.pop_back();
    EXPECT_FALSE(RankLayout::make(job).ok());
    EXPECT_FALSE(RankLayout::make(job_of({1, 1}, 2)).ok());
    auto comma = job_of({1});
    comma.hosts = HostNames({"a,b"});
    EXPECT_FALSE(RankLayout::make(comma).ok());
}

TEST(RankLayout, TakesProgramsThatCoverTheJobExactly)
{
    auto job = job_of({2, 2});
    job.ranks_per_app = {1, 3};
    EXPECT_TRUE(RankLayout::make(job).ok());
    job.ranks_per_app = {1, 2};
    auto short_of_ranks = RankLayout::make(job);
    ASSERT_FALSE(short_of_ranks.ok());
    EXPECT_NE(short_of_ranks.error().message.find("programs have 3 ranks, its nodes 4"), std::string::npos)
        << short_of_ranks.error().message;
}

} // namespace
} // namespace canopy
