// Encoding and parsing of the rank <-> canopyd frames; no I/O, so it is cheap to test on its own.
#include "api/agent_protocol.hpp"

#include <cstring>
#include <type_traits>

namespace canopy::api::agent {

namespace {

template <typename T>
void put_le(std::string& out, T value)
{
    auto bits = static_cast<std::make_unsigned_t<T>>(value);
    for (std::size_t i = 0; i < sizeof(T); ++i)
        out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

template <typename T>
T get_le(std::string_view in)
{
    std::make_unsigned_t<T> bits = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
        bits |= static_cast<std::make_unsigned_t<T>>(static_cast<unsigned char>(in[i])) << (8 * i);
    return static_cast<T>(bits);
}

void put_string(std::string& out, std::string_view s)
{
    put_le<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
    out.append(s);
}

void put_keys(std::string& out, const std::vector<std::string>& keys)
{
    put_le<std::uint32_t>(out, static_cast<std::uint32_t>(keys.size()));
    for (const auto& key : keys)
        put_string(out, key);
}

constexpr std::size_t reply_header = 4 + 1 + 8;

} // namespace

std::string encode_request(Op op, std::uint64_t id, std::string_view payload)
{
    std::string out;
    out.reserve(4 + 1 + 8 + payload.size());
    put_le<std::uint32_t>(out, static_cast<std::uint32_t>(1 + 8 + payload.size()));
    out.push_back(static_cast<char>(op));
    put_le<std::uint64_t>(out, id);
    out.append(payload);
    return out;
}

std::string encode_mark(std::uint32_t rank, std::int64_t time_ns, std::int64_t duration_ns, std::string_view name)
{
    std::string payload;
    payload.reserve(4 + 8 + 8 + name.size());
    put_le<std::uint32_t>(payload, rank);
    put_le<std::int64_t>(payload, time_ns);
    put_le<std::int64_t>(payload, duration_ns);
    payload.append(name);
    return encode_request(Op::mark, 0, payload);
}

std::string set_payload(std::string_view key, std::string_view value)
{
    std::string out;
    put_string(out, key);
    out.append(value);
    return out;
}

std::string get_payload(std::uint32_t timeout_ms, std::string_view key)
{
    std::string out;
    put_le<std::uint32_t>(out, timeout_ms);
    out.append(key);
    return out;
}

std::string add_payload(std::int64_t delta, std::string_view key)
{
    std::string out;
    put_le<std::int64_t>(out, delta);
    out.append(key);
    return out;
}

std::string compare_set_payload(std::string_view key, std::string_view expected, std::string_view desired)
{
    std::string out;
    put_string(out, key);
    put_string(out, expected);
    out.append(desired);
    return out;
}

std::string check_payload(const std::vector<std::string>& keys)
{
    std::string out;
    put_keys(out, keys);
    return out;
}

std::string wait_payload(std::uint32_t timeout_ms, const std::vector<std::string>& keys)
{
    std::string out;
    put_le<std::uint32_t>(out, timeout_ms);
    put_keys(out, keys);
    return out;
}

Outcome<std::optional<std::size_t>> parse_reply(std::string_view buffer, Reply& reply)
{
    if (buffer.size() < 4)
        return std::optional<std::size_t>{};
    auto len = get_le<std::uint32_t>(buffer);
    if (len < reply_header - 4 || len > max_frame)
        return fail(CANOPY_ERR_DAEMON, "canopyd sent a malformed reply ({} bytes); the daemon and libcanopy "
                    "may be from different canopy versions", len);
    if (buffer.size() < 4 + static_cast<std::size_t>(len))
        return std::optional<std::size_t>{};
    reply.status = static_cast<std::uint8_t>(buffer[4]);
    reply.id = get_le<std::uint64_t>(buffer.substr(5));
    reply.payload.assign(buffer.substr(reply_header, len - (reply_header - 4)));
    return std::optional<std::size_t>{4 + static_cast<std::size_t>(len)};
}

Outcome<std::int64_t> reply_i64(const Reply& reply)
{
    if (reply.payload.size() != 8)
        return fail(CANOPY_ERR_DAEMON, "canopyd answered with {} bytes where a 64-bit integer was expected",
                    reply.payload.size());
    return get_le<std::int64_t>(reply.payload);
}

Outcome<bool> reply_flag(const Reply& reply)
{
    if (reply.payload.size() != 1)
        return fail(CANOPY_ERR_DAEMON, "canopyd answered with {} bytes where a flag byte was expected",
                    reply.payload.size());
    return reply.payload[0] != 0;
}

} // namespace canopy::api::agent
