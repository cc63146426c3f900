// A node's PMI puts as they travel in a fence (daemon/pmi/node_puts): their layout, and reading concatenated blobs.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pmi/node_puts.hpp"

using namespace canopy;

namespace {

std::string text(std::span<const std::uint8_t> bytes) { return {bytes.begin(), bytes.end()}; }

// Every put of a result as (offset, key, value), as the store's index sees them.
std::vector<std::tuple<std::size_t, std::string, std::string>> visit(const pmi::Bytes& result, Status& status)
{
    std::vector<std::tuple<std::size_t, std::string, std::string>> seen;
    status = pmi::for_each_put(result, [&](std::size_t offset, const pmi::PutView& put) {
        seen.emplace_back(offset, text(put.key), text(put.value));
    });
    return seen;
}

} // namespace

TEST(NodePuts, ABlobIsACountThenEachKeyAndValueInKeyOrder)
{
    // The layout other nodes' daemons read: a varint count, then length-prefixed keys and values.
    pmi::Bytes expected = {2, 1, 'a', 1, '1', 2, 'b', 'c', 0};
    EXPECT_EQ(pmi::encode_node_puts({{"bc", ""}, {"a", "1"}}), expected);
    EXPECT_EQ(pmi::encode_node_puts({}), pmi::Bytes{0});
}

TEST(NodePuts, AFenceResultIsEveryNodesBlobConcatenated)
{
    pmi::Bytes result = pmi::encode_node_puts({{"a", "1"}, {"b", "22"}});
    pmi::Bytes empty = pmi::encode_node_puts({});
    pmi::Bytes other = pmi::encode_node_puts({{"c", "333"}});
    result.insert(result.end(), empty.begin(), empty.end());
    result.insert(result.end(), other.begin(), other.end());
    Status status;
    auto seen = visit(result, status);
    ASSERT_TRUE(status.ok());
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(std::get<1>(seen[1]), "b");
    EXPECT_EQ(std::get<2>(seen[2]), "333");
    for (const auto& [offset, key, value] : seen) {
        auto put = pmi::put_at(result, offset);
        EXPECT_EQ(text(put.key), key);
        EXPECT_EQ(text(put.value), value);
    }
}

TEST(NodePuts, AMalformedBlobIsAnErrorNamingTheResultsSize)
{
    pmi::Bytes result = pmi::encode_node_puts({{"a", "1"}});
    result.push_back(5);   // a second blob that claims 5 puts and holds none
    Status status;
    visit(result, status);
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.error().message, "malformed PMI fence result (6 bytes)");
}
