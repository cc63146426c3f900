// HMAC-SHA256 challenge-response with libsodium for authenticating tree connections.
#include "wire/auth.hpp"

#include <cstdio>
#include <cstdlib>
#include <vector>

// libsodium rather than OpenSSL: OpenSSL 3 spends about 2 ms per process initialising its providers and
// random generator, a third of a 256-node launch's CPU time; libsodium starts in microseconds.
#include <sodium.h>

namespace canopy::auth {
namespace {

void ensure_sodium()
{
    static const bool ready = [] {
        if (sodium_init() < 0) {
            std::fprintf(stderr, "canopy: libsodium failed to initialise (is /dev/urandom readable?); aborting\n");
            std::abort();
        }
        return true;
    }();
    (void)ready;
}

template <std::size_t N>
std::array<std::uint8_t, N> random_bytes()
{
    ensure_sodium();
    std::array<std::uint8_t, N> out{};
    randombytes_buf(out.data(), out.size());   // the kernel's CSPRNG (getrandom)
    return out;
}

int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

// label || 0 || parent_nonce || child_nonce || position (8 bytes, big-endian). The labels differ so
// a child proof is never a valid parent proof.
Mac proof(const Key& key, std::string_view label, const Nonce& parent_nonce, const Nonce& child_nonce,
          std::uint64_t position)
{
    std::vector<std::uint8_t> message(label.begin(), label.end());
    message.push_back(0);
    message.insert(message.end(), parent_nonce.begin(), parent_nonce.end());
    message.insert(message.end(), child_nonce.begin(), child_nonce.end());
    for (int shift = 56; shift >= 0; shift -= 8)
        message.push_back(static_cast<std::uint8_t>(position >> shift));
    return hmac_sha256(key, message);
}

} // namespace

Key generate_key() { return random_bytes<key_size>(); }

Nonce generate_nonce() { return random_bytes<nonce_size>(); }

std::string to_hex(std::span<const std::uint8_t> bytes)
{
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const std::uint8_t b : bytes) {
        out.push_back(digits[b >> 4]);
        out.push_back(digits[b & 0x0f]);
    }
    return out;
}

Result<Key> key_from_hex(std::string_view hex)
{
    if (hex.size() != key_size * 2)
        return make_error("authentication key must be {} hexadecimal digits but has {} characters; "
                          "use the key canopy generated for this job",
                          key_size * 2, hex.size());
    Key key{};
    for (std::size_t i = 0; i < key_size; ++i) {
        const int high = hex_value(hex[2 * i]);
        const int low = hex_value(hex[2 * i + 1]);
        if (high < 0 || low < 0)
            return make_error("authentication key has a character that is not a hexadecimal digit at "
                              "position {}; use the key canopy generated for this job",
                              high < 0 ? 2 * i + 1 : 2 * i + 2);
        key[i] = static_cast<std::uint8_t>(high << 4 | low);
    }
    return key;
}

Mac hmac_sha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> data)
{
    ensure_sodium();
    Mac out{};
    crypto_auth_hmacsha256_state state;
    crypto_auth_hmacsha256_init(&state, key.data(), key.size());
    crypto_auth_hmacsha256_update(&state, data.data(), data.size());
    crypto_auth_hmacsha256_final(&state, out.data());
    sodium_memzero(&state, sizeof state);
    return out;
}

Mac child_proof(const Key& key, const Nonce& parent_nonce, const Nonce& child_nonce, std::uint64_t position)
{
    return proof(key, "canopy-auth/1 child", parent_nonce, child_nonce, position);
}

Mac parent_proof(const Key& key, const Nonce& parent_nonce, const Nonce& child_nonce, std::uint64_t position)
{
    return proof(key, "canopy-auth/1 parent", parent_nonce, child_nonce, position);
}

bool macs_equal(const Mac& a, const Mac& b) { return sodium_memcmp(a.data(), b.data(), mac_size) == 0; }

} // namespace canopy::auth
