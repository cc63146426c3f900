// Fence bookkeeping over the tree: the right sources are awaited, and results come out exactly once.
#include <gtest/gtest.h>

#include "collective/fence.hpp"

namespace canopy {
namespace {

// 7 nodes with 2 ranks each, fanout 2: position 1 (node 0) has children 3 and 4, position 2 has 5 and 6,
// position 3 has 7; 4, 5, 6 and 7 are leaves.
FenceTracker tracker_at(long position) { return FenceTracker(Topology(7, 2), std::vector<std::uint64_t>(7, 2), position); }

TEST(FenceTracker, WholeJobFenceWaitsForLocalAndEveryChild)
{
    auto tracker = tracker_at(1);
    FenceId id{{}, 0};
    EXPECT_FALSE(tracker.contribute(id, 1, {'a'}));
    EXPECT_FALSE(tracker.contribute(id, 3, {'b'}));
    auto done = tracker.contribute(id, 4, {'c'});
    ASSERT_TRUE(done);
    EXPECT_EQ(*done, (std::vector<std::uint8_t>{'a', 'b', 'c'}));
    EXPECT_TRUE(tracker.pending().empty());
}

TEST(FenceTracker, ARestartForgetsTheRanksFencesButKeepsTheRestartBarriersNumbering)
{
    auto tracker = tracker_at(1);
    using wire::FenceDomain;
    EXPECT_EQ(tracker.next_local_sequence({}, FenceDomain::pmi), 0u);
    EXPECT_EQ(tracker.next_local_sequence({}, FenceDomain::pmi), 1u);
    EXPECT_EQ(tracker.next_local_sequence({}, FenceDomain::restart), 0u);
    FenceId half_done{{}, 1, FenceDomain::pmi};
    EXPECT_FALSE(tracker.contribute(half_done, 3, {'b'}));   // a child's part of a fence its ranks never finish
    FenceId barrier{{}, 0, FenceDomain::restart};
    EXPECT_FALSE(tracker.contribute(barrier, 3, {}));
    tracker.forget_ranks_fences(1);
    EXPECT_EQ(tracker.pending(), std::vector<FenceId>{barrier});
    // Every node numbers the next attempt's fences from 2^32 on, never an old number, and the restart barriers go on.
    constexpr std::uint64_t first = std::uint64_t{1} << 32;
    EXPECT_EQ(tracker.next_local_sequence({}, FenceDomain::pmi), first);
    EXPECT_EQ(tracker.next_local_sequence({}, FenceDomain::restart), 1u);
    // The old half-done fence does not complete with the new attempt's contributions.
    FenceId fresh{{}, first + 1, FenceDomain::pmi};
    EXPECT_FALSE(tracker.contribute(fresh, 1, {'x'}));
    EXPECT_FALSE(tracker.contribute(fresh, 4, {'z'}));
    auto done = tracker.contribute(fresh, 3, {'y'});
    ASSERT_TRUE(done);
    EXPECT_EQ(*done, (std::vector<std::uint8_t>{'x', 'y', 'z'}));
}

TEST(FenceTracker, RootHasNoLocalContribution)
{
    auto route = tracker_at(0).route({});
    EXPECT_FALSE(route.local);
    EXPECT_EQ(route.children, (std::vector<long>{1, 2}));
}

TEST(FenceTracker, SubsetFenceInvolvesOnlySubtreesHostingParticipants)
{
    // Ranks 6 and 7 live on node 3 = position 4, below position 1.
    auto at_root = tracker_at(0).route({6, 7});
    EXPECT_FALSE(at_root.local);
    EXPECT_EQ(at_root.children, (std::vector<long>{1}));
    auto at_one = tracker_at(1).route({6, 7});
    EXPECT_FALSE(at_one.local);
    EXPECT_EQ(at_one.children, (std::vector<long>{4}));
    auto at_four = tracker_at(4).route({6, 7});
    EXPECT_TRUE(at_four.local);
    EXPECT_TRUE(at_four.children.empty());
}

TEST(FenceTracker, EachDomainNumbersItsOwnFences)
{
    // A rank may use PMIx (libcanopy) and simple PMI (MPICH) at once: their fences never share a number.
    auto tracker = tracker_at(5);
    std::vector<long> all;
    EXPECT_EQ(tracker.next_local_sequence(all), 0u);
    EXPECT_EQ(tracker.next_local_sequence(all), 1u);
    EXPECT_EQ(tracker.next_local_sequence(all, wire::FenceDomain::pmi), 0u);
    auto pmix = tracker.contribute({all, 0}, 5, {'x'});
    auto pmi = tracker.contribute({all, 0, wire::FenceDomain::pmi}, 5, {'y'});
    ASSERT_TRUE(pmix && pmi);
    EXPECT_EQ(*pmix, std::vector<std::uint8_t>{'x'});
    EXPECT_EQ(*pmi, std::vector<std::uint8_t>{'y'});
}

TEST(FenceTracker, BackToBackFencesAreKeptApartBySequence)
{
    auto tracker = tracker_at(5);   // a leaf: only the local contribution
    std::vector<long> all;
    EXPECT_EQ(tracker.next_local_sequence(all), 0u);
    EXPECT_EQ(tracker.next_local_sequence(all), 1u);
    EXPECT_EQ(tracker.next_local_sequence({4, 5}), 0u);
    auto second = tracker.contribute({all, 1}, 5, {'y'});   // completion order need not follow sequence order
    auto first = tracker.contribute({all, 0}, 5, {'x'});
    ASSERT_TRUE(first && second);
    EXPECT_EQ(*first, std::vector<std::uint8_t>{'x'});
    EXPECT_EQ(*second, std::vector<std::uint8_t>{'y'});
}

TEST(FenceTracker, DuplicateAndStrangerContributionsAreIgnored)
{
    auto tracker = tracker_at(1);
    FenceId id{{}, 5};
    EXPECT_FALSE(tracker.contribute(id, 3, {'b'}));
    EXPECT_FALSE(tracker.contribute(id, 3, {'B'}));   // duplicate
    EXPECT_FALSE(tracker.contribute(id, 5, {'?'}));   // not a child of position 1
    EXPECT_FALSE(tracker.contribute(id, 1, {'a'}));
    auto done = tracker.contribute(id, 4, {'c'});
    ASSERT_TRUE(done);
    EXPECT_EQ(done->size(), 3u);
}

TEST(FenceTracker, NodeOfRankFollowsBlockPlacement)
{
    FenceTracker tracker(Topology(3, 2), {2, 0, 3}, 0);
    EXPECT_EQ(tracker.node_of_rank(0), 0);
    EXPECT_EQ(tracker.node_of_rank(1), 0);
    EXPECT_EQ(tracker.node_of_rank(2), 2);
    EXPECT_EQ(tracker.node_of_rank(4), 2);
    EXPECT_EQ(tracker.node_of_rank(5), -1);
}

} // namespace
} // namespace canopy

namespace canopy {
namespace {

TEST(TreeRanks, SpawnedNamespacesFollowTheJobsRanks)
{
    TreeRanks ranks(RankBlocks({2, 2, 2}));
    EXPECT_EQ(ranks.size(), 6);
    ASSERT_TRUE(ranks.add(6, {0, 3, 1}).ok());   // four ranks: three on node 1, one on node 2
    EXPECT_EQ(ranks.size(), 10);
    EXPECT_EQ(ranks.node_of(5), 2);
    EXPECT_EQ(ranks.node_of(6), 1);
    EXPECT_EQ(ranks.node_of(8), 1);
    EXPECT_EQ(ranks.node_of(9), 2);
    EXPECT_EQ(ranks.node_of(10), -1);
    EXPECT_EQ(ranks.node_of(-1), -1);
    EXPECT_EQ(ranks.job().world_size(), 6);
}

TEST(TreeRanks, ANamespaceOutOfOrderOrOfAnotherShapeIsRefused)
{
    TreeRanks ranks(RankBlocks({1, 1}));
    auto gap = ranks.add(5, {1, 1});
    ASSERT_FALSE(gap.ok());
    EXPECT_NE(gap.error().message.find("next free one is 2"), std::string::npos) << gap.error().message;
    auto shape = ranks.add(2, {1, 1, 1});
    ASSERT_FALSE(shape.ok());
    EXPECT_NE(shape.error().message.find("lists 3 nodes, the job has 2"), std::string::npos);
}

TEST(FenceTracker, AFenceOverASpawnedNamespaceRoutesToItsNodes)
{
    // One job rank per node on seven nodes; a spawned namespace puts tree ranks 7 and 8 on node 4.
    for (long position = 0; position <= 7; ++position) {
        FenceTracker tracker(Topology(7, 2), std::vector<std::uint64_t>(7, 1), position);
        ASSERT_TRUE(tracker.add_namespace(7, {0, 0, 0, 0, 2, 0, 0}).ok());
        auto spawned = tracker.route({0, 7, 8});   // a connect of job rank 0 with both children
        auto same_nodes = tracker.route({0, 4});   // job ranks on the same two nodes
        EXPECT_EQ(spawned.local, same_nodes.local) << "position " << position;
        EXPECT_EQ(spawned.children, same_nodes.children) << "position " << position;
    }
}


TEST(AppendChunk, AnAnnouncedTotalIsReservedOnceSoALargeBlobIsNeverHeldTwiceWhileItGrows)
{
    constexpr std::size_t chunk_size = 256 * 1024, chunks = 12;
    std::vector<std::uint8_t> blob;
    append_chunk(blob, std::vector<std::uint8_t>(chunk_size, 0), chunk_size * chunks);
    EXPECT_EQ(blob.capacity(), chunk_size * chunks);
    const std::uint8_t* first = blob.data();
    for (std::size_t i = 1; i < chunks; ++i)
        append_chunk(blob, std::vector<std::uint8_t>(chunk_size, static_cast<std::uint8_t>(i)), chunk_size * chunks);
    EXPECT_EQ(blob.data(), first) << "the blob moved: it was held twice while it grew";
    ASSERT_EQ(blob.size(), chunk_size * chunks);
    for (std::size_t i = 0; i < chunks; ++i)
        ASSERT_EQ(blob[i * chunk_size], i) << "chunk " << i << " is not where it belongs";
}

TEST(AppendChunk, ATotalThatCannotBeTrueReservesNothingAndTheBlobIsStillWhole)
{
    std::vector<std::uint8_t> small;
    append_chunk(small, std::vector<std::uint8_t>(100, 'a'), 10);   // less than the chunk itself
    EXPECT_LT(small.capacity(), 1000u);
    std::vector<std::uint8_t> huge;
    append_chunk(huge, std::vector<std::uint8_t>(100, 'a'), std::uint64_t{1} << 50);   // a peer's wrong word
    EXPECT_LT(huge.capacity(), 1000u);
    append_chunk(huge, std::vector<std::uint8_t>(50, 'b'), std::uint64_t{1} << 50);
    EXPECT_EQ(huge, [] {
        std::vector<std::uint8_t> whole(100, 'a');
        whole.insert(whole.end(), 50, 'b');
        return whole;
    }());
}

} // namespace
} // namespace canopy
