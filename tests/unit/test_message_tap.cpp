// The PMIx message tap on its own: framing of a rank's byte stream however it is cut, and which messages it hands
// over (those starting with the prefix, up to its size bound).
#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pmix/message_tap.hpp"

namespace canopy {
namespace {

std::string message(const std::string& payload)
{
    std::string framed(PmixMessageTap::header_size, '\0');
    std::uint32_t nbytes = htonl(static_cast<std::uint32_t>(payload.size()));
    std::uint32_t tag = htonl(7);
    std::memcpy(framed.data() + 4, &tag, sizeof tag);
    std::memcpy(framed.data() + 8, &nbytes, sizeof nbytes);
    return framed + payload;
}

struct Tapped {
    std::vector<std::string> seen;
    PmixMessageTap tap{std::string("\x02\x12", 2), [this](std::string_view payload) { seen.emplace_back(payload); }};
};

TEST(PmixMessageTap, HandsOverOnlyMessagesThatStartWithThePrefix)
{
    Tapped t;
    std::string stream = message(std::string("\x02\x12", 2) + "cleanup") + message("\x02\x03other") + message("") +
                         message(std::string("\x02\x12", 2) + "again") + message("\x02");
    t.tap.feed(stream.data(), stream.size());
    EXPECT_EQ(t.seen, (std::vector<std::string>{std::string("\x02\x12", 2) + "cleanup",
                                                std::string("\x02\x12", 2) + "again"}));
}

TEST(PmixMessageTap, FramesTheSameWhateverTheReadsCutTheStreamInto)
{
    std::string stream;
    for (int i = 0; i < 5; ++i)
        stream += message(std::string("\x02\x12", 2) + std::string(static_cast<std::size_t>(i) * 40, 'x')) +
                  message(std::string(100, 'y'));
    for (std::size_t piece : {1u, 2u, 3u, 15u, 16u, 17u, 1000u}) {
        Tapped t;
        for (std::size_t at = 0; at < stream.size(); at += piece)
            t.tap.feed(stream.data() + at, std::min(piece, stream.size() - at));
        ASSERT_EQ(t.seen.size(), 5u) << "pieces of " << piece;
        EXPECT_EQ(t.seen[4].size(), 2u + 160u) << "pieces of " << piece;
    }
}

TEST(PmixMessageTap, PassesLargeMessagesByAndStaysInStep)
{
    Tapped t;
    std::string big = message(std::string("\x02\x12", 2) + std::string(PmixMessageTap::max_message, 'z'));
    std::string after = message(std::string("\x02\x12", 2) + "small");
    t.tap.feed(big.data(), big.size());
    t.tap.feed(after.data(), after.size());
    EXPECT_EQ(t.seen, (std::vector<std::string>{std::string("\x02\x12", 2) + "small"}));
}

// The relay's check of a commit's size: each message that starts with a checked prefix is shown, by its payload's
// size, as soon as its first bytes are fed; a refusal stops the stream within that feed.
TEST(PmixMessageTap, ShowsTheSizeOfEachMessageWithACheckedPrefixBeforeItPasses)
{
    std::string commit("\x02\x02", 2), publish("\x02\x06", 2);
    std::string stream = message(commit + "a") + message("\x02\x03other") + message(publish + std::string(300, 'b')) +
                         message(commit + std::string(5000, 'c'));
    for (std::size_t piece : {1u, 2u, 16u, 17u, 18u, 100u, 100000u}) {
        std::vector<std::pair<std::size_t, std::size_t>> sizes;
        PmixMessageTap tap("", nullptr);
        tap.check_sizes({commit, publish}, [&](std::size_t which, std::size_t bytes) {
            sizes.emplace_back(which, bytes);
            return bytes < 1000;
        });
        bool going = true;
        std::size_t last_start = 0, last_size = 0;
        for (std::size_t at = 0; at < stream.size() && going; at += piece) {
            last_start = at;
            last_size = std::min(piece, stream.size() - at);
            going = tap.feed(stream.data() + at, last_size);
        }
        EXPECT_FALSE(going) << "pieces of " << piece;
        EXPECT_EQ(sizes, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 3}, {1, 302}, {0, 5002}}))
            << "pieces of " << piece;
        // The feed refused is the one that completed the refused message's prefix: none of it may pass on.
        std::size_t prefix_end = stream.size() - 5002 + 1;
        EXPECT_TRUE(last_start <= prefix_end && prefix_end < last_start + last_size) << "pieces of " << piece;
        EXPECT_FALSE(tap.feed("x", 1)) << "a stopped stream stays stopped";
    }
}

} // namespace
} // namespace canopy
