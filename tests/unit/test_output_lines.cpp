// How the launcher prints the ranks' output now that partial lines arrive: labels on every line and never two
// ranks on one line with -l, the bytes untouched without it, and canopy's own lines on lines of their own.
#include <gtest/gtest.h>

#include "output_lines.hpp"

using namespace canopy;

TEST(OutputLines, LabelsEveryWholeLine)
{
    OutputLines lines(true);
    EXPECT_EQ(lines.text(3, 1, "a\nb\n"), "[3] a\n[3] b\n");
    EXPECT_EQ(lines.end_open_line(1), "");
}

TEST(OutputLines, APartialLineContinuesWithoutASecondLabel)
{
    OutputLines lines(true);
    EXPECT_EQ(lines.text(0, 1, "10%"), "[0] 10%");
    EXPECT_EQ(lines.text(0, 1, "\r50%"), "\r50%");
    EXPECT_EQ(lines.text(0, 1, "\r100%\nnext\n"), "\r100%\n[0] next\n");
}

TEST(OutputLines, AnotherRanksOutputWaitsItsTimeThenEndsTheOpenLineFirst)
{
    OutputLines lines(true);
    auto t0 = OutputLines::Clock::now();
    EXPECT_EQ(lines.text(0, 1, "Enter a value: ", t0), "[0] Enter a value: ");
    EXPECT_EQ(lines.text(1, 1, "loading\n", t0), "");   // waits for rank 0's line
    ASSERT_TRUE(lines.due(1));
    EXPECT_EQ(*lines.due(1), t0 + OutputLines::hold_limit);
    EXPECT_EQ(lines.release(1, t0 + OutputLines::hold_limit / 2), "");
    EXPECT_EQ(lines.release(1, t0 + OutputLines::hold_limit), "\n[1] loading\n");
    EXPECT_FALSE(lines.due(1));
    EXPECT_EQ(lines.text(0, 1, "42\n", t0 + OutputLines::hold_limit), "[0] 42\n");   // its line was ended
}

TEST(OutputLines, ALineWrittenInTwoPiecesStaysWholeWhileOthersWait)
{
    // Python's print writes the text, then the newline: a rank descheduled in between must not lose its line to
    // another rank's.
    for (bool labelled : {false, true}) {
        OutputLines lines(labelled);
        std::string label0 = labelled ? "[0] " : "", label1 = labelled ? "[1] " : "", label2 = labelled ? "[2] " : "";
        EXPECT_EQ(lines.text(0, 1, "IMPORT_BENCH {}"), label0 + "IMPORT_BENCH {}");
        EXPECT_EQ(lines.text(1, 1, "IMPORT_BENCH {1}\n"), "");
        EXPECT_EQ(lines.text(2, 1, "IMPORT_BENCH {2}"), "");
        EXPECT_EQ(lines.text(0, 1, "\n"), "\n" + label1 + "IMPORT_BENCH {1}\n" + label2 + "IMPORT_BENCH {2}");
        EXPECT_FALSE(lines.due(1));   // nothing waits: rank 2's open line is the one printed last
        EXPECT_EQ(lines.text(2, 1, "\n"), "\n");
    }
}

TEST(OutputLines, StreamsAreApart)
{
    OutputLines lines(true);
    EXPECT_EQ(lines.text(0, 2, "warn"), "[0] warn");
    EXPECT_EQ(lines.text(1, 1, "out\n"), "[1] out\n");   // stdout does not end stderr's open line
    EXPECT_EQ(lines.text(0, 2, "ing\n"), "ing\n");
}

TEST(OutputLines, EachRanksOutputKeepsItsOrderAndTheOpenRankGoesFirst)
{
    OutputLines lines(false);
    EXPECT_EQ(lines.text(9, 1, "y"), "y");
    EXPECT_EQ(lines.text(4, 1, "text0"), "");
    EXPECT_EQ(lines.text(5, 1, "z"), "");
    EXPECT_EQ(lines.text(4, 1, "\nline1\n"), "");
    EXPECT_EQ(lines.text(9, 1, "\n"), "\ntext0\nline1\nz");   // rank 4's line whole, then rank 5's
    EXPECT_EQ(lines.text(4, 1, "line2\n"), "");                   // behind rank 5's open line
    EXPECT_EQ(lines.text(5, 1, "\n"), "\nline2\n");
    EXPECT_FALSE(lines.due(1));
}

TEST(OutputLines, NoMoreThanHoldBytesWait)
{
    OutputLines lines(false);
    EXPECT_EQ(lines.text(0, 1, "no newline ever"), "no newline ever");
    std::string chunk(OutputLines::hold_bytes / 2, 'x');
    EXPECT_EQ(lines.text(1, 1, chunk), "");
    EXPECT_EQ(lines.text(2, 1, chunk), "");
    EXPECT_EQ(lines.text(1, 1, "y"), chunk + "y" + chunk);   // over the bound: all of it goes, rank by rank in order
    EXPECT_FALSE(lines.due(1));
}

TEST(OutputLines, WithoutLabelsTheBytesPassUnchanged)
{
    OutputLines lines(false);
    auto t0 = OutputLines::Clock::now();
    EXPECT_EQ(lines.text(0, 2, "10%", t0), "10%");
    EXPECT_EQ(lines.text(1, 2, "other\n", t0), "");   // waits behind the open progress line
    EXPECT_EQ(lines.text(0, 2, "\r20%", t0), "\r20%");
    EXPECT_EQ(lines.release(2, t0 + OutputLines::hold_limit), "other\n");   // then comes as it was written
    EXPECT_EQ(lines.text(0, 2, "\r30%", t0), "\r30%");
    EXPECT_EQ(lines.end_open_line(2), "\n");   // before a line of canopy's own
    EXPECT_EQ(lines.end_open_line(2), "");
}

TEST(OutputLines, CanopysOwnLineComesAfterWhatWaited)
{
    OutputLines lines(false);
    EXPECT_EQ(lines.text(0, 2, "Enter: "), "Enter: ");
    EXPECT_EQ(lines.text(1, 2, "Traceback\n"), "");
    EXPECT_EQ(lines.end_open_line(2), "Traceback\n");
}
