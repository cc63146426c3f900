// The limit on what a rank stores, on its own: what it counts, when it ends the job, and the sizes it reads and
// writes.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collective/store_limit.hpp"
#include "util/byte_size.hpp"

namespace canopy {
namespace {

struct Limited {
    std::vector<std::pair<long, std::string>> over;
    StoreLimit limit{1000, "n7", [this](long rank, const std::string& line) { over.emplace_back(rank, line); }};
};

TEST(StoreLimit, CountsEachKeyOnceSoAWriteAgainReplacesIt)
{
    Limited l;
    EXPECT_TRUE(l.limit.keep(3, "pmi:a", 400, "a PMI put"));
    EXPECT_TRUE(l.limit.keep(3, "pmi:a", 600, "a PMI put"));
    EXPECT_TRUE(l.limit.keep(3, "pmi:b", 400, "a PMI put"));
    EXPECT_EQ(l.limit.kept(3), 1000u);
    EXPECT_TRUE(l.limit.keep(4, "pmi:a", 1000, "a PMI put")) << "each rank has a limit of its own";
    l.limit.drop(3, "pmi:a");
    EXPECT_EQ(l.limit.kept(3), 400u);
    EXPECT_TRUE(l.limit.keep(3, "store:x", 600, "a write to the canopy store"));
    EXPECT_TRUE(l.over.empty());
}

TEST(StoreLimit, RefusesWhatGoesPastTheLimitAndEndsTheJobOnceNamingTheRank)
{
    Limited l;
    ASSERT_TRUE(l.limit.keep(3, "pmix-commit", 900, "PMIx_Commit"));
    EXPECT_FALSE(l.limit.keep(3, "pmi:a", 101, "a PMI put"));
    EXPECT_EQ(l.limit.kept(3), 900u) << "what was refused is not counted";
    EXPECT_FALSE(l.limit.keep(5, "pmix-commit", 2 << 20, "PMIx_Commit"));
    ASSERT_EQ(l.over.size(), 1u) << "one line for the user, for the first rank over";
    EXPECT_EQ(l.over[0].first, 3);
    EXPECT_EQ(l.over[0].second,
              "rank 3 on n7 would store 1001 bytes with a PMI put, over the limit of 1000 bytes a rank (raise it with "
              "--rank-store-limit or [job] rank_store_limit)");
    EXPECT_TRUE(l.limit.exceeded());
}

TEST(StoreLimit, AllowsANodesPartOfAFenceUpToTheLimitForEachOfItsRanks)
{
    Limited l;
    EXPECT_TRUE(l.limit.allows({0, 1}, 2 * (1000 + 4096), "a PMIx fence"));
    EXPECT_TRUE(l.limit.allows({}, 1 << 30, "a PMIx fence")) << "no rank of this node takes part";
    EXPECT_FALSE(l.limit.allows({0, 1}, 2 * (1000 + 4096) + 1, "a PMIx fence"));
    ASSERT_EQ(l.over.size(), 1u);
    EXPECT_EQ(l.over[0].second, "ranks 0, 1 on n7 sent 10.0 KiB to a PMIx fence, over the limit of 1000 bytes a rank "
                                "(raise it with --rank-store-limit or [job] rank_store_limit)");
}

TEST(StoreLimit, ZeroMeansNoLimit)
{
    bool over = false;
    StoreLimit limit(0, "n0", [&](long, const std::string&) { over = true; });
    EXPECT_TRUE(limit.keep(0, "pmix-commit", std::uint64_t{1} << 40, "PMIx_Commit"));
    EXPECT_TRUE(limit.allows({0}, std::uint64_t{1} << 40, "a PMIx fence"));
    EXPECT_FALSE(over);
}

TEST(ByteSize, ReadsBytesAndBinaryUnitsHoweverTheyAreWritten)
{
    EXPECT_EQ(*parse_byte_size("0"), 0u);
    EXPECT_EQ(*parse_byte_size("1048576"), 1048576u);
    EXPECT_EQ(*parse_byte_size("512B"), 512u);
    for (const char* text : {"16M", "16MB", "16MiB", "16mib", "16m"})
        EXPECT_EQ(*parse_byte_size(text), std::uint64_t{16} << 20) << text;
    EXPECT_EQ(*parse_byte_size("4K"), 4096u);
    EXPECT_EQ(*parse_byte_size("2GiB"), std::uint64_t{2} << 30);
    EXPECT_EQ(*parse_byte_size("1T"), std::uint64_t{1} << 40);
    for (const char* text : {"", "M", "-1", "1.5M", "16 MiB", "16Mi", "16X", "99999999999999999999", "17179869184T"})
        EXPECT_FALSE(parse_byte_size(text).ok()) << text;
    EXPECT_EQ(parse_byte_size("1.5M").error().message,
              "'1.5M' is not a size: write a number of bytes, or one of K, M, G or T, such as 16MiB");
}

TEST(ByteSize, WritesTheLargestUnitItReaches)
{
    EXPECT_EQ(format_byte_size(0), "0 bytes");
    EXPECT_EQ(format_byte_size(1023), "1023 bytes");
    EXPECT_EQ(format_byte_size(1024), "1 KiB");
    EXPECT_EQ(format_byte_size(std::uint64_t{16} << 20), "16 MiB");
    EXPECT_EQ(format_byte_size(std::uint64_t{241} << 19), "120.5 MiB");
    EXPECT_EQ(format_byte_size(std::uint64_t{3} << 40), "3 TiB");
}

} // namespace
} // namespace canopy
