// The keys and values PMI barriers brought to a node, kept as the fences' results themselves with a compact index
// over them: a node holds every rank's puts, so a copy or a map node per key would multiply what it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace canopy {

namespace pmi {
struct PutView;
}

class KvsStore {
public:
    using Bytes = std::vector<std::uint8_t>;

    // Takes a barrier's result: node blobs concatenated (pmi/node_puts.hpp). A key already here takes its new
    // value. Malformed input changes nothing.
    Status add(Bytes result);
    std::optional<std::string_view> find(std::string_view key) const;
    std::size_t size() const { return count_; }
    // The results kept and the index over them.
    std::size_t held_bytes() const;

private:
    // A slot is 0 (empty) or (result index << 40 | offset of the put's entry + 1).
    static constexpr int offset_bits = 40;
    pmi::PutView put_at(std::uint64_t slot) const;
    std::uint64_t* slot_for(std::string_view key);
    // Makes room for `keys` keys in all, at most half the slots used.
    void reserve(std::size_t keys);

    std::vector<Bytes> results_;
    std::vector<std::uint64_t> slots_;   // open addressing, linear probing; a power of two long
    std::size_t count_ = 0;
};

} // namespace canopy
