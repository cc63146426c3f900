// The ranks' socket protocol (CANOPY_AGENT_SOCKET, docs/libcanopy.md), described once: libcanopy sends these
// requests, canopyd's app server and store cache read them, and the root's JobStore serves the store ones. Each
// request names its operation and its reply type, and lists its fields once (CANOPY_WIRE_FIELDS); encode_fields
// and decode_fields turn that list into bytes and back.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "util/result.hpp"
#include "wire/fields.hpp"

namespace canopy::wire {

enum class RankSocketOp : std::uint8_t {
    mark = 1,   // a phase mark; no reply
    set = 2,
    get = 3,
    add = 4,
    compare_set = 5,
    check = 6,
    delete_key = 7,
    num_keys = 8,
    wait = 9,
    // 10 was the root's invalidation of a daemon's cached key: a routed request now (wire::StoreInvalidation).
};

enum class RankSocketAnswer : std::uint8_t { ok = 0, not_found = 1, error = 2, timeout = 3 };
constexpr EnumLimit wire_limit(RankSocketAnswer)
{
    return {static_cast<std::uint8_t>(RankSocketAnswer::timeout), "store answer"};
}

// Every frame, both ways: u32 length of what follows | u8 operation (a request) or answer (a reply) | u64 id |
// body (the request's or reply's fields), little-endian. A mark is never answered, so its id is 0.
inline constexpr std::size_t rank_frame_header = 4 + 1 + 8;
inline constexpr std::uint32_t max_rank_frame = 256u << 20;   // the largest frame either side may send

struct RankFrame {
    std::uint8_t code = 0;   // RankSocketOp or RankSocketAnswer
    std::uint64_t id = 0;
    std::vector<std::uint8_t> body;
};

std::vector<std::uint8_t> encode_rank_frame(std::uint8_t code, std::uint64_t id, std::span<const std::uint8_t> body);
// The length a frame's first four bytes announce.
std::uint32_t rank_frame_length(std::span<const std::uint8_t, 4> prefix);
// A frame's bytes after its length: its code, id and body; an error when they cannot hold a header.
Result<RankFrame> decode_rank_frame(std::span<const std::uint8_t> after_length);
// One frame from the front of a stream: the bytes it used, nothing while it is incomplete, an error when its
// length cannot be a frame's.
Result<std::optional<std::size_t>> next_rank_frame(std::span<const std::uint8_t> stream, RankFrame& frame);

// The protocol's own field shapes, kept for the clients that already speak it: a fixed u32, a text sized by a
// u32, a u32-counted list of such texts, and a text that runs to the end of the body (always the last field).
struct FixedU32 {
    std::uint32_t& value;
};
struct SizedText {
    std::string& text;
};
struct SizedTexts {
    std::vector<std::string>& texts;
};
struct RestText {
    std::string& text;
};
void wire_put(Writer& writer, const FixedU32& field);
void wire_put(Writer& writer, const SizedText& field);
void wire_put(Writer& writer, const SizedTexts& field);
void wire_put(Writer& writer, const RestText& field);
void wire_get(Decoding& decoding, FixedU32& field);
void wire_get(Decoding& decoding, SizedText& field);
void wire_get(Decoding& decoding, SizedTexts& field);
void wire_get(Decoding& decoding, RestText& field);

// A phase mark: which rank, when (Unix ns), how long (ns, 0 for an instant), and its name.
struct MarkRequest {
    static constexpr RankSocketOp op = RankSocketOp::mark;
    static constexpr const char* name = "phase mark";
    std::uint32_t rank = 0;
    std::int64_t time_ns = 0;
    std::int64_t duration_ns = 0;
    std::string label;

    CANOPY_WIRE_FIELDS(FixedU32{rank}, time_ns, duration_ns, RestText{label})
};

// The store's answers: a value, a count (add, num_keys), a flag (check, delete), nothing (set, wait), and the body
// of an `error` answer.
struct StoreValue {
    static constexpr const char* name = "store value";
    std::string value;

    CANOPY_WIRE_FIELDS(RestText{value})
};
struct StoreCount {
    static constexpr const char* name = "store count";
    std::int64_t value = 0;

    CANOPY_WIRE_FIELDS(value)
};
struct StoreFlag {
    static constexpr const char* name = "store flag";
    bool value = false;

    CANOPY_WIRE_FIELDS(value)
};
struct StoreDone {
    static constexpr const char* name = "store acknowledgement";

    CANOPY_WIRE_FIELDS()
};
struct StoreFailure {
    static constexpr const char* name = "store error";
    std::string message;

    CANOPY_WIRE_FIELDS(RestText{message})
};

// The store's operations (torch's Store: set, get, add, compareSet, check, deleteKey, getNumKeys, wait). A timeout
// is in ms: 0 answers at once, store_wait_forever waits for ever.
inline constexpr std::uint32_t store_wait_forever = 0xFFFFFFFF;

struct StoreSet {
    static constexpr RankSocketOp op = RankSocketOp::set;
    static constexpr const char* name = "store set";
    using Reply = StoreDone;
    std::string key;
    std::string value;

    CANOPY_WIRE_FIELDS(SizedText{key}, RestText{value})
};
struct StoreGet {
    static constexpr RankSocketOp op = RankSocketOp::get;
    static constexpr const char* name = "store get";
    using Reply = StoreValue;
    std::uint32_t timeout_ms = 0;
    std::string key;

    CANOPY_WIRE_FIELDS(FixedU32{timeout_ms}, RestText{key})
};
struct StoreAdd {
    static constexpr RankSocketOp op = RankSocketOp::add;
    static constexpr const char* name = "store add";
    using Reply = StoreCount;
    std::int64_t delta = 0;
    std::string key;

    CANOPY_WIRE_FIELDS(delta, RestText{key})
};
struct StoreCompareSet {
    static constexpr RankSocketOp op = RankSocketOp::compare_set;
    static constexpr const char* name = "store compare-set";
    using Reply = StoreValue;
    std::string key;
    std::string expected;
    std::string desired;

    CANOPY_WIRE_FIELDS(SizedText{key}, SizedText{expected}, RestText{desired})
};
struct StoreCheck {
    static constexpr RankSocketOp op = RankSocketOp::check;
    static constexpr const char* name = "store check";
    using Reply = StoreFlag;
    std::vector<std::string> keys;

    CANOPY_WIRE_FIELDS(SizedTexts{keys})
};
struct StoreDelete {
    static constexpr RankSocketOp op = RankSocketOp::delete_key;
    static constexpr const char* name = "store delete";
    using Reply = StoreFlag;
    std::string key;

    CANOPY_WIRE_FIELDS(RestText{key})
};
struct StoreNumKeys {
    static constexpr RankSocketOp op = RankSocketOp::num_keys;
    static constexpr const char* name = "store key count";
    using Reply = StoreCount;

    CANOPY_WIRE_FIELDS()
};
struct StoreWait {
    static constexpr RankSocketOp op = RankSocketOp::wait;
    static constexpr const char* name = "store wait";
    using Reply = StoreDone;
    std::uint32_t timeout_ms = 0;
    std::vector<std::string> keys;

    CANOPY_WIRE_FIELDS(FixedU32{timeout_ms}, SizedTexts{keys})
};

// Every store request, for the decoder and the round-trip test.
#define CANOPY_STORE_REQUESTS(X)                                                                                 \
    X(StoreSet) X(StoreGet) X(StoreAdd) X(StoreCompareSet) X(StoreCheck) X(StoreDelete) X(StoreNumKeys) X(StoreWait)

using StoreOperation =
    std::variant<StoreSet, StoreGet, StoreAdd, StoreCompareSet, StoreCheck, StoreDelete, StoreNumKeys, StoreWait>;

// A store request as a socket carried it; an error naming the operation when it is unknown or malformed.
Result<StoreOperation> decode_store_operation(std::uint8_t op, std::span<const std::uint8_t> body);

} // namespace canopy::wire
