// Unit tests for the seal on fabric messages: a message checks only on its own link, in its own place, unchanged.
#include "fabric/sealed_message.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace canopy::fabric {
namespace {

class SealedMessage : public ::testing::Test {
protected:
    auth::Key job_{1, 2, 3};
    Key payload_ = payload_key(job_);
    Key link_ = link_key(job_, 0, 1);
    std::vector<std::uint8_t> message_ = std::vector<std::uint8_t>(100000, 7);
    PayloadTag tag_ = tag_payload(payload_, 42, message_);
    SealHeader header_ = seal(link_, 5, 42, message_.size(), tag_);
};

TEST_F(SealedMessage, AnIntactMessageChecksAndKeepsItsTag)
{
    auto checked = unseal(link_, payload_, header_, message_);
    ASSERT_TRUE(checked.ok()) << checked.error().message;
    EXPECT_EQ(checked->tag, tag_.tag);
    // Relayed with the same tag on the next link, it checks there too.
    Key next = link_key(job_, 1, 3);
    EXPECT_TRUE(unseal(next, payload_, seal(next, 0, 42, message_.size(), *checked), message_).ok());
}

TEST_F(SealedMessage, AChangedPayloadIsRefused)
{
    for (std::size_t at : {std::size_t{0}, message_.size() / 2, message_.size() - 1}) {
        auto changed = message_;
        changed[at] ^= 1;
        auto checked = unseal(link_, payload_, header_, changed);
        ASSERT_FALSE(checked.ok()) << at;
        EXPECT_NE(checked.error().message.find("changed on the way"), std::string::npos);
    }
}

TEST_F(SealedMessage, AChangedHeaderOrAnotherLinksKeyIsRefused)
{
    for (auto change : {+[](SealHeader& h) { ++h.sequence; }, +[](SealHeader& h) { ++h.message; },
                        +[](SealHeader& h) { h.tag[0] ^= 1; }, +[](SealHeader& h) { --h.length; },
                        +[](SealHeader& h) { h.tag_kind = TagKind::blake2b; }}) {
        SealHeader changed = header_;
        change(changed);
        EXPECT_FALSE(unseal(link_, payload_, changed, message_).ok());
    }
    EXPECT_FALSE(unseal(link_key(job_, 0, 2), payload_, header_, message_).ok());   // a sibling's link
    EXPECT_FALSE(unseal(link_, payload_key(auth::Key{9}), header_, message_).ok());  // another job
    SealHeader stranger = header_;
    stranger.magic = 0;
    EXPECT_FALSE(unseal(link_, payload_, stranger, message_).ok());
}

TEST_F(SealedMessage, TheSameBytesUnderAnotherNumberHaveAnotherTag)
{
    EXPECT_NE(tag_payload(payload_, 43, message_).tag, tag_.tag);
    EXPECT_EQ(tag_payload(payload_, 42, message_).tag, tag_.tag);
    std::vector<std::uint8_t> empty;
    auto empty_tag = tag_payload(payload_, 1, empty);
    EXPECT_TRUE(unseal(link_, payload_, seal(link_, 0, 1, 0, empty_tag), empty).ok());
}

} // namespace
} // namespace canopy::fabric
