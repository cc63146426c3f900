// The store of a singleton process: the store's rules (store/store_core.hpp) in memory, shared by the process's
// threads, which may block on it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/api_error.hpp"
#include "store/store_core.hpp"

namespace canopy::api {

class LocalStore {
public:
    using Deadline = std::optional<std::chrono::steady_clock::time_point>;

    void set(const std::string& key, std::string value);
    // No deadline: wait as long as it takes; a deadline in the past: answer at once.
    Result<std::string> get(const std::string& key, Deadline deadline);
    Result<std::int64_t> add(const std::string& key, std::int64_t delta);
    std::string compare_set(const std::string& key, const std::string& expected, std::string desired);
    bool check(const std::vector<std::string>& keys);
    bool erase(const std::string& key);
    std::int64_t size();
    Status wait(const std::vector<std::string>& keys, Deadline deadline);

private:
    std::mutex mutex_;
    std::condition_variable changed_;
    StoreCore values_;
};

} // namespace canopy::api
