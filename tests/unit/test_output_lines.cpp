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

TEST(OutputLines, AnotherRanksOutputEndsTheOpenLineFirst)
{
    OutputLines lines(true);
    EXPECT_EQ(lines.text(0, 1, "Enter a value: "), "[0] Enter a value: ");
    EXPECT_EQ(lines.text(1, 1, "loading\n"), "\n[1] loading\n");
    EXPECT_EQ(lines.text(0, 1, "42\n"), "[0] 42\n");   // its line was ended: it starts a new one
}

TEST(OutputLines, StreamsAreApart)
{
    OutputLines lines(true);
    EXPECT_EQ(lines.text(0, 2, "warn"), "[0] warn");
    EXPECT_EQ(lines.text(1, 1, "out\n"), "[1] out\n");   // stdout does not end stderr's open line
    EXPECT_EQ(lines.text(0, 2, "ing\n"), "ing\n");
}

TEST(OutputLines, WithoutLabelsTheBytesPassUnchanged)
{
    OutputLines lines(false);
    EXPECT_EQ(lines.text(0, 2, "10%"), "10%");
    EXPECT_EQ(lines.text(1, 2, "other\n"), "other\n");
    EXPECT_EQ(lines.text(0, 2, "\r20%"), "\r20%");
    EXPECT_EQ(lines.end_open_line(2), "\n");   // before a line of canopy's own
    EXPECT_EQ(lines.end_open_line(2), "");
}
