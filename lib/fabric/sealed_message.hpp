// The seal on every bulk message a fabric carries (docs/fabric.md), so that data injected into an endpoint,
// corrupted, replayed or moved to another link is recognised before anything is written:
// - a payload tag, made once where the message is made (the root) under a key of the job's, and carried
//   unchanged down the tree: each node checks it in one pass and relays the message without redoing it. It is
//   AES-GCM's GMAC (7 GB/s here with AES-NI), or keyed BLAKE2b (1 GB/s) where the CPU lacks AES instructions;
// - a link MAC over the link's sequence number, the message's number and the tag, under a key of the link's own.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "util/result.hpp"
#include "wire/auth.hpp"

namespace canopy::fabric {

using Key = std::array<std::uint8_t, 32>;
using Tag = std::array<std::uint8_t, 16>;

enum class TagKind : std::uint8_t { gmac = 1, blake2b = 2 };

// In front of every message, in the byte order of the machine (both ends run the same build).
struct SealHeader {
    std::uint32_t magic = 0;
    std::uint32_t length = 0;     // the bytes that follow: one wire frame
    std::uint64_t sequence = 0;   // from 0 on each link
    std::uint64_t message = 0;    // the message's number where it was made, unique in the job
    TagKind tag_kind = TagKind::gmac;
    std::array<std::uint8_t, 7> unused{};
    Tag tag{};
    std::array<std::uint8_t, 16> mac{};
};
inline constexpr std::uint32_t seal_magic = 0x63616e66;   // "canf"

struct PayloadTag {
    TagKind kind = TagKind::gmac;
    Tag tag{};
};

// The job's key for payload tags, and the key of the link from tree position `parent` to `child`.
Key payload_key(const auth::Key& job_key);
Key link_key(const auth::Key& job_key, long parent, long child);

// Tags a payload made here; `message` must never repeat under one key.
PayloadTag tag_payload(const Key& key, std::uint64_t message, std::span<const std::uint8_t> payload);

SealHeader seal(const Key& link, std::uint64_t sequence, std::uint64_t message, std::size_t length,
                const PayloadTag& tag);

// Checks a received message: its header's MAC under the link's key, then its payload against the tag. The
// sequence number is the caller's to check (completions may come out of order). Returns the tag, to relay with.
Result<PayloadTag> unseal(const Key& link, const Key& payload, const SealHeader& header,
                          std::span<const std::uint8_t> message);

} // namespace canopy::fabric
