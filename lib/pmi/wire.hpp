// The simple PMI wire protocols (PMI-1 lines, PMI-2 length-prefixed commands) as a pure codec: bytes in,
// commands out, and commands to bytes. No I/O, so it can be unit-tested and fuzzed on its own.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/result.hpp"

namespace canopy::pmi {

enum class Wire { v1, v2 };

// One command: its name (the value of cmd=, or of mcmd= for PMI-1's multi-line spawn) and its other fields in the
// order they came.
struct Command {
    std::string name;
    std::vector<std::pair<std::string, std::string>> fields;

    // The first value of `key`, or nullopt.
    std::optional<std::string_view> find(std::string_view key) const;
    Command& add(std::string key, std::string value);
};

// What a connection may send; breaking one is an error naming the limit.
struct Limits {
    std::size_t max_message = 64 * 1024;   // one PMI-1 line (or multi-line command) or one PMI-2 command
    std::size_t max_fields = 1024;
};

// Splits one connection's byte stream into commands. A connection starts in PMI-1's line form; PMI-2 clients
// say `cmd=init pmi_version=2` that way and switch to length-prefixed commands once the server answers, which
// the server marks with use_v2(). A stream that opens with a length prefix is taken as PMI-2 straight away.
class Decoder {
public:
    explicit Decoder(Limits limits = {}) : limits_(limits) {}

    void feed(std::string_view bytes) { buffer_.append(bytes); }

    // The next whole command; nullopt when more bytes are needed. After an error the stream cannot be
    // resynchronised and the decoder gives only that error.
    Result<std::optional<Command>> next();

    void use_v2() { wire_ = Wire::v2; }
    Wire wire() const { return wire_; }
    // Bytes received but not yet part of a whole command.
    std::size_t buffered() const { return buffer_.size(); }

private:
    Result<std::optional<Command>> next_line();
    Result<std::optional<Command>> next_framed();

    Limits limits_;
    Wire wire_ = Wire::v1;
    bool framing_known_ = false;
    std::string buffer_;
    std::size_t scanned_ = 0;   // PMI-1: bytes of buffer_ known to hold no end of the current command
    std::optional<Error> failed_;
};

// Parses one PMI-1 line (no newline): space-separated key=value pairs, cmd= (or mcmd=) first.
Result<Command> parse_v1(std::string_view line, const Limits& limits = {});
// Parses one PMI-2 command body (after the length prefix): key=value pairs each ended by ';', a ';' inside a
// value written twice.
Result<Command> parse_v2(std::string_view body, const Limits& limits = {});

// `cmd=NAME k=v ...\n`. PMI-1 values cannot hold whitespace (space, tab, CR, LF); encode_v1 replaces it with '_'.
std::string encode_v1(const Command& command);
// The 6-character length prefix, then `cmd=NAME;k=v;...;`.
std::string encode_v2(const Command& command);
std::string encode(Wire wire, const Command& command);

} // namespace canopy::pmi
