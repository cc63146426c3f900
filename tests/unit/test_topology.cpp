// Unit tests for the k-ary launch tree, checked against a tree built the slow way.
#include <queue>
#include <vector>

#include <gtest/gtest.h>

#include "tree/topology.hpp"

namespace canopy {
namespace {

// The tree built explicitly by breadth-first numbering: the root takes positions 1..k, then each
// position in turn takes the next k unused positions.
struct BruteTree {
    std::vector<long> parent;
    std::vector<std::vector<long>> children;
    std::vector<long> depth;

    BruteTree(long nodes, long fanout)
        : parent(static_cast<std::size_t>(nodes + 1), -1), children(static_cast<std::size_t>(nodes + 1)),
          depth(static_cast<std::size_t>(nodes + 1), 0)
    {
        long next = 1;
        std::queue<long> queue;
        queue.push(0);
        while (!queue.empty() && next <= nodes) {
            long p = queue.front();
            queue.pop();
            for (long i = 0; i < fanout && next <= nodes; ++i, ++next) {
                parent[next] = p;
                depth[next] = depth[p] + 1;
                children[p].push_back(next);
                queue.push(next);
            }
        }
    }

    long subtree_size(long p) const
    {
        long size = 1;
        for (long c : children[p])
            size += subtree_size(c);
        return size;
    }

    bool in_subtree(long root, long p) const
    {
        for (; p != -1; p = parent[p])
            if (p == root)
                return true;
        return false;
    }
};

class TopologyMatchesBruteForce : public ::testing::TestWithParam<std::pair<long, long>> {};

TEST_P(TopologyMatchesBruteForce, ParentChildrenDepthAndSubtreesAgree)
{
    auto [nodes, fanout] = GetParam();
    Topology topology(nodes, fanout);
    BruteTree brute(nodes, fanout);
    ASSERT_EQ(topology.positions(), nodes + 1);

    long max_depth = 0;
    for (long p = 0; p <= nodes; ++p) {
        std::size_t i = static_cast<std::size_t>(p);
        EXPECT_EQ(topology.parent(p), brute.parent[i]) << "position " << p;
        EXPECT_EQ(topology.children(p), brute.children[i]) << "position " << p;
        EXPECT_EQ(topology.depth_of(p), brute.depth[i]) << "position " << p;
        EXPECT_EQ(topology.subtree_size(p), brute.subtree_size(p)) << "position " << p;
        max_depth = std::max(max_depth, brute.depth[i]);
    }
    EXPECT_EQ(topology.depth(), max_depth);
}

TEST_P(TopologyMatchesBruteForce, InSubtreeAndNextHopAgree)
{
    auto [nodes, fanout] = GetParam();
    Topology topology(nodes, fanout);
    BruteTree brute(nodes, fanout);
    // All pairs is quadratic, so large trees check every target from a few sources only.
    std::vector<long> sources;
    for (long from = 0; from <= nodes; ++from)
        if (nodes <= 200 || from <= fanout + 1 || from == nodes / 2 || from == nodes / fanout || from == nodes)
            sources.push_back(from);
    for (long from : sources) {
        for (long to = 0; to <= nodes; ++to) {
            bool below = brute.in_subtree(from, to);
            ASSERT_EQ(topology.in_subtree(from, to), below) << from << " -> " << to;
            long hop = topology.next_hop(from, to);
            if (!below || from == to) {
                ASSERT_EQ(hop, -1) << from << " -> " << to;
            } else {
                ASSERT_EQ(brute.parent[static_cast<std::size_t>(hop)], from) << from << " -> " << to;
                ASSERT_TRUE(brute.in_subtree(hop, to)) << from << " -> " << to;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TopologyMatchesBruteForce,
                         ::testing::Values(std::pair{0L, 2L}, std::pair{1L, 1L}, std::pair{1L, 8L},
                                           std::pair{7L, 1L}, std::pair{7L, 2L}, std::pair{8L, 8L},
                                           std::pair{9L, 8L}, std::pair{100L, 3L}, std::pair{120L, 16L},
                                           std::pair{200L, 200L}, std::pair{5000L, 7L},
                                           std::pair{4681L, 8L}, std::pair{4682L, 8L}));

TEST(Topology, DepthCountsLevelsBelowTheRoot)
{
    EXPECT_EQ(Topology(0, 4).depth(), 0);
    EXPECT_EQ(Topology(1, 4).depth(), 1);
    EXPECT_EQ(Topology(4, 4).depth(), 1);
    EXPECT_EQ(Topology(5, 4).depth(), 2);
    EXPECT_EQ(Topology(20, 4).depth(), 2);
    EXPECT_EQ(Topology(21, 4).depth(), 3);
}

TEST(Topology, RootHasNoParentAndInvalidPositionsHaveNothing)
{
    Topology topology(10, 3);
    EXPECT_EQ(topology.parent(0), -1);
    EXPECT_EQ(topology.parent(11), -1);
    EXPECT_EQ(topology.parent(-1), -1);
    EXPECT_TRUE(topology.children(11).empty());
    EXPECT_EQ(topology.depth_of(11), -1);
    EXPECT_EQ(topology.subtree_size(-1), 0);
    EXPECT_FALSE(topology.in_subtree(0, 11));
    EXPECT_EQ(topology.next_hop(0, 11), -1);
}

TEST(Topology, NodeIndexAndPositionAreOffByOne)
{
    EXPECT_EQ(Topology::node_to_position(0), 1);
    EXPECT_EQ(Topology::position_to_node(1), 0);
    EXPECT_EQ(Topology::position_to_node(Topology::node_to_position(41)), 41);
}

TEST(Topology, AMillionNodesAnswersWithoutBuildingTheTree)
{
    Topology topology(1'000'000, 16);
    EXPECT_EQ(topology.depth(), 5); // 16 + 256 + 4096 + 65536 < 1e6 <= ... + 1048576
    EXPECT_EQ(topology.subtree_size(0), 1'000'001);
    long sum = 0;
    for (long c : topology.children(0))
        sum += topology.subtree_size(c);
    EXPECT_EQ(sum, 1'000'000);
    // 62499 * 16 + 16 == 1,000,000: the last parent has a full set of children.
    std::vector<long> last_children;
    for (long c = 999'985; c <= 1'000'000; ++c)
        last_children.push_back(c);
    EXPECT_EQ(topology.children(62'499), last_children);
    EXPECT_TRUE(topology.children(62'500).empty());
    EXPECT_EQ(topology.parent(1'000'000), 62'499);
    EXPECT_EQ(topology.depth_of(1'000'000), 5);
    long hop = topology.next_hop(0, 1'000'000);
    EXPECT_TRUE(topology.in_subtree(hop, 1'000'000));
    EXPECT_EQ(topology.parent(hop), 0);
}

TEST(Topology, HugeFanoutIsAFlatTree)
{
    Topology topology(1'000'000, 1L << 62);
    EXPECT_EQ(topology.depth(), 1);
    EXPECT_EQ(topology.children(1).size(), 0u);
    EXPECT_EQ(topology.subtree_size(0), 1'000'001);
    EXPECT_EQ(topology.subtree_size(5), 1);
}

TEST(Topology, FanoutBelowOneIsTakenAsOne)
{
    Topology topology(3, 0);
    EXPECT_EQ(topology.fanout(), 1);
    EXPECT_EQ(topology.depth(), 3);
}

} // namespace
} // namespace canopy
