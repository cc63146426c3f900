// The singleton's in-process store: StoreCore under a lock, with blocking gets and waits.
#include "api/local_store.hpp"

namespace canopy::api {

void LocalStore::set(const std::string& key, std::string value)
{
    std::lock_guard lock(mutex_);
    values_.set(key, std::move(value));
    changed_.notify_all();
}

Result<std::string> LocalStore::get(const std::string& key, Deadline deadline)
{
    std::unique_lock lock(mutex_);
    auto present = [&] { return values_.contains(key); };
    if (!deadline)
        changed_.wait(lock, present);
    else if (!changed_.wait_until(lock, *deadline, present))
        return fail(CANOPY_ERR_NOT_FOUND, "key '{}' is not in the store", key);
    return *values_.find(key);
}

Result<std::int64_t> LocalStore::add(const std::string& key, std::int64_t delta)
{
    std::lock_guard lock(mutex_);
    auto value = values_.add(key, delta);
    if (!value)
        return Error{value.error().message, CANOPY_ERR_INVALID};
    changed_.notify_all();
    return value;
}

std::string LocalStore::compare_set(const std::string& key, const std::string& expected, std::string desired)
{
    std::lock_guard lock(mutex_);
    auto swap = values_.compare_set(key, expected, std::move(desired));
    if (swap.changed)
        changed_.notify_all();
    return swap.answer;
}

bool LocalStore::check(const std::vector<std::string>& keys)
{
    std::lock_guard lock(mutex_);
    return values_.contains_all(keys);
}

bool LocalStore::erase(const std::string& key)
{
    std::lock_guard lock(mutex_);
    return values_.erase(key);
}

std::int64_t LocalStore::size()
{
    std::lock_guard lock(mutex_);
    return static_cast<std::int64_t>(values_.size());
}

Status LocalStore::wait(const std::vector<std::string>& keys, Deadline deadline)
{
    std::unique_lock lock(mutex_);
    auto present = [&] { return values_.contains_all(keys); };
    if (!deadline)
        changed_.wait(lock, present);
    else if (!changed_.wait_until(lock, *deadline, present))
        return fail(CANOPY_ERR_TIMEOUT, "store keys not set in time");
    return done();
}

} // namespace canopy::api
