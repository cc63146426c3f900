// Unit tests for placing ranks onto hosts.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hosts/placement.hpp"

namespace canopy {
namespace {

// host:count pairs, the part of a placement a user reads.
using Layout = std::vector<std::pair<std::string, long>>;

std::vector<HostEntry> hosts(int count, int slots = 0)
{
    std::vector<HostEntry> result;
    for (int i = 1; i <= count; ++i)
        result.push_back(HostEntry{"n" + std::to_string(i), slots});
    return result;
}

Placement place_ok(std::optional<long> ranks, std::optional<long> ppn, std::vector<HostEntry> host_list)
{
    auto result = place_ranks(PlacementRequest{ranks, ppn, std::move(host_list)});
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
    return result.ok() ? result.value() : Placement{};
}

std::string place_error(std::optional<long> ranks, std::optional<long> ppn, std::vector<HostEntry> host_list)
{
    auto result = place_ranks(PlacementRequest{ranks, ppn, std::move(host_list)});
    EXPECT_FALSE(result.ok());
    return result.ok() ? std::string() : result.error().message;
}

Layout layout(const Placement& placement)
{
    Layout result;
    long next_rank = 0;
    for (const NodeRanks& node : placement.nodes) {
        EXPECT_EQ(node.first_rank, next_rank) << "ranks must be contiguous blocks in host order";
        next_rank += node.count;
        result.emplace_back(node.host, node.count);
    }
    EXPECT_EQ(next_rank, placement.world_size);
    return result;
}

TEST(PlaceRanks, PpnFillsBlocksAndTheLastNodeMayBePartial)
{
    Placement placement = place_ok(10, 4, hosts(4));
    EXPECT_EQ(placement.world_size, 10);
    EXPECT_EQ(layout(placement), (Layout{{"n1", 4}, {"n2", 4}, {"n3", 2}}));
}

TEST(PlaceRanks, PpnWithoutRanksUsesEveryHost)
{
    Placement placement = place_ok(std::nullopt, 3, hosts(4));
    EXPECT_EQ(placement.world_size, 12);
    EXPECT_EQ(layout(placement), (Layout{{"n1", 3}, {"n2", 3}, {"n3", 3}, {"n4", 3}}));
}

TEST(PlaceRanks, PpnIgnoresSlots)
{
    EXPECT_EQ(layout(place_ok(4, 2, hosts(3, 1))), (Layout{{"n1", 2}, {"n2", 2}}));
}

TEST(PlaceRanks, PpnNeedingMoreHostsThanGivenIsAnError)
{
    EXPECT_EQ(place_error(100, 12, hosts(4)),
              "-n 100 with --ppn 12 needs 9 nodes but only 4 hosts were given; give more hosts or raise --ppn");
}

TEST(PlaceRanks, SlotsFillHostsInOrder)
{
    std::vector<HostEntry> host_list{{"a", 2}, {"b", 4}, {"c", 1}};
    EXPECT_EQ(layout(place_ok(5, std::nullopt, host_list)), (Layout{{"a", 2}, {"b", 3}}));
}

TEST(PlaceRanks, SlotsWithoutRanksUseTheSumOfSlots)
{
    std::vector<HostEntry> host_list{{"a", 2}, {"b", 4}, {"c", 1}};
    Placement placement = place_ok(std::nullopt, std::nullopt, host_list);
    EXPECT_EQ(placement.world_size, 7);
    EXPECT_EQ(layout(placement), (Layout{{"a", 2}, {"b", 4}, {"c", 1}}));
}

TEST(PlaceRanks, MoreRanksThanSlotsIsAnErrorSuggestingPpn)
{
    std::string message = place_error(8, std::nullopt, hosts(2, 3));
    EXPECT_NE(message.find("-n 8"), std::string::npos) << message;
    EXPECT_NE(message.find("6 slots"), std::string::npos) << message;
    EXPECT_NE(message.find("--ppn"), std::string::npos) << message;
}

TEST(PlaceRanks, WithoutSlotsRanksSpreadEvenlyFirstHostsGetOneMore)
{
    EXPECT_EQ(layout(place_ok(10, std::nullopt, hosts(4))), (Layout{{"n1", 3}, {"n2", 3}, {"n3", 2}, {"n4", 2}}));
    EXPECT_EQ(layout(place_ok(8, std::nullopt, hosts(4))), (Layout{{"n1", 2}, {"n2", 2}, {"n3", 2}, {"n4", 2}}));
}

TEST(PlaceRanks, SomeHostsWithoutSlotsMeansEvenSpread)
{
    std::vector<HostEntry> host_list{{"a", 8}, {"b", 0}};
    EXPECT_EQ(layout(place_ok(4, std::nullopt, host_list)), (Layout{{"a", 2}, {"b", 2}}));
}

TEST(PlaceRanks, WithoutSlotsOrRanksOneRankPerHost)
{
    Placement placement = place_ok(std::nullopt, std::nullopt, hosts(3));
    EXPECT_EQ(placement.world_size, 3);
    EXPECT_EQ(layout(placement), (Layout{{"n1", 1}, {"n2", 1}, {"n3", 1}}));
}

TEST(PlaceRanks, FewerRanksThanHostsUsesTheFirstHosts)
{
    EXPECT_EQ(layout(place_ok(2, std::nullopt, hosts(5))), (Layout{{"n1", 1}, {"n2", 1}}));
}

TEST(PlaceRanks, NonPositiveRanksOrPpnIsAnError)
{
    EXPECT_EQ(place_error(0, std::nullopt, hosts(2)), "-n 0: the number of ranks must be at least 1");
    EXPECT_EQ(place_error(-3, 2, hosts(2)), "-n -3: the number of ranks must be at least 1");
    EXPECT_EQ(place_error(4, 0, hosts(2)), "--ppn 0: ranks per node must be at least 1");
}

TEST(PlaceRanks, NoHostsIsAnError)
{
    EXPECT_NE(place_error(4, std::nullopt, {}).find("no hosts"), std::string::npos);
}

TEST(PlaceRanks, HugePpnWithoutRanksIsAnErrorNotAnOverflow)
{
    EXPECT_NE(place_error(std::nullopt, 1L << 62, hosts(4)).find("--ppn"), std::string::npos);
}

TEST(Placement, NodeOfRankAndLocalRank)
{
    auto blocks = place_ok(10, 4, hosts(4)).blocks();
    std::vector<long> expected_node{0, 0, 0, 0, 1, 1, 1, 1, 2, 2};
    EXPECT_EQ(blocks.world_size(), 10);
    EXPECT_EQ(blocks.nodes(), 3);
    for (long rank = 0; rank < 10; ++rank) {
        EXPECT_EQ(blocks.node_of(rank), expected_node[static_cast<std::size_t>(rank)]) << rank;
        EXPECT_EQ(blocks.local_rank(rank), rank % 4) << rank;
    }
    EXPECT_EQ(blocks.first_rank(2), 8);
    EXPECT_EQ(blocks.local_size(2), 2);
}

TEST(Placement, OutOfRangeRankHasNoNode)
{
    auto blocks = place_ok(10, 4, hosts(4)).blocks();
    EXPECT_EQ(blocks.node_of(-1), -1);
    EXPECT_EQ(blocks.node_of(10), -1);
    EXPECT_EQ(blocks.local_rank(10), -1);
}

TEST(Placement, NodeOfRankOnUnevenLargePlacement)
{
    Placement placement = place_ok(100003, std::nullopt, hosts(1000));
    ASSERT_EQ(placement.nodes.size(), 1000u);
    auto blocks = placement.blocks();
    for (long rank : {0L, 100L, 101L, 2999L, 3000L, 100002L}) {
        long node = blocks.node_of(rank);
        ASSERT_GE(node, 0);
        ASSERT_LT(node, static_cast<long>(placement.nodes.size()));
        const NodeRanks& owner = placement.nodes[static_cast<std::size_t>(node)];
        EXPECT_GE(rank, owner.first_rank);
        EXPECT_LT(rank, owner.first_rank + owner.count);
    }
}

} // namespace
} // namespace canopy

namespace canopy {
namespace {

TEST(Placement, NoNodeGetsMoreRanksThanPmixCanNumber)
{
    // -n 2^31 on two hosts once had every daemon build a billion launches.
    EXPECT_EQ(place_error(2147483648L, std::nullopt, hosts(2)),
              "-n 2147483648 on 2 hosts puts 1073741824 ranks on n1; a node runs at most 65535");
    EXPECT_EQ(place_ok(2L * max_ranks_per_node, std::nullopt, hosts(2)).world_size, 2 * max_ranks_per_node);
}

} // namespace
} // namespace canopy
