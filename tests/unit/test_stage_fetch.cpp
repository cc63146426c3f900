// Unit tests for on-demand staging: the fetch cache (merging, caching, inferred misses, chunked content), the
// root's filesystem reader, the stage-fetch messages, and a root fetch tree answering through its reader threads.
#include "stage/fetch_cache.hpp"
#include "stage_tree/fetch_tree.hpp"

#include "stage_fetch_helpers.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "wire/messages.hpp"

namespace canopy::stage {
namespace {

namespace fs = std::filesystem;

using namespace testing;

class StageFetch : public FetchCacheTest {
protected:
    void SetUp() override
    {
        FetchCacheTest::SetUp();
        src_ = base_ + "/src";
        fs::create_directories(src_ + "/pkg/sub");
        write(src_ + "/pkg/mod.py", "VALUE = 1\n");
        fs::create_symlink("mod.py", src_ + "/pkg/alias.py");
    }

    std::string src_;
};

TEST_F(StageFetch, IdenticalRequestsInFlightGoUpOnceAndEveryWaiterIsAnswered)
{
    int answered = 0;
    auto done = [&](const Status& status, const FetchAnswer& a) {
        EXPECT_TRUE(status.ok());
        EXPECT_EQ(a.facts.stat.size, 3);
        ++answered;
    };
    for (int i = 0; i < 5; ++i)
        fetch_->fetch(FetchKind::content, "/soft/pkg/a.py", done);
    fetch_->fetch(FetchKind::metadata, "/soft/pkg/a.py", done);   // a content request serves metadata too
    ASSERT_EQ(sent_.size(), 1u);
    EXPECT_EQ(sent_[0].kind, FetchKind::content);
    EXPECT_EQ(answered, 0);

    ASSERT_TRUE(fetch_->answer(sent_[0].id, regular_file("/soft/pkg/a.py", 3), true));
    EXPECT_EQ(answered, 0);   // not before the content is in the cache
    const unsigned char bytes[] = {'a', 'b', 'c'};
    ASSERT_TRUE(fetch_->content(sent_[0].id, std::span<const unsigned char>(bytes, 2), false));
    ASSERT_TRUE(fetch_->content(sent_[0].id, std::span<const unsigned char>(bytes + 2, 1), true));
    EXPECT_EQ(answered, 6);
    EXPECT_EQ(read(fetch_->cache().content_path("/soft/pkg/a.py")), "abc");
    struct stat s {};
    ASSERT_EQ(::stat(fetch_->cache().content_path("/soft/pkg/a.py").c_str(), &s), 0);
    EXPECT_EQ(s.st_mtim.tv_sec, 1700000000);

    fetch_->fetch(FetchKind::content, "/soft/pkg/a.py", done);   // now from the cache
    EXPECT_EQ(sent_.size(), 1u);
    EXPECT_EQ(answered, 7);
    EXPECT_EQ(fetch_->counters().sent_up, 1u);
    EXPECT_EQ(fetch_->counters().merged, 5u);
    EXPECT_EQ(fetch_->counters().from_cache, 1u);
    EXPECT_EQ(fetch_->in_flight(), 0u);
}

TEST_F(StageFetch, AMetadataAnswerDoesNotServeAnOpenOfTheFile)
{
    fetch_->fetch(FetchKind::metadata, "/soft/x.py", [](const Status&, const FetchAnswer&) {});
    auto meta = regular_file("/soft/x.py", 1);
    meta.facts.flags &= ~CANOPY_STAGE_CONTENT;
    meta.mirror.clear();
    ASSERT_TRUE(fetch_->answer(sent_.at(0).id, meta, false));
    fetch_->fetch(FetchKind::metadata, "/soft/x.py", [](const Status&, const FetchAnswer&) {});
    EXPECT_EQ(sent_.size(), 1u);
    fetch_->fetch(FetchKind::content, "/soft/x.py", [](const Status&, const FetchAnswer&) {});
    ASSERT_EQ(sent_.size(), 2u);
    EXPECT_EQ(sent_[1].kind, FetchKind::content);
}

TEST_F(StageFetch, ANameMissingFromAListedDirectoryIsEnoentWithoutAsking)
{
    fetch_->fetch(FetchKind::content, "/soft/pkg", [](const Status&, const FetchAnswer&) {});
    FetchAnswer dir;
    dir.facts.lstat.mode = dir.facts.stat.mode = S_IFDIR | 0755;
    dir.mirror = "/real/pkg";
    dir.facts.flags |= CANOPY_STAGE_LISTED;
    dir.listing = {{"a.py", DT_REG, {}}, {"link", DT_LNK, "a.py"}, {"sub", DT_DIR, {}}};
    ASSERT_TRUE(fetch_->answer(sent_.at(0).id, dir, false));
    EXPECT_TRUE(fs::is_directory(fetch_->cache().skeleton_path("/real/pkg") + "/sub"));
    EXPECT_TRUE(fs::is_symlink(fetch_->cache().skeleton_path("/real/pkg") + "/link"));

    int missing = 0;
    fetch_->fetch(FetchKind::metadata, "/soft/pkg/b.cpython-311.so", [&](const Status& status, const FetchAnswer& a) {
        EXPECT_TRUE(status.ok());
        EXPECT_EQ(a.facts.lstat_errno, ENOENT);
        EXPECT_EQ(a.facts.stat_errno, ENOENT);
        ++missing;
    });
    EXPECT_EQ(missing, 1);
    EXPECT_EQ(sent_.size(), 1u);
    EXPECT_EQ(fetch_->counters().inferred_missing, 1u);
    fetch_->fetch(FetchKind::metadata, "/soft/pkg/a.py", [](const Status&, const FetchAnswer&) {});
    fetch_->fetch(FetchKind::metadata, "/soft/pkg/sub/..", [](const Status&, const FetchAnswer&) {});
    EXPECT_EQ(sent_.size(), 3u);   // listed names, and ".." (which a symlink could redirect), still go up
}

TEST_F(StageFetch, BelowAMissingDirectoryOrAFileALookupFailsWithoutAsking)
{
    fetch_->fetch(FetchKind::metadata, "/soft/gone", [](const Status&, const FetchAnswer&) {});
    FetchAnswer gone;
    gone.facts.lstat_errno = gone.facts.stat_errno = ENOENT;
    ASSERT_TRUE(fetch_->answer(sent_.at(0).id, gone, false));
    fetch_->fetch(FetchKind::metadata, "/soft/f.py", [](const Status&, const FetchAnswer&) {});
    auto file = regular_file("/soft/f.py", 1);
    file.facts.flags &= ~CANOPY_STAGE_CONTENT;
    ASSERT_TRUE(fetch_->answer(sent_.at(1).id, file, false));

    std::vector<int> errors;
    auto record = [&](const Status& status, const FetchAnswer& a) {
        EXPECT_TRUE(status.ok());
        errors.push_back(a.facts.stat_errno);
    };
    fetch_->fetch(FetchKind::content, "/soft/gone/glibc-hwcaps/x86-64-v3/libx.so", record);
    fetch_->fetch(FetchKind::metadata, "/soft/f.py/__init__.py", record);
    EXPECT_EQ(errors, (std::vector<int>{ENOENT, ENOTDIR}));
    EXPECT_EQ(sent_.size(), 2u);
    fetch_->fetch(FetchKind::metadata, "/soft/gone/../f.py", record);   // ".." is the root's to resolve
    EXPECT_EQ(sent_.size(), 3u);
}

TEST_F(StageFetch, AFailureAnswersEveryWaiterAndIsNotCached)
{
    int failed = 0;
    auto done = [&](const Status& status, const FetchAnswer&) { failed += status.ok() ? 0 : 1; };
    fetch_->fetch(FetchKind::content, "/soft/a", done);
    fetch_->fetch(FetchKind::content, "/soft/a", done);
    fetch_->fetch(FetchKind::metadata, "/soft/b", done);
    fetch_->fail_all("lost the parent");
    EXPECT_EQ(failed, 3);
    EXPECT_EQ(fetch_->in_flight(), 0u);
    fetch_->fetch(FetchKind::content, "/soft/a", done);
    EXPECT_EQ(sent_.size(), 3u);
}

TEST_F(StageFetch, AnAnswerThatWouldWriteOutsideTheCacheIsRefused)
{
    bool ok = true;
    fetch_->fetch(FetchKind::content, "/soft/evil",
                  [&](const Status& status, const FetchAnswer&) { ok = status.ok(); });
    auto a = regular_file("/soft/../../etc/x", 1);
    EXPECT_FALSE(fetch_->answer(sent_.at(0).id, a, true));
    EXPECT_FALSE(ok);
    EXPECT_FALSE(fetch_->answer(999, a, true));   // nobody waits for it: an error, not a crash
    EXPECT_FALSE(fetch_->content(999, {}, true));
}

TEST_F(StageFetch, ContentOfTheWrongSizeFailsAndLeavesNoCopy)
{
    bool ok = true;
    fetch_->fetch(FetchKind::content, "/soft/f", [&](const Status& status, const FetchAnswer&) { ok = status.ok(); });
    ASSERT_TRUE(fetch_->answer(sent_.at(0).id, regular_file("/soft/f", 10), true));
    const unsigned char bytes[] = {'x'};
    EXPECT_FALSE(fetch_->content(sent_[0].id, bytes, true));
    EXPECT_FALSE(ok);
    EXPECT_FALSE(fs::exists(fetch_->cache().content_path("/soft/f")));
}

TEST_F(StageFetch, ReadLocalAnswersAsTheFilesystemDoes)
{
    auto cache = NodeCache::create(base_ + "/root-cache");
    ASSERT_TRUE(cache);
    auto file = read_local(FetchKind::content, src_ + "/pkg/alias.py", *cache);
    ASSERT_TRUE(file) << file.error().message;
    EXPECT_TRUE(S_ISLNK(file->facts.lstat.mode));
    EXPECT_EQ(file->link, "mod.py");
    EXPECT_TRUE(S_ISREG(file->facts.stat.mode));
    EXPECT_EQ(file->mirror, fs::canonical(src_ + "/pkg/mod.py").string());
    EXPECT_TRUE(file->content());
    EXPECT_EQ(read(cache->content_path(file->mirror)), "VALUE = 1\n");

    auto missing = read_local(FetchKind::metadata, src_ + "/pkg/nope.py", *cache);
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->facts.lstat_errno, ENOENT);
    auto through_file = read_local(FetchKind::metadata, src_ + "/pkg/mod.py/x", *cache);
    ASSERT_TRUE(through_file);
    EXPECT_EQ(through_file->facts.lstat_errno, ENOTDIR);

    DirectoryHandles handles;
    auto by_handle = read_local(FetchKind::content, src_ + "/pkg/alias.py", *cache, &handles);
    ASSERT_TRUE(by_handle);
    EXPECT_EQ(by_handle->link, "mod.py");
    EXPECT_EQ(by_handle->mirror, file->mirror);
    auto missing_dir = read_local(FetchKind::metadata, src_ + "/nope/x", *cache, &handles);
    ASSERT_TRUE(missing_dir);
    EXPECT_EQ(missing_dir->facts.lstat_errno, ENOENT);
    auto not_dir = read_local(FetchKind::metadata, src_ + "/pkg/mod.py/x", *cache, &handles);
    ASSERT_TRUE(not_dir);
    EXPECT_EQ(not_dir->facts.lstat_errno, ENOTDIR);

    auto dir = read_local(FetchKind::content, src_ + "/pkg/sub/..", *cache);
    ASSERT_TRUE(dir);
    ASSERT_TRUE(dir->listed());
    std::vector<std::string> names;
    for (const auto& n : dir->listing)
        names.push_back(n.name);
    EXPECT_EQ(names, (std::vector<std::string>{"alias.py", "mod.py", "sub"}));
    EXPECT_EQ(dir->listing[0].type, DT_LNK);
    EXPECT_EQ(dir->listing[0].link_target, "mod.py");
}

TEST(StageFetchMessages, RoundTripAndRefuseDamage)
{
    wire::StageFetchReply reply;
    reply.id = 7;
    reply.has_answer = true;
    reply.facts.stat.size = 1 << 20;
    reply.facts.stat.mtime_nsec = 123;
    reply.facts.stat.mode = S_IFDIR | 0755;
    reply.mirror = "/a/b";
    reply.facts.flags |= CANOPY_STAGE_LISTED;
    reply.listing = {{"x", DT_LNK, "y"}};
    const std::vector<std::uint8_t> content{1, 2, 3};
    reply.chunk = content;
    reply.last = false;
    auto frame = wire::to_frame(reply);
    std::span<const std::uint8_t> bytes(frame);
    wire::FrameDecoder decoder(64u << 20);
    decoder.feed(bytes);
    auto decoded_frame = decoder.next();
    ASSERT_TRUE(decoded_frame && *decoded_frame);
    auto decoded = wire::decode_frame<wire::StageFetchReply>(**decoded_frame);
    ASSERT_TRUE(decoded) << decoded.error().message;
    EXPECT_EQ(decoded->facts.stat.size, 1 << 20);
    EXPECT_EQ(decoded->facts.stat.mtime_nsec, 123);
    EXPECT_EQ(decoded->listing.at(0).link_target, "y");
    EXPECT_EQ(std::vector<std::uint8_t>(decoded->chunk.begin(), decoded->chunk.end()), content);
    EXPECT_FALSE(decoded->last);

    auto cut = **decoded_frame;
    cut.payload.resize(cut.payload.size() / 2);
    EXPECT_FALSE(wire::decode_frame<wire::StageFetchReply>(cut));
    wire::Frame bad_kind{static_cast<std::uint8_t>(wire::MessageType::stage_fetch), {}};
    wire::Writer w;
    w.varint(1);
    w.u8(9);
    w.string("/x");
    bad_kind.payload = w.data();
    EXPECT_FALSE(wire::decode_frame<wire::StageFetch>(bad_kind));
}

TEST_F(StageFetch, TheRootReadsEachPathOnceForManyWaiters)
{
    boost::asio::io_context io;
    ProcessReaper reaper(io);
    ChildSet no_children(io, reaper, auth::generate_key(), {});
    auto cache = NodeCache::create(base_ + "/launcher-cache");
    ASSERT_TRUE(cache) << cache.error().message;
    auto tree = StageFetchTree::for_root(io, cache->dir(), no_children, {}, 2);
    ASSERT_TRUE(tree) << tree.error().message;
    int answered = 0;
    std::string mirror;
    for (int i = 0; i < 4; ++i)
        (*tree)->fetch(FetchKind::content, src_ + "/pkg/mod.py", [&](const Status& status, const FetchAnswer& a) {
            EXPECT_TRUE(status.ok());
            mirror = a.mirror;
            ++answered;
        });
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (answered < 4 && std::chrono::steady_clock::now() < deadline) {
        io.run_for(std::chrono::milliseconds(10));
        io.restart();
    }
    EXPECT_EQ(answered, 4);
    EXPECT_EQ((*tree)->counters().sent_up, 1u);
    EXPECT_EQ(read(base_ + "/launcher-cache/root" + mirror), "VALUE = 1\n");
}

} // namespace
} // namespace canopy::stage
