// A node's store of PMI barrier results, indexed in place (daemon/pmi/kvs_store).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "pmi/kvs_store.hpp"
#include "pmi/node_puts.hpp"

using namespace canopy;

namespace {

KvsStore::Bytes concatenated(std::initializer_list<KvsStore::Bytes> blobs)
{
    KvsStore::Bytes all;
    for (const auto& blob : blobs)
        all.insert(all.end(), blob.begin(), blob.end());
    return all;
}

} // namespace

TEST(KvsStore, FindsEveryNodesKeysAndLaterBarriersReplaceValues)
{
    KvsStore store;
    ASSERT_TRUE(store.add(concatenated({pmi::encode_node_puts({{"a", "1"}, {"b", "2"}}),
                                        pmi::encode_node_puts({{"c", "3"}})}))
                    .ok());
    EXPECT_EQ(store.find("a"), "1");
    EXPECT_EQ(store.find("c"), "3");
    EXPECT_FALSE(store.find("d"));
    ASSERT_TRUE(store.add(pmi::encode_node_puts({{"a", "one"}, {"d", ""}})).ok());
    EXPECT_EQ(store.find("a"), "one");
    EXPECT_EQ(store.find("b"), "2");
    EXPECT_EQ(store.find("d"), "");
    EXPECT_EQ(store.size(), 4u);
}

TEST(KvsStore, HoldsManyKeysInLittleMoreThanTheirBytes)
{
    std::map<std::string, std::string, std::less<>> puts;
    for (int i = 0; i < 100000; ++i)
        puts["ep" + std::to_string(i)] = std::string(100, static_cast<char>('a' + i % 26));
    auto blob = pmi::encode_node_puts(puts);
    std::size_t blob_bytes = blob.size();
    KvsStore store;
    ASSERT_TRUE(store.add(std::move(blob)).ok());
    EXPECT_EQ(store.size(), 100000u);
    for (int i = 0; i < 100000; i += 997)
        EXPECT_EQ(store.find("ep" + std::to_string(i)), puts["ep" + std::to_string(i)]);
    // The index costs at most 24 bytes a key (8 a slot, at most half full), against ~100 for a map node and a copy.
    EXPECT_LE(store.held_bytes(), blob_bytes + 24 * 100000);
}

TEST(KvsStore, AMalformedResultChangesNothing)
{
    KvsStore store;
    ASSERT_TRUE(store.add(pmi::encode_node_puts({{"a", "1"}})).ok());
    auto bad = pmi::encode_node_puts({{"a", "2"}, {"b", "3"}});
    bad.pop_back();
    EXPECT_NE(store.add(bad).error().message.find("malformed PMI fence result"), std::string::npos);
    EXPECT_EQ(store.find("a"), "1");
    EXPECT_FALSE(store.find("b"));
    EXPECT_TRUE(store.add(pmi::encode_node_puts({})).ok());   // a barrier without puts
    EXPECT_EQ(store.size(), 1u);
}
