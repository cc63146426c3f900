// Unit tests for --cpu-bind parsing and the CPUs each local rank gets.
#include <algorithm>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sched.h>

#include "affinity/binding_plan.hpp"
#include "affinity/cpubind.hpp"

namespace canopy {
namespace {

using Cpus = std::vector<int>;

CpuBind parse_ok(std::string_view spec, long depth = 1)
{
    auto result = parse_cpu_bind(spec, depth);
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
    return result.ok() ? result.value() : CpuBind{};
}

std::string parse_error(std::string_view spec, long depth = 1)
{
    auto result = parse_cpu_bind(spec, depth);
    EXPECT_FALSE(result.ok()) << "expected an error for " << spec;
    return result.ok() ? std::string() : result.error().message;
}

TEST(ParseCpuBind, KeywordsSelectTheKind)
{
    EXPECT_EQ(parse_ok("none").kind, CpuBind::Kind::none);
    EXPECT_EQ(parse_ok("core").kind, CpuBind::Kind::core);
    CpuBind depth = parse_ok("depth", 4);
    EXPECT_EQ(depth.kind, CpuBind::Kind::depth);
    EXPECT_EQ(depth.depth, 4);
}

TEST(ParseCpuBind, ListEntriesAreRangesAndCommaLists)
{
    CpuBind bind = parse_ok("list:0-3,8:4-7");
    EXPECT_EQ(bind.kind, CpuBind::Kind::list);
    EXPECT_EQ(bind.lists, (std::vector<Cpus>{{0, 1, 2, 3, 8}, {4, 5, 6, 7}}));
    EXPECT_EQ(parse_ok("list:5").lists, (std::vector<Cpus>{{5}}));
    EXPECT_EQ(parse_ok("list:3,1,1-2").lists, (std::vector<Cpus>{{1, 2, 3}}));
}

TEST(ParseCpuBind, ReversedRangeQuotesTheOption)
{
    std::string message = parse_error("list:3-1");
    EXPECT_EQ(message.rfind("--cpu-bind \"list:3-1\": range 3-1 is reversed", 0), 0u) << message;
}

TEST(ParseCpuBind, EmptyEntriesAreErrors)
{
    EXPECT_NE(parse_error("list:").find("--cpu-bind \"list:\": empty CPU list"), std::string::npos);
    EXPECT_NE(parse_error("list:0-1::2").find("empty CPU list"), std::string::npos);
    EXPECT_NE(parse_error("list:0,,2").find("empty item in \"0,,2\""), std::string::npos);
}

TEST(ParseCpuBind, NonNumericOrTooLargeCpusAreErrors)
{
    std::string message = parse_error("list:a-3");
    EXPECT_NE(message.find("--cpu-bind \"list:a-3\": \"a-3\" is not a CPU number"), std::string::npos) << message;
    EXPECT_NE(parse_error("list:0-99999999").find("\"0-99999999\""), std::string::npos);
    EXPECT_NE(parse_error("list:-1").find("\"-1\""), std::string::npos);
}

TEST(ParseCpuBind, UnknownKindIsAnError)
{
    EXPECT_EQ(parse_error("sockets"), "--cpu-bind \"sockets\": unknown binding; use none, core, depth, numa, "
                                      "socket, gpu or list:CPUS[:CPUS...]");
    EXPECT_NE(parse_error("").find("unknown binding"), std::string::npos);
}

TEST(ParseCpuBind, DepthBelowOneIsAnError)
{
    EXPECT_NE(parse_error("depth", 0).find("--depth 0"), std::string::npos);
}

TEST(CpusForLocalRank, NoneBindsNothing)
{
    EXPECT_TRUE(cpus_for_local_rank(parse_ok("none"), 3, {0, 1, 2, 3}).empty());
}

TEST(CpusForLocalRank, CoreTakesOneAllowedCpuAndWraps)
{
    CpuBind bind = parse_ok("core");
    Cpus allowed{2, 3, 6, 7};
    EXPECT_EQ(cpus_for_local_rank(bind, 0, allowed), (Cpus{2}));
    EXPECT_EQ(cpus_for_local_rank(bind, 2, allowed), (Cpus{6}));
    EXPECT_EQ(cpus_for_local_rank(bind, 5, allowed), (Cpus{3}));
}

TEST(CpusForLocalRank, DepthTakesConsecutiveAllowedCpusAndWraps)
{
    CpuBind bind = parse_ok("depth", 3);
    Cpus allowed{0, 1, 2, 3, 4, 5, 6, 7};
    EXPECT_EQ(cpus_for_local_rank(bind, 0, allowed), (Cpus{0, 1, 2}));
    EXPECT_EQ(cpus_for_local_rank(bind, 1, allowed), (Cpus{3, 4, 5}));
    EXPECT_EQ(cpus_for_local_rank(bind, 2, allowed), (Cpus{0, 6, 7})); // 6, 7, then wraps to 0
    EXPECT_EQ(cpus_for_local_rank(bind, 3, allowed), (Cpus{1, 2, 3}));
}

TEST(CpusForLocalRank, DepthLargerThanTheAllowedSetUsesAllOfIt)
{
    EXPECT_EQ(cpus_for_local_rank(parse_ok("depth", 6), 1, {4, 5, 9}), (Cpus{4, 5, 9}));
}

TEST(CpusForLocalRank, ListPicksTheEntryByLocalRankAndWraps)
{
    CpuBind bind = parse_ok("list:0-3,8:4-7");
    EXPECT_EQ(cpus_for_local_rank(bind, 0, {}), (Cpus{0, 1, 2, 3, 8}));
    EXPECT_EQ(cpus_for_local_rank(bind, 1, {}), (Cpus{4, 5, 6, 7}));
    EXPECT_EQ(cpus_for_local_rank(bind, 2, {}), (Cpus{0, 1, 2, 3, 8}));
}

TEST(CpusForLocalRank, NoAllowedCpusMeansNoBindingForCoreAndDepth)
{
    EXPECT_TRUE(cpus_for_local_rank(parse_ok("core"), 0, {}).empty());
    EXPECT_TRUE(cpus_for_local_rank(parse_ok("depth", 2), 0, {}).empty());
}

TEST(AllowedCpus, IsSortedAndNonEmpty)
{
    Cpus cpus = allowed_cpus();
    ASSERT_FALSE(cpus.empty());
    EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
    EXPECT_EQ(std::adjacent_find(cpus.begin(), cpus.end()), cpus.end());
}

TEST(AllowedCpus, FollowsANarrowedAffinity)
{
    Cpus all = allowed_cpus();
    ASSERT_FALSE(all.empty());
    int last = all.back();
    // Narrow a helper thread only, so the rest of the test process keeps its CPUs.
    Cpus seen;
    std::thread worker([&] {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(last, &set);
        if (sched_setaffinity(0, sizeof set, &set) == 0)
            seen = allowed_cpus();
    });
    worker.join();
    EXPECT_EQ(seen, (Cpus{last}));
}

} // namespace
} // namespace canopy

namespace canopy {
namespace {

TEST(CompressCpuList, PrintsRunsLikeLinux)
{
    EXPECT_EQ(compress_cpu_list({0, 1, 2, 3, 8}), "0-3,8");
    EXPECT_EQ(compress_cpu_list({5}), "5");
    EXPECT_EQ(compress_cpu_list({}), "");
    EXPECT_EQ(compress_cpu_list({0, 2, 4, 5}), "0,2,4-5");
}

} // namespace
} // namespace canopy

namespace canopy {
namespace {

// Why a plan of `ranks` local ranks (the node's first rank is 8) refuses a binding that shares CPUs; empty if it
// does not.
std::string shared_cpu_plan(std::string_view spec, long depth, long ranks, const std::vector<int>& cpus)
{
    BindingRequest request;
    request.cpu_spec = spec;
    request.cpu = *parse_cpu_bind(spec, depth);
    auto plan = plan_bindings(flat_topology(cpus), request, ranks, {"nid001", 8});
    return plan.ok() ? std::string() : plan.error().message;
}

TEST(SharedCpus, NoneWhenEveryRankHasItsOwnCpus)
{
    std::vector<int> four{0, 1, 2, 3};
    EXPECT_EQ(shared_cpu_plan("core", 1, 4, four), "");
    EXPECT_EQ(shared_cpu_plan("depth", 2, 2, four), "");
    EXPECT_EQ(shared_cpu_plan("list:0-1:2-3", 1, 2, four), "");
    EXPECT_EQ(shared_cpu_plan("none", 1, 64, four), "");   // unbound ranks share nothing
}

TEST(SharedCpus, NamesTheFirstPairWhenABindingWraps)
{
    EXPECT_NE(shared_cpu_plan("core", 1, 3, {0, 1}).find("puts ranks 8 and 10 on CPU 0 of nid001"), std::string::npos);
    EXPECT_NE(shared_cpu_plan("depth", 2, 3, {0, 1, 2, 3}).find("puts ranks 8 and 10 on CPU 0"), std::string::npos);
}

TEST(SharedCpus, FindsListsThatOverlapOrRepeat)
{
    std::vector<int> four{0, 1, 2, 3};
    EXPECT_NE(shared_cpu_plan("list:0-1:1-2", 1, 2, four).find("puts ranks 8 and 9 on CPU 1"), std::string::npos);
    EXPECT_NE(shared_cpu_plan("list:0:1", 1, 3, four).find("puts ranks 8 and 10 on CPU 0"), std::string::npos);
}

TEST(SharedCpus, TheRefusalNamesRanksCpuNodeAndTheWayOut)
{
    SharedCpu shared{0, 2, 0};
    EXPECT_EQ(shared_cpu_refusal("core", shared, 8, 3, "nid001", {0, 1}),
              "--cpu-bind core puts ranks 8 and 10 on CPU 0 of nid001 (3 ranks there, CPUs 0-1); bind fewer ranks "
              "per node, or let them share with --oversubscribe");
}

} // namespace
} // namespace canopy
