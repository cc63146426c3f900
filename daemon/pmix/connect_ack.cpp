#include "pmix/connect_ack.hpp"

#include <cstring>

namespace canopy::connect_ack {

namespace {
constexpr std::size_t size_offset = 8;
} // namespace

Result<std::size_t> body_size(std::span<const char, header_size> header)
{
    std::size_t body = 0;
    std::memcpy(&body, header.data() + size_offset, sizeof body);
    if (body > max_body)
        return make_error("its PMIx connect-ack claims {} bytes", body);
    return body;
}

} // namespace canopy::connect_ack
