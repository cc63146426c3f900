// PMIx 4's connect-ack, the first thing a PMIx client sends: how the relay reads it before any server runs.
#pragma once

#include <cstddef>
#include <span>

#include "util/result.hpp"

namespace canopy::connect_ack {

// A header {int32 pindex, uint32 tag, size_t nbytes, padded to 16 bytes} in the client's byte order, then `nbytes`
// of identity and credential.
inline constexpr std::size_t header_size = 16;
inline constexpr std::size_t max_body = 131072;   // PMIX_MAX_CRED_SIZE: PMIx refuses more anyway

// How many bytes follow `header`, or why the connection should be dropped.
Result<std::size_t> body_size(std::span<const char, header_size> header);

} // namespace canopy::connect_ack
