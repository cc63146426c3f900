// The keys and values PMI barriers brought to a node, indexed in place.
#include "pmi/kvs_store.hpp"

#include <algorithm>
#include <functional>
#include <string>

#include "wire/codec.hpp"

namespace canopy {
namespace {

struct Entry {
    std::string_view key, value;
};

// The key and value whose key's length prefix is at `offset`.
Entry entry_at(const std::vector<std::uint8_t>& result, std::size_t offset)
{
    wire::Reader reader(std::span<const std::uint8_t>(result).subspan(offset));
    auto key = reader.bytes_view();
    auto value = reader.bytes_view();
    return {{reinterpret_cast<const char*>(key.data()), key.size()},
            {reinterpret_cast<const char*>(value.data()), value.size()}};
}

} // namespace

KvsStore::Bytes KvsStore::node_blob(const std::map<std::string, std::string, std::less<>>& puts)
{
    wire::Writer writer;
    writer.varint(puts.size());
    for (const auto& [key, value] : puts) {
        writer.string(key);
        writer.string(value);
    }
    return writer.take();
}

Status KvsStore::add(Bytes result)
{
    // First check and count the whole result, so that a malformed one leaves the store as it was, and the index
    // grows once: no list of offsets, and no rehash per doubling.
    std::size_t entries = 0;
    wire::Reader check(result);
    while (check.ok() && !check.at_end()) {
        std::size_t count = check.count();
        for (std::size_t i = 0; i < count && check.ok(); ++i, ++entries) {
            (void)check.bytes_view();
            (void)check.bytes_view();
        }
    }
    if (!check.ok())
        return make_error("malformed PMI fence result ({} bytes)", result.size());
    if (entries == 0)
        return {};   // a barrier without puts
    if (results_.size() >= (std::size_t{1} << (64 - offset_bits)) - 1)
        return make_error("too many PMI barriers with puts to index");
    std::uint64_t index = results_.size();
    results_.push_back(std::move(result));
    const Bytes& kept = results_.back();
    reserve(count_ + entries);
    wire::Reader reader(kept);
    while (!reader.at_end()) {
        std::size_t count = reader.count();
        for (std::size_t i = 0; i < count; ++i) {
            std::uint64_t slot = (index << offset_bits) | (kept.size() - reader.remaining() + 1);
            (void)reader.bytes_view();
            (void)reader.bytes_view();
            std::uint64_t* place = slot_for(key_at(slot));
            if (*place == 0)
                ++count_;
            *place = slot;
        }
    }
    return {};
}

std::optional<std::string_view> KvsStore::find(std::string_view key) const
{
    if (slots_.empty())
        return std::nullopt;
    std::uint64_t* place = const_cast<KvsStore*>(this)->slot_for(key);
    if (*place == 0)
        return std::nullopt;
    return value_after_key(*place);
}

std::size_t KvsStore::held_bytes() const
{
    std::size_t bytes = slots_.size() * sizeof(std::uint64_t);
    for (const auto& result : results_)
        bytes += result.size();
    return bytes;
}

std::string_view KvsStore::key_at(std::uint64_t slot) const
{
    const auto& result = results_[slot >> offset_bits];
    return entry_at(result, (slot & ((std::uint64_t{1} << offset_bits) - 1)) - 1).key;
}

std::string_view KvsStore::value_after_key(std::uint64_t slot) const
{
    const auto& result = results_[slot >> offset_bits];
    return entry_at(result, (slot & ((std::uint64_t{1} << offset_bits) - 1)) - 1).value;
}

std::uint64_t* KvsStore::slot_for(std::string_view key)
{
    std::size_t mask = slots_.size() - 1;
    for (std::size_t i = std::hash<std::string_view>{}(key) & mask;; i = (i + 1) & mask)
        if (slots_[i] == 0 || key_at(slots_[i]) == key)
            return &slots_[i];
}

void KvsStore::reserve(std::size_t keys)
{
    std::size_t size = std::max<std::size_t>(16, slots_.size());
    while (size < 2 * keys)
        size *= 2;
    if (size == slots_.size())
        return;
    std::vector<std::uint64_t> old = std::move(slots_);
    slots_.assign(size, 0);
    for (std::uint64_t slot : old)
        if (slot != 0)
            *slot_for(key_at(slot)) = slot;
}

} // namespace canopy
