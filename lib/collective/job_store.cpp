// The job-wide key-value store kept at the root.
#include "collective/job_store.hpp"

#include <variant>

namespace canopy {
namespace {

using Bytes = std::vector<std::uint8_t>;

JobStore::Reply error(std::string message)
{
    return {JobStore::Answer::error, wire::encode_fields(wire::StoreFailure{std::move(message)})};
}

template <typename Answer>
JobStore::Reply ok(Answer answer)
{
    return {JobStore::Answer::ok, wire::encode_fields(answer)};
}

// The value a blocking get answers with, or nothing for a wait.
JobStore::Reply read_answer(const StoreCore& values, const std::vector<std::string>& keys, bool want_value)
{
    return want_value ? ok(wire::StoreValue{*values.find(keys.front())}) : ok(wire::StoreDone{});
}

template <typename... Handlers>
struct Overloaded : Handlers... {
    using Handlers::operator()...;
};
template <typename... Handlers>
Overloaded(Handlers...) -> Overloaded<Handlers...>;

bool is_read(const wire::StoreOperation& operation)
{
    return std::holds_alternative<wire::StoreGet>(operation) || std::holds_alternative<wire::StoreWait>(operation) ||
           std::holds_alternative<wire::StoreCheck>(operation) ||
           std::holds_alternative<wire::StoreNumKeys>(operation);
}

} // namespace

void JobStore::set(const std::string& key, std::string value)
{
    values_.set(key, std::move(value));
    wake(key);
}

std::set<long> JobStore::holders(const std::string& key) const
{
    auto it = holders_.find(key);
    return it == holders_.end() ? std::set<long>{} : it->second;
}

void JobStore::remember(long from, const std::vector<std::string>& keys)
{
    if (!invalidate_ || from < 1)
        return;
    for (const auto& key : keys)
        holders_[key].insert(from);
}

std::set<long> JobStore::take_holders(const std::string& key)
{
    auto node = holders_.extract(key);
    return node.empty() ? std::set<long>{} : std::move(node.mapped());
}

void JobStore::invalidate(const std::string& key, const std::set<long>& positions)
{
    if (positions.empty())
        return;
    // Every id is on record before the first is sent: an invalidation may be acknowledged at once (a position
    // that has left), and the write must not be answered while the others are still out.
    std::vector<std::pair<long, std::uint64_t>> sends;
    for (long position : positions) {
        std::uint64_t id = next_invalidation_++;
        unacked_[key].insert(id);
        ++counts_[position].invalidations;
        sends.emplace_back(position, id);
    }
    for (const auto& [position, id] : sends)
        invalidate_(position, key, [this, key, id = id, done = false]() mutable {   // clang < 16: no binding captures
            if (!done)
                acknowledged(key, id);
            done = true;
        });
}

void JobStore::finish_write(const std::string& key, Reply reply, Respond respond)
{
    // Ids grow, so the invalidations of the key sent so far are exactly those up to the last id issued.
    if (!unacked_.contains(key)) {
        respond(std::move(reply));
        return;
    }
    held_.push_back({key, next_invalidation_ - 1, std::move(reply), std::move(respond)});
}

void JobStore::acknowledged(const std::string& key, std::uint64_t id)
{
    auto pending = unacked_.find(key);
    if (pending == unacked_.end() || !pending->second.erase(id))
        return;
    std::uint64_t oldest = pending->second.empty() ? next_invalidation_ : *pending->second.begin();
    if (pending->second.empty())
        unacked_.erase(pending);
    // A held write goes once nothing it waited for is still out, in the order the writes were served.
    std::vector<HeldWrite> ready;
    for (auto it = held_.begin(); it != held_.end();) {
        if (it->key == key && it->upto < oldest) {
            ready.push_back(std::move(*it));
            it = held_.erase(it);
        } else {
            ++it;
        }
    }
    for (auto& write : ready)
        write.respond(std::move(write.reply));
}

bool JobStore::ready(const Waiter& waiter) const { return values_.contains_all(waiter.keys); }

void JobStore::wake(const std::string& key)
{
    std::vector<Waiter> woken;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (std::find(it->keys.begin(), it->keys.end(), key) != it->keys.end() && ready(*it)) {
            woken.push_back(std::move(*it));
            it = waiters_.erase(it);
        } else {
            ++it;
        }
    }
    for (auto& waiter : woken) {
        remember(waiter.from, waiter.keys);
        waiter.respond(read_answer(values_, waiter.keys, waiter.want_value));
    }
}

void JobStore::serve(std::uint8_t op, const Bytes& payload, Respond respond, std::int64_t now_ms, long from)
{
    auto operation = wire::decode_store_operation(op, payload);
    if (!operation) {
        respond(error(operation.error().message));
        return;
    }
    auto& counts = counts_[from];
    ++(is_read(*operation) ? counts.reads : counts.writes);
    // A write forgets the key's holders before it changes the value (readers it wakes register afresh with the
    // new one), then invalidates them, and is answered by finish_write.
    std::visit(Overloaded{
                   [&](wire::StoreSet& set) {
                       auto stale = take_holders(set.key);
                       this->set(set.key, std::move(set.value));
                       invalidate(set.key, stale);
                       finish_write(set.key, ok(wire::StoreDone{}), std::move(respond));
                   },
                   [&](wire::StoreGet& get) {
                       read(Waiter{{get.key}, true, 0, from, {}}, get.timeout_ms, now_ms, std::move(respond));
                   },
                   [&](wire::StoreWait& wait) {
                       read(Waiter{std::move(wait.keys), false, 0, from, {}}, wait.timeout_ms, now_ms,
                            std::move(respond));
                   },
                   [&](wire::StoreAdd& add) {
                       auto value = values_.add(add.key, add.delta);
                       if (!value) {
                           respond(error(value.error().message));
                           return;
                       }
                       auto stale = take_holders(add.key);
                       wake(add.key);
                       invalidate(add.key, stale);
                       finish_write(add.key, ok(wire::StoreCount{*value}), std::move(respond));
                   },
                   [&](wire::StoreCompareSet& swap) {
                       auto result = values_.compare_set(swap.key, swap.expected, std::move(swap.desired));
                       if (result.changed) {
                           auto stale = take_holders(swap.key);
                           wake(swap.key);
                           invalidate(swap.key, stale);
                       }
                       finish_write(swap.key, ok(wire::StoreValue{std::move(result.answer)}), std::move(respond));
                   },
                   [&](wire::StoreCheck& check) {
                       bool all = values_.contains_all(check.keys);
                       if (all)
                           remember(from, check.keys);
                       respond(ok(wire::StoreFlag{all}));
                   },
                   [&](wire::StoreDelete& erase) {
                       bool existed = values_.erase(erase.key);
                       if (existed)
                           invalidate(erase.key, take_holders(erase.key));
                       finish_write(erase.key, ok(wire::StoreFlag{existed}), std::move(respond));
                   },
                   [&](wire::StoreNumKeys&) {
                       respond(ok(wire::StoreCount{static_cast<std::int64_t>(values_.size())}));
                   },
               },
               *operation);
}

void JobStore::read(Waiter waiter, std::uint32_t timeout_ms, std::int64_t now_ms, Respond respond)
{
    if (ready(waiter)) {
        remember(waiter.from, waiter.keys);
        respond(read_answer(values_, waiter.keys, waiter.want_value));
        return;
    }
    if (timeout_ms == 0) {   // no wait: a get says not found, a wait times out at once
        respond({waiter.want_value ? Answer::not_found : Answer::timeout, {}});
        return;
    }
    waiter.deadline_ms = timeout_ms == wait_forever ? 0 : now_ms + timeout_ms;
    waiter.respond = std::move(respond);
    waiters_.push_back(std::move(waiter));
}

std::optional<std::int64_t> JobStore::expire(std::int64_t now_ms)
{
    std::vector<Waiter> expired;
    std::optional<std::int64_t> next;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (it->deadline_ms != 0 && it->deadline_ms <= now_ms) {
            expired.push_back(std::move(*it));
            it = waiters_.erase(it);
            continue;
        }
        if (it->deadline_ms != 0)
            next = next ? std::min(*next, it->deadline_ms) : it->deadline_ms;
        ++it;
    }
    for (auto& waiter : expired)
        waiter.respond({Answer::timeout, {}});
    return next;
}

std::optional<std::vector<std::string>> store_read_keys(const wire::StoreOperation& operation)
{
    return std::visit(Overloaded{
                          [](const wire::StoreGet& get) { return std::optional(std::vector<std::string>{get.key}); },
                          [](const wire::StoreWait& wait) { return std::optional(wait.keys); },
                          [](const wire::StoreCheck& check) { return std::optional(check.keys); },
                          [](const auto&) { return std::optional<std::vector<std::string>>(); },
                      },
                      operation);
}

std::optional<StoreWrite> store_write(const wire::StoreOperation& operation)
{
    constexpr std::uint64_t counter_digits = 20;   // an i64 in decimal, with its sign
    return std::visit(Overloaded{
                          [](const wire::StoreSet& set) {
                              return std::optional(StoreWrite{set.key, set.key.size() + set.value.size(), false});
                          },
                          [](const wire::StoreAdd& add) {
                              return std::optional(StoreWrite{add.key, add.key.size() + counter_digits, false});
                          },
                          [](const wire::StoreCompareSet& swap) {
                              return std::optional(StoreWrite{swap.key, swap.key.size() + swap.desired.size(), false});
                          },
                          [](const wire::StoreDelete& erase) { return std::optional(StoreWrite{erase.key, 0, true}); },
                          [](const auto&) { return std::optional<StoreWrite>(); },
                      },
                      operation);
}

void JobStore::forget_values()
{
    values_ = StoreCore{};
    waiters_.clear();
    holders_.clear();
    unacked_.clear();
    held_.clear();
}

} // namespace canopy
