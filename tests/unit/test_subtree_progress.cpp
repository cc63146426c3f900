// A parent's view of its children's reports: in order, once each, complete only when every child is there.
#include <gtest/gtest.h>

#include "position/subtree_progress.hpp"

namespace canopy {
namespace {

TEST(SubtreeProgress, CompleteOnlyWhenEveryChildReported)
{
    SubtreeProgress progress;
    progress.set_children(2);
    EXPECT_FALSE(progress.all(SubtreeStep::up));
    EXPECT_TRUE(progress.record(1, SubtreeStep::up));
    EXPECT_FALSE(progress.all(SubtreeStep::up));
    EXPECT_TRUE(progress.record(2, SubtreeStep::up));
    EXPECT_TRUE(progress.all(SubtreeStep::up));
    EXPECT_FALSE(progress.all(SubtreeStep::spawned));
}

TEST(SubtreeProgress, OutOfOrderAndRepeatedReportsAreRefused)
{
    SubtreeProgress progress;
    progress.set_children(1);
    EXPECT_FALSE(progress.record(5, SubtreeStep::spawned));   // spawned before up
    EXPECT_TRUE(progress.record(5, SubtreeStep::up));
    EXPECT_FALSE(progress.record(5, SubtreeStep::up));        // twice
    EXPECT_TRUE(progress.record(5, SubtreeStep::spawned));
    EXPECT_FALSE(progress.is_done(5));
    EXPECT_TRUE(progress.record(5, SubtreeStep::done));
    EXPECT_TRUE(progress.is_done(5));
    EXPECT_TRUE(progress.all(SubtreeStep::done));
}

TEST(SubtreeProgress, ARestartTakesEverySubtreeBackToUp)
{
    SubtreeProgress progress;
    progress.set_children(2);
    for (long child : {1, 2})
        for (auto step : {SubtreeStep::up, SubtreeStep::spawned})
            EXPECT_TRUE(progress.record(child, step));
    EXPECT_TRUE(progress.record(1, SubtreeStep::done));
    progress.back_to_up();
    EXPECT_TRUE(progress.all(SubtreeStep::up));
    EXPECT_FALSE(progress.all(SubtreeStep::spawned));
    EXPECT_FALSE(progress.is_done(1));
    EXPECT_FALSE(progress.record(1, SubtreeStep::up));   // up all along
    for (long child : {1, 2})
        EXPECT_TRUE(progress.record(child, SubtreeStep::spawned));
    EXPECT_TRUE(progress.all(SubtreeStep::spawned));
    EXPECT_FALSE(progress.all(SubtreeStep::done));
}

TEST(SubtreeProgress, ALeafIsCompleteAtOnce)
{
    SubtreeProgress progress;
    EXPECT_TRUE(progress.all(SubtreeStep::done));
}

} // namespace
} // namespace canopy
