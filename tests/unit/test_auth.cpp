// Unit tests for the shared-secret HMAC challenge-response used on tree connections.
#include "wire/auth.hpp"

#include <cctype>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace canopy::auth {
namespace {

std::vector<std::uint8_t> bytes(std::string_view text) { return {text.begin(), text.end()}; }

Key test_key()
{
    Key key{};
    for (std::size_t i = 0; i < key.size(); ++i)
        key[i] = static_cast<std::uint8_t>(i * 7 + 1);
    return key;
}

Nonce test_nonce(std::uint8_t seed)
{
    Nonce nonce{};
    for (std::size_t i = 0; i < nonce.size(); ++i)
        nonce[i] = static_cast<std::uint8_t>(seed + i);
    return nonce;
}

TEST(Auth, HmacSha256MatchesRfc4231TestCase1)
{
    const std::vector<std::uint8_t> key(20, 0x0b);
    EXPECT_EQ(to_hex(hmac_sha256(key, bytes("Hi There"))),
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(Auth, HmacSha256MatchesRfc4231TestCase2)
{
    EXPECT_EQ(to_hex(hmac_sha256(bytes("Jefe"), bytes("what do ya want for nothing?"))),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Auth, ChildAndParentProofsDiffer)
{
    const Key key = test_key();
    const Nonce parent = test_nonce(1), child = test_nonce(100);
    EXPECT_FALSE(macs_equal(child_proof(key, parent, child, 5), parent_proof(key, parent, child, 5)));
}

TEST(Auth, ProofsAreDeterministicSoBothSidesAgree)
{
    const Key key = test_key();
    const Nonce parent = test_nonce(1), child = test_nonce(100);
    EXPECT_TRUE(macs_equal(child_proof(key, parent, child, 5), child_proof(key, parent, child, 5)));
    EXPECT_TRUE(macs_equal(parent_proof(key, parent, child, 5), parent_proof(key, parent, child, 5)));
}

TEST(Auth, ProofsDependOnEveryInput)
{
    const Key key = test_key();
    Key other_key = key;
    other_key[31] ^= 1;
    const Nonce parent = test_nonce(1), child = test_nonce(100);
    Nonce other_parent = parent, other_child = child;
    other_parent[0] ^= 0x80;
    other_child[31] ^= 0x01;

    for (auto proof : {&child_proof, &parent_proof}) {
        const Mac base = proof(key, parent, child, 5);
        EXPECT_FALSE(macs_equal(base, proof(other_key, parent, child, 5)));
        EXPECT_FALSE(macs_equal(base, proof(key, other_parent, child, 5)));
        EXPECT_FALSE(macs_equal(base, proof(key, parent, other_child, 5)));
        EXPECT_FALSE(macs_equal(base, proof(key, parent, child, 6)));
        EXPECT_FALSE(macs_equal(base, proof(key, parent, child, 5ULL << 32)));
        EXPECT_FALSE(macs_equal(base, proof(key, child, parent, 5))); // nonces swapped
    }
}

TEST(Auth, MacsEqualComparesEveryByte)
{
    Mac a{}, b{};
    a.fill(0x5a);
    b.fill(0x5a);
    EXPECT_TRUE(macs_equal(a, b));
    b[mac_size - 1] ^= 1;
    EXPECT_FALSE(macs_equal(a, b));
}

TEST(Auth, GeneratedKeysAndNoncesAreRandom)
{
    EXPECT_NE(generate_key(), generate_key());
    EXPECT_NE(generate_nonce(), generate_nonce());
}

TEST(Auth, KeyHexRoundTrips)
{
    const Key key = generate_key();
    const std::string hex = to_hex(key);
    EXPECT_EQ(hex.size(), 2 * key_size);
    auto parsed = key_from_hex(hex);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    EXPECT_EQ(*parsed, key);
}

TEST(Auth, KeyHexAcceptsUppercase)
{
    const Key key = test_key();
    std::string hex = to_hex(key);
    for (char& c : hex)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    auto parsed = key_from_hex(hex);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    EXPECT_EQ(*parsed, key);
}

TEST(Auth, KeyHexRejectsWrongLength)
{
    const std::string hex = to_hex(test_key());
    EXPECT_FALSE(key_from_hex(hex.substr(0, 62)).ok());
    EXPECT_FALSE(key_from_hex(hex + "00").ok());
    EXPECT_FALSE(key_from_hex("").ok());
}

TEST(Auth, KeyHexErrorNeverEchoesTheSecret)
{
    std::string hex = to_hex(test_key());
    hex[10] = 'g';
    auto parsed = key_from_hex(hex);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.error().message.find(hex.substr(0, 8)), std::string::npos) << parsed.error().message;
    EXPECT_NE(parsed.error().message.find("position 11"), std::string::npos) << parsed.error().message;

    auto short_key = key_from_hex(hex.substr(0, 40));
    ASSERT_FALSE(short_key.ok());
    EXPECT_EQ(short_key.error().message.find(hex.substr(0, 8)), std::string::npos);
}

} // namespace
} // namespace canopy::auth
