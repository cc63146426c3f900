// Frame codec for the tree protocol: length-prefixed frames and a byte writer/reader. Does no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace canopy::wire {

// Header: 4-byte little-endian payload length, then 1 byte message type.
inline constexpr std::size_t header_size = 5;
// Before a peer has authenticated it may send only small frames, so a stranger cannot make us allocate.
inline constexpr std::uint32_t max_unauthenticated_frame = 512;
inline constexpr std::uint32_t max_frame = 64u << 20;

struct Frame {
    std::uint8_t type = 0;
    std::vector<std::uint8_t> payload;
};

// A frame where its bytes already are.
struct FrameView {
    std::uint8_t type = 0;
    std::span<const std::uint8_t> payload;
};

// Appends primitive values in canopy's wire encoding (little-endian, LEB128 varints).
class Writer {
public:
    void u8(std::uint8_t value);
    void u32(std::uint32_t value);
    void u64(std::uint64_t value);
    void i64(std::int64_t value);
    void varint(std::uint64_t value);
    void f64(double value);
    void boolean(bool value) { u8(value ? 1 : 0); }
    void bytes(std::span<const std::uint8_t> data);   // length-prefixed
    void string(std::string_view text);               // length-prefixed
    void raw(std::span<const std::uint8_t> data);     // no prefix
    void strings(const std::vector<std::string>& list);

    const std::vector<std::uint8_t>& data() const { return buffer_; }
    std::vector<std::uint8_t> take() { return std::move(buffer_); }

private:
    std::vector<std::uint8_t> buffer_;
};

// Reads what Writer wrote. A short or malformed input sets a sticky failure instead of throwing;
// callers check ok() once at the end, which keeps message decoders linear.
class Reader {
public:
    explicit Reader(std::span<const std::uint8_t> data) : data_(data) {}

    std::uint8_t u8();
    std::uint32_t u32();
    std::uint64_t u64();
    std::int64_t i64();
    std::uint64_t varint();
    double f64();
    bool boolean() { return u8() != 0; }
    std::vector<std::uint8_t> bytes();
    // The same bytes in place: valid while the input is.
    std::span<const std::uint8_t> bytes_view();
    std::string string();
    void raw(std::span<std::uint8_t> out);
    std::vector<std::string> strings();
    // Everything not read yet, with no length prefix (a payload's last field).
    std::vector<std::uint8_t> rest();
    std::size_t remaining() const { return data_.size() - offset_; }
    // A count that must fit the remaining input (each element takes at least one byte).
    std::size_t count();

    bool ok() const { return !failed_; }
    bool at_end() const { return offset_ == data_.size(); }
    void fail() { failed_ = true; }

private:
    bool take(std::size_t size);

    std::span<const std::uint8_t> data_;
    std::size_t offset_ = 0;
    bool failed_ = false;
};

std::vector<std::uint8_t> encode_frame(std::uint8_t type, std::span<const std::uint8_t> payload);
// A received frame encoded again unchanged: what a daemon relays to its parent or children.
inline std::vector<std::uint8_t> encode_frame(const Frame& frame) { return encode_frame(frame.type, frame.payload); }

// A frame written in place: its header, then the payload into the same writer, then its length filled in. One
// copy of the payload fewer than encode_frame.
void start_frame(Writer& writer, std::uint8_t type);
std::vector<std::uint8_t> finish_frame(Writer& writer);

// Exactly one whole frame, as encode_frame made it (a frame carried inside another message's payload).
Result<FrameView> view_frame(std::span<const std::uint8_t> bytes);
Result<Frame> read_frame(std::span<const std::uint8_t> bytes);

// Incremental frame splitter: feed bytes as they arrive, pull complete frames out.
class FrameDecoder {
public:
    explicit FrameDecoder(std::uint32_t max_payload) : max_payload_(max_payload) {}
    void set_max_payload(std::uint32_t max_payload) { max_payload_ = max_payload; }

    void feed(std::span<const std::uint8_t> data);
    // A frame, nothing yet (nullopt), or an error for an oversized frame (the stream is then unusable).
    Result<std::optional<Frame>> next();

    // A large frame is assembled in its own payload once its header is in. This is the part still missing: a
    // reader may read into it directly and then call filled(), sparing the bytes two copies through feed().
    // Empty when no large frame is partly in.
    std::span<std::uint8_t> payload_space();
    void filled(std::size_t size);

private:
    static constexpr std::size_t in_place_payload = 64 * 1024;   // frames this large are assembled in place

    std::vector<std::uint8_t> buffer_;
    std::size_t consumed_ = 0;
    std::optional<Frame> partial_;   // a large frame being assembled
    std::size_t partial_filled_ = 0;
    std::uint32_t max_payload_;
};

} // namespace canopy::wire
