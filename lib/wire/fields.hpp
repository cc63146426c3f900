// How a message's fields travel. Each message lists its fields once, in a `fields(archive)` member (in the manner
// of Thallium's serialize(Archive&)); the archives here turn that one list into its encoder and its decoder.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "util/result.hpp"
#include "wire/codec.hpp"

// A message's (or a nested struct's) fields, listed once in the order they travel.
#define CANOPY_WIRE_FIELDS(...)                                                                                  \
    template <typename Archive>                                                                                  \
    void fields(Archive& archive)                                                                                \
    {                                                                                                            \
        archive(__VA_ARGS__);                                                                                    \
    }

namespace canopy::wire {

class Encoding;
class Decoding;

// A type whose fields travel: it has `template <class Archive> void fields(Archive&)`.
template <typename T>
concept HasFields = requires(T& value, Encoding& archive) { value.fields(archive); };

// An enum that travels as one byte, with the largest value a decoder accepts and its name for errors:
// `constexpr EnumLimit wire_limit(Enum)` found by argument-dependent lookup.
struct EnumLimit {
    std::uint8_t max = 0;
    const char* name = "";
    std::uint8_t min = 0;
};
template <typename E>
concept WireEnum = std::is_enum_v<E> && requires(E value) {
    { wire_limit(value) } -> std::same_as<EnumLimit>;
};

// The fewest bytes one element of a list takes on the wire, so a hostile count is refused before anything is
// allocated for it. One byte unless a type says otherwise.
template <typename T>
inline constexpr std::size_t min_wire_size = 1;

// Writes every field in the order listed.
class Encoding {
public:
    explicit Encoding(Writer& writer) : writer_(writer) {}
    template <typename... Fields>
    void operator()(const Fields&... fields)
    {
        (put(fields), ...);
    }
    Writer& writer() { return writer_; }

private:
    void put(std::uint64_t value) { writer_.varint(value); }
    void put(std::uint32_t value) { writer_.varint(value); }
    void put(std::int64_t value) { writer_.i64(value); }
    void put(std::int32_t value) { writer_.i64(value); }
    void put(std::uint8_t value) { writer_.u8(value); }
    void put(bool value) { writer_.boolean(value); }
    void put(double value) { writer_.f64(value); }
    void put(const std::string& value) { writer_.string(value); }
    void put(const std::vector<std::uint8_t>& value) { writer_.bytes(value); }
    void put(std::span<const std::uint8_t> value) { writer_.bytes(value); }
    void put(const std::array<std::uint8_t, 32>& value) { writer_.raw(value); }
    template <WireEnum E>
    void put(E value)
    {
        writer_.u8(static_cast<std::uint8_t>(value));
    }
    template <typename A, typename B>
    void put(const std::pair<A, B>& value)
    {
        put(value.first);
        put(value.second);
    }
    template <typename T>
    void put(const std::vector<T>& list)
    {
        writer_.varint(list.size());
        for (const auto& item : list)
            put(item);
    }
    template <HasFields T>
    void put(const T& value)
    {
        // Encoding only reads: fields() is written once for both directions, so it is not const.
        const_cast<T&>(value).fields(*this);
    }
    // Types with an encoding of their own (wire_put(Writer&, const T&), found by argument-dependent lookup).
    template <typename T>
        requires requires(Writer& w, const T& v) { wire_put(w, v); }
    void put(const T& value)
    {
        wire_put(writer_, value);
    }

    Writer& writer_;
};

// Reads every field in the order listed. A short input fails the reader; a value a field cannot take (an enum
// out of range, a custom field's check) records the first error, which decode() returns.
class Decoding {
public:
    Decoding(Reader& reader, const char* message) : reader_(reader), message_(message) {}
    // Forwarding references: a field adapter (HostList{hosts}) arrives as a temporary.
    template <typename... Fields>
    void operator()(Fields&&... fields)
    {
        (get(fields), ...);
    }
    Reader& reader() { return reader_; }
    void fail(Error error)
    {
        if (!error_)
            error_ = std::move(error);
        reader_.fail();
    }
    const std::optional<Error>& error() const { return error_; }
    const char* message() const { return message_; }

private:
    void get(std::uint64_t& value) { value = reader_.varint(); }
    void get(std::uint32_t& value) { value = static_cast<std::uint32_t>(reader_.varint()); }
    void get(std::int64_t& value) { value = reader_.i64(); }
    void get(std::int32_t& value) { value = static_cast<std::int32_t>(reader_.i64()); }
    void get(std::uint8_t& value) { value = reader_.u8(); }
    void get(bool& value) { value = reader_.boolean(); }
    void get(double& value) { value = reader_.f64(); }
    void get(std::string& value) { value = reader_.string(); }
    void get(std::vector<std::uint8_t>& value) { value = reader_.bytes(); }
    // A view into the frame being decoded, not a copy: bulk data (staged files) is written from where it arrived.
    void get(std::span<const std::uint8_t>& value) { value = reader_.bytes_view(); }
    void get(std::array<std::uint8_t, 32>& value) { reader_.raw(value); }
    template <WireEnum E>
    void get(E& value)
    {
        auto byte = reader_.u8();
        auto limit = wire_limit(value);
        if (reader_.ok() && (byte < limit.min || byte > limit.max))
            fail(make_error("{} names unknown {} {}", message_, limit.name, byte));
        value = static_cast<E>(byte);
    }
    template <typename A, typename B>
    void get(std::pair<A, B>& value)
    {
        get(value.first);
        get(value.second);
    }
    template <typename T>
    void get(std::vector<T>& list)
    {
        auto count = reader_.varint();
        if (!reader_.ok())
            return;
        if (count > reader_.remaining() / min_wire_size<T>) {
            fail(make_error("{} carries a list of {} items in {} bytes", message_, count, reader_.remaining()));
            return;
        }
        list.resize(count);
        for (auto& item : list) {
            if (!reader_.ok())
                return;
            get(item);
        }
    }
    template <HasFields T>
    void get(T& value)
    {
        value.fields(*this);
    }
    template <typename T>
        requires requires(Decoding& d, T& v) { wire_get(d, v); }
    void get(T& value)
    {
        wire_get(*this, value);
    }

    Reader& reader_;
    const char* message_;
    std::optional<Error> error_;
};

// A struct's fields as bytes on their own, with no frame around them: a routed request's or reply's payload.
template <HasFields T>
std::vector<std::uint8_t> encode_fields(const T& value)
{
    Writer writer;
    Encoding encoding(writer);
    encoding(value);
    return writer.take();
}

// Reads what encode_fields wrote; a short input, trailing bytes or a value a field refuses is an error naming
// `what`. The struct's own check(), if it has one, runs last. Views (BytesView fields) point into `bytes`.
template <HasFields T>
Result<T> decode_fields(std::span<const std::uint8_t> bytes, const char* what)
{
    T value;
    Reader reader(bytes);
    Decoding decoding(reader, what);
    decoding(value);
    if (decoding.error())
        return *decoding.error();
    if (!reader.ok() || !reader.at_end())
        return make_error("malformed {} ({} bytes)", what, bytes.size());
    if constexpr (requires { value.check(); }) {
        if (auto checked = value.check(); !checked)
            return checked.error();
    }
    return value;
}

} // namespace canopy::wire
