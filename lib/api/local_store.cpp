// The singleton's in-process store, following torch's HashStore (torch/csrc/distributed/c10d/HashStore.cpp).
#include "api/local_store.hpp"

#include <charconv>

namespace canopy::api {

void LocalStore::set(const std::string& key, std::string value)
{
    std::lock_guard lock(mutex_);
    values_[key] = std::move(value);
    changed_.notify_all();
}

bool LocalStore::all_present_locked(const std::vector<std::string>& keys) const
{
    for (const auto& key : keys)
        if (!values_.count(key))
            return false;
    return true;
}

Outcome<std::string> LocalStore::get(const std::string& key, Deadline deadline)
{
    std::unique_lock lock(mutex_);
    auto present = [&] { return values_.count(key) > 0; };
    if (!deadline)
        changed_.wait(lock, present);
    else if (!changed_.wait_until(lock, *deadline, present))
        return fail(CANOPY_ERR_NOT_FOUND, "key '{}' is not in the store", key);
    return values_.at(key);
}

Outcome<std::int64_t> LocalStore::add(const std::string& key, std::int64_t delta)
{
    std::lock_guard lock(mutex_);
    std::int64_t value = 0;
    if (auto found = values_.find(key); found != values_.end()) {
        const std::string& text = found->second;
        auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc() || end != text.data() + text.size())
            return fail(CANOPY_ERR_INVALID, "store key '{}' holds '{}', not a decimal integer, so add cannot "
                        "count on it", key, text.substr(0, 40));
    }
    value += delta;
    values_[key] = std::to_string(value);
    changed_.notify_all();
    return value;
}

std::string LocalStore::compare_set(const std::string& key, const std::string& expected, std::string desired)
{
    std::lock_guard lock(mutex_);
    auto found = values_.find(key);
    if ((found == values_.end() && expected.empty()) || (found != values_.end() && found->second == expected)) {
        values_[key] = desired;
        changed_.notify_all();
        return desired;
    }
    if (found == values_.end())
        return expected;
    return found->second;
}

bool LocalStore::check(const std::vector<std::string>& keys)
{
    std::lock_guard lock(mutex_);
    return all_present_locked(keys);
}

bool LocalStore::erase(const std::string& key)
{
    std::lock_guard lock(mutex_);
    return values_.erase(key) > 0;
}

std::int64_t LocalStore::size()
{
    std::lock_guard lock(mutex_);
    return static_cast<std::int64_t>(values_.size());
}

Checked LocalStore::wait(const std::vector<std::string>& keys, Deadline deadline)
{
    std::unique_lock lock(mutex_);
    auto present = [&] { return all_present_locked(keys); };
    if (!deadline)
        changed_.wait(lock, present);
    else if (!changed_.wait_until(lock, *deadline, present))
        return fail(CANOPY_ERR_TIMEOUT, "store keys not set in time");
    return done();
}

} // namespace canopy::api
