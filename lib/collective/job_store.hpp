// The job-wide key-value store kept at the root: what canopy.torch.Store and canopy_store_* talk to.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "store/store_core.hpp"
#include "util/result.hpp"
#include "wire/rank_socket.hpp"

namespace canopy {

// Request and reply layouts are in docs/libcanopy.md ("Daemon socket protocol"); values and keys are bytes.
// Semantics follow torch's HashStore: set overwrites, add keeps decimal text, get and wait can block.
//
// Daemons may cache what the store answered them (daemon/store_cache.*). With an invalidator set, the store
// remembers which tree positions read each key, and before a write of a key returns it has every such position
// drop its copy: a write returns only once every invalidation of its key sent so far has been acknowledged.
class JobStore {
public:
    // The ranks' socket numbering; mark never leaves a daemon, and the root answers it with an error.
    using Op = wire::RankSocketOp;
    using Answer = wire::RankSocketAnswer;
    struct Reply {
        Answer answer = Answer::ok;
        std::vector<std::uint8_t> payload;
    };
    using Respond = std::function<void(Reply)>;
    // Tells `position` to drop its copy of `key`; `acked` must be called exactly once, when the position has
    // dropped it or can no longer be reached (it left the job: its cache is gone with it).
    using Invalidate = std::function<void(long position, const std::string& key, std::function<void()> acked)>;
    // A get or wait timeout that means no limit (CANOPY_WAIT_FOREVER on the wire); 0 means do not wait.
    static constexpr std::uint32_t wait_forever = wire::store_wait_forever;
    // The requester of a read that no daemon will cache (the default; positions >= 1 are daemons).
    static constexpr long no_cache = -1;

    // Turns on cache tracking: reads served for a position >= 1 register it as holding the keys read.
    void set_invalidator(Invalidate invalidate) { invalidate_ = std::move(invalidate); }

    // Serves one request (op and payload as the rank sent them) for tree position `from`. Blocking gets and waits
    // are answered when their keys appear, or with a timeout by expire(); writes of cached keys are answered once
    // their invalidations are acknowledged. now_ms is any monotonic clock in milliseconds.
    void serve(std::uint8_t op, const std::vector<std::uint8_t>& payload, Respond respond, std::int64_t now_ms,
               long from = no_cache);

    // Answers waiters whose deadline has passed; returns the earliest deadline still pending, if any.
    std::optional<std::int64_t> expire(std::int64_t now_ms);

    // The job's ranks restart (--max-restarts): every key, waiter and held write goes, unanswered (who asked is
    // gone, and its daemon forgot the request), as do the daemons' cached copies; the counts stay.
    void forget_values();

    std::size_t size() const { return values_.size(); }
    std::size_t waiting() const { return waiters_.size(); }
    // Writes whose reply waits for invalidations to be acknowledged.
    std::size_t writes_held() const { return held_.size(); }
    // Positions the store believes hold a copy of `key`.
    std::set<long> holders(const std::string& key) const;

    // What the store served, by requester position (reads: get, wait, check, num_keys; writes: the rest), and the
    // invalidations it sent to each position.
    struct Counts {
        std::uint64_t reads = 0, writes = 0, invalidations = 0;
    };
    const std::map<long, Counts>& counts() const { return counts_; }

private:
    struct Waiter {
        std::vector<std::string> keys;
        bool want_value = false;    // a blocking get answers with the value; a wait with nothing
        std::int64_t deadline_ms = 0;   // 0: waits for ever
        long from = no_cache;
        Respond respond;
    };
    struct HeldWrite {
        std::string key;
        std::uint64_t upto = 0;   // the last invalidation id issued when the write was served
        Reply reply;
        Respond respond;
    };
    void set(const std::string& key, std::string value);
    // A get (one key, answered with its value) or a wait: answered now, at once when it may not wait, or queued.
    void read(Waiter waiter, std::uint32_t timeout_ms, std::int64_t now_ms, Respond respond);
    bool ready(const Waiter& waiter) const;
    void wake(const std::string& key);
    // A read of `keys` answered for `from`: it may now cache them.
    void remember(long from, const std::vector<std::string>& keys);
    // Forgets who holds `key`, before the write changes it: readers the write wakes register afresh.
    std::set<long> take_holders(const std::string& key);
    void invalidate(const std::string& key, const std::set<long>& positions);
    // Answers a write now, or once every invalidation of its key sent so far is acknowledged.
    void finish_write(const std::string& key, Reply reply, Respond respond);
    void acknowledged(const std::string& key, std::uint64_t id);

    StoreCore values_;
    std::vector<Waiter> waiters_;
    Invalidate invalidate_;
    std::map<std::string, std::set<long>> holders_;
    std::map<std::string, std::set<std::uint64_t>> unacked_;   // invalidations in flight, by key
    std::uint64_t next_invalidation_ = 1;
    std::vector<HeldWrite> held_;
    std::map<long, Counts> counts_;
};

// The keys a get (one), wait or check (several) names; nothing for other operations. What a daemon's cache needs
// to answer reads itself.
std::optional<std::vector<std::string>> store_read_keys(const wire::StoreOperation& operation);

// What a write asks the store to keep, as the rank's daemon counts it against the job's limit per rank
// (collective/store_limit.hpp): its key, and the bytes it keeps there (the key and the value; an add's counter as
// the 20 digits it may grow to; a compare-set's desired value whether or not it wins). A delete keeps nothing.
struct StoreWrite {
    std::string key;
    std::uint64_t bytes = 0;
    bool deletes = false;
};
// The write a set, add, compare_set or delete is; nothing for other operations.
std::optional<StoreWrite> store_write(const wire::StoreOperation& operation);

} // namespace canopy
