// The requests routed over the tree to one position (RoutedRequest) and their replies, each described once: its
// operation, its name, its fields, and the type of its reply. The registry that serves them is
// collective/routed_services.hpp; the tree carries them as bytes (encode_fields, decode_fields).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "timing/sketch.hpp"
#include "wire/fields.hpp"
#include "wire/messages.hpp"
#include "wire/rank_socket.hpp"

namespace canopy::wire {

// Keys and values of the job's name service (PMIx_Publish, MPI_Publish_name).
using KeyValues = std::vector<std::pair<std::string, std::vector<std::uint8_t>>>;

// The reply of a request that answers nothing but success (or its error).
struct Acknowledged {
    static constexpr const char* name = "acknowledgement";

    CANOPY_WIRE_FIELDS()
};

// PMIx direct modex: the node hosting `rank` answers with the data the rank committed.
struct ModexData {
    static constexpr const char* name = "direct-modex reply";
    std::vector<std::uint8_t> blob;

    CANOPY_WIRE_FIELDS(blob)
};
struct DirectModexRequest {
    static constexpr RoutedOp op = RoutedOp::direct_modex;
    static constexpr const char* name = "direct-modex request";
    using Reply = ModexData;
    std::uint64_t rank = 0;

    CANOPY_WIRE_FIELDS(rank)
};

// The root's publish store. Keys are unique job-wide: a publish that names a taken key changes nothing.
struct PublishRequest {
    static constexpr RoutedOp op = RoutedOp::publish;
    static constexpr const char* name = "publish request";
    using Reply = Acknowledged;
    KeyValues entries;

    CANOPY_WIRE_FIELDS(entries)
};

// The entries found; none found is not an error.
struct LookupReply {
    static constexpr const char* name = "lookup reply";
    KeyValues entries;

    CANOPY_WIRE_FIELDS(entries)
};
struct LookupRequest {
    static constexpr RoutedOp op = RoutedOp::lookup;
    static constexpr const char* name = "lookup request";
    using Reply = LookupReply;
    std::uint64_t wait_for = 0;   // answered once at least this many of its keys are published (PMIX_WAIT); 0: now
    std::vector<std::string> keys;

    CANOPY_WIRE_FIELDS(wait_for, keys)
};

struct UnpublishRequest {
    static constexpr RoutedOp op = RoutedOp::unpublish;
    static constexpr const char* name = "unpublish request";
    using Reply = Acknowledged;
    std::vector<std::string> keys;

    CANOPY_WIRE_FIELDS(keys)
};

// A rank's request to the root's job store, as its socket carried it (the operation, then its payload), and the
// store's answer (docs/libcanopy.md).
struct StoreReply {
    static constexpr const char* name = "store reply";
    RankSocketAnswer answer = RankSocketAnswer::ok;
    std::vector<std::uint8_t> body;

    CANOPY_WIRE_FIELDS(answer, body)
};
struct StoreRequest {
    static constexpr RoutedOp op = RoutedOp::store;
    static constexpr const char* name = "store request";
    using Reply = StoreReply;
    std::uint8_t operation = 0;   // RankSocketOp
    std::vector<std::uint8_t> body;

    CANOPY_WIRE_FIELDS(operation, body)
};

// The root to a daemon that cached `key`: drop it, before the write that changes it returns (collective/job_store).
struct StoreInvalidation {
    static constexpr RoutedOp op = RoutedOp::store_invalidate;
    static constexpr const char* name = "store invalidation";
    using Reply = Acknowledged;
    std::string key;

    CANOPY_WIRE_FIELDS(key)
};

// The root's answer to a spawn: the new namespace. A refusal is the request's error, naming the limit.
struct SpawnReply {
    static constexpr const char* name = "spawn reply";
    std::string nspace;
    std::uint64_t first = 0;               // its first tree rank
    std::uint64_t size = 0;

    CANOPY_WIRE_FIELDS(nspace, first, size)
};
// PMIx_Spawn as the caller's node asks the root for it: one application, its ranks placed on the job's nodes.
struct SpawnRequest {
    static constexpr RoutedOp op = RoutedOp::spawn;
    static constexpr const char* name = "spawn request";
    using Reply = SpawnReply;
    std::uint64_t parent_rank = 0;         // the caller's tree rank
    std::vector<std::string> argv;
    std::vector<std::string> env;          // NAME=VALUE, set over the job's environment
    std::string wdir;                      // empty: the job's
    std::uint64_t count = 0;               // ranks to start
    std::vector<std::string> hosts;        // PMIX_HOST: only these of the job's nodes (empty: any)
    std::string map_by;                    // PMIX_MAPBY: "node" (spread, the default) or "slot" (fill)
    std::uint64_t per_node = 0;            // PMIX_PPR "N:node": exactly N on each node used (0: no such rule)

    CANOPY_WIRE_FIELDS(parent_rank, argv, env, wdir, count, hosts, map_by, per_node)
};

// From a node that had reported done (its subtree-done went up) to the root: it starts, or has finished, ranks
// spawned onto it since. The root must not end the job while they run, and their timing phases come with the end.
struct LateRanks {
    static constexpr RoutedOp op = RoutedOp::late_ranks;
    static constexpr const char* name = "late-ranks notice";
    using Reply = Acknowledged;
    bool started = false;        // else ended
    std::uint64_t count = 0;
    timing::PhaseSet phases;     // with an end: what the node recorded since its subtree-done or last such end

    CANOPY_WIRE_FIELDS(started, count, phases)
};

// Every routed request, listed once: the registry's names and the round-trip test come from it.
#define CANOPY_ROUTED_REQUESTS(X)                                                                                \
    X(DirectModexRequest) X(PublishRequest) X(LookupRequest) X(UnpublishRequest) X(StoreRequest)                 \
    X(StoreInvalidation) X(SpawnRequest) X(LateRanks)

// The name of a routed operation's request, for errors and logs ("unknown" for a number no request has).
const char* routed_name(RoutedOp op);

} // namespace canopy::wire
