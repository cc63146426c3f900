// The frames a rank exchanges with its canopyd over CANOPY_AGENT_SOCKET (docs/libcanopy.md): encoding and
// parsing only, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/failure.hpp"
#include "wire/rank_socket.hpp"

namespace canopy::api::agent {

using Op = wire::RankSocketOp;
using ReplyStatus = wire::RankSocketAnswer;

// Request: u32 len | u8 op | u64 id | payload (len counts every byte after itself; all little-endian).
std::string encode_request(Op op, std::uint64_t id, std::string_view payload);

// MARK carries no reply, so its id is 0.
std::string encode_mark(std::uint32_t rank, std::int64_t time_ns, std::int64_t duration_ns, std::string_view name);

std::string set_payload(std::string_view key, std::string_view value);
std::string get_payload(std::uint32_t timeout_ms, std::string_view key);
std::string add_payload(std::int64_t delta, std::string_view key);
std::string compare_set_payload(std::string_view key, std::string_view expected, std::string_view desired);
std::string check_payload(const std::vector<std::string>& keys);
std::string wait_payload(std::uint32_t timeout_ms, const std::vector<std::string>& keys);

// Reply: u32 len | u8 status | u64 id | payload.
struct Reply {
    std::uint8_t status = 0;
    std::uint64_t id = 0;
    std::string payload;
};

// Parses one reply from the front of `buffer`: the bytes it used, std::nullopt while the frame is
// incomplete, a Failure if the frame cannot be a reply (shorter than its header).
Outcome<std::optional<std::size_t>> parse_reply(std::string_view buffer, Reply& reply);

// Payload readers: an ADD or NUM_KEYS answer (i64), a CHECK or DELETE answer (u8).
Outcome<std::int64_t> reply_i64(const Reply& reply);
Outcome<bool> reply_flag(const Reply& reply);

// The largest frame either side may send (a value in the store is at most a little less).
constexpr std::uint32_t max_frame = 256u << 20;

} // namespace canopy::api::agent
