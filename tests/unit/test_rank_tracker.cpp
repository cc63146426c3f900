// The PMIx server's view of its local ranks: which exit loses a rank, and when the job ended abnormally.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include "pmix/rank_tracker.hpp"

using namespace canopy;

namespace {

int exit_code(int code) { return W_EXITCODE(code, 0); }
int killed_by(int signal) { return W_EXITCODE(0, signal); }

} // namespace

TEST(RankTracker, ARankThatConnectedAndExitedWithoutFinalizeIsLost)
{
    RankTracker ranks("node1");
    ranks.connected(4);
    auto loss = ranks.exited(4, killed_by(SIGKILL));
    ASSERT_TRUE(loss);
    EXPECT_EQ(loss->rank, 4);
    EXPECT_EQ(loss->code, 128 + SIGKILL);
    EXPECT_EQ(loss->message, "rank 4 on node1 exited without calling PMIx_Finalize (killed by signal 9)");
    EXPECT_TRUE(ranks.ended_abnormally());
}

TEST(RankTracker, ALostRankThatExitedZeroStillFailsTheJob)
{
    RankTracker ranks("node0");
    ranks.connected(0);
    auto loss = ranks.exited(0, exit_code(0));
    ASSERT_TRUE(loss);
    EXPECT_EQ(loss->code, 1);
    EXPECT_EQ(loss->message, "rank 0 on node0 exited without calling PMIx_Finalize (exit code 0)");
}

TEST(RankTracker, AFinalizedRankExitsCleanlyWhateverItsCode)
{
    RankTracker ranks("node0");
    ranks.connected(1);
    ranks.finalized(1);
    EXPECT_FALSE(ranks.exited(1, exit_code(3)));
    EXPECT_FALSE(ranks.ended_abnormally());
}

TEST(RankTracker, AnAbortingRanksExitIsNotALossToo)
{
    RankTracker ranks("node0");
    ranks.connected(2);
    ranks.aborted(2);
    EXPECT_FALSE(ranks.exited(2, killed_by(SIGTERM)));
    EXPECT_TRUE(ranks.ended_abnormally());   // it connected and never finalized
}

TEST(RankTracker, NoRankUsingPmixAPlainProgramsExitIsNoLoss)
{
    RankTracker ranks("node0");
    EXPECT_FALSE(ranks.exited(0, exit_code(0)));
    EXPECT_FALSE(ranks.exited(1, exit_code(2)));
    EXPECT_FALSE(ranks.ended_abnormally());
}

TEST(RankTracker, ARankExitingUnconnectedWhileAnotherUsesPmixIsLost)
{
    RankTracker ranks("node2");
    ranks.connected(0);
    auto loss = ranks.exited(1, exit_code(0));
    ASSERT_TRUE(loss);
    EXPECT_EQ(loss->rank, 1);
    EXPECT_EQ(loss->code, 1);
    EXPECT_EQ(loss->message, "rank 1 on node2 exited without connecting to PMIx while other ranks use it (exit code 0)");
    EXPECT_FALSE(ranks.exited(1, exit_code(0)));   // reported once
}

TEST(RankTracker, AnEarlierUnconnectedExitIsLostWhenARankConnects)
{
    RankTracker ranks("node0");
    EXPECT_FALSE(ranks.exited(3, exit_code(0)));
    EXPECT_FALSE(ranks.exited(5, exit_code(0)));
    ranks.connected(4);
    auto loss = ranks.loss_found_by_connect();
    ASSERT_TRUE(loss);
    EXPECT_EQ(loss->rank, 3);
    EXPECT_EQ(loss->code, 1);
    EXPECT_EQ(loss->message, "rank 3 on node0 exited without connecting to PMIx while other ranks use it");
    EXPECT_FALSE(ranks.loss_found_by_connect());   // one loss ends the job; the next connect finds none
}

TEST(RankTracker, OnlyTheFirstAbortIsClaimedAndItMakesTheEndAbnormal)
{
    RankTracker ranks("node0");
    EXPECT_FALSE(ranks.abort_claimed());
    EXPECT_FALSE(ranks.ended_abnormally());
    EXPECT_TRUE(ranks.claim_abort());
    EXPECT_FALSE(ranks.claim_abort());
    EXPECT_TRUE(ranks.abort_claimed());
    EXPECT_TRUE(ranks.ended_abnormally());
}

TEST(RankTracker, AConnectedRankNotYetFinalizedMakesTheEndAbnormal)
{
    RankTracker ranks("node0");
    ranks.connected(0);
    ranks.connected(1);
    ranks.finalized(0);
    EXPECT_TRUE(ranks.ended_abnormally());
    ranks.finalized(1);
    EXPECT_FALSE(ranks.ended_abnormally());
}

TEST(RankTracker, WaitStatusesBecomeExitCodes)
{
    EXPECT_EQ(exit_status_code(exit_code(7)), 7);
    EXPECT_EQ(exit_status_code(killed_by(SIGSEGV)), 128 + SIGSEGV);
}
