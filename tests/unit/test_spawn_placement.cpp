// Unit tests for placing a PMIx_Spawn's ranks within the job's spawn slots.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hosts/spawn_placement.hpp"

namespace canopy {
namespace {

using Counts = std::vector<std::uint64_t>;

// `count` nodes n1..nN, each with `slots` spawn slots, none in use.
SpawnNodes nodes(int count, std::uint64_t slots)
{
    SpawnNodes result;
    for (int i = 1; i <= count; ++i)
        result.hosts.push_back("n" + std::to_string(i));
    result.free_slots.assign(static_cast<std::size_t>(count), slots);
    result.slots_per_node = slots;
    return result;
}

SpawnPlacementRequest ask(std::uint64_t count, std::string map_by = "", std::vector<std::string> hosts = {},
                          std::uint64_t per_node = 0)
{
    return SpawnPlacementRequest{count, std::move(hosts), std::move(map_by), per_node};
}

Counts place_ok(const SpawnNodes& job, const SpawnPlacementRequest& request)
{
    auto result = place_spawn(job, request);
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
    return result.ok() ? result.value() : Counts{};
}

std::string place_error(const SpawnNodes& job, const SpawnPlacementRequest& request)
{
    auto result = place_spawn(job, request);
    EXPECT_FALSE(result.ok());
    return result.ok() ? std::string() : result.error().message;
}

TEST(SpawnPlacement, SpreadsRoundRobinByDefault)
{
    EXPECT_EQ(place_ok(nodes(3, 4), ask(5)), (Counts{2, 2, 1}));
    EXPECT_EQ(place_ok(nodes(3, 4), ask(5, "node")), (Counts{2, 2, 1}));
}

TEST(SpawnPlacement, SpreadSkipsNodesWithoutFreeSlots)
{
    auto job = nodes(3, 2);
    job.free_slots = {0, 2, 1};
    EXPECT_EQ(place_ok(job, ask(3)), (Counts{0, 2, 1}));
}

TEST(SpawnPlacement, BySlotOrCoreFillsEachNodeInTurn)
{
    auto job = nodes(3, 4);
    job.free_slots = {1, 4, 4};
    EXPECT_EQ(place_ok(job, ask(6, "slot")), (Counts{1, 4, 1}));
    EXPECT_EQ(place_ok(job, ask(6, "core")), (Counts{1, 4, 1}));
}

TEST(SpawnPlacement, MappingIgnoresCaseAndModifiers)
{
    EXPECT_EQ(place_ok(nodes(2, 4), ask(3, "SLOT:PE=2")), (Counts{3, 0}));
    EXPECT_EQ(place_ok(nodes(2, 4), ask(3, "Node:NOOVERSUBSCRIBE")), (Counts{2, 1}));
}

TEST(SpawnPlacement, UnknownMappingNamesItAndTheSupportedOnes)
{
    EXPECT_EQ(place_error(nodes(2, 4), ask(1, "socket")),
              "PMIx_Spawn's PMIX_MAPBY 'socket' is not supported; canopy maps by node (the default: spread over the "
              "nodes) or by slot or core (fill each node in turn)");
}

TEST(SpawnPlacement, HostsRestrictTheNodesAndIgnoreSlotCounts)
{
    EXPECT_EQ(place_ok(nodes(4, 2), ask(3, "", {"n4", "n2:8"})), (Counts{0, 2, 0, 1}));
    EXPECT_EQ(place_ok(nodes(4, 2), ask(2, "", {"n3", "n3"})), (Counts{0, 0, 2, 0}));
}

TEST(SpawnPlacement, HostOutsideTheJobIsNamed)
{
    EXPECT_EQ(place_error(nodes(3, 2), ask(1, "", {"n2", "login1:4"})),
              "PMIx_Spawn's PMIX_HOST names 'login1', which is not one of the job's nodes (the job's nodes: n[1-3]); "
              "a spawn runs only on those");
}

TEST(SpawnPlacement, PerNodePlacesExactlyThatManyNodeByNode)
{
    EXPECT_EQ(place_ok(nodes(4, 4), ask(6, "", {}, 2)), (Counts{2, 2, 2, 0}));
    EXPECT_EQ(place_ok(nodes(4, 4), ask(5, "", {"n2", "n4"}, 3)), (Counts{0, 3, 0, 2}));
}

TEST(SpawnPlacement, PerNodeOnANodeWithoutRoomNamesTheNode)
{
    auto job = nodes(3, 4);
    job.free_slots = {4, 1, 4};
    EXPECT_EQ(place_error(job, ask(6, "", {}, 2)),
              "PMIx_Spawn asks for 2 ranks on each node (PMIX_PPR 2:node), but node n2 has 1 free spawn slot "
              "(--spawn-slots 4, 3 in use); start canopy with a larger --spawn-slots");
}

TEST(SpawnPlacement, PerNodeNeedingMoreNodesThanAllowedSaysHowMany)
{
    EXPECT_EQ(place_error(nodes(2, 8), ask(10, "", {}, 4)),
              "PMIx_Spawn asks for 10 ranks at 4 per node (PMIX_PPR 4:node), which takes 3 nodes, but the job has 2; "
              "ask for more per node or fewer ranks");
}

TEST(SpawnPlacement, CountBeyondTheFreeSlotsNamesTheLimit)
{
    EXPECT_EQ(place_error(nodes(8, 1), ask(64)),
              "PMIx_Spawn asks for 64 ranks, but the job's nodes have 8 free spawn slots (--spawn-slots 1 on each of "
              "8 nodes, 0 in use); start canopy with a larger --spawn-slots");
}

TEST(SpawnPlacement, SlotsInUseAreCountedAndExplained)
{
    auto job = nodes(2, 2);
    job.free_slots = {0, 1};
    EXPECT_EQ(place_error(job, ask(2, "slot")),
              "PMIx_Spawn asks for 2 ranks, but the job's nodes have 1 free spawn slot (--spawn-slots 2 on each of 2 "
              "nodes, 3 in use; spawned ranks keep their slots until the job ends); start canopy with a larger "
              "--spawn-slots");
}

TEST(SpawnPlacement, CountBeyondTheNamedHostsSaysSo)
{
    EXPECT_EQ(place_error(nodes(4, 2), ask(5, "", {"n1", "n2"})),
              "PMIx_Spawn asks for 5 ranks, but the 2 nodes PMIX_HOST names have 4 free spawn slots (--spawn-slots 2 "
              "on each of 2 nodes, 0 in use); start canopy with a larger --spawn-slots");
}

TEST(SpawnPlacement, WithoutSpawnSlotsTheErrorTeachesTheOption)
{
    EXPECT_EQ(place_error(nodes(2, 0), ask(1)),
              "PMIx_Spawn asks for 1 rank, but canopy was started without spawn slots; start it with --spawn-slots N "
              "to let PMIx_Spawn and MPI_Comm_spawn start up to N ranks on each node");
}

TEST(SpawnPlacement, ZeroRanksIsAnError)
{
    EXPECT_EQ(place_error(nodes(2, 4), ask(0)), "PMIx_Spawn asks for 0 ranks; ask for at least 1");
}

} // namespace
} // namespace canopy
