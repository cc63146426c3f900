// Unit tests for the stage index: building from looked-up paths, the blob and its C lookups, validate, refresh.
#include "stage/index.hpp"

#include "stage/directory_handles.hpp"
#include "temp_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

namespace canopy::stage {
namespace {

namespace fs = std::filesystem;

class StageIndex : public ::testing::Test {
protected:
    void SetUp() override
    {
        root_ = temp_.path();
        fs::create_directories(root_ + "/pkg/sub");
        write(root_ + "/pkg/__init__.py", "import sub\n");
        write(root_ + "/pkg/sub/mod.py", "VALUE = 1\n");
        write(root_ + "/pkg/data.bin", std::string(1000, 'x'));
        fs::create_directory_symlink("pkg", root_ + "/alias");
        fs::create_symlink("mod.py", root_ + "/pkg/sub/link.py");
    }

    static void write(const std::string& path, const std::string& data)
    {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
    }

    Index build(std::vector<PathRequest> requests)
    {
        auto index = build_index(requests, BuildOptions{{root_}});
        EXPECT_TRUE(index.ok()) << (index.ok() ? "" : index.error().message);
        return std::move(index).value();
    }

    // What the interposer answers for a path: outcome, errno, and the stat view it would report.
    canopy_stage_answer ask(const Index& index, const std::string& path, bool follow = true)
    {
        char norm[CANOPY_STAGE_PATH_MAX];
        int trailing = 0;
        long n = canopy_stage_normalize(path.c_str(), norm, &trailing);
        canopy_stage_answer answer{};
        canopy_stage_lookup(&index.view(), norm, static_cast<size_t>(n), follow, trailing, &answer);
        return answer;
    }

    TempDir temp_{"canopy-test-stage"};
    std::string root_;
};

TEST_F(StageIndex, HitsCarryTheRealStatData)
{
    auto index = build({{root_ + "/pkg/sub/mod.py", true}});
    struct stat real {};
    ASSERT_EQ(::stat((root_ + "/pkg/sub/mod.py").c_str(), &real), 0);
    auto answer = ask(index, root_ + "/pkg/sub/mod.py");
    ASSERT_EQ(answer.outcome, CANOPY_STAGE_FOUND);
    const auto* s = canopy_stage_answer_stat(&index.view(), &answer);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->ino, real.st_ino);
    EXPECT_EQ(s->dev, real.st_dev);
    EXPECT_EQ(s->size, real.st_size);
    EXPECT_EQ(s->mode, real.st_mode);
    EXPECT_EQ(s->mtime_sec, real.st_mtim.tv_sec);
    EXPECT_EQ(s->mtime_nsec, real.st_mtim.tv_nsec);
    EXPECT_EQ(s->nlink, real.st_nlink);
    EXPECT_EQ(s->uid, real.st_uid);
}

TEST_F(StageIndex, MissesAreAnsweredWithTheirErrno)
{
    auto index = build({{root_ + "/pkg/nothere.py", false}, {root_ + "/pkg/__init__.py/x", false}});
    auto miss = ask(index, root_ + "/pkg/nothere.py");
    EXPECT_EQ(miss.outcome, CANOPY_STAGE_ERROR);
    EXPECT_EQ(miss.errno_value, ENOENT);
    auto notdir = ask(index, root_ + "/pkg/__init__.py/x");
    EXPECT_EQ(notdir.outcome, CANOPY_STAGE_ERROR);
    EXPECT_EQ(notdir.errno_value, ENOTDIR);
}

TEST_F(StageIndex, ANameAbsentFromACompleteListingIsAMissWithoutARecording)
{
    auto index = build({{root_ + "/pkg/__init__.py", false}});
    // Never looked up, but pkg/ is listed and has no such name.
    auto answer = ask(index, root_ + "/pkg/other.cpython-311-x86_64-linux-gnu.so");
    EXPECT_EQ(answer.outcome, CANOPY_STAGE_ERROR);
    EXPECT_EQ(answer.errno_value, ENOENT);
    // Present in the listing but never looked up: the index cannot answer, the real filesystem must.
    EXPECT_EQ(ask(index, root_ + "/pkg/data.bin").outcome, CANOPY_STAGE_UNKNOWN);
}

TEST_F(StageIndex, SymlinksHaveBothViewsAndOtherSpellingsResolve)
{
    auto index = build({{root_ + "/alias/sub/link.py", true}});
    auto lview = ask(index, root_ + "/pkg/sub/link.py", false);
    ASSERT_EQ(lview.outcome, CANOPY_STAGE_FOUND);
    EXPECT_TRUE(S_ISLNK(canopy_stage_answer_stat(&index.view(), &lview)->mode));
    auto info = index.find(root_ + "/pkg/sub/link.py");
    ASSERT_TRUE(info);
    EXPECT_EQ(info->link_target, "mod.py");

    // Followed, through the directory symlink, a "..", and the file symlink: the target's data.
    struct stat real {};
    ASSERT_EQ(::stat((root_ + "/pkg/sub/mod.py").c_str(), &real), 0);
    for (const std::string spelling : {"/alias/sub/link.py", "/alias/sub/../sub/link.py", "/pkg//sub/./mod.py"}) {
        auto answer = ask(index, root_ + spelling);
        ASSERT_EQ(answer.outcome, CANOPY_STAGE_FOUND) << spelling;
        EXPECT_EQ(canopy_stage_answer_stat(&index.view(), &answer)->ino, real.st_ino) << spelling;
    }
    // A trailing slash on a file is ENOTDIR, as the kernel says.
    EXPECT_EQ(ask(index, root_ + "/pkg/sub/mod.py/").errno_value, ENOTDIR);
}

TEST_F(StageIndex, ContentIsStagedOnceUnderItsCanonicalPath)
{
    auto index = build({{root_ + "/alias/sub/link.py", true}, {root_ + "/pkg/sub/mod.py", true},
                        {root_ + "/pkg/data.bin", false}});
    auto files = index.content_files();
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(files[0].mirror, fs::canonical(root_ + "/pkg/sub/mod.py").string());
    EXPECT_EQ(files[0].size, 10);
    auto data = index.find(root_ + "/pkg/data.bin");
    ASSERT_TRUE(data);
    EXPECT_FALSE(data->facts.flags & CANOPY_STAGE_CONTENT); // looked up, never read
}

TEST_F(StageIndex, ListingsAreSortedAndComplete)
{
    auto index = build({{root_ + "/pkg", false}});
    auto info = index.find(root_ + "/pkg");
    ASSERT_TRUE(info);
    EXPECT_TRUE(info->facts.flags & CANOPY_STAGE_LISTED);
    EXPECT_EQ(info->listing, (std::vector<std::string>{"__init__.py", "data.bin", "sub"}));
}

TEST_F(StageIndex, PathsOutsideThePrefixesAreLeftOut)
{
    auto index = build({{"/etc/hostname", true}});
    EXPECT_FALSE(index.find("/etc/hostname"));
    EXPECT_EQ(ask(index, "/etc/hostname").outcome, CANOPY_STAGE_UNKNOWN);
}

TEST_F(StageIndex, SavedBlobLoadsBackAndCorruptionIsRefused)
{
    auto index = build({{root_ + "/pkg/sub/mod.py", true}});
    const std::string file = root_ + "/manifest";
    ASSERT_TRUE(index.save(file).ok());
    auto loaded = Index::load(file);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ(loaded->blob(), index.blob());
    EXPECT_EQ(loaded->prefixes(), index.prefixes());

    auto blob = index.blob();
    blob[blob.size() - 3] ^= 0x5a;
    auto corrupt = Index::from_blob(blob, "manifest");
    ASSERT_FALSE(corrupt.ok());
    EXPECT_NE(corrupt.error().message.find("checksum"), std::string::npos);
    blob.resize(blob.size() / 2);
    EXPECT_FALSE(Index::from_blob(blob, "manifest").ok());
}

// Recomputes the blob's checksum over what follows the header, so a test can forge a manifest that passes it.
void reseal(std::vector<unsigned char>& blob)
{
    canopy_stage_header header;
    std::memcpy(&header, blob.data(), sizeof header);
    header.checksum = canopy_stage_hash(reinterpret_cast<const char*>(blob.data()) + header.header_size,
                                        blob.size() - header.header_size);
    std::memcpy(blob.data(), &header, sizeof header);
}

// Issue 15, item 4: such a manifest sent the launcher into endless recursion in DirectoryHandles::open.
TEST_F(StageIndex, AManifestWithARelativePathIsRefusedNamingTheFileAndTheEntry)
{
    auto blob = build({{root_ + "/pkg/sub/mod.py", true}}).blob();
    auto path = std::search(blob.begin(), blob.end(), root_.begin(), root_.end());
    ASSERT_NE(path, blob.end());
    for (; path != blob.end(); path = std::search(path + 1, blob.end(), root_.begin(), root_.end()))
        *path = 'x';   // every copy: prefix, paths and mirrors all lose their leading '/'
    reseal(blob);
    auto index = Index::from_blob(blob, "stage manifest bad.manifest");
    ASSERT_FALSE(index.ok());
    EXPECT_NE(index.error().message.find("bad.manifest"), std::string::npos) << index.error().message;
    EXPECT_NE(index.error().message.find("not an absolute path"), std::string::npos) << index.error().message;
}

TEST_F(StageIndex, AnEntryWithARelativePathIsRefusedNamingIt)
{
    auto blob = build({{root_ + "/pkg/sub/mod.py", true}}).blob();
    const std::string entry = root_ + "/pkg/sub/mod.py";
    auto at = std::search(blob.begin(), blob.end(), entry.begin(), entry.end());
    ASSERT_NE(at, blob.end());
    *at = 'x';
    reseal(blob);
    auto index = Index::from_blob(blob, "stage manifest bad.manifest");
    ASSERT_FALSE(index.ok());
    EXPECT_NE(index.error().message.find("x" + entry.substr(1)), std::string::npos) << index.error().message;
}

TEST_F(StageIndex, DirectoryHandlesRefuseARelativeOrEmptyName)
{
    DirectoryHandles handles;
    EXPECT_EQ(handles.open("a/b"), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(handles.open(""), -1);
    EXPECT_EQ(handles.open_file("a/b/c", O_RDONLY), -1);
    int fd = handles.open(root_ + "/pkg");
    EXPECT_GE(fd, 0);
}

TEST_F(StageIndex, ValidateIsQuietWhenNothingChanged)
{
    auto index = build({{root_ + "/pkg/sub/mod.py", true}, {root_ + "/pkg/gone.py", false}});
    EXPECT_TRUE(validate(index).empty());
}

TEST_F(StageIndex, ValidateReportsSizeMtimeInodeAppearedAndVanished)
{
    auto index = build({{root_ + "/pkg/sub/mod.py", true},
                        {root_ + "/pkg/__init__.py", true},
                        {root_ + "/pkg/data.bin", false},
                        {root_ + "/pkg/new.py", false}});
    write(root_ + "/pkg/sub/mod.py", "VALUE = 22\n");                  // size (and mtime)
    struct timespec times[2] = {{1000, 5}, {1000, 5}};
    ASSERT_EQ(::utimensat(AT_FDCWD, (root_ + "/pkg/__init__.py").c_str(), times, 0), 0); // mtime only
    fs::remove(root_ + "/pkg/data.bin");                                // vanished
    write(root_ + "/pkg/new.py", "");                                   // appeared

    std::map<std::string, Change> by_path;
    for (auto& c : validate(index))
        by_path.emplace(c.path, c);
    ASSERT_TRUE(by_path.count(root_ + "/pkg/sub/mod.py"));
    EXPECT_EQ(by_path.at(root_ + "/pkg/sub/mod.py").kind, ChangeKind::changed);
    EXPECT_NE(by_path.at(root_ + "/pkg/sub/mod.py").detail.find("size 10 -> 11"), std::string::npos);
    ASSERT_TRUE(by_path.count(root_ + "/pkg/__init__.py"));
    EXPECT_EQ(by_path.at(root_ + "/pkg/__init__.py").detail, "mtime");
    ASSERT_TRUE(by_path.count(root_ + "/pkg/data.bin"));
    EXPECT_EQ(by_path.at(root_ + "/pkg/data.bin").kind, ChangeKind::vanished);
    ASSERT_TRUE(by_path.count(root_ + "/pkg/new.py"));
    EXPECT_EQ(by_path.at(root_ + "/pkg/new.py").kind, ChangeKind::appeared);
    EXPECT_TRUE(by_path.count(root_ + "/pkg")); // its listing changed
}

TEST_F(StageIndex, ValidateSeesAFileReplacedBySameSizeAndTime)
{
    auto index = build({{root_ + "/pkg/sub/mod.py", true}});
    struct stat old {};
    ASSERT_EQ(::stat((root_ + "/pkg/sub/mod.py").c_str(), &old), 0);
    write(root_ + "/pkg/sub/mod.tmp", "VALUE = 2\n");
    struct timespec times[2] = {old.st_mtim, old.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, (root_ + "/pkg/sub/mod.tmp").c_str(), times, 0), 0);
    fs::rename(root_ + "/pkg/sub/mod.tmp", root_ + "/pkg/sub/mod.py");
    std::string detail = "(not reported)";
    for (const auto& c : validate(index))
        if (c.path == root_ + "/pkg/sub/mod.py")
            detail = c.detail;
    EXPECT_EQ(detail, "inode");
}

TEST_F(StageIndex, RefreshRebuildsWhatChanged)
{
    auto index = build({{root_ + "/pkg/sub/mod.py", true}, {root_ + "/pkg/new.py", false}});
    write(root_ + "/pkg/sub/mod.py", "VALUE = 333\n");
    write(root_ + "/pkg/new.py", "");
    ASSERT_FALSE(validate(index).empty());
    auto fresh = refresh(index);
    ASSERT_TRUE(fresh.ok()) << fresh.error().message;
    EXPECT_TRUE(validate(*fresh).empty());
    EXPECT_EQ(ask(*fresh, root_ + "/pkg/new.py").outcome, CANOPY_STAGE_FOUND);
    EXPECT_EQ(fresh->content_files().at(0).size, 12);
}

TEST_F(StageIndex, RecordFilesBecomeRequests)
{
    const std::string a = root_ + "/rec.a", b = root_ + "/rec.b";
    write(a, "S\t0\t" + root_ + "/pkg/sub/mod.py\nO\t0\t" + root_ + "/pkg/sub/mod.py\nS\t2\t" + root_ +
                 "/pkg/odd\\nname\ntruncated li");
    write(b, "O\t2\t" + root_ + "/pkg/missing.py\nX\t0\t" + root_ + "/pkg/data.bin\nW\t0\t" + root_ + "/pkg/out\n");
    auto requests = read_records({a, b});
    ASSERT_TRUE(requests.ok()) << requests.error().message;
    std::map<std::string, bool> got;
    for (auto& r : *requests)
        got[r.path] = r.read_content;
    EXPECT_EQ(got.size(), 4u);
    EXPECT_TRUE(got.at(root_ + "/pkg/sub/mod.py"));
    EXPECT_FALSE(got.at(root_ + "/pkg/odd\nname"));
    EXPECT_TRUE(got.at(root_ + "/pkg/missing.py"));  // wanted; staged if it exists when the index is built
    EXPECT_TRUE(got.at(root_ + "/pkg/data.bin"));    // the loader maps what it finds
    EXPECT_FALSE(got.count(root_ + "/pkg/out"));     // written, not staged

    auto index = index_from_records({a, b}, BuildOptions{{root_}});
    ASSERT_TRUE(index.ok());
    EXPECT_EQ(index->content_files().size(), 2u);
    EXPECT_FALSE(read_records({root_ + "/nope"}).ok());
}

TEST_F(StageIndex, WalkStagesEverythingUnderThePrefix)
{
    auto requests = walk_prefixes({root_});
    ASSERT_TRUE(requests.ok());
    auto index = build(*requests);
    EXPECT_EQ(index.content_files().size(), 3u); // __init__.py, data.bin, mod.py (link.py is mod.py)
    EXPECT_EQ(ask(index, root_ + "/alias/sub/link.py").outcome, CANOPY_STAGE_FOUND);
}

TEST_F(StageIndex, KnownAnswersAreUsedAsGivenAndOnlyTheirListingsAreStored)
{
    // What the root fetched on demand: mod.py with its copy, and pkg's listing. The stat data differs from the
    // disk on purpose, to show the builder took the answers rather than looking the paths up again.
    std::map<std::string, KnownPath> known;
    KnownPath& mod = known[root_ + "/pkg/sub/mod.py"];
    mod.facts.lstat.mode = mod.facts.stat.mode = S_IFREG | 0644;
    mod.facts.lstat.size = mod.facts.stat.size = 4242;
    mod.mirror = root_ + "/pkg/sub/mod.py";
    KnownPath& pkg = known[root_ + "/pkg"];
    pkg.facts.lstat.mode = pkg.facts.stat.mode = S_IFDIR | 0755;
    pkg.mirror = root_ + "/pkg";
    pkg.facts.flags |= CANOPY_STAGE_LISTED;
    pkg.listing = {{"__init__.py", DT_REG, {}}, {"sub", DT_DIR, {}}};   // data.bin left out, as if it appeared later
    BuildOptions options{{root_}, true, [&](const std::string& path) -> const KnownPath* {
                             auto it = known.find(path);
                             return it == known.end() ? nullptr : &it->second;
                         }};
    auto index = build_index({{root_ + "/pkg/sub/mod.py", true}, {root_ + "/pkg", false}}, options);
    ASSERT_TRUE(index) << index.error().message;

    auto entry = index->find(root_ + "/pkg/sub/mod.py");
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->facts.stat.size, 4242);
    EXPECT_EQ(index->content_files().size(), 1u);
    EXPECT_EQ(ask(*index, root_ + "/pkg/data.bin").errno_value, ENOENT);   // from the known listing
    // sub was walked through but never listed: a name in it is not answered from the index.
    auto sub = index->find(root_ + "/pkg/sub");
    ASSERT_TRUE(sub);
    EXPECT_TRUE(S_ISDIR(sub->facts.stat.mode));
    EXPECT_NE(ask(*index, root_ + "/pkg/sub/other.py").outcome, CANOPY_STAGE_ERROR);
}

TEST_F(StageIndex, RelativeOrEmptyPrefixesAreRejected)
{
    auto index = build_index({}, BuildOptions{{"relative/dir"}});
    ASSERT_FALSE(index.ok());
    EXPECT_NE(index.error().message.find("relative/dir"), std::string::npos);
    EXPECT_FALSE(build_index({}, BuildOptions{}).ok());
}

} // namespace
} // namespace canopy::stage
