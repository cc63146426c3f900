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
    // Its line was ended by canopy, not by rank 0: the rest is marked as the rest of that line.
    EXPECT_EQ(lines.text(0, 1, "42\n", t0 + OutputLines::hold_limit), "[0+] 42\n");
    EXPECT_EQ(lines.text(0, 1, "next\n", t0 + OutputLines::hold_limit), "[0] next\n");
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

TEST(OutputLines, PastHoldBytesOnlyTheOpenLinesRankGoesOnAndTheLineStaysWholeHoweverLong)
{
    for (bool labelled : {false, true}) {
        OutputLines lines(labelled);
        auto t0 = OutputLines::Clock::now();
        std::string label0 = labelled ? "[0] " : "", label1 = labelled ? "[1] " : "";
        std::string piece(64 << 10, 'a'), chunk(OutputLines::hold_bytes / 2, 'b');
        EXPECT_EQ(lines.text(0, 1, piece, t0), label0 + piece);
        EXPECT_EQ(lines.text(1, 1, chunk + "\n", t0), "");
        EXPECT_FALSE(lines.line_hold(1));
        EXPECT_EQ(lines.text(1, 1, chunk + "\n", t0), "");
        EXPECT_EQ(lines.line_hold(1), 0u);   // the daemons hold every rank's stdout but rank 0's
        EXPECT_FALSE(lines.line_hold(2));
        for (int i = 0; i < 128; ++i)        // 8 MiB more of rank 0's line, in the pieces its daemon sends
            EXPECT_EQ(lines.text(0, 1, piece, t0), piece);
        EXPECT_EQ(lines.text(0, 1, "\n", t0),
                  "\n" + label1 + chunk + "\n" + label1 + chunk + "\n");
        EXPECT_FALSE(lines.line_hold(1));
        EXPECT_FALSE(lines.due(1));
    }
}

TEST(OutputLines, NoMoreThanSplitBytesWait)
{
    OutputLines lines(false);
    EXPECT_EQ(lines.text(0, 1, "no newline ever"), "no newline ever");
    std::string chunk(OutputLines::split_bytes / 2, 'x');
    EXPECT_EQ(lines.text(1, 1, chunk), "");
    EXPECT_EQ(lines.text(2, 1, chunk), "");
    EXPECT_EQ(lines.text(1, 1, "y"), chunk + "y" + chunk);   // over the bound: all of it goes, rank by rank in order
    EXPECT_FALSE(lines.due(1));
}

TEST(OutputLines, ALineThatGoesOnAndNeverEndsHoldsOthersBackForHoldMaxInAll)
{
    // A progress bar redraws its line (\r) and never ends it.
    OutputLines lines(true);
    auto t0 = OutputLines::Clock::now();
    EXPECT_EQ(lines.text(0, 2, " 10%", t0), "[0]  10%");
    EXPECT_EQ(lines.text(1, 2, "warning\n", t0), "");
    auto t = t0;
    for (; t < t0 + OutputLines::hold_max; t += std::chrono::milliseconds(500)) {
        EXPECT_EQ(lines.release(2, t), "");
        EXPECT_EQ(lines.text(0, 2, "\r 20%", t), "\r 20%");   // it goes on: the wait for progress starts again
    }
    ASSERT_TRUE(lines.due(2));
    EXPECT_EQ(*lines.due(2), t0 + OutputLines::hold_max);
    EXPECT_EQ(lines.release(2, t), "\n[1] warning\n");
    EXPECT_EQ(lines.text(0, 2, "\r 30%", t), "[0+] \r 30%");
}

TEST(OutputLines, TheWaitsStartAgainAfterCanopyHeldEverythingBack)
{
    OutputLines lines(false);
    auto t0 = OutputLines::Clock::now();
    EXPECT_EQ(lines.text(0, 1, "Enter: ", t0), "Enter: ");
    EXPECT_EQ(lines.text(1, 1, "later\n", t0), "");
    auto t1 = t0 + OutputLines::hold_max;   // a stalled reader held all output back this long
    lines.restart_waits(t1);
    EXPECT_EQ(*lines.due(1), t1 + OutputLines::hold_limit);
    EXPECT_EQ(lines.release(1, t1), "");
}

TEST(OutputLines, EachCutLineIsMarkedWhereItGoesOn)
{
    OutputLines lines(true);
    auto t0 = OutputLines::Clock::now();
    EXPECT_EQ(lines.text(0, 1, "a", t0), "[0] a");
    EXPECT_EQ(lines.text(1, 1, "b", t0), "");
    EXPECT_EQ(lines.text(2, 1, "c\n", t0), "");
    // Rank 0's line is cut, then rank 1's by rank 2's; each goes on later as the rest of its line.
    EXPECT_EQ(lines.release(1, t0 + OutputLines::hold_limit), "\n[1] b\n[2] c\n");
    EXPECT_EQ(lines.text(1, 1, "B\n", t0 + OutputLines::hold_limit), "[1+] B\n");
    EXPECT_EQ(lines.text(0, 1, "A\n", t0 + OutputLines::hold_limit), "[0+] A\n");
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
