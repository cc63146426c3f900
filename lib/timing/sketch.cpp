// Mergeable timing distributions: log-bucket sketch with exact min/max and the top k, each with who produced it.
#include "timing/sketch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace canopy::timing {
namespace {

const double bucket_growth = (1.0 + sketch_relative_accuracy) / (1.0 - sketch_relative_accuracy);
const double log_gamma = std::log(bucket_growth);

double sanitize(double value)
{
    if (std::isnan(value))
        return 0.0;
    return std::clamp(value, std::numeric_limits<double>::lowest(), std::numeric_limits<double>::max());
}

bool ranks_before(double a, std::string_view a_who, double b, std::string_view b_who)
{
    if (a != b)
        return a > b;
    return a_who < b_who;
}

} // namespace

bool ranks_before(const TopEntry& a, const TopEntry& b)
{
    return ranks_before(a.value, a.who, b.value, b.who);
}

std::int32_t Sketch::bucket_key(double seconds)
{
    return static_cast<std::int32_t>(std::ceil(std::log(seconds) / log_gamma));
}

double Sketch::bucket_value(std::int32_t key)
{
    // The midpoint in relative terms of (γ^(k-1), γ^k], so the error is at most α either way.
    return 2.0 * std::exp(static_cast<double>(key) * log_gamma) / (bucket_growth + 1.0);
}

void Sketch::add(double seconds, std::string_view who)
{
    seconds = sanitize(seconds);
    if (count_ == 0) {
        min_ = max_ = seconds;
        min_who_ = who;
        max_who_ = who;
    } else {
        if (seconds < min_) {
            min_ = seconds;
            min_who_ = who;
        }
        if (seconds > max_) {
            max_ = seconds;
            max_who_ = who;
        }
    }
    ++count_;
    sum_ += seconds;
    offer(seconds, who);
    if (seconds <= sketch_zero_threshold) {
        ++zero_count_;
    } else {
        ++buckets_[bucket_key(seconds)];
        collapse();
    }
}

void Sketch::merge(const Sketch& other)
{
    if (&other == this) {
        const Sketch copy = other;
        merge(copy);
        return;
    }
    if (other.count_ == 0)
        return;
    if (count_ == 0) {
        min_ = other.min_;
        min_who_ = other.min_who_;
        max_ = other.max_;
        max_who_ = other.max_who_;
    } else {
        if (other.min_ < min_) {
            min_ = other.min_;
            min_who_ = other.min_who_;
        }
        if (other.max_ > max_) {
            max_ = other.max_;
            max_who_ = other.max_who_;
        }
    }
    count_ += other.count_;
    sum_ += other.sum_;
    zero_count_ += other.zero_count_;
    for (const auto& [key, n] : other.buckets_)
        buckets_[key] += n;
    collapse();
    for (const auto& entry : other.top_)
        offer(entry.value, entry.who);
}

// Keeps top_ the top_k_ largest entries seen, in ranks_before order. A list of k entries costs O(k) per entry
// offered; k is small (10 by default) and most entries offered are below the last and cost one comparison.
void Sketch::offer(double value, std::string_view who)
{
    if (top_.size() == top_k_ && (top_k_ == 0 || !ranks_before(value, who, top_.back().value, top_.back().who)))
        return;
    TopEntry entry{value, std::string(who)};
    top_.insert(std::upper_bound(top_.begin(), top_.end(), entry,
                                 [](const TopEntry& a, const TopEntry& b) { return ranks_before(a, b); }),
                std::move(entry));
    if (top_.size() > top_k_)
        top_.pop_back();
}

void Sketch::set_top_k(std::size_t k)
{
    top_k_ = std::min(k, max_top_k);
    if (top_.size() > top_k_)
        top_.resize(top_k_);
}

// Folds every key below the max_buckets-th highest into that key. Because the kept set is always
// "the highest keys", collapsing early or late gives the same buckets, so merging stays order-free.
void Sketch::collapse()
{
    if (buckets_.size() <= sketch_max_buckets)
        return;
    auto keep = buckets_.begin();
    std::advance(keep, static_cast<std::ptrdiff_t>(buckets_.size() - sketch_max_buckets));
    std::uint64_t folded = 0;
    for (auto it = buckets_.begin(); it != keep; ++it)
        folded += it->second;
    buckets_.erase(buckets_.begin(), keep);
    keep->second += folded;
}

double Sketch::quantile(double q) const
{
    if (count_ == 0)
        return 0.0;
    if (!(q > 0.0))
        return min_;
    if (q >= 1.0)
        return max_;
    const auto clamp = [this](double value) { return std::clamp(value, min_, max_); };
    const double rank = q * static_cast<double>(count_ - 1);
    std::uint64_t seen = zero_count_;
    if (static_cast<double>(seen) > rank)
        return clamp(0.0);
    for (const auto& [key, n] : buckets_) {
        seen += n;
        if (static_cast<double>(seen) > rank)
            return clamp(bucket_value(key));
    }
    return max_;
}

SketchData Sketch::data() const
{
    SketchData out;
    out.count = count_;
    out.sum = sum_;
    out.min = min_;
    out.max = max_;
    out.min_who = min_who_;
    out.max_who = max_who_;
    out.buckets.assign(buckets_.begin(), buckets_.end());
    out.zero_count = zero_count_;
    out.top_k = top_k_;
    out.top = top_;
    return out;
}

Sketch Sketch::from_data(SketchData data)
{
    Sketch sketch;
    sketch.sum_ = sanitize(data.sum);
    sketch.min_ = sanitize(data.min);
    sketch.max_ = sanitize(data.max);
    sketch.min_who_ = std::move(data.min_who);
    sketch.max_who_ = std::move(data.max_who);
    sketch.zero_count_ = data.zero_count;
    sketch.count_ = data.zero_count;
    for (const auto& [key, n] : data.buckets) {
        if (n == 0)
            continue;
        sketch.buckets_[key] += n;
        sketch.count_ += n;
    }
    sketch.collapse();
    sketch.set_top_k(data.top_k > max_top_k ? max_top_k : static_cast<std::size_t>(data.top_k));
    for (const auto& entry : data.top)
        sketch.offer(sanitize(entry.value), entry.who);
    return sketch;
}

Sketch& PhaseSet::slot(std::string_view phase)
{
    auto [at, added] = position_.try_emplace(std::string(phase), phases_.size());
    if (!added)
        return phases_[at->second].second;
    Sketch& sketch = phases_.emplace_back(std::string(phase), Sketch{}).second;
    sketch.set_top_k(top_k_);
    return sketch;
}

void PhaseSet::set_top_k(std::size_t k)
{
    top_k_ = std::min(k, max_top_k);
    for (auto& [name, sketch] : phases_)
        sketch.set_top_k(top_k_);
}

PhaseSet PhaseSet::take()
{
    return std::exchange(*this, PhaseSet(top_k_));
}

void PhaseSet::add(std::string_view phase, double seconds, std::string_view who)
{
    slot(phase).add(seconds, who);
}

void PhaseSet::merge_phase(std::string_view phase, const Sketch& sketch)
{
    slot(phase).merge(sketch);
}

void PhaseSet::merge(const PhaseSet& other)
{
    if (&other == this) {
        const PhaseSet copy = other;
        merge(copy);
        return;
    }
    for (const auto& [name, sketch] : other.phases_)
        slot(name).merge(sketch);
}

const Sketch* PhaseSet::find(std::string_view phase) const
{
    auto at = position_.find(std::string(phase));
    return at == position_.end() ? nullptr : &phases_[at->second].second;
}

} // namespace canopy::timing
