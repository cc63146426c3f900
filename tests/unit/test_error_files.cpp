// Reading what torch.distributed.elastic's @record writes to TORCHELASTIC_ERROR_FILE: the exception in one line with
// where it was raised, and the traceback; anything else in the file is no recorded error.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "error_files.hpp"
#include "temp_dir.hpp"

using namespace canopy;

namespace {

class ErrorFiles : public ::testing::Test {
protected:
    std::string write(const std::string& text)
    {
        std::string path = error_file_for(dir_, 3);
        std::ofstream(path) << text;
        return path;
    }

    TempDir temp_{"canopy-error-files"};
    const std::string dir_ = temp_.path();
};

TEST_F(ErrorFiles, EachRankHasItsOwnFileInTheNodeTempDir)
{
    EXPECT_EQ(error_file_for("/dev/shm/canopy-j-n1", 3), "/dev/shm/canopy-j-n1/rank-3.error.json");
}

TEST_F(ErrorFiles, ReadsWhatRecordWritesWithTheInnermostFrame)
{
    auto recorded = read_error_file(write(R"({"message": {"message": "ValueError: bad lr", "extraInfo": {
        "py_callstack": "Traceback (most recent call last):\n  File \"/w/train.py\", line 11, in main\n    check()\n  File \"/w/train.py\", line 6, in check\n    raise ValueError('bad lr')\nValueError: bad lr\n",
        "timestamp": "1700000000"}}})"));
    ASSERT_TRUE(recorded);
    EXPECT_EQ(recorded->summary, "ValueError: bad lr (at /w/train.py:6 in check)");
    EXPECT_NE(recorded->traceback.find("raise ValueError('bad lr')"), std::string::npos);
}

TEST_F(ErrorFiles, AMessageAloneOrOnSeveralLinesStaysOneLine)
{
    auto plain = read_error_file(write(R"({"message": "RuntimeError: NCCL error"})"));
    ASSERT_TRUE(plain);
    EXPECT_EQ(plain->summary, "RuntimeError: NCCL error");
    EXPECT_EQ(plain->traceback, "");
    auto multi = read_error_file(write(R"({"message": {"message": "AssertionError: a\nb", "extraInfo": {}}})"));
    ASSERT_TRUE(multi);
    EXPECT_EQ(multi->summary, "AssertionError: a ...");
}

TEST_F(ErrorFiles, NoFileOrSomethingElseIsNoRecordedError)
{
    EXPECT_FALSE(read_error_file(dir_ + "/missing.json"));
    EXPECT_FALSE(read_error_file(write("not json")));
    EXPECT_FALSE(read_error_file(write(R"({"other": 1})")));
    EXPECT_FALSE(read_error_file(write(R"({"message": 42})")));
    EXPECT_FALSE(read_error_file(write(R"([1, 2])")));
}

} // namespace
