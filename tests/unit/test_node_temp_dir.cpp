// Node temp dirs and the sweep of abandoned ones: a dir is removed only when it is this user's, is a node temp dir
// (has the lock file), has sat unchanged for the given age, and no process, this one or another, holds its lock.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "proc/node_temp_dir.hpp"
#include "temp_dir.hpp"

using namespace canopy;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

class NodeTempDirs : public ::testing::Test {
protected:
    // Makes its mtime an hour old, as a dir abandoned long ago.
    void age(const std::string& path)
    {
        timespec times[2];
        ::clock_gettime(CLOCK_REALTIME, &times[0]);
        times[0].tv_sec -= 3600;
        times[1] = times[0];
        ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
    }

    // A node temp dir whose daemon died: created, filled, and its holder gone.
    std::string abandoned(const std::string& name)
    {
        std::string path = base_ + "/" + name;
        {
            auto dir = NodeTempDir::create(path);
            EXPECT_TRUE(dir) << dir.error().message;
            std::ofstream(path + "/app.sock") << "x";
            fs::create_directories(path + "/ompi/jf.1");
        }   // destroyed without remove(): as by SIGKILL
        age(path);
        return path;
    }

    TempDir temp_{"canopy-sweep-test"};
    const std::string base_ = temp_.path();
};

TEST_F(NodeTempDirs, CreateLocksAndRemoveRemoves)
{
    std::string path = base_ + "/canopy-job-node1";
    auto dir = NodeTempDir::create(path);
    ASSERT_TRUE(dir) << dir.error().message;
    EXPECT_EQ(dir->path(), path);
    EXPECT_EQ(fs::status(path).permissions(), fs::perms::owner_all);
    EXPECT_TRUE(fs::exists(path + "/" + NodeTempDir::lock_name));
    age(path);
    EXPECT_EQ(remove_abandoned_temp_dirs(base_, 60s), 0);   // held by us
    EXPECT_TRUE(fs::exists(path));
    dir->remove();
    EXPECT_FALSE(fs::exists(path));
    EXPECT_TRUE(dir->path().empty());
}

TEST_F(NodeTempDirs, CreateFailsWithTheReason)
{
    auto dir = NodeTempDir::create(base_ + "/missing-parent/canopy-job-node1");
    ASSERT_FALSE(dir);
    EXPECT_NE(dir.error().message.find("No such file"), std::string::npos) << dir.error().message;
}

TEST_F(NodeTempDirs, AnAbandonedDirIsRemovedWithEverythingInIt)
{
    std::string path = abandoned("canopy-deadjob-node3");
    EXPECT_EQ(remove_abandoned_temp_dirs(base_, 60s), 1);
    EXPECT_FALSE(fs::exists(path));
}

TEST_F(NodeTempDirs, AYoungDirIsLeftAlone)
{
    std::string path = abandoned("canopy-deadjob-node3");
    timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), now, 0), 0);
    EXPECT_EQ(remove_abandoned_temp_dirs(base_, 60s), 0);
    EXPECT_TRUE(fs::exists(path));
}

TEST_F(NodeTempDirs, ADirHeldByAnotherProcessIsLeftAlone)
{
    std::string path = abandoned("canopy-livejob-node2");
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t holder = ::fork();
    ASSERT_GE(holder, 0);
    if (holder == 0) {
        int fd = ::open((path + "/" + NodeTempDir::lock_name).c_str(), O_RDONLY);
        ::flock(fd, LOCK_SH);
        ::write(ready[1], "x", 1);
        ::pause();
        ::_exit(0);
    }
    char byte;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    EXPECT_EQ(remove_abandoned_temp_dirs(base_, 60s), 0);
    EXPECT_TRUE(fs::exists(path + "/app.sock"));
    ::kill(holder, SIGKILL);
    ::waitpid(holder, nullptr, 0);
    EXPECT_EQ(remove_abandoned_temp_dirs(base_, 60s), 1);   // its holder gone, it is abandoned now
    EXPECT_FALSE(fs::exists(path));
    ::close(ready[0]);
    ::close(ready[1]);
}

TEST_F(NodeTempDirs, OnlyNodeTempDirsAreSwept)
{
    // Without the lock file (the launcher's stage cache, another tool's dir), or not named canopy-*, or a symlink.
    std::string plain = base_ + "/canopy-stage-cache";
    fs::create_directories(plain + "/sub");
    age(plain);
    std::string other = abandoned("canopy-deadjob-node3");
    std::string renamed = base_ + "/other-tool-dir";
    fs::rename(other, renamed);
    std::string target = abandoned("canopy-deadjob-node4");
    std::string moved = base_ + "/elsewhere";
    fs::rename(target, moved);
    fs::create_directory_symlink(moved, base_ + "/canopy-deadjob-node4");
    EXPECT_EQ(remove_abandoned_temp_dirs(base_, 60s), 0);
    EXPECT_TRUE(fs::exists(plain + "/sub"));
    EXPECT_TRUE(fs::exists(renamed + "/app.sock"));
    EXPECT_TRUE(fs::exists(moved + "/app.sock"));
}

TEST_F(NodeTempDirs, AMissingBaseRemovesNothing)
{
    EXPECT_EQ(remove_abandoned_temp_dirs(base_ + "/not-there", 60s), 0);
}

} // namespace
