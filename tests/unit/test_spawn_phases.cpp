// The rank spawner's states: the moves their tables allow and refuse, and real ranks (a cat fed stdin, a program
// that is missing, ranks rejected before any fork) reported as they go through them.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "rank_spawner.hpp"
#include "spawn_phases.hpp"

namespace canopy {
namespace {

using namespace std::chrono_literals;

TEST(RankPhaseTable, ARankThatRunsGoesForkedStartKnownReapedFinished)
{
    EXPECT_TRUE(may_move(RankPhase::planned, RankPhase::forked));
    EXPECT_TRUE(may_move(RankPhase::forked, RankPhase::start_known));
    EXPECT_TRUE(may_move(RankPhase::start_known, RankPhase::reaped));
    EXPECT_TRUE(may_move(RankPhase::reaped, RankPhase::finished));
}

TEST(RankPhaseTable, NoRankIsReapedBeforeItsStartIsKnownNorFinishedTwice)
{
    EXPECT_FALSE(may_move(RankPhase::forked, RankPhase::reaped));
    EXPECT_FALSE(may_move(RankPhase::forked, RankPhase::finished));
    for (auto to : {RankPhase::planned, RankPhase::forked, RankPhase::start_known, RankPhase::reaped,
                    RankPhase::finished})
        EXPECT_FALSE(may_move(RankPhase::finished, to)) << state_name(to);
}

TEST(SpawnerPhaseTable, AllStartedIsReportedOnceAndOnlyAfterTheForking)
{
    EXPECT_FALSE(may_move(SpawnerPhase::forking, SpawnerPhase::all_started));
    for (auto to : {SpawnerPhase::forking, SpawnerPhase::starting, SpawnerPhase::all_started})
        EXPECT_FALSE(may_move(SpawnerPhase::all_started, to)) << state_name(to);
    EXPECT_TRUE(may_move(SpawnerPhase::starting, SpawnerPhase::forking));   // a second batch
    EXPECT_TRUE(may_move(SpawnerPhase::all_started, SpawnerPhase::idle));   // only next_attempt: a restart
}

TEST(StdinStateTable, AClosedStdinNeverOpensAgain)
{
    EXPECT_TRUE(may_move(StdinState::open, StdinState::ending));
    EXPECT_TRUE(may_move(StdinState::ending, StdinState::rank_closed));   // the rank closed it first
    for (auto from : {StdinState::ended, StdinState::rank_closed})
        for (auto to : {StdinState::open, StdinState::ending, StdinState::ended, StdinState::rank_closed})
            EXPECT_FALSE(may_move(from, to)) << state_name(from) << " -> " << state_name(to);
}

// A spawner whose events the test records.
struct RecordedSpawner {
    asio::io_context io;
    ProcessReaper reaper{io};
    std::vector<long> spawned, failed;
    std::map<long, int> exited;
    std::string output;
    std::size_t stdin_taken = 0;
    int all_started = 0;
    RankSpawner spawner{io, reaper, events()};

    RankSpawner::Events events()
    {
        RankSpawner::Events events;
        events.output = [this](long, std::uint8_t, std::string data) { output += data; };
        events.spawned = [this](long rank, pid_t, std::int64_t) { spawned.push_back(rank); };
        events.all_started = [this] { ++all_started; };
        events.exited = [this](long rank, int status, std::int64_t) { exited[rank] = status; };
        events.failed_to_start = [this](long rank, const StartFailure&) { failed.push_back(rank); };
        events.stdin_taken = [this](std::size_t bytes, bool) { stdin_taken += bytes; };
        return events;
    }

    void run_until_finished()
    {
        for (auto give_up = std::chrono::steady_clock::now() + 10s;
             !spawner.all_finished() && std::chrono::steady_clock::now() < give_up;)
            io.run_for(20ms);
    }
};

RankLaunch launch(long rank, std::vector<std::string> argv)
{
    RankLaunch launch;
    launch.rank = rank;
    launch.argv = std::move(argv);
    launch.wdir = "/";
    launch.env = {"PATH=/usr/bin:/bin"};
    return launch;
}

TEST(RankSpawnerStates, ARankFedStdinAndAMissingProgramEachEndReportedOnce)
{
    RecordedSpawner ranks;
    ranks.spawner.go_without_cgroup();
    auto cat = launch(0, {"/bin/cat"});
    cat.takes_stdin = true;
    ranks.spawner.write_stdin("before the fork\n");   // queued until rank 0's pipe exists
    ranks.spawner.spawn({cat, launch(1, {"/nonexistent/canopy-test-program"})});
    ranks.spawner.write_stdin("after\n");
    ranks.spawner.close_stdin();
    ranks.run_until_finished();

    ASSERT_TRUE(ranks.spawner.all_finished());
    EXPECT_TRUE(ranks.spawner.all_started());
    EXPECT_EQ(ranks.all_started, 1);
    EXPECT_EQ(ranks.spawned, std::vector<long>{0});
    EXPECT_EQ(ranks.failed, std::vector<long>{1});
    ASSERT_EQ(ranks.exited.count(0), 1u);
    EXPECT_EQ(exit_code_of(ranks.exited[0]), 0);   // cat saw its stdin end
    EXPECT_EQ(ranks.output, "before the fork\nafter\n");
    EXPECT_EQ(ranks.stdin_taken, ranks.output.size());
}

TEST(RankSpawnerStates, RejectedRanksAreStartedAndFinishedWithoutAProcess)
{
    RecordedSpawner ranks;
    EXPECT_FALSE(ranks.spawner.all_started());
    ranks.spawner.reject({launch(0, {"/bin/true"}), launch(1, {"/bin/true"})}, {exit_cannot_run, "not here"});
    EXPECT_TRUE(ranks.spawner.all_started());
    EXPECT_TRUE(ranks.spawner.all_finished());
    EXPECT_EQ(ranks.all_started, 1);
    EXPECT_EQ(ranks.failed, (std::vector<long>{0, 1}));
    EXPECT_TRUE(ranks.spawned.empty());

    ranks.spawner.reject({launch(2, {"/bin/true"})}, {exit_cannot_run, "not here"});   // a later batch
    EXPECT_EQ(ranks.all_started, 1);   // reported once
    EXPECT_EQ(ranks.spawner.finished(), 3u);
}

TEST(RankSpawnerStates, ARestartStartsTheSameRanksAgainAndReportsAllStartedAgain)
{
    RecordedSpawner ranks;
    ranks.spawner.go_without_cgroup();
    ranks.spawner.next_attempt();   // refused: nothing has started yet
    EXPECT_FALSE(ranks.spawner.all_started());
    ranks.spawner.spawn({launch(0, {"/bin/sh", "-c", "exit 3"}), launch(1, {"/bin/true"})});
    ranks.run_until_finished();
    ASSERT_TRUE(ranks.spawner.all_finished());
    EXPECT_EQ(ranks.all_started, 1);

    ranks.spawner.next_attempt();
    EXPECT_FALSE(ranks.spawner.all_started());
    EXPECT_EQ(ranks.spawner.total(), 0u);
    ranks.exited.clear();
    ranks.spawner.spawn({launch(0, {"/bin/true"}), launch(1, {"/bin/true"})});
    ranks.run_until_finished();
    ASSERT_TRUE(ranks.spawner.all_finished());
    EXPECT_EQ(ranks.all_started, 2);   // once per attempt
    EXPECT_EQ(ranks.spawner.total(), 2u);
    EXPECT_EQ(exit_code_of(ranks.exited[0]), 0);
    ASSERT_EQ(ranks.spawned.size(), 4u);   // each rank once per attempt, in whatever order their execs are known
    for (auto half : {ranks.spawned.begin(), ranks.spawned.begin() + 2}) {
        std::vector<long> attempt(half, half + 2);
        std::sort(attempt.begin(), attempt.end());
        EXPECT_EQ(attempt, (std::vector<long>{0, 1}));
    }
}

TEST(RankSpawnerStates, ANodeWithoutRanksHasAllStarted)
{
    RecordedSpawner ranks;
    ranks.spawner.start_none();
    EXPECT_TRUE(ranks.spawner.all_started());
    EXPECT_EQ(ranks.all_started, 1);
}

} // namespace
} // namespace canopy
