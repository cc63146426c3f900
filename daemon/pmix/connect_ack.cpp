#include "pmix/connect_ack.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace canopy::connect_ack {

namespace {
constexpr std::size_t size_offset = 8;
} // namespace

std::optional<Client> client_of(std::span<const char> body)
{
    std::size_t at = 0;
    // A NUL-terminated string within the body, or nothing.
    auto text = [&]() -> std::optional<std::string> {
        auto end = std::find(body.begin() + static_cast<std::ptrdiff_t>(at), body.end(), '\0');
        if (end == body.end())
            return std::nullopt;
        std::string out(body.begin() + static_cast<std::ptrdiff_t>(at), end);
        at += out.size() + 1;
        return out;
    };
    auto u32 = [&]() -> std::optional<std::uint32_t> {
        if (body.size() - at < sizeof(std::uint32_t))
            return std::nullopt;
        std::uint32_t value;
        std::memcpy(&value, body.data() + at, sizeof value);
        at += sizeof value;
        return ntohl(value);
    };
    constexpr char simple_client = 0;
    auto security = text();
    auto credential = security ? u32() : std::nullopt;
    if (!credential || body.size() - at < std::size_t{*credential} + 1)
        return std::nullopt;
    at += *credential;
    if (body[at++] != simple_client)
        return std::nullopt;
    auto nspace = text();
    auto rank = nspace ? u32() : std::nullopt;
    if (!rank)
        return std::nullopt;
    return Client{std::move(*nspace), static_cast<long>(*rank)};
}

Result<std::size_t> body_size(std::span<const char, header_size> header)
{
    std::size_t body = 0;
    std::memcpy(&body, header.data() + size_offset, sizeof body);
    if (body > max_body)
        return make_error("its PMIx connect-ack claims {} bytes", body);
    return body;
}

} // namespace canopy::connect_ack
