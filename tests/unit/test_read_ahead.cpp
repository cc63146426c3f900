// Unit tests for the root's read-ahead: which paths the policy reads ahead, how a position learns a pushed answer
// (and drops the reply it no longer needs), symlinks followed through directory handles, and a root fetch tree
// reading a directory's entries ahead on its reader threads, the libraries a library needs and the modules a module
// imports.
#include "stage/fetch_cache.hpp"
#include "stage_tree/elf_needs.hpp"
#include "stage_tree/fetch_tree.hpp"
#include "stage_tree/import_follower.hpp"
#include "stage_tree/read_ahead.hpp"

#include "child_link.hpp"
#include "stage_fetch_helpers.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

namespace canopy::stage {
namespace {

namespace fs = std::filesystem;

using namespace testing;

// Runs `io` until `done()` holds, for at most 10 s; returns `done()`.
template <typename Done>
bool run_io_until(boost::asio::io_context& io, Done done)
{
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
        io.run_for(std::chrono::milliseconds(5));
        io.restart();
    }
    return done();
}

class ReadAhead : public FetchCacheTest {
protected:
    // Runs the policy on one read and returns what it asked to read ahead, in order.
    std::vector<Sent> after(ReadAheadPolicy& policy, FetchKind kind, const std::string& path,
                            const FetchAnswer& answer, bool asked)
    {
        std::vector<Sent> reads;
        policy.after_read(kind, path, answer, asked, *fetch_,
                          [&](FetchKind k, const std::string& p, Ahead) { reads.push_back({0, k, p}); });
        return reads;
    }

    // Puts `answer` for `path` into the cache as a parent's reply would.
    void known(FetchKind kind, const std::string& path, const FetchAnswer& answer)
    {
        fetch_->fetch(kind, path, [](const Status&, const FetchAnswer&) {});
        ASSERT_TRUE(fetch_->answer(sent_.back().id, answer, false));
    }
};

// A launcher's root fetch tree with no children, reading ahead under one prefix on 4 threads.
class RootReadAhead : public ReadAhead {
protected:
    void start_root(const std::string& prefix) { start_root(prefix, no_children_); }
    void start_root(const std::string& prefix, ChildSet& children)
    {
        auto cache = NodeCache::create(base_ + "/launcher-cache");
        ASSERT_TRUE(cache) << cache.error().message;
        auto made = StageFetchTree::for_root(io_, cache->dir(), children, {prefix}, 4);
        ASSERT_TRUE(made) << made.error().message;
        root_ = std::move(*made);
    }
    template <typename Done>
    bool run_until(Done done)
    {
        return run_io_until(io_, done);
    }
    // What the root holds for `path`, or null.
    const FetchAnswer* answer_of(const std::string& path) const
    {
        auto it = root_->answers().find(path);
        return it == root_->answers().end() ? nullptr : &it->second;
    }
    // Whether the root holds `path`'s content: read whole.
    bool read_whole(const std::string& path) const
    {
        const FetchAnswer* answer = answer_of(path);
        return answer && answer->content();
    }
    bool all_read_whole(const std::vector<std::string>& paths) const
    {
        return std::ranges::all_of(paths, [this](const std::string& path) { return read_whole(path); });
    }
    // A program the ranks run, BASE/env/bin/app (this test: it needs libc.so.6), and a libc.so.6 in
    // BASE/env/lib too large to push.
    struct ProgramEnv {
        std::string bin, lib;
    };
    ProgramEnv make_program_env() const
    {
        ProgramEnv env{base_ + "/env/bin", base_ + "/env/lib"};
        fs::create_directories(env.bin);
        fs::create_directories(env.lib);
        fs::copy_file(fs::read_symlink("/proc/self/exe"), env.bin + "/app");
        write(env.lib + "/libc.so.6", std::string(ReadAheadPolicy::small_file_bytes + 1, 'l'));
        return env;
    }

    // children_ with one child connected over a real link, as a daemon below would be: every answer pushed to
    // it goes to `on_answer`, in order.
    void connect_one_child(std::function<void(wire::StagePushedAnswer)> on_answer)
    {
        auto key = auth::generate_key();
        children_ = std::make_unique<ChildSet>(io_, reaper_, key, child_events_ignored());
        ASSERT_TRUE(children_->listen("127.0.0.1"));
        std::string endpoint = launch_one_child(io_, *children_, "node-1");
        ASSERT_FALSE(endpoint.empty());
        connect_child(io_, endpoint, key, [on_answer = std::move(on_answer)](wire::Frame frame) {
            if (auto push = wire::decode_frame<wire::StageFetchPush>(frame))
                for (auto& answer : push->answers)
                    on_answer(std::move(answer));
        }, child_link_);
        ASSERT_TRUE(run_until([&] { return children_->connected_count() == 1; }));
    }
    // After the trees that used children_ are gone: the child's process.
    void end_child()
    {
        children_->kill_all(SIGKILL);
        io_.run_for(std::chrono::milliseconds(50));
    }

    boost::asio::io_context io_;
    ProcessReaper reaper_{io_};
    ChildSet no_children_{io_, reaper_, auth::generate_key(), {}};
    std::unique_ptr<ChildSet> children_;   // connect_one_child
    std::shared_ptr<Link> child_link_;
    std::unique_ptr<StageFetchTree> root_;
};

TEST_F(ReadAhead, ADirectoryARankListsHasItsEntriesReadAhead)
{
    ReadAheadPolicy policy({"/soft"});
    auto pkg = listed("/soft/pkg", {{"README", DT_REG, {}}, {"sub", DT_DIR, {}}, {"alias.txt", DT_LNK, "a.txt"}});
    known(FetchKind::content, "/soft", listed("/soft", {{"pkg", DT_DIR, {}}}));
    // Listed ahead, nobody asked about it: its entries wait.
    EXPECT_TRUE(after(policy, FetchKind::content, "/soft/pkg", pkg, false).empty());
    // A rank lists it: its files' metadata, its subdirectories' listings, and /soft's too (in use above it).
    auto reads = after(policy, FetchKind::content, "/soft/pkg", pkg, true);
    EXPECT_EQ(reads, (std::vector<Sent>{{0, FetchKind::metadata, "/soft/pkg/README"},
                                        {0, FetchKind::metadata, "/soft/pkg/alias.txt"},
                                        {0, FetchKind::content, "/soft/pkg/sub"},
                                        {0, FetchKind::content, "/soft/pkg"}}));
}

TEST_F(ReadAhead, WhereARankAsksItsDirectoriesSubdirectoriesAreListed)
{
    ReadAheadPolicy policy({"/soft"});
    known(FetchKind::content, "/soft",
          listed("/soft", {{"pkg", DT_DIR, {}}, {"other", DT_DIR, {}}, {"f", DT_REG, {}}}));
    // A stat in a directory: the rank works in /soft/pkg (not listed yet: its listing goes first) and so in
    // /soft, whose subdirectories are listed ahead of the probes a search there makes.
    auto stat_only = regular_file("/soft/pkg/setup.cfg", 1);
    stat_only.facts.flags = 0;
    auto reads = after(policy, FetchKind::metadata, "/soft/pkg/setup.cfg", stat_only, true);
    EXPECT_EQ(reads, (std::vector<Sent>{{0, FetchKind::content, "/soft/pkg"},
                                        {0, FetchKind::metadata, "/soft/f"},
                                        {0, FetchKind::content, "/soft/other"},
                                        {0, FetchKind::content, "/soft/pkg"}}));
    // The package's own listing, when it comes: its subdirectories listed too, its files by metadata.
    reads = after(policy, FetchKind::content, "/soft/pkg",
                  listed("/soft/pkg", {{"sub", DT_DIR, {}}, {"m.txt", DT_REG, {}}}), false);
    EXPECT_EQ(reads, (std::vector<Sent>{{0, FetchKind::metadata, "/soft/pkg/m.txt"},
                                        {0, FetchKind::content, "/soft/pkg/sub"}}));
    // A subdirectory nobody asked about is listed, and its entries wait until a rank asks about one.
    reads = after(policy, FetchKind::content, "/soft/other", listed("/soft/other", {{"deeper", DT_DIR, {}}}), false);
    EXPECT_TRUE(reads.empty());
    known(FetchKind::content, "/soft/other", listed("/soft/other", {{"deeper", DT_DIR, {}}, {"x.txt", DT_REG, {}}}));
    auto other_stat = regular_file("/soft/other/x.txt", 1);
    other_stat.facts.flags = 0;
    reads = after(policy, FetchKind::metadata, "/soft/other/x.txt", other_stat, true);
    EXPECT_EQ(reads, (std::vector<Sent>{{0, FetchKind::content, "/soft/other/deeper"},
                                        {0, FetchKind::metadata, "/soft/other/x.txt"}}));
}

TEST_F(ReadAhead, AFileReadFromADirectoryBringsItsFilesWholeAndItsListingFirst)
{
    ReadAheadPolicy policy({"/soft"});
    // Bytecode of a Python whose bytecode the root cannot read ("compiled" files here) is read like any file.
    // The directory is not listed yet: its listing goes ahead first.
    auto reads = after(policy, FetchKind::content, "/soft/pkg/__pycache__/a.pyc",
                       regular_file("/soft/pkg/__pycache__/a.pyc", 10), true);
    EXPECT_EQ(reads, (std::vector<Sent>{{0, FetchKind::content, "/soft/pkg/__pycache__"}}));
    // When it comes, its files (and symlinks) go whole, and its directories are listed (it is in use).
    auto cache_dir = listed("/soft/pkg/__pycache__",
                            {{"a.pyc", DT_REG, {}}, {"b.pyc", DT_REG, {}}, {"c", DT_DIR, {}}, {"l", DT_LNK, "b.pyc"}});
    reads = after(policy, FetchKind::content, "/soft/pkg/__pycache__", cache_dir, false);
    EXPECT_EQ(reads, (std::vector<Sent>{{0, FetchKind::content, "/soft/pkg/__pycache__/a.pyc"},
                                        {0, FetchKind::content, "/soft/pkg/__pycache__/b.pyc"},
                                        {0, FetchKind::content, "/soft/pkg/__pycache__/c"},
                                        {0, FetchKind::content, "/soft/pkg/__pycache__/l"},
                                        {0, FetchKind::content, "/soft/pkg"}}));
}

TEST_F(ReadAhead, AFileReadAheadDoesNotMakeItsDirectoryReadWhole)
{
    ReadAheadPolicy policy({"/soft"});
    known(FetchKind::content, "/soft/pkg", listed("/soft/pkg", {{"a.dat", DT_REG, {}}, {"b.dat", DT_REG, {}}}));
    // Only a rank's own read of a file says its neighbours will be read: a read-ahead does not, and a stat only
    // says the rank works there (its entries' metadata goes ahead).
    EXPECT_TRUE(after(policy, FetchKind::content, "/soft/pkg/a.dat", regular_file("/soft/pkg/a.dat", 1), false).empty());
    auto stat_only = regular_file("/soft/pkg/a.dat", 1);
    stat_only.facts.flags = 0;
    EXPECT_EQ(after(policy, FetchKind::metadata, "/soft/pkg/a.dat", stat_only, true),
              (std::vector<Sent>{{0, FetchKind::metadata, "/soft/pkg/a.dat"},
                                 {0, FetchKind::metadata, "/soft/pkg/b.dat"}}));
    auto reads = after(policy, FetchKind::content, "/soft/pkg/b.dat", regular_file("/soft/pkg/b.dat", 1), true);
    EXPECT_EQ(reads, (std::vector<Sent>{{0, FetchKind::content, "/soft/pkg/a.dat"},
                                        {0, FetchKind::content, "/soft/pkg/b.dat"}}));
    // Once per directory.
    EXPECT_TRUE(after(policy, FetchKind::content, "/soft/pkg/a.dat", regular_file("/soft/pkg/a.dat", 1), true).empty());
}

TEST_F(ReadAhead, APackageKnownOnlyByItsMetadataIsListedWhenAnImportNamesIt)
{
    // The bytecode of /soft/mod.py, which imports from the package /soft/pkg.
    fs::create_directories(base_ + "/py");
    write(base_ + "/py/mod.py", "from .pkg import x\n");
    ASSERT_EQ(compile_python(base_ + "/py"), "");
    std::string compiled_name = fs::path(compiled(base_ + "/py", "mod")).filename();
    std::string bytes = read(base_ + "/py/__pycache__/" + compiled_name);
    std::string pyc = "/soft/__pycache__/" + compiled_name;

    ReadAheadPolicy policy({"/soft"});
    known(FetchKind::content, "/soft",
          listed("/soft", {{"__pycache__", DT_DIR, {}}, {"mod.py", DT_REG, {}}, {"pkg", DT_DIR, {}}}));
    auto package_stat = listed("/soft/pkg", {});
    package_stat.facts.flags = 0;   // a stat's answer: a directory, not listed
    known(FetchKind::metadata, "/soft/pkg", package_stat);
    fetch_->fetch(FetchKind::content, pyc, [](const Status&, const FetchAnswer&) {});
    ASSERT_TRUE(fetch_->answer(sent_.back().id, regular_file(pyc, static_cast<std::int64_t>(bytes.size())), true));
    ASSERT_TRUE(fetch_->content(sent_.back().id,
                                std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()), true));
    const FetchAnswer* module = fetch_->cached(pyc);
    ASSERT_TRUE(module && module->content());

    // Its listing is read, and its __init__ with it (the source's stat, then the bytecode).
    auto reads = after(policy, FetchKind::content, pyc, *module, true);
    for (const auto& wanted : {Sent{0, FetchKind::content, "/soft/pkg"},
                               Sent{0, FetchKind::metadata, "/soft/pkg/__init__.py"}})
        EXPECT_NE(std::find(reads.begin(), reads.end(), wanted), reads.end())
            << wanted.path << " not in " << ::testing::PrintToString(reads);
}

TEST_F(ReadAhead, NothingOutsideThePrefixesAndNoEntriesOfAHugeListing)
{
    ReadAheadPolicy policy({"/soft"});
    EXPECT_TRUE(after(policy, FetchKind::content, "/etc/hosts", regular_file("/etc/hosts", 1), true).empty());
    // The prefix itself is read, but its parent is not staged.
    EXPECT_TRUE(after(policy, FetchKind::metadata, "/soft", listed("/soft", {}), true).empty());
    std::vector<ListedName> many;
    for (std::size_t i = 0; i <= ReadAheadPolicy::max_listing; ++i)
        many.push_back({"f" + std::to_string(i), DT_REG, {}});
    known(FetchKind::content, "/soft", listed("/soft", {{"big", DT_DIR, {}}}));
    EXPECT_TRUE(after(policy, FetchKind::content, "/soft/big", listed("/soft/big", many), true).empty());
}

TEST_F(ReadAhead, ReadAheadSkipsWhatIsKnownOnItsWayOrKnownMissing)
{
    std::vector<Sent> ahead;
    std::vector<std::uint64_t> promoted, hastened;
    fetch_->set_read_ahead([&](std::uint64_t id, FetchKind kind, const std::string& path, Ahead) {
        ahead.push_back({id, kind, path});
    }, [&](std::uint64_t id) { promoted.push_back(id); }, [&](std::uint64_t id) { hastened.push_back(id); });
    known(FetchKind::content, "/soft", listed("/soft", {{"a", DT_REG, {}}}));
    fetch_->read_ahead(FetchKind::metadata, "/soft");          // known
    fetch_->read_ahead(FetchKind::metadata, "/soft/missing");  // known missing from the listing
    fetch_->read_ahead(FetchKind::metadata, "/soft/a");
    fetch_->read_ahead(FetchKind::metadata, "/soft/a");        // on its way
    EXPECT_TRUE(hastened.empty());
    fetch_->read_ahead(FetchKind::metadata, "/soft/a", Ahead::next);   // on its way, and now wanted sooner
    ASSERT_EQ(ahead.size(), 1u);
    EXPECT_EQ(hastened, std::vector<std::uint64_t>{ahead[0].id});
    EXPECT_EQ(fetch_->counters().read_ahead, 1u);
    EXPECT_FALSE(fetch_->has_waiters(ahead[0].id));

    // A caller who asks now waits for the read-ahead, which is promoted once.
    int answered = 0;
    fetch_->fetch(FetchKind::metadata, "/soft/a", [&](const Status& s, const FetchAnswer&) { answered += s.ok(); });
    fetch_->fetch(FetchKind::metadata, "/soft/a", [&](const Status& s, const FetchAnswer&) { answered += s.ok(); });
    EXPECT_EQ(sent_.size(), 1u);   // only the listing went up
    EXPECT_EQ(promoted, std::vector<std::uint64_t>{ahead[0].id});
    EXPECT_TRUE(fetch_->has_waiters(ahead[0].id));
    auto meta = regular_file("/soft/a", 1);
    meta.facts.flags = 0;
    ASSERT_TRUE(fetch_->answer(ahead[0].id, meta, false));
    EXPECT_EQ(answered, 2);
}

TEST_F(ReadAhead, APushedAnswerServesWaitersAndTheirLateReplyIsDropped)
{
    int answered = 0;
    std::string got;
    fetch_->fetch(FetchKind::content, "/soft/a.pyc", [&](const Status& s, const FetchAnswer& a) {
        answered += s.ok();
        got = read(fetch_->cache().content_path(a.mirror));
    });
    ASSERT_EQ(sent_.size(), 1u);
    std::string bytes = "compiled";
    auto answer = regular_file("/soft/a.pyc", static_cast<std::int64_t>(bytes.size()));
    ASSERT_TRUE(fetch_->learn("/soft/a.pyc", answer,
                              std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size())));
    EXPECT_EQ(answered, 1);
    EXPECT_EQ(got, bytes);
    EXPECT_TRUE(fetch_->cached("/soft/a.pyc")->pushed);
    EXPECT_EQ(fetch_->counters().pushed, 1u);
    // The reply to the request, with its content, arrives after: taken without a second answer or an error.
    ASSERT_TRUE(fetch_->answer(sent_[0].id, answer, true));
    ASSERT_TRUE(fetch_->content(sent_[0].id, std::span(reinterpret_cast<const unsigned char*>(bytes.data()), 4),
                                false));
    ASSERT_TRUE(fetch_->content(sent_[0].id,
                                std::span(reinterpret_cast<const unsigned char*>(bytes.data()) + 4, 4), true));
    EXPECT_EQ(answered, 1);
    EXPECT_EQ(fetch_->in_flight(), 0u);
    EXPECT_EQ(read(fetch_->cache().content_path("/soft/a.pyc")), bytes);
    // Later callers are answered from the cache.
    fetch_->fetch(FetchKind::content, "/soft/a.pyc", [&](const Status& s, const FetchAnswer&) { answered += s.ok(); });
    EXPECT_EQ(answered, 2);
    EXPECT_EQ(sent_.size(), 1u);
}

TEST_F(ReadAhead, APushWithTheWrongContentOrAnUnusableMirrorIsRefused)
{
    std::string bytes = "short";
    auto answer = regular_file("/soft/b.pyc", 100);
    EXPECT_FALSE(fetch_->learn("/soft/b.pyc", answer,
                               std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size())));
    EXPECT_EQ(fetch_->cached("/soft/b.pyc"), nullptr);
    EXPECT_FALSE(fs::exists(fetch_->cache().content_path("/soft/b.pyc")));
    auto escaping = listed("/soft/../../etc", {});
    EXPECT_FALSE(fetch_->learn("/soft/c", escaping, {}));
    EXPECT_EQ(fetch_->cached("/soft/c"), nullptr);
}

TEST_F(ReadAhead, AReplySayingPushedWithoutTheBytesHereFallsBack)
{
    Status status;
    fetch_->fetch(FetchKind::content, "/soft/d.pyc", [&](const Status& s, const FetchAnswer&) { status = s; });
    // The parent says the bytes came in a push, and they never did: no answer (the rank falls back), never a
    // content answer without its copy.
    ASSERT_FALSE(fetch_->answer(sent_.at(0).id, regular_file("/soft/d.pyc", 3), false));
    EXPECT_FALSE(status.ok());
    EXPECT_EQ(fetch_->cached("/soft/d.pyc"), nullptr);
}

TEST_F(ReadAhead, SymlinksAreFollowedThroughHandlesAsTheKernelFollowsThem)
{
    std::string src = base_ + "/src";
    fs::create_directories(src + "/lib/sub");
    write(src + "/lib/libx.so.1.2.3", "library");
    fs::create_symlink("libx.so.1.2.3", src + "/lib/libx.so.1");   // a chain of relative links
    fs::create_symlink("libx.so.1", src + "/lib/libx.so");
    fs::create_symlink(src + "/lib/libx.so.1.2.3", src + "/lib/absolute");
    fs::create_symlink("../libx.so.1", src + "/lib/sub/up");        // ".." : the kernel's walk
    fs::create_symlink("nothing", src + "/lib/dangling");
    fs::create_symlink("loop2", src + "/lib/loop1");
    fs::create_symlink("loop1", src + "/lib/loop2");
    fs::create_symlink("sub", src + "/lib/subdir");
    auto cache = NodeCache::create(base_ + "/root-cache");
    ASSERT_TRUE(cache);
    DirectoryHandles handles;
    std::string target = fs::canonical(src + "/lib/libx.so.1.2.3").string();
    for (const char* name : {"libx.so", "libx.so.1", "absolute", "sub/up"}) {
        auto answer = read_local(FetchKind::content, src + "/lib/" + name, *cache, &handles);
        ASSERT_TRUE(answer) << name << ": " << answer.error().message;
        EXPECT_TRUE(S_ISLNK(answer->facts.lstat.mode)) << name;
        EXPECT_TRUE(answer->followed_is(S_IFREG)) << name;
        EXPECT_EQ(answer->facts.stat.size, 7) << name;
        EXPECT_TRUE(answer->content()) << name;
        EXPECT_EQ(answer->mirror, target) << name;
        EXPECT_EQ(read(cache->content_path(answer->mirror)), "library") << name;
    }
    auto dangling = read_local(FetchKind::content, src + "/lib/dangling", *cache, &handles);
    ASSERT_TRUE(dangling);
    EXPECT_EQ(dangling->facts.lstat_errno, 0);
    EXPECT_EQ(dangling->facts.stat_errno, ENOENT);
    EXPECT_FALSE(dangling->content());
    auto loop = read_local(FetchKind::metadata, src + "/lib/loop1", *cache, &handles);
    ASSERT_TRUE(loop);
    EXPECT_EQ(loop->facts.stat_errno, ELOOP);
    auto dir = read_local(FetchKind::content, src + "/lib/subdir", *cache, &handles);
    ASSERT_TRUE(dir);
    EXPECT_TRUE(dir->listed());
    EXPECT_EQ(dir->mirror, fs::canonical(src + "/lib/sub").string());
    ASSERT_EQ(dir->listing.size(), 1u);
    EXPECT_EQ(dir->listing[0].name, "up");
}

TEST_F(ReadAhead, AFileLargerThanTheLimitIsAnsweredWithItsMetadataOnly)
{
    std::string src = base_ + "/src";
    fs::create_directories(src);
    write(src + "/big", std::string(100, 'x'));
    auto cache = NodeCache::create(base_ + "/root-cache");
    ASSERT_TRUE(cache);
    auto limited = read_local(FetchKind::content, src + "/big", *cache, nullptr, 99);
    ASSERT_TRUE(limited);
    EXPECT_EQ(limited->facts.stat.size, 100);
    EXPECT_FALSE(limited->content());
    EXPECT_FALSE(fs::exists(cache->content_path(fs::canonical(src + "/big").string())));
    auto whole = read_local(FetchKind::content, src + "/big", *cache, nullptr, 100);
    ASSERT_TRUE(whole);
    EXPECT_TRUE(whole->content());
}

TEST_F(RootReadAhead, TheRootReadsAListedDirectorysEntriesAndAReadFilesNeighboursAhead)
{
    std::string src = base_ + "/src";
    fs::create_directories(src + "/pkg/__pycache__");
    write(src + "/pkg/a.txt", "A = 1\n");
    write(src + "/pkg/b.txt", "B = 2\n");
    write(src + "/pkg/__pycache__/a.pyc", "compiled a");
    write(src + "/pkg/__pycache__/b.pyc", "compiled b");
    write(src + "/pkg/__pycache__/huge.pyc", std::string(ReadAheadPolicy::small_file_bytes + 1, 'h'));
    ASSERT_NO_FATAL_FAILURE(start_root(src));
    auto& tree = *root_;
    auto known = [&](const std::string& path) { return answer_of(path); };

    // A rank lists the package: its entries' metadata is read without anyone asking.
    bool listed = false;
    tree.fetch(FetchKind::content, src + "/pkg", [&](const Status& s, const FetchAnswer&) { listed = s.ok(); });
    ASSERT_TRUE(run_until([&] { return listed && known(src + "/pkg/a.txt") && known(src + "/pkg/b.txt"); }));
    EXPECT_FALSE(known(src + "/pkg/a.txt")->content());   // a stat's worth: nobody read a file there

    // A rank reads one compiled module, not bytecode the root can read: the others in its directory come
    // whole, the huge one by metadata.
    bool read_one = false;
    tree.fetch(FetchKind::content, src + "/pkg/__pycache__/a.pyc",
               [&](const Status& s, const FetchAnswer&) { read_one = s.ok(); });
    ASSERT_TRUE(run_until([&] {
        auto* b = known(src + "/pkg/__pycache__/b.pyc");
        auto* huge = known(src + "/pkg/__pycache__/huge.pyc");
        return read_one && b && b->content() && huge;
    }));
    auto* b = known(src + "/pkg/__pycache__/b.pyc");
    EXPECT_TRUE(b->pushed);
    EXPECT_EQ(read(base_ + "/launcher-cache/root" + b->mirror), "compiled b");
    EXPECT_FALSE(known(src + "/pkg/__pycache__/huge.pyc")->content());
    EXPECT_GE(tree.counters().read_ahead, 4u);

    // Asking for the huge file now reads it whole.
    bool huge_read = false;
    tree.fetch(FetchKind::content, src + "/pkg/__pycache__/huge.pyc",
               [&](const Status& s, const FetchAnswer& a) { huge_read = s.ok() && a.content(); });
    EXPECT_TRUE(run_until([&] { return huge_read; }));
}

TEST_F(ReadAhead, AnAbsoluteImportWaitsForTheListingOfEachSysPathDirectoryBeforeTheOneThatHasIt)
{
    ImportFollower follower;
    std::vector<std::string> reads;
    auto record = [&](FetchKind, const std::string& path, Ahead) { reads.push_back(path); };
    known(FetchKind::content, "/py/lib", listed("/py/lib", {{"lib-dynload", DT_DIR, {}}, {"os.py", DT_REG, {}}}));
    known(FetchKind::content, "/py/lib/lib-dynload", listed("/py/lib/lib-dynload", {}));
    follower.interpreter_starts("/py/lib", {"/py/first", "/py/second"}, "cpython-311", *fetch_, record);
    auto under = [&](const std::string& dir) {
        return std::ranges::any_of(reads, [&](const std::string& path) { return path.starts_with(dir); });
    };

    // The later directory is listed first and has `app`; the earlier one, which Python looks in first, is not.
    known(FetchKind::content, "/py/second", listed("/py/second", {{"app", DT_DIR, {}}}));
    follower.command_imports({{"app", 0, {}}}, "cpython-311", *fetch_, record);
    follower.after_read("/py/second", *fetch_->cached("/py/second"), false, *fetch_, record);
    EXPECT_FALSE(under("/py/second/app"));
    // Its listing comes: `app` is the one there.
    known(FetchKind::content, "/py/first", listed("/py/first", {{"app", DT_DIR, {}}}));
    follower.after_read("/py/first", *fetch_->cached("/py/first"), false, *fetch_, record);
    EXPECT_TRUE(under("/py/first/app/"));
    EXPECT_FALSE(under("/py/second/app"));
}

TEST_F(ReadAhead, ANodeFetchesAPushedLibraryOnceAndARankAskingJoinsThatFetch)
{
    fetch_->fetch_ahead("/soft/lib/libbig.so");
    ASSERT_EQ(sent_.size(), 1u);
    EXPECT_EQ(sent_[0].kind, FetchKind::content);
    EXPECT_EQ(sent_[0].path, "/soft/lib/libbig.so");
    EXPECT_EQ(fetch_->counters().fetched_ahead, 1u);
    int heard = 0;
    bool ok = true;
    fetch_->fetch(FetchKind::content, "/soft/lib/libbig.so", [&](const Status& s, const FetchAnswer&) {
        ++heard;
        ok = s.ok();
    });
    EXPECT_EQ(sent_.size(), 1u);   // joined the fetch on its way
    EXPECT_EQ(heard, 0);
    fetch_->fail(sent_[0].id, "parent lost");   // the rank hears how that fetch ended
    EXPECT_EQ(heard, 1);
    EXPECT_FALSE(ok);
}

TEST_F(RootReadAhead, TheRootReadsTheLibrariesALoadedLibraryNeedsWholeWhateverTheirSize)
{
    std::string lib = base_ + "/src/lib";
    fs::create_directories(lib);
    fs::copy_file(fs::read_symlink("/proc/self/exe"), lib + "/libneeds.so");   // this test: it needs libc.so.6
    auto needs = read_elf_needs(lib + "/libneeds.so");
    ASSERT_TRUE(needs);
    ASSERT_NE(std::find(needs->needed.begin(), needs->needed.end(), "libc.so.6"), needs->needed.end());
    std::string large(ReadAheadPolicy::small_file_bytes + 1, 'l');
    write(lib + "/libc.so.6", large);          // needed: read whole although it is large
    write(lib + "/libunneeded.so", large);     // a neighbour nothing needs: its metadata only
    ASSERT_NO_FATAL_FAILURE(start_root(base_ + "/src"));
    auto& tree = *root_;
    auto known = [&](const std::string& path) { return answer_of(path); };

    bool loaded = false;
    tree.fetch(FetchKind::content, lib + "/libneeds.so", [&](const Status& s, const FetchAnswer&) { loaded = s.ok(); });
    ASSERT_TRUE(run_until([&] {
        auto* needed = known(lib + "/libc.so.6");
        auto* neighbour = known(lib + "/libunneeded.so");
        return loaded && needed && needed->content() && neighbour;
    }));
    EXPECT_EQ(read(base_ + "/launcher-cache/root" + known(lib + "/libc.so.6")->mirror), large);
    // Too large for a push: the nodes fetch it, and a reply to them carries the bytes.
    EXPECT_FALSE(known(lib + "/libc.so.6")->pushed);
    EXPECT_FALSE(known(lib + "/libunneeded.so")->content());
}

TEST_F(RootReadAhead, TheLibrariesAnImportedExtensionModuleNeedsAreReadBeforeARankLoadsIt)
{
    std::string src = base_ + "/src";   // a sys.path directory
    std::string package = src + "/app";
    fs::create_directories(package);
    write(package + "/__init__.py", "from . import fast\n");
    ASSERT_EQ(compile_python(src), "");
    std::string extension = package + "/fast.cpython-311-x86_64-linux-gnu.so";
    fs::copy_file(fs::read_symlink("/proc/self/exe"), extension);   // this test: it needs libc.so.6
    std::string large(ReadAheadPolicy::small_file_bytes + 1, 'l');
    write(package + "/libc.so.6", large);   // beside it: where the loader looks after its RUNPATH
    ASSERT_NO_FATAL_FAILURE(start_root(src));
    auto& tree = *root_;

    int asked = 0;
    for (const auto& path : {src, package, compiled(package, "__init__")})
        tree.fetch(FetchKind::content, path, [&](const Status& s, const FetchAnswer&) { asked += s.ok(); });
    // No rank asked for the extension module: the import named it, and the loader will want what it needs.
    EXPECT_TRUE(run_until([&] { return asked == 3 && read_whole(extension) && read_whole(package + "/libc.so.6"); }))
        << "extension read whole: " << read_whole(extension);
}

TEST_F(RootReadAhead, TheProgramTheRanksWillRunAndTheLibrariesItNeedsAreReadBeforeAnyRankStarts)
{
    const ProgramEnv env = make_program_env();
    const std::string &bin = env.bin, &lib = env.lib;
    write(bin + "/other", "not the program");
    ASSERT_NO_FATAL_FAILURE(start_root(base_ + "/env"));
    // A bare name, found through the ranks' PATH: the staged directory comes first, and nothing after
    // /usr/bin (not staged) is a candidate.
    root_->read_ahead_program({"app"}, "/nonexistent/../" + bin + ":/usr/bin:" + lib, lib);
    EXPECT_TRUE(run_until([&] { return answer_of(bin + "/app") && read_whole(lib + "/libc.so.6"); }))
        << "program looked up: " << (answer_of(bin + "/app") != nullptr);
    EXPECT_EQ(answer_of(lib + "/app"), nullptr);   // after /usr/bin on PATH
    EXPECT_FALSE(read_whole(bin + "/other"));
}

TEST_F(RootReadAhead, ABinarysBytesStayAtTheRootWhileTheLibrariesItNeedsAndAScriptGoToEveryNode)
{
    const ProgramEnv env = make_program_env();
    const std::string &bin = env.bin, &lib = env.lib;
    const std::string script = "#!/bin/sh\necho step\n";
    write(bin + "/job.sh", script);
    std::map<std::string, wire::StagePushedAnswer> pushed;   // what the child was pushed, by path
    ASSERT_NO_FATAL_FAILURE(connect_one_child([&](wire::StagePushedAnswer answer) {
        std::string path = answer.path;
        pushed[path] = std::move(answer);
    }));
    ASSERT_NO_FATAL_FAILURE(start_root(base_ + "/env", *children_));

    root_->read_ahead_program({bin + "/app"}, "", lib);
    ASSERT_TRUE(run_until([&] { return pushed.count(bin + "/app") && pushed.count(lib + "/libc.so.6"); }));
    // The kernel maps the program from the shared filesystem: a node learns what it is, and fetches nothing.
    const auto& program = pushed[bin + "/app"];
    EXPECT_FALSE(program.facts.flags & CANOPY_STAGE_CONTENT);
    EXPECT_FALSE(program.fetch);
    EXPECT_TRUE(program.content.empty());
    EXPECT_EQ(program.facts.stat.size, static_cast<std::int64_t>(fs::file_size(bin + "/app")));
    // The loader maps its libraries from the node's cache: every node fetches this one (too large for a push).
    EXPECT_TRUE(pushed[lib + "/libc.so.6"].fetch);
    // Its headers told what it needs: the root did not copy its bytes either (42 MB, this test).
    EXPECT_FALSE(read_whole(bin + "/app"));
    // A rank that opens it after all (to read itself) gets its bytes on request.
    bool fetched = false;
    root_->fetch(FetchKind::content, bin + "/app", [&](const Status& status, const FetchAnswer& answer) {
        EXPECT_TRUE(status.ok()) << status.error().message;
        EXPECT_TRUE(answer.content());
        fetched = true;
    });
    ASSERT_TRUE(run_until([&] { return fetched; }));
    EXPECT_TRUE(read_whole(bin + "/app"));

    // A script is not mapped but opened, by its interpreter on the node: its bytes go down.
    root_->read_ahead_program({bin + "/job.sh"}, "", lib);
    ASSERT_TRUE(run_until([&] { return pushed.count(bin + "/job.sh") > 0; }));
    EXPECT_TRUE(pushed[bin + "/job.sh"].facts.flags & CANOPY_STAGE_CONTENT);
    EXPECT_EQ(std::string(pushed[bin + "/job.sh"].content.begin(), pushed[bin + "/job.sh"].content.end()), script);
    child_link_->close();
    root_.reset();
    end_child();
}

#if defined(__x86_64__)
TEST_F(RootReadAhead, TheLoadersHwcapsLookupsInTheRanksLibraryPathAreReadBeforeAnyRankStarts)
{
    std::string bin = base_ + "/env/bin";
    std::string lib = base_ + "/env/lib";
    fs::create_directories(bin);
    fs::create_directories(lib + "/tls");   // one the loader would find
    write(bin + "/app", "a program");
    ASSERT_NO_FATAL_FAILURE(start_root(base_ + "/env"));
    root_->read_ahead_program({bin + "/app"}, "", lib + ":/usr/lib");
    // What the loader stats below each staged LD_LIBRARY_PATH directory, before it opens any library there.
    std::vector<std::string> subdirs;
    for (const char* sub : {"glibc-hwcaps", "tls", "x86_64", "haswell", "xeon_phi"})
        subdirs.push_back(lib + "/" + sub);
    EXPECT_TRUE(run_until([&] {
        return std::ranges::all_of(subdirs, [this](const std::string& path) { return answer_of(path) != nullptr; });
    }));
    for (const auto& path : subdirs) {
        const FetchAnswer* answer = answer_of(path);
        ASSERT_NE(answer, nullptr) << path;
        EXPECT_EQ(answer->facts.stat_errno, path.ends_with("/tls") ? 0 : ENOENT) << path;
    }
    EXPECT_EQ(answer_of("/usr/lib/tls"), nullptr);   // not staged
}
#endif

// A Python environment at base_/env laid out as Debian's, bin/python3 a symlink to bin/python3.X: a standard
// library and lib/python3/dist-packages, compiled by the test's Python, whose bytecode tag names the
// interpreter's version. lib/python3.X/dist-packages, later on sys.path, has a stray `app/core` directory.
struct PythonEnv {
    std::string env, stdlib, dist_packages;
};

void make_python_env(const std::string& base, PythonEnv& made)
{
    std::string source = base + "/stdlib";
    fs::create_directories(source + "/encodings");
    fs::create_directories(source + "/dist-packages/app/core");
    std::string packages = base + "/packages";
    fs::create_directories(packages + "/app");
    write(source + "/os.py", "");
    write(source + "/encodings/__init__.py", "from . import aliases\n");
    write(source + "/encodings/aliases.py", "");
    write(source + "/encodings/utf_8.py", "");
    write(source + "/encodings/cp1252.py", "");   // not the filesystem's encoding
    write(source + "/sitecustomize.py", "");
    write(source + "/unused.py", "");
    write(source + "/json.py", "");
    write(packages + "/app/__init__.py", "from . import model\n");
    write(packages + "/app/model.py", "import json\n");
    write(packages + "/app/unused.py", "");
    ASSERT_EQ(compile_python(source), "");
    ASSERT_EQ(compile_python(packages), "");
    std::string tag = fs::path(compiled(source, "os")).extension() == ".pyc"
                          ? fs::path(compiled(source, "os")).stem().extension().string().substr(1)   // cpython-311
                          : "";
    ASSERT_TRUE(tag.starts_with("cpython-3")) << tag;
    std::string version = "3." + tag.substr(9);
    made.env = base + "/env";
    made.stdlib = made.env + "/lib/python" + version;
    made.dist_packages = made.env + "/lib/python3/dist-packages";
    fs::create_directories(made.env + "/bin");
    fs::create_directories(made.env + "/lib/python3");
    fs::rename(source, made.stdlib);
    fs::rename(packages, made.dist_packages);
    write(made.env + "/bin/python" + version, "an interpreter");
    fs::create_symlink("python" + version, made.env + "/bin/python3");   // as the ranks name it
}

TEST_F(RootReadAhead, APythonInterpretersStartIsReadBeforeAnyRankStartsIt)
{
    PythonEnv python;
    ASSERT_NO_FATAL_FAILURE(make_python_env(base_, python));
    const std::string& stdlib = python.stdlib;
    ASSERT_NO_FATAL_FAILURE(start_root(python.env));

    root_->read_ahead_program({"python3"}, python.env + "/bin", "");
    std::vector<std::string> started = {compiled(stdlib + "/encodings", "__init__"),
                                        compiled(stdlib + "/encodings", "aliases"),
                                        compiled(stdlib + "/encodings", "utf_8"), compiled(stdlib, "sitecustomize")};
    EXPECT_TRUE(run_until([&] { return all_read_whole(started); }))
        << "read whole: " << read_whole(started[0]) << read_whole(started[1]) << read_whole(started[2])
        << read_whole(started[3]);
    EXPECT_NE(answer_of(stdlib + "/os.py"), nullptr);   // the landmark Python looks for
    for (const auto& module : {"os", "unused"})
        EXPECT_FALSE(read_whole(compiled(stdlib, module))) << module;
    EXPECT_FALSE(read_whole(compiled(stdlib + "/encodings", "cp1252")));
    // The command line imports nothing: nothing in dist-packages is read.
    EXPECT_FALSE(read_whole(compiled(python.dist_packages + "/app", "__init__")));
}

TEST_F(RootReadAhead, TheModulesAPythonCommandLineImportsAreReadBeforeAnyRankStarts)
{
    PythonEnv python;
    ASSERT_NO_FATAL_FAILURE(make_python_env(base_, python));
    ASSERT_NO_FATAL_FAILURE(start_root(python.env));

    // `app` is in dist-packages, whose listing the root reads with the interpreter's start: the command's import
    // is followed once it comes, and what `app` imports in turn.
    root_->read_ahead_program({"python3", "-u", "-c", "import os, time\nimport app\n"}, python.env + "/bin", "");
    std::string app = python.dist_packages + "/app";
    std::vector<std::string> imported = {compiled(app, "__init__"), compiled(app, "model"),
                                         compiled(python.stdlib, "json")};
    EXPECT_TRUE(run_until([&] { return all_read_whole(imported); }))
        << "read whole: " << read_whole(imported[0]) << read_whole(imported[1]) << read_whole(imported[2]);
    EXPECT_FALSE(read_whole(compiled(app, "unused")));
    // Not the stray `app` later on sys.path, whatever order the listings came in.
    EXPECT_FALSE(answer_of(python.stdlib + "/dist-packages/app/__init__.py"));
    EXPECT_EQ(root_->counters().sent_up, 0u);   // no rank asked
}

TEST_F(RootReadAhead, TheRootReadsWhatARanksModuleImportsAndTheirImportsNotTheModulesBesideIt)
{
    std::string src = base_ + "/src";   // a sys.path directory
    fs::create_directories(src + "/app/sub");
    write(src + "/app/__init__.py", "from . import used, fast\n"
                                    "import helper\n"
                                    "from .sub import inner\n"
                                    "def later():\n"
                                    "    import never\n");
    write(src + "/app/used.py", "X = 1\n");
    write(src + "/app/unused.py", "Y = 2\n");
    write(src + "/app/used.pyi", "X: int\n");   // a type stub: never imported
    write(src + "/app/fast.cpython-311-x86_64-linux-gnu.so", "an extension module");
    write(src + "/app/sub/__init__.py", "");
    write(src + "/app/sub/inner.py", "import deep\n");
    write(src + "/helper.py", "H = 1\n");
    write(src + "/deep.py", "D = 1\n");
    write(src + "/never.py", "N = 1\n");
    ASSERT_EQ(compile_python(src), "");
    fs::create_directories(src + "/scripts");   // a script's directory: sources only, as a job's own code may be
    write(src + "/scripts/train.py", "import model\n");
    write(src + "/scripts/model.py", "M = 1\n");
    ASSERT_NO_FATAL_FAILURE(start_root(src));
    auto& tree = *root_;

    // Python lists sys.path and the package to find it, then reads the package's bytecode.
    int asked = 0;
    auto ask = [&](const std::string& path) {
        tree.fetch(FetchKind::content, path, [&](const Status& s, const FetchAnswer&) { asked += s.ok(); });
    };
    ask(src);
    ask(src + "/app");
    ASSERT_TRUE(run_until([&] { return asked == 2; }));
    std::string init = compiled(src + "/app", "__init__");
    ASSERT_NE(init, "");
    ask(init);
    std::vector<std::string> imported = {compiled(src + "/app", "used"), src + "/app/fast.cpython-311-x86_64-linux-gnu.so",
                                         compiled(src, "helper"), compiled(src + "/app/sub", "__init__"),
                                         compiled(src + "/app/sub", "inner"), compiled(src, "deep")};
    ASSERT_TRUE(run_until([&] {
        return asked == 3 && all_read_whole(imported) && tree.in_flight() == 0;
    })) << "not read ahead: " << ::testing::PrintToString([&] {
        std::vector<std::string> missing;
        std::copy_if(imported.begin(), imported.end(), std::back_inserter(missing),
                     [&](const std::string& path) { return !read_whole(path); });
        return missing;
    }());
    // The sources Python checks its bytecode against are known too: a rank's stat asks nothing.
    EXPECT_TRUE(tree.answers().count(src + "/app/used.py"));
    EXPECT_TRUE(tree.answers().count(src + "/deep.py"));
    // Nothing imports these as the package runs: not read, not even stat'ed, though beside what was.
    for (const auto& neighbour : {compiled(src + "/app", "unused"), src + "/app/unused.py", src + "/app/used.pyi",
                                  compiled(src, "never"), src + "/never.py"})
        EXPECT_FALSE(answer_of(neighbour)) << neighbour;

    // Where there is no bytecode, Python reads the sources: a script's neighbours still go whole.
    ask(src + "/scripts/train.py");
    EXPECT_TRUE(run_until([&] { return asked == 4 && read_whole(src + "/scripts/model.py"); }));
}

// A push from the parent naming one file, `size` bytes of content; `awaited`: a node waits for it.
wire::Frame push_of(const std::string& path, std::size_t size, bool awaited)
{
    auto answer = regular_file(path, static_cast<std::int64_t>(size));
    wire::StageFetchPush push;
    auto& pushed = push.answers.emplace_back();
    pushed.path = path;
    pushed.facts = answer.facts;
    pushed.mirror = answer.mirror;
    pushed.content.assign(size, 'x');
    push.awaited = awaited;
    auto frame = wire::read_frame(wire::to_frame(push));
    EXPECT_TRUE(frame) << frame.error().message;
    return frame ? std::move(*frame) : wire::Frame{};
}

// A daemon between the root and a child passes each push on before using it, in the order the pushes came, but
// one a node waits for goes right after the frame being written, ahead of the read-ahead queued for the child (as
// at the root: Link::send).
TEST_F(RootReadAhead, ADaemonPassesAnAwaitedPushOnAheadOfTheReadAheadQueuedForItsChildren)
{
    std::vector<std::string> received;   // the paths the child was pushed, in order
    ASSERT_NO_FATAL_FAILURE(
        connect_one_child([&](wire::StagePushedAnswer answer) { received.push_back(std::move(answer.path)); }));
    auto cache = NodeCache::create(base_ + "/daemon-cache");
    ASSERT_TRUE(cache) << cache.error().message;
    auto daemon = StageFetchTree::for_daemon(io_, cache->dir(), *children_, [](std::vector<std::uint8_t>) {});
    ASSERT_TRUE(daemon) << daemon.error().message;

    // All handed to the daemon before its link writes more than the first.
    for (int i = 0; i < 4; ++i)
        (*daemon)->on_parent_push(push_of("/soft/ahead-" + std::to_string(i) + ".py", 64 * 1024, false));
    (*daemon)->on_parent_push(push_of("/soft/awaited.py", 100, true));
    ASSERT_TRUE(run_until([&] { return received.size() == 5; })) << received.size();
    EXPECT_EQ(received, (std::vector<std::string>{"/soft/ahead-0.py", "/soft/awaited.py", "/soft/ahead-1.py",
                                                  "/soft/ahead-2.py", "/soft/ahead-3.py"}));
    // The daemon learned each as well.
    for (const auto& path : received) {
        auto kept = (*daemon)->answers().find(path);
        ASSERT_NE(kept, (*daemon)->answers().end()) << path;
        EXPECT_TRUE(kept->second.pushed) << path;
    }
    child_link_->close();
    daemon->reset();
    end_child();
}

} // namespace
} // namespace canopy::stage
