// Unit tests for --health-check's built-in checks: the judgement on given numbers, the measurement of this machine,
// and the verdicts as the health fence's result carries them.
#include "health/node_checks.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "wire/health_check.hpp"

namespace canopy {
namespace {

NodeFacts healthy_facts()
{
    NodeFacts facts;
    facts.temp_dir = "/tmp/canopy-job-node";
    facts.free_disk = std::uint64_t{50} << 30;
    facts.available_memory = std::uint64_t{200} << 30;
    facts.clock_offset = 0.002;
    return facts;
}

TEST(JudgeNode, AHealthyNodeHasNoReason)
{
    EXPECT_EQ(judge_node(wire::HealthCheckSpec{}, healthy_facts()), "");
}

TEST(JudgeNode, EachShortfallIsNamedWithWhatWasNeeded)
{
    wire::HealthCheckSpec spec;
    spec.gpus = 4;
    NodeFacts facts = healthy_facts();
    facts.free_disk = std::uint64_t{300} << 20;
    facts.available_memory = std::uint64_t{512} << 20;
    facts.clock_offset = -2.5;
    facts.gpus = 3;
    EXPECT_EQ(judge_node(spec, facts),
              "only 300 MiB free in /tmp/canopy-job-node (at least 1 GiB needed); only 512 MiB of memory available (at "
              "least 1 GiB needed); its clock is -2.500 s off its parent's (at most 1.000 s allowed); 3 GPUs visible (4 "
              "expected)");
}

TEST(JudgeNode, WhatCouldNotBeMeasuredMakesTheNodeBad)
{
    NodeFacts facts = healthy_facts();
    facts.free_disk.reset();
    facts.unmeasured = {"cannot write in the node temp dir /tmp/x: No space left on device"};
    EXPECT_EQ(judge_node(wire::HealthCheckSpec{}, facts),
              "cannot write in the node temp dir /tmp/x: No space left on device");
}

TEST(JudgeNode, ZeroTurnsASizeCheckOffAndTheBoundsAreInclusive)
{
    wire::HealthCheckSpec spec;
    spec.min_free_disk = 0;
    spec.min_free_memory = std::uint64_t{1} << 30;
    spec.max_clock_offset = 1.0;
    NodeFacts facts = healthy_facts();
    facts.free_disk = 0;
    facts.available_memory = std::uint64_t{1} << 30;
    facts.clock_offset = 1.0;
    EXPECT_EQ(judge_node(spec, facts), "");
}

TEST(MeasureNode, ThisMachinesTempDirIsWritableAndItsNumbersAreRead)
{
    auto dir = std::filesystem::temp_directory_path() / ("canopy-node-checks-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    NodeFacts facts = measure_node(wire::HealthCheckSpec{}, dir.string(), 0);
    EXPECT_TRUE(facts.unmeasured.empty()) << facts.unmeasured.front();
    ASSERT_TRUE(facts.free_disk.has_value());
    ASSERT_TRUE(facts.available_memory.has_value());
    EXPECT_GT(*facts.available_memory, 0u);
    EXPECT_FALSE(facts.gpus.has_value()) << "GPUs are counted only when the spec expects some";
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the probe file must not stay";
    std::filesystem::remove_all(dir);
}

TEST(MeasureNode, AMissingTempDirIsAReason)
{
    NodeFacts facts = measure_node(wire::HealthCheckSpec{}, "/nonexistent/canopy-node", 0);
    ASSERT_FALSE(facts.unmeasured.empty());
    EXPECT_EQ(facts.unmeasured.front(), "cannot write in the node temp dir /nonexistent/canopy-node: No such file or "
                                        "directory");
}

TEST(HealthVerdicts, AResultIsTheBadNodesVerdictsEndToEnd)
{
    std::vector<std::uint8_t> result;
    EXPECT_TRUE(wire::decode_health_verdicts(result)->empty());
    for (const auto& [node, reason] : {std::pair{"n1", "disk"}, {"n7", "clock"}}) {
        auto bytes = wire::encode_fields(wire::NodeHealth{node, reason});
        result.insert(result.end(), bytes.begin(), bytes.end());
    }
    auto verdicts = wire::decode_health_verdicts(result);
    ASSERT_TRUE(verdicts.ok()) << verdicts.error().message;
    ASSERT_EQ(verdicts->size(), 2u);
    EXPECT_EQ((*verdicts)[1].node, "n7");
    EXPECT_EQ((*verdicts)[1].reason, "clock");
    result.pop_back();
    EXPECT_FALSE(wire::decode_health_verdicts(result).ok()) << "a cut result must not pass as a verdict";
}

} // namespace
} // namespace canopy
