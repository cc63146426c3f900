// Fuzzes the tree protocol as a hostile peer sends it: the frame splitter, then every message decoder on every
// frame; what decodes must encode and decode again to the same bytes, since daemons relay what they decoded.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "wire/auth.hpp"
#include "wire/codec.hpp"
#include "wire/messages.hpp"

namespace {

using namespace canopy;
using namespace canopy::wire;

template <typename M>
void decode_as(const Frame& frame)
{
    Frame typed{static_cast<std::uint8_t>(M::type), frame.payload};
    auto message = decode_frame<M>(typed);
    if (!message)
        return;
    auto bytes = to_frame(*message);
    auto again = read_frame(bytes);
    if (!again)
        std::abort();
    auto decoded = decode_frame<M>(*again);
    if (!decoded)
        std::abort();   // a daemon would send on what it cannot read back
    if (to_frame(*decoded) != bytes)
        std::abort();
}

void decode_every_message(const Frame& frame)
{
    message_name(frame.type);
    // Every decoder sees every payload, whatever type the frame claims: each must refuse what is not its own.
#define CANOPY_DECODE_AS(M) decode_as<M>(frame);
    CANOPY_WIRE_MESSAGES(CANOPY_DECODE_AS)
#undef CANOPY_DECODE_AS
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size == 0)
        return 0;
    // The first byte picks how the stream arrives: the chunk size and whether the peer has authenticated yet.
    std::uint8_t mode = data[0];
    std::span<const std::uint8_t> stream(data + 1, size - 1);

    if (auto whole = read_frame(stream))
        decode_every_message(*whole);

    FrameDecoder decoder((mode & 0x80) ? max_frame : max_unauthenticated_frame);
    std::size_t chunk = (mode & 0x7f) + 1;
    for (std::size_t offset = 0; offset < stream.size(); offset += chunk) {
        decoder.feed(stream.subspan(offset, std::min(chunk, stream.size() - offset)));
        for (;;) {
            auto frame = decoder.next();
            if (!frame || !*frame)
                break;
            decode_every_message(**frame);
        }
    }

    // The job key arrives as hex in the environment.
    (void)auth::key_from_hex(std::string_view(reinterpret_cast<const char*>(stream.data()), stream.size()));
    return 0;
}
