// Sealing and checking bulk messages with libsodium: AES-256-GCM with the payload as associated data (a GMAC), or
// keyed BLAKE2b, for the payload; keyed BLAKE2b for the link MAC.
#include "fabric/sealed_message.hpp"

#include <sodium.h>

#include <cstring>
#include <string>

namespace canopy::fabric {
namespace {

Key derive(const auth::Key& job_key, const std::string& context)
{
    Key key;
    crypto_generichash(key.data(), key.size(), reinterpret_cast<const unsigned char*>(context.data()), context.size(),
                       job_key.data(), job_key.size());
    return key;
}

bool gmac_available()
{
    static const bool available = sodium_init() >= 0 && crypto_aead_aes256gcm_is_available();
    return available;
}

std::array<std::uint8_t, crypto_aead_aes256gcm_NPUBBYTES> nonce_of(std::uint64_t message)
{
    std::array<std::uint8_t, crypto_aead_aes256gcm_NPUBBYTES> nonce{};
    std::memcpy(nonce.data(), &message, sizeof message);
    return nonce;
}

Tag blake2b_tag(const Key& key, std::uint64_t message, std::span<const std::uint8_t> payload)
{
    crypto_generichash_state state;
    crypto_generichash_init(&state, key.data(), key.size(), 16);
    crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(&message), sizeof message);
    crypto_generichash_update(&state, payload.data(), payload.size());
    Tag tag;
    crypto_generichash_final(&state, tag.data(), tag.size());
    return tag;
}

std::array<std::uint8_t, 16> link_mac(const Key& key, const SealHeader& header)
{
    SealHeader covered = header;
    covered.mac = {};
    std::array<std::uint8_t, 16> mac;
    crypto_generichash(mac.data(), mac.size(), reinterpret_cast<const unsigned char*>(&covered), sizeof covered,
                       key.data(), key.size());
    return mac;
}

} // namespace

Key payload_key(const auth::Key& job_key) { return derive(job_key, "canopy fabric payload"); }

Key link_key(const auth::Key& job_key, long parent, long child)
{
    return derive(job_key, "canopy fabric link " + std::to_string(parent) + " -> " + std::to_string(child));
}

PayloadTag tag_payload(const Key& key, std::uint64_t message, std::span<const std::uint8_t> payload)
{
    PayloadTag tag;
    if (!gmac_available()) {
        tag.kind = TagKind::blake2b;
        tag.tag = blake2b_tag(key, message, payload);
        return tag;
    }
    auto nonce = nonce_of(message);
    unsigned long long length = 0;
    crypto_aead_aes256gcm_encrypt(tag.tag.data(), &length, nullptr, 0, payload.data(), payload.size(), nullptr,
                                  nonce.data(), key.data());
    return tag;
}

SealHeader seal(const Key& link, std::uint64_t sequence, std::uint64_t message, std::size_t length,
                const PayloadTag& tag)
{
    SealHeader header;
    header.magic = seal_magic;
    header.length = static_cast<std::uint32_t>(length);
    header.sequence = sequence;
    header.message = message;
    header.tag_kind = tag.kind;
    header.tag = tag.tag;
    header.mac = link_mac(link, header);
    return header;
}

Result<PayloadTag> unseal(const Key& link, const Key& payload, const SealHeader& header,
                          std::span<const std::uint8_t> message)
{
    if (header.magic != seal_magic)
        return make_error("not a canopy bulk message");
    auto expected = link_mac(link, header);
    if (sodium_memcmp(expected.data(), header.mac.data(), expected.size()) != 0)
        return make_error("message {} does not carry this link's MAC", header.sequence);
    if (header.length != message.size())
        return make_error("message {} says {} bytes but has {}", header.sequence, header.length, message.size());
    bool intact = false;
    if (header.tag_kind == TagKind::blake2b) {
        Tag tag = blake2b_tag(payload, header.message, message);
        intact = sodium_memcmp(tag.data(), header.tag.data(), tag.size()) == 0;
    } else if (header.tag_kind == TagKind::gmac) {
        if (!gmac_available())
            return make_error("message {} is tagged with AES-GCM, which this CPU cannot check; run the job with "
                              "--fabric off",
                              header.sequence);
        auto nonce = nonce_of(header.message);
        unsigned long long length = 0;
        intact = crypto_aead_aes256gcm_decrypt(nullptr, &length, nullptr, header.tag.data(), header.tag.size(),
                                               message.data(), message.size(), nonce.data(), payload.data()) == 0;
    } else {
        return make_error("message {} has an unknown kind of tag", header.sequence);
    }
    if (!intact)
        return make_error("message {} was changed on the way (its payload does not match its tag)", header.sequence);
    return PayloadTag{header.tag_kind, header.tag};
}

} // namespace canopy::fabric
