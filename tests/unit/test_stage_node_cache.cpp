// Unit tests for the node cache: chunked content written atomically with the original mtime, skeletons, index.
#include "stage/node_cache.hpp"
#include "temp_dir.hpp"
#include "util/private_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace canopy::stage {
namespace {

namespace fs = std::filesystem;

class StageNodeCache : public ::testing::Test {
protected:
    void SetUp() override
    {
        base_ = temp_.path();
        src_ = base_ + "/src";
        fs::create_directories(src_ + "/lib");
        write(src_ + "/lib/a.py", "print('a')\n");
        fs::create_symlink("a.py", src_ + "/lib/b.py");
        fs::create_directory(src_ + "/lib/sub");
    }

    static void write(const std::string& path, const std::string& data)
    {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
    }
    static std::string read(const std::string& path)
    {
        std::ifstream in(path, std::ios::binary);
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
    }

    TempDir temp_{"canopy-test-cache"};
    std::string base_;
    std::string src_;
};

// Issue 38: another user who saw canopy-JOB-launcher appear in /dev/shm made canopy-JOB-NODE/{root,dirs,tmp} mode
// 0777 first; the daemon used them, and he renamed his own file over a staged one. A cache is now always a dir
// this process has just made, under a name nobody could know before.
TEST_F(StageNodeCache, AUniqueCacheIsAFreshPrivateDirEachTime)
{
    auto one = NodeCache::create_unique(base_, "canopy-j42-sim0003");
    auto two = NodeCache::create_unique(base_, "canopy-j42-sim0003");
    ASSERT_TRUE(one.ok()) << one.error().message;
    ASSERT_TRUE(two.ok()) << two.error().message;
    EXPECT_NE(one->dir(), two->dir());
    for (const auto& cache : {*one, *two}) {
        EXPECT_EQ(fs::path(cache.dir()).parent_path().string(), base_);
        EXPECT_TRUE(is_private_dir_name(fs::path(cache.dir()).filename().string(), "canopy-j42-sim0003"))
            << cache.dir();
        EXPECT_EQ(fs::status(cache.dir()).permissions(), fs::perms::owner_all) << cache.dir();
        EXPECT_TRUE(fs::is_directory(cache.dir() + "/root"));
    }
}

TEST_F(StageNodeCache, ADirSomeoneElseMadeIsNeverUsed)
{
    // The old, predictable name, made first and open to all: create() refuses it and puts nothing in it.
    const std::string squatted = base_ + "/cache";
    for (const char* dir : {"", "/root", "/dirs", "/tmp"}) {
        fs::create_directory(squatted + dir);
        fs::permissions(squatted + dir, fs::perms::all);
    }
    EXPECT_FALSE(NodeCache::create(squatted).ok());
    for (const char* dir : {"/root", "/dirs", "/tmp"})
        EXPECT_TRUE(fs::is_empty(squatted + dir)) << dir;
    EXPECT_FALSE(fs::exists(squatted + "/empty"));

    // A fresh name he took between its draw and its mkdir: another name is drawn.
    std::string taken;
    auto cache = NodeCache::create_unique(base_, "canopy-j42-sim0003", [&](const std::string& path) {
        if (taken.empty() && ::mkdir(path.c_str(), 0777) == 0)
            taken = path;
    });
    ASSERT_TRUE(cache.ok()) << cache.error().message;
    ASSERT_FALSE(taken.empty());
    EXPECT_NE(cache->dir(), taken);
    EXPECT_TRUE(fs::is_empty(taken));

    // A cache that is no longer private (or no longer a directory) is not opened again.
    ASSERT_TRUE(NodeCache::open(cache->dir()).ok());
    fs::permissions(cache->dir(), fs::perms::all);
    EXPECT_FALSE(NodeCache::open(cache->dir()).ok());
    fs::create_directory_symlink(cache->dir(), base_ + "/link");
    EXPECT_FALSE(NodeCache::open(base_ + "/link").ok());
}

// With /dev/shm full, the node's index was called a "stage manifest .../index.tmp.N": it is the node cache's
// stage index, at its own path.
TEST_F(StageNodeCache, AnIndexThatCannotBeWrittenIsNamedForWhatItIs)
{
    auto index = build_index({{src_ + "/lib/a.py", true}}, BuildOptions{{src_}});
    ASSERT_TRUE(index.ok()) << index.error().message;
    auto cache = NodeCache::create(base_ + "/cache");
    ASSERT_TRUE(cache.ok());
    // Where the index is written first: a directory there makes its creation fail, as a full /dev/shm would.
    fs::create_directory(cache->index_path() + ".tmp." + std::to_string(::getpid()));
    auto installed = cache->install_index(*index);
    ASSERT_FALSE(installed.ok());
    const std::string& message = installed.error().message;
    EXPECT_NE(message.find("stage index " + cache->index_path() + ":"), std::string::npos) << message;
    EXPECT_EQ(message.find("manifest"), std::string::npos) << message;
    EXPECT_EQ(message.find(".tmp."), std::string::npos) << message;
}

TEST_F(StageNodeCache, ChunksAppearOnlyWhenCommittedWithTheOriginalMtimeAndMode)
{
    auto cache = NodeCache::create(base_ + "/cache");
    ASSERT_TRUE(cache.ok()) << cache.error().message;
    ContentFile file{"/soft/lib/libbig.so", 10, 1700000000, 123456789, 0100755};
    auto writer = cache->begin_content(file);
    ASSERT_TRUE(writer.ok());
    const std::string data = "0123456789";
    ASSERT_TRUE(writer->append({reinterpret_cast<const unsigned char*>(data.data()), 4}).ok());
    EXPECT_FALSE(fs::exists(cache->content_path(file.mirror))); // a reader never sees half a file
    ASSERT_TRUE(writer->append({reinterpret_cast<const unsigned char*>(data.data()) + 4, 6}).ok());
    ASSERT_TRUE(writer->commit().ok());

    const std::string path = base_ + "/cache/root/soft/lib/libbig.so";
    EXPECT_EQ(read(path), data);
    struct stat s {};
    ASSERT_EQ(::stat(path.c_str(), &s), 0);
    EXPECT_EQ(s.st_mtim.tv_sec, 1700000000);
    EXPECT_EQ(s.st_mtim.tv_nsec, 123456789);
    EXPECT_EQ(s.st_mode & 07777, 0555u); // no write bits in the cache
    EXPECT_TRUE(cache->has_content(file));
    EXPECT_TRUE(fs::is_empty(base_ + "/cache/tmp"));
}

TEST_F(StageNodeCache, AShortFileIsRefusedAndLeavesNothingBehind)
{
    auto cache = NodeCache::create(base_ + "/cache");
    ASSERT_TRUE(cache.ok());
    ContentFile file{"/soft/x.py", 100, 1, 0, 0100644};
    {
        auto writer = cache->begin_content(file);
        ASSERT_TRUE(writer.ok());
        const unsigned char byte = 'x';
        ASSERT_TRUE(writer->append({&byte, 1}).ok());
        auto st = writer->commit();
        ASSERT_FALSE(st.ok());
        EXPECT_NE(st.error().message.find("/soft/x.py"), std::string::npos);
    }
    {
        auto abandoned = cache->begin_content(file); // dropped without commit, as when a tree link breaks
        ASSERT_TRUE(abandoned.ok());
    }
    EXPECT_FALSE(fs::exists(cache->content_path(file.mirror)));
    EXPECT_TRUE(fs::is_empty(base_ + "/cache/tmp"));
}

TEST_F(StageNodeCache, CopiesFilesLargerThanTenMegabytes)
{
    const std::string big = src_ + "/lib/big.bin";
    {
        std::ofstream out(big, std::ios::binary);
        std::string block(1 << 20, '\0');
        for (int i = 0; i < 12; ++i) {
            block[0] = static_cast<char>(i);
            out << block;
        }
    }
    struct stat s {};
    ASSERT_EQ(::stat(big.c_str(), &s), 0);
    auto cache = NodeCache::create(base_ + "/cache");
    ASSERT_TRUE(cache.ok());
    ContentFile file{big, s.st_size, s.st_mtim.tv_sec, s.st_mtim.tv_nsec, s.st_mode};
    ASSERT_TRUE(cache->copy_content(file).ok());
    EXPECT_EQ(read(cache->content_path(big)), read(big));
    EXPECT_TRUE(cache->has_content(file));
}

TEST_F(StageNodeCache, CopiesExactlyTheSizeFoundFromAFileOrAPipeAndRefusesAShorterSource)
{
    auto cache = NodeCache::create(base_ + "/cache");
    ASSERT_TRUE(cache.ok());
    const std::string path = src_ + "/grown.txt";
    std::ofstream(path, std::ios::binary) << "0123456789";
    // The file grew after it was looked at: the copy holds the size that was found, as stat said.
    ContentFile file{"/soft/grown.txt", 6, 1, 0, 0100644};
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(cache->copy_content_from(fd, file, path).ok());
    ::close(fd);
    EXPECT_EQ(read(cache->content_path(file.mirror)), "012345");

    // A pipe cannot be sent from (sendfile says EINVAL): read instead, with the same result.
    int pipe_ends[2];
    ASSERT_EQ(::pipe(pipe_ends), 0);
    ASSERT_EQ(::write(pipe_ends[1], "abcdef", 6), 6);
    ::close(pipe_ends[1]);
    ContentFile piped{"/soft/piped.txt", 6, 1, 0, 0100644};
    ASSERT_TRUE(cache->copy_content_from(pipe_ends[0], piped, "a pipe").ok());
    ::close(pipe_ends[0]);
    EXPECT_EQ(read(cache->content_path(piped.mirror)), "abcdef");

    // It shrank: refused, nothing left behind.
    ContentFile shrunk{"/soft/shrunk.txt", 100, 1, 0, 0100644};
    fd = ::open(path.c_str(), O_RDONLY);
    auto copied = cache->copy_content_from(fd, shrunk, path);
    ::close(fd);
    ASSERT_FALSE(copied.ok());
    EXPECT_NE(copied.error().message.find("/soft/shrunk.txt"), std::string::npos) << copied.error().message;
    EXPECT_FALSE(fs::exists(cache->content_path(shrunk.mirror)));
    EXPECT_TRUE(fs::is_empty(base_ + "/cache/tmp"));
}

TEST_F(StageNodeCache, InstallWritesSkeletonsAndTheIndexThatLoadsBack)
{
    auto index = build_index({{src_ + "/lib/a.py", true}, {src_ + "/lib/b.py", true}}, BuildOptions{{src_}});
    ASSERT_TRUE(index.ok()) << index.error().message;
    auto cache = NodeCache::create(base_ + "/cache");
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE(cache->copy_all_content(*index).ok());
    ASSERT_TRUE(cache->install_index(*index).ok());

    const std::string canonical_lib = fs::canonical(src_ + "/lib").string();
    EXPECT_EQ(read(cache->content_path(canonical_lib + "/a.py")), "print('a')\n");
    EXPECT_EQ(fs::directory_iterator(base_ + "/cache/root" + canonical_lib) == fs::directory_iterator(), false);
    // The skeleton has the same names and types as the real directory, and no content.
    const std::string skel = cache->skeleton_path(canonical_lib);
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(skel + "/a.py")));
    EXPECT_EQ(fs::file_size(skel + "/a.py"), 0u);
    EXPECT_TRUE(fs::is_symlink(fs::symlink_status(skel + "/b.py")));
    EXPECT_EQ(fs::read_symlink(skel + "/b.py"), "a.py");
    EXPECT_TRUE(fs::is_directory(skel + "/sub"));

    auto loaded = Index::load(cache->index_path());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ(loaded->blob(), index->blob());

    ASSERT_TRUE(cache->remove().ok());
    EXPECT_FALSE(fs::exists(base_ + "/cache"));
}

// A first job makes a skeleton of every directory it lists (1,400 names per node for `import numpy`): its files
// are links to one empty file, a third of the cost of new files. Without that file they are files of their own.
TEST_F(StageNodeCache, SkeletonFilesAreLinksToOneEmptyFileOrFilesOfTheirOwnWithoutIt)
{
    auto cache = NodeCache::create(base_ + "/cache");
    ASSERT_TRUE(cache.ok()) << cache.error().message;
    ASSERT_TRUE(NodeCache::open(base_ + "/cache").ok());   // each reader thread opens the same cache
    ListedDirectory dir{"/soft/lib", {{"a.py", DT_REG, {}}, {"b.so", DT_REG, {}}, {"sub", DT_DIR, {}}}};
    ASSERT_TRUE(cache->make_skeleton(dir).ok());
    struct stat empty {};
    ASSERT_EQ(::stat(cache->empty_entry_path().c_str(), &empty), 0);
    EXPECT_EQ(empty.st_size, 0);
    EXPECT_EQ(empty.st_nlink, 3u);
    for (const char* name : {"a.py", "b.so"}) {
        struct stat entry {};
        ASSERT_EQ(::lstat((cache->skeleton_path("/soft/lib") + "/" + name).c_str(), &entry), 0) << name;
        EXPECT_TRUE(S_ISREG(entry.st_mode)) << name;
        EXPECT_EQ(entry.st_ino, empty.st_ino) << name;
    }
    EXPECT_TRUE(fs::is_directory(cache->skeleton_path("/soft/lib/sub")));

    ASSERT_EQ(::unlink(cache->empty_entry_path().c_str()), 0);
    ASSERT_TRUE(cache->make_skeleton(ListedDirectory{"/soft/bin", {{"tool", DT_REG, {}}}}).ok());
    struct stat own {};
    ASSERT_EQ(::lstat((cache->skeleton_path("/soft/bin") + "/tool").c_str(), &own), 0);
    EXPECT_TRUE(S_ISREG(own.st_mode));
    EXPECT_EQ(own.st_size, 0);
    EXPECT_EQ(own.st_nlink, 1u);
    ASSERT_TRUE(cache->remove().ok());
    EXPECT_FALSE(fs::exists(base_ + "/cache"));
}

// At the job's end the daemon removes its cache while answers may still be on their way down the tree: writing
// one must fail, and not bring back the cache's directories (they would be left behind in /dev/shm).
TEST_F(StageNodeCache, AnswerArrivingAfterTheCacheIsRemovedFailsAndRecreatesNothing)
{
    auto cache = NodeCache::create(base_ + "/cache");
    ASSERT_TRUE(cache.ok()) << cache.error().message;
    ContentFile file{"/soft/lib/deep/late.py", 4, 1700000000, 0, 0100644};
    auto writer = cache->begin_content(file);
    ASSERT_TRUE(writer.ok()) << writer.error().message;
    const std::string data = "late";
    ASSERT_TRUE(writer->append({reinterpret_cast<const unsigned char*>(data.data()), data.size()}).ok());
    ASSERT_TRUE(cache->remove().ok());

    auto committed = writer->commit();
    ASSERT_FALSE(committed.ok());
    EXPECT_NE(committed.error().message.find("no longer exists: the node cache was removed"), std::string::npos)
        << committed.error().message;
    EXPECT_FALSE(cache->make_skeleton(ListedDirectory{"/soft/lib", {}}).ok());
    EXPECT_FALSE(fs::exists(base_ + "/cache"));
}

TEST_F(StageNodeCache, RelativeDirectoryIsRefused)
{
    auto cache = NodeCache::create("relative/cache");
    ASSERT_FALSE(cache.ok());
    EXPECT_NE(cache.error().message.find("relative/cache"), std::string::npos);
}

// Issue 38: a 200 MB file had B written over its A while it was staged, and the ranks read 152 MB of A and 48 MB of
// B, which never existed on disk. Here a writer rewrites the source for as long as the copy runs: the copy must never
// be installed, and the error names the file.
TEST_F(StageNodeCache, ASourceWrittenToWhileItIsCopiedIsNeverInstalled)
{
    auto cache = NodeCache::create(base_ + "/cache");
    ASSERT_TRUE(cache.ok()) << cache.error().message;
    const std::string source = src_ + "/rewritten.bin";
    write(source, std::string(128 << 20, 'A'));   // copying it takes many ticks of the kernel's file clock
    int fd = ::open(source.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    struct stat info {};
    ASSERT_EQ(::fstat(fd, &info), 0);
    std::atomic<bool> copying{true};
    std::thread writer([&] {
        while (copying)
            (void)!::pwrite(fd, "B", 1, 64 << 20);
    });
    ContentFile file{"/soft/rewritten.bin", info.st_size, info.st_mtim.tv_sec, info.st_mtim.tv_nsec, 0100644};
    Status copied = cache->copy_content_from(fd, file, source);
    copying = false;
    writer.join();
    ::close(fd);
    ASSERT_FALSE(copied.ok());
    EXPECT_NE(copied.error().message.find(source + " changed while it was being staged"), std::string::npos)
        << copied.error().message;
    EXPECT_FALSE(fs::exists(cache->content_path(file.mirror)));
    EXPECT_FALSE(cache->has_content(file));
}

} // namespace
} // namespace canopy::stage
