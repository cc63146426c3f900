// The sweep of MPICH segments left by ranks that died in MPI_Init: only this user's recent files with MPICH's
// prefix, and never one that a live process, this one or another, holds open or mapped.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "proc/abandoned_segments.hpp"
#include "temp_dir.hpp"

using namespace canopy;
using namespace std::chrono_literals;

namespace {

class AbandonedSegments : public ::testing::Test {
protected:
    std::string make(const std::string& name)
    {
        std::string path = dir_ + "/" + name;
        std::ofstream(path) << std::string(4096, 'x');
        return path;
    }
    // By default the job started a moment ago, before every file the test made.
    std::vector<std::string> sweep() { return sweep(std::chrono::system_clock::now() - 5s); }
    std::vector<std::string> sweep(std::chrono::system_clock::time_point since)
    {
        auto removed = remove_abandoned_segments(dir_, mpich_segment_prefix, since);
        std::sort(removed.begin(), removed.end());
        return removed;
    }

    TempDir temp_{"canopy-segments"};
    const std::string dir_ = temp_.path();
};

TEST_F(AbandonedSegments, RemovesOnlyUnusedFilesWithMpichsPrefix)
{
    auto abandoned = make("mpich_shar_tmpAbCdEf");
    auto other = make("vader_segment.node0.0");
    EXPECT_EQ(sweep(), std::vector<std::string>{abandoned});
    EXPECT_FALSE(std::filesystem::exists(abandoned));
    EXPECT_TRUE(std::filesystem::exists(other));
}

TEST_F(AbandonedSegments, KeepsFilesMadeBeforeTheJobStarted)
{
    auto earlier = make("mpich_shar_tmpEarlier");
    EXPECT_TRUE(sweep(std::chrono::system_clock::now() + 5s).empty());
    EXPECT_TRUE(std::filesystem::exists(earlier));
}

TEST_F(AbandonedSegments, KeepsAFileThisProcessHoldsOpen)
{
    auto open_one = make("mpich_shar_tmpOpen");
    int fd = ::open(open_one.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(sweep().empty());
    ::close(fd);
    EXPECT_EQ(sweep(), std::vector<std::string>{open_one});
}

TEST_F(AbandonedSegments, KeepsAFileAnotherProcessMapsUntilItExits)
{
    // As MPICH's ranks hold a segment: mapped, its descriptor closed.
    auto mapped = make("mpich_shar_tmpMapped");
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        int fd = ::open(mapped.c_str(), O_RDWR);
        void* memory = fd < 0 ? MAP_FAILED : ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        char ok = memory == MAP_FAILED ? 'n' : 'y';
        (void)!::write(ready[1], &ok, 1);
        ::pause();
        ::_exit(0);
    }
    ::close(ready[1]);
    char ok = 0;
    ASSERT_EQ(::read(ready[0], &ok, 1), 1);
    ::close(ready[0]);
    ASSERT_EQ(ok, 'y');
    EXPECT_TRUE(sweep().empty());
    EXPECT_TRUE(std::filesystem::exists(mapped));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    EXPECT_EQ(sweep(), std::vector<std::string>{mapped});
}

TEST_F(AbandonedSegments, AMissingDirectoryIsNothingToSweep)
{
    EXPECT_TRUE(remove_abandoned_segments(dir_ + "/missing", mpich_segment_prefix, std::chrono::system_clock::now())
                    .empty());
}

} // namespace
