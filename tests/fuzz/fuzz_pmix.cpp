// Fuzzes what the PMIx relay reads from a rank before and while it relays: the connect-ack, then the message
// stream it taps for job-control requests, and the server address it is given.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "pmix/connect_ack.hpp"
#include "pmix/message_tap.hpp"
#include "pmix/pmix_relay.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size == 0)
        return 0;
    // The first byte picks the chunk size, and the prefix tapped for is the next two bytes.
    std::size_t chunk = (data[0] & 0x3f) + 1;
    std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);

    (void)canopy::parse_pmix_uri(std::string(stream));

    if (stream.size() < canopy::connect_ack::header_size)
        return 0;
    auto body = canopy::connect_ack::body_size(
        std::span<const char, canopy::connect_ack::header_size>(stream.data(), canopy::connect_ack::header_size));
    if (!body)
        return 0;
    stream.remove_prefix(canopy::connect_ack::header_size);
    if (stream.size() < *body)
        return 0;
    stream.remove_prefix(*body);

    std::string prefix(stream.substr(0, 2));
    canopy::PmixMessageTap tap(prefix, [&](std::string_view payload) {
        if (!payload.starts_with(prefix) || payload.size() > canopy::PmixMessageTap::max_message)
            std::abort();
    });
    for (std::size_t offset = 0; offset < stream.size(); offset += chunk) {
        auto piece = stream.substr(offset, chunk);
        tap.feed(piece.data(), piece.size());
    }
    return 0;
}
