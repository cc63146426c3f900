// One node's PMI puts for a barrier's fence: encoding them, and reading them back in place.
#include "pmi/node_puts.hpp"

namespace canopy::pmi {
namespace {

std::span<const std::uint8_t> bytes_of(const std::string& text)
{
    return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

} // namespace

void wire_get(wire::Decoding& decoding, PlacedPut& placed)
{
    placed.remaining = decoding.reader().remaining();
    decoding(placed.put);
}

Bytes encode_node_puts(const std::map<std::string, std::string, std::less<>>& puts)
{
    NodePuts node;
    node.puts.reserve(puts.size());
    for (const auto& [key, value] : puts)
        node.puts.push_back({bytes_of(key), bytes_of(value)});
    wire::Writer writer;
    wire::Encoding encoding(writer);
    node.fields(encoding);
    return writer.take();
}

PutView put_at(std::span<const std::uint8_t> result, std::size_t offset)
{
    wire::Reader reader(result.subspan(offset));
    wire::Decoding decoding(reader, "PMI put");
    PutView put;
    put.fields(decoding);
    return put;
}

} // namespace canopy::pmi
