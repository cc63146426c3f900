// Shared-secret HMAC-SHA256 challenge-response, so only daemons started for this job can join the tree.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "util/result.hpp"

namespace canopy::auth {

inline constexpr std::size_t key_size = 32, nonce_size = 32, mac_size = 32;
using Key = std::array<std::uint8_t, key_size>;
using Nonce = std::array<std::uint8_t, nonce_size>;
using Mac = std::array<std::uint8_t, mac_size>;

// From the OS random generator (getrandom, through libsodium); aborts with a message if it fails, since a guessable
// key would silently let anyone join.
Key generate_key();
Nonce generate_nonce();

std::string to_hex(std::span<const std::uint8_t> bytes); // lowercase
// Exactly 2 * key_size hex digits, either case. The error never echoes the input (it is a secret).
Result<Key> key_from_hex(std::string_view hex);

// The connecting child proves it knows the key; the parent then proves it too (mutual). Both are bound
// to both nonces and to the child's claimed tree position, so a proof cannot be replayed for another
// connection or position, and a parent cannot answer by reflecting the child's proof.
Mac child_proof(const Key& key, const Nonce& parent_nonce, const Nonce& child_nonce, std::uint64_t position);
Mac parent_proof(const Key& key, const Nonce& parent_nonce, const Nonce& child_nonce, std::uint64_t position);

bool macs_equal(const Mac& a, const Mac& b); // constant time

// Internal, exposed for the RFC 4231 test vectors.
Mac hmac_sha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> data);

} // namespace canopy::auth
