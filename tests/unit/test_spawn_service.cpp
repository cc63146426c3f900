// Unit tests for the root's side of PMIx_Spawn: names, tree ranks and spawn slots across several spawns.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/config.hpp"
#include "launch_plan.hpp"
#include "services/spawn_service.hpp"

namespace canopy {
namespace {

using Counts = std::vector<std::uint64_t>;

// A job "j1" of 2 ranks on each of `nodes` nodes, with `slots` spawn slots per node.
wire::LaunchPlan job_plan(int nodes, std::uint64_t slots)
{
    wire::LaunchPlan plan;
    plan.job_id = "j1";
    std::vector<std::string> hosts;
    for (int i = 1; i <= nodes; ++i)
        hosts.push_back("n" + std::to_string(i));
    plan.hosts = HostNames(hosts);
    plan.job.ranks_per_node.assign(static_cast<std::size_t>(nodes), 2);
    plan.job.apps = {{{"./job"}, {}, "/job/dir", static_cast<std::uint64_t>(nodes) * 2}};
    plan.job.spawn_slots = slots;
    return plan;
}

wire::SpawnRequest request(std::uint64_t count, std::string map_by = "")
{
    wire::SpawnRequest ask;
    ask.parent_rank = 1;
    ask.argv = {"./worker", "--fast"};
    ask.env = {"A=1"};
    ask.count = count;
    ask.map_by = std::move(map_by);
    return ask;
}

SpawnService::Started start_ok(SpawnService& service, const wire::SpawnRequest& ask)
{
    auto started = service.start(ask);
    EXPECT_TRUE(started.ok()) << (started.ok() ? "" : started.error().message);
    return started.ok() ? *started : SpawnService::Started{};
}

TEST(SpawnService, NamespaceCarriesTheRequestAndTheJobsDirectory)
{
    SpawnService service(job_plan(2, 4));
    auto started = start_ok(service, request(3));
    EXPECT_EQ(started.start.nspace, "canopy.j1.1");
    EXPECT_EQ(started.start.first, 4u);
    EXPECT_EQ(started.start.ranks_per_node, (Counts{2, 1}));
    EXPECT_EQ(started.start.parent_rank, 1u);
    EXPECT_EQ(started.start.argv, (std::vector<std::string>{"./worker", "--fast"}));
    EXPECT_EQ(started.start.env, (std::vector<std::string>{"A=1"}));
    EXPECT_EQ(started.start.wdir, "/job/dir");
    EXPECT_EQ(started.reply.nspace, "canopy.j1.1");
    EXPECT_EQ(started.reply.first, 4u);
    EXPECT_EQ(started.reply.size, 3u);
}

TEST(SpawnService, RequestsOwnDirectoryWins)
{
    SpawnService service(job_plan(2, 4));
    auto ask = request(1);
    ask.wdir = "/elsewhere";
    EXPECT_EQ(start_ok(service, ask).start.wdir, "/elsewhere");
}

TEST(SpawnService, NamesCountUpAndTreeRanksFollowEachOther)
{
    SpawnService service(job_plan(2, 4));
    auto first = start_ok(service, request(3));
    auto second = start_ok(service, request(2));
    EXPECT_EQ(second.start.nspace, "canopy.j1.2");
    EXPECT_EQ(second.start.first, first.start.first + 3);
    EXPECT_EQ(service.tree_ranks(), 4 + 3 + 2);
}

TEST(SpawnService, UsedSlotsStayUsedAndFailuresBookNothing)
{
    SpawnService service(job_plan(2, 2));
    start_ok(service, request(3, "slot"));
    EXPECT_EQ(service.used_slots(), (Counts{2, 1}));
    auto refused = service.start(request(2));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().message,
              "PMIx_Spawn asks for 2 ranks, but the job's nodes have 1 free spawn slot (--spawn-slots 2 on each of 2 "
              "nodes, 3 in use; spawned ranks keep their slots until the job ends); start canopy with a larger "
              "--spawn-slots");
    EXPECT_EQ(service.used_slots(), (Counts{2, 1}));
    EXPECT_EQ(service.tree_ranks(), 4 + 3);
    // The last slot still serves, under the next name.
    auto last = start_ok(service, request(1));
    EXPECT_EQ(last.start.nspace, "canopy.j1.2");
    EXPECT_EQ(last.start.ranks_per_node, (Counts{0, 1}));
}

TEST(SpawnService, ProgramIsRequired)
{
    SpawnService service(job_plan(1, 1));
    auto ask = request(1);
    ask.argv.clear();
    auto refused = service.start(ask);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().message, "PMIx_Spawn names no program to start");
}

TEST(SpawnService, ASpawnRequestCrossesTheTreeWhole)
{
    auto bytes = wire::encode_fields(request(5, "slot"));
    auto decoded = wire::decode_fields<wire::SpawnRequest>(bytes, wire::SpawnRequest::name);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(decoded->count, 5u);
    EXPECT_EQ(decoded->map_by, "slot");
    EXPECT_EQ(decoded->argv, (std::vector<std::string>{"./worker", "--fast"}));
}

TEST(SpawnService, SpawnSlotsOptionReachesTheJob)
{
    auto options = parse_options({"--sim-nodes", "2", "--spawn-slots", "3", "hostname"});
    ASSERT_TRUE(options.ok()) << options.error().message;
    auto root = make_root_plan(*options, Config{}, {}, "/bin/true");
    ASSERT_TRUE(root.ok()) << root.error().message;
    EXPECT_EQ(root->plan.job.spawn_slots, 3u);
    EXPECT_EQ(SpawnService(root->plan).tree_ranks(), root->placement.world_size);
}

} // namespace
} // namespace canopy
