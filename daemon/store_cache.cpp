// The node's cache of the job store: reads of keys the root has shown this node are answered on the node.
#include "store_cache.hpp"

#include <algorithm>
#include <variant>

#include "collective/job_store.hpp"

namespace canopy {
namespace {

constexpr auto answer_ok = static_cast<std::uint8_t>(JobStore::Answer::ok);
constexpr auto answer_error = static_cast<std::uint8_t>(JobStore::Answer::error);

std::optional<wire::StoreOperation> operation_of(std::uint8_t op, const StoreCache::Bytes& payload)
{
    auto decoded = wire::decode_store_operation(op, payload);
    return decoded ? std::optional(std::move(*decoded)) : std::nullopt;
}

// The key of an add of 0, the one add that may be a read.
std::optional<std::string> add_zero_key(const std::optional<wire::StoreOperation>& operation)
{
    auto* add = operation ? std::get_if<wire::StoreAdd>(&*operation) : nullptr;
    if (!add || add->delta != 0)
        return std::nullopt;
    return add->key;
}

std::optional<std::vector<std::string>> read_keys(const std::optional<wire::StoreOperation>& operation)
{
    return operation ? store_read_keys(*operation) : std::nullopt;
}

template <typename Operation>
bool is(const std::optional<wire::StoreOperation>& operation)
{
    return operation && std::holds_alternative<Operation>(*operation);
}

} // namespace

std::optional<std::pair<std::uint8_t, StoreCache::Bytes>> StoreCache::lookup(
    const std::optional<wire::StoreOperation>& operation) const
{
    if (auto key = add_zero_key(operation)) {
        auto it = entries_.find(*key);
        auto number = it != entries_.end() && it->second.value ? store_integer(*it->second.value) : std::nullopt;
        if (!number)
            return std::nullopt;
        return std::pair{answer_ok, wire::encode_fields(wire::StoreCount{*number})};
    }
    auto keys = read_keys(operation);
    if (!keys || keys->empty())
        return std::nullopt;
    if (is<wire::StoreGet>(operation)) {
        auto it = entries_.find(keys->front());
        if (it == entries_.end() || !it->second.value)
            return std::nullopt;   // unknown, or only known to exist (a wait showed it)
        return std::pair{answer_ok, wire::encode_fields(wire::StoreValue{*it->second.value})};
    }
    // wait and check: every key known to exist. A missing one is left to the root, which can wait for it.
    if (!std::all_of(keys->begin(), keys->end(), [&](const auto& key) { return entries_.contains(key); }))
        return std::nullopt;
    return std::pair{answer_ok, is<wire::StoreCheck>(operation) ? wire::encode_fields(wire::StoreFlag{true})
                                                                : wire::encode_fields(wire::StoreDone{})};
}

void StoreCache::learn(const std::optional<wire::StoreOperation>& operation, std::uint8_t answer, const Bytes& body)
{
    if (answer != answer_ok)
        return;
    auto keys = read_keys(operation);
    if (!keys)
        return;
    if (is<wire::StoreGet>(operation)) {
        if (auto got = wire::decode_fields<wire::StoreValue>(body, wire::StoreValue::name))
            entries_[keys->front()].value = std::move(got->value);
        return;
    }
    if (is<wire::StoreCheck>(operation)) {
        auto all = wire::decode_fields<wire::StoreFlag>(body, wire::StoreFlag::name);
        if (!all || !all->value)
            return;   // not all exist: nothing learnt (absence is not cached)
    }
    for (const auto& key : *keys)
        entries_.try_emplace(key);
}

void StoreCache::request(std::uint8_t op, Bytes payload, Reply reply)
{
    auto operation = operation_of(op, payload);
    request(op, std::move(payload), std::move(operation), std::move(reply));
}

void StoreCache::request(std::uint8_t op, Bytes payload, std::optional<wire::StoreOperation> operation, Reply reply)
{
    if (auto answer = lookup(operation)) {
        ++counts_.cached;
        reply(answer->first, std::move(answer->second));
        return;
    }
    if (auto key = add_zero_key(operation)) {
        add_zero(std::move(*key), std::move(reply));
        return;
    }
    send(op, std::move(payload), std::move(operation), std::move(reply));
}

void StoreCache::add_zero(std::string key, Reply reply)
{
    // add(key, 0) changes nothing when the key holds an integer: it is a read, and torch's store-based barrier
    // polls with it every 10 ms. Ask the root for the value (a get that does not wait, cached from then on);
    // only a missing key (which add creates as "0") or a non-integer (an error) needs the root's add itself.
    wire::StoreGet get{0, key};
    auto get_payload = wire::encode_fields(get);   // before `get` moves into the call
    send(static_cast<std::uint8_t>(wire::StoreGet::op), std::move(get_payload), std::move(get),
         [this, key, reply = std::move(reply)](std::uint8_t answer, Bytes body) mutable {
             auto got = wire::decode_fields<wire::StoreValue>(body, wire::StoreValue::name);
             auto number = answer == answer_ok && got ? store_integer(got->value) : std::nullopt;
             if (number) {
                 reply(answer_ok, wire::encode_fields(wire::StoreCount{*number}));
                 return;
             }
             wire::StoreAdd add{0, key};
             auto add_payload = wire::encode_fields(add);
             send(static_cast<std::uint8_t>(wire::StoreAdd::op), std::move(add_payload), std::move(add),
                  std::move(reply));
         });
}

void StoreCache::send(std::uint8_t op, Bytes payload, std::optional<wire::StoreOperation> operation, Reply reply)
{
    // Reads that only wait for a key (get, wait) and are identical to one already on its way to the root share
    // its answer: when every local rank fetches every peer's key, as Gloo's rendezvous does, one request per node
    // goes up the tree instead of one per rank. Writes are never merged.
    bool mergeable = is<wire::StoreGet>(operation) || is<wire::StoreWait>(operation);
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
    if (mergeable || is<wire::StoreCheck>(operation)) {
        read = next_read_++;
        Read& entry = reads_[*read];
        entry.request = request;
        entry.operation = std::move(operation);
        if (mergeable) {
            entry.waiting.push_back(std::move(reply));
            shared_.emplace(request, *read);
        }
    }
    auto done = [this, read, reply = mergeable ? Reply{} : std::move(reply)](Result<wire::StoreReply> answer) mutable {
        std::uint8_t code = answer_error;
        Bytes body;
        if (!answer) {
            body = wire::encode_fields(wire::StoreFailure{answer.error().message});
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
                learn(finished.operation, code, body);
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
        auto keys = read_keys(read.operation);
        if (!keys || std::find(keys->begin(), keys->end(), key) == keys->end())
            continue;
        read.stale = true;
        shared_.erase(read.request);
    }
}

} // namespace canopy
