// The store's rules, following torch's HashStore (torch/csrc/distributed/c10d/HashStore.cpp).
#include "store/store_core.hpp"

#include <algorithm>
#include <charconv>

namespace canopy {

void StoreCore::set(const std::string& key, std::string value) { values_[key] = std::move(value); }

Result<std::int64_t> StoreCore::add(const std::string& key, std::int64_t delta)
{
    std::int64_t value = 0;
    if (auto found = values_.find(key); found != values_.end()) {
        auto number = store_integer(found->second);
        if (!number)
            return make_error("store key '{}' holds '{}', not a decimal integer, so add cannot count on it", key,
                              found->second.substr(0, 40));
        value = *number;
    }
    value += delta;
    values_[key] = std::to_string(value);
    return value;
}

StoreCore::Swap StoreCore::compare_set(const std::string& key, const std::string& expected, std::string desired)
{
    auto found = values_.find(key);
    bool missing = found == values_.end();
    if (missing ? expected.empty() : found->second == expected) {
        values_[key] = std::move(desired);
        return {values_.at(key), true};
    }
    return {missing ? expected : found->second, false};
}

const std::string* StoreCore::find(const std::string& key) const
{
    auto found = values_.find(key);
    return found == values_.end() ? nullptr : &found->second;
}

bool StoreCore::contains_all(const std::vector<std::string>& keys) const
{
    return std::all_of(keys.begin(), keys.end(), [&](const auto& key) { return values_.contains(key); });
}

bool StoreCore::erase(const std::string& key) { return values_.erase(key) > 0; }

std::optional<std::int64_t> store_integer(std::string_view value)
{
    std::int64_t number = 0;
    auto [end, parsed] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (parsed != std::errc() || end != value.data() + value.size())
        return std::nullopt;
    return number;
}

} // namespace canopy
