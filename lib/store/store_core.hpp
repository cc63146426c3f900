// The store's rules, written once: torch's HashStore semantics (set overwrites, add counts in decimal text,
// compare-set as HashStore::compareSet) over one map of keys to values. The root's JobStore and a singleton's
// LocalStore both keep their values here; waiting, locking and caching are theirs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace canopy {

class StoreCore {
public:
    void set(const std::string& key, std::string value);
    // The new count; an error naming the key when its value is not a decimal integer (a missing key counts from 0).
    Result<std::int64_t> add(const std::string& key, std::int64_t delta);

    // torch HashStore::compareSet: a missing key is set only when `expected` is empty, an existing one only when it
    // equals `expected`. The answer is the key's value afterwards, or `expected` when the key is still missing.
    struct Swap {
        std::string answer;
        bool changed = false;
    };
    Swap compare_set(const std::string& key, const std::string& expected, std::string desired);

    // Nothing when the key is missing; valid until the key next changes.
    const std::string* find(const std::string& key) const;
    bool contains(const std::string& key) const { return values_.contains(key); }
    bool contains_all(const std::vector<std::string>& keys) const;
    bool erase(const std::string& key);
    std::size_t size() const { return values_.size(); }

private:
    std::map<std::string, std::string> values_;
};

// A stored value as add reads it: decimal text, all of it, as torch writes counters.
std::optional<std::int64_t> store_integer(std::string_view value);

} // namespace canopy
