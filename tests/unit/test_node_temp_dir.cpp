// Node temp dirs and the sweep of abandoned ones: a dir is made fresh under a name nobody could take first, and is
// removed only when it is this user's, is a node temp dir (has the lock file), has sat unchanged for the given age,
// and no process, this one or another, holds its lock.
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
#include <vector>

#include <gtest/gtest.h>

#include "proc/node_temp_dir.hpp"
#include "temp_dir.hpp"
#include "util/private_dir.hpp"

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
    std::string abandoned(const std::string& prefix)
    {
        std::string path;
        {
            auto dir = NodeTempDir::create(base_, prefix);
            EXPECT_TRUE(dir) << dir.error().message;
            path = dir->path();
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
    auto dir = NodeTempDir::create(base_, "canopy-job-node1");
    ASSERT_TRUE(dir) << dir.error().message;
    std::string path = dir->path();
    EXPECT_EQ(fs::path(path).parent_path().string(), base_);
    EXPECT_TRUE(is_private_dir_name(fs::path(path).filename().string(), "canopy-job-node1")) << path;
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
    auto dir = NodeTempDir::create(base_ + "/missing-parent", "canopy-job-node1");
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

// Issue 38: another user who saw the job's id in /dev/shm made canopy-JOB-NODE first, mode 0777, and the job either
// failed (File exists) or wrote into his dir. Now the name he would need is not known until it is made, and a name
// that exists already, whoever made it, is passed over.
TEST_F(NodeTempDirs, ANameSomeoneElseMadeFirstIsNeverUsed)
{
    fs::create_directory(base_ + "/canopy-job-node1");   // the name a job used to take
    std::string squatted;
    auto squat = [&](const std::string& path) {
        if (!squatted.empty())
            return;
        squatted = path;   // made between the name's draw and its mkdir: as if he had guessed it
        ASSERT_EQ(::mkdir(path.c_str(), 0777), 0);
        ::chmod(path.c_str(), 0777);
    };
    auto dir = NodeTempDir::create(base_, "canopy-job-node1", squat);
    ASSERT_TRUE(dir) << dir.error().message;
    ASSERT_FALSE(squatted.empty());
    EXPECT_NE(dir->path(), squatted);
    EXPECT_NE(dir->path(), base_ + "/canopy-job-node1");
    EXPECT_EQ(fs::status(dir->path()).permissions(), fs::perms::owner_all);
    EXPECT_TRUE(fs::is_empty(squatted)) << "nothing of the job's may go into a dir it did not make";
    EXPECT_TRUE(fs::is_empty(base_ + "/canopy-job-node1"));
    auto again = NodeTempDir::create(base_, "canopy-job-node1");
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_NE(again->path(), dir->path());
}

// A simulated parent cleans up after a child that died: it finds the child's dir by how its name starts, and
// removes only dirs of this user's made with that prefix, never through a symlink.
TEST_F(NodeTempDirs, ADeadNodesDirIsFoundByItsPrefixAndOnlyOursIsRemoved)
{
    std::string dead = abandoned("canopy-j-sim0001");
    std::string other_node = abandoned("canopy-j-sim00010");
    std::string elsewhere = base_ + "/elsewhere";
    fs::create_directories(elsewhere + "/keep");
    fs::create_directory_symlink(elsewhere, base_ + "/canopy-j-sim0001-abcdef");
    std::string exact = base_ + "/canopy-j-sim0001";
    fs::create_directories(exact + "/keep");
    std::string foreign = base_ + "/canopy-j-sim0001-zzzzzz";
    fs::create_directories(foreign + "/keep");
    bool can_chown = ::geteuid() == 0 && ::chown(foreign.c_str(), 65534, 65534) == 0;
    EXPECT_EQ(remove_temp_dirs_made_with(base_, "canopy-j-sim0001"), can_chown ? 1 : 2);
    EXPECT_FALSE(fs::exists(dead));
    EXPECT_TRUE(fs::exists(other_node + "/app.sock"));
    EXPECT_TRUE(fs::exists(elsewhere + "/keep"));
    EXPECT_TRUE(fs::is_symlink(base_ + "/canopy-j-sim0001-abcdef"));
    EXPECT_TRUE(fs::exists(exact + "/keep"));
    if (can_chown)
        EXPECT_TRUE(fs::exists(foreign + "/keep")) << "another user's dir was removed";
}

TEST_F(NodeTempDirs, ASocketGoesInTheDirOrWhereItsPathIsTooLongInAPrivateDirUnderTmp)
{
    auto dir = NodeTempDir::create(base_, "canopy-job-node1");
    ASSERT_TRUE(dir) << dir.error().message;
    auto near = dir->socket_path("app.sock");
    ASSERT_TRUE(near) << near.error().message;
    EXPECT_EQ(*near, dir->path() + "/app.sock");

    std::string deep = base_ + "/" + std::string(100, 'd');
    fs::create_directory(deep);
    auto deep_dir = NodeTempDir::create(deep, "canopy-job-node1");
    ASSERT_TRUE(deep_dir) << deep_dir.error().message;
    std::vector<std::string> told;
    auto far = deep_dir->socket_path("app.sock", [&](const std::string& path) { told.push_back(path); });
    ASSERT_TRUE(far) << far.error().message;
    std::string holder = fs::path(*far).parent_path().string();
    EXPECT_EQ(fs::path(holder).parent_path().string(), "/tmp") << *far;
    EXPECT_TRUE(is_private_dir_name(fs::path(holder).filename().string(), "canopy-job-node1")) << *far;
    EXPECT_EQ(fs::status(holder).permissions(), fs::perms::owner_all);
    EXPECT_EQ(told, std::vector<std::string>{holder});
    auto second = deep_dir->socket_path("stage.sock");
    ASSERT_TRUE(second) << second.error().message;
    EXPECT_EQ(*second, holder + "/stage.sock");   // one such dir per node
    deep_dir->remove();
    EXPECT_FALSE(fs::exists(holder));
}

} // namespace
