// The synthetic exchange (--synthetic-ranks): each node serves R in-process ranks through the real exchange paths.
// What travels in the plan, what each synthetic rank puts, whose keys it reads, and the index over a result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/result.hpp"

namespace canopy::synthetic {

using Bytes = std::vector<std::uint8_t>;

// Which exchange the ranks go through.
enum class Path {
    pmi,      // PMI-1 over each rank's PMI_FD to the node's PmiServer: put, barrier (a tree fence), get
    pmix,     // PMIx's full allgather: every node's values in one tree fence (PMIX_COLLECT_DATA)
    dmodex,   // PMIx's direct modex: a fence without data, then each value fetched from its node on first get
};

struct Spec {
    long ranks_per_node = 0;
    std::size_t bytes = 100;   // each rank's endpoint value
    Path path = Path::pmi;
    long gets = 3;             // peers' keys each rank reads after the fence
    long corrupt_rank = -1;    // for tests: this rank puts a wrong value, which its readers must catch

    bool operator==(const Spec&) const = default;
};

// "R[:BYTES][:pmi|pmix|dmodex][:gets=N][:corrupt=RANK]", BYTES as "100" or "1KiB". The error says what was expected.
Result<Spec> parse_spec(std::string_view text);
// The canonical spelling, which parse_spec reads back.
std::string to_string(const Spec& spec);
std::string_view path_name(Path path);

// What rank `rank` puts: its key, and `bytes` printable characters that no PMI codec escapes, derived from the rank
// alone so any reader knows what to expect.
std::string key_of(long rank);
std::string value_of(long rank, std::size_t bytes);
// What a corrupt rank puts instead: the right length, the first character changed.
std::string corrupted_value_of(long rank, std::size_t bytes);

// The ranks whose keys `rank` reads: the next rank, the same local rank on the next node, then spread by a hash.
std::vector<long> peers_of(long rank, long world_size, long ranks_per_node, long gets);

// Why a value read is wrong, for the line that ends the job; empty when it is right.
std::string check_value(long reader, long peer, std::string_view got, std::size_t bytes);

// A node's ranks' values as one fence blob: (rank, value) pairs. Blobs of several nodes concatenate.
Bytes encode_values(const std::vector<std::pair<long, std::string>>& values);

// Where each rank's value is in a fence result, without copying the values: 8 bytes a rank beside the result.
class ValueIndex {
public:
    // Keeps `result` and indexes it; an error if it is malformed or names a rank outside [0, world_size).
    static Result<ValueIndex> build(Bytes result, long world_size);
    std::optional<std::string_view> find(long rank) const;
    std::size_t result_bytes() const { return result_.size(); }

private:
    Bytes result_;
    std::vector<std::uint64_t> offsets_;   // by rank: offset of its value's length prefix + 1, or 0 if absent
};

} // namespace canopy::synthetic
