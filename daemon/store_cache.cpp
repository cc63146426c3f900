// The node's cache of the job store: reads of keys the root has shown this node are answered on the node.
#include "store_cache.hpp"

#include <algorithm>
#include <span>

#include "collective/job_store.hpp"
#include "wire/codec.hpp"

namespace canopy {
namespace {

constexpr auto answer_ok = static_cast<std::uint8_t>(JobStore::Answer::ok);
constexpr auto answer_error = static_cast<std::uint8_t>(JobStore::Answer::error);

bool is(std::uint8_t op, JobStore::Op which) { return op == static_cast<std::uint8_t>(which); }

// The key of an add of 0, the one add that may be a read.
std::optional<std::string> add_zero_key(std::uint8_t op, const StoreCache::Bytes& payload)
{
    if (!is(op, JobStore::Op::add))
        return std::nullopt;
    wire::Reader in(payload);
    std::int64_t delta = in.i64();
    auto key = in.rest();
    if (!in.ok() || delta != 0)
        return std::nullopt;
    return std::string(key.begin(), key.end());
}

} // namespace

std::optional<std::pair<std::uint8_t, StoreCache::Bytes>> StoreCache::lookup(std::uint8_t op,
                                                                              const Bytes& payload) const
{
    if (auto key = add_zero_key(op, payload)) {
        auto it = entries_.find(*key);
        auto number = it != entries_.end() && it->second.value ? store_integer(*it->second.value) : std::nullopt;
        if (!number)
            return std::nullopt;
        return std::pair{answer_ok, encode_store_integer(*number)};
    }
    auto keys = store_read_keys(op, payload);
    if (!keys || keys->empty())
        return std::nullopt;
    if (is(op, JobStore::Op::get)) {
        auto it = entries_.find(keys->front());
        if (it == entries_.end() || !it->second.value)
            return std::nullopt;   // unknown, or only known to exist (a wait showed it)
        return std::pair{answer_ok, *it->second.value};
    }
    // wait and check: every key known to exist. A missing one is left to the root, which can wait for it.
    if (!std::all_of(keys->begin(), keys->end(), [&](const auto& key) { return entries_.contains(key); }))
        return std::nullopt;
    return std::pair{answer_ok, is(op, JobStore::Op::check) ? Bytes{1} : Bytes{}};
}

void StoreCache::learn(std::uint8_t op, const Bytes& payload, std::uint8_t answer, const Bytes& body)
{
    if (answer != answer_ok)
        return;
    auto keys = store_read_keys(op, payload);
    if (!keys)
        return;
    if (is(op, JobStore::Op::get)) {
        entries_[keys->front()].value = body;
        return;
    }
    if (is(op, JobStore::Op::check) && body != Bytes{1})
        return;   // not all exist: nothing learnt (absence is not cached)
    for (const auto& key : *keys)
        entries_.try_emplace(key);
}

void StoreCache::request(std::uint8_t op, Bytes payload, Reply reply)
{
    if (auto answer = lookup(op, payload)) {
        ++counts_.cached;
        reply(answer->first, std::move(answer->second));
        return;
    }
    if (auto key = add_zero_key(op, payload)) {
        add_zero(std::move(*key), std::move(reply));
        return;
    }
    send(op, std::move(payload), std::move(reply));
}

void StoreCache::add_zero(std::string key, Reply reply)
{
    // add(key, 0) changes nothing when the key holds an integer: it is a read, and torch's store-based barrier
    // polls with it every 10 ms. Ask the root for the value (a get that does not wait, cached from then on);
    // only a missing key (which add creates as "0") or a non-integer (an error) needs the root's add itself.
    wire::Writer get;
    get.u32(0);
    get.raw(std::span(reinterpret_cast<const std::uint8_t*>(key.data()), key.size()));
    send(static_cast<std::uint8_t>(JobStore::Op::get), get.take(),
         [this, key, reply = std::move(reply)](std::uint8_t answer, Bytes value) mutable {
             if (answer == answer_ok) {
                 if (auto number = store_integer(value)) {
                     reply(answer_ok, encode_store_integer(*number));
                     return;
                 }
             }
             wire::Writer add;
             add.i64(0);
             add.raw(std::span(reinterpret_cast<const std::uint8_t*>(key.data()), key.size()));
             send(static_cast<std::uint8_t>(JobStore::Op::add), add.take(), std::move(reply));
         });
}

void StoreCache::send(std::uint8_t op, Bytes payload, Reply reply)
{
    // Reads that only wait for a key (get, wait) and are identical to one already on its way to the root share
    // its answer: when every local rank fetches every peer's key, as Gloo's rendezvous does, one request per node
    // goes up the tree instead of one per rank. Writes are never merged.
    bool mergeable = is(op, JobStore::Op::get) || is(op, JobStore::Op::wait);
    Bytes request = std::move(payload);
    request.insert(request.begin(), op);
    if (mergeable) {
        if (auto shared = shared_.find(request); shared != shared_.end()) {
            ++counts_.merged;
            reads_.at(shared->second).waiting.push_back(std::move(reply));
            return;
        }
    }
    ++counts_.forwarded;
    // A check is not merged (it never waits, and its answer may be "no"), but a "yes" still teaches the cache.
    std::optional<std::uint64_t> read;
    if (mergeable || is(op, JobStore::Op::check)) {
        read = next_read_++;
        Read& entry = reads_[*read];
        entry.request = request;
        if (mergeable) {
            entry.waiting.push_back(std::move(reply));
            shared_.emplace(request, *read);
        }
    }
    auto done = [this, read, reply = mergeable ? Reply{} : std::move(reply)](Result<wire::StoreReply> answer) mutable {
        std::uint8_t code = answer_error;
        Bytes body;
        if (!answer) {
            body.assign(answer.error().message.begin(), answer.error().message.end());
        } else {
            code = static_cast<std::uint8_t>(answer->answer);
            body = std::move(answer->body);
        }
        std::vector<Reply> waiting;
        if (read) {
            auto entry = reads_.extract(*read);
            Read& finished = entry.mapped();
            if (!finished.stale) {
                shared_.erase(finished.request);
                learn(finished.request[0], Bytes(finished.request.begin() + 1, finished.request.end()), code, body);
            }
            waiting = std::move(finished.waiting);
        }
        if (reply)
            reply(code, body);
        for (auto& each : waiting)
            each(code, body);
    };
    to_root_(wire::StoreRequest{op, Bytes(request.begin() + 1, request.end())}, std::move(done));
}

void StoreCache::invalidate(const std::string& key)
{
    entries_.erase(key);
    for (auto& [number, read] : reads_) {
        if (read.stale)
            continue;
        auto keys = store_read_keys(read.request[0], Bytes(read.request.begin() + 1, read.request.end()));
        if (!keys || std::find(keys->begin(), keys->end(), key) == keys->end())
            continue;
        read.stale = true;
        shared_.erase(read.request);
    }
}

} // namespace canopy
