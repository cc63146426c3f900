// Unit tests for the mergeable timing sketch and the per-phase set.
#include "timing/sketch.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace canopy::timing {
namespace {

std::vector<double> random_times(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::lognormal_distribution<double> dist(-3.0, 1.5); // ~50 ms median, long tail
    std::vector<double> out(n);
    for (auto& v : out)
        v = dist(rng);
    return out;
}

double exact_quantile(std::vector<double> values, double q)
{
    std::sort(values.begin(), values.end());
    return values[static_cast<std::size_t>(std::floor(q * static_cast<double>(values.size() - 1)))];
}

const double quantiles[] = {0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99};

std::string fmt_who(std::size_t leaf, std::size_t i)
{
    return "rank " + std::to_string(i) + " on sim" + std::to_string(leaf);
}

TEST(Sketch, QuantilesAreWithinOnePercentOfExact)
{
    const auto values = random_times(20000, 7);
    Sketch sketch;
    for (double v : values)
        sketch.add(v, "x");
    for (double q : quantiles) {
        const double exact = exact_quantile(values, q);
        EXPECT_NEAR(sketch.quantile(q), exact, exact * (sketch_relative_accuracy + 1e-9)) << "q=" << q;
    }
    EXPECT_EQ(sketch.count(), values.size());
}

TEST(Sketch, MinMaxAreExactAndNameWhoProducedThem)
{
    Sketch sketch;
    sketch.add(0.5, "rank 1 on sim0001");
    sketch.add(0.123456789, "rank 7 on sim0002");
    sketch.add(3.987654321, "rank 9 on sim0003");
    sketch.add(1.0, "rank 2 on sim0001");
    EXPECT_EQ(sketch.min(), 0.123456789);
    EXPECT_EQ(sketch.min_who(), "rank 7 on sim0002");
    EXPECT_EQ(sketch.max(), 3.987654321);
    EXPECT_EQ(sketch.max_who(), "rank 9 on sim0003");
    EXPECT_EQ(sketch.quantile(0.0), 0.123456789);
    EXPECT_EQ(sketch.quantile(1.0), 3.987654321);
    EXPECT_DOUBLE_EQ(sketch.sum(), 0.5 + 0.123456789 + 3.987654321 + 1.0);
    EXPECT_DOUBLE_EQ(sketch.mean(), sketch.sum() / 4);
}

TEST(Sketch, TiesInMinAndMaxKeepTheFirstSeen)
{
    Sketch a;
    a.add(2.0, "first");
    a.add(2.0, "second");
    EXPECT_EQ(a.min_who(), "first");
    EXPECT_EQ(a.max_who(), "first");

    Sketch b;
    b.add(2.0, "other");
    a.merge(b);
    EXPECT_EQ(a.min_who(), "first");
    EXPECT_EQ(a.max_who(), "first");
}

TEST(Sketch, MergeGivesTheSameQuantilesAsAddingEverythingToOneSketch)
{
    const auto values = random_times(9000, 11);
    Sketch all;
    Sketch parts[3];
    for (std::size_t i = 0; i < values.size(); ++i) {
        all.add(values[i], "r" + std::to_string(i));
        parts[i % 3].add(values[i], "r" + std::to_string(i));
    }
    Sketch left = parts[0]; // (a + b) + c
    left.merge(parts[1]);
    left.merge(parts[2]);
    Sketch right = parts[2]; // c + (b + a)
    Sketch inner = parts[1];
    inner.merge(parts[0]);
    right.merge(inner);

    for (const Sketch* merged : {&left, &right}) {
        EXPECT_EQ(merged->count(), all.count());
        EXPECT_EQ(merged->min(), all.min());
        EXPECT_EQ(merged->max(), all.max());
        EXPECT_EQ(merged->min_who(), all.min_who());
        EXPECT_EQ(merged->max_who(), all.max_who());
        EXPECT_NEAR(merged->sum(), all.sum(), 1e-9 * all.sum());
        for (double q : quantiles)
            EXPECT_EQ(merged->quantile(q), all.quantile(q)) << "q=" << q;
    }
}

TEST(Sketch, MergingIntoAnEmptySketchCopiesIt)
{
    Sketch source;
    source.add(0.25, "sim0004");
    Sketch target;
    target.merge(source);
    EXPECT_EQ(target.count(), 1u);
    EXPECT_EQ(target.min(), 0.25);
    EXPECT_EQ(target.max_who(), "sim0004");
    target.merge(Sketch{});
    EXPECT_EQ(target.count(), 1u);
}

TEST(Sketch, TinyAndNegativeValuesGoToTheZeroBucket)
{
    Sketch sketch;
    sketch.add(-0.002, "clock skew");
    sketch.add(1e-7, "tiny");
    sketch.add(0.5, "normal");
    const SketchData data = sketch.data();
    EXPECT_EQ(data.zero_count, 2u);
    ASSERT_EQ(data.buckets.size(), 1u);
    EXPECT_EQ(sketch.min(), -0.002); // min stays exact
    EXPECT_EQ(sketch.min_who(), "clock skew");
    EXPECT_EQ(sketch.median(), 0.0);
}

TEST(Sketch, QuantilesAreClampedToMinAndMax)
{
    Sketch sketch;
    for (int i = 0; i < 10; ++i)
        sketch.add(0.0421, "same");
    for (double q : quantiles)
        EXPECT_EQ(sketch.quantile(q), 0.0421);
}

TEST(Sketch, EmptySketchReportsZero)
{
    const Sketch sketch;
    EXPECT_EQ(sketch.count(), 0u);
    EXPECT_EQ(sketch.median(), 0.0);
    EXPECT_EQ(sketch.mean(), 0.0);
}

TEST(Sketch, SizeIsBoundedAndHighQuantilesStayAccurate)
{
    // 3000 values one bucket apart span more keys than the cap.
    const double growth = (1 + sketch_relative_accuracy) / (1 - sketch_relative_accuracy);
    std::vector<double> values;
    for (int i = 0; i < 3000; ++i)
        values.push_back(1e-5 * std::pow(growth, i));
    Sketch all, even, odd;
    for (std::size_t i = 0; i < values.size(); ++i) {
        all.add(values[i], "v");
        (i % 2 == 0 ? even : odd).add(values[i], "v");
    }
    EXPECT_EQ(all.bucket_count(), sketch_max_buckets); // collapsed, not just small
    EXPECT_EQ(all.count(), 3000u);
    for (double q : {0.5, 0.9, 0.99}) {
        const double exact = exact_quantile(values, q);
        EXPECT_NEAR(all.quantile(q), exact, exact * 0.0101) << "q=" << q;
    }
    even.merge(odd);
    EXPECT_LE(even.bucket_count(), sketch_max_buckets);
    for (double q : quantiles)
        EXPECT_EQ(even.quantile(q), all.quantile(q)) << "q=" << q;
}

TEST(Sketch, DataRoundTripKeepsEverything)
{
    Sketch sketch;
    for (double v : random_times(500, 3))
        sketch.add(v, "r");
    sketch.add(0.0, "zero");
    const Sketch copy = Sketch::from_data(sketch.data());
    EXPECT_EQ(copy.count(), sketch.count());
    EXPECT_EQ(copy.sum(), sketch.sum());
    EXPECT_EQ(copy.min_who(), "zero");
    EXPECT_EQ(copy.max_who(), sketch.max_who());
    for (double q : quantiles)
        EXPECT_EQ(copy.quantile(q), sketch.quantile(q));
}

TEST(Sketch, FromDataRecountsAndSortsUntrustedBuckets)
{
    SketchData data;
    data.count = 99; // wrong on purpose
    data.min = 0.01;
    data.max = 1.0;
    data.buckets = {{Sketch::bucket_key(1.0), 1}, {Sketch::bucket_key(0.01), 2}, {Sketch::bucket_key(0.5), 0}};
    const Sketch sketch = Sketch::from_data(data);
    EXPECT_EQ(sketch.count(), 3u);
    EXPECT_NEAR(sketch.median(), 0.01, 0.01 * 0.0101);
    EXPECT_EQ(sketch.bucket_count(), 2u);
}

// The top k by the report's order: larger first, equal values by who.
std::vector<TopEntry> exact_top(std::vector<TopEntry> all, std::size_t k)
{
    std::sort(all.begin(), all.end(), ranks_before);
    if (all.size() > k)
        all.resize(k);
    return all;
}

TEST(Sketch, KeepsTheTopKValuesWithWhoProducedThem)
{
    Sketch sketch;
    sketch.set_top_k(3);
    sketch.add(0.5, "rank 1 on sim0001");
    sketch.add(2.0, "rank 2 on sim0001");
    sketch.add(0.1, "rank 3 on sim0002");
    sketch.add(1.5, "rank 4 on sim0002");
    sketch.add(2.0, "rank 0 on sim0000");   // a tie: who decides
    const std::vector<TopEntry> expected{{2.0, "rank 0 on sim0000"}, {2.0, "rank 2 on sim0001"},
                                         {1.5, "rank 4 on sim0002"}};
    EXPECT_EQ(sketch.top(), expected);
    sketch.set_top_k(1);
    EXPECT_EQ(sketch.top(), std::vector<TopEntry>{expected[0]});
}

// The tree merges each node's top-k list with its children's, level by level: the root's list must be the top k of
// every value, whatever the tree's shape, the order of merges, and the ties.
TEST(Sketch, TopKMergedUpATreeIsExactlyTheTopKOfAllValues)
{
    for (unsigned seed = 1; seed <= 20; ++seed) {
        std::mt19937 rng(seed);
        const std::size_t k = 1 + rng() % 12, leaves = 1 + rng() % 40;
        std::vector<TopEntry> all;
        std::vector<Sketch> sketches(leaves);
        for (std::size_t leaf = 0; leaf < leaves; ++leaf) {
            sketches[leaf].set_top_k(k);
            for (std::size_t i = 0, n = rng() % 30; i < n; ++i) {
                // Few distinct values, so ties are common.
                TopEntry entry{static_cast<double>(rng() % 50) / 10.0, fmt_who(leaf, i)};
                sketches[leaf].add(entry.value, entry.who);
                all.push_back(entry);
            }
        }
        // Merge in a random order of random pairs until one sketch is left.
        while (sketches.size() > 1) {
            std::size_t from = rng() % sketches.size(), into = rng() % (sketches.size() - 1);
            Sketch child = std::move(sketches[from]);
            sketches.erase(sketches.begin() + static_cast<std::ptrdiff_t>(from));
            sketches[into].merge(child);
        }
        EXPECT_EQ(sketches[0].top(), exact_top(all, k)) << "seed " << seed;
    }
}

TEST(Sketch, TopKTravelsInTheDataAndUntrustedListsAreSortedAndCut)
{
    Sketch sketch;
    sketch.set_top_k(2);
    sketch.add(1.0, "a");
    sketch.add(3.0, "b");
    sketch.add(2.0, "c");
    const Sketch copy = Sketch::from_data(sketch.data());
    EXPECT_EQ(copy.top_k(), 2u);
    EXPECT_EQ(copy.top(), sketch.top());

    SketchData data;
    data.top_k = 2;
    data.top = {{1.0, "x"}, {5.0, "y"}, {3.0, "z"}};
    EXPECT_EQ(Sketch::from_data(data).top(), (std::vector<TopEntry>{{5.0, "y"}, {3.0, "z"}}));
    data.top_k = 1u << 30;
    EXPECT_EQ(Sketch::from_data(data).top_k(), max_top_k);
}

TEST(PhaseSet, EveryPhaseKeepsTheSetsTopKAndTakeKeepsIt)
{
    PhaseSet set(2);
    for (int i = 0; i < 5; ++i)
        set.add("rank.spawned", i, "rank " + std::to_string(i));
    EXPECT_EQ(set.find("rank.spawned")->top().size(), 2u);
    EXPECT_EQ(set.find("rank.spawned")->top()[0].who, "rank 4");
    set.set_top_k(1);
    EXPECT_EQ(set.find("rank.spawned")->top().size(), 1u);
    PhaseSet sent = set.take();
    EXPECT_TRUE(set.empty());
    EXPECT_EQ(set.top_k(), 1u);
    EXPECT_EQ(sent.find("rank.spawned")->count(), 5u);
    for (int i = 0; i < 3; ++i)
        set.add("rank.exited", i, "r");
    EXPECT_EQ(set.find("rank.exited")->top().size(), 1u);
}

TEST(PhaseSet, KeepsPhasesInFirstSeenOrder)
{
    PhaseSet set;
    set.add("daemon.started", 0.1, "sim0001");
    set.add("daemon.connected", 0.2, "sim0001");
    set.add("daemon.started", 0.15, "sim0002");
    ASSERT_EQ(set.phases().size(), 2u);
    EXPECT_EQ(set.phases()[0].first, "daemon.started");
    EXPECT_EQ(set.phases()[0].second.count(), 2u);
    EXPECT_EQ(set.phases()[1].first, "daemon.connected");
    EXPECT_EQ(set.find("rank.spawned"), nullptr);
    EXPECT_FALSE(set.empty());
    EXPECT_TRUE(PhaseSet{}.empty());
}

TEST(PhaseSet, MergeKeepsOrderAndAppendsUnseenPhases)
{
    PhaseSet mine, theirs;
    mine.add("daemon.connected", 0.2, "sim0001");
    theirs.add("rank.spawned", 0.5, "rank 0 on sim0002");
    theirs.add("daemon.connected", 0.9, "sim0002");
    mine.merge(theirs);
    ASSERT_EQ(mine.phases().size(), 2u);
    EXPECT_EQ(mine.phases()[0].first, "daemon.connected");
    EXPECT_EQ(mine.phases()[1].first, "rank.spawned");
    const Sketch* connected = mine.find("daemon.connected");
    ASSERT_NE(connected, nullptr);
    EXPECT_EQ(connected->count(), 2u);
    EXPECT_EQ(connected->max_who(), "sim0002");
}

} // namespace
} // namespace canopy::timing
