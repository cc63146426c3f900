// The job-wide key-value store kept at the root.
#include "collective/job_store.hpp"

#include <algorithm>
#include <charconv>
#include <span>

#include "wire/codec.hpp"

namespace canopy {
namespace {

using Bytes = std::vector<std::uint8_t>;

// The protocol's own field shapes over the wire codec's little-endian reader: a u32-sized text, the rest of the
// payload as text, and a u32 count of u32-sized keys. A size beyond the payload marks the request malformed.
std::string sized_text(wire::Reader& in)
{
    std::uint32_t size = in.u32();
    if (size > in.remaining()) {
        in.fail();
        return {};
    }
    std::string out(size, '\0');
    in.raw(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(out.data()), size));
    return out;
}

std::string rest_text(wire::Reader& in)
{
    auto bytes = in.rest();
    return std::string(bytes.begin(), bytes.end());
}

std::vector<std::string> sized_keys(wire::Reader& in)
{
    std::uint32_t count = in.u32();
    if (count > in.remaining() / 4) {
        in.fail();
        return {};
    }
    std::vector<std::string> keys(count);
    for (auto& key : keys)
        key = sized_text(in);
    return keys;
}

Bytes text_bytes(std::string_view text) { return Bytes(text.begin(), text.end()); }

JobStore::Reply error(std::string_view message) { return {JobStore::Answer::error, text_bytes(message)}; }

} // namespace

void JobStore::set(const std::string& key, Bytes value)
{
    values_[key] = std::move(value);
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

bool JobStore::ready(const Waiter& waiter) const
{
    return std::all_of(waiter.keys.begin(), waiter.keys.end(), [&](const auto& key) { return values_.contains(key); });
}

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
        waiter.respond({Answer::ok, waiter.want_value ? values_.at(waiter.keys.front()) : Bytes{}});
    }
}

void JobStore::serve(std::uint8_t op, const Bytes& payload, Respond respond, std::int64_t now_ms, long from)
{
    wire::Reader in(payload);
    switch (static_cast<Op>(op)) {
    case Op::get: case Op::wait: case Op::check: case Op::num_keys:
        ++counts_[from].reads;
        break;
    case Op::set: case Op::add: case Op::compare_set: case Op::delete_key:
        ++counts_[from].writes;
        break;
    default:
        break;
    }
    // A write forgets the key's holders before it changes the value (readers it wakes register afresh with the
    // new one), then invalidates them, and is answered by finish_write.
    switch (static_cast<Op>(op)) {
    case Op::set: {
        auto key = sized_text(in);
        auto value = in.rest();
        if (!in.ok())
            break;
        auto stale = take_holders(key);
        set(key, std::move(value));
        invalidate(key, stale);
        finish_write(key, {}, std::move(respond));
        return;
    }
    case Op::get:
    case Op::wait: {
        auto timeout_ms = in.u32();
        Waiter waiter;
        waiter.want_value = static_cast<Op>(op) == Op::get;
        waiter.from = from;
        if (waiter.want_value)
            waiter.keys.push_back(rest_text(in));
        else
            waiter.keys = sized_keys(in);
        if (!in.ok())
            break;
        if (ready(waiter)) {
            remember(from, waiter.keys);
            respond({Answer::ok, waiter.want_value ? values_.at(waiter.keys.front()) : Bytes{}});
            return;
        }
        if (timeout_ms == 0) {   // no wait: a get says not found, a wait times out at once
            respond({waiter.want_value ? Answer::not_found : Answer::timeout, {}});
            return;
        }
        waiter.deadline_ms = timeout_ms == wait_forever ? 0 : now_ms + timeout_ms;
        waiter.respond = std::move(respond);
        waiters_.push_back(std::move(waiter));
        return;
    }
    case Op::add: {
        auto delta = in.i64();
        auto key = rest_text(in);
        if (!in.ok())
            break;
        std::int64_t value = 0;
        if (auto it = values_.find(key); it != values_.end()) {
            auto number = store_integer(it->second);
            if (!number) {
                respond(error("add: the value of '" + key + "' is not an integer"));
                return;
            }
            value = *number;
        }
        value += delta;
        auto stale = take_holders(key);
        set(key, text_bytes(std::to_string(value)));
        invalidate(key, stale);
        finish_write(key, {Answer::ok, encode_store_integer(value)}, std::move(respond));
        return;
    }
    case Op::compare_set: {
        auto key = sized_text(in);
        auto expected = sized_text(in);
        auto desired = in.rest();
        if (!in.ok())
            break;
        // torch HashStore::compareSet: a missing key is set only when `expected` is empty, and the call returns
        // `expected` otherwise; an existing key is replaced only when it equals `expected`.
        auto it = values_.find(key);
        bool missing = it == values_.end();
        if (missing ? expected.empty() : it->second == text_bytes(expected)) {
            auto stale = take_holders(key);
            set(key, std::move(desired));
            invalidate(key, stale);
        }
        Bytes result = !missing || expected.empty() ? values_.at(key) : text_bytes(expected);
        finish_write(key, {Answer::ok, std::move(result)}, std::move(respond));
        return;
    }
    case Op::check: {
        Waiter probe;
        probe.keys = sized_keys(in);
        if (!in.ok())
            break;
        bool all = ready(probe);
        if (all)
            remember(from, probe.keys);
        respond({Answer::ok, Bytes{static_cast<std::uint8_t>(all ? 1 : 0)}});
        return;
    }
    case Op::delete_key: {
        auto key = rest_text(in);
        bool existed = values_.erase(key) > 0;
        if (existed)
            invalidate(key, take_holders(key));
        finish_write(key, {Answer::ok, Bytes{static_cast<std::uint8_t>(existed ? 1 : 0)}}, std::move(respond));
        return;
    }
    case Op::num_keys:
        respond({Answer::ok, encode_store_integer(static_cast<std::int64_t>(values_.size()))});
        return;
    default:
        respond(error("unknown store operation " + std::to_string(op)));
        return;
    }
    respond(error("malformed store request (" + std::to_string(payload.size()) + " bytes)"));
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

std::optional<std::vector<std::string>> store_read_keys(std::uint8_t op, const Bytes& payload)
{
    wire::Reader in(payload);
    std::vector<std::string> keys;
    switch (static_cast<JobStore::Op>(op)) {
    case JobStore::Op::get:
        in.u32();
        keys.push_back(rest_text(in));
        break;
    case JobStore::Op::wait:
        in.u32();
        keys = sized_keys(in);
        break;
    case JobStore::Op::check:
        keys = sized_keys(in);
        break;
    default:
        return std::nullopt;
    }
    if (!in.ok() || !in.at_end())
        return std::nullopt;
    return keys;
}

std::optional<StoreWrite> store_write(std::uint8_t op, const Bytes& payload)
{
    constexpr std::uint64_t counter_digits = 20;   // an i64 in decimal, with its sign
    wire::Reader in(payload);
    StoreWrite write;
    switch (static_cast<JobStore::Op>(op)) {
    case JobStore::Op::set:
        write.key = sized_text(in);
        write.bytes = write.key.size() + in.remaining();
        break;
    case JobStore::Op::add:
        in.i64();
        write.key = rest_text(in);
        write.bytes = write.key.size() + counter_digits;
        break;
    case JobStore::Op::compare_set:
        write.key = sized_text(in);
        sized_text(in);
        write.bytes = write.key.size() + in.remaining();
        break;
    case JobStore::Op::delete_key:
        write.key = rest_text(in);
        write.deletes = true;
        break;
    default:
        return std::nullopt;
    }
    if (!in.ok())
        return std::nullopt;
    return write;
}

std::optional<std::int64_t> store_integer(const Bytes& value)
{
    std::int64_t number = 0;
    const char* begin = reinterpret_cast<const char*>(value.data());
    auto [end, parsed] = std::from_chars(begin, begin + value.size(), number);
    if (parsed != std::errc() || end != begin + value.size())
        return std::nullopt;
    return number;
}

Bytes encode_store_integer(std::int64_t value)
{
    wire::Writer out;
    out.i64(value);
    return out.take();
}

} // namespace canopy
