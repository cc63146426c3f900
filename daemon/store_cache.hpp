// The node's cache of the job store: reads of keys the root has shown this node are answered on the node.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collective/routed_services.hpp"
#include "util/result.hpp"
#include "wire/routed.hpp"

namespace canopy {

// Sits between the ranks' socket (AppServer) and the root's JobStore. A get, wait or check of keys this node has
// read from the root before is answered here, and so is add(key, 0) of a known integer (it changes nothing: torch's
// store-based barrier polls with it); an identical get or wait already on its way up shares that request's
// answer; everything else (unknown keys, every write, num_keys) goes to the root.
//
// Coherence is the root's job (JobStore): it remembers that this node read a key and, before any write of that
// key returns, sends this node an invalidation (invalidate()) and waits for it to be acknowledged. An answer the
// root gave before a write may still arrive after that write's invalidation: a large one travels on the bulk
// route, a fabric, while invalidations take the links. So a read of a key that is invalidated while it is on
// its way is stale: its answer goes to the ranks that were already waiting (their reads and the write
// overlapped), but it is not cached, and later reads do not share it. An answer given after the write carries
// the new value.
class StoreCache {
public:
    using Bytes = std::vector<std::uint8_t>;
    // The answer to a rank, as the socket carries it: status (JobStore::Answer) and payload.
    using Reply = std::function<void(std::uint8_t answer, Bytes payload)>;
    // Sends one request to the root's job store; `done` gets the root's answer or a transport error.
    using ToRoot = std::function<void(wire::StoreRequest request, RoutedServices::Reply<wire::StoreRequest> done)>;

    explicit StoreCache(ToRoot to_root) : to_root_(std::move(to_root)) {}

    // One store request from a rank (op and payload as the socket carried them); `reply` is called once.
    // `operation`: the request decoded (wire::decode_store_operation), nothing if it is malformed.
    void request(std::uint8_t op, Bytes payload, std::optional<wire::StoreOperation> operation, Reply reply);
    void request(std::uint8_t op, Bytes payload, Reply reply);

    // The root's invalidation of one key (wire::StoreInvalidation): forgets the key.
    void invalidate(const std::string& key);

    std::size_t size() const { return entries_.size(); }
    bool knows(const std::string& key) const { return entries_.contains(key); }

    struct Counts {
        std::uint64_t cached = 0;      // answered from the cache
        std::uint64_t merged = 0;      // shared the answer of an identical read already on its way
        std::uint64_t forwarded = 0;   // sent to the root
    };
    const Counts& counts() const { return counts_; }

private:
    // A key the root answered this node about: it exists, and for a get, its value.
    struct Entry {
        std::optional<std::string> value;
    };
    // The answer from the cache, if the request can be answered here.
    std::optional<std::pair<std::uint8_t, Bytes>> lookup(const std::optional<wire::StoreOperation>& operation) const;
    // Sends a request the cache cannot answer to the root, sharing an identical read already on its way.
    void send(std::uint8_t op, Bytes payload, std::optional<wire::StoreOperation> operation, Reply reply);
    // add(key, 0): a read of an integer, answered from a get.
    void add_zero(std::string key, Reply reply);
    // Records what the root's answer to a read shows about its keys.
    void learn(const std::optional<wire::StoreOperation>& operation, std::uint8_t answer, const Bytes& body);

    // A read on its way to the root.
    struct Read {
        Bytes request;                  // op, then payload
        std::optional<wire::StoreOperation> operation;   // the request decoded
        std::vector<Reply> waiting;     // every local caller of a mergeable read (get, wait)
        bool stale = false;             // one of its keys was invalidated meanwhile: its answer is not cached
    };

    ToRoot to_root_;
    std::map<std::string, Entry> entries_;
    std::map<std::uint64_t, Read> reads_;   // by number
    std::uint64_t next_read_ = 0;
    // Mergeable reads that later identical ones may share, by request.
    std::map<Bytes, std::uint64_t> shared_;
    Counts counts_;
};

} // namespace canopy
