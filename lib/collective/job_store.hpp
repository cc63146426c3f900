// The job-wide key-value store kept at the root: what canopy.torch.Store and canopy_store_* talk to.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace canopy {

// Request and reply layouts are in docs/libcanopy.md ("Daemon socket protocol"); values and keys are bytes.
// Semantics follow torch's HashStore: set overwrites, add keeps decimal text, get and wait can block.
class JobStore {
public:
    enum class Op : std::uint8_t {
        set = 2, get = 3, add = 4, compare_set = 5, check = 6, remove = 7, num_keys = 8, wait = 9
    };
    enum class Answer : std::uint8_t { ok = 0, not_found = 1, error = 2, timeout = 3 };
    struct Reply {
        Answer answer = Answer::ok;
        std::vector<std::uint8_t> payload;
    };
    using Respond = std::function<void(Reply)>;
    // A get or wait timeout that means no limit (CANOPY_WAIT_FOREVER on the wire); 0 means do not wait.
    static constexpr std::uint32_t wait_forever = 0xFFFFFFFF;

    // Serves one request (op and payload as the rank sent them). Blocking gets and waits are answered when their
    // keys appear, or with a timeout by expire(). now_ms is any monotonic clock in milliseconds.
    void serve(std::uint8_t op, const std::vector<std::uint8_t>& payload, Respond respond, std::int64_t now_ms);

    // Answers waiters whose deadline has passed; returns the earliest deadline still pending, if any.
    std::optional<std::int64_t> expire(std::int64_t now_ms);

    std::size_t size() const { return values_.size(); }
    std::size_t waiting() const { return waiters_.size(); }

private:
    struct Waiter {
        std::vector<std::string> keys;
        bool want_value = false;    // a blocking get answers with the value; a wait with nothing
        std::int64_t deadline_ms = 0;   // 0: waits for ever
        Respond respond;
    };
    void set(const std::string& key, std::vector<std::uint8_t> value);
    bool ready(const Waiter& waiter) const;
    void wake(const std::string& key);

    std::map<std::string, std::vector<std::uint8_t>> values_;
    std::vector<Waiter> waiters_;
};

} // namespace canopy
