// Unit tests for the timing report: the terminal table and the JSON document.
#include "timing/report.hpp"

#include "timing/analysis.hpp"

#include <algorithm>
#include <chrono>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace canopy::timing {
namespace {

JobTiming sample_timing()
{
    JobTiming timing;
    timing.job_id = "j42";
    timing.command = "./ring --iterations 10";
    timing.started_at = "2024-05-01T12:00:00.123Z";
    timing.nodes = 64;
    timing.ranks = 256;
    timing.fanout = 8;
    timing.tree_depth = 2;
    timing.agent = "ssh";
    timing.wall_seconds = 3.4567;
    timing.exit_code = 0;
    timing.timeline = {{"start", 0.0},         {"hosts_resolved", 0.0012}, {"tree_up", 0.8125},
                       {"job_delivered", 0.8301}, {"ranks_spawned", 0.9502}, {"ranks_exited", 3.2},
                       {"teardown_done", 3.45}};
    for (int node = 0; node < 64; ++node) {
        const std::string host = "sim" + std::to_string(1000 + node);
        timing.phases.add("daemon.started", 0.1 + node * 0.001, host);
        timing.phases.add("daemon.connected", 0.2 + node * 0.002, host);
        for (int local = 0; local < 4; ++local) {
            const std::string rank = "rank " + std::to_string(node * 4 + local) + " on " + host;
            timing.phases.add("rank.spawned", 0.9 + node * 0.0005 + local * 0.0001, rank);
            timing.phases.add("rank.runtime", 2.0 + (node == 17 && local == 3 ? 0.25 : 0.0), rank);
        }
    }
    timing.phases.add("custom.phase", 0.5, "sim1000");
    return timing;
}

TEST(Report, HeaderNamesTheJobShapeAndOutcome)
{
    const std::string report = format_report(sample_timing());
    const std::string header = report.substr(0, report.find('\n'));
    EXPECT_NE(header.find("j42"), std::string::npos) << header;
    EXPECT_NE(header.find("64 nodes, 256 ranks"), std::string::npos) << header;
    EXPECT_NE(header.find("fanout 8"), std::string::npos) << header;
    EXPECT_NE(header.find("depth 2"), std::string::npos) << header;
    EXPECT_NE(header.find("agent ssh"), std::string::npos) << header;
    EXPECT_NE(header.find("wall 3457 ms"), std::string::npos) << header;
    EXPECT_NE(header.find("exit 0"), std::string::npos) << header;
}

TEST(Report, TimelineShowsEachStampWithTimeSinceStartAndDelta)
{
    const std::string report = format_report(sample_timing());
    for (const char* name : {"start", "hosts_resolved", "tree_up", "job_delivered", "ranks_spawned",
                             "ranks_exited", "teardown_done"})
        EXPECT_NE(report.find(name), std::string::npos) << name;
    EXPECT_NE(report.find("812 ms"), std::string::npos) << report;   // tree_up since start
    EXPECT_NE(report.find("+811 ms"), std::string::npos) << report;  // tree_up minus hosts_resolved
    EXPECT_NE(report.find("+17.6 ms"), std::string::npos) << report; // job_delivered step
    EXPECT_NE(report.find("+1.20 ms"), std::string::npos) << report; // hosts_resolved step
}

TEST(Report, MarksTheLongestTimelineStep)
{
    const std::string report = format_report(sample_timing());
    std::istringstream lines(report);
    std::string line;
    int marked = 0;
    while (std::getline(lines, line))
        if (line.find("longest step") != std::string::npos) {
            ++marked;
            EXPECT_NE(line.find("ranks_exited"), std::string::npos) << line;
        }
    EXPECT_EQ(marked, 1);
}

TEST(Report, PhaseTableNamesTheSlowest)
{
    const std::string report = format_report(sample_timing());
    EXPECT_NE(report.find("slowest"), std::string::npos);
    EXPECT_NE(report.find("sim1063"), std::string::npos) << report;           // last daemon to connect
    EXPECT_NE(report.find("rank 71 on sim1017"), std::string::npos) << report; // longest runtime
    std::istringstream lines(report);
    std::string line;
    bool found = false;
    while (std::getline(lines, line))
        if (line.rfind("  rank.spawned ", 0) == 0) { // the table row comes before the legend
            found = true;
            EXPECT_NE(line.find(" 256 "), std::string::npos) << line;
            EXPECT_NE(line.find("rank 255 on sim1063"), std::string::npos) << line;
            break;
        }
    EXPECT_TRUE(found) << report;
}

TEST(Report, KnownPhasesAreExplained)
{
    const std::string report = format_report(sample_timing());
    EXPECT_NE(report.find("daemon connected to its parent"), std::string::npos) << report;
    EXPECT_NE(report.find("a duration"), std::string::npos) << report;
}

TEST(Report, LinesFitIn100Columns)
{
    JobTiming timing = sample_timing();
    timing.command = std::string(300, 'c');
    timing.phases.add("daemon.connected", 99.0, std::string(200, 'w'));
    timing.phases.add(std::string(60, 'p'), 1.0, "x");
    std::istringstream lines(format_report(timing));
    std::string line;
    while (std::getline(lines, line))
        EXPECT_LE(line.size(), 100u) << line;
}

TEST(Report, ComparisonKeepsLongFileNamesWhole)
{
    const std::string first = "/scratch/" + std::string(120, 'a') + "/first.json";
    const std::string second = "/scratch/" + std::string(120, 'b') + "/second.json";
    const std::string report = format_comparison(sample_timing(), sample_timing(), first, second);
    EXPECT_EQ(report.rfind("A: " + first + "  job", 0), 0u) << report;
    EXPECT_NE(report.find("\nB: " + second + "  job"), std::string::npos) << report;
}

TEST(Report, EmptyTimingStillFormats)
{
    const std::string report = format_report(JobTiming{});
    EXPECT_NE(report.find("none recorded"), std::string::npos) << report;
}

TEST(Report, FormatsSecondsWithSensiblePrecision)
{
    EXPECT_EQ(format_seconds(0.0123), "12.3 ms");
    EXPECT_EQ(format_seconds(0.00456), "4.56 ms");
    EXPECT_EQ(format_seconds(0.000045), "0.045 ms");
    EXPECT_EQ(format_seconds(0.8125), "812 ms");
    EXPECT_EQ(format_seconds(9.5), "9500 ms");
    EXPECT_EQ(format_seconds(12.34), "12.3 s");
    EXPECT_EQ(format_seconds(-0.002), "-2.00 ms");
    EXPECT_EQ(format_seconds(0.0), "0 ms");
}

TEST(Report, JsonCarriesSchemaAndDerivedStatistics)
{
    const nlohmann::json document = to_json(sample_timing());
    EXPECT_EQ(document["schema"], "canopy.timing/1");
    EXPECT_EQ(document["nodes"], 64);
    EXPECT_EQ(document["timeline"][2]["name"], "tree_up");
    const auto& phase = document["phases"][1];
    EXPECT_EQ(phase["name"], "daemon.connected");
    EXPECT_EQ(phase["count"], 64);
    EXPECT_EQ(phase["max_who"], "sim1063");
    EXPECT_NEAR(phase["median"].get<double>(), 0.2 + 31 * 0.002, 0.264 * 0.0101);
}

TEST(Report, JsonRoundTripIsLossless)
{
    const nlohmann::json first = to_json(sample_timing());
    auto parsed = from_json(nlohmann::json::parse(first.dump()));
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    EXPECT_EQ(to_json(*parsed), first);
    EXPECT_EQ(format_report(*parsed), format_report(sample_timing()));
}

TEST(Report, AFailureRoundTripsAndIsPrintedWhole)
{
    JobTiming timing = sample_timing();
    std::string line = "rank 1 on nid0002 exited with code 1: ValueError: learning rate 3 is too large for a batch of "
                       "4096 on 64 nodes; lower it or warm it up (at /work/train.py:6 in check)";
    timing.failure = JobTiming::Failure{line, "Traceback (most recent call last):\n  ...\nValueError: x\n"};
    auto parsed = from_json(nlohmann::json::parse(to_json(timing).dump()));
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    ASSERT_TRUE(parsed->failure);
    EXPECT_EQ(parsed->failure->line, line);
    EXPECT_EQ(parsed->failure->traceback, timing.failure->traceback);
    std::string report = format_report(*parsed);
    std::size_t start = report.find("  failed: ");
    ASSERT_NE(start, std::string::npos) << report;
    std::string joined;
    for (std::size_t at = start; at < report.size() && (at == start || report.compare(at, 10, "          ") == 0);) {
        std::size_t end = report.find('\n', at);
        std::string piece = report.substr(at + 10, end - at - 10);
        EXPECT_LE(end - at, 100u) << report;
        joined += (joined.empty() ? "" : " ") + piece;
        at = end + 1;
    }
    EXPECT_EQ(joined, line) << report;
    EXPECT_FALSE(from_json(to_json(sample_timing()))->failure);   // a job that did not fail has none

    nlohmann::json bad = to_json(timing);
    bad["failure"] = "boom";
    auto refused = from_json(bad);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("failure"), std::string::npos) << refused.error().message;
}

TEST(Report, RestartsRoundTripAndSayWhatEndedEachAttempt)
{
    JobTiming timing = sample_timing();
    timing.restarts.push_back({"rank 3 on nid0002 exited with code 3", 3, 1.0, 4.0, 4.5});
    timing.restarts.push_back({"rank 0 on nid0001 was killed by signal 9 (SIGKILL)", 137, 4.5, 6.0, -1});
    auto parsed = from_json(nlohmann::json::parse(to_json(timing).dump()));
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    ASSERT_EQ(parsed->restarts.size(), 2u);
    EXPECT_EQ(parsed->restarts[1].ended_by, timing.restarts[1].ended_by);
    EXPECT_EQ(parsed->restarts[1].exit_code, 137);
    EXPECT_DOUBLE_EQ(parsed->restarts[0].restart_seconds(), 0.5);
    EXPECT_DOUBLE_EQ(parsed->restarts[0].lost_seconds(), 3.5);
    EXPECT_DOUBLE_EQ(to_json(timing)["time_lost_seconds"].get<double>(), 3.5);   // the second never ran again
    std::string report = format_report(*parsed);
    std::istringstream lines(report);
    for (std::string line; std::getline(lines, line);)
        EXPECT_LE(line.size(), 100u) << line;
    // A long attempt line goes on under its text (after "  attempt N ended at T ms: "): joined back here.
    report = std::regex_replace(report, std::regex("\n {30}(?! )"), " ");
    EXPECT_NE(report.find("  attempts: 3 (2 restarts), time lost to failures 3500 ms"), std::string::npos) << report;
    EXPECT_NE(report.find("  attempt 1 ended at 4000 ms: rank 3 on nid0002 exited with code 3; all ranks running "
                          "again 500 ms later"),
              std::string::npos)
        << report;
    EXPECT_NE(report.find("its ranks never all ran again"), std::string::npos) << report;
    EXPECT_TRUE(from_json(to_json(sample_timing()))->restarts.empty());   // a job that never restarted has none

    nlohmann::json bad = to_json(timing);
    bad["restarts"][0]["failed_at"] = "soon";
    auto refused = from_json(bad);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("restarts[0].failed_at"), std::string::npos) << refused.error().message;
}

TEST(Report, JsonMissingKeyIsNamed)
{
    nlohmann::json document = to_json(sample_timing());
    document.erase("nodes");
    auto parsed = from_json(document);
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.error().message.find("'nodes'"), std::string::npos) << parsed.error().message;
}

TEST(Report, JsonMissingNestedKeyNamesItsPath)
{
    nlohmann::json document = to_json(sample_timing());
    document["phases"][2].erase("max_who");
    auto parsed = from_json(document);
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.error().message.find("'phases[2].max_who'"), std::string::npos) << parsed.error().message;
}

TEST(Report, JsonWrongTypeIsNamed)
{
    nlohmann::json document = to_json(sample_timing());
    document["timeline"][1]["seconds"] = "soon";
    auto parsed = from_json(document);
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.error().message.find("'timeline[1].seconds'"), std::string::npos)
        << parsed.error().message;
}

TEST(Report, JsonFromAnotherSchemaIsRejected)
{
    nlohmann::json document = to_json(sample_timing());
    document["schema"] = "canopy.timing/2";
    auto parsed = from_json(document);
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.error().message.find("schema"), std::string::npos) << parsed.error().message;
}

TEST(Report, JsonCountThatDisagreesWithBucketsIsRejected)
{
    nlohmann::json document = to_json(sample_timing());
    document["phases"][0]["count"] = 65;
    auto parsed = from_json(document);
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.error().message.find("'phases[0].count'"), std::string::npos) << parsed.error().message;
}

TEST(Report, JsonThatIsNotAnObjectIsRejected)
{
    EXPECT_FALSE(from_json(nlohmann::json::array()).ok());
    EXPECT_FALSE(from_json(nlohmann::json("text")).ok());
}

TEST(Report, TableHasTheP99TailColumn)
{
    const std::string report = format_report(sample_timing());
    EXPECT_NE(report.find("  count         min      median         p99         max  slowest"), std::string::npos)
        << report;
}

TEST(Report, NamesTheTopKSlowestOfEachPhase)
{
    JobTiming timing = sample_timing();
    timing.phases.set_top_k(3);
    const std::string report = format_report(timing);
    const std::size_t section = report.find("slowest daemons/ranks, the top 3 of each phase");
    ASSERT_NE(section, std::string::npos) << report;
    const std::size_t row = report.find("\n  daemon.connected", section);
    ASSERT_NE(row, std::string::npos) << report;
    const std::string line = report.substr(row + 1, report.find('\n', row + 1) - row - 1);
    EXPECT_EQ(line, "  daemon.connected  326 ms sim1063, 324 ms sim1062, 322 ms sim1061") << report;
    // A phase with one value has nobody to compare: its line would only repeat the table's.
    EXPECT_EQ(report.find("\n  custom.phase", section), std::string::npos) << report;
}

TEST(Report, AFileFromBeforeTheTopKListsIsReadAndSaysSoInOneLine)
{
    nlohmann::json document = to_json(sample_timing());
    document.erase("top_k");
    for (auto& phase : document["phases"])
        phase.erase("slowest");
    auto parsed = from_json(document);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    EXPECT_FALSE(parsed->top_recorded);
    const std::string report = format_report(*parsed);
    EXPECT_NE(report.find("\nslowest: not in this file (it was written by a canopy from before the top-k lists)\n"),
              std::string::npos)
        << report;
    EXPECT_EQ(report.find("slowest daemons/ranks"), std::string::npos) << report;
    EXPECT_FALSE(to_json(*parsed).contains("top_k"));   // written back as it was read
}

TEST(Report, JsonTopKListsAreCheckedAndNamed)
{
    nlohmann::json document = to_json(sample_timing());
    EXPECT_EQ(document["top_k"], 10);
    EXPECT_EQ(document["phases"][1]["slowest"][0], (nlohmann::json{{"value", 0.2 + 63 * 0.002}, {"who", "sim1063"}}));

    nlohmann::json reversed = document;
    std::swap(reversed["phases"][1]["slowest"][0], reversed["phases"][1]["slowest"][1]);
    auto refused = from_json(reversed);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("'phases[1].slowest[1]' is out of order"), std::string::npos)
        << refused.error().message;

    nlohmann::json too_many = document;
    too_many["top_k"] = 2;
    refused = from_json(too_many);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("'phases[0].slowest' has 10 entries but top_k is 2"), std::string::npos)
        << refused.error().message;

    nlohmann::json missing = document;
    missing["phases"][3].erase("slowest");
    refused = from_json(missing);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("'phases[3].slowest'"), std::string::npos) << refused.error().message;
}

// A job whose application marks its phases: imports 0.95-2.0 s, then nothing for 1 s, then init 3.0-3.5 s, then
// its first step at 3.6 s, on every rank alike.
JobTiming marked_timing(bool with_gap)
{
    JobTiming timing = sample_timing();
    const double shift = with_gap ? 1.0 : 0.0;
    for (int rank = 0; rank < 4; ++rank) {
        const std::string who = "rank " + std::to_string(rank) + " on sim1000";
        timing.phases.add("app.imports", 2.0, who);
        timing.phases.add("app.imports.duration", 2.0 - 0.9502, who);
        timing.phases.add("app.init", 2.5 + shift, who);
        timing.phases.add("app.init.duration", 0.5, who);
        timing.phases.add("app.first_step", 2.5 + shift, who);
    }
    return timing;
}

TEST(Startup, EndsAtTheMeanFirstStepAndCountsWhatNoStepOrPhaseCovers)
{
    const StartupWindow covered = startup_window(marked_timing(false));
    EXPECT_EQ(covered.end_name, "app.first_step");
    EXPECT_DOUBLE_EQ(covered.end, 2.5);
    EXPECT_LT(covered.unattributed, 1e-9);
    EXPECT_TRUE(covered.gaps.empty());

    const StartupWindow gap = startup_window(marked_timing(true));
    EXPECT_DOUBLE_EQ(gap.end, 3.5);
    ASSERT_EQ(gap.gaps.size(), 1u);
    EXPECT_NEAR(gap.gaps[0].begin, 2.0, 1e-9);
    EXPECT_NEAR(gap.gaps[0].end, 3.0, 1e-9);
    EXPECT_EQ(gap.gaps[0].after, "app.imports");
    EXPECT_EQ(gap.gaps[0].before, "app.init");
    EXPECT_NEAR(gap.unattributed, 1.0, 1e-9);
    EXPECT_NEAR(gap.share(), 1.0 / 3.5, 1e-9);
}

TEST(Startup, WithoutAFirstStepMarkEndsWhenTheLastRankStartedAndSaysSo)
{
    const StartupWindow window = startup_window(sample_timing());
    EXPECT_EQ(window.end_name, "ranks_spawned");
    EXPECT_DOUBLE_EQ(window.end, 0.9502);
    EXPECT_EQ(window.unattributed, 0.0);
    EXPECT_NE(describe_end(window).find("no app.first_step mark"), std::string::npos);
    const std::string report = format_report(sample_timing());
    EXPECT_NE(report.find("start-up: 950 ms, launcher start to ranks_spawned (no app.first_step mark: the last "
                          "rank's start)"),
              std::string::npos)
        << report;
}

TEST(Startup, TheReportPrintsTheUnattributedLineWithTheLargestGap)
{
    const std::string report = format_report(marked_timing(true));
    EXPECT_NE(report.find("start-up: 3500 ms, launcher start to app.first_step (mean over ranks)"), std::string::npos)
        << report;
    EXPECT_NE(report.find("  unattributed: 1000 ms (28.6%); largest gap 1000 ms after app.imports, before app.init"),
              std::string::npos)
        << report;
    const auto document = to_json(marked_timing(true));
    EXPECT_EQ(document["startup"]["end"], "app.first_step");
    EXPECT_NEAR(document["startup"]["unattributed_seconds"].get<double>(), 1.0, 1e-9);
}

TEST(Startup, PhasesOutsideTheWindowAreClippedAndAnEmptyJobHasNoGap)
{
    JobTiming timing = marked_timing(false);
    timing.phases.add("app.late", 9.0, "rank 0 on sim1000");
    timing.phases.add("app.late.duration", 1.0, "rank 0 on sim1000");
    const StartupWindow window = startup_window(timing);
    for (const auto& span : window.covered)
        EXPECT_LE(span.end, window.end) << span.name;
    EXPECT_EQ(startup_window(JobTiming{}).unattributed, 0.0);
}

TEST(Report, ComparisonShowsTailsAndFlagsThePhaseThatChangedMost)
{
    JobTiming after = sample_timing();
    after.phases.add("daemon.connected", 5.0, "sim2000");   // a new straggler moves max and p99, not the median
    for (int i = 0; i < 300; ++i)
        after.phases.add("rank.spawned", 1.4, "rank " + std::to_string(1000 + i) + " on sim2000");
    const std::string report = format_comparison(sample_timing(), after, "a.json", "b.json");
    EXPECT_NE(report.find("changed most: rank.spawned, median"), std::string::npos) << report;
    for (const char* row : {"rank.spawned (median)", "rank.spawned (p99)", "rank.spawned (max)",
                            "daemon.connected (max)"})
        EXPECT_NE(report.find(row), std::string::npos) << row << "\n" << report;
    std::istringstream lines(report);
    std::string line;
    int flagged = 0;
    while (std::getline(lines, line)) {
        EXPECT_LE(line.size(), 100u) << line;
        if (line.find("<- changed most") != std::string::npos) {
            ++flagged;
            EXPECT_EQ(line.rfind("  rank.spawned (median)", 0), 0u) << line;
        }
    }
    EXPECT_EQ(flagged, 1) << report;
}

TEST(Report, VeryDifferentJobsCompareCleanly)
{
    JobTiming small;
    small.job_id = "tiny";
    small.timeline = {{"start", 0.0}, {"teardown_done", 0.1}};
    small.phases.add("daemon.tree_messages", 12, "sim0000");
    const std::string report = format_comparison(small, marked_timing(true), "small.json", "big.json");
    const std::size_t row = report.find("\n  app.first_step (median) ");
    ASSERT_NE(row, std::string::npos) << report;
    std::istringstream cells(report.substr(row, report.find('\n', row + 1) - row));
    std::string name, statistic, a, b, unit;
    cells >> name >> statistic >> a >> b >> unit;
    EXPECT_EQ(a, "-") << report;                 // only B has it
    EXPECT_EQ(b + " " + unit, "3500 ms") << report;
    EXPECT_EQ(report.find("changed most"), std::string::npos) << report;   // no timed phase in common
}

// Issue 15, item 7: 200,000 phases took over 40 s, every phase looked up by walking all those before it. The test
// compares the same work at n and 4n phases, so a slow machine or a sanitizer build slows both alike: linear work
// takes about 4 times as long, the old quadratic lookup over 10 times.
double seconds_to_read_and_report(int phases)
{
    JobTiming timing = sample_timing();
    for (int i = 0; i < phases; ++i)
        timing.phases.add("app.step" + std::to_string(i), 1.0 + i * 1e-6, "rank 0 on sim1000");
    const std::string last = "app.step" + std::to_string(phases - 1);
    auto start = std::chrono::steady_clock::now();
    auto parsed = from_json(to_json(timing));
    EXPECT_TRUE(parsed.ok()) << parsed.error().message;
    if (!parsed.ok())
        return 0;
    const std::string report = format_report(*parsed);
    const std::string comparison = format_comparison(*parsed, timing, "a.json", "b.json");
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(report.find(last), std::string::npos);
    EXPECT_NE(comparison.find(last + " (median)"), std::string::npos);
    return seconds;
}

TEST(Report, ManyPhasesAreReadAndReportedInLinearTime)
{
    // Four times the phases: about 4x the time if linear, 16x if quadratic. Small enough for a sanitizer build.
    const double small = std::min(seconds_to_read_and_report(5000), seconds_to_read_and_report(5000));
    const double large = seconds_to_read_and_report(20000);
    ASSERT_GT(small, 0.0);
    EXPECT_LT(large / small, 8.0) << "5,000 phases took " << small << " s, 20,000 took " << large << " s";
}

} // namespace
} // namespace canopy::timing
