// What the on-demand staging unit tests share: whole-file reads and writes, what a fetch cache sent up, and the
// answers a parent would give.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "stage/fetch_cache.hpp"
#include "temp_dir.hpp"

namespace canopy::stage::testing {

inline std::string read(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

inline void write(const std::string& path, const std::string& data)
{
    std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

// Compiles every .py under `dir` into __pycache__ with the Python the build found (CANOPY_TEST_PYTHON, set by
// meson); "" when done, else why not.
inline std::string compile_python(const std::string& dir)
{
    const char* python = ::getenv("CANOPY_TEST_PYTHON");
    if (!python || !*python)
        return "CANOPY_TEST_PYTHON is not set (meson test sets it)";
    std::string command = std::string("'") + python + "' -m compileall -q '" + dir + "' >/dev/null";
    int status = std::system(command.c_str());
    return status == 0 ? "" : command + " failed with status " + std::to_string(status);
}

// The one compiled module `module`.*.pyc in `dir`/__pycache__, as this Python names it; "" if none.
inline std::string compiled(const std::string& dir, const std::string& module)
{
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/__pycache__", ignored)) {
        std::string name = entry.path().filename().string();
        if (name.starts_with(module + ".") && name.ends_with(".pyc") &&
            name.find('.', module.size() + 1) == name.size() - 4)
            return entry.path().string();
    }
    return "";
}

// A request a cache sent up (or a read-ahead a policy asked for; the id is then 0 and not compared).
struct Sent {
    std::uint64_t id;
    FetchKind kind;
    std::string path;
    bool operator==(const Sent& other) const { return kind == other.kind && path == other.path; }
};

inline void PrintTo(const Sent& sent, std::ostream* out)
{
    *out << (sent.kind == FetchKind::content ? "content " : "metadata ") << sent.path;
}

// A regular file's answer with its content (CANOPY_STAGE_CONTENT), as a parent sends it.
inline FetchAnswer regular_file(const std::string& mirror, std::int64_t size)
{
    FetchAnswer a;
    a.facts.lstat.mode = a.facts.stat.mode = S_IFREG | 0644;
    a.facts.lstat.size = a.facts.stat.size = size;
    a.facts.stat.mtime_sec = a.facts.lstat.mtime_sec = 1700000000;
    a.mirror = mirror;
    a.facts.flags |= CANOPY_STAGE_CONTENT;
    return a;
}

// A directory's answer with its listing, sorted by name as the root sends it (caches look names up by bisection).
inline FetchAnswer listed(const std::string& mirror, std::vector<ListedName> names)
{
    FetchAnswer a;
    a.facts.lstat.mode = a.facts.stat.mode = S_IFDIR | 0755;
    a.facts.flags |= CANOPY_STAGE_LISTED;
    a.mirror = mirror;
    a.listing = std::move(names);
    std::sort(a.listing.begin(), a.listing.end(),
              [](const ListedName& x, const ListedName& y) { return x.name < y.name; });
    return a;
}

// A fresh temp directory `base_` holding a fetch cache whose requests to its parent are recorded in `sent_`.
class FetchCacheTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        base_ = temp_.path();
        auto cache = NodeCache::create(base_ + "/cache");
        ASSERT_TRUE(cache) << cache.error().message;
        fetch_ = std::make_unique<FetchCache>(std::move(*cache), [this](std::uint64_t id, FetchKind kind,
                                                                         const std::string& path) {
            sent_.push_back({id, kind, path});
        });
    }

    TempDir temp_{"canopy-test-fetch"};
    std::string base_;
    std::unique_ptr<FetchCache> fetch_;
    std::vector<Sent> sent_;
};

} // namespace canopy::stage::testing
