// Unit tests for OpenAhead: files opened in order on several threads, a bounded window ahead of the reader.
#include "stage/open_ahead.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.hpp"

namespace canopy::stage {
namespace {

namespace fs = std::filesystem;

std::string read_all(int fd)
{
    std::string out;
    char buffer[256];
    for (ssize_t got; (got = ::read(fd, buffer, sizeof buffer)) > 0;)
        out.append(buffer, static_cast<std::size_t>(got));
    return out;
}

// Descriptors this process has open now.
std::size_t open_descriptors()
{
    std::size_t count = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd"))
        ++count;
    return count;
}

TEST(OpenAhead, EachFileIsTakenInOrderWithItsOwnBytesAndAMissingOneSaysWhy)
{
    TempDir dir("canopy-open-ahead");
    std::vector<std::string> paths;
    for (int i = 0; i < 100; ++i) {
        paths.push_back(dir.path() + "/f" + std::to_string(i));
        if (i != 57)
            std::ofstream(paths.back()) << "file " << i;
    }
    DirectoryHandles handles;
    OpenAhead opener(handles, paths, 4, 8);
    for (int i = 0; i < 100; ++i) {
        int error = 0;
        int fd = opener.take(static_cast<std::size_t>(i), error);
        if (i == 57) {
            EXPECT_EQ(fd, -1);
            EXPECT_EQ(error, ENOENT);
            continue;
        }
        ASSERT_GE(fd, 0) << paths[static_cast<std::size_t>(i)];
        EXPECT_EQ(error, 0);
        EXPECT_EQ(read_all(fd), "file " + std::to_string(i));
        ::close(fd);
    }
}

TEST(OpenAhead, HoldsAtMostItsWindowOpenAndClosesWhatWasNotTakenWhenDropped)
{
    TempDir dir("canopy-open-ahead");
    std::vector<std::string> paths;
    for (int i = 0; i < 200; ++i) {
        paths.push_back(dir.path() + "/f" + std::to_string(i));
        std::ofstream(paths.back()) << i;
    }
    DirectoryHandles handles;
    ASSERT_GE(handles.open(dir.path()), 0);   // the directory and its ancestors: held by `handles` throughout
    const std::size_t before = open_descriptors();
    {
        OpenAhead opener(handles, paths, 8, 16);
        int error = 0;
        int fd = opener.take(0, error);
        ASSERT_GE(fd, 0);
        ::close(fd);
        // The threads run ahead as far as the window past the one taken, and no further: never the 199 left.
        for (int waited = 0; waited < 500 && open_descriptors() < before + 16; ++waited)
            ::usleep(10 * 1000);
        ::usleep(100 * 1000);
        EXPECT_EQ(open_descriptors(), before + 16);
    }
    EXPECT_EQ(open_descriptors(), before);
}

TEST(OpenAhead, NoFilesNoThreads)
{
    DirectoryHandles handles;
    OpenAhead opener(handles, {});
}

} // namespace
} // namespace canopy::stage
