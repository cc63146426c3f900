// Mergeable timing distributions (DDSketch-style log buckets, the top k named) so the tree aggregates per-rank times.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <unordered_map>
#include <vector>

namespace canopy::timing {

// Quantiles are within this relative error of the exact value (bucket key k holds (γ^(k-1), γ^k],
// γ = (1 + α) / (1 - α)).
inline constexpr double sketch_relative_accuracy = 0.01;
// Values at or below this many seconds (and negatives) are counted in one "zero" bucket.
inline constexpr double sketch_zero_threshold = 1e-6;
// Beyond this many buckets the lowest ones are folded together, bounding message size.
inline constexpr std::size_t sketch_max_buckets = 2000;
// How many of its largest values, with who produced them, a sketch keeps (`--timing-top`), and the most it may.
inline constexpr std::size_t default_top_k = 10;
inline constexpr std::size_t max_top_k = 1000;

// One of a sketch's largest values: for a time the latest or longest, for a count the most.
struct TopEntry {
    double value = 0;
    std::string who;

    bool operator==(const TopEntry&) const = default;
};
// The order of a top list: larger values first, equal values by who, so that any merge order gives one list.
bool ranks_before(const TopEntry& a, const TopEntry& b);

// Plain state, for the wire codec and the JSON report.
struct SketchData {
    std::uint64_t count = 0;
    double sum = 0, min = 0, max = 0;
    std::string min_who, max_who; // e.g. "rank 12 on sim0003" or "sim0003"
    std::vector<std::pair<std::int32_t, std::uint64_t>> buckets; // sparse, sorted by key
    std::uint64_t zero_count = 0; // values <= 1 µs (and negatives, clamped) go here
    std::uint64_t top_k = default_top_k;
    std::vector<TopEntry> top;    // the top_k largest values, in ranks_before order
};

class Sketch {
public:
    // Non-finite values are clamped (NaN to 0, infinities to the largest finite double).
    void add(double seconds, std::string_view who);
    // Results (count, quantiles, min, max, top) do not depend on merge order; ties in min and max keep this
    // sketch's who. The top list keeps this sketch's top_k: the top k of the union is the top k of the two
    // top-k lists, so a tree of merges stays exact in k entries per message.
    void merge(const Sketch& other);

    std::uint64_t count() const { return count_; }
    double sum() const { return sum_; }
    double mean() const { return count_ == 0 ? 0.0 : sum_ / static_cast<double>(count_); }
    double min() const { return min_; } // exact
    double max() const { return max_; } // exact
    const std::string& min_who() const { return min_who_; }
    const std::string& max_who() const { return max_who_; }
    // The largest values with who produced them, largest first (ranks_before), at most top_k() of them.
    const std::vector<TopEntry>& top() const { return top_; }
    std::size_t top_k() const { return top_k_; }
    // Keeps at most k (clamped to max_top_k) from now on; a smaller k drops the rest now.
    void set_top_k(std::size_t k);

    // q in [0,1]; within 1% relative error of the exact lower quantile, clamped to [min,max].
    // 0 for an empty sketch.
    double quantile(double q) const;
    double median() const { return quantile(0.5); }

    std::size_t bucket_count() const { return buckets_.size(); }

    SketchData data() const;
    // Buckets are sorted, duplicates summed, empty ones dropped; count is recomputed from the buckets
    // so quantiles stay consistent even if the sender's count was wrong.
    static Sketch from_data(SketchData data);

    static std::int32_t bucket_key(double seconds); // for seconds > sketch_zero_threshold
    static double bucket_value(std::int32_t key);   // the value a bucket reports

private:
    void collapse();
    void offer(double value, std::string_view who);

    std::uint64_t count_ = 0;
    double sum_ = 0, min_ = 0, max_ = 0;
    std::string min_who_, max_who_;
    std::map<std::int32_t, std::uint64_t> buckets_;
    std::uint64_t zero_count_ = 0;
    std::size_t top_k_ = default_top_k;
    std::vector<TopEntry> top_;
};

// Phases in first-seen order, each a Sketch. Mergeable. Phase names like "daemon.connected".
class PhaseSet {
public:
    // Every sketch of the set keeps the top k (set_top_k), those there now and those added later.
    PhaseSet() = default;
    explicit PhaseSet(std::size_t top_k) : top_k_(std::min(top_k, max_top_k)) {}

    void add(std::string_view phase, double seconds, std::string_view who);
    void merge(const PhaseSet& other); // keeps this set's order, appends unseen phases
    // Adds a whole sketch under a phase name (merging if the phase exists), e.g. from the wire.
    void merge_phase(std::string_view phase, const Sketch& sketch);

    const std::vector<std::pair<std::string, Sketch>>& phases() const { return phases_; }
    const Sketch* find(std::string_view phase) const;
    bool empty() const { return phases_.empty(); }

    std::size_t top_k() const { return top_k_; }
    void set_top_k(std::size_t k);
    // Hands over what was recorded and starts again empty, keeping top_k: what a daemon sends up.
    PhaseSet take();

private:
    Sketch& slot(std::string_view phase);

    std::vector<std::pair<std::string, Sketch>> phases_;
    std::unordered_map<std::string, std::size_t> position_;   // name -> index in phases_: a report may hold 10^5
    std::size_t top_k_ = default_top_k;
};

} // namespace canopy::timing
