// Unit tests for canopy's command line: every mpiexec spelling, where options end, and the error messages.
#include "options.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace canopy {
namespace {

Options parse_ok(std::vector<std::string> args)
{
    auto parsed = parse_options(args);
    EXPECT_TRUE(parsed.ok()) << (parsed.ok() ? "" : parsed.error().message);
    return parsed.ok() ? *parsed : Options{};
}

std::string parse_error(std::vector<std::string> args)
{
    auto parsed = parse_options(args);
    EXPECT_FALSE(parsed.ok());
    return parsed.ok() ? "" : parsed.error().message;
}

TEST(Options, EveryRanksSpellingSetsRanks)
{
    for (const char* spelling : {"-n", "-np", "--np", "--n"}) {
        EXPECT_EQ(parse_ok({spelling, "6", "prog"}).apps[0].ranks, 6L) << spelling;
    }
    EXPECT_EQ(parse_ok({"--np=7", "prog"}).apps[0].ranks, 7L);
}

TEST(Options, EveryRanksPerNodeSpellingSetsPpn)
{
    for (const char* spelling : {"-ppn", "--ppn", "-N", "--npernode", "-npernode"}) {
        EXPECT_EQ(parse_ok({spelling, "4", "prog"}).ppn, 4L) << spelling;
    }
}

TEST(Options, EveryHostfileSpellingSetsHostfile)
{
    for (const char* spelling : {"--hostfile", "-hostfile", "-f", "-machinefile", "--machinefile"}) {
        EXPECT_EQ(parse_ok({spelling, "nodes.txt", "prog"}).hostfile, "nodes.txt") << spelling;
    }
    EXPECT_EQ(parse_ok({"--hostfile=n.txt", "prog"}).hostfile, "n.txt");
}

TEST(Options, EveryHostsSpellingSetsHosts)
{
    for (const char* spelling : {"--hosts", "-hosts", "--host", "-host"}) {
        EXPECT_EQ(parse_ok({spelling, "a,b", "prog"}).hosts, "a,b") << spelling;
    }
}

TEST(Options, SimNodesIsStored)
{
    EXPECT_EQ(parse_ok({"--sim-nodes", "3", "prog"}).sim_nodes, 3);
    EXPECT_EQ(parse_ok({"prog"}).sim_nodes, 0);
}

// -genv sets every program's ranks' variables; --env, -env and -x those of the program they come with.
const std::vector<EnvAssignment>& settings_of(const Options& options, std::string_view spelling)
{
    return spelling.find("genv") != std::string_view::npos ? options.env : options.apps[0].env;
}

TEST(Options, EnvAcceptsOneArgumentKeyValue)
{
    for (const char* spelling : {"--env", "-env", "-genv", "--genv"}) {
        Options options = parse_ok({spelling, "A=1=2", "prog"});
        const auto& env = settings_of(options, spelling);
        ASSERT_EQ(env.size(), 1u) << spelling;
        EXPECT_EQ(env[0].name, "A");
        EXPECT_EQ(env[0].value, "1=2");
    }
}

TEST(Options, EnvAcceptsHydraTwoArgumentForm)
{
    for (const char* spelling : {"--env", "-env", "-genv", "--genv"}) {
        Options options = parse_ok({spelling, "OMP_NUM_THREADS", "4", "prog"});
        const auto& env = settings_of(options, spelling);
        ASSERT_EQ(env.size(), 1u) << spelling;
        EXPECT_EQ(env[0].name, "OMP_NUM_THREADS");
        EXPECT_EQ(env[0].value, "4");
        EXPECT_EQ(options.apps[0].command, std::vector<std::string>{"prog"});
    }
}

TEST(Options, OpenMpiExportCopiesOrSets)
{
    Options options = parse_ok({"-x", "PATH", "-x", "B=2", "--env=C=3", "prog"});
    const auto& env = options.apps[0].env;
    ASSERT_EQ(env.size(), 3u);
    EXPECT_EQ(env[0].name, "PATH");
    EXPECT_FALSE(env[0].value.has_value());
    EXPECT_EQ(env[1].name, "B");
    EXPECT_EQ(env[1].value, "2");
    EXPECT_EQ(env[2].name, "C");
    EXPECT_EQ(env[2].value, "3");
}

TEST(Options, EnvModesFollowLastOption)
{
    EXPECT_EQ(parse_ok({"prog"}).env_mode, EnvMode::all);
    for (const char* spelling : {"--envnone", "-envnone", "-genvnone"}) {
        EXPECT_EQ(parse_ok({spelling, "prog"}).env_mode, EnvMode::none) << spelling;
    }
    for (const char* spelling : {"--envall", "-envall", "-genvall"}) {
        EXPECT_EQ(parse_ok({"--envnone", spelling, "prog"}).env_mode, EnvMode::all) << spelling;
    }
    for (const char* spelling : {"--envlist", "-envlist", "-genvlist"}) {
        Options options = parse_ok({spelling, "A,B,C", "prog"});
        EXPECT_EQ(options.env_mode, EnvMode::list) << spelling;
        EXPECT_EQ(options.env_list, (std::vector<std::string>{"A", "B", "C"}));
    }
}

TEST(Options, LabelAndLineBufferSpellings)
{
    for (const char* spelling : {"-l", "--label", "--tag-output", "-prepend-rank", "--prepend-rank"}) {
        EXPECT_TRUE(parse_ok({spelling, "prog"}).label) << spelling;
    }
    for (const char* spelling : {"--line-buffer", "--line-buffered"}) {
        EXPECT_TRUE(parse_ok({spelling, "prog"}).line_buffer) << spelling;
    }
    EXPECT_FALSE(parse_ok({"prog"}).label);
}

TEST(Options, BindingSpellings)
{
    EXPECT_FALSE(parse_ok({"prog"}).cpu_bind);   // the config's [bind] cpu_bind
    EXPECT_EQ(parse_ok({"--cpu-bind", "depth", "prog"}).cpu_bind, "depth");
    EXPECT_EQ(parse_ok({"-cpu-bind", "list:0-3:4-7", "prog"}).cpu_bind, "list:0-3:4-7");
    for (const char* spelling : {"--depth", "-d", "-depth"}) {
        EXPECT_EQ(parse_ok({spelling, "8", "prog"}).depth, 8) << spelling;
    }
    // Open MPI's and Hydra's --bind-to, and Slurm's GPU and memory spellings.
    EXPECT_EQ(parse_ok({"--bind-to", "core", "prog"}).cpu_bind, "core");
    EXPECT_EQ(parse_ok({"-bind-to", "package", "prog"}).cpu_bind, "socket");
    EXPECT_NE(parse_error({"--bind-to", "hwthread", "prog"}).find("--cpu-bind depth"), std::string::npos);
    EXPECT_EQ(parse_ok({"--gpu-bind", "map_gpu:3,2,1,0", "prog"}).gpu_bind, "list:3:2:1:0");
    Options per_task = parse_ok({"--gpu-bind", "verbose,per_task:2", "prog"});
    EXPECT_EQ(per_task.gpu_bind, "closest");
    EXPECT_EQ(per_task.gpus_per_rank, 2);
    EXPECT_TRUE(per_task.report_bindings);
    EXPECT_EQ(parse_ok({"--mem-bind", "map_mem:0,0,1,1", "prog"}).mem_bind, "list:0:0:1:1");
    for (const char* spelling : {"--gpus-per-rank", "-gpus-per-proc", "--gpus-per-task"})
        EXPECT_EQ(parse_ok({spelling, "2", "prog"}).gpus_per_rank, 2) << spelling;
    EXPECT_EQ(parse_ok({"-gpu-subdevs-per-proc", "1", "prog"}).gpu_tiles_per_rank, 1);
}

TEST(Options, WorkingDirectoryAndTimeout)
{
    for (const char* spelling : {"--wdir", "-wdir", "--wd", "-wd", "--cwd"}) {
        EXPECT_EQ(parse_ok({spelling, "/scratch/run", "prog"}).apps[0].wdir, "/scratch/run") << spelling;
    }
    EXPECT_DOUBLE_EQ(*parse_ok({"--timeout", "2.5", "prog"}).timeout_seconds, 2.5);
    EXPECT_DOUBLE_EQ(*parse_ok({"-timeout", "30", "prog"}).timeout_seconds, 30.0);
}

TEST(Options, PmiChoosesWhatIsServed)
{
    EXPECT_FALSE(parse_ok({"prog"}).pmi.has_value());   // the config's [job] pmi, "all" by default
    EXPECT_EQ(*parse_ok({"--pmi", "simple", "prog"}).pmi, PmiInterfaces::simple);
    EXPECT_EQ(*parse_ok({"-pmi", "pmi2", "prog"}).pmi, PmiInterfaces::simple);
    EXPECT_EQ(*parse_ok({"--pmi=none", "prog"}).pmi, PmiInterfaces::none);
    EXPECT_EQ(*parse_ok({"--pmi", "pmix", "prog"}).pmi, PmiInterfaces::pmix);
    EXPECT_EQ(parse_error({"--pmi", "mpich", "prog"}), "--pmi takes all, pmix, simple or none, got 'mpich'");
}

TEST(Options, RankStoreLimitIsASize)
{
    EXPECT_FALSE(parse_ok({"prog"}).rank_store_limit.has_value()) << "unset: the config's";
    EXPECT_EQ(*parse_ok({"--rank-store-limit", "64MiB", "prog"}).rank_store_limit, std::uint64_t{64} << 20);
    EXPECT_EQ(*parse_ok({"--rank-store-limit=0", "prog"}).rank_store_limit, 0u);
    EXPECT_EQ(parse_error({"--rank-store-limit", "lots", "prog"}),
              "--rank-store-limit: 'lots' is not a size: write a number of bytes, or one of K, M, G or T, such as "
              "16MiB");
}

TEST(Options, TreeAndAgentSpellings)
{
    Options options = parse_ok({"--fanout", "16", "--window=8", "prog"});
    EXPECT_EQ(options.fanout, 16L);
    EXPECT_EQ(options.window, 8L);
    for (const char* spelling : {"--agent", "--launcher", "-launcher", "--rsh-agent"}) {
        EXPECT_EQ(parse_ok({spelling, "rsh", "prog"}).agent, "rsh") << spelling;
    }
    for (const char* spelling : {"-launcher-exec", "--launcher-exec"}) {
        EXPECT_EQ(parse_ok({spelling, "srun -w %h", "prog"}).agent, "exec:srun -w %h") << spelling;
    }
}

TEST(Options, TimingFlagNeverConsumesTheProgram)
{
    Options options = parse_ok({"--timing", "prog.json"});
    EXPECT_TRUE(options.timing);
    EXPECT_FALSE(options.timing_file.has_value());
    EXPECT_EQ(options.apps[0].command, std::vector<std::string>{"prog.json"});
}

TEST(Options, TimingWithFileSetsBoth)
{
    Options options = parse_ok({"--timing=f.json", "prog"});
    EXPECT_TRUE(options.timing);
    EXPECT_EQ(options.timing_file, "f.json");
}

TEST(Options, ConfigProfileVerboseHelpVersion)
{
    Options options = parse_ok({"--config", "my.toml", "--profile=polaris", "-v", "--verbose", "-vv", "prog"});
    EXPECT_EQ(options.config_file, "my.toml");
    EXPECT_EQ(options.profile, "polaris");
    EXPECT_EQ(options.verbosity, 4);
    EXPECT_TRUE(parse_ok({"-h"}).help);
    EXPECT_TRUE(parse_ok({"--help"}).help);
    EXPECT_TRUE(parse_ok({"--version"}).version);
}

TEST(Options, FirstNonOptionStartsTheCommand)
{
    Options options = parse_ok({"-n", "2", "python3", "-c", "x", "-n", "5"});
    EXPECT_EQ(options.apps[0].ranks, 2L);
    EXPECT_EQ(options.apps[0].command, (std::vector<std::string>{"python3", "-c", "x", "-n", "5"}));
}

TEST(Options, DoubleDashEndsOptions)
{
    Options options = parse_ok({"-n", "2", "--", "-weird-prog", "--", "--help", ":", "x"});
    EXPECT_EQ(options.apps.size(), 1u);   // after "--" a ':' is the program's
    EXPECT_EQ(options.apps[0].command, (std::vector<std::string>{"-weird-prog", "--", "--help", ":", "x"}));
    EXPECT_FALSE(options.help);
}

TEST(Options, ColonSeparatesProgramsWithTheirOwnOptions)
{
    Options options = parse_ok({"--ppn", "2", "-genv", "G=1", "-n", "1", "-env", "A", "1", "./server", "--port", "5",
                                ":", "-n", "3", "-x", "B=2", "--wdir", "/w", "./worker", "x", ":", "-np", "2", "./c"});
    ASSERT_EQ(options.apps.size(), 3u);
    EXPECT_EQ(options.ppn, 2L);
    ASSERT_EQ(options.env.size(), 1u);
    EXPECT_EQ(options.env[0].name, "G");
    EXPECT_EQ(options.apps[0].ranks, 1L);
    EXPECT_EQ(options.apps[0].command, (std::vector<std::string>{"./server", "--port", "5"}));
    ASSERT_EQ(options.apps[0].env.size(), 1u);
    EXPECT_EQ(options.apps[0].env[0].name, "A");
    EXPECT_EQ(options.apps[1].ranks, 3L);
    EXPECT_EQ(options.apps[1].command, (std::vector<std::string>{"./worker", "x"}));
    ASSERT_EQ(options.apps[1].env.size(), 1u);
    EXPECT_EQ(options.apps[1].env[0].name, "B");
    EXPECT_EQ(options.apps[1].wdir, "/w");
    EXPECT_FALSE(options.apps[0].wdir.has_value());
    EXPECT_EQ(options.apps[2].command, (std::vector<std::string>{"./c"}));
    EXPECT_TRUE(options.apps[2].env.empty());
    EXPECT_EQ(options.total_ranks(), 6L);
}

TEST(Options, ModuleStopsAtColon)
{
    Options options = parse_ok({"-n", "1", "-m", "pkg.server", "--a", ":", "-n", "2", "-m", "pkg.worker"});
    ASSERT_EQ(options.apps.size(), 2u);
    EXPECT_EQ(options.apps[0].command, (std::vector<std::string>{"python3", "-m", "pkg.server", "--a"}));
    EXPECT_EQ(options.apps[1].command, (std::vector<std::string>{"python3", "-m", "pkg.worker"}));
}

TEST(Options, ColonMistakesAreNamed)
{
    EXPECT_NE(parse_error({"-n", "1", "./a", ":"}).find("needs one after it"), std::string::npos);
    EXPECT_NE(parse_error({"-n", "1", ":", "-n", "2", "./b"}).find("needs one before it"), std::string::npos);
    EXPECT_NE(parse_error({"-n", "1", "./a", ":", ":", "./b"}).find("needs one before it"), std::string::npos);
    EXPECT_EQ(parse_error({"-n", "1", "./a", ":", "./b"}),
              "program 2 of 2 (./b) needs -n N: with several programs, each gives its number of ranks");
    EXPECT_EQ(parse_error({"./a", ":", "-n", "2", "./b"}),
              "program 1 of 2 (./a) needs -n N: with several programs, each gives its number of ranks");
    EXPECT_EQ(parse_error({"-n", "1", "./a", ":", "-n", "2", "--ppn", "2", "./b"}),
              "option --ppn is for the whole job; give it before the first program");
    EXPECT_EQ(parse_error({"-n", "1", "./a", ":", "-genv", "A=1", "-n", "2", "./b"}),
              "option -genv is for the whole job; give it before the first program");
}

// A -configfile in a temporary directory, removed at the end of the test.
class ConfigFile : public ::testing::Test {
protected:
    std::string write(const std::string& text)
    {
        std::ofstream(dir_.path() + "/programs") << text;
        return dir_.path() + "/programs";
    }
    TempDir dir_{"canopy-configfile-test"};
};

TEST_F(ConfigFile, EachLineIsAProgram)
{
    auto path = write("# server first\n"
                      "-n 1 -env MODE 'a b' ./server \"quoted arg\"\n"
                      "\n"
                      "   -n 3 --wdir /w ./worker x\\ y\n");
    Options options = parse_ok({"-genv", "G=1", "--ppn", "2", "-configfile", path});
    ASSERT_EQ(options.apps.size(), 2u);
    EXPECT_EQ(options.apps[0].ranks, 1L);
    EXPECT_EQ(options.apps[0].command, (std::vector<std::string>{"./server", "quoted arg"}));
    ASSERT_EQ(options.apps[0].env.size(), 1u);
    EXPECT_EQ(options.apps[0].env[0].value, "a b");
    EXPECT_EQ(options.apps[1].command, (std::vector<std::string>{"./worker", "x y"}));
    EXPECT_EQ(options.apps[1].wdir, "/w");
    EXPECT_EQ(options.env.size(), 1u);
    EXPECT_EQ(options.total_ranks(), 4L);
}

TEST_F(ConfigFile, MistakesNameTheLine)
{
    auto two = write("-n 1 ./a\n-n 2 --ppn 3 ./b\n");
    EXPECT_EQ(parse_error({"-configfile", two}),
              two + ":2: option --ppn is for the whole job; give it before the first program");
    auto quote = write("-n 1 './a\n");
    EXPECT_EQ(parse_error({"-configfile", quote}), quote + ":1: unclosed single quote");
    auto bare = write("-n 1\n");
    EXPECT_EQ(parse_error({"-configfile", bare}), bare + ":1: no program on the line");
    auto empty = write("# nothing\n\n");
    EXPECT_EQ(parse_error({"-configfile", empty}), "-configfile " + empty + " lists no programs");
    auto fine = write("-n 1 ./a\n");
    EXPECT_EQ(parse_error({"-configfile", fine, "./b"}),
              "-configfile " + fine + " lists the programs; give none on the command line (got ./b)");
    EXPECT_EQ(parse_error({"-n", "4", "-configfile", fine}),
              "-n and -configfile: give -n on a program's line in " + fine);
    EXPECT_NE(parse_error({"-configfile", dir_.path() + "/missing"}).find("missing"), std::string::npos);
}

TEST(Options, UnknownOptionSuggestsClosestSpelling)
{
    EXPECT_EQ(parse_error({"--hostfle", "h", "prog"}), "unknown option '--hostfle'; did you mean '--hostfile'?");
    EXPECT_EQ(parse_error({"--cpubind=core", "prog"}), "unknown option '--cpubind'; did you mean '--cpu-bind'?");
}

TEST(Options, GluedOrEqualsValueOnSingleDashOptionExplainsTheFix)
{
    EXPECT_EQ(parse_error({"-n4", "prog"}), "unknown option '-n4'; did you mean '-n 4'?");
    EXPECT_EQ(parse_error({"-np=4", "prog"}), "unknown option '-np=4'; give the value as the next argument: -np 4");
}

TEST(Options, OtherLaunchersSpellingsNameCanopysEquivalent)
{
    EXPECT_EQ(parse_error({"--ntasks=8", "prog"}), "unknown option '--ntasks'; canopy's equivalent is -n N");
    EXPECT_EQ(parse_error({"--ntasks-per-node", "4", "prog"}),
              "unknown option '--ntasks-per-node'; canopy's equivalent is --ppn N");
    EXPECT_EQ(parse_error({"--time", "10", "prog"}),
              "unknown option '--time'; canopy's equivalent is --timeout SECONDS");
}

TEST(Options, UnknownOptionFarFromAnySpellingPointsToHelp)
{
    EXPECT_EQ(parse_error({"--frobnicate-everything", "prog"}),
              "unknown option '--frobnicate-everything'; see canopy --help");
}

TEST(Options, MissingValueIsNamed)
{
    EXPECT_EQ(parse_error({"-n"}), "option -n needs a value");
    EXPECT_EQ(parse_error({"--hostfile", "-n", "2", "prog"}), "option --hostfile needs a value");
    EXPECT_EQ(parse_error({"--wdir=", "prog"}), "option --wdir needs a value");
}

TEST(Options, CountsMustBePositive)
{
    EXPECT_EQ(parse_error({"-n", "0", "prog"}), "-n must be at least 1, got 0");
    EXPECT_EQ(parse_error({"--ppn", "-2", "prog"}), "--ppn must be at least 1, got -2");
    EXPECT_EQ(parse_error({"--fanout", "0", "prog"}), "--fanout must be at least 1, got 0");
    EXPECT_EQ(parse_error({"--window", "0", "prog"}), "--window must be at least 1, got 0");
    EXPECT_EQ(parse_error({"-d", "0", "prog"}), "-d must be at least 1, got 0");
    EXPECT_EQ(parse_error({"--sim-nodes", "0", "prog"}), "--sim-nodes must be at least 1, got 0");
}

TEST(Options, CountsMustBeIntegers)
{
    EXPECT_EQ(parse_error({"-n", "4x", "prog"}), "-n expects an integer, got '4x'");
    EXPECT_EQ(parse_error({"-n", "2.0", "prog"}), "-n expects an integer, got '2.0'");
    EXPECT_EQ(parse_error({"-n", "99999999999999999999", "prog"}), "-n value '99999999999999999999' is too large");
}

TEST(Options, TimeoutMustBePositiveNumber)
{
    EXPECT_EQ(parse_error({"--timeout", "0", "prog"}), "--timeout must be greater than 0 seconds, got 0");
    EXPECT_EQ(parse_error({"--timeout", "soon", "prog"}), "--timeout expects a number of seconds, got 'soon'");
}

TEST(Options, FlagsRejectValues)
{
    EXPECT_EQ(parse_error({"--label=yes", "prog"}), "option --label does not take a value, got '--label=yes'");
}

TEST(Options, HostsAndHostfileConflict)
{
    EXPECT_EQ(parse_error({"--hosts", "a", "-f", "h.txt", "prog"}),
              "--hosts and -f cannot be used together; give the hosts one way");
}

TEST(Options, SimNodesConflictsWithRealHosts)
{
    std::string message = parse_error({"--sim-nodes", "2", "--hostfile", "h.txt", "prog"});
    EXPECT_NE(message.find("--sim-nodes"), std::string::npos) << message;
    EXPECT_NE(message.find("--hostfile"), std::string::npos) << message;
    message = parse_error({"-hosts", "a,b", "--sim-nodes", "2", "prog"});
    EXPECT_NE(message.find("-hosts"), std::string::npos) << message;
}

TEST(Options, NoProgramIsAnError)
{
    EXPECT_EQ(parse_error({"-n", "2"}), "no program given; usage: canopy [options] PROGRAM [ARGS...]");
    EXPECT_EQ(parse_error({}), "no program given; usage: canopy [options] PROGRAM [ARGS...]");
    EXPECT_EQ(parse_error({"-n", "2", "--"}), "no program given; usage: canopy [options] PROGRAM [ARGS...]");
}

TEST(Options, ErrorsAreOneLineWithoutPrefix)
{
    for (const auto& args : std::vector<std::vector<std::string>>{{"--bogus"}, {"-n"}, {"-n", "0", "p"}, {}}) {
        std::string message = parse_error(args);
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        EXPECT_FALSE(message.starts_with("canopy:")) << message;
    }
}

TEST(Options, HelpTextHasUsageGroupsAndExamples)
{
    std::string text = help_text();
    EXPECT_TRUE(text.starts_with("Usage: canopy [options] PROGRAM [ARGS...]")) << text;
    std::size_t previous = 0;
    for (const char* group : {"Ranks and hosts:", "Rank environment:", "Output:", "Binding:", "Tree and launch agent:",
                              "Timing:", "Config:", "Examples:"}) {
        std::size_t at = text.find(group);
        ASSERT_NE(at, std::string::npos) << group;
        EXPECT_GT(at, previous) << group << " is out of order";
        previous = at;
    }
}

TEST(Options, HelpTextListsEverySpelling)
{
    std::string text = help_text();
    for (const char* spelling : {"-np", "--npernode", "-machinefile", "--sim-nodes", "-genvlist", "--tag-output",
                                 "--line-buffered", "-cpu-bind", "--cwd", "--rsh-agent", "-launcher-exec",
                                 "--timing", "--profile", "--version"}) {
        EXPECT_NE(text.find(spelling), std::string::npos) << spelling;
    }
}

} // namespace
} // namespace canopy
