// Unit tests for wall-clock stamps and the NTP-style clock offset estimate.
#include "timing/clock.hpp"

#include <chrono>
#include <cstdlib>

#include <gtest/gtest.h>

namespace canopy::timing {
namespace {

// A ping from a child whose clock is behind the parent's by offset (parent = child + offset).
ClockSample ping(std::int64_t child_send, std::int64_t offset, std::int64_t up, std::int64_t held,
                 std::int64_t down)
{
    const std::int64_t t0 = child_send;
    const std::int64_t t1 = t0 + offset + up;
    const std::int64_t t2 = t1 + held;
    const std::int64_t t3 = t2 - offset + down;
    return {t0, t1, t2, t3};
}

TEST(Clock, SymmetricDelayGivesTheExactOffset)
{
    const std::int64_t offset = 1'234'567'890;
    const ClockOffset result = estimate_offset({ping(1'000'000, offset, 50'000, 7'000, 50'000)});
    EXPECT_EQ(result.offset_ns, offset);
    EXPECT_EQ(result.round_trip_ns, 100'000);
}

TEST(Clock, NegativeOffsetIsRecovered)
{
    const std::int64_t offset = -987'654'321;
    const ClockOffset result = estimate_offset({ping(5'000'000'000, offset, 20'000, 1'000, 20'000)});
    EXPECT_EQ(result.offset_ns, offset);
}

TEST(Clock, UsesTheMinimumRoundTripSampleUnderAsymmetricDelays)
{
    const std::int64_t offset = 42'000'000;
    const std::vector<ClockSample> samples = {
        ping(0, offset, 900'000, 10'000, 100'000), // queued on the way up: error +400 µs
        ping(2'000'000, offset, 30'000, 10'000, 10'000), // fastest: error +10 µs
        ping(4'000'000, offset, 100'000, 10'000, 700'000),
    };
    const ClockOffset result = estimate_offset(samples);
    EXPECT_EQ(result.round_trip_ns, 40'000);
    EXPECT_EQ(result.offset_ns, offset + (30'000 - 10'000) / 2);
    EXPECT_LE(std::llabs(result.offset_ns - offset), result.round_trip_ns / 2);
}

TEST(Clock, IgnoresImpossibleSamplesAndEmptyInput)
{
    EXPECT_EQ(estimate_offset({}).offset_ns, 0);
    const ClockSample backwards{100, 200, 150, 300}; // parent replied before it received
    EXPECT_EQ(estimate_offset({backwards}).offset_ns, 0);
    EXPECT_EQ(estimate_offset({backwards, ping(0, 5'000, 100, 0, 100)}).offset_ns, 5'000);
}

TEST(Clock, NowIsTheRealtimeClock)
{
    const auto system = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    EXPECT_LT(std::llabs(now_ns() - system), 1'000'000'000LL);
}

TEST(Clock, FormatsUtcWithMilliseconds)
{
    EXPECT_EQ(format_utc(0), "1970-01-01T00:00:00.000Z");
    EXPECT_EQ(format_utc(1'714'564'800'123'456'789LL), "2024-05-01T12:00:00.123Z");
    EXPECT_EQ(format_utc(-1'000'000), "1969-12-31T23:59:59.999Z");
}

} // namespace
} // namespace canopy::timing
