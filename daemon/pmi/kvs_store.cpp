// The keys and values PMI barriers brought to a node, indexed in place.
#include "pmi/kvs_store.hpp"

#include <algorithm>
#include <functional>
#include <string>

#include "pmi/node_puts.hpp"

namespace canopy {
namespace {

std::string_view text(std::span<const std::uint8_t> bytes)
{
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

} // namespace

Status KvsStore::add(Bytes result)
{
    // First check and count the whole result, so that a malformed one leaves the store as it was, and the index
    // grows once: no list of offsets, and no rehash per doubling.
    std::size_t entries = 0;
    if (auto checked = pmi::for_each_put(result, [&](std::size_t, const pmi::PutView&) { ++entries; }); !checked)
        return checked;
    if (entries == 0)
        return {};   // a barrier without puts
    if (results_.size() >= (std::size_t{1} << (64 - offset_bits)) - 1)
        return make_error("too many PMI barriers with puts to index");
    std::uint64_t index = results_.size();
    results_.push_back(std::move(result));
    reserve(count_ + entries);
    (void)pmi::for_each_put(results_.back(), [&](std::size_t offset, const pmi::PutView& put) {
        std::uint64_t* place = slot_for(text(put.key));
        if (*place == 0)
            ++count_;
        *place = (index << offset_bits) | (offset + 1);
    });
    return {};
}

std::optional<std::string_view> KvsStore::find(std::string_view key) const
{
    if (slots_.empty())
        return std::nullopt;
    std::uint64_t* place = const_cast<KvsStore*>(this)->slot_for(key);
    if (*place == 0)
        return std::nullopt;
    return text(put_at(*place).value);
}

std::size_t KvsStore::held_bytes() const
{
    std::size_t bytes = slots_.size() * sizeof(std::uint64_t);
    for (const auto& result : results_)
        bytes += result.size();
    return bytes;
}

pmi::PutView KvsStore::put_at(std::uint64_t slot) const
{
    return pmi::put_at(results_[slot >> offset_bits], (slot & ((std::uint64_t{1} << offset_bits) - 1)) - 1);
}

std::uint64_t* KvsStore::slot_for(std::string_view key)
{
    std::size_t mask = slots_.size() - 1;
    for (std::size_t i = std::hash<std::string_view>{}(key) & mask;; i = (i + 1) & mask)
        if (slots_[i] == 0 || text(put_at(slots_[i]).key) == key)
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
            *slot_for(text(put_at(slot).key)) = slot;
}

} // namespace canopy
