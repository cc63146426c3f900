// libcanopy tells torchrun, Open MPI, Hydra, PALS and Slurm apart by their variables, and refuses ones that
// contradict each other instead of calling a rank of a larger job a singleton.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "api/launcher_env.hpp"

namespace canopy::api {
namespace {

using Environment = std::map<std::string, std::string>;

Result<std::optional<ForeignLaunch>> find(const Environment& environment)
{
    return find_foreign_launcher([&](const char* name) -> const char* {
        auto found = environment.find(name);
        return found == environment.end() || found->second.empty() ? nullptr : found->second.c_str();
    });
}

ForeignLaunch found(const Environment& environment)
{
    auto launch = find(environment);
    EXPECT_TRUE(launch.ok()) << launch.error().message;
    EXPECT_TRUE(launch.ok() && launch->has_value());
    return launch.ok() && launch->has_value() ? **launch : ForeignLaunch{};
}

std::string refused(const Environment& environment)
{
    auto launch = find(environment);
    EXPECT_FALSE(launch.ok());
    return launch.ok() ? std::string() : launch.error().message;
}

void expect_place(const ForeignLaunch& launch, int mode, std::vector<int> place)
{
    EXPECT_STREQ(mode_name(launch.mode), mode_name(mode));
    const RankInfo& info = launch.info;
    EXPECT_EQ((std::vector<int>{info.rank, info.size, info.local_rank, info.local_size, info.node_rank,
                                info.num_nodes}), place);
}

const Environment torchrun{{"TORCHELASTIC_RUN_ID", "job"}, {"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                           {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"}, {"GROUP_WORLD_SIZE", "2"}};

TEST(LauncherEnv, NothingSetIsNoLauncher)
{
    auto launch = find({{"HOME", "/root"}});
    ASSERT_TRUE(launch.ok());
    EXPECT_FALSE(launch->has_value());
}

TEST(LauncherEnv, Torchrun)
{
    auto launch = found(torchrun);
    expect_place(launch, CANOPY_MODE_TORCHRUN, {5, 8, 1, 4, 1, 2});
    EXPECT_FALSE(launch.own_pmix);
}

TEST(LauncherEnv, OpenMpiOnOneNodeAndItsNodeRankIsNotTheNodesIndex)
{
    // OMPI_COMM_WORLD_NODE_RANK counts the node's processes: it must not become the node index.
    auto launch = found({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                         {"OMPI_COMM_WORLD_NODE_RANK", "2"}, {"OMPI_MCA_orte_num_nodes", "1"}});
    expect_place(launch, CANOPY_MODE_OPEN_MPI, {2, 3, 2, 3, 0, 1});
    EXPECT_TRUE(launch.own_pmix);
}

TEST(LauncherEnv, OpenMpiAcrossNodesLeavesTheNodeIndexToPmix)
{
    auto launch = found({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                         {"OMPI_COMM_WORLD_NODE_RANK", "1"}, {"OMPI_MCA_orte_num_nodes", "2"}});
    expect_place(launch, CANOPY_MODE_OPEN_MPI, {5, 8, 1, 4, -1, 2});
}

TEST(LauncherEnv, Hydra)
{
    auto launch = found({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"PMI_FD", "6"}, {"MPI_LOCALRANKID", "1"},
                         {"MPI_LOCALNRANKS", "2"}});
    expect_place(launch, CANOPY_MODE_HYDRA, {1, 2, 1, 2, 0, 1});
    EXPECT_FALSE(launch.own_pmix);
    // Across nodes Hydra names no node: -1, not a guess.
    expect_place(found({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}}),
                 CANOPY_MODE_HYDRA, {3, 4, 1, 2, -1, -1});
}

TEST(LauncherEnv, SlurmStepTakesItsOwnCountsAndItsNodesTaskCount)
{
    // An srun step of 7 tasks on 3 nodes (3, 3, 1) inside an allocation of 16 tasks on 4 nodes.
    auto launch = found({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "16"}, {"SLURM_STEP_NUM_TASKS", "7"},
                         {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "2"}, {"SLURM_NNODES", "4"},
                         {"SLURM_STEP_NUM_NODES", "3"}, {"SLURM_TASKS_PER_NODE", "4(x4)"},
                         {"SLURM_STEP_TASKS_PER_NODE", "3(x2),1"}});
    expect_place(launch, CANOPY_MODE_SLURM, {6, 7, 0, 1, 2, 3});
    // Without the step's variables, the allocation's.
    expect_place(found({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"},
                        {"SLURM_NNODES", "2"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}}),
                 CANOPY_MODE_SLURM, {5, 8, 1, 4, 1, 2});
}

TEST(LauncherEnv, SlurmVariablesOfAnOuterStepGiveWayToPmix)
{
    // prterun started by srun: its ranks inherit the srun step's SLURM_PROCID, but PMIx numbers them.
    auto launch = find({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"PMIX_RANK", "3"}});
    ASSERT_TRUE(launch.ok());
    EXPECT_FALSE(launch->has_value());
    // srun --mpi=pmix: the same numbers, and the PMIx server is Slurm's.
    auto direct = found({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "0"},
                         {"SLURM_NNODES", "1"}, {"SLURM_TASKS_PER_NODE", "2"}, {"PMIX_RANK", "1"}});
    expect_place(direct, CANOPY_MODE_SLURM, {1, 2, 1, 2, 0, 1});
    EXPECT_TRUE(direct.own_pmix);
}

TEST(LauncherEnv, Pals)
{
    expect_place(found({{"PALS_RANKID", "3"}, {"PALS_LOCAL_RANKID", "1"}, {"PALS_NODEID", "1"}, {"PMI_SIZE", "4"},
                        {"PMI_LOCAL_SIZE", "2"}}),
                 CANOPY_MODE_PALS, {3, 4, 1, 2, 1, -1});
}

TEST(LauncherEnv, TheInnermostLauncherWins)
{
    // torchrun started by srun, one agent per node: the workers carry the agent's Slurm task.
    Environment nested = torchrun;
    nested.insert({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODEID", "1"}, {"SLURM_NNODES", "2"}});
    expect_place(found(nested), CANOPY_MODE_TORCHRUN, {5, 8, 1, 4, 1, 2});
}

TEST(LauncherEnv, ContradictionsAreErrorsThatNameTheVariables)
{
    Environment bad = torchrun;
    bad["RANK"] = "8";
    EXPECT_EQ(refused(bad), "RANK=8 is not below WORLD_SIZE=8: the torchrun variables contradict each other (was the "
                            "environment changed after launch?)");
    bad = torchrun;
    bad["LOCAL_RANK"] = "4";
    EXPECT_NE(refused(bad).find("LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"), std::string::npos);
    bad = torchrun;
    bad["GROUP_RANK"] = "2";
    EXPECT_NE(refused(bad).find("GROUP_RANK=2 is not below GROUP_WORLD_SIZE=2"), std::string::npos);
    bad = torchrun;
    bad["LOCAL_WORLD_SIZE"] = "9";
    EXPECT_NE(refused(bad).find("LOCAL_WORLD_SIZE=9 is more than WORLD_SIZE=8"), std::string::npos);
    bad = torchrun;
    bad["WORLD_SIZE"] = "eight";
    EXPECT_NE(refused(bad).find("WORLD_SIZE='eight' is not a rank count"), std::string::npos);
    bad = torchrun;
    bad.erase("WORLD_SIZE");
    EXPECT_NE(refused(bad).find("TORCHELASTIC_RUN_ID is set, so torchrun started this process, but WORLD_SIZE is "
                                "not"), std::string::npos);
    EXPECT_NE(refused({{"PALS_RANKID", "2"}}).find("PMI_SIZE is not"), std::string::npos);
    EXPECT_NE(refused({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NODEID", "3"},
                       {"SLURM_TASKS_PER_NODE", "2(x2)"}}).find("SLURM_TASKS_PER_NODE='2(x2)' lists 2 nodes, but "
                                                                "this is node 3"), std::string::npos);
    EXPECT_NE(refused({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NODEID", "0"},
                       {"SLURM_TASKS_PER_NODE", "2(y2)"}}).find("is not a task count per node"), std::string::npos);
}

TEST(LauncherEnv, AWorldSizeWithoutALauncherIsNotASingleton)
{
    auto lookup = [](const Environment& environment) {
        return [environment](const char* name) -> const char* {
            auto found = environment.find(name);
            return found == environment.end() ? nullptr : found->second.c_str();
        };
    };
    EXPECT_TRUE(check_no_world(lookup({{"WORLD_SIZE", "1"}})).ok());
    EXPECT_TRUE(check_no_world(lookup({})).ok());
    auto refused = check_no_world(lookup({{"RANK", "2"}, {"WORLD_SIZE", "4"}}));
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("WORLD_SIZE=4 says this process is one of 4 ranks"), std::string::npos);
}

TEST(LauncherEnv, ModeNamesRunWithoutGaps)
{
    EXPECT_STREQ(mode_name(CANOPY_MODE_NONE), "none");
    EXPECT_STREQ(mode_name(CANOPY_MODE_OPEN_MPI), "open-mpi");
    EXPECT_STREQ(mode_name(CANOPY_MODE_PALS), "pals");
    EXPECT_EQ(mode_name(CANOPY_MODE_PALS + 1), nullptr);
}

} // namespace
} // namespace canopy::api
