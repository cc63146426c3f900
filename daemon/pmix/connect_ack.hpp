// PMIx 4's connect-ack, the first thing a PMIx client sends: how the relay reads it before any server runs.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "util/result.hpp"

namespace canopy::connect_ack {

// A header {int32 pindex, uint32 tag, size_t nbytes, padded to 16 bytes} in the client's byte order, then `nbytes`
// of identity and credential.
inline constexpr std::size_t header_size = 16;
inline constexpr std::size_t max_body = 131072;   // PMIX_MAX_CRED_SIZE: PMIx refuses more anyway

// How many bytes follow `header`, or why the connection should be dropped.
Result<std::size_t> body_size(std::span<const char, header_size> header);

// The process a connect-ack introduces, when it is a simple client (a rank): the namespace and rank it claims,
// which PMIx then checks against the ranks registered with it.
struct Client {
    std::string nspace;
    long rank = 0;
};

// The client that `body` (what follows the header) names: its security module's name, a credential of a u32's
// count of bytes (network order), a type flag (0 for a simple client), then the namespace and a u32 rank. Nothing
// for a tool, a launcher or a body cut short.
std::optional<Client> client_of(std::span<const char> body);

} // namespace canopy::connect_ack
