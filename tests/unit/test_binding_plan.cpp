// Unit tests for binding plans: each mode on the topologies of Polaris, Aurora, Perlmutter and Frontier nodes, and
// every refusal, checked as a user would read --report-bindings.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "affinity/binding_plan.hpp"
#include "affinity/binding_request.hpp"
#include "affinity/hwloc_loader.hpp"

namespace canopy {
namespace {

NodeTopology node_type(const std::string& name)
{
    const char* dir = std::getenv("CANOPY_TEST_TOPOLOGIES");
    auto topology = load_node_topology(std::string(dir == nullptr ? "tests/topologies" : dir) + "/" + name + ".xml");
    EXPECT_TRUE(topology.ok()) << (topology.ok() ? "" : topology.error().message);
    return topology.ok() ? *topology : NodeTopology{};
}

BindingRequest request(std::string cpu, std::string gpu = "none", std::string mem = "none", long gpus_per_rank = 0,
                       long tiles_per_rank = 0)
{
    wire::BindingSpec spec;
    spec.cpu_bind = std::move(cpu);
    spec.gpu_bind = std::move(gpu);
    spec.mem_bind = std::move(mem);
    spec.gpus_per_rank = static_cast<std::uint64_t>(gpus_per_rank);
    spec.gpu_tiles_per_rank = static_cast<std::uint64_t>(tiles_per_rank);
    auto made = binding_request(spec);
    EXPECT_TRUE(made.ok()) << (made.ok() ? "" : made.error().message);
    return made.ok() ? *made : BindingRequest{};
}

std::vector<RankBinding> plan_ok(const NodeTopology& node, const BindingRequest& asked, long ranks)
{
    auto plan = plan_bindings(node, asked, ranks, {"nid000042", 0});
    EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().message);
    return plan.ok() ? *plan : std::vector<RankBinding>{};
}

std::string refusal(const NodeTopology& node, const BindingRequest& asked, long ranks)
{
    auto plan = plan_bindings(node, asked, ranks, {"nid000042", 8});
    EXPECT_FALSE(plan.ok());
    return plan.ok() ? std::string() : plan.error().message;
}

std::vector<std::string> gpus_of(const std::vector<RankBinding>& plan)
{
    std::vector<std::string> names;
    for (const auto& rank : plan) {
        std::string name;
        for (const auto& gpu : rank.gpus)
            name += (name.empty() ? "" : ",") + gpu_name(gpu);
        names.push_back(name);
    }
    return names;
}

std::vector<std::string> cpus_of(const std::vector<RankBinding>& plan)
{
    std::vector<std::string> lists;
    for (const auto& rank : plan)
        lists.push_back(compress_cpu_list(rank.cpus));
    return lists;
}

std::string env_value(const std::vector<std::string>& env, const std::string& name)
{
    for (const auto& setting : env)
        if (setting.starts_with(name + "="))
            return setting.substr(name.size() + 1);
    return "(unset)";
}

TEST(NodeTopologyFiles, ShowEachNodeTypesDevices)
{
    auto polaris = node_type("polaris");
    EXPECT_EQ(polaris.cores.size(), 32u);
    EXPECT_EQ(polaris.gpus.size(), 4u);
    EXPECT_TRUE(polaris.tiles.empty());
    EXPECT_EQ(polaris.nics.size(), 2u);
    auto aurora = node_type("aurora");
    EXPECT_EQ(aurora.packages.size(), 2u);
    EXPECT_EQ(aurora.cores.size(), 104u);
    EXPECT_EQ(aurora.gpus.size(), 6u);
    EXPECT_EQ(aurora.tiles.size(), 12u);
    EXPECT_EQ(aurora.nics.size(), 8u);
    EXPECT_EQ(aurora.nics.front().device, "cxi0");
    EXPECT_EQ(aurora.nics.front().interface, "hsn0");
    auto frontier = node_type("frontier");
    EXPECT_EQ(frontier.gpus.size(), 8u);
    EXPECT_EQ(frontier.gpus.front().vendor, GpuVendor::amd);
    EXPECT_EQ(frontier.numa_domains.size(), 4u);
}

// Perlmutter's trap: GPU 0 sits next to the last NUMA domain. A rank on the first cores gets GPU 3, not GPU 0.
TEST(BindingPlan, ClosestFollowsTheTopologyNotTheGpuNumbers)
{
    auto perlmutter = node_type("perlmutter-gpu");
    auto plan = plan_ok(perlmutter, request("numa", "closest"), 4);
    EXPECT_EQ(gpus_of(plan), (std::vector<std::string>{"3", "2", "1", "0"}));
    EXPECT_EQ(cpus_of(plan), (std::vector<std::string>{"0-15,64-79", "16-31,80-95", "32-47,96-111", "48-63,112-127"}));
    auto polaris = node_type("polaris");
    EXPECT_EQ(gpus_of(plan_ok(polaris, request("gpu", "closest"), 4)), (std::vector<std::string>{"3", "2", "1", "0"}));
}

// Frontier's GCDs by L3, as OLCF's map has them: cores 0-7 -> GCD 4, 8-15 -> 5, 16-23 -> 2, ...
TEST(BindingPlan, CoresNearTheirGpuOnFrontier)
{
    auto frontier = node_type("frontier");
    auto plan = plan_ok(frontier, request("gpu", "closest"), 8);
    EXPECT_EQ(gpus_of(plan), (std::vector<std::string>{"4", "5", "2", "3", "6", "7", "0", "1"}));
    EXPECT_EQ(cpus_of(plan)[0], "0-7,64-71");
    EXPECT_EQ(cpus_of(plan)[7], "56-63,120-127");
    std::vector<std::string> env;
    add_binding_environment(env, plan[0]);
    EXPECT_EQ(env_value(env, "ROCR_VISIBLE_DEVICES"), "4");
    EXPECT_EQ(env_value(env, "HIP_VISIBLE_DEVICES"), "0");
    EXPECT_EQ(env_value(env, "CANOPY_GPUS"), "4");
    EXPECT_EQ(env_value(env, "CANOPY_CPUS"), "0-7,64-71");
    // The NIC in the same NUMA domain as GCD 4 (cores 8-15), not the first one listed.
    EXPECT_EQ(env_value(env, "CANOPY_NICS"), "cxi2");
}

// Two ranks on a two-package node: one package each, not GPUs 0 and 1 of the first.
TEST(BindingPlan, UnboundRanksSpreadOverPackages)
{
    auto aurora = node_type("aurora");
    auto plan = plan_ok(aurora, request("none", "closest", "none", 1), 2);
    EXPECT_EQ(gpus_of(plan), (std::vector<std::string>{"0", "3"}));
}

// Aurora as its job scripts bind it: twelve ranks, a tile each, the cores next to it, the system's cores left out.
TEST(BindingPlan, AuroraTilesWithReservedCores)
{
    auto aurora = node_type("aurora");
    auto asked = request("gpu", "closest", "local");
    asked.reserved = {0, 52, 104, 156};
    auto plan = plan_ok(aurora, asked, 12);
    EXPECT_EQ(gpus_of(plan), (std::vector<std::string>{"0.0", "0.1", "1.0", "1.1", "2.0", "2.1", "3.0", "3.1", "4.0",
                                                       "4.1", "5.0", "5.1"}));
    for (const auto& rank : plan)
        for (int reserved : {0, 52, 104, 156})
            EXPECT_FALSE(std::binary_search(rank.cpus.begin(), rank.cpus.end(), reserved));
    EXPECT_EQ(plan[0].numa, std::vector<int>{0});
    EXPECT_EQ(plan[11].numa, std::vector<int>{1});
    std::vector<std::string> flat, composite{"ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE"};
    add_binding_environment(flat, plan[3]);
    add_binding_environment(composite, plan[3]);
    EXPECT_EQ(env_value(flat, "ZE_AFFINITY_MASK"), "3");        // GPU 1's tile 1 is flat device 3
    EXPECT_EQ(env_value(composite, "ZE_AFFINITY_MASK"), "1.1");
    EXPECT_EQ(env_value(flat, "CANOPY_GPUS"), "1.1");
    // Whole GPUs when asked for: two per rank.
    auto whole = plan_ok(aurora, request("none", "closest", "none", 2), 3);
    EXPECT_EQ(gpus_of(whole), (std::vector<std::string>{"0,1", "2,3", "4,5"}));
}

TEST(BindingPlan, CudaVariablesNameGpusInPciOrder)
{
    auto polaris = node_type("polaris");
    auto plan = plan_ok(polaris, request("core", "closest"), 2);
    std::vector<std::string> env;
    add_binding_environment(env, plan[0]);
    EXPECT_EQ(env_value(env, "CUDA_VISIBLE_DEVICES"), "3");
    EXPECT_EQ(env_value(env, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
    EXPECT_EQ(env_value(env, "CANOPY_CPUS"), "0,32");   // a whole core: both its hardware threads
}

TEST(BindingPlan, ListsNameGpusAndNumaNodes)
{
    auto aurora = node_type("aurora");
    auto plan = plan_ok(aurora, request("list:1-8:53-60", "list:0.1:5.0", "list:0:1"), 2);
    EXPECT_EQ(gpus_of(plan), (std::vector<std::string>{"0.1", "5.0"}));
    EXPECT_EQ(plan[1].numa, std::vector<int>{1});
    EXPECT_EQ(cpus_of(plan)[1], "53-60");
}

// PMIx's locality string: logical indexes (a core's two threads are HT 2k and 2k+1), as PMIx's server writes it
// (tests/pmix/test_locality_string.cpp holds canopy to that on this machine).
TEST(BindingPlan, LocalityNamesTheObjectsARankTouches)
{
    auto aurora = node_type("aurora");
    EXPECT_EQ(locality_string(aurora, {1, 2, 3, 4, 5, 6, 7, 8, 105, 106, 107, 108, 109, 110, 111, 112}),
              "SK0:L30:L21-8:L11-8:CR1-8:HT2-17:NM0");
    EXPECT_EQ(locality_string(aurora, {53}), "SK1:L31:L253:L153:CR53:HT106:NM1");
    auto plan = plan_ok(aurora, request("core"), 2);
    EXPECT_EQ(plan[1].locality, "SK0:L30:L21:L11:CR1:HT2-3:NM0");
    EXPECT_TRUE(plan_ok(aurora, request("none"), 1)[0].locality.empty());
}

// A batch system that gives the job two of a node's GPUs says so in the daemon's environment: bind among those.
TEST(BindingPlan, OnlyTheGpusTheAllocationLeftAreBound)
{
    auto polaris = node_type("polaris");
    keep_visible_gpus(polaris, [](const char* name) { return std::string(name) == "CUDA_VISIBLE_DEVICES" ? "1,2" : nullptr; });
    EXPECT_EQ(gpus_of(plan_ok(polaris, request("none", "closest"), 2)), (std::vector<std::string>{"2", "1"}));
    EXPECT_NE(refusal(polaris, request("none", "closest"), 3).find("it has 2 (1,2)"), std::string::npos);
    auto aurora = node_type("aurora");
    keep_visible_gpus(aurora, [](const char* name) { return std::string(name) == "ZE_AFFINITY_MASK" ? "0.1,4" : nullptr; });
    EXPECT_EQ(gpus_of(plan_ok(aurora, request("none", "closest"), 3)), (std::vector<std::string>{"0.1", "4.0", "4.1"}));
    auto named_otherwise = node_type("polaris");
    keep_visible_gpus(named_otherwise, [](const char* name) {
        return std::string(name) == "CUDA_VISIBLE_DEVICES" ? "GPU-a1000000-0000-4000-8000-000000000003" : nullptr;
    });
    EXPECT_EQ(named_otherwise.gpus.size(), 4u);
}

TEST(BindingRefusals, EachNamesTheNodeAndTheReason)
{
    auto polaris = node_type("polaris");
    EXPECT_EQ(refusal(polaris, request("none", "closest"), 5),
              "--gpu-bind closest: 5 ranks on nid000042 need 5 GPUs, it has 4 (0,1,2,3); give fewer ranks per node or "
              "fewer per rank, or let ranks share them with --oversubscribe");
    EXPECT_EQ(refusal(polaris, request("none", "list:0:7"), 2),
              "--gpu-bind list:0:7: nid000042 has no GPU 7 (it has 0,1,2,3; topology: " + polaris.source + ")");
    EXPECT_EQ(refusal(polaris, request("none", "list:1:1"), 2),
              "--gpu-bind list:1:1 gives GPU 1 of nid000042 to ranks 8 and 9; name one for each, or let ranks share "
              "with --oversubscribe");
    EXPECT_NE(refusal(polaris, request("none", "closest", "none", 0, 2), 1).find("have no tiles"), std::string::npos);
    EXPECT_EQ(refusal(polaris, request("none", "none", "list:9"), 1),
              "--mem-bind list:9: nid000042 has no NUMA node 9 (it has 0-3; topology: " + polaris.source + ")");
    EXPECT_NE(refusal(polaris, request("none", "none", "local"), 1).find("--mem-bind local binds memory"),
              std::string::npos);
    auto cpu_only = flat_topology({0, 1});
    EXPECT_EQ(refusal(cpu_only, request("none", "closest"), 1),
              "--gpu-bind closest: nid000042 has no GPUs (topology: this machine's CPUs)");
    auto shared = request("none", "closest");
    shared.share_ok = true;
    EXPECT_EQ(plan_ok(polaris, shared, 8).size(), 8u);   // --oversubscribe: ranks share GPUs
    auto site_default = request("gpu", "closest");
    site_default.gpus_optional = true;   // a GPU site's profile on one of its CPU nodes
    auto plan = plan_ok(cpu_only, site_default, 2);
    EXPECT_EQ(cpus_of(plan), (std::vector<std::string>{"0", "1"}));
}

TEST(BindingRequests, ContradictionsAreRefusedBeforeAnyNode)
{
    wire::BindingSpec spec;
    spec.cpu_bind = "gpu";
    auto made = binding_request(spec);
    ASSERT_FALSE(made.ok());
    EXPECT_NE(made.error().message.find("give --gpu-bind closest"), std::string::npos);
    EXPECT_FALSE(parse_gpu_bind("closest", 1, 2).ok());
    EXPECT_FALSE(parse_gpu_bind("list:0:x", 0, 0).ok());
    EXPECT_FALSE(parse_mem_bind("list:0::1").ok());
    EXPECT_FALSE(parse_gpu_bind("none", 2, 0).ok());
}

} // namespace
} // namespace canopy
