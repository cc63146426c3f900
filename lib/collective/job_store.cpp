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

Bytes i64_bytes(std::int64_t value)
{
    wire::Writer out;
    out.i64(value);
    return out.take();
}

JobStore::Reply error(std::string_view message) { return {JobStore::Answer::error, text_bytes(message)}; }

} // namespace

void JobStore::set(const std::string& key, Bytes value)
{
    values_[key] = std::move(value);
    wake(key);
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
    for (auto& waiter : woken)
        waiter.respond({Answer::ok, waiter.want_value ? values_.at(waiter.keys.front()) : Bytes{}});
}

void JobStore::serve(std::uint8_t op, const Bytes& payload, Respond respond, std::int64_t now_ms)
{
    wire::Reader in(payload);
    switch (static_cast<Op>(op)) {
    case Op::set: {
        auto key = sized_text(in);
        auto value = in.rest();
        if (!in.ok())
            break;
        set(key, std::move(value));
        respond({});
        return;
    }
    case Op::get:
    case Op::wait: {
        auto timeout_ms = in.u32();
        Waiter waiter;
        waiter.want_value = static_cast<Op>(op) == Op::get;
        if (waiter.want_value)
            waiter.keys.push_back(rest_text(in));
        else
            waiter.keys = sized_keys(in);
        if (!in.ok())
            break;
        if (ready(waiter)) {
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
            const char* begin = reinterpret_cast<const char*>(it->second.data());
            auto [end, parsed] = std::from_chars(begin, begin + it->second.size(), value);
            if (parsed != std::errc() || end != begin + it->second.size()) {
                respond(error("add: the value of '" + key + "' is not an integer"));
                return;
            }
        }
        value += delta;
        set(key, text_bytes(std::to_string(value)));
        respond({Answer::ok, i64_bytes(value)});
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
        if (it == values_.end()) {
            if (expected.empty()) {
                set(key, desired);
                respond({Answer::ok, values_.at(key)});
            } else {
                respond({Answer::ok, text_bytes(expected)});
            }
            return;
        }
        if (it->second == text_bytes(expected))
            set(key, std::move(desired));
        respond({Answer::ok, values_.at(key)});
        return;
    }
    case Op::check: {
        Waiter probe;
        probe.keys = sized_keys(in);
        if (!in.ok())
            break;
        respond({Answer::ok, Bytes{static_cast<std::uint8_t>(ready(probe) ? 1 : 0)}});
        return;
    }
    case Op::remove: {
        auto key = rest_text(in);
        respond({Answer::ok, Bytes{static_cast<std::uint8_t>(values_.erase(key) ? 1 : 0)}});
        return;
    }
    case Op::num_keys:
        respond({Answer::ok, i64_bytes(static_cast<std::int64_t>(values_.size()))});
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

} // namespace canopy
