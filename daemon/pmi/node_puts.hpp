// One node's PMI puts as they travel in a barrier's fence, listed once: the encoder, the decoder and the store's
// index all read this description. A fence's result is every node's blob concatenated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "util/result.hpp"
#include "wire/codec.hpp"
#include "wire/fields.hpp"
#include "wire/messages.hpp"

namespace canopy::pmi {

using Bytes = std::vector<std::uint8_t>;

// One put, in place: views into the puts being sent, or into the blob it was read from.
struct PutView {
    std::span<const std::uint8_t> key, value;

    CANOPY_WIRE_FIELDS(key, value)
};

// A put read from a fence result together with where its entry starts, which the store's index keeps instead of
// a copy. `remaining` is what was left to read when the entry began.
struct PlacedPut {
    std::size_t remaining = 0;
    PutView put;
};
void wire_get(wire::Decoding& decoding, PlacedPut& placed);

// A node's puts since the last barrier. On the wire each is a PutView; the store reads them back as PlacedPuts.
template <typename Put>
struct BasicNodePuts {
    std::vector<Put> puts;

    CANOPY_WIRE_FIELDS(puts)
};
using NodePuts = BasicNodePuts<PutView>;

// The node's blob for a fence, its puts in key order.
Bytes encode_node_puts(const std::map<std::string, std::string, std::less<>>& puts);

// The put whose entry starts at `offset` in a result already checked by for_each_put.
PutView put_at(std::span<const std::uint8_t> result, std::size_t offset);

// Calls each(offset of the entry, put) for every put of a fence result, node by node in the order they came.
// Stops at a malformed blob and says so; the puts before it have been visited, so check a result first.
template <typename Each>
Status for_each_put(std::span<const std::uint8_t> result, Each&& each)
{
    wire::Reader reader(result);
    BasicNodePuts<PlacedPut> node;   // reused: one allocation for the largest node's puts
    while (reader.ok() && !reader.at_end()) {
        wire::Decoding decoding(reader, "PMI node puts");
        node.fields(decoding);
        if (!reader.ok())
            break;
        for (const auto& placed : node.puts)
            each(result.size() - placed.remaining, placed.put);
    }
    if (!reader.ok())
        return make_error("malformed PMI fence result ({} bytes)", result.size());
    return {};
}

} // namespace canopy::pmi
