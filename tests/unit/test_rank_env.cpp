// Rank environment: every rank learns who it is under the names frameworks and MPI-era tools read.
#include <gtest/gtest.h>

#include "proc/rank_env.hpp"

namespace canopy {
namespace {

RankIdentity rank_five()
{
    RankIdentity who;
    who.rank = 5;
    who.world_size = 8;
    who.local_rank = 1;
    who.local_size = 2;
    who.node_rank = 2;
    who.nodes = 4;
    who.node_name = "nid003";
    who.master_addr = "nid001";
    who.master_port = 23456;
    who.job_id = "j1";
    who.node_tmpdir = "/tmp/canopy-j1-nid003";
    return who;
}

TEST(RankEnv, SetsTorchMpiAndPalsNames)
{
    auto env = rank_environment({"PATH=/usr/bin"}, rank_five());
    EXPECT_EQ(environment_value(env, "RANK"), "5");
    EXPECT_EQ(environment_value(env, "WORLD_SIZE"), "8");
    EXPECT_EQ(environment_value(env, "LOCAL_RANK"), "1");
    EXPECT_EQ(environment_value(env, "LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(environment_value(env, "NODE_RANK"), "2");
    EXPECT_EQ(environment_value(env, "GROUP_RANK"), "2");
    EXPECT_EQ(environment_value(env, "GROUP_WORLD_SIZE"), "4");
    EXPECT_EQ(environment_value(env, "ROLE_RANK"), "5");
    EXPECT_EQ(environment_value(env, "ROLE_WORLD_SIZE"), "8");
    EXPECT_EQ(environment_value(env, "MASTER_ADDR"), "nid001");
    EXPECT_EQ(environment_value(env, "MASTER_PORT"), "23456");
    EXPECT_EQ(environment_value(env, "PALS_RANKID"), "5");
    EXPECT_EQ(environment_value(env, "PALS_LOCAL_RANKID"), "1");
    EXPECT_EQ(environment_value(env, "CANOPY_NODE"), "nid003");
    EXPECT_EQ(environment_value(env, "PATH"), "/usr/bin");
}

TEST(RankEnv, DropsAnOuterLaunchersSimplePmiIdentity)
{
    // Set by the node's PMI server when canopy serves simple PMI; never inherited from a batch step or an outer
    // mpiexec, whose PMI_FD would point the rank at a server that is not its own.
    auto env = rank_environment({"PMI_FD=5", "PMI_RANK=0", "PMI_SIZE=1", "PMI_PORT=h:1", "PMI_DEBUG=1"}, rank_five());
    for (const char* name : {"PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "PMI_LOCAL_RANK"})
        EXPECT_EQ(environment_value(env, name), "") << name;
    EXPECT_EQ(environment_value(env, "PMI_DEBUG"), "1");   // a setting, not an identity
}

TEST(RankEnv, AnOuterLaunchersTaskIdentityIsMadeTheRanksOwn)
{
    // canopy in a Slurm step (the srun agent makes canopyd one) or under mpirun: what such a step's single task
    // was told must not reach the rank, or Lightning and JAX take every rank for rank 0.
    auto env = rank_environment({"SLURM_JOB_ID=77", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
                                 "SLURM_NTASKS=1", "SLURM_STEP_ID=3", "SLURM_STEP_NODELIST=n1", "SLURM_STEPID=3",
                                 "SLURM_CPU_BIND=quiet,mask_cpu:0x1", "OMPI_COMM_WORLD_RANK=0",
                                 "OMPI_COMM_WORLD_SIZE=1", "OMPI_MCA_btl=self,tcp", "MPI_LOCALRANKID=0"},
                                rank_five());
    EXPECT_EQ(environment_value(env, "SLURM_PROCID"), "5");
    EXPECT_EQ(environment_value(env, "SLURM_LOCALID"), "1");
    EXPECT_EQ(environment_value(env, "SLURM_NODEID"), "2");
    EXPECT_EQ(environment_value(env, "SLURM_NTASKS"), "8");
    EXPECT_EQ(environment_value(env, "OMPI_COMM_WORLD_RANK"), "5");
    EXPECT_EQ(environment_value(env, "OMPI_COMM_WORLD_SIZE"), "8");
    EXPECT_EQ(environment_value(env, "MPI_LOCALRANKID"), "1");
    for (const char* name : {"SLURM_STEP_ID", "SLURM_STEP_NODELIST", "SLURM_STEPID", "SLURM_CPU_BIND"})
        EXPECT_EQ(environment_value(env, name), "") << name;
    EXPECT_EQ(environment_value(env, "SLURM_JOB_ID"), "77");        // the allocation's
    EXPECT_EQ(environment_value(env, "OMPI_MCA_btl"), "self,tcp");  // a setting
}

TEST(RankEnv, AnIdentityThatWasNotInheritedIsNotInvented)
{
    // Setting SLURM_PROCID outside Slurm would make tools think they run under srun.
    auto env = rank_environment({"HOME=/h"}, rank_five());
    for (const char* name : {"SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID"})
        EXPECT_EQ(environment_value(env, name), "") << name;
}

TEST(RankEnv, DropsAnOuterPmixServersIdentityButKeepsPmixSettings)
{
    auto env = rank_environment({"PMIX_RANK=0", "PMIX_NAMESPACE=outer", "PMIX_SERVER_URI41=outer;tcp://1.2.3.4:5",
                                 "PMIX_SERVER_TMPDIR=/tmp/outer", "PMIX_MCA_gds=hash"},
                                rank_five());
    for (const char* name : {"PMIX_RANK", "PMIX_NAMESPACE", "PMIX_SERVER_URI41", "PMIX_SERVER_TMPDIR"})
        EXPECT_EQ(environment_value(env, name), "") << name;
    EXPECT_EQ(environment_value(env, "PMIX_MCA_gds"), "hash");
}

TEST(RankEnv, ReplacesStaleValuesInsteadOfDuplicatingThem)
{
    auto env = rank_environment({"RANK=99", "WORLD_SIZE=1", "HOME=/h"}, rank_five());
    int rank_entries = 0;
    for (const auto& entry : env)
        rank_entries += entry.starts_with("RANK=");
    EXPECT_EQ(rank_entries, 1);
    EXPECT_EQ(environment_value(env, "RANK"), "5");
    EXPECT_EQ(environment_value(env, "HOME"), "/h");
}

TEST(RankEnv, SettingAValueReplacesEveryInheritedOneOfThatNameOnly)
{
    std::vector<std::string> env{"CANOPY_AGENT_SOCKET=/outer.sock", "CANOPY_AGENT_SOCKETS=keep",
                                 "CANOPY_AGENT_SOCKET=/older.sock", "HOME=/h"};
    set_environment_value(env, "CANOPY_AGENT_SOCKET", "/mine.sock");
    EXPECT_EQ(env, (std::vector<std::string>{"CANOPY_AGENT_SOCKETS=keep", "HOME=/h", "CANOPY_AGENT_SOCKET=/mine.sock"}));
}

TEST(RankEnv, LookupMatchesWholeNamesOnly)
{
    std::vector<std::string> env{"PATHX=/no", "PATH=/yes"};
    EXPECT_EQ(environment_value(env, "PATH"), "/yes");
    EXPECT_EQ(environment_value(env, "PAT"), "");
}

} // namespace
} // namespace canopy
