// Unit tests for the interposer's decisions (lib/interpose): paths, prefixes, answers from a real node cache and
// answer board, permissions, and the record file; the wrappers themselves are covered by the integration tests.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "interpose/counters.h"
#include "interpose/paths.h"
#include "interpose/record.h"
#include "interpose/serve.h"
#include "stage/answer_board.hpp"
#include "stage/index.hpp"
#include "stage/node_cache.hpp"
#include "temp_dir.hpp"

namespace canopy::stage {
namespace {

namespace fs = std::filesystem;

std::string absolute(int dirfd, const char* path, int* trailing = nullptr)
{
    char out[PMAX];
    int slash = 0;
    long n = absolute_path(dirfd, path, out, &slash);
    if (trailing)
        *trailing = slash;
    return n < 0 ? "(none)" : std::string(out, static_cast<std::size_t>(n));
}

bool under(const std::string& path, const std::string& prefix)
{
    return path_under(path.data(), path.size(), prefix.data(), prefix.size()) != 0;
}

TEST(InterposePaths, AbsolutePathsCollapseSlashesAndDotsButKeepDotDot)
{
    int trailing = 0;
    EXPECT_EQ(absolute(AT_FDCWD, "//soft/./pkg//mod.py", &trailing), "/soft/pkg/mod.py");
    EXPECT_EQ(trailing, 0);
    EXPECT_EQ(absolute(AT_FDCWD, "/soft/pkg/", &trailing), "/soft/pkg");
    EXPECT_EQ(trailing, 1); // the kernel then wants a directory
    EXPECT_EQ(absolute(AT_FDCWD, "/soft/pkg/.", &trailing), "/soft/pkg");
    EXPECT_EQ(trailing, 1);
    // "link/.." is not the link's directory when link is a symlink: the index walk applies "..", not the spelling.
    EXPECT_EQ(absolute(AT_FDCWD, "/soft/link/../mod.py"), "/soft/link/../mod.py");
    EXPECT_EQ(absolute(AT_FDCWD, "/"), "/");
    EXPECT_EQ(absolute(AT_FDCWD, ""), "(none)");
    EXPECT_EQ(absolute(AT_FDCWD, nullptr), "(none)");
    EXPECT_EQ(absolute(AT_FDCWD, ("/" + std::string(PMAX, 'x')).c_str()), "(none)");
}

TEST(InterposePaths, RelativePathsResolveAgainstTheCwdOrTheDirfd)
{
    EXPECT_EQ(absolute(AT_FDCWD, "pkg/./mod.py"), fs::current_path().string() + "/pkg/mod.py");
    int dir = ::open("/usr/lib", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir, 0);
    EXPECT_EQ(absolute(dir, "x//y/"), "/usr/lib/x/y");
    ::close(dir);
    EXPECT_EQ(absolute(-1, "x"), "(none)"); // no such descriptor: nothing to resolve against
}

TEST(InterposePaths, APrefixHoldsItselfAndWhatIsBelowNotWhatSharesItsStem)
{
    EXPECT_TRUE(under("/a/b", "/a/b"));
    EXPECT_TRUE(under("/a/b/c", "/a/b"));
    EXPECT_FALSE(under("/a/bc", "/a/b"));
    EXPECT_FALSE(under("/a", "/a/b"));
    EXPECT_TRUE(under("/anything", "/"));
}

TEST(InterposePaths, PrefixTextKeepsAbsolutePrefixesWithoutTheirTrailingSlash)
{
    char text[] = "/a/b/:relative::/c//:/";
    prefix_list list{};
    prefix_list_parse(&list, text);
    ASSERT_EQ(list.count, 3);
    EXPECT_EQ(std::string(list.path[0], list.len[0]), "/a/b");
    EXPECT_EQ(std::string(list.path[1], list.len[1]), "/c");
    EXPECT_EQ(std::string(list.path[2], list.len[2]), "/");
    EXPECT_TRUE(prefix_list_holds(&list, "/c/d", 4));

    prefix_list two{};
    char a[] = "/a/b";
    prefix_list_parse(&two, a);
    EXPECT_TRUE(prefix_list_holds(&two, "/a/b/x", 6));
    EXPECT_FALSE(prefix_list_holds(&two, "/a/bc", 5));
    EXPECT_FALSE(prefix_list_holds(&two, "/z", 2));
}

TEST(InterposePaths, PrefixesPastTheLimitAreLeftOut)
{
    std::string text;
    for (int i = 0; i < MAX_PREFIXES + 5; ++i)
        text += "/p" + std::to_string(i) + ":";
    prefix_list list{};
    prefix_list_parse(&list, text.data());
    EXPECT_EQ(list.count, MAX_PREFIXES);
    EXPECT_FALSE(prefix_list_holds(&list, "/p40", 4));
}

std::string unalias(const cache_dir& cache, std::string path, bool* aliased)
{
    char buf[PMAX];
    std::memcpy(buf, path.c_str(), path.size() + 1);
    int was = 0;
    long n = cache_dir_unalias(&cache, buf, static_cast<long>(path.size()), &was);
    *aliased = was != 0;
    return std::string(buf, static_cast<std::size_t>(n));
}

TEST(InterposePaths, TheCacheMirrorsStandForTheOriginalPaths)
{
    auto cache = std::make_unique<cache_dir>();
    ASSERT_EQ(cache_dir_set(cache.get(), "/dev/shm/c//"), 0);
    EXPECT_EQ(std::string(cache->root, cache->root_len), "/dev/shm/c/root");
    bool aliased = false;
    EXPECT_EQ(unalias(*cache, "/dev/shm/c/root/soft/lib.so", &aliased), "/soft/lib.so");
    EXPECT_TRUE(aliased);
    EXPECT_EQ(unalias(*cache, "/dev/shm/c/dirs/soft", &aliased), "/soft");
    EXPECT_TRUE(aliased);
    EXPECT_EQ(unalias(*cache, "/dev/shm/c/root", &aliased), "/");
    EXPECT_TRUE(aliased);
    EXPECT_EQ(unalias(*cache, "/dev/shm/c/rootless/x", &aliased), "/dev/shm/c/rootless/x");
    EXPECT_FALSE(aliased);
    EXPECT_EQ(unalias(*cache, "/dev/shm/c/index", &aliased), "/dev/shm/c/index");
    EXPECT_FALSE(aliased);
    EXPECT_NE(cache_dir_set(cache.get(), "relative"), 0);
}

TEST(InterposePaths, AChangedPathTaintsItselfAndItsDirectorysOtherNames)
{
    dirty_set dirty{};
    auto holds = [&](const std::string& path) { return dirty_set_holds(&dirty, path.data(), path.size()) != 0; };
    EXPECT_FALSE(holds("/p/a/b"));
    dirty_set_add(&dirty, "/p/a/b", 6);
    EXPECT_TRUE(holds("/p/a/b"));
    EXPECT_TRUE(holds("/p/a/new")); // created next to it: the directory's listing changed
    EXPECT_TRUE(holds("/p/a"));
    EXPECT_TRUE(holds("/p/a/b/c")); // in it, should it now be a directory
    EXPECT_FALSE(holds("/p/x"));
    EXPECT_FALSE(holds("/p/a/b/c/d"));
    for (int i = 0; i < MAX_DIRTY / 2; ++i) {
        std::string path = "/q/" + std::to_string(i) + "/f";
        dirty_set_add(&dirty, path.data(), path.size());
    }
    EXPECT_TRUE(holds("/elsewhere")); // past the slots everything counts as changed
}

TEST(InterposeAccess, PermissionBitsOfOwnerGroupOrOthersApply)
{
    canopy_stage_stat s{};
    s.mode = S_IFREG | 0640;
    s.uid = 1000;
    s.gid = 100;
    gid_t extra[] = {5, 100};
    canopy_stage_caller owner{1000, 1, nullptr, 0};
    canopy_stage_caller group{2000, 100, nullptr, 0};
    canopy_stage_caller supplementary{2000, 1, extra, 2};
    canopy_stage_caller other{2000, 1, extra, 1};
    EXPECT_TRUE(canopy_stage_permitted(&s, R_OK, &owner));
    EXPECT_FALSE(canopy_stage_permitted(&s, X_OK, &owner));
    EXPECT_TRUE(canopy_stage_permitted(&s, R_OK, &group));
    EXPECT_TRUE(canopy_stage_permitted(&s, R_OK, &supplementary));
    EXPECT_FALSE(canopy_stage_permitted(&s, R_OK, &other));
    EXPECT_TRUE(canopy_stage_permitted(&s, F_OK, &other));
    s.mode = S_IFREG | 0705;
    EXPECT_TRUE(canopy_stage_permitted(&s, R_OK | X_OK, &owner));
    EXPECT_FALSE(canopy_stage_permitted(&s, R_OK, &group)); // the group's bits decide for a member, not the others'
    EXPECT_TRUE(canopy_stage_permitted(&s, R_OK | X_OK, &other));
}

TEST(InterposeAccess, RootReadsAnythingAndExecutesWhatHasAnExecuteBit)
{
    canopy_stage_stat s{};
    canopy_stage_caller root{0, 0, nullptr, 0};
    s.mode = S_IFREG | 0000;
    EXPECT_TRUE(canopy_stage_permitted(&s, R_OK, &root));
    EXPECT_FALSE(canopy_stage_permitted(&s, X_OK, &root));
    s.mode = S_IFREG | 0001;
    EXPECT_TRUE(canopy_stage_permitted(&s, X_OK, &root));
    s.mode = S_IFDIR | 0000;
    EXPECT_TRUE(canopy_stage_permitted(&s, X_OK, &root));
}

TEST(InterposeStat, EveryFieldOfTheStageRecordIsReported)
{
    canopy_stage_stat s{};
    s.dev = makedev(8, 3);
    s.ino = 42;
    s.nlink = 2;
    s.rdev = makedev(1, 5);
    s.mode = S_IFREG | 0644;
    s.uid = 7;
    s.gid = 8;
    s.size = 1234;
    s.blksize = 4096;
    s.blocks = 8;
    s.atime_sec = 1;
    s.atime_nsec = 2;
    s.mtime_sec = 3;
    s.mtime_nsec = 4;
    s.ctime_sec = 5;
    s.ctime_nsec = 6;
    struct stat st;
    std::memset(&st, 0xff, sizeof st);
    fill_stat(&s, &st);
    EXPECT_EQ(st.st_dev, s.dev);
    EXPECT_EQ(st.st_ino, 42u);
    EXPECT_EQ(st.st_nlink, 2u);
    EXPECT_EQ(st.st_rdev, s.rdev);
    EXPECT_EQ(st.st_mode, s.mode);
    EXPECT_EQ(st.st_uid, 7u);
    EXPECT_EQ(st.st_gid, 8u);
    EXPECT_EQ(st.st_size, 1234);
    EXPECT_EQ(st.st_blksize, 4096);
    EXPECT_EQ(st.st_blocks, 8);
    EXPECT_EQ(st.st_atim.tv_sec, 1);
    EXPECT_EQ(st.st_atim.tv_nsec, 2);
    EXPECT_EQ(st.st_mtim.tv_sec, 3);
    EXPECT_EQ(st.st_mtim.tv_nsec, 4);
    EXPECT_EQ(st.st_ctim.tv_sec, 5);
    EXPECT_EQ(st.st_ctim.tv_nsec, 6);

    struct statx sx;
    std::memset(&sx, 0xff, sizeof sx);
    fill_statx(&s, &sx);
    EXPECT_EQ(sx.stx_mask, static_cast<unsigned>(STATX_BASIC_STATS));
    EXPECT_EQ(sx.stx_ino, 42u);
    EXPECT_EQ(sx.stx_mode, s.mode);
    EXPECT_EQ(sx.stx_size, 1234u);
    EXPECT_EQ(sx.stx_dev_major, 8u);
    EXPECT_EQ(sx.stx_dev_minor, 3u);
    EXPECT_EQ(sx.stx_rdev_major, 1u);
    EXPECT_EQ(sx.stx_rdev_minor, 5u);
    EXPECT_EQ(sx.stx_mtime.tv_sec, 3);
    EXPECT_EQ(sx.stx_mtime.tv_nsec, 4u);
}

// A node cache as canopyd installs it (index, copies, skeletons, answer board) over a small tree under
// <tmp>/soft, and a serve state started on it as a rank's interposer starts.
class InterposeServe : public ::testing::Test {
protected:
    void SetUp() override
    {
        std::memset(&counters, 0, sizeof counters);
        tmp_ = temp_.path();
        soft_ = tmp_ + "/soft";
        fs::create_directories(soft_ + "/pkg/sub");
        fs::create_directories(tmp_ + "/softer");
        write(soft_ + "/pkg/__init__.py", "import sub\n");
        write(soft_ + "/pkg/sub/mod.py", "VALUE = 1\n");
        write(soft_ + "/pkg/data.bin", std::string(100, 'x'));
        write(soft_ + "/pkg/extra.py", ""); // listed, never looked up: the index cannot answer for it
        fs::create_directories(soft_ + "/pkg/more"); // the same for a directory
        write(tmp_ + "/softer/x.py", "");
        fs::create_directory_symlink("pkg", soft_ + "/alias");
        fs::create_symlink("mod.py", soft_ + "/pkg/sub/link.py");

        auto index = build_index({{soft_ + "/pkg/sub/mod.py", true},
                                  {soft_ + "/alias/sub/link.py", true},
                                  {soft_ + "/pkg/data.bin", false},
                                  {soft_ + "/pkg/__init__.py", false}},
                                 BuildOptions{{soft_}});
        ASSERT_TRUE(index.ok()) << index.error().message;
        auto cache = NodeCache::create(tmp_ + "/cache");
        ASSERT_TRUE(cache.ok()) << cache.error().message;
        ASSERT_TRUE(cache->copy_all_content(*index).ok());
        ASSERT_TRUE(cache->install_index(*index).ok());
        auto board = AnswerBoard::create(tmp_ + "/cache/" CANOPY_STAGE_BOARD_NAME, 64, 1 << 20);
        ASSERT_TRUE(board.ok()) << board.error().message;
        board_ = std::move(*board);

        state_ = std::make_unique<serve_state>();
        // No daemon listens there: what the board lacks is not answered.
        std::string socket = tmp_ + "/no-daemon.sock";
        ASSERT_EQ(serve_start(state_.get(), (tmp_ + "/cache").c_str(), socket.c_str(), nullptr), 0);
    }

    static void write(const std::string& path, const std::string& data)
    {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
    }

    // Publishes a directory on the answer board, as the daemon would for an answer it gave; `listed`: with its
    // listing, whose skeleton is then at <cache>/dirs<path>.
    void publish_directory(const std::string& path, bool listed)
    {
        FetchAnswer dir;
        dir.facts.lstat.mode = dir.facts.stat.mode = S_IFDIR | 0755;
        dir.facts.flags = listed ? CANOPY_STAGE_LISTED : 0;
        dir.mirror = path;
        ASSERT_TRUE(board_->publish(path, dir));
    }

    // serve_stat: 1 answered (rc, errno, st), 0 passed through.
    int stat_of(const std::string& path, struct stat* st, int* rc, int follow = 1, int dirfd = AT_FDCWD)
    {
        errno = 0;
        return serve_stat(state_.get(), dirfd, path.c_str(), follow, st, nullptr, &d_, rc);
    }

    TempDir temp_{"canopy-test-interpose"};
    std::string tmp_, soft_;
    std::unique_ptr<AnswerBoard> board_;
    std::unique_ptr<serve_state> state_;
    decision d_{};
};

TEST_F(InterposeServe, TheIndexPrefixesAreServed)
{
    ASSERT_EQ(state_->prefixes.count, 1);
    EXPECT_EQ(std::string(state_->prefixes.path[0], state_->prefixes.len[0]), soft_);
}

TEST_F(InterposeServe, AStagedFileIsStatedFromTheIndex)
{
    struct stat real {}, st {};
    ASSERT_EQ(::stat((soft_ + "/pkg/sub/mod.py").c_str(), &real), 0);
    int rc = -2;
    ASSERT_EQ(stat_of(soft_ + "/alias/sub/../sub/link.py", &st, &rc), 1);
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(st.st_ino, real.st_ino);
    EXPECT_EQ(st.st_size, real.st_size);
    EXPECT_EQ(counters.served_meta, 1u);
    // lstat of the symlink reports the link itself.
    ASSERT_EQ(stat_of(soft_ + "/pkg/sub/link.py", &st, &rc, 0), 1);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST_F(InterposeServe, AMissingNameFailsWithoutTouchingTheFilesystem)
{
    struct stat st {};
    int rc = 0;
    ASSERT_EQ(stat_of(soft_ + "/pkg/nothere.py", &st, &rc), 1);
    EXPECT_EQ(rc, -1);
    EXPECT_EQ(errno, ENOENT);
    ASSERT_EQ(stat_of(soft_ + "/pkg/sub/mod.py/", &st, &rc), 1); // a file with a trailing slash
    EXPECT_EQ(rc, -1);
    EXPECT_EQ(errno, ENOTDIR);
    EXPECT_EQ(counters.served_errno, 2u);
}

TEST_F(InterposeServe, APathOutsideThePrefixesPassesThrough)
{
    struct stat st {};
    int rc = 0;
    EXPECT_EQ(stat_of(tmp_ + "/softer/x.py", &st, &rc), 0); // shares the prefix's stem, not its directory
    EXPECT_EQ(stat_of("/etc/passwd", &st, &rc), 0);
    EXPECT_FALSE(d_.aliased);
    EXPECT_EQ(counters.outside, 2u);
}

TEST_F(InterposeServe, ADirfdRelativePathIsDecidedAsItsAbsoluteSpelling)
{
    int dir = ::open((soft_ + "/pkg").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir, 0);
    struct stat st {};
    int rc = -2;
    EXPECT_EQ(stat_of("sub/mod.py", &st, &rc, 1, dir), 1);
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(std::string(d_.path), soft_ + "/pkg/sub/mod.py");
    EXPECT_EQ(stat_of("sub/missing.py", &st, &rc, 1, dir), 1);
    EXPECT_EQ(errno, ENOENT);
    ::close(dir);
}

TEST_F(InterposeServe, TheMirrorsNameIsAnsweredAsTheOriginalAndPassesAsIt)
{
    std::string mirror = tmp_ + "/cache/root" + fs::canonical(soft_ + "/pkg/sub/mod.py").string();
    struct stat st {};
    int rc = -2;
    ASSERT_EQ(stat_of(mirror, &st, &rc), 1);
    EXPECT_TRUE(d_.aliased);
    EXPECT_EQ(std::string(d_.path), fs::canonical(soft_ + "/pkg/sub/mod.py").string());
    // A name the index does not know passes through with the original path, not the mirror's.
    std::string unknown = tmp_ + "/cache/root/etc/hostname";
    EXPECT_EQ(stat_of(unknown, &st, &rc), 0);
    EXPECT_STREQ(pass_path(&d_, unknown.c_str()), "/etc/hostname");
    EXPECT_EQ(pass_dirfd(&d_, 7), AT_FDCWD);
}

TEST_F(InterposeServe, AfterAWriteTheDirectoryIsLookedUpOnTheRealFilesystem)
{
    struct stat st {};
    int rc = 0;
    EXPECT_EQ(stat_of(soft_ + "/pkg/nothere.py", &st, &rc), 1);
    int fd = -2;
    EXPECT_EQ(serve_open(state_.get(), AT_FDCWD, (soft_ + "/pkg/nothere.py").c_str(), O_WRONLY | O_CREAT, &d_, &fd),
              0);
    EXPECT_EQ(counters.writes, 1u);
    EXPECT_EQ(stat_of(soft_ + "/pkg/nothere.py", &st, &rc), 0);
    EXPECT_EQ(stat_of(soft_ + "/pkg/__init__.py", &st, &rc), 0); // a sibling: the listing changed
    EXPECT_EQ(stat_of(soft_ + "/pkg/sub/mod.py", &st, &rc), 1);  // elsewhere: still served
}

TEST_F(InterposeServe, AReadOpenOfAStagedFileOpensTheCopyAndFstatReportsTheOriginal)
{
    int fd = -2;
    ASSERT_EQ(serve_open(state_.get(), AT_FDCWD, (soft_ + "/pkg/sub/mod.py").c_str(), O_RDONLY, &d_, &fd), 1);
    ASSERT_GE(fd, 0);
    char path[PMAX];
    ASSERT_GT(fd_path(fd, path), 0);
    EXPECT_EQ(std::string(path), tmp_ + "/cache/root" + fs::canonical(soft_ + "/pkg/sub/mod.py").string());
    EXPECT_EQ(counters.served_open, 1u);

    struct stat st {}, real {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    ASSERT_EQ(::stat((soft_ + "/pkg/sub/mod.py").c_str(), &real), 0);
    EXPECT_NE(st.st_ino, real.st_ino);
    serve_fd_stat(state_.get(), fd, &st, nullptr);
    EXPECT_EQ(st.st_ino, real.st_ino);
    EXPECT_EQ(st.st_dev, real.st_dev);
    ::close(fd);
}

TEST_F(InterposeServe, OpensOfDirectoriesGetTheSkeletonAndOfFilesAsDirectoriesFail)
{
    char target[PMAX];
    ASSERT_EQ(open_lookup(state_.get(), AT_FDCWD, (soft_ + "/pkg").c_str(), 1, WANT_DIR, &d_, target), 1);
    EXPECT_EQ(std::string(target), tmp_ + "/cache/dirs" + fs::canonical(soft_ + "/pkg").string());
    EXPECT_TRUE(fs::is_directory(target));
    errno = 0;
    EXPECT_EQ(open_lookup(state_.get(), AT_FDCWD, (soft_ + "/pkg/sub/mod.py").c_str(), 1, WANT_DIR, &d_, target), -1);
    EXPECT_EQ(errno, ENOTDIR);
    errno = 0;
    // O_NOFOLLOW on a symlink.
    EXPECT_EQ(open_lookup(state_.get(), AT_FDCWD, (soft_ + "/pkg/sub/link.py").c_str(), 0, WANT_FILE, &d_, target),
              -1);
    EXPECT_EQ(errno, ELOOP);
    // Known, but never read: no copy, and no daemon to fetch one.
    EXPECT_EQ(open_lookup(state_.get(), AT_FDCWD, (soft_ + "/pkg/data.bin").c_str(), 1, WANT_FILE, &d_, target), 0);
}

TEST_F(InterposeServe, ReadlinkAndRealpathComeFromTheIndex)
{
    char buf[64];
    ssize_t rc = 0;
    ASSERT_EQ(serve_readlink(state_.get(), AT_FDCWD, (soft_ + "/pkg/sub/link.py").c_str(), buf, sizeof buf, &d_, &rc),
              1);
    EXPECT_EQ(std::string(buf, static_cast<std::size_t>(rc)), "mod.py");
    ASSERT_EQ(serve_readlink(state_.get(), AT_FDCWD, (soft_ + "/pkg/sub/link.py").c_str(), buf, 3, &d_, &rc), 1);
    EXPECT_EQ(rc, 3); // truncated, as readlink(2)
    errno = 0;
    ASSERT_EQ(serve_readlink(state_.get(), AT_FDCWD, (soft_ + "/pkg/sub/mod.py").c_str(), buf, sizeof buf, &d_, &rc),
              1);
    EXPECT_EQ(rc, -1);
    EXPECT_EQ(errno, EINVAL);

    char resolved[PATH_MAX];
    char* out = nullptr;
    ASSERT_EQ(serve_realpath(state_.get(), (soft_ + "/alias/sub/link.py").c_str(), resolved, &d_, &out), 1);
    EXPECT_EQ(out, resolved);
    EXPECT_EQ(std::string(resolved), soft_ + "/pkg/sub/mod.py");
}

TEST_F(InterposeServe, AccessChecksTheStagedModeBitsButNeverAnswersForWrites)
{
    int rc = -2;
    ASSERT_EQ(serve_access(state_.get(), AT_FDCWD, (soft_ + "/pkg/sub/mod.py").c_str(), R_OK, 0, &d_, &rc), 1);
    EXPECT_EQ(rc, 0);
    errno = 0;
    ASSERT_EQ(serve_access(state_.get(), AT_FDCWD, (soft_ + "/pkg/sub/mod.py").c_str(), X_OK, 0, &d_, &rc), 1);
    EXPECT_EQ(rc, -1); // written 0644 above
    EXPECT_EQ(errno, EACCES);
    EXPECT_EQ(serve_access(state_.get(), AT_FDCWD, (soft_ + "/pkg/sub/mod.py").c_str(), W_OK, 0, &d_, &rc), 0);
    ASSERT_EQ(serve_access(state_.get(), AT_FDCWD, (soft_ + "/pkg/gone").c_str(), F_OK, 0, &d_, &rc), 1);
    EXPECT_EQ(errno, ENOENT);
}

TEST_F(InterposeServe, WhatTheIndexLacksComesFromTheAnswerBoard)
{
    FetchAnswer fresh;
    fresh.facts.lstat.mode = fresh.facts.stat.mode = S_IFREG | 0644;
    fresh.facts.lstat.size = fresh.facts.stat.size = 7;
    fresh.facts.lstat.ino = fresh.facts.stat.ino = 4242;
    std::string path = soft_ + "/pkg/extra.py";
    ASSERT_TRUE(board_->publish(path, fresh));
    struct stat st {};
    int rc = -2;
    ASSERT_EQ(stat_of(path, &st, &rc), 1);
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(st.st_ino, 4242u);
    EXPECT_EQ(st.st_size, 7);
    EXPECT_TRUE(d_.fetched);
    EXPECT_EQ(counters.board_hits, 1u);
    EXPECT_EQ(counters.fetched, 0u);

    // Only metadata on the board: an open needs the copy, so the daemon is asked, and none answers.
    char target[PMAX];
    EXPECT_EQ(open_lookup(state_.get(), AT_FDCWD, path.c_str(), 1, WANT_FILE, &d_, target), 0);
    EXPECT_EQ(counters.fetch_failed, 1u);
    EXPECT_TRUE(state_->on_demand.dead);
}

TEST_F(InterposeServe, OpensTheBoardHasACopyOrSkeletonForGoThere)
{
    FetchAnswer file;
    file.facts.lstat.mode = file.facts.stat.mode = S_IFREG | 0644;
    file.facts.flags = CANOPY_STAGE_CONTENT;
    file.mirror = soft_ + "/pkg/extra.py";
    ASSERT_TRUE(board_->publish(file.mirror, file));
    std::string dir = soft_ + "/pkg/more";
    ASSERT_NO_FATAL_FAILURE(publish_directory(dir, true));

    char target[PMAX];
    ASSERT_EQ(open_lookup(state_.get(), AT_FDCWD, file.mirror.c_str(), 1, WANT_FILE, &d_, target), 1);
    EXPECT_EQ(std::string(target), tmp_ + "/cache/root" + file.mirror);
    ASSERT_EQ(open_lookup(state_.get(), AT_FDCWD, dir.c_str(), 1, WANT_DIR, &d_, target), 1);
    EXPECT_EQ(std::string(target), tmp_ + "/cache/dirs" + dir);
    EXPECT_EQ(counters.served_open, 1u);
    EXPECT_EQ(counters.served_dir, 1u);
    EXPECT_EQ(counters.board_hits, 2u);
}

TEST_F(InterposeServe, ANameItsListedDirectorysSkeletonLacksIsMissingWithoutAskingTheDaemon)
{
    // The board holds a listed directory, whose skeleton has one name.
    std::string listed = soft_ + "/pkg/more";
    ASSERT_NO_FATAL_FAILURE(publish_directory(listed, true));
    fs::create_directories(tmp_ + "/cache/dirs" + listed);
    write(tmp_ + "/cache/dirs" + listed + "/there.py", "");

    struct stat st {};
    int rc = -2;
    ASSERT_EQ(stat_of(listed + "/__init__.cpython-311-x86_64-linux-gnu.so", &st, &rc), 1);
    EXPECT_EQ(rc, -1);
    EXPECT_EQ(errno, ENOENT);
    char target[PMAX];
    errno = 0;
    EXPECT_EQ(open_lookup(state_.get(), AT_FDCWD, (listed + "/absent.py").c_str(), 1, WANT_FILE, &d_, target),
              -1);
    EXPECT_EQ(errno, ENOENT);
    EXPECT_EQ(counters.listing_misses, 2u);
    EXPECT_EQ(counters.fetch_failed, 0u);
    EXPECT_FALSE(state_->on_demand.dead);

    // A name the skeleton has: only the daemon can tell its facts (none answers here).
    EXPECT_EQ(stat_of(listed + "/there.py", &st, &rc), 0);
    EXPECT_EQ(counters.fetch_failed, 1u);
    EXPECT_EQ(counters.listing_misses, 2u);
}

TEST_F(InterposeServe, ADirectoryOnTheBoardWithoutItsListingTellsNothingAboutItsNames)
{
    std::string unlisted = soft_ + "/pkg/more";
    ASSERT_NO_FATAL_FAILURE(publish_directory(unlisted, false));
    fs::create_directories(tmp_ + "/cache/dirs" + unlisted);   // a skeleton, but the board does not say so

    struct stat st {};
    int rc = -2;
    EXPECT_EQ(stat_of(unlisted + "/absent.py", &st, &rc), 0);
    EXPECT_EQ(counters.fetch_failed, 1u);
    EXPECT_EQ(counters.listing_misses, 0u);
}

TEST_F(InterposeServe, WithoutAnIndexNothingIsServed)
{
    auto other = std::make_unique<serve_state>();
    fs::create_directories(tmp_ + "/empty");
    EXPECT_NE(serve_start(other.get(), (tmp_ + "/empty").c_str(), nullptr, nullptr), 0);
}

class InterposeRecord : public ::testing::Test {
protected:
    void SetUp() override
    {
        tmp_ = temp_.path();
        state_ = std::make_unique<record_state>();
        ASSERT_EQ(record_start(state_.get(), (tmp_ + "/record").c_str(), "/soft/:/opt/x"), 0);
    }

    std::string recorded() const
    {
        std::ifstream in(tmp_ + "/record");
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    }

    TempDir temp_{"canopy-test-record"};
    std::string tmp_;
    std::unique_ptr<record_state> state_;
};

TEST_F(InterposeRecord, LookupsUnderAPrefixBecomeEscapedLines)
{
    errno = ENOENT;
    record_lookup(state_.get(), CANOPY_STAGE_RECORD_STAT, AT_FDCWD, "/soft//pkg/./mod.py", 1);
    EXPECT_EQ(errno, ENOENT); // kept for the caller
    record_lookup(state_.get(), CANOPY_STAGE_RECORD_OPEN, AT_FDCWD, "/opt/x/tab\there\nnew\\line", 0);
    record_lookup(state_.get(), CANOPY_STAGE_RECORD_OPEN, AT_FDCWD, "/opt/xy", 0);  // shares the stem only
    record_lookup(state_.get(), CANOPY_STAGE_RECORD_OPEN, AT_FDCWD, "/usr/lib/libc.so", 0);
    EXPECT_EQ(recorded(), "S\t2\t/soft/pkg/mod.py\nO\t0\t/opt/x/tab\\there\\nnew\\\\line\n");
}

TEST_F(InterposeRecord, NothingIsRecordedWithoutAnAbsolutePrefix)
{
    auto other = std::make_unique<record_state>();
    EXPECT_NE(record_start(other.get(), (tmp_ + "/other").c_str(), "relative:"), 0);
    EXPECT_NE(record_start(other.get(), (tmp_ + "/other").c_str(), nullptr), 0);
}

} // namespace
} // namespace canopy::stage
