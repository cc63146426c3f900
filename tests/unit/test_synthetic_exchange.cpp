// The synthetic exchange's spec, values, peers and result index (lib/synthetic).
#include <gtest/gtest.h>

#include <set>

#include "synthetic/synthetic_exchange.hpp"

using namespace canopy;
using namespace canopy::synthetic;

TEST(SyntheticExchange, SpecReadsEveryPartAndRoundTrips)
{
    auto plain = parse_spec("120");
    ASSERT_TRUE(plain) << plain.error().message;
    EXPECT_EQ(plain->ranks_per_node, 120);
    EXPECT_EQ(plain->bytes, 100u);
    EXPECT_EQ(plain->path, Path::pmi);

    auto full = parse_spec("120:1KiB:dmodex:gets=5:corrupt=17");
    ASSERT_TRUE(full) << full.error().message;
    EXPECT_EQ(full->bytes, 1024u);
    EXPECT_EQ(full->path, Path::dmodex);
    EXPECT_EQ(full->gets, 5);
    EXPECT_EQ(full->corrupt_rank, 17);
    EXPECT_EQ(*parse_spec(to_string(*full)), *full);
    EXPECT_EQ(to_string(*parse_spec("16:100:pmix")), "16:100:pmix:gets=3");
}

TEST(SyntheticExchange, SpecErrorsSayWhatIsExpected)
{
    EXPECT_NE(parse_spec("0").error().message.find("at least 1"), std::string::npos);
    EXPECT_NE(parse_spec("x").error().message.find("R[:BYTES]"), std::string::npos);
    EXPECT_NE(parse_spec("4:100:gossip").error().message.find("'gossip' is not understood"), std::string::npos);
    EXPECT_NE(parse_spec("4:gets=x").error().message.find("gets needs a whole number"), std::string::npos);
    EXPECT_FALSE(parse_spec("4:0"));
}

TEST(SyntheticExchange, ValuesAreDeterministicPrintableAndDistinct)
{
    std::set<std::string> seen;
    for (long rank = 0; rank < 1000; ++rank) {
        std::string value = value_of(rank, 100);
        ASSERT_EQ(value.size(), 100u);
        EXPECT_EQ(value, value_of(rank, 100));
        EXPECT_EQ(value.find_first_of(" =;\n\t"), std::string::npos) << value;
        seen.insert(value);
    }
    EXPECT_EQ(seen.size(), 1000u);
    EXPECT_EQ(value_of(5, 1024).size(), 1024u);
}

TEST(SyntheticExchange, CheckNamesTheReaderThePeerAndTheByte)
{
    EXPECT_EQ(check_value(1, 2, value_of(2, 100), 100), "");
    std::string wrong = check_value(1, 2, corrupted_value_of(2, 100), 100);
    EXPECT_NE(wrong.find("synthetic rank 1 read a wrong value for rank 2's key ep2: byte 0 of 100"), std::string::npos)
        << wrong;
    EXPECT_NE(check_value(1, 2, "short", 100).find("read 5 bytes"), std::string::npos);
}

TEST(SyntheticExchange, PeersAreInTheJobAndReachOtherNodes)
{
    auto peers = peers_of(119, 1200, 120, 4);
    ASSERT_EQ(peers.size(), 4u);
    EXPECT_EQ(peers[0], 120);   // the next rank, on the next node
    EXPECT_EQ(peers[1], 239);   // the same local rank on the next node
    for (long rank = 0; rank < 1200; ++rank)
        for (long peer : peers_of(rank, 1200, 120, 3)) {
            EXPECT_GE(peer, 0);
            EXPECT_LT(peer, 1200);
        }
    EXPECT_EQ(peers_of(0, 1, 1, 3), (std::vector<long>{0, 0, 0}));
}

TEST(SyntheticExchange, IndexFindsEveryNodesValuesInAConcatenatedResult)
{
    Bytes result = encode_values({{2, value_of(2, 10)}, {3, value_of(3, 10)}});
    Bytes other = encode_values({{0, value_of(0, 10)}});
    result.insert(result.end(), other.begin(), other.end());
    auto index = ValueIndex::build(result, 4);
    ASSERT_TRUE(index) << index.error().message;
    EXPECT_EQ(index->find(0), value_of(0, 10));
    EXPECT_EQ(index->find(3), value_of(3, 10));
    EXPECT_FALSE(index->find(1));
    EXPECT_FALSE(index->find(7));
    EXPECT_EQ(index->result_bytes(), result.size());

    EXPECT_NE(ValueIndex::build(result, 3).error().message.find("outside the job's 3 ranks"), std::string::npos);
    result.pop_back();
    EXPECT_NE(ValueIndex::build(result, 4).error().message.find("malformed"), std::string::npos);
}
