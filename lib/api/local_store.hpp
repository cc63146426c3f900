// The store of a singleton process: torch HashStore semantics, in memory, shared by the process's threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/failure.hpp"

namespace canopy::api {

class LocalStore {
public:
    using Deadline = std::optional<std::chrono::steady_clock::time_point>;

    void set(const std::string& key, std::string value);
    // No deadline: wait as long as it takes; a deadline in the past: answer at once.
    Outcome<std::string> get(const std::string& key, Deadline deadline);
    Outcome<std::int64_t> add(const std::string& key, std::int64_t delta);
    std::string compare_set(const std::string& key, const std::string& expected, std::string desired);
    bool check(const std::vector<std::string>& keys);
    bool erase(const std::string& key);
    std::int64_t size();
    Checked wait(const std::vector<std::string>& keys, Deadline deadline);

private:
    bool all_present_locked(const std::vector<std::string>& keys) const;

    std::mutex mutex_;
    std::condition_variable changed_;
    std::map<std::string, std::string> values_;
};

} // namespace canopy::api
