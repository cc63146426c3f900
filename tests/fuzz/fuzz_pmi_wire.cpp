// Fuzzes simple PMI as a rank sends it over PMI_FD: PMI-1 lines, multi-line spawns and PMI-2 frames.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "pmi/wire.hpp"

namespace {

using namespace canopy::pmi;

bool same(const Command& a, const Command& b) { return a.name == b.name && a.fields == b.fields; }

void check(const Command& command)
{
    // The server answers in the client's framing; PMI-2 must carry every byte through, PMI-1 must at least parse.
    // PMI-2's escape (";;" for ';') cannot frame a key that starts with ';' (only PMI-1 can carry one), but the
    // server's answers name only keys of its own.
    bool framable = std::none_of(command.fields.begin(), command.fields.end(),
                                 [](const auto& field) { return field.first.starts_with(';'); });
    auto framed = encode_v2(command);
    auto back = parse_v2(std::string_view(framed).substr(6));
    if (framable && (!back || !same(*back, command)))
        std::abort();
    auto line = encode_v1(command);
    if (!parse_v1(std::string_view(line).substr(0, line.size() - 1)))
        std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size == 0)
        return 0;
    // The first byte picks the chunks the stream arrives in and the limits.
    std::size_t chunk = (data[0] & 0x3f) + 1;
    Limits limits;
    if (data[0] & 0x40) {
        limits.max_message = 256;
        limits.max_fields = 8;
    }
    std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);

    Decoder decoder(limits);
    for (std::size_t offset = 0; offset < stream.size(); offset += chunk) {
        decoder.feed(stream.substr(offset, chunk));
        for (;;) {
            auto command = decoder.next();
            if (!command || !*command)
                break;
            check(**command);
            // As the server does: a PMI-1 init asking for version 2 switches the stream to PMI-2 framing.
            if ((*command)->name == "init" && (*command)->find("pmi_version") == "2")
                decoder.use_v2();
        }
    }

    if (auto command = parse_v1(stream, limits))
        check(*command);
    if (auto command = parse_v2(stream, limits))
        check(*command);
    return 0;
}
